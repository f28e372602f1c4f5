// GPU memory against its peak and total: headroom over the range and when the trend reaches
// the total (the OOM estimate). Pure functions over panel answers (GET /api/v1/panel).
import { num } from "./view_state.js";
import { byGpuKey, gpuNaming, lastValue } from "./series.js";

// The share of the range the trend is fitted on: its last quarter, recent enough to follow a
// leak, long enough not to follow one step's allocation.
export const TREND_SHARE = 0.25;
// Slower growth than this (MiB/s) is no growth: ~3.6 GiB a day would not reach an 80 GB card's
// total within the ranges the page shows.
export const MIN_GROWTH_MIB_PER_S = 0.01;

// Least-squares line through (t, v) points: {slope, at(t)}; null under two distinct times.
export function linearFit(points) {
  const n = points.length;
  if (n < 2) return null;
  const mt = points.reduce((a, p) => a + p[0], 0) / n, mv = points.reduce((a, p) => a + p[1], 0) / n;
  let sxx = 0, sxv = 0;
  for (const [t, v] of points) {
    sxx += (t - mt) * (t - mt);
    sxv += (t - mt) * (v - mv);
  }
  if (!(sxx > 0)) return null;
  const slope = sxv / sxx;
  return { slope, at: (t) => mv + slope * (t - mt) };
}

// When memory reaches `total` (Unix seconds) on the linear trend of the last TREND_SHARE of the
// range's `last` values (of the part of the range that holds samples, so a job that started in
// it is judged on its steady state, not its first allocation); null when it is not growing (or
// no total is known). A trend already at the total answers its latest time.
export function oomEstimate(times, last, total, range) {
  if (!(total > 0) || !times.length) return null;
  const all = [];
  times.forEach((t, k) => {
    const v = num(last[k]);
    if (v !== null && Number.isFinite(v)) all.push([t, v]);
  });
  if (!all.length) return null;
  const from = Math.max(range.start, all[0][0]);
  const start = range.end - (range.end - from) * TREND_SHARE;
  const pts = all.filter(([t]) => t >= start);
  const fit = linearFit(pts);
  if (!fit || !(fit.slope > MIN_GROWTH_MIB_PER_S)) return null;
  const tLast = pts[pts.length - 1][0];
  const now = fit.at(tLast);
  return now >= total ? tLast : tLast + (total - now) / fit.slope;
}

// Per GPU (per node and GPU on a hub's panel: series.js gpuNaming): memory now, its peak over
// the range (the largest bucket max), the total, the headroom (total − peak) and the OOM
// estimate. `panel` holds DCGM_FI_DEV_FB_USED and, where the GPU reports them,
// DCGM_FI_DEV_FB_TOTAL or DCGM_FI_DEV_FB_FREE (total = used + free then).
export function memoryRows(panel) {
  if (!panel) return [];
  const naming = gpuNaming(panel.series);
  const by = new Map();
  for (const s of panel.series) {
    const k = naming.key(s.metric);
    if (!by.has(k)) by.set(k, { metric: s.metric });
    by.get(k)[s.metric.__name__] = s;
  }
  const rows = [];
  for (const [key, m] of by) {
    const used = m.DCGM_FI_DEV_FB_USED;
    if (!used) continue;
    const now = lastValue(used);
    let peak = null;
    for (const v of [...used.max, ...used.last]) {
      const x = num(v);
      if (x !== null && Number.isFinite(x)) peak = peak === null ? x : Math.max(peak, x);
    }
    let total = m.DCGM_FI_DEV_FB_TOTAL ? lastValue(m.DCGM_FI_DEV_FB_TOTAL) : null;
    if (total === null && m.DCGM_FI_DEV_FB_FREE && now !== null) {
      const free = lastValue(m.DCGM_FI_DEV_FB_FREE);
      if (free !== null) total = now + free;
    }
    const headroom = total !== null && peak !== null ? total - peak : null;
    const oom = total !== null && panel.range ? oomEstimate(panel.times, used.last, total, panel.range) : null;
    rows.push({ key, name: naming.name(m.metric), gpu: Number(m.metric.gpu), now, peak, total, headroom, oom });
  }
  return rows.sort((a, b) => byGpuKey(a.key, b.key));
}
