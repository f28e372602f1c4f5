#!/usr/bin/env bash
# GPU accounting end to end (issue 19, R24): a Slurm job registered by `gpuwatch slurm prolog`
# and released by `epilog`, as slurmd would run them (root, its environment, a time-boxed
# scontrol), on an agent over the mock NVML that pushes to a hub.
# - The allocation names GPUs by /dev/nvidiaN minor (SLURM_JOB_GPUS): the scenario gives GPU 3
#   minor 0, so "0,1" is NVML GPUs 3 and 1.
# - GPU 3 reads 100 % at 120 W of 700 W, 3 % of its SMs active and memory idle (a spinning
#   collective: one kernel on a few SMs); GPU 1 0 %.
# - Only root may allocate: the same message from nobody is refused (not_permitted).
# - The agent's and the hub's reports agree; the queue wait is scontrol's start - submit; the
#   ledger survives the agent's restart; prices and quotas apply.
# - A job whose prolog skipped scontrol gets its queue wait from sacct (a stand-in), asked by
#   the agent after the fact.
GPUWATCH=$1 MOCK=$2
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: the Slurm prolog's messages are root's; run as root"; exit 0; }

HUB_PORT=$(free_port) A_PORT=$(free_port)
HUB="http://127.0.0.1:$HUB_PORT" AGENT="http://127.0.0.1:$A_PORT"
SOCK="$TMP/job.sock"
cat >"$TMP/scenario.json" <<'JSON'
{"shape": "4xH100",
 "gpus": [{"gpu": 0, "minor_number": 3}, {"gpu": 3, "minor_number": 0},
          {"gpu": 3, "values": {"util_gpu_pct": 100, "util_mem_pct": 0, "power_w": 120,
                                "power_limit_w": 700, "gpm_sm_util_pct": 3,
                                "gpm_dram_bw_util_pct": 0}},
          {"gpu": 1, "values": {"util_gpu_pct": 0, "util_mem_pct": 0, "power_w": 70}}]}
JSON
# A stand-in scontrol with the shape of a real `scontrol show job` (tests/fixtures/slurm), the
# job submitted 300 s before it started 2 s ago, in local time as Slurm prints it.
NOW=$(date +%s)
SUBMIT=$(date -d "@$((NOW - 302))" +%FT%T) START=$(date -d "@$((NOW - 2))" +%FT%T)
cat >"$TMP/scontrol" <<SH
#!/bin/sh
[ "\$1 \$2 \$3" = "show job 4242" ] || exit 1
[ "\$SLURM_TIME_FORMAT" = standard ] || exit 1
cat <<OUT
JobId=4242 JobName=llama-pretrain
   UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A
   Priority=5487 Nice=0 Account=nlp QOS=normal
   JobState=RUNNING Reason=None Dependency=(null)
   SubmitTime=$SUBMIT EligibleTime=$SUBMIT
   StartTime=$START EndTime=Unknown Deadline=N/A
OUT
SH
chmod +x "$TMP/scontrol"

start_hub() {
  "$GPUWATCH" hub --listen "127.0.0.1:$HUB_PORT" --data-dir "$TMP/hub" --gpu-prices 'H100=2.5' \
    --quotas 'nlp=0.001/1d' "$@" >>"$TMP/hub.log" 2>&1 &
  HUB_PID=$!
  PIDS+=("$HUB_PID")
  wait_http "$HUB/healthz" 20 || { cat "$TMP/hub.log"; fail "hub did not start"; }
}
# A stand-in sacct for the job whose prolog skips scontrol (below): it logs how it is asked and
# answers from sacct.reply, in the form the agent asks for (-X -n -P, Unix seconds).
cat >"$TMP/sacct" <<SH
#!/bin/sh
echo "\$SLURM_TIME_FORMAT \$*" >>"$TMP/sacct.calls"
[ -f "$TMP/sacct.reply" ] && cat "$TMP/sacct.reply"
exit 0
SH
chmod +x "$TMP/sacct"
start_hub
# The agent pushes with the hub's own state-change token (the hub writes DATA_DIR/admin.token).
start_agent() {
  GPUWATCH_MOCK_NVML="$TMP/scenario.json" "$GPUWATCH" up --listen "127.0.0.1:$A_PORT" \
    --nvml-lib "$MOCK" --hostname node-a --data-dir "$TMP/a" --job-socket "$SOCK" --kmsg off \
    --gpu-interval 1s --process-interval 1s --job-interval 1s --gpu-prices 'H100=2.5' --hub "$HUB" \
    --hub-token-file "$TMP/hub/admin.token" --hub-interval 1s --sacct "$TMP/sacct" \
    --sacct-interval 1s >>"$TMP/a.log" 2>&1 &
  AGENT_PID=$!
  PIDS+=("$AGENT_PID")
  wait_http "$AGENT/healthz" 20 || { cat "$TMP/a.log"; fail "agent did not start"; }
}
start_agent
sleep 2

