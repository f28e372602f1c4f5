#!/usr/bin/env bash
# Scale-out (issue 19): a hub with --remote-write passes every series it takes on to a real
# VictoriaMetrics (Debian's victoria-metrics, started here on loopback), through its own spool.
# An agent on the mock NVML pushes to the hub for a while; then every GPU series on the hub and
# in VictoriaMetrics holds the same samples (timestamps, and values to VictoriaMetrics' 12
# significant digits, via its /api/v1/export), and a PromQL aggregate gives the same answer on
# both. A second hub with --read-from VictoriaMetrics then answers the query API (instant and
# range queries, label values, series) as the first does over its embedded store. Last, a
# relaying hub (--remote-write and --read-from: it keeps no series of its own) is SIGKILLed
# for 8 s under a pushing agent: after the agent's backlog drains, the GPU series in
# VictoriaMetrics, read through the relay's own query API, holds every sample the agent kept,
# once, with no hole where the relay was down.
GPUWATCH=$1 MOCK=$2
. "$(dirname "$0")/lib.sh"
need_peer victoria-metrics victoria-metrics

VM_PORT=$(free_port) HUB_PORT=$(free_port) A_PORT=$(free_port)
VM="http://127.0.0.1:$VM_PORT"
HUB="http://127.0.0.1:$HUB_PORT"
# -search.latencyOffset=0s: answer with the newest samples (by default VictoriaMetrics hides
# the last 30 s from queries).
victoria-metrics -storageDataPath="$TMP/vm" -httpListenAddr="127.0.0.1:$VM_PORT" \
  -retentionPeriod=100y -search.latencyOffset=0s -search.disableCache \
  -dedup.minScrapeInterval=1ms >"$TMP/vm.log" 2>&1 &
PIDS+=($!)
wait_http "$VM/health" 30 || { tail -20 "$TMP/vm.log"; fail "victoria-metrics did not start"; }

"$GPUWATCH" hub --listen "127.0.0.1:$HUB_PORT" --data-dir "$TMP/hub" \
  --remote-write "$VM/api/v1/write" >"$TMP/hub.log" 2>&1 &
PIDS+=($!)
wait_http "$HUB/healthz" 20 || { cat "$TMP/hub.log"; fail "hub did not start"; }
GPUWATCH_MOCK_NVML=2xL40S "$GPUWATCH" up --listen "127.0.0.1:$A_PORT" --nvml-lib "$MOCK" \
  --hostname node-a --data-dir "$TMP/a" --job-socket off --kmsg off --gpu-interval 1s \
  --hub "$HUB" --hub-token-file "$TMP/hub/admin.token" >"$TMP/a.log" 2>&1 &
A_PID=$!
PIDS+=("$A_PID")
wait_http "http://127.0.0.1:$A_PORT/healthz" 20 || { cat "$TMP/a.log"; fail "agent did not start"; }
sleep 12
kill "$A_PID"
wait "$A_PID" 2>/dev/null || true

hub_count() {
  curl -fsSG "$HUB/api/v1/query" --data-urlencode 'query=sum(count_over_time(DCGM_FI_DEV_GPU_TEMP[10m]))' |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)'
}
vm_count() {
  curl -fsSG "$VM/api/v1/export" --data-urlencode 'match[]=DCGM_FI_DEV_GPU_TEMP' |
    python3 -c 'import json,sys; print(sum(len(json.loads(l)["values"]) for l in sys.stdin if l.strip()))'
}
# The agent's last push, then the hub's next forward (every 5 s).
for ((i = 0; i < 150; i++)); do
  h=$(hub_count) v=$(vm_count)
  [ "$h" != 0 ] && [ "$h" = "$v" ] && break
  sleep 0.2
done
[ "$h" != 0 ] && [ "$h" = "$v" ] || fail "GPU temperature samples: $h on the hub, $v in VictoriaMetrics"

