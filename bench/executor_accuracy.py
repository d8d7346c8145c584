#!/usr/bin/env python3
"""Prediction accuracy: the analyzer's predicted peak against the executor's measured peak
(the steady-state step), for corpus models at two batch sizes, with no plan and with
planner plans. Prints a markdown table; --json writes the rows.

usage: executor_accuracy.py [--memplan BUILD/cli/memplan] [--models DIR] [--device cpu|cuda]
                            [--only NAME,...] [--plans optimal,sqrt] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# Model -> the two batch sizes (large models get smaller batches to keep CPU time sane).
BATCHES = {
    "resnet18": (2, 16), "resnet50": (2, 8), "vgg16": (1, 4), "mobilenet_v2": (2, 16),
    "vit_b_16": (1, 4), "gpt": (2, 8), "densenet121": (2, 8), "efficientnet_b0": (2, 8),
    "googlenet": (2, 8), "swin_t": (1, 4), "gpt_deep": (1, 4),
    # The dynamo exporter's models (opset 18+).
    "resnet18_dynamo": (2, 16), "resnet50_dynamo": (2, 8), "mobilenet_v2_dynamo": (2, 16),
    "vit_b_16_dynamo": (1, 4), "gpt_dynamo": (2, 8), "efficientnet_b0_dynamo": (2, 8),
    "swin_t_dynamo": (1, 4),
}


def run(cmd):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise RuntimeError(" ".join(cmd) + "\n" + str(e))
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + "\n" + p.stderr.strip())
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--memplan", default=os.path.join(here, "..", "build", "cli", "memplan"))
    ap.add_argument("--models", default=os.environ.get("MEMPLAN_MODEL_CACHE", os.path.join(here, "..", "build", "model-cache")))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", default="")
    ap.add_argument("--plans", default="optimal,sqrt")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    models = [m for m in BATCHES if not a.only or m in a.only.split(",")]
    plans = [p for p in a.plans.split(",") if p]
    rows = []
    tmp = tempfile.mkdtemp(prefix="memplan-accuracy-")
    print("| model | batch | plan | predicted | measured | error | step s | recompute s |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for m in models:
        path = os.path.join(a.models, m + ".onnx")
        if not os.path.exists(path):
            print(f"| {m} | - | - | - | - | missing {path} | | |")
            continue
        for b in BATCHES[m]:
            variants = [("none", None)]
            for strategy in plans:
                pj = os.path.join(tmp, f"{m}_{b}_{strategy}.json")
                try:
                    run([a.memplan, "analyze", path, "--batch", str(b), "--json", pj + ".analysis"])
                    baseline = json.load(open(pj + ".analysis"))["peak_bytes"]
                    # optimal: the least recompute within 70% of the baseline peak (or 80%, 90%
                    # where parameters leave less to save); sqrt: no budget.
                    fractions = (0.7, 0.8, 0.9) if strategy in ("optimal", "sections", "auto") else (4.0,)
                    for i, fraction in enumerate(fractions):
                        try:
                            run([a.memplan, "plan", path, "--batch", str(b), "--budget", f"{int(baseline * fraction)}B",
                                 "--strategy", strategy, "--json", pj])
                            break
                        except RuntimeError:
                            if i + 1 == len(fractions):
                                raise
                    plan = json.load(open(pj))
                    if len(plan.get("sections", [])) > 1:
                        variants.append((strategy, pj))
                except (RuntimeError, KeyError, ValueError) as e:
                    print(f"| {m} | {b} | {strategy} | plan failed: {str(e).splitlines()[-1][:60]} | | | | |")
            for name, pj in variants:
                out = os.path.join(tmp, f"{m}_{b}_{name}_run.json")
                cmd = [a.memplan, "run", path, "--batch", str(b), "--steps", str(a.steps), "--random-weights",
                       "--device", a.device, "--json", out]
                if pj:
                    cmd += ["--plan", pj]
                try:
                    run(cmd)
                except RuntimeError as e:
                    print(f"| {m} | {b} | {name} | run failed: {str(e).splitlines()[-1][:80]} | | | | |")
                    continue
                r = json.load(open(out))
                pred, meas = r["predicted_peak_bytes"], r["measured_peak_bytes"]
                err = (pred - meas) / meas
                row = {"model": m, "batch": b, "plan": name, "predicted_peak_bytes": pred, "measured_peak_bytes": meas,
                       "error": err, "step_seconds": r["step_seconds"][-1], "recompute_seconds": r["recompute_seconds"][-1],
                       "device": r["device"]}
                rows.append(row)
                print(f"| {m} | {b} | {name} | {pred / 2**20:.2f} MiB | {meas / 2**20:.2f} MiB | {100 * err:+.2f}% "
                      f"| {row['step_seconds']:.2f} | {row['recompute_seconds']:.2f} |", flush=True)
    if rows:
        worst = max(rows, key=lambda r: abs(r["error"]))
        under = [r for r in rows if r["error"] < -0.01]
        print(f"\n{len(rows)} runs; worst |error| {100 * abs(worst['error']):.2f}% ({worst['model']} batch {worst['batch']} "
              f"{worst['plan']}); {len(under)} under-estimates beyond 1%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
