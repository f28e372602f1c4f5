"""When datagrams go out, how big they are, and the start refresh."""

import time
import unittest

import gpuwatch

from tests.support import CaptureSender, parse_datagram


def client(sender=None, **kw):
    kw.setdefault("job", "j")
    kw.setdefault("environ", {})
    return gpuwatch.Client(_sender=sender or CaptureSender(), **kw)


def types(datagram):
    return [m["type"] for m in parse_datagram(datagram)]


class BatchingTest(unittest.TestCase):
    def test_batch_max(self):
        c = client(batch_max=4, batch_ms=60000)
        s = c._sender
        self.assertEqual(len(s.datagrams), 1)  # the start, at once
        for _ in range(3):
            with c.step():
                pass
        self.assertEqual(len(s.datagrams), 1)
        with c.step():
            pass
        self.assertEqual(len(s.datagrams), 2)
        self.assertEqual(types(s.datagrams[1]), ["step"] * 4)
        self.assertEqual(c.sent, 5)

    def test_quiet_then_immediate_dense_then_batched(self):
        c = client(batch_max=1000, batch_ms=300)
        s = c._sender
        time.sleep(0.31)
        with c.step():  # nothing went out for batch_ms: goes at once
            pass
        self.assertEqual(len(s.datagrams), 2)
        for _ in range(10):  # within batch_ms of that: held
            with c.step():
                pass
        self.assertEqual(len(s.datagrams), 2)
        time.sleep(0.31)
        with c.step():  # batch_ms since the last datagram: all 11 go
            pass
        self.assertEqual(len(s.datagrams), 3)
        self.assertEqual(types(s.datagrams[2]), ["step"] * 11)

    def test_flush_and_end_send_everything(self):
        c = client(batch_max=1000, batch_ms=60000)
        s = c._sender
        with c.step():
            pass
        c.flush()
        self.assertEqual(types(s.datagrams[-1]), ["step"])
        c.flush()  # nothing buffered: nothing sent
        self.assertEqual(len(s.datagrams), 2)
        c.annotate("x")
        c.end(0)
        self.assertEqual(types(s.datagrams[-1]), ["annotation", "end"])

    def test_datagrams_stay_under_65000_bytes(self):
        c = client(batch_max=10000, batch_ms=60000)
        s = c._sender
        n = 50
        for i in range(n):
            c.log_line("%04d " % i + "x" * 16000)
        for _ in range(500):
            with c.step():
                c.log(**{"s%02d" % k: k * 1.5 for k in range(32)})
        c.flush()
        total = 0
        for d in s.datagrams:
            self.assertLessEqual(len(d), 65000)
            total += len(parse_datagram(d))
        self.assertEqual(total, 1 + n + 500)
        self.assertEqual(c.sent, total)
        logs = [m["line"][:4] for d in s.datagrams for m in parse_datagram(d) if m["type"] == "log"]
        self.assertEqual(logs, ["%04d" % i for i in range(n)])  # order kept

    def test_start_with_long_log_files_is_split_from_the_batch(self):
        files = ["/" + ("d%02d" % i) * 1300 for i in range(16)]  # ~62 KB start
        c = client(log_files=files, batch_max=10000, batch_ms=60000, start_every_s=0.0)
        s = c._sender
        for i in range(40):
            c.log_line("y" * 1000)
        c.flush()
        for d in s.datagrams:
            self.assertLessEqual(len(d), 65000)
        self.assertEqual(sum(len(parse_datagram(d)) for d in s.datagrams), c.sent)

    def test_start_resent_every_period(self):
        c = client(batch_max=1, start_every_s=0.3)
        s = c._sender
        with c.step():
            pass
        self.assertEqual(types(s.datagrams[-1]), ["step"])
        time.sleep(0.31)
        with c.step():
            pass
        self.assertEqual(types(s.datagrams[-1]), ["start", "step"])
        with c.step():
            pass
        self.assertEqual(types(s.datagrams[-1]), ["step"])

    def test_default_period_is_30_s(self):
        c = client(batch_max=1)
        self.assertEqual(c._start_every, 30.0)

    def test_failed_send_drops_counts_and_resends_start_first(self):
        s = CaptureSender(ok=False)
        c = client(s, batch_max=2)
        for _ in range(4):
            with c.step():
                pass
        self.assertEqual(c.sent, 0)
        self.assertEqual(c.dropped, 1 + 3 + 3)  # start; start+2 steps; start+2 steps
        s.ok = True
        for _ in range(2):
            with c.step():
                pass
        self.assertEqual(types(s.datagrams[-1]), ["start", "step", "step"])
        with c.step():
            pass
        with c.step():
            pass
        self.assertEqual(types(s.datagrams[-1]), ["step", "step"])

    def test_closed_client_sends_nothing(self):
        c = client()
        c.close()
        with c.step():
            pass
        c.annotate("x")
        c.flush()
        c.end(1)
        self.assertEqual(len(c._sender.datagrams), 1)

    def test_disabled_client(self):
        c = gpuwatch.Client(job="j", enabled=False, environ={})
        with c.step():
            c.log(loss=1)
        c.end()
        self.assertEqual((c.sent, c.dropped), (0, 0))
        self.assertEqual(c.address, "none (disabled)")


if __name__ == "__main__":
    unittest.main()
