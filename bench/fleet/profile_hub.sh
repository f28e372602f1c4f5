#!/usr/bin/env bash
# One hub under N simulated nodes (bench/fleet/fleet_load.cc, as run_fleet_bench.sh runs it),
# measured in its steady state: after every series exists, for the rest of the run. Prints
# fleet_load's line (hub_cpu_s: the hub's CPU over the whole run) and the hub's peak RSS; with
# --perf FILE, also a perf profile (frame pointers: flat profiles only) of 15 s of the steady
# state, for `perf report -i FILE --no-children --sort symbol`.
# With --relay vm, a VictoriaMetrics (Debian's) runs beside the hub and the hub relays to it
# (--remote-write and --read-from: it keeps no series); with --relay sink the destination is
# bench/fleet/rw_sink.cc, which keeps nothing (the relay's own cost, without a database taking
# the two cores). Also printed: the destination's CPU over the run, what it received, and how
# long after the push stopped the hub's forward spool was empty.
#
#   bench/fleet/profile_hub.sh [--build DIR] [--nodes 400] [--seconds 60] [--perf FILE]
#                              [--relay vm|sink]
set -euo pipefail
BUILD=build/release N=400 SECONDS_RUN=60 PERF="" RELAY="" 
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --nodes) N=$2; shift 2 ;;
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --perf) PERF=$2; shift 2 ;;
    --relay) RELAY=$2; shift 2 ;;
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
RELAY_FLAGS=()
if [ -n "$RELAY" ]; then
  VM_PORT=$((PORT + 1))
  case $RELAY in
    vm)
      victoria-metrics -storageDataPath="$WORK/vm" -httpListenAddr="127.0.0.1:$VM_PORT" \
        -retentionPeriod=100y -dedup.minScrapeInterval=1ms -loggerLevel=ERROR >"$WORK/vm.log" 2>&1 &
      HEALTH=/health ;;
    sink)
      "$BUILD/bench/rw_sink" --port "$VM_PORT" >"$WORK/vm.log" 2>&1 &
      HEALTH=/stats ;;
    *) echo "--relay vm or sink" >&2; exit 2 ;;
  esac
  VM_PID=$!
  PIDS+=("$VM_PID")
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$VM_PORT$HEALTH" >/dev/null && break; sleep 0.1; done
  RELAY_FLAGS=(--remote-write "http://127.0.0.1:$VM_PORT/api/v1/write" --read-from "http://127.0.0.1:$VM_PORT")
  cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
  VM_T0=$(cpu_ticks "$VM_PID")
fi
"$G" hub --listen "127.0.0.1:$PORT" --data-dir "$WORK/hub" --tokens "$WORK/tokens" \
  --wal-sync interval --log-level warning --max-series 3000000 --max-series-per-sender 3000000 \
  "${RELAY_FLAGS[@]}" >"$WORK/hub.log" 2>&1 &
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
      awk '/^gpuwatch_(store_head|remote_write)_series/ {n += $2} END {print int(n)}')
    [ "${h:-0}" -ge $((N * 1358)) ] && break
    sleep 0.2
  done
  sleep 10
  perf record -F 499 -g -p "$HUB" -o "$PERF" -- sleep 15 2>/dev/null
fi
wait "$LOAD_PID"
stop_s=$(date +%s)
tail -1 "$WORK/load.out"
grep VmHWM "/proc/$HUB/status"
# How far the cross-node diagnosis trails the last record 6 s after the push stopped (as
# run_fleet_bench.sh reports it).
sleep 6
curl -fsS -H "Authorization: Bearer $R" "http://127.0.0.1:$PORT/api/v1/findings" |
  python3 -c "import json,sys; a=json.load(sys.stdin)['stats'].get('analysed_until',0); print(f'diagnosis behind at stop: {max(0, $stop_s - a):.0f} s')"
if [ -n "$RELAY" ]; then
  stop=$(date +%s.%N)
  for _ in $(seq 600); do
    f=$(curl -fs -H "Authorization: Bearer $R" "http://127.0.0.1:$PORT/metrics" |
      awk '/^gpuwatch_remote_write_forward_backlog_entries/ {print int($2)}')
    [ "${f:-1}" = 0 ] && break
    sleep 0.5
  done
  echo "forward spool empty $(python3 -c "import time; print(f'{time.time() - $stop:.1f}')") s after the push stopped (backlog ${f:-?})"
  [ "$RELAY" = sink ] && echo "sink: $(curl -fs "http://127.0.0.1:$VM_PORT/stats")"
  echo "$RELAY CPU over the run: $(python3 -c "print(($(cpu_ticks "$VM_PID") - $VM_T0) / $(getconf CLK_TCK))") s; $(grep VmHWM "/proc/$VM_PID/status")"
  curl -fs -H "Authorization: Bearer $R" "http://127.0.0.1:$PORT/metrics" |
    grep -E '^gpuwatch_remote_write_(forward|refused)' || true
fi
