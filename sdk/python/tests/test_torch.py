"""gpuwatch.torch, where torch is installed (skipped otherwise): the DDP comm hook on a
one-process gloo group, and the CUDA step timer's bookkeeping with stand-in events."""

import os
import socket
import time
import unittest

import gpuwatch

from tests.support import CaptureSender

try:
    import torch
    import torch.distributed as dist
    import gpuwatch.torch as gwt
except ImportError:
    torch = None


def client():
    return gpuwatch.Client(job="t", environ={}, _sender=CaptureSender(), batch_max=1000, batch_ms=60000)


def steps(c):
    c.flush()
    return c._sender.messages("step")


class FakeEvent(object):
    """torch.cuda.Event's surface: record() stamps the CPU clock; done is set by the test."""

    all = []

    def __init__(self, enable_timing=False):
        self.t = None
        self.done = False
        FakeEvent.all.append(self)

    def record(self, stream=None):
        self.t = time.perf_counter()

    def query(self):
        return self.done

    def elapsed_time(self, end):
        assert self.done and end.done
        return (end.t - self.t) * 1000.0


@unittest.skipIf(torch is None, "torch is not installed")
class CudaStepTimerTest(unittest.TestCase):
    def setUp(self):
        self.real_event = torch.cuda.Event
        torch.cuda.Event = FakeEvent
        FakeEvent.all = []
        self.addCleanup(setattr, torch.cuda, "Event", self.real_event)

    def timer(self, c, **kw):
        t = gwt.CudaStepTimer(c, **kw)
        t._cuda = True  # as if a GPU were present
        return t

    def test_steps_reported_when_their_events_complete(self):
        c = client()
        timer = self.timer(c)
        with timer.step(samples=8):
            c.log(loss=1.0)
            time.sleep(0.01)
        self.assertEqual(steps(c), [])  # the GPU has not finished: nothing yet, nothing waited
        for ev in FakeEvent.all:
            ev.done = True
        with timer.step(samples=8):
            time.sleep(0.02)
        out = steps(c)
        self.assertEqual([s["step"] for s in out], [0])  # step 1's end event is not done
        self.assertGreaterEqual(out[0]["duration_s"], 0.01)
        self.assertEqual(out[0]["loss"], 1.0)
        for ev in FakeEvent.all:
            ev.done = True
        c.end(0)  # end() reports what completed
        out = steps(c)
        self.assertEqual([s["step"] for s in out], [0, 1])
        # From step 0's end to step 1's end: the 20 ms step.
        self.assertGreaterEqual(out[1]["duration_s"], 0.02)

    def test_too_far_behind_falls_back_to_cpu_time(self):
        c = client()
        timer = self.timer(c, max_pending=2)
        for _ in range(4):
            with timer.step():
                time.sleep(0.002)
        # At most 2 wait; older ones go with their CPU duration (the events never completed).
        self.assertEqual([s["step"] for s in steps(c)], [0, 1])
        c.end(0)
        self.assertEqual([s["step"] for s in steps(c)], [0, 1, 2, 3])

    def test_exception_in_step(self):
        c = client()
        timer = self.timer(c)
        with self.assertRaises(RuntimeError):
            with timer.step():
                raise RuntimeError("boom")
        c.end(0)
        self.assertEqual(steps(c), [])

    def test_measure_cuda_entries(self):
        a0, a1, b0, b1 = (FakeEvent() for _ in range(4))
        a0.t, b0.t, a1.t, b1.t = 0.0, 0.010, 0.012, 0.030  # bucket b ready at 10 ms
        for e in (a0, a1, b0, b1):
            e.done = True
        exposed, total = gwt._measure([[a0, a1, True], [b0, b1, True]])
        self.assertAlmostEqual(exposed, 0.020)  # from the last bucket's start to the last end
        self.assertAlmostEqual(total, 0.012 + 0.020)
        b1.done = False
        self.assertIsNone(gwt._measure([[a0, a1, True], [b0, b1, True]]))


@unittest.skipIf(torch is None, "torch is not installed")
class CommHookTest(unittest.TestCase):
    def test_ddp_allreduce_time_in_comm_s(self):
        if not dist.is_available() or not dist.is_gloo_available():
            self.skipTest("no gloo")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=0, world_size=1)
        self.addCleanup(dist.destroy_process_group)
        c = client()
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
        gwt.register_comm_hook(model, client=c)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            with gwt.cuda_step(samples=16, client=c):  # no CUDA here: a CPU-timed step
                loss = model(torch.randn(16, 64)).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
        out = steps(c)
        self.assertEqual([s["step"] for s in out], [0, 1, 2])
        for s in out:
            self.assertIn("comm_s", s)
            self.assertGreater(s["scalars"]["allreduce_s"], 0.0)
            self.assertLessEqual(s["comm_s"], s["duration_s"])
        self.assertEqual(c.errors, 0)


if __name__ == "__main__":
    unittest.main()
