#!/usr/bin/env bash
# Hostile agents against a hub (issue 19), each holding a valid write token: an oversized push,
# a snappy bomb, a label explosion over the per-sender series limit (a sender: a token, an
# address and the node an agent names), records from a clock two
# hours ahead, records that speak for another node, junk lines and a wrong content type. Each
# is refused with a status that tells a sender not to retry and a body that says why; the hub's
# memory stays bounded and it keeps taking a good agent's data. Then the same against a relaying
# hub (--remote-write and --read-from, its destination down): the same refusals, and once its
# forward spool holds more than half of --spool-max, 429 with Retry-After.
GPUWATCH=$1
. "$(dirname "$0")/lib.sh"

PORT=$(free_port)
HUB="http://127.0.0.1:$PORT"
WRITE=$("$GPUWATCH" token new write | cut -d' ' -f1)
READ=$("$GPUWATCH" token new read | cut -d' ' -f1)
GOOD=$("$GPUWATCH" token new write | cut -d' ' -f1)
printf '%s write\n%s read\n%s write\n' "$WRITE" "$READ" "$GOOD" >"$TMP/tokens"
chmod 600 "$TMP/tokens"
"$GPUWATCH" hub --listen "127.0.0.1:$PORT" --data-dir "$TMP/hub" --tokens "$TMP/tokens" \
  --max-series-per-sender 1000 --write-max-body 4MiB >"$TMP/hub.log" 2>&1 &
HUB_PID=$!
PIDS+=("$HUB_PID")
wait_http "$HUB/healthz" 20 || { cat "$TMP/hub.log"; fail "hub did not start"; }

# Bodies made by a small encoder: remote-write protobuf, snappy of literals only (valid snappy,
# no compression), a header claiming 4 GiB, and trace lines.
python3 - "$TMP" <<'EOF'
import struct, sys, time
tmp = sys.argv[1]
def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7f
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)
def field(num, wire, payload):
    if wire == 2:
        return varint(num << 3 | 2) + varint(len(payload)) + payload
    return varint(num << 3 | wire) + payload
def snappy_literals(data):
    out = bytearray(varint(len(data)))
    for i in range(0, len(data), 65536):
        chunk = data[i:i + 65536]
        out += bytes([62 << 2]) + struct.pack("<I", len(chunk) - 1)[:3] + chunk
    return bytes(out)
def series(labels, t_ms, v):
    ts = b"".join(field(1, 2, field(1, 2, k.encode()) + field(2, 2, v_.encode()))
                  for k, v_ in labels)
    ts += field(2, 2, field(1, 1, struct.pack("<d", v)) + field(2, 0, varint(t_ms)))
    return field(1, 2, ts)
now = int(time.time() * 1000)
# 1500 new series from one sender: over --max-series-per-sender 1000.
body = b"".join(series([("__name__", "junk_metric"), ("id", str(i))], now, 1.0) for i in range(1500))
open(f"{tmp}/explosion.snappy", "wb").write(snappy_literals(body))
body = b"".join(series([("__name__", "junk2_metric"), ("id", str(i))], now, 1.0) for i in range(1500))
open(f"{tmp}/explosion2.snappy", "wb").write(snappy_literals(body))
# One good series.
open(f"{tmp}/good.snappy", "wb").write(snappy_literals(series([("__name__", "good_metric"), ("node", "ok")], now, 7.0)))
open(f"{tmp}/good2.snappy", "wb").write(snappy_literals(series([("__name__", "good_metric"), ("node", "two")], now, 7.0)))
open(f"{tmp}/good3.snappy", "wb").write(snappy_literals(series([("__name__", "good_metric"), ("node", "three")], now, 7.0)))
# A bomb: claims 3 GiB once inflated.
open(f"{tmp}/bomb.snappy", "wb").write(varint(3 << 30) + b"\x00" * 100)
# 5 MiB of literals: over --write-max-body 4MiB.
open(f"{tmp}/big.snappy", "wb").write(snappy_literals(b"\x00" * (5 << 20)))
# 40,000 samples of one series: ~800 KB as sent (literals), over half of a 1 MiB spool.
bulk = b"".join(series([("__name__", "good_metric"), ("node", "ok")], now - i, 1.0) for i in range(40000))
open(f"{tmp}/bulk.snappy", "wb").write(snappy_literals(bulk))
t = time.time()
open(f"{tmp}/future.ndjson", "w").write('{"t":%f,"type":"gpu","node":"evil","gpu":0}\n' % (t + 7200))
open(f"{tmp}/spoof.ndjson", "w").write('{"t":%f,"type":"gpu","node":"victim","gpu":0}\n' % t)
open(f"{tmp}/junk.ndjson", "w").write('{"t":%f,"type":"gpu","node":"evil"}\nnot json\n' % t)
EOF

