#!/usr/bin/env python3
"""ncu_summary.py - Nsight Compute's CSV (`ncu --csv`, either page) as one JSON line a
kernel launch, or a line a kernel name with --by-name: what the GPU check's `kernels` part
(scripts/gpu_check.sh, docs/gpu.md) reports of the tile kernels and the step's others.

  ncu_summary.py FILE [--by-name] [--check NAME --device DEV]
  ncu_summary.py --self-test

FILE holds what ncu printed: its own "==PROF==" lines and the CSV, in either layout:
`--page raw` (a header of metric names, a row of units, a row a launch) or the details page
(a row a launch and metric: "Metric Name", "Metric Unit", "Metric Value"). Every field is
taken by the metric's raw name, so what a version of ncu did not collect is null, never
guessed: time (us), the SM's and memory's throughput (% of peak), DRAM's, achieved and
theoretical occupancy, registers, static shared memory, instructions issued a cycle, the
tensor pipe's busy share, shared-memory bank conflicts and the largest warp stall reasons
(cycles a warp spent stalled, per instruction issued). --by-name: the launches of each
kernel name summed (count, total us, their time-weighted DRAM and SM shares), longest
first. --check: each line as the GPU check's figures, {"check": "NAME/KERNEL", "device",
"value": its time in us, "unit", "peer": null, then the fields}. Exit status 1 when the
file has no launch in it.
"""
import argparse
import csv
import io
import json
import re
import sys

# field: (raw metric name pattern, how several matches combine: "first" or "max")
FIELDS = {
    "registers": (r"^launch__registers_per_thread$", "first"),
    "shared_static_bytes": (r"^launch__shared_mem_per_block_static$", "first"),
    "grid": (r"^launch__grid_size$", "first"),
    "block": (r"^launch__block_size$", "first"),
    "sm_pct": (r"^sm__throughput\.avg\.pct_of_peak_sustained_elapsed$", "first"),
    "memory_pct": (r"^gpu__compute_memory_throughput\.avg\.pct_of_peak_sustained_elapsed$", "first"),
    "dram_pct": (r"^dram__throughput\.avg\.pct_of_peak_sustained_elapsed$", "first"),
    "l1_pct": (r"^l1tex__throughput\.avg\.pct_of_peak_sustained_active$", "first"),
    "occupancy_pct": (r"^sm__warps_active\.avg\.pct_of_peak_sustained_active$", "first"),
    "occupancy_limit_pct": (r"^sm__maximum_warps_per_active_cycle_pct$", "first"),
    "ipc": (r"^sm__inst_executed\.avg\.per_cycle_active$", "first"),
    "issue_active_pct": (r"^smsp__issue_active\.avg\.pct_of_peak_sustained_active$", "first"),
    "tensor_pct": (r"pipe_tensor.*\.avg\.pct_of_peak_sustained_active$", "max"),
    "instructions": (r"^smsp__inst_executed\.sum$", "first"),
    "bank_conflicts": (r"^l1tex__data_bank_conflicts_pipe_lsu_mem_shared.*\.sum$", "max"),
}
STALL = re.compile(r"^smsp__average_warps?_issue_stalled_([a-z0-9_]+?)_per_issue_active\.ratio$")
TIME = "gpu__time_duration.sum"
TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def number(text):
    """a CSV cell as a float (ncu writes 1,234.5), None when it is not one"""
    try:
        return float(text.replace(",", "").strip())
    except (AttributeError, ValueError):
        return None


def csv_rows(text):
    """the CSV lines of ncu's output (those that start with a quote), parsed"""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def launches(text):
    """[{"name", "metrics": {raw name: (value text, unit)}}] in the order ncu printed them"""
    rows = csv_rows(text)
    if not rows or "Kernel Name" not in rows[0]:
        return []
    head = rows[0]
    col = {name: i for i, name in enumerate(head)}
    out, by_id = [], {}
    if "Metric Name" in col and "Metric Value" in col:  # the details page: a row a metric
        for r in rows[1:]:
            if len(r) != len(head):
                continue
            key = r[col["ID"]] if "ID" in col else str(len(out))
            if key not in by_id:
                by_id[key] = {"name": r[col["Kernel Name"]], "metrics": {}}
                out.append(by_id[key])
            unit = r[col["Metric Unit"]] if "Metric Unit" in col else ""
            by_id[key]["metrics"][r[col["Metric Name"]]] = (r[col["Metric Value"]], unit)
        return out
    units = None  # the raw page: a row of units, then a row a launch
    for r in rows[1:]:
        if len(r) != len(head):
            continue
        if units is None and ("ID" not in col or number(r[col["ID"]]) is None):
            units = r
            continue
        metrics = {name: (r[i], units[i] if units else "") for i, name in enumerate(head) if "__" in name}
        out.append({"name": r[col["Kernel Name"]], "metrics": metrics})
    return out


def pick(metrics, pattern, how):
    vals = [number(v) for name, (v, _) in metrics.items() if re.search(pattern, name)]
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return max(vals) if how == "max" else vals[0]


def time_us(metrics):
    if TIME not in metrics:
        return None
    value, unit = metrics[TIME]
    v = number(value)
    return None if v is None else v * TO_US.get(unit.strip(), 1e-3)  # ncu's base unit: ns


