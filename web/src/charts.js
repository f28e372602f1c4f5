// The dashboard's charts: min–max bands over time (uPlot), GPU × time strips (canvas), all on
// the view's shared time range, with one crosshair, events as markers, throttle intervals
// shaded, and drag-to-zoom: a selection becomes the view's range in the URL (browser back
// undoes it).
import { h } from "preact";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import htm from "htm";
import uPlot from "uplot";
import { formatHash, num, parseHash, zoomParams } from "./view_state.js";
import { REASON_BY_NAME } from "./throttle.js";
import { byGpuKey, gpuNaming, nodesOf, seriesStyles } from "./series.js";

export const html = htm.bind(h);

export { PALETTE, colorOf } from "./series.js";
export const SEVERITY_COLOR = { critical: "#c62828", warning: "#ef6c00", info: "#607d8b" };

// The view's range becomes [a, b] (Unix seconds) as a new history entry.
export function zoomTo(a, b) {
  const v = parseHash(location.hash);
  const p = zoomParams(v.params, a, b);
  if (p) location.hash = formatHash({ ...v, params: p });
}

export const gpuLabel = (m) =>
  (m.gpu !== undefined ? `GPU ${m.gpu}` : m.interface || [m.device, m.port].filter(Boolean).join("/") || JSON.stringify(m)) +
  (m.direction ? " " + m.direction : "");

// 1234567 → "1.23M"; small numbers keep up to 3 significant digits.
export function fmtNum(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  for (const [d, s] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]]) if (a >= d) return +(v / d).toPrecision(3) + s;
  return String(+v.toPrecision(3));
}

// Events (XID, ECC, throttle onsets, checkpoints, annotations, config changes) as vertical
// lines on a chart's time axis: the step-time dip and its cause on one axis.
function markersPlugin(events) {
  return {
    hooks: {
      draw: [
        (u) => {
          const { ctx } = u;
          const top = u.bbox.top, bottom = u.bbox.top + u.bbox.height;
          ctx.save();
          for (const e of events || []) {
            const x = u.valToPos(e.time_ms / 1000, "x", true);
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
            ctx.strokeStyle = SEVERITY_COLOR[e.severity] || "#607d8b";
            ctx.lineWidth = 1;
            ctx.setLineDash([4, 3]);
            ctx.beginPath();
            ctx.moveTo(x, top);
            ctx.lineTo(x, bottom);
            ctx.stroke();
          }
          ctx.restore();
        },
      ],
    },
  };
}

// Throttle intervals ({start, end, reason}) shaded behind the series, in the reason's colour.
function shadePlugin(intervals) {
  return {
    hooks: {
      drawClear: [
        (u) => {
          if (!intervals || !intervals.length) return;
          const { ctx } = u;
          const l = u.bbox.left, r = l + u.bbox.width;
          ctx.save();
          for (const iv of intervals) {
            const a = Math.max(l, u.valToPos(iv.start, "x", true));
            const b = Math.min(r, u.valToPos(iv.end, "x", true));
            if (b <= a) continue;
            ctx.fillStyle = ((REASON_BY_NAME[iv.reason] || {}).color || "#999999") + "2e";
            ctx.fillRect(a, u.bbox.top, Math.max(1, b - a), u.bbox.height);
          }
          ctx.restore();
        },
      ],
    },
  };
}

// The reasons present in a list of intervals, for a legend.
export function ShadeLegend({ intervals }) {
  const names = [...new Set((intervals || []).map((iv) => iv.reason))];
  return names.map((n) => {
    const r = REASON_BY_NAME[n] || { label: n, color: "#999" };
    return html`<span class="shade-key"><i style=${`background:${r.color}55`}></i>${r.label}</span>`;
  });
}

