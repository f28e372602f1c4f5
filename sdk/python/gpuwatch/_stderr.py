"""A sys.stderr replacement that writes through to the real stream and forwards each complete
line to the agent as a `log` message.

Only Python-level writes pass through it (print(file=sys.stderr), warnings, tracebacks,
logging handlers created after it was installed). Writes to file descriptor 2 from C/C++
(NCCL, CUDA, glog) bypass sys.stderr entirely: declare the job's log files instead
(gpuwatch.init(log_files=[...])) and the agent tails them.

Thread-safe (a re-entrant lock, so a signal handler or finalizer that writes to stderr while a
write is under way cannot deadlock). The real stream's behaviour, errors included, is
unchanged; forwarding errors are swallowed.
"""

import threading

from ._client import MAX_LOG_LINE


class StderrTee(object):
    def __init__(self, real, client, stream="stderr"):
        self._real = real
        self._client = client
        self._stream = stream
        self._partial = ""
        self._lock = threading.RLock()

    @property
    def real(self):
        return self._real

    def write(self, s):
        n = self._real.write(s)
        if s and not self._client._closed:
            try:
                self._forward(s)
            except Exception:
                pass
        return n

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        return self._real.flush()

    def __getattr__(self, name):
        # encoding, errors, fileno, isatty, buffer, ...: the real stream's.
        return getattr(self._real, name)

    def _forward(self, s):
        if type(s) is not str:
            return
        with self._lock:
            text = self._partial + s if self._partial else s
            if "\n" not in s:
                self._partial = _keep_last_cr_segment(text)
                if len(self._partial) > MAX_LOG_LINE:
                    # A line that never ends (a progress bar without \r, a binary dump):
                    # send what fits and start again.
                    line, self._partial = self._partial, ""
                    self._send(line)
                return
            lines = text.split("\n")
            self._partial = _keep_last_cr_segment(lines.pop())
        for line in lines:
            self._send(line)

    def _send(self, line):
        line = line.rstrip("\r")
        cr = line.rfind("\r")
        if cr >= 0:  # "\r"-redrawn progress lines: only the final state
            line = line[cr + 1:]
        if line.strip():
            self._client.log_line(line, self._stream)

    def flush_partial(self):
        """Forwards an unterminated last line (at exit)."""
        with self._lock:
            line, self._partial = self._partial, ""
        if line:
            self._send(line)


def _keep_last_cr_segment(text):
    cr = text.rfind("\r")
    if 0 <= cr < len(text) - 1:
        return text[cr + 1:]
    return text