chmod 755 "$TMP"  # nobody's prolog below reaches the job socket through this directory
slurm_env=(SLURM_JOB_ID=4242 SLURM_JOB_USER=alice SLURM_JOB_ACCOUNT=nlp SLURM_JOB_GPUS=0,1)
# nobody's allocation is refused; its prolog still exits 0.
runuser -u nobody -- env "${slurm_env[@]}" "$GPUWATCH" slurm prolog --socket "$SOCK" \
  --scontrol "" 2>"$TMP/nobody.err" || fail "the prolog exited non-zero as nobody"
env "${slurm_env[@]}" "$GPUWATCH" slurm prolog --socket "$SOCK" --scontrol "$TMP/scontrol" \
  --timeout 5 2>"$TMP/prolog.err" || fail "the prolog exited non-zero"
[ ! -s "$TMP/prolog.err" ] || { cat "$TMP/prolog.err"; fail "the prolog complained"; }
# A prolog with no agent to talk to still exits 0, within its time box.
t0=$(date +%s%N)
env "${slurm_env[@]}" "$GPUWATCH" slurm prolog --socket "$TMP/none.sock" --scontrol "" \
  --timeout 1 2>"$TMP/none.err" || fail "the prolog exited non-zero with no agent"
[ $(( ($(date +%s%N) - t0) / 1000000 )) -lt 3000 ] || fail "the prolog overran its time box"
grep -q "not registered" "$TMP/none.err" || fail "no word on the unregistered job: $(cat "$TMP/none.err")"

sleep 6
env "${slurm_env[@]}" SLURM_JOB_EXIT_CODE2=0:0 "$GPUWATCH" slurm epilog --socket "$SOCK" \
  2>"$TMP/epilog.err" || fail "the epilog exited non-zero"
# The job tier (1 s here) brings the registry's counters to /metrics.
for ((i = 0; i < 30; i++)); do
  rejected=$(curl -fsS "$AGENT/metrics" |
    awk '/^gpuwatch_job_messages_rejected_total\{.*reason="not_permitted"/ {print $2}')
  [ "${rejected%.*}" = 1 ] && break
  sleep 0.2
done
[ "${rejected%.*}" = 1 ] || fail "nobody's allocation was not refused as not_permitted (got '$rejected')"

# The agent's ledger: job 4242, alice, nlp, NVML GPUs 3 and 1.
for ((i = 0; i < 50; i++)); do
  "$GPUWATCH" report --agent "$AGENT" --by job --since 1h --json >"$TMP/agent.json" 2>/dev/null &&
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["rows"]; sys.exit(0 if r and r[0]["state"]=="succeeded" else 1)' "$TMP/agent.json" && break
  sleep 0.2
