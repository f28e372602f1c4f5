"""Every line the client writes is one valid JSON object with the fields of docs/job-protocol.md."""

import fractions
import json
import time
import unittest

import gpuwatch
from gpuwatch._client import num

from tests.support import CaptureSender, parse_datagram


def client(**kw):
    kw.setdefault("job", "job-1")
    kw.setdefault("rank", 3)
    kw.setdefault("environ", {})
    return gpuwatch.Client(_sender=CaptureSender(), **kw)


def sent(c):
    c.flush()
    return [m for d in c._sender.datagrams for m in parse_datagram(d)]


class FakeScalar(object):  # numpy/torch scalars are not float subclasses; float() works
    def __init__(self, v):
        self.v = v

    def __float__(self):
        return self.v


class NumberTest(unittest.TestCase):
    def test_num(self):
        self.assertEqual(num(1.5), "1.5")
        self.assertEqual(num(3), "3")
        self.assertEqual(num(True), "1")
        self.assertEqual(num(1e-7), "1e-07")
        self.assertEqual(num(2 ** 60), repr(float(2 ** 60)))
        self.assertEqual(num(FakeScalar(0.25)), "0.25")
        self.assertEqual(num(fractions.Fraction(1, 4)), "0.25")
        for bad in (float("nan"), float("inf"), -float("inf"), FakeScalar(float("nan")), "1.0",
                    None, object(), 10 ** 400, [1]):
            self.assertIsNone(num(bad), bad)
        for text in ("1e-07", "1e+16", "-0.0", "123456789.125"):
            json.loads(text)


class StepEncodingTest(unittest.TestCase):
    def test_step_fields(self):
        c = client()
        t0 = time.time()
        with c.step(samples=256):
            with c.phase("comm"):
                time.sleep(0.002)
            c.log(loss=2.5, grad_norm=1.25, lr=3e-4, tokens=524288)
        step = [m for m in sent(c) if m["type"] == "step"][0]
        self.assertEqual(set(step), {"type", "job", "rank", "step", "t", "duration_s", "samples",
                                     "comm_s", "loss", "grad_norm", "scalars"})
        self.assertEqual((step["job"], step["rank"], step["step"], step["samples"]), ("job-1", 3, 0, 256))
        self.assertGreaterEqual(step["comm_s"], 0.002)
        self.assertLessEqual(step["comm_s"], step["duration_s"])
        self.assertTrue(t0 <= step["t"] <= time.time() + 1)
        self.assertEqual((step["loss"], step["grad_norm"]), (2.5, 1.25))
        self.assertEqual(step["scalars"], {"lr": 3e-4, "tokens": 524288})

    def test_unmeasured_parts_are_left_out_measured_zero_is_sent(self):
        c = client()
        with c.step():
            pass
        with c.phase("data"):
            pass
        with c.step():
            pass
        with c.step():
            pass
        steps = [m for m in sent(c) if m["type"] == "step"]
        self.assertNotIn("data_wait_s", steps[0])
        self.assertIn("data_wait_s", steps[1])
        self.assertEqual(steps[2]["data_wait_s"], 0.0)  # measured from then on
        self.assertNotIn("comm_s", steps[2])
        self.assertNotIn("checkpoint_s", steps[2])

    def test_non_finite_values_are_never_written(self):
        c = client()
        nan, inf = float("nan"), float("inf")
        with c.step(samples=nan):
            c.log(loss=nan, grad_norm=inf, a=nan, b=-inf, c=FakeScalar(nan), d=1.0)
        c.step_done(nan)
        c.step_done(inf)
        c.step_done(-1.0)
        c.step_done(0.0)
        c.step_done(86400.0)
        c.step_done(0.5, samples=-3)
        lines = c._sender.raw_lines() if c.flush() is None else None
        for line in lines:
            self.assertNotIn("NaN", line)
            self.assertNotIn("Infinity", line)
        steps = [json.loads(l) for l in lines if '"type":"step"' in l]
        self.assertEqual(len(steps), 2)
        self.assertNotIn("samples", steps[0])
        self.assertNotIn("loss", steps[0])
        self.assertNotIn("grad_norm", steps[0])
        self.assertEqual(steps[0]["scalars"], {"d": 1.0})
        self.assertNotIn("samples", steps[1])
        # nan samples, loss, grad_norm, a, b, c; 5 bad durations; negative samples
        self.assertEqual(c.rejected, 12)
        self.assertEqual(c.errors, 0)

    def test_scalar_names_and_limit(self):
        c = client()
        with c.step():
            c.log(**{"ok_1": 1, "_x": 2, "1bad": 3, "bad-name": 4, "é": 5, "a" * 65: 6, "b" * 64: 7})
        with c.step():
            c.log(**{"s%d" % i: i for i in range(40)})
            c.log(s0=100)  # a name already there may still change
        steps = [m for m in sent(c) if m["type"] == "step"]
        self.assertEqual(steps[0]["scalars"], {"ok_1": 1, "_x": 2, "b" * 64: 7})
        self.assertEqual(len(steps[1]["scalars"]), 32)
        self.assertEqual(steps[1]["scalars"]["s0"], 100)
        self.assertEqual(c.rejected, 4 + 8)

    def test_parts_never_exceed_duration(self):
        c = client()
        c.step_done(0.1, data_wait_s=0.5, comm_s=0.05, checkpoint_s=7)
        step = [m for m in sent(c) if m["type"] == "step"][0]
        self.assertEqual((step["data_wait_s"], step["comm_s"], step["checkpoint_s"]), (0.1, 0.05, 0.1))

    def test_step_numbers(self):
        c = client()
        with c.step():
            pass
        with c.step(step=10):
            pass
        with c.step():
            pass
        c.step_done(0.01)
        c.step_done(0.01, step=20)
        with c.step(step=-5):  # rejected, numbering goes on
            pass
        with c.step(step="x"):
            pass
        with c.step():
            pass
        self.assertEqual([m["step"] for m in sent(c) if m["type"] == "step"], [0, 10, 11, 12, 20, 21])
        self.assertEqual(c.rejected, 2)

    def test_exception_in_step_sends_nothing_and_keeps_the_number(self):
        c = client()
        with self.assertRaises(ZeroDivisionError):
            with c.step():
                c.log(loss=1.0)
                1 / 0
        with c.step():
            pass
        steps = [m for m in sent(c) if m["type"] == "step"]
        self.assertEqual([s["step"] for s in steps], [0])
        self.assertNotIn("loss", steps[0])

    def test_values_logged_outside_a_step_go_to_the_next(self):
        c = client()
        c.log(loss=4.0)
        with c.step():
            pass
        with c.step():
            pass
        steps = [m for m in sent(c) if m["type"] == "step"]
        self.assertEqual(steps[0]["loss"], 4.0)
        self.assertNotIn("loss", steps[1])

    def test_last_step(self):
        c = client()
        self.assertIsNone(c.last_step)
        c.step_done(0.5, comm_s=0.25)
        self.assertEqual(c.last_step, (0, 0.5, None, 0.25, None))


