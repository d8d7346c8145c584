#!/usr/bin/env python3
"""Peers side by side: the same models, batch and threads trained in PyTorch (the torch wheel
whose LibTorch memplan links) and by `memplan run`, in one benchmark run (issue 9 item 7).

Configurations, each in its own process, its steps run back to back:
  PyTorch eager, grads kept      plain forward, loss, backward, SGD step, with
                                 optimizer.zero_grad(set_to_none=False) between steps
  PyTorch eager, zero_grad()     the same with zero_grad() at its default (set_to_none=True),
                                 as PyTorch 2.x users write it: gradients freed between steps
  checkpoint per block           torch.utils.checkpoint(use_reentrant=False) around every
                                 residual block (resnet) / transformer block (gpt)
  checkpoint_sequential(k)       over stem-less body (blocks + head), k = round(sqrt(len)),
                                 use_reentrant=False
  selective checkpoint per block torch.utils.checkpoint with create_selective_checkpoint_contexts:
                                 MUST_SAVE for mm/addmm/bmm/convolution/_scaled_dot_product_*,
                                 PREFER_RECOMPUTE for everything else
  torch.compile budget 0.5       inductor on CPU, torch._functorch.config.activation_memory_budget
                                 = 0.5, model + loss compiled together (first step = compile)
  memplan run                    no plan
  memplan run --plan             one plan per peer: `memplan plan MODEL --batch B --budget <peer's
                                 measured peak>B --strategy optimal` (--strategy picks another)

Every side trains the same thing: the exporter's own model definitions (samples/export_models.py,
torch.manual_seed(0), weights=None), cross-entropy over the last axis against int64 targets
(what memplan appends to a model whose output is not a scalar), SGD with lr 1e-3 and no
momentum (memplan run's defaults). Gradients between steps (--grads): `none` is zero_grad()'s
default, `kept` is zero_grad(set_to_none=False); both eager rows run whatever --grads says, and
the other peers and memplan (its --grads option, where this memplan has one) follow --grads.
The default, auto, is `none` where memplan has --grads and `kept` where it does not (it then keeps
every gradient between steps), so that the plans and the peers they are compared with agree.
"x eager" is relative to the eager row of the run's --grads.

Memory is counted the same way on every side: a small LD_PRELOAD shim (compiled with cc on first
use) counts the live bytes of the posix_memalign allocations that libc10.so makes, which is how
c10's CPU allocator gets every tensor's storage (about 2 MiB of other posix_memalign users,
oneDNN's own buffers and CUDA libraries' initialisation, are left out on both sides). PyTorch's peak is the shim's per-step peak (it includes the weights,
gradients and inputs alive at the step's start). memplan runs under the same shim; its table
peak is its own per-step meter (a counting wrapper of the same c10 allocator), and the shim's
whole-process peak for that run is printed alongside as a cross-check.

Step time and peak: median of steps 2..N step times, largest of steps 2..N peaks.

usage (with the project's venv python, scripts/install-deps.sh --print-venv):
  $VENV/bin/python samples/pytorch_peer_bench.py --memplan build/cli/memplan \\
      --model-dir build/model-cache [--models resnet18,resnet50,gpt] [--batch 8] [--steps 4]
      [--threads 1] [--peers eager,ckpt_block,ckpt_seq,sac,compile] [--compile-timeout 1800]
      [--grads auto|none|kept] [--out bench/peers_results.md]
  --out '' prints the table only. --worker MODEL PEER is internal (one PyTorch configuration).
"""
import argparse
import hashlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHIM_SRC = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* Counts the bytes of live posix_memalign allocations made by libc10.so (c10's CPU allocator,
   i.e. tensor storage); other callers (oneDNN's own buffers, CUDA libraries' init) are left out. */