# Every GPU series: the same timestamps and values.
NOW=$(date +%s)
curl -fsSG "$HUB/api/v1/query" --data-urlencode 'query={__name__=~"DCGM_FI_DEV_.*"}[10m]' \
  --data-urlencode "time=$NOW" >"$TMP/hub.json"
curl -fsSG "$VM/api/v1/export" --data-urlencode 'match[]={__name__=~"DCGM_FI_DEV_.*"}' >"$TMP/vm.jsonl"
python3 - "$TMP/hub.json" "$TMP/vm.jsonl" <<'EOF' || fail "the hub and VictoriaMetrics differ"
import json, sys
def key(m):
    return tuple(sorted(m.items()))
hub = {}
for r in json.load(open(sys.argv[1]))["data"]["result"]:
    hub[key(r["metric"])] = [(round(float(t) * 1000), float(v)) for t, v in r["values"]]
vm = {}
for line in open(sys.argv[2]):
    if line.strip():
        r = json.loads(line)
        vm[key(r["metric"])] = list(zip(r["timestamps"], [float(v) for v in r["values"]]))
assert hub and set(hub) == set(vm), f"series: {len(hub)} on the hub, {len(vm)} in VM; e.g. {sorted(set(hub) ^ set(vm))[:2]}"
# VictoriaMetrics keeps about 12 significant decimal digits of a float (its docs, "Data
# model": values are converted to decimal with a limited mantissa), so values compare to 1e-9.
for k in hub:
    h, v = hub[k], vm[k]
    assert [t for t, _ in h] == [t for t, _ in v], f"{dict(k)}: timestamps differ ({len(h)} vs {len(v)})"
    for (t, a), (_, b) in zip(h, v):
        assert abs(a - b) <= 1e-9 * max(1.0, abs(a)), f"{dict(k)} at {t}: {a} on the hub, {b} in VM"
print(f"{len(hub)} series, {sum(map(len, hub.values()))} samples: the same on the hub and in VictoriaMetrics")
EOF
# A PromQL aggregate over the same data.
q='sum by (gpu) (max_over_time(DCGM_FI_DEV_POWER_USAGE[10m]))'
for url in "$HUB" "$VM"; do
  curl -fsSG "$url/api/v1/query" --data-urlencode "query=$q" --data-urlencode "time=$NOW" |
    python3 -c 'import json,sys; print(sorted((r["metric"]["gpu"], r["value"][1]) for r in json.load(sys.stdin)["data"]["result"]))'
done >"$TMP/answers"
python3 - "$TMP/answers" <<'EOF' || fail "answers differ: $(cat "$TMP/answers")"
import ast, sys
hub, vm = (ast.literal_eval(l) for l in open(sys.argv[1]))
assert hub and [g for g, _ in hub] == [g for g, _ in vm], (hub, vm)
assert all(abs(float(a) - float(b)) <= 1e-9 * max(1, abs(float(a))) for (_, a), (_, b) in zip(hub, vm))
EOF
# The read side: a second hub answers through VictoriaMetrics (--read-from), with the same
# engine; its answers match the first hub's over its embedded store, query for query.
R_PORT=$(free_port)
"$GPUWATCH" hub --listen "127.0.0.1:$R_PORT" --data-dir "$TMP/reader" --read-from "$VM" \
  >"$TMP/reader.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$R_PORT/healthz" 20 || { cat "$TMP/reader.log"; fail "reader hub did not start"; }
ask() {  # ask PORT PATH ARGS...: the JSON answer
  local port=$1 path=$2
  shift 2
  local args=()
  for a in "$@"; do args+=(--data-urlencode "$a"); done
  curl -fsSG "http://127.0.0.1:$port$path" "${args[@]}"
}
i=0
for q in "query=DCGM_FI_DEV_GPU_TEMP" "query=max_over_time(DCGM_FI_DEV_POWER_USAGE[1m])" \
  "query=sum by (Hostname) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[30s]))" \
  "query=count(DCGM_FI_DEV_FB_USED > 0)"; do
  ask "$HUB_PORT" /api/v1/query "$q" "time=$NOW" >"$TMP/emb.$i.json"
  ask "$R_PORT" /api/v1/query "$q" "time=$NOW" >"$TMP/vm.$i.json"
  i=$((i + 1))
