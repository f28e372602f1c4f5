#!/usr/bin/env bash
# Access control (issue 19) against a running agent with a tokens file, on loopback: every
# route but /healthz and the dashboard's files needs a token; each role does what it may and
# gets 403 for the rest; an expired and a wrong token get 401; a token confined to project nlp
# sees nlp's job and not vision's (its list, its page (403), its PromQL, its findings), and
# none of the node's routes; wrong tokens from one address are cut off with 429 + Retry-After,
# behind a trusted proxy the client's address (X-Forwarded-For) and not the proxy's;
# admin tokens add, list (by id) and revoke tokens over the API; the CLI reads with
# GPUWATCH_TOKEN_FILE; and no token is ever written to the agent's log.
GPUWATCH=$1 MOCK=$2
. "$(dirname "$0")/lib.sh"

PORT=$(free_port)
URL="http://127.0.0.1:$PORT"
SOCK="$TMP/job.sock"
READ=$("$GPUWATCH" token new read | cut -d' ' -f1)
WRITE=$("$GPUWATCH" token new write | cut -d' ' -f1)
ADMIN=$("$GPUWATCH" token new admin | cut -d' ' -f1)
NLP_LINE=$("$GPUWATCH" token new read nlp)
NLP=${NLP_LINE%% *}
[ "${NLP_LINE#* }" = "read nlp" ] || fail "token new read nlp printed: $NLP_LINE"
OLD=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
{
  echo "# tokens for the access-control test"
  echo "$READ read"
  echo "$WRITE write"
  echo "$ADMIN admin"
  echo "$NLP_LINE"
  echo "$OLD read expires=2020-01-01T00:00:00Z"
} >"$TMP/tokens"
chmod 600 "$TMP/tokens"

# A tokens file others can read is refused at start, naming the fix.
cp "$TMP/tokens" "$TMP/tokens.open" && chmod 644 "$TMP/tokens.open"
if "$GPUWATCH" up --listen "127.0.0.1:$PORT" --data-dir none --tokens "$TMP/tokens.open" \
  --nvml-lib /nonexistent --job-socket off >"$TMP/open.log" 2>&1; then
  fail "an agent started with a world-readable tokens file"
fi
grep -q 'chmod 600' "$TMP/open.log" || { cat "$TMP/open.log"; fail "no chmod hint"; }

GPUWATCH_MOCK_NVML=2xL40S "$GPUWATCH" up --listen "127.0.0.1:$PORT" --nvml-lib "$MOCK" \
  --data-dir "$TMP/data" --tokens "$TMP/tokens" --job-socket "$SOCK" --job-interval 1s \
  --gpu-interval 250ms --kmsg off --trusted-proxy 127.0.0.1 >"$TMP/agent.log" 2>&1 &
PIDS+=($!)
wait_http "$URL/healthz" 20 || { cat "$TMP/agent.log"; fail "agent did not start"; }

code() {  # code TOKEN PATH [curl args]: the HTTP status
  local token=$1 path=$2
  shift 2
  curl -s -o "$TMP/body" -w '%{http_code}' ${token:+-H "Authorization: Bearer $token"} "$@" "$URL$path"
}
expect() {  # expect STATUS TOKEN PATH [curl args]
  local want=$1 got
  shift
  got=$(code "$@")
  [ "$got" = "$want" ] || fail "$2 with token ${1:0:6}…: HTTP $got, want $want: $(head -c 300 "$TMP/body")"
}

# Two jobs of two projects, started over the job socket by a process that stays alive (the
# jobs stay running, so their gpuwatch_job_info series are stored).
cat >"$TMP/jobs.py" <<'EOF'
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for job, project in (("train-nlp", "nlp"), ("train-vision", "vision")):
    for step in range(1, 4):
        msgs = [{"type": "start", "job": job, "rank": 0, "project": project, "user": "u"}] if step == 1 else []
        msgs.append({"type": "step", "job": job, "rank": 0, "step": step, "duration_s": 0.1})
        s.sendto("".join(json.dumps(m) + "\n" for m in msgs).encode(), sys.argv[1])
time.sleep(300)
EOF
python3 "$TMP/jobs.py" "$SOCK" &
PIDS+=($!)
for ((i = 0; i < 100; i++)); do
  [ "$(code "$READ" /api/v1/jobs)" = 200 ] && grep -q train-vision "$TMP/body" && break
  sleep 0.1
done
grep -q train-vision "$TMP/body" || fail "the jobs did not register: $(cat "$TMP/body")"