#define SLOTS (1u << 22)
static void* keys[SLOTS];
static size_t sizes[SLOTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long long current, peak, process_peak;
static int (*real_pm)(void**, size_t, size_t);
static void (*real_free)(void*);
static size_t slot(void* p) { return ((uintptr_t)p >> 6) * 2654435761u & (SLOTS - 1); }
#define CALLERS 256
static void* caller_addr[CALLERS];
static char caller_c10[CALLERS];
static int is_c10(void* ra) {
  Dl_info d;
  return dladdr(ra, &d) && d.dli_fname && strstr(d.dli_fname, "/libc10.so") != NULL;
}
static int from_c10(void* ra) { /* called under mu; caches the verdict per call site */
  size_t i = ((uintptr_t)ra >> 4) & (CALLERS - 1);
  for (size_t n = 0; n < CALLERS; ++n, i = (i + 1) & (CALLERS - 1)) {
    if (caller_addr[i] == ra) return caller_c10[i];
    if (!caller_addr[i]) { caller_addr[i] = ra; caller_c10[i] = (char)is_c10(ra); return caller_c10[i]; }
  }
  return is_c10(ra);
}
int posix_memalign(void** out, size_t align, size_t n) {
  if (!real_pm) real_pm = dlsym(RTLD_NEXT, "posix_memalign");
  void* ra = __builtin_return_address(0);
  int rc = real_pm(out, align, n);
  if (rc == 0 && *out) {
    pthread_mutex_lock(&mu);
    if (!from_c10(ra)) { pthread_mutex_unlock(&mu); return rc; }
    size_t i = slot(*out);
    while (keys[i]) i = (i + 1) & (SLOTS - 1);
    keys[i] = *out; sizes[i] = n;
    current += (long long)n;
    if (current > peak) peak = current;
    if (current > process_peak) process_peak = current;
    pthread_mutex_unlock(&mu);
  }
  return rc;
}
void free(void* p) {
  if (!real_free) real_free = dlsym(RTLD_NEXT, "free");
  if (p) {
    pthread_mutex_lock(&mu);
    size_t i = slot(p);
    while (keys[i] && keys[i] != p) i = (i + 1) & (SLOTS - 1);
    if (keys[i] == p) {
      current -= (long long)sizes[i];
      /* backward-shift deletion keeps the probe chains intact */
      size_t j = i;
      for (;;) {
        j = (j + 1) & (SLOTS - 1);
        if (!keys[j]) break;
        size_t k = slot(keys[j]);
        if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
          keys[i] = keys[j]; sizes[i] = sizes[j]; i = j;
        }
      }
      keys[i] = 0;
    }
    pthread_mutex_unlock(&mu);
  }
  if (real_free) real_free(p);
}
long long memcount_current(void) { return current; }
long long memcount_peak(void) { return peak; }
void memcount_reset_peak(void) { pthread_mutex_lock(&mu); peak = current; pthread_mutex_unlock(&mu); }
/* MEMCOUNT_OUT=FILE: the whole process's peak is written there at exit. */
__attribute__((destructor)) static void memcount_report(void) {
  const char* out = getenv("MEMCOUNT_OUT");
  if (!out || !*out) return;
  FILE* f = fopen(out, "w");
  if (f) { fprintf(f, "%lld\n", process_peak); fclose(f); }
}
"""

PEER_LABELS = {
    "eager_kept": "PyTorch eager, grads kept",
    "eager_none": "PyTorch eager, zero_grad()",
    "ckpt_block": "checkpoint per block (non-reentrant)",
    "ckpt_seq": "checkpoint_sequential({k})",
    "sac": "selective checkpoint per block (save mm/conv/sdpa)",
    "compile": "torch.compile, activation_memory_budget 0.5",
}


def shim_path():
    tag = hashlib.sha1(SHIM_SRC.encode()).hexdigest()[:10]
    path = os.path.join(tempfile.gettempdir(), f"memplan-memcount-{tag}.so")
    if not os.path.exists(path):
        src = path[:-3] + ".c"
        with open(src, "w") as f:
            f.write(SHIM_SRC)
        tmp = path + f".{os.getpid()}"
        subprocess.check_call(["cc", "-O2", "-shared", "-fPIC", "-o", tmp, src, "-ldl", "-lpthread"])
        os.replace(tmp, path)
    return path


def counted_env(threads, out=None):
    env = dict(os.environ, LD_PRELOAD=shim_path(), OMP_NUM_THREADS=str(threads))
    env.pop("MEMCOUNT_OUT", None)
    if out:
        env["MEMCOUNT_OUT"] = out
    return env


# ---- PyTorch side (worker process, runs under the shim) ------------------------------------

def base_name(name):
    """NAME_dynamo (the dynamo exporter's ONNX) trains the same torch model as NAME."""
    return name[:-len("_dynamo")] if name.endswith("_dynamo") else name


def model_parts(name, model):
    """(head, blocks, tail): head and tail run plainly; blocks are the units checkpointed."""
    import torch
    import torch.nn as nn
    if name.startswith("resnet"):
        head = nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
        blocks = [*model.layer1, *model.layer2, *model.layer3, *model.layer4]
        tail = nn.Sequential(model.avgpool, nn.Flatten(1), model.fc)
        return head, blocks, tail
    if name.startswith("gpt"):
        class Embed(nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, idx):
                return self.m.drop(self.m.tok_emb(idx) + self.m.pos_emb[:, :idx.shape[1], :])
        return Embed(model), list(model.blocks), nn.Sequential(model.ln_f, model.head)
    raise SystemExit(f"no block split for {name}")


def sac_context():
    import functools
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    aten = torch.ops.aten
    save = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.convolution.default}
    for n in dir(aten):
        if n.startswith("_scaled_dot_product"):
            packet = getattr(aten, n)
            save.update(getattr(packet, o) for o in packet.overloads())

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE
    return functools.partial(create_selective_checkpoint_contexts, policy)


