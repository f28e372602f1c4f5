#!/usr/bin/env python3
"""Hostile-load benchmark for the gpuwatch agent (issue 17): what each attack costs the agent,
and whether the agent keeps serving its real clients while it runs.

    python3 bench/hostile/run.py build/release/gpuwatch --json /tmp/hostile.json
    python3 bench/hostile/run.py build/test/gpuwatch --quick          # smoke test, ~1 min

It starts the agent on loopback with a fresh data directory (no NVML, no kernel log):

    GPUWATCH up --listen 127.0.0.1:PORT --data-dir DIR/data --nvml-lib /nonexistent --kmsg off
                --job-socket DIR/job.sock --job-tcp 127.0.0.1:TCPPORT

then replays the attacks below one at a time. For each one it measures, while it runs:

  * memory: the agent's peak RSS. VmHWM is reset through /proc/PID/clear_refs ("5") at the
    start of the attack where the kernel allows it, so "HWM delta" is the attack's own peak
    above the RSS it started from; "peak RSS" is the highest VmRSS sampled every 100 ms from
    /proc/PID/status; "RSS after" is VmRSS a moment after the attack ended (memory returned?);
  * CPU: utime + stime of the agent (/proc/PID/stat, in SC_CLK_TCK ticks) over the attack;
  * service: four probes, each every 250 ms with a 2 s timeout, from 127.0.0.1:
    GET /healthz, GET /metrics, an authenticated one-sample remote-write push and the instant
    query /api/v1/query?query=up. The worst latency and the failed probes (error, timeout,
    unexpected status or slower than 2 s) are reported per probe;
  * afterwards: that the agent is still alive (a dead agent is reported and a fresh one is
    started for the remaining attacks), and the change of gpuwatch_http_refused_total by reason.

Attackers connect from other loopback addresses (--attack-source, default 127.0.0.2; the
slowloris spreads over four consecutive ones) so that the agent's per-source connection limit
(64) and per-sender series limit apply to the attacker and not to the probes, as they would
when the attacker is another machine. Requests that need a token send the admin token: the
point is to exercise the limits behind authentication. The query of death runs last and the
agent is stopped with SIGTERM while a second such query is in flight; the seconds it takes to
exit are reported.

Output: a markdown table on stdout (plus per-attack details), and with --json PATH the full
results. Python 3.11 standard library only; remote-write bodies come from tests/rw.py.
--quick shrinks the sizes and durations for a smoke test; the attack sequence is the same.
"""
import argparse
import http.client
import json
import os
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests"))
import rw  # noqa: E402  (tests/rw.py: protobuf + snappy literal blocks by hand)

MiB = 1 << 20
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offset_addr(addr, k):
    """127.0.0.2 + k -> 127.0.0.(2+k) (IPv4 dotted quad arithmetic)."""
    n = int.from_bytes(socket.inet_aton(addr), "big") + k
    return socket.inet_ntoa(n.to_bytes(4, "big"))


# ---------------------------------------------------------------------------------------------
# HTTP helpers
# ---------------------------------------------------------------------------------------------

def http_request(port, method, path, body=None, headers=None, timeout=10.0, source=None):
    """One request on a fresh connection: (status, body bytes, seconds)."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                   source_address=(source, 0) if source else None)
    try:
        c.request(method, path, body, headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, data, time.monotonic() - t0
    finally:
        c.close()


class KeptAlive:
    """One kept-alive connection from `source`, reopened whenever the server closes it.
    post() returns the status as a string, or the exception's name."""

    def __init__(self, port, source, timeout):
        self.port, self.source, self.timeout, self.conn = port, source, timeout, None

    def post(self, path, body, headers):
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout,
                                                       source_address=(self.source, 0))
            self.conn.request("POST", path, body, headers)
            r = self.conn.getresponse()
            r.read()
            if r.will_close:
                self.close()
            return str(r.status)
        except (OSError, http.client.HTTPException) as e:
            self.close()
            return type(e).__name__

    def close(self):
        if self.conn:
            self.conn.close()
        self.conn = None


def auth(token, extra=None):
    h = {"Authorization": "Bearer " + token}
    h.update(extra or {})
    return h


