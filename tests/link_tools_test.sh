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

# gpuwatch linkbase (R12): a3mega imported twice (v1, v2, the second compared with the first),
# listed, nccl1453's poor run judged against it (degraded: exit 3), the run itself (ok: exit 0);
# unreadable or unusable input and a key without baselines exit 2. Exit codes are not read
# through pipes (pipefail would mask them).
LB="$TMP/linkbase"
KEY=ztan-mig-235z,ztan-mig-gq73
A3="$FIXTURES/nccltests/a3mega_2node_16x_h100_full_all_reduce_8B_8G.txt"
N1453="$FIXTURES/nccltests/nccl1453_h100_multinode_poor_perf_mpi_rank_prefixed_rows_partial.txt"
"$GPUWATCH" linkbase import "$A3" --dir "$LB" >"$TMP/lb1.txt" 2>"$TMP/lb1.err" \
  || { cat "$TMP/lb1.err"; fail "linkbase import"; }
grep -q "^stored $KEY / all_reduce_perf version 1 in " "$TMP/lb1.txt" || { cat "$TMP/lb1.txt"; fail "linkbase import: text"; }
[ -f "$LB/$KEY/all_reduce_perf/v1.json" ] || fail "linkbase import: no v1.json"
"$GPUWATCH" linkbase import "$A3" --dir "$LB" --json >"$TMP/lb2.json" 2>"$TMP/lb2.err" \
  || { cat "$TMP/lb2.err"; fail "linkbase import again"; }
python3 - "$TMP/lb2.json" <<'PY' || fail "linkbase import JSON contract"
import json, sys
j = json.load(open(sys.argv[1]))
assert set(j) == {"stored", "path", "previous", "comparison", "warnings"}, sorted(j)
s = j["stored"]
assert s["format"] == "gpuwatch-linkbase" and s["format_version"] == 1 and s["version"] == 2, s
assert s["key"] == "ztan-mig-235z,ztan-mig-gq73" and s["collective"] == "all_reduce_perf", s
assert s["ranks"] == 16 and s["nodes"] == 2 and s["gpu_model"] == "NVIDIA H100 80GB HBM3", s
assert len(s["points"]) == 31 and s["points"][-1] == {"size_bytes": 8589934592, "busbw_gbps": 338.82, "in_place_busbw_gbps": 337.35}, s["points"][-1]
assert j["path"].endswith("/all_reduce_perf/v2.json"), j["path"]
assert j["previous"]["version"] == 1, j["previous"]
c = j["comparison"]
assert c["verdict"] == "ok" and c["median_ratio"] == 1.0 and c["sizes_judged"] == 14, c
PY
"$GPUWATCH" linkbase show --dir "$LB" >"$TMP/show.txt" || fail "linkbase show"
grep -Eq "^$KEY +all_reduce_perf +2 +v2 .* 338\.82$" "$TMP/show.txt" || { cat "$TMP/show.txt"; fail "linkbase show: 2 versions"; }
"$GPUWATCH" linkbase show --dir "$LB" --json >"$TMP/show.json" || fail "linkbase show --json"
python3 - "$TMP/show.json" <<'PY' || fail "linkbase show JSON contract"
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["baselines"]) == 1 and j["problems"] == [], j
b = j["baselines"][0]
assert b["versions"] == 2 and b["latest_version"] == 2 and b["peak_busbw_gbps"] == 338.82, b
PY
rc=0
"$GPUWATCH" linkbase compare "$N1453" --name "$KEY" --dir "$LB" --json >"$TMP/cmp.json" 2>"$TMP/cmp.err" || rc=$?
[ "$rc" -eq 3 ] || { cat "$TMP/cmp.err"; fail "linkbase compare nccl1453: exit $rc, want 3 (degraded)"; }
python3 - "$TMP/cmp.json" <<'PY' || fail "linkbase compare JSON contract"
import json, sys
j = json.load(open(sys.argv[1]))
assert set(j) == {"key", "collective", "baseline", "run", "comparison", "warnings"}, sorted(j)
assert j["collective"] == "all_reduce_perf" and j["baseline"]["version"] == 2, j
c = j["comparison"]
assert c["verdict"] == "degraded" and c["sizes_judged"] == 10 and c["median_ratio"] < 0.8, c
assert c["worst"]["size_bytes"] == 268435456 and c["threshold_ratio"] == 0.8, c["worst"]
PY
"$GPUWATCH" linkbase compare "$A3" --dir "$LB" >"$TMP/cmp_ok.txt" 2>&1 || { cat "$TMP/cmp_ok.txt"; fail "linkbase compare of the baseline run"; }
grep -q '^verdict ok: median ratio 1.000' "$TMP/cmp_ok.txt" || { cat "$TMP/cmp_ok.txt"; fail "linkbase compare: text verdict"; }
[ ! -e "$LB/$KEY/all_reduce_perf/v3.json" ] || fail "linkbase compare stored a version"
rc=0
"$GPUWATCH" linkbase compare "$TMP/missing.txt" --dir "$LB" 2>"$TMP/lbm.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q 'cannot read .*missing.txt' "$TMP/lbm.err" || { cat "$TMP/lbm.err"; fail "linkbase: unreadable file: exit $rc"; }
rc=0
"$GPUWATCH" linkbase import "$TMP/garbage.txt" --dir "$LB" 2>"$TMP/lbg.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "garbage.txt: nccl-tests output: .*line 1 is 'nothing to see'" "$TMP/lbg.err" \
  || { cat "$TMP/lbg.err"; fail "linkbase: garbage: exit $rc or no clear message"; }
rc=0
"$GPUWATCH" linkbase compare "$N1453" --name other-nodes --dir "$LB" 2>"$TMP/lbn.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q 'no baseline for other-nodes' "$TMP/lbn.err" || { cat "$TMP/lbn.err"; fail "linkbase: no baseline: exit $rc"; }
"$GPUWATCH" linkbase show --data-dir "$TMP/dd" >"$TMP/dd.txt" || fail "linkbase show --data-dir"
grep -q "no link baselines under $TMP/dd/linkbase" "$TMP/dd.txt" || { cat "$TMP/dd.txt"; fail "linkbase: --data-dir default"; }
echo "link tools: OK"
