"""examples/ddpg.c (DDPG on Pendulum-v1, environments and replay buffer on the collate side),
run as a user would, and what it must show:
- --check: one actor-only SGD step leaves the critic's weights exactly where they were
  (the critic inside the actor's loss reads them through rc_stop_gradient), while the same
  step without the stop-gradient moves them (> 1e-3), and the actor moves the same in both;
  on the CPU and on --device opencl (whose actor change matches the CPU's to 1e-3);
- one process, seed 1, 10000 steps: the random policy's mean return is that of a random
  Pendulum policy (below -900; ~ -1200), the last 10 training episodes average above -600,
  the trained actor without noise above -400 over 10 episodes, and log.jsonl (--workdir)
  holds ddpg/mean_return for every training episode as printed;
- data parallel: under `mpiexec -n 2` (each rank its own environment and replay buffer)
  6000 steps reach above -400 over the 20 episodes of both ranks;
- OpenCL: a short run (300 steps) on --device opencl runs on the OpenCL backend.
"""
import json
import os
import re
import sys
import tempfile

from refkit import check, finish, number, options, run, run_mpi

FLOAT = r"([-+0-9.e]+|nan|inf)"


def episodes(stdout):
    return [(int(s), float(x)) for s, x in
            re.findall(r"^step (\d+): episodes \d+: mean return " + FLOAT, stdout, re.M)]


def results(stdout, what):
    """(random return, trained return, episodes) of a run"""
    rnd = number(r"random policy: mean episode return " + FLOAT, stdout, what)
    fin = number(r"trained policy \(no noise\): mean episode return " + FLOAT + r" over (\d+) episodes", stdout, what)
    return (rnd[0], fin[0], int(fin[1])) if rnd and fin else None


def stop_gradient(build, *device):
    what = "ddpg --check " + " ".join(device)
    out = run(build, "ddpg", "--check", *device)
    if not out:
        return None
    ch = number(r"with the stop-gradient: critic weights changed by " + FLOAT + r", actor weights by " + FLOAT +
                r"; without it: critic by " + FLOAT + r", actor by " + FLOAT, out[0], what)
    if not ch:
        return None
    print(f"{what}: actor-only step: critic change {ch[0]:.3g} (without the stop-gradient {ch[2]:.3g}), "
          f"actor change {ch[1]:.3g} ({ch[3]:.3g})")
    check(ch[0] == 0, f"{what}: the actor-only step moved the critic's weights by {ch[0]}")
    check(ch[2] > 1e-3, f"{what}: without the stop-gradient the critic moved only {ch[2]}: nothing shown")
    check(ch[1] > 0 and abs(ch[1] - ch[3]) <= 1e-3 * ch[1], f"{what}: actor changes {ch[1]} and {ch[3]}")
    return ch


def single(build, tmp):
    work = os.path.join(tmp, "ddpg-1")
    out = run(build, "ddpg", "--seed", "1", "--steps", "10000", "--workdir", work)
    res = results(out[0], "ddpg") if out else None
    if not res:
        return
    rnd, fin, n = res
    eps = episodes(out[0])
    last = sum(x for _, x in eps[-10:]) / max(1, len(eps[-10:]))
    print(f"ddpg: random policy {rnd:.1f}; {len(eps)} training episodes, the last 10 average {last:.1f}; "
          f"trained actor {fin:.1f} over {n} episodes")
    check(rnd < -900, f"ddpg: the random policy's mean return {rnd} (a random Pendulum policy gets ~ -1200)")
    check(len(eps) == 50 and last > -600, f"ddpg: training episodes {eps}")
    check(fin > -400 and n == 10, f"ddpg: the trained actor's mean return {fin} over {n} episodes")
    with open(os.path.join(work, "log.jsonl")) as f:
        logged = [json.loads(line) for line in f if line.strip()]
    mean = [(r["step"], r["ddpg/mean_return"]) for r in logged if "ddpg/mean_return" in r]
    check(len(mean) == len(eps) and all(s == p[0] and abs(v - p[1]) <= 0.05 + 1e-6 * abs(p[1])
                                        for (s, v), p in zip(mean, eps)),
          f"ddpg: log.jsonl's ddpg/mean_return {mean[:5]}... against the printed {eps[:5]}...")


def data_parallel(build):
    out = run_mpi(build, "ddpg", 2, "--seed", "1", "--steps", "6000")
    res = results(out[0], "ddpg -n 2") if out else None
    if not res:
        return
    rnd, fin, n = res
    print(f"ddpg: mpiexec -n 2: random policy {rnd:.1f}, trained actor {fin:.1f} over {n} episodes")
    check("on 2 rank(s)" in out[0] and n == 20, f"ddpg -n 2: not two ranks:\n{out[0][:300]}")
    check(fin > -400, f"ddpg -n 2: the trained actor's mean return {fin} (random {rnd})")


def opencl(build, cpu_check):
    ch = stop_gradient(build, "--device", "opencl")
    if ch and cpu_check:
        check(abs(ch[1] - cpu_check[1]) <= 1e-3 * cpu_check[1],
              f"ddpg --check: the actor's change on OpenCL {ch[1]} vs the CPU's {cpu_check[1]}")
    out = run(build, "ddpg", "--steps", "300", "--warmup", "200", "--device", "opencl")
    if not out:
        return
    check("(opencl" in out[0] and len(episodes(out[0])) == 1 and results(out[0], "ddpg --device opencl"),
          f"ddpg --device opencl: {out[0][-600:]}")


def main():
    args = options()
    with tempfile.TemporaryDirectory() as tmp:
        cpu_check = stop_gradient(args.build)
        single(args.build, tmp)
        data_parallel(args.build)
        opencl(args.build, cpu_check)
    return finish("test_example_ddpg")


if __name__ == "__main__":
    sys.exit(main())
