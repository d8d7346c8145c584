#!/usr/bin/env python3
"""memplan on oneDNN's kernel families, as a user runs it (issue 36).

For each MODEL:BATCH and each instruction set (the machine's own, and those ONEDNN_MAX_CPU_ISA
caps it to: AVX2, SSE41), runs `memplan analyze` and `memplan run` (random weights, 2 steps)
without a device file, then `memplan calibrate MODEL --batch N` and the same with its device
file; then `memplan plan --budget P%` (uncalibrated and calibrated) and `memplan run --plan`.
Prints one markdown table: the prediction against the measured peak, the margin memplan keeps
(as a share of the budget), and whether each plan measured at or under its budget.

usage: bench/cpu_isa_accuracy.py MEMPLAN MODEL.onnx:BATCH[:BUDGET]... [--isas native,AVX2,SSE41]
       [--budget 60%] [--strategy auto] [--threads N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(memplan, args, isa, tmp, name, cache=None):
    env = dict(os.environ)
    if cache:  # calibrate's own cache folder: the uncalibrated runs must not read it
        env["XDG_CACHE_HOME"] = cache
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if isa != "native":
        env["ONEDNN_MAX_CPU_ISA"] = isa
    out = os.path.join(tmp, name + ".json")
    p = subprocess.run([memplan] + args + ["--json", out], env=env, capture_output=True, text=True)
    if p.returncode not in (0, 2):
        raise RuntimeError(f"memplan {' '.join(args)} ({isa}): {p.stderr.strip()}")
    with open(out) as f:
        return json.load(f)


def pct(a, b):
    return 100.0 * (a - b) / b if b else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("memplan")
    ap.add_argument("models", nargs="+", help="MODEL.onnx:BATCH[:BUDGET] (BUDGET: --budget's)")
    ap.add_argument("--isas", default="native,AVX2,SSE41")
    ap.add_argument("--budget", default="60%")
    ap.add_argument("--strategy", default="auto")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    memplan = a.memplan
    threads = ["--threads", str(a.threads)] if a.threads else []
    print("| model | batch | ISA (oneDNN) | predicted | measured | error | margin | "
          "calibrated error | plan budget | plan measured | plan error | margin / budget | holds | "
          "calibrated plan measured | calibrated plan error | holds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for spec in a.models:
            path, batch, *own = spec.split(":")
            budget_text = own[0] if own else a.budget
            name = os.path.basename(path).removesuffix(".onnx")
            common = [path, "--batch", batch] + threads
            for isa in a.isas.split(","):
                tag = f"{name}-{batch}-{isa}"
                an = run(memplan, ["analyze"] + common, isa, tmp, tag + "-an")
                r = run(memplan, ["run"] + common + ["--random-weights", "--steps", "2"], isa, tmp,
                        tag + "-run")
                dev = os.path.join(tmp, tag + "-dev.json")
                run(memplan, ["calibrate"] + common, isa, tmp, tag + "-dev",
                    cache=os.path.join(tmp, "cache"))
                os.rename(os.path.join(tmp, tag + "-dev.json"), dev)
                can = run(memplan, ["analyze"] + common + ["--device-file", dev], isa, tmp,
                          tag + "-can")
                plan_args = ["plan"] + common + ["--budget", budget_text, "--strategy", a.strategy]
                pl = run(memplan, plan_args, isa, tmp, tag + "-plan")
                plan_file = os.path.join(tmp, tag + "-plan.json")
                pr = run(memplan, ["run"] + common + ["--random-weights", "--steps", "2", "--plan",
                                                      plan_file], isa, tmp, tag + "-prun")
                cpl = run(memplan, plan_args + ["--device-file", dev], isa, tmp, tag + "-cplan")
                cpr = run(memplan, ["run"] + common + ["--random-weights", "--steps", "2", "--plan",
                                                       os.path.join(tmp, tag + "-cplan.json"),
                                                       "--device-file", dev], isa, tmp,
                          tag + "-cprun")
                measured = r["measured_peak_bytes"]
                margin = an.get("margin_bytes", 0)
                budget = pl["budget_bytes"]
                holds = pl.get("feasible") is False or pr["measured_peak_bytes"] <= budget
                cholds = cpl.get("feasible") is False or cpr["measured_peak_bytes"] <= cpl["budget_bytes"]
                failures += (not holds) + (not cholds)
                print(f"| {name} | {batch} | {an['cpu_device']['isa']} | {an['peak_bytes']:,} | "
                      f"{measured:,} | {pct(an['peak_bytes'], measured):+.3f}% | {margin:,} | "
                      f"{pct(can['peak_bytes'], measured):+.3f}% | {budget:,} | "
                      f"{pr['measured_peak_bytes']:,} | "
                      f"{pct(pl['predicted_peak_bytes'], pr['measured_peak_bytes']):+.3f}% | "
                      f"{100.0 * pl.get('workspace_margin_bytes', 0) / budget:.2f}% | "
                      f"{'yes' if holds else 'NO'}{'' if pl.get('feasible', True) else ' (no fit)'} | "
                      f"{cpr['measured_peak_bytes']:,} | "
                      f"{pct(cpl['predicted_peak_bytes'], cpr['measured_peak_bytes']):+.3f}% | "
                      f"{'yes' if cholds else 'NO'} |",
                      flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
