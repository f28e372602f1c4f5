#!/usr/bin/env bash
# The fleet benchmark (issue 19): simulated agents (bench/fleet/fleet_load.cc, the real agent's
# series and records per node) push to one hub on this machine; for each fleet size, the hub's
# ingest lag, CPU and peak RSS, and how far its diagnosis is behind when the push stops. The same
# series go to VictoriaMetrics beside it (samples only) for samples per CPU-second. Then an
# outage: the hub is SIGKILLed under load and restarted; the backlog drains and one series is
# checked whole (no sample lost, none twice).
#
#   bench/fleet/run_fleet_bench.sh [--build DIR] [--nodes "25 50 100"] [--seconds 60]
#                                  [--outage-nodes 50] [--outage-s 120] [--no-vm] [--no-outage]
# HUB_FLAGS="..." in the environment adds flags to the hub (e.g. --limit write.max_concurrency=2).
# Prints a Markdown table for bench/fleet/RESULTS.md.
set -euo pipefail
BUILD=build/release NODES="25 50 100" SECONDS_RUN=60 OUTAGE_NODES=50 OUTAGE_S=120 VM=1 OUTAGE=1
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --outage-nodes) OUTAGE_NODES=$2; shift 2 ;;
    --outage-s) OUTAGE_S=$2; shift 2 ;;
    --no-vm) VM=0; shift ;;
    --no-outage) OUTAGE=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
