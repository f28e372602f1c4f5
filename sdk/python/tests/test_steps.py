"""Step timing and its parts: phases inside and outside steps, track(), step_done()."""

import time
import unittest

import gpuwatch

from tests.support import CaptureSender


def client(**kw):
    kw.setdefault("job", "j")
    kw.setdefault("environ", {})
    return gpuwatch.Client(_sender=CaptureSender(), **kw)


def steps(c):
    c.flush()
    return c._sender.messages("step")


class SlowLoader(object):
    def __init__(self, n, wait_s):
        self.n = n
        self.wait_s = wait_s

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            time.sleep(self.wait_s)
            yield i


class TrackTest(unittest.TestCase):
    def test_data_wait_before_the_step_is_part_of_it(self):
        c = client()
        loader = c.track(SlowLoader(3, 0.02))
        self.assertEqual(len(loader), 3)
        self.assertEqual(loader.wait_s, 0.02)  # the loader's attributes pass through
        seen = []
        for item in loader:
            with c.step(samples=8):
                time.sleep(0.08)
            seen.append(item)
        self.assertEqual(seen, [0, 1, 2])
        out = steps(c)
        self.assertEqual(len(out), 3)
        for s in out:
            self.assertGreaterEqual(s["data_wait_s"], 0.02)
            self.assertLess(s["data_wait_s"], 0.08)  # the step's own time is not data wait
            # The step starts when its batch was asked for: duration covers the wait.
            self.assertGreaterEqual(s["duration_s"], s["data_wait_s"] + 0.08)
            self.assertLessEqual(s["data_wait_s"], s["duration_s"])

    def test_data_wait_inside_the_step(self):
        c = client()
        it = iter(c.track(SlowLoader(2, 0.01)))
        with c.step():
            next(it)
            next(it)
        s = steps(c)[0]
        self.assertGreaterEqual(s["data_wait_s"], 0.02)
        self.assertLessEqual(s["data_wait_s"], s["duration_s"])

    def test_loader_errors_pass_through(self):
        def bad():
            yield 1
            raise ValueError("corrupt shard")

        c = client()
        with self.assertRaises(ValueError):
            for _ in c.track(bad()):
                with c.step():
                    pass
        self.assertEqual(c.errors, 0)

    def test_plain_iterable(self):
        c = client()
        self.assertEqual(list(c.track([1, 2, 3])), [1, 2, 3])
        self.assertEqual(list(c.track(range(2))), [0, 1])


class PhaseTest(unittest.TestCase):
    def test_parts_inside_a_step(self):
        c = client()
        with c.step():
            with c.phase("data"):
                time.sleep(0.01)
            with c.phase("comm"):
                time.sleep(0.02)
            with c.phase("checkpoint"):
                time.sleep(0.005)
            with c.phase("eval"):
                time.sleep(0.005)
        s = steps(c)[0]
        self.assertGreaterEqual(s["data_wait_s"], 0.01)
        self.assertGreaterEqual(s["comm_s"], 0.02)
        self.assertGreaterEqual(s["checkpoint_s"], 0.005)
        self.assertGreaterEqual(s["duration_s"], 0.04)
        self.assertLess(s["data_wait_s"] + s["comm_s"] + s["checkpoint_s"], s["duration_s"])

    def test_parts_outside_go_to_the_next_step(self):
        c = client()
        with c.step():
            pass
        with c.phase("checkpoint"):  # a save between steps
            time.sleep(0.02)
        with c.phase("eval"):  # not a part: does not stretch the next step
            time.sleep(0.1)
        with c.step():
            pass
        with c.step():
            pass
        out = steps(c)
        self.assertNotIn("checkpoint_s", out[0])
        self.assertGreaterEqual(out[1]["checkpoint_s"], 0.02)
        self.assertGreaterEqual(out[1]["duration_s"], out[1]["checkpoint_s"])
        self.assertLess(out[1]["duration_s"], 0.1)  # the eval is not in it
        self.assertEqual(out[2]["checkpoint_s"], 0.0)

    def test_exception_in_phase_still_counts(self):
        c = client()
        with c.step():
            try:
                with c.phase("comm"):
                    time.sleep(0.005)
                    raise RuntimeError("NCCL timeout")
            except RuntimeError:
                pass
        self.assertGreaterEqual(steps(c)[0]["comm_s"], 0.005)


class StepDoneTest(unittest.TestCase):
    def test_explicit_and_gathered_parts(self):
        c = client()
        with c.phase("data"):
            time.sleep(0.005)
        c.log(loss=1.5)
        c.step_done(0.5, samples=32, comm_s=0.1, grad_norm=2.0, lr=0.01)
        s = steps(c)[0]
        self.assertEqual((s["duration_s"], s["samples"], s["comm_s"], s["loss"], s["grad_norm"]),
                         (0.5, 32, 0.1, 1.5, 2.0))
        self.assertGreaterEqual(s["data_wait_s"], 0.005)
        self.assertEqual(s["scalars"], {"lr": 0.01})

    def test_module_level_functions(self):
        # Before init() the module functions act on a disabled client: nothing happens.
        with gpuwatch.step(samples=1):
            gpuwatch.log(loss=1.0)
        with gpuwatch.phase("data"):
            pass
        for _ in gpuwatch.track([1]):
            pass
        gpuwatch.step_done(0.1)
        gpuwatch.annotate("x")
        gpuwatch.log_line("x")
        gpuwatch.flush()
        self.assertEqual(gpuwatch.sent, 0)
        self.assertEqual(gpuwatch.dropped, 0)
        self.assertFalse(gpuwatch.client()._sender)


class OverheadTest(unittest.TestCase):
    def test_step_is_cheap(self):
        # The budget is 20 us per step; measured ~3-8 us. A loose bound for loaded CI.
        c = client(batch_max=64)
        n = 20000
        t0 = time.thread_time()
        for _ in c.track(range(n)):
            with c.step(samples=32):
                c.log(loss=0.5)
        per_step = (time.thread_time() - t0) / n
        self.assertLess(per_step, 50e-6)


if __name__ == "__main__":
    unittest.main()
