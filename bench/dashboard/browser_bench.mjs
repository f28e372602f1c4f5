// The dashboard in headless Chromium (issue 18, "Measured, not claimed"): first contentful paint,
// the time until each screen is ready, and the time uPlot takes to draw one chart of 8 series ×
// 24 h. Run by bench/dashboard/run_dashboard_bench.sh against a gpuwatch that holds the dataset.
//
//   node bench/dashboard/browser_bench.mjs BASE FROM TO ROUNDS OUT_JSON
//
// BASE is the agent (http://127.0.0.1:PORT); FROM, TO the dataset's range in Unix seconds (the
// view's fixed range, #/<screen>?from=FROM&to=TO); ROUNDS how many times each screen is opened.
// Each round launches Chromium with a fresh, empty user-data-dir and opens the screens in this
// order, each from its own URL in a new tab: gpus, jobs, health, links, findings, node. The
// first tab of a round therefore loads app.js/app.css with an empty HTTP cache ("cold"), the
// others with whatever the agent's cache headers let Chromium keep.
//
// Ready (measured in the page, from navigation start, performance.now()): the first check,
// every 4 ms (setInterval), at which all of these hold:
//   - a [data-screen] root is in the page;
//   - the page has started at least one fetch() and none is pending, counting a response's
//     body read (Response.json/text) as part of its fetch;
//   - no placeholder says "loading…" or "Reading the jobs…";
//   - every [data-chart] that declares data-series > 0 has drawn: a uPlot chart (.chart) holds
//     its .uplot canvas; a heat strip (.heat) has sized its canvas to its buckets (width > 1).
// Effects that draw (uPlot's constructor, the strips' useEffect) run after Preact's render, so a
// chart counts only once its canvas exists; fetches chained one after another (the GPU strip
// asks for SM activity, then utilization) count as pending throughout, because the next one
// starts in a microtask, before any check can run. "Ready" is that DOM state, which the browser
// may not have painted yet; "painted" is the timestamp of the second requestAnimationFrame after
// it (the frame after the one that draws the ready state), the figure held against 1 s.
//
// Chart draw: on the agent's page (same origin), uPlot 1.6.32 — the file the bundle is built
// from, web/package-lock.json — is loaded on its own (the bundle does not expose it), the panel
// DCGM_FI_DEV_GPU_UTIL for FROM..TO at 1,600 px is fetched once (not timed), and then DRAW_RUNS
// times: the panel's answer turned into uPlot columns exactly as BandChart does (8 GPUs × max,
// min, last = 24 series + x, 8 min–max bands) — "prep"; `new uPlot(opts, cols, div)` on a
// 1,600 × 200 px div until its `draw` hook fires — "new"; and on that plot, `setData(cols)`
// until the next `draw` — "setData". Each is performance.now() in the page, one plot at a time.
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";

