#!/usr/bin/env bash
# Installs everything memplan needs to build, test and export its sample models:
#   1. Debian packages (apt), skipped when already installed (libgloo-dev: the headers that
#      LibTorch's ProcessGroupGloo.hpp includes; the wheel carries the compiled Gloo, not them);
#   2. the Python environment (PyPI, pinned in scripts/requirements.txt): torch (its LibTorch is
#      what the executor links), torchvision, onnx, onnxscript. It lives outside the clone, in
#      ${MEMPLAN_CACHE:-~/.cache/memplan}/venv-<hash of requirements.txt>, so fresh clones and CI
#      reuse it and nothing downloads twice.
# Idempotent. `install-deps.sh --print-venv` prints the environment's folder and installs nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REQUIREMENTS="$ROOT/scripts/requirements.txt"
CACHE=${MEMPLAN_CACHE:-$HOME/.cache/memplan}
HASH=$(sha256sum "$REQUIREMENTS" | cut -c1-12)
VENV="$CACHE/venv-$HASH"

if [ "${1:-}" = "--print-venv" ]; then echo "$VENV"; exit 0; fi

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libonnx-dev libprotobuf-dev protobuf-compiler nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
  coinor-libcbc-dev
  libgloo-dev
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libgl-dev
  python3 python3-venv
  libonnx-testdata
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} Debian packages already installed"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "install-deps: installing ${#missing[@]} Debian package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The Python environment. A marker written last tells a complete environment from one that an
# interrupted install left behind (which is removed and made again).
if [ -f "$VENV/.memplan-complete" ]; then
  echo "install-deps: Python environment ready ($VENV)"
else
  echo "install-deps: creating the Python environment $VENV (torch's CUDA wheel: several GB, once)"
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$REQUIREMENTS"
  "$VENV/bin/python" -c 'import torch, torchvision, onnx, onnxscript' ||
    { echo "install-deps: the new environment cannot import torch/onnx" >&2; exit 1; }
  cp "$REQUIREMENTS" "$VENV/.memplan-complete"
  echo "install-deps: Python environment ready ($VENV)"
fi
echo "install-deps: done"
