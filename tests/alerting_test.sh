#!/usr/bin/env bash
# Alerts end to end against a real Prometheus Alertmanager (Debian's prometheus-alertmanager,
# started here on loopback) and a webhook receiver: a mock-NVML agent loses GPU 2 and sees an
# XID on GPU 1; the findings become alerts that reach Alertmanager's v2 API with gpuwatch's
# labels and the webhook with its documented body (docs/format/alerts.md), and so does a user
# rule (docs/format/user-rules.md) over the agent's store; a silence made over
# the API hides the XID alert, is listed, and can be ended; bad silences are refused naming
# what is wrong.
GPUWATCH=$1 MOCK=$2 FIXTURES=$3
. "$(dirname "$0")/lib.sh"
need_peer prometheus-alertmanager prometheus-alertmanager

AM_PORT=$(free_port)
cat >"$TMP/am.yml" <<'YML'
route:
  receiver: "null"
  group_wait: 1s
receivers:
  - name: "null"
YML
prometheus-alertmanager --config.file="$TMP/am.yml" --storage.path="$TMP/am" \
  --web.listen-address="127.0.0.1:$AM_PORT" --cluster.listen-address= >"$TMP/am.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$AM_PORT/-/ready" 30 || { cat "$TMP/am.log"; fail "alertmanager did not start"; }

HOOK_PORT=$(free_port)
python3 - "$HOOK_PORT" "$TMP/hook.jsonl" >"$TMP/hook.log" 2>&1 <<'PY' &
import http.server, sys
port, out = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open(out, "ab") as f:
            f.write(self.path.encode() + b" " + body + b"\n")
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
PY
PIDS+=($!)

# A user rule over the agent's own store: GPU 0 hotter than 0 °C, which the mock always is.
cat >"$TMP/rules.json" <<'JSON'
{"rules": [{"name": "MockGpuWarm", "expr": "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} > 0", "for": "2s",
            "severity": "warning", "summary": "GPU {{gpu}} at {{value}} C"},
           {"name": "MockGpuNoted", "expr": "DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"} > 0", "for": "2s",
            "severity": "info", "summary": "recorded, never sent"}]}