def summary(launch):
    m = launch["metrics"]
    s = {"kernel": launch["name"].split("(")[0], "time_us": time_us(m)}
    for field, (pattern, how) in FIELDS.items():
        s[field] = pick(m, pattern, how)
    stalls = []
    for name, (value, _) in m.items():
        hit, v = STALL.match(name), number(value)
        if hit and v is not None and hit.group(1) not in ("not_issued", "selected"):
            stalls.append((v, hit.group(1)))
    stalls.sort(reverse=True)
    s["stalls"] = ", ".join("%s %.2f" % (why, v) for v, why in stalls[:6]) or None
    s["metrics"] = len(m)
    return s


def by_name(sums):
    """the launches of each kernel name summed, the longest in all first"""
    groups = {}
    for s in sums:
        g = groups.setdefault(s["kernel"], {"kernel": s["kernel"], "launches": 0, "time_us": 0.0, "_w": 0.0,
                                            "_dram": 0.0, "_sm": 0.0})
        t = s["time_us"] or 0.0
        g["launches"] += 1
        g["time_us"] += t
        if s["dram_pct"] is not None and s["sm_pct"] is not None:
            g["_w"] += t
            g["_dram"] += t * s["dram_pct"]
            g["_sm"] += t * s["sm_pct"]
    out = []
    for g in sorted(groups.values(), key=lambda g: -g["time_us"]):
        w = g.pop("_w")
        dram, sm = g.pop("_dram"), g.pop("_sm")
        g["dram_pct"] = dram / w if w else None
        g["sm_pct"] = sm / w if w else None
        out.append(g)
    return out


SAMPLE_RAW = '''==PROF== Connected to process 1 (bench)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","gpu__time_duration.sum","launch__registers_per_thread","sm__throughput.avg.pct_of_peak_sustained_elapsed","dram__throughput.avg.pct_of_peak_sustained_elapsed","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
"","","","","","","","usecond","register/thread","%","%","ratio","ratio","%"
"0","1","bench","h","k_attention_tile","1","7","1,234.5","166","41.2","12.5","3.10","0.75","22.0"
"1","1","bench","h","k_attention_tile_dkv","1","7","2,000","244","30.0","8.0","1.00","5.50","15.0"
==PROF== Disconnected from process 1
'''

SAMPLE_DETAILS = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","redco","h","k_binary_runs","1","7","s","gpu__time_duration.sum","nsecond","20,000"
"0","1","redco","h","k_binary_runs","1","7","s","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","80"
"0","1","redco","h","k_binary_runs","1","7","s","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","20"
"1","1","redco","h","k_binary_runs","1","7","s","gpu__time_duration.sum","nsecond","60,000"
"1","1","redco","h","k_binary_runs","1","7","s","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","40"
"1","1","redco","h","k_binary_runs","1","7","s","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","10"
"2","1","redco","h","k_ce_grad","1","7","s","gpu__time_duration.sum","usecond","300"
'''


def self_test():
    raw = [summary(x) for x in launches(SAMPLE_RAW)]
    assert [s["kernel"] for s in raw] == ["k_attention_tile", "k_attention_tile_dkv"], raw
    assert raw[0]["time_us"] == 1234.5 and raw[1]["time_us"] == 2000, raw
    assert raw[0]["registers"] == 166 and raw[0]["tensor_pct"] == 22.0, raw
    assert raw[0]["stalls"] == "barrier 3.10, long_scoreboard 0.75", raw
    assert raw[1]["stalls"].startswith("long_scoreboard 5.50"), raw
    assert raw[0]["occupancy_pct"] is None, raw
    det = by_name([summary(x) for x in launches(SAMPLE_DETAILS)])
    assert [g["kernel"] for g in det] == ["k_ce_grad", "k_binary_runs"], det
    assert det[1]["launches"] == 2 and abs(det[1]["time_us"] - 80) < 1e-9, det
    assert abs(det[1]["dram_pct"] - 50) < 1e-9 and abs(det[1]["sm_pct"] - 12.5) < 1e-9, det
    assert det[0]["dram_pct"] is None, det
    assert launches("==PROF== nothing\n") == []
    print("ncu_summary self-test: passed")


def main(argv):
    ap = argparse.ArgumentParser(description="Nsight Compute's CSV as JSON lines (see the module's text)")
    ap.add_argument("file", nargs="?", help="what ncu printed")
    ap.add_argument("--by-name", action="store_true", help="the launches of each kernel name summed")
    ap.add_argument("--check", help="each line as the GPU check's figure CHECK/KERNEL")
    ap.add_argument("--device", help="the figures' device (with --check)")
    ap.add_argument("--self-test", action="store_true", help="read the built-in samples")
    args = ap.parse_args(argv[1:])
    if args.self_test:
        self_test()
        return 0
    if not args.file or (args.check is None) != (args.device is None) or args.check == "":
        ap.error("FILE, and --check with --device or neither")
    with open(args.file, errors="replace") as f:
        sums = [summary(x) for x in launches(f.read())]
    if not sums:
        sys.stderr.write("ncu_summary: no kernel launch in %s\n" % args.file)
        return 1
    for s in by_name(sums) if args.by_name else sums:
        if args.check:
            s = dict({"check": args.check + "/" + s.pop("kernel"), "device": args.device, "value": s.pop("time_us"),
                      "unit": "us", "peer": None}, **s)
        print(json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
