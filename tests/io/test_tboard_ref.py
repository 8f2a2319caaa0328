"""TensorBoard's own reader loads redco's event files with the logged scalars."""
import argparse
import os
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    ap = argparse.ArgumentParser()
    for a in ("--redco", "--build", "--source"):
        ap.add_argument(a)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([os.path.join(args.build, "test_tboard"), "--write", d], check=True)
        acc = EventAccumulator(d)
        acc.Reload()
        tags = sorted(acc.Tags()["scalars"])
        loss = [(e.step, round(e.value, 6)) for e in acc.Scalars("train/loss")]
        lr = [(e.step, round(e.value, 9)) for e in acc.Scalars("train/lr")]
    ok = tags == ["train/loss", "train/lr"] and loss == [(s, round(4.0 / s, 6)) for s in range(1, 6)] \
        and lr == [(s, round(float.fromhex((1e-3 * s).hex()), 9)) for s in range(1, 6)]
    print("tags", tags, "loss", loss)
    print(f"test_tboard_ref: {1 if ok else 0} passed, {0 if ok else 1} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
