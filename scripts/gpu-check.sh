#!/usr/bin/env bash
# For a user with a GPU: checks memplan's CUDA path on the device, then prints the prediction
# accuracy table there (the caching allocator's allocated peak against the analyzer's).
#
# usage: scripts/gpu-check.sh [--device cuda:0] [--only resnet18,gpt] [--skip-accuracy]
#
# The normal build (`make`) already compiles the CUDA paths against the torch wheel's CUDA
# LibTorch; this script only runs them. Nothing is downloaded beyond what `make` installs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEVICE="cuda:0"
ONLY=""
ACCURACY=1
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --skip-accuracy) ACCURACY=0; shift ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
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

# 2. The accuracy table on the device.
if [ "$ACCURACY" = 1 ]; then
  "$PY" "$ROOT/bench/executor_accuracy.py" --memplan "$MEMPLAN" --models "$MODELS" --device "$DEVICE" \
    ${ONLY:+--only "$ONLY"} --json "$BUILD/gpu-accuracy.json" | tee "$BUILD/gpu-accuracy.md"
  echo "gpu-check: table in $BUILD/gpu-accuracy.md, rows in $BUILD/gpu-accuracy.json"
fi
