#!/usr/bin/env bash
# Builds memplan against a CUDA PyTorch's LibTorch on a GPU machine, checks the GPU path, and
# prints the prediction-accuracy table on the device (caching-allocator meter, plans).
#
# usage: scripts/gpu-build.sh [--python PY] [--build DIR] [--models DIR] [--device cuda:0]
#                             [--only resnet18,gpt] [--skip-accuracy]
#
# Needs: a python with a CUDA build of torch (its LibTorch: headers, libraries, CMake
# config), the CUDA toolkit (/usr/local/cuda or CUDA_HOME), cmake, ninja, and the Debian
# packages scripts/install-deps.sh lists (ONNX, protobuf, nlohmann-json, gtest). Nothing is
# downloaded. Models come from --models (a folder of exported .onnx files) or are exported
# with samples/export_models.py using that same python.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
BUILD="$ROOT/build-gpu"
MODELS=""
DEVICE="cuda:0"
ONLY=""
ACCURACY=1
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PY=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --skip-accuracy) ACCURACY=0; shift ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "gpu-build: unknown argument $1" >&2; exit 1 ;;
  esac
done

die() { echo "gpu-build: $*" >&2; exit 1; }

# 1. The CUDA LibTorch inside the python's torch.
"$PY" -c 'import torch' 2>/dev/null || die "$PY cannot import torch; pass --python with a CUDA PyTorch"
read -r TORCH_VERSION TORCH_CUDA TORCH_ABI TORCH_CMAKE < <("$PY" - <<'EOF'
import torch, torch.utils
print(torch.__version__, torch.version.cuda or "none", int(torch._C._GLIBCXX_USE_CXX11_ABI),
      torch.utils.cmake_prefix_path)
EOF
)
echo "gpu-build: torch $TORCH_VERSION, CUDA $TORCH_CUDA, C++11 ABI $TORCH_ABI, CMake config in $TORCH_CMAKE"
[ "$TORCH_CUDA" != "none" ] || die "torch $TORCH_VERSION is a CPU build; use a CUDA build of PyTorch"
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
  die "torch sees no GPU (torch.cuda.is_available() is False): check the driver and CUDA_VISIBLE_DEVICES"
# memplan's other dependencies (Debian's ONNX, protobuf) use the C++11 ABI; a LibTorch built
# with the old ABI cannot share std::string with them.
[ "$TORCH_ABI" = "1" ] ||
  die "this torch uses the pre-C++11 ABI (_GLIBCXX_USE_CXX11_ABI=0), unlike Debian's ONNX and protobuf; use a
  PyTorch >= 2.6 wheel or a 'cxx11-abi' LibTorch (set Torch_DIR to its share/cmake/Torch)"

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ -x "$CUDA_HOME/bin/nvcc" ] || die "no CUDA toolkit at $CUDA_HOME (set CUDA_HOME)"
TORCH_LIB=$("$PY" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')

# 2. Configure and build (the executor links the CUDA LibTorch; MEMPLAN_TORCH_CUDA is set when
#    its config exports the CUDA libraries).
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_CMAKE" \
  -DCUDAToolkit_ROOT="$CUDA_HOME" -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" \
  -DCMAKE_BUILD_RPATH="$TORCH_LIB" | grep -E "memplan|Torch|CUDA|Error" || true
grep -q "MEMPLAN_TORCH_CUDA" "$BUILD/build.ninja" ||
  die "the executor was configured without CUDA support (is $TORCH_CMAKE a CUDA LibTorch?)"
ninja -C "$BUILD" memplan executor_tests executor_conformance_tests
MEMPLAN="$BUILD/cli/memplan"
export LD_LIBRARY_PATH="$TORCH_LIB:${LD_LIBRARY_PATH:-}"

# 3. Models.
if [ -z "$MODELS" ]; then
  MODELS="$BUILD/model-cache"
  "$PY" "$ROOT/samples/export_models.py" --out "$MODELS" \
    --models resnet18,resnet50,vgg16,mobilenet_v2,vit_b_16,gpt,densenet121,efficientnet_b0,googlenet,swin_t,gpt_deep
fi
export MEMPLAN_MODEL_CACHE="$MODELS"

# 4. The GPU path: a run on the device, its JSON, and the caching-allocator meter.
"$MEMPLAN" run "$MODELS/resnet18.onnx" --batch 8 --steps 3 --device "$DEVICE" --random-weights \
  --json "$BUILD/gpu-smoke.json"
"$PY" - "$BUILD/gpu-smoke.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["device"].startswith("cuda"), r["device"]
assert r["measured_peak_bytes"] > 0 and all(p > 0 for p in r["reserved_peak_bytes"])
print(f"gpu-build: smoke run on {r['device']}: measured {r['measured_peak_bytes'] / 2**20:.1f} MiB allocated, "
      f"{max(r['reserved_peak_bytes']) / 2**20:.1f} MiB reserved, predicted {r['predicted_peak_bytes'] / 2**20:.1f} MiB")
EOF
"$BUILD/tests/executor_conformance_tests" | grep conformance: || true

# 5. The accuracy table on the device. The analyzer's CPU rules predict allocator bytes; the
#    CUDA caching allocator's allocated peak is compared (reserved is in the JSON rows).
if [ "$ACCURACY" = 1 ]; then
  "$PY" "$ROOT/bench/executor_accuracy.py" --memplan "$MEMPLAN" --models "$MODELS" --device "$DEVICE" \
    ${ONLY:+--only "$ONLY"} --json "$BUILD/gpu-accuracy.json" | tee "$BUILD/gpu-accuracy.md"
  echo "gpu-build: table in $BUILD/gpu-accuracy.md, rows in $BUILD/gpu-accuracy.json"
fi
