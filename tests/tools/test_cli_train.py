"""`redco train` and `redco eval` end to end, as a user runs them:
- 1 process with batch 4, and 2 and 4 MPI processes with batch 2 and 1 (same global batch,
  --no-shuffle, SGD on tiny-gpt2 and AdamW on tiny-llama): the weights after 5 steps agree
  to float rounding, tensor by tensor (relative L2 1e-5 and 1e-4);
- 10 steps straight vs 5 then --resume to 10: identical losses and weights (final/);
- a run killed while writing a checkpoint leaves the previous one as the last valid, and
  --resume continues from it to the same weights; a diverging run stops at the NaN step;
- --grad-accum 2 with batch 2 equals batch 4, and the logged lr follows optimizer steps;
- --profile trains the same weights and logs where the steps' time went;
- eval --json prints loss, ppl and tokens; generate --json prints text and ids, the same
  seed giving the same text; the TensorBoard files hold the logged scalars;
- tensor parallelism: (dp, mp) in (2,1), (1,2), (2,2), (1,4) equal one process for GPT-2,
  LLaMA (GQA), OPT and GPT-J, and a model-parallel run resumes bitwise;
- bad flags, missing files and a mesh that does not fit: one line and a non-zero exit.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file

from refkit import FAILED, PASSED, check


def run(redco, *args, env=None, expect=0):
    e = dict(os.environ)
    if "--nproc" in args:
        # under the sanitizer build, LeakSanitizer would report OpenMPI's own allocations
        e["ASAN_OPTIONS"] = "detect_leaks=0"
    e.update(env or {})
    r = subprocess.run([redco, *args], capture_output=True, text=True, env=e)
    if expect is not None and r.returncode != expect:
        print(f"command {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return r


def weights(workdir, sub="final"):
    return load_file(os.path.join(workdir, sub, "model.safetensors"))


ZERO_RMS = 1e-6  # as CHECK_ZERO_RMS in tests/check.h


def rel_diff(a, b):
    """How far weights a are from reference weights b: the largest over tensors of
    ||a - b|| / max(||b||, ZERO_RMS sqrt(size)) (L2; inf with a NaN or when the names or
    shapes differ), and the name of that worst tensor. The floor only matters for a tensor
    of RMS below 1e-6: rounding residue of zero, such as OPT's k_proj.bias, which has no
    gradient (softmax ignores a key bias)."""
    if set(a) != set(b) or any(a[k].shape != b[k].shape for k in b) or not b:
        return float("inf"), "(different tensors: %s)" % sorted(set(a) ^ set(b))[:3]
    worst, name = 0.0, None
    for k in sorted(b):
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        num, den = float(np.linalg.norm(x - y)), float(np.linalg.norm(y))
        e = 0.0 if num == 0 else num / max(den, ZERO_RMS * np.sqrt(y.size))
        if not e <= worst or name is None:  # NaN counts as the worst
            worst, name = (e if e == e else float("inf")), k
    return worst, name


def self_check_rel_diff():
    """rel_diff can fail: one element of one small tensor of small values, negated, is
    caught and named, where the whole-model max |a - b| / max |b| would pass it at 1e-5."""
    rng = np.random.default_rng(1)
    b = {"big.weight": rng.normal(0, 1, (64, 64)).astype(np.float32),
         "small.bias": np.full(16, 1e-7, np.float32)}
    a = {k: v.copy() for k, v in b.items()}
    a["small.bias"][3] = -a["small.bias"][3]
    old = max(float(np.max(np.abs(a[k] - b[k]))) for k in b) / max(float(np.max(np.abs(b[k]))) for k in b)
    e, name = rel_diff(a, b)
    check(old < 1e-5 and e > 1e-5 and name == "small.bias", f"rel_diff self-check: old {old}, new {e} on {name}")
    check(rel_diff(b, b)[0] == 0, "rel_diff self-check: equal weights")
    a["small.bias"][3] = np.nan
    check(rel_diff(a, b)[0] == float("inf"), "rel_diff self-check: NaN")
    check(rel_diff({"big.weight": b["big.weight"]}, b)[0] == float("inf"), "rel_diff self-check: missing tensor")
    z = {"k.bias": np.zeros(8, np.float32)}
    check(rel_diff({"k.bias": np.full(8, 1e-12, np.float32)}, z)[0] < 1e-5 and
          rel_diff({"k.bias": np.full(8, 1e-9, np.float32)}, z)[0] > 1e-5, "rel_diff self-check: zero tensor")


def log(workdir):
    with open(os.path.join(workdir, "log.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    for a in ("--redco", "--build", "--source"):
        ap.add_argument(a)
    args = ap.parse_args()
    redco = args.redco
    self_check_rel_diff()
    tmp = tempfile.mkdtemp(prefix="redco-cli-")
    data = os.path.join(tmp, "ids.npy")
    rng = np.random.default_rng(0)
    stream = np.cumsum(rng.integers(1, 4, size=6000)) % 250
    np.save(data, stream.astype(np.int32))
    base = ["--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--log-every", "1"]

    # data parallelism: same global batch on 1, 2 and 4 processes. AdamW runs on tiny-llama
    # (no biases): GPT-2's attention key bias has no gradient (softmax ignores it) and
    # AdamW (eps 1e-8) turns its rounding noise into steps that differ between runs by
    # 2e-4 of the c_attn.bias tensor; mpi_train compares GPT-2 with AdamW at eps 1e-6.
    # Every mesh comparison runs --no-dropout: the masks differ with the mesh and the
    # micro-batches (a key per data-parallel replica and micro-batch, a split tensor's drawn
    # per shard); the resumes below keep GPT-2's dropout and must still be bitwise.
    for opt, tol, model in (("sgd", 1e-5, "tiny-gpt2"), ("adamw", 1e-4, "tiny-llama")):
        dp_base = [*base[:1], model, *base[2:], "--no-dropout"]
        ref_dir = os.path.join(tmp, f"dp-{opt}-1")
        run(redco, "train", *dp_base, "--workdir", ref_dir, "--steps", "5", "--batch-size", "4",
            "--no-shuffle", "--optimizer", opt, "--lr", "0.05" if opt == "sgd" else "0.003")
        ref = weights(ref_dir)
        for nproc, batch in ((2, 2), (4, 1)):
            d = os.path.join(tmp, f"dp-{opt}-{nproc}")
            run(redco, "train", *dp_base, "--workdir", d, "--steps", "5", "--batch-size", str(batch),
                "--no-shuffle", "--optimizer", opt, "--lr", "0.05" if opt == "sgd" else "0.003",
                "--nproc", str(nproc))
            e, worst = rel_diff(weights(d), ref)
            print(f"{opt} {model}: {nproc} processes x batch {batch} vs 1 x 4: worst tensor {worst}, "
                  f"rel L2 diff {e:.2e}")
            check(e < tol, f"{opt} {nproc} processes: tensor {worst} differs by {e}")

    # tensor parallelism: (dp, mp) meshes against one process, same global batch, for the
    # decoder families, 5 SGD steps (T5 and the graph-op models: mpi_tp_train)
    for preset in ("tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj"):
        common = ["--model", preset, "--data", data, "--seq-len", "16", "--steps", "5", "--no-shuffle",
                  "--optimizer", "sgd", "--lr", "0.05", "--no-dropout"]
        ref_dir = os.path.join(tmp, f"tp-{preset}-1x1")
        run(redco, "train", *common, "--workdir", ref_dir, "--batch-size", "4")
        ref = weights(ref_dir)
        for dp, mp in ((2, 1), (1, 2), (2, 2), (1, 4)):
            d = os.path.join(tmp, f"tp-{preset}-{dp}x{mp}")
            run(redco, "train", *common, "--workdir", d, "--batch-size", str(4 // dp), "--nproc", str(dp * mp),
                "--mp", str(mp))
            e, worst = rel_diff(weights(d), ref) if os.path.exists(os.path.join(d, "final")) else (float("inf"), "-")
            check(e < 1e-5, f"{preset} dp {dp} x mp {mp}: tensor {worst} differs by {e}")
        print(f"{preset}: meshes (2,1) (1,2) (2,2) (1,4) agree with one process")
    # resume with model shards: bitwise as straight
    tp_straight = os.path.join(tmp, "tp-straight")
    tp_half = os.path.join(tmp, "tp-half")
    tp_args = ["--nproc", "2", "--mp", "2", "--batch-size", "4"]
    run(redco, "train", *base, *tp_args, "--workdir", tp_straight, "--steps", "6")
    run(redco, "train", *base, *tp_args, "--workdir", tp_half, "--steps", "3")
    run(redco, "train", *base, *tp_args, "--workdir", tp_half, "--steps", "6", "--resume")
    a2, b2 = weights(tp_straight), weights(tp_half)
    check(all(np.array_equal(a2[k], b2[k]) for k in a2), "mp 2: resumed weights equal the straight run's")

    # resume: 10 straight vs 5 + resume to 10
    straight = os.path.join(tmp, "straight")
    run(redco, "train", *base, "--workdir", straight, "--steps", "10", "--save-every", "5")
    half = os.path.join(tmp, "half")
    run(redco, "train", *base, "--workdir", half, "--steps", "5")
    r = run(redco, "train", *base, "--workdir", half, "--steps", "10", "--resume")
    a, b = weights(straight), weights(half)
    check(all(np.array_equal(a[k], b[k]) for k in a), "resumed weights equal the straight run's")
    la = {x["step"]: x["train/loss"] for x in log(straight)}
    lb = {x["step"]: x["train/loss"] for x in log(half)}
    check(sorted(lb) == list(range(1, 11)) and all(la[s] == lb[s] for s in la),
          f"resumed losses equal: {la} vs {lb}")

    # kill during the checkpoint write of step 10: step 5 stays the last valid one
    killed = os.path.join(tmp, "killed")
    r = run(redco, "train", *base, "--workdir", killed, "--steps", "10", "--save-every", "5",
            env={"REDCO_FAULT_KILL_IN_SAVE": "10"}, expect=None)
    check(r.returncode != 0, "the faulty run died")
    with open(os.path.join(killed, "last_checkpoint")) as f:
        pointer = f.read().strip()
    check(pointer == "checkpoint-5", f"last_checkpoint after the kill: {pointer}")
    check(not os.path.exists(os.path.join(killed, "checkpoint-10")), "no half checkpoint-10")
    run(redco, "train", *base, "--workdir", killed, "--steps", "10", "--save-every", "5", "--resume")
    c = weights(killed)
    check(all(np.array_equal(a[k], c[k]) for k in a), "resumed after the kill equals the straight run")

    # a diverging run stops at the NaN/Inf step naming it, the last checkpoint intact
    nan = os.path.join(tmp, "nan")
    run(redco, "train", *base, "--workdir", nan, "--steps", "2")
    r = run(redco, "train", *base, "--workdir", nan, "--steps", "40", "--resume", "--optimizer", "sgd",
            "--lr", "1000", "--grad-clip", "0", expect=None)
    with open(os.path.join(nan, "last_checkpoint")) as f:
        pointer = f.read().strip()
    lines = [x for x in r.stderr.splitlines() if x.startswith("redco ")]
    check(r.returncode != 0 and len(lines) == 1 and "step" in lines[0] and
          ("NaN" in lines[0] or "infinite" in lines[0]) and "checkpoint-2" in lines[0],
          f"diverging run: exit {r.returncode}, {lines}")
    check(pointer == "checkpoint-2" and os.path.exists(os.path.join(nan, "checkpoint-2", "model.safetensors")),
          f"last checkpoint after the NaN stop: {pointer}")
    print("diverging run:", lines[0] if lines else r.stderr[-300:])

    # accumulation: 2 x 2 = 4, and lr counted in optimizer steps
    one = os.path.join(tmp, "acc1")
    two = os.path.join(tmp, "acc2")
    sched = ["--optimizer", "sgd", "--lr", "0.1", "--schedule", "linear", "--warmup", "3", "--steps", "8",
             "--no-shuffle", "--no-dropout"]
    run(redco, "train", *base, "--workdir", one, "--batch-size", "4", *sched)
    run(redco, "train", *base, "--workdir", two, "--batch-size", "2", "--grad-accum", "2", *sched)
    e, worst = rel_diff(weights(two), weights(one))
    check(e < 1e-5, f"accumulation 2 x 2 vs 4: tensor {worst} differs by {e}")
    lrs = [x["train/lr"] for x in log(two)]
    want = [0.1 * (k + 1) / 3 if k < 3 else 0.1 * (1 - (k - 3) / 5) for k in range(8)]
    check(len(lrs) == 8 and all(abs(x - y) < 1e-9 for x, y in zip(lrs, want)), f"logged lr {lrs} vs {want}")
    print(f"accumulation: rel diff {e:.2e}; lr by optimizer step {['%.4f' % x for x in lrs]}")

    # --profile: the same training, and one log record of where its steps' time went (the
    # phases' mean ms a step, the step's kernels by op, inside the run's time)
    prof = os.path.join(tmp, "prof")
    r = run(redco, "train", *base, "--workdir", prof, "--batch-size", "4", *sched, "--profile")
    e, worst = rel_diff(weights(prof), weights(one))
    rec = [x for x in log(prof) if "profile/run_ms" in x]
    p = rec[0] if len(rec) == 1 else {}
    phases = [p.get(f"profile/{k}_ms", -1) for k in ("data", "run", "grads", "norm", "update")]
    ops = {k: v for k, v in p.items() if k.startswith("profile/op/")}
    check(e == 0, f"--profile changed the training: tensor {worst} differs by {e}")
    check(min(phases) >= 0 and p.get("step") == 8 and ops.get("profile/op/matmul_ms", 0) > 0 and
          0 < p.get("profile/kernels_ms", 0) <= 1.05 * phases[1] + 0.05 and
          abs(sum(ops.values()) - p["profile/kernels_ms"]) < 1e-6 * p["profile/kernels_ms"] + 1e-9 and
          "profile, ms a step over 7 steps" in r.stderr, f"--profile's record {p}, stderr {r.stderr[-300:]}")
    print(f"profile: phases {['%.2f' % x for x in phases]} ms, kernels {p.get('profile/kernels_ms', 0):.2f} ms")

    # --eval-data is read from its own file: the eval token count is that file's
    other = os.path.join(tmp, "other.npy")
    np.save(other, (np.arange(801) % 250).astype(np.int32))
    ev = os.path.join(tmp, "evalrun")
    run(redco, "train", *base, "--workdir", ev, "--steps", "2", "--eval-data", other)
    tokens = [x["eval/tokens"] for x in log(ev) if "eval/tokens" in x]
    check(tokens == [(801 - 1) // 16 * 16], f"eval over --eval-data counts its tokens: {tokens}")

    # eval --json
    r = run(redco, "eval", "--model", os.path.join(straight, "final"), "--data", data, "--seq-len", "16", "--json")
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    windows = (len(stream) - 1) // 16
    check(set(out) == {"loss", "ppl", "tokens"} and out["tokens"] == windows * 16 and
          abs(out["ppl"] - math.exp(out["loss"])) < 1e-3 * out["ppl"], f"eval --json: {out}")
    print("eval:", out)

    # generate --json: text and ids; the same seed gives the same text
    textrun = os.path.join(tmp, "text")
    corpus = os.path.join(tmp, "corpus.txt")
    with open(os.path.join(args.source, "data", "moby_dick.txt")) as f, open(corpus, "w") as g:
        g.write(f.read(20000))
    run(redco, "train", "--model", "gpt2-mini", "--data", corpus, "--tokenizer",
        os.path.join(args.source, "data", "gpt2"), "--workdir", textrun, "--steps", "2",
        "--batch-size", "2", "--seq-len", "16")
    gen = ["generate", "--model", os.path.join(textrun, "final"), "--prompt", "The whale",
           "--max-new-tokens", "6", "--temperature", "0.9", "--json"]
    outs = []
    for seed in ("5", "5", "6"):
        r = run(redco, *gen, "--seed", seed)
        outs.append(json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {})
    check(all(set(o) == {"prompt", "text", "ids", "prompt_ids"} and len(o["ids"]) == 6 for o in outs),
          f"generate --json fields: {outs}")
    check(outs[0] == outs[1], "the same seed gives the same text")
    check(outs[0].get("ids") != outs[2].get("ids"), "another seed gives other tokens")
    print("generate:", outs[0])

    # sharded inference: generate on 2 and 4 model shards (greedy, sampling, beams) and eval
    # on dp 2 x mp 2 give what one process gives
    for extra in ([], ["--temperature", "0.9", "--seed", "5"], ["--num-beams", "3"]):
        one = run(redco, "generate", "--model", os.path.join(textrun, "final"), "--prompt", "The whale",
                  "--max-new-tokens", "6", "--json", *extra)
        for nproc in ("2", "4"):
            many = run(redco, "generate", "--model", os.path.join(textrun, "final"), "--prompt", "The whale",
                       "--max-new-tokens", "6", "--json", "--nproc", nproc, *extra)
            check(one.returncode == 0 and many.returncode == 0 and
                  one.stdout.strip().splitlines()[-1] == many.stdout.strip().splitlines()[-1],
                  f"generate {extra} on {nproc} model shards: {many.stdout[-200:]} vs {one.stdout[-200:]}")
    ev1 = run(redco, "eval", "--model", os.path.join(straight, "final"), "--data", data, "--seq-len", "16", "--json")
    ev4 = run(redco, "eval", "--model", os.path.join(straight, "final"), "--data", data, "--seq-len", "16", "--json",
              "--nproc", "4", "--mp", "2")
    l1 = json.loads(ev1.stdout.strip().splitlines()[-1])["loss"] if ev1.returncode == 0 else None
    l4 = json.loads(ev4.stdout.strip().splitlines()[-1])["loss"] if ev4.returncode == 0 else None
    check(l1 is not None and l4 is not None and abs(l1 - l4) < 1e-5 * abs(l1), f"eval on dp 2 x mp 2: {l4} vs {l1}")
    print(f"sharded inference: generate on 2 and 4 shards equals one process; eval dp 2 x mp 2 {l4} vs {l1}")

    # overrides of the plan: the same training, another split
    shard = ["--shard", "transformer.h.0.mlp.c_fc.weight=replicated",
             "--shard", "transformer.h.1.mlp.c_proj.weight=1"]
    r = run(redco, "plan", "--model", "tiny-gpt2", "--mp", "2", "--json", *shard)
    plan = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    splits = {p["name"]: p["split"] for p in plan.get("params", [])}
    check(splits.get("transformer.h.0.mlp.c_fc.weight") == "replicated" and
          splits.get("transformer.h.1.mlp.c_proj.weight") == "column", f"plan with --shard: {splits}")
    common = ["--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--steps", "5", "--no-shuffle",
              "--optimizer", "sgd", "--lr", "0.05", "--batch-size", "4", "--no-dropout"]
    over = os.path.join(tmp, "override")
    run(redco, "train", *common, "--workdir", over, "--nproc", "2", "--mp", "2", *shard)
    e, worst = rel_diff(weights(over), weights(os.path.join(tmp, "tp-tiny-gpt2-1x1")))
    check(e < 1e-5, f"training with --shard overrides on mp 2 vs one process: tensor {worst} differs by {e}")
    r = run(redco, "train", *common, "--workdir", over + "2", "--nproc", "2", "--mp", "2",
            "--shard", "transformer.h.0.mlp.c_fc.weight=1:3", expect=None)
    check(r.returncode != 0 and "multiple of 3 groups" in r.stderr, f"a bad --shard: {r.stderr[-300:]}")
    print(f"--shard overrides: plan follows them; training on mp 2 equals one process ({e:.2e})")

    # plan: llama-65b over 64 shards without allocating it; a shard count that divides nothing
    r = run(redco, "plan", "--model", "llama-65b", "--mp", "64", "--dp", "2", "--json")
    plan = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    roles = {p["name"].split(".")[-2]: p["split"] for p in plan.get("params", [])}
    check(plan.get("parameters", 0) > 6.5e10 and roles.get("q_proj") == "column" and
          roles.get("o_proj") == "row" and roles.get("down_proj") == "row" and
          plan["collectives"]["model_allreduce_forward"] == 2 * 80 + 1 + 3, f"plan llama-65b: {str(plan)[:300]}")
    r = run(redco, "plan", "--model", "tiny-gpt2", "--mp", "3", expect=None)
    lines = [x for x in r.stderr.splitlines() if x.startswith("redco ")]
    check(r.returncode != 0 and len(lines) == 1 and "would: 1, 2, 4" in lines[0], f"plan mp 3: {r.stderr!r}")

    # TensorBoard
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(straight)
    acc.Reload()
    steps = [e.step for e in acc.Scalars("train/loss")]
    check(steps == list(range(1, 11)), f"tensorboard train/loss steps {steps}")

    # errors: one clear line, non-zero exit
    bad = [
        (["train", *base, "--workdir", os.path.join(tmp, "x"), "--steps", "two"], "--steps"),
        (["train", "--model", "tiny-gpt2", "--data", os.path.join(tmp, "missing.npy"),
          "--workdir", os.path.join(tmp, "x"), "--steps", "1"], "missing.npy"),
        (["train", *base, "--workdir", os.path.join(tmp, "x"), "--steps", "1", "--nproc", "4", "--mp", "3"], "3"),
        (["train", "--model", "no-such-preset", "--data", data, "--workdir", os.path.join(tmp, "x"),
          "--steps", "1"], "no-such-preset"),
        (["eval", "--model", os.path.join(tmp, "nowhere"), "--data", data], "nowhere"),
        (["train", *base, "--workdir", os.path.join(tmp, "x"), "--steps", "1", "--frobnicate"], "--frobnicate"),
    ]
    for argv, word in bad:
        r = run(redco, *argv, expect=None)
        lines = [x for x in r.stderr.splitlines() if x.startswith("redco ")]
        check(r.returncode != 0 and len(lines) == 1 and word in lines[0],
              f"{argv[-2:]}: exit {r.returncode}, stderr {r.stderr.strip()!r}")
    print(f"test_cli_train: {PASSED[0]} passed, {len(FAILED)} failed")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
