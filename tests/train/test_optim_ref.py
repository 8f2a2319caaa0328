"""redco's AdamW equals torch.optim.AdamW (decoupled weight decay) step by step."""
import argparse
import os
import subprocess
import sys

import torch


def main():
    ap = argparse.ArgumentParser()
    for a in ("--redco", "--build", "--source"):
        ap.add_argument(a)
    args = ap.parse_args()
    out = subprocess.run([os.path.join(args.build, "test_optim"), "--adamw"], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    got = [[float(x) for x in line.split()] for line in out if line.strip()]
    w = torch.tensor([1.0, -1.0, 0.5, 3.0], requires_grad=True)
    opt = torch.optim.AdamW([w], lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    target = torch.arange(4.0)
    scale = torch.arange(1.0, 5.0)
    worst = 0.0
    for step in range(5):
        opt.zero_grad()
        ((w - target) ** 2 * scale).sum().backward()
        opt.step()
        worst = max(worst, (w.detach() - torch.tensor(got[step])).abs().max().item())
    ok = len(got) == 5 and worst < 1e-6
    print(f"adamw vs torch: max abs difference over 5 steps {worst:.3g}")
    print(f"test_optim_ref: {1 if ok else 0} passed, {0 if ok else 1} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
