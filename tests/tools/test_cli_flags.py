"""The command line's flags, read by getopt_long, as a user meets them:
- every command's --help (and -h) exits 0 and prints its usage on stdout;
- a bad value of each numeric flag, an unknown flag, an abbreviated flag, a value given to
  a flag that takes none, a missing value and a stray argument: exactly one line on
  stderr, beginning `redco CMD:` and naming the flag, and exit status 2;
- --flag=value means what --flag value means (plan, train, tokenize), and --nproc=P
  relaunches under mpiexec like --nproc P; --zero takes an optional stage (--zero, --zero 1,
  --zero 2, --zero=2, --zero 3, --zero=3 train as the run without on 2 processes, and so
  does --zero 3 with the model read from a directory; --zero 4 is
  one line, exit 2);
- tokenize's TEXT may come before or after the flags, and after "--" even when it looks
  like a flag;
- train --json and eval --json: the last line of stdout is JSON with the documented keys;
  a diverged model's NaN/infinite loss is null there, not invalid JSON;
- --attention unfused trains and evaluates as the fused op, and plan counts its [T, T]
  probabilities; --attention tiled trains on the CPU as the fused op, to the bit.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

from refkit import FAILED, PASSED, check


def run(redco, *args, stdin=None):
    e = dict(os.environ)
    if any(a == "--nproc" or a.startswith("--nproc=") for a in args):
        e["ASAN_OPTIONS"] = "detect_leaks=0"  # OpenMPI's own allocations under the sanitizer
    return subprocess.run([redco, *args], input=stdin, capture_output=True, text=True, env=e, timeout=300)


def last_json(r):
    """The last line of stdout as JSON, or None when the run failed or it is not JSON."""
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        return None
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        return None


def usage_error(redco, cmd, args, word):
    """args must fail as a usage error: exit 2, one stderr line `redco CMD: ...` naming word."""
    r = run(redco, cmd, *args)
    lines = r.stderr.splitlines()
    ok = (r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"redco {cmd}: ") and word in lines[0]
          and r.stdout == "")
    check(ok, f"{cmd} {args}: exit {r.returncode}, stderr {r.stderr!r}, stdout {r.stdout[:100]!r}")
    return lines[0] if lines else ""


# each command's numeric flags, with a value that is not a number and one out of its range
NUMERIC = {
    "train": {"--steps": "0", "--epochs": "0", "--batch-size": "0", "--seq-len": "0", "--lr": "-1",
              "--weight-decay": "-0.5", "--grad-clip": "-1", "--warmup": "-1", "--grad-accum": "0",
              "--seed": "-1", "--eval-every": "-1", "--save-every": "-1", "--log-every": "-1", "--mp": "0",
              "--nproc": "0"},
    "eval": {"--seq-len": "0", "--batch-size": "0", "--mp": "0", "--nproc": "5000"},
    "generate": {"--max-new-tokens": "0", "--temperature": "-1", "--top-k": "-1", "--top-p": "1.5",
                 "--num-beams": "65", "--seed": "-1", "--mp": "0", "--nproc": "0"},
    "plan": {"--mp": "0", "--dp": "0", "--batch-size": "0", "--seq-len": "0"},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redco", required=True)
    ap.add_argument("--source", required=True)
    args, _ = ap.parse_known_args()
    redco = args.redco
    tmp = tempfile.mkdtemp(prefix="redco-flags-")
    data = os.path.join(tmp, "ids.npy")
    rng = np.random.default_rng(0)
    np.save(data, (np.cumsum(rng.integers(1, 4, size=6000)) % 250).astype(np.int32))
    gpt2 = os.path.join(args.source, "data", "gpt2")
    work = os.path.join(tmp, "w")
    required = {
        "train": ["--model", "tiny-gpt2", "--data", data, "--workdir", work, "--steps", "1"],
        "eval": ["--model", "tiny-gpt2", "--data", data],
        "generate": ["--model", "tiny-gpt2", "--prompt", "x"],
        "plan": ["--model", "tiny-gpt2"],
        "tokenize": ["--tokenizer", gpt2],
    }

    # --help and -h
    for cmd in ("train", "eval", "generate", "plan", "tokenize"):
        for h in ("--help", "-h"):
            r = run(redco, cmd, h)
            check(r.returncode == 0 and r.stdout.startswith(f"usage: redco {cmd} ") and r.stderr == "",
                  f"{cmd} {h}: exit {r.returncode}, stdout {r.stdout[:80]!r}, stderr {r.stderr!r}")
        # --help after other flags still only prints the help
        r = run(redco, cmd, *required[cmd], "--help")
        check(r.returncode == 0 and r.stdout.startswith(f"usage: redco {cmd} "), f"{cmd} ... --help")
    for h in ("--help", "help", "-h"):
        r = run(redco, h)
        check(r.returncode == 0 and "usage: redco <command>" in r.stdout, f"redco {h}")
    r = run(redco, "frobnicate")
    check(r.returncode == 2 and r.stderr.startswith("redco: unknown command"), f"unknown command: {r.stderr!r}")
    check("null" in run(redco, "train", "--help").stdout and "null" in run(redco, "eval", "--help").stdout,
          "train and eval --help say what a non-finite value becomes")

    # bad numeric values, as --flag VALUE and --flag=VALUE
    for cmd, flags in NUMERIC.items():
        for flag, out_of_range in flags.items():
            for value in ("abc", out_of_range, "1x", ""):
                usage_error(redco, cmd, [*required[cmd], flag, value], flag)
            line = usage_error(redco, cmd, [*required[cmd], f"{flag}={out_of_range}"], flag)
            check(f"'{out_of_range}'" in line, f"{cmd} {flag}={out_of_range}: the value is named: {line!r}")
    print(f"numeric flags: {sum(len(f) for f in NUMERIC.values())} flags x 5 bad values rejected")

    # unknown, abbreviated, valueless and stray arguments, and missing values
    for cmd in ("train", "eval", "generate", "plan", "tokenize"):
        req = required[cmd]
        usage_error(redco, cmd, [*req, "--frobnicate"], "'--frobnicate'")
        usage_error(redco, cmd, [*req, "--frobnicate=3"], "'--frobnicate'")
        usage_error(redco, cmd, [*req, "-x"], "'-x'")
        usage_error(redco, cmd, ["--mod" if cmd != "tokenize" else "--tok", "x", *req], "unknown flag")
        usage_error(redco, cmd, [*req, "--help=1"], "--help takes no value")
        usage_error(redco, cmd, req[:1], f"{req[0]} needs a value")
        if cmd != "tokenize":
            usage_error(redco, cmd, [*req, "stray"], "unexpected argument 'stray'")
            usage_error(redco, cmd, [*req, "--", "--json"], "unexpected argument '--json'")
    usage_error(redco, "train", [*required["train"], "--json=yes"], "--json takes no value")
    usage_error(redco, "eval", [*required["eval"], "--resume"], "'--resume'")  # a train-only flag
    usage_error(redco, "plan", ["--model", "tiny-gpt2", "--shard", "nonsense"], "--shard")
    usage_error(redco, "train", [*required["train"], "--optimizer=lion"], "--optimizer")
    usage_error(redco, "train", ["--model", "tiny-gpt2", "--data", data, "--steps", "1"], "--workdir")
    usage_error(redco, "tokenize", [], "--tokenizer")
    usage_error(redco, "tokenize", ["--tokenizer", gpt2, "one", "two"], "more than one TEXT")
    usage_error(redco, "generate", [*required["generate"], "--num-beams", "2", "--temperature", "1"],
                "--num-beams")

    # --flag=value is --flag value
    a = run(redco, "plan", "--model", "tiny-gpt2", "--mp", "2", "--seq-len", "32", "--json")
    b = run(redco, "plan", "--model=tiny-gpt2", "--mp=2", "--seq-len=32", "--json")
    check(a.returncode == 0 and a.stdout == b.stdout and last_json(a) and last_json(a)["mp"] == 2,
          f"plan --flag=value: {b.stdout[:200]!r} vs {a.stdout[:200]!r}")
    hello = "15496 995\n"
    for argv in (["--tokenizer", gpt2, "Hello world"], ["--tokenizer=" + gpt2, "Hello world"],
                 ["Hello world", "--tokenizer", gpt2], ["--tokenizer", gpt2, "--", "Hello world"]):
        r = run(redco, "tokenize", *argv)
        check(r.returncode == 0 and r.stdout == hello, f"tokenize {argv}: {r.stdout!r} {r.stderr!r}")
    for text in ("--lines", "-x", "--"):
        r = run(redco, "tokenize", "--tokenizer", gpt2, "--", text)
        want = run(redco, "tokenize", "--tokenizer", gpt2, stdin=text)
        check(r.returncode == 0 and want.returncode == 0 and r.stdout == want.stdout,
              f"tokenize -- {text!r}: {r.stdout!r} vs {want.stdout!r}")
    r = run(redco, "tokenize", "--tokenizer", gpt2, "--decode", "15496 995")
    check(r.returncode == 0 and r.stdout == "Hello world", f"tokenize --decode TEXT: {r.stdout!r}")

    # train --json: {step, loss, eval_loss, lr}; with = forms; eval_loss null without --eval-data
    base = ["--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--batch-size", "4"]
    plain = os.path.join(tmp, "plain")
    r = run(redco, "train", *base, "--workdir=" + plain, "--steps=3", "--lr=0.003", "--json")
    out = last_json(r)
    check(out is not None and set(out) == {"step", "loss", "eval_loss", "lr"} and out["step"] == 3 and
          isinstance(out["loss"], float) and math.isfinite(out["loss"]) and out["eval_loss"] is None and
          abs(out["lr"] - 0.003) < 1e-12, f"train --json: {r.stdout[-300:]!r} {r.stderr[-300:]!r}")
    print("train --json:", out)
    with_eval = os.path.join(tmp, "with-eval")
    r = run(redco, "train", *base, "--workdir", with_eval, "--steps", "2", "--eval-data", data, "--json")
    out = last_json(r)
    check(out is not None and set(out) == {"step", "loss", "eval_loss", "lr"} and out["step"] == 2 and
          isinstance(out["eval_loss"], float) and math.isfinite(out["eval_loss"]),
          f"train --json with --eval-data: {r.stdout[-300:]!r}")

    # eval --json: {loss, ppl, tokens}; --nproc=2 relaunches like --nproc 2
    model = os.path.join(plain, "final")
    r = run(redco, "eval", "--model", model, "--data", data, "--seq-len", "16", "--json")
    one = last_json(r)
    check(one is not None and set(one) == {"loss", "ppl", "tokens"} and isinstance(one["tokens"], int) and
          abs(one["ppl"] - math.exp(one["loss"])) < 1e-9 * one["ppl"], f"eval --json: {r.stdout[-300:]!r}")
    r = run(redco, "eval", "--model=" + model, "--data=" + data, "--seq-len=16", "--json", "--nproc=2")
    two = last_json(r)
    check(one is not None and two is not None and two["tokens"] == one["tokens"] and
          abs(two["loss"] - one["loss"]) < 1e-5 * one["loss"], f"eval --nproc=2: {two} vs {one} {r.stderr[-300:]!r}")
    print("eval --json:", one, "with --nproc=2:", two)

    # a diverging run: it stops at the NaN step K; the same run to K - 1 has weights whose
    # loss on its data is not finite, so eval_loss (train) and loss and ppl (eval) are null
    diverge = [*base, "--optimizer", "sgd", "--lr", "1000", "--grad-clip", "0", "--no-shuffle"]
    r = run(redco, "train", *diverge, "--workdir", os.path.join(tmp, "nan"), "--steps", "60", "--json")
    line = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    words = line.split()
    k = int(words[words.index("step") + 1].rstrip(":")) if "step" in words else 0
    check(r.returncode == 1 and k > 1 and ("NaN" in line or "infinite" in line),
          f"the diverging run stops at a NaN/infinite step after the first: {r.stderr[-300:]!r}")
    if k > 1:
        nan = os.path.join(tmp, "nan-before")
        r = run(redco, "train", *diverge, "--workdir", nan, "--steps", str(k - 1), "--eval-data", data, "--json")
        out = last_json(r)
        check(out is not None and out["step"] == k - 1 and out["eval_loss"] is None and
              isinstance(out["loss"], float), f"train --json of a diverged model: {r.stdout[-300:]!r}")
        r = run(redco, "eval", "--model", os.path.join(nan, "final"), "--data", data, "--seq-len", "16", "--json")
        out = last_json(r)
        check(out is not None and out["loss"] is None and out["ppl"] is None and out["tokens"] > 0,
              f"eval --json of a diverged model: {r.stdout[-300:]!r} {r.stderr[-300:]!r}")
        print(f"diverged at step {k}: the model of step {k - 1} evaluates to", out)

    # --device: train, eval and generate on the OpenCL device (PoCL in CI) give the CPU's
    # figures; plan --device says whether a rank fits and which kernels the device lacks;
    # an unknown device is one line and exit 1
    dev = os.path.join(tmp, "on-device")
    r = run(redco, "train", *base, "--workdir", dev, "--steps=3", "--lr=0.003", "--json", "--device", "opencl")
    out = last_json(r)
    ref = last_json(run(redco, "train", *base, "--workdir", os.path.join(tmp, "plain2"), "--steps=3",
                        "--lr=0.003", "--json"))
    check(out is not None and ref is not None and out["step"] == 3 and abs(out["loss"] - ref["loss"]) < 1e-5 * ref["loss"],
          f"train --device opencl: {r.stdout[-300:]!r} {r.stderr[-300:]!r}")
    again = os.path.join(tmp, "on-device-again")
    run(redco, "train", *base, "--workdir", again, "--steps=3", "--lr=0.003", "--json", "--device", "opencl")
    for f in ["final/model.safetensors", "checkpoint-3/model.safetensors", "checkpoint-3/optimizer.safetensors"]:
        a, b = os.path.join(dev, f), os.path.join(again, f)
        same = os.path.exists(a) and os.path.exists(b) and open(a, "rb").read() == open(b, "rb").read()
        check(same, f"the same training twice on opencl: {f} is not bitwise identical")
    cpu = last_json(run(redco, "eval", "--model", model, "--data", data, "--seq-len", "16", "--json"))
    r = run(redco, "eval", "--model", model, "--data", data, "--seq-len", "16", "--json", "--device=opencl:0")
    out = last_json(r)
    check(out is not None and cpu is not None and out["tokens"] == cpu["tokens"] and
          abs(out["loss"] - cpu["loss"]) < 1e-5 * cpu["loss"], f"eval --device opencl:0: {out} vs {cpu}")
    r = run(redco, "plan", "--model", "tiny-gpt2", "--mp", "1", "--device", "opencl", "--json")
    out = last_json(r)
    check(out is not None and out["device"]["name"] == "opencl:0" and out["device"]["fit"] == "fits" and
          out["device"]["missing_kernels"] == "", f"plan --device opencl: {r.stdout[-300:]!r}")
    r = run(redco, "plan", "--model", "llama-65b", "--mp", "1", "--device", "opencl", "--json")
    out = last_json(r)
    check(out is not None and out["device"]["fit"] == "does not fit", f"plan llama-65b on PoCL: {out}")
    r = run(redco, "train", *base, "--workdir", os.path.join(tmp, "tpu"), "--steps=1", "--device", "tpu")
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "device 'tpu'" in r.stderr,
          f"an unknown device: {r.returncode} {r.stderr!r}")
    print("--device opencl: train, eval and plan agree with the CPU; an unknown device is one line")

    # --attention unfused (product, softmax, product): train and eval give the fused op's
    # figures to rounding (generate: test_cli_runs), the run's configuration keeps it, plan counts the [T, T]
    # probabilities among the activations; any other value is one line
    for cmd in ("train", "eval", "generate", "plan"):
        usage_error(redco, cmd, [*required[cmd], "--attention", "flash"], "--attention")
    un_dir = os.path.join(tmp, "unfused")
    un = last_json(run(redco, "train", *base, "--workdir", un_dir, "--steps=3", "--lr=0.003", "--json",
                       "--attention", "unfused"))
    check(un is not None and ref is not None and abs(un["loss"] - ref["loss"]) < 1e-5 * ref["loss"],
          f"train --attention unfused: {un} vs the fused run's {ref}")
    conf = os.path.join(un_dir, "run_config.json")
    check(os.path.exists(conf) and json.load(open(conf)).get("attention") == "unfused",
          "run_config.json keeps --attention unfused")
    ev = last_json(run(redco, "eval", "--model", model, "--data", data, "--seq-len", "16", "--json",
                       "--attention=unfused"))
    check(ev is not None and cpu is not None and ev["tokens"] == cpu["tokens"] and
          abs(ev["loss"] - cpu["loss"]) < 1e-5 * cpu["loss"], f"eval --attention unfused: {ev} vs {cpu}")
    plans = [last_json(run(redco, "plan", "--model", "gpt2", "--mp", "1", "--batch-size", "4", "--seq-len", "1024",
                           "--json", *extra)) for extra in ([], ["--attention", "unfused"])]
    ok = all(p is not None for p in plans)
    check(ok and plans[0]["attention"] == "fused" and plans[1]["attention"] == "unfused" and
          plans[1]["memory_bytes"]["activations"] > 1.5 * plans[0]["memory_bytes"]["activations"],
          f"plan --attention unfused: activations {[p and p['memory_bytes']['activations'] for p in plans]}")
    print("--attention unfused: train and eval as the fused op; plan's activations",
          [p and p["memory_bytes"]["activations"] for p in plans])
    # --attention products (and tiled, fused's older name): the fused op, which only a CUDA
    # device's bf16 attention runs otherwise; on the CPU the same run to the bit, the run's
    # configuration keeps the name, and the plan says which
    for how in ("products", "tiled"):
        ti_dir = os.path.join(tmp, how)
        ti = last_json(run(redco, "train", *base, "--workdir", ti_dir, "--steps=3", "--lr=0.003", "--json",
                           "--attention", how))
        check(ti is not None and ref is not None and ti["loss"] == ref["loss"],
              f"train --attention {how}: {ti} vs the fused run's {ref}")
        conf = os.path.join(ti_dir, "run_config.json")
        check(os.path.exists(conf) and json.load(open(conf)).get("attention") == how,
              f"run_config.json keeps --attention {how}")
    pp = last_json(run(redco, "plan", "--model", "gpt2", "--mp", "1", "--batch-size", "4", "--seq-len", "1024",
                       "--json", "--attention", "products"))
    check(pp is not None and pp["attention"] == "products", f"plan --attention products: {pp and pp['attention']}")
    print("--attention products, tiled: on the CPU the fused op's run to the bit")

    # --remat: recomputing the blocks in the backward pass leaves the weights bitwise the same,
    # on one process and on 2 model shards
    for extra, tag in [([], "one"), (["--nproc", "2", "--mp", "2"], "mp2")]:
        outs = []
        for remat in [[], ["--remat"], ["--remat=2"]]:
            wd = os.path.join(tmp, f"remat-{tag}-{len(outs)}")
            r = run(redco, "train", *base, "--workdir", wd, "--steps=2", *extra, *remat)
            path = os.path.join(wd, "final", "model.safetensors")
            outs.append(open(path, "rb").read() if r.returncode == 0 and os.path.exists(path) else None)
        check(outs[0] is not None and outs[0] == outs[1] == outs[2],
              f"train {extra} --remat: the weights differ from the run without recomputation")
    print("--remat and --remat=2: bitwise the weights of the run without, on 1 process and on 2 model shards")

    # --zero: AdamW's moments sharded over 2 data-parallel processes train the same model
    # (per tensor, relative L2 1e-6) and write the same whole moments as the run without;
    # so do --zero 2 and --zero=2 (the gradients sharded too), --zero 3 and --zero=3 (the
    # weights too); --zero 1 is --zero
    from safetensors.numpy import load_file
    tensors = []
    stages = [[], ["--zero"], ["--zero", "2"], ["--zero=2"], ["--zero", "1"], ["--zero", "3"], ["--zero=3"]]
    for zero in stages:
        wd = os.path.join(tmp, f"zero-{len(tensors)}")
        r = run(redco, "train", *base, "--workdir", wd, "--steps=3", "--lr=0.003", "--grad-clip=0.5",
                "--nproc", "2", *zero)
        files = [os.path.join(wd, "final", "model.safetensors"), os.path.join(wd, "checkpoint-3", "optimizer.safetensors")]
        ok = r.returncode == 0 and all(os.path.exists(f) for f in files)
        check(ok, f"train --nproc 2 {zero}: {r.stderr[-300:]!r}")
        tensors.append({k: v for f in files for k, v in load_file(f).items()} if ok else {})
    plain = tensors[0]
    for zero, got in zip(stages[1:], tensors[1:]):
        worst = max((float(np.linalg.norm(got[k] - v) / max(np.linalg.norm(v), 1e-6 * math.sqrt(v.size)))
                     for k, v in plain.items() if k in got), default=math.inf)
        check(plain and plain.keys() == got.keys() and worst < 1e-6,
              f"train --nproc 2 {zero}: the weights or moments differ from the run without by {worst:.3g}")
        print(f"{' '.join(zero)} on 2 processes: weights and moments after 3 steps within {worst:.2e} of the run without")
    # read from a model directory (the plain run's final/): with --zero 3 each of the 2
    # processes reads its share from the file, and trains as the run without
    dir_base = ["--model", os.path.join(tmp, "zero-0", "final"), *base[2:]]
    from_dir = []
    for zero in [[], ["--zero", "3"]]:
        wd = os.path.join(tmp, f"zero-dir-{len(from_dir)}")
        r = run(redco, "train", *dir_base, "--workdir", wd, "--steps=3", "--lr=0.003", "--grad-clip=0.5",
                "--nproc", "2", *zero)
        path = os.path.join(wd, "final", "model.safetensors")
        ok = r.returncode == 0 and os.path.exists(path)
        check(ok, f"train --model DIR --nproc 2 {zero}: {r.stderr[-300:]!r}")
        from_dir.append(load_file(path) if ok else {})
    plain, got = from_dir
    worst = max((float(np.linalg.norm(got[k] - v) / max(np.linalg.norm(v), 1e-6 * math.sqrt(v.size)))
                 for k, v in plain.items() if k in got), default=math.inf)
    check(plain and plain.keys() == got.keys() and worst < 1e-6,
          f"train --model DIR --nproc 2 --zero 3: the weights differ from the run without by {worst:.3g}")
    print(f"--model DIR --zero 3 on 2 processes: weights after 3 steps within {worst:.2e} of the run without")
    # no stage 4: one line naming the flag, exit 2, for train and plan
    for cmd, args in (("train", [*base, "--workdir", os.path.join(tmp, "zero4"), "--steps=1"]),
                      ("plan", ["--model", "gpt2", "--dp", "2"])):
        line = usage_error(redco, cmd, [*args, "--zero", "4"], "--zero")
        check("[0, 3]" in line, f"{cmd} --zero 4: {line!r}")
        usage_error(redco, cmd, [*args, "--zero=x"], "--zero")

    print(f"test_cli_flags: {PASSED[0]} passed, {len(FAILED)} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
