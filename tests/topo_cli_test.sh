#!/usr/bin/env bash
# The live topology (R8) end to end: `gpuwatch topo` on the mock NVML, the agent's check at start
# archiving a version and serving /api/v1/topology, a degraded restart giving a new version and
# topology_change events, `topo list/show/diff` on the archive, and bad arguments refused.
GPUWATCH=$1 MOCK=$2 FIXTURES=$3
. "$(dirname "$0")/lib.sh"

mkdir -p "$TMP/sys"  # an empty sysfs: NVML facts only, each GPU's missing placement a warning
cat >"$TMP/degraded.json" <<'EOF'
{"shape": "8xH100", "gpus": [{"gpu": 2, "values": {"pcie_width": 8}},
                             {"gpu": 5, "values": {"nvlink_active_links": 17}}]}
EOF

GPUWATCH_MOCK_NVML=8xH100 "$GPUWATCH" topo --nvml-lib "$MOCK" --root "$TMP" --json \
  >"$TMP/a.json" 2>"$TMP/a.err" || { cat "$TMP/a.err"; fail "topo --json"; }
grep -q 'GPU0: no PCI placement' "$TMP/a.err" || { cat "$TMP/a.err"; fail "missing sysfs: no warning"; }
python3 - "$TMP/a.json" <<'PY' || fail "topo --json snapshot"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "gpuwatch-topology" and j["version"] == 1, j.keys()
assert len(j["gpus"]) == 8 and len(j["gpus"][0]["nvlinks"]) == 18, j["gpus"][0]
assert j["matrix"]["links"][0][1] == "NV18", j["matrix"]["links"][0]
assert j["p2p_read"][0][1] == "OK", j["p2p_read"][0]
PY
GPUWATCH_MOCK_NVML=8xH100 "$GPUWATCH" topo --nvml-lib "$MOCK" --root "$TMP" >"$TMP/a.txt" 2>/dev/null ||
  fail "topo text view"
grep -q $'^GPU3\tNV18' "$TMP/a.txt" && grep -q 'NVLink 18/18 active (NVLink4)' "$TMP/a.txt" ||
  { cat "$TMP/a.txt"; fail "topo text view content"; }
GPUWATCH_MOCK_NVML="$TMP/degraded.json" "$GPUWATCH" topo --nvml-lib "$MOCK" --root "$TMP" --json \
  >"$TMP/b.json" 2>/dev/null || fail "topo --json on the degraded box"

# Two snapshot files: exit 1 and the changes named; the same file twice: exit 0.
set +e
"$GPUWATCH" topo diff "$TMP/a.json" "$TMP/b.json" >"$TMP/diff.txt" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat "$TMP/diff.txt"; fail "topo diff of changed snapshots exited $rc"; }
grep -q 'pcie_width_changed: GPU2 PCIe width x16 → x8' "$TMP/diff.txt" &&
  grep -q 'nvlink_lost: GPU5 NVLink 17' "$TMP/diff.txt" || { cat "$TMP/diff.txt"; fail "topo diff text"; }
"$GPUWATCH" topo diff "$TMP/a.json" "$TMP/a.json" >"$TMP/same.txt" || fail "identical snapshots differ"
grep -q 'no topology change' "$TMP/same.txt" || fail "topo diff: no 'no change' line"
# Two `topo -m` captures compare by matrix.
CAP="$FIXTURES/topo/nccltests307_8x4090_pix_switches_2numa_nic_bond.txt"
"$GPUWATCH" topo diff "$CAP" "$CAP" --json >"$TMP/cap.json" || fail "capture against itself"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["changes"] == [], j' "$TMP/cap.json" ||
  fail "capture diff JSON"
