#!/usr/bin/env bash
# Replay in bounded memory (issue 6): a simulated trace of about 1 GB (uncompressed JSON lines)
# and one a tenth of its size go through `gpuwatch replay --json`; the script prints, for each,
# the records, the size, the wall time, the speed against the trace's own clock and the peak
# resident memory (GNU time). Memory that does not grow with the trace's length is the claim.
#   bench/replay/run.sh [GPUWATCH] [OUTDIR]
# Results are recorded in bench/replay/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
GPUWATCH=${1:-build/release/gpuwatch}
OUT=${2:-build/bench-replay}
[ -x "$GPUWATCH" ] || { echo "build gpuwatch first (scripts/up.sh builds build/release)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time (apt-get install time)" >&2; exit 2; }
mkdir -p "$OUT"

# 4 nodes of 8×H100 with one job across them: 14 h is about 1 GB of JSON lines. A fault in
# each, so the rules carry state (a throttle, a leak) through the whole replay.
run() {  # run NAME DURATION SECONDS
  local name=$1 dur=$2 span=$3
  if [ ! -f "$OUT/$name.jsonl.gz" ]; then
    "$GPUWATCH" sim --shape 8xH100 --nodes 4 --duration "$dur" --seed 42 \
      --fault thermal_throttle:node=1,gpu=3,onset=600 --fault memory_leak:node=2,onset=900 \
      --out "$OUT/$name" >/dev/null
  fi
  local bytes
  bytes=$(gzip -dc "$OUT/$name.jsonl.gz" | wc -c)
  /usr/bin/time -f '%e %M' -o "$OUT/$name.time" \
    "$GPUWATCH" replay --json "$OUT/$name.jsonl.gz" >"$OUT/$name.findings.json" 2>/dev/null
  read -r secs rss_kib <"$OUT/$name.time"
  python3 - "$name" "$bytes" "$secs" "$rss_kib" "$OUT/$name.findings.json" "$span" <<'PY'
import json, sys
name, size, secs, rss, path = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
span = float(sys.argv[6])
doc = json.load(open(path))
recs = doc["stats"]["records"]
causes = sorted({f["cause"] for f in doc["findings"]})
print(f"{name:<8} {recs:>10} records {size / 1e9:6.2f} GB JSON  replay {secs:6.1f} s  "
      f"{recs / max(secs, 1e-9) / 1e3:5.0f}k records/s  {span / max(secs, 1e-9):6.0f}x real time  peak RSS {rss / 1024:6.1f} MiB  findings: {', '.join(causes)}")
PY
}
run small 84m 5040
run large 14h 50400
