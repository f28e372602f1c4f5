#!/usr/bin/env bash
# The gpuwatch binary end to end against the mock NVML: every subcommand's --help, status
# (table, JSON, capabilities), a missing NVML library, a GPU lost mid-run with XIDs served over
# HTTP and kept in the data dir, and bad flags/config rejected with a message naming them.
GPUWATCH=$1 MOCK=$2 FIXTURES=$3
. "$(dirname "$0")/lib.sh"

"$GPUWATCH" --version >"$TMP/version.txt" && grep -q '^gpuwatch ' "$TMP/version.txt" || fail "--version"
for sub in "" up agent status docs diagnose replay doctor demo "rules export"; do
  # shellcheck disable=SC2086
  "$GPUWATCH" $sub --help >"$TMP/help.txt" || fail "gpuwatch $sub --help exited non-zero"
  grep -q -- '--help' "$TMP/help.txt" || fail "gpuwatch $sub --help printed no usage"
done
"$GPUWATCH" up --help >"$TMP/help.txt" && grep -q -- '--listen' "$TMP/help.txt" || fail "up --help lacks --listen"

# status: table, JSON, capabilities.
GPUWATCH_MOCK_NVML=4xL40S "$GPUWATCH" status --nvml-lib "$MOCK" >"$TMP/status.txt" || fail "status"
[ "$(grep -c 'NVIDIA L40S' "$TMP/status.txt")" = 4 ] || { cat "$TMP/status.txt"; fail "status: expected 4 L40S rows"; }
GPUWATCH_MOCK_NVML=4xL40S "$GPUWATCH" status --json --capabilities --nvml-lib "$MOCK" >"$TMP/status.json"
python3 - "$TMP/status.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["gpu_available"] is True
assert len(j["gpus"]) == 4
uuids = {g["uuid"] for g in j["gpus"]}
assert len(uuids) == 4, "UUIDs must be distinct"
caps = j["capabilities"][0]["fields"]
assert caps["DCGM_FI_DEV_GPU_UTIL"]["support"] == "supported", caps["DCGM_FI_DEV_GPU_UTIL"]
assert caps["DCGM_FI_DEV_FAN_SPEED"]["support"] == "not_supported", caps["DCGM_FI_DEV_FAN_SPEED"]
assert "DCGM_FI_DEV_FAN_SPEED" not in j["gpus"][0]["metrics"], "unsupported field must be absent, not 0"
PY
GPUWATCH_MOCK_NVML=4xL40S "$GPUWATCH" status --capabilities --nvml-lib "$MOCK" >"$TMP/caps.txt" || fail "status --capabilities"
grep -q '^    DCGM_FI_DEV_FAN_SPEED  *NVML_ERROR_NOT_SUPPORTED$' "$TMP/caps.txt" \
  || { cat "$TMP/caps.txt"; fail "status --capabilities does not list the unsupported fan field"; }
grep -q '^    processes  *yes$' "$TMP/caps.txt" || fail "status --capabilities: process query not probed"

# No NVML library: one clear line, status still works, the agent still serves host metrics.
"$GPUWATCH" status --nvml-lib /nonexistent/libnvidia-ml.so.1 >"$TMP/nonvml.txt" || fail "status without NVML"
grep -q 'no GPU metrics: cannot load NVML library' "$TMP/nonvml.txt" || fail "no clear no-NVML message"
PORT=$(free_port)
"$GPUWATCH" up --job-socket off --data-dir none --listen "127.0.0.1:$PORT" --nvml-lib /nonexistent/libnvidia-ml.so.1 --host-interval 200ms \
  >"$TMP/nonvml.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$PORT/healthz" 20 || fail "agent without NVML did not start"
sleep 0.5
curl -fsS "http://127.0.0.1:$PORT/metrics" >"$TMP/nonvml.prom"
grep -q '^gpuwatch_host_memory_total_bytes' "$TMP/nonvml.prom" || fail "no host metrics without NVML"
[ "$(grep -c 'no GPU metrics' "$TMP/nonvml.log")" = 1 ] || fail "expected exactly one no-GPU log line"

