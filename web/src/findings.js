// Findings and alerts as the findings screen lists them, and where each one's evidence is: the
// screen of its cause's layer, its GPU and a fixed time range around it, and its runbook entry.
// Pure functions (web/test/findings.test.mjs).
import { formatHash } from "./view_state.js";

// Every cause of findings.md, in docs/runbook.md's order (its "### N. `cause`" sections), with
// the screen that shows its evidence. Task causes with a job open that job's view.
export const CAUSES = [
  ["data_stall", "job"],
  ["checkpoint_stall", "job"],
  ["memory_leak", "gpus"],
  ["job_hang", "job"],
  ["rank_exit", "job"],
  ["step_regression", "job"],
  ["thermal_throttle", "health"],
  ["power_throttle", "health"],
  ["clock_slowdown", "health"],
  ["straggler_gpu", "gpus"],
  ["ecc_sbe_growth", "health"],
  ["ecc_dbe", "health"],
  ["xid", "health"],
  ["gpu_lost", "health"],
  ["nvlink_fallback", "links"],
  ["net_fallback", "links"],
  ["nvlink_errors", "links"],
  ["pcie_downgrade", "links"],
  ["pcie_replay", "links"],
  ["net_congestion", "links"],
  ["net_errors", "links"],
  ["numa_mismatch", "links"],  // the topology matrix: which NIC and CPU sit near which GPU
  ["topology_change", "links"],
  ["clock_skew", "node"],  // node facts, not a series: the node's timeline
  ["version_mismatch", "node"],
  ["gpu_idle_allocated", "gpus"],
];
const SCREEN_OF = Object.fromEntries(CAUSES);

// The runbook is docs/runbook.md, not served by the agent: its section anchor as GitHub makes
// it from "### 13. `xid`" (lower case, punctuation but '-' and '_' dropped, spaces to '-').
export function runbookAnchor(cause) {
  const i = CAUSES.findIndex(([c]) => c === cause);
  return i < 0 ? null : `${i + 1}-${cause}`;
}
export const runbookRef = (cause) => {
  const a = runbookAnchor(cause);
  return a ? "docs/runbook.md#" + a : "docs/runbook.md";
};

// Minutes of context either side of a finding's first_seen..last_seen.
export const PAD_S = 300;

// The screen of a finding's cause: #/job/<job> for a task cause with a job, #/jobs without.
export function findingScreen(f) {
  const s = SCREEN_OF[f.cause] || "node";
  if (s === "job") return f.job ? { screen: "job", arg: String(f.job) } : { screen: "jobs", arg: "" };
  return { screen: s, arg: "" };
}

// The view that shows a finding's evidence: its screen, its GPU (gpu=<n>, the filter the screens
// narrow their charts with) and the fixed range first_seen − PAD_S .. last_seen + PAD_S (Unix
// seconds, findings.md), never past `nowS` unless the finding itself is.  The node filter is
// kept where the view has one.
export function findingView(f, params, nowS) {
  const first = Number(f.first_seen), last = Number(f.last_seen ?? f.first_seen);
  const p = {};
  if (params && params.node) p.node = params.node;
  if (f.gpu !== undefined && f.gpu !== null && f.gpu !== "") p.gpu = String(f.gpu);
  if (Number.isFinite(first)) {
    const end = Number.isFinite(last) ? Math.max(first, last) : first;
    p.from = String(Math.floor(first - PAD_S));
    p.to = String(Math.ceil(Math.max(end, Math.min(end + PAD_S, nowS ?? Infinity))));
  } else {
    p.range = "1h";
  }
  return { ...findingScreen(f), params: p };
}
export const findingHref = (f, params, nowS) => formatHash(findingView(f, params, nowS));

// One cause at one place (alerts.md's fingerprint without the severity suffix).
const placeOf = (f) => [f.cause, f.node, f.gpu, f.job, f.rank, f.nic].map((x) => (x === undefined || x === null ? "" : String(x))).join("/");

// Open, silenced and resolved, from /api/v1/findings (live) and /api/v1/alerts: an alert's
// status decides (resolved; firing and suppressed_by set: silenced; firing: open); a live
// finding with no alert of its place is open. Each item: the finding's fields plus `status`
// and `why` (what suppresses it). Open first, then silenced, then resolved, newest first.
export function mergeFindings(findings, alerts) {
  const out = [];
  const alerted = new Set();
  for (const a of alerts || []) {
    const status = a.status === "resolved" ? "resolved" : a.suppressed_by ? "silenced" : "open";
    if (status !== "resolved") alerted.add(placeOf(a));
    out.push({ ...a, status, why: status === "silenced" ? a.suppressed_by : "" });
  }
  for (const f of findings || []) if (!alerted.has(placeOf(f))) out.push({ ...f, status: "open", why: "" });
  const rank = { open: 0, silenced: 1, resolved: 2 };
  return out.sort((x, y) => rank[x.status] - rank[y.status] || (Number(y.last_seen) || 0) - (Number(x.last_seen) || 0));
}
