"""`redco train` runs as a user manages them (issue #29, "Runs" and "Presets, tokenizers,
vocabularies"):
- a run refused for bad input (a bad flag, missing data, an unknown model, a batch that
  fills no step, a mesh or memory that does not fit, a tokenizer too big for the model)
  prints one line, exits non-zero and leaves nothing behind: no workdir, log or event file;
- --config FILE (JSON, the flags' long names as keys): the effective configuration of a run
  is WORKDIR/run_config.json, and `redco train --config WORKDIR/run_config.json --workdir
  OTHER`, run from another directory, repeats the run (the same losses in log.jsonl, the
  same final weights, bit for bit); flags on the command line win over the file's keys; an
  unknown key, bad JSON or a value of the wrong kind is one line naming the key and file;
- --save-total-limit N keeps the newest N checkpoint-STEP/ directories with best/ and
  final/; last_checkpoint names a complete one; a run killed while writing a checkpoint
  keeps the previous one (and those before it within the limit), and --resume from it ends
  with the weights of a run without the limit;
- `redco presets` lists every preset (those an unknown preset's error names) with its
  parameters, vocabulary and positions, as --json does, and README's presets table holds the
  same rows (gpt2-demo among them);
- a tiny preset trains on text with a tokenizer of its own (tokenizer-train, 300 ids): its
  vocabulary grows to the tokenizer's (said at the start), final/ loads in generate
  (with --attention unfused too: the same tokens); --vocab-size N sets it, and a tokenizer with fewer ids than N is warned about at the
  start; one with more ids than N (or than a model directory's vocabulary) is refused at
  the start naming both sizes; --vocab-size with a model directory is a usage error;
  --tokenizer naming one of a tokenizer directory's files works as the directory does;
- log.jsonl's train/loss is the mean over the logging interval (--log-every 3 logs the
  mean of --log-every 1's three records), train/epoch counts the fraction of the epoch
  done; a language model logs train/tokens_per_s and eval/ppl, a classifier
  (examples/fashion_cnn) train/examples_per_s and eval/examples and no perplexity;
- the progress is plain lines when stderr is not a terminal;
- tokenized text is cached in $REDCO_CACHE_DIR, else $XDG_CACHE_HOME/redco, not beside
  the data.
"""
import json
import os
import pty
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from refkit import FAILED, PASSED, check, finish, options


def run(redco, *args, cwd=None):
    e = dict(os.environ)
    if any(a == "--nproc" or a.startswith("--nproc=") for a in args):
        e["ASAN_OPTIONS"] = "detect_leaks=0"  # OpenMPI's own allocations under the sanitizer
    return subprocess.run([redco, *args], capture_output=True, text=True, env=e, timeout=600, cwd=cwd)


