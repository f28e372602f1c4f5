// node --test web/test: counter rates, increases and per-GPU counts from panel series.
import test from "node:test";
import assert from "node:assert/strict";
import { PALETTE, counterIncrease, counterRates, countsByGpu, everAboveZero, lastValue, seriesStyles } from "../src/series.js";

test("counter rates between buckets, across gaps and resets", () => {
  assert.deepEqual(counterRates([0, 10, 20, 30, 40], [100, 200, null, 400, 50]), [null, 10, null, 10, 5]);
  assert.deepEqual(counterRates([0, 10], [null, null]), [null, null]);
  // Samples taken at the buckets' ends; the range's end cuts the last bucket to 2 s.
  assert.deepEqual(counterRates([0, 10, 20], [0, 100, 120], 10, 22), [null, 10, 10]);
  assert.deepEqual(counterRates([0, 10, 20], [0, 100, 120], 10, 20), [null, 10, null]);
});

test("a counter's increase over the range, reset-aware", () => {
  assert.equal(counterIncrease({ min: [3, 5], max: [5, 9], last: [5, 9] }), 6);
  assert.equal(counterIncrease({ min: [null, 10], max: [null, 12], last: [null, 12] }), 2);
  assert.equal(counterIncrease({ min: [8, 2], max: [9, 4], last: [9, 4] }), 5);
  assert.equal(counterIncrease({ min: [null], max: [null], last: [null] }), null);
  assert.equal(lastValue({ last: [1, 2, null] }), 2);
  assert.equal(lastValue({ last: [null] }), null);
});

test("counts per GPU and name, XIDs by code", () => {
  const p = {
    series: [
      { metric: { __name__: "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu: "3" }, min: [0, 4], max: [0, 11], last: [0, 11] },
      { metric: { __name__: "gpuwatch_xid_errors_total", gpu: "1", xid: "94" }, min: [null, 1], max: [null, 2], last: [null, 2] },
      { metric: { __name__: "gpuwatch_xid_errors_total", gpu: "1", xid: "48" }, min: [1, 1], max: [1, 1], last: [1, 1] },
      { metric: { __name__: "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu: "1" }, min: [null, null], max: [null, null], last: [null, null] },
    ],
  };
  const c = countsByGpu(p);
  assert.deepEqual(c["3"].DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, { now: 11, inc: 11, parts: [] });
  assert.deepEqual(c["1"].gpuwatch_xid_errors_total, {
    now: 3, inc: 1, parts: [{ key: "48", now: 1, inc: 0 }, { key: "94", now: 2, inc: 1 }],
  });
  assert.deepEqual(c["1"].DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, { now: null, inc: null, parts: [] });
  assert.equal(everAboveZero(p.series[0]), true);
  assert.equal(everAboveZero(p.series[3]), false);
  assert.deepEqual(countsByGpu(null), {});
});

test("series styles: by GPU index on one node; on a hub, each node's GPUs apart, dashed past the palette", () => {
  const s = (metric) => ({ metric });
  // One node: GPU 3 has GPU 3's colour wherever it is drawn; a series without a GPU by position.
  assert.deepEqual(seriesStyles([s({ gpu: "3" }), s({ gpu: "0" }), s({ interface: "ib0" })]), [
    { color: PALETTE[3] }, { color: PALETTE[0] }, { color: PALETTE[2] },
  ]);
  // Two nodes, each with GPU 0 and 1, listed out of order: colours by node, then GPU.
  const hub = [s({ Hostname: "b", gpu: "0" }), s({ Hostname: "a", gpu: "1" }), s({ Hostname: "a", gpu: "0" }), s({ Hostname: "b", gpu: "1" })];
  assert.deepEqual(seriesStyles(hub).map((x) => x.color), [PALETTE[2], PALETTE[1], PALETTE[0], PALETTE[3]]);
  // Twelve GPUs on two nodes: none shares both colour and dash with another.
  const many = [];
  for (const node of ["n1", "n2"]) for (let g = 0; g < 6; g++) many.push(s({ Hostname: node, gpu: String(g) }));
  const styles = seriesStyles(many);
  assert.equal(new Set(styles.map((x) => x.color + (x.dash ? "-" : ""))).size, 12);
  assert.deepEqual(styles[8], { color: PALETTE[0], dash: [6, 3] });
});
