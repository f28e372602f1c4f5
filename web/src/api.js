// Reading the agent: JSON answers, panels (GET /api/v1/panel, docs/dashboard.md), events, and
// the hooks that poll them while the view's range follows the clock.
import { useEffect, useState } from "preact/hooks";
import { panelUrl } from "./view_state.js";

// The read token, where the agent asks for one (it listens beyond loopback or has a tokens
// file: docs/limits.md, "Tokens"). Kept in sessionStorage: it lasts the tab, never goes in the
// URL (a shared link must not carry it), and is sent only to this page's own origin.
const TOKEN_KEY = "gpuwatch.token";
export const readToken = () => (typeof sessionStorage !== "undefined" && sessionStorage.getItem(TOKEN_KEY)) || "";
export function saveToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token.trim());
  else sessionStorage.removeItem(TOKEN_KEY);
}
// Set when a read was refused for want of a token (401): the page then asks for one.
export const auth = { needed: false, message: "", listeners: new Set() };
function authFailed(message) {
  auth.needed = true;
  auth.message = message;
  auth.listeners.forEach((f) => f());
}

export async function getJson(url) {
  const token = readToken();
  const r = await fetch(url, token ? { headers: { Authorization: "Bearer " + token } } : undefined);
  const body = await r.json().catch(() => ({}));
  if (r.status === 401) authFailed(body.error || "this agent needs a token");
  if (!r.ok || body.status === "error") throw new Error(body.error || `${url}: HTTP ${r.status}`);
  return body;
}

// One panel, with the range it was read for (charts draw that range, not the clock's). A null
// selector (the filters select nothing) answers an empty panel without asking.
export function panel(match, range, width) {
  const r = { start: range.start, end: range.end };
  if (match === null) return Promise.resolve({ step: 0, times: [], series: [], range: r });
  return getJson(panelUrl(match, range, width)).then((b) => ({ ...b.data, range: r }));
}

// Events in the range, newest last, without job log lines (exclude_kind=log: a chatty job's
// lines would fill the limit) unless `extra` asks for kind=log, as the job view does.
export function eventsUrl(range, extra) {
  const q = new URLSearchParams({
    start: String(Math.floor(range.start)),
    end: String(Math.ceil(range.end)),
    limit: "5000",
    ...(extra.kind === undefined ? { exclude_kind: "log" } : {}),
    ...extra,
  });
  return "/api/v1/events?" + q;
}
export const loadEvents = (range, extra) => getJson(eventsUrl(range, extra)).then((b) => b.events || []);

// Re-reads every 10 s while `live` (the range follows the clock); keeps the last answer on an
// error, so a failed poll does not blank a chart.
export function usePoll(load, deps, live, everyMs = 10000) {
  const [state, setState] = useState({ data: null, error: null });
  useEffect(() => {
    let stop = false;
    const run = () =>
      load().then(
        (data) => !stop && setState({ data, error: null }),
        (error) => !stop && setState((s) => ({ data: s.data, error: error.message })),
      );
    run();
    const t = live ? setInterval(run, everyMs) : null;
    return () => {
      stop = true;
      if (t) clearInterval(t);
    };
  }, deps);
  return state;
}

// The charts' width: the page's, less main's padding, split into `cols` columns on a page at
// least WIDE_PX wide (app.css's .grid2 makes the same split).
export const WIDE_PX = 1200;
function chartWidth(cols) {
  const page = document.documentElement.clientWidth;
  const n = page >= WIDE_PX ? cols : 1;
  return Math.max(300, Math.floor((page - 64 - (n - 1) * 16) / n));
}
export function useWidth(cols = 1) {
  const [w, setW] = useState(chartWidth(cols));
  useEffect(() => {
    // Debounced: a drag-resize would refetch every chart on every event.
    let timer = null;
    const on = () => {
      clearTimeout(timer);
      timer = setTimeout(() => setW(chartWidth(cols)), 250);
    };
    addEventListener("resize", on);
    return () => {
      clearTimeout(timer);
      removeEventListener("resize", on);
    };
  }, [cols]);
  return w;
}
