#!/usr/bin/env python3
"""The tables of scripts/gpu-check.sh --run: memplan's predictions against what a device measures.

Standard library only on memplan's side (it drives the `memplan` binary); the peer runs import the
device machine's own torch (and samples/export_models.py, carried in the bundle, for the models).

  gpu_check.py accuracy --memplan M --models DIR --device D --specs resnet18:64,gpt:32
                        [--budgets 75%,50%] [--strategy auto] [--steps 3] [--jobs 4] --out DIR
      Each model unplanned and planned at each budget (a percentage of its unplanned peak), one
      process per run (each has its own allocator, so the peaks are independent): the predicted
      peak against the measured allocated and reserved peaks. Rows: OUT/accuracy.json.
  gpu_check.py peers --memplan M --models DIR --device D --model gpt --batch 32
                     [--peers eager,checkpoint,sac,compile] [--strategy auto] [--steps 6] --out DIR
      PyTorch's own ways to save memory on the same model and batch (eager, checkpoint per block,
      selective activation checkpointing, torch.compile's activation memory budget), then memplan
      planned at each one's measured peak. Rows: OUT/peers-MODEL.json.
  gpu_check.py report --out DIR
      Every table (environment, smoke run, profile, accuracy, budget check, peers) as Markdown:
      OUT/summary.md.
"""
import argparse
import concurrent.futures
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

MiB = 2 ** 20


def mib(b):
    return "-" if b is None else f"{b / MiB:.1f}"


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1)
    os.replace(tmp, path)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def tail(text, n=300):
    return " ".join(text.strip().split())[-n:]


def memplan_plan(a, onnx, batch, budget, out, strategy):
    cmd = [a.memplan, "plan", onnx, "--batch", str(batch), "--budget", budget, "--strategy", strategy,
           "--device", a.device, "--json", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if p.returncode != 0:
        return None, f"memplan plan exit {p.returncode}: {tail(p.stderr or p.stdout)}"
    return read_json(out), None


def memplan_run(a, onnx, batch, out, plan=None):
    cmd = [a.memplan, "run", onnx, "--batch", str(batch), "--steps", str(a.steps), "--device", a.device,
           "--random-weights", "--json", out] + (["--plan", plan] if plan else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if p.returncode != 0:
        return None, f"memplan run exit {p.returncode}: {tail(p.stderr or p.stdout)}"
    return read_json(out), None


def run_figures(r):
    """The figures of a run JSON that the tables show (reserved: CUDA only, else None)."""
    reserved = r.get("reserved_peak_bytes") or []
    steps = r.get("step_seconds") or []
    return {"predicted": r.get("predicted_peak_bytes"), "measured": r.get("measured_peak_bytes"),
            "reserved": max(reserved) if reserved else None,
            "step_seconds": statistics.median(steps[1:] or steps) if steps else None,
            "device": r.get("device")}


# ---------------------------------------------------------------------------------------------
# accuracy (and the budget check: the planned rows)

def accuracy_job(a, model, batch, budget, work):
    onnx = os.path.join(a.models, model + ".onnx")
    row = {"model": model, "batch": batch, "budget": budget or "none"}
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix=f"{model}-b{batch}-", dir=work)
    plan_path = None
    if budget:
        plan_path = os.path.join(tmp, "plan.json")
        plan, err = memplan_plan(a, onnx, batch, budget, plan_path, a.strategy)
        if err and err.startswith("memplan plan exit 2:"):
            # The planner's answer, not a failure: no plan reaches this budget (it names the least).
            row["no_fit"] = tail(err[len("memplan plan exit 2:"):], 160)
            return row
        if err:
            row["error"] = err
            return row
        row.update(strategy=plan.get("strategy"), micro_batches=plan.get("micro_batches"),
                   budget_bytes=plan.get("budget_bytes"), budget_of=plan.get("budget_of", "allocated"),
                   plan_predicted=plan.get("predicted_peak_bytes"),
                   plan_predicted_reserved=plan.get("predicted_reserved_peak_bytes"),
                   recompute_flops=plan.get("recompute_flops"))
    run, err = memplan_run(a, onnx, batch, os.path.join(tmp, "run.json"), plan_path)
    if err:
        row["error"] = err
        return row
    row.update(run_figures(run))
    row["wall_seconds"] = round(time.time() - t0, 2)
    return row


def accuracy(a):
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="accuracy-", dir=a.out)
    budgets = [""] + [b for b in a.budgets.split(",") if b]
    jobs = []
    for spec in [s for s in a.specs.split(",") if s]:
        model, _, batch = spec.partition(":")
        jobs += [(model, int(batch or 1), b) for b in budgets]
    rows = [None] * len(jobs)
    path = os.path.join(a.out, "accuracy.json")
    with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as pool:
        futures = {pool.submit(accuracy_job, a, *job, work): i for i, job in enumerate(jobs)}
        for f in concurrent.futures.as_completed(futures):
            i = futures[f]
            try:
                rows[i] = f.result()
            except Exception as e:  # a timeout: the row says so, the others go on
                model, batch, budget = jobs[i]
                rows[i] = {"model": model, "batch": batch, "budget": budget or "none", "error": repr(e)[:300]}
            write_json(path, [r for r in rows if r])  # what finished, should the time limit strike
    write_json(path, rows)
    print(accuracy_table(rows))


