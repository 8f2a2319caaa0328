"""`redco train --dtype` end to end, as a user runs it:
- --dtype f16 --loss-scale 1e12: the first steps overflow; each prints a note (update
  skipped, loss scale halved), log.jsonl carries train/loss_scale every step, halving until
  the gradients are finite, then the loss falls; final/ holds F32 tensors (the master);
- --dtype bf16 on gpt2-mini with its tokenizer: final/ is F32, `generate --dtype bf16`
  continues a prompt from it (greedy: the same text twice), `eval --dtype bf16` scores it
  within 1% of `eval` in f32;
- a bad --dtype is one usage line and exit 2.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from refkit import FAILED, PASSED, check


def run(redco, *args, expect=0):
    r = subprocess.run([redco, *args], capture_output=True, text=True)
    if expect is not None and r.returncode != expect:
        print(f"command {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return r


def log(workdir):
    with open(os.path.join(workdir, "log.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def dtypes(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return {v["dtype"] for k, v in header.items() if k != "__metadata__"}


def main():
    ap = argparse.ArgumentParser()
    for a in ("--redco", "--build", "--source"):
        ap.add_argument(a)
    args = ap.parse_args()
    redco = args.redco
    tmp = tempfile.mkdtemp(prefix="redco-cli-half-")
    data = os.path.join(tmp, "ids.npy")
    rng = np.random.default_rng(0)
    stream = np.cumsum(rng.integers(1, 4, size=6000)) % 250
    np.save(data, stream.astype(np.int32))

    # f16 from an overflowing scale: notes, the logged scale, recovery
    wd = os.path.join(tmp, "f16")
    r = run(redco, "train", "--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--workdir", wd,
            "--steps", "40", "--batch-size", "4", "--lr", "3e-3", "--log-every", "1", "--dtype", "f16",
            "--loss-scale", "1e12", "--loss-scale-window", "1000")
    notes = [l for l in r.stderr.splitlines() if "update skipped" in l]
    rows = log(wd) if r.returncode == 0 else []
    scales = [x.get("train/loss_scale") for x in rows]
    losses = [x["train/loss"] for x in rows]
    halvings = sum(1 for a, b in zip([1e12] + scales, scales) if b is not None and abs(b / a - 0.5) < 1e-4)
    check(len(rows) == 40 and all(s is not None for s in scales), f"train/loss_scale logged every step: {scales[:3]}")
    check(len(notes) == halvings and halvings >= 10, f"{len(notes)} notes for {halvings} halvings")
    check(bool(notes) and "loss scale 1e+12" in notes[0] and "now 5e+11" in notes[0], f"first note: {notes[:1]}")
    prev = [1e12] + scales[:-1]
    first_good = next((i for i in range(len(scales)) if scales[i] == prev[i]), None)
    check(first_good is not None and first_good >= 10 and scales[-1] <= scales[first_good] and
          losses[-1] < 0.95 * losses[first_good],
          f"after the overflow: scale {scales[-1:]}, loss {losses[first_good if first_good else 0]} -> {losses[-1:]}")
    check(dtypes(os.path.join(wd, "final", "model.safetensors")) == {"F32"}, "final/ holds the f32 master")
    print(f"f16 from 1e12: {halvings} steps skipped, scale {scales[-1]:g}, loss {losses[first_good]:.4f} -> "
          f"{losses[-1]:.4f}; first note: {notes[0] if notes else None}")

    # bf16 on a text model: final/ in f32, generated and evaluated in bf16
    textrun = os.path.join(tmp, "text")
    corpus = os.path.join(tmp, "corpus.txt")
    with open(os.path.join(args.source, "data", "moby_dick.txt")) as f, open(corpus, "w") as g:
        g.write(f.read(20000))
    r = run(redco, "train", "--model", "gpt2-mini", "--data", corpus, "--tokenizer",
            os.path.join(args.source, "data", "gpt2"), "--workdir", textrun, "--steps", "3",
            "--batch-size", "2", "--seq-len", "16", "--dtype", "bf16")
    final = os.path.join(textrun, "final")
    check(r.returncode == 0 and dtypes(os.path.join(final, "model.safetensors")) == {"F32"}, "bf16 run: final/ in F32")
    gen = ["generate", "--model", final, "--prompt", "The whale", "--max-new-tokens", "6", "--dtype", "bf16", "--json"]
    outs = [run(redco, *gen) for _ in range(2)]
    outs = [json.loads(o.stdout.strip().splitlines()[-1]) if o.returncode == 0 else {} for o in outs]
    check(len(outs[0].get("ids", [])) == 6 and outs[0] == outs[1], f"generate --dtype bf16 on final/: {outs}")
    ev = [run(redco, "eval", "--model", final, "--data", corpus, "--seq-len", "16", "--json", *extra)
          for extra in ((), ("--dtype", "bf16"))]
    ev = [json.loads(e.stdout.strip().splitlines()[-1]) if e.returncode == 0 else {} for e in ev]
    check(all("loss" in e for e in ev) and abs(ev[1]["loss"] - ev[0]["loss"]) < 0.01 * ev[0]["loss"],
          f"eval in bf16 vs f32: {ev}")
    print("generate --dtype bf16:", outs[0].get("text"), "| eval f32 / bf16:", [e.get("loss") for e in ev])

    # a bad dtype
    r = run(redco, "train", "--model", "tiny-gpt2", "--data", data, "--workdir", os.path.join(tmp, "bad"),
            "--steps", "1", "--dtype", "f8", expect=2)
    check(r.returncode == 2 and "--dtype 'f8'" in r.stderr, f"bad --dtype: {r.returncode} {r.stderr.strip()}")

    shutil.rmtree(tmp)
    print(f"test_cli_train_half: {PASSED[0]} passed, {len(FAILED)} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