def raw_exchange(port, head, pieces, *, source, deadline, piece_timeout=10.0):
    """Send `head`, then the byte strings of `pieces` (an iterator), on one raw connection from
    `source`, and stop as soon as the server answers or closes (a server that refuses a body
    answers early; one that buffers it does not). Returns a dict: status (or None), bytes of
    body sent, seconds to the first byte of the answer, how the exchange ended."""
    out = {"status": None, "body_bytes_sent": 0, "answer_s": None, "ended": "", "answer": ""}
    t0 = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    except OSError as e:
        out["ended"] = f"connect failed: {e}"
        return out
    s.setblocking(False)
    buf = b""
    answered = False

    def wait(write_wanted, limit):
        r, w, _ = select.select([s], [s] if write_wanted else [], [], limit)
        return bool(r), bool(w)

    try:
        pending = memoryview(head)
        head_done = False
        it = iter(pieces)
        last_progress = time.monotonic()
        while True:
            if not pending:
                if not head_done:
                    head_done = True
                try:
                    pending = memoryview(next(it))
                except StopIteration:
                    out["ended"] = "sent everything"
                    break
            if time.monotonic() > deadline:
                out["ended"] = "attack deadline"
                break
            readable, writable = wait(True, 0.5)
            if readable:
                answered = True
                out["answer_s"] = time.monotonic() - t0
                break
            if time.monotonic() - last_progress > piece_timeout:
                out["ended"] = f"server stopped reading for {piece_timeout:.0f} s"
                break
            if writable:
                n = s.send(pending[:256 << 10])
                if head_done:
                    out["body_bytes_sent"] += n
                pending = pending[n:]
                last_progress = time.monotonic()
    except (BrokenPipeError, ConnectionResetError) as e:
        out["ended"] = f"send: {type(e).__name__}"
    except OSError as e:
        out["ended"] = f"send: {e}"
    # Read whatever answer there is (the server may also close without one).
    stop = time.monotonic() + (5 if answered else 3)
    try:
        while time.monotonic() < stop and b"\r\n\r\n" not in buf:
            r, _, _ = select.select([s], [], [], 0.2)
            if not r:
                continue
            chunk = s.recv(65536)
            if not chunk:
                break
            if out["answer_s"] is None:
                out["answer_s"] = time.monotonic() - t0
            buf += chunk
    except (ConnectionResetError, OSError) as e:
        if not buf:
            out["ended"] = (out["ended"] + f"; read: {type(e).__name__}").lstrip("; ")
    finally:
        s.close()
    m = re.match(rb"HTTP/1\.[01] (\d{3})", buf)
    if m:
        out["status"] = int(m.group(1))
        out["answer"] = buf.split(b"\r\n\r\n", 1)[-1][:160].decode(errors="replace")
        if not out["ended"]:
            out["ended"] = "answered"
    elif not out["ended"]:
        out["ended"] = "closed without an answer"
    out["seconds"] = round(time.monotonic() - t0, 3)
    if out["answer_s"] is not None:
        out["answer_s"] = round(out["answer_s"], 3)
    return out


def repeat(block, total):
    """Yields `block` until `total` bytes were produced (the last one cut)."""
    left = total
    while left > 0:
        piece = block if len(block) <= left else block[:left]
        left -= len(piece)
        yield piece


def fixed_series_body(name, ids, samples_bytes, id_width, extra_labels=()):
    """A remote-write body of series {__name__=name, extra..., id=<id padded to id_width>}, each
    with the same pre-encoded samples: built from one template, fast enough for 1M series."""
    marker = "\x01" * id_width
    labels = [("__name__", name)] + list(extra_labels) + [("id", marker)]
    ts = b"".join(rw.field(1, rw.field(1, k.encode()) + rw.field(2, v.encode())) for k, v in labels)
    ts += samples_bytes
    template = rw.field(1, ts)
    pre, post = template.split(marker.encode())
    fmt = b"%0" + str(id_width).encode() + b"d"
    return rw.snappy(b"".join(pre + (fmt % i) + post for i in ids))


def encode_samples(samples):
    import struct
    return b"".join(rw.field(2, b"\x09" + struct.pack("<d", x) + b"\x10" + rw.varint(t))
                    for t, x in samples)


# ---------------------------------------------------------------------------------------------
# The agent, and what it costs
# ---------------------------------------------------------------------------------------------

class Agent:
    def __init__(self, binary, root):
        self.binary = binary
        self.root = root
        self.data = os.path.join(root, "data")
        self.sock = os.path.join(root, "job.sock")
        self.port = free_port()
        self.tcp_port = free_port()
        self.log_path = os.path.join(root, "agent.log")
        self.proc = None
        self.token = None

    def start(self, timeout=30):
        cmd = [self.binary, "up", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data,
               "--nvml-lib", "/nonexistent", "--kmsg", "off", "--job-socket", self.sock,
               "--job-tcp", f"127.0.0.1:{self.tcp_port}"]
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)
        stop = time.monotonic() + timeout
        while time.monotonic() < stop:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if http_request(self.port, "GET", "/healthz", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError(f"agent did not answer /healthz in {timeout} s:\n{self.log_tail()}")
        with open(os.path.join(self.data, "admin.token")) as f:
            self.token = f.read().strip()

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=15):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def terminate(self, timeout=30):
        """SIGTERM; seconds until it exited (SIGKILL after timeout: then None) and its exit code."""
        if not self.alive():
            return {"exit_s": 0.0, "rc": self.proc.returncode if self.proc else None,
                    "note": "was not running"}
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
            res = {"exit_s": round(time.monotonic() - t0, 3), "rc": rc}
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            res = {"exit_s": None, "rc": rc, "note": f"no exit {timeout} s after SIGTERM: SIGKILLed"}
        self.logf.close()
        return res


def proc_status(pid):
    """VmRSS and VmHWM in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
    return out


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the comm: state is field 3, so utime (14) and stime (15) are at [11] and [12].
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def reset_hwm(pid):
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Sampler(threading.Thread):
    """VmRSS every 100 ms; max_rss() over a window."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.samples = []  # (t, rss_kib)
        self.stopped = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        while not self.stopped.is_set():
            try:
                rss = proc_status(self.pid)["VmRSS"]
                with self.lock:
                    self.samples.append((time.monotonic(), rss))
            except (OSError, KeyError):
                pass
            self.stopped.wait(0.1)

    def max_rss(self, t0, t1):
        with self.lock:
            vals = [r for t, r in self.samples if t0 <= t <= t1]
        return max(vals) if vals else None


