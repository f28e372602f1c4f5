// node --test web/test: the Accounting screen's rows and quota bars from the API's answer
// (GET /api/v1/accounting; src/accounting/report_format.cc writes these keys).
import test from "node:test";
import assert from "node:assert/strict";
import { accountingRows, accountingUrl, fmtGpuHours, fmtWait, quotaBars } from "../src/accounting.js";

const row = (over) => ({
  key: "nlp", jobs: 3, attempts: 4, reruns: 1, succeeded: 2, failed: 1, ended_unknown: 0, running: 0,
  gpu_hours: 12, measured_gpu_hours: 10, idle_gpu_hours: 1, busywait_gpu_hours: 4,
  queue_waits: 2, queue_wait_s_mean: 300, cost_usd: 30, unpriced_gpu_hours: 0, ...over,
});

test("the URL keeps to the groupings and periods the screen offers", () => {
  assert.equal(accountingUrl("user", "7d"), "/api/v1/accounting?by=user&since=7d");
  assert.equal(accountingUrl("nonsense", "1y"), "/api/v1/accounting?by=project&since=30d");
});

test("rows: idle and busy-waiting as shares of the measured time, largest GPU-hours first", () => {
  const doc = { by: "project", rows: [row({ key: "cv", gpu_hours: 1, measured_gpu_hours: 0, idle_gpu_hours: 0, busywait_gpu_hours: 0 }), row()] };
  const [nlp, cv] = accountingRows(doc);
  assert.equal(nlp.key, "nlp");
  assert.equal(nlp.idle, 0.1);
  assert.equal(nlp.busywait, 0.4);
  assert.equal(nlp.idleText, "1.00 (10 %)");
  assert.equal(nlp.busywaitText, "4.00 (40 %)");
  assert.equal(nlp.wasteful, true);  // 50 % of the measured time did nothing useful
  assert.equal(nlp.successRate, "67 %");
  assert.equal(nlp.outcome, "2 ok · 1 failed");
  assert.equal(nlp.queueWait, "5 min");
  assert.equal(nlp.cost, "$30.00");
  // Never sampled (a job on a node the agent did not see): no share is claimed.
  assert.equal(cv.idle, null);
  assert.equal(cv.idleText, "not measured");
  assert.equal(cv.wasteful, false);
  assert.equal(cv.queueWait, "5 min");
});

test("rows: no project is '(none)'; unpriced GPUs say so; running and unknown outcomes show", () => {
  const [r] = accountingRows({ by: "project", rows: [row({ key: "", cost_usd: 0, unpriced_gpu_hours: 12, running: 1, ended_unknown: 2, succeeded: 0, failed: 0, queue_waits: 0 })] });
  assert.equal(r.key, "(none)");
  assert.equal(r.rawKey, "");
  assert.equal(r.cost, "unpriced");
  assert.equal(r.outcome, "0 ok · 0 failed · 1 running · 2 unknown");
  assert.equal(r.successRate, "–");
  assert.equal(r.queueWait, "–");
});

test("job rows follow the view's job and user filters", () => {
  const doc = { by: "job", rows: [row({ key: "1", user: "alice", state: "succeeded" }), row({ key: "2", user: "bob", state: "failed" })] };
  assert.deepEqual(accountingRows(doc, { user: "bob" }).map((r) => r.key), ["2"]);
  assert.deepEqual(accountingRows(doc, { job: "1" }).map((r) => r.key), ["1"]);
  assert.equal(accountingRows(doc)[0].user, "alice");
  assert.deepEqual(accountingRows({ by: "user", rows: [row({ key: "alice" }), row({ key: "bob" })] }, { user: "bob" }).map((r) => r.key), ["bob"]);
  assert.deepEqual(accountingRows(null), []);
});

test("quota bars: the used share, capped for the bar, with the period in days", () => {
  const bars = quotaBars({ quotas: [
    { project: "nlp", gpu_hours: 100, period_s: 2592000, used_gpu_hours: 150, state: "exceeded" },
    { project: "cv", gpu_hours: 100, period_s: 86400, used_gpu_hours: 85, state: "warning" },
  ] });
  assert.deepEqual(bars[0], { project: "nlp", state: "exceeded", width: 100, text: "150.0 of 100.0 GPU-hours in 30 d (150 %)" });
  assert.equal(bars[1].width, 85);
  assert.equal(bars[1].text, "85.0 of 100.0 GPU-hours in 1 d (85 %)");
});

test("formats", () => {
  assert.equal(fmtGpuHours(0.0041), "0.004");
  assert.equal(fmtGpuHours(1234.4), "1,234");
  assert.equal(fmtGpuHours(undefined), "–");
  assert.equal(fmtWait(30), "30 s");
  assert.equal(fmtWait(7200), "2.0 h");
  assert.equal(fmtWait(3 * 86400), "3.0 d");
});