post() {  # post PATH FILE TYPE [headers...]: prints the status, body in $TMP/body
  local path=$1 file=$2 type=$3
  shift 3
  curl -s -o "$TMP/body" -w '%{http_code}' -H "Authorization: Bearer $WRITE" \
    -H "Content-Type: $type" "$@" --data-binary "@$file" "$HUB$path"
}
expect() {  # expect STATUS WORDS PATH FILE TYPE [headers...]
  local want=$1 words=$2 got
  shift 2
  got=$(post "$@")
  [ "$got" = "$want" ] || fail "$1 $2: HTTP $got, want $want: $(head -c 300 "$TMP/body")"
  [ -z "$words" ] || grep -qF "$words" "$TMP/body" || fail "$1 $2: the reply does not say '$words': $(head -c 300 "$TMP/body")"
}
RW=(-H "Content-Encoding: snappy")
REC=(-H "X-Gpuwatch-Node: evil" -H "X-Gpuwatch-Spool: 0123456789abcdef0123456789abcdef")

expect 400 "series limit" /api/v1/write "$TMP/explosion.snappy" application/x-protobuf "${RW[@]}"
expect 413 "" /api/v1/write "$TMP/bomb.snappy" application/x-protobuf "${RW[@]}"
expect 413 "" /api/v1/write "$TMP/big.snappy" application/x-protobuf "${RW[@]}"
expect 400 "ahead of the hub's clock" /api/v1/records "$TMP/future.ndjson" application/x-ndjson \
  "${REC[@]}" -H "X-Gpuwatch-Seq: 1"
expect 400 'names node "victim"' /api/v1/records "$TMP/spoof.ndjson" application/x-ndjson \
  "${REC[@]}" -H "X-Gpuwatch-Seq: 1"
expect 400 "line 2: not a JSON object" /api/v1/records "$TMP/junk.ndjson" application/x-ndjson \
  "${REC[@]}" -H "X-Gpuwatch-Seq: 1"
expect 413 "inflates to" /api/v1/records "$TMP/bomb.snappy" application/x-ndjson \
  "${REC[@]}" -H "X-Gpuwatch-Seq: 1" -H "Content-Encoding: snappy"
expect 415 "Content-Encoding: snappy" /api/v1/records "$TMP/spoof.ndjson" application/x-ndjson \
  "${REC[@]}" -H "X-Gpuwatch-Seq: 1" -H "Content-Encoding: br"
expect 415 "x-ndjson" /api/v1/records "$TMP/spoof.ndjson" application/octet-stream \
  "${REC[@]}" -H "X-Gpuwatch-Seq: 1"
# A reader may not push.
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $READ" \
  --data-binary "@$TMP/good.snappy" -H "Content-Encoding: snappy" "$HUB/api/v1/write")
[ "$code" = 403 ] || fail "a read token pushed: HTTP $code"

