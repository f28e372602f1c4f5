"""gpuwatch job SDK: tells the node's gpuwatch agent what a training job is doing.

    import gpuwatch as gw
    gw.init(template="llama-8b-fsdp")
    for batch in gw.track(loader):          # time in next() is data wait
        with gw.step(samples=len(batch)):   # one `step` message per step
            loss = train(batch)
            gw.log(loss=loss)

Messages go as non-blocking datagrams to the agent (docs/job-protocol.md); when it is absent,
slow or restarting they are dropped and counted (`gw.dropped`), never raised and never
waited for. Standard library only; importing gpuwatch does not import torch (the PyTorch
helpers are in gpuwatch.torch).

The module-level functions act on the client gpuwatch.init() made; before init() they do
nothing. Setting GPUWATCH_DISABLE=1 makes init() return a client that sends nothing.
"""

import atexit
import os
import sys
import threading
import traceback

from ._client import Client, MAX_DATAGRAM, _clients
from ._env import detect_job, detect_rank
from ._stderr import StderrTee
from ._transport import candidate_paths, parse_address

__version__ = "0.1.0"
__all__ = [
    "Client", "init", "client", "step", "step_done", "phase", "track", "log", "annotate",
    "log_line", "flush", "end", "queued", "detect_job", "detect_rank", "candidate_paths",
    "parse_address", "MAX_DATAGRAM", "__version__",
]

_disabled = Client(job="none", user="", enabled=False)
_default = _disabled
_init_lock = threading.Lock()
_hooks_installed = False
_exit_code = 0  # what sys.exit() was last called with; the atexit end() reports it


def init(job=None, template=None, user=None, project=None, rank=None, world_size=None,
         local_rank=None, socket=None, log_files=None, forward_stderr=False, batch_ms=200,
         batch_max=64, **options):
    """Makes the process's client, sends `start`, and returns the client.

    Missing job/rank/world_size/local_rank come from the launcher's environment (torchrun,
    Slurm, Open MPI, MPICH/PMI, PBS, LSF); user defaults to the login name. socket: a path
    or udp://HOST:PORT / tcp://HOST:PORT; default $GPUWATCH_SOCKET, then the agent's
    standard paths. log_files: files the agent tails for this rank (NCCL's output, which
    writes to fd 2 directly). forward_stderr: also forward Python-level stderr lines.
    options: Client's start_every_s, retry_s, environ (tests, tuning).

    Installs, once: an exit handler sending `end` (exit code 0, or what sys.exit() got) and a
    sys.excepthook wrapper sending `end` with exit code 1 (130 for KeyboardInterrupt) before
    the previous hook prints the traceback. A second init() returns the first client.
    """
    global _default
    with _init_lock:
        if _default is not _disabled and not _default.closed:
            return _default
        environ = options.get("environ") or os.environ
        enabled = environ.get("GPUWATCH_DISABLE", "").strip().lower() not in ("1", "true", "yes", "on")
        try:
            c = Client(job=job, template=template, user=user, project=project, rank=rank,
                       world_size=world_size, local_rank=local_rank, socket=socket,
                       log_files=log_files, batch_ms=batch_ms, batch_max=batch_max,
                       enabled=enabled, **options)
        except TypeError:
            raise  # a wrong argument is the caller's mistake, at set-up time
        except Exception:
            c = Client(job=job or "none", user=user or "", enabled=False)
        _default = c
        _install_hooks()
        if forward_stderr and enabled and sys.stderr is not None and not isinstance(sys.stderr, StderrTee):
            tee = StderrTee(sys.stderr, c)
            c._stderr_tee = tee
            sys.stderr = tee
        return c


def client():
    """The client init() made (a disabled one before)."""
    return _default


def step(samples=None, step=None):
    return _default.step(samples, step)


def step_done(duration_s, samples=None, step=None, **values):
    return _default.step_done(duration_s, samples, step, **values)


def phase(name):
    return _default.phase(name)


def track(iterable):
    return _default.track(iterable)


def log(loss=None, grad_norm=None, **scalars):
    return _default.log(loss, grad_norm, **scalars)


def annotate(text):
    return _default.annotate(text)


def log_line(line, stream=None):
    return _default.log_line(line, stream)


def flush():
    return _default.flush()


def end(exit_code=0):
    return _default.end(exit_code)


def queued(job=None, template=None, user=None, project=None, t=None, socket=None,
           environ=None):
    """Tells the agent a job entered a queue (docs/job-protocol.md, `queued`), for its queue
    wait in the accounting: the wait runs from here to the job's first `start`. For launchers
    and submit wrappers with a queue of their own; Slurm's prolog says it for Slurm jobs.

    job: default the launcher's environment (detect_job); t: Unix seconds, default now. Sends
    one datagram and returns whether the kernel took it; never raises.
    """
    import json
    import time

    from ._env import sanitize_job
    from ._transport import Sender

    try:
        env = os.environ if environ is None else environ
        job = sanitize_job(job) if job is not None else detect_job(env)
        if not job:
            return False
        msg = {"type": "queued", "v": 1, "job": job, "t": time.time() if t is None else float(t)}
        for key, value in (("template", template), ("user", user), ("project", project)):
            if value is not None:
                msg[key] = str(value)[:128]
        address = socket if socket is not None else env.get("GPUWATCH_SOCKET") or None
        sender = Sender(address, environ=env)
        try:
            return sender.send((json.dumps(msg, ensure_ascii=False) + "\n").encode("utf-8"))
        finally:
            sender.close()
    except Exception:
        return False


def __getattr__(name):  # gw.dropped, gw.sent, gw.rejected (PEP 562)
    if name in ("dropped", "sent", "rejected", "errors", "job", "rank", "address"):
        return getattr(_default, name)
    raise AttributeError("module 'gpuwatch' has no attribute %r" % name)


# -- process exit -----------------------------------------------------------------------------

def _end_all(code):
    for c in list(_clients):
        if not c.closed:
            c.end(code)


def _at_exit():
    try:
        _end_all(_exit_code)
    except Exception:
        pass


atexit.register(_at_exit)


def _install_hooks():
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    previous_hook = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            code = 130 if issubclass(exc_type, KeyboardInterrupt) else 1
            for c in list(_clients):
                if c.closed:
                    continue
                if c._stderr_tee is not None:
                    # The client is closed once end() is sent, so the traceback the previous
                    # hook prints would not be forwarded any more: forward it now.
                    c._stderr_tee.flush_partial()
                    text = "".join(traceback.format_exception(exc_type, exc, tb))
                    for line in text.splitlines():
                        if line.strip():
                            c.log_line(line, "stderr")
                c.end(code)
        except Exception:
            pass
        previous_hook(exc_type, exc, tb)

    sys.excepthook = excepthook

    previous_exit = sys.exit

    def exit(status=None):
        # Remembers the status for the `end` sent at exit; `raise SystemExit(n)` bypasses it.
        global _exit_code
        if status is None:
            _exit_code = 0
        elif isinstance(status, int):
            _exit_code = status & 0xFF
        else:
            _exit_code = 1  # a message: Python prints it and exits with 1
        previous_exit(status)

    exit.__doc__ = previous_exit.__doc__
    sys.exit = exit
