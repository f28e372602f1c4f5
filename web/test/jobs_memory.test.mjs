// node --test web/test: ranks folded into jobs (jobs.js) and memory headroom and OOM (memory.js).
import test from "node:test";
import assert from "node:assert/strict";
import { foldSeries, jobPanelWidth, shares, stepBands, throughput } from "../src/jobs.js";
import { linearFit, memoryRows, oomEstimate } from "../src/memory.js";

const S = (metric, last) => ({ metric, min: last, max: last, last });

test("job panels ask for no buckets narrower than the job tier's 15 s", () => {
  assert.equal(jobPanelWidth({ start: 0, end: 900 }, 1500), 60);
  assert.equal(jobPanelWidth({ start: 0, end: 86400 }, 1500), 1500);
  assert.equal(jobPanelWidth({ start: 0, end: 5 }, 1500), 1);
});

test("ranks fold per bucket over those that have a value", () => {
  const a = S({}, [1, null, 3]), b = S({}, [2, null, "NaN"]);
  assert.deepEqual(foldSeries([a, b], 3, "sum").last, [3, null, 3]);
  assert.deepEqual(foldSeries([a, b], 3, "max").last, [2, null, 3]);
  assert.deepEqual(foldSeries([a, b], 3, "mean").last, [1.5, null, 3]);
});

test("throughput, step-time bands with the baseline, and shares", () => {
  const p = { times: [0, 15], step: 15, range: { start: 0, end: 30 }, series: [
    S({ __name__: "gpuwatch_job_samples_per_second", rank: "0" }, [100, 110]),
    S({ __name__: "gpuwatch_job_samples_per_second", rank: "1" }, [90, 100]),
    S({ __name__: "gpuwatch_job_iterations_per_second", rank: "0" }, [1, 1.1]),
    S({ __name__: "gpuwatch_job_iterations_per_second", rank: "1" }, [0.9, 1.0]),
    S({ __name__: "gpuwatch_job_step_seconds", rank: "0", quantile: "0.5" }, [1.0, 1.0]),
    S({ __name__: "gpuwatch_job_step_seconds", rank: "1", quantile: "0.5" }, [1.2, 0.9]),
    S({ __name__: "gpuwatch_job_step_seconds", rank: "0", quantile: "0.95" }, [1.5, 1.4]),
    S({ __name__: "gpuwatch_job_step_seconds", rank: "0", quantile: "0.99" }, [2.0, 1.8]),
    S({ __name__: "gpuwatch_job_comm_ratio", rank: "0" }, [0.1, 0.2]),
    S({ __name__: "gpuwatch_job_comm_ratio", rank: "1" }, [0.3, 0.2]),
  ] };
  const t = throughput(p);
  assert.deepEqual(t.samples.series[0].last, [190, 210]);
  assert.deepEqual(t.iterations.series[0].last, [0.9, 1.0]);
  const b = stepBands(p, { step_median_s: 1.1, step_p99_s: 1.6 });
  assert.deepEqual(b.series.map((s) => s.metric.q), ["p50", "p95", "p99", "baseline"]);
  assert.deepEqual(b.series[0], { metric: { q: "p50" }, min: [1.2, 1.0], max: [1.5, 1.4], last: [1.2, 1.0] });
  assert.deepEqual(b.series[2].min, [1.5, 1.4]);
  assert.deepEqual(b.series[3].min, [1.1, 1.1]);
  assert.deepEqual(b.series[3].max, [1.6, 1.6]);
  assert.deepEqual(stepBands(p, null).series.map((s) => s.metric.q), ["p50", "p95", "p99"]);
  const sh = shares(p);
  assert.deepEqual(sh.series.map((s) => s.metric.q), ["comm"]);
  assert.deepEqual(sh.series[0].last.map((v) => +v.toFixed(6)), [20, 20]);
});

test("OOM: the trend of the last quarter reaches the total; none when flat or no total", () => {
  assert.equal(linearFit([[0, 1]]), null);
  assert.equal(linearFit([[0, 1], [2, 5]]).slope, 2);
  const times = Array.from({ length: 100 }, (_, k) => k * 10);
  const growing = times.map((t) => 1000 + t);  // 1 MiB/s
  assert.equal(oomEstimate(times, growing, 5000, { start: 0, end: 1000 }), 4000);
  const flat = times.map(() => 3000);
  assert.equal(oomEstimate(times, flat, 5000, { start: 0, end: 1000 }), null);
  // A ramp at the job's start, flat since: not growing.
  const ramp = times.map((t) => (t < 600 ? null : Math.min(3000, (t - 600) * 30)));
  assert.equal(oomEstimate(times, ramp, 5000, { start: 0, end: 1000 }), null);
  assert.equal(oomEstimate(times, growing, 0, { start: 0, end: 1000 }), null);
});

test("memory rows: now, peak, total (or used + free), headroom", () => {
  const p = { times: [0, 10], range: { start: 0, end: 20 }, series: [
    { metric: { __name__: "DCGM_FI_DEV_FB_USED", gpu: "1" }, min: [10, 20], max: [50, 30], last: [40, 30] },
    { metric: { __name__: "DCGM_FI_DEV_FB_TOTAL", gpu: "1" }, min: [100, 100], max: [100, 100], last: [100, 100] },
    { metric: { __name__: "DCGM_FI_DEV_FB_USED", gpu: "0" }, min: [5, 5], max: [5, 5], last: [5, 5] },
    { metric: { __name__: "DCGM_FI_DEV_FB_FREE", gpu: "0" }, min: [95, 95], max: [95, 95], last: [95, 95] },
  ] };
  assert.deepEqual(memoryRows(p), [
    { key: "0", name: "GPU 0", gpu: 0, now: 5, peak: 5, total: 100, headroom: 95, oom: null },
    { key: "1", name: "GPU 1", gpu: 1, now: 30, peak: 50, total: 100, headroom: 50, oom: null },
  ]);
});
