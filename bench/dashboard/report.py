#!/usr/bin/env python3
"""The Markdown report of bench/dashboard/run_dashboard_bench.sh: its key=value lines and
browser_bench.mjs's JSON in, the tables (each figure against its target from issue 18) out."""
import json
import math
import sys

(kv_file, browser_file, samples, runs, warmup, rounds, step, sel, top_s, cores, load0, load1,
 dur, versions) = sys.argv[1:]

rec = {}
for line in open(kv_file):
    toks = line.split()
    if not toks:
        continue
    if "=" in toks[0]:  # a rw_query line: PREFIX_key=value ...
        name = toks[0].split("_")[0] + "_" + toks[0].split("_")[1]
        d = {}
        for t in toks:
            k, _, v = t.partition("=")
            d[k[len(name) + 1:]] = v
        rec[name] = d
    else:
        rec[toks[0]] = dict(t.partition("=")[::2] for t in toks[1:])

try:
    browser = json.load(open(browser_file))
except (OSError, ValueError):
    browser = None


def pct(xs, p):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    return xs[max(0, math.ceil(p * len(xs)) - 1)]


def ms(x, fmt="{:.1f}"):
    return "—" if x is None else fmt.format(x) + " ms"


def verdict(x, target):
    if x is None:
        return "not measured"
    return "pass" if x <= target else "**fail**"


print(f"Run: `bench/dashboard/run_dashboard_bench.sh --runs {runs} --rounds {rounds} "
      f"--top-seconds {top_s}` — {versions}; {cores} cores, load average {load0} before and "
      f"{load1} after; {int(dur)} s in all.")
print()
print(f"Dataset: 1 node × 8 GPUs × 40 dcgm-exporter metrics at 1 s for 24 h, {int(samples):,} "
      f"samples, through remote-write. Panel and query_range: `{sel}` (8 series) over the 24 h, "
      f"1,600 px → step {step} s; p50/p99 nearest-rank over {runs} runs after {warmup} untimed.")
print()

rows = []
targets = []
panel = rec.get("panel", {})
p99 = float(panel["p99_ms"]) if "p99_ms" in panel else None
js = rec.get("js", {})
js_b = int(js["bytes"]) if js.get("bytes") not in (None, "0") else None

fcp_cold = fcp_all = None
ready = {}
draw = None
if browser and browser.get("rounds"):
    fcp_cold = [r[0]["fcp_ms"] for r in browser["rounds"]]
    fcp_all = [s["fcp_ms"] for r in browser["rounds"] for s in r]
    for r in browser["rounds"]:
        for s in r:
            ready.setdefault(s["screen"], []).append(s.get("painted_ms", s["ready_ms"]))
    draw = browser.get("draw")

print("| target (issue 18) | measured | |")
print("|---|---:|---|")
if fcp_all:
    print(f"| first contentful paint ≤ 500 ms | worst {ms(max(fcp_all))} (median of cold first "
          f"tabs {ms(pct(fcp_cold, 0.5))}, of all tabs {ms(pct(fcp_all, 0.5))}) "
          f"| {verdict(max(fcp_all), 500)} |")
else:
    print("| first contentful paint ≤ 500 ms | — | not measured |")
for scr in ["gpus", "jobs", "health", "links", "findings", "node"]:
    xs = ready.get(scr)
    if not xs:
        print(f"| #/{scr} ready (painted) ≤ 1 s | — | not measured |")
        continue
    missing = sum(1 for x in xs if x is None)
    worst = None if missing else max(xs)
    shown = f"worst {ms(worst, '{:.0f}')}, median {ms(pct(xs, 0.5), '{:.0f}')}" if not missing \
        else f"not ready within 30 s in {missing} of {len(xs)} rounds"
    print(f"| #/{scr} ready (painted) ≤ 1 s | {shown} | "
          f"{verdict(worst, 1000) if not missing else '**fail**'} |")
if draw:
    d_new = pct(draw["new"], 0.5)
    d_worst = max(draw["new"])
    print(f"| chart of {draw['series']} series × 24 h ({draw['points']} points each) drawn ≤ 100 ms "
          f"| new uPlot → draw: median {ms(d_new)}, worst {ms(d_worst)} | {verdict(d_worst, 100)} |")
else:
    print("| chart of 8 series × 24 h drawn ≤ 100 ms | — | not measured |")
if p99 is not None:
    print(f"| panel p99 ≤ 50 ms (24 h, 1,600 px) | p99 {ms(p99, '{:.2f}')} (p50 "
          f"{ms(float(panel['p50_ms']), '{:.2f}')}) | {verdict(p99, 50)} |")
else:
    print("| panel p99 ≤ 50 ms | — | not measured |")
if js_b:
    print(f"| page JavaScript ≤ 100 KB gzipped on the wire | {js_b:,} B ({js_b / 1000:.1f} KB) "
          f"| {verdict(js_b, 100_000)} |")
else:
    print("| page JavaScript ≤ 100 KB gzipped | — | not measured |")
print()

