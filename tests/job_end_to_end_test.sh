#!/usr/bin/env bash
# The task-level line end to end: the agent (mock NVML) with its job socket, the Python SDK in
# examples/train_toy.py, and the CLI. Covers: steps and statistics in /api/v1/jobs, `gpuwatch
# jobs`/`job`, /metrics and the store; a trainer killed with SIGKILL reported as a rank exit
# within a process tick and snapshotted; a stopped (SIGSTOP) trainer flagged hung and resumed;
# the agent restarted mid-job while the trainer never blocks; a declared log file tailed through
# rotation and truncation; hostile datagrams rejected with reasons; `gpuwatch annotate` and
# `gpuwatch record`.
GPUWATCH=$1 MOCK=$2 SRC=$3
. "$(dirname "$0")/lib.sh"
export PYTHONPATH="$SRC/sdk/python" PYTHONDONTWRITEBYTECODE=1
SOCK="$TMP/job.sock"
export GPUWATCH_SOCKET="$SOCK"

PORT=$(free_port)
URL="http://127.0.0.1:$PORT"
start_agent() {
  GPUWATCH_MOCK_NVML=4xL40S "$GPUWATCH" up --listen "127.0.0.1:$PORT" --nvml-lib "$MOCK" \
    --data-dir "$TMP/data" --job-socket "$SOCK" --gpu-interval 250ms --host-interval 500ms \
    --process-interval 300ms --job-interval 1s --job-hang-min 2s --job-hang-factor 10 \
    --kmsg off >>"$TMP/agent.log" 2>&1 &
  AGENT=$!
  PIDS+=($AGENT)
  wait_http "$URL/healthz" 20 || { cat "$TMP/agent.log"; fail "agent did not start"; }
}
start_agent

# jq-free JSON checks: job_field JOB EXPR prints a Python expression over the job's JSON.
job_json() { curl -fsS "$URL/api/v1/jobs/$1" 2>/dev/null; }
wait_job() {  # wait_job JOB PYTHON-CONDITION-ON-j SECONDS
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    if job_json "$1" | python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($2) else 1)" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  job_json "$1" >&2 || true
  return 1
}

# 1. A clean run: 150 steps of 20 ms, data wait and comm measured, exit 0.
GPUWATCH_JOB=toy-ok python3 "$SRC/examples/train_toy.py" --steps 150 --step-ms 20 --data-ms 5 \
  --comm-frac 0.25 --batch 32 >"$TMP/toy-ok.out" 2>&1 || { cat "$TMP/toy-ok.out"; fail "train_toy.py failed"; }
wait_job toy-ok 'j["state"] == "finished" and j["ranks"][0]["steps_total"] == 150' 10 \
  || fail "toy-ok not finished with 150 steps"
job_json toy-ok | python3 -c '
import json, sys
j = json.load(sys.stdin)
r = j["ranks"][0]
assert r["exit_code"] == 0, r
assert r["pid_verified"] is True, r
w = r["window"]
# The last window saw steps of ~25 ms (20 ms step + 5 ms data wait) with a comm share.
assert w["step_p50_s"] is None or 0.015 < w["step_p50_s"] < 0.2, w
' || fail "toy-ok statistics"
"$GPUWATCH" jobs --agent "$URL" >"$TMP/jobs.txt" || fail "gpuwatch jobs"
grep -q '^toy-ok  *finished  *sdk' "$TMP/jobs.txt" || { cat "$TMP/jobs.txt"; fail "gpuwatch jobs lacks toy-ok"; }
"$GPUWATCH" job toy-ok --agent "$URL" >"$TMP/job.txt" || fail "gpuwatch job"
grep -q 'ended(0)' "$TMP/job.txt" || { cat "$TMP/job.txt"; fail "gpuwatch job: rank 0 not ended(0)"; }
"$GPUWATCH" job no-such-job --agent "$URL" 2>"$TMP/nojob.txt" && fail "gpuwatch job of an unknown id succeeded"
grep -q 'not found' "$TMP/nojob.txt" || fail "unknown job: no clear message"

# 1b. At 1 kHz every step arrives and is accepted (what it costs is measured in bench/job_sdk,
#     never timed here).
GPUWATCH_JOB=toy-1khz python3 "$SRC/examples/train_toy.py" --steps 2000 --hz 1000 \
  >"$TMP/toy-1khz.out" 2>&1 || { cat "$TMP/toy-1khz.out"; fail "train_toy.py at 1 kHz failed"; }
# The SDK may drop a batch when the kernel's datagram queue is full on a loaded machine (it
# says how many messages); everything it sent must be accepted, and nothing it dropped may
# block it.
DROPPED=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["dropped"])' "$TMP/toy-1khz.out")
wait_job toy-1khz "j['state'] == 'finished' and j['ranks'][0]['steps_total'] >= 2000 - $DROPPED" 10 \
  || { cat "$TMP/toy-1khz.out"; fail "steps sent at 1 kHz were not all accepted"; }
[ "$DROPPED" -le 20 ] || fail "the SDK dropped $DROPPED of 2000 messages at 1 kHz"

