#!/usr/bin/env bash
# Builds a Release gpuwatch and puts the shared libraries it needs beside it (build/release/lib),
# so it can be carried to a machine that reaches no package registry (the GPU check machine).
# glibc itself (libc, libm, the loader) is left to the target: it is backward compatible and
# must match the target's kernel interface. scripts/device-check.sh sets LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
GPUWATCH_BUILD_ONLY=1 scripts/up.sh
mkdir -p build/release/lib
ldd build/release/gpuwatch | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|ld-linux*|libdl.so.*|libpthread.so.*|librt.so.*) ;;
    *) cp -L "$lib" build/release/lib/ ;;
  esac
done
du -sh build/release/gpuwatch build/release/lib