print(f"### The 24 h × 1,600 px query, three ways ({runs} runs each)")
print()
print("| system | request | p50 | p99 | max | answer |")
print("|---|---|---:|---:|---:|---|")
if panel:
    print(f"| gpuwatch | `/api/v1/panel?match={sel}&width=1600` (min, max, last per bucket) "
          f"| {panel['p50_ms']} ms | {panel['p99_ms']} ms | {panel['max_ms']} ms "
          f"| {panel['series']} series × {panel['buckets']} buckets, step {panel['step']} s, tier "
          f"{panel['tier']}, {int(panel['bytes']):,} B; Σ last = {panel['sum_last']} |")
for sysname, pre in (("gpuwatch", "gw"), ("VictoriaMetrics", "vm")):
    for q, what in (("qr", f"`{sel}`"), ("qm", f"`max_over_time({sel}[{step}s])`")):
        d = rec.get(f"{pre}_{q}")
        if d is None:
            continue
        if "error" in d:
            print(f"| {sysname} | query_range {what}, step {step} | failed | | | |")
            continue
        print(f"| {sysname} | query_range {what}, step {step} | {float(d['p50_ms']):.2f} ms "
              f"| {float(d['p99_ms']):.2f} ms | {float(d['max_ms']):.2f} ms | {d['series']} series, "
              f"{d['points']} points, Σ = {float(d['sum']):.10g}, {int(d['response_bytes']):,} B |")
print()

for name, what in (("gw_ingest", "gpuwatch"), ("vm_ingest", "VictoriaMetrics")):
    d = rec.get(name)
    if d:
        s = float(d.get("samples", samples) or samples)
        print(f"- Load into {what}: {d.get('wall_s')} s wall "
              f"({s / float(d['wall_s']):,.0f} samples/s) over remote-write.")
if js:
    for part in filter(None, js.get("parts", "").split(",")):
        src, gz, enc, raw = part.split(":")
        print(f"- `{src}`: Content-Length {int(gz):,} B with `Accept-Encoding: gzip` "
              f"(Content-Encoding: {enc}); {int(raw):,} B uncompressed.")
for name, what in (("top_agent", "the loaded agent (no GPUs of its own)"),
                   ("top_demo", "`gpuwatch demo` (8 simulated GPUs, one job)")):
    d = rec.get(name)
    if not d:
        continue
    cpu = float(d["user_s"]) + float(d["sys_s"])
    n = int(d["refreshes"])
    per = f"{1000 * cpu / n:.2f} ms CPU per refresh" if n else "no refresh printed"
    print(f"- `gpuwatch top --plain --interval 0.2` against {what}: {cpu:.2f} CPU-s "
          f"(user {d['user_s']}, sys {d['sys_s']}) for {n} refreshes in {top_s} s — {per}"
          f"{'; stderr had ' + d['errors'] + ' lines' if d.get('errors', '0') != '0' else ''}.")
print()

if browser and browser.get("rounds"):
    print(f"### Chromium {browser.get('chromium')}: every screen, {len(browser['rounds'])} rounds "
          f"(fresh profile each), times from navigation start")
    print()
    print("| screen | FCP median / worst | ready (DOM) median / worst | painted median / worst | fetches | charts when ready (name:series) | page errors |")
    print("|---|---:|---:|---:|---:|---|---|")
    for scr in ["gpus", "jobs", "health", "links", "findings", "node"]:
        runs_ = [s for r in browser["rounds"] for s in r if s["screen"] == scr]
        f = [s["fcp_ms"] for s in runs_]
        rd = [s["ready_ms"] for s in runs_]
        worst = "not ready" if any(x is None for x in rd) else ms(max(rd), "{:.0f}")
        pt = [s.get("painted_ms") for s in runs_]
        pworst = "not ready" if any(x is None for x in pt) else ms(max(pt), "{:.0f}")
        errs = sorted({e for s in runs_ for e in s["errors"]})
        print(f"| #/{scr} | {ms(pct(f, 0.5), '{:.0f}')} / {ms(max(x for x in f if x is not None) if any(x is not None for x in f) else None, '{:.0f}')} "
              f"| {ms(pct(rd, 0.5), '{:.0f}')} / {worst} | {ms(pct(pt, 0.5), '{:.0f}')} / {pworst} "
              f"| {runs_[-1]['fetches']} "
              f"| {' '.join(runs_[-1]['charts']) or '—'} | {'; '.join(errs)[:200] or 'none'} |")
    print()
    if draw:
        print(f"Chart draw ({len(draw['new'])} runs, panel step {draw['step']} s, tier {draw['tier']}, "
              f"{draw['series']} GPUs → {3 * draw['series']} uPlot series of {draw['points']} points): "
              f"JSON → columns median {ms(pct(draw['prep'], 0.5), '{:.2f}')}; new uPlot until its draw "
              f"hook median {ms(pct(draw['new'], 0.5), '{:.2f}')}, worst {ms(max(draw['new']), '{:.2f}')}; "
              f"setData until draw median {ms(pct(draw['setData'], 0.5), '{:.2f}')}, worst "
              f"{ms(max(draw['setData']), '{:.2f}')}.")
