#!/usr/bin/env bash
# Fresh Debian 12 machine with a CUDA toolkit (>= 12.8): installs the build dependencies (apt, and pytest
# and cuobjdump for the Python tests), then configures and builds chordrt into ./build (Release).
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
packages=(cmake ninja-build g++ python3 python3-pip libfmt-dev libspdlog-dev libxxhash-dev nlohmann-json3-dev
          libcli11-dev catch2)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
if ! python3 -c "import pytest" 2>/dev/null; then
  python3 -m pip install -q pytest 2>/dev/null || python3 -m pip install -q --break-system-packages pytest
fi
# cuobjdump (+ the nvdisasm it runs) for the SASS checks (tests/python/test_sass_hazards.py); optional:
# they skip without it.
if ! command -v cuobjdump >/dev/null && ! python3 -c "import glob, nvidia, os; assert glob.glob(os.path.join(nvidia.__path__[0], '*', 'bin', 'nvdisasm'))" 2>/dev/null; then
  python3 -m pip install -q nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm 2>/dev/null ||
    python3 -m pip install -q --break-system-packages nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm 2>/dev/null ||
    echo "setup: no cuobjdump (the SASS checks will skip)"
fi
if [ -z "${CUDA_HOME:-}" ] && ! command -v nvcc >/dev/null && [ -d /usr/local/cuda ]; then export CUDA_HOME=/usr/local/cuda; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v python3)"
cmake --build build
