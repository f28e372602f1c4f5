// Links as shares of their rated bandwidth, and what is degraded in a topology snapshot: pure
// functions over the agent's answers (panel, /api/v1/topology).
import { num } from "./view_state.js";
import { counterRates } from "./series.js";

// Rated bandwidth per direction, bytes/s, as the agent rates links (src/server/link_rates.h):
// PCIe per lane after encoding for gen 1-6, NVLink per link by generation.
export const PCIE_LANE_BYTES_PER_S = [0, 0.25e9, 0.5e9, 0.985e9, 1.969e9, 3.938e9, 7.563e9];
export const NVLINK_BYTES_PER_S = { 1: 20e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 50e9 };

export function pcieRated(gen, width) {
  const g = num(gen), w = num(width);
  if (g === null || w === null || !(w > 0)) return null;
  return PCIE_LANE_BYTES_PER_S[Math.round(g)] ? PCIE_LANE_BYTES_PER_S[Math.round(g)] * w : null;
}

export function nvlinkRated(version, activeLinks) {
  const per = NVLINK_BYTES_PER_S[version];
  const n = num(activeLinks);
  return per && n !== null && n > 0 ? per * n : null;
}

// A panel-shaped answer ({times, step, series: [{metric, min, max, last}]}) of percentages: each
// throughput series over the rated bandwidth that `ratedOf(metric, k)` gives for its bucket
// (null where either is unknown).
export function shareOfRated(panel, ratedOf) {
  const pct = (s, f) => s[f].map((v, k) => {
    const x = num(v), r = ratedOf(s.metric, k);
    return x === null || r === null || !(r > 0) ? null : (100 * x) / r;
  });
  return {
    ...panel,
    series: panel.series.map((s) => ({ metric: s.metric, min: pct(s, "min"), max: pct(s, "max"), last: pct(s, "last") })),
  };
}

// A panel of ratios (0..1, gpuwatch_link_utilization_ratio) as percentages.
export const ratioToPercent = (panel) => ({
  ...panel,
  series: panel.series.map((s) => {
    const f = (a) => a.map((v) => (num(v) === null ? null : 100 * num(v)));
    return { metric: s.metric, min: f(s.min), max: f(s.max), last: f(s.last) };
  }),
});

// Series keyed by the values of `labels`, to look one up by another series' labels.
export function byLabels(panel, labels) {
  const m = new Map();
  for (const s of (panel && panel.series) || []) m.set(labels.map((l) => s.metric[l]).join("\u0000"), s);
  return (metric) => m.get(labels.map((l) => metric[l]).join("\u0000"));
}

// What is degraded in a topology snapshot (docs/format/topology.md):
// - gpus[i]: NVLinks down, a PCIe link narrower than its maximum (the current generation falls
//   when idle by design and is not a fault);
// - cells["i,j"]: a GPU pair joined by fewer NVLinks than the node's best pair (a GPU that lost
//   one of 18 links still prints NV17 to every peer);
// - nics[name]: a port not ACTIVE.
export function degradedTopology(snap) {
  const out = { gpus: {}, cells: {}, nics: {} };
  if (!snap) return out;
  const note = (o, k, why) => (o[k] = o[k] || []).push(why);
  for (const g of snap.gpus || []) {
    const links = g.nvlinks || [];
    const down = links.filter((l) => !l.active).length;
    if (down) note(out.gpus, g.index, `${down} of ${links.length} NVLinks down`);
    if (g.pcie_width && g.pcie_max_width && g.pcie_width < g.pcie_max_width)
      note(out.gpus, g.index, `PCIe x${g.pcie_width} of x${g.pcie_max_width}`);
  }
  for (const n of snap.nics || [])
    for (const p of n.ports || [])
      if (p.state && p.state !== "ACTIVE") note(out.nics, n.name, `port ${p.port} ${p.state}`);
  const rows = (snap.matrix && snap.matrix.links) || [];
  const nv = (t) => (/^NV(\d+)$/.exec(t || "") || [])[1];
  let best = 0;
  for (const row of rows) for (const t of row) if (nv(t)) best = Math.max(best, +nv(t));
  rows.forEach((row, i) =>
    row.forEach((t, j) => {
      if (nv(t) && +nv(t) < best) out.cells[i + "," + j] = `${t}: fewer NVLinks than the node's NV${best}`;
    }),
  );
  return out;
}

// The throughput series of a panel that also holds other series: those whose metric name
// `dirOf` maps to a direction, relabelled {Hostname, gpu, direction}; with `rate`, counters
// (bytes so far) become per-second rates between buckets.
export function throughputOf(panel, dirOf, rate) {
  return {
    ...panel,
    series: panel.series.filter((s) => dirOf[s.metric.__name__]).map((s) => {
      const metric = { Hostname: s.metric.Hostname, gpu: s.metric.gpu, direction: dirOf[s.metric.__name__] };
      if (!rate) return { metric, min: s.min, max: s.max, last: s.last };
      const r = counterRates(panel.times, s.last, panel.step, panel.range && panel.range.end);
      return { metric, min: r, max: r, last: r };
    }),
  };
}

// The NVLink generation of a GPU in a topology snapshot: its active links' newest version.
export function nvlinkVersion(snap, gpu) {
  const g = ((snap && snap.gpus) || []).find((x) => x.index === Number(gpu));
  const v = ((g && g.nvlinks) || []).filter((l) => l.active && l.version).map((l) => l.version);
  return v.length ? Math.max(...v) : null;
}
