#!/usr/bin/env bash
# `gpuwatch top` in a real terminal: tmux runs it against `gpuwatch demo` (8 simulated GPUs),
# keys are sent with send-keys and the screen read back with capture-pane. Checks a row for
# every GPU, sorting, the job filter, the per-job view, scrolling back in time and back to
# live, a resize to 80x24 (every line fits, rows stay), q, and --once / --plain.
GPUWATCH=$1
. "$(dirname "$0")/lib.sh"
need_peer tmux tmux

PORT=$(free_port)
URL="http://127.0.0.1:$PORT"
"$GPUWATCH" demo --fault healthy --duration 5m \
  --listen "127.0.0.1:$PORT" >"$TMP/demo.out" 2>"$TMP/demo.err" &
PIDS+=($!)
wait_http "$URL/healthz" 30 || { cat "$TMP/demo.err"; fail "demo did not serve"; }
# Every GPU sampled, and the job known, before the view starts.
for ((i = 0; i < 300; i++)); do
  curl -fsS "$URL/api/v1/gpus" >"$TMP/gpus.json" && curl -fsS "$URL/api/v1/jobs" >"$TMP/jobs.json" &&
    python3 - "$TMP/gpus.json" "$TMP/jobs.json" 2>/dev/null <<'PY' && break
import json, sys
g = json.load(open(sys.argv[1]))["gpus"]
j = json.load(open(sys.argv[2]))["jobs"]
assert len(g) == 8 and all(x.get("time_ms") for x in g) and j
PY
  sleep 0.2
done

SOCK="gw-top-$$"
T=(tmux -L "$SOCK" -f /dev/null)
cleanup_tmux() { "${T[@]}" kill-server 2>/dev/null || true; cleanup; }
trap cleanup_tmux EXIT
"${T[@]}" new-session -d -s top -x 160 -y 50 \
  "env TERM=xterm-256color $GPUWATCH top --agent $URL --interval 1; sleep 30"

screen() { "${T[@]}" capture-pane -p -t top; }
# wait_screen PATTERN: until the screen shows it (grep -E), at most 10 s.
wait_screen() {
  local i
  for ((i = 0; i < 100; i++)); do
    screen >"$TMP/screen.txt"
    grep -Eq "$1" "$TMP/screen.txt" && return 0
    sleep 0.1
  done
  cat "$TMP/screen.txt" >&2
  return 1
}
gpu_rows() { grep -Ec '^ +[0-7] ' "$TMP/screen.txt" || true; }

wait_screen '^gpuwatch top - .* - 8 GPU\(s\) - live .* - SIMULATED - sort index' || fail "no title"
wait_screen '^ +7 ' || fail "no row for GPU 7"
[ "$(gpu_rows)" -ge 8 ] || { cat "$TMP/screen.txt"; fail "not 8 GPU rows"; }
grep -q '^PROCESSES' "$TMP/screen.txt" || fail "no processes section"
wait_screen "sim-rank" || fail "no rank process"
grep -Eq '^  sim-1 ' "$TMP/screen.txt" || { cat "$TMP/screen.txt"; fail "no job row"; }

# s: sort by utilisation; the title says so, and the rows are in descending order.
"${T[@]}" send-keys -t top s
wait_screen 'sort util' || fail "s did not sort by utilisation"
python3 - "$TMP/screen.txt" <<'PY' || fail "rows not sorted by utilisation"
import re, sys
utils = []
for line in open(sys.argv[1]):
    m = re.match(r"^ +[0-7] .*?\] +(\d+)%", line)
    if m:
        utils.append(int(m.group(1)))
assert len(utils) >= 8 and utils == sorted(utils, reverse=True), utils
PY

# j: the job filter (the demo's one job runs on all eight GPUs); v: the per-job view.
"${T[@]}" send-keys -t top j
wait_screen ' - job sim-1' || fail "j did not filter by the job"
"${T[@]}" send-keys -t top v
wait_screen '^JOB sim-1 ' || fail "v did not group by job"
"${T[@]}" send-keys -t top v j

# Left: one minute back, read from the store; l: live again.
"${T[@]}" send-keys -t top Left
wait_screen ' - history [0-9:]+ UTC \(1m ago\)' || fail "Left did not go back in time"
wait_screen 'live only' || fail "history did not say processes are live only"
"${T[@]}" send-keys -t top l
wait_screen ' - live [0-9:]+ UTC' || fail "l did not return to live"

# A resize to 80x24: every line fits, every GPU still has a row.
"${T[@]}" resize-window -t top -x 80 -y 24
sleep 0.5
wait_screen '^ +7 ' || fail "no row for GPU 7 at 80x24"
awk 'length($0) > 80 { bad = 1 } END { exit bad }' "$TMP/screen.txt" || fail "a line is wider than 80"
[ "$(gpu_rows)" -ge 8 ] || { cat "$TMP/screen.txt"; fail "not 8 GPU rows at 80x24"; }
# Too small: one line that says so, and it recovers when the window grows.
"${T[@]}" resize-window -t top -x 30 -y 6
wait_screen 'too small' || fail "a 30x6 terminal did not say it is too small"
"${T[@]}" resize-window -t top -x 120 -y 40
wait_screen '^ +7 ' || fail "no recovery after the window grew"

"${T[@]}" send-keys -t top q
for ((i = 0; i < 50; i++)); do
  "${T[@]}" list-panes -t top -F '#{pane_current_command}' 2>/dev/null | grep -q gpuwatch || break
  sleep 0.1
done
"${T[@]}" list-panes -t top -F '#{pane_current_command}' 2>/dev/null | grep -q gpuwatch &&
  fail "q did not quit"

# --once: one table, every GPU, no terminal control; --plain: a table per refresh.
"$GPUWATCH" top --agent "$URL" --once >"$TMP/once.txt" || fail "--once failed"
grep -q $'\e' "$TMP/once.txt" && fail "--once wrote terminal escapes"
[ "$(grep -Ec '^ +[0-7] ' "$TMP/once.txt")" -ge 8 ] || { cat "$TMP/once.txt"; fail "--once rows"; }
timeout -s INT 3.5 "$GPUWATCH" top --agent "$URL" --plain --interval 1 >"$TMP/plain.txt" || true
[ "$(grep -c '^gpuwatch top - ' "$TMP/plain.txt")" -ge 2 ] || { cat "$TMP/plain.txt"; fail "--plain did not refresh"; }
# No terminal at all (a pipe): falls back to tables and says so.
timeout -s INT 2 "$GPUWATCH" top --agent "$URL" </dev/null >"$TMP/pipe.txt" 2>"$TMP/pipe.err" || true
grep -q 'not an interactive terminal' "$TMP/pipe.err" || fail "no fallback notice"
grep -q '^gpuwatch top - ' "$TMP/pipe.txt" || fail "no table on a pipe"
# No agent: a clear error, exit 1.
if "$GPUWATCH" top --agent "http://127.0.0.1:1" --once 2>"$TMP/none.err"; then fail "no agent: exit 0"; fi
grep -q 'no agent answers' "$TMP/none.err" || { cat "$TMP/none.err"; fail "no agent: no reason"; }
echo "top_tmux_test: OK"