// One line per series (its `last`), with the min–max band shaded so spikes never vanish.
// `data` is a panel answer ({times, series, range}); `styleOf(metric, i)` may give a series
// {color, dash, legend: false}; `shade` is throttle intervals. `spanGaps`: series sampled more
// sparsely than the buckets (the job tier, every 15 s) are drawn across their empty buckets, and
// a lone sample as a point, so a chart with data never looks empty.
export function BandChart({ data, name, title, unit, height = 200, scale = 1, events, shade, label: labelOf = gpuLabel, styleOf, fmt = fmtNum, spanGaps = false }) {
  const el = useRef(null);
  const readout = useRef(null);
  // A hub's panels span nodes, each with its GPU 0: the node goes before the series' own name.
  const multi = data ? nodesOf(data.series).length > 1 : false;
  const label = (m) => (multi && m.Hostname ? m.Hostname + " " : "") + labelOf(m);
  const n = data ? data.series.length : 0;
  const base = data ? seriesStyles(data.series) : [];
  const styles = data ? data.series.map((s, i) => ({ ...base[i], ...(styleOf ? styleOf(s.metric, i) : {}) })) : [];
  useEffect(() => {
    if (!el.current || !data || !n) return;
    const xs = data.times;
    const cols = [xs];
    const series = [{}];
    const bands = [];
    const lines = [];
    const scaled = (a) => a.map((v) => (num(v) === null ? null : num(v) * scale));
    data.series.forEach((s, i) => {
      const { color, dash } = styles[i];
      cols.push(scaled(s.max));
      series.push({ label: label(s.metric) + " max", stroke: "transparent", points: { show: false }, spanGaps });
      cols.push(scaled(s.min));
      series.push({ label: label(s.metric) + " min", stroke: "transparent", points: { show: false }, spanGaps });
      cols.push(scaled(s.last));
      const few = spanGaps && cols[cols.length - 1].filter((v) => v !== null).length <= 2;
      series.push({ label: label(s.metric), stroke: color, width: 1.5, dash, spanGaps, points: { show: few, size: 5, fill: color } });
      lines.push([label(s.metric), cols.length - 1]);
      bands.push({ series: [cols.length - 3, cols.length - 2], fill: color + "33" });
    });
    const scales = { x: { time: true } };
    if (data.range) scales.x.range = () => [data.range.start, data.range.end];
    const opts = {
      title,
      width: el.current.clientWidth || 800,
      height,
      series,
      bands,
      scales,
      axes: [{}, { label: unit, size: 64, values: (u, vals) => vals.map(fmt) }],
      legend: { show: false },
      cursor: { sync: { key: "gw" }, drag: { x: true, y: false, setScale: false } },
      hooks: {
        setSelect: [
          (u) => {
            if (u.select.width < 4) return;
            const a = u.posToVal(u.select.left, "x"), b = u.posToVal(u.select.left + u.select.width, "x");
            u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
            zoomTo(a, b);
          },
        ],
        setCursor: [
          (u) => {
            const i = u.cursor.idx;
            if (!readout.current) return;
            if (i === null || i === undefined) return void (readout.current.textContent = "\u00a0");
            const parts = lines.filter(([, c]) => cols[c][i] !== null).map(([nm, c]) => `${nm} ${fmt(cols[c][i])}`);
            readout.current.textContent = new Date(xs[i] * 1000).toLocaleTimeString() + "  " + parts.join(" · ");
          },
        ],
      },
      plugins: [shadePlugin(shade), markersPlugin(events)],
    };
    const plot = new uPlot(opts, cols, el.current);
    return () => plot.destroy();
  }, [data, events, shade]);
  const seen = new Set();
  const keys = data ? data.series.map((s, i) => [label(s.metric), styles[i]]).filter(([nm, st]) => st.legend !== false && !seen.has(nm) && seen.add(nm)) : [];
  keys.sort((a, b) => a[0].localeCompare(b[0], undefined, { numeric: true }));
  return html`<div class="chart-box" data-chart=${name} data-series=${n}>
    <div class="chart" ref=${el}></div>
    <div class="legend">${keys.map(([nm, st]) => html`<span><i style=${`background:${st.color}`}></i>${nm}</span>`)}
      <${ShadeLegend} intervals=${shade} /></div>
    <div class="readout" ref=${readout}>\u00a0</div>
  </div>`;
}

// Drag over a strip to zoom: the selection in pixels while dragging, then the view's range.
function useDragZoom(t0, t1) {
  const [sel, setSel] = useState(null);
  const from = useRef(null);
  const pos = (e) => {
    const r = e.currentTarget.getBoundingClientRect();
    return { x: Math.max(0, Math.min(r.width, e.clientX - r.left)), w: r.width };
  };
  return {
    sel,
    handlers: {
      onMouseDown: (e) => {
        from.current = pos(e).x;
        setSel({ a: from.current, b: from.current });
        e.preventDefault();
      },
      onMouseMove: (e) => from.current !== null && setSel({ a: from.current, b: pos(e).x }),
      onMouseUp: (e) => {
        if (from.current === null) return;
        const { x, w } = pos(e), a = from.current;
        from.current = null;
        setSel(null);
        if (Math.abs(x - a) > 3 && w > 0) zoomTo(t0 + ((t1 - t0) * Math.min(a, x)) / w, t0 + ((t1 - t0) * Math.max(a, x)) / w);
      },
      onMouseLeave: () => {
        from.current = null;
        setSel(null);
      },
    },
  };
}

