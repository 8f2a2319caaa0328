"""What clusters do to training jobs, done to `redco train` on tiny-gpt2 (real processes):
- SIGTERM mid-training (after a progress line): the step in progress finishes, a checkpoint
  is written, one line "stopped by SIGTERM at step N; checkpoint written to ..." and exit
  status 143; --resume then ends with the weights of a run never stopped (bitwise);
- the same at --nproc 2 with the signal sent to every rank (what Slurm does), to one
  rank only (the ranks agree after each step), and to the launcher alone (SIGTERM and
  SIGINT: it passes a stop notice on to every rank); no page from mpiexec after a stop;
- (signals in every order, copies of a signal and a second one later: test_signals.py);
- a rank killed with SIGKILL: the job ends within seconds and the launcher says which rank
  died and how;
- a rank that hangs inside a step (REDCO_TEST_SLEEP_RANK/_STEP) with --collective-timeout 2:
  the job ends within seconds naming the operation and the rank that did not arrive; in a
  dp 2 x mp 2 mesh, where the others wait in collectives of different groups, the one line
  names the hung rank alone as in no collective, and where a missing rank waits instead.
"""
import os
import re
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


def train(*args, **kw):
    return stopkit.train(REDCO, BASE, *args, **kw)


def ranks(launcher, n):
    """the ranks under the --nproc launcher (the children of its mpiexec), once n are there"""
    found = []
    for _ in range(100):
        found = [r for m in children(launcher) for r in children(m)]
        if len(found) >= n:
            break
        time.sleep(0.05)
    return found


def stopped_run(workdir, steps, nproc=0, targets="self", signals=1, after=3, sig=signal.SIGTERM):
    """starts a run, waits for the progress line of step `after`, sends sig `signals` times
    to the process itself (with --nproc: the launcher), every rank or one rank; returns
    (exit status, stderr)"""
    args = [REDCO, "train", *BASE, "--workdir", workdir, "--steps", str(steps)]
    if nproc:
        args += ["--nproc", str(nproc)]
    p = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                         env={**os.environ, **MPI_ENV})
    lines = read_to_step(p, after)
    pids = [p.pid] if targets == "self" else ranks(p.pid, nproc)
    if targets == "one":
        pids = pids[-1:]
    check(len(pids) >= (nproc if targets == "all" else 1), f"the processes to signal: {pids}")
    for _ in range(signals):
        for pid in pids:
            os.kill(pid, sig)
    err = end_of(p, lines, workdir)
    return p.returncode, err


