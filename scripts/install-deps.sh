#!/usr/bin/env bash
# Installs everything memplan needs to build, test and export its sample models:
#   1. Debian packages (apt), skipped when already installed (libgloo-dev: the headers that
#      LibTorch's ProcessGroupGloo.hpp includes; the wheel carries the compiled Gloo, not them);
#   2. the Python environment (PyPI, pinned in scripts/requirements.txt): torch (its LibTorch is
#      what the executor links), torchvision, onnx, onnxscript. It lives outside the clone, in
#      ${MEMPLAN_CACHE:-~/.cache/memplan}/venv-<hash of requirements.txt>, so fresh clones and CI
#      reuse it and nothing downloads twice.
# Idempotent.
#
# usage: install-deps.sh [--requirements FILE] [--print-venv]
#   --requirements FILE  another pinned set instead of requirements.txt, in its own environment
#                        (venv-<hash of FILE>, cached the same way), e.g. the oldest supported
#                        LibTorch: --requirements scripts/requirements-torch211.txt
#   --print-venv         print the environment's folder and install nothing
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REQUIREMENTS="$ROOT/scripts/requirements.txt"
PRINT_VENV=0
while [ $# -gt 0 ]; do
  case "$1" in
    --requirements) [ $# -ge 2 ] || { echo "install-deps: --requirements needs a file" >&2; exit 1; }
                    REQUIREMENTS=$(realpath "$2"); shift 2 ;;
    --print-venv) PRINT_VENV=1; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "install-deps: unknown argument $1 (try --help)" >&2; exit 1 ;;
  esac
done
[ -f "$REQUIREMENTS" ] || { echo "install-deps: no requirements file $REQUIREMENTS" >&2; exit 1; }
CACHE=${MEMPLAN_CACHE:-$HOME/.cache/memplan}
HASH=$(sha256sum "$REQUIREMENTS" | cut -c1-12)
VENV="$CACHE/venv-$HASH"

if [ "$PRINT_VENV" = 1 ]; then echo "$VENV"; exit 0; fi

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libonnx-dev libprotobuf-dev protobuf-compiler nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
  coinor-libcbc-dev
  libgloo-dev
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libgl-dev
  python3 python3-venv
  libonnx-testdata
  clang libclang-rt-14-dev clang-format
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
  # torch always; torchvision, onnx and onnxscript where the file pins them.
  MODULES=torch
  for m in torchvision onnx onnxscript; do
    if grep -qi "^$m==" "$REQUIREMENTS"; then MODULES="$MODULES, $m"; fi
  done
  "$VENV/bin/python" -c "import $MODULES" ||
    { echo "install-deps: the new environment cannot import $MODULES" >&2; exit 1; }
  cp "$REQUIREMENTS" "$VENV/.memplan-complete"
  echo "install-deps: Python environment ready ($VENV)"
fi
echo "install-deps: done"
