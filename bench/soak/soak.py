#!/usr/bin/env python3
"""Soak test for the gpuwatch agent (issue 17): hours of normal load with a hostile client
replaying attacks at random, recording that the agent's RSS and open file descriptors stay
flat and that nothing it acknowledged is lost.

    python3 bench/soak/soak.py build/release/gpuwatch --duration 6h --out /tmp/soak
    python3 bench/soak/soak.py build/test/gpuwatch --duration 3m --out /tmp/soak3m   # smoke

The agent is started as bench/hostile/run.py starts it (its Agent class: loopback, a fresh
data directory, no NVML, no kernel log, a job socket and a job TCP port), here under
OUT/agent. Then, until the duration has passed:

  normal load, from 127.0.0.1 with the admin token (DATA/admin.token):
    * every 1 s a remote-write push of 200 fixed series soak_m{i="0".."199"}, one sample each
      at the current millisecond (value: the push's sequence number). A push answered 204 is
      acknowledged; anything else (status, body, or a client error) is a failure;
    * every 15 s GET /metrics (200 expected);
    * every 5 s the instant query count(soak_m) (200 and the value 200 expected);
  sampling, every 10 s: the agent's VmRSS, VmHWM, Threads, entries of /proc/PID/fd and CPU
    seconds, with the remote-write series the agent counts, appended to OUT/samples.csv;
  the hostile client: every ~20 s (--attack-interval, ±25 %) one attack picked by a seeded
    random generator (--seed) from the list below, each bounded to a few seconds, from other
    loopback addresses (--attack-source, default 127.0.0.2), so that the per-source and
    per-sender limits apply to the attacker, not to the normal load:
      chunked_events      chunked body (1 MiB chunks, up to 64 MiB) to /api/v1/events -> 413
      big_content_length  Content-Length: 1 GiB to /api/v1/write -> 413 at once
      json_4mb            a 4 MB [{},{},...] post to /api/v1/events -> 413
      snappy_bomb         3 MiB of snappy declaring 64 MiB inflated, to /api/v1/write -> 413
      many_headers        100,000 header lines -> 431
      slowloris           50 connections (4 sources) trickling a head, held 12 s -> all closed
                          by the agent (10 s head deadline)
      silence_no_token    100 POST /api/v1/silences without a token -> 401 each
      events_2mb          a 2 MB events post -> 413
      tcp_idle            20 idle job-TCP connections held 8 s -> all accepted
      query_of_death      sum(rate(soak_m[10y])) over 1 h at step 1, 5 s client timeout ->
                          any bounded answer or the client gives up; the agent's CPU in the
                          3 s after must stay under 1.5 s (the query is cancelled)
      junk_series         5,000 new series soak_junk{id=...} from an attacker address
                          -> 204, or 400 once the per-sender (200,000) or global (1,000,000)
                          series limit is reached (expected over hours; the normal series
                          exist already and must keep being accepted)
  restarts: at half the duration the agent is stopped with SIGTERM (it must exit 0 within
    15 s) and started again on the same data dir and ports; the normal load pauses around it
    (an in-flight push is waited for, so every push has a known outcome). Attacks are not
    paused; one that overlaps a restart is marked and its outcome not judged.

At the end: the hostile client is stopped, the normal load runs a few seconds more and is
paused; the acknowledged samples are checked (pre-kill), one more push is acknowledged, the
agent is killed with SIGKILL, started again, and checked again (post-SIGKILL; retried for up
to 30 s in case the agent answers before its WAL replay is complete: both the first answer
and the settled one are reported). The same check also runs right after the SIGTERM restart.

A check queries, at the time of the last push, soak_m{i="N"}[RANGE] raw (an instant query of
a range selector), count_over_time and sum_over_time of it, for N in 0, 57, 199, and
count_over_time(soak_m[RANGE]) for all 200 series, with RANGE covering the whole run (the
store keeps raw samples 7 days). Every acknowledged push must be there with the value pushed
(its sequence number), nothing else may be stored but pushes that got no answer, the counts
and sums must agree with the raw samples, and with no unanswered push they must equal the
number of acknowledged pushes and the sum of their sequence numbers. A crash (the agent
exiting on its own) is recorded, the agent started again and checked the same way.

RSS, fds and threads are "flat" when the median of the last 20 % of the run is within 20 %
(--growth-limit) of the median of the first window: 20 % of the run, at most one hour, after
a warm-up of min(60 s, 10 %). The medians are over the samples taken while no attack ran
(when a window has at least 3 such), so that a slowloris' 50 open connections are not read
as a descriptor leak. The max is reported too, and the same comparison per agent
process (the SIGTERM restart starts a new one). VmHWM is reported, not flagged: it is a peak,
and one large request (a snappy bomb inflated) lifts it for good. The junk series are expected to grow the
agent's memory until the series limits stop them: the series count the agent reports is in
the CSV and the summary to tell the two apart.

Output: a markdown summary on stdout, OUT/soak.json (everything, including every normal-load
failure and every attack), OUT/samples.csv (written as the run goes), the agent's log in
OUT/agent/agent.log. Exit status 0 when nothing was flagged, 1 otherwise. Python 3.11
standard library only; the HTTP helpers, the Agent class and remote-write encoding come from
bench/hostile/run.py (and tests/rw.py).
"""
import argparse
import csv
import http.client
import json
import os
import random
import re
import select
import shutil
import socket
import statistics
import sys
import threading
import time
import traceback
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "hostile"))
import run as H  # noqa: E402  (bench/hostile/run.py: Agent, http_request, raw_exchange, ...)

rw = H.rw
MiB = H.MiB
N_SERIES = 200
CHECK_SERIES = (0, 57, 199)
REQ_TIMEOUT = 10.0


def log(msg):
    H.log(msg)


