"""The client: turns steps, phases and values into protocol lines and batches them to the agent.

Thread-safety: the per-step state (the open step, phase times, logged values) belongs to the
thread that runs the training loop; the batch buffer and the socket are behind a re-entrant
lock, so log lines from other threads (the stderr tee), signal handlers and finalizers may
send too. Nothing here blocks or raises into the caller: send errors drop the batch and count
it in `dropped`, bad values are left out and counted in `rejected`, and an internal error is
counted in `errors`.

Encoding is by hand: the message shapes are fixed and flat, so f-strings with repr() of
finite floats give valid JSON for a fraction of json.dumps' cost; strings go through the C
JSON string escaper.
"""

import json
import os
import re
import threading
import time
import weakref

from . import _env
from ._transport import Sender

MAX_DATAGRAM = 65000  # bytes, docs/job-protocol.md "Framing"
MAX_LOG_LINE = 16384  # bytes of one forwarded output line
MAX_TEXT = 4096  # bytes of an annotation
MAX_SCALARS = 32
MAX_LOG_FILES = 16
MAX_DURATION_S = 86400.0

_INF = float("inf")
_NINF = -_INF
_BIG_INT = 2 ** 53  # beyond this an integer is not exact as the agent's double

_perf = time.perf_counter
_wall = time.time
_quote = json.encoder.encode_basestring  # C escaper: quotes, escapes controls, keeps UTF-8

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_PHASE_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")
_name_ok = {}  # scalar name -> valid; names repeat every step, the regex runs once per name

# Phase kinds: where a phase's time goes in the step message.
_DATA, _COMM, _CKPT, _OTHER = 0, 1, 2, 3
_KIND = {"data": _DATA, "comm": _COMM, "checkpoint": _CKPT}

_clients = weakref.WeakSet()  # live clients, for the fork and exit hooks


def num(x):
    """JSON text of a finite number, or None (NaN, infinities, non-numbers)."""
    t = type(x)
    if t is float:
        return repr(x) if _NINF < x < _INF else None
    if t is int and -_BIG_INT <= x <= _BIG_INT:
        return str(x)
    return _num_slow(x)


def _num_slow(x):
    if x is None or isinstance(x, (str, bytes)):
        return None
    if isinstance(x, bool):
        return "1" if x else "0"
    try:
        f = float(x)  # numpy scalars, 0-d tensors, Decimal, Fraction
    except Exception:
        return None
    return repr(f) if _NINF < f < _INF else None


def _valid_name(name):
    ok = _name_ok.get(name)
    if ok is None:
        ok = type(name) is str and _NAME_RE.match(name) is not None
        if len(_name_ok) < 4096:
            _name_ok[name] = ok
    return ok


