// #/accounting: GPU accounting (R24) over a period — GPU-hours by project, user, template or
// job, how much of the measured GPU time sat idle or busy-waiting, outcomes and reruns, queue
// waits, cost — and each project's soft quota. One answer of GET /api/v1/accounting (the hub's
// covers the fleet); a token scoped to projects gets only theirs from the server.
import { getJson, usePoll } from "./api.js";
import { html } from "./charts.js";
import { formatHash } from "./view_state.js";
import { GROUPS, PERIODS, accountingRows, accountingUrl, fmtGpuHours, quotaBars } from "./accounting.js";

export function AccountingScreen({ view, ctx }) {
  const by = GROUPS.includes(view.params.by) ? view.params.by : "project";
  const period = PERIODS.includes(view.params.period) ? view.params.period : "30d";
  const doc = usePoll(() => getJson(accountingUrl(by, period)), [by, period], true, 60000);
  const rows = accountingRows(doc.data, ctx.filters);
  const quotas = quotaBars(doc.data);
  const link = (p) => formatHash({ ...view, params: { ...view.params, ...p } });
  const total = rows.reduce((a, r) => a + r.gpuHours, 0);
  const byJob = by === "job";
  return html`<section data-screen="accounting">
    <div class="toolbar">
      <span>by ${GROUPS.map((g) => html` <a data-by=${g} class=${g === by ? "on" : ""} href=${link({ by: g })}>${g}</a>`)}</span>
      <span>over the last ${PERIODS.map((p) => html` <a data-period=${p} class=${p === period ? "on" : ""} href=${link({ period: p })}>${p}</a>`)}</span>
      ${doc.data && html`<span class="muted">${fmtGpuHours(total)} GPU-hours in all</span>`}
    </div>
    ${doc.error && html`<div class="error">${doc.error}</div>`}
    ${quotas.length > 0 && html`<table class="findings" data-list="quotas">
      <tr><th>project</th><th>soft quota</th><th>state</th></tr>
      ${quotas.map((q) => html`<tr data-project=${q.project} class=${q.state === "exceeded" ? "sev-critical" : q.state === "warning" ? "sev-warning" : ""}>
        <td>${q.project}</td>
        <td><div class="quota"><div class="quota-used" style=${`width:${q.width}%`}></div></div>${q.text}</td>
        <td>${q.state}</td></tr>`)}
    </table>`}
    ${doc.data && rows.length === 0 && html`<div class="empty">No jobs in this period.</div>`}
    ${rows.length > 0 && html`<table class="findings" data-list="accounting">
      <tr><th>${by}</th>${byJob && html`<th>user</th><th>project</th><th>template</th><th>state</th>`}<th>jobs</th><th>outcomes</th><th>success</th><th>reruns</th>
        <th>GPU-hours</th><th>idle (of measured)</th><th>busy-waiting (of measured)</th><th>mean queue wait</th><th>cost</th></tr>
      ${rows.map((r) => html`<tr data-key=${r.rawKey}>
        <td>${byJob ? html`<a href=${formatHash({ screen: "job", arg: r.rawKey, params: {} })}>${r.key}</a>` : r.key}</td>
        ${byJob && html`<td>${r.user || ""}</td><td>${r.project || ""}</td><td>${r.template || ""}</td><td>${r.state}</td>`}
        <td>${r.jobs}</td><td>${r.outcome}</td><td>${r.successRate}</td><td>${r.reruns}</td>
        <td>${fmtGpuHours(r.gpuHours)}</td>
        <td class=${r.wasteful ? "bad" : ""}>${r.idleText}</td><td class=${r.wasteful ? "bad" : ""}>${r.busywaitText}</td>
        <td>${r.queueWait}</td><td>${r.cost}</td></tr>`)}
    </table>
    <div class="muted source">GPU-hours: from each job's start to its end on every GPU it held. Idle: under 5 % utilisation;
      busy-waiting: utilisation up while power and memory traffic stay flat (a spinning collective). Both are shares of the GPU time the agent sampled.</div>`}
  </section>`;
}