def refusals(redco, tmp, data, text):
    """Each refusal: non-zero exit, one line on stderr naming the cause, and an empty tmp/runs."""
    runs = os.path.join(tmp, "runs")
    os.makedirs(runs)
    wd = os.path.join(runs, "w", "deeper")  # a workdir two levels down: nothing may appear
    wd1 = os.path.join(runs, "w1")
    base = ["--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--steps", "2"]
    cases = [
        ("bad flag", ["--workdir", wd1, *base, "--lr", "x"], "--lr"),
        ("unknown flag", ["--workdir", wd1, *base, "--learning-rate", "1"], "--learning-rate"),
        ("missing data", ["--workdir", wd1, "--model", "tiny-gpt2", "--data", os.path.join(tmp, "none.npy"),
                          "--steps", "2"], "none.npy"),
        ("unknown data format", ["--workdir", wd1, "--model", "tiny-gpt2", "--data", os.path.join(tmp, "x.csv"),
                                 "--steps", "2"], "x.csv"),
        ("text without a tokenizer", ["--workdir", wd1, "--model", "tiny-gpt2", "--data", text, "--steps", "2"],
         "--tokenizer"),
        ("unknown model", ["--workdir", wd1, "--model", "tiny-gpt7", "--data", data, "--steps", "2"], "tiny-gpt7"),
        ("model directory without config", ["--workdir", wd1, "--model", tmp, "--data", data, "--steps", "2"],
         tmp),
        ("no step filled", ["--workdir", wd1, *base, "--batch-size", "100000"], "do not fill one step"),
        ("memory does not fit", ["--workdir", wd1, "--model", "llama-65b", "--data", data, "--steps", "2"],
         "llama-65b"),
        ("mp without processes", ["--workdir", wd1, *base, "--mp", "2"], "--nproc"),
        ("tokenizer bigger than the model", ["--workdir", wd1, "--model", "tiny-gpt2", "--data", text,
                                             "--tokenizer", GPT2_TOK, "--vocab-size", "256", "--steps", "2"],
         "50257"),
        ("nested workdir, missing data", ["--workdir", wd, "--model", "tiny-gpt2", "--data",
                                          os.path.join(tmp, "none.npy"), "--steps", "2"], "none.npy"),
        ("bad device", ["--workdir", wd1, *base, "--device", "tpu"], "tpu"),
        ("bad shard", ["--workdir", wd1, *base, "--nproc", "2", "--mp", "2", "--shard", "nosuch.weight=0"], "nosuch"),
        ("tokenizer given as a text file", ["--workdir", wd1, "--model", "tiny-gpt2", "--data", text,
                                            "--tokenizer", text, "--steps", "2"], "tokenizer.json"),
    ]
    for what, args, word in cases:
        r = run(redco, "train", *args)
        lines = r.stderr.strip().splitlines()
        left = sorted(os.listdir(runs))
        check(r.returncode != 0 and lines and word in lines[-1] and lines[-1].startswith("redco train: "),
              f"refusal ({what}): exit {r.returncode}, stderr {r.stderr[-600:]!r} (wanted '{word}')")
        check(not left, f"refusal ({what}) left {left} behind")
        for name in left:
            shutil.rmtree(os.path.join(runs, name), ignore_errors=True)
    print(f"{len(cases)} refusals: one line each, nothing left behind")


def losses(workdir):
    """log.jsonl's records less their timings (tokens/s)."""
    with open(os.path.join(workdir, "log.jsonl")) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return [{k: v for k, v in r.items() if not k.endswith("_per_s")} for r in recs]


def same_file(a, b):
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


def config(redco, tmp, data):
    """run_config.json repeats a run; the command line wins over --config; bad files refused."""
    first = os.path.join(tmp, "cfg-first")
    r = run(redco, "train", "--model", "tiny-gpt2", "--data", os.path.basename(data), "--seq-len", "16",
            "--steps", "4", "--log-every", "1", "--lr", "0.002", "--schedule", "cosine", "--warmup", "1",
            "--batch-size", "4", "--seed", "7", "--workdir", "cfg-first", cwd=tmp)
    check(r.returncode == 0, f"train for run_config.json: {r.stderr[-500:]}")
    cfg_path = os.path.join(first, "run_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    check(cfg.get("lr") == 0.002 and cfg.get("schedule") == "cosine" and cfg.get("seed") == 7 and
          cfg.get("data") == data and cfg.get("workdir") == first and "resume" not in cfg,
          f"run_config.json holds the effective flags, paths from the root: {cfg}")
    # from another directory, into another workdir: the same run
    again = os.path.join(tmp, "cfg-again")
    r = run(redco, "train", "--config", cfg_path, "--workdir", again, cwd="/")
    check(r.returncode == 0, f"train --config run_config.json: {r.stderr[-500:]}")
    if r.returncode == 0:
        check(losses(first) == losses(again), "the repeated run's log.jsonl equals the first's (less timings)")
        check(same_file(os.path.join(first, "final", "model.safetensors"),
                        os.path.join(again, "final", "model.safetensors")),
              "the repeated run's final weights equal the first's, bit for bit")
        with open(os.path.join(again, "run_config.json")) as f:
            cfg2 = json.load(f)
        check({**cfg, "workdir": again} == cfg2, f"the repeated run's configuration: {cfg2}")
    # the command line wins: --steps 2 over the file's 4, --lr over 0.002
    wins = os.path.join(tmp, "cfg-wins")
    r = run(redco, "train", "--steps", "2", "--config", cfg_path, "--workdir", wins, "--lr", "0.01")
    rec = losses(wins) if r.returncode == 0 else []
    check(len(rec) == 2 and rec[-1].get("train/lr") is not None,
          f"--steps 2 on the command line wins over the file's 4: {len(rec)} records, {r.stderr[-300:]}")
    with open(os.path.join(wins, "run_config.json")) as f:
        cfg3 = json.load(f)
    check(cfg3["steps"] == 2 and cfg3["lr"] == 0.01 and cfg3["seed"] == 7, f"merged configuration: {cfg3}")
    # refusals: one usage line naming the key (or the line) and the file, and no workdir
    bad = [({"model": "tiny-gpt2", "learning_rate": 0.1}, "learning_rate"),
           ({"model": "tiny-gpt2", "steps": "many"}, "many"),
           ({"model": "tiny-gpt2", "no-shuffle": "yes"}, "no-shuffle"),
           ({"model": "tiny-gpt2", "steps": True}, "steps"),
           ({"model": "tiny-gpt2", "shard": [["x=0"]]}, "shard"),
           ({"model": "tiny-gpt2", "config": "other.json"}, "config")]
    for i, (doc, word) in enumerate(bad):
        path = os.path.join(tmp, f"bad{i}.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        wd = os.path.join(tmp, f"cfg-bad{i}")
        r = run(redco, "train", "--config", path, "--data", data, "--workdir", wd)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and word in lines[0] and path in lines[0],
              f"--config {doc}: exit {r.returncode}, {r.stderr!r}")
        check(not os.path.exists(wd), f"--config {doc}: a workdir was left")
    path = os.path.join(tmp, "broken.json")
    with open(path, "w") as f:
        f.write('{"model": "tiny-gpt2",\n "steps": 2,,\n}')
    r = run(redco, "train", "--config", path, "--data", data, "--workdir", os.path.join(tmp, "cfg-broken"))
    check(r.returncode == 2 and "line 2" in r.stderr and path in r.stderr, f"bad JSON: {r.stderr!r}")
    r = run(redco, "train", "--config", os.path.join(tmp, "none.json"), "--data", data, "--workdir",
            os.path.join(tmp, "cfg-none"))
    check(r.returncode == 2 and "none.json" in r.stderr, f"a missing config: {r.stderr!r}")
    print("--config: run_config.json repeats a run bit for bit; the command line wins; bad files refused")


