// The dashboard's view state and its URL, as pure functions (tested by web/test with node):
// #/<screen>[/<arg>]?range=1h, or ?from=<s>&to=<s> for a fixed range; the URL holds the whole
// view so a link can be shared.

export const RANGES = { "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400, "7d": 604800 };

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
