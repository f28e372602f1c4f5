#!/usr/bin/env bash
# Installs what is missing, builds gpuwatch with its tests and runs the whole suite — unit tests,
# the agent against the mock NVML, real Prometheus, Alertmanager and VictoriaMetrics peers, the
# fuzz targets over their corpora — in one ASan+UBSan build (build/asan).
#
# One build, not an optimised one and then a sanitized one: CI has 2 cores and 25 minutes, and
# building the tree twice took 19 of its 29 minutes (measured on a clean clone, 2026-12-01: the
# -O1 build 7 min, the ASan build 11.5 min, their tests 2.5 and 7 min). Every test passes under
# the sanitizers, which check more than an optimised run can; the optimised binary is what
# scripts/up.sh builds, and speed is measured in bench/, never in tests. With the unity build
# and one ctest test per gtest binary (CMakeLists.txt), a clean clone on this 2-core machine
# took 20 min 27 s in all on 2026-12-06 (18 min 46 s on 12-05, before the fleet's tests):
# packages and the ASan build about 11 min, the suite 9.3 min (557 s, 63 tests; the 13 "waits"
# tests beside it). On 2026-12-07 it had grown to 25 min 7 s (the suite 717 s); with the
# trace, diagnosis, simulator and eval libraries at -O1 in this build (CMakeLists.txt) it took
# 21 min 23 s (the suite 492 s, 68 tests, the 14 "waits" tests beside it).
#
# GPUWATCH_TEST_BUILD=plain runs the same suite on an unsanitized -O1 build instead (build/test):
# a quicker local loop (its build is 7 min, its tests 2.5). Build trees are reused.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
export GPUWATCH_REQUIRE_PEERS=1  # a missing Prometheus is a failure here, not a skip
jobs=$(nproc)

# The suite in two ctest runs at once. The tests labelled "waits" (tests/CMakeLists.txt: a
# demo's fault lands 80 s in, a scrape interval, Grafana's step boundary) are asleep for about
# half their time: 9 tests, 440 s one after another, 210 s of CPU. In the CPU slots of one
# `ctest -j` they left a core idle for minutes; beside them, they fill it. Their output is
# prefixed "[waits] ". Fails when either run fails.
run_suite() {
  local dir=$1 rc=0 waits_rc=0
  (
    ctest --test-dir "$dir" -L waits --output-on-failure -j "$jobs" 2>&1 | sed -u 's/^/[waits] /'
    exit "${PIPESTATUS[0]}"
  ) &
  local waits=$!
  ctest --test-dir "$dir" -LE waits --output-on-failure -j "$jobs" || rc=$?
  wait "$waits" || waits_rc=$?
  [ "$rc" -eq 0 ] && [ "$waits_rc" -eq 0 ] && return 0
  echo "test.sh: failed: $([ "$rc" -ne 0 ] && echo "ctest -LE waits (exit $rc)") $([ "$waits_rc" -ne 0 ] && echo "ctest -L waits (exit $waits_rc)")" >&2
  return 1
}

if [ "${GPUWATCH_TEST_BUILD:-asan}" = plain ]; then
  # -g1 (line tables only): stack traces keep file:line, and the build is about 30 % faster than
  # with full debug info (trace_test.cc: 19.7 s with -g, 14.4 s with -g1 at -O2); -O1 takes
  # another 20-25 % off every compile (trace_test.cc 16.4 s → 12.2 s, agent.cc 20.4 → 15.1 s).
  cmake -S . -B build/test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DGPUWATCH_BUILD_BENCH=OFF >/dev/null
  cmake --build build/test -j "$jobs"
  run_suite build/test
  exit
fi

# -O0: at -O1 the sanitized compile takes 45-80 % longer (agent.cc 36 s → 54 s). -g1 keeps
# file:line in the sanitizers' stack traces.
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g1" \
  -DGPUWATCH_SANITIZE=ON -DGPUWATCH_BUILD_BENCH=OFF >/dev/null
cmake --build build/asan -j "$jobs"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_suite build/asan
