// Clock-event (throttle) reasons as intervals on the time axis, from panel answers (pure).
//
// Two sources, the first preferred where the store has it:
// - gpuwatch_clock_event_reason_active{reason=…}: 1 while a reason is active; a bucket's `max`
//   says whether it was active at any sample in the bucket, so a one-second throttle shows at
//   any zoom;
// - DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, NVML's bit mask: a bucket's min, max and last are three
//   of its samples, so the union of their bits is what the panel can say (a reason active only
//   between them is missed in a wide bucket; zoom in to see it).
import { num } from "./view_state.js";

// NVML's nvmlClocksEventReason* bits and the agent's names for them (src/model/gpu.cc).
// `shade`: a reason that slows the GPU against the user's will; idle, application and display
// clocks and sync boost are settings, not throttles, and are not shaded.
export const REASONS = [
  { bit: 0x1, name: "idle", label: "idle", shade: false },
  { bit: 0x2, name: "app_clocks", label: "application clocks", shade: false },
  { bit: 0x4, name: "sw_power_cap", label: "SW power cap", shade: true, color: "#f28e2b" },
  { bit: 0x8, name: "hw_slowdown", label: "HW slowdown", shade: true, color: "#b07aa1" },
  { bit: 0x10, name: "sync_boost", label: "sync boost", shade: false },
  { bit: 0x20, name: "sw_thermal", label: "SW thermal", shade: true, color: "#e15759" },
  { bit: 0x40, name: "hw_thermal", label: "HW thermal", shade: true, color: "#9c1c1c" },
  { bit: 0x80, name: "hw_power_brake", label: "HW power brake", shade: true, color: "#6b3fa0" },
  { bit: 0x100, name: "display_clocks", label: "display clocks", shade: false },
];
export const REASON_BY_NAME = Object.fromEntries(REASONS.map((r) => [r.name, r]));

// The reason names set in an NVML mask.
export const reasonNames = (mask) => REASONS.filter((r) => mask & r.bit).map((r) => r.name);

const bitsOf = (v) => {
  const x = num(v);
  return x === null || !Number.isFinite(x) || x < 0 ? 0 : Math.round(x);
};

// Per bucket, the union of the mask bits of one bitmask series' min, max and last.
export function masksFromBitmask(s) {
  return s.last.map((_, k) => bitsOf(s.min[k]) | bitsOf(s.max[k]) | bitsOf(s.last[k]));
}

// Per bucket, the mask of the reasons whose gpuwatch_clock_event_reason_active series (of one
// GPU) was 1 at some sample of the bucket.
export function masksFromReasonSeries(seriesOfOneGpu, buckets) {
  const masks = new Array(buckets).fill(0);
  for (const s of seriesOfOneGpu) {
    const r = REASON_BY_NAME[s.metric.reason];
    if (!r) continue;
    s.max.forEach((v, k) => {
      const x = num(v);
      if (x !== null && x > 0) masks[k] |= r.bit;
    });
  }
  return masks;
}

// Runs of buckets with a reason's bit set, as [start, end) intervals in seconds: bucket k spans
// [times[k], times[k] + step).
export function intervalsFromMasks(times, step, masks, gpu, reasons = REASONS.filter((r) => r.shade)) {
  const out = [];
  for (const r of reasons) {
    let open = null;
    for (let k = 0; k <= masks.length; k++) {
      const on = k < masks.length && (masks[k] & r.bit) !== 0;
      if (on && open === null) open = times[k];
      if (!on && open !== null) {
        out.push({ gpu, reason: r.name, start: open, end: times[k - 1] + step });
        open = null;
      }
    }
  }
  return out.sort((a, b) => a.start - b.start || a.gpu - b.gpu);
}

// Throttle intervals of every GPU: from the per-reason panel where it holds series, else from
// the bitmask panel. Each interval: {gpu, reason, start, end}.
export function throttleIntervals(bitmaskPanel, reasonPanel) {
  const out = [];
  if (reasonPanel && reasonPanel.series.length) {
    const byGpu = new Map();
    for (const s of reasonPanel.series) {
      const g = Number(s.metric.gpu);
      if (!byGpu.has(g)) byGpu.set(g, []);
      byGpu.get(g).push(s);
    }
    for (const [g, list] of byGpu) {
      const masks = masksFromReasonSeries(list, reasonPanel.times.length);
      out.push(...intervalsFromMasks(reasonPanel.times, reasonPanel.step, masks, g));
    }
  } else if (bitmaskPanel) {
    for (const s of bitmaskPanel.series) {
      const masks = masksFromBitmask(s);
      out.push(...intervalsFromMasks(bitmaskPanel.times, bitmaskPanel.step, masks, Number(s.metric.gpu)));
    }
  }
  return out.sort((a, b) => a.start - b.start || a.gpu - b.gpu);
}
