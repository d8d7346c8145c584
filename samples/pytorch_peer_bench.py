#!/usr/bin/env python3
"""Side-by-side benchmark: the same model and batch trained in PyTorch eager (Debian's
python3-torch 1.13, same thread count) without and with torch.utils.checkpoint's
checkpoint_sequential, and with `memplan run` without and with a plan whose budget is the
peak checkpoint_sequential reached. Prints step time and peak memory, and ratios to eager.

PyTorch's CPU peak is measured like memplan's: every tensor allocation LibTorch makes on the
CPU (c10's allocator calls posix_memalign) is counted by a small LD_PRELOAD shim compiled
on first use, so both sides count the same bytes.

usage: pytorch_peer_bench.py [--models resnet18,resnet50,gpt] [--batch N] [--steps N]
                             [--threads N] [--memplan BUILD/cli/memplan] [--model-dir DIR]
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM_SRC = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
/* Counts the bytes of live posix_memalign allocations (c10's CPU allocator). */
#define SLOTS (1u << 22)
static void* keys[SLOTS];
static size_t sizes[SLOTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long long current, peak;
static int (*real_pm)(void**, size_t, size_t);
static void (*real_free)(void*);
static size_t slot(void* p) { return ((uintptr_t)p >> 6) * 2654435761u & (SLOTS - 1); }
int posix_memalign(void** out, size_t align, size_t n) {
  if (!real_pm) real_pm = dlsym(RTLD_NEXT, "posix_memalign");
  int rc = real_pm(out, align, n);
  if (rc == 0 && *out) {
    pthread_mutex_lock(&mu);
    size_t i = slot(*out);
    while (keys[i]) i = (i + 1) & (SLOTS - 1);
    keys[i] = *out; sizes[i] = n;
    current += (long long)n;
    if (current > peak) peak = current;
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
"""


def shim_path():
    path = os.path.join(tempfile.gettempdir(), "memplan-memcount.so")
    if not os.path.exists(path):
        src = path[:-3] + ".c"
        with open(src, "w") as f:
            f.write(SHIM_SRC)
        subprocess.check_call(["cc", "-O2", "-shared", "-fPIC", "-o", path, src, "-ldl", "-lpthread"])
    return path


def ensure_preloaded():
    if os.environ.get("MEMPLAN_MEMCOUNT") == "1":
        return ctypes.CDLL(shim_path())
    env = dict(os.environ, LD_PRELOAD=shim_path(), MEMPLAN_MEMCOUNT="1")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


# ---- PyTorch side -----------------------------------------------------------

def load_specs():
    sys.path.insert(0, HERE)
    import export_models  # noqa: E402  (the project's own model definitions)
    return export_models.SPECS


def sequential_parts(name, model):
    """(head, body): head runs normally, body is an nn.Sequential for checkpoint_sequential."""
    import torch.nn as nn
    if name.startswith("resnet"):
        head = nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
        body = [*model.layer1, *model.layer2, *model.layer3, *model.layer4, model.avgpool, nn.Flatten(1), model.fc]
        return head, nn.Sequential(*body)
    if name in ("vgg16", "mobilenet_v2"):
        feats = list(model.features)
        pool = model.avgpool if name == "vgg16" else nn.AdaptiveAvgPool2d(1)
        return feats[0], nn.Sequential(*feats[1:], pool, nn.Flatten(1), *model.classifier)
    if name.startswith("gpt"):
        class Embed(nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, idx):
                import torch
                return self.m.drop(self.m.tok_emb(idx) + self.m.pos_emb[:, :idx.shape[1], :])
        return Embed(model), nn.Sequential(*model.blocks, model.ln_f, model.head)
    raise SystemExit(f"no sequential split for {name}")


