"""PyTorch helpers: GPU-side step timing with CUDA events, and a DDP communication hook that
measures allreduce time.

    import gpuwatch as gw, gpuwatch.torch as gwt
    gw.init(template="toy-ddp")
    gwt.register_comm_hook(ddp_model)          # allreduce time -> comm_s
    for batch in gw.track(loader):
        with gwt.cuda_step(samples=len(batch)):
            ...

Importing this module imports torch (and raises ImportError with a clear message when it is
missing); `import gpuwatch` alone never does. Nothing here synchronizes the GPU: CUDA events
are read with query() on a later step, once they have completed.

Thread-safety: cuda_step belongs to the training thread. The comm hook runs on autograd and
process-group threads; it only records events and times into per-bucket lists that the
training thread reads at the end of a step.
"""

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "gpuwatch.torch needs PyTorch, and `import torch` failed (%s). The rest of gpuwatch "
        "works without it: use gpuwatch.step() for CPU-timed steps." % (e,)) from e

import collections

import gpuwatch as _gw
from gpuwatch._client import _perf, _wall

__all__ = ["cuda_step", "CudaStepTimer", "timed_comm_hook", "register_comm_hook"]


def _client(client):
    return client if client is not None else _gw.client()


# -- GPU-side step timer ----------------------------------------------------------------------

class CudaStepTimer(object):
    """Times steps with CUDA events on the current stream and reports each step once its end
    event has completed (checked with query() at the end of later steps, so the training loop
    never waits for the GPU).

    A step's duration_s is the GPU time from the previous step's end event to its own (the
    first step: from its start event), so GPU idle time between steps (waiting for input)
    belongs to the step it delays, as the data wait measured on the CPU does. Steps are
    reported in order, up to max_pending behind; beyond that, and at end(), a step whose
    events have not completed is reported with its CPU-measured duration instead.
    Without CUDA, cuda_step() is client.step().
    """

    def __init__(self, client=None, max_pending=32):
        self._c = _client(client)
        self._pending = collections.deque()
        self._prev_end = None  # the last reported step's end event
        self._max_pending = max(1, int(max_pending))
        self._cuda = torch.cuda.is_available()
        self._c._end_hooks.append(self._at_end)

    def step(self, samples=None, step=None):
        if not self._cuda:
            return self._c.step(samples, step)
        return _CudaStepCtx(self, samples, step)

    def _finish(self, start, end, t0, t1, samples, step):
        c = self._c
        ps = c._pend_start
        cpu_d = t1 - (ps if ps is not None and ps < t0 else t0)
        number = c._number(step)
        if number is None or c._closed:
            c._reset_step()
            return
        if c._collectors:
            c._collect()
        self._pending.append((number, start, end, cpu_d, samples, _wall(), c._take()))
        self.resolve()

    def resolve(self, final=False):
        """Reports the steps whose end event has completed, oldest first."""
        pending = self._pending
        c = self._c
        while pending:
            number, start, end, cpu_d, samples, t, snap = pending[0]
            done = _query(end)
            if not done and not final and len(pending) <= self._max_pending:
                return
            pending.popleft()
            d = None
            if done:
                try:
                    first = self._prev_end if self._prev_end is not None else start
                    d = first.elapsed_time(end) / 1000.0
                except Exception:
                    d = None
                self._prev_end = end
            else:
                self._prev_end = None  # the next step's GPU time would span this one
            if d is None or not d > 0.0:
                d = cpu_d if cpu_d > 0.0 else 1e-9
            c._encode_step(number, d, samples, t, snap)

    def _at_end(self):
        self.resolve(final=True)


def _query(event):
    try:
        return event.query()
    except Exception:
        return False


class _CudaStepCtx(object):
    __slots__ = ("_timer", "samples", "step", "_start", "_t0")

    def __init__(self, timer, samples, step):
        self._timer = timer
        self.samples = samples
        self.step = step

    def __enter__(self):
        self._timer._c._in_step = True
        try:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        except Exception:
            self._start = None
        self._t0 = _perf()
        return self

    def __exit__(self, exc_type, exc, tb):
        t1 = _perf()
        timer = self._timer
        c = timer._c
        c._in_step = False
        if exc_type is not None:
            c._reset_step()
            return False
        try:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            if self._start is None:
                raise RuntimeError("no start event")
            timer._finish(self._start, end, self._t0, t1, self.samples, self.step)
        except Exception:
            c.errors += 1
            c._reset_step()
        return False


