#!/usr/bin/env python3
"""FSDP2 as memplan's peer on CPU (issue 28 item 4).

Trains the corpus's gpt and resnet18 (samples/export_models.py's definitions, same sizes) and a
parameter-heavy classifier (`fc_heavy`, defined below: four convolutions and a 144 MiB Linear
layer, 225 MiB of weights) with PyTorch's FSDP2, `torch.distributed.fsdp.fully_shard`, on Gloo
with N local ranks (one process per rank, world on 127.0.0.1, torchrun-style environment), and
compares each rank's measured peak with memplan's predicted per-rank peak.

FSDP2 units: fully_shard on every module that owns parameters directly (each Linear, Conv2d,
BatchNorm2d, LayerNorm, Embedding), children first, then on the root (which keeps any parameter
of its own, e.g. gpt's pos_emb). Everything else is FSDP2's default: reshard_after_forward
(True for every unit but the root), one unit of backward prefetch, no CPU offload, fp32.
`--units` prints each unit in forward order with its parameter bytes and per-rank shard bytes.

Each rank trains on its own batch of --batch samples (the same on every rank count; rank r's
inputs and targets come from seed 1 + r); memplan is asked for the same thing:
`memplan plan MODEL --batch (batch x N) --devices N --shard parameters --strategy none`.
A one-process eager run (ranks = 1, no FSDP) is the baseline.

Gradients, as a training loop keeps them between steps:
  none   optimizer.zero_grad() at its default (set_to_none=True), as PyTorch 2.x users write it
  kept   optimizer.zero_grad(set_to_none=False): the gradients live from step to step

Memory is counted as samples/pytorch_peer_bench.py counts it: its LD_PRELOAD shim counts the
live bytes of libc10's posix_memalign allocations (c10's CPU allocator: every tensor's storage,
including FSDP2's all-gather and reduce-scatter buffers; Gloo's own transport buffers are not
tensors and are left out). A step's peak runs from just after zero_grad to the end of
optimizer.step(); the table gives the largest of steps 2..N (step 1 includes FSDP2's lazy
init), per rank, and where in the step the worst rank reached it (between which two of the
units' forward pre-hooks, output-gradient hooks, the loss, the end of backward and of the step).

usage (the project's venv python):
  $VENV/bin/python bench/fsdp_peer.py --memplan build/cli/memplan \\
      --model-dir ~/.cache/memplan/models-51bca78e79fa [--models gpt,resnet18,fc_heavy]
      [--ranks 1,2,4] [--grads none,kept] [--batch 16] [--steps 3] [--units] [--trace MODELS]
      [--goal-grads none]
      [--save-measured FILE | --measured FILE] [--out bench/fsdp_peer_results.md]
--save-measured FILE keeps every rank's results; --measured FILE compares memplan with them
again without running FSDP2 (seconds instead of half an hour), e.g. after memplan changes:
  $VENV/bin/python bench/fsdp_peer.py --measured bench/fsdp_peer_measured.json --units \
      --trace fc_heavy --model-dir ~/.cache/memplan/models-51bca78e79fa
fc_heavy's ONNX, and that of a model --model-dir lacks (a held-out model, e.g. alexnet), is
exported on first use to --export-dir (default ~/.cache/memplan/fsdp-peer).
--goal-grads: the grads rows whose goal lines are computed (memplan's --sweep per shard mode and
bucket size: minutes per row).
--out '' prints the tables only. --worker MODEL N RANK is internal (one rank of one run).
"""
import argparse
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "samples"))
import pytorch_peer_bench as peer  # noqa: E402  (the shim and its environment)

FC_HEAVY_IMAGE = 128
ANALYSIS_BEGIN = "<!-- analysis: written by hand, kept by fsdp_peer.py -->"
ANALYSIS_END = "<!-- end of analysis -->"