# D2 (issue 17): beyond loopback with no token the agent refuses to start, unless
# --insecure-listen, which it logs loudly. D7: a second agent on the same port fails.
PORT=$(free_port)
rc=0; out=$("$GPUWATCH" up --job-socket off --data-dir none --listen "0.0.0.0:$PORT" --nvml-lib /nonexistent 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q 'serves beyond loopback, and no token is configured' <<<"$out" || fail "open listener without a token: rc $rc $out"
"$GPUWATCH" up --job-socket off --data-dir none --listen "0.0.0.0:$PORT" --insecure-listen --nvml-lib /nonexistent >"$TMP/insecure.log" 2>&1 &
INSECURE=$!
PIDS+=($INSECURE)
wait_http "http://127.0.0.1:$PORT/healthz" 20 || fail "agent with --insecure-listen did not start"
grep -q 'INSECURE: --listen 0.0.0.0:' "$TMP/insecure.log" || fail "no warning for --insecure-listen"
rc=0; out=$(timeout 20 "$GPUWATCH" up --job-socket off --data-dir none --listen "127.0.0.1:$PORT" --nvml-lib /nonexistent 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q 'address in use' <<<"$out" || fail "second agent on a taken port: rc $rc $out"
kill -TERM "$INSECURE"; wait "$INSECURE" || true

# A GPU lost mid-run, XIDs as events, kept in the data dir.
PORT=$(free_port)
GPUWATCH_MOCK_NVML="$FIXTURES/mock/lost_and_xid.json" "$GPUWATCH" up --job-socket off --listen "127.0.0.1:$PORT" --nvml-lib "$MOCK" \
  --data-dir "$TMP/data" --gpu-interval 200ms --process-interval 500ms >"$TMP/lost.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$PORT/healthz" 20 || fail "agent with scenario did not start"
for ((i = 0; i < 80; i++)); do
  curl -fsS "http://127.0.0.1:$PORT/metrics" >"$TMP/m.txt"
  grep -q '^gpuwatch_gpu_up{gpu="2".*} 0$' "$TMP/m.txt" && grep -q 'xid="79"} 1$' "$TMP/m.txt" && break
  sleep 0.1
done
grep -q '^gpuwatch_gpu_up{gpu="2".*} 0$' "$TMP/m.txt" || { cat "$TMP/lost.log"; fail "GPU 2 not reported down"; }
# Compression: gzip when accepted (never httplib's quality-11 Brotli), identical content.
curl -fsS -D "$TMP/hdr.txt" -H 'Accept-Encoding: br, gzip' -o "$TMP/m.gz" "http://127.0.0.1:$PORT/metrics"
grep -qi '^Content-Encoding: gzip' "$TMP/hdr.txt" || { cat "$TMP/hdr.txt"; fail "/metrics not gzipped for a gzip client"; }
gzip -dc "$TMP/m.gz" >"$TMP/m.inflated" || fail "gzipped /metrics is not valid gzip"
grep -q "^DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"" "$TMP/m.inflated" || fail "gzipped /metrics does not inflate to the exposition"
curl -fsS -D "$TMP/hdr2.txt" -H 'Accept-Encoding: br' -o /dev/null "http://127.0.0.1:$PORT/metrics"
grep -qi '^Content-Encoding' "$TMP/hdr2.txt" && fail "a br-only client got a compressed body" 
grep -q '^gpuwatch_xid_errors_total{gpu="2".*xid="79"} 1$' "$TMP/m.txt" || fail "XID 79 on GPU 2 not counted"
# Issue 18: the stored series carry the labels a Prometheus scrape would give them, so that a
# dcgm-exporter dashboard's {instance=~"$instance"} finds them; /metrics itself does not.
INSTANCE="$(hostname):$PORT"
for ((i = 0; i < 50; i++)); do
  curl -fsS -G "http://127.0.0.1:$PORT/api/v1/query" \
    --data-urlencode "query=count(DCGM_FI_DEV_GPU_UTIL{instance=\"$INSTANCE\",job=\"gpuwatch\"})" >"$TMP/inst.json"
  grep -q '"value":\[[0-9.]*,"[1-9]' "$TMP/inst.json" && break
  sleep 0.1
done
grep -q '"value":\[[0-9.]*,"[1-9]' "$TMP/inst.json" || fail "no stored DCGM series with instance=$INSTANCE, job=gpuwatch: $(cat "$TMP/inst.json")"
grep -q 'instance=' "$TMP/m.txt" && fail "/metrics carries an instance label (a scrape adds it)"
# The dashboard at /, from the binary: the page and its two assets, or (a build without node)
# a page that says why it is missing.
curl -fsS "http://127.0.0.1:$PORT/" >"$TMP/index.html" || fail "GET / failed"
if grep -q 'The dashboard was not built' "$TMP/index.html"; then
  echo "cli_end_to_end_test: the dashboard was not built here: $(grep -o 'not built: [^<]*' "$TMP/index.html")" >&2
else
  grep -q '<div id="app">' "$TMP/index.html" || fail "GET / is not the dashboard: $(head -c 200 "$TMP/index.html")"
  curl -fsS -H 'Accept-Encoding: gzip' -D "$TMP/js.hdr" -o "$TMP/app.js.gz" "http://127.0.0.1:$PORT/assets/app.js" || fail "app.js"
  grep -qi '^Content-Encoding: gzip' "$TMP/js.hdr" || fail "app.js not gzipped for a gzip client"
  # Not `gzip -dc | grep -q`: grep stops at the first match, and under pipefail the SIGPIPE that
  # gzip then gets fails the pipeline once app.js is bigger than a pipe's buffer.
  gzip -dc "$TMP/app.js.gz" >"$TMP/app.js" || fail "app.js is not gzip"
  grep -q '/api/v1/panel' "$TMP/app.js" || fail "app.js does not read the panel endpoint"
  curl -fsS -o /dev/null "http://127.0.0.1:$PORT/assets/app.css" || fail "app.css"
  # Revalidation: the script's ETag asked again answers a bodiless 304, so a second tab does not
  # download it again.
  ETAG=$(grep -i '^ETag:' "$TMP/js.hdr" | cut -d' ' -f2- | tr -d '\r')
  [ -n "$ETAG" ] || fail "app.js has no ETag: $(cat "$TMP/js.hdr")"
  CODE=$(curl -sS -o "$TMP/js304" -w '%{http_code}' -H "If-None-Match: $ETAG" "http://127.0.0.1:$PORT/assets/app.js")
  [ "$CODE" = 304 ] && [ ! -s "$TMP/js304" ] || fail "If-None-Match $ETAG answered $CODE with $(wc -c <"$TMP/js304") bytes"
  CODE=$(curl -sS -o /dev/null -w '%{http_code}' -H 'If-None-Match: "other"' "http://127.0.0.1:$PORT/assets/app.js")
  [ "$CODE" = 200 ] || fail "a stale ETag answered $CODE, not the script"
fi
# The dashboard's panel endpoint over the real HTTP server: buckets and a named 400.
NOW=$(date +%s)
curl -fsS -G "http://127.0.0.1:$PORT/api/v1/panel" --data-urlencode 'match=DCGM_FI_DEV_GPU_UTIL{gpu="0"}' \
  --data-urlencode "start=$((NOW - 60))" --data-urlencode "end=$NOW" --data-urlencode width=60 >"$TMP/panel.json" \
  || fail "/api/v1/panel failed"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))["data"]