class Client:
    """One rank's connection to the node agent. gpuwatch.init() makes the process-wide one.

    Arguments are gpuwatch.init()'s, plus: environ (a mapping read instead of os.environ),
    enabled (False: a client that sends nothing), start_every_s (how often the `start` is
    re-sent, 30 s), retry_s (how often a missing agent socket is looked for again, or a TCP
    connection retried, 5 s).

    Counters: `sent` and `dropped` count messages (including the client's own `start`
    refreshes); `rejected` counts values or messages the client refused to send because the
    agent would reject them (NaN, a bad scalar name, a 33rd scalar, ...).
    """

    def __init__(self, job=None, template=None, user=None, project=None, rank=None,
                 world_size=None, local_rank=None, socket=None, log_files=None,
                 batch_ms=200, batch_max=64, environ=None, enabled=True,
                 start_every_s=30.0, retry_s=5.0, _paths=None, _sender=None):
        env = os.environ if environ is None else environ
        self._lock = threading.RLock()
        self._buf = []  # encoded lines (bytes, '\n'-terminated) waiting for a flush
        self._nbytes = 0
        self._closed = not enabled
        self.sent = 0
        self._dropped = 0
        self.rejected = 0
        self.errors = 0  # internal errors swallowed (a bug in the SDK; should stay 0)
        self._batch_s = max(0.0, float(batch_ms) / 1000.0)
        self._batch_max = max(1, int(batch_max))
        self._start_every = float(start_every_s)
        self._last_flush = -_INF
        self._start_sent = -_INF
        self._start_due = True
        self._end_hooks = []  # called by end() before the end message (gpuwatch.torch)
        self._collectors = []  # called as a step is finished (gpuwatch.torch's comm timer)
        self.ext = {}  # per-client state of extensions (gpuwatch.torch)
        self._stderr_tee = None
        # (step, duration_s, data_wait_s, comm_s, checkpoint_s) of the last step encoded; a
        # part is None when not measured. For printing progress; None before the first step.
        self.last_step = None

        # Per-step state (training thread).
        self._next_step = 0
        self._in_step = False
        self._pend_start = None  # perf time a data/comm/checkpoint phase outside a step began
        self._data = self._comm = self._ckpt = 0.0
        self._has_data = self._has_comm = self._has_ckpt = False
        self._loss = self._grad_norm = None  # JSON text
        self._scalars = None  # name -> JSON text

        d_rank, d_world, d_local = _env.detect_rank(env)
        self.job = _env.sanitize_job(job) if job is not None else None
        if not self.job:
            self.job = _env.detect_job(env)
        self.rank = _int_or(rank, d_rank, 0)
        if not 0 <= self.rank <= _env.MAX_RANK:
            self.rank = 0
            self.rejected += 1
        self.world_size = _int_or(world_size, d_world, None)
        self.local_rank = _int_or(local_rank, d_local, None)
        self.user = user if user is not None else _env.login_name()
        self.template = template
        self.project = project
        self.pid = os.getpid()
        self.log_files = []
        if isinstance(log_files, (str, bytes, os.PathLike)):
            log_files = [log_files]
        for path in list(log_files or [])[:MAX_LOG_FILES]:
            try:
                self.log_files.append(os.path.abspath(os.fspath(path)))
            except (TypeError, ValueError):
                self.rejected += 1

        head = '"job":%s,"rank":%d' % (_quote(self.job), self.rank)
        self._head = head
        self._step_pre = '{"type":"step",%s,"step":' % head
        self._start_line = self._encode_start()

        address = socket if socket is not None else env.get("GPUWATCH_SOCKET") or None
        if _sender is not None:
            self._sender = _sender  # tests: anything with send(bytes) -> bool, close(), lost
        elif enabled:
            self._sender = Sender(address, environ=env, retry_s=retry_s, paths=_paths)
        else:
            self._sender = None
        _clients.add(self)
        if enabled:
            with self._lock:
                self._flush_locked(_perf())  # the start goes out at once

    # -- counters and description ----------------------------------------------------------

    @property
    def dropped(self):
        lost = self._sender.lost if self._sender is not None else 0
        return self._dropped + lost

    @property
    def address(self):
        """Where messages go, as text ("unix:/run/gpuwatch/job.sock", "none (...)")."""
        return self._sender.describe() if self._sender is not None else "none (disabled)"

    @property
    def closed(self):
        return self._closed

    def __repr__(self):
        return "<gpuwatch.Client job=%r rank=%d to %s sent=%d dropped=%d>" % (
            self.job, self.rank, self.address, self.sent, self.dropped)

    # -- steps -----------------------------------------------------------------------------

    def step(self, samples=None, step=None):
        """Context manager timing one step: `with gw.step(samples=256): train(batch)`.

        Data, comm and checkpoint phases inside it (and data/comm/checkpoint time spent since
        the last step, e.g. in track()) are its parts; such outside time also moves the step's
        start back to when it began, so every part fits in duration_s (other phases between,
        such as an eval, are left out of it). An exception out of the block sends nothing
        (the step did not finish) and keeps its number for the next one.
        """
        return _StepCtx(self, samples, step)

    def step_done(self, duration_s, samples=None, step=None, data_wait_s=None, comm_s=None,
                  checkpoint_s=None, loss=None, grad_norm=None, **scalars):
        """Reports a step the caller timed itself. Parts not given come from phases/track."""
        try:
            d = float(duration_s)
            if not 0.0 < d < MAX_DURATION_S:
                self.rejected += 1
                self._reset_step()
                return
            if loss is not None or grad_norm is not None or scalars:
                self.log(loss, grad_norm, **scalars)
            for value, kind in ((data_wait_s, _DATA), (comm_s, _COMM), (checkpoint_s, _CKPT)):
                if value is not None:
                    self._set_part(kind, value)
            self._emit_step(step, d, samples, _wall())
        except Exception:
            self.errors += 1

    def _set_part(self, kind, value):
        text = num(value)
        if text is None or text.startswith("-"):
            self.rejected += 1
            return
        v = float(text)
        if kind == _DATA:
            self._data, self._has_data = v, True
        elif kind == _COMM:
            self._comm, self._has_comm = v, True
        else:
            self._ckpt, self._has_ckpt = v, True

    def _reset_step(self):
        self._pend_start = None
        self._data = self._comm = self._ckpt = 0.0
        self._loss = self._grad_norm = None
        self._scalars = None

    def _emit_step(self, step, d, samples, t):
        """Numbers, encodes and queues the step that just finished; d: duration in seconds."""
        if step is None:  # the common case, inline
            step = self._next_step
            self._next_step = step + 1
        else:
            step = self._number(step)
        if step is None or self._closed:
            self._reset_step()
            return
        if self._collectors:
            self._collect()
        self._encode_step(step, d, samples, t, self._take())

    def _number(self, step):
        """The number of the step now finishing (explicit or the next one), or None if bad."""
        if step is None:
            step = self._next_step
        elif type(step) is not int or step < 0:
            try:
                step = int(step)
            except Exception:
                step = -1
            if step < 0:
                self.rejected += 1
                return None
        self._next_step = step + 1
        return step

    def _collect(self):
        for collect in self._collectors:
            try:
                collect()
            except Exception:
                self.errors += 1

    def _take(self):
        """The parts and values gathered for the step now finishing; starts the next."""
        snap = (self._has_data and self._data, self._has_comm and self._comm,
                self._has_ckpt and self._ckpt, self._loss, self._grad_norm, self._scalars)
        self._pend_start = None
        self._data = self._comm = self._ckpt = 0.0
        self._loss = self._grad_norm = None
        self._scalars = None
        return snap

    def _encode_step(self, step, d, samples, t, snap):
        # snap: _take()'s tuple; a part is False when the job never measures it: it is then
        # left out (unknown), not sent as 0. Parts cannot exceed the step (the agent rejects
        # the line): timer noise and time measured on another clock (CUDA events) are clamped.
        if not 0.0 < d < MAX_DURATION_S:
            self.rejected += 1
            return
        data, comm, ckpt, loss, grad_norm, scalars = snap
        if data is not False and data > d:
            data = d
        if comm is not False and comm > d:
            comm = d
        if ckpt is not False and ckpt > d:
            ckpt = d
        self.last_step = (step, d, None if data is False else data,
                          None if comm is False else comm, None if ckpt is False else ckpt)
        # Durations with 9 significant digits (ns for a 1 s step): half the cost of repr().
        line = '%s%d,"t":%r,"duration_s":%.9g' % (self._step_pre, step, t, d)
        if samples is not None:
            s = num(samples)
            if s is None or s[0] == "-":
                self.rejected += 1
            else:
                line += ',"samples":' + s
        if data is not False:
            line += ',"data_wait_s":%.9g' % data
        if comm is not False:
            line += ',"comm_s":%.9g' % comm
        if ckpt is not False:
            line += ',"checkpoint_s":%.9g' % ckpt
        if loss is not None:
            line += ',"loss":' + loss
        if grad_norm is not None:
            line += ',"grad_norm":' + grad_norm
        if scalars:
            line += ',"scalars":{' + ",".join(['"%s":%s' % kv for kv in scalars.items()]) + "}"
        self._push((line + "}\n").encode("utf-8", "replace"))

    # -- phases, data wait, values ---------------------------------------------------------

    def phase(self, name):
        """Context manager for a phase: "data" and "comm" add to the step's data_wait_s and
        comm_s; "checkpoint" adds to checkpoint_s and sends checkpoint begin/end; any other
        name (`[A-Za-z0-9_.-]{1,64}`, e.g. "eval") sends phase begin/end marks."""
        kind = _KIND.get(name, _OTHER) if type(name) is str else _OTHER
        if kind == _OTHER and (type(name) is not str or not _PHASE_RE.match(name)):
            self.rejected += 1
            return _NULL_CTX
        return _PhaseCtx(self, kind, name)

    def _part_begin(self, kind, t0):
        if kind == _DATA:
            self._has_data = True
        elif kind == _COMM:
            self._has_comm = True
        else:
            self._has_ckpt = True
        if not self._in_step and self._pend_start is None:
            self._pend_start = t0

    def _part_add(self, kind, dt):
        if kind == _DATA:
            self._data += dt
        elif kind == _COMM:
            self._comm += dt
        else:
            self._ckpt += dt

    def add_comm(self, seconds):
        """Adds communication time measured elsewhere (gpuwatch.torch's DDP hook) to the
        current step, or to the next when none is open."""
        try:
            v = float(seconds)
            if 0.0 <= v < MAX_DURATION_S:
                self._has_comm = True
                self._comm += v
        except Exception:
            self.errors += 1

    def track(self, iterable):
        """Wraps an iterable; the time of each next() is data wait of the step it feeds."""
        try:
            self._has_data = True
            return _Tracked(self, iterable)
        except Exception:
            self.errors += 1
            return iterable

    def log(self, loss=None, grad_norm=None, **scalars):
        """Attaches values to the current step (or the next, outside one). Non-finite values,
        bad names (`[A-Za-z_][A-Za-z0-9_]{0,63}`) and scalars beyond 32 are left out and
        counted in `rejected`."""
        try:
            if loss is not None:
                v = num(loss)
                if v is None:
                    self.rejected += 1
                else:
                    self._loss = v
            if grad_norm is not None:
                v = num(grad_norm)
                if v is None:
                    self.rejected += 1
                else:
                    self._grad_norm = v
            if scalars:
                d = self._scalars
                if d is None:
                    d = self._scalars = {}
                for name, value in scalars.items():
                    v = num(value)
                    if v is None or not _valid_name(name) or (len(d) >= MAX_SCALARS and name not in d):
                        self.rejected += 1
                        continue
                    d[name] = v
        except Exception:
            self.errors += 1

    # -- other messages --------------------------------------------------------------------

    def annotate(self, text):
        """Free text on the job's time line (1-4096 bytes; longer is cut)."""
        try:
            text = _env.cut_utf8(str(text), MAX_TEXT)
            if not text:
                self.rejected += 1
                return
            self._push(('{"type":"annotation",%s,"t":%r,"text":%s}\n' % (
                self._head, _wall(), _quote(text))).encode("utf-8", "replace"))
        except Exception:
            self.errors += 1

    def log_line(self, line, stream=None):
        """Forwards one output line (cut at 16384 bytes). stream: "stdout", "stderr" or None."""
        try:
            line = str(line)
            if len(line) > MAX_LOG_LINE // 4:
                line = _env.cut_utf8(line, MAX_LOG_LINE)
            if stream in ("stdout", "stderr"):
                msg = '{"type":"log",%s,"t":%r,"stream":"%s","line":%s}\n' % (
                    self._head, _wall(), stream, _quote(line))
            else:
                msg = '{"type":"log",%s,"t":%r,"line":%s}\n' % (self._head, _wall(), _quote(line))
            self._push(msg.encode("utf-8", "replace"))
        except Exception:
            self.errors += 1

    def _mark(self, type_, state, name=None):
        if name is None:
            msg = '{"type":"%s",%s,"t":%r,"state":"%s"}\n' % (type_, self._head, _wall(), state)
        else:
            msg = '{"type":"%s",%s,"t":%r,"name":"%s","state":"%s"}\n' % (
                type_, self._head, _wall(), name, state)
        self._push(msg.encode())

    def _encode_start(self):
        fields = ['{"type":"start","v":1', self._head]
        for key in ("template", "user", "project"):
            value = getattr(self, key)
            if value is not None:
                value = _env.cut_utf8(str(value), 1024)
                fields.append('"%s":%s' % (key, _quote(value)))
        if self.world_size is not None:
            fields.append('"world_size":%d' % self.world_size)
        if self.local_rank is not None:
            fields.append('"local_rank":%d' % self.local_rank)
        fields.append('"pid":%d' % self.pid)
        if self.log_files:
            fields.append('"log_files":[%s]' % ",".join(_quote(p) for p in self.log_files))
        return (",".join(fields) + "}\n").encode("utf-8", "replace")

    def end(self, exit_code=0):
        """Sends the rank's end (and everything buffered); the client sends nothing after it.
        Called at exit with 0, or 1 from an uncaught exception, when the caller did not."""
        if self._closed:
            return
        for hook in list(self._end_hooks):
            try:
                hook()
            except Exception:
                self.errors += 1
        try:
            tee = self._stderr_tee
            if tee is not None:
                tee.flush_partial()
        except Exception:
            self.errors += 1
        try:
            code = int(exit_code)
        except Exception:
            code = 1
        try:
            with self._lock:
                if self._closed:
                    return
                msg = '{"type":"end",%s,"t":%r,"exit_code":%d}\n' % (self._head, _wall(), code)
                self._append(msg.encode())
                self._flush_locked(_perf())
                self._closed = True
                self._sender.close()
        except Exception:
            self.errors += 1

    def close(self):
        """Stops sending without an end message (tests; a library that borrowed a client)."""
        with self._lock:
            self._closed = True
            self._buf = []
            self._nbytes = 0
            if self._sender is not None:
                self._sender.close()

    # -- batching --------------------------------------------------------------------------

    def flush(self):
        """Sends what is buffered now."""
        try:
            with self._lock:
                if not self._closed:
                    self._flush_locked(_perf())
        except Exception:
            self.errors += 1

    def _push(self, data):
        """Queues one encoded line. A datagram goes out when batch_max lines are waiting, or
        at once when none went out in the last batch_ms (so sparse steps are not held back
        until the next one), and never grows past 65 000 bytes."""
        with self._lock:
            if self._closed:
                return
            if len(data) > MAX_DATAGRAM:
                self.rejected += 1
                return
            now = _perf()
            if self._nbytes + len(data) > MAX_DATAGRAM:
                self._flush_locked(now)
            self._buf.append(data)
            self._nbytes += len(data)
            if len(self._buf) >= self._batch_max or now - self._last_flush >= self._batch_s:
                self._flush_locked(now)

    def _append(self, data):
        if self._nbytes + len(data) > MAX_DATAGRAM:
            self._flush_locked(_perf())
        self._buf.append(data)
        self._nbytes += len(data)

    def _flush_locked(self, now):
        buf = self._buf
        start = self._start_due or now - self._start_sent >= self._start_every
        if not buf and not start:
            return
        self._buf = []
        size = self._nbytes
        self._nbytes = 0
        self._last_flush = now
        sender = self._sender
        if not start:
            if sender.send(b"".join(buf)):
                self.sent += len(buf)
            else:
                self._dropped += len(buf)
                self._start_due = True  # whoever receives the next datagram learns the job first
            return
        # The start goes first, so an agent that was down or restarted learns the rank before
        # its steps; it is resent on the first datagram after any failed one.
        self._start_sent = now
        lines = [self._start_line]
        lines.extend(buf)
        size += len(self._start_line)
        ok = True
        for chunk, count in _chunks(lines, size):
            if sender.send(chunk):
                self.sent += count
            else:
                self._dropped += count
                ok = False
        self._start_due = not ok

    # -- fork ------------------------------------------------------------------------------

    def _after_fork_in_child(self):
        # A forked child (a DataLoader worker) is not the rank: it inherits the buffer and
        # perhaps a lock held by another thread of the parent. It sends nothing.
        self._lock = threading.RLock()
        self._buf = []
        self._nbytes = 0
        self._closed = True
        self._end_hooks = []
        if self._sender is not None:
            self._sender.after_fork_in_child()


