"""`redco privacy` (include/redco/privacy.h: Renyi-DP accounting of the Poisson-subsampled
Gaussian mechanism) against Google's dp-accounting RdpAccountant (the reference venv's
dp-accounting, pinned in scripts/pyref.sh), with its default orders:
- epsilon at delta after N steps for (q, sigma, steps, delta) from q = 1e-4 to 1 and
  sigma = 0.5 to 20, within 1% relative (and the same optimal order);
- --epsilon E: the noise multiplier found reaches at most E in dp-accounting's terms and a
  sigma 0.1% smaller exceeds E there (it is the smallest), within 1% of dp-accounting's
  own bisection;
- bad arguments are usage errors (exit status 2, one line naming the flag).
"""
import argparse
import json
import subprocess
import sys

from absl import logging
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from refkit import FAILED, PASSED, check


def ref_epsilon(q, sigma, steps, delta):
    acc = rdp.RdpAccountant()  # default orders, Poisson sampling
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    return acc.get_epsilon_and_optimal_order(delta)


def redco(exe, *args):
    return subprocess.run([exe, "privacy", *args], capture_output=True, text=True, timeout=300)


def redco_json(exe, *args):
    r = redco(exe, *args, "--json")
    if r.returncode != 0:
        print(r.stderr)
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-300)


CASES = [  # q, sigma, steps, delta
    (0.01, 1.1, 1000, 1e-5),
    (256 / 60000, 1.1, 60 * 60000 // 256, 1e-5),
    (1e-4, 0.5, 10000, 1e-6),
    (1e-4, 20.0, 100000, 1e-5),
    (0.001, 0.7, 50000, 1e-5),
    (0.05, 0.8, 200, 1e-5),
    (0.1, 4.0, 10000, 1e-6),
    (0.3, 2.0, 100, 1e-3),
    (0.5, 1.5, 30, 1e-5),
    (0.9, 3.0, 10, 1e-5),
    (1.0, 1.0, 1, 1e-5),
    (1.0, 5.0, 100, 1e-5),
    (1.0, 20.0, 1000, 1e-8),
    (0.02, 10.0, 5000, 1e-5),
    (0.004, 0.6, 3000, 1e-7),
]


def main():
    ap = argparse.ArgumentParser()
    for a in ("--redco", "--build", "--source"):
        ap.add_argument(a)
    args = ap.parse_args()
    logging.set_verbosity(logging.ERROR)  # dp-accounting's warnings about orders it leaves out
    worst = 0.0
    for q, sigma, steps, delta in CASES:
        ref, ref_order = ref_epsilon(q, sigma, steps, delta)
        j = redco_json(args.redco, "--q", repr(q), "--sigma", repr(sigma), "--steps", str(steps), "--delta",
                       repr(delta))
        if j is None:
            check(False, f"redco privacy q={q} sigma={sigma} steps={steps} delta={delta} failed")
            continue
        d = rel(j["epsilon"], ref)
        worst = max(worst, d)
        print(f"q={q:.6g} sigma={sigma:g} steps={steps} delta={delta:g}: epsilon {j['epsilon']:.8g} "
              f"(order {j['order']:g}), dp-accounting {ref:.8g} (order {ref_order:g}), relative {d:.2e}")
        check(d <= 0.01, f"epsilon q={q} sigma={sigma} steps={steps}: {j['epsilon']} vs {ref}")
        check(j["order"] == ref_order, f"order q={q} sigma={sigma} steps={steps}: {j['order']} vs {ref_order}")
    print(f"epsilon: largest relative difference {worst:.2e} over {len(CASES)} cases")

    # q = 0 and steps = 0 spend nothing
    for extra in (["--q", "0", "--steps", "100"], ["--q", "0.5", "--steps", "0"]):
        j = redco_json(args.redco, *extra, "--sigma", "1", "--delta", "1e-5")
        check(j is not None and j["epsilon"] == 0.0, f"{extra}: epsilon {j}")

    # the inverse: the smallest sigma reaching a target epsilon
    worst = 0.0
    for q, steps, delta, target in [(0.01, 1000, 1e-5, 1.0), (256 / 60000, 14062, 1e-5, 3.0),
                                    (0.001, 50000, 1e-6, 0.5), (0.1, 500, 1e-5, 8.0), (1.0, 10, 1e-5, 2.0)]:
        j = redco_json(args.redco, "--q", repr(q), "--steps", str(steps), "--delta", repr(delta), "--epsilon",
                       repr(target))
        if j is None:
            check(False, f"redco privacy --epsilon {target} q={q} failed")
            continue
        s = j["sigma"]
        e_at, _ = ref_epsilon(q, s, steps, delta)
        e_below, _ = ref_epsilon(q, s * 0.999, steps, delta)
        # dp-accounting's own bisection over sigma on its epsilon
        lo, hi = 0.1, 100.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if ref_epsilon(q, mid, steps, delta)[0] > target:
                lo = mid
            else:
                hi = mid
        d = rel(s, hi)
        worst = max(worst, d)
        print(f"q={q:.6g} steps={steps} delta={delta:g} epsilon<={target:g}: sigma {s:.8g} "
              f"(dp-accounting epsilon there {e_at:.8g}, at 0.999 sigma {e_below:.8g}); "
              f"dp-accounting's sigma {hi:.8g}, relative {d:.2e}")
        check(e_at <= target * 1.01, f"sigma {s} for epsilon {target}: dp-accounting gives {e_at}")
        check(e_below > target * 0.99, f"sigma {s} is not the smallest: 0.999 sigma gives {e_below}")
        check(d <= 0.01, f"sigma {s} vs dp-accounting's {hi}")
    print(f"sigma: largest relative difference {worst:.2e}")

    # bad arguments: usage errors naming the flag
    for bad, flag in [(["--q", "1.5", "--sigma", "1"], "--q"), (["--q", "-0.1", "--sigma", "1"], "--q"),
                      (["--q", "0.1", "--sigma", "0"], "--sigma"), (["--q", "0.1", "--sigma", "-1"], "--sigma"),
                      (["--q", "0.1", "--sigma", "1", "--delta", "0"], "--delta"),
                      (["--q", "0.1", "--sigma", "1", "--delta", "1"], "--delta"),
                      (["--q", "0.1", "--epsilon", "0"], "--epsilon"),
                      (["--q", "0.1", "--sigma", "1", "--epsilon", "1"], "--sigma")]:
        argv = list(bad)
        if "--delta" not in argv:
            argv += ["--delta", "1e-5"]
        r = redco(args.redco, *argv, "--steps", "10")
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("redco privacy:") and flag in lines[0],
              f"{bad}: status {r.returncode}, stderr {r.stderr!r}")

    print(f"{PASSED[0]} passed, {len(FAILED)} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