assert d["tier"] == "raw" and d["step"] == 1 and len(d["times"]) == 61, d
s = d["series"][0]
assert s["metric"]["gpu"] == "0" and any(v is not None for v in s["last"]), s
' "$TMP/panel.json" || fail "/api/v1/panel: $(head -c 300 "$TMP/panel.json")"
code=$(curl -s -o "$TMP/panel_bad.json" -w '%{http_code}' "http://127.0.0.1:$PORT/api/v1/panel?match=x&start=1&end=2&width=0")
[ "$code" = 400 ] && grep -q 'parameter ."width."' "$TMP/panel_bad.json" || fail "/api/v1/panel width=0: $code $(cat "$TMP/panel_bad.json")"
grep -q '^gpuwatch_xid_errors_total{gpu="1".*xid="31"} 1$' "$TMP/m.txt" || fail "XID 31 on GPU 1 not counted"
grep -q '^DCGM_FI_DEV_GPU_UTIL{gpu="0"' "$TMP/m.txt" || fail "GPU 0 no longer served after GPU 2 was lost"
grep -q '^DCGM_FI_DEV_GPU_UTIL{gpu="2"' "$TMP/m.txt" && fail "lost GPU 2 still reports utilization"
curl -fsS "http://127.0.0.1:$PORT/api/v1/events" | python3 -c '
import json, sys
ev = json.load(sys.stdin)["events"]
kinds = [(e["kind"], e["gpu"], e.get("xid")) for e in ev]
assert ("xid", 2, 79) in kinds, kinds
assert ("gpu_lost", 2, None) in kinds, kinds
' || fail "/api/v1/events lacks the XID or the gpu_lost event"
curl -fsS -G "http://127.0.0.1:$PORT/api/v1/events" --data-urlencode kind=xid >"$TMP/xid.json" || fail "/api/v1/events?kind=xid failed"
python3 -c '
import json, sys
ev = json.load(open(sys.argv[1]))["events"]
assert ev and all(e["kind"] == "xid" for e in ev), ev
assert any(e["xid"] == 79 and e["severity"] == "critical" for e in ev), ev
' "$TMP/xid.json" || fail "XID 79 not kept in the event store"
# Live diagnosis (the engine reads the agent's own records every 5 s, 5 s behind): the lost GPU
# is a critical gpu_lost finding; `diagnose` exits 1 when there are findings.
for ((i = 0; i < 200; i++)); do
  rc=0
  "$GPUWATCH" diagnose --agent "http://127.0.0.1:$PORT" --json >"$TMP/diag.json" 2>"$TMP/diag.err" || rc=$?
  [ "$rc" = 1 ] && break
  [ "$rc" = 0 ] || { cat "$TMP/diag.err"; fail "diagnose exited $rc"; }
  sleep 0.1