def _chunks(lines, size):
    if size <= MAX_DATAGRAM:
        return [(b"".join(lines), len(lines))]
    out, cur, cur_size = [], [], 0
    for data in lines:
        if cur and cur_size + len(data) > MAX_DATAGRAM:
            out.append((b"".join(cur), len(cur)))
            cur, cur_size = [], 0
        cur.append(data)
        cur_size += len(data)
    if cur:
        out.append((b"".join(cur), len(cur)))
    return out


def _int_or(explicit, detected, default):
    for value in (explicit, detected):
        if value is None:
            continue
        try:
            n = int(value)
        except (TypeError, ValueError):
            continue
        if n >= 0:
            return n
    return default


class _StepCtx(object):
    __slots__ = ("_c", "samples", "step", "_t0")

    def __init__(self, client, samples, step):
        self._c = client
        self.samples = samples
        self.step = step

    def __enter__(self):
        self._c._in_step = True
        self._t0 = _perf()
        return self

    def __exit__(self, exc_type, exc, tb):
        t1 = _perf()
        c = self._c
        c._in_step = False
        try:
            if exc_type is None:
                t0 = self._t0
                ps = c._pend_start
                if ps is not None and ps < t0:
                    t0 = ps
                d = t1 - t0
                c._emit_step(self.step, d if d > 0.0 else 1e-9, self.samples, _wall())
            else:
                c._reset_step()
        except Exception:
            c.errors += 1
        return False


