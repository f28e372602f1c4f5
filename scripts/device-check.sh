#!/usr/bin/env bash
# Checks gpuwatch against a real GPU: the agent (built elsewhere, carried in build/release)
# runs on the real NVML under a PyTorch matrix-multiply load; every field it reports is
# compared with `nvidia-smi --query-gpu`, and the load's process must be attributed.
# Then the task-level line: examples/torch_ddp.py (real PyTorch DDP, NCCL) reports through the
# Python SDK to the agent, which must attribute the rank to its GPU; its per-step output and
# the agent's view of the job are kept. Prints a table; copies the raw outputs to $OUT when
# set. Changes no GPU setting.
#   scripts/device-check.sh [BUILD_DIR]   (default build/release)
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}
OUT=${OUT:-$(mktemp -d)}
GW="$B/gpuwatch"
[ -x "$GW" ] || { echo "no $GW: run scripts/bundle.sh first"; exit 2; }
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: not a GPU machine"; exit 2; }
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # shared libs carried beside it

nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
"$GW" --version | tee "$OUT/version.txt"
"$GW" status >"$OUT/status-idle.txt" 2>&1; cat "$OUT/status-idle.txt"
"$GW" status --capabilities >"$OUT/capabilities.txt" 2>&1; cat "$OUT/capabilities.txt"

PORT=19470
"$GW" up --listen 127.0.0.1:$PORT --data-dir "$OUT/data" --job-socket "$OUT/job.sock" \
  --process-interval 2s --job-interval 5s >"$OUT/agent.log" 2>&1 &
AGENT=$!
LOAD=""
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  python3 - >"$OUT/load.log" 2>&1 <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 45
while time.time() < end:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
print("load done")
PY
  LOAD=$!
else
  echo "PyTorch with CUDA not importable: checking an idle GPU only" | tee "$OUT/load.log"
