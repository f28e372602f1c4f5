#!/usr/bin/env bash
# The dashboard's numbers (issue 18, "Measured, not claimed"): one node with 8 GPUs and 24 h of
# history at 1 s, loaded through remote-write, then measured on loopback. Prints a Markdown
# report on stdout and writes it to --out (default build/bench-dashboard/dashboard-bench-*.md).
#   bench/dashboard/run_dashboard_bench.sh [--runs N] [--warmup N] [--rounds N] [--top-seconds S]
#                                          [--no-vm] [--no-browser] [--keep]
# --runs       timed requests of each query (after --warmup untimed ones); default 200 and 20.
# --rounds     times each screen is opened in Chromium, each round a fresh profile; default 5.
# --top-seconds  how long `gpuwatch top --plain --interval 0.2` runs for its CPU figure (20).
# --no-vm, --no-browser  leave out VictoriaMetrics or Chromium.
# --keep       keep the scratch directory (data dirs, server logs, the browser's JSON).
# GEN overrides the generator (default ../shared/bench/gen_gpu_telemetry.py); NODE_PATH where
# playwright-core and uplot are (default build/test/web/npm/node_modules); CHROMIUM the browser
# (default /usr/bin/chromium).
#
# Dataset: gen_gpu_telemetry.py --nodes 1 --gpus 8 --seconds 86400 (320 series: 40
# dcgm-exporter metrics × 8 GPUs, 27,648,000 samples, from 2024-01-01T00:00:00Z), sent by
# bench/store/rw_load over remote-write (4 connections × ~10,000 samples), the same bytes to
# gpuwatch and to VictoriaMetrics.
#
# gpuwatch: `gpuwatch up --data-dir TMP --nvml-lib /nonexistent --kmsg off --job-socket off
# --keep-history off` with retention 100y on every tier (the data is from 2024; the agent's
# default 7 d raw retention would drop it), loaded, stopped (SIGTERM writes the head to blocks),
# started again on the same data dir and left to go idle, as an agent that has been running for
# a day reads mostly blocks. The load goes through bench/dashboard/auth_proxy.py, which adds
# the admin token (rw_load sends none). Then:
#   - GET /api/v1/panel?match=DCGM_FI_DEV_GPU_UTIL&start=S&end=S+86400&width=1600 (step 54 s),
#     timed by time_panel.py (one keep-alive connection, identity encoding, nearest-rank p50/p99);
#   - the same selector, and max_over_time(...[54s]) (what the panel's max is), through
#     /api/v1/query_range at step 54, timed by rw_load query, on gpuwatch and VictoriaMetrics
#     (-search.disableCache, after force_flush and force_merge, idle);
#   - the page's JavaScript: Content-Length of every <script src> of / with Accept-Encoding: gzip;
#   - Chromium (browser_bench.mjs): first contentful paint, each screen ready, a chart of 8 × 24 h;
#   - `gpuwatch top --agent URL --plain --interval 0.2` for --top-seconds under /usr/bin/time -v,
#     against this agent (no GPUs of its own: --nvml-lib /nonexistent) and against
#     `gpuwatch demo` (8 simulated GPUs and a job): CPU seconds / refreshes printed.
# Every server is started by this script and stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/../.."

RUNS=200 WARMUP=20 ROUNDS=5 TOP_S=20 VM=1 BROWSER=1 KEEP=0 OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --top-seconds) TOP_S=$2; shift 2 ;;
    --no-vm) VM=0; shift ;;
    --no-browser) BROWSER=0; shift ;;
    --out) OUT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_dashboard_bench.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
log() { echo "dashboard bench: $(date -u +%T) $*" >&2; }
die() { log "$*"; exit 1; }

