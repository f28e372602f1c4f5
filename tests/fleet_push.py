#!/usr/bin/env python3
"""Plays a trace's nodes as agents pushing their record streams to a hub (issue 19).

Each node of the trace gets a spool id of its own and sends its records in entries of
--entry-seconds of trace time, with sequence numbers, to POST /api/v1/records, as
`gpuwatch up --hub` does; entries go out in trace-time order across nodes, --speed trace seconds
per wall second. Used by the fleet diagnosis test (a simulated multi-node job whose
cross-node faults only the hub can see whole). Standard library only.

usage: fleet_push.py HUB_URL TOKEN_FILE TRACE [--speed N] [--entry-seconds S]
                     [--late NODE --late-seconds W]

--late holds NODE's entries back for W wall seconds, then sends them in a burst and goes on in
step: an agent that starts pushing after the hub has diagnosed the others past its first
records (they must still be read).
"""
import argparse
import gzip
import json
import secrets
import sys
import time
import urllib.error
import urllib.request


def read_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                yield r["t"], r["node"], line


def post(url, token, node, spool, seq, body):
    req = urllib.request.Request(
        url + "/api/v1/records", data=body.encode(), method="POST",
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/x-ndjson",
                 "X-Gpuwatch-Node": node, "X-Gpuwatch-Spool": spool,
                 "X-Gpuwatch-Seq": str(seq)})
    for attempt in range(20):
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            if e.code in (429, 503):
                time.sleep(float(e.headers.get("Retry-After", "1")))
                continue
            sys.exit(f"{node} entry {seq}: HTTP {e.code}: {e.read().decode()[:300]}")
    sys.exit(f"{node} entry {seq}: still refused after 20 tries")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hub")
    ap.add_argument("token_file")
    ap.add_argument("trace")
    ap.add_argument("--speed", type=float, default=30)
    ap.add_argument("--entry-seconds", type=float, default=5)
    ap.add_argument("--late", default="")
    ap.add_argument("--late-seconds", type=float, default=0)
    a = ap.parse_args()
    token = open(a.token_file).read().strip()
    # (bucket, node) -> lines, in the trace's order.
    buckets = {}
    t0 = None
    for t, node, line in read_trace(a.trace):
        t0 = t if t0 is None else min(t0, t)
        buckets.setdefault(node, []).append((t, line))
    spools = {n: secrets.token_hex(16) for n in buckets}
    entries = []  # (bucket start, node, lines)
    for node, recs in buckets.items():
        cur, lines = None, []
        for t, line in recs:
            b = int((t - t0) // a.entry_seconds)
            if cur is not None and b != cur:
                entries.append((cur, node, lines))
                lines = []
            cur = b
            lines.append(line)
        if lines:
            entries.append((cur, node, lines))
    entries.sort(key=lambda e: (e[0], e[1]))
    seqs = {n: 0 for n in buckets}
    if a.late and a.late not in buckets:
        sys.exit(f"--late {a.late}: no such node in the trace")
    start = time.monotonic()
    held = []  # the late node's entries, until its time comes
    for b, node, lines in entries:
        due = start + (b + 1) * a.entry_seconds / a.speed
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
        if node == a.late and time.monotonic() < start + a.late_seconds:
            held.append(lines)
            continue
        if node == a.late:
            for h in held:
                seqs[node] += 1
                post(a.hub, token, node, spools[node], seqs[node], "\n".join(h) + "\n")
            held = []
        seqs[node] += 1
        post(a.hub, token, node, spools[node], seqs[node], "\n".join(lines) + "\n")
    for h in held:
        seqs[a.late] += 1
        post(a.hub, token, a.late, spools[a.late], seqs[a.late], "\n".join(h) + "\n")
    print(f"pushed {sum(seqs.values())} entries of {len(buckets)} nodes")


if __name__ == "__main__":
    main()