# 2. Statistics while running: /metrics and the store carry the job's series.
GPUWATCH_JOB=toy-live python3 "$SRC/examples/train_toy.py" --steps 100000 --step-ms 10 --data-ms 2 \
  --comm-frac 0.2 >"$TMP/toy-live.out" 2>&1 &
LIVE=$!
PIDS+=($LIVE)
wait_job toy-live 'j["ranks"][0]["window"]["steps"] > 10' 10 || fail "toy-live has no window statistics"
curl -fsS "$URL/metrics" >"$TMP/m.txt"
grep -q '^gpuwatch_job_iterations_per_second{Hostname=".*",job="toy-live",rank="0"} ' "$TMP/m.txt" \
  || fail "/metrics lacks the job's iterations/s"
grep -q '^gpuwatch_job_step_seconds{.*job="toy-live".*quantile="0.95"} ' "$TMP/m.txt" || fail "/metrics lacks step p95"
grep -q '^gpuwatch_job_data_wait_ratio{.*job="toy-live"' "$TMP/m.txt" || fail "/metrics lacks the data-wait share"
sleep 1.2
curl -fsS -G "$URL/api/v1/query" --data-urlencode 'query=gpuwatch_job_step_duration_seconds{job="toy-live"}' \
  | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; assert r and float(r[0]["value"][1]) > 0, r' \
  || fail "raw steps not in the store"
# A job's series keep their own job label (honor_labels) and gain the scrape's instance.
curl -fsS -G "$URL/api/v1/query" --data-urlencode 'query=gpuwatch_job_step_duration_seconds{job="toy-live",instance=~".+:[0-9]+"}' \
  | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; assert r, r' \
  || fail "a job series lost its job label or has no instance"

# 3. The agent restarts mid-job: the trainer never blocks or dies, and its steps resume.
kill -TERM "$AGENT"; wait "$AGENT" || fail "agent did not stop cleanly"
sleep 1
kill -0 "$LIVE" 2>/dev/null || { cat "$TMP/toy-live.out"; fail "trainer died while the agent was down"; }
start_agent
wait_job toy-live 'j["ranks"][0]["steps_total"] > 20 and j["template"] != ""' 40 \
  || fail "steps did not resume after the agent restarted (or the start was not re-sent)"

# 4. SIGSTOP: no step for 10 × the median (at least 2 s) while the process lives → hung; it
#    resumes after SIGCONT.
kill -STOP "$LIVE"
wait_job toy-live 'j["state"] == "hung" and j["ranks"][0]["state"] == "stopped"' 8 || fail "stopped trainer not flagged hung"
kill -CONT "$LIVE"
wait_job toy-live 'j["state"] == "running"' 5 || fail "hung trainer not running again after SIGCONT"

# 5. SIGKILL: a rank exit within one process tick (300 ms; 2 s allowed), the job failed, and a
#    failure snapshot with its records.
kill -KILL "$LIVE"
wait_job toy-live 'j["ranks"][0]["state"] == "died"' 3 || fail "SIGKILLed rank not reported within a process tick"
wait_job toy-live 'j["state"] == "failed"' 2 || fail "job not failed"
check_rank_exit() {
  curl -fsS "$URL/api/v1/events?job=toy-live&kind=rank_exit" | python3 -c '
import json, sys
ev = json.load(sys.stdin)["events"]
assert any(e["severity"] == "critical" and "died" in e["text"] for e in ev), ev
'
}
# Events reach the event store with the agent's once-a-second drain.
for ((i = 0; i < 30; i++)); do check_rank_exit 2>/dev/null && break; sleep 0.1; done
check_rank_exit || fail "no rank_exit event for the killed rank"
for ((i = 0; i < 100; i++)); do
  curl -fsS "$URL/api/v1/snapshots" >"$TMP/snaps.json"
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["snapshots"]; sys.exit(0 if any(x["job"]=="toy-live" and x["reason"]=="job_failed" and x["state"]=="written" for x in s) else 1)' "$TMP/snaps.json" && break
  sleep 0.1
done
SNAP=$(python3 -c 'import json,sys; print([x["id"] for x in json.load(open(sys.argv[1]))["snapshots"] if x["job"]=="toy-live" and x["reason"]=="job_failed"][0])' "$TMP/snaps.json") \
  || { cat "$TMP/snaps.json"; fail "no failure snapshot for toy-live"; }
curl -fsS -o "$TMP/snap.jsonl.gz" "$URL/api/v1/snapshots/$SNAP/trace.jsonl.gz" || fail "snapshot trace not served"
gzip -dc "$TMP/snap.jsonl.gz" | python3 -c '
import json, sys
types = {}
first = None
for n, line in enumerate(sys.stdin, 1):
    r = json.loads(line)
    assert "t" in r and "type" in r, (n, line)
    first = first or r["type"]
    types[r["type"]] = types.get(r["type"], 0) + 1
assert first == "node", first
for t in ("node", "gpu", "host", "step", "job"):
    assert types.get(t), (t, types)
