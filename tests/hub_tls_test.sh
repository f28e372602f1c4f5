#!/usr/bin/env bash
# Agent → hub over TLS (issue 19): the hub behind a TLS-terminating reverse proxy (here a small
# Python one with a certificate from a test CA, standing in for nginx or Caddy, docs/deploy.md).
# An agent given the CA (--hub-ca-file) pushes through it; one without it refuses the
# certificate, sends nothing, and keeps its data in the spool. Then hubs that read their series
# back through it (--read-from https://…, --read-from-ca-file), as from a TLS cluster. Last, a
# hub serving HTTPS itself (--tls-cert-file, --tls-key-file) with an agent pushing to it.
GPUWATCH=$(realpath "$1") MOCK=$(realpath "$2")
. "$(dirname "$0")/lib.sh"
need_peer openssl openssl

cd "$TMP"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
  -subj "/CN=gpuwatch test CA" >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -keyout hub.key -out hub.csr -subj "/CN=127.0.0.1" \
  >/dev/null 2>&1
printf 'subjectAltName=IP:127.0.0.1\n' >san.ext
openssl x509 -req -in hub.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out hub.pem -days 2 \
  -extfile san.ext >/dev/null 2>&1 || fail "cannot make the test certificate"

HUB_PORT=$(free_port) TLS_PORT=$(free_port) A_PORT=$(free_port) B_PORT=$(free_port)
"$GPUWATCH" hub --listen "127.0.0.1:$HUB_PORT" --data-dir "$TMP/hub" >"$TMP/hub.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$HUB_PORT/healthz" 20 || { cat "$TMP/hub.log"; fail "hub did not start"; }

