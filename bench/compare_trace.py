#!/usr/bin/env python3
"""Op-by-op comparison of a `memplan run --trace --json` result: the simulator's predicted
bytes per schedule event against the executor's measured bytes after (and peak during) the
same node. Prints the events where they differ.

usage: compare_trace.py RUN.json [--all] [--phase forward|backward|...]
"""
import json
import sys


def mib(b):
    return f"{b / 2**20:10.3f}"


def main():
    args = sys.argv[1:]
    show_all = "--all" in args
    phase_filter = None
    if "--phase" in args:
        phase_filter = args[args.index("--phase") + 1]
    path = [a for a in args if not a.startswith("--") and a != phase_filter][0]
    j = json.load(open(path))
    pred = j["predicted_timeline"]
    meas = j.get("measured_trace")
    if not meas:
        sys.exit("no measured_trace: run with --trace")
    # Group measured events by (phase, node) in order; backward runs several autograd
    # functions per IR node (the op, AccumulateGrad, ...).
    groups = []
    for e in meas:
        key = (e["phase"], e["node"])
        if groups and groups[-1]["key"] == key:
            g = groups[-1]
            g["after"] = e["bytes_after"]
            g["peak"] = max(g["peak"], e["peak_during"])
        else:
            groups.append({"key": key, "after": e["bytes_after"], "peak": e["peak_during"]})
    by_key = {}
    for g in groups:
        by_key.setdefault(g["key"], []).append(g)
    print(f"{'event':70s} {'pred during':>10s} {'meas peak':>10s} {'pred after':>10s} {'meas after':>10s}  (MiB)")
    for p in pred:
        key = (p.get("phase"), p.get("node", ""))
        if phase_filter and key[0] != phase_filter:
            continue
        cands = by_key.get(key)
        if not cands:
            if show_all:
                print(f"{p['event'][:70]:70s} {mib(p['bytes'])} {'-':>10s} {mib(p['bytes_after'])} {'-':>10s}")
            continue
        m = cands.pop(0)
        d_during = m["peak"] - p["bytes"]
        d_after = m["after"] - p["bytes_after"]
        if show_all or d_during != 0 or d_after != 0:
            print(f"{p['event'][:70]:70s} {mib(p['bytes'])} {mib(m['peak'])} {mib(p['bytes_after'])} {mib(m['after'])}"
                  f"   d_peak {d_during / 2**20:+.3f} d_after {d_after / 2**20:+.3f}")
    print(f"predicted peak {mib(max(p['bytes'] for p in pred))}  measured peak {mib(j['measured_peak_bytes'])}")


if __name__ == "__main__":
    main()
