// The dashboard's view state and its URL, as pure functions (tested by web/test with node):
// #/<screen>[/<arg>]?range=1h, or ?from=<s>&to=<s> for a fixed range (a zoom), plus the
// filters node=, job=, user=; the URL holds the whole view so a link can be shared.

export const RANGES = { "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400, "7d": 604800 };

// The filters a view may hold, in the order the page shows them. `gpu` (an index) narrows every
// screen to that GPU: a finding's link opens its screen with it.
export const FILTERS = ["node", "job", "user", "gpu"];

// A zoom narrower than this is a click, not a selection.
export const MIN_ZOOM_S = 10;

export function parseHash(hash) {
  const [path, query = ""] = (hash || "").replace(/^#/, "").split("?");
  const params = Object.fromEntries(new URLSearchParams(query));
  const parts = path.split("/").filter(Boolean);
  return { screen: parts[0] || "gpus", arg: parts.slice(1).join("/"), params };
}

export function formatHash(view) {
  const q = new URLSearchParams(view.params).toString();
  return "#/" + view.screen + (view.arg ? "/" + view.arg : "") + (q ? "?" + q : "");
}

// The time range a view asks for, in Unix seconds; relative ranges follow the clock (live).
export function timeRange(params, nowS) {
  if (params.from && params.to) return { start: +params.from, end: +params.to, live: false };
  const span = RANGES[params.range] || RANGES["1h"];
  return { start: nowS - span, end: nowS, live: true };
}

// The view's filters that are set: {node?, job?, user?}.
export function filtersOf(params) {
  const f = {};
  for (const k of FILTERS) if (params[k]) f[k] = params[k];
  return f;
}

// Parameters for a relative range `r`, keeping the filters (a zoom is dropped).
export function rangeParams(params, r) {
  return { ...filtersOf(params), range: r };
}

// Parameters for the fixed range [from, to] (a drag over a chart), keeping the filters; null
// when the selection is too narrow to be one.
export function zoomParams(params, from, to) {
  const a = Math.floor(Math.min(from, to)), b = Math.ceil(Math.max(from, to));
  if (!(b - a >= MIN_ZOOM_S)) return null;
  return { ...filtersOf(params), from: String(a), to: String(b) };
}

// Twice the span around the same centre, never past now: the way out of a zoom that browser
// back does not give (a shared link).
export function zoomOutParams(params, nowS) {
  const r = timeRange(params, nowS);
  const span = (r.end - r.start) * 2;
  const end = Math.min(nowS, (r.start + r.end) / 2 + span / 2);
  return zoomParams(params, end - span, end);
}

// Parameters with one filter set (or cleared by an empty value), the rest kept.
export function filterParams(params, key, value) {
  const p = { ...params };
  if (value) p[key] = value;
  else delete p[key];
  return p;
}

// Whether the node's answers (/api/v1/host, /api/v1/capabilities) say its data is simulated;
// a missing field means real.
export const isSimulated = (...answers) => answers.some((a) => a && a.simulated === true);

// GET /api/v1/panel for one chart (docs/dashboard.md).
export function panelUrl(match, range, width) {
  const q = new URLSearchParams({
    match,
    start: String(Math.floor(range.start)),
    end: String(Math.ceil(range.end)),
    width: String(Math.max(1, Math.min(10000, Math.round(width)))),
  });
  return "/api/v1/panel?" + q;
}

// Panel values come as numbers, null, or the strings "NaN", "+Inf", "-Inf".
const NON_FINITE = { NaN: NaN, "+Inf": Infinity, Inf: Infinity, "-Inf": -Infinity };
export const num = (v) =>
  v === null || v === undefined ? null : typeof v === "number" ? v : (NON_FINITE[v] ?? Number(v));