// Events over a strip, as the charts draw them, and the drag selection.
function StripOverlay({ events, t0, t1, sel }) {
  const at = (t) => (100 * (t - t0)) / (t1 - t0);
  return html`${(events || []).filter((e) => e.time_ms / 1000 >= t0 && e.time_ms / 1000 <= t1).map((e) =>
    html`<div class="mark" title=${`${new Date(e.time_ms).toLocaleString()} ${e.kind}: ${e.text}`}
      style=${`left:${at(e.time_ms / 1000)}%;border-color:${SEVERITY_COLOR[e.severity] || "#607d8b"}`}></div>`)}
    ${sel && html`<div class="drag-sel" style=${`left:${Math.min(sel.a, sel.b)}px;width:${Math.abs(sel.b - sel.a)}px`}></div>`}`;
}

// GPU × time: one row per GPU, each cell the bucket's minimum (a drop to 0 % shows however
// short), hover for min/max/last.
export function HeatStrip({ data: panelData, title, name = "utilization", events }) {
  const el = useRef(null);
  const [tip, setTip] = useState(null);
  // One row per GPU; on a hub, one per node and GPU (the fleet heat map), in node order.
  const naming = gpuNaming(panelData ? panelData.series : []);
  const data = useMemo(() => panelData && naming.multi
    ? { ...panelData, series: [...panelData.series].sort((a, b) => byGpuKey(naming.key(a.metric), naming.key(b.metric))) }
    : panelData, [panelData]);
  // The view's range, as the charts draw it (their x scale is data.range): the strip and the
  // charts below it share one time axis extent. Buckets are placed by their start time, the
  // edge buckets clipped to the range.
  const step = (data && data.step) || 1;
  const t0 = data && data.range ? data.range.start : data && data.times.length ? data.times[0] : 0;
  const t1 = data && data.range ? data.range.end : data && data.times.length ? data.times[data.times.length - 1] + step : 1;
  const drag = useDragZoom(t0, t1);
  useEffect(() => {
    const c = el.current;
    if (!c || !data) return;
    const rows = data.series.length, cols = data.times.length;
    const w = Math.max(1, c.clientWidth || cols);
    c.width = w;
    c.height = Math.max(1, rows);
    const ctx = c.getContext("2d");
    ctx.fillStyle = "rgb(235,235,235)";
    ctx.fillRect(0, 0, w, c.height);
    const xOf = (t) => ((t - t0) / (t1 - t0)) * w;
    data.series.forEach((s, r) => {
      for (let k = 0; k < cols; k++) {
        const v = num(s.min[k]);
        if (v === null || Number.isNaN(v)) continue;
        const a = Math.max(0, xOf(data.times[k])), b = Math.min(w, xOf(data.times[k] + step));
        if (b <= a) continue;
        const x = Math.max(0, Math.min(1, v / 100));
        // Dark red (idle) → green (busy).
        ctx.fillStyle = `rgb(${Math.round(200 * (1 - x) + 30)},${Math.round(60 + 140 * x)},60)`;
        ctx.fillRect(a, r, Math.max(1, b - a), 1);
      }
    });
  }, [data]);
  const onMove = (e) => {
    if (!data) return;
    const rect = e.currentTarget.getBoundingClientRect();
    const t = t0 + ((e.clientX - rect.left) / rect.width) * (t1 - t0);
    const k = data.times.findIndex((x) => x <= t && t < x + step);
    const r = Math.floor(((e.clientY - rect.top) / rect.height) * data.series.length);
    const s = data.series[r];
    if (!s || k < 0 || k >= data.times.length) return setTip(null);
    setTip(`${naming.name(s.metric)} at ${new Date(data.times[k] * 1000).toLocaleTimeString()}: ` +
      `min ${s.min[k] ?? "–"}, max ${s.max[k] ?? "–"}, last ${s.last[k] ?? "–"}`);
  };
  return html`<${StripFrame} cls="heat" name=${name} title=${title} labels=${data ? data.series.map((s) => naming.name(s.metric)) : []}
    canvas=${el} onMove=${onMove} setTip=${setTip} t0=${t0} t1=${t1} events=${events} drag=${drag}>
    <div class="heat-tip">${tip || "\u00a0"}</div>
  </${StripFrame}>`;
}

// What both strips share: the title, a labelled row per GPU, the canvas with the event markers
// and drag-to-zoom over it, then the strip's own footer (children).
function StripFrame({ cls, name, title, labels, attrs = {}, canvas, onMove, setTip, t0, t1, events, drag, children }) {
  const rows = labels.length;
  return html`<div class=${cls} data-chart=${name} data-series=${rows} ...${attrs}>
    <div class="heat-title">${title}</div>
    <div class="heat-body">
      <div class="heat-labels">${labels.map((l) => html`<div>${l}</div>`)}</div>
      <div class="strip-wrap" ...${drag.handlers}>
        <canvas ref=${canvas} class="heat-canvas" style=${`height:${Math.max(1, rows) * 18}px`}
          onMouseMove=${onMove} onMouseLeave=${() => setTip(null)}></canvas>
        <${StripOverlay} events=${events} t0=${t0} t1=${t1} sel=${drag.sel} />
      </div>
    </div>
    ${children}
  </div>`;
}