def main():
    global REDCO, BASE
    REDCO = options().redco
    tmp = tempfile.mkdtemp(prefix="redco-faults-")
    BASE = tiny_run(tmp)

    # one process: SIGTERM, then --resume to the end equals a run never stopped
    straight, stop = os.path.join(tmp, "straight"), os.path.join(tmp, "stop")
    train("--workdir", straight, "--steps", "40")
    code, err = stopped_run(stop, 40)
    check_stop(stop, code, err, "1 process")
    train("--workdir", stop, "--steps", "40", "--resume")
    same_weights(straight, stop, "1 process: stopped and resumed equals straight (bitwise)")

    # --nproc 2, SIGTERM to every rank (Slurm) and to one rank
    straight2, all2, one2 = (os.path.join(tmp, n) for n in ("straight2", "all2", "one2"))
    train("--workdir", straight2, "--steps", "300", "--nproc", "2")
    code, err = stopped_run(all2, 300, nproc=2, targets="all", after=5)
    check_stop(all2, code, err, "nproc 2, every rank signalled")
    train("--workdir", all2, "--steps", "300", "--nproc", "2", "--resume")
    same_weights(straight2, all2, "nproc 2: stopped and resumed equals straight (bitwise)")
    code, err = stopped_run(one2, 300, nproc=2, targets="one", after=5)
    check_stop(one2, code, err, "nproc 2, one rank signalled")

    # --nproc 2, the signal to the launcher alone (a terminal's Ctrl-C, kill, a scheduler
    # signalling the batch script): it passes a stop notice on to every rank
    term, intr = (os.path.join(tmp, n) for n in ("launcher_term", "launcher_int"))
    code, err = stopped_run(term, 300, nproc=2, after=5)
    check_stop(term, code, err, "nproc 2, SIGTERM to the launcher")
    train("--workdir", term, "--steps", "300", "--nproc", "2", "--resume")
    same_weights(straight2, term, "nproc 2, SIGTERM to the launcher: resumed equals straight (bitwise)")
    code, err = stopped_run(intr, 300, nproc=2, after=5, sig=signal.SIGINT)
    check_stop(intr, code, err, "nproc 2, SIGINT to the launcher", sig="SIGINT")

    # a rank killed: the job ends within seconds, and the launcher says which rank and how
    dead = os.path.join(tmp, "dead")
    p = subprocess.Popen([REDCO, "train", *BASE, "--workdir", dead, "--steps", "3000", "--nproc", "2"],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env={**os.environ, **MPI_ENV})
    for line in p.stderr:
        if line.startswith("step 5/"):
            break
    pids = ranks(p.pid, 2)
    check(len(pids) == 2, f"two ranks under the launcher: {pids}")
    t0 = time.time()
    os.kill(pids[-1], signal.SIGKILL)
    try:
        _, rest = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        _, rest = p.communicate()
    print(f"a killed rank: the job ended {time.time() - t0:.1f} s later")
    check(p.returncode != 0, "a killed rank: the job failed")
    check("rank 1" in rest and "signal 9" in rest, f"a killed rank: the launcher names rank 1 and signal 9:\n{rest[-1500:]}")

    # a hung rank: the watchdog ends the job naming the operation and the rank
    hung = os.path.join(tmp, "hung")
    t0 = time.time()
    try:
        r = subprocess.run([REDCO, "train", *BASE, "--workdir", hung, "--steps", "20", "--nproc", "2",
                            "--collective-timeout", "2"], capture_output=True, text=True, timeout=30,
                           env={**os.environ, **MPI_ENV, "REDCO_TEST_SLEEP_RANK": "1", "REDCO_TEST_SLEEP_STEP": "3"})
        code, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired as e:
        code, err = None, (e.stderr or b"").decode()
    print(f"a hung rank: the job ended {time.time() - t0:.1f} s after its start")
    check(code not in (0, None), f"a hung rank: the job failed within 30 s (status {code})")
    watch = [ln for ln in err.splitlines() if "collective timeout: MPI_" in ln]
    check(len(watch) == 1 and "rank 1 did not arrive" in watch[0],
          f"a hung rank: one line naming the operation and rank 1:\n{err[-1500:]}")

    # a hung rank in a dp 2 x mp 2 mesh: the others wait in collectives of different groups;
    # one line names the rank in no collective and where each rank that did not arrive waits
    hung4 = os.path.join(tmp, "hung4")
    try:
        r = subprocess.run([REDCO, "train", *BASE, "--workdir", hung4, "--steps", "20", "--nproc", "4", "--mp", "2",
                            "--collective-timeout", "2"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, **MPI_ENV, "REDCO_TEST_SLEEP_RANK": "3", "REDCO_TEST_SLEEP_STEP": "3"})
        code, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired as e:
        code, err = None, (e.stderr or b"").decode()
    check(code not in (0, None), f"a hung rank of 4: the job failed within 60 s (status {code})")
    watch = [ln for ln in err.splitlines() if "collective timeout: MPI_" in ln]
    check(len(watch) == 1, f"a hung rank of 4: one watchdog line:\n{err[-2500:]}")
    if watch:
        idle = set(re.findall(r"rank (\d+) did not arrive \(in no collective", watch[0]))
        idle |= set(re.findall(r"in no collective either: rank ([\d, ]+)", watch[0])[0].split(", ")
                    if "either" in watch[0] else [])
        check(idle == {"3"}, f"a hung rank of 4: rank 3, and it alone, is named in no collective: {watch[0]}")
        check("it waits in MPI_" in watch[0] or "rank 3 did not arrive" in watch[0],
              f"a hung rank of 4: a missing rank's own wait is named: {watch[0]}")
    return finish("test_faults")


if __name__ == "__main__":
    sys.exit(main())