def accuracy_table(rows):
    out = ["| model | batch | budget | strategy | predicted MiB | measured MiB | deviation | reserved MiB | reserved/measured |",
           "|---|---:|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        head = f"| {r['model']} | {r['batch']} | {r['budget']} "
        if "error" in r:
            out.append(head + f"| error: {r['error'][:200]} |||||")
            continue
        if "no_fit" in r:
            out.append(head + f"| no plan fits: {r['no_fit']} |||||")
            continue
        err = (r["predicted"] - r["measured"]) / r["measured"] * 100 if r.get("measured") else float("nan")
        ratio = f"{r['reserved'] / r['measured']:.2f}" if r.get("reserved") and r.get("measured") else "-"
        out.append(head + f"| {r.get('strategy', '-')} | {mib(r['predicted'])} | {mib(r['measured'])} | {err:+.2f}% | "
                   f"{mib(r['reserved'])} | {ratio} |")
    return "\n".join(out)


def budget_table(rows):
    """Each plan against its budget: the bytes the budget bounds (the plan's budget_of:
    allocated, or reserved where the planner models the caching allocator) must measure at or
    under it."""
    out = ["| model | batch | budget | budget MiB | bounds | measured MiB | reserved MiB | allocated <= budget | reserved <= budget | verdict |",
           "|---|---:|---|---:|---|---:|---:|---|---|---|"]
    met = total = 0
    for r in rows:
        if r.get("budget", "none") == "none":
            continue
        head = f"| {r['model']} | {r['batch']} | {r['budget']} "
        if "error" in r:
            out.append(head + f"| - | - | - | - | - | - | error: {r['error'][:160]} |")
            continue
        if "no_fit" in r:
            out.append(head + "| - | - | - | - | - | - | no plan fits (not run) |")
            continue
        b = r["budget_bytes"]
        alloc_ok = r["measured"] <= b
        res_ok = None if r.get("reserved") is None else r["reserved"] <= b
        bounded = r.get("budget_of") or "allocated"
        ok = res_ok if bounded == "reserved" and res_ok is not None else alloc_ok
        total += 1
        met += bool(ok)
        yn = lambda v: "-" if v is None else ("yes" if v else "NO")
        out.append(head + f"| {mib(b)} | {bounded} | {mib(r['measured'])} | {mib(r.get('reserved'))} | {yn(alloc_ok)} | "
                   f"{yn(res_ok)} | {'met' if ok else 'OVER'} |")
    out.append("")
    out.append(f"{met} of {total} plans measured at or under their budget.")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# peers: PyTorch's own memory savers on the device, memplan at each one's peak

def model_blocks(name, model):
    """(head, blocks, tail) of the corpus models that have a block structure."""
    import torch
    import torch.nn as nn
    if name.startswith("resnet"):
        head = nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
        blocks = [*model.layer1, *model.layer2, *model.layer3, *model.layer4]
        return head, blocks, nn.Sequential(model.avgpool, nn.Flatten(1), model.fc)
    if name.startswith("gpt"):
        class Embed(nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, idx):
                return self.m.drop(self.m.tok_emb(idx) + self.m.pos_emb[:, :idx.shape[1], :])
        return Embed(model), list(model.blocks), nn.Sequential(model.ln_f, model.head)
    if name.startswith("vit"):
        class Embed(nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                x = self.m._process_input(x)
                x = torch.cat([self.m.class_token.expand(x.shape[0], -1, -1), x], dim=1)
                return self.m.encoder.dropout(x + self.m.encoder.pos_embedding)

        class Tail(nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m.heads(self.m.encoder.ln(x)[:, 0])
        return Embed(model), list(model.encoder.layers), Tail(model)
    raise SystemExit(f"gpu_check: no block split for {name} (resnet*, gpt*, vit* have one)")


def peer_worker(a):
    """One PyTorch training configuration in its own process: prints RESULT {json}."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    sys.path.insert(0, a.samples)
    import export_models
    spec = export_models.SPECS[a.model]
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = spec.build().to(dev).train()
    x = spec.dummy()
    x = x.repeat(*([math.ceil(a.batch / x.shape[0])] + [1] * (x.dim() - 1)))[:a.batch].contiguous().to(dev)
    forward = model
    if a.peer in ("checkpoint", "sac"):
        head, blocks, tail_ = model_blocks(a.model, model)
        context = {}
        if a.peer == "sac":
            import functools
            from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
            aten = torch.ops.aten
            keep = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.convolution.default}
            keep |= {getattr(getattr(aten, n), o) for n in dir(aten) if n.startswith("_scaled_dot_product")
                     for o in getattr(aten, n).overloads()}

            def policy(ctx, op, *args, **kwargs):
                return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE
            context = {"context_fn": functools.partial(create_selective_checkpoint_contexts, policy)}

        def forward(inp):
            h = head(inp)
            for block in blocks:
                h = checkpoint(block, h, use_reentrant=False, **context)
            return tail_(h)
    elif a.peer == "compile":
        import torch._functorch.config
        torch._functorch.config.activation_memory_budget = 0.5
    elif a.peer != "eager":
        raise SystemExit(f"gpu_check: unknown peer {a.peer}")

    def loss_of(inp, target):
        y = forward(inp)
        return F.cross_entropy(y.reshape(-1, y.shape[-1]), target.reshape(-1))
    step = torch.compile(loss_of) if a.peer == "compile" else loss_of
    with torch.no_grad():
        y = model(x[:1])
    torch.manual_seed(1)
    target = torch.randint(0, y.shape[-1], (a.batch, *y.shape[1:-1]), device=dev)
    del y
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    cuda = dev.type == "cuda"
    times, peaks = [], []
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=False)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        loss = step(x, target)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        peaks.append(torch.cuda.max_memory_allocated() if cuda else None)
        del loss
    print("RESULT " + json.dumps({"step_seconds": times, "peak_bytes": peaks,
                                  "reserved": torch.cuda.max_memory_reserved() if cuda else None,
                                  "torch": torch.__version__}), flush=True)


def peers(a):
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f"peers-{a.model}-", dir=a.out)
    onnx = os.path.join(a.models, a.model + ".onnx")
    rows = []
    path = os.path.join(a.out, f"peers-{a.model}.json")
    run, err = memplan_run(a, onnx, a.batch, os.path.join(work, "unplanned.json"))
    rows.append({"side": "memplan", "config": "unplanned", **({"error": err} if err else run_figures(run))})
    for peer in [p for p in a.peers.split(",") if p]:
        cmd = [sys.executable, os.path.abspath(__file__), "peer-worker", "--model", a.model, "--peer", peer,
               "--batch", str(a.batch), "--steps", str(a.steps), "--device", a.device, "--samples", a.samples]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.peer_timeout)
        except subprocess.TimeoutExpired:
            rows.append({"side": "torch", "config": peer, "error": f"timeout after {a.peer_timeout} s"})
            continue
        found = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if not found:
            rows.append({"side": "torch", "config": peer, "error": f"exit {p.returncode}: {tail(p.stderr)}"})
            continue
        r = json.loads(found[0][len("RESULT "):])
        times, peaks = r["step_seconds"], [b for b in r["peak_bytes"] if b is not None]
        peak = max(peaks[1:] or peaks) if peaks else None
        rows.append({"side": "torch", "config": peer, "step_seconds": statistics.median(times[1:] or times),
                     "measured": peak, "reserved": r.get("reserved"), "torch": r.get("torch")})
        if peak is None:  # on the CPU PyTorch reports no peak: nothing to plan against
            continue
        plan_path = os.path.join(work, f"plan-{peer}.json")
        plan, err = memplan_plan(a, onnx, a.batch, f"{peak}B", plan_path, a.strategy)
        label = f"{a.strategy} at {peer}'s peak"
        if err:
            rows.append({"side": "memplan", "config": label, "budget_bytes": peak, "error": err})
            continue
        run, err = memplan_run(a, onnx, a.batch, os.path.join(work, f"run-{peer}.json"), plan_path)
        rows.append({"side": "memplan", "config": label, "budget_bytes": peak,
                     "strategy": plan.get("strategy"), **({"error": err} if err else run_figures(run))})
        write_json(path, {"model": a.model, "batch": a.batch, "device": a.device, "rows": rows})
    write_json(path, {"model": a.model, "batch": a.batch, "device": a.device, "rows": rows})
    print(peers_table(read_json(path)))


def peers_table(t):
    rows = t["rows"]
    eager = next((r for r in rows if r["config"] == "eager" and r.get("step_seconds")), None)
    out = [f"### {t['model']}, batch {t['batch']}", "",
           "| side | config | step ms | vs eager | allocated peak MiB | predicted MiB | budget MiB | reserved MiB |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        head = f"| {r['side']} | {r['config']} "
        if "error" in r:
            out.append(head + f"| error: {r['error'][:160]} ||||||")
            continue
        t_ = r.get("step_seconds")
        rel = f"{t_ / eager['step_seconds']:.2f}x" if eager and t_ else "-"
        out.append(head + f"| {t_ * 1e3:.2f} | {rel} | {mib(r.get('measured'))} | {mib(r.get('predicted'))} | "
                   f"{mib(r.get('budget_bytes'))} | {mib(r.get('reserved'))} |" if t_ else head + "| - | - | - | - | - | - |")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# report

def profile_section(out):
    lines = []
    for name in sorted(os.listdir(out)):
        if not name.endswith("-profile.json"):
            continue
        model = name[:-len("-profile.json")]
        prof = read_json(os.path.join(out, name), {})
        run = read_json(os.path.join(out, f"{model}-profile-run.json"), {})
        plan = read_json(os.path.join(out, f"{model}-profile-plan.json"), {})
        nodes = prof.get("nodes", [])
        device = sum(n.get("device_seconds", 0) for n in nodes)
        recompute = sum(n.get("device_seconds", 0) for n in nodes if n.get("phase") == "recompute")
        lines += [f"### {model}, batch {prof.get('batch')}, plan `{plan.get('strategy')}` at {mib(plan.get('budget_bytes'))} MiB",
                  "", "| figure | value |", "|---|---:|",
                  f"| profiler backend | {prof.get('backend')} |",
                  f"| predicted peak (allocated) MiB | {mib(run.get('predicted_peak_bytes'))} |",
                  f"| profiler peak (device memory held, or counted on the CPU) MiB | {mib(prof.get('peak_bytes'))} |",
                  f"| caching allocator: allocated peak MiB | {mib(prof.get('cuda_allocated_peak_bytes'))} |",
                  f"| caching allocator: reserved peak MiB | {mib(prof.get('cuda_reserved_peak_bytes'))} |",
                  f"| step ms (host) | {prof.get('step_seconds', 0) * 1e3:.2f} |",
                  f"| kernels, copies and sets ms (device) | {device * 1e3:.2f} |",
                  f"| recompute ms: measured (host) / on the device / predicted | "
                  f"{prof.get('recompute_seconds', 0) * 1e3:.2f} / {recompute * 1e3:.2f} / "
                  f"{prof.get('predicted_recompute_seconds', 0) * 1e3:.2f} |",
                  f"| dropped records | {prof.get('dropped_records', 0)} |", ""]
        lines += [f"- warning: {w}" for w in prof.get("warnings", [])]
    return "\n".join(lines) if lines else "(no profile)"


def report(a):
    out = a.out
    env = read_json(os.path.join(out, "environment.json"), {})
    smoke = read_json(os.path.join(out, "smoke.json"))
    parts = [f"# memplan on {env.get('device_name', a.device if hasattr(a, 'device') else '?')}", ""]
    parts += [f"- {k}: {v}" for k, v in env.items()]
    parts += ["", "## Smoke run", ""]
    if smoke:
        f = run_figures(smoke)
        parts.append(f"`memplan run {smoke.get('model')} --batch {smoke.get('batch')} --steps {smoke.get('steps')}` on "
                     f"{f['device']}: predicted {mib(f['predicted'])} MiB, measured {mib(f['measured'])} MiB allocated, "
                     f"{mib(f['reserved'])} MiB reserved; losses {smoke.get('loss')}")
    else:
        parts.append("(no smoke run: see log.txt)")
    parts += ["", "## Profile of a plan", "", profile_section(out)]
    rows = read_json(os.path.join(out, "accuracy.json"))
    parts += ["", "## Accuracy: predicted against measured peaks", ""]
    parts.append(accuracy_table(rows) if rows else "(not run)")
    parts += ["", "## Budget check: does each plan measure at or under its budget?", ""]
    parts.append(budget_table(rows) if rows else "(not run)")
    parts += ["", "## Peers: PyTorch's memory savers, and memplan at each one's peak", ""]
    peer_files = sorted(n for n in os.listdir(out) if n.startswith("peers-") and n.endswith(".json"))
    for n in peer_files:
        parts += [peers_table(read_json(os.path.join(out, n))), ""]
    if not peer_files:
        parts.append("(not run)")
    text = "\n".join(parts) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--memplan", required=True)
        p.add_argument("--models", required=True, help="folder of the .onnx files")
        p.add_argument("--device", default="cuda")
        p.add_argument("--strategy", default="auto")
        p.add_argument("--timeout", type=int, default=600, help="seconds per memplan command")
        p.add_argument("--out", required=True)
    p = sub.add_parser("accuracy")
    common(p)
    p.add_argument("--specs", required=True, help="model:batch,...")
    p.add_argument("--budgets", default="75%,50%")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--jobs", type=int, default=4)
    p = sub.add_parser("peers")
    common(p)
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--peers", default="eager,checkpoint,sac,compile")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--peer-timeout", type=int, default=240)
    p.add_argument("--samples", default=os.path.dirname(os.path.abspath(__file__)),
                   help="folder of export_models.py")
    p = sub.add_parser("peer-worker")
    for flag in ("--model", "--peer", "--device", "--samples"):
        p.add_argument(flag, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p = sub.add_parser("report")
    p.add_argument("--out", required=True)
    a = ap.parse_args()
    {"accuracy": accuracy, "peers": peers, "peer-worker": peer_worker, "report": report}[a.command](a)


if __name__ == "__main__":
    main()
