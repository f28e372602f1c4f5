// node --test web/test: throttle reasons as intervals on the time axis.
import test from "node:test";
import assert from "node:assert/strict";
import { intervalsFromMasks, masksFromBitmask, reasonNames, throttleIntervals } from "../src/throttle.js";

test("NVML mask bits are named as the agent names them", () => {
  assert.deepEqual(reasonNames(0x24), ["sw_power_cap", "sw_thermal"]);
  assert.deepEqual(reasonNames(0x1c3), ["idle", "app_clocks", "hw_thermal", "hw_power_brake", "display_clocks"]);
  assert.deepEqual(reasonNames(0), []);
});

test("a bucket's bits are the union of its min, max and last", () => {
  const s = { min: [0, 4, null, "NaN"], max: [32, 4, null, 8], last: [0, 4, null, null] };
  assert.deepEqual(masksFromBitmask(s), [32, 4, 0, 8]);
});

test("runs of buckets become [start, end) intervals; settings are not shaded", () => {
  const times = [100, 110, 120, 130, 140];
  const masks = [0x1, 0x24, 0x24, 0x4, 0x20];
  assert.deepEqual(intervalsFromMasks(times, 10, masks, 2), [
    { gpu: 2, reason: "sw_power_cap", start: 110, end: 140 },
    { gpu: 2, reason: "sw_thermal", start: 110, end: 130 },
    { gpu: 2, reason: "sw_thermal", start: 140, end: 150 },
  ]);
});

test("per-reason series are preferred to the bit mask, and a one-sample spike shows", () => {
  const times = [0, 60, 120];
  const bitmask = { step: 60, times, series: [{ metric: { gpu: "0" }, min: [0, 0, 0], max: [0, 0, 0], last: [0, 0, 0] }] };
  const reasons = {
    step: 60, times,
    series: [
      { metric: { gpu: "0", reason: "hw_slowdown" }, min: [0, 0, 0], max: [0, 1, 0], last: [0, 0, 0] },
      { metric: { gpu: "1", reason: "idle" }, min: [1, 1, 1], max: [1, 1, 1], last: [1, 1, 1] },
      { metric: { gpu: "1", reason: "hw_thermal" }, min: [0, 0, null], max: [1, 0, null], last: [0, 0, null] },
    ],
  };
  assert.deepEqual(throttleIntervals(bitmask, reasons), [
    { gpu: 1, reason: "hw_thermal", start: 0, end: 60 },
    { gpu: 0, reason: "hw_slowdown", start: 60, end: 120 },
  ]);
  assert.deepEqual(throttleIntervals(bitmask, { ...reasons, series: [] }), []);
  const bm = { step: 60, times, series: [{ metric: { gpu: "3" }, min: [4, 0, 0], max: [4, 0, 0], last: [4, 0, 0] }] };
  assert.deepEqual(throttleIntervals(bm, null), [{ gpu: 3, reason: "sw_power_cap", start: 0, end: 60 }]);
});