class _PhaseCtx(object):
    __slots__ = ("_c", "_kind", "_name", "_t0")

    def __init__(self, client, kind, name):
        self._c = client
        self._kind = kind
        self._name = name

    def __enter__(self):
        c = self._c
        try:
            if self._kind == _OTHER:
                c._mark("phase", "begin", self._name)
            elif self._kind == _CKPT:
                c._mark("checkpoint", "begin")
        except Exception:
            c.errors += 1
        self._t0 = t0 = _perf()
        if self._kind != _OTHER:
            c._part_begin(self._kind, t0)
        return self

    def __exit__(self, exc_type, exc, tb):
        dt = _perf() - self._t0
        c = self._c
        try:
            if self._kind == _OTHER:
                if not c._in_step and c._pend_start is not None:
                    # An eval between a data/checkpoint part and the next step is not part of
                    # that step: it starts that much later.
                    c._pend_start += dt
                c._mark("phase", "end", self._name)
            else:
                c._part_add(self._kind, dt)
                if self._kind == _CKPT:
                    c._mark("checkpoint", "end")
        except Exception:
            c.errors += 1
        return False


class _NullCtx(object):
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return False


_NULL_CTX = _NullCtx()


class _Tracked(object):
    """Iterator over a loader; the time in each next() is data wait. len() and the loader's
    attributes pass through."""

    __slots__ = ("_c", "_src", "_it")

    def __init__(self, client, iterable):
        self._c = client
        self._src = iterable
        self._it = None

    def __iter__(self):
        self._it = iter(self._src)
        return self

    def __len__(self):
        return len(self._src)

    def __getattr__(self, name):  # loader.sampler, loader.dataset, ...
        if name in _Tracked.__slots__:
            raise AttributeError(name)  # not set yet (copy, pickle): no recursion
        return getattr(self._src, name)

    def __next__(self):
        it = self._it
        if it is None:
            it = self._it = iter(self._src)
        t0 = _perf()
        item = next(it)  # StopIteration and the loader's own errors pass through
        t1 = _perf()
        c = self._c
        if not c._in_step and c._pend_start is None:
            c._pend_start = t0
        c._data += t1 - t0
        return item


def _after_fork_in_child():
    for client in list(_clients):
        try:
            client._after_fork_in_child()
        except Exception:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
