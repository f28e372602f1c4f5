// #/links: NVLink, PCIe and NIC/InfiniBand throughput as a share of each link's rated
// bandwidth, the links' error counters, and the node's topology matrix with degraded links
// marked. Shares come from gpuwatch_link_utilization_ratio where the store keeps it; otherwise
// they are computed here from the stored per-GPU series and the rated bandwidth the agent uses
// (links.js), never assumed.
import { useMemo } from "preact/hooks";
import { BandChart, EventList, PALETTE, PanelChart, fmtNum, gpuLabel, html } from "./charts.js";
import { getJson, loadEvents, panel, usePoll, useWidth } from "./api.js";
import { timeRange } from "./view_state.js";
import { gpuMatchers, inGpuScope, inScope, namesSelector, nodeMatchers, selector } from "./scope.js";
import { byLabels, degradedTopology, nvlinkRated, nvlinkVersion, pcieRated, ratioToPercent, shareOfRated, throughputOf } from "./links.js";
import { counterRates, countsByGpu, everAboveZero } from "./series.js";

const LINK_KIND = /^link|nvlink|pcie|nic|ib_|topology/;
const KIND_TITLE = { nvlink_peer: "NVLink", nvlink: "NVLink", pcie: "PCIe", nic: "NIC", ib_port: "InfiniBand / RoCE" };
// Error counters of the per-GPU fallback: [metric, label].
const GPU_ERRORS = [
  ["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "NVLink CRC flit"],
  ["DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "NVLink CRC data"],
  ["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "NVLink replay"],
  ["DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "NVLink recovery"],
  ["gpuwatch_pcie_replays_total", "PCIe replay"],
];
const ERROR_LABEL = Object.fromEntries(GPU_ERRORS);

const rxDashed = (m) => (m.direction === "rx" ? { dash: [5, 3], legend: false } : {});
const linkLabel = (m) => (m.gpu !== undefined ? `GPU ${m.gpu}` + (m.peer ? "→" + m.peer : "") : gpuLabel({ ...m, direction: "" }).trim()) + (m.direction ? " " + m.direction : "");
const GBps = (v) => fmtNum(v) + "B/s";

// Split a panel by a label's value.
function splitBy(p, label) {
  const out = {};
  for (const s of p.series) (out[s.metric[label]] = out[s.metric[label]] || { ...p, series: [] }).series.push(s);
  return out;
}

// The share charts: gpuwatch_link_utilization_ratio where stored, else the fallbacks.
async function loadShares(r, width, ctx, topo) {
  const node = nodeMatchers(ctx.filters);
  const ratio = await panel(selector("gpuwatch_link_utilization_ratio", [...node, ["link_type", "=~", "pcie|nvlink_peer|nic|ib_port"]]), r, width);
  ratio.series = ratio.series.filter((s) => inGpuScope(s.metric, ctx.scope));
  const out = {};
  for (const [type, p] of Object.entries(splitBy(ratio, "link_type")))
    out[type === "nvlink_peer" ? "nvlink" : type] = { data: ratioToPercent(p), source: "gpuwatch_link_utilization_ratio" };
  const m = gpuMatchers(ctx.filters, ctx.scope);
  if (!out.pcie && m !== null) {
    const p = await panel(selector(namesSelector(["gpuwatch_pcie_tx_bytes_per_second", "gpuwatch_pcie_rx_bytes_per_second", "DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH"]), m), r, width);
    const gen = byLabels({ series: p.series.filter((s) => s.metric.__name__ === "DCGM_FI_DEV_PCIE_LINK_GEN") }, ["gpu"]);
    const lanes = byLabels({ series: p.series.filter((s) => s.metric.__name__ === "DCGM_FI_DEV_PCIE_LINK_WIDTH") }, ["gpu"]);
    const thru = throughputOf(p, { gpuwatch_pcie_tx_bytes_per_second: "tx", gpuwatch_pcie_rx_bytes_per_second: "rx" }, false);
    const rated = (mt, k) => {
      const g = gen(mt), w = lanes(mt);
      return g && w ? pcieRated(g.last[k], w.last[k]) : null;
    };
    out.pcie = { data: shareOfRated(thru, rated), source: "gpuwatch_pcie_{tx,rx}_bytes_per_second over DCGM_FI_DEV_PCIE_LINK_GEN × _WIDTH" };
  }
  if (!out.nvlink && m !== null) {
    const p = await panel(selector(namesSelector(["gpuwatch_nvlink_tx_bytes_total", "gpuwatch_nvlink_rx_bytes_total", "gpuwatch_nvlink_active_links"]), m), r, width);
    const active = byLabels({ series: p.series.filter((s) => s.metric.__name__ === "gpuwatch_nvlink_active_links") }, ["gpu"]);
    const thru = throughputOf(p, { gpuwatch_nvlink_tx_bytes_total: "tx", gpuwatch_nvlink_rx_bytes_total: "rx" }, true);
    const known = thru.series.every((s) => nvlinkVersion(topo, s.metric.gpu));
    if (known) {
      const rated = (mt, k) => {
        const a = active(mt);
        return a ? nvlinkRated(nvlinkVersion(topo, mt.gpu), a.last[k]) : null;
      };
      out.nvlink = { data: shareOfRated(thru, rated), source: "rate of gpuwatch_nvlink_{tx,rx}_bytes_total over active links × NVLink generation (/api/v1/topology)" };
    } else if (thru.series.length) {
      out.nvlink = { data: thru, bytes: true, source: "rate of gpuwatch_nvlink_{tx,rx}_bytes_total; no NVLink generation in /api/v1/topology, so no share" };
    }
  }
  return out;
}

// Errors per second: gpuwatch_link_errors_per_second where stored, else the rates of the GPU's
// NVLink and PCIe error counters. Only series that saw an error are drawn; `counts` is the
// per-GPU table of the counters.
async function loadErrors(r, width, ctx) {
  const node = nodeMatchers(ctx.filters);
  const stored = await panel(selector("gpuwatch_link_errors_per_second", node), r, width);
  stored.series = stored.series.filter((s) => inGpuScope(s.metric, ctx.scope));
  const m = gpuMatchers(ctx.filters, ctx.scope);
  const counters = m === null ? null : await panel(selector(namesSelector(GPU_ERRORS.map(([n]) => n)), m), r, width);
  let rates = stored, source = "gpuwatch_link_errors_per_second";
  if (!stored.series.length && counters) {
    source = "rates of the GPUs' NVLink and PCIe error counters";
    rates = {
      ...counters,
      series: counters.series.map((s) => {
        const x = counterRates(counters.times, s.last, counters.step, counters.range.end);
        return { metric: s.metric, min: x, max: x, last: x };
      }),
    };
  }
  return { rates: { ...rates, series: rates.series.filter(everAboveZero) }, source, counts: countsByGpu(counters) };
}

function Matrix({ topo }) {
  const snap = topo && topo.snapshot;
  const mx = snap && snap.matrix;
  if (!mx || !mx.gpus) return html`<div class="empty" data-list="topology">The agent holds no topology snapshot of this node${snap && snap.warnings && snap.warnings.length ? ": " + snap.warnings.join("; ") : "."}</div>`;
  const bad = degradedTopology(snap);
  const gpus = snap.gpus || [];
  const nics = mx.nics || [];
  return html`<table class="topo" data-list="topology">
    <tr><th></th>${mx.links.map((_, j) => html`<th>GPU${j}</th>`)}${nics.map((n) => html`<th class=${bad.nics[n] ? "degraded" : ""} title=${(bad.nics[n] || []).join("; ")}>${n}</th>`)}<th>PCIe</th></tr>
    ${mx.links.map((row, i) => {
      const g = gpus[i] || {};
      const why = bad.gpus[i] || [];
      return html`<tr>
        <th class=${why.length ? "degraded" : ""} title=${why.join("; ")}>GPU${i}</th>
        ${row.map((t, j) => html`<td class=${bad.cells[i + "," + j] ? "degraded" : t === "X" ? "self" : ""} title=${bad.cells[i + "," + j] || ""}>${t ?? "?"}</td>`)}
        ${((mx.gpu_nic_links || [])[i] || []).map((t) => html`<td>${t ?? "?"}</td>`)}
        <td class=${g.pcie_width && g.pcie_max_width && g.pcie_width < g.pcie_max_width ? "degraded" : ""}>${g.pcie_gen ? `gen${g.pcie_gen}/${g.pcie_max_gen} x${g.pcie_width}/${g.pcie_max_width}` : "?"}</td>
      </tr>`;
    })}
  </table>
  <div class="topo-notes">
    ${Object.entries(bad.gpus).map(([i, why]) => html`<div class="degraded-note">GPU${i}: ${why.join("; ")}</div>`)}
    ${Object.entries(bad.nics).map(([n, why]) => html`<div class="degraded-note">${n}: ${why.join("; ")}</div>`)}
    <div class="muted">NV# = # bonded NVLinks; PIX, PXB, PHB, NODE, SYS = PCIe paths (nvidia-smi topo -m). PCIe: current/maximum generation and width. Snapshot ${new Date(snap.taken_at_ms).toLocaleString()}, topology version ${topo.version}.</div>
  </div>`;
}

export function LinksScreen({ view, ctx }) {
  const width = useWidth(2);
  const rangeNow = () => timeRange(view.params, Date.now() / 1000);
  const live = rangeNow().live;
  const key = [view.params.range, view.params.from, view.params.to, width, ctx.key];
  const topo = usePoll(() => getJson("/api/v1/topology"), [], true, 60000);
  const topoReady = topo.data || topo.error;
  const shares = usePoll(() => (topoReady ? loadShares(rangeNow(), width, ctx, topo.data && topo.data.snapshot) : Promise.resolve(null)),
    [...key, !!topoReady], live);
  const errs = usePoll(() => loadErrors(rangeNow(), width, ctx), key, live);
  const host = usePoll(() => getJson("/api/v1/host"), [], live, 10000);
  const events = usePoll(() => loadEvents(rangeNow(), ctx.filters.node ? { node: ctx.filters.node } : {}), key, live);
  const ev = useMemo(() => events.data && events.data.filter((e) => inScope(e, ctx.filters, ctx.scope)), [events.data, ctx.key]);
  const sh = shares.data || {};
  const shareChart = (type) => {
    const s = sh[type];
    const name = "link-share-" + type;
    const title = `${KIND_TITLE[type]} throughput ${s && s.bytes ? "" : "as % of rated bandwidth "}(dashed: rx)`;
    if (!shares.data) return html`<${PanelChart} state=${{ data: null, error: shares.error }} name=${name} title=${title} />`;
    if (!s || !s.data.series.length) return html`<div class="chart-box" data-chart=${name} data-series="0"><div class="chart-title">${title}</div>
      <div class="empty">${type === "nic" || type === "ib_port" ? "The store keeps no throughput series of these links (gpuwatch_link_utilization_ratio{link_type=\"" + type + "\"}); the NICs' counters now are below." : "No series in this range."}</div></div>`;
    return html`<div><${BandChart} data=${s.data} name=${name} title=${title} unit=${s.bytes ? "B/s" : "%"} fmt=${s.bytes ? GBps : undefined}
      events=${ev} styleOf=${rxDashed} label=${linkLabel} /><div class="muted source">${s.source}</div></div>`;
  };
  const counts = errs.data ? errs.data.counts : {};
  const present = GPU_ERRORS.filter(([n]) => Object.values(counts).some((c) => c[n]));
  const nics = (host.data && host.data.nics) || [];
  return html`<section data-screen="links">
    ${shares.error && html`<div class="error">${shares.error}</div>`}
    <div class="grid2">
      ${shareChart("nvlink")}
      ${shareChart("pcie")}
      ${shareChart("nic")}
      ${shareChart("ib_port")}
    </div>
    <h3>Link errors</h3>
    ${errs.error && html`<div class="error">${errs.error}</div>`}
    ${errs.data && (errs.data.rates.series.length
      ? html`<div><${BandChart} data=${errs.data.rates} name="link-errors" title="Link errors per second" unit="/s" events=${ev}
          styleOf=${(m, i) => ({ color: PALETTE[i % PALETTE.length] })}
          label=${(m) => linkLabel(m) + (ERROR_LABEL[m.__name__] ? " " + ERROR_LABEL[m.__name__] : m.link_type ? " " + m.link_type : "")} />
          <div class="muted source">${errs.data.source}</div></div>`
      : html`<div class="chart-box" data-chart="link-errors" data-series="0"><div class="empty">No link errors in this range.</div></div>`)}
    ${present.length > 0 && html`<table class="findings counts" data-list="link-counts">
      <tr><th>GPU</th>${present.map(([, h]) => html`<th>${h}</th>`)}</tr>
      ${Object.keys(counts).sort((a, b) => a - b).map((g) => html`<tr data-gpu=${g}><td>GPU ${g}</td>${present.map(([n]) => {
        const c = counts[g][n];
        return !c || c.now === null ? html`<td class="na">–</td>`
          : html`<td class=${c.now > 0 ? "bad" : ""}>${fmtNum(c.now)}${c.inc > 0 ? html` <span class="inc">+${fmtNum(c.inc)} in range</span>` : ""}</td>`;
      })}</tr>`)}
    </table>`}
    ${nics.length > 0 && html`<table class="findings counts" data-list="nics">
      <tr><th>NIC (now, /api/v1/host)</th><th>received</th><th>sent</th><th>receive errors</th><th>send errors</th></tr>
      ${nics.map((n) => html`<tr><td>${n.name}</td><td>${fmtNum(n.rx_bytes)}B</td><td>${fmtNum(n.tx_bytes)}B</td>
        <td class=${n.rx_errors > 0 ? "bad" : ""}>${n.rx_errors}</td><td class=${n.tx_errors > 0 ? "bad" : ""}>${n.tx_errors}</td></tr>`)}
    </table>`}
    <h3>Topology</h3>
    ${topo.error && html`<div class="error">${topo.error}</div>`}
    ${topo.data && html`<${Matrix} topo=${topo.data} />`}
    ${topo.data && (topo.data.last_changes || []).length > 0 && html`<div class="topo-changes"><b>Last changes:</b>
      <ul>${topo.data.last_changes.map((c) => html`<li class=${c.kind && /lost|removed/.test(c.kind) ? "degraded-note" : ""}>${c.summary || `${c.kind} ${c.subject}: ${c.before} → ${c.after}`}</li>`)}</ul></div>`}
    <h3>Link events</h3>
    ${ev && html`<${EventList} name="link-events" events=${ev.filter((e) => LINK_KIND.test(e.kind))} />`}
  </section>`;
}
