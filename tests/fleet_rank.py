#!/usr/bin/env python3
"""One rank of a scripted multi-node training job, reporting through the Python SDK (issue 19).

The fleet test starts several of these, a few per node, each talking to its node's agent over
that agent's job socket. The ranks of a synchronous job leave each collective together, so every
rank ends step N at the same instant: here, at the wall-clock instant
`T0 + (N + 1) * PERIOD`, with T0 the same for all ranks. A rank that starts late joins at the next
step of that grid, so the ranks of every node stay aligned step for step.

--comm-s is the exposed communication time each step reports: the ranks that wait for a slow GPU
report much, the slow GPU's own rank little (docs/runbook.md, straggler_gpu).

--clock-offset-s makes the node's wall clock, as the SDK reads it, run that far ahead: a node
whose clock is off stamps its steps off by as much (docs/job-protocol.md, "Clocks"), which is
what the hub's clock_skew rule sees across nodes.

Runs until killed. Standard library and the SDK only.

usage: fleet_rank.py SOCKET JOB RANK WORLD_SIZE T0 PERIOD_S COMM_S [--clock-offset-s S]
"""
import argparse
import os
import random
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("job")
    ap.add_argument("rank", type=int)
    ap.add_argument("world_size", type=int)
    ap.add_argument("t0", type=float)
    ap.add_argument("period_s", type=float)
    ap.add_argument("comm_s", type=float)
    ap.add_argument("--clock-offset-s", type=float, default=0.0)
    a = ap.parse_args()

    # The agent may not be up yet: its socket appears when it is.
    deadline = time.time() + 120
    while not os.path.exists(a.socket):
        if time.time() > deadline:
            sys.exit(f"rank {a.rank}: no agent socket at {a.socket}")
        time.sleep(0.1)

    import gpuwatch as gw
    import gpuwatch._client as client
    if a.clock_offset_s:
        offset = a.clock_offset_s
        client._wall = lambda: time.time() + offset

    gw.init(job=a.job, template="fleet-test", rank=a.rank, world_size=a.world_size,
            local_rank=a.rank % 2, socket=a.socket, batch_ms=100)
    rng = random.Random(a.rank)
    step = max(0, int((time.time() - a.t0) / a.period_s))
    while True:
        end = a.t0 + (step + 1) * a.period_s
        time.sleep(max(0.0, end - time.time()))
        # A few ms of noise, as real timers have.
        comm = max(0.001, a.comm_s + rng.uniform(-0.005, 0.005))
        gw.step_done(a.period_s, step=step, samples=32, data_wait_s=0.01, comm_s=comm)
        gw.flush()
        step += 1


if __name__ == "__main__":
    main()