def worker(name, peer, batch, steps, threads, grads):
    import ctypes
    lib = ctypes.CDLL(shim_path())
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint, checkpoint_sequential
    torch.set_num_threads(threads)
    sys.path.insert(0, HERE)
    import export_models  # the project's own model definitions
    spec = export_models.SPECS[base_name(name)]
    torch.manual_seed(0)
    model = spec.build()
    model.train()
    head, blocks, tail = model_parts(name, model)
    x = spec.dummy()
    x = x.repeat(*([math.ceil(batch / x.shape[0])] + [1] * (x.dim() - 1)))[:batch].contiguous()
    classes = (model.head if name.startswith("gpt") else model.fc).out_features
    torch.manual_seed(1)
    target = torch.randint(0, classes, (batch, x.shape[1]) if name.startswith("gpt") else (batch,))
    info = {}
    body = nn.Sequential(*blocks, *tail)
    k = max(2, int(round(math.sqrt(len(body)))))
    info["segments"] = k

    if peer.startswith("eager_"):
        grads = peer[len("eager_"):]

        def forward(inp):
            return model(inp)
    elif peer == "ckpt_block":
        def forward(inp):
            h = head(inp)
            for b in blocks:
                h = checkpoint(b, h, use_reentrant=False)
            return tail(h)
    elif peer == "ckpt_seq":
        def forward(inp):
            return checkpoint_sequential(body, k, head(inp), use_reentrant=False)
    elif peer == "sac":
        ctx_fn = sac_context()

        def forward(inp):
            h = head(inp)
            for b in blocks:
                h = checkpoint(b, h, use_reentrant=False, context_fn=ctx_fn)
            return tail(h)
    elif peer == "compile":
        import torch._functorch.config as fconfig
        fconfig.activation_memory_budget = 0.5
        forward = None
    else:
        raise SystemExit(f"unknown peer {peer}")

    class WithLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, inp, tgt):
            y = forward(inp) if forward else self.model(inp)
            return F.cross_entropy(y.reshape(-1, y.shape[-1]), tgt.reshape(-1))

    step_fn = WithLoss()
    if peer == "compile":
        step_fn = torch.compile(step_fn)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times, peaks, losses = [], [], []
    for step in range(steps):
        opt.zero_grad(set_to_none=(grads == "none"))
        lib.memcount_reset_peak()
        t0 = time.perf_counter()
        loss = step_fn(x, target)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        peaks.append(lib.memcount_peak())
        losses.append(loss.detach().item())
        del loss
    info.update(step_seconds=times, peak_bytes=peaks, loss=losses)
    print("RESULT " + json.dumps(info), flush=True)


def torch_run(py, name, peer, a):
    cmd = [py, os.path.abspath(__file__), "--worker", name, peer, "--batch", str(a.batch),
           "--steps", str(a.steps), "--threads", str(a.threads), "--grads", a.grads]
    timeout = a.compile_timeout if peer == "compile" else None
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=counted_env(a.threads), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout} s (wall, incl. compile)"}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["wall"] = time.time() - t0
            return r
    err = [l for l in p.stderr.strip().splitlines() if l.strip()]
    return {"error": f"exit {p.returncode}: " + (err[-1][:200] if err else "no output")}


# ---- memplan side ------------------------------------------------------------------------

def memplan_run(a, model_path, plan=None):
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    fd, shim_out = tempfile.mkstemp(suffix=".peak")
    os.close(fd)
    cmd = [a.memplan, "run", model_path, "--batch", str(a.batch), "--steps", str(a.steps),
           "--random-weights", "--threads", str(a.threads), "--json", out]
    if plan:
        cmd += ["--plan", plan]
    if a.memplan_grads:
        cmd += ["--grads", a.grads]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=counted_env(a.threads, shim_out))
    if p.returncode != 0:
        return {"error": f"memplan run exit {p.returncode}: {p.stderr.strip()[-200:]}"}
    r = json.load(open(out))
    try:
        r["shim_process_peak"] = int(open(shim_out).read())
    except (OSError, ValueError):
        r["shim_process_peak"] = None
    os.unlink(out)
    os.unlink(shim_out)
    return r