done
ask "$HUB_PORT" /api/v1/query_range "query=sum(DCGM_FI_DEV_GPU_UTIL)" "start=$((NOW - 15))" \
  "end=$NOW" "step=1" >"$TMP/emb.$i.json"
ask "$R_PORT" /api/v1/query_range "query=sum(DCGM_FI_DEV_GPU_UTIL)" "start=$((NOW - 15))" \
  "end=$NOW" "step=1" >"$TMP/vm.$i.json"
i=$((i + 1))
ask "$HUB_PORT" /api/v1/label/gpu/values >"$TMP/emb.$i.json"
ask "$R_PORT" /api/v1/label/gpu/values >"$TMP/vm.$i.json"
i=$((i + 1))
ask "$HUB_PORT" /api/v1/series "match[]=DCGM_FI_DEV_GPU_TEMP" >"$TMP/emb.$i.json"
ask "$R_PORT" /api/v1/series "match[]=DCGM_FI_DEV_GPU_TEMP" >"$TMP/vm.$i.json"
python3 - "$TMP" "$((i + 1))" <<'EOF' || fail "the query path over VictoriaMetrics answers differently"
import json, sys
tmp, n = sys.argv[1], int(sys.argv[2])
def norm(d):
    d = d["data"]
    if isinstance(d, dict):
        out = []
        for r in d["result"]:
            pts = r.get("values") or [r["value"]]
            out.append((tuple(sorted(r["metric"].items())), [(float(t), float(v)) for t, v in pts]))
        return d["resultType"], sorted(out)
    return sorted(json.dumps(x, sort_keys=True) for x in d)
for i in range(n):
    a = norm(json.load(open(f"{tmp}/emb.{i}.json")))
    b = norm(json.load(open(f"{tmp}/vm.{i}.json")))
    if isinstance(a, tuple):
        assert a[0] == b[0] and [k for k, _ in a[1]] == [k for k, _ in b[1]], (i, a, b)
        assert a[1], f"query {i}: empty answer"
        for (_, pa), (_, pb) in zip(a[1], b[1]):
            assert [t for t, _ in pa] == [t for t, _ in pb], (i, pa, pb)
            assert all(abs(x - y) <= 1e-9 * max(1, abs(x)) for (_, x), (_, y) in zip(pa, pb)), (i, pa, pb)
    else:
        assert a == b and a, (i, a, b)
print(f"{n} queries: the same answers over the embedded store and over VictoriaMetrics")
EOF
# The relay: node-b pushes to it; it is SIGKILLed for 8 s and comes back.
L_PORT=$(free_port) B_PORT=$(free_port)
RELAY="http://127.0.0.1:$L_PORT"
start_relay() {
  "$GPUWATCH" hub --listen "127.0.0.1:$L_PORT" --data-dir "$TMP/relay" \
    --remote-write "$VM/api/v1/write" --read-from "$VM" >>"$TMP/relay.log" 2>&1 &
  RELAY_PID=$!
  PIDS+=("$RELAY_PID")
  wait_http "$RELAY/healthz" 20 || { cat "$TMP/relay.log"; fail "relay hub did not start"; }
}
start_relay
grep -q "relaying the agents' series" "$TMP/relay.log" || fail "the hub does not say it relays"
GPUWATCH_MOCK_NVML=2xL40S "$GPUWATCH" up --listen "127.0.0.1:$B_PORT" --nvml-lib "$MOCK" \
  --hostname node-b --data-dir "$TMP/b" --job-socket off --kmsg off --gpu-interval 1s \
  --hub "$RELAY" --hub-token-file "$TMP/relay/admin.token" --hub-interval 1s >"$TMP/b.log" 2>&1 &
