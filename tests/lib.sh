# Shared helpers for the shell tests. Servers are started on 127.0.0.1 and stopped by PID.
set -euo pipefail

PIDS=()
TMP=$(mktemp -d /tmp/gpuwatch-test.XXXXXX)
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  if [ "${GPUWATCH_KEEP_TMP:-0}" = 1 ]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# A free loopback port (bind to 0, read it back).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_http URL SECONDS: polls until the URL answers 200.
wait_http() {
  local url=$1 secs=$2 i
  for ((i = 0; i < secs * 10; i++)); do
    if curl -fsS -o /dev/null "$url" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# url_has URL PATTERN [CURL_ARGS...]: whether the body at URL has a line matching PATTERN
# (grep's regex).
# Fetched whole first: `curl | grep -q` fails under pipefail whenever grep has matched and exited
# before curl wrote the rest (curl: (23)), which a long /metrics makes likely.
url_has() {
  local url=$1 pattern=$2 body
  shift 2
  body=$(curl -fsS "$@" "$url") || return 1
  grep -q -- "$pattern" <<<"$body"
}

need_peer() {  # need_peer BINARY PACKAGE
  if ! command -v "$1" >/dev/null 2>&1; then
    if [ "${GPUWATCH_REQUIRE_PEERS:-0}" = 1 ]; then fail "$1 missing (apt-get install $2)"; fi
    echo "SKIP: $1 not installed (apt-get install $2); scripts/test.sh installs it" >&2
    exit 77
  fi
}