// GPU × time: when each GPU's clocks were throttled, and why (one colour per reason).
export function ThrottleStrip({ intervals, gpus, range, events, name = "throttle", title }) {
  const el = useRef(null);
  const [tip, setTip] = useState(null);
  const t0 = range.start, t1 = range.end;
  const drag = useDragZoom(t0, t1);
  const rows = gpus.length;
  useEffect(() => {
    const c = el.current;
    if (!c) return;
    const w = Math.max(1, c.clientWidth);
    c.width = w;
    c.height = Math.max(1, rows) * 18;
    const ctx = c.getContext("2d");
    ctx.fillStyle = "#eef1f4";
    ctx.fillRect(0, 0, c.width, c.height);
    // One lane per reason present, so reasons active together all show.
    const lanes = [...new Set(intervals.map((iv) => iv.reason))];
    const lh = 14 / Math.max(1, lanes.length);
    gpus.forEach((g, r) => {
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, r * 18 + 17, w, 1);
      for (const iv of intervals.filter((x) => x.gpu === g)) {
        const a = ((iv.start - t0) / (t1 - t0)) * w, b = ((iv.end - t0) / (t1 - t0)) * w;
        ctx.fillStyle = (REASON_BY_NAME[iv.reason] || {}).color || "#999";
        ctx.fillRect(Math.max(0, a), r * 18 + 2 + lanes.indexOf(iv.reason) * lh, Math.max(1, Math.min(w, b) - Math.max(0, a)), lh);
      }
    });
  }, [intervals, gpus.join(","), t0, t1]);
  const onMove = (e) => {
    const rect = e.currentTarget.getBoundingClientRect();
    const t = t0 + ((e.clientX - rect.left) / rect.width) * (t1 - t0);
    const g = gpus[Math.floor(((e.clientY - rect.top) / rect.height) * rows)];
    if (g === undefined) return setTip(null);
    const on = intervals.filter((iv) => iv.gpu === g && iv.start <= t && t < iv.end).map((iv) => (REASON_BY_NAME[iv.reason] || {}).label || iv.reason);
    setTip(`GPU ${g} at ${new Date(t * 1000).toLocaleTimeString()}: ${on.length ? on.join(", ") : "not throttled"}`);
  };
  return html`<${StripFrame} cls="heat throttle" name=${name} title=${title} labels=${gpus.map((g) => "GPU " + g)} attrs=${{ "data-intervals": intervals.length }}
    canvas=${el} onMove=${onMove} setTip=${setTip} t0=${t0} t1=${t1} events=${events} drag=${drag}>
    <div class="legend"><${ShadeLegend} intervals=${intervals} /></div>
    <div class="heat-tip">${tip || "\u00a0"}</div>
  </${StripFrame}>`;
}


// A chart of one poll's answer, or why there is none: loading, the error, or `empty` when the
// range holds no series. The box keeps its data-chart name in every state.
export function PanelChart({ state, empty, ...props }) {
  const d = state.data;
  if (d && d.series.length) return html`<${BandChart} data=${d} ...${props} />`;
  const why = state.error ? html`<div class="error">${state.error}</div>`
    : !d ? html`<div class="empty">loading…</div>`
    : html`<div class="empty">${empty || "No series in this range."}</div>`;
  return html`<div class="chart-box" data-chart=${props.name} data-series="0">
    <div class="chart-title">${props.title}</div>${why}</div>`;
}

// Events, newest first.
export function EventList({ events, name = "events" }) {
  if (!events || events.length === 0) return html`<div class="empty" data-list=${name}>No events in this range.</div>`;
  return html`<table class="events" data-list=${name}>
    <tr><th>time</th><th>kind</th><th>severity</th><th>where</th><th>text</th></tr>
    ${events.slice().reverse().map((e) => html`<tr class=${"sev-" + e.severity}>
      <td>${new Date(e.time_ms).toLocaleString()}</td><td>${e.kind}</td><td>${e.severity}</td>
      <td>${[e.node, e.gpu !== undefined && e.gpu !== null && e.gpu !== "" && "GPU " + e.gpu, e.job && "job " + e.job].filter(Boolean).join(", ")}</td>
      <td>${e.text}</td></tr>`)}
  </table>`;
}