B_PID=$!
PIDS+=("$B_PID")
wait_http "http://127.0.0.1:$B_PORT/healthz" 20 || { cat "$TMP/b.log"; fail "agent node-b did not start"; }
SEL='DCGM_FI_DEV_GPU_TEMP{Hostname="node-b",gpu="0"}'
for ((i = 0; i < 100; i++)); do
  [ "$(curl -fsSG "$VM/api/v1/export" --data-urlencode "match[]=$SEL" | wc -l)" -ge 1 ] && break
  sleep 0.2
done
T0=$(date +%s)
sleep 3
kill -9 "$RELAY_PID"
wait "$RELAY_PID" 2>/dev/null || true
sleep 8
start_relay
metric() { curl -fsS "$1/metrics" | awk -v n="$2" '$1 ~ "^"n"[{ ]" || $1 == n {print $2}' | head -1; }
for ((i = 0; i < 150; i++)); do
  b=$(metric "http://127.0.0.1:$B_PORT" gpuwatch_hub_push_backlog_entries)
  [ "${b%.*}" -le 1 ] && break
  sleep 0.2
done
[ "${b%.*}" -le 1 ] || fail "node-b still has $b entries for the relay"
sleep 2
T1=$(($(date +%s) - 2))
SPAN=$((T1 - T0))
ADMIN=$(cat "$TMP/relay/admin.token")
# The relay forwards every 5 s: wait for its spool to be taken.
for ((i = 0; i < 100; i++)); do
  f=$(curl -fsS -H "Authorization: Bearer $ADMIN" "$RELAY/metrics" |
    awk '$1 ~ /^gpuwatch_remote_write_forward_backlog_entries/ {print $2}')
  [ "${f%.*}" = 0 ] && break
  sleep 0.2
done
[ "${f%.*}" = 0 ] || fail "the relay still holds '$f' entries for VictoriaMetrics"
heads=$(curl -fsS -H "Authorization: Bearer $ADMIN" "$RELAY/metrics" |
  awk '$1 ~ /^gpuwatch_store_head_series/ {print $2}')
[ "$heads" = 0 ] || fail "the relay kept series of its own: '$heads'"
curl -fsSG "http://127.0.0.1:$B_PORT/api/v1/query" --data-urlencode "query=$SEL[${SPAN}s]" \
  --data-urlencode "time=$T1" >"$TMP/b.agent.json"
# What VictoriaMetrics took becomes searchable within seconds (its in-memory parts).
count() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["data"]["result"]; print(len(r[0]["values"]) if r else 0)' "$1"; }
for ((i = 0; i < 75; i++)); do
  curl -fsSG -H "Authorization: Bearer $ADMIN" "$RELAY/api/v1/query" \
    --data-urlencode "query=$SEL[${SPAN}s]" --data-urlencode "time=$T1" >"$TMP/b.relay.json"
  [ "$(count "$TMP/b.relay.json")" -ge "$(count "$TMP/b.agent.json")" ] && break
  sleep 0.2
done
python3 - "$TMP/b.agent.json" "$TMP/b.relay.json" "$SPAN" <<'EOF' ||
import json, sys
def samples(path):
    r = json.load(open(path))["data"]["result"]
    assert len(r) == 1, f"{path}: {len(r)} series"
    return [(float(t), float(v)) for t, v in r[0]["values"]]
a, v = samples(sys.argv[1]), samples(sys.argv[2])
span = int(sys.argv[3])
assert a == v, f"agent kept {len(a)} samples, VictoriaMetrics has {len(v)}; missing {sorted(set(a) - set(v))[:5]}, extra {sorted(set(v) - set(a))[:5]}"
gaps = [y[0] - x[0] for x, y in zip(v, v[1:])]
assert len(v) >= span - 5 and max(gaps) <= 2.5, f"{len(v)} samples over {span}s, largest gap {max(gaps)}s"
print(f"node-b: {len(v)} samples over {span}s, relayed across a SIGKILL, the same in VictoriaMetrics")
EOF
  fail "node-b's samples differ between the agent and VictoriaMetrics read through the relay"
echo "PASS hub remote-write into VictoriaMetrics and reads through it; a relaying hub loses nothing"
