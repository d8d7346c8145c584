#!/usr/bin/env python3
"""Issue 24's plan-quality and speed goals for `memplan plan --strategy offload`, predicted
(no run): per model and budget (a percentage of the plain step's peak), the offload plan beside
the recompute-only plans (selective, optimal, sqrt, and auto, which tries no offload without
--host-budget). For each plan: fits, micro-batches, the predicted peak, the predicted overhead
over the plain step (recompute + stall + micro-batch seconds: every plan runs the same plain
step, so the step times differ by exactly this), recompute and stall seconds, the offloaded
bytes, the planner's solve time and the CLI's wall time.

The goal: at 35% of the plain peak, offload's overhead is below the least overhead of the
recompute-only plans that fit; `--strategy offload` plans swin_t (batch 16, 35%) in under 3 s.

Defaults: --device cuda (the CUDA cost model: a machine without a GPU uses the documented
default rates, 50 TFLOP/s, 2 TB/s, 20 us per op, and the caching allocator's reserved memory
is what the budget bounds) and the link rate of the GPU check: no H2D/D2H pinned rate has been
measured there (shared/gpu, bench/), so the CLI's default for cuda, 25 GB/s each way.
--host-budget is fixed (32GiB) so that the plans do not depend on this machine's free memory.

Prints a markdown table; --json writes the rows.

usage: offload_quality.py [--memplan BUILD/cli/memplan] [--models DIR[,DIR...]]
                          [--only NAME,...] [--batch 16] [--budgets 35,50]
                          [--strategies offload,selective,optimal,sqrt,auto]
                          [--device cuda] [--link-rate 25GB/s] [--host-budget 32GiB] [--json OUT]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def find_model(dirs, name):
    for d in dirs:
        p = os.path.join(d, name + ".onnx")
        if os.path.exists(p):
            return p
    raise FileNotFoundError("%s.onnx in none of %s" % (name, ", ".join(dirs)))


def plan(a, model, budget, strategy, out):
    cmd = [a.memplan, "plan", model, "--batch", str(a.batch), "--budget", "%s%%" % budget,
           "--strategy", strategy, "--device", a.device, "--json", out]
    if strategy == "offload":
        cmd += ["--link-rate", a.link_rate, "--host-budget", a.host_budget]
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    if p.returncode not in (0, 2) or not os.path.exists(out):
        return {"error": (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:], "wall": wall}
    with open(out) as f:
        j = json.load(f)
    os.remove(out)
    # The JSON names the offloaded tensors; their bytes are on the text report's line
    # "offloaded    N saved activations (SIZE); host peak ...".
    m = re.search(r"^offloaded\s+\d+ saved activations \(([\d.]+) (B|KiB|MiB|GiB)\)", p.stdout,
                  re.M)
    unit = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    j["offloaded_bytes"] = float(m.group(1)) * unit[m.group(2)] if m else 0.0
    return {"json": j, "wall": wall}


def row_of(model, budget, strategy, r):
    if "json" not in r:
        return {"model": model, "budget": budget, "strategy": strategy, "fits": None,
                "error": " ".join(r["error"]), "wall_seconds": r["wall"]}
    j = r["json"]
    recompute = j.get("predicted_recompute_seconds", 0.0)
    stall = j.get("predicted_stall_seconds", 0.0)
    micro = j.get("predicted_micro_batch_seconds", 0.0)
    return {
        "model": model, "budget": budget, "strategy": strategy, "fits": bool(j["feasible"]),
        "micro_batches": j.get("micro_batches", 1),
        "peak_percent": 100.0 * j["predicted_peak_bytes"] / j["baseline_peak_bytes"],
        "overhead_seconds": recompute + stall + micro, "recompute_seconds": recompute,
        "stall_seconds": stall, "micro_batch_seconds": micro,
        "offloaded": len(j.get("offloaded", [])),
        "offloaded_mib": j["offloaded_bytes"] / 2**20,
        "host_peak_mib": j.get("predicted_host_peak_bytes", 0) / 2**20,
        "recomputed": len(j.get("recomputed", [])),
        "solve_seconds": j.get("solve_seconds", 0.0), "wall_seconds": r["wall"],
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(here, "..", "build", "cli", "memplan"))
    ap.add_argument("--models", default=os.environ.get(
        "MEMPLAN_MODEL_CACHE", os.path.join(here, "..", "build", "model-cache")))
    ap.add_argument("--only", default="resnet50,vit_b_16,gpt")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--budgets", default="35,50")
    ap.add_argument("--strategies", default="offload,selective,optimal,sqrt,auto")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--link-rate", default="25GB/s")
    ap.add_argument("--host-budget", default="32GiB")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    dirs = a.models.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in a.only.split(","):
            model = find_model(dirs, m)
            for budget in a.budgets.split(","):
                for s in a.strategies.split(","):
                    r = row_of(m, budget, s, plan(a, model, budget, s, os.path.join(tmp, "p.json")))
                    rows.append(r)
                    print(json.dumps(r), file=sys.stderr, flush=True)
    print("device %s, link %s each way, host budget %s, batch %d; overhead = recompute + stall + "
          "micro-batch seconds over the plain step" % (a.device, a.link_rate, a.host_budget, a.batch))
    print()
    print("| model | budget | strategy | fits | micro-batches | peak % | overhead s | recompute s "
          "| stall s | offloaded | offloaded MiB | solve s | wall s | vs best recompute-only |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["fits"] is None:
            print("| %s | %s%% | %s | error: %s | | | | | | | | | %.2f | |" % (
                r["model"], r["budget"], r["strategy"], r["error"], r["wall_seconds"]))
            continue
        vs = ""
        if r["strategy"] == "offload":
            rivals = [q for q in rows if q["model"] == r["model"] and q["budget"] == r["budget"]
                      and q["strategy"] != "offload" and q.get("fits")]
            if rivals and r["fits"]:
                best = min(rivals, key=lambda q: q["overhead_seconds"])
                d = r["overhead_seconds"] - best["overhead_seconds"]
                vs = "%+.4f s vs %s (%+.1f%%)" % (
                    d, best["strategy"],
                    100.0 * d / best["overhead_seconds"] if best["overhead_seconds"] > 0 else 0.0)
            elif r["fits"]:
                vs = "only offload fits"
        print("| %s | %s%% | %s | %s | %d | %.1f | %.4f | %.4f | %.4f | %d | %.1f | %.2f | %.2f | %s |"
              % (r["model"], r["budget"], r["strategy"], "yes" if r["fits"] else "no",
                 r["micro_batches"], r["peak_percent"], r["overhead_seconds"],
                 r["recompute_seconds"], r["stall_seconds"], r["offloaded"], r["offloaded_mib"],
                 r["solve_seconds"], r["wall_seconds"], vs))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