def checkpoints(workdir):
    return sorted((int(n.split("-")[1]) for n in os.listdir(workdir) if n.startswith("checkpoint-")))


def save_total_limit(redco, tmp, data):
    base = ["--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--batch-size", "4", "--steps", "9",
            "--save-every", "2"]
    full = os.path.join(tmp, "limit-none")
    r = run(redco, "train", *base, "--workdir", full)
    check(r.returncode == 0 and checkpoints(full) == [2, 4, 6, 8, 9], f"no limit: {checkpoints(full)}")
    lim = os.path.join(tmp, "limit-2")
    r = run(redco, "train", *base, "--workdir", lim, "--save-total-limit", "2", "--eval-data", data,
            "--eval-every", "2")
    entries = sorted(os.listdir(lim))
    with open(os.path.join(lim, "last_checkpoint")) as f:
        last = f.read().strip()
    check(r.returncode == 0 and checkpoints(lim) == [8, 9] and "best" in entries and "final" in entries and
          last == "checkpoint-9" and not [e for e in entries if e.startswith(".tmp")],
          f"--save-total-limit 2: {entries}, last {last}, {r.stderr[-300:]}")
    check(all(os.path.exists(os.path.join(lim, d, f)) for d in ("checkpoint-9", "best")
              for f in ("model.safetensors", "optimizer.safetensors")), "the kept checkpoints and best/ are whole")
    # killed while writing checkpoint-6: checkpoint-4 (and 2) stay, last_checkpoint names 4
    kill = os.path.join(tmp, "limit-kill")
    e = dict(os.environ, REDCO_FAULT_KILL_IN_SAVE="6")
    r = subprocess.run([redco, "train", *base, "--workdir", kill, "--save-total-limit", "2"], capture_output=True,
                       text=True, env=e, timeout=600)
    with open(os.path.join(kill, "last_checkpoint")) as f:
        last = f.read().strip()
    check(r.returncode != 0 and checkpoints(kill) == [2, 4] and last == "checkpoint-4",
          f"killed in the save of step 6: {sorted(os.listdir(kill))}, last {last}")
    r = run(redco, "train", *base, "--workdir", kill, "--save-total-limit", "1", "--resume")
    check(r.returncode == 0 and checkpoints(kill) == [9] and
          not [n for n in os.listdir(kill) if n.startswith(".tmp")], f"resumed with limit 1: {sorted(os.listdir(kill))}")
    check(r.returncode == 0 and same_file(os.path.join(kill, "final", "model.safetensors"),
                                          os.path.join(full, "final", "model.safetensors")),
          "the resumed run's final weights equal the run's without a limit")
    print("--save-total-limit: the newest checkpoints, best/ and final/ kept; a kill in a save keeps the last")