' || fail "snapshot trace is not a valid trace with node/gpu/host/step/job records"

# 6. A declared log file, tailed through rotation and truncation.
LOG="$TMP/train.log"
: >"$LOG"
# The declaring process stays alive: the agent follows a job's files while the job runs.
python3 - "$SOCK" "$LOG" <<'PY' &
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(json.dumps({"type": "start", "job": "logjob", "rank": 0, "log_files": [sys.argv[2]]}).encode(), sys.argv[1])
time.sleep(60)
PY
PIDS+=($!)
# Each step waits until the agent has read the line before it, instead of sleeping: a file
# renamed before the tailer first opened it is never read (log_tailer.h: it follows the path),
# and on a loaded machine the agent's first poll of a new job's file may take seconds.
logs_have() {
  local i
  for ((i = 0; i < 150; i++)); do
    curl -fsS "$URL/api/v1/events?job=logjob&kind=log" >"$TMP/logs.json"
    grep -q "$1" "$TMP/logs.json" && return 0
    sleep 0.1
  done
  return 1
}
echo "host:1:1 [0] NCCL INFO Channel 00/02 : 0[0] -> 1[1] via P2P/IPC" >>"$LOG"
echo "before rotation" >>"$LOG"
logs_have 'before rotation' || fail "the declared log file was not read within 15 s"
mv "$LOG" "$LOG.1"; echo "after rotation" >"$LOG"
logs_have 'after rotation' || fail "the file that replaced the rotated one was not read within 15 s"
: >"$LOG"; echo "after truncation" >>"$LOG"
logs_have 'after truncation'
python3 -c '
import json, sys
ev = json.load(open(sys.argv[1]))["events"]
text = [e["text"] for e in ev]
for want in ("before rotation", "after rotation", "after truncation"):
    assert want in text, (want, text)
nccl = [e for e in ev if "NCCL INFO" in e["text"]]
assert nccl and nccl[0]["source"] == "nccl", nccl
' "$TMP/logs.json" || fail "log lines lost through rotation or truncation"

# 7. Hostile datagrams: rejected with counted reasons, the agent still serves.
python3 - "$SOCK" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for d in [b"\xff\xfe garbage", b'{"type":"step","job":"h","step":1,"duration_s":NaN}',
          b'{"type":"step","job":"' + b"x" * 60000 + b'","step":1,"duration_s":1}',
          b'{"type":"start","job":"h","pid":1}', b"[" * 50000]:
    s.sendto(d, sys.argv[1])
PY
# /metrics shows the counters as of the last job tick (1 s here).
for ((i = 0; i < 30; i++)); do
  curl -fsS "$URL/metrics" >"$TMP/m2.txt"
  grep -q 'reason="bad_field"} [1-9]' "$TMP/m2.txt" && break
  sleep 0.1
done
python3 - "$TMP/m2.txt" <<'PY' || fail "hostile datagrams not counted by reason"
import re, sys
text = open(sys.argv[1]).read()
def count(reason):
    m = re.search(r'gpuwatch_job_messages_rejected_total\{[^}]*reason="%s"\} (\d+)' % reason, text)
    return int(m.group(1)) if m else 0
assert count("malformed") >= 3, text
assert count("bad_field") >= 1, text
PY
curl -fsS "$URL/healthz" >/dev/null || fail "agent down after hostile input"

# 8. gpuwatch annotate and gpuwatch record.
"$GPUWATCH" annotate "switched to TP=4" --job toy-ok --agent "$URL" --token-file "$TMP/data/admin.token" \
  || fail "gpuwatch annotate"
curl -fsS "$URL/api/v1/events?kind=annotation" | grep -q 'switched to TP=4' || fail "annotation not on the time line"
"$GPUWATCH" record --duration 2s --out "$TMP/rec.jsonl.gz" --agent "$URL" >"$TMP/rec.txt" || fail "gpuwatch record"
gzip -dc "$TMP/rec.jsonl.gz" | python3 -c '
import json, sys
recs = [json.loads(l) for l in sys.stdin]
assert recs[0]["type"] == "node", recs[0]
assert sum(r["type"] == "gpu" for r in recs) >= 4, len(recs)
assert sum(r["type"] == "node" for r in recs) == 1
' || fail "gpuwatch record wrote no valid trace"
# 9. The change timeline (R21): a restart with another configuration is a config_change event.
kill -TERM "$AGENT"; wait "$AGENT" || fail "agent did not stop cleanly"
GPUWATCH_MOCK_NVML=4xL40S "$GPUWATCH" up --listen "127.0.0.1:$PORT" --nvml-lib "$MOCK" \
  --data-dir "$TMP/data" --job-socket "$SOCK" --gpu-interval 300ms --kmsg off >>"$TMP/agent.log" 2>&1 &
PIDS+=($!)
wait_http "$URL/healthz" 20 || fail "agent did not restart"
curl -fsS "$URL/api/v1/events?kind=config_change" | grep -q 'configuration changed' \
  || { cat "$TMP/agent.log"; fail "no config_change event after a restart with other flags"; }
echo "job end-to-end: OK"