done
python3 - "$TMP/agent.json" "$TMP/a/accounting" <<'PY' || fail "the agent's report is wrong: $(cat "$TMP/agent.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
rows = doc["rows"]
assert len(rows) == 1, rows
r = rows[0]
assert (r["key"], r["user"], r["project"], r["template"]) == ("4242", "alice", "nlp", "llama-pretrain"), r
assert r["succeeded"] == 1 and r["failed"] == 0 and r["running"] == 0, r
# The allocation held 2 GPUs from scontrol's start (2 s before the prolog) to the epilog,
# about 8-12 s later on this machine: 2 x that, in hours.
assert 2 * 6 / 3600 < r["gpu_hours"] < 2 * 20 / 3600, r["gpu_hours"]
assert r["queue_wait_s_mean"] == 300, r["queue_wait_s_mean"]
assert abs(r["cost_usd"] - 2.5 * r["gpu_hours"]) < 1e-9, r
# GPU 3 (Slurm's 0) spun at 100 % and 120 W, GPU 1 (Slurm's 1) sat at 0 %: each about half of
# the measured time.
m = r["measured_gpu_hours"]
assert m > 0, r
assert 0.35 < r["busywait_gpu_hours"] / m < 0.65, r
assert 0.35 < r["idle_gpu_hours"] / m < 0.65, r
PY
# The ledger's job entry names the NVML GPUs, not Slurm's minors.
grep -aq '"gpus":\[3,1\]' "$TMP"/a/accounting/*.wal || fail "the ledger does not hold NVML GPUs 3,1"

# The hub's report: the same job from the pushed records, and its soft quota exceeded.
for ((i = 0; i < 100; i++)); do
  "$GPUWATCH" report --hub "$HUB" --by user --since 1h --json >"$TMP/hub.json" 2>/dev/null &&
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["rows"]; sys.exit(0 if r and r[0]["succeeded"]==1 else 1)' "$TMP/hub.json" && break
  sleep 0.2
done
python3 - "$TMP/hub.json" "$TMP/agent.json" <<'PY' || fail "the hub's report differs: $(cat "$TMP/hub.json")"
import json, sys
hub, agent = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
h, a = hub["rows"][0], agent["rows"][0]
assert h["key"] == "alice", h
for k in ("gpu_hours", "cost_usd", "queue_wait_s_mean", "succeeded"):
    assert abs(h[k] - a[k]) < 1e-9, (k, h[k], a[k])
q = hub["quotas"]
assert len(q) == 1 and q[0]["project"] == "nlp" and q[0]["state"] == "exceeded", q
PY
for ((i = 0; i < 60; i++)); do
  curl -fsS "$HUB/api/v1/alerts" | grep -q 'gpuwatch_quota:nlp' && break
  sleep 0.2
done
curl -fsS "$HUB/api/v1/alerts" | grep -q 'gpuwatch_quota:nlp' || fail "no quota alert on the hub"
"$GPUWATCH" report --hub "$HUB" --by project --since 1h >"$TMP/table.txt"
grep -q '^nlp ' "$TMP/table.txt" || { cat "$TMP/table.txt"; fail "no nlp row in the table"; }
"$GPUWATCH" report --hub "$HUB" --by project --since 1h --csv | head -1 | grep -q '^project,jobs,' ||
  fail "no CSV header"

# The agent restarts: the ledger is read back from its log.
kill "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
start_agent
"$GPUWATCH" report --agent "$AGENT" --by job --since 1h --json >"$TMP/again.json"
python3 - "$TMP/again.json" "$TMP/agent.json" <<'PY' || fail "the ledger changed across a restart"
import json, sys
a, b = json.load(open(sys.argv[1]))["rows"][0], json.load(open(sys.argv[2]))["rows"][0]
for k in ("gpu_hours", "queue_wait_s_mean", "busywait_gpu_hours", "idle_gpu_hours", "state"):
    assert a[k] == b[k] or abs(a[k] - b[k]) < 1e-9, (k, a[k], b[k])
PY
# A read token confined to project nlp sees the GPUs job 4242 held (NVML 3 and 1), only while
# it held them, and no other GPU: the hub restarted with a tokens file (its ledger read back).
kill "$HUB_PID"
wait "$HUB_PID" 2>/dev/null || true
NLP=$("$GPUWATCH" token new read | cut -d' ' -f1)
VISION=$("$GPUWATCH" token new read | cut -d' ' -f1)
printf '%s read nlp\n%s read vision\n' "$NLP" "$VISION" >"$TMP/tokens"
chmod 600 "$TMP/tokens"
start_hub --tokens "$TMP/tokens"
range() {  # range TOKEN: DCGM_FI_DEV_GPU_UTIL over the last 5 minutes, as the token sees it
  curl -fsSG -H "Authorization: Bearer $1" "$HUB/api/v1/query_range" \
    --data-urlencode 'query=DCGM_FI_DEV_GPU_UTIL' --data-urlencode "start=$(($(date +%s) - 300))" \
    --data-urlencode "end=$(date +%s)" --data-urlencode step=1
}
for ((i = 0; i < 50; i++)); do
  range "$NLP" >"$TMP/nlp.json" 2>/dev/null && grep -q '"gpu":"3"' "$TMP/nlp.json" && break
  sleep 0.2
done
range "$VISION" >"$TMP/vision.json" || fail "the vision token's query failed"
python3 - "$TMP/nlp.json" "$TMP/vision.json" "$TMP/agent.json" <<'PY' ||
import json, sys
nlp, vision, job = (json.load(open(p)) for p in sys.argv[1:4])
job = job["rows"][0]
series = {s["metric"]["gpu"]: s for s in nlp["data"]["result"]}
assert sorted(series) == ["1", "3"], sorted(series)
for gpu, s in series.items():
    assert s["metric"]["Hostname"] == "node-a", s["metric"]
    t = [float(v[0]) * 1000 for v in s["values"]]
    assert t, gpu
    # query_range's lookback (5 m) carries the last sample on: points may run past the end by
    # the lookback, never before the start.
    assert min(t) >= job["start_ms"] - 1000, (gpu, min(t), job["start_ms"])
assert float(series["3"]["values"][0][1]) == 100, series["3"]["values"][0]
assert vision["data"]["result"] == [], vision["data"]["result"]
PY
  fail "the nlp token's GPUs are wrong: $(head -c 2000 "$TMP/nlp.json")"

# A job whose prolog skipped scontrol (GPUWATCH_SCONTROL="" on a busy cluster): its queue wait
# comes from sacct, which the agent asks after the fact — submitted 120 s before it started.
NOW2=$(date +%s)
echo "4343|$((NOW2 - 120))|$NOW2" >"$TMP/sacct.reply"
env SLURM_JOB_ID=4343 SLURM_JOB_USER=bob SLURM_JOB_ACCOUNT=vision SLURM_JOB_GPUS=2 \
  "$GPUWATCH" slurm prolog --socket "$SOCK" --scontrol "" || fail "the second prolog failed"
for ((i = 0; i < 100; i++)); do
  "$GPUWATCH" report --agent "$AGENT" --by job --since 1h --json >"$TMP/sacct.json" 2>/dev/null &&
    python3 -c 'import json,sys; r=[r for r in json.load(open(sys.argv[1]))["rows"] if r["key"]=="4343"]; sys.exit(0 if r and r[0].get("queue_wait_s_mean") else 1)' "$TMP/sacct.json" && break
  sleep 0.2
done
python3 - "$TMP/sacct.json" <<'PY' || fail "job 4343's queue wait from sacct: $(cat "$TMP/sacct.json"; cat "$TMP/sacct.calls")"
import json, sys
row = [r for r in json.load(open(sys.argv[1]))["rows"] if r["key"] == "4343"][0]
assert row["user"] == "bob" and row["project"] == "vision", row
# The attempt starts at the allocation's record (the prolog's clock, a moment after NOW2).
assert 120 <= row["queue_wait_s_mean"] <= 125, row["queue_wait_s_mean"]
PY
grep -q '^%s -X -n -P -j 4343 --format=JobIDRaw,Submit,Start$' "$TMP/sacct.calls" ||
  fail "sacct was asked otherwise: $(cat "$TMP/sacct.calls")"
grep -q -- '-j 4242' "$TMP/sacct.calls" && fail "sacct was asked about 4242, whose wait scontrol gave"

echo "PASS"