def fc_heavy():
    """A classifier whose weights are mostly one Linear layer: convolutions (3.7 MiB) then
    Linear 16384 -> 2304 (144 MiB), 2304 -> 6144 (54 MiB), 6144 -> 1000 (23.4 MiB)."""
    import torch.nn as nn

    class FcHeavy(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 64, 5, stride=2, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2))
            self.classifier = nn.Sequential(
                nn.Dropout(0.5), nn.Linear(256 * 8 * 8, 2304), nn.ReLU(inplace=True),
                nn.Dropout(0.5), nn.Linear(2304, 6144), nn.ReLU(inplace=True),
                nn.Linear(6144, 1000))

        def forward(self, x):
            return self.classifier(self.features(x).flatten(1))
    return FcHeavy()


# Held out (no test uses it): export_models.py's GPT, wider and shallower than the corpus's gpt,
# with a 24 MiB embedding unit.
GPT_WIDE = dict(vocab=16384, seq_len=64, d_model=384, n_heads=6, n_layers=3)


def spec_of(name):
    import export_models
    if name == "fc_heavy":
        return export_models.Spec("fc_heavy", fc_heavy, export_models._image_dummy(FC_HEAVY_IMAGE))
    if name == "gpt_wide":
        return export_models._gpt("gpt_wide", **GPT_WIDE)
    return export_models.SPECS[name]


def model_path(a, name):
    """The model in --model-dir, else exported on first use into --export-dir (fc_heavy, and a
    held-out model no cache holds, e.g. alexnet)."""
    cached = os.path.join(a.model_dir, name + ".onnx")
    if name != "fc_heavy" and os.path.exists(cached):
        return cached
    import export_models
    os.makedirs(a.export_dir, exist_ok=True)
    path = os.path.join(a.export_dir, name + ".onnx")
    if not os.path.exists(path):
        print(export_models.export_one(spec_of(name), a.export_dir), file=sys.stderr, flush=True)
    return path


# ---- one rank (runs under the shim) ------------------------------------------------------

def owns_params(m):
    return next(m.parameters(recurse=False), None) is not None


