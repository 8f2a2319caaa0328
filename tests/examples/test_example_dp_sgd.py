"""examples/dp_sgd.c (DP-SGD of a small CNN on Fashion-MNIST), run on small settings, and
what it must show:
- --check: the per-example gradients of the graph (weights expanded per example, grouped
  convolutions, one rc_backward) equal each example's gradient from a graph of its own
  (relative error < 1e-5); so does their clipped sum at C = the mean norm, against the
  sum made on the host from those gradients (some clipped, some not); one DP-SGD step with
  sigma 0 and C = inf equals one ordinary SGD step on the plain mean loss (weights within
  1e-6);
- a short private run (8192 images, 64 steps, sigma 0.5, C 1): test accuracy >= 0.6; every
  epsilon it prints (and logs to log.jsonl as privacy/epsilon) matches Google's
  dp-accounting RdpAccountant for its (q, sigma, steps, delta) within 1%;
- --epsilon 3: the noise multiplier found reaches epsilon 3 at the end, by the example's
  accountant and by dp-accounting's (within 1%);
- data parallel: the same run under `mpiexec -n 2` ends with the weights of one process
  (final/model.safetensors within 1e-5): the noise is drawn once per step from the seed;
- OpenCL: three steps on --device opencl end with the CPU run's weights (within 1e-4).
"""
import json
import os
import re
import sys
import tempfile

from absl import logging
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from safetensors.numpy import load_file

from refkit import MPI_ENV, check, finish, number, options, run, run_mpi

FLOAT = r"([-+0-9.e]+|inf)"


def ref_epsilon(q, sigma, steps, delta):
    acc = rdp.RdpAccountant()  # default orders, Poisson sampling
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    return acc.get_epsilon(delta)


def weights(workdir):
    return load_file(os.path.join(workdir, "final", "model.safetensors"))


def max_diff(a, b):
    check(sorted(a) == sorted(b), f"dp_sgd: the weights' names differ: {sorted(a)} vs {sorted(b)}")
    return max(float(abs(a[k] - b[k]).max()) for k in a if k in b)


def run_info(stdout, what):
    """(q, clip, sigma, steps, delta) of the run's header, and [(step, accuracy, epsilon)]"""
    head = number(r"q " + FLOAT + r", clip " + FLOAT + r", sigma " + FLOAT + r", (\d+) steps, delta " + FLOAT,
                  stdout, what)
    evals = [(int(s), float(a), float(e)) for s, a, e in
             re.findall(r"^step (\d+)/\d+ \(epoch [0-9.]+\): test accuracy ([0-9.]+), epsilon " + FLOAT, stdout,
                        re.M)]
    check(len(evals) > 0, f"{what}: no evaluation lines in:\n{stdout[-1500:]}")
    return head, evals


def check_epsilons(head, evals, what):
    q, _, sigma, _, delta = head
    for step, _, eps in evals:
        ref = ref_epsilon(q, sigma, step, delta)
        print(f"{what}: step {step}: epsilon {eps:.6g}, dp-accounting {ref:.6g}")
        check(abs(eps - ref) <= 0.01 * ref, f"{what}: epsilon {eps} after {step} steps (q {q}, sigma {sigma}, "
                                            f"delta {delta}); dp-accounting says {ref}")


def self_checks(build):
    out = run(build, "dp_sgd", "--check", "--train-limit", "256")
    if not out:
        return
    grad = number(r"one example at a time: relative error " + FLOAT, out[0], "dp_sgd --check")
    clip = number(r"clipped sum at C = " + FLOAT + r" \((\d+) of (\d+) examples clipped\) vs the same sum made here: "
                  r"relative error " + FLOAT, out[0], "dp_sgd --check")
    if clip:
        print(f"dp_sgd: clipped sum at C = {clip[0]:.4g} ({clip[1]:.0f} of {clip[2]:.0f} clipped): rel. error "
              f"{clip[3]:.2e}")
        check(clip[3] < 1e-5 and 0 < clip[1] < clip[2], f"dp_sgd: clipped sum check {clip}")
    step = number(r"largest weight difference " + FLOAT + r" \(the step moved weights by up to " + FLOAT,
                  out[0], "dp_sgd --check")
    if grad and step:
        print(f"dp_sgd: per-example gradients rel. error {grad[0]:.2e}; DP-SGD (sigma 0, C inf) vs SGD step: "
              f"weights differ by {step[0]:.2e} (step size {step[1]:.2e})")
        check(grad[0] < 1e-5, f"dp_sgd: per-example gradients differ from one-at-a-time ones by {grad[0]}")
        check(step[0] < 1e-6, f"dp_sgd: the DP-SGD step with sigma 0, C inf differs from SGD by {step[0]}")
        check(step[1] > 1e-3, f"dp_sgd: the SGD step moved the weights by only {step[1]}: nothing compared")