set +e
"$GPUWATCH" topo diff "$TMP/missing.json" "$TMP/a.json" 2>"$TMP/m.err"; rc=$?
"$GPUWATCH" topo diff 2>"$TMP/n.err"; rc2=$?
set -e
[ "$rc" = 2 ] && grep -q 'cannot read' "$TMP/m.err" || fail "missing file: rc $rc $(cat "$TMP/m.err")"
[ "$rc2" = 2 ] && grep -q -- '--data-dir' "$TMP/n.err" || fail "diff without A or --data-dir: rc $rc2"
printf '{"format":"gpuwatch-topology","version":1,"taken_at_ms":0,"gpus":[{"index":"x"}]}' >"$TMP/bad.json"
set +e
"$GPUWATCH" topo diff "$TMP/bad.json" "$TMP/a.json" 2>"$TMP/bad.err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q 'gpus\[0\].index' "$TMP/bad.err" || fail "bad snapshot: rc $rc $(cat "$TMP/bad.err")"

# The agent archives the first snapshot at start and serves it.
PORT=$(free_port)
GPUWATCH_MOCK_NVML=8xH100 "$GPUWATCH" up --listen "127.0.0.1:$PORT" --nvml-lib "$MOCK" \
  --data-dir "$TMP/data" >"$TMP/agent1.log" 2>&1 &
PID=$!
wait_http "http://127.0.0.1:$PORT/api/v1/topology" 20 || { cat "$TMP/agent1.log"; fail "no /api/v1/topology"; }
curl -fsS "http://127.0.0.1:$PORT/api/v1/topology" >"$TMP/api.json"
python3 - "$TMP/api.json" <<'PY' || fail "/api/v1/topology"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["version"] == 1 and j["baselines_stale_before_ms"] > 0, j
assert "NV18" in j["matrix_text"] and len(j["snapshot"]["gpus"]) == 8, j["matrix_text"]
PY
curl -fsS "http://127.0.0.1:$PORT/api/v1/topology/versions/1" | python3 -c \
  'import json,sys; assert json.load(sys.stdin)["format"] == "gpuwatch-topology"' || fail "versions/1"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/api/v1/topology/versions/7")
[ "$code" = 404 ] || fail "a missing version answered $code"
kill -TERM "$PID"
wait "$PID" || fail "agent did not exit cleanly"

# Restarted on the degraded box: version 2 and one event per change.
PORT=$(free_port)
GPUWATCH_MOCK_NVML="$TMP/degraded.json" "$GPUWATCH" up --listen "127.0.0.1:$PORT" --nvml-lib "$MOCK" \
  --data-dir "$TMP/data" >"$TMP/agent2.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$PORT/api/v1/topology" 20 || { cat "$TMP/agent2.log"; fail "restart"; }
curl -fsS "http://127.0.0.1:$PORT/api/v1/events?kind=topology_change" >"$TMP/ev.json"
python3 - "$TMP/ev.json" <<'PY' || { cat "$TMP/ev.json"; fail "topology_change events"; }
import json, sys
j = json.load(open(sys.argv[1]))
events = j["events"] if isinstance(j, dict) else j
msgs = sorted(e["text"] for e in events)
assert len(msgs) == 2, msgs
assert msgs[0].startswith("GPU2 PCIe width x16"), msgs
assert msgs[1].startswith("GPU5 NVLink 17"), msgs
PY
"$GPUWATCH" topo list --data-dir "$TMP/data" >"$TMP/list.txt" || fail "topo list"
grep -q '^v1 ' "$TMP/list.txt" && grep -q '^v2 ' "$TMP/list.txt" || { cat "$TMP/list.txt"; fail "topo list rows"; }
"$GPUWATCH" topo show v2 --data-dir "$TMP/data" >"$TMP/show.txt" || fail "topo show v2"
grep -q 'NVLink 17/18 active' "$TMP/show.txt" || { cat "$TMP/show.txt"; fail "topo show v2 content"; }
"$GPUWATCH" topo diff v1 v2 --data-dir "$TMP/data" --json >"$TMP/v.json" && fail "v1→v2 exited 0"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert len(j["changes"]) == 2, j' "$TMP/v.json" ||
  fail "topo diff v1 v2"
set +e
"$GPUWATCH" topo show v9 --data-dir "$TMP/data" 2>"$TMP/v9.err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q 'not in' "$TMP/v9.err" || fail "show of a missing version: rc $rc"
echo "topo_cli_test: ok"