# Nothing of it was kept: the explosion's first 1000 series are (the limit takes the first
# ones; later series are refused), the rest and every refused record are not.
n=$(curl -fsS -H "Authorization: Bearer $READ" "$HUB/api/v1/query" \
  --data-urlencode 'query=count(junk_metric)' | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
[ "$n" = 1000 ] || fail "junk_metric has $n series on the hub, want the limit's 1000"
curl -fsS -H "Authorization: Bearer $READ" "$HUB/api/v1/nodes" | grep -q '"node": "evil"' &&
  fail "a refused node is listed"

# Another agent's push still goes in (the limit is per sender), and the hub's memory stayed
# bounded. A sender is a token, an address and the node an agent names: with the exploding
# sender's own token and address, a new series is refused, but an agent naming its node (as
# `gpuwatch up --hub` does) has a budget of its own; a node that explodes is held to it too.
WRITE=$GOOD expect 204 "" /api/v1/write "$TMP/good.snappy" application/x-protobuf "${RW[@]}"
expect 400 "series limit" /api/v1/write "$TMP/good2.snappy" application/x-protobuf "${RW[@]}"
expect 204 "" /api/v1/write "$TMP/good2.snappy" application/x-protobuf "${RW[@]}" \
  -H "X-Gpuwatch-Node: node-good"
expect 400 "series limit" /api/v1/write "$TMP/explosion2.snappy" application/x-protobuf "${RW[@]}" \
  -H "X-Gpuwatch-Node: node-evil"
WRITE=$GOOD expect 204 "" /api/v1/write "$TMP/good3.snappy" application/x-protobuf "${RW[@]}" \
  -H "X-Gpuwatch-Node: node-good"
rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/$HUB_PID/status")
[ "$rss_kb" -lt $((400 * 1024)) ] || fail "hub RSS is ${rss_kb} KiB after the hostile pushes"
kill -0 "$HUB_PID" || fail "the hub died"

# The relay: its destination is a port nobody listens on.
kill "$HUB_PID"
wait "$HUB_PID" 2>/dev/null || true
DEAD=$(free_port)
"$GPUWATCH" hub --listen "127.0.0.1:$PORT" --data-dir "$TMP/relay" --tokens "$TMP/tokens" \
  --max-series-per-sender 1000 --write-max-body 4MiB --spool-max 1MiB \
  --remote-write "http://127.0.0.1:$DEAD/api/v1/write" --read-from "http://127.0.0.1:$DEAD" \
  >"$TMP/relay.log" 2>&1 &
HUB_PID=$!
PIDS+=("$HUB_PID")
wait_http "$HUB/healthz" 20 || { cat "$TMP/relay.log"; fail "relay did not start"; }
expect 400 "series limit" /api/v1/write "$TMP/explosion.snappy" application/x-protobuf "${RW[@]}"
expect 413 "" /api/v1/write "$TMP/bomb.snappy" application/x-protobuf "${RW[@]}"
expect 413 "" /api/v1/write "$TMP/big.snappy" application/x-protobuf "${RW[@]}"
WRITE=$GOOD expect 204 "" /api/v1/write "$TMP/bulk.snappy" application/x-protobuf "${RW[@]}"
code=$(curl -s -D "$TMP/headers" -o "$TMP/body" -w '%{http_code}' -H "Authorization: Bearer $GOOD" \
  -H "Content-Encoding: snappy" --data-binary "@$TMP/good.snappy" "$HUB/api/v1/write")
[ "$code" = 429 ] && grep -qi '^retry-after: 10' "$TMP/headers" && grep -qF "forward spool holds" "$TMP/body" ||
  fail "a relay over half its forward spool answered $code: $(cat "$TMP/body")"
url_has "$HUB/metrics" 'gpuwatch_remote_write_refused_requests_total{Hostname="[^"]*",reason="forward_backlog"} 1' \
  -H "Authorization: Bearer $READ" || fail "the forward_backlog refusal is not counted"
rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/$HUB_PID/status")
[ "$rss_kb" -lt $((400 * 1024)) ] || fail "relay RSS is ${rss_kb} KiB after the hostile pushes"
echo "PASS hostile agents (hub and relay RSS ${rss_kb} KiB)"
