"""Held-out check of the dropout rule: GPT variants no test uses (samples/export_models.py's GPT at
other sizes and dropout rates), PyTorch eager's peak (zero_grad(), counted by
samples/pytorch_peer_bench.py's shim) against memplan's prediction and measurement; CPU, 1
thread, batch 8, 3 steps (eager: the largest of steps 2..3).

usage: $VENV/bin/python bench/dropout_held_out.py --run build/cli/memplan   (exports to /tmp/held)
"""
import json, os, subprocess, sys
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "samples"))
import export_models, pytorch_peer_bench as pb
OUT = "/tmp/held"
VARIANTS = {
    "gpt_h1": dict(vocab=4096, seq_len=64, d_model=192, n_heads=6, n_layers=3, dropout=0.1),
    "gpt_h2": dict(vocab=2048, seq_len=256, d_model=128, n_heads=2, n_layers=2, dropout=0.3),
}
for n, kw in VARIANTS.items():
    export_models.SPECS[n] = export_models._gpt(n, **kw)
if sys.argv[1] == "--eager":
    pb.worker(sys.argv[2], "eager_none", 8, 3, 1, "none")
    sys.exit(0)
M = sys.argv[2]
for n in VARIANTS:
    export_models.export_one(export_models.SPECS[n], OUT)
    p = subprocess.run([sys.executable, __file__, "--eager", n], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=pb.counted_env(1))
    r = [json.loads(l[7:]) for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if not r:
        print(n, "eager failed:", p.stderr[-500:]); continue
    eager = max(r[0]["peak_bytes"][1:])
    out = subprocess.run([M, "run", os.path.join(OUT, n + ".onnx"), "--batch", "8", "--steps", "3",
                          "--threads", "1", "--grads", "none"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True).stdout
    pred = [l for l in out.splitlines() if l.startswith("predicted") or l.startswith("measured")]
    print(n, "eager peak %.2f MiB" % (eager / 2**20), "|", " | ".join(pred))

# Measured 2026-11-27 at c255233 (build-a, LibTorch 2.14.1, CPU, 1 thread):
#   gpt_h1 eager 63.32 MiB; memplan predicted 63.35, measured 63.35 (+0.05% against eager)
#   gpt_h2 eager 115.00 MiB; memplan predicted 115.31, measured 115.31 (+0.27%)
# With the bool mask memplan modelled before c255233 both would have been 3 B lower per dropped
# element alive at the peak (the loss's backward, where every saved noise is): 3.66 MiB (-5.8%)
# and 9.75 MiB (-8.5%) under eager.
