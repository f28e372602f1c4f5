#!/usr/bin/env python3
"""What the Python SDK costs a training loop per step, at 1 kHz and flat out.

    python3 bench/job_sdk/bench_python_sdk.py [--steps 2000] [--reps 5]

Each step of the instrumented loop is what a real one does: next() through gw.track(), a
gw.step(samples=...) block with a gw.phase("comm") inside and a gw.log(loss=...). Against:

- receiver: a Unix datagram socket bound in a temp dir (as the agent's), drained by another
  process that counts what it receives;
- no agent: the socket path does not exist (every flush fails with ENOENT: the drop path).

"1 kHz" runs the loop with a 1 ms busy-waited step, with and without the SDK, alternating,
--reps times each, and takes for every step the CPU time spent outside its waits (thread CPU
time, so time the process is descheduled does not count). The SDK's cost per step is the
median of those less the bare loop's median; the mean is shown too (on a VM it also carries
the rare step that the hypervisor stole time from). "flat out" runs steps with no work and
divides CPU time by steps. The percentages use the median. Prints a markdown table.
"""

import argparse
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "sdk", "python"))
import gpuwatch  # noqa: E402  (the checkout's SDK, not an installed one)

perf = time.perf_counter
cpu = time.thread_time

DRAIN = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind(sys.argv[1])
print("ready", flush=True)
lines = datagrams = 0
while True:
    data = s.recv(70000)
    if data == b"__stop__":
        break
    datagrams += 1
    lines += data.count(b"\n")
print(lines, datagrams, flush=True)
"""


class Work(object):
    def __init__(self):
        self.waited = 0.0
        self.waited_cpu = 0.0

    def wait(self, seconds):
        t0, c0 = perf(), cpu()
        end = t0 + seconds
        while perf() < end:
            pass
        self.waited += perf() - t0
        self.waited_cpu += cpu() - c0


def loader(n, work, data_s):
    for i in range(n):
        work.wait(data_s)
        yield i


def loop_bare(n, step_s):
    """CPU seconds of each iteration outside its waits: the loop's own cost."""
    work, out = Work(), []
    c_prev, w_prev = cpu(), 0.0
    for i in loader(n, work, step_s * 0.1):
        work.wait(step_s * 0.7)
        work.wait(step_s * 0.2)
        loss = 2.0 * math.exp(-i / 500.0)
        c, w = cpu(), work.waited_cpu
        out.append((c - c_prev) - (w - w_prev))
        c_prev, w_prev = c, w
    return out


def loop_sdk(gw, n, step_s):
    """The same with the SDK: its cost is the difference."""
    work, out = Work(), []
    c_prev, w_prev = cpu(), 0.0
    for i in gw.track(loader(n, work, step_s * 0.1)):
        with gw.step(samples=32):
            work.wait(step_s * 0.7)
            with gw.phase("comm"):
                work.wait(step_s * 0.2)
            gw.log(loss=2.0 * math.exp(-i / 500.0))
        c, w = cpu(), work.waited_cpu
        out.append((c - c_prev) - (w - w_prev))
        c_prev, w_prev = c, w
    return out


def flat_out(gw, n):
    def items(n):
        for i in range(n):
            yield i
    c0 = cpu()
    for i in gw.track(items(n)):
        with gw.step(samples=32):
            with gw.phase("comm"):
                pass
            gw.log(loss=2.0 * math.exp(-i / 500.0))
    used = cpu() - c0
    c0 = cpu()
    for i in items(n):
        loss = 2.0 * math.exp(-i / 500.0)
    return (used - (cpu() - c0)) / n


def measure(scenarios, args):
    """scenarios: [(name, address)]. The runs are interleaved (bare, then the SDK for each
    scenario, rep after rep) so that a change of load on the machine hits all alike."""
    step_s = 1.0 / args.hz
    rows = []
    for name, address in scenarios:
        gw = gpuwatch.Client(job="bench", template="bench", socket=address)
        loop_sdk(gw, 200, step_s)  # warm-up
        rows.append({"name": name, "gw": gw, "bare": [], "sdk": [], "flat": []})
    loop_bare(200, step_s)
    for _ in range(args.reps):
        for r in rows:
            r["bare"] += loop_bare(args.steps, step_s)
            r["sdk"] += loop_sdk(r["gw"], args.steps, step_s)
    for _ in range(args.reps):
        for r in rows:
            r["flat"].append(flat_out(r["gw"], args.flat_steps))
    for r in rows:
        gw = r.pop("gw")
        gw.end(0)
        r.update(median_us=(statistics.median(r["sdk"]) - statistics.median(r["bare"])) * 1e6,
                 mean_us=(statistics.mean(r["sdk"]) - statistics.mean(r["bare"])) * 1e6,
                 flat_us=statistics.median(r["flat"]) * 1e6,
                 sent=gw.sent, dropped=gw.dropped, errors=gw.errors)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000, help="steps per 1 kHz run (default 2000)")
    p.add_argument("--reps", type=int, default=5, help="runs of each loop (default 5)")
    p.add_argument("--hz", type=float, default=1000.0, help="step rate of the paced loop")
    p.add_argument("--flat-steps", type=int, default=50000, help="steps per flat-out run")
    args = p.parse_args()

    tmp = tempfile.mkdtemp(prefix="gpuwatch-bench-")
    path = os.path.join(tmp, "job.sock")
    missing = os.path.join(tmp, "missing", "job.sock")
    drain = subprocess.Popen([sys.executable, "-c", DRAIN, path], stdout=subprocess.PIPE, text=True)
    try:
        if drain.stdout.readline().strip() != "ready":
            raise SystemExit("the drain process did not start")
        rows = measure([("receiver (Unix socket, drained by another process)", path),
                        ("no agent (socket path missing)", missing)], args)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendto(b"__stop__", path)
        s.close()
        received = drain.stdout.readline().split()
        rows[0]["received"] = int(received[0]) if received else None
        rows[1]["received"] = 0
    finally:
        drain.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print("Python %s, %d CPUs, load average %.2f; %d steps at %g Hz x %d runs, flat out %d steps.\n" % (
        sys.version.split()[0], os.cpu_count() or 0, load, args.steps, args.hz, args.reps, args.flat_steps))
    print("| agent | per step at %g Hz, median | mean | flat out | %% of a %g ms step | %% of a 100 ms step "
          "| sent | dropped | received |" % (args.hz, 1000.0 / args.hz))
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %.2f µs | %.2f µs | %.2f µs | %.2f %% | %.4f %% | %d | %d | %s |" % (
            r["name"], r["median_us"], r["mean_us"], r["flat_us"], r["median_us"] / (1e6 / args.hz) * 100.0,
            r["median_us"] / 1e5 * 100.0, r["sent"], r["dropped"], r["received"]))
        if r["errors"]:
            print("internal SDK errors: %d" % r["errors"])


if __name__ == "__main__":
    main()