def parse_duration(text):
    """90s, 20m, 6h, 1h30m, 2d, or a plain number of seconds."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise argparse.ArgumentTypeError(f"bad duration {text!r} (use e.g. 90s, 20m, 6h, 1h30m)")
    return sum(float(a) * units[b] for a, b in parts)


def fmt_s(secs):
    secs = int(round(secs))
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def proc_extra(pid):
    """Threads (from /proc/PID/status) and the number of open descriptors."""
    threads = None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                threads = int(line.split()[1])
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def metric_from(text, name, label_match=""):
    for line in text.splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and label_match in line:
            try:
                return float(line.rsplit(" ", 1)[1])
            except ValueError:
                return None
    return None


def refused_from(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'gpuwatch_http_refused_total\{.*reason="([a-z_]+)".*\} ([0-9.e+]+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


class Gate:
    """Lets the normal load pause around a restart: pause() waits for requests in flight."""

    def __init__(self):
        self.cv = threading.Condition()
        self.paused = False
        self.inflight = 0

    def try_enter(self):
        with self.cv:
            if self.paused:
                return False
            self.inflight += 1
            return True

    def leave(self):
        with self.cv:
            self.inflight -= 1
            self.cv.notify_all()

    def pause(self):
        with self.cv:
            self.paused = True
            self.cv.wait_for(lambda: self.inflight == 0)

    def resume(self):
        with self.cv:
            self.paused = False


# ---------------------------------------------------------------------------------------------
# The attacks: each takes the Soak and returns (summary, as_expected, details); a few seconds.
# ---------------------------------------------------------------------------------------------

def token_header(s):
    return b"Authorization: Bearer " + s.agent.token.encode() + b"\r\n"


def a_chunked_events(s):
    a = s.agent
    head = (b"POST /api/v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + token_header(s) + b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n" % MiB + b"[" + b" " * (MiB - 2) + b"]" + b"\r\n"
    r = H.raw_exchange(a.port, head, H.repeat(chunk, 64 * len(chunk)), source=s.src,
                       deadline=time.monotonic() + 5)
    ok = r["status"] == 413
    return (f"{r['status']} after {r['body_bytes_sent'] / MiB:.1f} MiB, answer at "
            f"{r['answer_s']} s ({r['ended']})", ok, r)


def a_big_content_length(s):
    a = s.agent
    head = (b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\nContent-Encoding: snappy\r\n"
            b"Content-Type: application/x-protobuf\r\n" + token_header(s)
            + b"Content-Length: 1073741824\r\n\r\n")
    r = H.raw_exchange(a.port, head, H.repeat(b"\0" * MiB, 64 * MiB), source=s.src,
                       deadline=time.monotonic() + 5)
    ok = r["status"] == 413 and r["answer_s"] is not None and r["answer_s"] < 1.0
    return (f"{r['status']} at {r['answer_s']} s, {r['body_bytes_sent'] / MiB:.1f} MiB sent "
            f"({r['ended']})", ok, r)


def a_json_4mb(s):
    a = s.agent
    size = 4_000_000
    body = b"[" + b"{}," * ((size - 3) // 3) + b"{}]"
    head = (b"POST /api/v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + token_header(s) + b"Content-Length: %d\r\n\r\n" % len(body))
    r = H.raw_exchange(a.port, head, [body], source=s.src, deadline=time.monotonic() + 5)
    return (f"{r['status']} after {r['body_bytes_sent'] / MiB:.1f} of {len(body) / MiB:.1f} MiB "
            f"({r['ended']})", r["status"] == 413, r)


_BOMB = None


def a_snappy_bomb(s):
    global _BOMB
    a = s.agent
    if _BOMB is None:
        _BOMB = H.snappy_bomb_body()
    t0 = time.monotonic()
    try:
        st, data, secs = H.http_request(
            a.port, "POST", "/api/v1/write", _BOMB,
            H.auth(a.token, {"Content-Encoding": "snappy",
                             "Content-Type": "application/x-protobuf"}),
            timeout=10, source=s.src)
        answer = data[:160].decode(errors="replace").strip()
    except (OSError, http.client.HTTPException) as e:
        st, answer, secs = None, f"{type(e).__name__}: {e}", time.monotonic() - t0
    return (f"{st} in {secs:.2f} s: {answer[:80]}", st == 413,
            {"status": st, "seconds": round(secs, 3), "answer": answer,
             "body_bytes": len(_BOMB)})


def a_many_headers(s):
    a = s.agent
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    lines = 100_000
    pieces = list(H.repeat(b"X: y\r\n" * 10_000, lines * 6)) + [b"\r\n"]
    r = H.raw_exchange(a.port, head, pieces, source=s.src, deadline=time.monotonic() + 5)
    return (f"{r['status']} after {r['body_bytes_sent'] // 6} header lines, answer at "
            f"{r['answer_s']} s ({r['ended']})", r["status"] == 431, r)


def a_slowloris(s):
    a = s.agent
    n, sources, hold, period = 50, 4, 12.0, 3.0
    socks, failed = [], 0
    t0 = time.monotonic()
    for i in range(n):
        try:
            c = socket.create_connection(("127.0.0.1", a.port), timeout=2,
                                         source_address=(H.offset_addr(s.src, i % sources), 0))
            c.setblocking(False)
            c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            socks.append({"sock": c, "opened": time.monotonic(), "closed": None, "answer": b""})
        except OSError:
            failed += 1
    H.trickle_headers(socks, t0, hold, period)
    lifetimes = [st["closed"] - st["opened"] for st in socks if st["closed"] is not None]
    still_open = sum(1 for st in socks if st["closed"] is None)
    answers = {}
    for st in socks:
        m = re.match(rb"HTTP/1\.[01] (\d{3})", st["answer"])
        k = m.group(1).decode() if m else "none"
        answers[k] = answers.get(k, 0) + 1
        st["sock"].close()
    lt = ([round(min(lifetimes), 1), round(max(lifetimes), 1)] if lifetimes else None)
    ok = failed == 0 and still_open == 0 and bool(lifetimes) and min(lifetimes) >= 2.0
    return (f"{len(lifetimes)}/{len(socks)} closed by the agent (lifetimes {lt} s), "
            f"{still_open} still open at {hold:.0f} s, {failed} connects failed, answers {answers}",
            ok, {"connections": n, "connect_failed": failed, "closed_by_agent": len(lifetimes),
                 "still_open": still_open, "lifetime_min_max_s": lt, "answers": answers})


def a_silence_no_token(s):
    a = s.agent
    body = json.dumps({"node": "x", "duration_s": 3600}).encode()
    statuses, conn = {}, None
    for _ in range(100):
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=5,
                                                  source_address=(s.src, 0))
            conn.request("POST", "/api/v1/silences", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            k = str(r.status)
            if r.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException) as e:
            k = type(e).__name__
            if conn:
                conn.close()
            conn = None
        statuses[k] = statuses.get(k, 0) + 1
    if conn:
        conn.close()
    return f"100 posts: {statuses}", statuses == {"401": 100}, {"statuses": statuses}


def a_events_2mb(s):
    a = s.agent
    body = json.dumps([{"kind": "annotation", "text": "a" * 60000}] * 34).encode()
    head = (b"POST /api/v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + token_header(s) + b"Content-Length: %d\r\n\r\n" % len(body))
    r = H.raw_exchange(a.port, head, [body], source=s.src, deadline=time.monotonic() + 5)
    return (f"{r['status']} after {r['body_bytes_sent'] / MiB:.1f} of {len(body) / MiB:.1f} MiB "
            f"({r['ended']})", r["status"] == 413, r)


def a_tcp_idle(s):
    a = s.agent
    conns, failed = [], 0
    for _ in range(20):
        try:
            conns.append(socket.create_connection(("127.0.0.1", a.tcp_port), timeout=2))
        except OSError:
            failed += 1
    time.sleep(8.0)
    closed = 0
    for c in conns:
        c.setblocking(False)
        try:
            if c.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        c.close()
    return (f"{len(conns)}/20 connected, held 8 s, {closed} closed by the agent", failed == 0,
            {"connected": len(conns), "connect_failed": failed, "closed_by_agent": closed})


def a_query_of_death(s):
    a = s.agent
    end = time.time()
    q = urllib.parse.urlencode({"query": "sum(rate(soak_m[10y]))", "start": f"{end - 3600:.3f}",
                                "end": f"{end:.3f}", "step": "1"})
    t0 = time.monotonic()
    try:
        st, data, secs = H.http_request(a.port, "GET", "/api/v1/query_range?" + q, timeout=5.0,
                                        source=s.src)
        res = {"status": st, "seconds": round(secs, 2),
               "answer": data[:160].decode(errors="replace")}
    except (OSError, http.client.HTTPException) as e:
        res = {"status": None, "seconds": round(time.monotonic() - t0, 2),
               "answer": f"client gave up: {type(e).__name__}"}
    c0 = H.proc_cpu_s(a.pid)
    time.sleep(3.0)
    cpu_after = H.proc_cpu_s(a.pid) - c0
    res["agent_cpu_3s_after"] = round(cpu_after, 2)
    bounded = res["status"] in (200, 422, 503) or res["status"] is None
    ok = bounded and cpu_after < 1.5
    return (f"{res['status'] or 'client timeout'} in {res['seconds']} s; agent CPU "
            f"{cpu_after:.2f} s in the 3 s after", ok, res)


def a_junk_series(s):
    a = s.agent
    n = s.args.junk_series
    with s.lock:
        start = s.junk_next
        s.junk_next += n
        k = s.junk_round
        s.junk_round += 1
    # Senders (token, address) rotate over --junk-senders addresses after the slowloris ones.
    src = H.offset_addr(s.src, 4 + k % s.args.junk_senders)
    body = H.fixed_series_body("soak_junk", range(start, start + n),
                               H.encode_samples([(int(time.time() * 1000), 1.0)]), 9)
    try:
        st, data, secs = H.http_request(
            a.port, "POST", "/api/v1/write", body,
            H.auth(a.token, {"Content-Encoding": "snappy",
                             "Content-Type": "application/x-protobuf"}),
            timeout=REQ_TIMEOUT, source=src)
        answer = data[:200].decode(errors="replace").strip()
    except (OSError, http.client.HTTPException) as e:
        st, answer, secs = None, f"{type(e).__name__}: {e}", None
    limited = st == 400 and "series limit" in answer
    ok = st == 204 or limited
    # Every junk series is new and has one sample: the series created are the samples stored.
    m = re.match(r"(\d+) samples stored", answer)
    created = n if st == 204 else (int(m.group(1)) if m else 0)
    with s.lock:
        s.junk_status[str(st)] = s.junk_status.get(str(st), 0) + 1
        s.junk_created[s.gen] = s.junk_created.get(s.gen, 0) + created
    return (f"{n} series from {src}: {st}{' (series limit)' if limited else ''} "
            f"in {secs and round(secs, 2)} s", ok,
            {"status": st, "answer": answer, "sender": src, "first_id": start,
             "seconds": secs and round(secs, 3)})


ATTACKS = {
    "chunked_events": a_chunked_events,
    "big_content_length": a_big_content_length,
    "json_4mb": a_json_4mb,
    "snappy_bomb": a_snappy_bomb,
    "many_headers": a_many_headers,
    "slowloris": a_slowloris,
    "silence_no_token": a_silence_no_token,
    "events_2mb": a_events_2mb,
    "tcp_idle": a_tcp_idle,
    "query_of_death": a_query_of_death,
    "junk_series": a_junk_series,
}


# ---------------------------------------------------------------------------------------------
# The soak
# ---------------------------------------------------------------------------------------------

class Soak:
    def __init__(self, args):
        self.args = args
        self.src = args.attack_source
        self.lock = threading.Lock()
        self.stop_all = threading.Event()
        self.stop_hostile = threading.Event()
        self.gate = Gate()
        self.gen = 0                 # agent process generation (0, 1 after SIGTERM, 2 after KILL)
        self.restarting = False
        self.restart_epoch = 0
        self.current_attack = ""
        # normal load
        self.push_seq = 0
        self.last_ts = 0
        self.acked = []              # (ts_ms, seq) of pushes answered 204
        self.unknown = []            # (ts_ms, seq) of pushes without an answer (client error)
        self.push_lat = []
        self.push_late_ticks = 0
        self.counts = {k: {"ok": 0, "failed": 0, "skipped_paused": 0}
                       for k in ("push", "metrics", "query")}
        self.failures = []           # every normal-load failure
        self.query_wrong = 0
        self.query_lat = []
        self.metrics_lat = []
        self.last_metrics = ""
        self.rw_series = None
        self.rw_expected = None
        self.refused = {}            # agent process -> gpuwatch_http_refused_total by reason
        self.rw_drift = []           # scrapes where gpuwatch_remote_write_series != created
        # hostile
        self.attacks = []
        self.junk_next = 0
        self.junk_round = 0
        self.junk_status = {}
        self.junk_created = {}       # agent process -> junk series it accepted
        # measurement
        self.samples = []
        self.restarts = []
        self.crashes = []
        self.checks = []
        self.t0 = None

    # -- helpers --

    def rel(self):
        return time.monotonic() - self.t0

    def fail(self, kind, status, body, secs, note=""):
        with self.lock:
            self.counts.setdefault(kind, {"ok": 0, "failed": 0, "skipped_paused": 0})
            self.counts[kind]["failed"] += 1
            self.failures.append({
                "t_s": round(self.rel(), 1), "kind": kind, "status": status,
                "body": (body[:300].decode(errors="replace") if isinstance(body, bytes)
                         else str(body)[:300]),
                "seconds": secs and round(secs, 3), "agent_gen": self.gen,
                "attack_running": self.current_attack, "note": note})
        log(f"NORMAL {kind} FAILED: {status} {str(body)[:120]} ({self.current_attack or '-'})")

    def periodic(self, period, fn, name, first_delay=0.0):
        """Runs fn every `period` s (ticks missed while fn ran too long are counted, not queued)."""
        nxt = time.monotonic() + first_delay
        while not self.stop_all.is_set():
            if self.stop_all.wait(max(0.0, nxt - time.monotonic())):
                return
            try:
                fn()
            except Exception:  # noqa: BLE001  (a bug here must not stop the soak silently)
                log(f"{name} raised:\n{traceback.format_exc()}")
                self.fail(name, "exception", traceback.format_exc(limit=3), None,
                          "bench bug, not the agent")
            nxt += period
            now = time.monotonic()
            if nxt < now:
                missed = int((now - nxt) / period) + 1
                if name == "push":
                    with self.lock:
                        self.push_late_ticks += missed
                nxt += missed * period

    # -- normal load --

    def push(self):
        if not self.gate.try_enter():
            self.counts["push"]["skipped_paused"] += 1
            return None
        try:
            a = self.agent
            with self.lock:
                self.push_seq += 1
                seq = self.push_seq
                ts = max(self.last_ts + 1, int(time.time() * 1000))
                self.last_ts = ts
            body = rw.body([([("__name__", "soak_m"), ("i", str(i))], [(ts, float(seq))])
                            for i in range(N_SERIES)])
            t0 = time.monotonic()
            try:
                st, data, secs = H.http_request(
                    a.port, "POST", "/api/v1/write", body,
                    H.auth(a.token, {"Content-Encoding": "snappy",
                                     "Content-Type": "application/x-protobuf"}),
                    timeout=REQ_TIMEOUT)
            except (OSError, http.client.HTTPException) as e:
                secs = time.monotonic() - t0
                with self.lock:
                    self.unknown.append((ts, seq))
                self.fail("push", type(e).__name__, str(e), secs,
                          "no answer: the samples may or may not be stored")
                return False
            with self.lock:
                self.push_lat.append(secs)
            if st == 204:
                with self.lock:
                    self.acked.append((ts, seq))
                    self.counts["push"]["ok"] += 1
                return True
            with self.lock:
                self.unknown.append((ts, seq))  # a refused batch may be stored in part
            self.fail("push", st, data, secs)
            return False
        finally:
            self.gate.leave()

    def scrape(self, gated=True):
        if gated and not self.gate.try_enter():
            self.counts["metrics"]["skipped_paused"] += 1
            return
        try:
            t0 = time.monotonic()
            junk_before = self.current_attack
            try:
                st, data, secs = H.http_request(self.agent.port, "GET", "/metrics",
                                                timeout=REQ_TIMEOUT)
            except (OSError, http.client.HTTPException) as e:
                self.fail("metrics", type(e).__name__, str(e), time.monotonic() - t0)
                return
            self.metrics_lat.append(secs)
            if st != 200:
                self.fail("metrics", st, data, secs)
                return
            text = data.decode(errors="replace")
            with self.lock:
                self.counts["metrics"]["ok"] += 1
                self.last_metrics = text
                self.refused[self.gen] = refused_from(text)
                self.rw_series = metric_from(text, "gpuwatch_remote_write_series")
                # What the metric should read: series remote-write senders created in this
                # process (docs/metrics.md): soak_m's 200 in the first process only (later ones
                # find them in the WAL or blocks), plus the junk series accepted in this one.
                self.rw_expected = ((N_SERIES if self.gen == 0 and self.acked else 0)
                                    + self.junk_created.get(self.gen, 0))
                junk_running = "junk_series" in (junk_before, self.current_attack)
                first_push = self.gen == 0 and len(self.acked) < 2  # may be in flight
                if (self.rw_series is not None and not junk_running and not first_push
                        and int(self.rw_series) != self.rw_expected):
                    self.rw_drift.append({"t_s": round(self.rel(), 1), "gen": self.gen,
                                          "metric": int(self.rw_series),
                                          "created": self.rw_expected})
        finally:
            if gated:
                self.gate.leave()

    def count_query(self):
        if not self.gate.try_enter():
            self.counts["query"]["skipped_paused"] += 1
            return
        try:
            with self.lock:
                expect = N_SERIES if self.acked else None
            path = "/api/v1/query?" + urllib.parse.urlencode({"query": "count(soak_m)"})
            t0 = time.monotonic()
            try:
                st, data, secs = H.http_request(self.agent.port, "GET", path, timeout=REQ_TIMEOUT)
            except (OSError, http.client.HTTPException) as e:
                self.fail("query", type(e).__name__, str(e), time.monotonic() - t0)
                return
            self.query_lat.append(secs)
            if st != 200:
                self.fail("query", st, data, secs)
                return
            try:
                res = json.loads(data)["data"]["result"]
                val = int(float(res[0]["value"][1])) if res else 0
            except (ValueError, KeyError, IndexError, TypeError) as e:
                self.fail("query", st, data, secs, f"unparsable answer: {e}")
                return
            if expect is not None and val != expect:
                with self.lock:
                    self.query_wrong += 1
                self.fail("query", st, data, secs, f"count(soak_m) = {val}, expected {expect}")
                return
            with self.lock:
                self.counts["query"]["ok"] += 1
        finally:
            self.gate.leave()

    # -- sampling --

    def sample(self):
        a = self.agent
        if not a.alive():
            return
        try:
            pid = a.pid
            st = H.proc_status(pid)
            threads, fds = proc_extra(pid)
            cpu = H.proc_cpu_s(pid)
        except (OSError, KeyError):
            return
        with self.lock:
            row = {"t_s": round(self.rel(), 1), "unix_time": round(time.time(), 1),
                   "gen": self.gen, "pid": pid, "rss_kib": st.get("VmRSS"),
                   "hwm_kib": st.get("VmHWM"), "fds": fds, "threads": threads,
                   "cpu_s": round(cpu, 2),
                   "rw_series": None if self.rw_series is None else int(self.rw_series),
                   "rw_series_created": self.rw_expected,
                   "acked_pushes": len(self.acked), "attack": self.current_attack}
            self.samples.append(row)
        self.csv_writer.writerow(row)
        self.csv_file.flush()

    # -- the hostile client --

    def hostile(self):
        rng = random.Random(self.args.seed)
        names = self.args.attacks
        interval = self.args.attack_interval
        nxt = time.monotonic() + interval * rng.uniform(0.25, 0.75)
        while not self.stop_hostile.is_set():
            if self.stop_hostile.wait(max(0.0, nxt - time.monotonic())):
                return
            name = rng.choice(names)
            epoch0, restarting0 = self.restart_epoch, self.restarting
            gen0 = self.gen
            t_start = self.rel()
            self.current_attack = name
            log(f"attack {name} ...")
            m0 = time.monotonic()
            try:
                summary, ok, details = ATTACKS[name](self)
            except Exception as e:  # noqa: BLE001
                summary, ok, details = (f"attack raised {type(e).__name__}: {e}", False,
                                        {"traceback": traceback.format_exc()})
            secs = time.monotonic() - m0
            self.current_attack = ""
            overlapped = restarting0 or self.restarting or self.restart_epoch != epoch0
            row = {"t_s": round(t_start, 1), "attack": name, "seconds": round(secs, 2),
                   "summary": summary, "as_expected": ok, "agent_gen": gen0,
                   "overlapped_restart": overlapped, "details": details}
            with self.lock:
                self.attacks.append(row)
            tag = "ok" if ok else ("overlapped a restart" if overlapped else "UNEXPECTED")
            log(f"  {name}: {summary} ({secs:.1f} s) [{tag}]")
            nxt = m0 + interval * rng.uniform(0.75, 1.25)

    # -- restarts and checks --

    def start_agent(self, why):
        attempts, errors = 0, []
        t0 = time.monotonic()
        while True:
            attempts += 1
            try:
                self.agent.start(timeout=120)
                break
            except RuntimeError as e:
                errors.append(str(e)[-600:])
                log(f"agent start failed ({why}, attempt {attempts}): {str(e)[-300:]}")
                if attempts >= 3:
                    raise
                time.sleep(2)
        return {"start_s": round(time.monotonic() - t0, 2), "attempts": attempts,
                "start_errors": errors}

    def restart(self, kind):
        """kind: 'SIGTERM' (must exit 0 within 15 s) or 'SIGKILL'. The normal load is paused."""
        a = self.agent
        rec = {"kind": kind, "t_s": round(self.rel(), 1), "old_pid": a.pid}
        try:
            st = H.proc_status(a.pid)
            threads, fds = proc_extra(a.pid)
            rec.update(rss_before_mib=round(st["VmRSS"] / 1024, 1),
                       hwm_before_mib=round(st["VmHWM"] / 1024, 1), fds_before=fds,
                       threads_before=threads)
        except (OSError, KeyError):
            pass
        self.restarting = True
        self.restart_epoch += 1
        try:
            if kind == "SIGTERM":
                res = a.terminate(timeout=15)
                rec.update(exit_s=res.get("exit_s"), rc=res.get("rc"), note=res.get("note", ""))
                rec["ok"] = res.get("rc") == 0 and res.get("exit_s") is not None
                log(f"SIGTERM: exit {res.get('rc')} in {res.get('exit_s')} s {res.get('note', '')}")
            else:
                t0 = time.monotonic()
                a.proc.kill()
                rc = a.proc.wait()
                a.logf.close()
                rec.update(exit_s=round(time.monotonic() - t0, 3), rc=rc, ok=True)
                log(f"SIGKILL: rc {rc}")
            self.gen += 1
            try:
                rec.update(self.start_agent(kind))
                rec["new_pid"] = a.pid
                log(f"agent restarted after {kind}: pid {a.pid} in {rec['start_s']} s")
            except RuntimeError as e:
                rec["ok"] = False
                rec["restart_failed"] = str(e)[-600:]
                raise
        finally:
            self.restarting = False
            self.restarts.append(rec)
        return rec

    def crashed(self):
        """The agent died on its own: record it, start it again, check what it acknowledged."""
        a = self.agent
        self.gate.pause()
        try:
            rec = {"t_s": round(self.rel(), 1), "rc": a.proc.returncode, "pid": a.pid,
                   "attack_running": self.current_attack, "log_tail": a.log_tail(30)}
            log(f"AGENT DIED at {rec['t_s']} s: exit {rec['rc']} during "
                f"{self.current_attack or 'no attack'}\n{rec['log_tail']}")
            self.crashes.append(rec)
            a.logf.close()
            self.restarting = True
            self.restart_epoch += 1
            self.gen += 1
            try:
                rec.update(self.start_agent("after a crash"))
            finally:
                self.restarting = False
            self.check(f"after crash at {rec['t_s']} s", settle_s=30)
        finally:
            self.gate.resume()

    def query_json(self, query, at):
        path = "/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": f"{at:.3f}"})
        st, data, _ = H.http_request(self.agent.port, "GET", path, timeout=60)
        if st != 200:
            raise RuntimeError(f"{query}: {st} {data[:200]!r}")
        return json.loads(data)["data"]["result"]

    def check_once(self):
        """Every acknowledged sample of the check series, read back raw (an instant query of a
        range selector) and through count_over_time and sum_over_time."""
        with self.lock:
            acked = dict(self.acked)        # ts_ms -> seq (the value pushed)
            unknown = dict(self.unknown)
        n_acked = len(acked)
        sum_acked = sum(acked.values())
        first_ts = min(list(acked) + list(unknown), default=0)
        last_ts = max(list(acked) + list(unknown), default=0)
        at = last_ts / 1000 + 0.5
        rng_s = int(at - first_ts / 1000) + 120
        wall0 = self.wall_start * 1000
        out = {"acked": n_acked, "unknown_outcome": len(unknown), "range_s": rng_s,
               "time": round(at, 3), "series": {}, "problems": []}
        for i in CHECK_SERIES:
            sel = f'soak_m{{i="{i}"}}[{rng_s}s]'
            c = self.query_json(f"count_over_time({sel})", at)
            sm = self.query_json(f"sum_over_time({sel})", at)
            raw = self.query_json(sel, at)
            cnt = int(float(c[0]["value"][1])) if c else 0
            total = float(sm[0]["value"][1]) if sm else 0.0
            stored = {int(round(float(t) * 1000)): float(v)
                      for x in raw for t, v in x.get("values", [])}
            missing = sorted(t for t in acked if t not in stored)
            wrong = sorted(t for t in acked if t in stored and stored[t] != acked[t])
            extra = [t for t in stored if t not in acked]
            unexplained = sorted(t for t in extra if t not in unknown)
            d = {"count": cnt, "sum": total, "raw": len(stored), "missing": len(missing),
                 "wrong_value": len(wrong), "unanswered_stored": len(extra) - len(unexplained),
                 "unexplained": len(unexplained)}
            out["series"][str(i)] = d
            name = f'i="{i}"'
            if missing:
                d["missing_t_s"] = [round((t - wall0) / 1000, 1) for t in missing[:20]]
                out["problems"].append(
                    f"{name}: {len(missing)} of {n_acked} acknowledged samples missing (first at "
                    f"t={d['missing_t_s'][0]} s, last at "
                    f"t={round((missing[-1] - wall0) / 1000, 1)} s)")
            if wrong:
                out["problems"].append(f"{name}: {len(wrong)} acknowledged samples hold another "
                                       "value than pushed")
            if unexplained:
                out["problems"].append(f"{name}: {len(unexplained)} stored samples were never "
                                       "pushed")
            if cnt != len(stored):
                out["problems"].append(f"{name}: count_over_time {cnt} != {len(stored)} raw "
                                       "samples")
            if total != sum(stored.values()):
                out["problems"].append(f"{name}: sum_over_time {total:.0f} != "
                                       f"{sum(stored.values()):.0f}, the raw samples' sum")
            if not unknown and (cnt != n_acked or total != sum_acked):
                out["problems"].append(f"{name}: count {cnt} / sum {total:.0f} != acked "
                                       f"{n_acked} / {sum_acked}")
        allc = self.query_json(f"count_over_time(soak_m[{rng_s}s])", at)
        vals = [int(float(r["value"][1])) for r in allc]
        out["all_series"] = {"series": len(vals), "min": min(vals, default=None),
                             "max": max(vals, default=None)}
        if len(vals) != N_SERIES:
            out["problems"].append(f"count_over_time(soak_m) has {len(vals)} series, not 200")
        short = sum(1 for v in vals if v < n_acked)
        if short:
            out["problems"].append(f"{short} of {len(vals)} series hold fewer than {n_acked} "
                                   f"samples (min {min(vals)})")
        out["ok"] = not out["problems"]
        return out

    def check(self, label, settle_s=0.0):
        """The durability check; with settle_s, retried until it passes or settle_s passed."""
        t0 = time.monotonic()
        first, last, tries = None, None, 0
        while True:
            tries += 1
            try:
                res = self.check_once()
            except (OSError, RuntimeError, http.client.HTTPException, ValueError, KeyError,
                    IndexError) as e:
                res = {"ok": False, "problems": [f"check failed: {type(e).__name__}: {e}"]}
            if first is None:
                first = res
            last = res
            if res["ok"] or time.monotonic() - t0 >= settle_s:
                break
            time.sleep(1.0)
        rec = {"label": label, "t_s": round(self.rel(), 1), "ok": last["ok"], "tries": tries,
               "settle_s": round(time.monotonic() - t0, 1), "result": last}
        if tries > 1:
            rec["first_result"] = first
        self.checks.append(rec)
        log(f"check {label}: {'ok' if last['ok'] else 'FAILED ' + '; '.join(last['problems'])}"
            f" (acked {last.get('acked')}, tries {tries})")
        return rec

    # -- the run --

    def run(self):
        args = self.args
        os.makedirs(args.out, exist_ok=True)
        root = os.path.join(args.out, "agent")
        if os.path.exists(root):
            if not os.path.exists(os.path.join(root, ".soak")):
                raise SystemExit(f"{root} exists and is not from a soak run: refusing to reuse it")
            shutil.rmtree(root)
        os.makedirs(root)
        open(os.path.join(root, ".soak"), "w").close()
        self.agent = H.Agent(args.binary, root)
        self.csv_file = open(os.path.join(args.out, "samples.csv"), "w", newline="")
        self.csv_writer = csv.DictWriter(self.csv_file, fieldnames=[
            "t_s", "unix_time", "gen", "pid", "rss_kib", "hwm_kib", "fds", "threads", "cpu_s",
            "rw_series", "rw_series_created", "acked_pushes", "attack"])
        self.csv_writer.writeheader()
        self.t0 = time.monotonic()
        self.wall_start = time.time()
        st = self.start_agent("first start")
        log(f"agent pid {self.agent.pid} on 127.0.0.1:{self.agent.port} (job tcp "
            f"{self.agent.tcp_port}), data {self.agent.data}, started in {st['start_s']} s")
        self.first_start = st
        threads = [
            threading.Thread(target=self.periodic, args=(1.0, self.push, "push"), daemon=True),
            threading.Thread(target=self.periodic, args=(15.0, self.scrape, "metrics", 0.5),
                             daemon=True),
            threading.Thread(target=self.periodic, args=(5.0, self.count_query, "query", 2.0),
                             daemon=True),
            threading.Thread(target=self.periodic, args=(10.0, self.sample, "sample"),
                             daemon=True),
        ]
        for t in threads:
            t.start()
        hostile = threading.Thread(target=self.hostile, daemon=True)
        if args.attacks:
            hostile.start()
        self.aborted = None
        duration = args.duration
        try:
            mid_done = False
            while self.rel() < duration:
                if self.stop_all.wait(min(1.0, duration - self.rel())):
                    break
                if not self.agent.alive() and not self.restarting:
                    self.crashed()
                if not mid_done and self.rel() >= duration / 2:
                    mid_done = True
                    self.gate.pause()
                    try:
                        self.restart("SIGTERM")
                        self.check("after SIGTERM restart", settle_s=30)
                    finally:
                        self.gate.resume()
                if self.rel() - (self.samples[-1]["t_s"] if self.samples else 0) > 60:
                    log("warning: no sample for a minute")
            log("duration reached: stopping the hostile client")
            self.stop_hostile.set()
            if hostile.is_alive():
                hostile.join(60)
            if hostile.is_alive():
                log("warning: the hostile client did not stop within 60 s")
            self.stop_all.wait(args.settle)
            if not self.agent.alive():
                self.crashed()
            self.gate.pause()
            if self.agent.alive():
                self.scrape(gated=False)
                self.sample()
                self.prekill_sample = self.samples[-1] if self.samples else None
                self.check("end, before SIGKILL")
                # One more acknowledged push right before the kill (the gate is paused: let it
                # through by hand).
                self.gate.resume()
                ok = self.push()
                self.gate.pause()
                log(f"last push before SIGKILL: {'204' if ok else 'FAILED'}")
                self.restart("SIGKILL")
                self.check("after SIGKILL restart", settle_s=30)
                self.scrape(gated=False)
                self.sample()
                fin = self.agent.terminate(timeout=15)
                self.final_stop = fin
                log(f"final SIGTERM: exit {fin.get('rc')} in {fin.get('exit_s')} s")
        except KeyboardInterrupt:
            self.aborted = f"interrupted at {self.rel():.0f} s"
        except RuntimeError as e:
            self.aborted = f"{type(e).__name__} at {self.rel():.0f} s: {e}"
            log(self.aborted)
        finally:
            self.stop_hostile.set()
            self.stop_all.set()
            self.gate.resume()
            for t in threads:
                t.join(REQ_TIMEOUT + 5)
            if hostile.is_alive():
                hostile.join(30)
            if self.agent.alive():
                self.agent.proc.kill()
                self.agent.proc.wait()
            self.csv_file.close()
        self.total_s = self.rel()
        if not args.keep_data and not self.aborted:
            shutil.rmtree(self.agent.data, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

def pct(vals, q):
    if not vals:
        return None
    s = sorted(vals)
    return s[min(len(s) - 1, int(q * len(s)))]


def window_stats(samples, key, t_lo, t_hi):
    """Median over the window's samples taken while no attack ran (an attack's own connections
    and buffers are not a leak), or over all of them when fewer than 3 were quiet."""
    rows = [r for r in samples if t_lo <= r["t_s"] <= t_hi and r[key] is not None]
    quiet = [r for r in rows if not r["attack"]]
    vals = [r[key] for r in (quiet if len(quiet) >= 3 else rows)]
    return statistics.median(vals) if vals else None


FLAGGED = ("rss_kib", "fds", "threads")  # VmHWM is a peak: reported, never flagged


def windows(lo, hi):
    """(first, last) windows of a span: the first 20 % (at most 1 h) after a warm-up of
    min(60 s, 10 %), and the last 20 %."""
    span = hi - lo
    w0 = lo + min(60.0, 0.1 * span)
    return (w0, w0 + min(0.2 * span, 3600.0)), (hi - 0.2 * span, hi)


def resource_stats(samples, duration, growth_limit):
    """First vs last window medians and the max, per key, over the run and per process."""
    out = {"overall": {}, "per_process": {}}
    keys = ("rss_kib", "hwm_kib", "fds", "threads", "rw_series")
    # The load's samples (the ones taken around the final SIGKILL come after the duration).
    main = [r for r in samples if r["t_s"] <= duration + 0.5]
    if not main:
        return out
    (f0, f1), (l0, l1) = windows(0.0, max(r["t_s"] for r in main))
    for k in keys:
        a = window_stats(main, k, f0, f1)
        b = window_stats(main, k, l0, l1)
        mx = max((r[k] for r in samples if r[k] is not None), default=None)
        g = None if not a or b is None else (b - a) / a
        out["overall"][k] = {"first": a, "last": b, "max": mx, "growth": g,
                             "flag": k in FLAGGED and g is not None and g > growth_limit,
                             "first_window_s": [round(f0, 1), round(f1, 1)],
                             "last_window_s": [round(l0, 1), round(l1, 1)]}
    for gen in sorted({r["gen"] for r in main}):
        rows = [r for r in main if r["gen"] == gen]
        lo, hi = rows[0]["t_s"], rows[-1]["t_s"]
        (f0, f1), (l0, l1) = windows(lo, hi)
        d = {"t_s": [lo, hi], "samples": len(rows)}
        for k in keys:
            a = window_stats(rows, k, f0, f1)
            b = window_stats(rows, k, l0, l1)
            g = None if not a or b is None else (b - a) / a
            d[k] = {"first": a, "last": b,
                    "max": max((r[k] for r in rows if r[k] is not None), default=None),
                    "growth": g,
                    "flag": k in FLAGGED and g is not None and g > growth_limit}
        out["per_process"][str(gen)] = d
    return out


def summarize(s):
    args = s.args
    n_acked = len(s.acked)
    lat = s.push_lat
    res = resource_stats(s.samples, args.duration, args.growth_limit)
    flags = []
    if s.aborted:
        flags.append(f"run aborted: {s.aborted.splitlines()[0]}")
    for kind in ("push", "metrics", "query"):
        if s.counts[kind]["failed"]:
            flags.append(f"normal load: {s.counts[kind]['failed']} {kind} failures")
    for c in s.checks:
        if not c["ok"]:
            flags.append(f"check '{c['label']}': " + "; ".join(c["result"]["problems"]))
        elif c.get("first_result") and not c["first_result"]["ok"]:
            flags.append(f"check '{c['label']}' passed only after {c['settle_s']} s; first "
                         "answer: " + "; ".join(c["first_result"]["problems"]))
    for r in s.restarts:
        if not r.get("ok"):
            flags.append(f"{r['kind']} restart: exit {r.get('rc')} in {r.get('exit_s')} s "
                         f"{r.get('note', '')} {r.get('restart_failed', '')}".strip())
    for c in s.crashes:
        flags.append(f"the agent died at {c['t_s']} s (exit {c['rc']}, during "
                     f"{c['attack_running'] or 'no attack'}); log: "
                     f"{c['log_tail'].splitlines()[-1] if c['log_tail'] else ''}")
    fin = getattr(s, "final_stop", None)
    if fin and (fin.get("rc") != 0 or fin.get("exit_s") is None):
        flags.append(f"final SIGTERM: exit {fin.get('rc')} in {fin.get('exit_s')} s "
                     f"{fin.get('note', '')}")
    def series_note(d):
        v = d.get("rw_series") or {}
        return (f"; the agent's remote-write series count went {v.get('first'):g} -> "
                f"{v.get('last'):g} over the same windows"
                if v.get("first") is not None and v.get("last") is not None else "")

    def fv(k, v):
        if v is None:
            return "-"
        return f"{v / 1024:.1f} MiB" if k.endswith("_kib") else f"{v:g}"

    for k, v in res["overall"].items():
        if v["flag"]:
            flags.append(f"{k.replace('_kib', '')} grew {v['growth'] * 100:.0f} % (median first "
                         f"window {fv(k, v['first'])}, last window {fv(k, v['last'])}, max "
                         f"{fv(k, v['max'])}{series_note(res['overall'])})")
    for gen, d in res["per_process"].items():
        for k in FLAGGED:
            if d[k]["flag"]:
                flags.append(f"process {gen}: {k.replace('_kib', '')} grew "
                             f"{d[k]['growth'] * 100:.0f} % ({fv(k, d[k]['first'])} -> "
                             f"{fv(k, d[k]['last'])}, max {fv(k, d[k]['max'])}{series_note(d)})")
    if s.rw_drift:
        worst = max(s.rw_drift, key=lambda x: abs(x["metric"] - x["created"]))
        flags.append(f"gpuwatch_remote_write_series differs from the series remote-write "
                     f"created in this process in {len(s.rw_drift)} scrapes (worst: "
                     f"{worst['metric']} vs {worst['created']} at {worst['t_s']} s, process "
                     f"{worst['gen']}); the per-sender series quota "
                     "(write.max_series_per_sender) is charged from the same count")
    by_attack = {}
    for a in s.attacks:
        d = by_attack.setdefault(a["attack"], {"runs": 0, "as_expected": 0, "unexpected": 0,
                                               "overlapped_restart": 0, "max_s": 0.0,
                                               "example": "", "unexpected_examples": []})
        d["runs"] += 1
        d["max_s"] = max(d["max_s"], a["seconds"])
        if a["overlapped_restart"]:
            d["overlapped_restart"] += 1
        elif a["as_expected"]:
            d["as_expected"] += 1
            d["example"] = d["example"] or a["summary"]
        else:
            d["unexpected"] += 1
            if len(d["unexpected_examples"]) < 3:
                d["unexpected_examples"].append(f"t={a['t_s']} s: {a['summary']}")
    for name, d in by_attack.items():
        if d["unexpected"]:
            flags.append(f"attack {name}: {d['unexpected']} of {d['runs']} runs not as expected "
                         f"(e.g. {d['unexpected_examples'][0]})")
    stats = {
        "pushes_attempted": s.push_seq, "pushes_acked": n_acked,
        "pushes_unknown_outcome": len(s.unknown), "push_ticks_late": s.push_late_ticks,
        "push_latency_s": {"p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
                           "max": max(lat, default=None)},
        "query_latency_s": {"p50": pct(s.query_lat, 0.5), "max": max(s.query_lat, default=None)},
        "metrics_latency_s": {"p50": pct(s.metrics_lat, 0.5),
                              "max": max(s.metrics_lat, default=None)},
        "counts": s.counts, "count_query_wrong_value": s.query_wrong,
    }
    return {"flags": flags, "normal": stats, "resources": res, "attacks_by_name": by_attack}


def markdown(s, summ):
    args = s.args
    n = summ["normal"]
    out = []
    verdict = "PASS" if not summ["flags"] else f"**FAIL ({len(summ['flags'])} flags)**"
    out.append(f"## gpuwatch soak: {verdict}")
    out.append("")
    out.append(f"`{args.binary}`, planned {fmt_s(args.duration)}, ran {fmt_s(s.total_s)}, "
               f"seed {args.seed}, attack every ~{args.attack_interval:g} s, "
               f"{os.cpu_count()} CPUs, started "
               f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(s.wall_start))}.")
    out.append("")
    if summ["flags"]:
        out.append("Flags:")
        out.append("")
        for f in summ["flags"]:
            out.append(f"- {f}")
        out.append("")

    def l(v):
        return "-" if v is None else f"{v * 1000:.0f}"

    c = n["counts"]
    out += ["### Normal load (127.0.0.1)", "",
            "| what | ok | failed | skipped (restart) | latency p50 / p99 / max ms |",
            "|---|---|---|---|---|",
            f"| remote-write push, 200 series (1/s) | {c['push']['ok']} | {c['push']['failed']} "
            f"| {c['push']['skipped_paused']} | {l(n['push_latency_s']['p50'])} / "
            f"{l(n['push_latency_s']['p99'])} / {l(n['push_latency_s']['max'])} |",
            f"| instant count(soak_m) = 200 (1/5 s) | {c['query']['ok']} | {c['query']['failed']} "
            f"| {c['query']['skipped_paused']} | {l(n['query_latency_s']['p50'])} / - / "
            f"{l(n['query_latency_s']['max'])} |",
            f"| GET /metrics (1/15 s) | {c['metrics']['ok']} | {c['metrics']['failed']} "
            f"| {c['metrics']['skipped_paused']} | {l(n['metrics_latency_s']['p50'])} / - / "
            f"{l(n['metrics_latency_s']['max'])} |", ""]
    out.append(f"Pushes acknowledged: {n['pushes_acked']} of {n['pushes_attempted']} "
               f"({n['pushes_unknown_outcome']} without a 204; push ticks skipped because a push "
               f"was late: {n['push_ticks_late']}).")
    out.append("")
    if s.failures:
        out.append("Normal-load failures (first 10):")
        out.append("")
        for f in s.failures[:10]:
            out.append(f"- t={f['t_s']} s {f['kind']}: {f['status']} {f['body'][:150]!r} "
                       f"({f['seconds']} s, process {f['agent_gen']}, during "
                       f"{f['attack_running'] or 'no attack'}) {f['note']}")
        out.append("")
    out += ["### Acknowledged samples", "",
            "| check | at s | acked | unanswered | i=0 / 57 / 199 count | all 200: min–max | "
            "raw i=0/57/199: acked missing, wrong value | ok |", "|---|---|---|---|---|---|---|---|"]
    for ch in s.checks:
        r = ch["result"]
        if "series" in r:
            cnts = " / ".join(str(r["series"][str(i)]["count"]) for i in CHECK_SERIES)
            al = r["all_series"]
            sums = " / ".join(f"{r['series'][str(i)]['missing']}, "
                              f"{r['series'][str(i)]['wrong_value']}" for i in CHECK_SERIES)
            out.append(f"| {ch['label']} | {ch['t_s']} | {r['acked']} | {r['unknown_outcome']} "
                       f"| {cnts} | {al['min']}–{al['max']} ({al['series']} series) | {sums} "
                       f"| {'yes' if ch['ok'] else '**NO**'}"
                       f"{' (after ' + str(ch['settle_s']) + ' s)' if ch['tries'] > 1 else ''} |")
        else:
            out.append(f"| {ch['label']} | {ch['t_s']} | - | - | - | - | - | **NO**: "
                       f"{'; '.join(r['problems'])} |")
    out.append("")
    out += ["### Restarts", "", "| kind | at s | exit | exit s | restart s (to /healthz) "
            "| RSS before MiB | fds before |", "|---|---|---|---|---|---|---|"]
    for r in s.restarts:
        tries = f" ({r['attempts']} tries)" if r.get("attempts", 1) > 1 else ""
        out.append(f"| {r['kind']} | {r['t_s']} | {r.get('rc')} | {r.get('exit_s')} | "
                   f"{r.get('start_s')}{tries} | {r.get('rss_before_mib')} | {r.get('fds_before')} |")
    fin = getattr(s, "final_stop", None)
    if fin:
        out.append(f"| final SIGTERM | {round(s.total_s, 1)} | {fin.get('rc')} | "
                   f"{fin.get('exit_s')} | - | - | - |")
    out.append("")
    res = summ["resources"]
    if res["overall"]:
        ov = res["overall"]
        out += ["### Resources (sampled every 10 s)", "",
                f"Windows: first {ov['rss_kib']['first_window_s']} s, last "
                f"{ov['rss_kib']['last_window_s']} s (medians of the samples taken between "
                f"attacks); growth flagged over "
                f"{args.growth_limit * 100:.0f} % for RSS, fds and threads (HWM is a peak: one "
                "large request lifts it for good).", "",
                "| | first | last | max | growth |", "|---|---|---|---|---|"]

        def fv(k, v):
            if v is None:
                return "-"
            return f"{v / 1024:.1f} MiB" if k.endswith("kib") else f"{v:g}"

        for k, v in ov.items():
            g = "-" if v["growth"] is None else f"{v['growth'] * 100:+.0f} %"
            if v["flag"]:
                g = f"**{g}**"
            name = {"rw_series": "remote-write series (agent's count; not flagged)",
                    "hwm": "hwm (not flagged)"}.get(k.replace("_kib", ""), k.replace("_kib", ""))
            out.append(f"| {name} | {fv(k, v['first'])} | {fv(k, v['last'])} "
                       f"| {fv(k, v['max'])} | {g} |")
        out.append("")
        out.append("Per agent process (first 20 % of its life vs its last 20 %):")
        out.append("")
        out += ["| process | s | RSS MiB first → last (max) | HWM MiB | fds | threads "
                "| rw series |", "|---|---|---|---|---|---|---|"]
        for gen, d in res["per_process"].items():
            def pp(k, d=d):
                v = d[k]
                f = (lambda x: f"{x / 1024:.1f}") if k.endswith("kib") else (lambda x: f"{x:g}")
                txt = (f"{f(v['first'])} → {f(v['last'])} ({f(v['max'])})"
                       if v["first"] is not None and v["last"] is not None else "-")
                return f"**{txt}**" if v["flag"] else txt
            out.append(f"| {gen} | {d['t_s'][0]}–{d['t_s'][1]} | {pp('rss_kib')} "
                       f"| {pp('hwm_kib')} | {pp('fds')} "
                       f"| {pp('threads')} | {pp('rw_series')} |")
        out.append("")
        if s.samples:
            last = getattr(s, "prekill_sample", None) or s.samples[-1]
            cpu = sum(max(r["cpu_s"] for r in s.samples if r["gen"] == g)
                      for g in {r["gen"] for r in s.samples})
            out.append(f"Remote-write series the agent counts at the end (before the SIGKILL, "
                       f"process {last['gen']}): {last['rw_series']}, created by remote-write in "
                       f"that process: {last['rw_series_created']} (junk sent: {s.junk_next:,}; "
                       f"junk answers {s.junk_status}). Agent CPU over all processes: "
                       f"{cpu:.1f} s.")
            out.append("")
    if s.refused:
        per = []
        for g, r in sorted(s.refused.items()):
            nz = ", ".join(f"{k} {v:g}" for k, v in sorted(r.items()) if v)
            per.append(f"process {g}: {nz or 'none'}")
        out.append("Refusals the agent counted (gpuwatch_http_refused_total at each process's "
                   "last scrape): " + "; ".join(per) + ".")
        out.append("")
    out += ["### Attacks", "", "| attack | runs | as expected | unexpected | overlapped restart "
            "| max s | example |", "|---|---|---|---|---|---|---|"]
    for name, d in sorted(summ["attacks_by_name"].items()):
        ex = (d["unexpected_examples"][0] if d["unexpected"] else d["example"]).replace("|", "/")
        out.append(f"| {name} | {d['runs']} | {d['as_expected']} | "
                   f"{'**' + str(d['unexpected']) + '**' if d['unexpected'] else 0} | "
                   f"{d['overlapped_restart']} | {d['max_s']} | {ex[:140]} |")
    out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", help="the gpuwatch binary")
    ap.add_argument("--duration", type=parse_duration, default=parse_duration("6h"),
                    help="how long the load runs: 90s, 20m, 6h, 1h30m (default 6h)")
    ap.add_argument("--out", required=True, help="directory for soak.json, samples.csv, agent/")
    ap.add_argument("--seed", type=int, default=17, help="seed of the attack sequence")
    ap.add_argument("--attack-interval", type=float, default=20.0,
                    help="seconds between attack starts, ±25 %% (default 20)")
    ap.add_argument("--attacks", default=",".join(ATTACKS),
                    help="comma-separated attacks to pick from ('' for none)")
    ap.add_argument("--attack-source", default="127.0.0.2",
                    help="first loopback address of the attacker (the normal load uses 127.0.0.1)")
    ap.add_argument("--junk-series", type=int, default=5000,
                    help="new series per junk_series attack (default 5000)")
    ap.add_argument("--junk-senders", type=int, default=1,
                    help="attacker addresses junk_series rotates over, each a sender with its "
                         "own 200,000-series quota (default 1)")
    ap.add_argument("--growth-limit", type=float, default=0.20,
                    help="flag RSS/HWM/fd/thread growth above this fraction (default 0.20)")
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds of normal load after the hostile client stopped (default 5)")
    ap.add_argument("--keep-data", action="store_true", help="keep OUT/agent/data at the end")
    args = ap.parse_args()
    args.binary = os.path.abspath(args.binary)
    args.out = os.path.abspath(args.out)
    if not os.access(args.binary, os.X_OK):
        ap.error(f"{args.binary} is not executable")
    args.attacks = [a for a in args.attacks.split(",") if a]
    for a in args.attacks:
        if a not in ATTACKS:
            ap.error(f"unknown attack {a!r}; known: {', '.join(ATTACKS)}")
    if args.duration < 30:
        ap.error("--duration must be at least 30 s")
    s = Soak(args)
    try:
        s.run()
    except SystemExit:
        raise
    summ = summarize(s)
    md = markdown(s, summ)
    print(md)
    doc = {
        "meta": {"binary": args.binary, "duration_s": args.duration, "ran_s": round(s.total_s, 1),
                 "seed": args.seed, "attack_interval_s": args.attack_interval,
                 "attacks": args.attacks, "attack_source": args.attack_source,
                 "junk_series": args.junk_series, "junk_senders": args.junk_senders,
                 "cpus": os.cpu_count(), "started": s.wall_start,
                 "port": s.agent.port, "job_tcp_port": s.agent.tcp_port,
                 "first_start": getattr(s, "first_start", None), "aborted": s.aborted},
        "flags": summ["flags"],
        "normal": summ["normal"],
        "acked": {"count": len(s.acked), "first_ts_ms": s.acked[0][0] if s.acked else None,
                  "last_ts_ms": s.acked[-1][0] if s.acked else None},
        "unknown_outcome": s.unknown,
        "failures": s.failures,
        "checks": s.checks,
        "restarts": s.restarts,
        "crashes": s.crashes,
        "final_stop": getattr(s, "final_stop", None),
        "resources": summ["resources"],
        "attacks_by_name": summ["attacks_by_name"],
        "attacks": s.attacks,
        "junk": {"series_sent": s.junk_next, "statuses": s.junk_status,
                 "created_by_process": s.junk_created},
        "rw_series_drift": s.rw_drift,
        "http_refused_by_process": s.refused,
    }
    with open(os.path.join(args.out, "soak.json"), "w") as f:
        json.dump(doc, f, indent=2, default=str)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(md + "\n")
    return 0 if not summ["flags"] else 1


if __name__ == "__main__":
    sys.exit(main())
