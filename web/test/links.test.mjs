// node --test web/test: rated bandwidth, shares of it, and degraded topology.
import test from "node:test";
import assert from "node:assert/strict";
import {
  byLabels, degradedTopology, nvlinkRated, nvlinkVersion, pcieRated, ratioToPercent, shareOfRated, throughputOf,
} from "../src/links.js";

test("rated bandwidth as the agent rates it", () => {
  assert.equal(pcieRated(5, 16), 3.938e9 * 16);
  assert.equal(pcieRated(4, 8), 1.969e9 * 8);
  assert.equal(pcieRated(9, 16), null);
  assert.equal(pcieRated(null, 16), null);
  assert.equal(pcieRated(5, 0), null);
  assert.equal(nvlinkRated(4, 18), 450e9);
  assert.equal(nvlinkRated(5, 18), 900e9);
  assert.equal(nvlinkRated(undefined, 18), null);
  assert.equal(nvlinkRated(4, 0), null);
});

test("throughput as a share of the bucket's rated bandwidth", () => {
  const thru = { step: 10, times: [0, 10], series: [{ metric: { gpu: "0", direction: "tx" }, min: [1e9, null], max: [4e9, 2e9], last: [2e9, 2e9] }] };
  const rated = (m, k) => (k === 0 ? 4e9 : null);
  assert.deepEqual(shareOfRated(thru, rated).series[0], { metric: { gpu: "0", direction: "tx" }, min: [25, null], max: [100, null], last: [50, null] });
  assert.deepEqual(ratioToPercent({ times: [0], series: [{ metric: {}, min: [0.5], max: ["NaN"], last: [null] }] }).series[0].min, [50]);
  const find = byLabels({ series: [{ metric: { gpu: "1", x: "a" }, last: [7] }] }, ["gpu"]);
  assert.deepEqual(find({ gpu: "1", direction: "rx" }).last, [7]);
  assert.equal(find({ gpu: "2" }), undefined);
});

test("degraded links: NVLinks down, narrow PCIe, fewer links than the best pair, ports down", () => {
  const snap = {
    gpus: [
      { index: 0, pcie_width: 16, pcie_max_width: 16, nvlinks: [{ active: true }, { active: true }] },
      { index: 1, pcie_width: 8, pcie_max_width: 16, pcie_gen: 1, pcie_max_gen: 5, nvlinks: [{ active: true }, { active: false }] },
    ],
    nics: [{ name: "mlx5_0", ports: [{ port: 1, state: "ACTIVE" }, { port: 2, state: "DOWN" }] }],
    matrix: { links: [["X", "NV1"], ["NV1", "X"]] },
  };
  const d = degradedTopology(snap);
  assert.deepEqual(d.gpus, { 1: ["1 of 2 NVLinks down", "PCIe x8 of x16"] });
  assert.deepEqual(d.nics, { mlx5_0: ["port 2 DOWN"] });
  assert.deepEqual(d.cells, {});
  const m = degradedTopology({ matrix: { links: [["X", "NV18", "NV17"], ["NV18", "X", "NV17"], ["NV17", "NV17", "X"]] } });
  assert.deepEqual(Object.keys(m.cells), ["0,2", "1,2", "2,0", "2,1"]);
  assert.deepEqual(degradedTopology(null), { gpus: {}, cells: {}, nics: {} });
});

test("throughput series picked from a mixed panel, counters as rates", () => {
  const p = {
    step: 10, times: [0, 10, 20],
    series: [
      { metric: { __name__: "tx_total", gpu: "0", Hostname: "n" }, min: [0, 100, 300], max: [0, 100, 300], last: [0, 100, 300] },
      { metric: { __name__: "links", gpu: "0", Hostname: "n" }, min: [18, 18, 18], max: [18, 18, 18], last: [18, 18, 18] },
    ],
  };
  const r = throughputOf(p, { tx_total: "tx" }, true);
  assert.deepEqual(r.series, [{ metric: { Hostname: "n", gpu: "0", direction: "tx" }, min: [null, 10, 20], max: [null, 10, 20], last: [null, 10, 20] }]);
  assert.equal(r.step, 10);
  assert.deepEqual(throughputOf(p, { links: "rx" }, false).series[0].last, [18, 18, 18]);
});

test("a GPU's NVLink generation from the topology snapshot", () => {
  const snap = { gpus: [{ index: 0, nvlinks: [{ active: true, version: 4 }, { active: false, version: 5 }] }, { index: 1, nvlinks: [] }] };
  assert.equal(nvlinkVersion(snap, "0"), 4);
  assert.equal(nvlinkVersion(snap, 1), null);
  assert.equal(nvlinkVersion(null, 0), null);
});