def private_run(build, tmp):
    work = os.path.join(tmp, "dp-train")
    out = run(build, "dp_sgd", "--train-limit", "8192", "--test-limit", "1000", "--batch", "128", "--epochs", "1",
              "--sigma", "0.5", "--clip", "1", "--lr", "2", "--eval-every", "32", "--workdir", work)
    if not out:
        return
    head, evals = run_info(out[0], "dp_sgd")
    final = number(r"final test accuracy: ([0-9.]+)", out[0], "dp_sgd")
    if not head or not evals or not final:
        return
    print(f"dp_sgd: test accuracy {final[0]:.4f} after {evals[-1][0]} steps at sigma {head[2]}")
    check(final[0] >= 0.6, f"dp_sgd: test accuracy {final[0]} after a short private run")
    check(head[2] == 0.5 and head[1] == 1 and [e[0] for e in evals] == [32, 64],
          f"dp_sgd: run header {head}, evaluations {evals}")
    check_epsilons(head, evals, "dp_sgd")
    with open(os.path.join(work, "log.jsonl")) as f:
        logged = [json.loads(line) for line in f if line.strip()]
    eps = [(r["step"], r["privacy/epsilon"]) for r in logged if "privacy/epsilon" in r]
    acc = [(r["step"], r["eval/accuracy"]) for r in logged if "eval/accuracy" in r]
    check([s for s, _ in eps] == [32, 64] and all(abs(e - p[2]) <= 1e-5 * p[2] for (_, e), p in zip(eps, evals)),
          f"dp_sgd: log.jsonl's privacy/epsilon {eps} against the printed {evals}")
    check([s for s, _ in acc] == [32, 64], f"dp_sgd: log.jsonl's eval/accuracy {acc}")


def data_parallel(build, tmp):
    os.environ.update(MPI_ENV)  # the one-process run too, as the two-process one
    args = ["--train-limit", "1024", "--test-limit", "200", "--batch", "64", "--steps", "8", "--epsilon", "3",
            "--clip", "0.5"]
    one, two = os.path.join(tmp, "dp-1"), os.path.join(tmp, "dp-2")
    a = run(build, "dp_sgd", *args, "--workdir", one)
    b = run_mpi(build, "dp_sgd", 2, *args, "--workdir", two)
    if not a or not b:
        return
    head, evals = run_info(a[0], "dp_sgd --epsilon 3")
    if head and evals:
        print(f"dp_sgd --epsilon 3: sigma {head[2]:.6g}, epsilon {evals[-1][2]:.6g} after {evals[-1][0]} steps")
        check(evals[-1][0] == 8 and abs(evals[-1][2] - 3) <= 0.01 * 3,
              f"dp_sgd --epsilon 3: epsilon {evals[-1][2]} after {evals[-1][0]} steps")
        check_epsilons(head, evals[-1:], "dp_sgd --epsilon 3")
        check(evals[-1][1] > 0.3, f"dp_sgd --epsilon 3: test accuracy {evals[-1][1]}: did it train?")
    d = max_diff(weights(one), weights(two))
    print(f"dp_sgd: mpiexec -n 2 vs one process: weights differ by {d:.2e}")
    check(d <= 1e-5, f"dp_sgd: data-parallel weights differ from one process's by {d}")


def opencl(build, tmp):
    args = ["--train-limit", "256", "--test-limit", "64", "--batch", "32", "--steps", "3", "--sigma", "1"]
    cpu, dev = os.path.join(tmp, "dp-cpu"), os.path.join(tmp, "dp-opencl")
    if not run(build, "dp_sgd", *args, "--workdir", cpu) or \
            not run(build, "dp_sgd", *args, "--device", "opencl", "--workdir", dev):
        return
    d = max_diff(weights(cpu), weights(dev))
    print(f"dp_sgd: --device opencl vs cpu after 3 steps: weights differ by {d:.2e}")
    check(d <= 1e-4, f"dp_sgd: OpenCL weights differ from the CPU's by {d}")


def main():
    args = options()
    logging.set_verbosity(logging.ERROR)  # dp-accounting's notes on fractional orders it skips
    with tempfile.TemporaryDirectory() as tmp:
        self_checks(args.build)
        private_run(args.build, tmp)
        data_parallel(args.build, tmp)
        opencl(args.build, tmp)
    return finish("test_example_dp_sgd")


if __name__ == "__main__":
    sys.exit(main())