done
python3 -c '
import json, sys
f = json.load(open(sys.argv[1]))["findings"]
lost = [x for x in f if x["cause"] == "gpu_lost"]
assert lost and lost[0]["gpu"] == 2 and lost[0]["severity"] == "critical", f
assert all(x["cause"] != "rank_exit" for x in f), f
' "$TMP/diag.json" || fail "live diagnosis: no gpu_lost finding for GPU 2"
node=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["findings"][0]["node"])' "$TMP/diag.json")
"$GPUWATCH" diagnose "$node" --agent "http://127.0.0.1:$PORT" >"$TMP/diag.txt" && fail "diagnose NODE with findings exited 0"
grep -q "^critical gpu_lost .*GPU2" "$TMP/diag.txt" || { cat "$TMP/diag.txt"; fail "diagnose NODE text lacks gpu_lost"; }
"$GPUWATCH" diagnose no-such-job --agent "http://127.0.0.1:$PORT" >"$TMP/diag0.txt" || fail "diagnose of a quiet job exited non-zero"
grep -q '^no findings$' "$TMP/diag0.txt" || fail "diagnose of a quiet job printed findings"
code=$(curl -s -o "$TMP/ev.out" -w '%{http_code}' "http://127.0.0.1:$PORT/api/v1/events?limit=0")
[ "$code" = 400 ] || fail "/api/v1/events?limit=0 answered $code"
curl -fsS "http://127.0.0.1:$PORT/api/v1/processes" | python3 -c '
import json, sys
p = json.load(sys.stdin)["processes"]
assert any(x["gpu"] == 0 for x in p), p
' || fail "processes from the scenario not attributed"

# Remote-write into --data-dir survives a restart (SIGTERM closes the store cleanly).
PORT=$(free_port)
"$GPUWATCH" up --job-socket off --listen "127.0.0.1:$PORT" --nvml-lib /nonexistent --data-dir "$TMP/store" >"$TMP/rw1.log" 2>&1 &
RW_PID=$!
wait_http "http://127.0.0.1:$PORT/healthz" 20 || fail "agent with a data dir did not start"
AUTH="Authorization: Bearer $(cat "$TMP/store/admin.token")"
code=$(curl -s -o "$TMP/rw.out" -w '%{http_code}' -H 'Content-Encoding: snappy' \
  -H 'Content-Type: application/x-protobuf' --data-binary @"$FIXTURES/remote_write/two_series.snappy" \
  "http://127.0.0.1:$PORT/api/v1/write")
