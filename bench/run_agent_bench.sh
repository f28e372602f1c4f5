#!/usr/bin/env bash
# Agent cost side by side with prometheus-node-exporter, same machine, same run.
#   bench/run_agent_bench.sh [SECONDS]   (default 120)
# Two gpuwatch agents run the mock NVML at 8xH100 with every field (one is never scraped: the
# collection cost alone), 1 s hardware tier, 5 s host tier,
# 10 s process tier; both collectors are scraped once a second with gzip accepted, as Prometheus does. CPU time
# and peak RSS come from GNU time (/usr/bin/time -v) when each process exits on SIGTERM.
# Prints a Markdown report on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-120}
scripts/deps.sh bench
cmake -S . -B build/bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUWATCH_BUILD_TESTS=OFF >/dev/null
cmake --build build/bench --target gpuwatch gpuwatch-mock-nvml agent_bench >/dev/null

TMP=$(mktemp -d)
GW_PID="" GW2_PID="" NE_PID=""
# The PIDs are GNU time's; a signal goes to the collector it runs (its child).
stop_children() {
  local p
  for p in "$@"; do [ -n "$p" ] && { pkill -TERM -P "$p" 2>/dev/null || true; }; done
}
trap 'stop_children "$GW_PID" "$GW2_PID" "$NE_PID"; rm -rf "$TMP"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GW_PORT=$(port)
GW2_PORT=$(port)
NE_PORT=$(port)

GPUWATCH_MOCK_NVML=8xH100 /usr/bin/time -v -o "$TMP/gw.time" build/bench/gpuwatch up --data-dir none \
  --listen "127.0.0.1:$GW_PORT" --nvml-lib build/bench/libgpuwatch-mock-nvml.so --log-level error &
GW_PID=$!
# A second agent that nobody scrapes: the collection cost alone (the 0.2 % target).
GPUWATCH_MOCK_NVML=8xH100 /usr/bin/time -v -o "$TMP/gw2.time" build/bench/gpuwatch up --data-dir none \
  --listen "127.0.0.1:$GW2_PORT" --nvml-lib build/bench/libgpuwatch-mock-nvml.so --log-level error &
GW2_PID=$!
/usr/bin/time -v -o "$TMP/ne.time" prometheus-node-exporter --web.listen-address="127.0.0.1:$NE_PORT" \
  --log.level=error 2>/dev/null &
NE_PID=$!
sleep 2
gw_bytes=0 ne_bytes=0 scrape_ms=()
for ((i = 0; i < DUR; i++)); do
  t=$(curl -s --compressed -o "$TMP/gw.prom" -w '%{time_total}' "http://127.0.0.1:$GW_PORT/metrics")
  scrape_ms+=("$t")
  curl -s --compressed -o "$TMP/ne.prom" "http://127.0.0.1:$NE_PORT/metrics"
  sleep 1
done
gw_bytes=$(wc -c <"$TMP/gw.prom"); ne_bytes=$(wc -c <"$TMP/ne.prom")
gw_series=$(grep -vc '^#' "$TMP/gw.prom"); ne_series=$(grep -vc '^#' "$TMP/ne.prom")
stop_children "$GW_PID" "$GW2_PID" "$NE_PID"
wait "$GW_PID" || true
wait "$GW2_PID" || true
wait "$NE_PID" || true

field() { grep "$2" "$1" | awk -F': ' '{print $2}'; }
report() {  # name timefile series bytes
  local u s rss
  u=$(field "$2" 'User time'); s=$(field "$2" 'System time'); rss=$(field "$2" 'Maximum resident set size')
  python3 - "$1" "$u" "$s" "$rss" "$DUR" "$3" "$4" <<'PY'
import sys
name, u, s, rss, dur, series, size = sys.argv[1:]
cpu = float(u) + float(s)
wall = float(dur) + 2
print(f"| {name} | {series} | {int(size)/1024:.0f} KiB | {cpu:.2f} s | {100*cpu/wall:.3f} % | {int(rss)/1024:.1f} MiB |")
PY
}
echo "Run: \`bench/run_agent_bench.sh $DUR\` on $(nproc) cores, $(date -u +%Y-%m-%d)"
echo
echo "| collector | series | /metrics size | CPU (user+sys) over ${DUR}s | CPU % of one core | peak RSS |"
echo "|---|---|---|---|---|---|"
report "gpuwatch up, collecting only (not scraped)" "$TMP/gw2.time" "$gw_series" "$gw_bytes"
report "gpuwatch up, scraped 1/s with gzip" "$TMP/gw.time" "$gw_series" "$gw_bytes"
report "prometheus-node-exporter (Debian, defaults)" "$TMP/ne.time" "$ne_series" "$ne_bytes"
echo
echo "gpuwatch /metrics scrape time over loopback (curl time_total): median $(printf '%s\n' "${scrape_ms[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.2f ms", 1000*a[int((NR+1)/2)]}')"
echo
echo '```'
build/bench/bench/agent_bench --benchmark_min_time=1 2>/dev/null | grep -E '^(BM_|Benchmark|-)'
echo '```'
