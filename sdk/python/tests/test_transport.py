"""Real sockets: round trips, an absent, late, stuck or restarted agent, UDP and TCP."""

import os
import shutil
import socket
import tempfile
import time
import unittest

import gpuwatch

from tests.support import Receiver, parse_datagram


def client(address, **kw):
    kw.setdefault("job", "rt")
    kw.setdefault("environ", {})
    return gpuwatch.Client(socket=address, **kw)


class UnixRoundTripTest(unittest.TestCase):
    def setUp(self):
        self.rx = Receiver()
        self.addCleanup(shutil.rmtree, self.rx.dir, True)
        self.addCleanup(self.rx.close)

    def test_round_trip(self):
        c = client(self.rx.path, rank=1, world_size=2, batch_max=8)
        for i in range(20):
            with c.step(samples=4):
                c.log(loss=1.0 / (i + 1))
        c.annotate("hello")
        c.end(0)
        msgs = self.rx.messages()
        self.assertEqual(msgs[0]["type"], "start")
        self.assertEqual((msgs[0]["world_size"], msgs[0]["pid"]), (2, os.getpid()))
        steps = [m for m in msgs if m["type"] == "step"]
        self.assertEqual([m["step"] for m in steps], list(range(20)))
        self.assertTrue(all(m["rank"] == 1 and m["job"] == "rt" and m["samples"] == 4 for m in steps))
        self.assertEqual([m["type"] for m in msgs[-2:]], ["annotation", "end"])
        self.assertEqual((c.sent, c.dropped), (len(msgs), 0))
        self.assertEqual(c.address, "unix:" + self.rx.path)

    def test_receiver_buffer_full_never_blocks(self):
        # Nobody reads: the socket queue fills (net.unix.max_dgram_qlen datagrams, or the
        # buffers), then every send fails with EAGAIN and is counted.
        c = client(self.rx.path, batch_max=1)
        n = 3000
        t0 = time.perf_counter()
        for i in range(n):
            with c.step():
                c.log_line("z" * 2000)
        elapsed = time.perf_counter() - t0
        self.assertLess(elapsed, 5.0)
        self.assertGreater(c.dropped, 0)
        received = sum(len(parse_datagram(d)) for d in self.rx.datagrams())
        self.assertEqual(received, c.sent)
        # Every attempt is sent or dropped; a failed datagram re-sends the start first, so
        # attempts are the 2n messages, the first start, and one start per resend.
        self.assertGreaterEqual(c.sent + c.dropped, 2 * n + 1)
        self.assertEqual(c.errors, 0)

    def test_agent_restarted_at_the_same_path(self):
        c = client(self.rx.path, batch_max=1)
        with c.step():
            pass
        self.assertEqual([m["type"] for m in self.rx.messages()], ["start", "step"])
        self.rx.close()  # the agent stops: its socket file goes away
        with c.step():
            pass
        self.assertEqual(c.dropped, 1)
        self.rx.bind()  # and comes back
        with c.step():
            pass
        msgs = self.rx.messages()
        self.assertEqual([m["type"] for m in msgs], ["start", "step"])  # learns the job again first
        self.assertEqual(msgs[1]["step"], 2)

    def test_stale_socket_file(self):
        c = client(self.rx.path, batch_max=1)
        self.rx.close(unlink=False)  # the agent died: the file stays, nobody is bound
        with c.step():
            pass
        self.assertEqual(c.dropped, 1)


class AbsentAgentTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gw-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "job.sock")

    def test_absent_agent_nothing_raised_all_counted(self):
        c = client(self.path, batch_max=4)
        for _ in range(10):
            with c.step():
                with c.phase("data"):
                    pass
        c.annotate("a")
        c.end(0)
        self.assertEqual(c.sent, 0)
        self.assertGreaterEqual(c.dropped, 12)
        self.assertEqual(c.errors, 0)

    def test_agent_appears_later_explicit_path(self):
        c = client(self.path, batch_max=1)
        with c.step():
            pass
        self.assertEqual(c.sent, 0)
        rx = Receiver(self.path)
        self.addCleanup(rx.close)
        with c.step():
            pass
        msgs = rx.messages()
        self.assertEqual([(m["type"], m.get("step")) for m in msgs], [("start", None), ("step", 1)])

    def test_agent_appears_later_at_a_standard_path(self):
        # No $GPUWATCH_SOCKET: the client looks for the standard paths, again every retry_s.
        paths = [os.path.join(self.dir, "a", "job.sock"), os.path.join(self.dir, "b", "job.sock")]
        c = gpuwatch.Client(job="late", environ={}, batch_max=1, retry_s=0.3, _paths=paths)
        self.assertTrue(c.address.startswith("none"))
        with c.step():
            pass
        os.mkdir(os.path.dirname(paths[1]))
        rx = Receiver(paths[1])
        self.addCleanup(rx.close)
        with c.step():  # within retry_s: not looked for yet
            pass
        self.assertEqual(c.sent, 0)
        time.sleep(0.31)
        with c.step():
            pass
        self.assertEqual(c.address, "unix:" + paths[1])
        self.assertEqual([(m["type"], m.get("step")) for m in rx.messages()], [("start", None), ("step", 2)])
        # The agent moves to the first path: once the old one is gone the client finds it.
        rx.close()
        os.mkdir(os.path.dirname(paths[0]))
        rx0 = Receiver(paths[0])
        self.addCleanup(rx0.close)
        time.sleep(0.31)
        with c.step():  # fails (ENOENT) and looks again
            pass
        with c.step():
            pass
        self.assertEqual(c.address, "unix:" + paths[0])
        self.assertEqual([(m["type"], m.get("step")) for m in rx0.messages()], [("start", None), ("step", 4)])

    def test_environment_variable(self):
        rx = Receiver(self.path)
        self.addCleanup(rx.close)
        c = gpuwatch.Client(job="env", environ={"GPUWATCH_SOCKET": self.path})
        c.end(0)
        self.assertEqual([m["type"] for m in rx.messages()], ["start", "end"])


