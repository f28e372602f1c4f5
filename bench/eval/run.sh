#!/usr/bin/env bash
# The diagnosis yardstick (issue 6): generates a fixed suite of simulated scenarios (every cause
# of findings.md on four node shapes, healthy runs, multi-node runs and combined faults),
# runs `gpuwatch eval` on it and on ../shared/scenarios, and prints both tables.
#   bench/eval/run.sh [GPUWATCH] [OUTDIR]
# Results are recorded in bench/eval/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
GPUWATCH=${1:-build/release/gpuwatch}
OUT=${2:-build/bench-eval}
[ -x "$GPUWATCH" ] || { echo "build gpuwatch first (scripts/up.sh builds build/release)" >&2; exit 2; }
rm -rf "$OUT" && mkdir -p "$OUT/suite"

# Every cause of one node (the NIC causes on a node's own NIC).
CAUSES=(thermal_throttle power_throttle clock_slowdown gpu_lost xid ecc_dbe ecc_sbe_growth
        pcie_downgrade pcie_replay nvlink_errors nvlink_fallback net_errors numa_mismatch
        topology_change data_stall checkpoint_stall memory_leak job_hang rank_exit
        straggler_gpu step_regression gpu_idle_allocated)
SHAPES=(8xH100 8xA100 4xL40S 8x4090)
n=0
for shape in "${SHAPES[@]}"; do
  gpus=${shape%%x*}
  for seed in 1 2; do
    for cause in "${CAUSES[@]}"; do
      # NVLink causes need NVLink.
      case "$cause:$shape" in nvlink_*:4xL40S|nvlink_*:8x4090) continue ;; esac
      s=$((seed * 7919 + n * 104729))
      gpu=$((s % gpus)); onset=$((300 + s % 300)); sev=0.$((3 + s % 7)); dur=15m
      # An idle held GPU is a finding after ten minutes of it.
      [ "$cause" = gpu_idle_allocated ] && dur=25m
      "$GPUWATCH" sim --shape "$shape" --seed "$s" --duration "$dur" \
        --fault "$cause:gpu=$gpu,onset=$onset,severity=$sev" --out "$OUT/suite/$cause-$shape-$seed" >/dev/null
      n=$((n + 1))
    done
    for h in 1 2; do
      "$GPUWATCH" sim --shape "$shape" --seed $((seed * 31 + h)) --duration 15m \
        --out "$OUT/suite/healthy-$shape-$seed-$h" >/dev/null
      n=$((n + 1))
    done
  done
done
# Multi-node jobs: the causes between nodes, task causes that start on one node of the job,
# and healthy 2- and 4-node jobs.
for seed in 1 2 3 4; do
  nodes=$((2 + seed % 3)); node=$((1 + seed % (nodes - 1))); s=$((seed * 15485863))
  for cause in version_mismatch clock_skew net_fallback net_congestion net_errors job_hang \
               rank_exit data_stall straggler_gpu memory_leak; do
    "$GPUWATCH" sim --shape 8xH100 --nodes "$nodes" --seed "$((s + n))" --duration 15m \
      --fault "$cause:node=$node,gpu=$((s % 8)),onset=$((300 + s % 240)),severity=0.$((4 + seed))" \
      --out "$OUT/suite/$cause-${nodes}n-$seed" >/dev/null
    n=$((n + 1))
  done
  "$GPUWATCH" sim --shape 8xH100 --nodes "$nodes" --seed $((seed + 100)) --duration 15m \
    --out "$OUT/suite/healthy-${nodes}n-$seed" >/dev/null
  n=$((n + 1))
done
# Two faults at once, on different GPUs or layers.
"$GPUWATCH" sim --shape 8xH100 --seed 501 --fault thermal_throttle:gpu=1,onset=420 \
  --fault pcie_replay:gpu=6,onset=500 --out "$OUT/suite/combined-thermal-replay" >/dev/null
"$GPUWATCH" sim --shape 8xA100 --seed 502 --fault data_stall:onset=400 \
  --fault ecc_sbe_growth:gpu=2,onset=450 --out "$OUT/suite/combined-stall-sbe" >/dev/null
"$GPUWATCH" sim --shape 4xL40S --seed 503 --fault memory_leak:onset=380 \
  --fault pcie_downgrade:gpu=3,onset=600 --out "$OUT/suite/combined-leak-pcie" >/dev/null
"$GPUWATCH" sim --shape 8xH100 --seed 504 --fault power_throttle:gpu=4,onset=350 \
  --fault gpu_lost:gpu=0,onset=700 --out "$OUT/suite/combined-power-lost" >/dev/null
n=$((n + 4))

# Real shapes (issue 16): each cause the way real machines, drivers and launchers report it
# (the simulator's variants: `gpuwatch sim --fault CAUSE:variant=NAME`, docs/research/), and
# healthy runs with the confounders that look like faults. A suite of its own, so the classic
# suite's numbers stay comparable with earlier runs.
mkdir -p "$OUT/real"
m=0
VARIANTS=(rank_exit:torchrun rank_exit:oom_kill xid:kernel_only gpu_lost:kernel_only
          ecc_dbe:kernel_only topology_change:reboot topology_change:swap thermal_throttle:hw
          power_throttle:brake clock_slowdown:app_clocks job_hang:watchdog
          gpu_idle_allocated:procs step_regression:slow_steps)
