// The gpuwatch dashboard: hash routes, one shared time range and the filters held in the URL,
// every chart read from the agent (/api/v1/panel and the JSON APIs). Preact + htm for the views,
// uPlot for the charts (charts.js); bundled by build.mjs and served from the binary.
import { render } from "preact";
import { useEffect, useMemo, useState } from "preact/hooks";
import "uplot/dist/uPlot.min.css";
import "./app.css";

import {
  FILTERS, RANGES, filterParams, filtersOf, formatHash, isSimulated, num, parseHash, rangeParams, timeRange, zoomOutParams,
} from "./view_state.js";
import { getJson, loadEvents, panel, usePoll, useWidth } from "./api.js";
import { EventList, HeatStrip, PanelChart, html } from "./charts.js";
import { gpuMatchers, inScope, jobMatchers, scopeOf, selector } from "./scope.js";
import { HealthScreen } from "./screen_health.js";
import { LinksScreen } from "./screen_links.js";

// Hash changes since the page loaded: "back" undoes a zoom only when there is one to undo.
let navigations = 0;

function useHash() {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => {
      navigations++;
      setHash(location.hash);
    };
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return parseHash(hash);
}

function go(view) {
  location.hash = formatHash(view);
}

// ---- screens --------------------------------------------------------------------------------

function GpusScreen({ view, ctx }) {
  const width = useWidth();
  // Computed at each load, so a live range moves with the clock between polls.
  const rangeNow = () => timeRange(view.params, Date.now() / 1000);
  const range = rangeNow();
  const key = [view.params.range, view.params.from, view.params.to, width, ctx.key];
  const m = gpuMatchers(ctx.filters, ctx.scope);
  const sel = (name) => (m === null ? null : selector(name, m));
  const util = usePoll(
    async () => {
      // SM activity where the GPU reports it (DCGM profiling), else utilization.
      const sm = await panel(sel("DCGM_FI_PROF_SM_ACTIVE"), rangeNow(), width);
      if (sm.series.length) {
        sm.series.forEach((s) => ["min", "max", "last"].forEach((f) => (s[f] = s[f].map((v) => (num(v) === null ? null : num(v) * 100)))));
        return { ...sm, what: "SM activity (%)" };
      }
      return { ...(await panel(sel("DCGM_FI_DEV_GPU_UTIL"), rangeNow(), width)), what: "GPU utilization (%)" };
    },
    key,
    range.live,
  );
  const mem = usePoll(() => panel(sel("DCGM_FI_DEV_FB_USED"), rangeNow(), width), key, range.live);
  const events = usePoll(() => loadEvents(rangeNow(), ctx.filters.node ? { node: ctx.filters.node } : {}), key, range.live);
  const ev = useMemo(() => events.data && events.data.filter((e) => inScope(e, ctx.filters, ctx.scope)), [events.data, ctx.key]);
  return html`<section data-screen="gpus">
    ${util.error && html`<div class="error">${util.error}</div>`}
    ${util.data && (util.data.series.length
      ? html`<${HeatStrip} data=${util.data} events=${ev} title=${util.data.what + ", minimum per " + util.data.step + " s"} />`
      : html`<div class="empty">No GPU series in this range.</div>`)}
    ${mem.data && mem.data.series.length > 0 && html`<${PanelChart} state=${mem} name="DCGM_FI_DEV_FB_USED" title="Memory used" unit="MiB" events=${ev} />`}
  </section>`;
}

// #/node: the node's time line of events, changes, annotations and maintenance.
function NodeScreen({ view, ctx }) {
  const rangeNow = () => timeRange(view.params, Date.now() / 1000);
  const range = rangeNow();
  const ev = usePoll(() => loadEvents(rangeNow(), ctx.filters.node ? { node: ctx.filters.node } : {}),
    [view.params.range, view.params.from, view.params.to, ctx.key], range.live);
  return html`<section data-screen="node">
    ${ev.error && html`<div class="error">${ev.error}</div>`}
    ${ev.data && html`<${EventList} name="node-events" events=${ev.data.filter((e) => inScope(e, ctx.filters, ctx.scope))} />`}
  </section>`;
}