def cuda_step(samples=None, step=None, client=None):
    """`with gwt.cuda_step(samples=n):` — a step timed on the GPU (see CudaStepTimer)."""
    c = _client(client)
    timer = c.ext.get("cuda_step")
    if timer is None:
        timer = c.ext["cuda_step"] = CudaStepTimer(c)
    return timer.step(samples, step)


# -- DDP communication hook -------------------------------------------------------------------

class _CommTimer(object):
    """Per-bucket allreduce times, grouped by the step they ran in, turned into the step's
    exposed communication when all of a step's buckets have completed.

    Exposed communication is the part of the allreduces that backward did not hide: from the
    moment the last bucket was ready (its hook was called, about the end of the backward
    pass) to the completion of the last allreduce. It is added to comm_s; the sum of all
    buckets' allreduce times goes into the scalar `allreduce_s`. With CUDA the times are
    CUDA events read on a later step, so they land in the step during which they completed.
    """

    def __init__(self, client):
        self._c = client
        self._groups = collections.OrderedDict()  # step number -> [[start, end, cuda], ...]
        client._collectors.append(self.collect)
        client._has_comm = True

    def record(self, bucket_tensor, inner, state, bucket):
        cuda = bool(getattr(bucket_tensor, "is_cuda", False))
        entry = [None, None, cuda]
        try:
            if cuda:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()  # on the stream that produced the gradients
                entry[0] = ev
            else:
                entry[0] = _perf()
            group = self._groups.get(self._c._next_step)
            if group is None:
                group = self._groups[self._c._next_step] = []
                while len(self._groups) > 16:  # never completed (a broken process group)
                    self._groups.popitem(last=False)
            group.append(entry)
        except Exception:
            entry = None
        fut = inner(state, bucket)
        if entry is None:
            return fut

        def done(f):
            try:
                if cuda:
                    # Callbacks of CUDA futures run with streams that wait for the allreduce,
                    # so this event completes when the allreduce has.
                    ev = torch.cuda.Event(enable_timing=True)
                    ev.record()
                    entry[1] = ev
                else:
                    entry[1] = _perf()
            except Exception:
                pass
            return f.value()  # the allreduce's own error, if any, goes to DDP as before

        return fut.then(done)

    def collect(self):
        """At the end of a step: reports every group whose allreduces have all completed."""
        groups = self._groups
        for key in list(groups.keys()):
            if key >= self._c._next_step:
                break  # the step still running
            entries = groups.get(key)  # the hook's thread may have evicted it meanwhile
            measured = _measure(entries) if entries else None
            if measured is None:
                continue
            groups.pop(key, None)
            exposed, total = measured
            self._c.add_comm(exposed)
            self._c.log(allreduce_s=total)


def _measure(entries):
    """(exposed_s, total_s) of one step's buckets, or None while any is incomplete."""
    if not entries or any(e[1] is None for e in entries):
        return None
    last_start = entries[-1][0]
    if entries[0][2]:
        if not all(_query(e[1]) for e in entries):
            return None
        exposed = max(last_start.elapsed_time(e[1]) for e in entries) / 1000.0
        total = sum(e[0].elapsed_time(e[1]) for e in entries) / 1000.0
    else:
        exposed = max(e[1] for e in entries) - last_start
        total = sum(e[1] - e[0] for e in entries)
    return max(0.0, exposed), max(0.0, total)


def timed_comm_hook(inner=None, client=None):
    """A DDP comm hook: `inner` (default: PyTorch's allreduce_hook) with its time measured.

    Register it with `ddp_model.register_comm_hook(state, hook)`, where state is what inner
    takes (the process group, or None for the default one). Do not also wrap the same
    communication in gw.phase("comm"): it would count twice.
    """
    if inner is None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        inner = default_hooks.allreduce_hook
    c = _client(client)
    timer = c.ext.get("comm_timer")
    if timer is None:
        timer = c.ext["comm_timer"] = _CommTimer(c)

    def hook(state, bucket):
        return timer.record(bucket.buffer(), inner, state, bucket)

    hook.__name__ = "gpuwatch_timed_" + getattr(inner, "__name__", "hook")
    return hook


def register_comm_hook(ddp_model, state=None, inner=None, client=None):
    """ddp_model.register_comm_hook(state, timed_comm_hook(inner)) in one call."""
    ddp_model.register_comm_hook(state, timed_comm_hook(inner, client))
