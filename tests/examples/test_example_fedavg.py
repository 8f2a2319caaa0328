"""examples/fedavg: federated averaging on Fashion-MNIST (Debian's dataset-fashion-mnist,
which the setup script installs), run as a user would.
- One client, one round of one local epoch, SGD: the averaged weights are those of ordinary
  training with the same settings (--plain: one trainer over all the images, whose final/
  holds the same weights), relative L2 < 1e-6 per tensor; so are one client's 2 rounds of
  2 epochs and 4 epochs of plain training (a client's trainer continues across rounds).
- 4 clients on the label split (each sees 2 or 3 of the 10 classes; together all of
  them; the iid split: 1/4 of the images, of all classes, each): after 3 rounds the averaged model's accuracy on the joint test set is above every
  client's local model's, by 0.1 or more; log.jsonl has the printed figures.
- Clients as MPI ranks: mpiexec -n 2 with 2 clients, and with 4 (2 a process), give the
  averaged weights (1e-6) and the printed accuracies of the same clients run in turn in one
  process.
- --device opencl: 2 clients, 1 round give the CPU's weights (relative L2 < 1e-5).
"""
import json
import os
import re
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file

from refkit import MPI_ENV, check, finish, options, run, run_mpi



def weights(path):
    check(os.path.exists(path), f"fedavg: no {path}")
    return load_file(path) if os.path.exists(path) else {}


def worst_difference(a, b):
    """(relative L2 difference, name) of the tensor of b farthest from a's"""
    if set(a) != set(b) or not a:
        return float("inf"), f"tensor names {sorted(a)} vs {sorted(b)}"
    return max((float(np.linalg.norm(b[k] - a[k]) / max(np.linalg.norm(a[k]), 1e-30)), k) for k in a)


def rounds(stdout):
    """[(local accuracies, averaged accuracy)] of the printed rounds"""
    out = []
    for m in re.finditer(r"^round \d+: local accuracy ([0-9. ]+), averaged ([0-9.]+)$", stdout, re.M):
        out.append(([float(x) for x in m.group(1).split()], float(m.group(2))))
    return out


def fedavg(build, tmp, name, *args):
    """runs fedavg with --workdir tmp/name; (stdout, weights) or None"""
    work = os.path.join(tmp, name)
    out = run(build, "fedavg", *args, "--workdir", work)
    return None if out is None else (out[0], weights(os.path.join(work, "model.safetensors")))


def one_client(build, tmp):
    data = ["--train-limit", "2000", "--test-limit", "500", "--optimizer", "sgd", "--lr", "0.05"]
    for r, e in ((1, 1), (2, 2)):
        runs = ["--rounds", str(r), "--local-epochs", str(e), *data]
        fed = fedavg(build, tmp, f"one-{r}-{e}", "--clients", "1", *runs)
        plain = fedavg(build, tmp, f"plain-{r}-{e}", "--plain", *runs)
        if fed is None or plain is None:
            continue
        worst, name = worst_difference(plain[1], fed[1])
        print(f"fedavg: one client, {r} round(s) of {e} epoch(s) vs plain training: worst tensor {name}, "
              f"relative L2 {worst:.2e}")
        check(worst < 1e-6, f"fedavg: one client, R {r} E {e}: {name} differs from plain training by {worst}")
        final = weights(os.path.join(tmp, f"plain-{r}-{e}", "final", "model.safetensors"))
        worst, name = worst_difference(final, plain[1])
        check(worst < 1e-6, f"fedavg --plain: model.safetensors' {name} is not the trainer's final/ ({worst})")
        acc = re.search(r"accuracy ([0-9.]+)", plain[0])
        check(acc is not None and rounds(fed[0]) and rounds(fed[0])[-1][1] == float(acc.group(1)),
              f"fedavg: one client's accuracy {rounds(fed[0])[-1:]} is not plain training's {acc and acc.group(1)}")