def torch_run(name, spec, batch, steps, segments, lib):
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint_sequential
    torch.manual_seed(0)
    model = spec.build()
    model.train()
    head, body = sequential_parts(name, model)
    x = spec.dummy()
    x = x.repeat(*([max(1, batch // x.shape[0])] + [1] * (x.dim() - 1)))[:batch].contiguous()
    with torch.no_grad():
        out = body(head(x))
    classes = out.shape[-1]
    target = torch.randint(0, classes, out.shape[:-1])
    del out
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times, peaks = [], []
    for step in range(steps):
        opt.zero_grad(set_to_none=False)
        lib.memcount_reset_peak()
        t0 = time.perf_counter()
        h = head(x)
        y = checkpoint_sequential(body, segments, h) if segments > 1 else body(h)
        loss = F.cross_entropy(y.reshape(-1, classes), target.reshape(-1))
        del y, h
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        peaks.append(lib.memcount_peak())
        del loss
    return statistics.median(times[1:] if steps > 1 else times), max(peaks[1:] if steps > 1 else peaks), len(body)


# ---- memplan side -------------------------------------------------------------

def memplan_run(memplan, model_path, batch, steps, threads, plan=None):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [memplan, "run", model_path, "--batch", str(batch), "--steps", str(steps), "--random-weights",
           "--threads", str(threads), "--json", out]
    if plan:
        cmd += ["--plan", plan]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    r = json.load(open(out))
    secs = r["step_seconds"][1:] if steps > 1 else r["step_seconds"]
    rec = r["recompute_seconds"][1:] if steps > 1 else r["recompute_seconds"]
    return statistics.median(secs), r["measured_peak_bytes"], statistics.median(rec)


def memplan_plan(memplan, model_path, batch, budget):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([memplan, "plan", model_path, "--batch", str(batch), "--budget", f"{budget}B", "--json", out],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return out if p.returncode == 0 else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,resnet50,gpt")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--memplan", default=os.path.join(HERE, "..", "build", "cli", "memplan"))
    ap.add_argument("--model-dir", default=os.environ.get("MEMPLAN_MODEL_CACHE", os.path.join(HERE, "..", "build", "model-cache")))
    a = ap.parse_args()
    lib = ensure_preloaded()
    import torch
    threads = a.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    specs = load_specs()
    print(f"PyTorch {torch.__version__} vs memplan, CPU, {threads} thread(s), batch {a.batch}, median of steps 2..{a.steps}\n")
    print("| model | configuration | step s | x eager | peak MiB | x eager | recompute s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in a.models.split(","):
        path = os.path.join(a.model_dir, name + ".onnx")
        t_e, p_e, n_body = torch_run(name, specs[name], a.batch, a.steps, 1, lib)
        k = max(2, int(round(math.sqrt(n_body))))
        t_c, p_c, _ = torch_run(name, specs[name], a.batch, a.steps, k, lib)
        rows = [("PyTorch eager", t_e, p_e, 0.0),
                (f"PyTorch checkpoint_sequential({k})", t_c, p_c, max(0.0, t_c - t_e))]
        t_m, p_m, _ = memplan_run(a.memplan, path, a.batch, a.steps, threads)
        rows.append(("memplan run", t_m, p_m, 0.0))
        plan = memplan_plan(a.memplan, path, a.batch, p_c)
        if plan:
            t_p, p_p, r_p = memplan_run(a.memplan, path, a.batch, a.steps, threads, plan)
            strategy = json.load(open(plan)).get("strategy", "?")
            rows.append((f"memplan run --plan ({strategy}, budget = checkpoint_sequential's peak)", t_p, p_p, r_p))
        else:
            rows.append(("memplan plan: no plan fits checkpoint_sequential's peak", float("nan"), 0, 0.0))
        for label, t, p, r in rows:
            print(f"| {name} | {label} | {t:.3f} | {t / t_e:.2f} | {p / 2**20:.1f} | {p / p_e:.2f} | {r:.3f} |", flush=True)
    print("\nrecompute s: memplan measures it; for checkpoint_sequential it is the step time over eager's.")


if __name__ == "__main__":
    main()