[ "$code" = 401 ] || fail "remote-write without a token answered $code: $(cat "$TMP/rw.out")"
code=$(curl -s -o "$TMP/rw.out" -w '%{http_code}' -H 'Content-Encoding: snappy' -H "$AUTH" \
  -H 'Content-Type: application/x-protobuf' --data-binary @"$FIXTURES/remote_write/two_series.snappy" \
  "http://127.0.0.1:$PORT/api/v1/write")
[ "$code" = 204 ] || fail "remote-write answered $code: $(cat "$TMP/rw.out")"
code=$(curl -s -o "$TMP/rw.out" -w '%{http_code}' -H 'Content-Encoding: snappy' -H "$AUTH" --data-binary 'not snappy' \
  "http://127.0.0.1:$PORT/api/v1/write")
[ "$code" = 400 ] && grep -q 'remote-write' "$TMP/rw.out" || fail "bad remote-write body: $code $(cat "$TMP/rw.out")"
kill -TERM "$RW_PID"
wait "$RW_PID" || fail "agent did not exit cleanly on SIGTERM"
PORT=$(free_port)
"$GPUWATCH" up --job-socket off --listen "127.0.0.1:$PORT" --nvml-lib /nonexistent --data-dir "$TMP/store" >"$TMP/rw2.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$PORT/healthz" 20 || fail "agent did not restart on its data dir"
# A second agent on the taken port, with a store of its own: it says why and exits (it hung
# once, its tier thread blocked on the store already closed).
rc=0; out=$(timeout 30 "$GPUWATCH" up --job-socket off --listen "127.0.0.1:$PORT" \
  --nvml-lib /nonexistent --data-dir "$TMP/store-taken" 2>&1) || rc=$?
[ $rc != 0 ] && [ $rc != 124 ] && grep -q "cannot listen on 127.0.0.1:$PORT: address in use" <<<"$out" ||
  fail "agent on a taken port: rc=$rc out=$out"
# The 2 remote-written series (3 samples) plus the agent's own host series: `store stats` reads
# the store read-only beside the running agent.
"$GPUWATCH" store stats --data-dir "$TMP/store" --json >"$TMP/stats.json" || fail "store stats failed"
python3 -c '
import json, sys
st = json.load(open(sys.argv[1]))
assert st["series"] >= 2 and st["samples"] >= 3, st
assert set(st["tiers"]) == {"raw", "1m", "1h"}, st
assert st["bytes_on_disk"] > 0 and st["bytes_per_sample"] > 0, st
' "$TMP/stats.json" || { cat "$TMP/stats.json" "$TMP/rw2.log"; fail "remote-written samples not kept across a restart"; }
"$GPUWATCH" store check --data-dir "$TMP/store" --no-quarantine >"$TMP/check.out" 2>&1 ||
  { cat "$TMP/check.out"; fail "store check found damage in a cleanly closed store"; }
# The query API serves them, in Prometheus's shapes; bad queries are a 400 with a reason.
curl -fsS "http://127.0.0.1:$PORT/api/v1/series" --data-urlencode 'match[]={__name__=~".+"}' -G >"$TMP/series.json" ||
  fail "/api/v1/series failed"
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "success" and len(r["data"]) >= 2, r
' "$TMP/series.json" || fail "/api/v1/series lacks the remote-written series"
code=$(curl -s -o "$TMP/q.out" -w '%{http_code}' -G "http://127.0.0.1:$PORT/api/v1/query_range" \
  --data-urlencode 'query=rate(foo[5m' --data-urlencode start=0 --data-urlencode end=10 --data-urlencode step=1)
