// node --test web/test: the view state the dashboard keeps in its URL.
import test from "node:test";
import assert from "node:assert/strict";
import { formatHash, num, panelUrl, parseHash, timeRange } from "../src/view_state.js";

test("a hash round-trips through parse and format", () => {
  const v = parseHash("#/job/train-7?range=6h&node=n1");
  assert.deepEqual(v, { screen: "job", arg: "train-7", params: { range: "6h", node: "n1" } });
  assert.equal(formatHash(v), "#/job/train-7?range=6h&node=n1");
  assert.equal(parseHash("").screen, "gpus");
});

test("relative ranges follow the clock, fixed ones do not", () => {
  assert.deepEqual(timeRange({ range: "15m" }, 1000), { start: 100, end: 1000, live: true });
  assert.deepEqual(timeRange({}, 7200), { start: 3600, end: 7200, live: true });
  assert.deepEqual(timeRange({ from: "10", to: "20" }, 99), { start: 10, end: 20, live: false });
});

test("panel URLs carry whole seconds and a bounded width", () => {
  const u = new URL(panelUrl('util{gpu="0"}', { start: 10.7, end: 20.2 }, 20000), "http://x");
  assert.equal(u.pathname, "/api/v1/panel");
  assert.equal(u.searchParams.get("match"), 'util{gpu="0"}');
  assert.equal(u.searchParams.get("start"), "10");
  assert.equal(u.searchParams.get("end"), "21");
  assert.equal(u.searchParams.get("width"), "10000");
});

test("panel values: numbers, null and the non-finite strings", () => {
  assert.equal(num(3), 3);
  assert.equal(num(null), null);
  assert.equal(num("+Inf"), Infinity);
  assert.equal(num("-Inf"), -Infinity);
  assert.ok(Number.isNaN(num("NaN")));
});