# --- builds: the release agent and rw_load, nothing else ------------------------------------
BUILD=build/release
GW=$BUILD/gpuwatch
RW=$BUILD/bench/rw_load
build_log=$(mktemp)
log "building gpuwatch and rw_load in $BUILD"
{ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUWATCH_BUILD_BENCH=ON &&
  cmake --build "$BUILD" --target gpuwatch rw_load -j2; } >"$build_log" 2>&1 ||
  { cat "$build_log" >&2; die "build failed"; }
rm -f "$build_log"
if [ "$VM" = 1 ] && ! command -v victoria-metrics >/dev/null; then
  die "no victoria-metrics (apt-get install victoria-metrics, or --no-vm)"
fi
export NODE_PATH=${NODE_PATH:-$PWD/build/test/web/npm/node_modules}

# --- the dataset --------------------------------------------------------------------------------
GEN=${GEN:-../shared/bench/gen_gpu_telemetry.py}
DATA=build/bench-dashboard
mkdir -p "$DATA"
SECS=86400 START=1704067200
END=$((START + SECS))
DS=$DATA/telemetry-1n8g-${SECS}s.raw
SERIES=$DATA/series-1n8g.prom
if [ ! -s "$SERIES" ]; then
  python3 "$GEN" --nodes 1 --gpus 8 --format prom --seconds 1 --out "$SERIES.tmp" 2>/dev/null
  mv "$SERIES.tmp" "$SERIES"
fi
if [ ! -s "$DS" ]; then
  log "generating $DS"
  python3 "$GEN" --nodes 1 --gpus 8 --seconds "$SECS" --format none --out /dev/null \
    --raw-out "$DS.tmp" 2>/dev/null
  mv "$DS.tmp" "$DS"
fi
SAMPLES=$(($(stat -c %s "$DS") / 16))
WIDTH=1600
STEP=$(((SECS + WIDTH - 1) / WIDTH))  # 54, as the panel rounds it
SEL=DCGM_FI_DEV_GPU_UTIL

