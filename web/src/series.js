// Arithmetic on panel series (GET /api/v1/panel: per bucket min, max and last): counters'
// rates and increases, newest values, and per-GPU counts. Pure functions.
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


// Per GPU and metric name, a panel's counts: the newest value and the increase over the range,
// summed over the GPU's series of that name, with `parts` per XID code for
// gpuwatch_xid_errors_total. {gpu: {name: {now, inc, parts: [{key, now, inc}]}}}
export function countsByGpu(panel) {
  const out = {};
  for (const s of (panel && panel.series) || []) {
    const g = s.metric.gpu, n = s.metric.__name__;
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
