#!/usr/bin/env bash
# A local fleet on loopback (issue 19): a hub with a tokens file and three agents on the mock
# NVML, each with its own --hostname, pushing to it with a write token, and one training job
# across the three nodes: six ranks (tests/fleet_rank.py, the Python SDK), two a node, each
# reporting to its own node's agent over the job socket, each attributed to its GPU through the
# mock's process list. The job carries three faults that only the nodes seen together show, and
# the hub must name each at its place:
# - rank 3 on node-b GPU 1 is the straggler: the other five ranks, on all three nodes, wait for
#   it in communication (straggler_gpu, node-b GPU 1; two ranks a node, so only a comparison
#   across nodes finds it);
# - node-c's clock runs 1.5 s ahead: its ranks' steps end 1.5 s after the same steps elsewhere
#   (clock_skew, node-c);
# - node-c's driver differs from the others' (version_mismatch, node-c).
# Then the hub is SIGKILLed for FLEET_OUTAGE_S seconds (30 by default) while the job runs on, and
# node-b's agent is restarted in the middle of the outage. After the hub comes back and the
# agents' backlogs drain, every GPU sample each agent kept in its own store is on the hub once:
# the same timestamps, no hole where the hub was down, nothing counted twice; the record streams
# have no gap; /api/v1/nodes lists the nodes, a failure snapshot taken on the hub holds every
# node's records, and an agent with a wrong token raises an alert instead of looping.
GPUWATCH=$1 MOCK=$2
. "$(dirname "$0")/lib.sh"
OUTAGE_S=${FLEET_OUTAGE_S:-30}
PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)/sdk/python"
export PYTHONPATH PYTHONDONTWRITEBYTECODE=1

