"""Hostile or broken inputs through the CLI (issue 17):
- config.json with n_layer 10^8, or an n_embd whose 4 x overflows an int: `redco plan`
  exits non-zero at once with one line naming the file and the field (it used to grow memory
  with no output);
- trainer_state.json corrupted in turn (negative step, a string, a missing field, a step
  past the schedule, a zero batch size, a negative loss scale, a non-object): --resume is
  refused with a line naming the file and the field, before the tensors are read;
- after a resume from step 3 of a run that had logged step 4 (and a torn line), log.jsonl
  holds steps 1..6 once each, in order, with the losses of a straight run; TensorBoard,
  reading every events file of the workdir, shows each step once; a temporary checkpoint
  directory and pointer left by an interrupted save are gone after the next start;
- a fresh run (no --resume) in a workdir holding an earlier run's checkpoint is refused in
  one line naming it, the earlier log untouched; over an earlier try's log alone (no
  checkpoint) the log starts anew;
- a training step larger than the machine's memory is refused in one line with the rank's
  figures (activations, weights, ...) and what to try, before the model is loaded; under
  --nproc 2 too, still one line (no page from mpiexec) and exit status 1.
"""
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from refkit import MPI_ENV, check, finish, options


def run(redco, *args, expect=0):
    t0 = time.time()
    r = subprocess.run([redco, *args], capture_output=True, text=True, timeout=120)
    print(f"redco {' '.join(args[:1])}: {time.time() - t0:.2f} s, exit {r.returncode}")
    if expect is not None and r.returncode != expect:
        check(False, f"redco {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return r


def one_line_error(r, words, what):
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    check(r.returncode != 0 and len(lines) == 1 and all(w in lines[0] for w in words),
          f"{what}: exit {r.returncode}, want one line with {words}, stderr {r.stderr.strip()[-800:]!r}")


def record(line):
    try:
        return json.loads(line)
    except ValueError:
        return {"step": f"torn line {line!r}"}


def log(workdir):
    with open(os.path.join(workdir, "log.jsonl")) as f:
        return [record(line) for line in f if line.strip()]


def configs(redco, tmp):
    cases = [
        ({"n_embd": 768, "n_layer": 100000000, "n_head": 12, "vocab_size": 50257},
         ["config.json", "n_layer 100000000"]),
        ({"n_embd": 1073741824, "n_layer": 1, "n_head": 1, "vocab_size": 10},
         ["config.json", "n_inner", "4 x n_embd"]),
        ({"n_embd": 65536, "n_layer": 4000, "n_head": 64, "vocab_size": 50257},
         ["config.json", "n_layer 4000", "parameters", "more than the limit"]),
    ]
    for i, (fields, words) in enumerate(cases):
        d = os.path.join(tmp, f"cfg{i}")
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "gpt2", **fields}, f)
        # the timeout only guards against a hang (the old behaviour): it is not a timing check
        r = run(redco, "plan", "--model", d, expect=None)
        one_line_error(r, words, f"plan with {fields}")


def event_steps(workdir):
    """step -> how many values TensorBoard shows for train/loss, reading the workdir as
    `tensorboard --logdir` does (orphaned events purged on a restart)."""
    from tensorboard.backend.event_processing import event_accumulator
    acc = event_accumulator.EventAccumulator(workdir, size_guidance={"scalars": 0})
    acc.Reload()
    steps = [e.step for e in acc.Scalars("train/loss")]
    return steps


def state_cases(redco, tmp, base, good):
    """Each corrupt copy of a real trainer_state.json is refused with the field named."""
    with open(os.path.join(good, "checkpoint-3", "trainer_state.json")) as f:
        state = json.load(f)
    cases = [
        ("step", -1, "step must not be negative"),
        ("step", "3", "step must be an integer"),
        ("step", 100, "step 100 is past the schedule"),
        ("epoch", None, "epoch must be an integer"),
        ("epoch_step", -5, "epoch_step must not be negative"),
        ("batch_size", 0, "batch_size 0 is out of range"),
        ("loss_scale", -2.0, "loss_scale must be positive"),
        ("best_score", "high", "best_score must be a number or null"),
        ("grad_accum", 1.5, "grad_accum must be an integer"),
        ("optimizer_step", "missing", 'missing field "optimizer_step"'),
        (None, None, "top level is not a JSON object"),
    ]
    for i, (key, value, words) in enumerate(cases):
        wd = os.path.join(tmp, f"state{i}")
        shutil.copytree(good, wd)
        s = dict(state)
        if key is None:
            s = [1, 2]
        elif value == "missing":
            del s[key]
        else:
            s[key] = value
        with open(os.path.join(wd, "checkpoint-3", "trainer_state.json"), "w") as f:
            json.dump(s, f)
        r = run(redco, "train", *base, "--workdir", wd, "--steps", "6", "--resume", expect=None)
        one_line_error(r, ["trainer_state.json", words], f"trainer_state.json with {key} = {value!r}")
        shutil.rmtree(wd, ignore_errors=True)


