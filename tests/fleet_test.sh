#!/usr/bin/env bash
# A local fleet on loopback (issue 19): a hub with a tokens file and two agents on the mock
# NVML, each with its own --hostname, pushing to it with a write token. The hub is SIGKILLed
# for FLEET_OUTAGE_S seconds (30 by default) and one agent is restarted in the middle of the
# outage. After the hub comes back and the agents' backlogs drain, every GPU sample each agent
# kept in its own store is on the hub once: the same timestamps, no hole where the hub was
# down, nothing counted twice; the record streams have no gap; /api/v1/nodes lists both nodes,
# a failure snapshot taken on the hub holds both nodes' records, and an agent with a wrong
# token raises an alert instead of looping.
GPUWATCH=$1 MOCK=$2
. "$(dirname "$0")/lib.sh"
OUTAGE_S=${FLEET_OUTAGE_S:-30}

HUB_PORT=$(free_port) A_PORT=$(free_port) B_PORT=$(free_port) C_PORT=$(free_port)
HUB="http://127.0.0.1:$HUB_PORT"
WRITE=$("$GPUWATCH" token new write | cut -d' ' -f1)
READ=$("$GPUWATCH" token new read | cut -d' ' -f1)
printf '%s write\n%s read\n' "$WRITE" "$READ" >"$TMP/tokens"
echo "$WRITE" >"$TMP/write.token"
"$GPUWATCH" token new write | cut -d' ' -f1 >"$TMP/wrong.token"
chmod 600 "$TMP/tokens" "$TMP/write.token" "$TMP/wrong.token"

