#!/usr/bin/env bash
# One hub under N simulated nodes (bench/fleet/fleet_load.cc, as run_fleet_bench.sh runs it),
# measured in its steady state: after every series exists, for the rest of the run. Prints
# fleet_load's line (hub_cpu_s: the hub's CPU over the whole run) and the hub's peak RSS; with
# --perf FILE, also a perf profile (frame pointers: flat profiles only) of 15 s of the steady
# state, for `perf report -i FILE --no-children --sort symbol`.
#
#   bench/fleet/profile_hub.sh [--build DIR] [--nodes 400] [--seconds 60] [--perf FILE]
set -euo pipefail
BUILD=build/release N=400 SECONDS_RUN=60 PERF=""
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --nodes) N=$2; shift 2 ;;
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --perf) PERF=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
G=$BUILD/gpuwatch LOAD=$BUILD/bench/fleet_load
[ -x "$G" ] && [ -x "$LOAD" ] || { echo "build gpuwatch and fleet_load in $BUILD first" >&2; exit 2; }
WORK=$(mktemp -d /tmp/gpuwatch-hub-profile.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
PORT=19890
. "$(dirname "$0")/lib.sh"
R=$(fleet_tokens "$G" "$WORK")
"$G" hub --listen "127.0.0.1:$PORT" --data-dir "$WORK/hub" --tokens "$WORK/tokens" \
  --wal-sync interval --log-level warning --max-series 3000000 --max-series-per-sender 3000000 \
  >"$WORK/hub.log" 2>&1 &
HUB=$!
PIDS+=("$HUB")
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
"$LOAD" --url "http://127.0.0.1:$PORT" --token-file "$WORK/w.token" --nodes "$N" \
  --seconds "$SECONDS_RUN" --connections 6 --warmup 15 --hub-pid "$HUB" >"$WORK/load.out" \
  2>"$WORK/load.log" &
LOAD_PID=$!
PIDS+=("$LOAD_PID")
if [ -n "$PERF" ]; then
  # Every series created (1,358 a node), then 10 s more: the steady state.
  for _ in $(seq 900); do
    h=$(curl -fs -H "Authorization: Bearer $R" "http://127.0.0.1:$PORT/metrics" |
      awk '/^gpuwatch_store_head_series/ {print int($2)}')
    [ "${h:-0}" -ge $((N * 1358)) ] && break
    sleep 0.2
  done
  sleep 10
  perf record -F 499 -g -p "$HUB" -o "$PERF" -- sleep 15 2>/dev/null
fi
wait "$LOAD_PID"
tail -1 "$WORK/load.out"
grep VmHWM "/proc/$HUB/status"
