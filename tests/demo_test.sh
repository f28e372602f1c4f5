#!/usr/bin/env bash
# `gpuwatch demo` end to end: a simulated 8×H100 node whose ranks are real processes speaking
# the job SDK to the real agent. The job is attributed GPU by GPU to those processes, every
# place says SIMULATED, the injected XID becomes a live finding (API, diagnose, the demo's own
# output), and on SIGTERM the demo exits 0 and leaves no rank process or work directory behind.
# Bad faults are refused with a message naming them.
GPUWATCH=$1
. "$(dirname "$0")/lib.sh"

if "$GPUWATCH" demo --fault net_errors >"$TMP/bad.txt" 2>&1; then fail "demo accepted net_errors"; fi
grep -q "cannot plant 'net_errors'" "$TMP/bad.txt" || { cat "$TMP/bad.txt"; fail "no message naming net_errors"; }
if "$GPUWATCH" demo --fault bogus >"$TMP/bad.txt" 2>&1; then fail "demo accepted bogus"; fi
grep -q "unknown fault 'bogus'" "$TMP/bad.txt" || { cat "$TMP/bad.txt"; fail "no message naming bogus"; }

PORT=$(free_port)
URL="http://127.0.0.1:$PORT"
"$GPUWATCH" demo --fault xid:gpu=2 --fault-after 80s --duration 4m --listen "127.0.0.1:$PORT" \
  >"$TMP/demo.out" 2>"$TMP/demo.err" &
DEMO=$!
PIDS+=($DEMO)
wait_http "$URL/healthz" 30 || { cat "$TMP/demo.err"; fail "demo did not serve"; }

# The job appears with its 8 ranks on 8 GPUs, attributed to the rank processes.
for ((i = 0; i < 600; i++)); do
  curl -fsS "$URL/api/v1/jobs" >"$TMP/jobs.json"
  python3 - "$TMP/jobs.json" 2>/dev/null <<'PY' && break
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
j = [j for j in jobs if j["id"] == "sim-1"][0]
assert j["ranks_reporting"] == 8 and j["gpus"] == list(range(8)) and len(j["pids"]) == 8
PY
  sleep 0.1
done
python3 - "$TMP/jobs.json" <<'PY' || fail "the simulated job was not attributed"
import json, os, sys
j = [j for j in json.load(open(sys.argv[1]))["jobs"] if j["id"] == "sim-1"][0]
assert j["source"] == "sdk" and j["template"] == "sim-llm-fsdp", j
assert j["gpus"] == list(range(8)), j["gpus"]
for pid in j["pids"]:
    assert os.path.exists(f"/proc/{pid}"), f"rank pid {pid} is not a process"
open(sys.argv[1] + ".pids", "w").write(" ".join(map(str, j["pids"])))
PY
RANK_PIDS=$(cat "$TMP/jobs.json.pids")

# SIMULATED everywhere it shows data.
grep -q '^SIMULATED — gpuwatch demo' "$TMP/demo.out" || { cat "$TMP/demo.out"; fail "no SIMULATED banner"; }
curl -fsS "$URL/metrics" >"$TMP/m.txt"
grep -q 'model_name="NVIDIA H100 80GB HBM3 \[SIMULATED\]"' "$TMP/m.txt" || fail "GPU names lack [SIMULATED]"
grep -q '^gpuwatch_agent_info{Hostname="SIMULATED-node".*driver_version="SIMULATED"' "$TMP/m.txt" \
  || fail "agent info lacks SIMULATED"
grep -q '^DCGM_FI_DEV_GPU_UTIL{.*Hostname="SIMULATED-node"' "$TMP/m.txt" || fail "no simulated utilisation"

# The XID at 80 s becomes a live finding on GPU 2.
for ((i = 0; i < 1500; i++)); do
  curl -fsS "$URL/api/v1/findings" >"$TMP/findings.json"
  grep -q '"cause":"xid"' "$TMP/findings.json" && break
  sleep 0.1
done
python3 - "$TMP/findings.json" <<'PY' || { cat "$TMP/demo.out"; fail "no xid finding on GPU 2"; }
import json, sys
d = json.load(open(sys.argv[1]))
causes = [(f["cause"], f.get("gpu")) for f in d["findings"]]
assert causes == [("xid", 2)], causes
assert d["findings"][0]["node"] == "SIMULATED-node"
PY
rc=0
"$GPUWATCH" diagnose --agent "$URL" >"$TMP/diag.txt" || rc=$?
[ "$rc" = 1 ] || fail "diagnose exited $rc, not 1 (findings)"
grep -q 'xid .*SIMULATED-node GPU2' "$TMP/diag.txt" || { cat "$TMP/diag.txt"; fail "diagnose lacks the xid"; }
for ((i = 0; i < 50; i++)); do
  grep -q 'finding \[warning\] xid' "$TMP/demo.out" && break
  sleep 0.1
done
grep -q 'fault xid injected on GPU 2' "$TMP/demo.out" || { cat "$TMP/demo.out"; fail "no injection line"; }
grep -q 'finding \[warning\] xid' "$TMP/demo.out" || { cat "$TMP/demo.out"; fail "the demo did not print the finding"; }
# The proc records name the SDK job (live diagnosis needs it to tell a rank's exit).
curl -fsS "$URL/api/v1/trace" | grep '"type":"proc"' | tail -1 >"$TMP/proc.json"
grep -q '"job":"sim-1"' "$TMP/proc.json" || { cat "$TMP/proc.json"; fail "proc records lack the job"; }

WORK=$(sed -n 's|.*"socket": *"\(/tmp/gpuwatch-demo-[^/]*\)/job.sock".*|\1|p' "$TMP/jobs.json")
[ -n "$WORK" ] && [ -d "$WORK" ] || fail "no demo work directory in the jobs API"
kill -TERM "$DEMO"
rc=0
wait "$DEMO" || rc=$?
[ "$rc" = 0 ] || fail "demo exited $rc on SIGTERM"
for pid in $RANK_PIDS; do
  [ ! -e "/proc/$pid" ] || fail "rank process $pid outlived the demo"
done
[ ! -e "$WORK" ] || fail "work directory $WORK left behind"
echo "demo_test: ok"