[ "$code" = 400 ] && grep -q '"errorType":"bad_data"' "$TMP/q.out" || fail "bad PromQL answered $code: $(cat "$TMP/q.out")"
# Compaction needs the store to itself: refused while the agent runs, fine after it stops.
set +e
out=$("$GPUWATCH" store compact --data-dir "$TMP/store" 2>&1); rc=$?
set -e
[ $rc = 2 ] && grep -q "LOCK" <<<"$out" || fail "store compact beside a running agent: rc=$rc out=$out"
kill -TERM "${PIDS[-1]}"
wait "${PIDS[-1]}" || fail "agent did not exit cleanly on SIGTERM"
unset 'PIDS[-1]'
"$GPUWATCH" store compact --data-dir "$TMP/store" >"$TMP/compact.out" 2>&1 ||
  { cat "$TMP/compact.out"; fail "store compact failed"; }
"$GPUWATCH" store stats --data-dir "$TMP/store" --json >"$TMP/stats2.json" || fail "store stats after compact failed"
python3 -c '
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
# One block per UTC day: the remote-written samples are from 2024, the host series from today.
assert b["blocks"] <= 2 and b["samples"] >= a["samples"] and b["series"] >= a["series"], (a, b)
assert b["wal_bytes"] == 0 and b["head"]["samples"] == 0, b
' "$TMP/stats.json" "$TMP/stats2.json" || fail "store compact lost data: $(cat "$TMP/stats2.json")"

# doctor: a healthy mock node passes every GPU check; a sick one names each problem and its GPU,
# exits 1, and its topology is compared (read only) with the archive the agent above wrote.
GPUWATCH_MOCK_NVML=8xH100 "$GPUWATCH" doctor --json --nvml-lib "$MOCK" >"$TMP/doctor-ok.json" || true
python3 - "$TMP/doctor-ok.json" <<'PY' || fail "doctor on a healthy mock node: $(cat "$TMP/doctor-ok.json")"
import json, sys
c = {x["name"]: x for x in json.load(open(sys.argv[1]))["checks"]}
for name in ("nvml", "gpus", "ecc", "clocks", "temperature", "pcie", "nvlink", "numa"):
    assert c[name]["status"] == "ok", c[name]
assert c["topology"]["status"] == "skip", c["topology"]
PY
ls "$TMP/data/topology" >"$TMP/topo-before.txt"
rc=0
GPUWATCH_MOCK_NVML="$FIXTURES/mock/doctor.json" "$GPUWATCH" doctor --json --nvml-lib "$MOCK" \
  --data-dir "$TMP/data" >"$TMP/doctor.json" || rc=$?
[ "$rc" = 1 ] || fail "doctor on a sick node exited $rc, not 1"
python3 - "$TMP/doctor.json" <<'PY' || fail "doctor on a sick mock node: $(cat "$TMP/doctor.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] is False
c = {x["name"]: x for x in d["checks"]}
def has(name, status, text):
    assert c[name]["status"] == status, c[name]
    assert any(text in line for line in c[name]["details"]), (text, c[name])
    assert c[name]["action"], c[name]
has("ecc", "fail", "GPU 2: 1 uncorrectable")
has("ecc", "fail", "GPU 3: a row remap is pending")
has("clocks", "fail", "GPU 3: hardware slowdown active: hw_slowdown")
has("pcie", "warn", "GPU 1: PCIe link x8 of x16")
has("topology", "warn", "GPU1 PCIe width")
assert c["nvlink"]["status"] == "ok" and c["gpus"]["status"] == "ok", c
PY
ls "$TMP/data/topology" | cmp -s - "$TMP/topo-before.txt" || fail "doctor wrote to the topology archive"

# Bad input names what was wrong.
set +e
out=$("$GPUWATCH" up --listen nonsense 2>&1); rc=$?
set -e
[ $rc = 2 ] && grep -q "bad listen address 'nonsense'" <<<"$out" || fail "bad --listen: rc=$rc out=$out"
printf 'listen = 127.0.0.1:1\nbogus-key = 1\n' >"$TMP/bad.conf"
set +e
out=$("$GPUWATCH" up --config "$TMP/bad.conf" 2>&1); rc=$?
set -e
[ $rc = 2 ] && grep -q "unknown key 'bogus-key'" <<<"$out" || fail "bad config: rc=$rc out=$out"
echo "cli_end_to_end_test: 1 passed, 0 failed"
