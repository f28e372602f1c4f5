// A job's per-rank series (gpuwatch_job_*, docs/metrics.md) folded into one series per job, and
// the rest of what #/jobs draws: pure functions over panel answers (GET /api/v1/panel).
import { num } from "./view_state.js";

// The job tier's window (--job-interval, docs/metrics.md): job series have a sample every 15 s, so
// a chart asks for buckets no narrower than that, and its lines span the gaps between samples.
export const JOB_INTERVAL_S = 15;

// The width to ask a panel for: the chart's pixels, but no more buckets than the job tier has
// samples in the range.
export const jobPanelWidth = (range, px) => Math.max(1, Math.min(px, Math.floor((range.end - range.start) / JOB_INTERVAL_S)));

// How ranks fold into a job, per bucket and field (min, max, last):
// - samples/s: the sum over ranks (each rank trains on its own samples);
// - it/s: the minimum over ranks (a synchronous job steps at its slowest rank's pace);
// - step-time quantiles: the maximum over ranks (the slowest rank is the job's step);
// - data-wait, comm and checkpoint shares: the mean over ranks.
export const FOLD = {
  sum: (xs) => xs.reduce((a, b) => a + b, 0),
  min: (xs) => Math.min(...xs),
  max: (xs) => Math.max(...xs),
  mean: (xs) => xs.reduce((a, b) => a + b, 0) / xs.length,
};

// One series from several of the same buckets: per bucket and field, `how` over the ranks that
// have a finite value there (null where none has).
export function foldSeries(series, buckets, how, metric = {}) {
  const f = FOLD[how];
  const field = (name) => {
    const out = new Array(buckets).fill(null);
    for (let k = 0; k < buckets; k++) {
      const xs = [];
      for (const s of series) {
        const v = num(s[name][k]);
        if (v !== null && Number.isFinite(v)) xs.push(v);
      }
      if (xs.length) out[k] = f(xs);
    }
    return out;
  };
  return { metric, min: field("min"), max: field("max"), last: field("last") };
}

// The series of a panel named `name` (and, optionally, matching `extra` labels).
export const named = (panel, name, extra = {}) =>
  panel.series.filter((s) => s.metric.__name__ === name && Object.entries(extra).every(([k, v]) => s.metric[k] === v));

// A panel-shaped answer ({times, step, range, series}) of the given series.
export const asPanel = (panel, series) => ({ times: panel.times, step: panel.step, range: panel.range, series });

const QUANTILES = [["0.5", "p50"], ["0.95", "p95"], ["0.99", "p99"]];

// The step-time chart of one job: the quantiles' maximum over ranks as bands (p50–p95 shaded
// under the p50 line, p95–p99 under the p99 line, p95 a line of its own) and the template's
// baseline, median..p99, as a grey band across the range. `metric.q` names each for the legend.
export function stepBands(panel, baseline) {
  const n = panel.times.length;
  const q = {};
  for (const [v, name] of QUANTILES) {
    const list = named(panel, "gpuwatch_job_step_seconds", { quantile: v });
    if (list.length) q[name] = foldSeries(list, n, "max").last;
  }
  const series = [];
  if (q.p50) series.push({ metric: { q: "p50" }, min: q.p50, max: q.p95 || q.p50, last: q.p50 });
  if (q.p95) series.push({ metric: { q: "p95" }, min: q.p95, max: q.p95, last: q.p95 });
  if (q.p99) series.push({ metric: { q: "p99" }, min: q.p95 || q.p99, max: q.p99, last: q.p99 });
  if (series.length && baseline && Number.isFinite(baseline.step_median_s)) {
    const lo = baseline.step_median_s, hi = Number.isFinite(baseline.step_p99_s) ? baseline.step_p99_s : lo;
    series.push({ metric: { q: "baseline" }, min: new Array(n).fill(lo), max: new Array(n).fill(hi), last: new Array(n).fill(lo) });
  }
  return asPanel(panel, series);
}

// Throughput of one job: samples/s summed over ranks, it/s the slowest rank's.
export function throughput(panel) {
  const n = panel.times.length;
  const out = {};
  const sps = named(panel, "gpuwatch_job_samples_per_second");
  const ips = named(panel, "gpuwatch_job_iterations_per_second");
  out.samples = asPanel(panel, sps.length ? [foldSeries(sps, n, "sum", { q: "samples/s" })] : []);
  out.iterations = asPanel(panel, ips.length ? [foldSeries(ips, n, "min", { q: "it/s" })] : []);
  return out;
}

// The shares of step time (0..1 → %), each the mean over ranks.
export const SHARES = [
  ["gpuwatch_job_data_wait_ratio", "data wait"],
  ["gpuwatch_job_comm_ratio", "comm"],
  ["gpuwatch_job_checkpoint_ratio", "checkpoint"],
];
export function shares(panel) {
  const n = panel.times.length;
  const pct = (a) => a.map((v) => (v === null ? null : 100 * v));
  const series = [];
  for (const [name, label] of SHARES) {
    const list = named(panel, name);
    if (!list.length) continue;
    const s = foldSeries(list, n, "mean", { q: label });
    series.push({ metric: s.metric, min: pct(s.min), max: pct(s.max), last: pct(s.last) });
  }
  return asPanel(panel, series);
}

// The newest value of a folded series, for a table cell.
export function newest(arr) {
  for (let k = (arr || []).length - 1; k >= 0; k--) if (arr[k] !== null && Number.isFinite(arr[k])) return arr[k];
  return null;
}
