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

import stopkit
from refkit import MPI_ENV, check, finish, options
from stopkit import check_stop, children, end_of, read_to_step, same_weights, tiny_run

REDCO = None
BASE = None
STEPS = "400"
HOLD = "1.5"  # seconds the ranks hold a stop before its checkpoint is written
KILL_TIMEOUT = "5"  # odls_base_sigkill_timeout for plain mpiexec: more than HOLD and the save


def train(*args, **kw):
    return stopkit.train(REDCO, BASE, *args, **kw)


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
    lines = read_to_step(p, after)
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
    err = end_of(p, lines, workdir)
    return p.returncode, err, time.time() - t0


def resumed_equal(straight, workdir, what, nproc="2"):
    """--resume to the end (from nothing when the stop left no checkpoint) equals straight"""
    resume = ["--resume"] if os.path.exists(os.path.join(workdir, "last_checkpoint")) else []
    train("--workdir", workdir, "--steps", STEPS, *(["--nproc", nproc] if nproc != "1" else []), *resume)
    same_weights(straight, workdir, f"{what}: resumed equals straight (bitwise)")


def main():
    global REDCO, BASE
    REDCO = options().redco
    tmp = tempfile.mkdtemp(prefix="redco-signals-")
    BASE = tiny_run(tmp)
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
    lines = read_to_step(p, 5)
    t0 = time.time()
    os.kill(p.pid, signal.SIGTERM)
    time.sleep(gap)
    try:
        os.kill(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    err = end_of(p, lines, workdir)
    return p.returncode, err, time.time() - t0


if __name__ == "__main__":
    sys.exit(main())
