// The gpuwatch dashboard: hash routes, one shared time range held in the URL, every chart read
// from the agent (/api/v1/panel, /api/v1/findings). Preact + htm for the views, uPlot for
// the charts; bundled by build.mjs and served from the binary.
import { h, render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import htm from "htm";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import "./app.css";

const html = htm.bind(h);

import { RANGES, formatHash, num, panelUrl, parseHash, timeRange } from "./view_state.js";

function useHash() {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return parseHash(hash);
}

function go(view) {
  location.hash = formatHash(view);
}

// ---- data ----------------------------------------------------------------------------------

async function getJson(url) {
  const r = await fetch(url);
  const body = await r.json().catch(() => ({}));
  if (!r.ok || body.status === "error") throw new Error(body.error || `${url}: HTTP ${r.status}`);
  return body;
}

const panel = (match, range, width) => getJson(panelUrl(match, range, width)).then((b) => b.data);


// Re-reads every 10 s while the range follows the clock.
function usePoll(load, deps, live) {
  const [state, setState] = useState({ data: null, error: null });
  useEffect(() => {
    let stop = false;
    const run = () =>
      load().then(
        (data) => !stop && setState({ data, error: null }),
        (error) => !stop && setState((s) => ({ data: s.data, error: error.message })),
      );
    run();
    const t = live ? setInterval(run, 10000) : null;
    return () => {
      stop = true;
      if (t) clearInterval(t);
    };
  }, deps);
  return state;
}

// ---- charts ---------------------------------------------------------------------------------

const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"];

// One line per series (its `last`), with the min–max band shaded so spikes never vanish.
function BandChart({ data, title, unit, height = 220, scale = 1 }) {
  const el = useRef(null);
  useEffect(() => {
    if (!el.current || !data) return;
    const xs = data.times;
    const cols = [xs];
    const series = [{}];
    const bands = [];
    data.series.forEach((s, i) => {
      const color = PALETTE[i % PALETTE.length];
      const label = s.metric.gpu !== undefined ? `GPU ${s.metric.gpu}` : JSON.stringify(s.metric);
      cols.push(s.max.map((v) => (num(v) === null ? null : num(v) * scale)));
      series.push({ label: label + " max", stroke: "transparent", points: { show: false } });
      cols.push(s.min.map((v) => (num(v) === null ? null : num(v) * scale)));
      series.push({ label: label + " min", stroke: "transparent", points: { show: false } });
      cols.push(s.last.map((v) => (num(v) === null ? null : num(v) * scale)));
      series.push({ label, stroke: color, width: 1.5, points: { show: false } });
      const hi = cols.length - 3, lo = cols.length - 2;
      bands.push({ series: [hi, lo], fill: color + "33" });
    });
    const opts = {
      title,
      width: el.current.clientWidth || 800,
      height,
      series,
      bands,
      axes: [{}, { label: unit }],
      legend: { show: false },
      cursor: { sync: { key: "gw" } },
    };
    const plot = new uPlot(opts, cols, el.current);
    return () => plot.destroy();
  }, [data]);
  return html`<div class="chart" ref=${el}></div>`;
}

// GPU × time: one row per GPU, each cell the bucket's minimum (a drop to 0 % shows however
// short), hover for min/max/last.
function HeatStrip({ data, title }) {
  const el = useRef(null);
  const [tip, setTip] = useState(null);
  useEffect(() => {
    const c = el.current;
    if (!c || !data) return;
    const rows = data.series.length, cols = data.times.length;
    c.width = cols;
    c.height = Math.max(1, rows);
    const ctx = c.getContext("2d");
    const img = ctx.createImageData(cols, Math.max(1, rows));
    data.series.forEach((s, r) => {
      for (let k = 0; k < cols; k++) {
        const v = num(s.min[k]);
        const o = (r * cols + k) * 4;
        if (v === null || Number.isNaN(v)) {
          img.data.set([235, 235, 235, 255], o);
          continue;
        }
        const x = Math.max(0, Math.min(1, v / 100));
        // Dark red (idle) → green (busy).
        img.data.set([Math.round(200 * (1 - x) + 30), Math.round(60 + 140 * x), 60, 255], o);
      }
    });
    ctx.putImageData(img, 0, 0);
  }, [data]);
  const onMove = (e) => {
    if (!data) return;
    const rect = e.currentTarget.getBoundingClientRect();
    const k = Math.floor(((e.clientX - rect.left) / rect.width) * data.times.length);
    const r = Math.floor(((e.clientY - rect.top) / rect.height) * data.series.length);
    const s = data.series[r];
    if (!s || k < 0 || k >= data.times.length) return setTip(null);
    setTip(`GPU ${s.metric.gpu} at ${new Date(data.times[k] * 1000).toLocaleTimeString()}: ` +
      `min ${s.min[k] ?? "–"}, max ${s.max[k] ?? "–"}, last ${s.last[k] ?? "–"}`);
  };
  const rows = data ? data.series.length : 0;
  return html`<div class="heat">
    <div class="heat-title">${title}</div>
    <div class="heat-body">
      <div class="heat-labels">${data && data.series.map((s) => html`<div>GPU ${s.metric.gpu}</div>`)}</div>
      <canvas ref=${el} class="heat-canvas" style=${`height:${Math.max(1, rows) * 18}px`}
        onMouseMove=${onMove} onMouseLeave=${() => setTip(null)}></canvas>
    </div>
    <div class="heat-tip">${tip || "\u00a0"}</div>
  </div>`;
}

// ---- screens --------------------------------------------------------------------------------

function useWidth() {
  const [w, setW] = useState(Math.max(300, innerWidth - 80));
  useEffect(() => {
    const on = () => setW(Math.max(300, innerWidth - 80));
    addEventListener("resize", on);
    return () => removeEventListener("resize", on);
  }, []);
  return w;
}

function GpusScreen({ view }) {
  const width = useWidth();
  const range = timeRange(view.params, Date.now() / 1000);
  const key = [view.params.range, view.params.from, view.params.to, width];
  const sel = view.params.node ? `{Hostname="${view.params.node}"}` : "";
  const withNode = (name) => (sel ? name + sel : name);
  const util = usePoll(
    async () => {
      // SM activity where the GPU reports it (DCGM profiling), else utilization.
      const sm = await panel(withNode("DCGM_FI_PROF_SM_ACTIVE"), range, width);
      if (sm.series.length) {
        sm.series.forEach((s) => ["min", "max", "last"].forEach((f) => (s[f] = s[f].map((v) => (num(v) === null ? null : num(v) * 100)))));
        return { ...sm, what: "SM activity (%)" };
      }
      return { ...(await panel(withNode("DCGM_FI_DEV_GPU_UTIL"), range, width)), what: "GPU utilization (%)" };
    },
    key,
    range.live,
  );
  const mem = usePoll(() => panel(withNode("DCGM_FI_DEV_FB_USED"), range, width), key, range.live);
  return html`<section>
    ${util.error && html`<div class="error">${util.error}</div>`}
    ${util.data && (util.data.series.length
      ? html`<${HeatStrip} data=${util.data} title=${util.data.what + ", minimum per " + util.data.step + " s"} />`
      : html`<div class="empty">No GPU series in this range.</div>`)}
    ${mem.data && mem.data.series.length > 0 && html`<${BandChart} data=${mem.data} title="Memory used" unit="MiB" />`}
  </section>`;
}

function FindingsScreen() {
  const f = usePoll(() => getJson("/api/v1/findings"), [], true);
  const list = (f.data && (f.data.findings || [])) || [];
  return html`<section>
    ${f.error && html`<div class="error">${f.error}</div>`}
    ${f.data && list.length === 0 && html`<div class="empty">No findings.</div>`}
    <table class="findings">
      ${list.length > 0 && html`<tr><th>severity</th><th>cause</th><th>where</th><th>summary</th><th>action</th></tr>`}
      ${list.map((x) => html`<tr class=${"sev-" + x.severity}>
        <td>${x.severity}</td><td>${x.cause}</td>
        <td>${[x.node, x.gpu !== undefined && "GPU " + x.gpu, x.job && "job " + x.job].filter(Boolean).join(", ")}</td>
        <td>${x.summary}${x.evidence && x.evidence.length > 0 && html`<ul>${x.evidence.map((e) => html`<li>${e}</li>`)}</ul>`}</td>
        <td>${x.action}</td>
      </tr>`)}
    </table>
  </section>`;
}

const SCREENS = { gpus: ["GPUs", GpusScreen], findings: ["Findings", FindingsScreen] };

function App() {
  const view = useHash();
  const [, Screen] = SCREENS[view.screen] || SCREENS.gpus;
  return html`<div>
    <header>
      <span class="brand">gpuwatch</span>
      <nav>${Object.entries(SCREENS).map(([k, [name]]) =>
        html`<a href=${formatHash({ ...view, screen: k, arg: "" })} class=${k === view.screen ? "on" : ""}>${name}</a>`)}</nav>
      <span class="range">${Object.keys(RANGES).map((r) =>
        html`<button class=${(view.params.range || "1h") === r && !view.params.from ? "on" : ""}
          onClick=${() => go({ ...view, params: { range: r } })}>${r}</button>`)}</span>
    </header>
    <main><${Screen} view=${view} /></main>
  </div>`;
}

if (typeof document !== "undefined" && document.getElementById("app")) {
  render(html`<${App} />`, document.getElementById("app"));
}
