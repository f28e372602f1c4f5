#!/usr/bin/env python3
"""Times GET /api/v1/panel the way rw_load times query_range (bench/store/rw_load.cc): one
keep-alive connection, --warmup untimed requests, then --runs timed ones, each from sending the
request to having read the whole body, `Accept-Encoding: identity`; nearest-rank p50/p99. The
last body is checked (status "success") and summarized: series, buckets, step, tier, and the
sum of every `last` value, so it can be set beside query_range's answer.

  time_panel.py --url http://127.0.0.1:PORT --match SEL --start T --end T --width PX
                [--runs N] [--warmup N]

The last line on stdout is `key=value ...` for the script.
"""
import argparse
import http.client
import json
import math
import sys
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--match", required=True)
    ap.add_argument("--start", required=True)
    ap.add_argument("--end", required=True)
    ap.add_argument("--width", required=True)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    path = "/api/v1/panel?" + urllib.parse.urlencode(
        {"match": a.match, "start": a.start, "end": a.end, "width": a.width})
    times, body = [], b""
    for i in range(a.warmup + a.runs):
        t0 = time.perf_counter()
        conn.request("GET", path, headers={"Accept-Encoding": "identity"})
        r = conn.getresponse()
        body = r.read()
        dt = time.perf_counter() - t0
        if r.status != 200:
            sys.exit(f"time_panel: HTTP {r.status}: {body[:300]!r}")
        if i >= a.warmup:
            times.append(dt * 1000)
    d = json.loads(body)
    if d.get("status") != "success":
        sys.exit(f"time_panel: {body[:300]!r}")
    data = d["data"]
    total = 0.0
    for s in data["series"]:
        total += sum(float(v) for v in s["last"] if v is not None)
    times.sort()
    rank = lambda p: times[max(0, math.ceil(p * len(times)) - 1)]
    print(f"p50_ms={rank(0.50):.2f} p99_ms={rank(0.99):.2f} max_ms={times[-1]:.2f} "
          f"runs={a.runs} series={len(data['series'])} buckets={len(data['times'])} "
          f"step={data['step']} tier={data['tier']} bytes={len(body)} sum_last={total:.10g}")


if __name__ == "__main__":
    main()