class OtherMessagesTest(unittest.TestCase):
    ODD = 'quote " backslash \\ nl \n tab \t nul \x00 bell \x07 del \x7f é 漢字 🚀 \u2028 end'

    def test_odd_strings_round_trip(self):
        c = client(job='j"\\é', template=self.ODD, user="u\x01", project="p\n")
        c.annotate(self.ODD)
        c.log_line(self.ODD, "stderr")
        msgs = sent(c)
        start, ann, log = msgs[0], msgs[1], msgs[2]
        self.assertEqual(start["job"], 'j"\\é')
        self.assertEqual(start["template"], self.ODD)
        self.assertEqual(start["user"], "u\x01")
        self.assertEqual(ann, {"type": "annotation", "job": 'j"\\é', "rank": 3, "t": ann["t"], "text": self.ODD})
        self.assertEqual(log["line"], self.ODD)
        self.assertEqual(log["stream"], "stderr")
        for line in c._sender.raw_lines():
            self.assertFalse(any(ch < " " for ch in line), line)  # control characters escaped

    def test_job_control_characters_removed(self):
        c = client(job="a\nb\tc")
        self.assertEqual(sent(c)[0]["job"], "abc")

    def test_lone_surrogates_become_valid_utf8(self):
        c = client()
        c.annotate("bad \udcff surrogate")
        c.log_line("also \ud800")
        msgs = sent(c)  # parse_datagram decodes strictly
        self.assertEqual(msgs[1]["text"], "bad ? surrogate")
        self.assertEqual(msgs[2]["line"], "also ?")

    def test_annotation_limits(self):
        c = client()
        c.annotate("")
        c.annotate("é" * 3000)  # 6000 bytes
        msgs = sent(c)
        self.assertEqual(len(msgs), 2)
        self.assertEqual(len(msgs[1]["text"].encode("utf-8")), 4096)
        self.assertEqual(c.rejected, 1)

    def test_log_line_cut_on_a_character_boundary(self):
        c = client()
        c.log_line("x" + "€" * 6000)  # 18001 bytes
        c.log_line("plain")
        msgs = sent(c)
        line = msgs[1]["line"]
        self.assertLessEqual(len(line.encode("utf-8")), 16384)
        self.assertGreater(len(line.encode("utf-8")), 16384 - 3)
        self.assertNotIn("stream", msgs[2])

    def test_phase_and_checkpoint_marks(self):
        c = client()
        with c.phase("eval"):
            pass
        with c.phase("checkpoint"):
            pass
        with c.phase("data"):
            pass
        with c.phase("comm"):
            pass
        with c.phase("bad name!"):
            pass
        with c.phase("x" * 65):
            pass
        with c.phase(["unhashable"]):
            pass
        marks = [(m["type"], m.get("name"), m["state"]) for m in sent(c)[1:]]
        self.assertEqual(marks, [("phase", "eval", "begin"), ("phase", "eval", "end"),
                                 ("checkpoint", None, "begin"), ("checkpoint", None, "end")])
        self.assertEqual(c.rejected, 3)

    def test_end(self):
        c = client()
        c.end(3)
        c.end(0)  # once only
        with c.step():
            pass
        msgs = c._sender.messages()
        self.assertEqual(msgs[-1], {"type": "end", "job": "job-1", "rank": 3, "t": msgs[-1]["t"], "exit_code": 3})
        self.assertEqual(len(msgs), 2)
        self.assertTrue(c.closed)


if __name__ == "__main__":
    unittest.main()
