"""Whole processes: init(), exit codes through atexit/excepthook/sys.exit, stderr forwarding,
fork, and that gpuwatch never needs torch."""

import os
import shutil
import socket
import struct
import textwrap
import unittest

from tests.support import Receiver, parse_datagram, run_python


class ProcessTest(unittest.TestCase):
    def setUp(self):
        self.rx = Receiver()
        self.addCleanup(shutil.rmtree, self.rx.dir, True)
        self.addCleanup(self.rx.close)
        self.env = {"GPUWATCH_SOCKET": self.rx.path, "RANK": "2", "WORLD_SIZE": "4", "SLURM_JOB_ID": "777"}

    def run_child(self, code, env=None):
        full = dict(self.env)
        full.update(env or {})
        return run_python(textwrap.dedent(code), env=full)

    def test_normal_exit_sends_end_0(self):
        r = self.run_child("""
            import gpuwatch as gw
            c = gw.init(template="t")
            assert gw.init() is c  # a second init returns the first client
            with gw.step(samples=1):
                pass
            print(gw.job, gw.rank)
        """)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["777", "2"])
        msgs = self.rx.messages()
        self.assertEqual([m["type"] for m in msgs], ["start", "step", "end"])
        self.assertEqual((msgs[0]["job"], msgs[0]["rank"], msgs[0]["world_size"]), ("777", 2, 4))
        self.assertEqual(msgs[-1]["exit_code"], 0)

    def test_uncaught_exception_sends_end_1_and_the_traceback(self):
        r = self.run_child("""
            import sys, gpuwatch as gw
            hooked = []
            sys.excepthook = lambda *a: (hooked.append(1), sys.__excepthook__(*a))
            gw.init(forward_stderr=True)
            print("a warning line", file=sys.stderr)
            with gw.step():
                pass
            raise RuntimeError("CUDA error: out of memory")
        """)
        self.assertEqual(r.returncode, 1)
        self.assertIn("RuntimeError: CUDA error: out of memory", r.stderr)  # the previous hook ran
        msgs = self.rx.messages()
        types = [m["type"] for m in msgs]
        self.assertEqual(types[-1], "end")
        self.assertEqual(msgs[-1]["exit_code"], 1)
        logged = [m["line"] for m in msgs if m["type"] == "log"]
        self.assertEqual(logged[0], "a warning line")
        self.assertIn("Traceback (most recent call last):", logged)
        self.assertEqual(logged[-1], "RuntimeError: CUDA error: out of memory")
        self.assertEqual(types.count("end"), 1)

    def test_keyboard_interrupt_is_130(self):
        self.run_child("""
            import gpuwatch as gw
            gw.init()
            raise KeyboardInterrupt
        """)
        self.assertEqual(self.rx.messages()[-1]["exit_code"], 130)

    def test_sys_exit_code(self):
        r = self.run_child("""
            import sys, gpuwatch as gw
            gw.init()
            sys.exit(3)
        """)
        self.assertEqual(r.returncode, 3)
        self.assertEqual(self.rx.messages()[-1]["exit_code"], 3)

    def test_explicit_end_wins(self):
        self.run_child("""
            import gpuwatch as gw
            gw.init()
            gw.end(7)
        """)
        msgs = self.rx.messages()
        self.assertEqual([(m["type"], m.get("exit_code")) for m in msgs], [("start", None), ("end", 7)])

    def test_disabled_by_environment(self):
        r = self.run_child("""
            import gpuwatch as gw
            c = gw.init()
            with gw.step():
                pass
            print(c.address)
        """, env={"GPUWATCH_DISABLE": "1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.rx.messages(), [])

    def test_forked_child_sends_nothing(self):
        self.rx.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        r = self.run_child("""
            import os, sys, gpuwatch as gw
            gw.init(forward_stderr=True, batch_ms=60000)
            with gw.step():
                pass  # buffered when the fork happens
            pid = os.fork()
            if pid == 0:
                with gw.step():
                    pass
                print("from the child", file=sys.stderr)
                gw.flush()
                sys.exit(0)  # runs the child's atexit: must not end the rank
            os.waitpid(pid, 0)
            print(os.getpid())
        """)
        self.assertEqual(r.returncode, 0, r.stderr)
        parent = int(r.stdout.split()[-1])
        senders, msgs = set(), []
        self.rx.sock.settimeout(0.2)
        while True:
            try:
                data, anc, _, _ = self.rx.sock.recvmsg(70000, socket.CMSG_SPACE(12))
            except socket.timeout:
                break
            senders.add(struct.unpack("iII", anc[0][2])[0])
            msgs += parse_datagram(data)
        self.assertEqual(senders, {parent})
        self.assertEqual([m["type"] for m in msgs], ["start", "step", "end"])
        self.assertEqual(msgs[-1]["exit_code"], 0)


class TorchFreeTest(unittest.TestCase):
    def test_import_does_not_import_torch(self):
        r = run_python("import sys, gpuwatch; print('torch' in sys.modules)")
        self.assertEqual(r.stdout.strip(), "False", r.stderr)

    def test_gpuwatch_torch_without_torch_says_so(self):
        r = run_python(textwrap.dedent("""
            import sys
            class NoTorch(object):  # torch may be installed here: hide it
                def find_spec(self, name, path=None, target=None):
                    if name == "torch" or name.startswith("torch."):
                        raise ImportError("No module named 'torch'")
                    return None
            sys.meta_path.insert(0, NoTorch())
            import gpuwatch
            try:
                import gpuwatch.torch
            except ImportError as e:
                print(e)
        """))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("gpuwatch.torch needs PyTorch", r.stdout)
        self.assertIn("No module named 'torch'", r.stdout)


if __name__ == "__main__":
    unittest.main()