cat >proxy.py <<'EOF'
import http.client, http.server, ssl, sys
listen, upstream = int(sys.argv[1]), int(sys.argv[2])
class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        c = http.client.HTTPConnection("127.0.0.1", upstream, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        c.request(self.command, self.path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    do_GET = do_POST = do
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", listen), Proxy)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("hub.pem", "hub.key")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
EOF
python3 proxy.py "$TLS_PORT" "$HUB_PORT" >"$TMP/proxy.log" 2>&1 &
PIDS+=($!)
for ((i = 0; i < 50; i++)); do
  curl -fsS --cacert ca.pem "https://127.0.0.1:$TLS_PORT/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS --cacert ca.pem "https://127.0.0.1:$TLS_PORT/healthz" >/dev/null || fail "TLS proxy did not start"

agent() {  # agent NAME PORT [flags...]
  local name=$1 port=$2
  shift 2
  GPUWATCH_MOCK_NVML=2xL40S "$GPUWATCH" up --listen "127.0.0.1:$port" --nvml-lib "$MOCK" \
    --hostname "$name" --data-dir "$TMP/$name" --job-socket off --kmsg off --gpu-interval 1s \
    --hub "https://127.0.0.1:$TLS_PORT" --hub-token-file "$TMP/hub/admin.token" "$@" \
    >"$TMP/$name.log" 2>&1 &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$port/healthz" 20 || { cat "$TMP/$name.log"; fail "agent $name did not start"; }
}
agent node-a "$A_PORT" --hub-ca-file "$TMP/ca.pem"
agent node-b "$B_PORT"

for ((i = 0; i < 100; i++)); do
  curl -fsS "http://127.0.0.1:$HUB_PORT/api/v1/nodes" | grep -q '"node-a"' && break
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$HUB_PORT/api/v1/nodes" >"$TMP/nodes.json"
grep -q '"node-a"' "$TMP/nodes.json" || { cat "$TMP/node-a.log"; fail "node-a's records did not arrive over TLS"; }
n=$(curl -fsSG "http://127.0.0.1:$HUB_PORT/api/v1/query" \
  --data-urlencode 'query=count(DCGM_FI_DEV_GPU_TEMP{Hostname="node-a"})' |
  python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
[ "$n" = 2 ] || fail "node-a's GPU series on the hub: $n, want 2"
# node-b does not trust the proxy's certificate: nothing of it arrives, it says why, and it
# keeps what it collected.
sleep 3
grep -q '"node-b"' "$TMP/nodes.json" && fail "node-b pushed through a certificate it cannot verify"
grep -qi 'ssl\|certificate' "$TMP/node-b.log" || { cat "$TMP/node-b.log"; fail "node-b does not say why"; }
backlog=$(curl -fsS "http://127.0.0.1:$B_PORT/metrics" | awk '$1 ~ /^gpuwatch_hub_push_backlog_entries/ {print $2}')
[ "${backlog%.*}" -ge 2 ] || fail "node-b's backlog is $backlog: its data should wait in the spool"
echo "PASS agent → hub over TLS"

# A hub that reads its series back from an https:// cluster (--read-from, docs/deploy.md): here
# the first hub behind the same proxy. With the CA it answers from there; without it, its query
# fails naming the certificate, never an empty answer.
R_PORT=$(free_port) U_PORT=$(free_port)
"$GPUWATCH" hub --listen "127.0.0.1:$R_PORT" --data-dir "$TMP/reader" \
  --read-from "https://127.0.0.1:$TLS_PORT" --read-from-ca-file "$TMP/ca.pem" >"$TMP/reader.log" 2>&1 &
PIDS+=($!)
"$GPUWATCH" hub --listen "127.0.0.1:$U_PORT" --data-dir "$TMP/untrusting" \
  --read-from "https://127.0.0.1:$TLS_PORT" >"$TMP/untrusting.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$R_PORT/healthz" 20 || { cat "$TMP/reader.log"; fail "the reading hub did not start"; }
wait_http "http://127.0.0.1:$U_PORT/healthz" 20 || { cat "$TMP/untrusting.log"; fail "the untrusting hub did not start"; }
q='query=count(DCGM_FI_DEV_GPU_TEMP{Hostname="node-a"})'
n=$(curl -fsSG "http://127.0.0.1:$R_PORT/api/v1/query" --data-urlencode "$q" |
  python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
[ "$n" = 2 ] || fail "the hub reading over TLS counts $n of node-a's GPU series, want 2"
curl -sSG "http://127.0.0.1:$U_PORT/api/v1/query" --data-urlencode "$q" >"$TMP/untrusting.json"
grep -q '"status":"error"' "$TMP/untrusting.json" || fail "a hub that cannot verify its cluster answered: $(cat "$TMP/untrusting.json")"
grep -qi 'ssl\|certificate' "$TMP/untrusting.json" || fail "its error does not name the certificate: $(cat "$TMP/untrusting.json")"
"$GPUWATCH" hub --listen "127.0.0.1:$(free_port)" --data-dir "$TMP/bad" --read-from "http://127.0.0.1:$TLS_PORT" \
  --read-from-ca-file "$TMP/ca.pem" >"$TMP/bad.log" 2>&1 && fail "a CA file with an http:// --read-from was taken"
grep -q 'https://' "$TMP/bad.log" || fail "the refusal does not say why: $(cat "$TMP/bad.log")"
echo "PASS hub → cluster (--read-from) over TLS"

# The hub's own HTTPS listener (--tls-cert-file, --tls-key-file): no proxy. An agent given the CA
# pushes to it; a token is still needed over TLS; plain HTTP to the HTTPS port gets no answer
# and is counted; a key that does not load stops the hub with the file named.
S_PORT=$(free_port) C_PORT=$(free_port)
WRITE=$("$GPUWATCH" token new write | cut -d' ' -f1)
READ=$("$GPUWATCH" token new read | cut -d' ' -f1)
printf '%s write\n%s read\n' "$WRITE" "$READ" >"$TMP/tokens"
echo "$WRITE" >"$TMP/write.token"
chmod 600 "$TMP/tokens" "$TMP/write.token"
"$GPUWATCH" hub --listen "127.0.0.1:$S_PORT" --data-dir "$TMP/tls-hub" --tokens "$TMP/tokens" \
  --tls-cert-file "$TMP/hub.pem" --tls-key-file "$TMP/hub.key" >"$TMP/tls-hub.log" 2>&1 &
PIDS+=($!)
for ((i = 0; i < 100; i++)); do
  curl -fsS --cacert ca.pem "https://127.0.0.1:$S_PORT/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS --cacert ca.pem "https://127.0.0.1:$S_PORT/healthz" >/dev/null ||
  { cat "$TMP/tls-hub.log"; fail "the HTTPS hub did not start"; }
GPUWATCH_MOCK_NVML=2xL40S "$GPUWATCH" up --listen "127.0.0.1:$C_PORT" --nvml-lib "$MOCK" \
  --hostname node-c --data-dir "$TMP/node-c" --job-socket off --kmsg off --gpu-interval 1s \
  --hub "https://127.0.0.1:$S_PORT" --hub-token-file "$TMP/write.token" --hub-ca-file "$TMP/ca.pem" \
  >"$TMP/node-c.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$C_PORT/healthz" 20 || { cat "$TMP/node-c.log"; fail "agent node-c did not start"; }
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert ca.pem "https://127.0.0.1:$S_PORT/api/v1/nodes")
[ "$code" = 401 ] || fail "the HTTPS hub answered $code to a request without a token"
n=0
for ((i = 0; i < 100; i++)); do
  n=$(curl -fsSG --cacert ca.pem -H "Authorization: Bearer $READ" "https://127.0.0.1:$S_PORT/api/v1/query" \
    --data-urlencode 'query=count(DCGM_FI_DEV_GPU_TEMP{Hostname="node-c"})' |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
  [ "$n" = 2 ] && break
  sleep 0.2
done
[ "$n" = 2 ] || { cat "$TMP/node-c.log"; fail "node-c's GPU series on the HTTPS hub: $n, want 2"; }
url_has "https://127.0.0.1:$S_PORT/api/v1/nodes" '"node-c"' --cacert ca.pem \
  -H "Authorization: Bearer $READ" || fail "node-c's records did not arrive at the HTTPS hub"
# The CLI reads an HTTPS hub with the CA in $GPUWATCH_CA_FILE (and a read token); without the
# CA it says the certificate could not be verified.
echo "$READ" >"$TMP/read.token"
chmod 600 "$TMP/read.token"
GPUWATCH_TOKEN_FILE="$TMP/read.token" GPUWATCH_CA_FILE="$TMP/ca.pem" \
  "$GPUWATCH" report --hub "https://127.0.0.1:$S_PORT" --by project --since 1d --json >"$TMP/report.json" ||
  fail "gpuwatch report over HTTPS: $(cat "$TMP/report.json")"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$TMP/report.json" || fail "report: not JSON"
if GPUWATCH_TOKEN_FILE="$TMP/read.token" "$GPUWATCH" jobs --agent "https://127.0.0.1:$S_PORT" \
  >"$TMP/jobs.out" 2>&1; then
  fail "gpuwatch jobs trusted the hub's certificate without its CA"
fi
grep -qi 'ssl\|certificate' "$TMP/jobs.out" || fail "the CLI does not say why: $(cat "$TMP/jobs.out")"
# Plain HTTP to the HTTPS port: no HTTP answer (curl reads nothing it can parse), counted.
curl -s -m 5 "http://127.0.0.1:$S_PORT/healthz" >"$TMP/plain.out" 2>&1 &&
  fail "plain HTTP to the HTTPS port was answered: $(cat "$TMP/plain.out")"
url_has "https://127.0.0.1:$S_PORT/metrics" 'gpuwatch_http_refused_total{.*reason="tls_handshake".*} [1-9]' \
  --cacert ca.pem -H "Authorization: Bearer $READ" || fail "the refused handshake is not counted"
if "$GPUWATCH" hub --listen "127.0.0.1:$(free_port)" --data-dir "$TMP/badkey" \
  --tls-cert-file "$TMP/hub.pem" --tls-key-file "$TMP/ca.key" >"$TMP/badkey.log" 2>&1; then
  fail "a hub started with a key that is not its certificate's"
fi
grep -q 'ca.key' "$TMP/badkey.log" || fail "the refusal does not name the key file: $(cat "$TMP/badkey.log")"
for f in "$TMP"/*.log; do
  if grep -qF "$WRITE" "$f"; then fail "the write token is in $f"; fi
done
echo "PASS agent → hub over the hub's own HTTPS"
