#!/usr/bin/env python3
"""Issue 11's goals, measured by `memplan run` on this machine: per model, the plain step, then
`selective` and `optimal` plans at fractions of the plain step's predicted peak. For each plan:
the budget, the predicted and measured peaks (measured <= budget is the promise), the step time,
the recompute time and the recompute time as a share of the plain step's time (goal: <= 15% at
50% on resnet50, vit_b_16 and gpt at batch 16).

Times are the median of steps 2..N (step 1 warms up); the machine may be shared, so each
configuration runs back to back in its own process and --threads fixes the intra-op threads.

Prints a markdown table; --json writes the rows.

usage: selective_goals.py [--memplan BUILD/cli/memplan] [--models DIR] [--only NAME,...]
                          [--batch 16] [--budgets 50,35] [--strategies selective,optimal]
                          [--steps 3] [--threads 2] [--json OUT]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(cmd, ok=(0,)):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode not in ok:
        raise RuntimeError(" ".join(cmd) + "\n" + p.stderr.strip())
    return p.returncode


def load(path):
    with open(path) as f:
        return json.load(f)


def mib(b):
    return "%.1f" % (b / 2**20)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(here, "..", "build", "cli", "memplan"))
    ap.add_argument("--models", default=os.environ.get("MEMPLAN_MODEL_CACHE", os.path.join(here, "..", "build", "model-cache")))
    ap.add_argument("--only", default="resnet50,vit_b_16,gpt")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--budgets", default="50,35")
    ap.add_argument("--strategies", default="selective,optimal")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in a.only.split(","):
            model = os.path.join(a.models, m + ".onnx")
            common = ["--batch", str(a.batch)]
            runopts = ["--steps", str(a.steps), "--random-weights", "--threads", str(a.threads)]
            plain_json = os.path.join(tmp, m + ".plain.json")
            run([a.memplan, "run", model] + common + runopts + ["--json", plain_json])
            plain = load(plain_json)
            plain_s = statistics.median(plain["step_seconds"][1:] or plain["step_seconds"])
            base = plain["predicted_peak_bytes"]
            rows.append({"model": m, "batch": a.batch, "budget_percent": 100, "strategy": "none",
                         "budget": 0, "predicted": base, "measured": plain["measured_peak_bytes"],
                         "step": plain_s, "recompute": 0.0, "plain_step": plain_s, "dropped": 0,
                         "sections": 1, "micro_batches": 1, "predicted_recompute": 0.0})
            print("%s plain: %.3f s, peak %s MiB" % (m, plain_s, mib(plain["measured_peak_bytes"])), file=sys.stderr)
            for budget in a.budgets.split(","):
                for strategy in a.strategies.split(","):
                    plan_json = os.path.join(tmp, "%s-%s-%s.plan.json" % (m, budget, strategy))
                    code = run([a.memplan, "plan", model] + common +
                               ["--budget", budget + "%", "--strategy", strategy, "--json", plan_json], ok=(0, 2))
                    if code != 0:
                        rows.append({"model": m, "batch": a.batch, "budget_percent": int(budget), "strategy": strategy,
                                     "infeasible": True})
                        continue
                    p = load(plan_json)
                    report = os.path.join(tmp, "%s-%s-%s.run.json" % (m, budget, strategy))
                    run([a.memplan, "run", model, "--batch", str(a.batch), "--plan", plan_json] + runopts +
                        ["--json", report])
                    r = load(report)
                    step = statistics.median(r["step_seconds"][1:] or r["step_seconds"])
                    rec = statistics.median(r["recompute_seconds"][1:] or r["recompute_seconds"])
                    row = {"model": m, "batch": a.batch, "budget_percent": int(budget), "strategy": strategy,
                           "budget": p["budget_bytes"], "predicted": p["predicted_peak_bytes"],
                           "measured": r["measured_peak_bytes"], "step": step, "recompute": rec, "plain_step": plain_s,
                           "dropped": len(p.get("recomputed", [])), "sections": len(p["sections"]),
                           "micro_batches": p.get("micro_batches", 1),
                           "predicted_recompute": p.get("predicted_recompute_seconds", 0.0)}
                    rows.append(row)
                    print("%s %s%% %s: step %.3f s, recompute %.3f s, measured %s MiB of %s MiB" %
                          (m, budget, strategy, step, rec, mib(row["measured"]), mib(row["budget"])), file=sys.stderr)
    print("| model | batch | budget | strategy | plan | budget MiB | predicted MiB | measured MiB | within | "
          "step s | x plain | recompute s | recompute / plain step | predicted recompute s |")
    print("| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | :---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        if r.get("infeasible"):
            print("| %s | %d | %d%% | %s | no plan fits | | | | | | | | | |" %
                  (r["model"], r["batch"], r["budget_percent"], r["strategy"]))
            continue
        shape = ("%d dropped" % r["dropped"]) if r["dropped"] else ("%d sections" % r["sections"])
        if r["micro_batches"] > 1:
            shape += " x %d mb" % r["micro_batches"]
        within = "-" if not r["budget"] else ("yes" if r["measured"] <= r["budget"] else "**no**")
        print("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %.3f | %.2f | %.3f | %.1f%% | %.3f |" % (
            r["model"], r["batch"], "%d%%" % r["budget_percent"] if r["budget"] else "-", r["strategy"], shape,
            mib(r["budget"]) if r["budget"] else "-", mib(r["predicted"]), mib(r["measured"]), within, r["step"],
            r["step"] / r["plain_step"], r["recompute"], 100 * r["recompute"] / r["plain_step"],
            r["predicted_recompute"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