HUB_PORT=$(free_port) A_PORT=$(free_port) B_PORT=$(free_port) C_PORT=$(free_port)
D_PORT=$(free_port)
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
  # A node of the job has its own scenario (its driver, its ranks' processes on its GPUs) and
  # job socket.
  local mock=2xL40S socket=off
  if [ -f "$TMP/$1.mock.json" ]; then mock=$TMP/$1.mock.json socket=$TMP/$1.sock; fi
  GPUWATCH_MOCK_NVML=$mock "$GPUWATCH" up --listen "127.0.0.1:$2" --nvml-lib "$MOCK" \
    --hostname "$1" --data-dir "$TMP/$1" --job-socket "$socket" --kmsg off --gpu-interval 1s \
    --process-interval 1s --hub "$HUB" --hub-token-file "$3" --hub-interval 1s \
    >>"$TMP/$1.log" 2>&1 &
  AGENT_PID=$!
  PIDS+=("$AGENT_PID")
  wait_http "http://127.0.0.1:$2/healthz" 20 || { cat "$TMP/$1.log"; fail "agent $1 did not start"; }
}
hub_get() { curl -fsS -H "Authorization: Bearer $READ" "$HUB$1"; }
metric() {  # metric PORT NAME: the value of an unlabelled-but-Hostname metric
  curl -fsS "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 ~ "^"n"[{ ]" || $1 == n {print $2}' | head -1
}

# The job: ranks 2k and 2k+1 on node k's GPUs 0 and 1, a step every 0.5 s on one grid. The ranks
# start first (each waits for its agent's socket): the mock NVML lists their pids on their GPUs.
JOB=fleet-7
GRID_T0=$(date +%s)
declare -A RANK_PID
start_rank() {  # start_rank NODE RANK COMM_S [ARGS...]
  local node=$1 rank=$2 comm=$3
  shift 3
  python3 "$(dirname "$0")/fleet_rank.py" "$TMP/$node.sock" "$JOB" "$rank" 6 "$GRID_T0" 0.5 \
    "$comm" "$@" >>"$TMP/ranks.log" 2>&1 &
  RANK_PID[$rank]=$!
  PIDS+=("$!")
}
start_rank node-a 0 0.3
start_rank node-a 1 0.3
start_rank node-b 2 0.3
start_rank node-b 3 0.02
start_rank node-c 4 0.3 --clock-offset-s 1.5
start_rank node-c 5 0.3 --clock-offset-s 1.5
scenario() {  # scenario NODE DRIVER RANK_ON_GPU0 RANK_ON_GPU1
  cat >"$TMP/$1.mock.json" <<JSON
{"shape": "2xL40S", "driver_version": "$2",
 "gpus": [{"gpu": 0, "processes": [{"pid": ${RANK_PID[$3]}, "used_memory_mib": 30000}]},
          {"gpu": 1, "processes": [{"pid": ${RANK_PID[$4]}, "used_memory_mib": 30000}]}]}
JSON
}
scenario node-a 550.90.07 0 1
scenario node-b 550.90.07 2 3
scenario node-c 535.183.01 4 5

start_hub
start_agent node-a "$A_PORT" "$TMP/write.token"
A_PID=$AGENT_PID
start_agent node-b "$B_PORT" "$TMP/write.token"
B_PID=$AGENT_PID
start_agent node-c "$C_PORT" "$TMP/write.token"

# The three nodes arrive: their records (the node record names their GPUs) and their series.
for ((i = 0; i < 100; i++)); do
  n=$(hub_get /api/v1/nodes | python3 -c 'import json,sys; print(sum(1 for n in json.load(sys.stdin)["nodes"] if n["gpus"] == 2))')
  [ "$n" = 3 ] && break
  sleep 0.2
done
[ "$n" = 3 ] || { hub_get /api/v1/nodes; fail "the hub does not list the three nodes with their GPUs"; }

# The hub names the job's three cross-node faults, each at its place, and nothing else of those
# causes. The straggler must hold for 30 s of steps before it is named (straggler_window_s).
want='clock_skew node-c -
straggler_gpu node-b 1
version_mismatch node-c -'
for ((i = 0; i < 120; i++)); do
  got=$(hub_get /api/v1/findings | python3 -c '
import json, sys
causes = ("clock_skew", "straggler_gpu", "version_mismatch")
for f in sorted(json.load(sys.stdin)["findings"], key=lambda f: (f["cause"], f["node"])):
    if f["cause"] in causes:
        print(f["cause"], f["node"], f.get("gpu", "-"))')
  [ "$got" = "$want" ] && break
  sleep 1
done
[ "$got" = "$want" ] || fail "hub findings:
$got
want:
$want
all: $(hub_get /api/v1/findings | head -c 3000)
ranks: $(tail -5 "$TMP/ranks.log")"
# The job is one job on the hub: its three nodes and six ranks, each on its node.
hub_get "/api/v1/jobs/$JOB" >"$TMP/job.json"
python3 - "$TMP/job.json" <<'PY' || fail "job: $(head -c 1500 "$TMP/job.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert [n["node"] for n in j["nodes"]] == ["node-a", "node-b", "node-c"], j["nodes"]
assert all(n["gpus"] == [0, 1] for n in j["nodes"]), j["nodes"]
ranks = {r["rank"]: r for r in j["ranks"]}
assert sorted(ranks) == list(range(6)), ranks.keys()
for rank, r in ranks.items():
    assert r["node"] == "node-" + "abc"[rank // 2], r
PY

# The hub has saved its job list once (every 30 s): its death below then tests the replay of
# the logs past that save, not only a cold start.
for ((i = 0; i < 400; i++)); do
  [ -s "$TMP/hub/fleet-jobs.json" ] && break
  sleep 0.1
done
[ -s "$TMP/hub/fleet-jobs.json" ] || fail "the hub never saved its job list"

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
assert set(nodes) == {"node-a", "node-b", "node-c"}, nodes.keys()
for name, n in nodes.items():
    assert n["gap_entries"] == 0, f"{name} lost {n['gap_entries']} record entries"
    assert n["health"] in ("healthy", "degraded"), n
    assert n["driver_version"] == ("535.183.01" if name == "node-c" else "550.90.07"), n
# node-b holds the straggler: degraded, and the reason says which GPU.
assert nodes["node-b"]["health"] == "degraded", nodes["node-b"]
assert "straggler_gpu on GPU 1" in nodes["node-b"]["reason"], nodes["node-b"]
EOF

# node-a's ranks stop; once its last records are on the hub, the hub counts each rank's steps as
# the agent that took them does: none lost or counted twice across the hub's death.
kill "${RANK_PID[0]}" "${RANK_PID[1]}"
steps() {  # steps URL [CURL_ARGS...]: "rank:steps_total ..." of ranks 0 and 1
  local url=$1
  shift
  curl -fsS "$@" "$url" | python3 -c '
import json, sys
j = json.load(sys.stdin)
ranks = sorted((r["rank"], r["steps_total"]) for r in j["ranks"] if r["rank"] < 2)
print(" ".join("%d:%d" % r for r in ranks))'
}
for ((i = 0; i < 100; i++)); do
  on_agent=$(steps "http://127.0.0.1:$A_PORT/api/v1/jobs/$JOB" || true)
  on_hub=$(steps "$HUB/api/v1/jobs/$JOB" -H "Authorization: Bearer $READ" || true)
  [ -n "$on_agent" ] && [ "$on_agent" = "$on_hub" ] && break
  sleep 0.2
done
[ -n "$on_agent" ] && [ "$on_agent" = "$on_hub" ] ||
  fail "node-a's ranks' steps: the agent counts $on_agent, the hub $on_hub"

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
for node in node-a node-b node-c; do
  grep -q "\"node\":\"$node\"" "$TMP/snap.jsonl" || fail "the hub's snapshot has no record of $node"
done

# A wrong token: the agent raises an alert and keeps its data; the hub's log shows no token.
start_agent node-d "$D_PORT" "$TMP/wrong.token"
for ((i = 0; i < 100; i++)); do
  curl -fsS "http://127.0.0.1:$D_PORT/api/v1/alerts" | grep -q gpuwatch_hub_push_refused && break
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$D_PORT/api/v1/alerts" | grep -q gpuwatch_hub_push_refused ||
  fail "a refused token raised no alert on the agent"
[ "$(metric "$D_PORT" gpuwatch_hub_push_auth_refused)" = 1 ] || fail "auth_refused is not 1"
for f in "$TMP"/*.log; do
  if grep -qF -e "$WRITE" -e "$(cat "$TMP/wrong.token")" "$f"; then fail "a token is in $f"; fi
done
echo "PASS fleet (outage ${OUTAGE_S}s)"