class UdpTest(unittest.TestCase):
    def test_round_trip(self):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(rx.close)
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(1.0)
        c = client("udp://127.0.0.1:%d" % rx.getsockname()[1], batch_max=3)
        for _ in range(3):
            with c.step():
                pass
        msgs = parse_datagram(rx.recv(70000)) + parse_datagram(rx.recv(70000))
        self.assertEqual([m["type"] for m in msgs], ["start", "step", "step", "step"])

    def test_nobody_listening(self):
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        c = client("udp://127.0.0.1:%d" % port, batch_max=1)
        for _ in range(5):
            with c.step():
                pass
        self.assertEqual(c.errors, 0)  # ICMP refusals may or may not count as drops


class TcpTest(unittest.TestCase):
    def test_round_trip_and_reconnect(self):
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.addCleanup(srv.close)
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        srv.settimeout(2.0)
        c = client("tcp://127.0.0.1:%d" % srv.getsockname()[1], batch_max=1, retry_s=0.05)
        # The connect starts at init; over loopback it may complete at once (the start goes
        # out) or not (the start is dropped, and goes first in the next batch).
        self.assertIn(c.dropped, (0, 1))
        conn, _ = srv.accept()
        time.sleep(0.01)
        with c.step():
            pass
        conn.settimeout(2.0)
        data = b""
        while data.count(b"\n") < 2:
            data += conn.recv(70000)
        msgs = parse_datagram(data)
        self.assertEqual([m["type"] for m in msgs], ["start", "step"])
        conn.close()  # the agent drops the connection
        t0 = time.perf_counter()
        for _ in range(50):  # the peer's reset surfaces on a later send: never blocks
            with c.step():
                pass
            time.sleep(0.002)
        self.assertLess(time.perf_counter() - t0, 2.0)
        self.assertGreater(c.dropped, 1)
        conn2, _ = srv.accept()  # reconnected after retry_s
        self.addCleanup(conn2.close)
        time.sleep(0.06)
        for _ in range(3):
            with c.step():
                pass
            time.sleep(0.01)
        conn2.settimeout(2.0)
        data = conn2.recv(70000)
        msgs = parse_datagram(data[:data.rfind(b"\n") + 1])
        self.assertEqual(msgs[0]["type"], "start")
        self.assertEqual(c.errors, 0)

    def test_nobody_listening(self):
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        c = client("tcp://127.0.0.1:%d" % port, batch_max=1, retry_s=0.05)
        t0 = time.perf_counter()
        for _ in range(20):
            with c.step():
                pass
            time.sleep(0.005)
        self.assertLess(time.perf_counter() - t0, 2.0)
        self.assertEqual(c.sent, 0)
        self.assertGreaterEqual(c.dropped, 21)


if __name__ == "__main__":
    unittest.main()


class QueuedTest(unittest.TestCase):
    """gpuwatch.queued(): one `queued` message for the ledger's queue wait."""

    def setUp(self):
        self.rx = Receiver()
        self.addCleanup(shutil.rmtree, self.rx.dir, True)
        self.addCleanup(self.rx.close)

    def test_queued_names_the_job_from_the_environment(self):
        self.assertTrue(gpuwatch.queued(template="llama", project="nlp", t=1764460800.5,
                                        socket=self.rx.path, environ={"SLURM_JOB_ID": "4242"}))
        [m] = self.rx.messages()
        self.assertEqual(m, {"type": "queued", "v": 1, "job": "4242", "t": 1764460800.5,
                             "template": "llama", "project": "nlp"})

    def test_no_agent_is_false_not_an_exception(self):
        path = os.path.join(self.rx.dir, "absent.sock")
        self.assertFalse(gpuwatch.queued(job="1", socket=path, environ={}))
        self.assertFalse(gpuwatch.queued(job="1", socket="nonsense://x", environ={}))
