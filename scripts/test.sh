#!/usr/bin/env bash
# Installs what is missing, builds gpuwatch with its tests and runs the whole suite:
#   1. RelWithDebInfo build (line tables only), every CTest test (unit, mock-NVML integration, real Prometheus);
#   2. an ASan+UBSan build running the same tests.
# GPUWATCH_SKIP_SANITIZE=1 skips step 2 (a quick local loop). Build trees are reused.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
export GPUWATCH_REQUIRE_PEERS=1  # a missing Prometheus is a failure here, not a skip
jobs=$(nproc)

# -g1 (line tables only): stack traces and sanitizer reports keep file:line, and the build, which
# is most of CI's time, is about 30 % faster than with full debug info (measured on trace_test.cc:
# 19.7 s with -g, 14.4 s with -g1 at -O2). -O1 rather than -O2: another 20-25 % off every
# compile (trace_test.cc 16.4 s → 12.2 s, agent.cc 20.4 s → 15.1 s); the tests check behaviour,
# and what runs in production (scripts/up.sh, build/release) is built -O2. Speed is measured in
# bench/, never here.
cmake -S . -B build/test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DGPUWATCH_BUILD_BENCH=OFF >/dev/null
cmake --build build/test -j "$jobs"
ctest --test-dir build/test --output-on-failure -j "$jobs"

if [ "${GPUWATCH_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g1" \
    -DGPUWATCH_SANITIZE=ON -DGPUWATCH_BUILD_BENCH=OFF >/dev/null
  cmake --build build/asan -j "$jobs"
  # Left out under the sanitizers (they ran above): CPU-bound property runs and CLI scripts whose
  # code the sanitized unit, fuzz and end-to-end tests cover too, and which take 5-10x longer
  # here (measured: 72, 48, 40, 38 and 25 s) — about two minutes of a 2-core CI.
  heavy='^(SimulatorTest\.(EveryFaultIsPlantedAndDiagnosed|HealthyRunsHaveNoFaultSignatures)'
  heavy+='|topo_cli_test|baseline_cli_test|link_tools_test)$'
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build/asan --output-on-failure -j "$jobs" -E "$heavy"
fi
