#!/usr/bin/env bash
# For a user with a GPU: checks memplan's CUDA path on the device, profiles a checkpointed run
# with CUPTI (device memory and kernel time against the prediction), then prints the
# prediction accuracy table there (the caching allocator's allocated peak against the
# analyzer's).
#
# usage: scripts/gpu-check.sh [--device cuda:0] [--only resnet18,gpt] [--skip-accuracy]
#                             [--profile-model resnet18] [--skip-profile]
#
# The normal build (`make`) already compiles the CUDA paths against the torch wheel's CUDA
# LibTorch; this script only runs them. Nothing is downloaded beyond what `make` installs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEVICE="cuda:0"
ONLY=""
ACCURACY=1
PROFILE_MODEL=resnet18
PROFILE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --skip-accuracy) ACCURACY=0; shift ;;
    --profile-model) PROFILE_MODEL=$2; shift 2 ;;
    --skip-profile) PROFILE=0; shift ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 1 ;;
  esac
done
die() { echo "gpu-check: $*" >&2; exit 1; }

make -C "$ROOT" build >/dev/null
BUILD="$ROOT/build"
MEMPLAN="$BUILD/cli/memplan"
PY=$(bash "$ROOT/scripts/install-deps.sh" --print-venv)/bin/python
VERSION=$("$MEMPLAN" --version)
echo "$VERSION"
echo "$VERSION" | grep -q "CUDA" || die "this memplan was built without CUDA"
echo "$VERSION" | grep -q "(0 device(s) visible)" && die "no CUDA device is visible (nvidia-smi; CUDA_VISIBLE_DEVICES)"

MODELS="$BUILD/model-cache"
"$PY" "$ROOT/samples/export_models.py" --out "$MODELS" \
  --models resnet18,resnet50,vgg16,mobilenet_v2,vit_b_16,gpt,densenet121,efficientnet_b0,googlenet,swin_t,gpt_deep,gpt_dynamo,resnet50_dynamo >/dev/null

# 1. The CUDA path: a run on the device, its JSON, the caching-allocator meter.
"$MEMPLAN" run "$MODELS/resnet18.onnx" --batch 8 --steps 3 --device "$DEVICE" --random-weights \
  --json "$BUILD/gpu-smoke.json"
"$PY" - "$BUILD/gpu-smoke.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["device"].startswith("cuda"), r["device"]
assert r["measured_peak_bytes"] > 0 and all(p > 0 for p in r["reserved_peak_bytes"])
print(f"gpu-check: smoke run on {r['device']}: measured {r['measured_peak_bytes'] / 2**20:.1f} MiB allocated, "
      f"{max(r['reserved_peak_bytes']) / 2**20:.1f} MiB reserved, predicted {r['predicted_peak_bytes'] / 2**20:.1f} MiB")
PYEOF

# 2. The CUPTI profiler on the device: a checkpoint plan (sqrt: every segment but the last is
#    recomputed during backward) run with --profile. CUPTI measures the device memory the
#    process holds (the caching allocator's cudaMalloc'd segments, from the memory held when
#    the step began) and kernel time per node; the caching allocator's own peaks come from the
#    executor's meter; the prediction from the plan.
if [ "$PROFILE" = 1 ]; then
  [ -f "$MODELS/$PROFILE_MODEL.onnx" ] || die "no model $PROFILE_MODEL in $MODELS (--profile-model)"
  "$MEMPLAN" plan "$MODELS/$PROFILE_MODEL.onnx" --batch 8 --budget 100GiB --strategy sqrt \
    --json "$BUILD/gpu-profile-plan.json" >/dev/null
  "$MEMPLAN" run "$MODELS/$PROFILE_MODEL.onnx" --plan "$BUILD/gpu-profile-plan.json" --steps 3 --device "$DEVICE" \
    --random-weights --profile "$BUILD/gpu-profile.json" --trace-events "$BUILD/gpu-profile-trace.json" \
    --json "$BUILD/gpu-profile-run.json" >/dev/null
  "$PY" - "$BUILD/gpu-profile.json" "$BUILD/gpu-profile-run.json" "$BUILD/gpu-profile-plan.json" <<'PYEOF'
import json, sys
prof, run, plan = (json.load(open(f)) for f in sys.argv[1:4])
if prof["backend"] != "cupti":
    sys.exit(f"gpu-check: the profile came from the {prof['backend']!r} backend, not CUPTI: "
             + ("; ".join(prof["warnings"]) or "no reason given"))

def mib(b):
    return f"{b / 2**20:10.1f} MiB"

