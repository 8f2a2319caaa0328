"""examples/ppo.c (PPO on CartPole-v1, the environments on the collate side), run as a user
would, and what it must show:
- one process, seed 1, 40 iterations of 512 transitions: the uniformly random policy's
  mean episode return is that of a random CartPole policy (10 .. 40; ~22), the trained
  greedy policy's is at least 200 and at least 5 times the random one's, the iterations'
  mean returns rise (the last three above the first three), and log.jsonl (--workdir) holds
  ppo/mean_return for every iteration as printed;
- data parallel: under `mpiexec -n 2` (each rank its own environments, seeded by rank) 30
  iterations reach a greedy return of at least 200 over the 16 episodes of both ranks;
- OpenCL: three iterations on --device opencl run on the OpenCL backend, and the first
  iteration (the initial weights acting) returns what the CPU run's does, to 1%.
"""
import json
import os
import re
import sys
import tempfile

from refkit import check, finish, number, options, run, run_mpi

FLOAT = r"([-+0-9.e]+|nan|inf)"


def iterations(stdout):
    return [float(x) for x in re.findall(r"^iteration \d+: mean episode return " + FLOAT, stdout, re.M)]


def results(stdout, what):
    """(random return, trained greedy return, episodes) of a run"""
    rnd = number(r"random policy: mean episode return " + FLOAT, stdout, what)
    fin = number(r"trained policy \(greedy\): mean episode return " + FLOAT + r" over (\d+) episodes", stdout, what)
    return (rnd[0], fin[0], int(fin[1])) if rnd and fin else None


def single(build, tmp):
    work = os.path.join(tmp, "ppo-1")
    out = run(build, "ppo", "--seed", "1", "--iterations", "40", "--workdir", work)
    if not out:
        return None
    res, its = results(out[0], "ppo"), iterations(out[0])
    if not res:
        return None
    rnd, fin, n = res
    print(f"ppo: random policy {rnd:.1f}, iterations {its[0]:.1f} .. {its[-1]:.1f}, trained greedy {fin:.1f} "
          f"over {n} episodes")
    check(10 <= rnd <= 40, f"ppo: the random policy's mean return {rnd} (a random CartPole policy gets ~22)")
    check(fin >= 200 and fin >= 5 * rnd, f"ppo: the trained policy's mean return {fin} (random {rnd})")
    check(len(its) == 40 and min(its[-3:]) > max(its[:3]), f"ppo: iteration returns {its}")
    with open(os.path.join(work, "log.jsonl")) as f:
        logged = [json.loads(line) for line in f if line.strip()]
    mean = [(r["step"], r["ppo/mean_return"]) for r in logged if "ppo/mean_return" in r]
    check([s for s, _ in mean] == list(range(1, 41)) and
          all(abs(v - p) <= 0.05 + 1e-6 * abs(p) for (_, v), p in zip(mean, its)),
          f"ppo: log.jsonl's ppo/mean_return {mean[:5]}... against the printed {its[:5]}...")
    return its


def data_parallel(build):
    out = run_mpi(build, "ppo", 2, "--seed", "1", "--iterations", "30")
    res = results(out[0], "ppo -n 2") if out else None
    if not res:
        return
    rnd, fin, n = res
    print(f"ppo: mpiexec -n 2: random policy {rnd:.1f}, trained greedy {fin:.1f} over {n} episodes")
    check("on 2 rank(s)" in out[0] and n == 16, f"ppo -n 2: not two ranks of 8 environments:\n{out[0][:300]}")
    check(fin >= 200 and fin >= 5 * rnd, f"ppo -n 2: the trained policy's mean return {fin} (random {rnd})")


def opencl(build, cpu_iterations):
    out = run(build, "ppo", "--seed", "1", "--iterations", "3", "--device", "opencl")
    if not out:
        return
    its = iterations(out[0])
    print(f"ppo: --device opencl, 3 iterations: {its}")
    check("(opencl" in out[0], f"ppo --device opencl: not on the OpenCL backend:\n{out[0][:300]}")
    check(len(its) == 3 and results(out[0], "ppo --device opencl") is not None, f"ppo --device opencl: {its}")
    if cpu_iterations and its:
        check(abs(its[0] - cpu_iterations[0]) <= 0.01 * cpu_iterations[0],
              f"ppo: first iteration's return on OpenCL {its[0]} vs the CPU's {cpu_iterations[0]}")


def main():
    args = options()
    with tempfile.TemporaryDirectory() as tmp:
        its = single(args.build, tmp)
        data_parallel(args.build)
        opencl(args.build, its)
    return finish("test_example_ppo")


if __name__ == "__main__":
    sys.exit(main())