class Prober(threading.Thread):
    """One kind of probe, every 250 ms, 2 s timeout, from 127.0.0.1."""

    TIMEOUT = 2.0
    PERIOD = 0.25

    def __init__(self, name, fn, expect):
        super().__init__(daemon=True)
        self.name, self.fn, self.expect = name, fn, expect
        self.results = []  # (t_start, latency, ok, detail)
        self.inflight = None
        self.stopped = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        while not self.stopped.is_set():
            t0 = time.monotonic()
            self.inflight = t0
            try:
                status = self.fn(self.TIMEOUT)
                ok, detail = status == self.expect, str(status)
            except Exception as e:  # noqa: BLE001  (any failure is a failed probe)
                ok, detail = False, type(e).__name__
            lat = time.monotonic() - t0
            if lat > self.TIMEOUT:
                ok, detail = False, detail + " (slow)"
            with self.lock:
                self.results.append((t0, lat, ok, detail))
                self.inflight = None
            self.stopped.wait(max(0.0, self.PERIOD - lat))

    def window(self, t0, t1):
        with self.lock:
            rs = [r for r in self.results if t0 <= r[0] <= t1]
            inflight = self.inflight
        worst = max((r[1] for r in rs), default=0.0)
        if inflight is not None and t0 <= inflight <= t1:  # still waiting: counts as its age
            worst = max(worst, time.monotonic() - inflight)
        fails = [r for r in rs if not r[2]]
        return {"probes": len(rs), "failed": len(fails), "worst_ms": round(worst * 1000, 1),
                "fail_kinds": sorted({r[3] for r in fails})}


