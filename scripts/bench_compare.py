#!/usr/bin/env python3
"""bench_compare.py OLD_BUILD NEW_BUILD [ROUNDS] - the speed of two builds in one run.

Runs bench_gpt2 and bench_generate of both build directories alternately (old, new, old,
new ...) so both see the same machine, keeps the best of the rounds for each figure, and
prints one line per figure: old, new, and new / old (above 1: the new build is slower).
Used to show that a change costs no speed: build the previous commit in a worktree, e.g.
  git worktree add /tmp/base HEAD~1 && cmake -S /tmp/base -B /tmp/base/build && \\
  cmake --build /tmp/base/build --target bench_gpt2 bench_generate
  scripts/bench_compare.py /tmp/base/build build
"""
import json
import os
import subprocess
import sys

# (bench, its arguments, record name, field, lower is better)
FIGURES = [
    ("bench_gpt2", ["3"], "gpt2_124m_fwd_bwd", "step_s"),
    ("bench_gpt2", ["3"], "gpt2_124m_adamw", "update_s"),
    ("bench_gpt2", ["3"], "gpt2_124m_adamw", "train_step_s"),
    ("bench_generate", [], "generate_greedy/gpt2", "ms_per_token"),
    ("bench_generate", [], "generate_greedy/gpt2", "prompt_ms"),
]


def run(build, bench, args):
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    out = subprocess.run([os.path.join(build, bench)] + args, env=env, check=True,
                         capture_output=True, text=True).stdout
    records = {}
    for line in out.splitlines():
        o = json.loads(line)
        key = o["bench"] + ("/" + o["model"] if o["bench"].startswith("generate") else "")
        records[key] = o
    return records


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    best = {}
    benches = sorted({(b, tuple(a)) for b, a, _, _ in FIGURES})
    for _ in range(rounds):
        for bench, args in benches:
            for side, build in (("old", old), ("new", new)):
                records = run(build, bench, list(args))
                for b, a, rec, field in FIGURES:
                    if b == bench and rec in records:
                        k = (side, rec, field)
                        best[k] = min(best.get(k, float("inf")), records[rec][field])
    for _, _, rec, field in FIGURES:
        o, n = best[("old", rec, field)], best[("new", rec, field)]
        print(json.dumps({"figure": rec + "." + field, "old": o, "new": n, "new_over_old": round(n / o, 4)}))


if __name__ == "__main__":
    main()
