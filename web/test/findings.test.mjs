// node --test web/test: where a finding's evidence is (screen, GPU, range) and its runbook entry.
import test from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { CAUSES, PAD_S, findingHref, findingView, mergeFindings, runbookAnchor, runbookRef } from "../src/findings.js";
import { parseHash, timeRange } from "../src/view_state.js";

const RUNBOOK = new URL("../../docs/runbook.md", import.meta.url);

test("every cause of the runbook has a screen and its section's anchor", () => {
  const heads = [...fs.readFileSync(RUNBOOK, "utf8").matchAll(/^### (\d+)\. `([a-z_]+)`/gm)].map((m) => [m[1] + "-" + m[2], m[2]]);
  assert.equal(heads.length, 26);
  assert.deepEqual(CAUSES.map(([c]) => c), heads.map(([, c]) => c));
  for (const [anchor, cause] of heads) assert.equal(runbookAnchor(cause), anchor);
  assert.equal(runbookRef("xid"), "docs/runbook.md#13-xid");
  assert.equal(runbookRef("no_such_cause"), "docs/runbook.md");
});

test("the screen follows the cause's layer", () => {
  const screen = (f) => {
    const v = findingView({ first_seen: 1000, last_seen: 1100, ...f }, {}, 5000);
    return v.screen + (v.arg ? "/" + v.arg : "");
  };
  for (const c of ["xid", "gpu_lost", "ecc_dbe", "ecc_sbe_growth", "thermal_throttle", "power_throttle", "clock_slowdown"])
    assert.equal(screen({ cause: c, gpu: 1 }), "health", c);
  for (const c of ["nvlink_errors", "nvlink_fallback", "pcie_downgrade", "pcie_replay", "net_errors", "net_congestion", "net_fallback", "topology_change"])
    assert.equal(screen({ cause: c }), "links", c);
  for (const c of ["straggler_gpu", "gpu_idle_allocated", "memory_leak"]) assert.equal(screen({ cause: c, gpu: 2 }), "gpus", c);
  for (const c of ["data_stall", "checkpoint_stall", "job_hang", "rank_exit", "step_regression"]) {
    assert.equal(screen({ cause: c, job: "j 7" }), "job/j 7", c);
    assert.equal(screen({ cause: c }), "jobs", c);
  }
});

test("the link carries the GPU and a fixed range around first_seen..last_seen", () => {
  const f = { cause: "xid", gpu: 3, first_seen: 1796237844.0, last_seen: 1796237900.5 };
  const href = findingHref(f, { range: "15m", node: "n1", job: "x" }, 1796239000);
  const v = parseHash(href);
  assert.equal(v.screen, "health");
  assert.deepEqual(v.params, { node: "n1", gpu: "3", from: String(1796237844 - PAD_S), to: String(1796237901 + PAD_S) });
  const r = timeRange(v.params, 0);
  assert.ok(!r.live && r.start <= f.first_seen && f.last_seen <= r.end);
  // Never padded past now, but never short of last_seen.
  assert.equal(findingView(f, {}, 1796237950).params.to, "1796237950");
  assert.equal(findingView(f, {}, 1796237000).params.to, "1796237901");
  // No GPU: no gpu parameter.
  assert.equal(findingView({ cause: "net_errors", first_seen: 10, last_seen: 20 }, {}, 99).params.gpu, undefined);
});

test("open, silenced and resolved, from findings and alerts, one per place", () => {
  const live = [{ cause: "xid", node: "n", gpu: 3, last_seen: 50 }, { cause: "data_stall", node: "n", job: "j", last_seen: 40 }];
  const alerts = [
    { cause: "xid", node: "n", gpu: 3, status: "firing", suppressed_by: "", last_seen: 50 },
    { cause: "data_stall", node: "n", job: "j", status: "firing", suppressed_by: "silence s1", last_seen: 40 },
    { cause: "gpu_lost", node: "n", gpu: 1, status: "resolved", suppressed_by: "", last_seen: 10 },
    { cause: "ecc_dbe", node: "n", gpu: 2, status: "resolved", suppressed_by: "", last_seen: 30 },
  ];
  const m = mergeFindings(live, alerts);
  assert.deepEqual(m.map((x) => [x.cause, x.status, x.why]), [
    ["xid", "open", ""], ["data_stall", "silenced", "silence s1"], ["ecc_dbe", "resolved", ""], ["gpu_lost", "resolved", ""]]);
  assert.deepEqual(mergeFindings(live, []).map((x) => x.status), ["open", "open"]);
  assert.deepEqual(mergeFindings(undefined, undefined), []);
});
