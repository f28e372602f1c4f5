#!/usr/bin/env bash
# The hub's diagnosis across nodes (issue 19): a simulated three-node job (gpuwatch sim) whose
# faults only show when the nodes are seen together — node 1 on another driver
# (version_mismatch), node 2's clock a second off (clock_skew: its ranks' steps end early
# against the others', aligned by step number), and a straggler GPU on node 1 that the ranks of
# every node wait for — played as three agents pushing their record streams to a hub
# (tests/fleet_push.py). The hub names each cause at its node (and GPU), as `gpuwatch replay`
# does on the whole trace; /api/v1/nodes gives node 1 its reason, and /api/v1/jobs has the job
# once, with its three nodes and twelve ranks.
GPUWATCH=$1
. "$(dirname "$0")/lib.sh"

"$GPUWATCH" sim --shape 4xH100 --nodes 3 --duration 10m --seed 7 \
  --fault clock_skew:node=2,onset=120 --fault version_mismatch:node=1 \
  --fault straggler_gpu:node=1,gpu=2,onset=200 --out "$TMP/job" >/dev/null
PORT=$(free_port)
HUB="http://127.0.0.1:$PORT"
WRITE=$("$GPUWATCH" token new write | cut -d' ' -f1)
READ=$("$GPUWATCH" token new read | cut -d' ' -f1)
printf '%s write\n%s read\n' "$WRITE" "$READ" >"$TMP/tokens"
echo "$WRITE" >"$TMP/write.token"
chmod 600 "$TMP/tokens" "$TMP/write.token"
"$GPUWATCH" hub --listen "127.0.0.1:$PORT" --data-dir "$TMP/hub" --tokens "$TMP/tokens" \
  >"$TMP/hub.log" 2>&1 &
PIDS+=($!)
wait_http "$HUB/healthz" 20 || { cat "$TMP/hub.log"; fail "hub did not start"; }

# Node 1's agent starts pushing 5.5 s after the others: the hub has diagnosed the others past its
# first records by then (it reads every 5 s), and must still read them, its node record
# (the version) first. Before the hub kept each node's place, this lost the version_mismatch
# whenever a read fell between two nodes' first entries.
python3 "$(dirname "$0")/fleet_push.py" "$HUB" "$TMP/write.token" "$TMP/job.jsonl.gz" --speed 40 \
  --late sim-H100-01 --late-seconds 5.5 ||
  fail "pushing the nodes' records failed"

want='clock_skew sim-H100-02 -
straggler_gpu sim-H100-01 2
version_mismatch sim-H100-01 -'
for ((i = 0; i < 150; i++)); do
  got=$(curl -fsS -H "Authorization: Bearer $READ" "$HUB/api/v1/findings" | python3 -c '
import json, sys
for f in sorted(json.load(sys.stdin)["findings"], key=lambda f: f["cause"]):
    print(f["cause"], f["node"], f.get("gpu", "-"))')
  [ "$got" = "$want" ] && break
  sleep 0.2
done
# On failure, what the hub knew of the nodes and how far its diagnosis read (a missing
# version_mismatch was seen under load: issue 19's note).
[ "$got" = "$want" ] || fail "hub findings:
$got
want:
$want
nodes: $(curl -fsS -H "Authorization: Bearer $READ" "$HUB/api/v1/nodes" | head -c 2000)
stats: $(curl -fsS -H "Authorization: Bearer $READ" "$HUB/api/v1/findings" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["stats"])')"
curl -fsS -H "Authorization: Bearer $READ" "$HUB/api/v1/nodes" >"$TMP/nodes.json"
python3 - "$TMP/nodes.json" <<'PY' || fail "nodes: $(cat "$TMP/nodes.json")"
import json, sys
nodes = {n["node"]: n for n in json.load(open(sys.argv[1]))["nodes"]}
assert sorted(nodes) == ["sim-H100-00", "sim-H100-01", "sim-H100-02"], nodes
assert nodes["sim-H100-01"]["driver_version"] == "535.104.05", nodes["sim-H100-01"]
assert nodes["sim-H100-01"]["health"] == "degraded", nodes["sim-H100-01"]
assert "straggler_gpu on GPU 2" in nodes["sim-H100-01"]["reason"], nodes["sim-H100-01"]
assert nodes["sim-H100-00"]["health"] == "healthy", nodes["sim-H100-00"]
PY
# The job across nodes: one job, its three nodes and twelve ranks.
curl -fsS -H "Authorization: Bearer $READ" "$HUB/api/v1/jobs/sim-7" >"$TMP/job.json"
python3 - "$TMP/job.json" <<'PY' || fail "job: $(head -c 600 "$TMP/job.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["state"] == "finished" and j["template"] == "sim-llm-fsdp", j
assert [n["node"] for n in j["nodes"]] == ["sim-H100-00", "sim-H100-01", "sim-H100-02"], j["nodes"]
assert all(n["gpus"] == [0, 1, 2, 3] for n in j["nodes"]), j["nodes"]
assert len(j["ranks"]) == 12 and j["ranks"][6]["node"] == "sim-H100-01", j["ranks"]
PY
echo "PASS fleet diagnosis"