def refused_counts(port):
    """gpuwatch_http_refused_total by reason, from /metrics (empty when it cannot be read)."""
    try:
        status, body, _ = http_request(port, "GET", "/metrics", timeout=5)
    except OSError:
        return {}
    out = {}
    for line in body.decode(errors="replace").splitlines():
        m = re.match(r'gpuwatch_http_refused_total\{.*reason="([a-z_]+)".*\} ([0-9.e+]+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def metric_value(port, name, label_match=""):
    try:
        body = http_request(port, "GET", "/metrics", timeout=5)[1].decode(errors="replace")
    except OSError:
        return None
    for line in body.splitlines():
        if line.startswith(name + "{") and label_match in line:
            return float(line.rsplit(" ", 1)[1])
    return None


# ---------------------------------------------------------------------------------------------
# The attacks. Each takes the Bench and returns (summary, as_expected, details).
# ---------------------------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.src = args.attack_source
        self.tmp = tempfile.mkdtemp(prefix="gpuwatch-hostile-")
        self.agent = None
        self.agents_started = 0
        self.write_ts = 0
        self.results = []
        self.sigterm = None

    # -- agent and probes --

    def start_agent(self):
        root = os.path.join(self.tmp, f"run{self.agents_started}")
        os.makedirs(root)
        self.agent = Agent(self.args.binary, root)
        self.agent.start()
        self.agents_started += 1
        log(f"agent pid {self.agent.pid} on 127.0.0.1:{self.agent.port} "
            f"(job tcp {self.agent.tcp_port}), data {self.agent.data}")
        self.sampler = Sampler(self.agent.pid)
        self.sampler.start()
        a = self.agent
        query_path = "/api/v1/query?query=up"

        def healthz(t):
            return http_request(a.port, "GET", "/healthz", timeout=t)[0]

        def metrics(t):
            return http_request(a.port, "GET", "/metrics", timeout=t)[0]

        def write(t):
            self.write_ts = max(self.write_ts + 1, int(time.time() * 1000))
            body = rw.body([([("__name__", "bench_probe"), ("probe", "write")],
                             [(self.write_ts, 1.0)])])
            return http_request(a.port, "POST", "/api/v1/write", body,
                                auth(a.token, {"Content-Encoding": "snappy",
                                               "Content-Type": "application/x-protobuf"}),
                                timeout=t)[0]

        def query(t):
            return http_request(a.port, "GET", query_path, timeout=t)[0]

        self.probers = [Prober("healthz", healthz, 200), Prober("metrics", metrics, 200),
                        Prober("write", write, 204), Prober("query", query, 200)]
        for p in self.probers:
            p.start()

    def stop_probes(self):
        for p in self.probers:
            p.stopped.set()
        self.sampler.stopped.set()

    def scale(self, full, quick):
        return quick if self.quick else full

    def attack_deadline(self):
        return time.monotonic() + self.scale(20.0, 8.0)

    # -- measurement around one attack --

    def run_attack(self, name, fn, expected, hwm_limit_mib=None):
        if self.agent is None or not self.agent.alive():
            self.start_agent()
        a = self.agent
        log(f"attack {name} ...")
        refused0 = refused_counts(a.port)
        hwm_reset = reset_hwm(a.pid)
        st0 = proc_status(a.pid)
        cpu0 = proc_cpu_s(a.pid)
        t0 = time.monotonic()
        error = None
        self.measured = None

        def measure(settle=True):
            """CPU, RSS and refusals since t0; the query of death calls it before its SIGTERM."""
            m = {"t1": time.monotonic()}
            cpu1 = proc_cpu_s(a.pid)
            st1 = proc_status(a.pid)
            m["cpu_s"] = round(cpu1 - cpu0, 2)
            m["rss_before_mib"] = round(st0["VmRSS"] / 1024, 1)
            peak = self.sampler.max_rss(t0, m["t1"])
            m["peak_rss_mib"] = round(max(peak or 0, st1["VmRSS"]) / 1024, 1)
            m["hwm_delta_mib"] = round((st1["VmHWM"] - st0["VmHWM"]) / 1024, 1)
            m["hwm_reset"] = hwm_reset
            if settle:
                time.sleep(self.scale(1.0, 0.5))  # let the agent give memory back
            m["rss_after_mib"] = round(proc_status(a.pid)["VmRSS"] / 1024, 1)
            refused1 = refused_counts(a.port)
            m["refused_delta"] = {k: int(v - refused0.get(k, 0)) for k, v in refused1.items()
                                  if v - refused0.get(k, 0) > 0}
            self.measured = m
            return m

        self.measure = measure
        try:
            summary, ok, details = fn(self)
        except Exception as e:  # noqa: BLE001  (a broken attack is reported, not fatal)
            import traceback
            summary, ok, details = f"attack raised {type(e).__name__}: {e}", False, {
                "traceback": traceback.format_exc()}
            error = str(e)
        t_done = time.monotonic()
        # A fast attack still gets a window of a few probes and RSS samples after it.
        min_window = self.scale(2.0, 1.0)
        while time.monotonic() - t0 < min_window and a.alive():
            time.sleep(0.05)
        alive = a.alive()
        stopped_on_purpose = self.measured is not None and not alive
        row = {"attack": name, "expected": expected, "summary": summary, "as_expected": ok,
               "seconds": round(t_done - t0, 2), "alive_after": alive or stopped_on_purpose,
               "details": details}
        if error:
            row["error"] = error
        if alive and self.measured is None:
            measure()
        if self.measured is not None:
            t1 = self.measured.pop("t1")
            row.update(self.measured)
        else:
            t1 = time.monotonic()
        row["window_s"] = round(t1 - t0, 2)
        if hwm_limit_mib is not None and row.get("hwm_delta_mib", 0) > hwm_limit_mib:
            row["as_expected"] = False
            row["summary"] += f"; HWM Δ {row['hwm_delta_mib']} MiB > {hwm_limit_mib} MiB"
        if stopped_on_purpose:
            row["note"] = "stopped by the attack's own SIGTERM (see sigterm)"
        elif not alive:
            row["exit_code"] = a.proc.returncode
            row["log_tail"] = a.log_tail()
            row["summary"] += f" | AGENT DIED (exit {a.proc.returncode})"
            row["as_expected"] = False
            log(f"agent died during {name}: exit {a.proc.returncode}\n{a.log_tail()}")
        row["probes"] = {p.name: p.window(t0, t1) for p in self.probers}
        if not alive and not stopped_on_purpose:
            self.stop_probes()
        self.results.append(row)
        log(f"  {name}: {row['summary']} ({row['seconds']} s)")
        return row


def atk_baseline(b):
    time.sleep(b.scale(3.0, 2.0))
    return "no attack (reference for CPU, RSS and probe latency)", None, {}


def atk_chunked_body(b):
    a = b.agent
    head = (b"POST /api/v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + a.token.encode() + b"\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    total = b.scale(1 << 30, 256 * MiB)
    chunk = b"%x\r\n" % MiB + b"[" + b" " * (MiB - 2) + b"]" + b"\r\n"
    r = raw_exchange(a.port, head, repeat(chunk, total // MiB * len(chunk)), source=b.src,
                     deadline=b.attack_deadline())
    ok = r["status"] == 413 and r["body_bytes_sent"] < 64 * MiB
    return (f"{r['status']} after {r['body_bytes_sent'] / MiB:.1f} MiB sent, "
            f"answer at {r['answer_s']} s ({r['ended']})", ok, r)


def atk_big_content_length(b):
    a = b.agent
    head = (b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\nContent-Encoding: snappy\r\n"
            b"Content-Type: application/x-protobuf\r\n"
            b"Authorization: Bearer " + a.token.encode() + b"\r\n"
            b"Content-Length: 1073741824\r\n\r\n")
    total = b.scale(1 << 30, 256 * MiB)
    r = raw_exchange(a.port, head, repeat(b"\0" * MiB, total), source=b.src,
                     deadline=b.attack_deadline())
    ok = r["status"] == 413 and r["answer_s"] is not None and r["answer_s"] < 1.0
    return (f"{r['status']} at {r['answer_s']} s, {r['body_bytes_sent'] / MiB:.1f} MiB sent "
            f"({r['ended']})", ok, r)


def atk_json_bomb(b):
    a = b.agent
    size = 60_000_000
    body = b"[" + b"{}," * ((size - 2) // 3) + b"{}]"
    head = (b"POST /api/v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + a.token.encode() + b"\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    deadline = b.attack_deadline()
    results = [None] * 4

    def one(i):
        results[i] = raw_exchange(a.port, head, [body], source=b.src, deadline=deadline)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    statuses = [r["status"] for r in results]
    sent = max(r["body_bytes_sent"] for r in results)
    ok = all(s == 413 for s in statuses)
    return (f"statuses {statuses}, at most {sent / MiB:.1f} MiB of {len(body) / MiB:.0f} MiB sent, "
            f"slowest answer {max((r['answer_s'] or 0) for r in results)} s", ok,
            {"requests": results, "body_bytes": len(body)})


def snappy_bomb_body():
    seed = b"\x0a\x7e" + b"\x0a\x00" * 63
    n = 64 << 20
    return rw.varint(n) + bytes([60 << 2, len(seed) - 1]) + seed + b"\xfe\x80\x00" * ((n - 128) // 64)


def atk_snappy_bomb(b):
    a = b.agent
    body = snappy_bomb_body()
    t0 = time.monotonic()
    try:
        status, data, secs = http_request(
            a.port, "POST", "/api/v1/write", body,
            auth(a.token, {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"}),
            timeout=b.scale(20, 10), source=b.src)
        answer = data[:200].decode(errors="replace").strip()
    except OSError as e:
        status, answer, secs = None, f"{type(e).__name__}: {e}", time.monotonic() - t0
    return (f"{status} in {secs:.2f} s ({len(body) / MiB:.1f} MiB body inflating to 64 MiB): "
            f"{answer[:90]}", status == 413,
            {"status": status, "seconds": round(secs, 3), "answer": answer,
             "body_bytes": len(body), "inflated_bytes": 64 << 20})


def atk_many_headers(b):
    a = b.agent
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    lines = 4_000_000
    block = b"X: y\r\n" * 10_000
    r = raw_exchange(a.port, head, repeat(block, lines * 6), source=b.src,
                     deadline=b.attack_deadline())
    ok = r["status"] == 431 and r["body_bytes_sent"] < 8 * MiB
    return (f"{r['status']} after {r['body_bytes_sent'] / 6:.0f} header lines "
            f"({r['body_bytes_sent'] / MiB:.2f} MiB), answer at {r['answer_s']} s ({r['ended']})",
            ok, r)


def trickle_headers(states, t0, duration, period):
    """Slowloris: every `period` s, one more header line on each open connection, until
    `duration` after t0 or until the agent has closed them all. Each state is a dict with
    "sock" (non-blocking), "opened", "closed" (None while open) and "answer" (bytes read)."""
    next_send = time.monotonic() + period
    while time.monotonic() - t0 < duration:
        open_ = [st for st in states if st["closed"] is None]
        if not open_:
            break
        by_sock = {st["sock"]: st for st in open_}
        r, _, _ = select.select(list(by_sock), [], [], 0.2)
        for c in r:
            st = by_sock[c]
            try:
                data = c.recv(4096)
            except OSError:
                data = b""
            if data:
                st["answer"] += data
            else:
                st["closed"] = time.monotonic()
        if time.monotonic() >= next_send:
            next_send += period
            for st in open_:
                if st["closed"] is None:
                    try:
                        st["sock"].send(b"X-Slow: y\r\n")
                    except OSError:
                        st["closed"] = time.monotonic()


def atk_slowloris(b):
    a = b.agent
    n, sources, period = 200, 4, 3.0
    duration = b.scale(20.0, 13.5)
    socks = {}  # fd -> state
    connect_failed = 0
    t0 = time.monotonic()
    for i in range(n):
        src = offset_addr(b.src, i % sources)
        try:
            s = socket.create_connection(("127.0.0.1", a.port), timeout=2, source_address=(src, 0))
            s.setblocking(False)
            s.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            socks[s.fileno()] = {"sock": s, "opened": time.monotonic(), "closed": None, "answer": b""}
        except OSError:
            connect_failed += 1
    trickle_headers(list(socks.values()), t0, duration, period)
    lifetimes = [st["closed"] - st["opened"] for st in socks.values() if st["closed"] is not None]
    still_open = sum(1 for st in socks.values() if st["closed"] is None)
    early = sum(1 for x in lifetimes if x < 2.0)
    answers = {}
    for st in socks.values():
        m = re.match(rb"HTTP/1\.[01] (\d{3})", st["answer"])
        k = m.group(1).decode() if m else "none"
        answers[k] = answers.get(k, 0) + 1
        st["sock"].close()
    det = {"connections": n, "sources": sources, "connect_failed": connect_failed,
           "closed_by_server": len(lifetimes), "closed_within_2s": early, "still_open": still_open,
           "lifetime_s": {"min": round(min(lifetimes), 2) if lifetimes else None,
                          "median": round(statistics.median(lifetimes), 2) if lifetimes else None,
                          "max": round(max(lifetimes), 2) if lifetimes else None},
           "answers": answers, "duration_s": duration}
    ok = still_open == 0 and early == 0 and lifetimes and max(lifetimes) < 12.5
    return (f"{len(lifetimes)}/{len(socks)} closed by the agent, lifetimes "
            f"{det['lifetime_s']['min']}-{det['lifetime_s']['max']} s, {still_open} still open, "
            f"answers {answers}", bool(ok), det)


def atk_cardinality(b):
    a = b.agent
    total, batch = b.scale(1_000_000, 300_000), 100_000
    deadline = b.attack_deadline()
    now = int(time.time() * 1000)
    sample = encode_samples([(now, 1.0)])
    statuses, answers, sent = [], [], 0
    for start in range(0, total, batch):
        if time.monotonic() > deadline:
            break
        body = fixed_series_body("card_attack", range(start, start + batch), sample, 7)
        try:
            st, data, secs = http_request(
                a.port, "POST", "/api/v1/write", body,
                auth(a.token, {"Content-Encoding": "snappy",
                               "Content-Type": "application/x-protobuf"}),
                timeout=60, source=b.src)
        except OSError as e:
            st, data, secs = None, str(e).encode(), 0
        statuses.append(st)
        answers.append(data[:120].decode(errors="replace").strip())
        sent += batch
    created = metric_value(a.port, "gpuwatch_remote_write_series")
    refused = metric_value(a.port, "gpuwatch_remote_write_refused_samples_total", "series_limit")
    ok = statuses[:2] == [204, 204] and all(s == 400 for s in statuses[2:])
    return (f"{sent:,} series sent, statuses {statuses}; agent counts {created and int(created):,} "
            f"remote-write series, {refused and int(refused):,} samples refused (series_limit)",
            ok, {"statuses": statuses, "answers": answers, "series_sent": sent,
                 "remote_write_series": created, "refused_series_limit": refused,
                 "note": "one sender (admin@" + b.src + "): the per-sender limit of 200,000 is "
                         "reached first; the global --max-series needs five senders"})


def atk_silence_flood(b):
    a = b.agent
    n = b.scale(1000, 200)
    body = json.dumps({"node": "x", "duration_s": 3600}).encode()
    statuses = {}
    conn = KeptAlive(a.port, b.src, timeout=5)
    for i in range(n):
        k = conn.post("/api/v1/silences", body, {"Content-Type": "application/json"})
        statuses[k] = statuses.get(k, 0) + 1
    conn.close()
    authed = {}
    for i in range(5):
        st, data, _ = http_request(a.port, "POST", "/api/v1/silences", body,
                                   auth(a.token, {"Content-Type": "application/json"}),
                                   source=b.src)
        authed[str(st)] = authed.get(str(st), 0) + 1
    ok = statuses == {"401": n} and authed == {"201": 5}
    return (f"{n} without token: {statuses}; 5 with token: {authed}", ok,
            {"unauthenticated": statuses, "authenticated": authed})


def atk_event_flood(b):
    a = b.agent
    marker = f"bench-xid-{int(time.time())}"
    xid = json.dumps([{"kind": "xid", "severity": "critical", "gpu": "0", "text": marker,
                       "fields": {"xid": 79}}]).encode()
    st_xid = http_request(a.port, "POST", "/api/v1/events", xid,
                          auth(a.token, {"Content-Type": "application/json"}))[0]
    deadline = b.attack_deadline()
    # 18 posts of 15 MB: refused by the route's 1 MiB limit.
    big_n = b.scale(18, 4)
    big = json.dumps([{"kind": "annotation", "text": "a" * 60000}] * 250).encode()  # ~15 MB
    head = (b"POST /api/v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + a.token.encode() + b"\r\n"
            b"Content-Length: %d\r\n\r\n" % len(big))
    big_status = {}
    for _ in range(big_n):
        r = raw_exchange(a.port, head, [big], source=b.src, deadline=deadline)
        big_status[str(r["status"])] = big_status.get(str(r["status"]), 0) + 1
    # Then 500 KB posts of annotations (8 events of 62 KB text each: under the 64 KiB message
    # limit and the 1 MiB body limit), accepted, until the count or the deadline.
    small_n = b.scale(2000, 100)
    small = json.dumps([{"kind": "annotation", "text": "b" * 62000}] * 8).encode()
    small_status, posted = {}, 0
    conn = KeptAlive(a.port, b.src, timeout=10)
    for _ in range(small_n):
        if time.monotonic() > deadline:
            break
        k = conn.post("/api/v1/events", small, auth(a.token, {"Content-Type": "application/json"}))
        small_status[k] = small_status.get(k, 0) + 1
        posted += 1
    conn.close()
    st, data, _ = http_request(a.port, "GET", "/api/v1/events?kind=xid&limit=100000", timeout=10)
    xid_kept = st == 200 and marker.encode() in data
    ok = (st_xid == 204 and big_status == {"413": big_n} and set(small_status) == {"204"}
          and xid_kept)
    return (f"xid post {st_xid}; {big_n} x {len(big) / 1e6:.0f} MB: {big_status}; "
            f"{posted} x {len(small) / 1e3:.0f} KB: {small_status}; xid still listed: {xid_kept}",
            ok, {"xid_post": st_xid, "big_posts": big_status, "big_bytes": len(big),
                 "small_posts": small_status, "small_posted": posted, "small_bytes": len(small),
                 "small_planned": small_n, "xid_still_listed": xid_kept})


def job_exists(a, job, wait_s=5.0):
    stop = time.monotonic() + wait_s
    while True:
        try:
            if http_request(a.port, "GET", "/api/v1/jobs/" + urllib.parse.quote(job),
                            timeout=2)[0] == 200:
                return True
        except OSError:
            pass
        if time.monotonic() > stop:
            return False
        time.sleep(0.1)


HOLD_SCRIPT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sent = 0
for i in range(int(sys.argv[2])):
    try:
        s.sendto(('{"type":"start","job":"h%d"}\n' % i).encode(), sys.argv[1])
        sent += 1
    except OSError as e:
        print("send failed:", e, file=sys.stderr)
        break
print(sent)
"""


def atk_job_slots(b):
    a = b.agent
    script = os.path.join(a.root, "hold.py")
    with open(script, "w") as f:
        f.write(HOLD_SCRIPT)
    as_nobody = (os.getuid() == 0 and shutil.which("setpriv") is not None
                 and os.access("/usr/bin/python3", os.X_OK))
    if as_nobody:
        os.chmod(b.tmp, 0o755)
        os.chmod(a.root, 0o755)
        os.chmod(script, 0o644)
        cmd = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
               "/usr/bin/python3", script, a.sock, "1100"]
    else:
        cmd = [sys.executable, script, a.sock, "1100"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    legit = subprocess.run([sys.executable, "-c",
                            "import socket,sys; socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM)"
                            ".sendto(b'{\"type\":\"start\",\"job\":\"legit\"}\\n', sys.argv[1])",
                            a.sock], capture_output=True, text=True, timeout=10)
    legit_ok = legit.returncode == 0 and job_exists(a, "legit")
    st, data, _ = http_request(a.port, "GET", "/api/v1/jobs", timeout=10)
    jobs = [j.get("id") for j in json.loads(data).get("jobs", [])] if st == 200 else []
    held = sum(1 for j in jobs if re.fullmatch(r"h\d+", str(j)))
    uid_note = ("the 1100 as uid 65534 (setpriv), legit as uid %d: different uids" % os.getuid()
                if as_nobody else "same uid for both: the per-uid quota of 64 covers legit too")
    ok = held <= 64 and legit_ok if as_nobody else held <= 64
    return (f"{held} of 1100 h* jobs accepted, legit accepted: {legit_ok} ({uid_note})", ok,
            {"sender_stdout": p.stdout.strip(), "sender_stderr": p.stderr.strip()[-300:],
             "sender_rc": p.returncode, "h_jobs_accepted": held, "jobs_listed": len(jobs),
             "legit_accepted": legit_ok, "uids": uid_note})


def atk_tcp_idle(b):
    a = b.agent
    idle = []
    failed = 0
    for _ in range(64):
        try:
            idle.append(socket.create_connection(("127.0.0.1", a.tcp_port), timeout=2))
        except OSError:
            failed += 1
    time.sleep(6.0)  # past the listener's 5 s eviction age for idle reporters
    late_err = None
    try:
        s = socket.create_connection(("127.0.0.1", a.tcp_port), timeout=2)
        s.sendall(b'{"type":"start","job":"tcp-late"}\n')
    except OSError as e:
        late_err, s = str(e), None
    accepted = late_err is None and job_exists(a, "tcp-late")
    evicted = 0
    for c in idle:
        c.setblocking(False)
        try:
            if c.recv(1) == b"":
                evicted += 1
        except BlockingIOError:
            pass
        except OSError:
            evicted += 1
        c.close()
    if s:
        s.close()
    return (f"64 idle connections ({failed} failed to connect), 6 s later tcp-late accepted: "
            f"{accepted}; {evicted} idle connections closed by the agent", accepted,
            {"idle_opened": len(idle), "connect_failed": failed, "late_error": late_err,
             "tcp_late_accepted": accepted, "idle_closed_by_agent": evicted})


def atk_query_of_death(b):
    a = b.agent
    src = offset_addr(b.src, 1)  # a sender of its own: the cardinality attack used b.src's quota
    n_series = 20_000  # pushing is cheap (~2 s): the same in --quick
    per_batch = 1000
    now = int(time.time() * 1000)
    samples = encode_samples([(now - (199 - k) * 15000, float(k)) for k in range(200)])
    push_status = {}
    t_push = time.monotonic()
    for start in range(0, n_series, per_batch):
        body = fixed_series_body("m", range(start, start + per_batch), samples, 6)
        try:
            st = http_request(a.port, "POST", "/api/v1/write", body,
                              auth(a.token, {"Content-Encoding": "snappy",
                                             "Content-Type": "application/x-protobuf"}),
                              timeout=60, source=src)[0]
        except OSError as e:
            st = type(e).__name__
        push_status[str(st)] = push_status.get(str(st), 0) + 1
    push_s = time.monotonic() - t_push
    end = time.time()
    q = urllib.parse.urlencode({"query": "sum(rate(m[10y]))", "start": f"{end - 3600:.3f}",
                                "end": f"{end:.3f}", "step": "0.33"})
    path = "/api/v1/query_range?" + q
    client_timeout = b.scale(20.0, 8.0)
    t0 = time.monotonic()
    try:
        st, data, secs = http_request(a.port, "GET", path, timeout=client_timeout, source=src)
        qres = {"status": st, "seconds": round(secs, 2),
                "answer": data[:200].decode(errors="replace")}
    except (OSError, http.client.HTTPException) as e:
        qres = {"status": None, "seconds": round(time.monotonic() - t0, 2),
                "answer": f"client gave up: {type(e).__name__} {e}"}
    # CPU the agent keeps using once the client has left (a cancelled query should stop).
    after_s = b.scale(5.0, 3.0)
    c0 = proc_cpu_s(a.pid)
    time.sleep(after_s)
    cpu_after = proc_cpu_s(a.pid) - c0
    qres["cpu_after_client_left_s"] = round(cpu_after, 2)
    qres["cpu_after_window_s"] = after_s
    refused = {r: metric_value(a.port, "gpuwatch_queries_refused_total", f'reason="{r}"')
               for r in ("concurrency", "timeout", "cancelled", "limit")}
    # SIGTERM while a second such query is in flight.
    inflight = {}

    def second():
        try:
            st2, data2, s2 = http_request(a.port, "GET", path, timeout=60, source=src)
            inflight.update(status=st2, seconds=round(s2, 2),
                            answer=data2[:160].decode(errors="replace"))
        except (OSError, http.client.HTTPException) as e:
            inflight.update(status=None, answer=f"{type(e).__name__}: {e}")

    th = threading.Thread(target=second, daemon=True)
    th.start()
    time.sleep(1.0)
    query_running = th.is_alive()
    b.measure(settle=False)
    b.stop_probes()
    term = a.terminate(timeout=30)
    th.join(5)
    term["query_in_flight_at_sigterm"] = query_running
    term["second_query"] = inflight
    b.sigterm = term
    ok = (push_status == {"204": n_series // per_batch} and cpu_after < 0.5 * after_s
          and term.get("exit_s") is not None and term["exit_s"] < 10)
    return (f"push {n_series:,}x200 samples {push_status} in {push_s:.1f} s; query_range "
            f"{qres['status']} in {qres['seconds']} s; agent CPU {cpu_after:.2f} s in the "
            f"{after_s:.0f} s after; SIGTERM with a query in flight ({query_running}): exit in "
            f"{term.get('exit_s')} s, rc {term.get('rc')}", ok,
            {"series": n_series, "samples_per_series": 200, "push_statuses": push_status,
             "push_s": round(push_s, 2), "query": qres, "client_timeout_s": client_timeout,
             "queries_refused_total": refused, "sigterm": term})


# (name, attack, what is expected, most VmHWM growth expected in MiB or None). The memory
# bounds are this benchmark's: a refused request should cost about its route's buffer, and
# the snappy bomb no more than its 64 MiB inflate.
ATTACKS = [
    ("baseline", atk_baseline, "-", None),
    ("chunked_body", atk_chunked_body, "413 after ~1 MiB, connection closed", 32),
    ("big_content_length", atk_big_content_length, "413 at once", 32),
    ("json_bomb", atk_json_bomb, "4 x 413", 32),
    ("snappy_bomb", atk_snappy_bomb, "413, HWM Δ <= 96 MiB", 96),
    ("many_headers", atk_many_headers, "431 early, closed", 32),
    ("slowloris", atk_slowloris, "all closed by the 10 s head deadline", 32),
    ("cardinality", atk_cardinality, "204 until the series limits, then 400", None),
    ("silence_flood", atk_silence_flood, "401 each; 201 x 5 with the token", 32),
    ("event_flood", atk_event_flood, "413 for 15 MB, 204 for 500 KB, xid kept", None),
    ("job_slots", atk_job_slots, "<= 64 h* jobs; legit accepted (other uid)", 32),
    ("tcp_idle", atk_tcp_idle, "tcp-late accepted (idle evicted)", 32),
    ("query_of_death", atk_query_of_death, "bounded query, CPU stops, SIGTERM < 10 s", None),
]


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

def fmt_probe(p):
    if not p["probes"]:
        return "-"
    s = f"{p['worst_ms']:.0f}"
    if p["failed"]:
        s += f" / **{p['failed']} fail**"
    return s


def markdown(results, sigterm, meta):
    out = [f"Hostile-load benchmark: `{meta['binary']}`{' (--quick)' if meta['quick'] else ''}, "
           f"{meta['total_s']:.0f} s, {os.cpu_count()} CPUs. Probes: worst latency ms "
           f"(/ failed), every 250 ms, 2 s timeout.", "",
           "| attack | result | expected | ok | s | CPU s | RSS before → peak → after MiB "
           "| HWM Δ MiB | healthz | metrics | write | query | alive |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        okc = {True: "yes", False: "**NO**", None: "-"}[r["as_expected"]]
        mem = (f"{r.get('rss_before_mib', '?')} → {r.get('peak_rss_mib', '?')} → "
               f"{r.get('rss_after_mib', '?')}")
        pr = r["probes"]
        out.append(f"| {r['attack']} | {r['summary'].replace('|', '/')} | {r['expected']} | {okc} "
                   f"| {r['seconds']} | {r.get('cpu_s', '?')} | {mem} | {r.get('hwm_delta_mib', '?')} "
                   f"| {fmt_probe(pr['healthz'])} | {fmt_probe(pr['metrics'])} "
                   f"| {fmt_probe(pr['write'])} | {fmt_probe(pr['query'])} "
                   f"| {'yes' if r['alive_after'] else '**DIED**'} |")
    out.append("")
    if sigterm:
        out.append(f"SIGTERM (query of death in flight: {sigterm.get('query_in_flight_at_sigterm')}): "
                   f"exit in {sigterm.get('exit_s')} s, exit code {sigterm.get('rc')}"
                   f"{' — ' + sigterm['note'] if sigterm.get('note') else ''}.")
        out.append("")
    out.append("Refusals counted by the agent (gpuwatch_http_refused_total, change per attack):")
    out.append("")
    for r in results:
        if r.get("refused_delta"):
            out.append(f"- {r['attack']}: " + ", ".join(f"{k} {v}" for k, v in
                                                         sorted(r["refused_delta"].items())))
        fails = {k: v["fail_kinds"] for k, v in r["probes"].items() if v["failed"]}
        if fails:
            out.append(f"- {r['attack']}: failed probes {fails}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", help="the gpuwatch binary (build/release/gpuwatch)")
    ap.add_argument("--json", help="write the results here as JSON")
    ap.add_argument("--quick", action="store_true", help="smaller, shorter attacks (smoke test)")
    ap.add_argument("--attack-source", default="127.0.0.2",
                    help="loopback address the attacks come from (probes use 127.0.0.1)")
    ap.add_argument("--only", help="comma-separated attack names to run (baseline always runs)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    args.binary = os.path.abspath(args.binary)
    if not os.access(args.binary, os.X_OK):
        ap.error(f"{args.binary} is not executable")
    only = set(args.only.split(",")) if args.only else None
    b = Bench(args)
    t_start = time.monotonic()
    try:
        b.start_agent()
        for name, fn, expected, hwm_limit in ATTACKS:
            if only and name not in only and name != "baseline":
                continue
            b.run_attack(name, fn, expected, hwm_limit)
        if b.agent and b.agent.alive():  # query_of_death was skipped: stop it now
            b.stop_probes()
            b.sigterm = b.agent.terminate(timeout=30)
            b.sigterm["query_in_flight_at_sigterm"] = False
    finally:
        if b.agent and b.agent.alive():
            b.agent.proc.kill()
        if not args.keep:
            shutil.rmtree(b.tmp, ignore_errors=True)
        else:
            log(f"kept {b.tmp}")
    meta = {"binary": args.binary, "quick": args.quick, "total_s": time.monotonic() - t_start,
            "attack_source": args.attack_source, "agents_started": b.agents_started,
            "cpus": os.cpu_count(), "clk_tck": CLK_TCK, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    print(markdown(b.results, b.sigterm, meta))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "attacks": b.results, "sigterm": b.sigterm}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
