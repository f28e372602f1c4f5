"""Test doubles and helpers: a capturing sender, a receiving socket, subprocess runs."""

import json
import os
import socket
import subprocess
import sys
import tempfile

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CaptureSender(object):
    """Stands in for gpuwatch._transport.Sender: keeps every datagram; ok=False drops."""

    def __init__(self, ok=True):
        self.ok = ok
        self.datagrams = []
        self.lost = 0

    def send(self, data):
        if not self.ok:
            return False
        self.datagrams.append(bytes(data))
        return True

    def close(self):
        pass

    def after_fork_in_child(self):
        pass

    def describe(self):
        return "capture"

    def raw_lines(self):
        return [line for d in self.datagrams for line in d.decode("utf-8").split("\n") if line]

    def messages(self, type_=None):
        out = [json.loads(line) for line in self.raw_lines()]
        return [m for m in out if type_ is None or m["type"] == type_]


def parse_datagram(data):
    """The JSON objects of one datagram; asserts the framing of docs/job-protocol.md."""
    assert len(data) <= 65000, len(data)
    text = data.decode("utf-8")  # strict: must be valid UTF-8
    assert text.endswith("\n"), text[-50:]
    out = []
    for line in text[:-1].split("\n"):
        assert "NaN" not in line and "Infinity" not in line, line
        out.append(json.loads(line, parse_constant=_no_constant))
    return out


def _no_constant(name):
    raise AssertionError("non-JSON constant %s" % name)


class Receiver(object):
    """A Unix datagram socket bound where the agent's would be."""

    def __init__(self, path=None, rcvbuf=None):
        if path is None:
            self.dir = tempfile.mkdtemp(prefix="gw-test-")
            path = os.path.join(self.dir, "job.sock")
        self.path = path
        self.sock = None
        self.bind(rcvbuf)

    def bind(self, rcvbuf=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.bind(self.path)

    def close(self, unlink=True):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if unlink:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def datagrams(self, timeout=0.05):
        """Everything queued now (waits up to timeout for the first one)."""
        out = []
        self.sock.settimeout(timeout)
        while True:
            try:
                out.append(self.sock.recv(70000))
            except (socket.timeout, BlockingIOError):
                return out
            self.sock.settimeout(0.01)

    def messages(self, timeout=0.05):
        return [m for d in self.datagrams(timeout) for m in parse_datagram(d)]


def run_python(code, env=None, timeout=20):
    """Runs code in a fresh interpreter with the SDK importable; returns CompletedProcess."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = SDK_DIR + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.pop("GPUWATCH_SOCKET", None)
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=timeout)