// #/jobs: every job the agent knows, each linking to its own view.
function JobsScreen({ view, ctx }) {
  const j = usePoll(() => getJson("/api/v1/jobs"), [], true);
  const list = ((j.data && j.data.jobs) || []).filter((x) => !ctx.scope.jobs || ctx.scope.jobs.includes(x.id));
  return html`<section data-screen="jobs">
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
function JobScreen({ view, ctx }) {
  const width = useWidth();
  const id = view.arg;
  const rangeNow = () => timeRange(view.params, Date.now() / 1000);
  const range = rangeNow();
  const key = [id, view.params.range, view.params.from, view.params.to, width, ctx.key];
  const job = usePoll(() => getJson("/api/v1/jobs/" + encodeURIComponent(id)), [id], true);
  const jm = jobMatchers(ctx.filters, null);
  const ips = usePoll(() => panel(selector("gpuwatch_job_iterations_per_second", [...jm, ["job", "=", id]]), rangeNow(), width), key, range.live);
  const node = ctx.filters.node ? { node: ctx.filters.node } : {};
  const events = usePoll(() => loadEvents(rangeNow(), node), key, range.live);
  const logs = usePoll(() => loadEvents(rangeNow(), { ...node, kind: "log", job: id }), key, range.live);
  const j = job.data || {};
  return html`<section data-screen="job">
    <h2>job ${id}</h2>
    ${job.error && html`<div class="error">${job.error}</div>`}
    ${job.data && html`<div class="facts">${j.state}${j.hung ? " (hung)" : ""} · user ${j.user || "?"} · template ${j.template || "?"} · ${j.ranks_reporting ?? "?"} of ${j.world_size ?? "?"} ranks reporting</div>`}
    <${PanelChart} state=${ips} name="gpuwatch_job_iterations_per_second" title="Iterations per second, per rank" unit="it/s" events=${events.data}
      label=${(m) => "rank " + m.rank} empty="No iteration rate of this job in this range." />
    ${j.ranks && html`<table class="findings"><tr><th>rank</th><th>pid</th><th>gpus</th><th>steps</th><th>last step</th></tr>
      ${j.ranks.map((r) => html`<tr><td>${r.rank}</td><td>${r.pid}</td><td>${(r.gpus || []).join(", ")}</td>
        <td>${r.steps_total ?? ""}</td><td>${r.last_step_ms ? new Date(r.last_step_ms).toLocaleTimeString() : ""}</td></tr>`)}
    </table>`}
    <h3>log lines</h3>
    ${logs.data && html`<pre class="logs">${logs.data.map((l) => new Date(l.time_ms).toLocaleTimeString() + "  " + l.text).join("\n") || "(none in this range)"}</pre>`}
    <h3>node events</h3>
    ${events.data && html`<${EventList} name="node-events" events=${events.data} />`}
  </section>`;
}

function FindingsScreen({ ctx }) {
  const f = usePoll(() => getJson("/api/v1/findings"), [], true);
  const list = ((f.data && (f.data.findings || [])) || []).filter((x) => inScope(x, ctx.filters, ctx.scope));
  return html`<section data-screen="findings">
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
  health: ["Health", HealthScreen],
  links: ["Links", LinksScreen],
  findings: ["Findings", FindingsScreen],
  node: ["Node", NodeScreen],
  job: [null, JobScreen],  // reached from a job's row, not the menu
};

// ---- the frame: banner, filters, zoom -------------------------------------------------------

