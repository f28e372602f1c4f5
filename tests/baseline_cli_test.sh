#!/usr/bin/env bash
# `gpuwatch baseline`: learn a template's baseline from a simulated healthy run, list it, export
# and import it as a new version, compare runs (a regressed run is significantly slower; two
# healthy runs of other seeds are not), mark baselines stale against a running agent whose topology was
# archived after them, and refuse bad input naming what is wrong.
GPUWATCH=$1 MOCK=$2
. "$(dirname "$0")/lib.sh"

"$GPUWATCH" sim --duration 10m --out "$TMP/healthy" >/dev/null
"$GPUWATCH" sim --duration 10m --seed 2 --fault step_regression:onset=150 --out "$TMP/slow" >/dev/null
D="$TMP/data"

"$GPUWATCH" baseline learn "$TMP/healthy.jsonl.gz" --data-dir "$D" >"$TMP/learn.txt" || fail "learn: $(cat "$TMP/learn.txt")"
grep -q '^learned sim-llm-fsdp on 1x8xNVIDIA H100 80GB HBM3 from job sim-1: version 1 ' "$TMP/learn.txt" \
  || fail "learn printed: $(cat "$TMP/learn.txt")"
rc=0
"$GPUWATCH" baseline learn "$TMP/healthy.jsonl.gz" --data-dir "$D" --warmup 9m >"$TMP/short.txt" || rc=$?
[ "$rc" = 1 ] && grep -q 'nothing learned' "$TMP/short.txt" || fail "a run too short to learn from: rc=$rc $(cat "$TMP/short.txt")"

"$GPUWATCH" baseline show sim-llm-fsdp --data-dir "$D" >"$TMP/b1.json" || fail "show"
"$GPUWATCH" baseline import "$TMP/b1.json" --data-dir "$D" >"$TMP/import.txt" || fail "import"
grep -q 'as version 2$' "$TMP/import.txt" || fail "import printed: $(cat "$TMP/import.txt")"
"$GPUWATCH" baseline list --data-dir "$D" --json >"$TMP/list.json"
python3 - "$TMP/list.json" <<'PY' || fail "list: $(cat "$TMP/list.json")"
import json, sys
b = json.load(open(sys.argv[1]))["baselines"]
assert [x["version"] for x in b] == [1, 2], b
assert all(x["template"] == "sim-llm-fsdp" and x["steps"] > 300 for x in b), b
assert 0.5 < b[0]["step_median_s"] < 3, b
PY

rc=0
"$GPUWATCH" baseline compare baseline:sim-llm-fsdp@1 "$TMP/slow.jsonl.gz" --data-dir "$D" --json >"$TMP/cmp.json" || rc=$?
[ "$rc" = 1 ] || fail "compare against a regressed run exited $rc, not 1"
python3 - "$TMP/cmp.json" <<'PY' || fail "compare: $(cat "$TMP/cmp.json")"
import json, sys
m = {x["metric"]: x for x in json.load(open(sys.argv[1]))["metrics"]}
s = m["step_s"]
assert s["significant"] and s["shift_pct"] > 10 and s["p_value"] < 1e-6, s
assert m["samples_per_s"]["significant"] and m["samples_per_s"]["shift_pct"] < 0, m["samples_per_s"]
PY
# A job slow from its start (the fault lands before the warm-up ends, so the job's own steady
# state is slow): only its template's baseline shows it (replay --baselines, as the agent does).
"$GPUWATCH" sim --duration 8m --seed 4 --fault step_regression:onset=80,severity=0.5 --out "$TMP/slow0" >/dev/null
"$GPUWATCH" replay --json "$TMP/slow0.jsonl.gz" 2>/dev/null | grep -q step_regression \
  && fail "a job slow from its start was flagged without a baseline"
"$GPUWATCH" replay "$TMP/slow0.jsonl.gz" --baselines "$D/baselines" >"$TMP/vs.txt" 2>"$TMP/vs.err" \
  || fail "replay --baselines: $(cat "$TMP/vs.err")"
grep -q "step_regression .*over template sim-llm-fsdp's baseline" "$TMP/vs.txt" \
  || fail "replay --baselines: $(cat "$TMP/vs.txt" "$TMP/vs.err")"
grep -q "in baseline v2 of sim-llm-fsdp on 1x8xNVIDIA H100 80GB HBM3" "$TMP/vs.txt" \
  || fail "not the newest version: $(cat "$TMP/vs.txt")"
rc=0; out=$("$GPUWATCH" replay "$TMP/slow0.jsonl.gz" --baselines "$TMP/nowhere" 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q -- "--baselines .*nowhere: not a directory" <<<"$out" || fail "bad --baselines: $rc $out"

# Two healthy runs (other seeds, other noise) keep their step time; TRACE:JOB names the job.
"$GPUWATCH" sim --duration 10m --seed 3 --out "$TMP/healthy3" >/dev/null
rc=0
"$GPUWATCH" baseline compare "$TMP/healthy.jsonl.gz" "$TMP/healthy3.jsonl.gz:sim-3" --json >"$TMP/same.json" || rc=$?
[ "$rc" -le 1 ] || fail "compare two healthy runs exited $rc"
python3 - "$TMP/same.json" <<'PY' || fail "two healthy runs: $(cat "$TMP/same.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["b"]["job"] == "sim-3", d["b"]
s = {x["metric"]: x for x in d["metrics"]}["step_s"]
assert not s["significant"] and abs(s["shift_pct"]) < 2, s
PY

# Stale against an agent whose topology archive is newer than the baselines.
PORT=$(free_port)
GPUWATCH_MOCK_NVML=8xH100 "$GPUWATCH" up --job-socket off --listen "127.0.0.1:$PORT" --nvml-lib "$MOCK" \
  --data-dir "$TMP/agent" >"$TMP/agent.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$PORT/healthz" 20 || fail "agent did not start"
for ((i = 0; i < 50; i++)); do
  curl -fsS "http://127.0.0.1:$PORT/api/v1/topology" | grep -q '"baselines_stale_before_ms": *[1-9]' && break
  sleep 0.1
done
"$GPUWATCH" baseline list --data-dir "$D" --agent "http://127.0.0.1:$PORT" >"$TMP/stale.txt"
[ "$(grep -c 'topology changed since$' "$TMP/stale.txt")" = 2 ] || fail "stale: $(cat "$TMP/stale.txt")"

# Bad input.
rc=0; out=$("$GPUWATCH" baseline learn "$TMP/healthy.jsonl.gz" 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q -- '--data-dir is required' <<<"$out" || fail "learn without --data-dir: $rc $out"
rc=0; out=$("$GPUWATCH" baseline compare "$TMP/nope.jsonl" "$TMP/healthy.jsonl.gz" 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q "nope.jsonl' is neither a trace file" <<<"$out" || fail "compare a missing file: $rc $out"
echo '{"format": "gpuwatch-baseline", "format_version": 1, "template": "t"}' >"$TMP/bad.json"
rc=0; out=$("$GPUWATCH" baseline import "$TMP/bad.json" --data-dir "$D" 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q "bad.json: shape: missing" <<<"$out" || fail "import a broken baseline: $rc $out"
rc=0; out=$("$GPUWATCH" baseline show nope --data-dir "$D" 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q "no baseline for template 'nope'" <<<"$out" || fail "show unknown: $rc $out"
echo "baseline_cli_test: ok"
