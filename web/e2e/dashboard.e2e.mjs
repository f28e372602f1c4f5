// The dashboard end to end in headless Chromium (issue 18, "Tests"): `gpuwatch demo` with an
// XID planted on one GPU, and the page it serves driven by playwright-core on Debian's chromium.
// Once the agent has diagnosed the XID, it checks that:
//   - every route loads from its own URL with no console error, uncaught exception, failed
//     request or HTTP error;
//   - the charts hold one set of series for each GPU or rank the API reports;
//   - the findings screen lists the XID on its GPU, and its link opens a screen with that GPU
//     and a time range that holds the finding;
//   - the job view reaches the node's events (the XID), on the page or through a link.
// Then a hub with two demos pushing to it (issue 19): the hub's page lists both nodes with their
// health, its heat strip has a row per node and GPU, and a job's view names its nodes.
// It writes a screenshot of every screen into OUT_DIR, and the processes' output beside them.
//
//   node web/e2e/dashboard.e2e.mjs GPUWATCH OUT_DIR
//
// playwright-core is a devDependency in web/package-lock.json: CTest sets NODE_PATH to the build
// tree's node_modules (web/CMakeLists.txt); by hand, `npm ci` in web/ is enough. CHROMIUM names
// the browser (default /usr/bin/chromium; playwright's own browser download is never used).
// Exits 77, which CTest counts as skipped, when chromium or playwright-core is missing.
// GPUWATCH_E2E_BASE_URL, when set, points the browser at another server of the page (a proxy
// that serves a fresh web/ bundle and forwards /api/* to this demo) while the API checks still
// read the demo; unset, the browser reads the demo's own embedded page.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import test from "node:test";

import { parseHash, timeRange } from "../src/view_state.js";
import { findingScreen } from "../src/findings.js";