fi
sleep 20
curl -s "http://127.0.0.1:$PORT/metrics" >"$OUT/metrics.txt"
curl -s "http://127.0.0.1:$PORT/api/v1/gpus" >"$OUT/gpus.json"
curl -s "http://127.0.0.1:$PORT/api/v1/processes" >"$OUT/processes.json"
curl -s "http://127.0.0.1:$PORT/api/v1/capabilities" >"$OUT/capabilities.json"
Q=index,uuid,pci.bus_id,name,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,temperature.memory,power.draw,enforced.power.limit,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max,fan.speed,ecc.errors.uncorrected.volatile.total,clocks_event_reasons.active
nvidia-smi --query-gpu=$Q --format=csv,noheader,nounits >"$OUT/smi.csv" 2>&1
"$GW" status >"$OUT/status-load.txt" 2>&1; cat "$OUT/status-load.txt"
python3 - "$OUT" "$Q" "${LOAD:-0}" <<'PY'
import csv, json, sys
out, q, load_pid = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
gw = {g["uuid"]: g for g in json.load(open(f"{out}/gpus.json"))["gpus"]}
pairs = [("utilization.gpu", "DCGM_FI_DEV_GPU_UTIL", 15), ("utilization.memory", "DCGM_FI_DEV_MEM_COPY_UTIL", 15),
         ("memory.used", "DCGM_FI_DEV_FB_USED", 512), ("memory.total", "DCGM_FI_DEV_FB_TOTAL", 1),
         ("temperature.gpu", "DCGM_FI_DEV_GPU_TEMP", 3), ("temperature.memory", "DCGM_FI_DEV_MEMORY_TEMP", 3),
         ("power.draw", "DCGM_FI_DEV_POWER_USAGE", 60), ("enforced.power.limit", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", 1),
         ("clocks.sm", "DCGM_FI_DEV_SM_CLOCK", 150), ("clocks.mem", "DCGM_FI_DEV_MEM_CLOCK", 50),
         ("clocks.max.sm", "DCGM_FI_DEV_MAX_SM_CLOCK", 1), ("clocks.max.mem", "DCGM_FI_DEV_MAX_MEM_CLOCK", 1),
         ("pcie.link.gen.current", "DCGM_FI_DEV_PCIE_LINK_GEN", 0), ("pcie.link.width.current", "DCGM_FI_DEV_PCIE_LINK_WIDTH", 0),
         ("pcie.link.gen.max", "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", 0), ("pcie.link.width.max", "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", 0),
         ("fan.speed", "DCGM_FI_DEV_FAN_SPEED", 5), ("ecc.errors.uncorrected.volatile.total", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0)]
bad = 0
print(f"{'GPU':<4} {'field':<40} {'nvidia-smi':>12} {'gpuwatch':>12}  verdict")
for row in csv.reader(open(f"{out}/smi.csv")):
    row = [c.strip() for c in row]
    if len(row) != len(q): print("unparsed nvidia-smi row:", row); bad += 1; continue
    smi = dict(zip(q, row))
    g = gw.get(smi["uuid"])
    if not g: print("GPU", smi["uuid"], "missing in gpuwatch"); bad += 1; continue
    if g["pci_bus_id"].lower() != smi["pci.bus_id"].lower(): print("bus id differs", g["pci_bus_id"], smi["pci.bus_id"]); bad += 1
    m = g.get("metrics", {})
    for sq, name, tol in pairs:
        s, v = smi[sq], m.get(name)
        if s in ("[N/A]", "[Not Supported]", "N/A"):
            verdict = "ok (both absent)" if v is None else "gpuwatch has a value nvidia-smi lacks"
        elif v is None:
            verdict = "MISSING in gpuwatch"; bad += 1
        else:
            ok = abs(float(s) - float(v)) <= tol
            verdict = "ok" if ok else f"DIFF > {tol}"; bad += 0 if ok else 1
        print(f"{smi['index']:<4} {name:<40} {s:>12} {str(v if v is None else round(v, 1)):>12}  {verdict}")
    print(f"{smi['index']:<4} {'throttle (smi hex mask)':<40} {smi['clocks_event_reasons.active']:>12} {str(g.get('clock_event_reasons')):>12}")
    for k in ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"):
        print(f"{smi['index']:<4} {k + ' (GPM)':<40} {'':>12} {str(m.get(k)):>12}")
procs = json.load(open(f"{out}/processes.json"))["processes"]
print("processes:", json.dumps(procs, indent=1))
if load_pid and not any(p["pid"] == load_pid for p in procs):
    print("load pid", load_pid, "NOT attributed"); bad += 1
print("device-check:", "PASS" if bad == 0 else f"{bad} problem(s)")
PY
[ -n "$LOAD" ] && wait "$LOAD"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  # One rank per GPU (at most 8), NCCL; the SDK's CUDA-event step timer and comm hook.
  NGPU=$(nvidia-smi -L | wc -l); [ "$NGPU" -gt 8 ] && NGPU=8
  if command -v torchrun >/dev/null; then
    GPUWATCH_SOCKET="$OUT/job.sock" GPUWATCH_JOB=device-ddp timeout 300 \
      torchrun --standalone --nproc_per_node="$NGPU" examples/torch_ddp.py --steps 300 \
      >"$OUT/torch_ddp.log" 2>&1
  else
    GPUWATCH_SOCKET="$OUT/job.sock" GPUWATCH_JOB=device-ddp timeout 300 \
      python3 examples/torch_ddp.py --steps 300 >"$OUT/torch_ddp.log" 2>&1
  fi
  echo "torch_ddp exit $?; first and last steps:"; head -5 "$OUT/torch_ddp.log"; tail -5 "$OUT/torch_ddp.log"
  sleep 6
  curl -s "http://127.0.0.1:$PORT/api/v1/jobs/device-ddp" >"$OUT/job.json"
  "$GW" job device-ddp --agent "http://127.0.0.1:$PORT" | tee "$OUT/job.txt"
  python3 - "$OUT/job.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
ranks = j.get("ranks", [])
ok = j.get("state") == "finished" and ranks and all(r["steps_total"] >= 300 and r["gpus"] for r in ranks)
print("job line:", "PASS" if ok else "PROBLEM", j.get("state"), [(r["rank"], r["steps_total"], r["gpus"]) for r in ranks])
PY
fi
kill "$AGENT"; wait "$AGENT"
echo "raw outputs in $OUT"
