// node --test web/test: the view's filters as panel matchers and as event/finding scope.
import test from "node:test";
import assert from "node:assert/strict";
import { gpuMatchers, inGpuScope, inScope, jobMatchers, namesSelector, nodeMatchers, quote, reEscape, scopeOf, selector } from "../src/scope.js";

const JOBS = [
  { id: "a", user: "ana", gpus: [0, 1] },
  { id: "b", user: "bo", gpus: [2, 3] },
  { id: "c.1", user: "ana", gpus: [1, 6] },
];

test("selectors quote values and extend a name selector", () => {
  assert.equal(quote('x"y\\z'), '"x\\"y\\\\z"');
  assert.equal(selector("temp", []), "temp");
  assert.equal(selector("temp", [["Hostname", "=", "n1"], ["gpu", "=~", "0|1"]]), 'temp{Hostname="n1",gpu=~"0|1"}');
  assert.equal(namesSelector(["a_b", "c"]), '{__name__=~"a_b|c"}');
  assert.equal(selector(namesSelector(["a", "b"]), [["gpu", "=~", "2"]]), '{__name__=~"a|b",gpu=~"2"}');
  assert.equal(selector("x{}", [["gpu", "=", "2"]]), 'x{gpu="2"}');
  assert.equal(reEscape("c.1+(x)"), "c\\.1\\+\\(x\\)");
});

test("a job or user filter selects that job's GPUs; none selects nothing", () => {
  assert.deepEqual(scopeOf({}, JOBS), { gpus: null, jobs: null });
  assert.deepEqual(scopeOf({ node: "n1" }, JOBS), { gpus: null, jobs: null });
  assert.deepEqual(scopeOf({ job: "b" }, JOBS), { gpus: [2, 3], jobs: ["b"] });
  assert.deepEqual(scopeOf({ user: "ana" }, JOBS), { gpus: [0, 1, 6], jobs: ["a", "c.1"] });
  assert.deepEqual(scopeOf({ user: "ana", job: "b" }, JOBS), { gpus: [], jobs: [] });
  assert.deepEqual(scopeOf({ job: "gone" }, []), { gpus: [], jobs: [] });
});

test("GPU series match on gpu and Hostname, job series on job, never on job=gpuwatch", () => {
  const f = { node: "n1", user: "ana" };
  const s = scopeOf(f, JOBS);
  assert.deepEqual(gpuMatchers(f, s), [["Hostname", "=", "n1"], ["gpu", "=~", "0|1|6"]]);
  assert.deepEqual(jobMatchers(f, s), [["Hostname", "=", "n1"], ["job", "=~", "a|c\\.1"]]);
  assert.deepEqual(gpuMatchers({}, scopeOf({}, JOBS)), []);
  assert.equal(gpuMatchers({ job: "x" }, scopeOf({ job: "x" }, JOBS)), null);
  assert.equal(jobMatchers({ job: "x" }, scopeOf({ job: "x" }, JOBS)), null);
  assert.deepEqual(nodeMatchers({ node: "n2", job: "a" }), [["Hostname", "=", "n2"]]);
});

test("events and findings: the node's, the selected GPUs' and jobs', and node-wide ones", () => {
  const f = { node: "n1", job: "a" };
  const s = scopeOf(f, JOBS);
  assert.equal(inScope({ node: "n2", kind: "xid", gpu: 0 }, f, s), false);
  assert.equal(inScope({ node: "n1", kind: "xid", gpu: 0, job: "" }, f, s), true);
  assert.equal(inScope({ node: "n1", kind: "xid", gpu: 3 }, f, s), false);
  assert.equal(inScope({ node: "n1", kind: "job_start", job: "b" }, f, s), false);
  assert.equal(inScope({ node: "n1", kind: "checkpoint_start", job: "a" }, f, s), true);
  assert.equal(inScope({ node: "n1", kind: "driver_change", gpu: null }, f, s), true);
  assert.equal(inScope({ node: "n9", kind: "xid", gpu: 3 }, {}, scopeOf({}, JOBS)), true);
});

test("series of no GPU stay in a GPU scope", () => {
  const s = scopeOf({ job: "a" }, JOBS);
  assert.equal(inGpuScope({ gpu: "1" }, s), true);
  assert.equal(inGpuScope({ gpu: "2" }, s), false);
  assert.equal(inGpuScope({ interface: "eth0" }, s), true);
  assert.equal(inGpuScope({ gpu: "2" }, scopeOf({}, JOBS)), true);
});

test("a gpu filter narrows the GPUs to one and keeps the jobs", async () => {
  const { scopeOf: sc, inScope: ins } = await import("../src/scope.js");
  const jobs = [{ id: "a", user: "ana", gpus: [0, 1] }, { id: "b", user: "bo", gpus: [2, 3] }];
  assert.deepEqual(sc({ gpu: "3" }, jobs), { gpus: [3], jobs: null });
  assert.deepEqual(sc({ gpu: "3", job: "b" }, jobs), { gpus: [3], jobs: ["b"] });
  assert.deepEqual(sc({ gpu: "3", job: "a" }, jobs), { gpus: [], jobs: ["a"] });
  const s = sc({ gpu: "3" }, jobs);
  assert.equal(ins({ gpu: 3 }, { gpu: "3" }, s), true);
  assert.equal(ins({ gpu: 2 }, { gpu: "3" }, s), false);
  assert.equal(ins({ job: "a" }, { gpu: "3" }, s), true);
});