def memplan_plan(a, model_path, budget):
    fd, out = tempfile.mkstemp(suffix=".plan.json")
    os.close(fd)
    cmd = [a.memplan, "plan", model_path, "--batch", str(a.batch), "--budget", f"{budget}B",
           "--strategy", a.strategy, "--json", out]
    if a.memplan_grads:
        cmd += ["--grads", a.grads]
    p = subprocess.run(cmd,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        return None, (p.stdout + p.stderr).strip().splitlines()[-1:] or [f"exit {p.returncode}"]
    return out, json.load(open(out))


def plan_label(pj):
    parts = [pj.get("strategy", "?")]
    if pj.get("recomputed"):
        parts.append(f"{len(pj['recomputed'])} recomputed")
    else:
        parts.append(f"{len(pj.get('checkpoints', []))} ckpt")
    if pj.get("micro_batches", 1) > 1:
        parts.append(f"{pj['micro_batches']} micro-batches")
    return ", ".join(parts)


# ---- table -------------------------------------------------------------------------------

def summarize(step_seconds, peaks):
    s = step_seconds[1:] if len(step_seconds) > 1 else step_seconds
    p = peaks[1:] if len(peaks) > 1 else peaks
    return statistics.median(s), max(p)


def fmt_row(name, label, t, p, te, pe, rec):
    if t is None:
        return f"| {name} | {label} | – | – | – | – | – |"
    r = "–" if rec is None else f"{rec:.3f}"
    return f"| {name} | {label} | {t:.3f} | {t / te:.2f} | {p / 2**20:.1f} | {p / pe:.3f} | {r} |"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,resnet50,gpt")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--peers", default="eager,ckpt_block,ckpt_seq,sac,compile")
    ap.add_argument("--compile-timeout", type=int, default=1800)
    # Gradients between steps: none (zero_grad()'s default), kept, or auto (none where memplan
    # has --grads, else kept: what memplan models).
    ap.add_argument("--grads", default="auto", choices=["auto", "none", "kept"])
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "cli", "memplan"))
    # The strategy memplan plans each peer's peak with (selective: per-tensor recompute, issue 11).
    ap.add_argument("--strategy", default="optimal")
    ap.add_argument("--model-dir", default=os.environ.get("MEMPLAN_MODEL_CACHE", os.path.join(ROOT, "build", "model-cache")))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "peers_results.md"))
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "PEER"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker[0], a.worker[1], a.batch, a.steps, a.threads, a.grads)

    import torch
    py = sys.executable
    helps = {c: subprocess.run([a.memplan, c, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True).stdout for c in ("run", "plan")}
    a.memplan_grads = all("--grads" in h for h in helps.values())
    if a.grads == "auto":
        a.grads = "none" if a.memplan_grads else "kept"
    # Both eager rows, the run's --grads first: it is the baseline of "x eager".
    other = "kept" if a.grads == "none" else "none"
    peers = [f"eager_{a.grads}", f"eager_{other}"] + [p for p in a.peers.split(",") if p and p != "eager"]
    base = peers[0]
    mv = subprocess.run([a.memplan, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    mv = re.sub(r", \d+ threads$", "", mv.replace("\n", "; "))  # its default threads, not this run's
    header = [
        f"# memplan vs PyTorch peers (issue 9 item 7)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, shared with other builds (noisy: "
        f"each configuration's steps run back to back in its own process, configurations one after "
        f"another). PyTorch {torch.__version__} (the wheel whose LibTorch memplan links: {mv}). "
        f"CPU, {a.threads} thread(s), batch {a.batch}, {a.steps} steps: step s is the median of steps "
        f"2..{a.steps}, peak the largest of steps 2..{a.steps}. Peak = live tensor bytes counted by "
        f"the posix_memalign LD_PRELOAD shim (PyTorch) and memplan's meter on the same c10 allocator "
        f"(memplan, run under the same shim). Loss: cross-entropy over the last axis; SGD lr 1e-3. "
        f"Gradients between steps: {a.grads} ("
        + ("zero_grad()'s default, set_to_none=True" if a.grads == "none" else "zero_grad(set_to_none=False)")
        + ") for every peer but the eager row that says otherwise; memplan "
        + (f"--grads {a.grads}" if a.memplan_grads else "keeps them (this memplan has no --grads)")
        + f". x eager: relative to {PEER_LABELS[base]}.",
        "",
        "| model | configuration | step s | x eager | peak MiB | x eager | recompute s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(header), flush=True)
    lines, notes, goals = [], [], []
    for name in a.models.split(","):
        path = os.path.join(a.model_dir, name + ".onnx")
        res = {}
        for peer in peers:
            r = torch_run(py, name, peer, a)
            label = PEER_LABELS[peer].format(k=r.get("segments", "?"))
            if "error" in r:
                res[peer] = (label, None, None, r)
                notes.append(f"{name} / {label}: FAILED: {r['error']}")
            else:
                t, p = summarize(r["step_seconds"], r["peak_bytes"])
                res[peer] = (label, t, p, r)
                if peer == "compile":
                    notes.append(f"{name} / {label}: first step (compile) {r['step_seconds'][0]:.1f} s; "
                                 f"process wall {r['wall']:.0f} s")
            if peer == base and res[peer][1] is None:
                raise SystemExit(f"eager failed on {name}: {r['error']}")
            _, te, pe, _ = res[base]
            lbl, t, p, _ = res[peer]
            row = fmt_row(name, lbl, t, p, te, pe, None)
            lines.append(row)
            print(row, flush=True)
        _, te, pe, _ = res[base]
        m = memplan_run(a, path)
        if "error" in m:
            raise SystemExit(f"{name}: {m['error']}")
        tm, pm = summarize(m["step_seconds"], m["peak_bytes"])
        rm = statistics.median(m["recompute_seconds"][1:] or m["recompute_seconds"])
        row = fmt_row(name, "memplan run (no plan)", tm, pm, te, pe, rm)
        lines.append(row)
        print(row, flush=True)
        notes.append(f"{name} / memplan run: shim's whole-process peak {m['shim_process_peak'] / 2**20:.1f} MiB "
                     f"vs memplan's step peak {pm / 2**20:.1f} MiB; losses {['%.4f' % v for v in m['loss']]}, "
                     f"eager's {['%.4f' % v for v in res[base][3]['loss']]}")
        goals.append(f"{name}: memplan unplanned vs {PEER_LABELS[base]}: time {tm / te:.3f}x, peak {pm / pe:.3f}x -> "
                     f"{'MET' if tm <= 1.05 * te and pm <= 1.05 * pe else 'MISSED'} (goal: within 5% on both)")
        goals.append(f"{name}: memplan unplanned peak vs {PEER_LABELS[base]}: {pm / 2**20:.1f} / {pe / 2**20:.1f} MiB "
                     f"= {pm / pe:.3f}x -> {'MET' if abs(pm / pe - 1) <= 0.02 else 'MISSED'} (issue 28: within 2%"
                     + ("" if a.grads == "none" else "; with grads kept, not yet zero_grad()'s default") + ")")
        for peer in peers:
            lbl, t, p, _ = res[peer]
            if t is None:
                continue
            plan, pj = memplan_plan(a, path, p)
            if plan is None:
                row = fmt_row(name, f"memplan plan at {lbl}'s peak: no plan fits ({pj[0][:80]})", None, None, te, pe, None)
                goals.append(f"{name}: at {lbl}'s peak ({p / 2**20:.1f} MiB): no memplan plan fits -> MISSED")
            else:
                mr = memplan_run(a, path, plan)
                os.unlink(plan)
                if "error" in mr:
                    row = fmt_row(name, f"memplan plan at {lbl}'s peak: run failed", None, None, te, pe, None)
                    goals.append(f"{name}: at {lbl}'s peak: memplan run failed ({mr['error'][:120]}) -> MISSED")
                else:
                    tp, pp = summarize(mr["step_seconds"], mr["peak_bytes"])
                    rp = statistics.median(mr["recompute_seconds"][1:] or mr["recompute_seconds"])
                    row = fmt_row(name, f"memplan plan at {lbl}'s peak ({plan_label(pj)})", tp, pp, te, pe, rp)
                    ok = tp < t and pp <= p
                    goals.append(f"{name}: at {lbl}'s peak {p / 2**20:.1f} MiB: memplan plan {tp:.3f} s / "
                                 f"{pp / 2**20:.1f} MiB vs peer {t:.3f} s -> {'MET' if ok else 'MISSED'}"
                                 + ("" if pp <= p else " (memplan's peak over the budget)"))
            lines.append(row)
            print(row, flush=True)
    tail = ["", "recompute s: memplan's measured recompute time (median of steps 2..N); not measured for "
            "the PyTorch peers (–).", "", "## Goals", ""] + [f"- {g}" for g in goals] + ["", "## Notes", ""] + [f"- {n}" for n in notes]
    print("\n".join(tail), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(header + lines + tail) + "\n")
        print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