start_hub() {
  "$GPUWATCH" hub --listen "127.0.0.1:$HUB_PORT" --data-dir "$TMP/hub" --tokens "$TMP/tokens" \
    >>"$TMP/hub.log" 2>&1 &
  HUB_PID=$!
  PIDS+=("$HUB_PID")
  wait_http "$HUB/healthz" 20 || { cat "$TMP/hub.log"; fail "hub did not start"; }
}
start_agent() {  # start_agent NAME PORT TOKEN_FILE: sets AGENT_PID
  GPUWATCH_MOCK_NVML=2xL40S "$GPUWATCH" up --listen "127.0.0.1:$2" --nvml-lib "$MOCK" \
    --hostname "$1" --data-dir "$TMP/$1" --job-socket off --kmsg off --gpu-interval 1s \
    --hub "$HUB" --hub-token-file "$3" --hub-interval 1s >>"$TMP/$1.log" 2>&1 &
  AGENT_PID=$!
  PIDS+=("$AGENT_PID")
  wait_http "http://127.0.0.1:$2/healthz" 20 || { cat "$TMP/$1.log"; fail "agent $1 did not start"; }
}
hub_get() { curl -fsS -H "Authorization: Bearer $READ" "$HUB$1"; }
metric() {  # metric PORT NAME: the value of an unlabelled-but-Hostname metric
  curl -fsS "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 ~ "^"n"[{ ]" || $1 == n {print $2}' | head -1
}

start_hub
start_agent node-a "$A_PORT" "$TMP/write.token"
A_PID=$AGENT_PID
start_agent node-b "$B_PORT" "$TMP/write.token"
B_PID=$AGENT_PID

# Both nodes arrive: their records (the node record names their GPUs) and their series.
for ((i = 0; i < 100; i++)); do
  n=$(hub_get /api/v1/nodes | python3 -c 'import json,sys; print(sum(1 for n in json.load(sys.stdin)["nodes"] if n["gpus"] == 2))')
  [ "$n" = 2 ] && break
  sleep 0.2
done
[ "$n" = 2 ] || { hub_get /api/v1/nodes; fail "the hub does not list both nodes with their GPUs"; }
T0=$(date +%s)
sleep 3

# The hub dies without a word; node-b restarts in the middle of the outage.
kill -9 "$HUB_PID"
wait "$HUB_PID" 2>/dev/null || true
sleep $((OUTAGE_S / 2))
kill "$B_PID"
wait "$B_PID" 2>/dev/null || true
start_agent node-b "$B_PORT" "$TMP/write.token"
B_PID=$AGENT_PID
sleep $((OUTAGE_S - OUTAGE_S / 2))
backlog=$(metric "$A_PORT" gpuwatch_hub_push_backlog_entries)
[ "${backlog%.*}" -ge "$((OUTAGE_S / 2))" ] || fail "node-a's backlog after ${OUTAGE_S}s down is only $backlog entries"
start_hub

# Both backlogs drain (oldest first, rate-limited).
for port in "$A_PORT" "$B_PORT"; do
  for ((i = 0; i < 300; i++)); do
    b=$(metric "$port" gpuwatch_hub_push_backlog_entries)
    [ "${b%.*}" -le 1 ] && break
    sleep 0.2
  done
  [ "${b%.*}" -le 1 ] || fail "agent on $port still has $b entries for the hub"
done
sleep 2
T1=$(($(date +%s) - 2))
SPAN=$((T1 - T0))

# The GPU samples of [T0, T1] on each agent and on the hub: the same timestamps and values.
compare() {  # compare NODE PORT MAXGAP
  local sel="DCGM_FI_DEV_GPU_TEMP{Hostname=\"$1\",gpu=\"0\"}[${SPAN}s]"
  curl -fsSG "http://127.0.0.1:$2/api/v1/query" --data-urlencode "query=$sel" \
    --data-urlencode "time=$T1" >"$TMP/$1.agent.json"
  curl -fsSG -H "Authorization: Bearer $READ" "$HUB/api/v1/query" --data-urlencode "query=$sel" \
    --data-urlencode "time=$T1" >"$TMP/$1.hub.json"
  python3 - "$TMP/$1.agent.json" "$TMP/$1.hub.json" "$1" "$3" "$SPAN" <<'EOF'
import json, sys
agent, hub, node, maxgap, span = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
def samples(path):
    r = json.load(open(path))["data"]["result"]
    assert len(r) == 1, f"{path}: {len(r)} series"
    return [(float(t), v) for t, v in r[0]["values"]]
a, h = samples(agent), samples(hub)
if a != h:
    missing = sorted(set(a) - set(h))[:5]
    extra = sorted(set(h) - set(a))[:5]
    sys.exit(f"{node}: agent kept {len(a)} samples, hub has {len(h)}; missing {missing}, extra {extra}")
if len(set(t for t, _ in h)) != len(h):
    sys.exit(f"{node}: a timestamp is on the hub twice")
gaps = [b[0] - a_[0] for a_, b in zip(h, h[1:])]
if len(h) < span - 5 or max(gaps) > maxgap:
    sys.exit(f"{node}: {len(h)} samples over {span}s, largest gap {max(gaps)}s (allowed {maxgap}s)")
print(f"{node}: {len(h)} samples over {span}s on the agent and the hub alike, largest gap {max(gaps)}s")
EOF
}
compare node-a "$A_PORT" 2.5 || fail "node-a's samples differ on the hub"
# node-b was down for its restart: its own store has that hole too, and the hub has the same.
compare node-b "$B_PORT" 15 || fail "node-b's samples differ on the hub"

# The record streams: no entry lost (a gap), and the hub's restart cost no duplicate records.
hub_get /api/v1/nodes >"$TMP/nodes.json"
python3 - "$TMP/nodes.json" <<'EOF' || fail "nodes: $(cat "$TMP/nodes.json")"
import json, sys
nodes = {n["node"]: n for n in json.load(open(sys.argv[1]))["nodes"]}
assert set(nodes) == {"node-a", "node-b"}, nodes.keys()
for name, n in nodes.items():
    assert n["gap_entries"] == 0, f"{name} lost {n['gap_entries']} record entries"
    assert n["health"] in ("healthy", "degraded"), n
    assert n["driver_version"] == "550.90.07", n
EOF

# A failure snapshot on the hub holds every node's records (the merged window).
ADMIN=$(cat "$TMP/hub/admin.token")
snap=$(curl -fsS -X POST -H "Authorization: Bearer $ADMIN" "$HUB/api/v1/snapshots")
id=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["records"] > 0, d; print(d["id"])' "$snap") ||
  fail "hub snapshot: $snap"
for ((i = 0; i < 100; i++)); do
  curl -fsS -H "Authorization: Bearer $READ" -o "$TMP/snap.gz" "$HUB/api/v1/snapshots/$id/trace.jsonl.gz" 2>/dev/null && break
  sleep 0.2
done
zcat "$TMP/snap.gz" >"$TMP/snap.jsonl"  # not piped into grep -q: pipefail and SIGPIPE
for node in node-a node-b; do
  grep -q "\"node\":\"$node\"" "$TMP/snap.jsonl" || fail "the hub's snapshot has no record of $node"
done

# A wrong token: the agent raises an alert and keeps its data; the hub's log shows no token.
start_agent node-c "$C_PORT" "$TMP/wrong.token"
for ((i = 0; i < 100; i++)); do
  curl -fsS "http://127.0.0.1:$C_PORT/api/v1/alerts" | grep -q gpuwatch_hub_push_refused && break
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$C_PORT/api/v1/alerts" | grep -q gpuwatch_hub_push_refused ||
  fail "a refused token raised no alert on the agent"
[ "$(metric "$C_PORT" gpuwatch_hub_push_auth_refused)" = 1 ] || fail "auth_refused is not 1"
for f in "$TMP"/*.log; do
  if grep -qF -e "$WRITE" -e "$(cat "$TMP/wrong.token")" "$f"; then fail "a token is in $f"; fi
done
echo "PASS fleet (outage ${OUTAGE_S}s)"