// Node, job and user, each a choice of what the agent knows, plus the view's own value.
function Filters({ view, jobs, nodes }) {
  const f = filtersOf(view.params);
  const choices = {
    node: nodes,
    job: jobs.map((j) => j.id),
    user: jobs.map((j) => j.user).filter(Boolean),
  };
  return html`<span class="filters" data-filters="">${FILTERS.map((k) => {
    const opts = [...new Set([...(choices[k] || []), ...(f[k] ? [f[k]] : [])])].sort();
    return html`<label>${k} <select name=${k} data-filter=${k} value=${f[k] || ""}
      onChange=${(e) => go({ ...view, params: filterParams(view.params, k, e.currentTarget.value) })}>
      <option value="">all</option>${opts.map((o) => html`<option value=${o}>${o}</option>`)}
    </select></label>`;
  })}</span>`;
}

// A fixed range (a zoom): what it is, and the ways out of it.
function ZoomBar({ view }) {
  const r = timeRange(view.params, Date.now() / 1000);
  if (r.live) return null;
  const fmt = (t) => new Date(t * 1000).toLocaleString();
  return html`<span class="zoom" data-zoom="">
    ${fmt(r.start)} – ${fmt(r.end)}
    ${navigations > 0 && html`<button data-action="back" onClick=${() => history.back()}>back</button>`}
    <button data-action="zoom-out" onClick=${() => go({ ...view, params: zoomOutParams(view.params, Date.now() / 1000) })}>zoom out</button>
    <button data-action="live" onClick=${() => go({ ...view, params: rangeParams(view.params, "1h") })}>live</button>
  </span>`;
}

function App() {
  const view = useHash();
  const [, Screen] = SCREENS[view.screen] || SCREENS.gpus;
  const host = usePoll(() => getJson("/api/v1/host"), [], true, 30000);
  const caps = usePoll(() => getJson("/api/v1/capabilities"), [], true, 60000);
  const jobs = usePoll(() => getJson("/api/v1/jobs"), [], true);
  const nodes = usePoll(() => getJson("/api/v1/label/Hostname/values").then((b) => b.data || []), [], true, 60000);
  const filters = filtersOf(view.params);
  const jobList = (jobs.data && jobs.data.jobs) || [];
  // A job or user filter waits for the job list: until then it would select no GPU at all.
  const waiting = (filters.job || filters.user) && !jobs.data && !jobs.error;
  const scope = scopeOf(filters, jobList);
  const key = JSON.stringify([filters, scope]);
  const ctx = useMemo(() => ({ filters, scope, key }), [key]);
  const nodeNames = [...new Set([...(nodes.data || []), ...(host.data && host.data.hostname ? [host.data.hostname] : [])])];
  return html`<div>
    <header>
      <span class="brand">gpuwatch</span>
      <nav>${Object.entries(SCREENS).filter(([, [name]]) => name).map(([k, [name]]) =>
        html`<a href=${formatHash({ ...view, screen: k, arg: "" })} class=${k === view.screen ? "on" : ""}>${name}</a>`)}</nav>
      <span class="range">${Object.keys(RANGES).map((r) =>
        html`<button class=${(view.params.range || "1h") === r && !view.params.from ? "on" : ""}
          onClick=${() => go({ ...view, params: rangeParams(view.params, r) })}>${r}</button>`)}</span>
    </header>
    ${isSimulated(host.data, caps.data) && html`<div class="simulated" data-banner="simulated" role="alert">
      SIMULATED — the GPUs of ${(host.data && host.data.hostname) || "this node"} are gpuwatch demo's simulation, not real hardware.</div>`}
    <div class="toolbar">
      <${Filters} view=${view} jobs=${jobList} nodes=${nodeNames} />
      <${ZoomBar} view=${view} />
      <span class="hint">Drag over a chart to zoom.</span>
    </div>
    <main>${waiting ? html`<div class="empty">Reading the jobs…</div>` : html`<${Screen} view=${view} ctx=${ctx} />`}</main>
  </div>`;
}

if (typeof document !== "undefined" && document.getElementById("app")) {
  render(html`<${App} />`, document.getElementById("app"));
}
