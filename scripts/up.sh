#!/usr/bin/env bash
# Installs what is missing, builds gpuwatch (Release) and runs the main job: the node agent
# with its HTTP endpoint on this machine's GPUs. Extra arguments go to `gpuwatch up`.
# GPUWATCH_BUILD_ONLY=1 stops after the build (scripts/bundle.sh uses that).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUWATCH_BUILD_TESTS=OFF \
  -DGPUWATCH_BUILD_BENCH=OFF >/dev/null
cmake --build build/release --target gpuwatch
[ "${GPUWATCH_BUILD_ONLY:-0}" = 1 ] && exit 0
exec build/release/gpuwatch up "$@"
