// #/health: each GPU's temperature, power and clocks over the view's range with its throttle
// reasons shaded on the time axis, then its ECC, retired-page, row-remap and XID counts and the
// health events. Every chart is a panel of the agent's own series (docs/metrics.md).
import { useMemo } from "preact/hooks";
import { BandChart, EventList, PanelChart, ThrottleStrip, fmtNum, gpuLabel, html } from "./charts.js";
import { loadEvents, panel, usePoll, useWidth } from "./api.js";
import { timeRange } from "./view_state.js";
import { gpuMatchers, inScope, namesSelector, selector } from "./scope.js";
import { REASONS, throttleIntervals } from "./throttle.js";
import { byGpuKey, countsByGpu, everAboveZero, gpuKeyName } from "./series.js";

// The counts table's columns: [metric, heading, kind]. A counter and a count show their value
// and the increase over the range; a flag shows yes/no. Absent metrics (unsupported by the GPU,
// docs/metrics.md) drop their column.
const COUNTS = [
  ["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ECC SBE (volatile)", "count"],
  ["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ECC DBE (volatile)", "count"],
  ["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "ECC SBE (lifetime)", "count"],
  ["DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "ECC DBE (lifetime)", "count"],
  ["DCGM_FI_DEV_RETIRED_SBE", "retired pages SBE", "count"],
  ["DCGM_FI_DEV_RETIRED_DBE", "retired pages DBE", "count"],
  ["DCGM_FI_DEV_RETIRED_PENDING", "retirement pending", "flag"],
  ["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "rows remapped (corr.)", "count"],
  ["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "rows remapped (unc.)", "count"],
  ["gpuwatch_remapped_rows_pending", "remap pending", "flag"],
  ["DCGM_FI_DEV_ROW_REMAP_FAILURE", "remap failed", "flag"],
  ["gpuwatch_xid_errors_total", "XIDs", "count"],
];
// Drawn over time on the errors chart, when above zero in the range: [metric, label, dash].
const ERROR_LINES = {
  DCGM_FI_DEV_ECC_SBE_VOL_TOTAL: ["SBE", undefined],
  DCGM_FI_DEV_ECC_DBE_VOL_TOTAL: ["DBE", [6, 3]],
  DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS: ["rows remapped (unc.)", [2, 2]],
  gpuwatch_xid_errors_total: ["XID", [1, 3]],
};
const HEALTH_KIND = /xid|ecc|gpu_lost|gpu_recovered|remap|retire|throttl|thermal|power|clock/;
const SHADED = REASONS.filter((r) => r.shade).map((r) => r.name);

function CountCell({ c, kind }) {
  if (!c || c.now === null) return html`<td class="na">–</td>`;
  if (kind === "flag") return html`<td class=${c.now > 0 ? "bad" : ""}>${c.now > 0 ? "yes" : "no"}</td>`;
  const parts = c.parts.length ? c.parts.map((p) => `${p.key}×${fmtNum(p.now)}`).join(", ") : fmtNum(c.now);
  return html`<td class=${c.now > 0 ? "bad" : ""}>${parts}${c.inc > 0 ? html` <span class="inc">+${fmtNum(c.inc)} in range</span>` : ""}</td>`;
}

export function HealthScreen({ view, ctx }) {
  const width = useWidth(2);
  const rangeNow = () => timeRange(view.params, Date.now() / 1000);
  const live = rangeNow().live;
  const key = [view.params.range, view.params.from, view.params.to, width, ctx.key];
  const m = gpuMatchers(ctx.filters, ctx.scope);
  const sel = (name) => (m === null ? null : selector(name, m));
  const load = (name) => () => panel(sel(name), rangeNow(), width);

  const temp = usePoll(load("DCGM_FI_DEV_GPU_TEMP"), key, live);
  const power = usePoll(load(namesSelector(["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"])), key, live);
  const sm = usePoll(load(namesSelector(["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MAX_SM_CLOCK"])), key, live);
  const mem = usePoll(load(namesSelector(["DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MAX_MEM_CLOCK"])), key, live);
  // Per-reason series where the store keeps them, else NVML's bit mask (throttle.js).
  const throttle = usePoll(async () => {
    const r = rangeNow();
    const reasons = m === null ? null : await panel(selector("gpuwatch_clock_event_reason_active", [...m, ["reason", "=~", SHADED.join("|")]]), r, width);
    if (reasons && reasons.series.length) return { range: reasons.range, intervals: throttleIntervals(null, reasons), source: "gpuwatch_clock_event_reason_active" };
    const mask = await panel(sel("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"), r, width);
    return { range: mask.range, intervals: throttleIntervals(mask, null), source: "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", gpus: mask.series.map((s) => Number(s.metric.gpu)) };
  }, key, live);
  const counts = usePoll(load(namesSelector(COUNTS.map(([n]) => n))), key, live);
  const events = usePoll(() => loadEvents(rangeNow(), ctx.filters.node ? { node: ctx.filters.node } : {}), key, live);

  const ev = useMemo(() => events.data && events.data.filter((e) => inScope(e, ctx.filters, ctx.scope)), [events.data, ctx.key]);
  const shade = throttle.data ? throttle.data.intervals : null;
  const gpus = useMemo(() => {
    const from = (temp.data ? temp.data.series.map((s) => Number(s.metric.gpu)) : []).concat((throttle.data && throttle.data.gpus) || []);
    return [...new Set(from)].sort((a, b) => a - b);
  }, [temp.data, throttle.data]);
  const errors = useMemo(() => counts.data && {
    ...counts.data,
    series: counts.data.series.filter((s) => ERROR_LINES[s.metric.__name__] && everAboveZero(s)),
  }, [counts.data]);
  const table = useMemo(() => countsByGpu(counts.data), [counts.data]);
  const present = COUNTS.filter(([n]) => Object.values(table).some((byName) => byName[n]));

  const dashed = (limitName) => (mt) => (mt.__name__ === limitName ? { dash: [6, 4], legend: false } : {});
  const nameWithLimit = (limitName, what) => (mt) => gpuLabel(mt) + (mt.__name__ === limitName ? " " + what : "");
  const common = { events: ev, shade };
  return html`<section data-screen="health">
    ${m === null && html`<div class="empty">The filters select no GPU: no job of this user or id is known to the agent.</div>`}
    ${throttle.error && html`<div class="error">${throttle.error}</div>`}
    ${!throttle.data && html`<div class="heat throttle" data-chart="throttle" data-series="0"><div class="heat-title">Clock throttle reasons</div><div class="empty">loading…</div></div>`}
    ${throttle.data && html`<${ThrottleStrip} intervals=${throttle.data.intervals} gpus=${gpus} range=${throttle.data.range} events=${ev}
      title=${`Clock throttle reasons (${throttle.data.source}): ${throttle.data.intervals.length ? "shaded on every chart below" : "none in this range"}`} />`}
    <div class="grid2">
      <${PanelChart} state=${temp} name="DCGM_FI_DEV_GPU_TEMP" title="GPU temperature" unit="°C" ...${common} />
      <${PanelChart} state=${power} name="DCGM_FI_DEV_POWER_USAGE" title="Power (dashed: enforced limit)" unit="W" ...${common}
        styleOf=${dashed("DCGM_FI_DEV_ENFORCED_POWER_LIMIT")} label=${nameWithLimit("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "limit")} />
      <${PanelChart} state=${sm} name="DCGM_FI_DEV_SM_CLOCK" title="SM clock (dashed: maximum)" unit="MHz" ...${common}
        styleOf=${dashed("DCGM_FI_DEV_MAX_SM_CLOCK")} label=${nameWithLimit("DCGM_FI_DEV_MAX_SM_CLOCK", "max")} />
      <${PanelChart} state=${mem} name="DCGM_FI_DEV_MEM_CLOCK" title="Memory clock (dashed: maximum)" unit="MHz" ...${common}
        styleOf=${dashed("DCGM_FI_DEV_MAX_MEM_CLOCK")} label=${nameWithLimit("DCGM_FI_DEV_MAX_MEM_CLOCK", "max")} />
    </div>
    <h3>ECC, row remapping and XIDs</h3>
    ${counts.error && html`<div class="error">${counts.error}</div>`}
    ${counts.data && (present.length === 0
      ? html`<div class="empty" data-list="counts">No ECC, row-remap or XID series in this range.</div>`
      : html`<table class="findings counts" data-list="counts">
          <tr><th>GPU</th>${present.map(([, h]) => html`<th>${h}</th>`)}</tr>
          ${Object.keys(table).sort(byGpuKey).map((g) => html`<tr data-gpu=${g}><td>${gpuKeyName(g)}</td>
            ${present.map(([n, , kind]) => html`<${CountCell} c=${table[g][n]} kind=${kind} />`)}</tr>`)}
        </table>`)}
    ${errors && (errors.series.length
      ? html`<${BandChart} data=${errors} name="errors" title="ECC errors, uncorrectable row remaps and XIDs (counts)" unit="count" ...${common}
          styleOf=${(mt) => ({ dash: ERROR_LINES[mt.__name__][1] })}
          label=${(mt) => gpuLabel(mt) + " " + ERROR_LINES[mt.__name__][0] + (mt.xid ? " " + mt.xid : "")} />`
      : html`<div class="chart-box" data-chart="errors" data-series="0"><div class="empty">No ECC error, uncorrectable row remap or XID in this range.</div></div>`)}
    <h3>Health events</h3>
    ${events.error && html`<div class="error">${events.error}</div>`}
    ${ev && html`<${EventList} name="health-events" events=${ev.filter((e) => HEALTH_KIND.test(e.kind))} />`}
  </section>`;
}