# Public routes; everything else needs a token.
expect 200 "" /healthz
expect 200 "" /
expect 401 "" /metrics
grep -q 'Authorization: Bearer' "$TMP/body" || fail "the 401 does not say what is needed"
expect 401 "" /api/v1/jobs
expect 401 "" "/api/v1/query?query=up"
expect 401 "$OLD" /metrics
grep -q 'expired at 2020-01-01T00:00:00Z' "$TMP/body" || fail "expired token: $(cat "$TMP/body")"

# Roles.
expect 200 "$READ" /metrics
expect 200 "$READ" "/api/v1/query?query=DCGM_FI_DEV_GPU_TEMP"
expect 200 "$READ" /api/v1/query --data-urlencode "query=DCGM_FI_DEV_GPU_TEMP"  # form POST
expect 403 "$READ" /api/v1/silences -X POST -d '{}'
expect 403 "$WRITE" /metrics
expect 403 "$WRITE" /api/v1/silences -X POST -d '{}'
got=$(code "$WRITE" /api/v1/write -X POST --data-binary 'x' -H 'Content-Encoding: snappy' \
  -H 'Content-Type: application/x-protobuf')
# Past the authorizer: the body is judged (and refused as bad snappy), not the token.
[ "$got" = 400 ] || fail "write token on /api/v1/write: HTTP $got: $(cat "$TMP/body")"
expect 200 "$ADMIN" /metrics
expect 200 "$ADMIN" /api/v1/alerts

# A token confined to nlp.
expect 200 "$NLP" /api/v1/jobs
grep -q train-nlp "$TMP/body" || fail "nlp token does not see its job"
grep -q train-vision "$TMP/body" && fail "nlp token sees vision's job"
expect 200 "$NLP" /api/v1/jobs/train-nlp
expect 403 "$NLP" /api/v1/jobs/train-vision
expect 403 "$NLP" /api/v1/jobs/no-such-job  # no hint whether another project's job exists
for path in /metrics /api/v1/gpus /api/v1/processes /api/v1/host /api/v1/trace /api/v1/snapshots /api/v1/topology; do
  expect 403 "$NLP" "$path"
done
expect 403 "$NLP" "/api/v1/events?job=train-vision"
expect 200 "$NLP" "/api/v1/events?job=train-nlp"
expect 403 "$NLP" /api/v1/silences -X POST -d '{}'
for ((i = 0; i < 100; i++)); do
  expect 200 "$READ" "/api/v1/query?query=count(gpuwatch_job_info)"
  grep -q '"value":\[[0-9.]*,"2"\]' "$TMP/body" && break
  sleep 0.1
done
grep -q '"value":\[[0-9.]*,"2"\]' "$TMP/body" || fail "both jobs' info series not stored: $(cat "$TMP/body")"
# The same PromQL, through the scope: nlp's series only, and none of the node's.
expect 200 "$NLP" "/api/v1/query?query=gpuwatch_job_info"
grep -q train-nlp "$TMP/body" || fail "scoped query lacks nlp's job: $(cat "$TMP/body")"
grep -q train-vision "$TMP/body" && fail "scoped query shows vision's job"
expect 200 "$NLP" "/api/v1/query?query=DCGM_FI_DEV_GPU_TEMP%20or%20%7Bjob%3D%22train-vision%22%7D"
grep -q '"result":\[\]' "$TMP/body" || fail "scoped query reached other series: $(cat "$TMP/body")"
expect 200 "$NLP" "/api/v1/label/job/values"
grep -q train-vision "$TMP/body" && fail "scoped label values show vision's job"
expect 200 "$NLP" /api/v1/findings

# The CLI reads with GPUWATCH_TOKEN_FILE, and says what is wrong without one.
echo "$NLP" >"$TMP/nlp.token" && chmod 600 "$TMP/nlp.token"
GPUWATCH_TOKEN_FILE="$TMP/nlp.token" "$GPUWATCH" jobs --agent "$URL" >"$TMP/jobs.txt" || fail "gpuwatch jobs with a token"
grep -q train-nlp "$TMP/jobs.txt" || fail "gpuwatch jobs: $(cat "$TMP/jobs.txt")"
grep -q train-vision "$TMP/jobs.txt" && fail "gpuwatch jobs shows vision's job to the nlp token"
HOME="$TMP/home" XDG_STATE_HOME="$TMP/home" "$GPUWATCH" jobs --agent "$URL" >"$TMP/jobs.txt" 2>&1 && fail "gpuwatch jobs without a token"
grep -q 'GPUWATCH_TOKEN_FILE' "$TMP/jobs.txt" || fail "no hint on a 401: $(cat "$TMP/jobs.txt")"

