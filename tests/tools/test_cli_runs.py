"""`redco train` runs as a user manages them (issue #29, "Runs" and "Presets, tokenizers,
vocabularies"):
- a run refused for bad input (a bad flag, missing data, an unknown model, a batch that
  fills no step, a mesh or memory that does not fit, a tokenizer too big for the model)
  prints one line, exits non-zero and leaves nothing behind: no workdir, log or event file.
"""
import json
import os
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
    shutil.rmtree(tmp, ignore_errors=True)
    return finish("test_cli_runs")


if __name__ == "__main__":
    sys.exit(main())
