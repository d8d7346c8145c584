#!/usr/bin/env python3
"""Time-model accuracy: a plan's predicted recompute seconds against the recompute seconds
`memplan run` measures, for `optimal` plans at fractions of the plain step's peak. Two
predictions per plan: the roofline at the machine's measured rates, and the same calibrated by
profiles of the plain step (`memplan run --profile`, their forward phase: independent runs of
the same model, batch and device).

On a machine shared with other work one step's times vary by tens of percent, so the
calibration profile is the per-node median of --profiles profiled runs (written as one profile
for `memplan plan --costs`), and the measured recompute is reported both as the last of
--steps steps and as the median of steps 2..N (step 1 warms up).

--threads N runs every command with OMP_NUM_THREADS=N (the rates are then measured, and
cached, for N threads too): on a machine whose cores other work shares, one thread per run
avoids the stragglers that make a two-thread step take twice as long now and then.

Prints a markdown table, with the machine's 1-minute load average after each plan's run (on
2 cores, a load above 1 means the steps shared their core); --json writes the rows.

usage: time_model.py [--memplan BUILD/cli/memplan] [--models DIR] [--only NAME,...]
                     [--budgets 50,75] [--steps 5] [--profiles 3] [--threads N] [--json OUT]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# Model -> batch (CPU: a step of a few seconds on two cores).
BATCHES = {"resnet50": 16, "vit_b_16": 8, "gpt": 8, "mobilenet_v2": 16, "resnet18": 32, "efficientnet_b0": 8}


def run(cmd, ok=(0,)):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode not in ok:
        raise RuntimeError(" ".join(cmd) + "\n" + p.stderr.strip())
    return p.returncode


def load(path):
    with open(path) as f:
        return json.load(f)


def pct(pred, meas):
    return "%+.1f%%" % (100 * (pred - meas) / meas) if meas > 0 else "-"


def merge_profiles(paths, out):
    """One profile whose per-node seconds are the median over `paths` (one call each)."""
    profiles = [load(p) for p in paths]
    merged = profiles[0]
    for n in merged["nodes"]:
        key = (n["name"], n["phase"], n["segment"])
        per_call = []
        for p in profiles:
            for m in p["nodes"]:
                if (m["name"], m["phase"], m["segment"]) == key and m["calls"] > 0:
                    per_call.append(m["seconds"] / m["calls"])
        n["seconds"] = statistics.median(per_call)
        n["calls"] = 1
    with open(out, "w") as f:
        json.dump(merged, f)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--memplan", default=os.path.join(here, "..", "build", "cli", "memplan"))
    ap.add_argument("--models", default=os.environ.get("MEMPLAN_MODEL_CACHE", os.path.join(here, "..", "build", "model-cache")))
    ap.add_argument("--only", default="")
    ap.add_argument("--budgets", default="50,75")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--profiles", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    models = [m for m in BATCHES if not a.only or m in a.only.split(",")]
    if a.threads > 0:
        os.environ["OMP_NUM_THREADS"] = str(a.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            model = os.path.join(a.models, m + ".onnx")
            b = str(BATCHES[m])
            profile = os.path.join(tmp, m + ".profile.json")
            runs = []
            for k in range(a.profiles):
                runs.append(os.path.join(tmp, "%s.%d.profile.json" % (m, k)))
                run([a.memplan, "run", model, "--batch", b, "--steps", "3", "--profile", runs[-1]])
            merge_profiles(runs, profile)
            for budget in a.budgets.split(","):
                plan = os.path.join(tmp, "%s-%s.plan.json" % (m, budget))
                calibrated = os.path.join(tmp, "%s-%s.calibrated.json" % (m, budget))
                report = os.path.join(tmp, "%s-%s.run.json" % (m, budget))
                common = ["plan", model, "--batch", b, "--budget", budget + "%", "--strategy", "optimal"]
                if run([a.memplan] + common + ["--json", plan], ok=(0, 2)) != 0:
                    print("%s at %s%%: no plan fits" % (m, budget), file=sys.stderr)
                    continue
                run([a.memplan] + common + ["--costs", profile, "--json", calibrated])
                p, c = load(plan), load(calibrated)
                assert p["sections"] == c["sections"], "calibration changed the plan"
                run([a.memplan, "run", model, "--batch", b, "--plan", plan, "--steps", str(a.steps), "--json", report])
                load_average = os.getloadavg()[0]  # other work on the machine slows every step
                r = load(report)
                row = {
                    "model": m, "batch": int(b), "budget_percent": int(budget),
                    "sections": len(p["sections"]), "micro_batches": p.get("micro_batches", 1),
                    "recompute_flops": p["recompute_flops"],
                    "predicted_roofline": p["predicted_recompute_seconds"],
                    "predicted_calibrated": c["predicted_recompute_seconds"],
                    "measured_last": r["recompute_seconds"][-1],
                    "measured": statistics.median(r["recompute_seconds"][1:] or r["recompute_seconds"]),
                    "measured_steps": r["recompute_seconds"],
                    "rates": p["time_model"]["rates"],
                    "load_average": load_average,
                }
                rows.append(row)
                print("%s %s%%: roofline %.3f s, calibrated %.3f s, measured %s" %
                      (m, budget, row["predicted_roofline"], row["predicted_calibrated"],
                       " ".join("%.3f" % x for x in row["measured_steps"])), file=sys.stderr)
    print("| model | batch | budget | sections | predicted (roofline) | predicted (calibrated) "
          "| measured, last step | measured, median of steps 2-%d | error (roofline) | error (calibrated) "
          "| error (calibrated, last step) | load average |" % a.steps)
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print("| %s | %d | %d%% | %d%s | %.3f s | %.3f s | %.3f s | %.3f s | %s | %s | %s | %.1f |" % (
            r["model"], r["batch"], r["budget_percent"], r["sections"],
            " x %d mb" % r["micro_batches"] if r["micro_batches"] > 1 else "",
            r["predicted_roofline"], r["predicted_calibrated"], r["measured_last"], r["measured"],
            pct(r["predicted_roofline"], r["measured"]), pct(r["predicted_calibrated"], r["measured"]),
            pct(r["predicted_calibrated"], r["measured_last"]), r["load_average"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
