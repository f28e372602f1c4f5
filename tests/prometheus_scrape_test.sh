#!/usr/bin/env bash
# A real Prometheus (Debian's package) scrapes the agent serving the mock NVML; the test asks
# Prometheus's HTTP API whether the series arrived with the right labels, and promtool lints
# the exposition.
GPUWATCH=$1 MOCK=$2
. "$(dirname "$0")/lib.sh"
need_peer prometheus prometheus
need_peer promtool prometheus

AGENT_PORT=$(free_port)
PROM_PORT=$(free_port)
GPUWATCH_MOCK_NVML=8xH100 "$GPUWATCH" up --job-socket off --data-dir none --listen "127.0.0.1:$AGENT_PORT" --nvml-lib "$MOCK" \
  --hostname promtest-node >"$TMP/agent.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$AGENT_PORT/healthz" 20 || { cat "$TMP/agent.log"; fail "agent did not start"; }

# Lint the exposition (after a tick so GPU series exist).
sleep 1.5
curl -fsS "http://127.0.0.1:$AGENT_PORT/metrics" >"$TMP/metrics.txt"
promtool check metrics <"$TMP/metrics.txt" || fail "promtool check metrics failed"

cat >"$TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: gpuwatch
    static_configs:
      - targets: ['127.0.0.1:$AGENT_PORT']
YML
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/prom-data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$TMP/prom.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$PROM_PORT/-/ready" 60 || { tail -20 "$TMP/prom.log"; fail "prometheus not ready"; }

query() {
  curl -fsS -G "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1"
}
for ((i = 0; i < 60; i++)); do
  n=$(query 'count(DCGM_FI_DEV_GPU_UTIL)' | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
  [ "$n" = 8 ] && break
  sleep 0.5
done
[ "$n" = 8 ] || { tail -20 "$TMP/prom.log"; fail "expected 8 DCGM_FI_DEV_GPU_UTIL series in Prometheus, got $n"; }

query 'DCGM_FI_DEV_GPU_UTIL{gpu="3"}' >"$TMP/gpu3.json"
python3 - "$TMP/gpu3.json" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))["data"]["result"]
assert len(r) == 1, r
m = r[0]["metric"]
assert m["job"] == "gpuwatch"
assert m["Hostname"] == "promtest-node", m
assert m["gpu"] == "3", m
assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", m["UUID"]), m
assert re.fullmatch(r"[0-9a-f]{8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]", m["pci_bus_id"]), m
assert m["model_name"].startswith("NVIDIA H100"), m
assert m["DCGM_FI_DRIVER_VERSION"], m
assert 0 <= float(r[0]["value"][1]) <= 100
PY
# Counters and GPM ratios arrived too; a field the H100 lacks (fan) did not.
for q in 'count(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION)' 'count(DCGM_FI_PROF_SM_ACTIVE)' \
         'count(gpuwatch_host_memory_total_bytes)'; do
  v=$(query "$q" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
  [ "$v" != 0 ] || fail "$q: no series in Prometheus"
done
v=$(query 'count(DCGM_FI_DEV_FAN_SPEED)' | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]["result"]))')
[ "$v" = 0 ] || fail "fan speed reported for a passively cooled H100"
echo "prometheus_scrape_test: 1 passed, 0 failed"
