// What the view's filters (node, job, user; view_state.js) select, as pure functions: the
// label matchers of panel queries, and which events and findings a screen keeps.
//
// A job or user filter selects GPUs: those the agent's /api/v1/jobs lists for the job, or for
// every job of the user. GPU series are matched on `gpu`, never on `job`: the agent's own series
// carry job="gpuwatch", the label a Prometheus scrape gives them (docs/metrics.md), while the
// gpuwatch_job_* series name the training job there.

// A label value inside a PromQL selector's double quotes.
export const quote = (v) => '"' + String(v).replace(/\\/g, "\\\\").replace(/"/g, '\\"') + '"';

// A value matched literally inside a regular-expression matcher (RE2, fully anchored).
export const reEscape = (v) => String(v).replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

// name{l1="v1",l2=~"v2"} from [label, op, value] triples; a name that is itself a selector
// ({__name__=~"a|b"}) gets the matchers added inside its braces.
export function selector(name, matchers) {
  const inner = matchers.map(([l, op, v]) => l + op + quote(v)).join(",");
  if (!inner) return name;
  if (name.endsWith("}")) {
    const head = name.slice(0, -1);
    return head + (head.endsWith("{") ? "" : ",") + inner + "}";
  }
  return name + "{" + inner + "}";
}

// A selector of several metric names at once: one panel request instead of one per name.
export const namesSelector = (names) => `{__name__=~${quote(names.map(reEscape).join("|"))}}`;

// The GPUs (indices) and job ids the filters select from the jobs the agent lists; null where
// a filter does not narrow them. `gpus: []` means nothing is selected.
// A gpu filter narrows the GPUs to that one and leaves the jobs as the other filters have them.
export function scopeOf(filters, jobs) {
  const f = filters || {};
  const one = f.gpu !== undefined && f.gpu !== "" && Number.isInteger(Number(f.gpu)) ? Number(f.gpu) : null;
  if (!f.job && !f.user) return { gpus: one === null ? null : [one], jobs: null };
  const picked = (jobs || []).filter((j) => (!f.job || j.id === f.job) && (!f.user || j.user === f.user));
  const gpus = [...new Set(picked.flatMap((j) => (j.gpus || []).map(Number)))].sort((a, b) => a - b);
  return { gpus: one === null ? gpus : gpus.filter((g) => g === one), jobs: picked.map((j) => j.id) };
}

// Matchers for per-GPU series (labels `Hostname`, `gpu`); null when the scope selects no GPU.
export function gpuMatchers(filters, scope) {
  const m = [];
  if (filters && filters.node) m.push(["Hostname", "=", filters.node]);
  if (scope && scope.gpus) {
    if (scope.gpus.length === 0) return null;
    m.push(["gpu", "=~", scope.gpus.map(String).join("|")]);
  }
  return m;
}

// Matchers for gpuwatch_job_* series (labels `Hostname`, `job` = the training job); null when
// the scope selects no job.
export function jobMatchers(filters, scope) {
  const m = [];
  if (filters && filters.node) m.push(["Hostname", "=", filters.node]);
  if (scope && scope.jobs) {
    if (scope.jobs.length === 0) return null;
    m.push(["job", "=~", scope.jobs.map(reEscape).join("|")]);
  }
  return m;
}

// Whether a series is in the GPU scope: a series of no GPU (a NIC, an IB port) concerns the
// whole node and is kept.
export function inGpuScope(metric, scope) {
  if (!scope || !scope.gpus || metric.gpu === undefined || metric.gpu === "") return true;
  return scope.gpus.includes(Number(metric.gpu));
}

// Matchers for node-wide series (host, NIC, InfiniBand: label `Hostname` only).
export const nodeMatchers = (filters) => (filters && filters.node ? [["Hostname", "=", filters.node]] : []);

// Whether an event or finding belongs to the view: on the filtered node, and, under a job or
// user filter, about one of the selected GPUs or jobs. What is about neither a GPU nor a job (a
// driver change, an annotation) concerns every job on the node and is kept.
export function inScope(item, filters, scope) {
  const f = filters || {};
  if (f.node && item.node && item.node !== f.node) return false;
  if (!scope || (!scope.gpus && !scope.jobs)) return true;
  if (item.job) return !scope.jobs || scope.jobs.includes(item.job);
  const gpu = item.gpu === undefined || item.gpu === null || item.gpu === "" ? null : Number(item.gpu);
  if (gpu !== null && !Number.isNaN(gpu)) return (scope.gpus || []).includes(gpu);
  return true;
}
