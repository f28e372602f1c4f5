"""Who this process is: job id, rank, world size and local rank from the launcher's environment.

Pure functions of an environment mapping (os.environ by default), so tests pass a dict.
Explicit arguments to gpuwatch.init() win over everything read here.
"""

import getpass
import os
import socket

# Launchers in the order they are believed: torchrun sets RANK/WORLD_SIZE/LOCAL_RANK even when
# it runs inside a Slurm allocation or under mpirun, so its variables come first; Slurm's come
# last because SLURM_PROCID of an mpirun/torchrun launcher process is not the rank of the
# workers it starts.
_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS")
_LOCAL_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")

# Scheduler job ids first (they name the allocation every rank shares and that the agent's
# process attribution also reads), then the launcher's run id. GPUWATCH_JOB lets a user name it.
_JOB_VARS = ("GPUWATCH_JOB", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID")

MAX_RANK = 1048575
MAX_JOB_BYTES = 128


def _int_var(environ, names):
    for name in names:
        value = environ.get(name)
        if value is None:
            continue
        try:
            n = int(value.strip())
        except ValueError:
            continue
        if n >= 0:
            return n
    return None


def detect_rank(environ=None):
    """Returns (rank, world_size, local_rank); each None when no launcher variable names it."""
    env = os.environ if environ is None else environ
    return _int_var(env, _RANK_VARS), _int_var(env, _WORLD_VARS), _int_var(env, _LOCAL_VARS)


def detect_job(environ=None, hostname=None, pid=None):
    """The job id every rank of one run shares, as far as the environment allows.

    Order: GPUWATCH_JOB, SLURM_JOB_ID, PBS_JOBID, LSB_JOBID, TORCHELASTIC_RUN_ID (unless
    "none", torchrun's default without --rdzv-id; --standalone makes a random one),
    PMIX_NAMESPACE (Open MPI 5 / PMIx: one per mpirun), MASTER_ADDR:MASTER_PORT (the
    rendezvous every rank of a torch.distributed run uses), else "<hostname>-<pid>", which is
    one job per process.
    """
    env = os.environ if environ is None else environ
    for name in _JOB_VARS:
        value = sanitize_job(env.get(name))
        if value:
            return value
    run_id = sanitize_job(env.get("TORCHELASTIC_RUN_ID"))
    if run_id and run_id.lower() != "none":
        return run_id
    ns = sanitize_job(env.get("PMIX_NAMESPACE"))
    if ns:
        return ns
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if addr and port:
        value = sanitize_job("%s:%s" % (addr.strip(), port.strip()))
        if value:
            return value
    host = hostname if hostname is not None else _hostname()
    return sanitize_job("%s-%d" % (host, os.getpid() if pid is None else pid)) or "job"


def sanitize_job(value):
    """The protocol's job id: 1-128 bytes, no control characters; None when nothing is left."""
    if value is None:
        return None
    value = "".join(ch for ch in str(value).strip() if ch >= " " and ch != "\x7f")
    value = cut_utf8(value, MAX_JOB_BYTES)
    return value or None


def cut_utf8(text, max_bytes):
    """text cut to at most max_bytes of UTF-8 on a character boundary; lone surrogates become '?'."""
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes and len(data) == len(text):
        return text
    if len(data) <= max_bytes:
        return data.decode("utf-8")
    return data[:max_bytes].decode("utf-8", "ignore")


def login_name():
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry for this uid (containers), no USER/LOGNAME
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


def _hostname():
    try:
        return socket.gethostname() or "localhost"
    except OSError:
        return "localhost"