def label_split(build, tmp):
    out = fedavg(build, tmp, "labels", "--clients", "4", "--split", "labels", "--rounds", "3",
                 "--train-limit", "12000", "--test-limit", "2000", "--seed", "1")
    if out is None:
        return
    stdout = out[0]
    clients = [(int(n), {int(c) for c in cls.split()})
               for n, cls in re.findall(r"^client \d+: (\d+) images, classes ([0-9 ]+)$", stdout, re.M)]
    print("fedavg: label split:", "; ".join(f"{n} images of classes {sorted(c)}" for n, c in clients))
    check(len(clients) == 4 and all(2 <= len(c) <= 3 for _, c in clients),
          f"fedavg: the label split is not 4 clients of 2 or 3 classes: {clients}")
    check(sum(n for n, _ in clients) == 12000 and set().union(*(c for _, c in clients)) == set(range(10)),
          f"fedavg: the label split does not deal out all 12000 images of the 10 classes: {clients}")
    rs = rounds(stdout)
    check(len(rs) == 3, f"fedavg: {len(rs)} rounds printed, not 3:\n{stdout[-1500:]}")
    if not rs:
        return
    for i, (local, avg) in enumerate(rs):
        print(f"fedavg: round {i + 1}: local models {' '.join(f'{a:.4f}' for a in local)}, averaged {avg:.4f}")
    local, avg = rs[-1]
    check(len(local) == 4 and avg > max(local) + 0.1,
          f"fedavg: after 3 rounds the averaged model's accuracy {avg} does not beat every local model's {local} by 0.1")
    with open(os.path.join(tmp, "labels", "log.jsonl")) as f:
        logged = [json.loads(line) for line in f]
    last = logged[-1] if logged else {}
    check(last.get("step") == 3 and abs(last.get("fedavg/accuracy", -1) - avg) < 1e-9 and
          all(abs(last.get(f"client{k}/accuracy", -1) - a) < 1e-9 for k, a in enumerate(local)),
          f"fedavg: log.jsonl's last record {last} is not the printed round 3")


def iid_split(build, tmp):
    out = fedavg(build, tmp, "iid", "--clients", "4", "--rounds", "1", "--train-limit", "4000", "--test-limit", "200")
    clients = re.findall(r"^client \d+: (\d+) images, classes ([0-9 ]+)$", out[0] if out else "", re.M)
    check(len(clients) == 4 and all(n == "1000" and len(c.split()) == 10 for n, c in clients),
          f"fedavg: the iid split of 4000 images is not 4 clients of 1000 images of all 10 classes: {clients}")


def mpi_ranks(build, tmp):
    common = ["--split", "labels", "--rounds", "2", "--train-limit", "3000", "--test-limit", "1000"]
    os.environ.update(MPI_ENV)  # the in-turn runs too, as the MPI ones
    for k in (2, 4):
        turn = fedavg(build, tmp, f"turn-{k}", "--clients", str(k), *common)
        work = os.path.join(tmp, f"mpi-{k}")
        out = run_mpi(build, "fedavg", 2, "--clients", str(k), *common, "--workdir", work)
        if turn is None or out is None:
            continue
        worst, name = worst_difference(turn[1], weights(os.path.join(work, "model.safetensors")))
        print(f"fedavg: {k} clients on 2 MPI ranks vs in turn in one process: worst tensor {name}, "
              f"relative L2 {worst:.2e}")
        check(worst < 1e-6, f"fedavg: {k} clients on 2 ranks: {name} differs from in turn by {worst}")
        check(rounds(out[0]) == rounds(turn[0]) and len(rounds(turn[0])) == 2,
              f"fedavg: {k} clients on 2 ranks printed {rounds(out[0])}, in turn {rounds(turn[0])}")


def opencl(build, tmp):
    args = ["--clients", "2", "--split", "labels", "--rounds", "1", "--train-limit", "640", "--test-limit", "200"]
    cpu = fedavg(build, tmp, "cpu", *args)
    dev = fedavg(build, tmp, "opencl", *args, "--device", "opencl")
    if cpu is None or dev is None:
        return
    check("on opencl" in dev[0], f"fedavg --device opencl did not run on OpenCL: {dev[0][:300]}")
    worst, name = worst_difference(cpu[1], dev[1])
    print(f"fedavg: OpenCL vs CPU, 2 clients, 1 round: worst tensor {name}, relative L2 {worst:.2e}")
    check(worst < 1e-5, f"fedavg: OpenCL's {name} differs from the CPU's by {worst}")


def main():
    args = options()
    with tempfile.TemporaryDirectory() as tmp:
        one_client(args.build, tmp)
        label_split(args.build, tmp)
        iid_split(args.build, tmp)
        mpi_ranks(args.build, tmp)
        opencl(args.build, tmp)
    return finish("test_example_fedavg")


if __name__ == "__main__":
    sys.exit(main())
