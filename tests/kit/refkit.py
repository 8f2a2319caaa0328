"""The reference tests' kit (tests/ref/test_*.py import it; not a test itself):
- check(ok, what) counts a check and prints FAIL with `what` when it fails;
- run(build, name, *args, argv=None) runs build/<name> (or argv) and fails a check when the
  program exits non-zero or dies by a signal, whatever it printed;
- number(pattern, text, what) reads the float groups of the first match;
- MPI_ENV: the environment of mpiexec runs on one machine (more processes than cores, as
  root in containers; LeakSanitizer off for OpenMPI's own allocations); run_mpi(build, name,
  n, *args) runs build/<name> under `mpiexec -n n` in it, as run() does;
- options() parses the three options CTest passes (--redco, --build, --source) and
  finish(name) prints the tally and returns the exit status.
"""
import argparse
import os
import re
import shutil
import subprocess
import time

FAILED = []
PASSED = [0]

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
           "OMP_NUM_THREADS": "1", "ASAN_OPTIONS": "detect_leaks=0"}


def check(ok, what):
    if ok:
        PASSED[0] += 1
    else:
        FAILED.append(what)
        print("FAIL", what)


def run(build, name, *args, argv=None):
    """Runs build/<name> with args (or the command argv); returns (stdout, stderr), or None
    with a failed check when it exited non-zero or died by a signal, whatever it printed."""
    argv = argv or [os.path.join(build, name), *args]
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True)
    print(f"{name}: {time.time() - t0:.1f} s")
    if r.returncode != 0:
        check(False, f"{name} {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")
        return None
    return r.stdout, r.stderr


def run_mpi(build, name, n, *args):
    """run() of build/<name> args under `mpiexec -n n`, with MPI_ENV put into this process's
    environment (the runs after it keep it); None and a failed check without mpiexec."""
    mpiexec = shutil.which("mpiexec")
    check(mpiexec is not None, f"{name}: no mpiexec on PATH")
    if mpiexec is None:
        return None
    os.environ.update(MPI_ENV)
    return run(build, f"{name} (mpiexec -n {n})", *args,
               argv=[mpiexec, "-n", str(n), os.path.join(build, name), *args])


def number(pattern, text, what):
    """The float groups of the first match of pattern in text (None when absent)."""
    m = re.search(pattern, text)
    check(m is not None, f"{what}: no line matching {pattern!r} in:\n{text[-1500:]}")
    return [float(x) for x in m.groups()] if m else None


def options():
    ap = argparse.ArgumentParser()
    for a in ("--redco", "--build", "--source"):
        ap.add_argument(a, required=True)
    return ap.parse_args()


def finish(name):
    print(f"{name}: {PASSED[0]} checks passed, {len(FAILED)} failed")
    return 1 if FAILED else 0
