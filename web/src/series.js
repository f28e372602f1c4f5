// Arithmetic on panel series (GET /api/v1/panel: per bucket min, max and last): counters'
// rates and increases, newest values, per-GPU counts, and how a GPU is named when a hub's
// panel spans several nodes. Pure functions.
import { num } from "./view_state.js";

// Per-second rates of a counter from its buckets' `last` values: bucket k's rate is the increase
// from the previous bucket with a value, over the time between them. A counter that went
// backwards was reset, and its new value is the increase (as Prometheus's rate()). A bucket's
// newest sample is taken at its end, or at `end` (the range's) for the bucket that `end` cuts
// short, so the live edge does not read as a drop.
export function counterRates(times, last, step, end = Infinity) {
  const out = new Array(last.length).fill(null);
  const at = (k) => (step ? Math.min(times[k] + step, end) : times[k]);
  let pk = -1;
  for (let k = 0; k < last.length; k++) {
    const v = num(last[k]);
    if (v === null || !Number.isFinite(v)) continue;
    if (pk >= 0 && at(k) > at(pk)) {
      const p = num(last[pk]);
      out[k] = (v >= p ? v - p : v) / (at(k) - at(pk));
    }
    pk = k;
  }
  return out;
}

// A counter's increase over the range, reset-aware: from the first bucket's `min` (its value
// near the range's start) through every bucket's `last`.
export function counterIncrease(s) {
  let prev = null, sum = 0;
  for (let k = 0; k < s.last.length; k++) {
    for (const v of prev === null ? [num(s.min[k]), num(s.last[k])] : [num(s.last[k])]) {
      if (v === null || !Number.isFinite(v)) continue;
      if (prev !== null) sum += v >= prev ? v - prev : v;
      prev = v;
    }
  }
  return prev === null ? null : sum;
}

// The newest value of a panel series (its last non-null `last`).
export function lastValue(s) {
  for (let k = s.last.length - 1; k >= 0; k--) {
    const v = num(s.last[k]);
    if (v !== null) return v;
  }
  return null;
}


// The nodes a panel's series come from (their Hostname label, as dcgm-exporter's).
export const nodesOf = (series) => [...new Set((series || []).map((s) => s.metric.Hostname).filter(Boolean))];

// How a panel's GPUs are told apart: by index on one node ("3", "GPU 3"); by node and index
// when the panel spans several (a hub's: every node has a GPU 0), "node-a/3", "node-a GPU 3".
export function gpuNaming(series) {
  const multi = nodesOf(series).length > 1;
  return {
    multi,
    key: (m) => (multi ? `${m.Hostname || ""}/${m.gpu}` : String(m.gpu)),
    name: (m) => (multi && m.Hostname ? m.Hostname + " " : "") + "GPU " + m.gpu,
  };
}

// Keys of gpuNaming in display order: by node, then GPU index as a number.
export const byGpuKey = (a, b) => {
  const [na, ga] = String(a).includes("/") ? String(a).split("/") : ["", a];
  const [nb, gb] = String(b).includes("/") ? String(b).split("/") : ["", b];
  return na.localeCompare(nb) || Number(ga) - Number(gb);
};

export const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"];

// A GPU has one colour on every chart of one node; other series take theirs by position.
export function colorOf(metric, i) {
  const g = metric.gpu === undefined || metric.gpu === "" ? NaN : Number(metric.gpu);
  return PALETTE[(Number.isInteger(g) ? g : i) % PALETTE.length];
}

// Each series' {color, dash}. On one node, by GPU index (colorOf). When the series span nodes
// (a hub's panel), each node's GPU 0 would share a colour: there a GPU's colour goes by its
// place among the panel's GPUs in node order, and past the palette's eight the lines are dashed,
// so sixteen GPUs are still told apart.
export function seriesStyles(series) {
  if (nodesOf(series).length <= 1) return series.map((s, i) => ({ color: colorOf(s.metric, i) }));
  const naming = gpuNaming(series);
  const hasGpu = (m) => m.gpu !== undefined && m.gpu !== "";
  const keys = [...new Set(series.filter((s) => hasGpu(s.metric)).map((s) => naming.key(s.metric)))].sort(byGpuKey);
  return series.map((s, i) => {
    const k = hasGpu(s.metric) ? keys.indexOf(naming.key(s.metric)) : -1;
    const j = k >= 0 ? k : i;
    return { color: PALETTE[j % PALETTE.length], ...(Math.floor(j / PALETTE.length) % 2 ? { dash: [6, 3] } : {}) };
  });
}

// The name of a gpuNaming key: "GPU 3", or "node-a GPU 3".
export const gpuKeyName = (k) => (String(k).includes("/") ? String(k).replace("/", " GPU ") : "GPU " + k);

// Per GPU (gpuNaming's key) and metric name, a panel's counts: the newest value and the increase
// over the range, summed over the GPU's series of that name, with `parts` per XID code for
// gpuwatch_xid_errors_total. {gpu: {name: {now, inc, parts: [{key, now, inc}]}}}
export function countsByGpu(panel) {
  const out = {};
  const naming = gpuNaming(panel && panel.series);
  for (const s of (panel && panel.series) || []) {
    const g = naming.key(s.metric), n = s.metric.__name__;
    const byName = (out[g] = out[g] || {});
    const c = (byName[n] = byName[n] || { now: null, inc: null, parts: [] });
    const now = lastValue(s), inc = counterIncrease(s);
    if (now !== null) c.now = (c.now || 0) + now;
    if (inc !== null) c.inc = (c.inc || 0) + inc;
    if (s.metric.xid !== undefined) c.parts.push({ key: s.metric.xid, now, inc });
  }
  for (const byName of Object.values(out))
    for (const c of Object.values(byName)) c.parts.sort((a, b) => Number(a.key) - Number(b.key));
  return out;
}

// Whether a series ever held a value above zero in the range (an error counter worth drawing).
export const everAboveZero = (s) => s.max.some((v) => num(v) > 0) || s.last.some((v) => num(v) > 0);