JSON
rc=0; out=$("$GPUWATCH" up --job-socket off --data-dir none --nvml-lib "$MOCK" --rules "$TMP/rules.json" 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q -- "--rules needs --data-dir" <<<"$out" || fail "--rules without a store: $rc $out"
echo '{"rules": [{"name": "x", "expr": "rate(up[5m]"}]}' >"$TMP/bad-rules.json"
rc=0; out=$("$GPUWATCH" up --job-socket off --data-dir none --nvml-lib "$MOCK" --rules "$TMP/bad-rules.json" 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q "bad-rules.json: rules\[0\] (x).expr" <<<"$out" || fail "a bad rule: $rc $out"

PORT=$(free_port)
URL="http://127.0.0.1:$PORT"
GPUWATCH_MOCK_NVML="$FIXTURES/mock/lost_and_xid.json" "$GPUWATCH" up --job-socket off --hostname alertnode \
  --data-dir "$TMP/data" --rules "$TMP/rules.json" \
  --listen "127.0.0.1:$PORT" --nvml-lib "$MOCK" --gpu-interval 200ms --process-interval 500ms \
  --alertmanager "http://127.0.0.1:$AM_PORT" --alert-webhook "http://127.0.0.1:$HOOK_PORT/hook" \
  >"$TMP/agent.log" 2>&1 &
AGENT=$!
PIDS+=($AGENT)
wait_http "$URL/healthz" 20 || { cat "$TMP/agent.log"; fail "agent did not start"; }
# Changing state takes the admin token the agent made at first start (docs/limits.md, "Tokens").
[ "$(stat -c %a "$TMP/data/admin.token")" = 600 ] || fail "admin.token is not mode 600"
AUTH="Authorization: Bearer $(cat "$TMP/data/admin.token")"
export GPUWATCH_TOKEN_FILE="$TMP/data/admin.token"

# Alertmanager hears of the lost GPU (diagnosis runs every 5 s, 5 s behind).
for ((i = 0; i < 400; i++)); do
  curl -fsS "http://127.0.0.1:$AM_PORT/api/v2/alerts" >"$TMP/am.json"
  grep -q GpuwatchGpuLost "$TMP/am.json" && grep -q GpuwatchXid "$TMP/am.json" \
    && grep -q MockGpuWarm "$TMP/am.json" && break
  sleep 0.1
done
python3 - "$TMP/am.json" <<'PY' || { cat "$TMP/agent.log"; fail "alertmanager: $(cat "$TMP/am.json")"; }
import json, sys
alerts = {a["labels"]["alertname"]: a for a in json.load(open(sys.argv[1]))}
lost = alerts["GpuwatchGpuLost"]["labels"]
assert lost["cause"] == "gpu_lost" and lost["severity"] == "critical", lost
assert lost["gpu"] == "2" and lost["Hostname"] == "alertnode" and lost["layer"] == "card", lost
assert alerts["GpuwatchGpuLost"]["annotations"]["summary"], alerts["GpuwatchGpuLost"]
assert alerts["GpuwatchGpuLost"]["status"]["state"] == "active"
assert alerts["GpuwatchXid"]["labels"]["gpu"] == "1", alerts["GpuwatchXid"]
warm = alerts["MockGpuWarm"]
assert warm["labels"]["cause"] == "user:MockGpuWarm" and warm["labels"]["layer"] == "user", warm
assert warm["labels"]["severity"] == "warning" and warm["labels"]["gpu"] == "0", warm
assert "MockGpuNoted" not in alerts, "an info alert was sent"  # findings.md: info is record only
assert warm["annotations"]["summary"].startswith("GPU 0 at "), warm
PY

# The webhook got the same transitions in gpuwatch's body.
for ((i = 0; i < 100; i++)); do
  [ -s "$TMP/hook.jsonl" ] && grep -q gpu_lost "$TMP/hook.jsonl" && break
  sleep 0.1
done
python3 - "$TMP/hook.jsonl" <<'PY' || fail "webhook: $(cat "$TMP/hook.jsonl")"
import json, sys
seen = {}
for line in open(sys.argv[1]):
    path, body = line.split(" ", 1)
    assert path == "/hook", path
    b = json.loads(body)
    assert b["version"] == 1 and b["source"] == "gpuwatch" and b["agent"] == "alertnode", b
    for a in b["alerts"]:
        seen[(a["cause"], a.get("gpu"))] = a
lost = seen[("gpu_lost", 2)]
assert lost["notification"] == "firing" and lost["status"] == "firing", lost
assert lost["severity"] == "critical" and lost["fingerprint"] == "gpu_lost/alertnode/2///", lost
assert lost["starts_at"].endswith("Z") and lost["summary"], lost
PY

# The agent counts what fires and what it sent.
for ((i = 0; i < 100; i++)); do
  curl -fsS "$URL/metrics" >"$TMP/m.txt"
  grep -q '^gpuwatch_alert_notifications_total{Hostname="alertnode",receiver="webhook",result="sent"} [1-9]' "$TMP/m.txt" && break
  sleep 0.1
done
grep -q '^gpuwatch_alerts_firing{Hostname="alertnode",severity="critical",state="notified"} [1-9]' "$TMP/m.txt" \
  || fail "no firing critical alert on /metrics: $(grep gpuwatch_alert "$TMP/m.txt")"
grep -q '^gpuwatch_alert_notifications_total{Hostname="alertnode",receiver="alertmanager",result="sent"} [1-9]' "$TMP/m.txt" \
  || fail "no Alertmanager post counted: $(grep gpuwatch_alert "$TMP/m.txt")"
grep -q '^gpuwatch_alert_notifications_total{Hostname="alertnode",receiver="webhook",result="sent"} [1-9]' "$TMP/m.txt" \
  || fail "no webhook post counted: $(grep gpuwatch_alert "$TMP/m.txt")"

# Silences: bad ones are refused, a good one hides the XID alert and can be ended.
code=$(curl -s -o "$TMP/bad.json" -w '%{http_code}' -H "$AUTH" -X POST "$URL/api/v1/silences" -d '{"node":"alertnode","bogus":1,"duration_s":60}')
[ "$code" = 400 ] && grep -q "unknown silence field 'bogus'" "$TMP/bad.json" || fail "bad silence: $code $(cat "$TMP/bad.json")"
code=$(curl -s -o "$TMP/bad.json" -w '%{http_code}' -H "$AUTH" -X POST "$URL/api/v1/silences" -d '{"duration_s":60}')
[ "$code" = 400 ] && grep -q "needs a node, gpu, job or cause" "$TMP/bad.json" || fail "matcherless silence: $code"
code=$(curl -s -o "$TMP/s.json" -w '%{http_code}' -H "$AUTH" -X POST "$URL/api/v1/silences" \
  -d '{"node":"alertnode","cause":"xid","duration_s":600,"comment":"known XID 31","created_by":"test"}')
[ "$code" = 201 ] || fail "silence not created: $code $(cat "$TMP/s.json")"
SID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$TMP/s.json")
for ((i = 0; i < 150; i++)); do
  curl -fsS "$URL/api/v1/alerts" >"$TMP/alerts.json"
  grep -q "\"suppressed_by\": \"silence $SID\"" "$TMP/alerts.json" && break
  sleep 0.1
done
python3 - "$TMP/alerts.json" "$SID" <<'PY' || fail "alerts after the silence: $(cat "$TMP/alerts.json")"
import json, sys
d, sid = json.load(open(sys.argv[1])), sys.argv[2]
by = {a["cause"]: a for a in d["alerts"]}
assert by["xid"]["suppressed_by"] == f"silence {sid}", by["xid"]
assert by["gpu_lost"]["suppressed_by"] == "" and by["gpu_lost"]["status"] == "firing", by["gpu_lost"]
assert [s["id"] for s in d["silences"]] == [sid] and d["silences"][0]["comment"] == "known XID 31"
# D2 (issue 17): the author is the token that authenticated, not the "test" the client wrote,
# and ids are random, not s1, s2, ...
assert d["silences"][0]["created_by"] == "admin", d["silences"][0]
import re
assert re.fullmatch(r"s[0-9a-f]{16}", sid), sid
PY
# D2: without the token, or with a wrong one, nothing changes state; reads stay open.
code=$(curl -s -o "$TMP/noauth.json" -w '%{http_code}' -X POST "$URL/api/v1/silences" \
  -d '{"node":"alertnode","duration_s":3153600000,"created_by":"ops"}')
[ "$code" = 401 ] && grep -q 'needs Authorization: Bearer' "$TMP/noauth.json" \
  && grep -q "$TMP/data/admin.token" "$TMP/noauth.json" || fail "silence without a token: $code $(cat "$TMP/noauth.json")"
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer 0123456789abcdef0123' -X DELETE "$URL/api/v1/silences/$SID")
[ "$code" = 401 ] || fail "expire with a wrong token answered $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/api/v1/events" -d '[{"kind":"xid","text":"FAKE"}]')
[ "$code" = 401 ] || fail "event post without a token answered $code"
curl -fsS "$URL/api/v1/alerts" >/dev/null || fail "reads need no token"
curl -fsS -H "$AUTH" -X DELETE "$URL/api/v1/silences/$SID" >/dev/null || fail "silence not expired"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "$AUTH" -X DELETE "$URL/api/v1/silences/$SID")
[ "$code" = 404 ] || fail "expiring twice answered $code"

