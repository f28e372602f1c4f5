#!/usr/bin/env bash
# The agent's own CPU cost on a node with 8 GPUs and one training job (issue 7: live analysis
# adds at most 0.5 % of one core). `gpuwatch demo` is that node, SIMULATED: the real agent with
# every tier, the store, the flight recorder and live diagnosis every 5 s, fed by the simulator
# through its GPU seam and by 8 rank processes through the job SDK. The agent measures each
# tier's CPU on its own thread clock (gpuwatch_agent_tier_cpu_seconds_total); the whole
# process's CPU (all its threads, not the rank processes) comes from /proc/PID/stat.
#
#   bench/analysis_cost/run.sh [GPUWATCH] [MINUTES]     (default build/test/gpuwatch, 10)
#
# The first 3 minutes (the job's start and warm-up) are left out of the window measured; the
# fault (thermal_throttle on GPU 3) lands 4 minutes in, so the window holds a finding too.
set -euo pipefail
GPUWATCH=${1:-build/test/gpuwatch}
MINUTES=${2:-10}
[ "$MINUTES" -ge 5 ] || { echo "MINUTES must be at least 5" >&2; exit 2; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
OUT=$(mktemp -d /tmp/gpuwatch-cost.XXXXXX)
"$GPUWATCH" demo --fault thermal_throttle:gpu=3 --fault-after 4m --duration "$((MINUTES + 1))m" \
  --listen "127.0.0.1:$PORT" >"$OUT/demo.out" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$OUT"' EXIT
TICK=$(getconf CLK_TCK)

sample() {  # sample NAME: wall seconds, process CPU seconds, per-tier CPU seconds
  local wall cpu
  wall=$(date +%s.%N)
  cpu=$(awk -v tck="$TICK" '{ sub(/^.*\) /, ""); print ($12 + $13) / tck }' "/proc/$PID/stat")
  curl -fsS "http://127.0.0.1:$PORT/metrics" | grep '^gpuwatch_agent_tier_cpu_seconds_total' \
    | sed 's/.*tier="\([a-z]*\)"} /\1 /' >"$OUT/$1.tiers"
  echo "$wall $cpu" >"$OUT/$1.proc"
}

sleep 180
sample a
# Long runs are sampled every 10 minutes as well, so a cost that grows with the job's age shows.
left=$(((MINUTES - 3) * 60)) i=0
while [ "$left" -gt 600 ] && [ "$MINUTES" -gt 20 ]; do
  sleep 600
  left=$((left - 600)) i=$((i + 1))
  sample "i$i"
done
sleep "$left"
sample b
python3 - "$OUT" "$MINUTES" <<'PY'
import sys
out, minutes = sys.argv[1], sys.argv[2]
def read(name):
    wall, cpu = map(float, open(f"{out}/{name}.proc").read().split())
    tiers = dict((l.split()[0], float(l.split()[1])) for l in open(f"{out}/{name}.tiers"))
    return wall, cpu, tiers
wa, ca, ta = read("a")
wb, cb, tb = read("b")
wall = wb - wa
print(f"window: {wall:.0f} s of a {minutes}-minute SIMULATED 8xH100 node with one 8-rank job")
print(f"{'what':<28}{'CPU s':>10}{'% of one core':>16}")
rows = [(f"tier {t}", tb[t] - ta.get(t, 0)) for t in sorted(tb)]
rows.append(("all tiers", sum(v for _, v in rows)))
rows.append(("whole agent process", cb - ca))
for name, cpu in rows:
    print(f"{name:<28}{cpu:>10.3f}{100 * cpu / wall:>15.3f}%")
import glob, os
marks = ["a"] + [f"i{k}" for k in range(1, 1000) if os.path.exists(f"{out}/i{k}.proc")] + ["b"]
if len(marks) > 2:
    print("per interval (minutes from the start: diagnosis tier / whole agent, % of one core)")
    for m0, m1 in zip(marks, marks[1:]):
        (w0, c0, t0), (w1, c1, t1) = read(m0), read(m1)
        d = t1.get("diagnosis", 0) - t0.get("diagnosis", 0)
        start = 3 + (w0 - wa) / 60
        print(f"  {start:5.0f}-{start + (w1 - w0) / 60:<5.0f} {100 * d / (w1 - w0):.3f}%  "
              f"{100 * (c1 - c0) / (w1 - w0):.3f}%")
PY
grep -E 'finding|injected' "$OUT/demo.out" || true
