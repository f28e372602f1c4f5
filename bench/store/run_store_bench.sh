#!/usr/bin/env bash
# gpuwatch's store side by side with VictoriaMetrics and Prometheus: same dataset, same machine,
# same run (issue 3). Prints a Markdown report on stdout and writes it to --out.
#   bench/store/run_store_bench.sh [--seconds N] [--runs N] [--systems LIST] [--out FILE]
#                                  [--rw-connections K] [--rw-batch N]
#                                  [--fast-connections K] [--fast-batch N] [--keep]
# --seconds   of the default dataset (4 nodes x 8 GPUs x 40 dcgm-exporter metrics at 1 s, 1280
#             series); default 21600 = 6 h = 27,648,000 samples. 600 is a quick smoke run.
# --runs      timed runs of each query (after 2 untimed ones); default 20.
# --systems   comma-separated subset of gpuwatch,victoria-metrics,prometheus (default all).
# --rw-*      remote-write leg, the same for all three: K connections (shards, as Prometheus'
#             queue manager), about N samples per request; default 4 x 10000.
# --fast-*    gpuwatch's fastest path (remote-write with more shards, bigger requests);
#             default 8 x 40000. VictoriaMetrics' is /api/v1/import (JSON lines), Prometheus'
#             is `promtool tsdb create-blocks-from openmetrics`.
# --keep      keep the scratch directory with every data dir and server log.
# GEN overrides the generator's path (default ../shared/bench/gen_gpu_telemetry.py).
#
# Each leg starts its server fresh on 127.0.0.1 with an empty data dir and measures: ingest wall
# time and samples/s; the server's CPU time (utime+stime from /proc/PID/stat) over the ingest,
# hence samples per CPU-second (per core); the server's VmHWM at the end of the ingest (peak RSS
# during ingest); bytes on disk after flush/compaction (VictoriaMetrics: force_flush, a finished
# force_merge and a clean shutdown, its cache/ left out; Prometheus: a snapshot, which writes the
# head as a block, or promtool's blocks; gpuwatch: SIGTERM, which writes the head to block
# files, then `gpuwatch store compact`, its force_merge); then, once the server is idle, p50/p99 of (a) one raw series over the whole dataset,
# an instant query of a range selector, and (b) the average over all 1280 series over the whole
# dataset at 60 s step (query_range), timed by rw_load over one keep-alive connection. Answers
# are compared across systems (points, sum of values). Servers are stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/../.."

SECS=21600 RUNS=20 WARMUP=2
SYSTEMS=gpuwatch,victoria-metrics,prometheus
RW_CONN=4 RW_BATCH=10000 FAST_CONN=8 FAST_BATCH=40000
OUT="" KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --rw-connections) RW_CONN=$2; shift 2 ;;
    --rw-batch) RW_BATCH=$2; shift 2 ;;
    --fast-connections) FAST_CONN=$2; shift 2 ;;
    --fast-batch) FAST_BATCH=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_store_bench.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
want() { [[ ",$SYSTEMS," == *",$1,"* ]]; }
log() { echo "store bench: $*" >&2; }
die() { log "$*"; exit 1; }

