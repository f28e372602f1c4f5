#!/usr/bin/env bash
# Chunk compression on the reference dataset: bytes/sample overall and per metric family, the
# encodings each family got, encode/decode throughput on one core. Prints Markdown.
#   bench/store/chunk_ratio.sh [SECONDS] [chunkenc_bench options...]
# SECONDS (default 21600 = 6 h, 27,648,000 samples; 7200 is quicker) of the default dataset
# (4 nodes x 8 GPUs x 40 metrics at 1 s). Options go to chunkenc_bench, e.g.
#   --values both             also the generator's unrounded doubles
#   --chunk 120,1024,7200     several chunk sizes   --block-shift 8,10,12   several block sizes
# GEN overrides the generator's path (default ../shared/bench/gen_gpu_telemetry.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-21600}
shift || true
GEN=${GEN:-../shared/bench/gen_gpu_telemetry.py}
BUILD=build/bench-store
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUWATCH_BUILD_TESTS=OFF \
  -DGPUWATCH_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD" --target chunkenc_bench -- -j2 >/dev/null
# The raw baseline: per series, int64 ms timestamps then float64 values (16 bytes/sample).
RAW="$BUILD/gpu-telemetry-${SECS}s.raw"
if [ ! -s "$RAW" ]; then
  python3 "$GEN" --format none --seconds "$SECS" --raw-out "$RAW.tmp" 2>/dev/null
  mv "$RAW.tmp" "$RAW"
fi
echo "dataset: $GEN --format none --seconds $SECS ($(( $(stat -c %s "$RAW") / 16 )) samples)"
echo
"$BUILD/src/store/chunkenc_bench" "$RAW" --seconds "$SECS" "$@"
