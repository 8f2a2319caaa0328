"""16-bit safetensors files against torch and safetensors (the reference libraries).

(a) BF16 and F16 tensors written by redco (test_safetensors --write-half: f32 values
    rounded by redco's converters) load in safetensors.torch as torch.bfloat16 / float16
    with the same 16-bit words, and those words are what torch's own rounding of the same
    f32 values gives (round to nearest even, overflow to inf, f16 subnormals);
(b) BF16 and F16 tensors written by torch (random values, specials: infinities, NaN, -0,
    subnormals, the largest values) read in redco (test_safetensors --dump-half) into their
    own dtype bit for bit, and into f32 as torch's .float() widens them.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file

failures = []
passed = 0


def check(ok, what):
    global passed
    if ok:
        passed += 1
    else:
        failures.append(what)
        print("FAIL", what)


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def words(t):
    """the 16-bit words of a bf16 / f16 tensor as uint16"""
    return t.contiguous().view(torch.int16).numpy().view(np.uint16).reshape(-1)


def part_a(build, tmp):
    path = os.path.join(tmp, "redco_half.safetensors")
    known = json.loads(run([os.path.join(build, "test_safetensors"), "--write-half", path]))
    tensors = load_file(path)
    src = torch.from_numpy(np.array(known["f32"], dtype=np.uint32).view(np.float32))
    for name, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        t = tensors[name]
        check(t.dtype == dtype and list(t.shape) == [8, len(known["f32"]) // 8], f"{name}: dtype {t.dtype}, shape {list(t.shape)}")
        got = words(t)
        check(np.array_equal(got, np.array(known[name], dtype=np.uint16)), f"{name}: torch reads other words than redco wrote")
        want = words(src.to(dtype))
        bad = np.nonzero(got != want)[0]
        check(len(bad) == 0, f"{name}: redco's rounding differs from torch's at {bad[:5].tolist()} "
              f"(f32 {src[bad[:5]].tolist()}: redco {got[bad[:5]].tolist()}, torch {want[bad[:5]].tolist()})")


def part_b(build, tmp):
    path = os.path.join(tmp, "torch_half.safetensors")
    g = torch.Generator().manual_seed(3)
    specials = torch.tensor([0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"),
                             65504.0, 6e-8, 1e-5, -3e-6, 3.0e38, 1e-40])
    x = torch.cat([specials, torch.randn(997, generator=g) * 10 ** torch.randint(-6, 5, (997,), generator=g)])
    tensors = {"w.bf16": x.to(torch.bfloat16).reshape(10, 101),
               "w.f16": x.to(torch.float16).reshape(1010),
               "other": torch.arange(6, dtype=torch.float32)}
    save_file(tensors, path)
    lines = [json.loads(l) for l in run([os.path.join(build, "test_safetensors"), "--dump-half", path]).splitlines()]
    got = {l["name"]: l for l in lines}
    check(sorted(got) == ["w.bf16", "w.f16"], f"dumped tensors {sorted(got)}")
    for name in ("w.bf16", "w.f16"):
        if name not in got:
            continue
        t = tensors[name]
        check(np.array_equal(np.array(got[name]["words"], dtype=np.uint16), words(t)), f"{name}: words differ from torch's")
        f = np.array(got[name]["f32"], dtype=np.uint32)
        want = t.float().reshape(-1).numpy().view(np.uint32)
        nan = np.isnan(want.view(np.float32))
        ok = np.array_equal(np.isnan(f.view(np.float32)), nan) and np.array_equal(f[~nan], want[~nan])
        check(ok, f"{name}: widened to f32 differs from torch's .float()")


def main():
    ap = argparse.ArgumentParser()
    for a in ("--redco", "--build", "--source"):
        ap.add_argument(a)
    args = ap.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="redco_half_ref_") as tmp:
        for part in (part_a, part_b):
            try:
                part(args.build, tmp)
            except Exception as e:  # a crash of one part is a failure, not a skip
                check(False, f"{part.__name__} raised {type(e).__name__}: {e}")
    print(f"test_half_ref: {passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