# --- servers ------------------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dashboard-bench.XXXXXX")
KV=$WORK/results.txt
: >"$KV"
PIDS=()  # every process this script started that may still run
SRV_PID=""
stop_pid() {  # PID: SIGTERM, wait up to 10 min, then SIGKILL
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 6000; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local p
  for p in "${PIDS[@]}"; do [ -n "$p" ] && stop_pid "$p"; done
  if [ "$KEEP" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
record() { echo "$*" >>"$KV"; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CLK_TCK=$(getconf CLK_TCK)
cpu_s() { sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$CLK_TCK" '{printf "%.2f", ($12 + $13) / hz}'; }
start_server() {  # NAME CMD...: SRV_PID
  local name=$1
  shift
  "$@" >"$WORK/$name.log" 2>&1 &
  SRV_PID=$!
  PIDS+=("$SRV_PID")
}
stop_server() {
  stop_pid "$SRV_PID"
  local keep=() p
  for p in "${PIDS[@]}"; do [ -n "$p" ] && [ "$p" != "$SRV_PID" ] && keep+=("$p"); done
  PIDS=("${keep[@]}")
  SRV_PID=""
}
wait_http() {  # URL NAME
  local i
  for ((i = 0; i < 1200; i++)); do
    curl -sf -o /dev/null "$1" && return 0
    kill -0 "$SRV_PID" 2>/dev/null || die "$2 exited: $(tail -5 "$WORK/$2.log")"
    sleep 0.1
  done
  die "$2 not ready after 120 s: $(tail -5 "$WORK/$2.log")"
}
wait_idle() {  # until the server uses under 2 % of a core over a second, at most 5 min
  local i a b
  for ((i = 0; i < 300; i++)); do
    a=$(cpu_s "$SRV_PID")
    sleep 1
    b=$(cpu_s "$SRV_PID")
    awk -v a="$a" -v b="$b" 'BEGIN {exit !(b - a < 0.02)}' && return 0
  done
  log "server $SRV_PID still busy after 5 min; timing anyway"
}
rw_write() {  # URL
  "$RW" write --raw "$DS" --series "$SERIES" --url "$1" --connections 4 --batch 10000 \
    2>>"$WORK/rw_load.log" | tail -1
}
rw_query() {  # PREFIX BASE QUERY: the range query at the panel's step, as PREFIX_key=value
  local r
  if r=$("$RW" query --url "$2" --query "$3" --start "$START" --end "$END" --step "$STEP" \
    --runs "$RUNS" --warmup "$WARMUP" 2>>"$WORK/rw_load.log" | tail -1); then
    echo "$1_${r// / $1_}"
  else
    echo "$1_error=1"
    log "query $3 failed against $2: $(grep '^rw_load: ' "$WORK/rw_load.log" | tail -1)"
  fi
}
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)

# --- gpuwatch -----------------------------------------------------------------------------------
P=$(port)
GURL=http://127.0.0.1:$P
GDIR=$WORK/gw
GW_FLAGS=(up --data-dir "$GDIR" --nvml-lib /nonexistent --kmsg off --job-socket off
  --keep-history off --retention-raw 100y --retention-1m 100y --retention-1h 100y
  --listen "127.0.0.1:$P" --log-level warning)
log "gpuwatch: loading $SAMPLES samples through remote-write"
start_server gw-load "$GW" "${GW_FLAGS[@]}"
wait_http "$GURL/healthz" gw-load
# rw_load sends no token: auth_proxy.py adds the agent's admin token (docs/limits.md).
PP=$(port)
python3 bench/dashboard/auth_proxy.py "$PP" "$GURL" "$GDIR/admin.token" >"$WORK/proxy.log" 2>&1 &
PROXY_PID=$!
PIDS+=("$PROXY_PID")
for ((i = 0; i < 100; i++)); do curl -s -o /dev/null "http://127.0.0.1:$PP/healthz" && break; sleep 0.1; done
ing=$(rw_write "http://127.0.0.1:$PP/api/v1/write") ||
  die "remote-write to gpuwatch failed: $(tail -3 "$WORK/rw_load.log")"
record "gw_ingest ${ing}"
stop_pid "$PROXY_PID"
PIDS=("${PIDS[@]/$PROXY_PID/}")
log "gpuwatch: loaded ($ing); SIGTERM writes the head to blocks"
stop_server
start_server gw "$GW" "${GW_FLAGS[@]}"
wait_http "$GURL/healthz" gw
wait_idle
log "gpuwatch: timing the panel and query_range"
r=$(python3 bench/dashboard/time_panel.py --url "$GURL" --match "$SEL" --start "$START" --end "$END" \
  --width "$WIDTH" --runs "$RUNS" --warmup "$WARMUP") || die "panel failed"
record "panel ${r}"
record "$(rw_query gw_qr "$GURL" "$SEL")"
record "$(rw_query gw_qm "$GURL" "max_over_time($SEL[${STEP}s])")"

# The page's JavaScript on the wire.
js_total=0 js_parts=""
for src in $(curl -sf "$GURL/" | grep -o '<script[^>]*src="[^"]*"' | sed 's/.*src="//; s/"$//'); do
  hdr=$(curl -sf -D - -o "$WORK/js.gz" -H 'Accept-Encoding: gzip' "$GURL$src" | tr -d '\r')
  len=$(awk -F': ' 'tolower($1)=="content-length" {print $2}' <<<"$hdr")
  enc=$(awk -F': ' 'tolower($1)=="content-encoding" {print $2}' <<<"$hdr")
  raw=$(curl -sf -H 'Accept-Encoding: identity' "$GURL$src" | wc -c)
  js_total=$((js_total + len))
  js_parts+="${src}:${len}:${enc:-none}:${raw},"
done
record "js bytes=$js_total parts=${js_parts%,}"

# Chromium.
if [ "$BROWSER" = 1 ]; then
  log "chromium: $ROUNDS rounds of every screen"
  node bench/dashboard/browser_bench.mjs "$GURL" "$START" "$END" "$ROUNDS" "$WORK/browser.json" \
    2> >(tee "$WORK/browser.log" >&2) || log "browser bench failed (see above)"
fi

# gpuwatch top against this agent.
top_cpu() {  # NAME URL: CPU seconds and refreshes of top --plain over TOP_S seconds
  local name=$1 url=$2
  /usr/bin/time -v -o "$WORK/$name.time" timeout -s INT "$TOP_S" "$GW" top --agent "$url" --plain \
    --interval 0.2 >"$WORK/$name.out" 2>"$WORK/$name.err" || true
  local u s n
  u=$(awk -F': ' '/User time/ {print $2}' "$WORK/$name.time")
  s=$(awk -F': ' '/System time/ {print $2}' "$WORK/$name.time")
  # One frame per refresh, each opening with its title line.
  n=$(grep -c '^gpuwatch top - ' "$WORK/$name.out" || true)
  record "$name user_s=$u sys_s=$s refreshes=$n lines=$(wc -l <"$WORK/$name.out") errors=$(wc -l <"$WORK/$name.err")"
}
log "gpuwatch top against the loaded agent, ${TOP_S} s"
top_cpu top_agent "$GURL"
stop_server

# gpuwatch top against gpuwatch demo (8 simulated GPUs, a job).
P2=$(port)
start_server demo "$GW" demo --listen "127.0.0.1:$P2" --duration 10m
wait_http "http://127.0.0.1:$P2/healthz" demo
sleep 5
log "gpuwatch top against gpuwatch demo, ${TOP_S} s"
top_cpu top_demo "http://127.0.0.1:$P2"
stop_server

# --- VictoriaMetrics ----------------------------------------------------------------------------
if [ "$VM" = 1 ]; then
  P=$(port)
  VURL=http://127.0.0.1:$P
  log "VictoriaMetrics: loading through remote-write"
  start_server vm victoria-metrics -storageDataPath="$WORK/vm" -retentionPeriod=100y \
    -httpListenAddr="127.0.0.1:$P" -search.disableCache
  wait_http "$VURL/health" vm
  ing=$(rw_write "$VURL/api/v1/write") || die "remote-write to VictoriaMetrics failed"
  record "vm_ingest ${ing}"
  curl -sf -o /dev/null "$VURL/internal/force_flush"
  sleep 2
  curl -sf -o /dev/null "$VURL/internal/force_flush"
  curl -sf -o /dev/null "$VURL/internal/force_merge"
  for ((i = 0; i < 6000; i++)); do
    grep -q 'forced merge for partition_prefix="" has been successfully finished' "$WORK/vm.log" && break
    sleep 0.1
  done
  wait_idle
  log "VictoriaMetrics: timing query_range"
  record "$(rw_query vm_qr "$VURL" "$SEL")"
  record "$(rw_query vm_qm "$VURL" "max_over_time($SEL[${STEP}s])")"
  stop_server
fi
T1=$(date +%s)

# --- report -------------------------------------------------------------------------------------
[ -n "$OUT" ] || OUT=$DATA/dashboard-bench-$(date -u +%Y%m%dT%H%M%SZ).md
VERSIONS="gpuwatch $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src web 2>/dev/null || echo '+local changes'), VictoriaMetrics $(dpkg-query -W -f='${Version}' victoria-metrics 2>/dev/null || echo '?'), chromium $(dpkg-query -W -f='${Version}' chromium 2>/dev/null || echo '?')"
python3 bench/dashboard/report.py "$KV" "$WORK/browser.json" "$SAMPLES" "$RUNS" "$WARMUP" "$ROUNDS" \
  "$STEP" "$SEL" "$TOP_S" "$(nproc)" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$((T1 - T0))" \
  "$VERSIONS" | tee "$OUT"
cp "$WORK/browser.json" "${OUT%.md}.browser.json" 2>/dev/null || true
log "report written to $OUT"