def versus(measured, predicted):
    return f"{(measured - predicted) / predicted * 100:+6.1f}% vs predicted" if predicted > 0 else "(no prediction)"

predicted = run["predicted_peak_bytes"]
print(f"gpu-check: CUPTI profile of step {prof['step'] + 1} of {prof['model']} on {prof['device']} "
      f"({len(plan['checkpoints'])} checkpoints)")
print(f"  predicted peak (allocated)                  {mib(predicted)}")
for name, b in [("CUPTI: device memory held (cudaMalloc)", prof["peak_bytes"]),
                ("caching allocator: allocated peak", prof["cuda_allocated_peak_bytes"]),
                ("caching allocator: reserved peak", prof["cuda_reserved_peak_bytes"])]:
    print(f"  {name:<43} {mib(b)}  {versus(b, predicted)}")
if not prof["memory_events"]:
    print("  (CUPTI saw no cudaMalloc/cudaFree in the profiled step: the caching allocator reused the segments "
          "it reserved in earlier steps, so its peak is the memory held when the step began)")

device = sum(n["device_seconds"] for n in prof["nodes"])
recompute_device = sum(n["device_seconds"] for n in prof["nodes"] if n["phase"] == "recompute")
measured, predicted_rc = prof["recompute_seconds"], prof["predicted_recompute_seconds"]
print(f"  step {prof['step_seconds'] * 1e3:.2f} ms host, {device * 1e3:.2f} ms of kernels, copies and sets")
ratio = f"measured/predicted {measured / predicted_rc:.2f}" if predicted_rc > 0 else "no prediction in the profile"
print(f"  recompute: measured {measured * 1e3:.2f} ms host ({recompute_device * 1e3:.2f} ms on the device), "
      f"predicted {predicted_rc * 1e3:.2f} ms: {ratio}")
if prof["dropped_records"]:
    print(f"  warning: CUPTI dropped {prof['dropped_records']} records")
for w in prof["warnings"]:
    print(f"  warning: {w}")
if device <= 0:
    sys.exit("gpu-check: CUPTI recorded no device time (no kernel records were attributed)")
if plan["checkpoints"] and recompute_device <= 0:
    sys.exit("gpu-check: the plan recomputes but CUPTI attributed no device time to the recompute phase")
PYEOF
  echo "gpu-check: profile in $BUILD/gpu-profile.json, trace (ui.perfetto.dev) in $BUILD/gpu-profile-trace.json"
fi

# 2b. Data parallelism on NCCL (2 or more GPUs): two ranks on cuda:0 and cuda:1, each shard mode,
#     every rank's measured allocated peak against its prediction.
if [ "$(echo "$VERSION" | sed -n 's/.*(\([0-9]*\) device(s) visible).*/\1/p')" -ge 2 ] 2>/dev/null; then
  for SHARD in none gradients parameters; do
    "$MEMPLAN" plan "$MODELS/resnet18.onnx" --batch 8 --optimizer adam --budget 100GiB --strategy none --devices 2 \
      --shard "$SHARD" --json "$BUILD/gpu-dp-$SHARD-plan.json" >/dev/null
    "$MEMPLAN" run "$MODELS/resnet18.onnx" --plan "$BUILD/gpu-dp-$SHARD-plan.json" --steps 2 --device cuda --nproc 2 \
      --random-weights --json "$BUILD/gpu-dp-$SHARD-run.json" >/dev/null
    "$PY" - "$BUILD/gpu-dp-$SHARD-run.json" "$SHARD" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
for k in r["ranks"]:
    err = (k["measured_peak_bytes"] - r["predicted_peak_bytes"]) / r["predicted_peak_bytes"] * 100
    print(f"gpu-check: NCCL shard {sys.argv[2]} rank {k['rank']}: measured {k['measured_peak_bytes'] / 2**20:.1f} MiB, "
          f"predicted {r['predicted_peak_bytes'] / 2**20:.1f} MiB ({err:+.2f}%)")
PYEOF
  done
else
  echo "gpu-check: fewer than 2 devices visible: the NCCL data-parallel check is skipped"
fi

# 3. The accuracy table on the device.
if [ "$ACCURACY" = 1 ]; then
  "$PY" "$ROOT/bench/executor_accuracy.py" --memplan "$MEMPLAN" --models "$MODELS" --device "$DEVICE" \
    ${ONLY:+--only "$ONLY"} --json "$BUILD/gpu-accuracy.json" | tee "$BUILD/gpu-accuracy.md"
  echo "gpu-check: table in $BUILD/gpu-accuracy.md, rows in $BUILD/gpu-accuracy.json"
fi