const [BASE, FROM, TO, ROUNDS = "5", OUT] = process.argv.slice(2);
if (!BASE || !FROM || !TO || !OUT) {
  console.error("usage: node browser_bench.mjs BASE FROM TO ROUNDS OUT_JSON");
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const SCREENS = ["gpus", "jobs", "health", "links", "findings", "node"];
const READY_TIMEOUT_MS = 30000;
const DRAW_RUNS = Number(process.env.DRAW_RUNS || 30);

const require = createRequire(import.meta.url);
const paths = (process.env.NODE_PATH || "").split(path.delimiter).filter(Boolean);
const resolveFrom = (m) => require.resolve(m, paths.length ? { paths } : undefined);
const { chromium } = require(resolveFrom("playwright-core"));
const uplotDir = path.dirname(resolveFrom("uplot/package.json"));

// In every page before its own scripts: the fetch counter and the readiness check.
function instrument() {
  let pending = 0, started = 0;
  const done = () => pending--;
  const origFetch = window.fetch;
  window.fetch = function (...args) {
    pending++;
    started++;
    const p = origFetch.apply(this, args);
    p.then(done, done);
    return p;
  };
  for (const m of ["json", "text"]) {
    const orig = Response.prototype[m];
    Response.prototype[m] = function (...args) {
      pending++;
      const p = orig.apply(this, args);
      p.then(done, done);
      return p;
    };
  }
  const drawn = (el) => {
    if (!(Number(el.dataset.series) > 0)) return true;
    if (el.querySelector(".chart")) return !!el.querySelector(".uplot canvas");
    const c = el.querySelector("canvas");
    return c ? c.width > 1 : true;
  };
  const check = () => {
    if (!document.querySelector("[data-screen]")) return false;
    if (started === 0 || pending !== 0) return false;
    const text = document.body.textContent;
    if (text.includes("loading…") || text.includes("Reading the jobs…")) return false;
    return [...document.querySelectorAll("[data-chart]")].every(drawn);
  };
  window.__bench = { ready: null, painted: null };
  const timer = setInterval(() => {
    if (check()) {
      window.__bench.ready = performance.now();
      // The frame after the one that follows: the ready state has been painted by then.
      requestAnimationFrame(() => requestAnimationFrame((t) => (window.__bench.painted = t)));
      window.__bench.charts = [...document.querySelectorAll("[data-chart]")].map((e) => `${e.dataset.chart}:${e.dataset.series}`);
      window.__bench.fetches = started;
      clearInterval(timer);
    }
  }, 4);
}

async function openScreen(ctx, screen) {
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  await page.addInitScript(instrument);
  await page.goto(`${BASE}/#/${screen}?from=${FROM}&to=${TO}`, { waitUntil: "load" });
  let r;
  try {
    await page.waitForFunction(() => window.__bench.painted !== null, null, { timeout: READY_TIMEOUT_MS, polling: 50 });
  } catch {
    // not ready in time: reported as such
  }
  r = await page.evaluate(() => {
    const fcp = performance.getEntriesByName("first-contentful-paint")[0];
    const nav = performance.getEntriesByType("navigation")[0];
    return { fcp_ms: fcp ? fcp.startTime : null, ready_ms: window.__bench.ready, painted_ms: window.__bench.painted, charts: window.__bench.charts || [],
      fetches: window.__bench.fetches || 0, dcl_ms: nav ? nav.domContentLoadedEventEnd : null, load_ms: nav ? nav.loadEventEnd : null,
      // Every request of the page with when it started and ended (from navigation start) and
      // its time to first byte: where a slow screen's time went.
      resources: performance.getEntriesByType("resource").map((e) => ({ url: e.name.replace(location.origin, ""),
        start_ms: Math.round(e.startTime), end_ms: Math.round(e.responseEnd), ttfb_ms: Math.round(e.responseStart - e.requestStart),
        bytes: e.transferSize })) };
  });
  await page.close();
  return { screen, ...r, errors };
}

async function chartDraw(ctx) {
  const page = await ctx.newPage();
  await page.goto(`${BASE}/#/node?from=${FROM}&to=${TO}`, { waitUntil: "load" });
  await page.addScriptTag({ path: path.join(uplotDir, "dist/uPlot.iife.min.js") });
  await page.addStyleTag({ path: path.join(uplotDir, "dist/uPlot.min.css") });
  const out = await page.evaluate(async ({ from, to, runs }) => {
    const url = `/api/v1/panel?${new URLSearchParams({ match: "DCGM_FI_DEV_GPU_UTIL", start: from, end: to, width: "1600" })}`;
    const body = await (await fetch(url)).json();
    const data = body.data;
    const num = (v) => (v === null ? null : typeof v === "string" ? Number(v.replace("+Inf", "Infinity").replace("-Inf", "-Infinity")) : v);
    const colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
    const prep = () => {
      const cols = [data.times], series = [{}], bands = [];
      const scaled = (a) => a.map((v) => (num(v) === null ? null : num(v) * 1));
      data.series.forEach((s, i) => {
        const color = colors[i % colors.length];
        cols.push(scaled(s.max));
        series.push({ label: `GPU ${s.metric.gpu} max`, stroke: "transparent", points: { show: false } });
        cols.push(scaled(s.min));
        series.push({ label: `GPU ${s.metric.gpu} min`, stroke: "transparent", points: { show: false } });
        cols.push(scaled(s.last));
        series.push({ label: `GPU ${s.metric.gpu}`, stroke: color, width: 1.5, points: { show: false } });
        bands.push({ series: [cols.length - 3, cols.length - 2], fill: color + "33" });
      });
      return { cols, series, bands };
    };
    const res = { prep: [], new: [], setData: [], series: data.series.length, points: data.times.length, step: data.step, tier: data.tier };
    const box = document.createElement("div");
    box.style.width = "1600px";
    document.body.appendChild(box);
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      const { cols, series, bands } = prep();
      const t1 = performance.now();
      let onDraw;
      const drew = new Promise((r) => (onDraw = r));
      const opts = { width: 1600, height: 200, series, bands, scales: { x: { time: true, range: () => [+from, +to] } },
        axes: [{}, { label: "%", size: 64 }], legend: { show: false }, cursor: { sync: { key: "gw" } },
        hooks: { draw: [() => onDraw(performance.now())] } };
      const plot = new uPlot(opts, cols, box);
      const t2 = await drew;
      let onDraw2;
      const drew2 = new Promise((r) => (onDraw2 = r));
      plot.hooks.draw.push(() => onDraw2(performance.now()));
      const t3 = performance.now();
      plot.setData(cols);
      const t4 = await drew2;
      res.prep.push(t1 - t0);
      res.new.push(t2 - t1);
      res.setData.push(t4 - t3);
      plot.destroy();
      await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    }
    return res;
  }, { from: FROM, to: TO, runs: DRAW_RUNS });
  await page.close();
  return out;
}

const result = { chromium: null, rounds: [], draw: null, when: new Date().toISOString() };
for (let round = 0; round < Number(ROUNDS); round++) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gpuwatch-dash-bench-"));
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS, viewport: { width: 1280, height: 800 },
  });
  try {
    result.chromium = ctx.browser()?.version() ?? result.chromium;
    const screens = [];
    for (const s of SCREENS) {
      const r = await openScreen(ctx, s);
      console.error(`round ${round + 1} #/${s}: fcp ${r.fcp_ms?.toFixed(0)} ms, ready ${r.ready_ms === null ? "not within 30 s" : r.ready_ms.toFixed(0) + " ms"} (${r.fetches} fetches; ${r.charts.join(" ")})${r.errors.length ? " errors: " + r.errors.join("; ") : ""}`);
      screens.push(r);
    }
    result.rounds.push(screens);
    if (round === Number(ROUNDS) - 1) result.draw = await chartDraw(ctx);
  } finally {
    await ctx.close().catch(() => {});
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
fs.writeFileSync(OUT, JSON.stringify(result, null, 1));