G=$BUILD/gpuwatch LOAD=$BUILD/bench/fleet_load
[ -x "$G" ] && [ -x "$LOAD" ] || { echo "build gpuwatch and fleet_load in $BUILD first" >&2; exit 2; }
WORK=$(mktemp -d /tmp/gpuwatch-fleet-bench.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
PORT=19870
# One write token per generator connection (6): six senders to the hub.
. "$(dirname "$0")/lib.sh"
R=$(fleet_tokens "$G" "$WORK")

# The simulated nodes come from 127.0.0.1 with six tokens: six senders to the hub, whose
# per-sender series limit (200,000, about 147 nodes of 1,358 series) is for one real node.
# Raised here, and the limit for all (1,000,000: 736 nodes) with it. HUB_FLAGS adds more.
start_hub() {  # start_hub DIR: sets HUB_PID
  "$G" hub --listen "127.0.0.1:$PORT" --data-dir "$1" --tokens "$WORK/tokens" \
    --wal-sync interval --log-level warning --max-series 3000000 \
    --max-series-per-sender 3000000 ${HUB_FLAGS:-} >>"$WORK/hub.log" 2>&1 &
  HUB_PID=$!
  PIDS+=("$HUB_PID")
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null && return; sleep 0.1; done
  echo "hub did not start" >&2; exit 1
}
kv() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

# Lag after the first WARMUP_S seconds (the hub creates the fleet's series then), and the
# first seconds' worst apart.
WARMUP_S=15
echo "| nodes (GPUs) | samples/s offered | ingest lag p50 / p99 | first ${WARMUP_S} s: lag max | hub CPU (cores) | samples per hub CPU-s | hub peak RSS | diagnosis behind at stop |"
echo "|---|---|---|---|---|---|---|---|"
for n in $NODES; do
  rm -rf "$WORK/hub-$n"
  start_hub "$WORK/hub-$n"
  out=$("$LOAD" --url "http://127.0.0.1:$PORT" --token-file "$WORK/w.token" --nodes "$n" \
    --seconds "$SECONDS_RUN" --connections 6 --warmup "$WARMUP_S" --hub-pid "$HUB_PID" \
    2>>"$WORK/load.log" | tail -1)
  grep -h "^rendered" "$WORK/load.log" | tail -1 >&2 || true
  stop_s=$(date +%s)
  sleep 6
  behind=$(curl -fsS -H "Authorization: Bearer $R" "http://127.0.0.1:$PORT/api/v1/findings" |
    python3 -c "import json,sys; a=json.load(sys.stdin)['stats'].get('analysed_until',0); print(f'{max(0, $stop_s - a):.0f} s')")
  rss=$(awk '/VmHWM/ {printf "%.0f MiB", $2/1024}' "/proc/$HUB_PID/status")
  kill "$HUB_PID"; wait "$HUB_PID" 2>/dev/null || true
  secs=$(kv seconds "$out") samples=$(kv samples "$out") cpu=$(kv hub_cpu_s "$out")
  cores=$(python3 -c "print(f'{$cpu / $secs:.2f}')")
  per_cpu=$(python3 -c "print(f'{$samples / max(1e-9, $cpu):,.0f}')")
  echo "| $n ($((n * 8))) | $(kv samples_per_s "$out") | $(kv lag_p50_ms "$out") / $(kv lag_p99_ms "$out") ms | $(kv warmup_lag_max_ms "$out") ms | $cores | $per_cpu | $rss | $behind |"
  echo "$out" >>"$WORK/runs.txt"
done

if [ "$VM" = 1 ] && command -v victoria-metrics >/dev/null; then
  n=${NODES##* }
  victoria-metrics -storageDataPath="$WORK/vm" -httpListenAddr="127.0.0.1:$((PORT + 1))" \
    -retentionPeriod=100y -loggerLevel=ERROR >"$WORK/vm.log" 2>&1 &
  VM_PID=$!
  PIDS+=("$VM_PID")
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$((PORT + 1))/health" >/dev/null && break; sleep 0.1; done
  out=$("$LOAD" --url "http://127.0.0.1:$((PORT + 1))" --nodes "$n" --seconds "$SECONDS_RUN" \
    --connections 6 --records off --hub-pid "$VM_PID" 2>>"$WORK/load.log" | tail -1)
  rss=$(awk '/VmHWM/ {printf "%.0f MiB", $2/1024}' "/proc/$VM_PID/status")
  kill "$VM_PID"
  samples=$(kv samples "$out") secs=$(kv seconds "$out") cpu=$(kv hub_cpu_s "$out")
  echo
  echo "VictoriaMetrics $(dpkg-query -W -f='${Version}' victoria-metrics 2>/dev/null), the same $n nodes' series (no records): $(kv samples_per_s "$out") samples/s, lag p99 $(kv lag_p99_ms "$out") ms, $(python3 -c "print(f'{$cpu / $secs:.2f}')") cores, $(python3 -c "print(f'{$samples / max(1e-9, $cpu):,.0f}')") samples per CPU-s, peak RSS $rss"
fi

[ "$OUTAGE" = 1 ] || exit 0

# The outage: the hub SIGKILLed 20 s in, back OUTAGE_S later; the simulated agents keep what it
# did not take and resend it oldest first (at most 20 requests a node a second, as the agent).
rm -rf "$WORK/hub-outage"
start_hub "$WORK/hub-outage"
"$LOAD" --url "http://127.0.0.1:$PORT" --token-file "$WORK/w.token" --nodes "$OUTAGE_NODES" \
  --seconds $((OUTAGE_S + 40)) --connections 6 --down-from 20 --down-for "$OUTAGE_S" \
  --pregenerate off \
  >"$WORK/outage.txt" 2>>"$WORK/load.log" &
LOAD_PID=$!
sleep 20
kill -9 "$HUB_PID"; wait "$HUB_PID" 2>/dev/null || true
sleep "$OUTAGE_S"
start_hub "$WORK/hub-outage"
wait "$LOAD_PID"
out=$(tail -1 "$WORK/outage.txt")
expect=$(kv seconds "$out")
got=$(curl -fsSG -H "Authorization: Bearer $R" "http://127.0.0.1:$PORT/api/v1/query" \
  --data-urlencode 'query=count_over_time(DCGM_FI_SIM_FIELD_000{Hostname="sim-node-00000",gpu="0"}[1h])' |
  python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
echo
echo "Outage: $OUTAGE_NODES nodes, hub SIGKILLed for ${OUTAGE_S} s: backlog drained $(kv drain_s "$out") s after the hub came back; lag max $(kv lag_max_ms "$out") ms; node 0's GPU 0 series holds $got samples for the $(kv node0_seconds "$out") seconds node 0 sent (refused requests retried: $(kv refused "$out"))"