def worker(name, n, rank, batch, steps, grads, threads):
    import ctypes
    lib = ctypes.CDLL(peer.shim_path())
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    spec = spec_of(name)
    torch.manual_seed(0)
    model = spec.build()
    model.train()
    full = {k: (tuple(p.shape), p.element_size()) for k, p in model.named_parameters()}
    # FSDP2's units (qualified name, [parameter names]), children before their parents, then
    # the root; with one rank the same modules only mark where the peak is reached.
    mods = [(q, m) for q, m in model.named_modules() if q and owns_params(m)][::-1]
    units = [(q, [q + "." + k for k, _ in m.named_parameters(recurse=False)]) for q, m in mods]
    units.append(("<root>", [k for k, _ in model.named_parameters(recurse=False)]))
    if n > 1:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        dist.init_process_group("gloo", rank=rank, world_size=n)
        mesh = init_device_mesh("cpu", (n,))
        for _, m in mods:
            fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
    order = []
    marks = []  # (where, the step's peak so far): the peak is reached before the first mark at it

    def mark(where):
        marks.append((where, lib.memcount_peak(), lib.memcount_current()))

    def pre(m, args, q):
        if q not in order:
            order.append(q)
        mark("fwd " + q)

    def post(m, args, out, q):
        # Fires as the unit's output gradient arrives (after FSDP2's own pre-backward hook,
        # registered first: the unit is gathered), before the unit's backward runs.
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda g: mark("bwd " + q))
    for q, _ in units:
        mod = model.get_submodule(q if q != "<root>" else "")
        mod.register_forward_pre_hook(lambda m, args, q=q: pre(m, args, q))
        mod.register_forward_hook(lambda m, args, out, q=q: post(m, args, out, q))
    x = spec.dummy()
    x = x.repeat(*([-(-batch // x.shape[0])] + [1] * (x.dim() - 1)))[:batch].contiguous()
    torch.manual_seed(1 + rank)
    if name.startswith("gpt"):
        x = torch.randint(0, model.head.out_features, x.shape, dtype=x.dtype)
        target = torch.randint(0, model.head.out_features, x.shape)
    else:
        x = torch.randn_like(x)
        target = torch.randint(0, 1000, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    rec = {"peak_bytes": [], "start_bytes": [], "phase_peaks": [], "step_seconds": [], "loss": [],
           "peak_at": []}
    for step in range(steps):
        opt.zero_grad(set_to_none=(grads == "none"))
        lib.memcount_reset_peak()
        marks.clear()
        rec["start_bytes"].append(lib.memcount_current())
        t0 = time.perf_counter()
        y = model(x)
        loss = F.cross_entropy(y.reshape(-1, y.shape[-1]), target.reshape(-1))
        del y
        p_fwd = lib.memcount_peak()
        mark("loss")
        loss.backward()
        p_bwd = lib.memcount_peak()
        mark("backward end")
        opt.step()
        rec["step_seconds"].append(time.perf_counter() - t0)
        p_all = lib.memcount_peak()
        mark("step end")
        i = next(i for i, (_, p, _) in enumerate(marks) if p == p_all)
        rec["peak_at"].append((marks[i - 1][0] if i else "step start") + " .. " + marks[i][0])
        rec["peak_bytes"].append(p_all)
        rec["phase_peaks"].append([p_fwd, p_bwd, p_all])
        rec["loss"].append(loss.detach().item())
        del loss
        rec["trace"] = list(marks)  # the last step's
    if rank == 0:
        rec["units"] = [{"name": q, "params": ps} for q, ps in units]
        rec["forward_order"] = order
        rec["param_shapes"] = {k: list(v[0]) + [v[1]] for k, v in full.items()}
    if n > 1:
        dist.destroy_process_group()
    print("RESULT " + json.dumps(rec), flush=True)


# ---- driver ------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(a, name, n, grads):
    """Runs N ranks of one configuration; returns [per-rank result] or {'error': ...}."""
    port = str(free_port())
    procs = []
    for r in range(n):
        env = peer.counted_env(a.threads)
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(r), WORLD_SIZE=str(n),
                   LOCAL_RANK=str(r))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, str(n), str(r),
               "--batch", str(a.batch), "--steps", str(a.steps), "--grads", grads,
               "--threads", str(a.threads)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env))
    out = []
    for r, p in enumerate(procs):
        try:
            so, se = p.communicate(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            return {"error": f"rank {r} did not finish in {a.timeout} s"}
        res = [json.loads(l[7:]) for l in so.splitlines() if l.startswith("RESULT ")]
        if p.returncode != 0 or not res:
            err = [l for l in se.strip().splitlines() if l.strip()]
            return {"error": f"rank {r} exit {p.returncode}: " + (err[-1][:300] if err else "no output")}
        out.append(res[0])
    return out


def memplan_help(a, cmd):
    p = subprocess.run([a.memplan, cmd, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return p.stdout


def memplan_plan(a, path, n, grads, bucket, runtime=None):
    """memplan's predicted per-rank peak (no checkpoints) and its plan JSON, or (None, error).
    runtime "fsdp2": the prediction for FSDP2's own buffers (`--runtime fsdp2`)."""
    fd, out = tempfile.mkstemp(suffix=".plan.json")
    os.close(fd)
    cmd = [a.memplan, "plan", path, "--batch", str(a.batch * n), "--strategy", "none",
           "--budget", "1000GiB", "--json", out]
    if n > 1:
        cmd += ["--devices", str(n), "--shard", "parameters", "--bucket-size", bucket]
        if runtime:
            cmd += ["--runtime", runtime]
    if a.memplan_grads:
        cmd += ["--grads", grads]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        os.unlink(out)
        return None, (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][:200]
    with open(out) as f:
        pj = json.load(f)
    os.unlink(out)
    return pj["predicted_peak_bytes"], pj


SMALLEST_TRIES = (("none", "25MiB"), ("optimizer", "25MiB"), ("gradients", "25MiB"),
                  ("gradients", "1B"), ("parameters", "25MiB"), ("parameters", "1B"))


def plan_json(a, path, n, grads, shard, bucket, options, errors):
    """`memplan plan` for N ranks with `shard` and `bucket` plus `options`: its plan JSON, or
    None with the error's last line appended to `errors`."""
    fd, out = tempfile.mkstemp(suffix=".plan.json")
    os.close(fd)
    cmd = [a.memplan, "plan", path, "--batch", str(a.batch * n), "--devices", str(n),
           "--shard", shard, "--bucket-size", bucket, *options, "--json", out]
    if a.memplan_grads:
        cmd += ["--grads", grads]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if p.returncode != 0:
            errors.append(f"{shard} {bucket}: " +
                          (p.stderr.strip().splitlines() or ["?"])[-1][:120])
            return None
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


def memplan_same_work(a, path, n, grads):
    """memplan's smallest per-rank plan for N ranks that does FSDP2's work (no recompute, one
    micro-batch): the least, over SMALLEST_TRIES, of `--strategy none`'s predicted peak.
    (bytes, label) or (None, error)."""
    best, label, errors = None, None, []
    for shard, bucket in SMALLEST_TRIES:
        pj = plan_json(a, path, n, grads, shard, bucket,
                       ["--strategy", "none", "--budget", "1000GiB"], errors)
        if pj is None:
            continue
        if best is None or pj["predicted_peak_bytes"] < best:
            best, label = pj["predicted_peak_bytes"], f"shard {shard}, {bucket} buckets"
    return (best, label) if best is not None else (None, "; ".join(errors))


def memplan_smallest(a, path, n, grads):
    """memplan's smallest per-rank plan for N ranks, the number issue 28's goal compares with
    FSDP2's peak: the least, over --shard none/optimizer/gradients/parameters and, for the two
    modes whose buckets are module units, --bucket-size 25MiB (units grouped) and 1B (one unit per
    module, FSDP2's), of each one's smallest plan (`--sweep` without a budget; --shard auto
    without a budget answers the cheapest communication, not the smallest peak).
    (bytes, label) or (None, error)."""
    best, label, errors = None, None, []
    for shard, bucket in SMALLEST_TRIES:
        pj = plan_json(a, path, n, grads, shard, bucket, ["--sweep"], errors)
        if pj is None:
            continue
        if best is None or pj["predicted_peak_bytes"] < best:
            best = pj["predicted_peak_bytes"]
            label = (f"shard {shard}, {bucket} buckets, {pj.get('strategy', '?')}, "
                     f"{len(pj.get('checkpoints', []))} ckpt, "
                     f"{pj.get('micro_batches', 1)} micro-batch(es)")
    return (best, label) if best is not None else (None, "; ".join(errors))


def mib(b):
    return "–" if b is None else f"{b / 2**20:.1f}"


def steady(xs):
    return xs[1:] if len(xs) > 1 else xs


def param_bytes(shapes, names):
    total = 0
    for k in names:
        *dims, size = shapes[k]
        numel = 1
        for d in dims:
            numel *= d
        total += numel * size
    return total


def shard_bytes(shapes, names, n):
    """FSDP2 shards dim 0, padded to a multiple of N: ceil(dim0 / N) rows on every rank."""
    total = 0
    for k in names:
        *dims, size = shapes[k]
        numel = -(-dims[0] // n) if dims else 1
        for d in dims[1:]:
            numel *= d
        total += numel * size
    return total


def bucket_summary(pj, shapes):
    b = pj.get("layout", {}).get("buckets") or []
    sizes = [param_bytes(shapes, [k for k in names if k in shapes]) for names in b]
    return len(b), (max(sizes) if sizes else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt,resnet18,fc_heavy")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--grads", default="none,kept")
    ap.add_argument("--batch", type=int, default=16, help="samples per rank")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--goal-grads", default="none",
                    help="the grads rows whose goal lines (memplan's smallest plans) to compute")
    ap.add_argument("--units", action="store_true", help="list FSDP2's units per model")
    ap.add_argument("--trace", default="", help="models whose rank-0 memory at each mark to print")
    # The FSDP2 side takes half an hour; memplan's side seconds. --save-measured keeps the
    # ranks' results, --measured reuses them (same models, ranks, grads, batch, steps) so that a
    # new memplan is compared with the same FSDP2 runs.
    ap.add_argument("--save-measured", default="")
    ap.add_argument("--measured", default="")
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "cli", "memplan"))
    ap.add_argument("--model-dir", default=os.environ.get(
        "MEMPLAN_MODEL_CACHE", os.path.join(ROOT, "build", "model-cache")))
    ap.add_argument("--export-dir", default=os.path.expanduser("~/.cache/memplan/fsdp-peer"))
    ap.add_argument("--out", default=os.path.join(HERE, "fsdp_peer_results.md"))
    ap.add_argument("--worker", nargs=3, metavar=("MODEL", "N", "RANK"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        g = a.grads
        return worker(a.worker[0], int(a.worker[1]), int(a.worker[2]), a.batch, a.steps, g,
                      a.threads)

    import torch
    a.memplan_grads = "--grads" in memplan_help(a, "plan")
    a.memplan_runtime = "--runtime" in memplan_help(a, "plan")
    saved = {}
    if a.measured:
        with open(a.measured) as f:
            saved = json.load(f)
        if (saved["batch"], saved["steps"]) != (a.batch, a.steps):
            raise SystemExit(f"{a.measured}: batch {saved['batch']}, steps {saved['steps']}; "
                             f"this run asks for batch {a.batch}, steps {a.steps}")
    measured = {"batch": a.batch, "steps": a.steps, "torch": torch.__version__,
                "date": time.strftime("%Y-%m-%d"), "runs": {}}
    mv = subprocess.run([a.memplan, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    mv = re.sub(r", \d+ threads$", "", mv.replace("\n", "; "))
    grads_note = ("memplan plans with --grads matching the row" if a.memplan_grads else
                  "this memplan has no --grads option: it keeps gradients between steps in every "
                  "row (its 'kept'), so its 'none' rows predict the 'kept' loop")
    header = [
        "# FSDP2 (fully_shard on Gloo, CPU) as memplan's peer (issue 28 item 4)",
        "",
        "Produced by `bench/fsdp_peer.py` (its docstring says what runs): "
        f"`$VENV/bin/python bench/fsdp_peer.py --memplan build/cli/memplan --model-dir MODELS "
        f"--models {a.models} --ranks {a.ranks} --grads {a.grads} --batch {a.batch} "
        f"--steps {a.steps} --goal-grads {a.goal_grads}{' --units' if a.units else ''}"
        f"{' --trace ' + a.trace if a.trace else ''}"
        f"{' --save-measured ' + a.save_measured if a.save_measured else ''}`."
        + (f" FSDP2's side is {a.measured}'s, measured {saved['date']} with PyTorch {saved['torch']} "
           f"(`--measured`); memplan's is this run's." if a.measured else ""),
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other builds; "
        f"PyTorch {torch.__version__}; {mv}. CPU, {a.threads} thread per rank, {a.batch} samples "
        f"per rank, SGD lr 1e-3, cross-entropy. Peak: the shim's live c10 tensor bytes, the "
        f"largest of steps 2..{a.steps}; 'rank peaks' lists every rank's. FSDP2: fully_shard on "
        f"every module owning parameters, then the root; default prefetch and resharding. "
        f"memplan: `plan --batch {a.batch}xN --devices N --shard parameters --strategy none`, "
        f"bucket sharding at its default --bucket-size 25MiB and at 1B (one bucket per "
        f"parameter tensor); {grads_note}. memplan --runtime fsdp2: the same plan at --bucket-size "
        f"1B (FSDP2's units) with `--runtime fsdp2`, memplan's prediction of FSDP2's own buffers "
        f"(plan.h); 'err, nearest rank' is against the rank whose peak is nearest, 'ranks within "
        f"3%' counts the ranks whose peak it predicts within 3%.",
        "",
        "| model | ranks | grads | measured MiB (max rank) | rank peaks MiB | peak reached | at step start MiB "
        "| memplan 25MiB buckets | err | memplan 1B buckets | err | err beyond 1 rank's "
        "| memplan --runtime fsdp2 | err | err, nearest rank | ranks within 3% |",
        "|---|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(header), flush=True)
    rows, notes, unit_tables, traces, goals = [], [], [], [], []
    for name in a.models.split(","):
        path = model_path(a, name)
        shapes = None
        first_loss = {}  # grads -> the one-process run's step-1 loss
        one_rank = {}  # grads -> (measured, predicted) of the one-process run
        for n in [int(x) for x in a.ranks.split(",")]:
            for grads in a.grads.split(","):
                t0 = time.time()
                key = f"{name}/{n}/{grads}"
                if a.measured:
                    res = saved["runs"].get(key) or {"error": f"{key} is not in {a.measured}"}
                else:
                    res = launch(a, name, n, grads)
                    if isinstance(res, list):
                        res[0]["wall_s"] = time.time() - t0
                measured["runs"][key] = res
                if isinstance(res, dict):
                    row = (f"| {name} | {n} | {grads} | FAILED | – | – | – | – | – | – | – | – "
                           "| – | – | – | – |")
                    notes.append(f"{name}, {n} ranks, grads {grads}: {res['error']}")
                    rows.append(row)
                    print(row, flush=True)
                    continue
                peaks = [max(steady(r["peak_bytes"])) for r in res]
                worst = max(range(n), key=lambda i: peaks[i])
                r = res[worst]
                s = max(range(1, len(r["peak_bytes"])) if len(r["peak_bytes"]) > 1 else [0],
                        key=lambda i: r["peak_bytes"][i])
                phase = r["peak_at"][s]
                meas = peaks[worst]
                shapes = res[0]["param_shapes"]
                preds = []
                for bucket in ("25MiB", "1B"):
                    if n == 1 and bucket == "1B":
                        preds.append((None, "–"))
                        continue
                    pred, pj = memplan_plan(a, path, n, grads, bucket)
                    if pred is None:
                        notes.append(f"{name}, {n} ranks, {bucket}: memplan plan failed: {pj}")
                        preds.append((None, "–"))
                        continue
                    preds.append((pred, f"{100 * (pred - meas) / meas:+.1f}%"))
                    if n > 1 and grads == a.grads.split(",")[0]:
                        nb, big = bucket_summary(pj, shapes)
                        bd = pj.get("breakdown", {})
                        notes.append(
                            f"{name}, {n} ranks, memplan --bucket-size {bucket}: {nb} buckets, "
                            f"the largest {mib(big)} MiB of parameters; its peak "
                            f"{mib(pred)} MiB at {pj.get('peak_event', '?')} (parameters "
                            f"{mib(bd.get('parameters'))}, gradients {mib(bd.get('gradients'))}, "
                            f"activations {mib(bd.get('activations'))} MiB)")
                # memplan's prediction of FSDP2 itself: its runtime's buffers, FSDP2's units.
                fsdp2 = (None, "–")
                if n > 1 and a.memplan_runtime:
                    pred, pj = memplan_plan(a, path, n, grads, "1B", runtime="fsdp2")
                    if pred is None:
                        notes.append(f"{name}, {n} ranks: memplan plan --runtime fsdp2 failed: {pj}")
                    else:
                        near = min(peaks, key=lambda p: abs(p - pred))
                        fsdp2 = (pred, f"{100 * (pred - meas) / meas:+.1f}%",
                                 f"{100 * (pred - near) / near:+.1f}%",
                                 sum(abs(pred - p) <= 0.03 * p for p in peaks))
                # The sharding's own error: memplan's change from one rank to N (FSDP2's units)
                # against FSDP2's change from the one-process run, as a share of FSDP2's peak;
                # it leaves out where the one-process runs already differ (PyTorch eager and
                # memplan's executor on the same model).
                beyond = "–"
                if n == 1 and preds[0][0] is not None:
                    one_rank[grads] = (meas, preds[0][0])
                elif grads in one_rank and preds[1][0] is not None:
                    m1, p1 = one_rank[grads]
                    beyond = f"{100 * ((preds[1][0] - p1) - (meas - m1)) / meas:+.1f}%"
                row = (f"| {name} | {n} | {grads} | {mib(meas)} | "
                       f"{', '.join(mib(p) for p in peaks)} | {phase} | "
                       f"{mib(max(max(steady(x['start_bytes'])) for x in res))} | "
                       f"{mib(preds[0][0])} | {preds[0][1]} | {mib(preds[1][0])} | {preds[1][1]} | "
                       f"{beyond} | {mib(fsdp2[0])} | {fsdp2[1]} | "
                       f"{fsdp2[2] if fsdp2[0] is not None else '–'} | "
                       f"{f'{fsdp2[3]} of {n}' if fsdp2[0] is not None else '–'} |")
                rows.append(row)
                print(row, flush=True)
                notes.append(f"{name}, {n} ranks, grads {grads}: wall {res[0]['wall_s']:.0f} s, "
                             f"step s (rank 0, steps 2..) "
                             f"{['%.2f' % v for v in steady(res[0]['step_seconds'])]}, losses "
                             f"rank 0 {['%.4f' % v for v in res[0]['loss']]}")
                # Same weights and rank 0's data as one process: step 1's loss must agree.
                if n == 1:
                    first_loss[grads] = res[0]["loss"][0]
                elif grads in first_loss:
                    same = abs(res[0]["loss"][0] - first_loss[grads]) <= 1e-5 * abs(first_loss[grads])
                    notes[-1] += ("; step 1's loss equals one process's" if same else
                                  f"; step 1's loss DIFFERS from one process's {first_loss[grads]:.6f}")
                if n > 1 and grads == a.grads.split(",")[0]:
                    unit_tables.append(units_table(name, n, res[0], shapes))
                if name in a.trace.split(","):
                    traces.append(trace_table(name, n, grads, res[0]))
                if n > 1 and grads in a.goal_grads.split(","):
                    same, same_label = memplan_same_work(a, path, n, grads)
                    # The sweep's smallest plan is at most the same-work one: needed only when
                    # that one is above FSDP2's peak (each sweep takes minutes).
                    if same is not None and same <= meas:
                        best, label = None, "not needed"
                    else:
                        best, label = memplan_smallest(a, path, n, grads)
                    goals.append(
                        f"{name}, {n} ranks, grads {grads}: FSDP2 {mib(meas)} MiB; " + (
                            f"memplan failed: {same_label}" if same is None else
                            f"memplan's smallest plan doing the same work {mib(same)} MiB per rank "
                            f"({same_label}) -> {'MET' if same <= meas else 'MISSED'}") + "; " + (
                            "its --sweep not needed -> MET" if label == "not needed" else
                            f"memplan --sweep failed: {label}" if best is None else
                            f"its smallest plan {mib(best)} MiB ({label}) -> "
                            f"{'MET' if best <= meas else 'MISSED'}"))
    tail = ["", "err: (memplan - measured) / measured; memplan's 1B buckets are FSDP2's units (one "
            "unit per module with parameters; plan.h). err beyond 1 rank's: ((memplan N ranks, 1B) - "
            "(memplan 1 rank)) - ((measured N ranks) - (measured 1 rank)), / measured N ranks: the "
            "sharding's error without the one-process runs' difference. peak reached: between which two marks the "
            "worst rank reached its peak: `fwd U` U's forward pre-hook (FSDP2 has gathered U), "
            "`bwd U` U's output gradient arriving (FSDP2 has gathered U and "
            "prefetched the next unit; U's backward has not run), then `loss`, `backward end`, "
            "`step end`. at step start: the largest rank's live bytes just after zero_grad.", ""]
    if goals:
        tail += ["## Goal: memplan's best plan at or below FSDP2's per-rank peak (issue 28)", "",
                 "memplan's smallest plan doing the same work: the least `plan --strategy none` "
                 "(no recompute, one micro-batch) over the shard modes and bucket sizes below. "
                 "memplan's smallest per-rank plan: the least, over `--shard none|optimizer|"
                 "gradients|parameters` (the last two at `--bucket-size` 25MiB and 1B), of `plan "
                 "--batch BxN --devices N --shard S --bucket-size B --sweep` without a budget (its "
                 "JSON's predicted peak; only where the same-work plan is above FSDP2's, since "
                 "a sweep takes minutes), against the largest "
                 "rank's measured peak." + ("" if a.memplan_grads else " This memplan keeps gradients in "
                                     "both rows."), ""] + [f"- {g}" for g in goals] + [""]
    tail += ["## Notes", ""]
    tail += [f"- {x}" for x in notes]
    if unit_tables:
        summary = ["", "## FSDP2's units", "",
                   "One unit per fully_shard call, in forward order (first forward pre-hook); "
                   "bytes: the unit's parameters, whole and per rank (dim 0 padded to a multiple "
                   "of N, as FSDP2 shards). The TorchScript exporter names unit `layer4.0.conv2`'s nodes "
                   "`/layer4/layer4.0/conv2/...` and gpt's `blocks.0.attn.q` `/blocks.0/attn/q/...` "
                   "(a ModuleList is no scope of its own)."]
        for t in unit_tables:
            summary += [""] + (t if a.units else t[:2])
        tail += summary
    if traces:
        tail += ["", "## Where the memory is: rank 0's last step", "",
                 "Live tensor bytes (the shim's) at each mark of the last step, and the step's peak "
                 "so far; marks as in 'peak reached' above."]
        for t in traces:
            tail += [""] + t
    print("\n".join(tail), flush=True)
    if a.save_measured:
        with open(a.save_measured, "w") as f:
            json.dump(measured, f, separators=(",", ":"))
    if a.out:
        # The hand-written analysis between ANALYSIS_BEGIN and ANALYSIS_END in the file being
        # replaced is carried over, after the table.
        kept = []
        if os.path.exists(a.out):
            with open(a.out) as f:
                old = f.read()
            i, j = old.find(ANALYSIS_BEGIN), old.find(ANALYSIS_END)
            if 0 <= i < j:
                kept = ["", old[i:j + len(ANALYSIS_END)]]
        with open(a.out, "w") as f:
            f.write("\n".join(header + rows + kept + tail) + "\n")
        print(f"\nwrote {a.out}")


def trace_table(name, n, grads, r0):
    out = [f"### {name}, {n} rank(s), grads {grads}: rank 0 starts the step at "
           f"{mib(r0['start_bytes'][-1])} MiB, peaks at {mib(r0['peak_bytes'][-1])} MiB", "",
           "| mark | live MiB | peak so far MiB |", "|---|---:|---:|"]
    for where, peak_so_far, live in r0["trace"]:
        out.append(f"| {where} | {mib(live)} | {mib(peak_so_far)} |")
    return out


def units_table(name, n, r0, shapes):
    byname = {u["name"]: u["params"] for u in r0["units"]}
    order = r0["forward_order"] + [u for u in byname if u not in r0["forward_order"]]
    sizes = [param_bytes(shapes, byname[u]) for u in order]
    big = max(range(len(order)), key=lambda i: sizes[i])
    head = [f"### {name}, {n} ranks: {len(order)} units, {mib(sum(sizes))} MiB of parameters, "
            f"the largest unit `{order[big]}` {mib(sizes[big])} MiB "
            f"({mib(shard_bytes(shapes, byname[order[big]], n))} MiB per rank)",
            ""]
    body = ["| # | unit | parameters | MiB | per rank MiB |", "|---:|---|---|---:|---:|"]
    for i, u in enumerate(order):
        short = [k[len(u) + 1:] if u != "<root>" else k for k in byname[u]]
        body.append(f"| {i} | {u} | {', '.join(short) or '(none)'} | {sizes[i] / 2**20:.3f} | "
                    f"{shard_bytes(shapes, byname[u], n) / 2**20:.3f} |")
    return head + body


if __name__ == "__main__":
    sys.exit(main())