# --- packages and builds -------------------------------------------------------------------
scripts/deps.sh bench
if want victoria-metrics &&
  ! dpkg-query -W -f='${Status}' victoria-metrics 2>/dev/null | grep -q 'install ok installed'; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  log "installing victoria-metrics"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends victoria-metrics >/dev/null
  # Like prometheus, the package starts a system service; the benchmark runs its own.
  if [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now victoria-metrics >/dev/null 2>&1 || true
  fi
fi

BUILD=build/bench-store
GW=build/release/gpuwatch
RW=$BUILD/bench/rw_load
build_log=$(mktemp)
if want gpuwatch; then
  GPUWATCH_BUILD_ONLY=1 scripts/up.sh >"$build_log" 2>&1 || { cat "$build_log" >&2; die "gpuwatch build failed"; }
fi
{ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUWATCH_BUILD_TESTS=OFF \
  -DGPUWATCH_BUILD_BENCH=ON && cmake --build "$BUILD" --target rw_load; } >"$build_log" 2>&1 ||
  { cat "$build_log" >&2; die "rw_load build failed (needs Google Benchmark: scripts/deps.sh bench)"; }
rm -f "$build_log"

# --- the dataset, generated once per size ---------------------------------------------------
GEN=${GEN:-../shared/bench/gen_gpu_telemetry.py}
DS=$BUILD/gpu-telemetry-${SECS}s
SERIES=$BUILD/gpu-telemetry-series.prom  # one scrape: label sets and printed decimals
START=1704067200                         # the generator's default --start
END=$((START + SECS - 1))
gen() {  # FORMAT OUT [more generator args]
  local fmt=$1 out=$2
  shift 2
  log "generating $out"
  python3 "$GEN" --format "$fmt" --seconds "$SECS" --out "$out.tmp" "$@" 2>/dev/null
  mv "$out.tmp" "$out"
}
if [ ! -s "$SERIES" ]; then
  python3 "$GEN" --format prom --seconds 1 --out "$SERIES.tmp" 2>/dev/null
  mv "$SERIES.tmp" "$SERIES"
fi
# The raw baseline (bench/store/chunk_ratio.sh writes the same file) comes with the OpenMetrics
# text when that is needed anyway.
if want prometheus && [ ! -s "$DS.om" ]; then
  gen om "$DS.om" --raw-out "$DS.raw.tmp"
  mv "$DS.raw.tmp" "$DS.raw"
fi
if [ ! -s "$DS.raw" ]; then
  log "generating $DS.raw"
  python3 "$GEN" --format none --seconds "$SECS" --out /dev/null --raw-out "$DS.raw.tmp" 2>/dev/null
  mv "$DS.raw.tmp" "$DS.raw"
fi
if want victoria-metrics && [ ! -s "$DS.vmjson" ]; then gen vmjson "$DS.vmjson"; fi
SAMPLES=$(($(stat -c %s "$DS.raw") / 16))

# The queries, the same text for every system.
if ((SECS % 3600 == 0)); then RANGE="$((SECS / 3600))h"; else RANGE="${SECS}s"; fi
QUERY_A="DCGM_FI_DEV_GPU_TEMP{Hostname=\"dgx-000\",gpu=\"0\"}[$RANGE]"
QUERY_B='avg({__name__=~"DCGM_.+"})'
STEP=60

# --- servers --------------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/store-bench.XXXXXX")
LEGS=$WORK/legs.txt
: >"$LEGS"
SRV_PID="" SRV_TIME_PID=""
kill_server() {
  if [ -n "$SRV_PID" ]; then kill -TERM "$SRV_PID" 2>/dev/null || true; fi
  if [ -n "$SRV_TIME_PID" ]; then wait "$SRV_TIME_PID" 2>/dev/null || true; fi
  SRV_PID="" SRV_TIME_PID=""
}
cleanup() {
  kill_server
  if [ "$KEEP" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CLK_TCK=$(getconf CLK_TCK)
# user+system CPU seconds of a live process (fields 14 and 15 of /proc/PID/stat).
cpu_s() { sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$CLK_TCK" '{printf "%.2f", ($12 + $13) / hz}'; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
now() { date +%s.%N; }

# start_server NAME CMD...: runs CMD under GNU time (lifetime CPU and max RSS in NAME.time);
# SRV_PID is the server itself (GNU time's child), SRV_TIME_PID GNU time.
start_server() {
  local name=$1 i
  shift
  /usr/bin/time -f '%e %U %S %M' -o "$WORK/$name.time" "$@" >"$WORK/$name.log" 2>&1 &
  SRV_TIME_PID=$! SRV_PID=""
  for ((i = 0; i < 200; i++)); do
    SRV_PID=$(pgrep -P "$SRV_TIME_PID" || true)
    [ -n "$SRV_PID" ] && return 0
    sleep 0.05
  done
  die "$name did not start: $(cat "$WORK/$name.log")"
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
# stop_server: SIGTERM, wait for the exit (up to 10 min: gpuwatch writes its blocks then);
# STOP_S is how long that took.
stop_server() {
  local t0 i
  t0=$(now)
  kill -TERM "$SRV_PID" 2>/dev/null || true
  for ((i = 0; i < 6000; i++)); do
    kill -0 "$SRV_PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$SRV_PID" 2>/dev/null; then
    log "server $SRV_PID still running 10 min after SIGTERM: SIGKILL"
    kill -KILL "$SRV_PID" 2>/dev/null || true
  fi
  wait "$SRV_TIME_PID" || true
  STOP_S=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}')
  SRV_PID="" SRV_TIME_PID=""
}
# wait_idle: until the server uses under 2 % of a core over a second (background merges and
# compactions done), at most 5 min; queries are then timed against a quiet server.
wait_idle() {
  local i a b
  for ((i = 0; i < 300; i++)); do
    a=$(cpu_s "$SRV_PID")
    sleep 1
    b=$(cpu_s "$SRV_PID")
    awk -v a="$a" -v b="$b" 'BEGIN {exit !(b - a < 0.02)}' && return 0
  done
  log "server $SRV_PID still busy after 5 min; timing queries anyway"
}
# lifetime_cpu NAME: user+system seconds from NAME.time (after the server exited).
lifetime_cpu() { tail -1 "$WORK/$1.time" | awk '{printf "%.2f", $2 + $3}'; }
lifetime_rss_kb() { tail -1 "$WORK/$1.time" | awk '{print $4}'; }

# rw_write URL CONNECTIONS BATCH: the remote-write ingest; its key=value line on stdout.
rw_write() {
  "$RW" write --raw "$DS.raw" --series "$SERIES" --url "$1" --connections "$2" --batch "$3" \
    2>>"$WORK/rw_load.log" | tail -1
}
last_error() { grep '^rw_load: ' "$WORK/rw_load.log" | tail -1; }
# run_queries BASE_URL: "qa_... qb_..." key=value pairs, or qa_error=/qb_error= on failure.
run_queries() {
  local a b
  if a=$("$RW" query --url "$1" --query "$QUERY_A" --time "$END" --runs "$RUNS" \
    --warmup "$WARMUP" 2>>"$WORK/rw_load.log" | tail -1); then
    a="qa_${a// / qa_}"
  else
    a="qa_error=1"
    log "query (a) failed against $1: $(last_error)"
  fi
  if b=$("$RW" query --url "$1" --query "$QUERY_B" --start "$START" --end "$END" --step "$STEP" \
    --runs "$RUNS" --warmup "$WARMUP" 2>>"$WORK/rw_load.log" | tail -1); then
    b="qb_${b// / qb_}"
  else
    b="qb_error=1"
    log "query (b) failed against $1: $(last_error)"
  fi
  echo "$a $b"
}
record() { echo "$*" >>"$LEGS"; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a - b}'; }
kv() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }  # kv "k=v ..." KEY

# --- VictoriaMetrics ------------------------------------------------------------------------
vm_leg() {  # remote-write | import
  local path=$1 name=vm-$1 dir=$WORK/vm-$1 p url c0 c1 c2 hwm ing wall sender=0 bytes q i
  p=$(port)
  url=http://127.0.0.1:$p
  log "VictoriaMetrics, $path"
  # The response cache is off: every system answers each repetition of a query from storage.
  start_server "$name" victoria-metrics -storageDataPath="$dir" -retentionPeriod=100y \
    -httpListenAddr="127.0.0.1:$p" -search.disableCache
  wait_http "$url/health" "$name"
  c0=$(cpu_s "$SRV_PID")
  if [ "$path" = remote-write ]; then
    ing=$(rw_write "$url/api/v1/write" "$RW_CONN" "$RW_BATCH") || die "remote-write to VictoriaMetrics failed"
    wall=$(kv "$ing" wall_s) sender=$(kv "$ing" send_cpu_s)
  else
    local r t0
    t0=$(now)
    r=$(curl -sS -o "$WORK/$name.out" -w '%{http_code}' -T "$DS.vmjson" "$url/api/v1/import")
    wall=$(sub "$(now)" "$t0")
    [ "$r" = 204 ] || die "VictoriaMetrics /api/v1/import answered $r: $(cat "$WORK/$name.out")"
  fi
  c1=$(cpu_s "$SRV_PID") hwm=$(hwm_kb "$SRV_PID")
  # force_flush makes pending rows searchable; the in-memory parts reach disk a moment later,
  # so flush twice before the forced merge (it runs in the background; the log says when done).
  curl -sf -o /dev/null "$url/internal/force_flush"
  sleep 2
  curl -sf -o /dev/null "$url/internal/force_flush"
  curl -sf -o /dev/null "$url/internal/force_merge"
  for ((i = 0; i < 6000; i++)); do
    grep -q 'forced merge for partition_prefix="" has been successfully finished' \
      "$WORK/$name.log" && break
    sleep 0.1
  done
  wait_idle
  c2=$(cpu_s "$SRV_PID")
  q=$(run_queries "$url")
  stop_server
  # Measured after the shutdown: merged-away parts are deleted asynchronously while it runs.
  # cache/ (written at shutdown: metric name and TSID caches, rebuilt when missing) is left
  # out of the figure and reported beside it.
  bytes=$(du -sb --exclude=cache "$dir" | cut -f1)
  record "system=victoria-metrics path=$path samples=$SAMPLES ingest_wall_s=$wall" \
    "cpu_ingest_s=$(sub "$c1" "$c0") cpu_to_disk_s=$(sub "$c2" "$c0") sender_cpu_s=$sender" \
    "hwm_kb=$hwm life_rss_kb=$(lifetime_rss_kb "$name") bytes=$bytes" \
    "bytes_what=-storageDataPath_after_force_flush,_force_merge_and_shutdown,_without_cache/" \
    "cache_bytes=$(du -sb "$dir/cache" 2>/dev/null | cut -f1) $q"
}

# --- Prometheus ---------------------------------------------------------------------------------
PROM_CFG=$WORK/prometheus.yml
printf 'global:\n  evaluation_interval: 1h\n' >"$PROM_CFG"
prom_start() {  # NAME DIR PORT [flags]
  local name=$1 dir=$2 p=$3
  shift 3
  start_server "$name" prometheus --config.file="$PROM_CFG" --storage.tsdb.path="$dir" \
    --storage.tsdb.retention.time=100y --web.listen-address="127.0.0.1:$p" "$@"
  wait_http "http://127.0.0.1:$p/-/ready" "$name"
}
prom_rw_leg() {
  local name=prom-remote-write dir=$WORK/prom-remote-write p url c0 c1 c2 hwm ing snap bytes live q
  p=$(port)
  url=http://127.0.0.1:$p
  log "Prometheus, remote-write"
  prom_start "$name" "$dir" "$p" --web.enable-remote-write-receiver --web.enable-admin-api
  c0=$(cpu_s "$SRV_PID")
  ing=$(rw_write "$url/api/v1/write" "$RW_CONN" "$RW_BATCH") || die "remote-write to Prometheus failed"
  c1=$(cpu_s "$SRV_PID") hwm=$(hwm_kb "$SRV_PID")
  # A snapshot writes the head (what was not compacted yet) as one more block: the blocks of
  # the snapshot are the data as compacted. The live directory keeps the WAL as well.
  snap=$(curl -sf -XPOST "$url/api/v1/admin/tsdb/snapshot" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["name"])')
  c2=$(cpu_s "$SRV_PID")
  bytes=$(du -sb "$dir/snapshots/$snap" | cut -f1)
  live=$(du -sb --exclude=snapshots "$dir" | cut -f1)
  wait_idle
  q=$(run_queries "$url")
  stop_server
  record "system=prometheus path=remote-write samples=$SAMPLES ingest_wall_s=$(kv "$ing" wall_s)" \
    "cpu_ingest_s=$(sub "$c1" "$c0") cpu_to_disk_s=$(sub "$c2" "$c0")" \
    "sender_cpu_s=$(kv "$ing" send_cpu_s) hwm_kb=$hwm life_rss_kb=$(lifetime_rss_kb "$name")" \
    "bytes=$bytes bytes_what=blocks_of_a_snapshot_(head_written_as_a_block) live_bytes=$live $q"
}
prom_backfill_leg() {
  local name=prom-backfill dir=$WORK/prom-backfill p t bytes q
  log "Prometheus, promtool tsdb create-blocks-from openmetrics"
  /usr/bin/time -f '%e %U %S %M' -o "$WORK/promtool.time" \
    promtool tsdb create-blocks-from openmetrics "$DS.om" "$dir" >"$WORK/promtool.log" 2>&1 ||
    die "promtool failed: $(tail -5 "$WORK/promtool.log")"
  t=$(tail -1 "$WORK/promtool.time")
  bytes=$(du -sb "$dir" | cut -f1)
  p=$(port)
  prom_start "$name" "$dir" "$p"
  wait_idle
  q=$(run_queries "http://127.0.0.1:$p")
  stop_server
  record "system=prometheus path=promtool-backfill samples=$SAMPLES" \
    "ingest_wall_s=$(awk '{print $1}' <<<"$t") cpu_ingest_s=$(awk '{printf "%.2f", $2 + $3}' <<<"$t")" \
    "cpu_to_disk_s=$(awk '{printf "%.2f", $2 + $3}' <<<"$t") sender_cpu_s=0" \
    "hwm_kb=$(awk '{print $4}' <<<"$t") life_rss_kb=$(awk '{print $4}' <<<"$t")" \
    "bytes=$bytes bytes_what=promtool's_blocks $q"
}

# --- gpuwatch -----------------------------------------------------------------------------------
gw_leg() {  # PATH CONNECTIONS BATCH
  local path=$1 conns=$2 batch=$3 name=gw-$1 dir=$WORK/gw-$1 p url c0 c1 hwm ing bytes stats q
  local ok=1 life
  p=$(port)
  url=http://127.0.0.1:$p
  log "gpuwatch, $path ($conns connections, $batch samples per request)"
  start_server "$name" "$GW" up --data-dir "$dir" --listen "127.0.0.1:$p" --keep-history off \
    --log-level warning
  wait_http "$url/healthz" "$name"
  c0=$(cpu_s "$SRV_PID")
  if ! ing=$(rw_write "$url/api/v1/write" "$conns" "$batch"); then
    log "remote-write to gpuwatch failed: $(last_error)"
    ok=0
  fi
  c1=$(cpu_s "$SRV_PID") hwm=$(hwm_kb "$SRV_PID")
  stop_server  # SIGTERM writes the head to block files
  local flush_s=$STOP_S
  life=$(lifetime_cpu "$name")
  # The counterpart of VictoriaMetrics' force_merge: merge the day's blocks into one.
  local t0 compact_s
  t0=$(date +%s.%N)
  "$GW" store compact --data-dir "$dir" >>"$WORK/$name.log" 2>&1 || log "gpuwatch store compact failed"
  compact_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  bytes=$(du -sb "$dir" | cut -f1)
  stats=$("$GW" store stats --data-dir "$dir" --json 2>>"$WORK/$name.log" | tr -d ' \n' || true)
  [ -n "$stats" ] || stats='{}'
  # Queries against what was written: a fresh process on the same data dir.
  start_server "$name-query" "$GW" up --data-dir "$dir" --listen "127.0.0.1:$p" \
    --keep-history off --log-level warning
  wait_http "$url/healthz" "$name-query"
  wait_idle
  q=$(run_queries "$url")
  stop_server
  [ "$ok" = 1 ] || { record "system=gpuwatch path=$path error=remote-write_failed bytes=$bytes $q"; return; }
  record "system=gpuwatch path=$path samples=$SAMPLES ingest_wall_s=$(kv "$ing" wall_s)" \
    "cpu_ingest_s=$(sub "$c1" "$c0") cpu_to_disk_s=$(sub "$life" "$c0") flush_s=$flush_s" \
    "sender_cpu_s=$(kv "$ing" send_cpu_s) hwm_kb=$hwm life_rss_kb=$(lifetime_rss_kb "$name")" \
    "bytes=$bytes bytes_what=whole_--data-dir_after_SIGTERM_and_store_compact" \
    "compact_s=$compact_s stats=$stats $q"
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)
want victoria-metrics && { vm_leg remote-write; vm_leg import; }
want prometheus && { prom_rw_leg; prom_backfill_leg; }
if want gpuwatch; then
  # A failing gpuwatch leg (the store is work in progress) is reported, not fatal.
  for leg in "remote-write $RW_CONN $RW_BATCH" "fastest $FAST_CONN $FAST_BATCH"; do
    # shellcheck disable=SC2086
    (trap kill_server EXIT; gw_leg $leg) || record "system=gpuwatch path=${leg%% *} error=leg_failed_(see_log)"
  done
fi
T1=$(date +%s)

# --- report ---------------------------------------------------------------------------------------
[ -n "$OUT" ] || OUT=$BUILD/store-bench-${SECS}s-$(date -u +%Y%m%dT%H%M%SZ).md
VERSIONS="gpuwatch $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src 2>/dev/null || echo '+local changes'), VictoriaMetrics $(dpkg-query -W -f='${Version}' victoria-metrics 2>/dev/null || echo '?'), Prometheus $(dpkg-query -W -f='${Version}' prometheus 2>/dev/null || echo '?')"
python3 - "$LEGS" "$SECS" "$SAMPLES" "$RUNS" "$QUERY_A" "$QUERY_B" "$STEP" "$RW_CONN" "$RW_BATCH" \
  "$FAST_CONN" "$FAST_BATCH" "$(nproc)" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "$((T1 - T0))" "$VERSIONS" "$END" <<'PY' | tee "$OUT"
import json, sys
(legs_file, secs, samples, runs, qa, qb, step, rw_conn, rw_batch, fast_conn, fast_batch, cores,
 load0, load1, dur, versions, end) = sys.argv[1:]
legs = []
for line in open(legs_file):
    d = {}
    for tok in line.split():
        k, _, v = tok.partition("=")
        d[k] = v
    legs.append(d)

def f(d, k):
    try:
        return float(d[k])
    except (KeyError, ValueError):
        return None

def num(x, fmt="{:,.0f}"):
    return "—" if x is None else fmt.format(x)

PATHS = {
    ("victoria-metrics", "remote-write"): f"remote-write, {rw_conn} conn × ~{rw_batch} samples",
    ("victoria-metrics", "import"): "/api/v1/import (JSON lines, one request)",
    ("prometheus", "remote-write"): f"remote-write, {rw_conn} conn × ~{rw_batch} samples",
    ("prometheus", "promtool-backfill"): "promtool create-blocks-from openmetrics",
    ("gpuwatch", "remote-write"): f"remote-write, {rw_conn} conn × ~{rw_batch} samples",
    ("gpuwatch", "fastest"): f"remote-write, {fast_conn} conn × ~{fast_batch} samples",
}
print(f"Run: `bench/store/run_store_bench.sh --seconds {secs} --runs {runs}` — {versions}; "
      f"{cores} cores, load average {load0} before and {load1} after; {int(dur)} s in all.")
print()
print(f"Dataset: {int(samples):,} samples (1280 series × {secs} s). Query (a): `{qa}` "
      f"(instant, at the last timestamp); (b): `{qb}` (range over the dataset, step {step} s). "
      f"p50/p99 are nearest-rank over {runs} runs after 2 untimed ones.")
print()
print("| system | ingest path | samples/s | samples per CPU-s | peak RSS, ingest | bytes on disk | bytes/sample | (a) p50 / p99 ms | (b) p50 / p99 ms |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for d in legs:
    s = float(d.get("samples") or samples)
    wall, cpu = f(d, "ingest_wall_s"), f(d, "cpu_ingest_s")
    b = f(d, "bytes")
    hwm = f(d, "hwm_kb")
    def q(p):
        if p + "_error" in d or p + "_p50_ms" not in d:
            return "failed"
        return f"{float(d[p + '_p50_ms']):.2f} / {float(d[p + '_p99_ms']):.2f}"
    print(f"| {d['system']} | {PATHS.get((d['system'], d['path']), d['path'])} "
          f"| {num(s / wall if wall else None)} | {num(s / cpu if cpu else None)} "
          f"| {num(hwm / 1024 if hwm else None, '{:.0f} MiB')} | {num(b)} "
          f"| {num(b / s if b else None, '{:.3f}')} | {q('qa')} | {q('qb')} |")
print()
print("Details (the answers: points and the sum of all values returned; **≠** where they differ "
      "from the first system's):")
print()
print("| system | ingest path | ingest wall s | server CPU s, ingest | server CPU s, to disk | sender CPU s | peak RSS, lifetime | what bytes on disk is | (a) points, sum | (b) points, sum |")
print("|---|---|---:|---:|---:|---:|---:|---|---|---|")
for d in legs:
    what = d.get("bytes_what", "").replace("_", " ")
    if d.get("cache_bytes"):
        what += f"; cache/ {int(d['cache_bytes']):,} more"
    if "live_bytes" in d:
        what += f"; live dir (WAL, head chunks, blocks) {int(d['live_bytes']):,}"
    if "flush_s" in d:
        what += f"; SIGTERM to exit {d['flush_s']} s"
        if "compact_s" in d:
            what += f", store compact {d['compact_s']} s"
    if d.get("stats") and d["stats"] != "{}":
        try:
            st = json.loads(d["stats"])
            what += (f"; store stats: {st.get('series')} series, {st.get('samples'):,} samples, "
                     f"{st.get('bytes_on_disk'):,} B, {st.get('bytes_per_sample')} B/sample")
        except (ValueError, TypeError):
            what += "; store stats: " + d["stats"]
    if "error" in d:
        what = "**" + d["error"].replace("_", " ") + "**; " + what
    def ans(p):
        if p + "_points" not in d:
            return "—"
        pts, sm = int(d[p + "_points"]), float(d[p + "_sum"])
        ref = next((r for r in legs if p + "_points" in r), d)  # the first leg that answered
        rp, rs = int(ref[p + "_points"]), float(ref[p + "_sum"])
        same = pts == rp and abs(sm - rs) <= 1e-9 * max(abs(sm), abs(rs), 1.0)
        return f"{pts}, {sm:.10g}" + ("" if same else " **≠**")
    life = f(d, "life_rss_kb")
    print(f"| {d['system']} | {d['path']} | {d.get('ingest_wall_s', '—')} | {d.get('cpu_ingest_s', '—')} "
          f"| {d.get('cpu_to_disk_s', '—')} | {d.get('sender_cpu_s', '—')} "
          f"| {num(life / 1024 if life else None, '{:.0f} MiB')} | {what} | {ans('qa')} | {ans('qb')} |")

# Against the targets: gpuwatch beside VictoriaMetrics, same protocol, and fastest beside fastest.
by = {(d["system"], d["path"]): d for d in legs}
pairs = [("remote-write", ("gpuwatch", "remote-write"), ("victoria-metrics", "remote-write")),
         ("fastest paths", ("gpuwatch", "fastest"), ("victoria-metrics", "import"))]
rows = []
for label, g, v in pairs:
    g, v = by.get(g), by.get(v)
    if not g or not v or "error" in g:
        continue
    sg, sv = float(g["samples"]), float(v["samples"])
    def cmp(name, a, b, goal, fmt):
        if a is None or b is None:
            rows.append(f"| {label} | {name} | — | — | not measured |")
            return
        met = goal(a, b)
        rows.append(f"| {label} | {name} | {fmt.format(a)} | {fmt.format(b)} | {'met' if met else '**not met**'} |")
    bg, bv = f(g, "bytes"), f(v, "bytes")
    cmp("bytes/sample ≤ 0.6 × VM", bg / sg if bg else None, bv / sv if bv else None,
        lambda a, b: a <= 0.6 * b, "{:.3f}")
    cg, cv = f(g, "cpu_ingest_s"), f(v, "cpu_ingest_s")
    cmp("ingest samples per CPU-s ≥ VM", sg / cg if cg else None, sv / cv if cv else None,
        lambda a, b: a >= b, "{:,.0f}")
    for p, n in (("qa", "(a)"), ("qb", "(b)")):
        for pct in ("p50", "p99"):
            cmp(f"query {n} {pct} ≤ VM", f(g, f"{p}_{pct}_ms"), f(v, f"{p}_{pct}_ms"),
                lambda a, b: a <= b, "{:.2f} ms")
    hg, hv = f(g, "hwm_kb"), f(v, "hwm_kb")
    cmp("peak RSS during ingest ≤ VM", hg / 1024 if hg else None, hv / 1024 if hv else None,
        lambda a, b: a <= b, "{:.0f} MiB")
if rows:
    print()
    print("| against VictoriaMetrics | target | gpuwatch | VictoriaMetrics | |")
    print("|---|---|---:|---:|---|")
    print("\n".join(rows))
PY
log "report written to $OUT"