def main():
    a = options()
    redco = a.redco
    tmp = tempfile.mkdtemp(prefix="redco-hostile-")
    configs(redco, tmp)

    data = os.path.join(tmp, "ids.npy")
    rng = np.random.default_rng(0)
    np.save(data, (np.cumsum(rng.integers(1, 4, size=6000)) % 250).astype(np.int32))
    base = ["--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--log-every", "1"]

    straight = os.path.join(tmp, "straight")
    run(redco, "train", *base, "--workdir", straight, "--steps", "6")

    # a run stopped after step 4 whose last complete checkpoint is step 3: the kill came
    # before the next save, mid-line in the log, and mid-way through a checkpoint write
    wd = os.path.join(tmp, "resumed")
    run(redco, "train", *base, "--workdir", wd, "--steps", "4", "--save-every", "3")
    with open(os.path.join(wd, "last_checkpoint"), "w") as f:
        f.write("checkpoint-3\n")
    shutil.rmtree(os.path.join(wd, "checkpoint-4"), ignore_errors=True)
    check([x["step"] for x in log(wd)] == [1, 2, 3, 4], f"before: steps {[x['step'] for x in log(wd)]}")
    good = os.path.join(tmp, "good")
    shutil.copytree(wd, good)
    with open(os.path.join(wd, "log.jsonl"), "a") as f:
        f.write('{"step": 5, "train/lo')
    os.makedirs(os.path.join(wd, ".tmp-checkpoint-6"))
    with open(os.path.join(wd, ".tmp-checkpoint-6", "model.safetensors"), "wb") as f:
        f.write(b"\0" * 100)
    with open(os.path.join(wd, "last_checkpoint.tmp"), "w") as f:
        f.write("checkpoint-6")
    time.sleep(1.1)  # the events file is named by the second: the resumed run's sorts after

    r = run(redco, "train", *base, "--workdir", wd, "--steps", "6", "--resume")
    steps = [x["step"] for x in log(wd)]
    check(steps == [1, 2, 3, 4, 5, 6], f"after resume: log.jsonl steps {steps}")
    la = {x["step"]: x["train/loss"] for x in log(straight)}
    lb = {x["step"]: x.get("train/loss") for x in log(wd)}
    check(la == lb, f"resumed losses equal the straight run's: {la} vs {lb}")
    left = [n for n in (".tmp-checkpoint-6", "last_checkpoint.tmp", "log.jsonl.tmp")
            if os.path.exists(os.path.join(wd, n))]
    check(not left, f"temporary entries left: {left}")
    check(r is not None and "interrupted save" in r.stderr, f"the cleanup is told: {r.stderr[-500:]!r}")
    ev = event_steps(wd)
    check(ev == [1, 2, 3, 4, 5, 6], f"TensorBoard shows train/loss at steps {ev}")

    # --resume with no complete checkpoint starts at step 0: the earlier try's records go
    fresh = os.path.join(tmp, "fresh")
    run(redco, "train", *base, "--workdir", fresh, "--steps", "2")
    os.remove(os.path.join(fresh, "last_checkpoint"))
    run(redco, "train", *base, "--workdir", fresh, "--steps", "3", "--resume")
    steps = [x["step"] for x in log(fresh)]
    check(steps == [1, 2, 3], f"resume with no checkpoint: log.jsonl steps {steps}")

    # a fresh run (no --resume) in a workdir that holds an earlier run's checkpoint is
    # refused in one line, and nothing of the earlier run changes; with only an earlier
    # try's log (no checkpoint) it starts the log anew, as a resume from nothing would
    before = {n: open(os.path.join(straight, n), "rb").read() for n in ("log.jsonl", "last_checkpoint")}
    r = run(redco, "train", *base, "--workdir", straight, "--steps", "3", expect=None)
    one_line_error(r, ["holds an earlier run", "checkpoint-6", "--resume"], "a fresh run over an earlier one")
    after = {n: open(os.path.join(straight, n), "rb").read() for n in before}
    check(after == before, "a refused fresh run leaves the earlier run's log and last_checkpoint as they were")
    os.remove(os.path.join(fresh, "last_checkpoint"))
    run(redco, "train", *base, "--workdir", fresh, "--steps", "2")
    steps = [x["step"] for x in log(fresh)]
    check(steps == [1, 2], f"a fresh run over a log with no checkpoint: log.jsonl steps {steps}")

    # a run whose step no machine here can hold (tiny-gpt2 at 1048576 x 128 tokens needs
    # about 2 TiB of activations): refused in one line with the rank's figures before the
    # model is loaded, so under a 2 GiB address-space limit it fails the same way (but in a
    # sanitizer build, which cannot start under such a limit)
    with open(redco, "rb") as f:  # AddressSanitizer reserves terabytes of address space
        asan = b"__asan_init" in f.read()
    limit = None if asan else lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    r = subprocess.run([redco, "train", "--model", "tiny-gpt2", "--data", data, "--seq-len", "128",
                        "--batch-size", "1048576", "--steps", "1", "--workdir", os.path.join(tmp, "huge")],
                       capture_output=True, text=True, timeout=120, preexec_fn=limit)
    one_line_error(r, ["tiny-gpt2 does not fit", "1048576 x 128", "activations", "cpu has", "--remat", "--mp"],
                   "a step past the machine's memory")
    # the same under the --nproc launcher: still the one line (no page from mpiexec), exit 1
    r = subprocess.run([redco, "train", "--model", "tiny-gpt2", "--data", data, "--seq-len", "128",
                        "--batch-size", "1048576", "--steps", "1", "--workdir", os.path.join(tmp, "huge2"),
                        "--nproc", "2"], capture_output=True, text=True, timeout=120, env={**os.environ, **MPI_ENV})
    one_line_error(r, ["tiny-gpt2 does not fit", "for each of the processes on it"], "--nproc 2: a step too large")
    check(r.returncode == 1, f"--nproc 2: a step too large exits 1, not {r.returncode}")

    state_cases(redco, tmp, base, good)
    shutil.rmtree(tmp, ignore_errors=True)
    return finish("test_hostile_inputs")


if __name__ == "__main__":
    sys.exit(main())
