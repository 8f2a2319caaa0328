"""`redco train --nproc 4` across two test hosts (tests/hosts/hosts.sh: network namespaces
joined by a bridge, TCP alone between them, 2 ranks a host):
- mpiexec lays ranks 0, 1 on host 0 and 2, 3 on host 1, so that the model axis of a
  dp 2 x mp 2 mesh stays inside a host and the data axis crosses the network;
- dp 2 x mp 2 over the two hosts equals one process, tensor by tensor (relative L2 1e-5, as
  test_cli_train's meshes on one host), and dp 4 (every collective across hosts) too;
- the bytes host 1 sends per step (the kernel's count on its link, between runs of 5 and 12
  steps) are what `redco plan --ranks-per-host 2` says leave each host, within 10%;
- a checkpoint written across hosts, resumed across hosts, ends where a run never stopped
  does (bitwise);
- a slow link to host 1 (netem delay and rate limit, or the rate limit alone where the kernel
  has no netem) slows the steps and changes no weight (bitwise).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from hostkit import Hosts, rel_diff, token_data, weights
from refkit import check, finish, options


def main():
    opt = options()
    tmp = tempfile.mkdtemp(prefix="redco-hosts-")
    data = token_data(tmp)
    # --no-dropout: the meshes below must equal one process, and dropout's masks differ with
    # the mesh (a key per data-parallel replica, a split tensor's drawn per shard)
    common = ["--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--no-shuffle", "--optimizer", "sgd",
              "--lr", "0.05", "--log-every", "1", "--no-dropout"]
    with Hosts(opt.source, tmp, opt.redco) as hosts:
        # where the ranks run: two on each host, in rank order
        r = hosts.run(0, "mpiexec", "-n", "4", "sh", "-c", 'echo "$OMPI_COMM_WORLD_RANK $(hostname)"')
        placed = dict(line.split() for line in r.stdout.split("\n") if line.strip())
        names = [placed.get(str(k)) for k in range(4)]
        print("ranks on hosts:", names)
        check(r.returncode == 0 and names[0] == names[1] and names[2] == names[3] and names[0] != names[2]
              and None not in names, f"ranks 0, 1 on one host and 2, 3 on the other: {names} {r.stderr[-500:]}")

        # one process (no launcher, host 0) against meshes over both hosts; same global batch
        one = os.path.join(tmp, "one")
        hosts.train(*common, "--steps", "5", "--batch-size", "4", "--workdir", one)
        ref = weights(one)
        sent = {}
        for dp, mp in ((2, 2), (4, 1)):
            d = os.path.join(tmp, f"mesh-{dp}x{mp}")
            t0, tx = time.time(), hosts.tx_bytes(1)
            sent[(dp, mp)] = tx
            hosts.train(*common, "--steps", "5", "--batch-size", str(4 // dp), "--nproc", "4", "--mp", str(mp),
                        "--workdir", d)
            sent[(dp, mp)] = hosts.tx_bytes(1) - tx
            ok = os.path.exists(os.path.join(d, "final"))
            e, worst = rel_diff(weights(d), ref) if ok else (float("inf"), "-")
            print(f"dp {dp} x mp {mp} over 2 hosts: {time.time() - t0:.1f} s, worst tensor {worst}, "
                  f"rel L2 diff {e:.2e}")
            check(e < 1e-5, f"dp {dp} x mp {mp} over 2 hosts: tensor {worst} differs by {e}")

        # a checkpoint written across hosts resumes across hosts, bitwise
        mesh = ["--nproc", "4", "--mp", "2", "--batch-size", "2"]
        straight, half = os.path.join(tmp, "straight"), os.path.join(tmp, "half")
        t0, tx = time.time(), hosts.tx_bytes(1)
        hosts.train(*common, *mesh, "--steps", "12", "--workdir", straight)
        fast, tx = time.time() - t0, hosts.tx_bytes(1) - tx
        hosts.train(*common, *mesh, "--steps", "6", "--workdir", half)
        hosts.train(*common, *mesh, "--steps", "12", "--workdir", half, "--resume")
        a, b = weights(straight), weights(half)
        check(a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a),
              "dp 2 x mp 2 over 2 hosts: resumed weights equal the straight run's (bitwise)")

        # what crosses the network per step: measured on host 1's link against redco plan
        r = subprocess.run([opt.redco, "plan", "--model", "tiny-gpt2", "--mp", "2", "--dp", "2", "--batch-size", "2",
                            "--seq-len", "16", "--ranks-per-host", "2", "--json"], capture_output=True, text=True)
        plan = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
        want = plan.get("hosts", {}).get("data_bytes_host_out", 0) + plan.get("hosts", {}).get("model_bytes_host_out", 0)
        per_step = (tx - sent[(2, 2)]) / 7
        print(f"bytes leaving host 1 per step: {per_step:.0f} measured, {want:.0f} planned "
              f"(model axis across hosts: {plan.get('hosts', {}).get('model_bytes_across')})")
        check(plan.get("hosts", {}).get("model_bytes_across") == 0 and plan["hosts"]["data_group_hosts"] == 2,
              f"plan: the model axis stays inside a host, the data axis spans 2: {plan.get('hosts')}")
        check(want > 0 and 0.9 < per_step / want < 1.1, f"bytes per step leaving host 1: {per_step:.0f} vs {want:.0f}")

        r = subprocess.run([opt.redco, "plan", "--model", "tiny-gpt2", "--mp", "2", "--dp", "2", "--ranks-per-host", "2"],
                           capture_output=True, text=True)
        check("model axis  each group of 2 ranks inside one host" in r.stdout and
              "data axis   each group of 2 ranks spans 2 hosts" in r.stdout, f"plan's text:\n{r.stdout[-800:]}")

        # a slow link to host 1: slower, the same weights
        print(hosts.ctl("slow", "1", "20ms", "10mbit"))
        slow = os.path.join(tmp, "slow")
        t0 = time.time()
        hosts.train(*common, *mesh, "--steps", "12", "--workdir", slow, timeout=240)
        took = time.time() - t0
        print(f"12 steps of dp 2 x mp 2: {fast:.1f} s, {took:.1f} s over the slow link")
        check(took > fast, f"the slow link slows the run: {took:.1f} s vs {fast:.1f} s")
        c = weights(slow)
        check(a.keys() == c.keys() and all(np.array_equal(a[k], c[k]) for k in a),
              "over the slow link: the same weights (bitwise)")
    return finish("test_hosts_mesh")


if __name__ == "__main__":
    sys.exit(main())
