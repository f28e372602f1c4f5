// node --test web/test: zoom, filters and the SIMULATED flag in the view's URL.
import test from "node:test";
import assert from "node:assert/strict";
import {
  filterParams, filtersOf, formatHash, isSimulated, parseHash, rangeParams, timeRange, zoomOutParams, zoomParams,
} from "../src/view_state.js";

test("a drag's selection becomes a fixed range in whole seconds, filters kept", () => {
  const p = { range: "6h", node: "n1", job: "train-7", user: "ana", junk: "x" };
  assert.deepEqual(zoomParams(p, 1000.7, 1100.2), { node: "n1", job: "train-7", user: "ana", from: "1000", to: "1101" });
  assert.deepEqual(zoomParams(p, 1100, 1000), { node: "n1", job: "train-7", user: "ana", from: "1000", to: "1100" });
  assert.deepEqual(timeRange(zoomParams({}, 50, 80), 999), { start: 50, end: 80, live: false });
});

test("a selection narrower than 10 s is a click, not a zoom", () => {
  assert.equal(zoomParams({}, 100, 105), null);
  assert.equal(zoomParams({}, 100, NaN), null);
});

test("a range button leaves the zoom and keeps the filters", () => {
  assert.deepEqual(rangeParams({ from: "1", to: "2", node: "n1" }, "15m"), { node: "n1", range: "15m" });
});

test("zooming out doubles the span around its centre, never past now", () => {
  assert.deepEqual(zoomOutParams({ from: "1000", to: "1100", job: "j" }, 5000), { job: "j", from: "950", to: "1150" });
  assert.deepEqual(zoomOutParams({ from: "4900", to: "5000" }, 5000), { from: "4800", to: "5000" });
  assert.deepEqual(zoomOutParams({ range: "15m" }, 10000), { from: "8200", to: "10000" });
});

test("filters are set and cleared in the URL and round-trip", () => {
  let p = filterParams({ range: "1h" }, "job", "train 7/a");
  p = filterParams(p, "user", "ana");
  const v = parseHash(formatHash({ screen: "health", arg: "", params: p }));
  assert.deepEqual(v, { screen: "health", arg: "", params: { range: "1h", job: "train 7/a", user: "ana" } });
  assert.deepEqual(filtersOf(filterParams(v.params, "job", "")), { user: "ana" });
});

test("simulated only when an answer says so; a missing field is real", () => {
  assert.equal(isSimulated({ hostname: "n" }, null), false);
  assert.equal(isSimulated({ simulated: false }, { simulated: "true" }), false);
  assert.equal(isSimulated(undefined, { simulated: true }), true);
});