# The same from the command line: alerts (exit 1 while any fires), silence add/list/expire.
rc=0
"$GPUWATCH" alerts --agent "$URL" >"$TMP/alerts.txt" || rc=$?
[ "$rc" = 1 ] || fail "alerts exited $rc with alerts firing"
grep -q '^firing    critical  gpu_lost             alertnode GPU 2' "$TMP/alerts.txt" \
  || fail "alerts: $(cat "$TMP/alerts.txt")"
MID=$("$GPUWATCH" silence add --agent "$URL" --node alertnode --maintenance --for 1h --comment "RMA GPU 2") \
  || fail "silence add"
[[ "$MID" == m* ]] || fail "a maintenance window's id is $MID"
"$GPUWATCH" silence list --agent "$URL" >"$TMP/sil.txt"
grep -q "^$MID *maintenance *alertnode .* RMA GPU 2" "$TMP/sil.txt" || fail "silence list: $(cat "$TMP/sil.txt")"
# The maintenance window is on the node's timeline (where the diagnosis reads it too).
wait_event() {  # wait_event KIND TEXT
  for ((i = 0; i < 150; i++)); do
    curl -fsS "$URL/api/v1/events?kind=$1" >"$TMP/ev.json"
    grep -q "$2" "$TMP/ev.json" && return 0
    sleep 0.1
  done
  fail "no $1 event with '$2': $(cat "$TMP/ev.json")"
}
wait_event maintenance_start "maintenance $MID began until .*: RMA GPU 2"
rc=0; out=$("$GPUWATCH" silence add --agent "$URL" --cause bogus --for 1h 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q "unknown cause 'bogus'" <<<"$out" || fail "silence add bogus: $rc $out"
"$GPUWATCH" silence expire --agent "$URL" "$MID" >/dev/null || fail "silence expire"
rc=0; out=$("$GPUWATCH" silence expire --agent "$URL" "$MID" 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q "no active silence '$MID'" <<<"$out" || fail "expire twice: $rc $out"
wait_event maintenance_end "maintenance $MID ended"

# Across a restart (docs/format/alerts.md, "State"): the silences and the alerts come back from
# the data dir, and an alert that was notified firing is not notified again.
KEEP=$("$GPUWATCH" silence add --agent "$URL" --cause xid --for 1h --comment "kept") || fail "silence add"
count_firing() {
  python3 - "$TMP/hook.jsonl" <<'PY'
import json, sys
n = 0
for line in open(sys.argv[1]):
    for a in json.loads(line.split(" ", 1)[1])["alerts"]:
        n += a["cause"] == "gpu_lost" and a["notification"] == "firing"
print(n)
PY
}
FIRED=$(count_firing)
[ "$FIRED" = 1 ] || fail "gpu_lost notified firing $FIRED times before the restart"
kill -TERM "$AGENT"; wait "$AGENT" 2>/dev/null || true
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["format"]=="gpuwatch-alert-state", d' \
  "$TMP/data/alerts.json" || fail "no alert state kept: $(cat "$TMP/data/alerts.json")"
GPUWATCH_MOCK_NVML="$FIXTURES/mock/lost_and_xid.json" "$GPUWATCH" up --job-socket off --hostname alertnode \
  --data-dir "$TMP/data" --listen "127.0.0.1:$PORT" --nvml-lib "$MOCK" --gpu-interval 200ms \
  --alert-webhook "http://127.0.0.1:$HOOK_PORT/hook" >"$TMP/agent2.log" 2>&1 &
AGENT=$!
PIDS+=($AGENT)
wait_http "$URL/healthz" 20 || { cat "$TMP/agent2.log"; fail "agent did not restart"; }
grep -q "alerts and silences restored" "$TMP/agent2.log" || fail "not restored: $(cat "$TMP/agent2.log")"
"$GPUWATCH" silence list --agent "$URL" >"$TMP/sil.txt"
grep -q "^$KEEP .* kept" "$TMP/sil.txt" || fail "silence lost in the restart: $(cat "$TMP/sil.txt")"
# The lost GPU is found again by the new process; its alert is the one restored.
for ((i = 0; i < 200; i++)); do
  curl -fsS "$URL/api/v1/findings" | grep -q gpu_lost && break
  sleep 0.1
done
sleep 6  # one more diagnosis tick folds the finding into the alert book
FIRED=$(count_firing)
[ "$FIRED" = 1 ] || fail "gpu_lost notified firing $FIRED times across the restart"
curl -fsS "$URL/api/v1/alerts" | grep -q '"fingerprint": "gpu_lost/alertnode/2///"' \
  || fail "the restored alert is not listed"
# A damaged state file is kept aside and the agent starts without it.
kill -TERM "$AGENT"; wait "$AGENT" 2>/dev/null || true
echo '{"format": "gpuwatch-alert-state", "version": 1, "alerts": [{"state": "x"}]}' >"$TMP/data/alerts.json"
GPUWATCH_MOCK_NVML="$FIXTURES/mock/lost_and_xid.json" "$GPUWATCH" up --job-socket off --hostname alertnode \
  --data-dir "$TMP/data" --listen "127.0.0.1:$PORT" --nvml-lib "$MOCK" >"$TMP/agent3.log" 2>&1 &
AGENT=$!
PIDS+=($AGENT)
wait_http "$URL/healthz" 20 || { cat "$TMP/agent3.log"; fail "agent did not start on a damaged state"; }
grep -q "cannot restore alerts from .*alerts.json (alert 0: .*); kept it as .*alerts.json.damaged-" \
  "$TMP/agent3.log" || fail "damaged state: $(cat "$TMP/agent3.log")"
ls "$TMP/data"/alerts.json.damaged-* >/dev/null || fail "the damaged state was not kept"
echo "alerting_test: ok"
