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
import { auth, getJson, loadEvents, panel, readToken, saveToken, usePoll, useWidth } from "./api.js";
import { EventList, HeatStrip, PanelChart, gpuLabel, html } from "./charts.js";
import { gpuMatchers, inScope, jobMatchers, namesSelector, scopeOf, selector } from "./scope.js";
import { findingHref, findingView, mergeFindings, runbookRef } from "./findings.js";
import { SHARES, jobPanelWidth, newest, shares, stepBands, throughput } from "./jobs.js";
import { memoryRows } from "./memory.js";
import { HealthScreen } from "./screen_health.js";
import { LinksScreen } from "./screen_links.js";
import { AccountingScreen } from "./screen_accounting.js";
import { NodesScreen } from "./screen_nodes.js";

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
  const mem = usePoll(() => panel(m === null ? null : selector(namesSelector(["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_FREE"]), m), rangeNow(), width), key, range.live);
  const used = useMemo(() => mem.data && { ...mem.data, series: mem.data.series.filter((s) => s.metric.__name__ !== "DCGM_FI_DEV_FB_FREE") }, [mem.data]);
  const rows = useMemo(() => memoryRows(mem.data), [mem.data]);
  const events = usePoll(() => loadEvents(rangeNow(), ctx.filters.node ? { node: ctx.filters.node } : {}), key, range.live);
  const ev = useMemo(() => events.data && events.data.filter((e) => inScope(e, ctx.filters, ctx.scope)), [events.data, ctx.key]);
  return html`<section data-screen="gpus">
    ${util.error && html`<div class="error">${util.error}</div>`}
    ${util.data && (util.data.series.length
      ? html`<${HeatStrip} data=${util.data} events=${ev} title=${util.data.what + ", minimum per " + util.data.step + " s"} />`
      : html`<div class="empty">No GPU series in this range.</div>`)}
    <${PanelChart} state=${{ ...mem, data: used }} name="DCGM_FI_DEV_FB_USED" title="Memory used (dashed: total)" unit="MiB" events=${ev}
      styleOf=${(mt) => (mt.__name__ === "DCGM_FI_DEV_FB_TOTAL" ? { dash: [6, 4], legend: false } : {})}
      label=${(mt) => gpuLabel(mt) + (mt.__name__ === "DCGM_FI_DEV_FB_TOTAL" ? " total" : "")} />
    ${rows.length > 0 && html`<table class="findings counts" data-list="memory">
      <tr><th>GPU</th><th>used now</th><th>peak in range</th><th>total</th><th>headroom (total − peak)</th><th>OOM estimate</th></tr>
      ${rows.map((r) => html`<tr data-gpu=${r.key}><td>${r.name}</td><td>${mib(r.now)}</td><td>${mib(r.peak)}</td><td>${mib(r.total)}</td>
        <td class=${r.headroom !== null && r.total && r.headroom < 0.05 * r.total ? "bad" : ""}>${mib(r.headroom)}${r.headroom !== null && r.total ? ` (${Math.round((100 * r.headroom) / r.total)} %)` : ""}</td>
        <td class=${r.oom ? "bad" : ""}>${r.total === null ? "no total reported" : r.oom ? oomText(r.oom) : "none (not growing)"}</td></tr>`)}
    </table>
    <div class="muted source">Peak: the largest sample in the range. OOM estimate: where the linear trend of the last quarter of the range reaches the total.</div>`}
  </section>`;
}

