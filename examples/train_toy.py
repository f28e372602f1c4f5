#!/usr/bin/env python3
"""A toy training loop (no torch) instrumented with the gpuwatch SDK, and a measure of what
the SDK costs per step.

    python3 examples/train_toy.py --steps 2000 --hz 1000 --compare
    python3 examples/train_toy.py --steps 100 --step-ms 50 --data-ms 5    # with an agent

A fake loader waits --data-ms per batch, each step "computes" for --step-ms with a comm phase
of --comm-frac of it, logs a loss, and every --ckpt-every steps a checkpoint phase runs.
Waits under 2 ms are busy-waits, so a 1 kHz loop keeps its rate; --compare busy-waits all.

--compare runs the same loop without and with the SDK (alternating, --reps times each) and
takes, for every step, the CPU time spent outside its waits (thread CPU time: time the
process is descheduled does not count). The SDK's cost per step is the median of those less
the bare loop's median; the mean is printed too (on a VM it also carries the rare step the
hypervisor stole time from). Prints one JSON line:
{"steps", "overhead_us_per_step", "overhead_mean_us_per_step", "dropped", "sent", ...}.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

try:
    import gpuwatch as gw
except ImportError:  # run from a checkout without `pip install ./sdk/python`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))
    import gpuwatch as gw

perf = time.perf_counter
cpu = time.thread_time


class Work(object):
    """Waits (busy or sleeping) and adds up the CPU time the waits took, so that what is
    left of an iteration's CPU time is the loop's own, and the SDK's."""

    def __init__(self, busy):
        self.busy = busy
        self.waited_cpu = 0.0

    def wait(self, seconds):
        if seconds <= 0:
            return
        c0 = cpu()
        if self.busy or seconds < 0.002:
            end = perf() + seconds
            while perf() < end:
                pass
        else:
            time.sleep(seconds)
        self.waited_cpu += cpu() - c0


def fake_loader(n, data_s, work):
    for i in range(n):
        work.wait(data_s)
        yield i


def times(args):
    step_s = args.step_ms / 1000.0
    if args.hz:
        step_s = max(0.0, 1.0 / args.hz - args.data_ms / 1000.0)
    comm_s = step_s * args.comm_frac
    return args.data_ms / 1000.0, step_s - comm_s, comm_s, args.ckpt_ms / 1000.0


def run(args, busy, sdk):
    """(wall seconds, [CPU seconds of each step outside its waits])."""
    data_s, compute_s, comm_s, ckpt_s = times(args)
    work, costs = Work(busy), []
    t0 = perf()
    c_prev, w_prev = cpu(), 0.0
    if sdk:
        for i in gw.track(fake_loader(args.steps, data_s, work)):
            with gw.step(samples=args.batch):
                work.wait(compute_s)
                with gw.phase("comm"):
                    work.wait(comm_s)
                gw.log(loss=2.0 * math.exp(-i / 500.0) + 0.1)
            if args.ckpt_every and (i + 1) % args.ckpt_every == 0:
                with gw.phase("checkpoint"):
                    work.wait(ckpt_s)
            c, w = cpu(), work.waited_cpu
            costs.append((c - c_prev) - (w - w_prev))
            c_prev, w_prev = c, w
    else:
        for i in fake_loader(args.steps, data_s, work):
            work.wait(compute_s)
            work.wait(comm_s)
            loss = 2.0 * math.exp(-i / 500.0) + 0.1
            if args.ckpt_every and (i + 1) % args.ckpt_every == 0:
                work.wait(ckpt_s)
            c, w = cpu(), work.waited_cpu
            costs.append((c - c_prev) - (w - w_prev))
            c_prev, w_prev = c, w
    return perf() - t0, costs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--step-ms", type=float, default=1.0, help="time inside a step (default 1)")
    p.add_argument("--hz", type=float, default=None,
                   help="steps per second instead of --step-ms (data wait included), e.g. 1000")
    p.add_argument("--data-ms", type=float, default=0.0, help="loader wait per batch")
    p.add_argument("--comm-frac", type=float, default=0.2, help="share of a step in the comm phase")
    p.add_argument("--ckpt-every", type=int, default=0, help="checkpoint phase every K steps")
    p.add_argument("--ckpt-ms", type=float, default=20.0)
    p.add_argument("--batch", type=int, default=32, help="samples per step")
    p.add_argument("--no-sdk", action="store_true", help="the loop without the SDK (baseline)")
    p.add_argument("--compare", action="store_true", help="run without and with the SDK")
    p.add_argument("--reps", type=int, default=3, help="runs of each with --compare")
    p.add_argument("--socket", default=None,
                   help="agent address (default $GPUWATCH_SOCKET, then the standard paths)")
    args = p.parse_args()

    out = {"steps": args.steps}
    if args.no_sdk:
        wall, _ = run(args, False, sdk=False)
        out.update(seconds=round(wall, 6), steps_per_s=round(args.steps / wall, 1))
        print(json.dumps(out))
        return

    c = gw.init(template="toy", project="examples", socket=args.socket)
    if args.compare:
        bare, sdk, walls = [], [], [[], []]
        run(args, True, sdk=False)  # warm-up
        for _ in range(max(1, args.reps)):
            wall, costs = run(args, True, sdk=False)
            walls[0].append(wall)
            bare += costs
            wall, costs = run(args, True, sdk=True)
            walls[1].append(wall)
            sdk += costs
        overhead_s = statistics.median(sdk) - statistics.median(bare)
        step_s = sum(times(args)[:3])
        out.update(seconds_baseline=round(statistics.median(walls[0]), 6),
                   seconds_sdk=round(statistics.median(walls[1]), 6),
                   step_ms=round(step_s * 1e3, 4),
                   overhead_us_per_step=round(overhead_s * 1e6, 2),
                   overhead_mean_us_per_step=round((statistics.mean(sdk) - statistics.mean(bare)) * 1e6, 2),
                   overhead_pct=round(100.0 * overhead_s / step_s, 3) if step_s > 0 else None)
    else:
        wall, _ = run(args, False, sdk=True)
        out.update(seconds=round(wall, 6), steps_per_s=round(args.steps / wall, 1))
    c.flush()
    out.update(sent=c.sent, dropped=c.dropped, rejected=c.rejected, address=c.address)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
