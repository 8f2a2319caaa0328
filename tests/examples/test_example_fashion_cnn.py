"""examples/fashion_cnn: a small CNN on Fashion-MNIST (Debian's dataset-fashion-mnist, which
the setup script installs), run as a user would.
- One pass over 10,000 training images: the accuracy on the 10,000 test images starts near
  chance and ends at 0.70 or more; the trainer logs it as eval/accuracy in log.jsonl.
- The weights do not depend on the mesh: 10 SGD steps in one process, with 2 data-parallel
  processes, with 2 model shards (the convolutions split by the automatic plan) and with
  2 x 2 give the same final/ weights, tensor by tensor (relative L2 < 1e-5). What differs
  between meshes is the order of sums, so results agree to float rounding, and two things
  turn rounding into larger differences, which the test keeps out:
  AdamW's first steps move each weight by about lr times the sign of its gradient, so an
  entry whose gradient is near zero can flip sign (measured at dp 2: 6e-3 relative after 20
  steps at batch 32; SGD: 2e-7); and where two values of a max pooling window are within
  rounding, the gradient goes to another position (mp 2 with SGD: 2.5e-7 after 10 steps,
  1e-4 after 12, 2e-3 after 20). The test accuracy printed after training is the same on
  every mesh (a Predictor made before training used to keep its first model shards).
- On the OpenCL backend 3 SGD steps give the CPU's weights (relative L2 < 1e-5), and 10
  AdamW steps take the test accuracy from chance to 0.6 or more.
"""
import json
import os
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file

from refkit import check, finish, number, options, run, run_mpi



def weights(workdir):
    path = os.path.join(workdir, "final", "model.safetensors")
    check(os.path.exists(path), f"fashion_cnn: no {path}")
    return load_file(path) if os.path.exists(path) else {}


def worst_difference(a, b):
    """(relative L2 difference, name) of the tensor of b farthest from a's"""
    if set(a) != set(b) or not a:
        return float("inf"), f"tensor names {sorted(a)} vs {sorted(b)}"
    return max((float(np.linalg.norm(b[k] - a[k]) / max(np.linalg.norm(a[k]), 1e-30)), k) for k in a)


def one_pass(build, tmp):
    work = os.path.join(tmp, "pass")
    out = run(build, "fashion_cnn", "--train-limit", "10000", "--workdir", work)
    if out is None:
        return
    acc = number(r"before training ([0-9.]+), after ([0-9.]+)", out[0], "fashion_cnn")
    if acc is None:
        return
    print(f"fashion_cnn: test accuracy {acc[0]:.4f} before, {acc[1]:.4f} after one pass over 10k images")
    check(acc[0] < 0.35, f"fashion_cnn: accuracy before training {acc[0]} is far from chance")
    check(acc[1] >= 0.70, f"fashion_cnn: test accuracy {acc[1]} after one pass is below 0.70")
    with open(os.path.join(work, "log.jsonl")) as f:
        logged = [json.loads(line) for line in f]
    accs = [r["eval/accuracy"] for r in logged if "eval/accuracy" in r]
    check(accs and abs(accs[-1] - acc[1]) < 1e-9,
          f"fashion_cnn: log.jsonl's last eval/accuracy {accs[-1:]} is not the printed {acc[1]}")


def meshes(build, tmp):
    common = ["--steps", "10", "--batch", "32", "--optimizer", "sgd", "--lr", "0.05", "--train-limit", "2000",
              "--test-limit", "200"]
    one = os.path.join(tmp, "one")
    out = run(build, "fashion_cnn", *common, "--workdir", one)
    if out is None:
        return
    ref, ref_acc = weights(one), number(r"after ([0-9.]+)", out[0], "fashion_cnn")
    for np_, mp in ((2, 1), (2, 2), (4, 2)):
        work = os.path.join(tmp, f"np{np_}-mp{mp}")
        out = run_mpi(build, "fashion_cnn", np_, *common, "--mp", str(mp), "--workdir", work)
        if out is None:
            continue
        # the Predictor made before training predicts with the trained weights on every mesh
        acc = number(r"after ([0-9.]+)", out[0], f"fashion_cnn np {np_} mp {mp}")
        check(acc == ref_acc, f"fashion_cnn: np {np_} mp {mp}: test accuracy {acc} after training, one process {ref_acc}")
        worst, name = worst_difference(ref, weights(work))
        print(f"fashion_cnn: {np_ // mp} data-parallel x {mp} model shards vs one process: "
              f"worst tensor {name}, relative L2 {worst:.2e}")
        check(worst < 1e-5, f"fashion_cnn: np {np_} mp {mp}: {name} differs from one process by {worst}")


def opencl(build, tmp):
    """3 SGD steps give the CPU's weights; 10 AdamW steps raise the test accuracy. Longer
    runs part: the backends' sums round differently (1e-7), and where two values in a max
    pooling window are that close the gradient goes to a different position (measured with
    SGD: 1e-6 after 3 steps, 1e-5 after 4, 2e-3 after 5)."""
    data = ["--train-limit", "1000", "--test-limit", "200"]
    sgd = ["--steps", "3", "--optimizer", "sgd", "--lr", "0.05", *data]
    cpu, dev = os.path.join(tmp, "cpu"), os.path.join(tmp, "opencl")
    if run(build, "fashion_cnn", *sgd, "--workdir", cpu) is None:
        return
    out = run(build, "fashion_cnn", *sgd, "--device", "opencl", "--workdir", dev)
    if out is None:
        return
    check("on opencl" in out[0], f"fashion_cnn --device opencl did not run on OpenCL: {out[0][-300:]}")
    worst, name = worst_difference(weights(cpu), weights(dev))
    print(f"fashion_cnn: OpenCL vs CPU after 3 SGD steps: worst tensor {name}, relative L2 {worst:.2e}")
    check(worst < 1e-5, f"fashion_cnn: OpenCL's {name} differs from the CPU's by {worst}")
    out = run(build, "fashion_cnn", "--steps", "10", *data, "--device", "opencl")
    acc = number(r"before training ([0-9.]+), after ([0-9.]+)", out[0] if out else "", "fashion_cnn --device opencl")
    print(f"fashion_cnn: OpenCL, 10 AdamW steps: test accuracy {acc}")
    check(acc is not None and acc[1] >= 0.6, f"fashion_cnn: 10 AdamW steps on OpenCL reached accuracy {acc}")


def main():
    args = options()
    with tempfile.TemporaryDirectory() as tmp:
        one_pass(args.build, tmp)
        meshes(args.build, tmp)
        opencl(args.build, tmp)
    return finish("test_example_fashion_cnn")


if __name__ == "__main__":
    sys.exit(main())
