#!/usr/bin/env bash
# Builds a Release gpuwatch and puts the shared libraries it needs beside it (build/release/lib),
# so it can be carried to a machine that reaches no package registry (the GPU check machine).
# glibc itself (libc, libm, the loader) is left to the target: it is backward compatible and
# must match the target's kernel interface. scripts/device-check.sh sets LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUWATCH_BUILD_TESTS=OFF \
  -DGPUWATCH_BUILD_BENCH=OFF >/dev/null
cmake --build build/release --target gpuwatch
mkdir -p build/release/lib
ldd build/release/gpuwatch | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|ld-linux*|libdl.so.*|libpthread.so.*|librt.so.*) ;;
    *) cp -L "$lib" build/release/lib/ ;;
  esac
done
du -sh build/release/gpuwatch build/release/lib
