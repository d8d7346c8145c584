# The planner's one truth on a model no test uses, through the command line as a user runs it
# (tests/planner_agreement_test.cc does the same on the corpus): at 1 and 2 micro-batches, each
# strategy's smallest budget (the JSON's smallest_budget_bytes) is a boundary (its plan fits it,
# exit 0, and one byte less exits 2), auto's is the least of them, and the sweep ends there.
#   MEMPLAN=build/cli/memplan python3 bench/agreement_held_out.py MODEL.onnx BATCH
import json, os, subprocess, sys, tempfile
M = os.environ.get("MEMPLAN", "build/cli/memplan")
named = ["none", "speed", "bottleneck", "sqrt", "sections", "optimal", "selective"]
def plan(model, batch, strategy, budget, k, extra=()):
    out = os.path.join(tempfile.gettempdir(), "agreement_held_out_plan.json")
    cmd = [M, "plan", model, "--batch", str(batch), "--strategy", strategy, "--budget", budget,
           "--micro-batches", str(k), "--json", out, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    try:
        j = json.load(open(out)) if r.returncode in (0, 2) else None
    except Exception:
        j = None
    subprocess.run(["rm", "-f", out])
    return r.returncode, j, r.stderr.strip()
for model, batch in [(sys.argv[1], int(sys.argv[2]))]:
    for k in (1, 2):
        least = {}
        for s in named + ["auto"]:
            rc, j, err = plan(model, batch, s, "1%", k)
            sb = j.get("smallest_budget_bytes") if j else None
            least[s] = sb
            ok_at = plan(model, batch, s, f"{sb}B", k, ["--sweep"] if s == "auto" and k == 1 else [])
            below = plan(model, batch, s, f"{sb - 1}B", k)
            strat = ok_at[1].get("strategy") if ok_at[1] else None
            sweep_min = ok_at[1].get("sweep", {}).get("min_budget_bytes") if ok_at[1] else None
            print(f"{model.split('/')[-1]} b{batch} k{k} {s:10s} smallest {sb} fits-at rc={ok_at[0]} strategy={strat} below rc={below[0]} sweep_min={sweep_min}", flush=True)
        fewest = min(v for s, v in least.items() if s != "auto")
        print(f"  auto {least['auto']} vs least named {fewest}: {'AGREE' if least['auto'] == fewest else 'DISAGREE'}; optimal<=sqrt: {least['optimal'] <= least['sqrt']}", flush=True)
