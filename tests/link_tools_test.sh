#!/usr/bin/env bash
# `gpuwatch topo import` and `gpuwatch nccl` on real captures: the JSON contracts of issue 5
# that scripted checks rely on, the text views, and bad input refused with a message.
GPUWATCH=$1 FIXTURES=$2
. "$(dirname "$0")/lib.sh"

"$GPUWATCH" topo import "$FIXTURES/topo/nccltests307_8x4090_pix_switches_2numa_nic_bond.txt" --json \
  >"$TMP/topo.json" 2>"$TMP/topo.err" || { cat "$TMP/topo.err"; fail "topo import --json"; }
python3 - "$TMP/topo.json" <<'PY' || fail "topo import JSON contract"
import json, sys
j = json.load(open(sys.argv[1]))
assert set(j) == {"gpus", "links", "nics", "gpu_nic_links", "cpu_affinity", "numa_affinity"}, sorted(j)
assert j["gpus"] == 8 and len(j["links"]) == 8 and all(len(r) == 8 for r in j["links"]), j
assert all(j["links"][i][i] == "X" for i in range(8)), j["links"]
tokens = {"X", "PIX", "PXB", "PHB", "NODE", "SYS"} | {f"NV{n}" for n in range(1, 19)}
assert all(c in tokens for r in j["links"] for c in r), j["links"]
assert len(j["cpu_affinity"]) == 8 and len(j["numa_affinity"]) == 8, j
assert len(j["gpu_nic_links"]) == 8 and all(len(r) == len(j["nics"]) for r in j["gpu_nic_links"]), j
PY
"$GPUWATCH" topo import "$FIXTURES/topo/nccl933_8gpu_nv8_9nic_partial.txt" >"$TMP/topo.txt" 2>"$TMP/partial.err" \
  || fail "topo import of a cut table"
grep -q '^GPU0' "$TMP/topo.txt" || { cat "$TMP/topo.txt"; fail "topo import text view"; }
[ -s "$TMP/partial.err" ] || fail "a cut table gave no warning"
printf 'nothing to see\n' >"$TMP/garbage.txt"
"$GPUWATCH" topo import "$TMP/garbage.txt" 2>"$TMP/g.err" && fail "garbage accepted as a topology"
grep -q 'no matrix header' "$TMP/g.err" || { cat "$TMP/g.err"; fail "garbage: no clear message"; }
"$GPUWATCH" topo import "$TMP/missing.txt" 2>/dev/null && fail "a missing file accepted"

for f in "$FIXTURES"/nccl/*.log; do
  "$GPUWATCH" nccl "$f" --json >"$TMP/nccl.json" 2>"$TMP/nccl.err" || { cat "$TMP/nccl.err"; fail "nccl $f"; }
  python3 - "$TMP/nccl.json" <<'PY' || fail "nccl JSON contract for $f"
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("nccl_version", "ranks", "nodes", "transports", "channels", "errors", "findings"):
    assert k in j, (k, sorted(j))
for fam in ("P2P/IPC", "P2P/CUMEM", "P2P/NVL", "P2P/direct", "SHM", "NET/IB", "NET/Socket", "COLLNET", "NVLS"):
    assert isinstance(j["transports"].get(fam), int), j["transports"]
for c in j["channels"]:
    assert {"channel", "from_rank", "to_rank", "transport"} <= set(c), c
for f in j["findings"]:
    assert f["cause"] in ("nvlink_fallback", "net_fallback") and f["layer"] == "link", f
    assert f["node"] and f["evidence"] and f["summary"] and f["action"], f
PY
done
# The horovod RoCE cluster where ranks fell back to sockets; the A100 node with P2P off.
"$GPUWATCH" nccl "$FIXTURES/nccl/nccl224_horovod_mpirun_roce_34nics_nccl242.log" --json \
  | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["nccl_version"]=="2.4.2", j["nccl_version"]; assert "net_fallback" in [f["cause"] for f in j["findings"]], j["findings"]' \
  || fail "nccl224: no net_fallback"
"$GPUWATCH" nccl "$FIXTURES/nccl/nccl707_a100_ib_mixed_roce_p2p_loc_shm_disabled_gdr_fail.log" >"$TMP/707.txt" \
  || fail "nccl text view"
grep -q '^finding nvlink_fallback' "$TMP/707.txt" || { cat "$TMP/707.txt"; fail "nccl707: no nvlink_fallback"; }
"$GPUWATCH" nccl "$FIXTURES/nccl/synthetic_2node_shm_socket.log" \
  --topo "$FIXTURES/topo/nccltests307_8x4090_pix_switches_2numa_nic_bond.txt" --json >/dev/null \
  || fail "nccl --topo"
echo "link tools: OK"