const [GPUWATCH, OUT_DIR] = process.argv.slice(2);
if (!GPUWATCH || !OUT_DIR) {
  console.error("usage: node dashboard.e2e.mjs GPUWATCH OUT_DIR");
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
// The demo refuses an XID before 80 s: the job must be running steadily by then.
const FAULT_GPU = 3;  // not GPU 0, so a link that opens the first GPU by default is caught
const FAULT_AFTER_S = 80;
const FINDING_DEADLINE_S = FAULT_AFTER_S + 70;
const RANGE = "15m";  // the demo's few minutes of history fill a quarter of the charts' width
// BandChart draws each GPU or rank as three uPlot series: its line (last) and a min–max band.
const SERIES_PER_LINE = 3;
const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

function skip(why) {
  console.log(`# SKIP dashboard_e2e_test: ${why}`);
  process.exit(77);
}
if (!fs.existsSync(CHROMIUM)) skip(`no chromium at ${CHROMIUM} (scripts/deps.sh test installs it)`);
let chromium;
try {
  // NODE_PATH's copy first, so CTest uses the build tree's npm ci and not a stray web/node_modules.
  const require = createRequire(import.meta.url);
  const paths = (process.env.NODE_PATH || "").split(path.delimiter).filter(Boolean);
  ({ chromium } = require(require.resolve("playwright-core", paths.length ? { paths } : undefined)));
} catch (e) {
  skip(`playwright-core cannot be loaded (${e.code || e.message}); the dashboard's npm ci installs it`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls fn every half second until it returns something other than undefined.
async function until(what, seconds, fn) {
  const deadline = Date.now() + seconds * 1000;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`${what} within ${seconds} s${last ? `: ${last.message}` : ""}`);
    await sleep(500);
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// A gpuwatch process (the demo's agent, a hub), stopped by its PID: SIGTERM (a demo then ends its
// rank processes), SIGKILL after 10 s; and SIGKILL as the process exits, whatever made it exit.
// Its output goes to OUT_DIR/<name>.out and .err.
class Proc {
  constructor(name, port, args) {
    this.base = `http://127.0.0.1:${port}`;
    this.pageBase = process.env.GPUWATCH_E2E_BASE_URL || this.base;
    fs.mkdirSync(OUT_DIR, { recursive: true });
    this.errPath = path.join(OUT_DIR, `${name}.err`);
    const out = fs.openSync(path.join(OUT_DIR, `${name}.out`), "w");
    const err = fs.openSync(this.errPath, "w");
    this.proc = spawn(GPUWATCH, args, { stdio: ["ignore", out, err] });
    fs.closeSync(out);
    fs.closeSync(err);
    this.running = true;
    this.exited = new Promise((resolve) => {
      this.proc.on("exit", resolve);
      this.proc.on("error", resolve);  // it never started (no such file)
    }).then(() => (this.running = false));
    this.onExit = () => this.kill("SIGKILL");
    process.on("exit", this.onExit);
    this.startedMs = Date.now();
  }

  kill(signal) {
    if (!this.running || this.proc.pid === undefined) return;
    try {
      process.kill(this.proc.pid, signal);
    } catch {}
  }

  async stop() {
    this.kill("SIGTERM");
    let timer;
    const late = new Promise((resolve) => (timer = setTimeout(() => resolve(true), 10000)));
    if (await Promise.race([this.exited.then(() => false), late])) {
      this.kill("SIGKILL");
      await this.exited;
    }
    clearTimeout(timer);
    process.off("exit", this.onExit);
  }

  async get(p) {
    const r = await fetch(this.base + p);
    if (!r.ok) throw new Error(`GET ${p}: HTTP ${r.status}`);
    return r.json();
  }

  stderr() {
    return fs.readFileSync(this.errPath, "utf8").slice(-2000);
  }
}

// One route opened from its own URL in a fresh tab, with everything that went wrong on it.
async function visit(ctx, base, hash) {
  const page = await ctx.newPage();
  const problems = [];
  page.on("console", (m) => m.type() === "error" && problems.push(`console error: ${m.text()} (${m.location().url})`));
  page.on("pageerror", (e) => problems.push(`uncaught: ${e.message}`));
  page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()} (${r.failure()?.errorText})`));
  page.on("response", (r) => r.status() >= 400 && problems.push(`HTTP ${r.status()}: ${r.url()}`));
  await page.goto(`${base}/${hash}`, { waitUntil: "load" });
  await page.waitForLoadState("networkidle");
  return { page, problems };
}

async function shoot(page, name) {
  await page.screenshot({ path: path.join(OUT_DIR, `${name}.png`), fullPage: true });
}

// Each chart on the page (data-chart where the build tags charts, else uPlot plots and heat
// strips): its name, the series it declares (data-series), how many uPlot series it draws, and the
// labels it shows for its lines (legend entries, heat-strip rows).
const charts = (page) =>
  page.evaluate(() => {
    const tagged = [...document.querySelectorAll("[data-chart]")];
    const roots = tagged.length ? tagged : [...document.querySelectorAll(".uplot, .heat")];
    return roots.map((el) => {
      const plot = el.matches(".uplot") ? el : el.querySelector(".uplot");
      return {
        name: el.dataset.chart || el.querySelector(".u-title, .heat-title, .chart-title")?.textContent || "(untitled)",
        declared: el.dataset.series === undefined ? null : Number(el.dataset.series),
        // uPlot puts one cursor point per series but x in its plot, whether a legend shows or not.
        plotted: plot ? plot.querySelectorAll(".u-over .u-cursor-pt").length : null,
        labels: [...el.querySelectorAll(".legend > span:not(.shade-key), .heat-labels > *")].map((e) => e.textContent.trim()),
      };
    });
  });

// Checks that the page's charts of one line per `kind` ("GPU", "rank") show exactly `ids`, the ones
// the API reports. A chart is of that kind when its labels say so; where a build shows no labels
// (uPlot without a legend) every uPlot chart is, and it must draw SERIES_PER_LINE series per id.
async function assertChartsOf(page, kind, ids) {
  const re = new RegExp(`^${kind} (\\d+)$`);
  const ofKind = (c) => c.labels.some((l) => re.test(l)) || (c.labels.length === 0 && c.plotted > 0);
  const drawn = await until(`a chart of one line per ${kind}`, 15, async () => {
    const all = await charts(page);
    return all.some(ofKind) ? all : undefined;
  }).catch(async (e) => assert.fail(`${e.message}; charts: ${JSON.stringify(await charts(page))}`));
  const want = ids.map(String).sort();
  for (const c of drawn.filter(ofKind)) {
    const what = `chart "${c.name}" (${JSON.stringify(c)})`;
    if (c.labels.length) {
      const got = [...new Set(c.labels.map((l) => (re.exec(l) || [])[1]).filter((x) => x !== undefined))].sort();
      assert.deepEqual(got, want, `${what} shows ${kind}s ${got}, the API ${want}`);
    } else {
      assert.equal(c.plotted, SERIES_PER_LINE * ids.length, `${what}: not ${SERIES_PER_LINE} uPlot series per ${kind}`);
    }
    if (c.declared !== null) {
      assert.ok(c.declared > 0 && c.declared % ids.length === 0, `${what} declares ${c.declared} series for ${ids.length} ${kind}s`);
    }
  }
  return drawn;
}

// Headless Chromium on a profile of its own (removed by the caller).
async function launch(pageBase) {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "gpuwatch-e2e-chromium-"));
  const ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 800 },
  });
  ctx.setDefaultTimeout(15000);
  console.log(`# chromium ${ctx.browser()?.version() ?? ""}, playwright-core on ${pageBase}`);
  return { ctx, userDataDir };
}

test("the dashboard end to end", { timeout: 220_000 }, async (t) => {
  const port = await freePort();
  const demo = new Proc("demo", port, ["demo", "--listen", `127.0.0.1:${port}`, "--fault", `xid:gpu=${FAULT_GPU}`,
    "--fault-after", `${FAULT_AFTER_S}s`, "--duration", "6m"]);
  let ctx, userDataDir;
  try {
    // ---- the agent: serving, the job attributed, the XID diagnosed ------------------------------
    // Both waits end early, with its stderr, when the demo exits.
    const up = await until("/healthz", 30, async () =>
      !demo.running ? false : (await fetch(demo.base + "/healthz")).ok ? true : undefined).catch(() => false);
    assert.ok(up, `the demo did not serve /healthz within 30 s${demo.running ? "" : " (it exited)"}\n${demo.stderr()}`);
    const app = await fetch(demo.pageBase + "/assets/app.js");
    assert.ok(app.ok, `the binary embeds no dashboard (GET /assets/app.js: HTTP ${app.status})`);
    // The screens' data-screen attribute, required everywhere once the bundle uses it.
    const tagsScreens = (await app.text()).includes("data-screen");
    if (!tagsScreens) console.log("# note: this dashboard build tags no screen with data-screen; not checked");

    const finding = await until("an xid finding", FINDING_DEADLINE_S - (Date.now() - demo.startedMs) / 1000, async () =>
      !demo.running ? null : (await demo.get("/api/v1/findings")).findings.find((f) => f.cause === "xid"))
      .catch((e) => assert.fail(`${e.message}\n${demo.stderr()}`));
    assert.ok(finding, `the demo exited before its xid was diagnosed\n${demo.stderr()}`);
    console.log(`# xid diagnosed ${((Date.now() - demo.startedMs) / 1000).toFixed(1)} s after the demo started`);
    assert.equal(finding.gpu, FAULT_GPU, "the finding names another GPU than the one the XID was planted on");
    const gpus = (await demo.get("/api/v1/gpus")).gpus.map((g) => g.index);
    const jobs = (await demo.get("/api/v1/jobs")).jobs;
    assert.ok(jobs.length > 0, "the demo's job did not report");
    const job = await demo.get("/api/v1/jobs/" + encodeURIComponent(jobs[0].id));
    const nowS = Date.now() / 1000;
    const xidEvent = (await demo.get(`/api/v1/events?start=${Math.floor(nowS - 900)}&end=${Math.ceil(nowS)}&kind=xid`))
      .events.find((e) => e.kind === "xid" && String(e.gpu) === String(FAULT_GPU));
    assert.ok(xidEvent, "the agent has no xid event for the planted XID");

    // ---- the browser ---------------------------------------------------------------------------
    ({ ctx, userDataDir } = await launch(demo.pageBase));

    // The route's screen, by its data-screen root where the build tags screens.
    const assertScreen = async (page, screen) => {
      if (!tagsScreens) return;
      await page.locator(`[data-screen="${screen}"]`).first().waitFor({ state: "visible" })
        .catch(() => assert.fail(`no [data-screen="${screen}"] on ${page.url()}`));
    };
    const hashOf = (page) => parseHash(new URL(page.url()).hash);
    // One route from its own URL: its screen, `check`, then nothing gone wrong on the page. `check`
    // takes its screenshots when the screen is drawn; a failure before that takes one as it is.
    const route = (title, hash, check) =>
      t.test(title, async () => {
        const { page, problems } = await visit(ctx, demo.pageBase, hash);
        const shots = new Set();
        const shot = async (name) => {
          shots.add(name);
          await shoot(page, name);
        };
        const name = parseHash(hash).screen;
        try {
          await assertScreen(page, name);
          await check(page, shot);
          if (!shots.has(name)) await shot(name);
          assert.deepEqual(problems, [], `on ${hash}: ${problems.join("; ")}`);
        } finally {
          if (!shots.has(name)) await shoot(page, name).catch(() => {});
          await page.close();
        }
      });

    await t.test("the menu links to every screen", async () => {
      // The first page of a fresh profile: Chromium asks for /favicon.ico once, so a missing
      // icon shows as a console error here only.
      const { page, problems } = await visit(ctx, demo.pageBase, `#/gpus?range=${RANGE}`);
      const hrefs = await page.locator("header nav a").evaluateAll((as) => as.map((a) => a.getAttribute("href")));
      await page.close();
      const screens = hrefs.map((h) => parseHash(h).screen);
      const missing = ["jobs", "gpus", "health", "links", "findings", "node", "accounting"].filter((s) => !screens.includes(s));
      assert.deepEqual([...missing.map((s) => `the menu has no #/${s}`), ...problems], [], `menu links: ${hrefs.join(" ")}`);
      assert.ok(!screens.includes("nodes"), "an agent's menu offers a hub's node list");
    });

    await route("#/jobs lists every job and links to its view", `#/jobs?range=${RANGE}`, async (page, shot) => {
      await shot("jobs");
      for (const j of jobs) {
        assert.ok(await page.locator(`a[href^="#/job/${j.id}"]`).count(), `no link to job ${j.id}`);
      }
      await page.locator(`a[href^="#/job/${jobs[0].id}"]`).first().click();
      await page.waitForFunction((id) => location.hash.startsWith("#/job/" + id), jobs[0].id);
      assert.equal(hashOf(page).arg, jobs[0].id);
      await assertScreen(page, "job");
    });

    await route(`#/job/<id>: a line for each of its ${job.ranks.length} ranks, and the node's events`,
      `#/job/${encodeURIComponent(job.id)}?range=${RANGE}`, async (page, shot) => {
        await assertChartsOf(page, "rank", job.ranks.map((r) => r.rank));
        await shot("job");
        // The node's XID, on the job's page or one click away on the node's.
        const xidShown = () => page.locator("tr, [data-event]").filter({ hasText: xidEvent.text }).count();
        if (!(await xidShown())) {
          const toNode = page.locator('a[href^="#/node"]').first();
          assert.ok(await toNode.count(), "the job view neither shows the node's events nor links to them");
          await toNode.click();
          await page.waitForFunction(() => location.hash.startsWith("#/node"));
          await page.waitForLoadState("networkidle");
          await shot("job-to-node");
        }
        await until("the node's xid event shown from the job view", 10, async () => ((await xidShown()) ? true : undefined))
          .catch((e) => assert.fail(e.message));
      });

    await route(`#/gpus: a row and a line for each of the ${gpus.length} GPUs`, `#/gpus?range=${RANGE}`, async (page) => {
      const drawn = await assertChartsOf(page, "GPU", gpus);
      assert.ok(drawn.some((c) => c.plotted === null && c.labels.length), "no GPU × time strip");
      assert.ok(drawn.some((c) => c.plotted > 0), "no uPlot chart");
    });

    // The demo's job, billed from its start (GET /api/v1/accounting): a row of its own by job,
    // linking to its view, and its GPU-hours as the API gives them.
    await route(`#/accounting bills the demo's job ${jobs[0].id}`, "#/accounting?by=job&period=24h", async (page) => {
      const acct = await demo.get("/api/v1/accounting?by=job&since=24h");
      const r = acct.rows.find((x) => x.key === jobs[0].id);
      assert.ok(r && r.gpu_hours > 0, `the ledger has no GPU-hours for job ${jobs[0].id}: ${JSON.stringify(acct.rows)}`);
      const cell = page.locator(`table[data-list="accounting"] tr[data-key="${jobs[0].id}"]`);
      await cell.waitFor({ state: "visible" }).catch(() => assert.fail(`no accounting row for job ${jobs[0].id}`));
      assert.ok(await cell.locator(`a[href^="#/job/${jobs[0].id}"]`).count(), "the row does not link to the job's view");
    });

    // Screens still being built: that they load, cleanly (their richer checks are to come).
    for (const screen of ["health", "links"]) {
      await route(`#/${screen} loads`, `#/${screen}?range=${RANGE}`, async () => {});
    }

    await route(`#/findings lists the XID on GPU ${FAULT_GPU}, and its link opens that GPU and time`,
      `#/findings?range=${RANGE}`, async (page, shot) => {
        const row = page.locator("[data-finding], tr").filter({ hasText: /\bxid\b/i }).filter({ hasText: `GPU ${FAULT_GPU}` }).first();
        await row.waitFor().catch(() => assert.fail(`no finding row names xid and GPU ${FAULT_GPU}`));
        await shot("findings");
        // The link to the evidence (findings.js): an XID is a GPU cause, so #/health with gpu=3 and a
        // fixed range around the finding; the runbook entry is named beside it as text.
        assert.equal(findingScreen(finding).screen, "health");
        const link = row.locator('a[data-link="evidence"]');
        assert.equal(await link.count(), 1, "the xid finding has no link to its evidence");
        const href = await link.getAttribute("href");
        assert.equal(parseHash(href).screen, "health", `the xid finding links to ${href}, not #/health`);
        assert.match(await row.locator('[data-link="runbook"]').textContent(), /docs\/runbook\.md#13-xid/);
        await link.click();
        await page.waitForFunction((h) => location.hash === h, href);
        await page.waitForLoadState("networkidle");
        const view = hashOf(page);
        await assertScreen(page, view.screen);
        await shot("finding-opened");
        assert.equal(view.screen, "health", `the link opens ${href}`);
        assert.equal(view.params.gpu, String(FAULT_GPU), `the link opens ${href}, not GPU ${FAULT_GPU}`);
        // The screen narrows to that GPU: its charts and throttle strip show GPU 3 alone.
        await assertChartsOf(page, "GPU", [FAULT_GPU]);
        assert.ok(view.params.from && view.params.to, `the link opens a range that moves with the clock: ${href}`);
        const range = timeRange(view.params, Date.now() / 1000);
        assert.ok(range.start <= finding.first_seen && finding.last_seen <= range.end,
          `the link's range ${range.start}..${range.end} misses the finding (${finding.first_seen}..${finding.last_seen})`);
      });

    await route("#/node lists the XID among the node's events", `#/node?range=${RANGE}`, async (page) => {
      await page.locator("tr, [data-event]").filter({ hasText: xidEvent.text }).filter({ hasText: `GPU ${FAULT_GPU}` })
        .first().waitFor().catch(() => assert.fail(`no event row with "${xidEvent.text}" on GPU ${FAULT_GPU}`));
    });

    // An agent whose reads need a token (docs/limits.md, "Tokens"): played by the browser's
    // router, which answers 401 to every API read without the token, as the agent does. The page
    // asks for a token, keeps it for the tab, and sends it on every read from then on; never in
    // the URL.
    await t.test("a 401 asks for a token, which every read then carries", async () => {
      const TOKEN = "e2e-read-token-0123456789abcdef";
      const page = await ctx.newPage();
      const seen = [];
      await page.route("**/api/v1/**", async (r) => {
        const auth = r.request().headers()["authorization"] || "";
        seen.push({ url: r.request().url(), auth });
        if (auth !== "Bearer " + TOKEN)
          return r.fulfill({ status: 401, contentType: "application/json",
            body: JSON.stringify({ error: "GET /api/v1/host needs Authorization: Bearer <token>" }) });
        return r.continue();
      });
      try {
        await page.goto(`${demo.pageBase}/#/jobs?range=${RANGE}`, { waitUntil: "load" });
        const bar = page.locator('[data-banner="token"]');
        await bar.waitFor().catch(() => assert.fail("no token prompt after a 401"));
        await shoot(page, "token-prompt");
        await bar.locator('input[name="token"]').fill(TOKEN);
        await bar.locator('button[type="submit"]').click();
        await page.waitForLoadState("load");
        await page.waitForLoadState("networkidle");
        await page.locator('[data-banner="token"]').waitFor({ state: "detached", timeout: 5000 })
          .catch(() => assert.fail("the token prompt stays after a good token"));
        const after = seen.slice(seen.findIndex((x) => x.auth === "Bearer " + TOKEN));
        assert.ok(after.length > 0, "no read carried the token");
        assert.deepEqual(after.filter((x) => x.auth !== "Bearer " + TOKEN).map((x) => x.url), [],
          "reads without the token after it was given");
        assert.ok(!seen.some((x) => x.url.includes(TOKEN)) && !page.url().includes(TOKEN), "the token went into a URL");
      } finally {
        await page.close();
      }
    });
  } finally {
    if (ctx) await ctx.close().catch(() => {});
    if (userDataDir) fs.rmSync(userDataDir, { recursive: true, force: true });
    await demo.stop();
    console.log(`# ${((Date.now() - demo.startedMs) / 1000).toFixed(1)} s; screenshots in ${OUT_DIR}`);
  }
});

// A hub's dashboard is the fleet's (issue 19): a hub and two demos pushing to it (`demo --hub`),
// each a node of its own name. The hub's page lists both nodes with the health /api/v1/nodes
// gives, its GPU heat strip has a row per node and GPU, named by both, and a job's view names
// the nodes the hub's API says it runs on, each linking to that node's GPUs.
test("a hub's dashboard: its nodes, the fleet heat map, a job across nodes", { timeout: 180_000 }, async (t) => {
  const [hubPort, aPort, bPort] = [await freePort(), await freePort(), await freePort()];
  const hubDir = fs.mkdtempSync(path.join(os.tmpdir(), "gpuwatch-e2e-hub-"));
  const hub = new Proc("hub", hubPort, ["hub", "--listen", `127.0.0.1:${hubPort}`, "--data-dir", hubDir]);
  hub.pageBase = hub.base;  // GPUWATCH_E2E_BASE_URL's proxy forwards to the demo, not a hub
  const NODES = ["SIMULATED-a", "SIMULATED-b"], GPUS = 1;  // one rank a demo: CI shares 2 cores
  const demos = [];
  let ctx, userDataDir;
  try {
    await until("the hub's /healthz", 30, async () => (!hub.running ? false : (await fetch(hub.base + "/healthz")).ok ? true : undefined))
      .then((up) => assert.ok(up, `the hub exited\n${hub.stderr()}`), (e) => assert.fail(`${e.message}\n${hub.stderr()}`));
    for (const [i, node] of NODES.entries()) {
      const port = i === 0 ? aPort : bPort;
      demos.push(new Proc(`fleet-${node}`, port, ["demo", "--listen", `127.0.0.1:${port}`, "--hostname", node,
        "--hub", hub.base, "--hub-token-file", path.join(hubDir, "admin.token"), "--fault", "healthy", "--shape", `${GPUS}xH100`, "--duration", "4m", "--seed", String(i + 1)]));
    }
    // Both nodes heard, with their GPU series, and each demo's job with its ranks (their steps
    // place them on a node).
    const ready = await until("both demos' series, records and jobs on the hub", 90, async () => {
      for (const d of demos) if (!d.running) throw new Error(`a demo exited: ${d.stderr()}`);
      const nodes = (await hub.get("/api/v1/nodes")).nodes;
      const hosts = (await hub.get("/api/v1/label/Hostname/values")).data || [];
      const util = (await hub.get("/api/v1/series?match%5B%5D=DCGM_FI_DEV_GPU_UTIL")).data || [];
      const jobs = await Promise.all((await hub.get("/api/v1/jobs")).jobs.map((j) => hub.get("/api/v1/jobs/" + encodeURIComponent(j.id))));
      const ok = NODES.every((n) => nodes.some((x) => x.node === n) && hosts.includes(n)) &&
        util.length === NODES.length * GPUS && jobs.length >= NODES.length && jobs.every((j) => (j.nodes || []).length > 0);
      return ok ? { nodes, jobs } : undefined;
    }).catch((e) => assert.fail(`${e.message}\n${hub.stderr()}`));
    const job = ready.jobs[0];

    ({ ctx, userDataDir } = await launch(hub.pageBase));
    const route = (title, hash, check) =>
      t.test(title, async () => {
        const { page, problems } = await visit(ctx, hub.pageBase, hash);
        const name = "hub-" + parseHash(hash).screen;
        try {
          await page.locator(`[data-screen="${parseHash(hash).screen}"]`).first().waitFor({ state: "visible" });
          await check(page);
          assert.deepEqual(problems, [], `on ${hash}: ${problems.join("; ")}`);
        } finally {
          await shoot(page, name).catch(() => {});
          await page.close();
        }
      });

    await route("#/nodes lists each node with the health the hub gives it", `#/nodes?range=${RANGE}`, async (page) => {
      const rows = page.locator('table[data-list="nodes"] tr[data-node]');
      await until("a row per node", 15, async () => ((await rows.count()) === NODES.length ? true : undefined))
        .catch(() => assert.fail(`not ${NODES.length} node rows`));
      const nodes = (await hub.get("/api/v1/nodes")).nodes;
      for (const n of NODES) {
        const row = page.locator(`table[data-list="nodes"] tr[data-node="${n}"]`);
        assert.equal(await row.getAttribute("data-health"), nodes.find((x) => x.node === n).health, `node ${n}'s health`);
        const href = await row.locator("a").first().getAttribute("href");
        assert.equal(parseHash(href).screen, "gpus", `node ${n} links to ${href}`);
        assert.equal(parseHash(href).params.node, n, `node ${n} links to ${href}`);
      }
      const menu = await page.locator("header nav a").evaluateAll((as) => as.map((a) => a.getAttribute("href")));
      assert.ok(menu.some((h) => parseHash(h).screen === "nodes"), `the hub's menu has no #/nodes: ${menu.join(" ")}`);
    });

    await route(`#/gpus: the fleet heat map, a row per node and GPU`, `#/gpus?range=${RANGE}`, async (page) => {
      const want = NODES.flatMap((n) => [...Array(GPUS).keys()].map((g) => `${n} GPU ${g}`)).sort();
      const heat = await until("the heat strip's rows", 20, async () => {
        const c = (await charts(page)).find((x) => x.plotted === null && x.labels.length);
        return c && c.labels.length === want.length ? c : undefined;
      }).catch(async (e) => assert.fail(`${e.message}; charts: ${JSON.stringify(await charts(page))}`));
      assert.deepEqual([...heat.labels].sort(), want);
      assert.deepEqual(heat.labels, want, "the rows are not in node order");
    });

    await route(`#/job/<id> names the nodes job ${job.id} runs on`, `#/job/${encodeURIComponent(job.id)}?range=${RANGE}`, async (page) => {
      const want = (job.nodes || []).map((n) => n.node).sort();
      assert.ok(want.length > 0, `the hub's API gives job ${job.id} no nodes: ${JSON.stringify(job)}`);
      const links = page.locator('[data-list="job-nodes"] a[data-node]');
      await links.first().waitFor().catch(() => assert.fail("the job view names no node"));
      const got = await links.evaluateAll((as) => as.map((a) => [a.dataset.node, a.getAttribute("href")]));
      assert.deepEqual(got.map(([n]) => n).sort(), want);
      for (const [n, href] of got) {
        const v = parseHash(href);
        assert.ok(v.screen === "gpus" && v.params.node === n && v.params.job === job.id, `node ${n} links to ${href}`);
      }
    });
  } finally {
    if (ctx) await ctx.close().catch(() => {});
    if (userDataDir) fs.rmSync(userDataDir, { recursive: true, force: true });
    for (const d of demos) await d.stop();
    await hub.stop();
    fs.rmSync(hubDir, { recursive: true, force: true });
  }
});
