#!/usr/bin/env bash
# Installs every Debian package memplan needs to build, test and export its sample models.
# Idempotent: packages already present are skipped; apt-get update runs only when needed.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libonnx-dev libprotobuf-dev protobuf-compiler nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  coinor-libcbc-dev
  libtorch-dev libopenblas0-pthread
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libgl-dev
  python3-torch python3-torchvision python3-onnx
  libonnx-testdata
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} Debian packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${#missing[@]} Debian package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
