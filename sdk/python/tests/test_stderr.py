"""The stderr tee: the real stream is unchanged, complete lines are forwarded."""

import io
import threading
import unittest

import gpuwatch
from gpuwatch._stderr import StderrTee

from tests.support import CaptureSender


def tee():
    c = gpuwatch.Client(job="j", environ={}, _sender=CaptureSender())
    real = io.StringIO()
    t = StderrTee(real, c)
    c._stderr_tee = t
    return c, real, t


def lines(c):
    c.flush()
    return [(m["stream"], m["line"]) for m in c._sender.messages("log")]


class TeeTest(unittest.TestCase):
    def test_writes_pass_through_and_lines_are_forwarded(self):
        c, real, t = tee()
        self.assertEqual(t.write("first line\nsecond "), len("first line\nsecond "))
        t.write("part\n")
        t.writelines(["a\n", "b\n"])
        t.write("no newline yet")
        self.assertEqual(real.getvalue(), "first line\nsecond part\na\nb\nno newline yet")
        self.assertEqual(lines(c), [("stderr", "first line"), ("stderr", "second part"),
                                    ("stderr", "a"), ("stderr", "b")])
        t.flush_partial()
        self.assertEqual(lines(c)[-1], ("stderr", "no newline yet"))

    def test_progress_bars_and_blank_lines(self):
        c, real, t = tee()
        for pct in range(0, 101, 10):
            t.write("\r%3d%%|####" % pct)
        t.write("\n\n   \nwindows\r\n")
        self.assertEqual(lines(c), [("stderr", "100%|####"), ("stderr", "windows")])

    def test_endless_line_is_cut(self):
        c, real, t = tee()
        for _ in range(20):
            t.write("x" * 1000)
        out = lines(c)
        self.assertEqual(len(out), 1)
        self.assertEqual(len(out[0][1]), 16384)
        self.assertEqual(len(real.getvalue()), 20000)

    def test_attributes_delegate(self):
        c, real, t = tee()
        self.assertIs(t.real, real)
        self.assertFalse(t.isatty())
        self.assertEqual(t.getvalue(), "")  # StringIO's own method

    def test_real_stream_errors_are_the_real_streams(self):
        c, real, t = tee()
        with self.assertRaises(TypeError):
            t.write(b"bytes")  # StringIO refuses bytes; so does the tee
        real.close()
        with self.assertRaises(ValueError):
            t.write("closed\n")

    def test_after_end_nothing_is_forwarded(self):
        c, real, t = tee()
        c.end(0)
        t.write("late\n")
        self.assertEqual(real.getvalue(), "late\n")
        self.assertEqual(lines(c), [])

    def test_threads(self):
        c, real, t = tee()

        def writer(k):
            for i in range(200):
                t.write("thread %d line %d\n" % (k, i))

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        out = lines(c)
        self.assertEqual(len(out), 800)
        self.assertEqual(sorted(l for _, l in out), sorted("thread %d line %d" % (k, i) for k in range(4) for i in range(200)))


if __name__ == "__main__":
    unittest.main()
