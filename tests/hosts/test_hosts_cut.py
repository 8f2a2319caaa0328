"""A link cut mid-training across two test hosts (tests/hosts/hosts.sh): `redco train
--nproc 4 --mp 2` from host 0, ranks 2 and 3 on host 1, --collective-timeout 3; after step 10
the port of host 1 on the bridge goes down (`ip link set ... down`):
- the watchdog prints one line naming the collective, the ranks that did not arrive, host 1
  by name and address, and that it is unreachable (not hung);
- the command returns non-zero within the timeout and a few seconds, though mpiexec cannot
  reach host 1's daemon, and no process of the job is left on host 0;
- the last checkpoint is intact, and once the link is back a resume across both hosts ends
  with the weights of a run never cut (bitwise).
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from hostkit import Hosts, token_data, weights
from refkit import check, finish, options

TIMEOUT = 5


def main():
    opt = options()
    tmp = tempfile.mkdtemp(prefix="redco-hosts-cut-")
    data = token_data(tmp)
    args = ["--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--no-shuffle", "--batch-size", "2",
            "--nproc", "4", "--mp", "2", "--steps", "60", "--save-every", "5", "--log-every", "1",
            "--collective-timeout", str(TIMEOUT)]
    with Hosts(opt.source, tmp, opt.redco) as hosts:
        straight, cut = os.path.join(tmp, "straight"), os.path.join(tmp, "cut")
        hosts.train(*args, "--workdir", straight)

        p = subprocess.Popen(hosts.argv(0, opt.redco, "train", *args, "--workdir", cut), stderr=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, text=True, env=hosts.env)
        lines = []
        for line in p.stderr:
            lines.append(line)
            if line.startswith("step 10/"):
                break
        hosts.ctl("cut", "1")
        t0 = time.time()
        try:
            _, rest = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            _, rest = p.communicate()
        took = time.time() - t0
        err = "".join(lines) + rest
        print(f"link cut: the command returned {p.returncode} {took:.1f} s later")
        check(p.returncode not in (0, None, -9), f"the cut run failed on its own (status {p.returncode}):\n{err[-2000:]}")
        check(took < TIMEOUT + 12, f"the cut run ended within the timeout and seconds: {took:.1f} s")
        said = [ln for ln in err.splitlines() if ln.startswith("redco")]
        print("\n".join(said))
        check(len(said) == 1, f"one line from redco:\n{err[-2000:]}")
        host1 = open(os.path.join(hosts.dir, "names")).read().strip() + "-1"
        line = said[0] if said else ""
        check("collective timeout: MPI_" in line and f"host {host1} (10.99.0.2) unreachable" in line and
              "ranks 2, 3" in line and "hung" not in line.split("unreachable")[0],
              f"the line names the collective, host 1 unreachable and its ranks: {line}")
        check("MPI_ABORT" not in err and "mpiexec" not in err, f"no page from mpiexec:\n{err[-2000:]}")
        left = subprocess.run(["ip", "netns", "pids", open(os.path.join(hosts.dir, "names")).read().strip() + "-0"],
                              capture_output=True, text=True).stdout.split()
        check(not left, f"no process left on host 0: {left}")

        # the last checkpoint is whole, and a resume after the link returns ends as the straight run
        with open(os.path.join(cut, "last_checkpoint")) as f:
            last = f.read().strip()
        print("last checkpoint after the cut:", last)
        check(last.startswith("checkpoint-") and int(last.split("-")[1]) >= 10, f"last_checkpoint: {last}")
        ck = weights(cut, last)
        check(len(ck) > 0 and all(np.isfinite(v).all() for v in ck.values()), f"{last} reads back whole")
        hosts.ctl("mend", "1")
        hosts.train(*args, "--workdir", cut, "--resume")
        a, b = weights(straight), weights(cut)
        check(a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a),
              "resumed after the link returned: the weights of the run never cut (bitwise)")
    return finish("test_hosts_cut")


if __name__ == "__main__":
    sys.exit(main())