const mib = (v) => (v === null || v === undefined ? "–" : v >= 1024 ? (v / 1024).toFixed(1) + " GiB" : Math.round(v) + " MiB");
function oomText(t) {
  const d = t - Date.now() / 1000;
  const inS = d <= 0 ? "now" : d < 3600 ? `in ${Math.round(d / 60)} min` : d < 172800 ? `in ${(d / 3600).toFixed(1)} h` : `in ${Math.round(d / 86400)} days`;
  return `${inS} (${new Date(t * 1000).toLocaleString()})`;
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

// #/jobs: every job the agent knows, each linking to its own view, with its throughput, step
// time against its template's baseline band and the shares of step time lost to data, comm and
// checkpoints, folded over ranks as jobs.js says.
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
    ${list.map((x) => html`<${JobCharts} key=${x.id} job=${x} view=${view} ctx=${ctx} />`)}
  </section>`;
}

const JOB_SERIES = ["gpuwatch_job_samples_per_second", "gpuwatch_job_iterations_per_second", "gpuwatch_job_step_seconds", ...SHARES.map(([n]) => n)];
const BAND_STYLE = { p50: { color: "#4e79a7" }, p95: { color: "#76b7b2", dash: [4, 3] }, p99: { color: "#e15759" }, baseline: { color: "#7b8794", dash: [2, 3] } };
const SHARE_COLOR = { "data wait": "#f28e2b", comm: "#b07aa1", checkpoint: "#59a14f" };
const fmtS = (v) => (v === null || v === undefined ? "–" : v < 1 ? (v * 1000).toFixed(v < 0.01 ? 2 : 0) + " ms" : v.toFixed(2) + " s");

// One job's charts: one panel request for all its series, folded here.
function JobCharts({ job, view, ctx }) {
  const width = useWidth(2);
  const rangeNow = () => timeRange(view.params, Date.now() / 1000);
  const live = rangeNow().live;
  const jm = jobMatchers(ctx.filters, null);
  const p = usePoll(() => {
    const r = rangeNow();
    return panel(selector(namesSelector(JOB_SERIES), [...jm, ["job", "=", job.id]]), r, jobPanelWidth(r, width));
  }, [job.id, view.params.range, view.params.from, view.params.to, width, ctx.key], live);
  const events = usePoll(() => loadEvents(rangeNow(), ctx.filters.node ? { node: ctx.filters.node } : {}),
    [view.params.range, view.params.from, view.params.to, ctx.key], live);
  const ev = useMemo(() => events.data && events.data.filter((e) => inScope(e, ctx.filters, ctx.scope) && (!e.job || e.job === job.id)), [events.data, ctx.key, job.id]);
  const d = p.data;
  const tp = useMemo(() => d && throughput(d), [d]);
  const steps = useMemo(() => d && stepBands(d, job.baseline), [d, job.baseline]);
  const sh = useMemo(() => d && shares(d), [d]);
  const st = (data) => ({ data, error: p.error });
  const b = job.baseline;
  const common = { events: ev, spanGaps: true, label: (m) => m.q };
  const id = encodeURIComponent(job.id);
  return html`<div class="job-charts" data-job=${job.id}>
    <h3>job <a href=${formatHash({ ...view, screen: "job", arg: job.id })}>${job.id}</a>
      <span class="muted">${b ? `baseline: template ${b.template} (${b.shape}, v${b.version}), median ${fmtS(b.step_median_s)}, p99 ${fmtS(b.step_p99_s)}` : "no template baseline"}</span></h3>
    <div class="grid2">
      <${PanelChart} state=${st(tp && tp.samples)} name=${"job-samples-" + id} title="Samples per second (sum over ranks)" unit="samples/s" ...${common}
        styleOf=${() => ({ color: "#4e79a7" })} empty="No samples/s of this job in this range." />
      <${PanelChart} state=${st(tp && tp.iterations)} name=${"job-iterations-" + id} title="Iterations per second (slowest rank)" unit="it/s" ...${common}
        styleOf=${() => ({ color: "#f28e2b" })} empty="No it/s of this job in this range." />
      <div><${PanelChart} state=${st(steps)} name=${"job-step-" + id}
        title=${"Step time p50/p95/p99 (max over ranks)" + (b ? ", grey: baseline median–p99" : "")} unit="s" ...${common}
        fmt=${fmtS} styleOf=${(m) => BAND_STYLE[m.q] || {}} empty="No step time of this job in this range." />
        ${!b && html`<div class="muted source" data-baseline="none">no template baseline</div>`}</div>
      <${PanelChart} state=${st(sh)} name=${"job-shares-" + id} title="Share of step time: data wait, comm, checkpoint (mean over ranks)" unit="%" ...${common}
        styleOf=${(m) => ({ color: SHARE_COLOR[m.q] })} empty="No data-wait, comm or checkpoint shares of this job in this range." />
    </div>
    ${sh && sh.series.length > 0 && html`<div class="facts" data-list="job-shares">now: ${sh.series.map((s) => `${s.metric.q} ${newest(s.last) === null ? "–" : newest(s.last).toFixed(1) + " %"}`).join(" · ")}</div>`}
  </div>`;
}

// #/job/<id>: the job (on a hub, its nodes, each opening its GPUs) → its ranks' throughput → its
// log lines and its node's events.
function JobScreen({ view, ctx }) {
  const width = useWidth();
  const id = view.arg;
  const rangeNow = () => timeRange(view.params, Date.now() / 1000);
  const range = rangeNow();
  const key = [id, view.params.range, view.params.from, view.params.to, width, ctx.key];
  const job = usePoll(() => getJson("/api/v1/jobs/" + encodeURIComponent(id)), [id], true);
  const jm = jobMatchers(ctx.filters, null);
  const ips = usePoll(() => {
    const r = rangeNow();
    return panel(selector("gpuwatch_job_iterations_per_second", [...jm, ["job", "=", id]]), r, jobPanelWidth(r, width));
  }, key, range.live);
  const node = ctx.filters.node ? { node: ctx.filters.node } : {};
  const events = usePoll(() => loadEvents(rangeNow(), node), key, range.live);
  const logs = usePoll(() => loadEvents(rangeNow(), { ...node, kind: "log", job: id }), key, range.live);
  const j = job.data || {};
  return html`<section data-screen="job">
    <h2>job ${id}</h2>
    ${job.error && html`<div class="error">${job.error}</div>`}
    ${job.data && html`<div class="facts">${j.state}${j.hung ? " (hung)" : ""} · user ${j.user || "?"} · template ${j.template || "?"} · ${j.ranks_reporting ?? "?"} of ${j.world_size ?? "?"} ranks reporting</div>`}
    ${j.nodes && j.nodes.length > 0 && html`<div class="facts" data-list="job-nodes">on ${j.nodes.length} node${j.nodes.length > 1 ? "s" : ""}: ${j.nodes.map((n, i) => html`${i > 0 ? " · " : ""}<a data-node=${n.node}
      href=${formatHash({ screen: "gpus", arg: "", params: { ...view.params, node: n.node, job: id } })}>${n.node}</a>${n.gpus && n.gpus.length ? ` (GPU ${n.gpus.join(", ")})` : ""}`)}</div>`}
    <${PanelChart} state=${ips} name="gpuwatch_job_iterations_per_second" title="Iterations per second, per rank" unit="it/s" events=${events.data}
      label=${(m) => "rank " + m.rank} spanGaps=${true} empty="No iteration rate of this job in this range." />
    ${j.ranks && html`<table class="findings" data-list="ranks"><tr><th>rank</th>${j.nodes && html`<th>node</th>`}<th>pid</th><th>gpus</th><th>steps</th><th>last step</th></tr>
      ${j.ranks.map((r) => html`<tr><td>${r.rank}</td>${j.nodes && html`<td>${r.node || ""}</td>`}<td>${r.pid ?? ""}</td><td>${(r.gpus || []).join(", ")}</td>
        <td>${r.steps_total ?? ""}</td><td>${r.last_step_ms ? new Date(r.last_step_ms).toLocaleTimeString() : ""}</td></tr>`)}
    </table>`}
    <h3>log lines</h3>
    ${logs.data && html`<pre class="logs">${logs.data.map((l) => new Date(l.time_ms).toLocaleTimeString() + "  " + l.text).join("\n") || "(none in this range)"}</pre>`}
    <h3>node events</h3>
    ${events.data && html`<${EventList} name="node-events" events=${events.data} />`}
  </section>`;
}

// #/findings: open, silenced and resolved findings and alerts, each with what it is, its
// evidence and action, a link to the screen, GPU and time range that show its evidence, and its
// runbook entry (docs/runbook.md, which the agent does not serve: named as text).
function FindingsScreen({ view, ctx }) {
  const f = usePoll(() => getJson("/api/v1/findings"), [], true);
  const a = usePoll(() => getJson("/api/v1/alerts"), [], true);
  const all = useMemo(() => mergeFindings(f.data && f.data.findings, a.data && a.data.alerts), [f.data, a.data]);
  const list = all.filter((x) => inScope(x, ctx.filters, ctx.scope));
  const nowS = Date.now() / 1000;
  const when = (x) => `${new Date(x.first_seen * 1000).toLocaleTimeString()} – ${new Date(x.last_seen * 1000).toLocaleTimeString()}`;
  return html`<section data-screen="findings">
    ${f.error && html`<div class="error">${f.error}</div>`}
    ${a.error && html`<div class="error">${a.error}</div>`}
    ${(f.data || a.data) && list.length === 0 && html`<div class="empty">No findings.</div>`}
    <table class="findings">
      ${list.length > 0 && html`<tr><th>status</th><th>severity</th><th>cause</th><th>where</th><th>seen</th><th>summary and evidence</th><th>action</th><th>look at</th></tr>`}
      ${list.map((x) => html`<tr class=${"sev-" + x.severity + " st-" + x.status} data-finding=${x.cause} data-status=${x.status}>
        <td>${x.status}${x.why && html`<div class="muted">${x.why}</div>`}</td>
        <td>${x.severity}</td><td>${x.cause}${x.code !== undefined && x.code !== null && x.code !== "" ? " " + x.code : ""}</td>
        <td>${[x.node, x.gpu !== undefined && x.gpu !== null && "GPU " + x.gpu, x.job && "job " + x.job, x.rank !== undefined && x.rank !== null && "rank " + x.rank, x.nic && "NIC " + x.nic].filter(Boolean).join(", ")}</td>
        <td class="nowrap">${when(x)}</td>
        <td>${x.summary}${x.evidence && x.evidence.length > 0 && html`<ul>${x.evidence.map((e) => html`<li>${e}</li>`)}</ul>`}</td>
        <td>${x.action}</td>
        <td class="nowrap"><a data-link="evidence" href=${findingHref(x, view.params, nowS)}>${lookAt(x)}</a>
          <div class="muted" data-link="runbook">runbook: ${runbookRef(x.cause)}</div></td>
      </tr>`)}
    </table>
  </section>`;
}

// A finding's link text: the screen and GPU it opens.
function lookAt(x) {
  const v = findingView(x, {}, Date.now() / 1000);
  const name = v.screen === "job" ? "job " + v.arg : (SCREENS[v.screen] || [v.screen])[0];
  return `${name}${v.params.gpu !== undefined ? ", GPU " + v.params.gpu : ""} →`;
}

const SCREENS = {
  jobs: ["Jobs", JobsScreen],
  gpus: ["GPUs", GpusScreen],
  health: ["Health", HealthScreen],
  links: ["Links", LinksScreen],
  findings: ["Findings", FindingsScreen],
  node: ["Node", NodeScreen],
  accounting: ["Accounting", AccountingScreen],
  nodes: ["Nodes", NodesScreen, { hub: true }],  // a hub's: its node list
  job: [null, JobScreen],  // reached from a job's row, not the menu
};

// ---- the frame: banner, filters, zoom -------------------------------------------------------

// Node, job and user, each a choice of what the agent knows, plus the view's own value.
function Filters({ view, jobs, nodes, gpus }) {
  const f = filtersOf(view.params);
  const choices = {
    node: nodes,
    job: jobs.map((j) => j.id),
    user: jobs.map((j) => j.user).filter(Boolean),
    gpu: gpus.map(String),
  };
  return html`<span class="filters" data-filters="">${FILTERS.map((k) => {
    const opts = [...new Set([...(choices[k] || []), ...(f[k] ? [f[k]] : [])])].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
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

// Asks for a token once a read was refused with 401 (the agent needs one), and keeps it for
// the tab (api.js). A 403 is not asked about: the token is right, and its role or projects do
// not reach that screen, which the screen's error says.
function TokenBar() {
  const [, redraw] = useState(0);
  useEffect(() => {
    const on = () => redraw((n) => n + 1);
    auth.listeners.add(on);
    return () => auth.listeners.delete(on);
  }, []);
  if (!auth.needed) return null;
  const submit = (e) => {
    e.preventDefault();
    saveToken(new FormData(e.target).get("token") || "");
    location.reload();
  };
  return html`<form class="tokenbar" data-banner="token" onSubmit=${submit}>
    <span>${readToken() ? "The token was refused: " : "This agent needs a token: "}${auth.message}</span>
    <input name="token" type="password" autocomplete="off" placeholder="read token" />
    <button type="submit">Use token</button>
  </form>`;
}

function App() {
  const view = useHash();
  const [, Screen] = SCREENS[view.screen] || SCREENS.gpus;
  const host = usePoll(() => getJson("/api/v1/host"), [], true, 30000);
  const caps = usePoll(() => getJson("/api/v1/capabilities"), [], true, 60000);
  const jobs = usePoll(() => getJson("/api/v1/jobs"), [], true);
  const nodes = usePoll(() => getJson("/api/v1/label/Hostname/values").then((b) => b.data || []), [], true, 60000);
  const gpus = usePoll(() => getJson("/api/v1/gpus").then((b) => (b.gpus || []).map((g) => g.index)), [], true, 60000);
  const filters = filtersOf(view.params);
  const jobList = (jobs.data && jobs.data.jobs) || [];
  // A job or user filter waits for the job list: until then it would select no GPU at all.
  const waiting = (filters.job || filters.user) && !jobs.data && !jobs.error;
  const scope = scopeOf(filters, jobList);
  const key = JSON.stringify([filters, scope]);
  const ctx = useMemo(() => ({ filters, scope, key }), [key]);
  const isHub = !!(host.data && host.data.hub);
  // A hub is no node of its own: its name is not one to filter by.
  const nodeNames = [...new Set([...(nodes.data || []), ...(host.data && host.data.hostname && !isHub ? [host.data.hostname] : [])])];
  return html`<div>
    <header>
      <span class="brand">gpuwatch</span>
      <nav>${Object.entries(SCREENS).filter(([, [name, , only]]) => name && (!only || (only.hub && isHub))).map(([k, [name]]) =>
        html`<a href=${formatHash({ ...view, screen: k, arg: "" })} class=${k === view.screen ? "on" : ""}>${name}</a>`)}</nav>
      <span class="range">${Object.keys(RANGES).map((r) =>
        html`<button class=${(view.params.range || "1h") === r && !view.params.from ? "on" : ""}
          onClick=${() => go({ ...view, params: rangeParams(view.params, r) })}>${r}</button>`)}</span>
    </header>
    ${isSimulated(host.data, caps.data) && html`<div class="simulated" data-banner="simulated" role="alert">
      SIMULATED — the GPUs of ${(host.data && host.data.hostname) || "this node"} are gpuwatch demo's simulation, not real hardware.</div>`}
    <${TokenBar} />
    <div class="toolbar">
      <${Filters} view=${view} jobs=${jobList} nodes=${nodeNames} gpus=${gpus.data || []} />
      <${ZoomBar} view=${view} />
      <span class="hint">Drag over a chart to zoom.</span>
    </div>
    <main>${waiting ? html`<div class="empty">Reading the jobs…</div>` : html`<${Screen} view=${view} ctx=${ctx} />`}</main>
  </div>`;
}

if (typeof document !== "undefined" && document.getElementById("app")) {
  render(html`<${App} />`, document.getElementById("app"));
}
