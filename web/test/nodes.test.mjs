// node --test web/test: a hub's node list (nodes.js) and GPUs named across nodes (series.js,
// memory.js). The node documents have the shape HubIngest::NodesJson writes.
import test from "node:test";
import assert from "node:assert/strict";
import { fmtAgo, healthCounts, nodeRows } from "../src/nodes.js";
import { byGpuKey, countsByGpu, gpuKeyName, gpuNaming } from "../src/series.js";
import { memoryRows } from "../src/memory.js";

const NOW_MS = 1_800_000_000_000;
const node = (name, health, lastPushAgoS, extra = {}) => ({
  node: name, health, reason: health === "healthy" ? "no open card or link finding" : "xid on GPU 3: XID 79",
  last_push_ms: lastPushAgoS === null ? 0 : NOW_MS - lastPushAgoS * 1000, gpus: 8,
  driver_version: "550.90.07", cuda_version: "12.4", nccl_version: "", clock_offset_ms: null, ...extra,
});

test("nodes are listed worst first, then by name, with how long since each was heard", () => {
  const rows = nodeRows({ nodes: [
    node("n3", "healthy", 1), node("n1", "healthy", 2), node("n2", "drain_recommended", 4),
    node("n4", "degraded", 200, { clock_offset_ms: -12.25 }), node("n5", "healthy", null),
  ] }, NOW_MS);
  assert.deepEqual(rows.map((r) => r.node), ["n2", "n4", "n1", "n3", "n5"]);
  assert.equal(rows[0].healthText, "drain recommended");
  assert.equal(rows[0].reason, "xid on GPU 3: XID 79");
  assert.equal(rows[0].versions, "driver 550.90.07 · CUDA 12.4");  // no NCCL seen: left out
  assert.equal(rows[1].clockOffsetMs, -12.25);
  assert.equal(rows[1].silentS, 200);
  assert.equal(rows[4].silentS, null);  // never pushed
  assert.deepEqual(healthCounts(rows), { drain_recommended: 1, degraded: 1, healthy: 3 });
  assert.deepEqual(nodeRows(null, NOW_MS), []);
});

test("silences read in seconds, minutes or hours", () => {
  assert.equal(fmtAgo(null), "never");
  assert.equal(fmtAgo(4.4), "4 s ago");
  assert.equal(fmtAgo(200), "3 min ago");
  assert.equal(fmtAgo(9000), "2.5 h ago");
});

const S = (metric, last) => ({ metric, min: last, max: last, last });

test("one node's GPUs are named by index; several nodes' by node and index", () => {
  const one = gpuNaming([S({ Hostname: "a", gpu: "0" }, [1]), S({ Hostname: "a", gpu: "1" }, [1])]);
  assert.equal(one.multi, false);
  assert.equal(one.key({ Hostname: "a", gpu: "1" }), "1");
  assert.equal(one.name({ Hostname: "a", gpu: "1" }), "GPU 1");
  const fleet = gpuNaming([S({ Hostname: "b", gpu: "0" }, [1]), S({ Hostname: "a", gpu: "0" }, [1])]);
  assert.equal(fleet.multi, true);
  assert.equal(fleet.key({ Hostname: "b", gpu: "0" }), "b/0");
  assert.equal(fleet.name({ Hostname: "b", gpu: "0" }), "b GPU 0");
  assert.equal(gpuKeyName("b/0"), "b GPU 0");
  assert.equal(gpuKeyName("3"), "GPU 3");
  assert.deepEqual(["b/0", "a/10", "a/2"].sort(byGpuKey), ["a/2", "a/10", "b/0"]);
  assert.deepEqual(["10", "2"].sort(byGpuKey), ["2", "10"]);
});

test("memory rows and error counts keep each node's GPU 0 apart", () => {
  const panel = { times: [0], step: 60, series: [
    S({ __name__: "DCGM_FI_DEV_FB_USED", Hostname: "b", gpu: "0" }, [1000]),
    S({ __name__: "DCGM_FI_DEV_FB_TOTAL", Hostname: "b", gpu: "0" }, [80000]),
    S({ __name__: "DCGM_FI_DEV_FB_USED", Hostname: "a", gpu: "0" }, [70000]),
    S({ __name__: "DCGM_FI_DEV_FB_TOTAL", Hostname: "a", gpu: "0" }, [80000]),
  ] };
  const rows = memoryRows(panel);
  assert.deepEqual(rows.map((r) => [r.key, r.name, r.gpu, r.now, r.headroom]),
    [["a/0", "a GPU 0", 0, 70000, 10000], ["b/0", "b GPU 0", 0, 1000, 79000]]);
  const counts = countsByGpu({ series: [
    S({ __name__: "DCGM_FI_DEV_XID_ERRORS", Hostname: "a", gpu: "0" }, [79]),
    S({ __name__: "DCGM_FI_DEV_XID_ERRORS", Hostname: "b", gpu: "0" }, [0]),
  ] });
  assert.deepEqual(Object.keys(counts).sort(), ["a/0", "b/0"]);
  assert.equal(counts["a/0"].DCGM_FI_DEV_XID_ERRORS.now, 79);
  assert.equal(counts["b/0"].DCGM_FI_DEV_XID_ERRORS.now, 0);
});