# Tokens managed by an admin token (POST/GET/DELETE /api/v1/tokens): a new read token works at
# once and is shown only in the reply that made it; the list names tokens by id, never by
# token; a revoked token gets 401 at once; read and scoped tokens may not manage tokens.
expect 403 "$READ" /api/v1/tokens
expect 403 "$NLP" /api/v1/tokens
expect 403 "$READ" /api/v1/tokens -X POST -d '{"role":"admin"}'
expect 400 "$ADMIN" /api/v1/tokens -X POST -d '{"role":"root"}'
grep -q 'read, write or admin' "$TMP/body" || fail "bad role: $(cat "$TMP/body")"
expect 400 "$ADMIN" /api/v1/tokens -X POST -d '{"role":"read","expires":1e300}'
expect 400 "$ADMIN" /api/v1/tokens -X POST -d '{"role":"read","expires":"2020-01-01T00:00:00Z"}'
grep -q 'in the past' "$TMP/body" || fail "past expiry: $(cat "$TMP/body")"
expect 201 "$ADMIN" /api/v1/tokens -X POST -d '{"role":"read","projects":["nlp"],"expires":"2099-01-01T00:00:00Z"}'
NEW=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$TMP/body")
NEW_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$TMP/body")
[ ${#NEW} -ge 32 ] && [ ${#NEW_ID} = 16 ] || fail "new token: $(cat "$TMP/body")"
expect 200 "$NEW" /api/v1/jobs
grep -q train-nlp "$TMP/body" && ! grep -q train-vision "$TMP/body" || fail "new nlp token sees: $(cat "$TMP/body")"
expect 200 "$ADMIN" /api/v1/tokens
grep -q "\"$NEW_ID\"" "$TMP/body" || fail "the list lacks the new token's id"
for t in "$NEW" "$READ" "$ADMIN" "$NLP"; do grep -qF "$t" "$TMP/body" && fail "the token list shows a token"; done
grep -qF "$NEW" "$TMP/tokens" || fail "the new token is not in the tokens file"
[ "$(stat -c %a "$TMP/tokens")" = 600 ] || fail "the tokens file is mode $(stat -c %a "$TMP/tokens") after a change"
expect 200 "$ADMIN" "/api/v1/tokens/$NEW_ID" -X DELETE
# (from another client behind the proxy: the brute-force count of 127.0.0.1 stays at 0)
expect 401 "$NEW" /api/v1/jobs -H "X-Forwarded-For: 192.0.2.200"
expect 404 "$ADMIN" "/api/v1/tokens/$NEW_ID" -X DELETE
expect 200 "$READ" /metrics  # the other lines stay

# Brute force behind a reverse proxy the agent trusts (--trusted-proxy 127.0.0.1, curl playing
# nginx with $proxy_add_x_forwarded_for): the client named by X-Forwarded-For is cut off, not
# the proxy, and a client cannot dodge the count by writing its own addresses further left.
PROXIED=(-H "X-Forwarded-For: 198.51.100.23")
for ((i = 0; i < 10; i++)); do
  expect 401 "wrong-token-$i-0123456789abcdef" /metrics -H "X-Forwarded-For: 192.0.2.$i, 198.51.100.23"
done
expect 429 "$READ" /metrics "${PROXIED[@]}"
grep -q 'from 198.51.100.23' "$TMP/body" || fail "429 names another client: $(cat "$TMP/body")"
expect 200 "$READ" /metrics -H "X-Forwarded-For: 198.51.100.24"  # another client
expect 200 "$READ" /metrics  # the proxy itself

# Brute force: ten wrong tokens from one address, then 429 with Retry-After, even for the
# right token.
for ((i = 0; i < 10; i++)); do expect 401 "wrong-token-$i-0123456789abcdef" /metrics; done
expect 429 "$READ" /metrics -D "$TMP/headers"
grep -qi '^Retry-After: [0-9]' "$TMP/headers" || fail "429 without Retry-After"
expect 200 "" /healthz  # public routes are never blocked

# No token in the agent's log, ever.
for t in "$READ" "$WRITE" "$ADMIN" "$NLP" "$OLD" "$NEW"; do
  grep -qF "$t" "$TMP/agent.log" && fail "a token is in the agent's log"
done
echo "access_control_test: ok"
