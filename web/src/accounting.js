// The Accounting screen's numbers (GET /api/v1/accounting, docs/format/accounting.md), as pure
// functions tested by web/test with node: the rows as the page shows them, the quotas as bars.

export const GROUPS = ["project", "user", "template", "job"];
// The periods offered; the API takes any duration.
export const PERIODS = ["24h", "7d", "30d", "90d"];

export function accountingUrl(by, period) {
  return "/api/v1/accounting?" + new URLSearchParams({ by: GROUPS.includes(by) ? by : "project", since: PERIODS.includes(period) ? period : "30d" });
}

// GPU-hours as people read them: "0.004", "3.50", "1,234".
export function fmtGpuHours(h) {
  if (h === null || h === undefined || !Number.isFinite(h)) return "–";
  if (h >= 1000) return Math.round(h).toLocaleString("en-US");
  return h.toFixed(h >= 10 ? 1 : h >= 0.1 ? 2 : 3);
}

export function fmtWait(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return "–";
  if (s < 90) return Math.round(s) + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

const fmtPeriod = (s) => (s % 86400 === 0 ? s / 86400 + " d" : s % 3600 === 0 ? s / 3600 + " h" : fmtWait(s));

const pct = (x) => Math.round(100 * x) + " %";

// One display row per API row: the idle shares are of the measured GPU time (the part the agent
// sampled), not of the billed time. Job rows are kept to the view's job and user filters
// (the token's scope is the server's business). Largest GPU-hours first.
export function accountingRows(doc, filters = {}) {
  if (!doc || !Array.isArray(doc.rows)) return [];
  const byJob = doc.by === "job";
  return doc.rows
    .filter((r) => !byJob || ((!filters.job || r.key === filters.job) && (!filters.user || r.user === filters.user)))
    .filter((r) => doc.by !== "user" || !filters.user || r.key === filters.user)
    .map((r) => {
      const measured = r.measured_gpu_hours || 0;
      const share = (h) => (measured > 0 ? h / measured : null);
      const ended = (r.succeeded || 0) + (r.failed || 0);
      return {
        key: r.key === "" ? "(none)" : r.key,
        rawKey: r.key,
        jobs: r.jobs,
        outcome: `${r.succeeded} ok · ${r.failed} failed` + (r.running ? ` · ${r.running} running` : "") + (r.ended_unknown ? ` · ${r.ended_unknown} unknown` : ""),
        successRate: ended > 0 ? pct(r.succeeded / ended) : "–",
        reruns: r.reruns,
        gpuHours: r.gpu_hours,
        idle: share(r.idle_gpu_hours),
        busywait: share(r.busywait_gpu_hours),
        idleText: measured > 0 ? `${fmtGpuHours(r.idle_gpu_hours)} (${pct(r.idle_gpu_hours / measured)})` : "not measured",
        busywaitText: measured > 0 ? `${fmtGpuHours(r.busywait_gpu_hours)} (${pct(r.busywait_gpu_hours / measured)})` : "not measured",
        // Half the measured time or more doing nothing useful is worth a look.
        wasteful: measured > 0 && (r.idle_gpu_hours + r.busywait_gpu_hours) / measured >= 0.5,
        queueWait: r.queue_waits > 0 ? fmtWait(r.queue_wait_s_mean) : "–",
        cost: r.cost_usd > 0 || r.unpriced_gpu_hours === 0 ? "$" + r.cost_usd.toFixed(2) + (r.unpriced_gpu_hours > 0 ? " + unpriced" : "") : "unpriced",
        ...(byJob ? { user: r.user, project: r.project, template: r.template, state: r.state } : {}),
      };
    })
    .sort((a, b) => b.gpuHours - a.gpuHours || a.key.localeCompare(b.key));
}

// Each soft quota as a bar: the used share (capped at 100 for the bar's width) and its words.
export function quotaBars(doc) {
  if (!doc || !Array.isArray(doc.quotas)) return [];
  return doc.quotas.map((q) => {
    const share = q.gpu_hours > 0 ? q.used_gpu_hours / q.gpu_hours : 0;
    return {
      project: q.project,
      state: q.state,
      width: Math.min(100, Math.round(100 * share)),
      text: `${fmtGpuHours(q.used_gpu_hours)} of ${fmtGpuHours(q.gpu_hours)} GPU-hours in ${fmtPeriod(q.period_s)} (${pct(share)})`,
    };
  });
}
