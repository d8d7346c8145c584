#!/usr/bin/env python3
"""Issue 12's goals, measured with `memplan run --nproc N` (Gloo on loopback, CPU):

1. accuracy: per model, rank count and shard mode, every rank's measured peak against the
   per-rank plan's predicted peak (goal: within 1%);
2. scaling: step time, communication time and peak per rank for 1, 2 and 4 ranks at the same
   whole batch (shard none);
3. fit: a model whose parameters, gradients and optimizer state are over half of its
   one-device peak, planned at 50% of that peak on 4 ranks with --shard auto: the plan, and
   the measured peaks of its run.

Times are the median of steps 2..N (step 1 warms up). The ranks share this machine's cores, so
--threads fixes each rank's intra-op threads (1 by default: 4 ranks on 4 cores or fewer).

usage: distributed.py [--memplan BUILD/cli/memplan] [--models DIR] [--only NAME,...]
                      [--batch 8] [--optimizer adam] [--steps 3] [--threads 1] [--ranks 2,4]
                      [--shards none,optimizer,gradients,parameters] [--bucket-size 25MiB] [--json OUT]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + "\n" + p.stderr.strip())
    return p.stdout


def load(path):
    with open(path) as f:
        return json.load(f)


def mib(b):
    return "%.2f" % (b / 2**20)


def steady(xs):
    xs = xs[1:] if len(xs) > 1 else xs
    return statistics.median(xs) if xs else 0.0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(here, "..", "build", "cli", "memplan"))
    ap.add_argument("--models", default=os.environ.get("MEMPLAN_MODEL_CACHE", os.path.join(here, "..", "build", "model-cache")))
    ap.add_argument("--only", default="resnet18,gpt")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--shards", default="none,optimizer,gradients,parameters")
    ap.add_argument("--bucket-size", default="25MiB")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    out = {"accuracy": [], "scaling": [], "fit": []}
    runopts = ["--steps", str(a.steps), "--random-weights", "--threads", str(a.threads)]
    with tempfile.TemporaryDirectory() as tmp:
        for m in a.only.split(","):
            model = os.path.join(a.models, m + ".onnx")
            common = ["--batch", str(a.batch), "--optimizer", a.optimizer]

            def plan_and_run(n, shard, budget="1000GiB", tag=""):
                plan = os.path.join(tmp, "%s-%d-%s%s-plan.json" % (m, n, shard, tag))
                res = os.path.join(tmp, "%s-%d-%s%s-run.json" % (m, n, shard, tag))
                cmd = [a.memplan, "plan", model] + common + ["--budget", budget, "--strategy", "auto", "--json", plan]
                if n > 1:
                    cmd += ["--devices", str(n), "--shard", shard, "--bucket-size", a.bucket_size]
                run(cmd)
                cmd = [a.memplan, "run", model, "--plan", plan] + runopts + ["--json", res]
                if n > 1:
                    cmd += ["--nproc", str(n)]
                run(cmd)
                return load(plan), load(res)

            # 2. scaling, and the one-device baseline
            for n in [1] + [int(x) for x in a.ranks.split(",")]:
                plan, res = plan_and_run(n, "none")
                ranks = res.get("ranks") or [{"rank": 0, "measured_peak_bytes": res["measured_peak_bytes"],
                                              "predicted_peak_bytes": res["predicted_peak_bytes"],
                                              "step_seconds": res["step_seconds"],
                                              "comm_seconds": [0.0] * len(res["step_seconds"])}]
                out["scaling"].append({
                    "model": m, "ranks": n, "step_seconds": max(steady(r["step_seconds"]) for r in ranks),
                    "comm_seconds": max(steady(r["comm_seconds"]) for r in ranks),
                    "predicted_comm_seconds": plan.get("layout", {}).get("comm_seconds", 0.0),
                    "peak_bytes": max(r["measured_peak_bytes"] for r in ranks),
                    "predicted_peak_bytes": plan["predicted_peak_bytes"]})
            # 1. accuracy per shard mode
            for n in [int(x) for x in a.ranks.split(",")]:
                for shard in a.shards.split(","):
                    plan, res = plan_and_run(n, shard)
                    for r in res["ranks"]:
                        pred, meas = r["predicted_peak_bytes"], r["measured_peak_bytes"]
                        out["accuracy"].append({"model": m, "ranks": n, "shard": shard, "rank": r["rank"],
                                                "predicted_peak_bytes": pred, "measured_peak_bytes": meas,
                                                "error": (pred - meas) / meas if meas else 0.0})
            # 3. fit at 50% of the one-device peak on 4 ranks
            one = [s for s in out["scaling"] if s["model"] == m and s["ranks"] == 1][0]
            analysis = os.path.join(tmp, m + "-analysis.json")
            run([a.memplan, "analyze", model] + common + ["--json", analysis])
            an = load(analysis)
            bd = an["breakdown"]
            persistent = bd.get("parameters", 0) + bd.get("gradients", 0) + bd.get("optimizer_state", 0)
            budget = one["predicted_peak_bytes"] // 2
            plan = os.path.join(tmp, m + "-fit-plan.json")
            cmd = [a.memplan, "plan", model] + common + ["--budget", "%dB" % budget, "--devices", "4", "--shard", "auto",
                                                        "--bucket-size", a.bucket_size, "--json", plan]
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            row = {"model": m, "one_device_peak_bytes": one["predicted_peak_bytes"],
                   "persistent_share": persistent / an["peak_bytes"], "budget_bytes": budget,
                   "fits": p.returncode == 0}
            if p.returncode == 0:
                pj = load(plan)
                res = os.path.join(tmp, m + "-fit-run.json")
                run([a.memplan, "run", model, "--plan", plan, "--nproc", "4"] + runopts + ["--json", res])
                rj = load(res)
                row.update({"shard": pj["layout"]["shard"], "strategy": pj["strategy"],
                            "micro_batches": pj.get("micro_batches", 1),
                            "predicted_peak_bytes": pj["predicted_peak_bytes"],
                            "measured_peak_bytes": max(r["measured_peak_bytes"] for r in rj["ranks"])})
            out["fit"].append(row)

    print("## Per-rank peak: predicted against measured (%s, batch %d, Gloo on loopback)\n" % (a.optimizer, a.batch))
    print("| model | ranks | shard | rank | predicted MiB | measured MiB | error |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for r in out["accuracy"]:
        print("| %s | %d | %s | %d | %s | %s | %+.3f%% |" % (r["model"], r["ranks"], r["shard"], r["rank"],
                                                       mib(r["predicted_peak_bytes"]), mib(r["measured_peak_bytes"]),
                                                       100 * r["error"]))
    print("\n## Scaling at the same whole batch (shard none, %d thread(s) per rank)\n" % a.threads)
    print("| model | ranks | step s | comm s (measured) | comm s (predicted) | peak per rank MiB (measured) | predicted |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in out["scaling"]:
        print("| %s | %d | %.3f | %.4f | %.4f | %s | %s |" % (r["model"], r["ranks"], r["step_seconds"], r["comm_seconds"],
                                                          r["predicted_comm_seconds"], mib(r["peak_bytes"]),
                                                          mib(r["predicted_peak_bytes"])))
    print("\n## 50% of the one-device peak on 4 ranks (--shard auto)\n")
    print("| model | one-device peak MiB | P+G+O share | budget MiB | fits | shard | strategy | micro-batches | predicted MiB | measured MiB |")
    print("|---|---:|---:|---:|---|---|---|---:|---:|---:|")
    for r in out["fit"]:
        print("| %s | %s | %.0f%% | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], mib(r["one_device_peak_bytes"]), 100 * r["persistent_share"], mib(r["budget_bytes"]),
            "yes" if r["fits"] else "no", r.get("shard", "-"), r.get("strategy", "-"), r.get("micro_batches", "-"),
            mib(r["predicted_peak_bytes"]) if "predicted_peak_bytes" in r else "-",
            mib(r["measured_peak_bytes"]) if "measured_peak_bytes" in r else "-"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