for shape in 8xH100 8xA100 4xL40S; do
  gpus=${shape%%x*}
  for seed in 1 2; do
    for cv in "${VARIANTS[@]}"; do
      cause=${cv%%:*}; variant=${cv#*:}
      s=$((seed * 6271 + m * 7907))
      gpu=$((s % gpus)); onset=$((300 + s % 240)); sev=0.$((3 + s % 7)); dur=15m
      case "$cause" in
        gpu_idle_allocated|job_hang|xid) dur=25m ;;
        step_regression) onset=$((420 + s % 120)); dur=20m ;;
      esac
      "$GPUWATCH" sim --shape "$shape" --seed "$s" --duration "$dur" \
        --fault "$cause:gpu=$gpu,onset=$onset,severity=$sev,variant=$variant" \
        --out "$OUT/real/$cause-$variant-$shape-$seed" >/dev/null
      m=$((m + 1))
    done
  done
done
# A dead rank in a two-node job: its node's launcher reports it, the other's is signalled.
for seed in 1 2; do
  "$GPUWATCH" sim --shape 8xH100 --nodes 2 --seed $((seed * 977)) --duration 15m \
    --fault "rank_exit:node=$((seed - 1)),gpu=$((seed + 2)),onset=$((380 + seed * 40)),variant=torchrun" \
    --out "$OUT/real/rank_exit-torchrun-2n-$seed" >/dev/null
  m=$((m + 1))
done
# Healthy runs with confounders, alone and together.
CONFOUNDERS=(cancelled eval cache_refill reboot_same app_clocks_default preprocess_idle
             hw_slowdown_blips xid_teardown)
for shape in 8xH100 4xL40S; do
  for c in "${CONFOUNDERS[@]}"; do
    s=$((m * 104723 + 11)); onset=$((420 + s % 120)); dur=15m
    "$GPUWATCH" sim --shape "$shape" --seed "$s" --duration "$dur" \
      --fault "healthy:gpu=1,onset=$onset,variant=$c" --out "$OUT/real/healthy-$c-$shape" >/dev/null
    m=$((m + 1))
  done
done
for seed in 1 2 3 4; do
  "$GPUWATCH" sim --shape 8xA100 --seed $((seed * 31337)) --duration 20m \
    --fault healthy:variant=eval --fault healthy:variant=cache_refill \
    --fault healthy:variant=app_clocks_default --fault healthy:variant=hw_slowdown_blips \
    --out "$OUT/real/healthy-mixed-$seed" >/dev/null
  m=$((m + 1))
done

# One rank a node (1-GPU nodes, 3 and 4 of them): the task causes of one rank, whose node has no
# peer of its own to be compared with (the stuck, dead or slow rank is told from the others on
# other nodes), their real shapes, and healthy jobs. A suite of its own (added 2026-12-07).
mkdir -p "$OUT/onerank"
q=0
for shape in 1xH100 1xA100; do
  for seed in 1 2; do
    nodes=$((2 + seed)); node=$((seed % nodes))
    for cv in job_hang job_hang:watchdog rank_exit rank_exit:torchrun rank_exit:oom_kill \
              data_stall memory_leak straggler_gpu checkpoint_stall healthy; do
      cause=${cv%%:*}; variant=${cv#*:}; [ "$variant" = "$cv" ] && variant=
      s=$((seed * 7727 + q * 6151)); onset=$((300 + s % 240)); dur=15m
      case "$cause" in job_hang) dur=25m ;; esac
      spec="$cause:node=$node,onset=$onset,severity=0.$((4 + s % 5))"
      [ -n "$variant" ] && spec="$spec,variant=$variant"
      [ "$cause" = healthy ] && spec=healthy
      "$GPUWATCH" sim --shape "$shape" --nodes "$nodes" --seed "$s" --duration "$dur" \
        --fault "$spec" --out "$OUT/onerank/$cause${variant:+-$variant}-$shape-${nodes}n" >/dev/null
      q=$((q + 1))
    done
  done
done

echo "suite: $n simulated scenarios in $OUT/suite; real shapes: $m in $OUT/real; one rank a node: $q in $OUT/onerank"
echo
echo "== simulated suite =="
"$GPUWATCH" eval "$OUT/suite" | tail -n +$((n + 2))
echo
echo "== real shapes and confounders =="
"$GPUWATCH" eval "$OUT/real" | tail -n +$((m + 2))
echo
echo "== one rank a node =="
"$GPUWATCH" eval "$OUT/onerank" | tail -n +$((q + 2))
if [ -d ../shared/scenarios ]; then
  echo
  echo "== ../shared/scenarios (independent generator) =="
  "$GPUWATCH" eval ../shared/scenarios
fi