def presets(redco, source):
    r = run(redco, "presets", "--json")
    check(r.returncode == 0, f"presets --json: {r.stderr}")
    rows = json.loads(r.stdout) if r.returncode == 0 else []
    names = [p["name"] for p in rows]
    r = run(redco, "train", "--model", "no-such-preset", "--data", "x.npy", "--workdir", "/nonexistent/w",
            "--steps", "1")
    known = r.stderr.split("known: ")[-1].rstrip(")\n").split(", ")
    check(names == known and "gpt2-demo" in names, f"presets: {names} against the known {known}")
    # the plain table: one line per preset, its vocabulary and positions
    r = run(redco, "presets")
    lines = r.stdout.strip().splitlines()
    check(r.returncode == 0 and len(lines) == len(rows) + 1, f"presets: {len(lines)} lines for {len(rows)}")
    for p, line in zip(rows, lines[1:]):
        w = line.split()
        check(w[0] == p["name"] and w[1] == p["model_type"] and int(w[3]) == p["vocab_size"] and
              w[4] == (str(p["max_positions"]) if p["max_positions"] else "relative"),
              f"presets line {line!r} against {p}")
    check(next(p for p in rows if p["name"] == "gpt2")["parameters"] == 124439808, "gpt2's parameters")
    # README's table
    readme = {}
    with open(os.path.join(source, "README.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 5 and cells[0].startswith("`") and cells[2].replace(",", "").isdigit():
                readme[cells[0].strip("`")] = (cells[1], int(cells[2].replace(",", "")), int(cells[3]),
                                               0 if cells[4] == "relative" else int(cells[4]))
    want = {p["name"]: (p["model_type"], p["parameters"], p["vocab_size"], p["max_positions"]) for p in rows}
    check(readme == want, f"README's presets table differs from `redco presets`: "
          f"{sorted(set(readme.items()) ^ set(want.items()))}")
    print(f"presets: {len(rows)} presets, README's table agrees")


def vocabularies(redco, tmp, text):
    tok = os.path.join(tmp, "tok300")
    r = run(redco, "tokenizer-train", "--data", text, "--vocab-size", "300", "--out", tok)
    check(r.returncode == 0, f"tokenizer-train: {r.stderr}")
    base = ["--data", text, "--tokenizer", tok, "--seq-len", "32", "--steps", "2", "--batch-size", "4"]
    wd = os.path.join(tmp, "voc-grown")
    r = run(redco, "train", "--model", "tiny-gpt2", *base, "--workdir", wd)
    check(r.returncode == 0 and "vocabulary of 300 ids" in r.stderr and "warning" not in r.stderr,
          f"tiny-gpt2 on text with a 300-id tokenizer: {r.stderr[-400:]!r}")
    with open(os.path.join(wd, "final", "config.json")) as f:
        cfg = json.load(f)
    check(cfg["vocab_size"] == 300 and cfg["eos_token_id"] == 299, f"final/config.json: {cfg}")
    r = run(redco, "generate", "--model", os.path.join(wd, "final"), "--prompt", "It is", "--max-new-tokens", "4",
            "--json")
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    check(len(out.get("ids", [])) == 4 and all(0 <= i < 300 for i in out["ids"]), f"generate: {r.stderr} {out}")
    # attention as product, softmax, product picks the same greedy tokens
    r = run(redco, "generate", "--model", os.path.join(wd, "final"), "--prompt", "It is", "--max-new-tokens", "4",
            "--json", "--attention", "unfused")
    un = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    check(un.get("ids") == out.get("ids"), f"generate --attention unfused: {un} vs {out} {r.stderr[-300:]!r}")
    # --vocab-size larger than the tokenizer: trained, with a warning at the start naming both
    r = run(redco, "train", "--model", "tiny-llama", *base, "--vocab-size", "400", "--workdir",
            os.path.join(tmp, "voc-400"))
    warn = [line for line in r.stderr.splitlines() if "warning" in line]
    check(r.returncode == 0 and len(warn) == 1 and "300" in warn[0] and "400" in warn[0] and
          r.stderr.index(warn[0]) < r.stderr.index("step "), f"--vocab-size 400: {r.stderr[-500:]!r}")
    # smaller than the tokenizer, a model directory's vocabulary too small: refused at the start
    for what, args, words in (
            ("--vocab-size 256", ["--model", "tiny-gpt2", *base, "--vocab-size", "256"], ["300", "256", "--vocab-size"]),
            ("a model directory", ["--model", os.path.join(wd, "final"), "--data", text, "--tokenizer", GPT2_TOK,
                                   "--steps", "2"], ["50257", "300"]),
            ("--vocab-size with a directory", ["--model", os.path.join(wd, "final"), *base, "--vocab-size", "512"],
             ["--vocab-size", "model directory"])):
        w = os.path.join(tmp, "voc-refused")
        r = run(redco, "train", *args, "--workdir", w)
        lines = r.stderr.strip().splitlines()
        check(r.returncode != 0 and len(lines) == 1 and all(x in lines[0] for x in words) and not os.path.exists(w),
              f"{what}: exit {r.returncode}, {r.stderr!r}")
    # one of the directory's files names the tokenizer as the directory does
    r = run(redco, "train", "--model", "tiny-gpt2", *base[:2], "--tokenizer", os.path.join(tok, "vocab.json"),
            *base[4:], "--workdir", os.path.join(tmp, "voc-file"))
    check(r.returncode == 0 and "vocabulary of 300 ids" in r.stderr, f"--tokenizer DIR/vocab.json: {r.stderr[-300:]}")
    print("vocabularies: a tiny preset trains on text; sizes that do not fit refused at the start")


def logging(redco, tmp, data, build):
    base = ["--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--batch-size", "4", "--steps", "9",
            "--eval-data", data, "--eval-every", "9"]
    every = os.path.join(tmp, "log-1")
    r1 = run(redco, "train", *base, "--workdir", every, "--log-every", "1")
    third = os.path.join(tmp, "log-3")
    r3 = run(redco, "train", *base, "--workdir", third, "--log-every", "3")
    check(r1.returncode == 0 and r3.returncode == 0, f"logging runs: {r1.stderr[-300:]} {r3.stderr[-300:]}")
    a = [x for x in losses(every) if "train/loss" in x]
    b = [x for x in losses(third) if "train/loss" in x]
    check([x["step"] for x in b] == [3, 6, 9], f"--log-every 3 records: {[x['step'] for x in b]}")
    for x in b:
        mean = sum(y["train/loss"] for y in a if x["step"] - 3 < y["step"] <= x["step"]) / 3
        check(abs(x["train/loss"] - mean) < 1e-6 * abs(mean), f"step {x['step']}: {x['train/loss']} is not the mean {mean}")
    per_epoch = (len(np.load(data)) - 1) // 16 // 4
    check(all(abs(x["train/epoch"] - x["step"] / per_epoch) < 1e-6 for x in a),
          f"train/epoch is the fraction done ({per_epoch} steps an epoch): {[x['train/epoch'] for x in a][:3]}")
    full = [json.loads(line) for line in open(os.path.join(every, "log.jsonl"))]
    check(all("train/tokens_per_s" in x for x in full if "train/loss" in x) and
          any("eval/ppl" in x and "eval/tokens" in x for x in full),
          "a language model logs tokens/s and the eval perplexity")
    plain = [line for line in r1.stderr.splitlines() if line.startswith("step ") and "ETA" in line]
    check(len(plain) == 9 and all("tok/s" in line and "ETA" in line and "\r" not in line for line in plain),
          f"plain progress lines when stderr is no terminal: {plain[:2]}")
    # on a terminal: one line redrawn each step (carriage return, the bar, rate and ETA)
    master, slave = pty.openpty()
    p = subprocess.Popen([redco, "train", *base[:-4], "--workdir", os.path.join(tmp, "log-tty")],
                         stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the program closed the terminal
            break
        if not chunk:
            break
        out += chunk
    p.wait()
    os.close(master)
    bars = out.decode(errors="replace").split("\r[")[1:]
    check(p.returncode == 0 and len(bars) == 9 and all("tok/s" in x and "ETA" in x for x in bars) and
          all("\n" not in x for x in bars[:-1]) and bars[-1].endswith("\n"),
          f"a terminal's progress bar: {bars[:2]} ... {bars[-1:]}")
    # a classifier: examples/s, eval examples, no perplexity
    cnn = os.path.join(build, "fashion_cnn")
    if os.path.exists("/usr/share/datasets/fashion-mnist") and os.path.exists(cnn):
        wd = os.path.join(tmp, "log-cnn")
        r = subprocess.run([cnn, "--steps", "4", "--train-limit", "128", "--test-limit", "64", "--batch", "32",
                            "--workdir", wd], capture_output=True, text=True, timeout=600)
        recs = [json.loads(line) for line in open(os.path.join(wd, "log.jsonl"))] if r.returncode == 0 else []
        train = [x for x in recs if "train/loss" in x]
        ev = [x for x in recs if "eval/loss" in x]
        check(train and all("train/examples_per_s" in x and "train/tokens_per_s" not in x for x in train) and
              ev and all("eval/examples" in x and "eval/ppl" not in x for x in ev) and "ex/s" in r.stderr,
              f"a classifier's units: {recs} {r.stderr[-300:]}")
    else:
        check(False, "no Fashion-MNIST (scripts/setup.sh installs it) or no build/fashion_cnn")
    print("logging: interval means, fractional epochs, the task's units")


def caches(redco, tmp, text):
    data_dir = os.path.join(tmp, "ro-data")
    os.makedirs(data_dir)
    corpus = os.path.join(data_dir, "corpus.txt")
    shutil.copy(text, corpus)
    base = ["--model", "tiny-gpt2", "--data", corpus, "--tokenizer", GPT2_TOK, "--vocab-size", "50257",
            "--seq-len", "16", "--steps", "1", "--batch-size", "2"]
    for env, where in (({"REDCO_CACHE_DIR": os.path.join(tmp, "cache-a")}, os.path.join(tmp, "cache-a")),
                       ({"REDCO_CACHE_DIR": "", "XDG_CACHE_HOME": os.path.join(tmp, "xdg")},
                        os.path.join(tmp, "xdg", "redco"))):
        e = dict(os.environ, **env)
        wd = os.path.join(tmp, f"cache-run-{len(os.listdir(tmp))}")
        r = subprocess.run([redco, "train", *base, "--workdir", wd], capture_output=True, text=True, env=e,
                           timeout=600)
        cached = os.listdir(where) if os.path.isdir(where) else []
        check(r.returncode == 0 and len(cached) == 1 and cached[0].startswith("corpus.txt-") and
              cached[0].endswith(".npy") and os.listdir(data_dir) == ["corpus.txt"],
              f"token cache with {env}: {cached}, beside the data {os.listdir(data_dir)}, {r.stderr[-300:]}")
    print("caches: tokenized text goes to the cache directory")


GPT2_TOK = None


def main():
    global GPT2_TOK
    args = options()
    redco = args.redco
    GPT2_TOK = os.path.join(args.source, "data", "gpt2")
    tmp = tempfile.mkdtemp(prefix="redco-runs-")
    data = os.path.join(tmp, "ids.npy")
    stream = np.cumsum(np.random.default_rng(0).integers(1, 4, size=4000)) % 250
    np.save(data, stream.astype(np.int32))
    text = os.path.join(tmp, "austen.txt")
    shutil.copy(os.path.join(args.source, "data", "austen_excerpt.txt"), text)
    open(os.path.join(tmp, "x.csv"), "w").write("1,2\n")
    refusals(redco, tmp, data, text)
    config(redco, tmp, data)
    save_total_limit(redco, tmp, data)
    presets(redco, args.source)
    vocabularies(redco, tmp, text)
    logging(redco, tmp, data, args.build)
    caches(redco, tmp, text)
    shutil.rmtree(tmp, ignore_errors=True)
    return finish("test_cli_runs")


if __name__ == "__main__":
    sys.exit(main())
