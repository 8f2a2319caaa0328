"""Datasets against NumPy and Hugging Face tokenizers.

1. .npy files NumPy writes (int32, uint16, int64; format versions 1.0, 2.0, 3.0) read back
   in redco with the same dtype and values; a 2-D one is refused.
2. rc_epoch_order equals the algorithm data.h documents (splitmix64-based rc_rng, then
   Fisher-Yates with rejection sampling), re-implemented here.
3. The token caches redco writes for a .txt (read in small chunks) and a {"text"} .jsonl
   load in NumPy as uint16 and hold the ids Hugging Face `tokenizers` gives for GPT-2
   (documents of the .jsonl each followed by <|endoftext|>).
Uses build/test_dataset's helper modes (--dump, --order, --cache).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from tokenizers import Tokenizer

MASK = (1 << 64) - 1
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL", what)


def run(helper, *args):
    p = subprocess.run([helper, *map(str, args)], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


# ---- 1. .npy files from NumPy -------------------------------------------------------------

def check_npy(helper, tmp):
    rng = np.random.default_rng(0)
    for dtype in (np.int32, np.uint16, np.int64):
        for version in ((1, 0), (2, 0), (3, 0)):
            n = 1000 + version[0]
            arr = rng.integers(0, 50257, size=n).astype(dtype)
            if dtype == np.int64:
                arr[0] = (1 << 40) + 5      # beyond 32 bits: read as int64
            path = os.path.join(tmp, f"a_{np.dtype(dtype).name}_{version[0]}.npy")
            with open(path, "wb") as f:
                np.lib.format.write_array(f, arr, version=version)
            rc, out, err = run(helper, "--dump", path)
            what = f"npy {np.dtype(dtype).name} v{version[0]}.{version[1]}"
            if rc != 0:
                check(False, f"{what}: exit {rc}: {err.strip()}")
                continue
            lines = out.split()
            check(lines[0] == np.dtype(dtype).name and int(lines[1]) == n,
                  f"{what}: header read as {lines[:2]}")
            got = np.array([int(x) for x in lines[2:]], dtype=np.int64)
            check(np.array_equal(got, arr.astype(np.int64)), f"{what}: values differ")
    path = os.path.join(tmp, "two_d.npy")
    np.save(path, np.zeros((2, 3), dtype=np.int32))
    rc, out, err = run(helper, "--dump", path)
    check(rc != 0 and "1-D" in err, f"2-D .npy refused (exit {rc}: {err.strip()})")
    path = os.path.join(tmp, "f4.npy")
    np.save(path, np.zeros(4, dtype=np.float32))
    rc, out, err = run(helper, "--dump", path)
    check(rc != 0 and "'<f4'" in err, f"float .npy refused (exit {rc}: {err.strip()})")


# ---- 2. epoch order ---------------------------------------------------------------------

def hash64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def epoch_order(n, seed, epoch):
    key = hash64(seed)                                         # rc_rng_new
    key = hash64(key ^ hash64((epoch + 0x632BE59BD9B4E019) & MASK) ^ hash64(0))  # rc_rng_fold
    counter = 0
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        m = i + 1
        rem = (1 << 64) % m
        while True:
            x = hash64(key ^ hash64(counter))                  # rc_rng_next_u64
            counter += 1
            if rem == 0 or x < (1 << 64) - rem:
                break
        j = x % m
        order[i], order[j] = order[j], order[i]
    return order


def check_order(helper):
    for n, seed, epoch in ((1000, 42, 0), (1000, 42, 3), (37, 1, 5), (2, 7, 0)):
        rc, out, err = run(helper, "--order", n, seed, epoch)
        got = [int(x) for x in out.split()]
        check(rc == 0 and got == epoch_order(n, seed, epoch),
              f"epoch order n={n} seed={seed} epoch={epoch} differs from the documented algorithm")


# ---- 3. token caches against Hugging Face tokenizers --------------------------------------

def check_caches(helper, tmp, data):
    gpt2 = os.path.join(data, "gpt2")
    hf = Tokenizer.from_file(os.path.join(gpt2, "tokenizer.json"))
    with open(os.path.join(data, "moby_dick.txt"), "rb") as f:
        raw = f.read()
    text = raw[300000:300000 + 60000].decode("utf-8", errors="ignore")
    txt = os.path.join(tmp, "corpus.txt")
    with open(txt, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    rc, out, err = run(helper, "--cache", txt, gpt2, 2048)
    if rc != 0:
        check(False, f".txt cache: exit {rc}: {err.strip()}")
    else:
        cache, status, chunks, unsafe = out.split()
        check(os.path.dirname(cache) == tmp and os.path.basename(cache).startswith("corpus.txt.")
              and cache.endswith(".npy"), f"cache name {cache}")
        check(int(status) == 2 and int(chunks) > 10 and int(unsafe) == 0,
              f".txt cache status {status}, chunks {chunks}, unsafe cuts {unsafe}")
        ids = np.load(cache, mmap_mode="r")
        want = hf.encode(text).ids
        check(ids.dtype == np.uint16 and ids.ndim == 1, f".txt cache dtype {ids.dtype}")
        check(ids.tolist() == want, f".txt cache: {len(ids)} ids vs {len(want)} from tokenizers")
        rc, out, err = run(helper, "--cache", txt, gpt2, 2048)
        check(rc == 0 and out.split()[1] == "1", f"second open hits the cache: {out.strip()}")

    with open(os.path.join(data, "austen_excerpt.txt"), encoding="utf-8", errors="ignore") as f:
        austen = f.read(40000)
    docs = [p.strip() for p in austen.split("\n\n") if p.strip()][:200]
    check(len(austen) == 40000, "data/austen_excerpt.txt is shorter than 40000 characters")
    jl = os.path.join(tmp, "docs.jsonl")
    with open(jl, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    rc, out, err = run(helper, "--cache", jl, gpt2, 0)
    if rc != 0:
        check(False, f".jsonl cache: exit {rc}: {err.strip()}")
    else:
        ids = np.load(out.split()[0])
        want = []
        for d in docs:
            want += hf.encode(d).ids + [50256]
        check(ids.dtype == np.uint16 and ids.tolist() == want,
              f".jsonl cache: {len(ids)} ids vs {len(want)} from tokenizers")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redco")
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    helper = os.path.join(a.build, "test_dataset")
    if not os.path.exists(helper):
        print(f"FAIL: {helper} not built")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        check_npy(helper, tmp)
        check_order(helper)
        check_caches(helper, tmp, os.path.join(a.source, "data"))
    print(f"dataset ref: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
