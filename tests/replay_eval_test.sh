#!/usr/bin/env bash
# `gpuwatch replay` and `gpuwatch eval` (issue 6): replay --json prints only the findings
# document and is byte-identical run to run; an unreadable trace exits non-zero naming the line;
# --serve keeps the findings in the API; eval on the example scenarios runs and prints valid
# JSON. Detection quality is tracked by
# bench/eval, not asserted here.
GPUWATCH=$1 FIXTURES=$2 SCENARIOS=$3
. "$(dirname "$0")/lib.sh"

cat >"$TMP/t.jsonl" <<'JSONL'
{"t":100,"type":"node","node":"n1","gpus":[{"index":0,"max_sm_clock_mhz":1980}]}
{"t":101,"type":"event","node":"n1","gpu":0,"kind":"xid","code":79,"message":"GPU has fallen off the bus"}
{"t":102,"type":"mystery","node":"n1"}
JSONL
"$GPUWATCH" replay "$TMP/t.jsonl" --json >"$TMP/a.json" 2>"$TMP/a.err" || { cat "$TMP/a.err"; fail "replay"; }
"$GPUWATCH" replay "$TMP/t.jsonl" --json >"$TMP/b.json" 2>/dev/null || fail "replay, second run"
cmp -s "$TMP/a.json" "$TMP/b.json" || fail "replay --json differs between two runs"
python3 - "$TMP/a.json" <<'PY' || { cat "$TMP/a.json"; fail "replay --json document"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d) == {"findings", "stats"}, d.keys()
f = d["findings"]
assert len(f) == 1 and f[0]["cause"] == "gpu_lost" and f[0]["gpu"] == 0, f
assert f[0]["first_seen"] == 101 and f[0]["severity"] == "critical", f
assert d["stats"]["records"] == 3 and d["stats"]["ignored_records"] == 1, d["stats"]
PY
grep -q 'mystery' "$TMP/a.err" || { cat "$TMP/a.err"; fail "the unknown type was not reported"; }
"$GPUWATCH" replay "$TMP/t.jsonl" >"$TMP/text.txt" 2>/dev/null || fail "replay text"
# --speed paces the trace's 2 s at 4x real time: about half a second.
start=$(date +%s%N)
"$GPUWATCH" replay "$TMP/t.jsonl" --speed 4 >/dev/null 2>&1 || fail "replay --speed"
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$elapsed_ms" -ge 400 ] || fail "replay --speed 4 took ${elapsed_ms} ms for a 2 s trace"
grep -q 'gpu_lost' "$TMP/text.txt" || { cat "$TMP/text.txt"; fail "replay text view"; }

# --serve: the findings stay open in the API (job=/node= filter) until SIGTERM, which ends it
# with exit 0.
PORT=$(free_port)
"$GPUWATCH" replay "$TMP/t.jsonl" --json --serve --listen "127.0.0.1:$PORT" >"$TMP/serve.out" 2>"$TMP/serve.err" &
SERVE=$!
PIDS+=("$SERVE")
wait_http "http://127.0.0.1:$PORT/healthz" 20 || { cat "$TMP/serve.err"; fail "replay --serve did not listen"; }
curl -fsS "http://127.0.0.1:$PORT/api/v1/findings" >"$TMP/served.json"
python3 -c '
import json, sys
served, printed = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert served == printed, (served, printed)
assert any(f["cause"] == "gpu_lost" for f in served["findings"]), served
' "$TMP/served.json" "$TMP/serve.out" || fail "replay --serve serves other findings than it printed"
curl -fsS "http://127.0.0.1:$PORT/api/v1/findings?node=elsewhere" | grep -q '"findings":\[\]' ||
  fail "replay --serve: node filter"
kill -TERM "$SERVE"
wait "$SERVE" || fail "replay --serve exited non-zero on SIGTERM"

printf '{"t":1,"type":"node","node":"n"}\n[1,2]\n' >"$TMP/bad.jsonl"
set +e
"$GPUWATCH" replay "$TMP/bad.jsonl" --json >"$TMP/bad.out" 2>"$TMP/bad.err"; rc=$?
"$GPUWATCH" replay "$TMP/missing.jsonl" 2>"$TMP/m.err"; rc2=$?
set -e
[ "$rc" != 0 ] && grep -q 'bad.jsonl:2' "$TMP/bad.err" || fail "a bad line: rc $rc $(cat "$TMP/bad.err")"
[ ! -s "$TMP/bad.out" ] || fail "a failed replay printed on stdout"
[ "$rc2" != 0 ] || fail "a missing trace exited 0"

if [ -d "$SCENARIOS" ]; then
  "$GPUWATCH" eval "$SCENARIOS" --json >"$TMP/eval.json" 2>"$TMP/eval.err" ||
    { cat "$TMP/eval.err"; fail "eval on the example scenarios"; }
  python3 - "$TMP/eval.json" <<'PY' || fail "eval JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["scenarios"]) == 6, d["scenarios"]  # each replayed; its findings JSON re-read
o = d["overall"]
print(f"eval on the examples: precision {o['precision']} recall {o['recall']} f1 {o['f1']} "
      f"median latency {o['median_latency_s']} s; healthy false alarms "
      f"{d['healthy_false_alarms']}; replay {d['replay_speed_x']:.0f}x real time")
PY
else
  echo "SKIP: $SCENARIOS absent (the project cloned alone): eval on the examples not run"
fi
echo "replay_eval_test: ok"
