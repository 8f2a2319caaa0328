"""Signals as schedulers send them, to `redco train` on tiny-gpt2 (real processes, 2 ranks).

Slurm, at a time limit or a preemption, sends SIGTERM to every process of the job in no set
order: the launcher (`redco train --nproc 2`), mpiexec and the ranks; mpiexec and srun also
pass on a copy of their own. REDCO_TEST_STOP_SECONDS makes the ranks hold their stop that
long before the checkpoint is written (the save of a large model), so that the copies and
mpiexec's own kill come while it is written. Each case must end with a checkpoint that loads
and resumes to the weights of a run never stopped (bitwise), the one line "stopped by
SIGTERM at step N; checkpoint written to ..." on stderr and no page from mpiexec:
- under `redco train --nproc 2`, exit status 143, the signals in each order: mpiexec then the
  ranks, the ranks then mpiexec, everything at once (srun's tasks are signalled that way:
  every task together, srun's copy within the window), the launcher then mpiexec then the
  ranks, and mpiexec alone (it is deaf to SIGTERM; the launcher reads the pending signal);
- under plain `mpiexec -n 2 --mca odls_base_sigkill_timeout 5` (no launcher; mpiexec passes a
  SIGTERM on to the ranks, and kills them 2 x that timeout after its own), exit status 1
  (Open MPI's for a job it aborted): mpiexec then the ranks, the ranks then mpiexec, all at
  once; and the reason for the setting: at mpiexec's default (1 s) its kill cuts the save
  short and no checkpoint is written;
- a repeated signal within 2 s of the first (a forwarded copy) is not the second: one process
  and the launcher stop with a checkpoint; a second signal later (a second Ctrl-C) ends the
  run at once, before the held save, and what is on disk still resumes exactly.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
from safetensors.numpy import load_file

from refkit import MPI_ENV, check, finish, options

REDCO = None
BASE = None
STEPS = "400"
HOLD = "1.5"  # seconds the ranks hold a stop before its checkpoint is written
KILL_TIMEOUT = "5"  # odls_base_sigkill_timeout for plain mpiexec: more than HOLD and the save


def train(*args, env=None, timeout=120):
    r = subprocess.run([REDCO, "train", *BASE, *args], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **MPI_ENV, **(env or {})})
    check(r.returncode == 0, f"train {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return r


def children(pid):
    """the processes started by pid"""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def job_processes(p, form):
    """{"launcher": [pid], "mpiexec": [pid], "ranks": [pids]} of a job started as p"""
    found = {"launcher": [p.pid] if form == "launcher" else [], "mpiexec": [p.pid] if form == "mpiexec" else []}
    for _ in range(100):
        if form == "launcher":
            found["mpiexec"] = children(p.pid)[:1]
        found["ranks"] = [r for m in found["mpiexec"] for r in children(m)]
        if len(found["ranks"]) >= 2:
            break
        time.sleep(0.05)
    return found


def signalled_run(workdir, form, order, sig=signal.SIGTERM, gap=0.3, env=None, after=5):
    """starts a 2-rank run (form "launcher": `redco train --nproc 2`; "mpiexec": plain mpiexec
    with KILL_TIMEOUT unless env sets it), waits for the progress line of step `after`, then
    sends sig to each group of processes of `order` ("mpiexec", "ranks", "launcher", "all":
    every one at once, "again": the first group again), gap seconds apart; returns (exit
    status, stderr, seconds from the first signal to the end)"""
    args = [REDCO, "train", *BASE, "--workdir", workdir, "--steps", STEPS]
    if form == "launcher":
        args += ["--nproc", "2"]
    else:
        args = ["mpiexec", "-n", "2", *args]
    env = {**os.environ, **MPI_ENV, "REDCO_TEST_STOP_SECONDS": HOLD,
           **({} if form == "launcher" else {"OMPI_MCA_odls_base_sigkill_timeout": KILL_TIMEOUT}), **(env or {})}
    p = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    lines = []
    for line in p.stderr:
        lines.append(line)
        if line.startswith(f"step {after}/"):
            break
    procs = job_processes(p, form)
    procs["all"] = procs["launcher"] + procs["mpiexec"] + procs["ranks"]
    check(len(procs["ranks"]) == 2 and procs["mpiexec"], f"{workdir}: the job's processes: {procs}")
    t0 = time.time()
    for i, group in enumerate(order):
        if i:
            time.sleep(gap)
        for pid in procs[order[0] if group == "again" else group]:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    try:
        _, rest = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        _, rest = p.communicate()
        check(False, f"{workdir}: still running 60 s after the signals")
    return p.returncode, "".join(lines) + rest, time.time() - t0


def same_weights(a, b, what):
    wa, wb = (load_file(os.path.join(d, "final", "model.safetensors")) for d in (a, b))
    check(wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa), what)


def check_stop(workdir, code, err, what, want=143, sig="SIGTERM"):
    """the exit status, the one line, no page from mpiexec, and the checkpoint it names: complete
    and loadable"""
    check(code == want, f"{what}: exit status {code} ({want} expected):\n{err[-1500:]}")
    page = [ln for ln in err.splitlines() if "mpiexec" in ln or "mpirun" in ln or ln.startswith("---")]
    check(not page, f"{what}: no page from mpiexec after a stop:\n{err[-1500:]}")
    line = [ln for ln in err.splitlines() if f"stopped by {sig} at step" in ln]
    check(len(line) == 1, f"{what}: one 'stopped by' line in:\n{err[-1500:]}")
    if not line:
        return
    step = line[0].split("at step ")[1].split(";")[0]
    ck = f"checkpoint-{step}"
    check(line[0].endswith(f"checkpoint written to {os.path.join(workdir, ck)}"), f"{what}: {line[0]}")
    with open(os.path.join(workdir, "last_checkpoint")) as f:
        check(f.read().strip() == ck, f"{what}: last_checkpoint names {ck}")
    for name in ("model.safetensors", "trainer_state.json"):
        check(os.path.exists(os.path.join(workdir, ck, name)), f"{what}: {ck}/{name} written")
    try:
        weights = load_file(os.path.join(workdir, ck, "model.safetensors"))
        check(len(weights) > 0, f"{what}: {ck}/model.safetensors holds tensors")
    except Exception as e:  # noqa: BLE001 - any failure to load is the finding
        check(False, f"{what}: {ck}/model.safetensors does not load: {e}")
    check(not os.path.exists(os.path.join(workdir, "final")), f"{what}: no final/ after a stop")


def resumed_equal(straight, workdir, what, nproc="2"):
    """--resume to the end (from nothing when the stop left no checkpoint) equals straight"""
    resume = ["--resume"] if os.path.exists(os.path.join(workdir, "last_checkpoint")) else []
    train("--workdir", workdir, "--steps", STEPS, *(["--nproc", nproc] if nproc != "1" else []), *resume)
    same_weights(straight, workdir, f"{what}: resumed equals straight (bitwise)")


def main():
    global REDCO, BASE
    REDCO = options().redco
    tmp = tempfile.mkdtemp(prefix="redco-signals-")
    data = os.path.join(tmp, "ids.npy")
    rng = np.random.default_rng(0)
    np.save(data, (np.cumsum(rng.integers(1, 4, size=6000)) % 250).astype(np.int32))
    BASE = ["--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--log-every", "1"]
    straight1, straight2 = os.path.join(tmp, "straight1"), os.path.join(tmp, "straight2")
    train("--workdir", straight1, "--steps", STEPS)
    train("--workdir", straight2, "--steps", STEPS, "--nproc", "2")

    # every process of the job signalled, in each order; the ranks hold their save HOLD s
    cases = [("launcher", ["mpiexec", "ranks"]), ("launcher", ["ranks", "mpiexec"]), ("launcher", ["all"]),
             ("launcher", ["launcher", "mpiexec", "ranks"]), ("launcher", ["mpiexec"]),
             ("mpiexec", ["mpiexec", "ranks"]), ("mpiexec", ["ranks", "mpiexec"]), ("mpiexec", ["all"])]
    for form, order in cases:
        what = f"{form}, SIGTERM to {' then '.join(order)}"
        workdir = os.path.join(tmp, f"{form[:3]}-{len(order)}-{order[0][:3]}")
        code, err, took = signalled_run(workdir, form, order)
        print(f"{what}: exit status {code}, {took:.1f} s after the first signal")
        check_stop(workdir, code, err, what, want=143 if form == "launcher" else 1)
        resumed_equal(straight2, workdir, what)

    # plain mpiexec at its default kill timeout (1 s): its SIGKILL cuts a long save short
    cut = os.path.join(tmp, "default-kill-timeout")
    code, err, took = signalled_run(cut, "mpiexec", ["mpiexec", "ranks"],
                                    env={"OMPI_MCA_odls_base_sigkill_timeout": "1", "REDCO_TEST_STOP_SECONDS": "4"})
    print(f"mpiexec at its default kill timeout: exit status {code}, {took:.1f} s after the first signal")
    check(not os.path.exists(os.path.join(cut, "last_checkpoint")),
          "mpiexec at its default kill timeout: a 4 s save is cut short (why the setting is needed)")

    # a copy within the window: one stop, with a checkpoint (one process, and the launcher)
    copy1, copy2 = os.path.join(tmp, "copy1"), os.path.join(tmp, "copy2")
    args = [REDCO, "train", *BASE, "--workdir", copy1, "--steps", STEPS]
    code, err, _ = signalled_copy(args, copy1, 0.3)
    check_stop(copy1, code, err, "1 process, SIGTERM and a copy 0.3 s later")
    resumed_equal(straight1, copy1, "1 process, SIGTERM and a copy", nproc="1")
    code, err, _ = signalled_run(copy2, "launcher", ["launcher", "again"])
    check_stop(copy2, code, err, "launcher, SIGTERM and a copy 0.3 s later")
    resumed_equal(straight2, copy2, "launcher, SIGTERM and a copy")

    # a second signal after the window: the run ends at once, inside the held save
    later1, later2 = os.path.join(tmp, "later1"), os.path.join(tmp, "later2")
    args = [REDCO, "train", *BASE, "--workdir", later1, "--steps", STEPS]
    code, err, took = signalled_copy(args, later1, 2.5, hold="6")
    check(code == -signal.SIGTERM and took < 5,
          f"1 process, a second SIGTERM 2.5 s later: ended by it at once ({code}, {took:.1f} s):\n{err[-1500:]}")
    check(not os.path.exists(os.path.join(later1, "last_checkpoint")), "1 process, a second SIGTERM: no checkpoint half written")
    resumed_equal(straight1, later1, "1 process, a second SIGTERM later", nproc="1")
    code, err, took = signalled_run(later2, "launcher", ["launcher", "again"], sig=signal.SIGINT, gap=2.5,
                                    env={"REDCO_TEST_STOP_SECONDS": "6"})
    check(code == 130 and took < 5.5,
          f"launcher, a second Ctrl-C 2.5 s later: the job ended at once ({code}, {took:.1f} s):\n{err[-1500:]}")
    resumed_equal(straight2, later2, "launcher, a second Ctrl-C later")
    return finish("test_signals")


def signalled_copy(args, workdir, gap, hold=HOLD):
    """one process: SIGTERM after the progress line of step 5, and again gap seconds later;
    (exit status, stderr, seconds from the first signal to the end)"""
    p = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                         env={**os.environ, **MPI_ENV, "REDCO_TEST_STOP_SECONDS": hold})
    lines = []
    for line in p.stderr:
        lines.append(line)
        if line.startswith("step 5/"):
            break
    t0 = time.time()
    os.kill(p.pid, signal.SIGTERM)
    time.sleep(gap)
    try:
        os.kill(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        _, rest = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        _, rest = p.communicate()
        check(False, f"{workdir}: still running 60 s after the signals")
    return p.returncode, "".join(lines) + rest, time.time() - t0


if __name__ == "__main__":
    sys.exit(main())
