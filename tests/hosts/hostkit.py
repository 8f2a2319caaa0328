"""What the tests across test hosts share (tests/hosts/test_*.py import it; not a test):
- Hosts(source): two hosts made by hosts.sh (network namespaces joined by a bridge), set
  up on entry and torn down on exit (also when the test fails); hosts.train(...) runs
  `redco train ... --nproc N` from host 0, mpiexec starting the ranks on both hosts over
  TCP alone (2 slots a host: ranks 0, 1 on host 0, ranks 2, 3 on host 1);
- rel_diff(a, b): the largest relative L2 difference over tensors, as test_cli_train's;
- token_data(dir): the token file the tests train on.
A machine where namespaces cannot be made fails the test with hosts.sh's line."""
import os
import subprocess
import sys

import numpy as np
from safetensors.numpy import load_file

from refkit import MPI_ENV, check

ZERO_RMS = 1e-6  # as CHECK_ZERO_RMS in tests/kit/check.h


def rel_diff(a, b):
    """max over tensors of ||a - b|| / max(||b||, ZERO_RMS sqrt(size)); inf when the names
    or shapes differ or a value is NaN"""
    if set(a) != set(b) or any(a[k].shape != b[k].shape for k in b) or not b:
        return float("inf"), "(different tensors)"
    worst, name = 0.0, None
    for k in sorted(b):
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        num, den = float(np.linalg.norm(x - y)), float(np.linalg.norm(y))
        e = 0.0 if num == 0 else num / max(den, ZERO_RMS * np.sqrt(y.size))
        if not e <= worst or name is None:
            worst, name = (e if e == e else float("inf")), k
    return worst, name


def weights(workdir, sub="final"):
    return load_file(os.path.join(workdir, sub, "model.safetensors"))


def token_data(tmp):
    path = os.path.join(tmp, "ids.npy")
    rng = np.random.default_rng(0)
    np.save(path, (np.cumsum(rng.integers(1, 4, size=6000)) % 250).astype(np.int32))
    return path


class Hosts:
    def __init__(self, source, tmp, redco):
        self.script = os.path.join(source, "tests", "hosts", "hosts.sh")
        self.dir = os.path.join(tmp, "hosts")
        self.redco = redco
        self.env = {}

    def __enter__(self):
        r = subprocess.run(["bash", self.script, "up", self.dir, "2"], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL cannot set up the test hosts: {r.stderr.strip()}")
            self.__exit__()
            sys.exit(1)
        env = dict(os.environ)
        env.update(MPI_ENV)
        try:
            with open(os.path.join(self.dir, "env")) as f:
                for line in f:
                    if line.startswith("export "):
                        k, v = line[len("export "):].strip().split("=", 1)
                        env[k] = v
        except (OSError, ValueError) as e:
            print(f"FAIL cannot read the test hosts' settings: {e}")
            self.__exit__()
            sys.exit(1)
        self.env = env
        return self

    def __exit__(self, *exc):
        subprocess.run(["bash", self.script, "down", self.dir], capture_output=True)
        return False

    def argv(self, k, *cmd):
        """the command line running cmd on host k"""
        return ["bash", self.script, "exec", self.dir, str(k), *cmd]

    def run(self, k, *cmd, timeout=120):
        return subprocess.run(self.argv(k, *cmd), capture_output=True, text=True, env=self.env, timeout=timeout)

    def tx_bytes(self, k):
        """bytes host k has sent on its link so far (the kernel's count)"""
        with open(os.path.join(self.dir, "names")) as f:
            ns = f"{f.read().strip()}-{k}"
        r = subprocess.run(["ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/statistics/tx_bytes"],
                           capture_output=True, text=True)
        return int(r.stdout) if r.returncode == 0 else 0

    def ctl(self, *args):
        """hosts.sh cut|mend|slow DIR args...; its output"""
        r = subprocess.run(["bash", self.script, args[0], self.dir, *args[1:]], capture_output=True, text=True)
        check(r.returncode == 0, f"hosts.sh {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout.strip()

    def train(self, *args, timeout=120, expect=0):
        """redco train args from host 0 (add --nproc N to start ranks on both hosts)"""
        r = self.run(0, self.redco, "train", *args, timeout=timeout)
        if expect is not None:
            check(r.returncode == expect, f"train {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")
        return r
