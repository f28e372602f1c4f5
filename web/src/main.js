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

const SEVERITY_COLOR = { critical: "#c62828", warning: "#ef6c00", info: "#607d8b" };

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

// One line per series (its `last`), with the min–max band shaded so spikes never vanish.
function BandChart({ data, title, unit, height = 220, scale = 1, events, label }) {
  const el = useRef(null);
  useEffect(() => {
    if (!el.current || !data) return;
    const xs = data.times;
    const cols = [xs];
    const series = [{}];
    const bands = [];
    data.series.forEach((s, i) => {
      const color = PALETTE[i % PALETTE.length];
      const name = label ? label(s.metric) : s.metric.gpu !== undefined ? `GPU ${s.metric.gpu}` : JSON.stringify(s.metric);
      cols.push(s.max.map((v) => (num(v) === null ? null : num(v) * scale)));
      series.push({ label: name + " max", stroke: "transparent", points: { show: false } });
      cols.push(s.min.map((v) => (num(v) === null ? null : num(v) * scale)));
      series.push({ label: name + " min", stroke: "transparent", points: { show: false } });
      cols.push(s.last.map((v) => (num(v) === null ? null : num(v) * scale)));
      series.push({ label: name, stroke: color, width: 1.5, points: { show: false } });
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
      plugins: [markersPlugin(events)],
    };
    const plot = new uPlot(opts, cols, el.current);
    return () => plot.destroy();
  }, [data, events]);
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

// The charts' width: the page's, less main's padding and the heat strip's labels.
const chartWidth = () => Math.max(300, document.documentElement.clientWidth - 64);
function useWidth() {
  const [w, setW] = useState(chartWidth());
  useEffect(() => {
    // Debounced: a drag-resize would refetch every chart on every event.
    let timer = null;
    const on = () => {
      clearTimeout(timer);
      timer = setTimeout(() => setW(chartWidth()), 250);
    };
    addEventListener("resize", on);
    return () => {
      clearTimeout(timer);
      removeEventListener("resize", on);
    };
  }, []);
  return w;
}

// A label value inside a PromQL selector's double quotes.
const quote = (v) => '"' + String(v).replace(/\\/g, "\\\\").replace(/"/g, '\\"') + '"';

function GpusScreen({ view }) {
  const width = useWidth();
  // Computed at each load, so a live range moves with the clock between polls.
  const rangeNow = () => timeRange(view.params, Date.now() / 1000);
  const range = rangeNow();
  const key = [view.params.range, view.params.from, view.params.to, view.params.node, width];
  const sel = view.params.node ? `{Hostname=${quote(view.params.node)}}` : "";
  const withNode = (name) => (sel ? name + sel : name);
  const util = usePoll(
    async () => {
      // SM activity where the GPU reports it (DCGM profiling), else utilization.
      const sm = await panel(withNode("DCGM_FI_PROF_SM_ACTIVE"), rangeNow(), width);
      if (sm.series.length) {
        sm.series.forEach((s) => ["min", "max", "last"].forEach((f) => (s[f] = s[f].map((v) => (num(v) === null ? null : num(v) * 100)))));
        return { ...sm, what: "SM activity (%)" };
      }
      return { ...(await panel(withNode("DCGM_FI_DEV_GPU_UTIL"), rangeNow(), width)), what: "GPU utilization (%)" };
    },
    key,
    range.live,
  );
  const mem = usePoll(() => panel(withNode("DCGM_FI_DEV_FB_USED"), rangeNow(), width), key, range.live);
  const events = usePoll(() => loadEvents(rangeNow(), {}), key, range.live);
  return html`<section>
    ${util.error && html`<div class="error">${util.error}</div>`}
    ${util.data && (util.data.series.length
      ? html`<${HeatStrip} data=${util.data} title=${util.data.what + ", minimum per " + util.data.step + " s"} />`
      : html`<div class="empty">No GPU series in this range.</div>`)}
    ${mem.data && mem.data.series.length > 0 && html`<${BandChart} data=${mem.data} title="Memory used" unit="MiB" events=${events.data} />`}
  </section>`;
}

// Events in the view's range, newest last; `log` lines only when asked for.
function eventsUrl(range, extra) {
  const q = new URLSearchParams({
    start: String(Math.floor(range.start)),
    end: String(Math.ceil(range.end)),
    limit: "1000",
    ...extra,
  });
  return "/api/v1/events?" + q;
}
const loadEvents = (range, extra) =>
  getJson(eventsUrl(range, extra)).then((b) => (b.events || []).filter((e) => extra.kind === "log" || e.kind !== "log"));

function EventList({ events }) {
  if (!events || events.length === 0) return html`<div class="empty">No events in this range.</div>`;
  return html`<table class="events">
    <tr><th>time</th><th>kind</th><th>severity</th><th>where</th><th>text</th></tr>
    ${events.slice().reverse().map((e) => html`<tr class=${"sev-" + e.severity}>
      <td>${new Date(e.time_ms).toLocaleString()}</td><td>${e.kind}</td><td>${e.severity}</td>
      <td>${[e.node, e.gpu !== undefined && e.gpu !== null && e.gpu !== "" && "GPU " + e.gpu, e.job && "job " + e.job].filter(Boolean).join(", ")}</td>
      <td>${e.text}</td></tr>`)}
  </table>`;
}

// #/node: the node's time line of events, changes, annotations and maintenance.
function NodeScreen({ view }) {
  const rangeNow = () => timeRange(view.params, Date.now() / 1000);
  const range = rangeNow();
  const ev = usePoll(() => loadEvents(rangeNow(), {}), [view.params.range, view.params.from, view.params.to], range.live);
  return html`<section>
    ${ev.error && html`<div class="error">${ev.error}</div>`}
    ${ev.data && html`<${EventList} events=${ev.data} />`}
  </section>`;
}

// #/jobs: every job the agent knows, each linking to its own view.
function JobsScreen({ view }) {
  const j = usePoll(() => getJson("/api/v1/jobs"), [], true);
  const list = (j.data && j.data.jobs) || [];
  return html`<section>
    ${j.error && html`<div class="error">${j.error}</div>`}
    ${j.data && list.length === 0 && html`<div class="empty">No jobs have reported to this agent.</div>`}
    <table class="findings">
      ${list.length > 0 && html`<tr><th>job</th><th>state</th><th>user</th><th>template</th><th>ranks</th><th>steps</th><th>median step</th></tr>`}
      ${list.map((x) => html`<tr>
        <td><a href=${formatHash({ ...view, screen: "job", arg: x.id })}>${x.id}</a></td>
        <td>${x.state}${x.hung ? " (hung)" : ""}</td><td>${x.user || ""}</td><td>${x.template || ""}</td>
        <td>${x.ranks_reporting ?? ""}/${x.world_size ?? ""}</td><td>${x.steps_total ?? ""}</td>
        <td>${x.median_step_s !== undefined ? x.median_step_s.toFixed(3) + " s" : ""}</td></tr>`)}
    </table>
  </section>`;
}

// #/job/<id>: the job → its ranks' throughput → its log lines and its node's events.
function JobScreen({ view }) {
  const width = useWidth();
  const id = view.arg;
  const rangeNow = () => timeRange(view.params, Date.now() / 1000);
  const range = rangeNow();
  const key = [id, view.params.range, view.params.from, view.params.to, width];
  const job = usePoll(() => getJson("/api/v1/jobs/" + encodeURIComponent(id)), [id], true);
  const ips = usePoll(() => panel(`gpuwatch_job_iterations_per_second{job=${quote(id)}}`, rangeNow(), width), key, range.live);
  const events = usePoll(() => loadEvents(rangeNow(), {}), key, range.live);
  const logs = usePoll(() => loadEvents(rangeNow(), { kind: "log", job: id }), key, range.live);
  const j = job.data || {};
  return html`<section>
    <h2>job ${id}</h2>
    ${job.error && html`<div class="error">${job.error}</div>`}
    ${job.data && html`<div class="facts">${j.state}${j.hung ? " (hung)" : ""} · user ${j.user || "?"} · template ${j.template || "?"} · ${j.ranks_reporting ?? "?"} of ${j.world_size ?? "?"} ranks reporting</div>`}
    ${ips.data && ips.data.series.length > 0 &&
      html`<${BandChart} data=${ips.data} title="Iterations per second, per rank" unit="it/s" events=${events.data}
        label=${(m) => "rank " + m.rank} />`}
    ${j.ranks && html`<table class="findings"><tr><th>rank</th><th>pid</th><th>gpus</th><th>steps</th><th>last step</th></tr>
      ${j.ranks.map((r) => html`<tr><td>${r.rank}</td><td>${r.pid}</td><td>${(r.gpus || []).join(", ")}</td>
        <td>${r.steps_total ?? ""}</td><td>${r.last_step_ms ? new Date(r.last_step_ms).toLocaleTimeString() : ""}</td></tr>`)}
    </table>`}
    <h3>log lines</h3>
    ${logs.data && html`<pre class="logs">${logs.data.map((l) => new Date(l.time_ms).toLocaleTimeString() + "  " + l.text).join("\n") || "(none in this range)"}</pre>`}
    <h3>node events</h3>
    ${events.data && html`<${EventList} events=${events.data} />`}
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

const SCREENS = {
  jobs: ["Jobs", JobsScreen],
  gpus: ["GPUs", GpusScreen],
  findings: ["Findings", FindingsScreen],
  node: ["Node", NodeScreen],
  job: [null, JobScreen],  // reached from a job's row, not the menu
};

function App() {
  const view = useHash();
  const [, Screen] = SCREENS[view.screen] || SCREENS.gpus;
  return html`<div>
    <header>
      <span class="brand">gpuwatch</span>
      <nav>${Object.entries(SCREENS).filter(([, [name]]) => name).map(([k, [name]]) =>
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
