"""Where messages go and how they get there, without ever blocking the caller.

A Sender takes one datagram's bytes (one or more JSON lines, at most 65 000 bytes) and either
hands it to the kernel at once or returns False: the caller counts it as dropped. Nothing here
waits: Unix and UDP sockets are non-blocking and sent with MSG_DONTWAIT; TCP connects
non-blocking and a connection that is not ready drops the batch. Not thread-safe: the client
calls it under its lock.
"""

import errno
import os
import select
import socket
import time

DEFAULT_PATHS_NOTE = "/run/gpuwatch/job.sock, $XDG_RUNTIME_DIR/gpuwatch/job.sock, /tmp/gpuwatch-<uid>/job.sock"

_FLAGS = getattr(socket, "MSG_DONTWAIT", 0) | getattr(socket, "MSG_NOSIGNAL", 0)

# Errors that say the Unix socket path is not (or no longer) an agent: look for it again.
_GONE = (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK, errno.ENOTDIR)


def candidate_paths(environ=None, uid=None):
    """The socket paths the agent may have bound, in the order docs/job-protocol.md gives."""
    env = os.environ if environ is None else environ
    if uid is None:
        uid = os.getuid() if hasattr(os, "getuid") else 0
    paths = ["/run/gpuwatch/job.sock"]
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg:
        paths.append(os.path.join(xdg, "gpuwatch", "job.sock"))
    paths.append("/tmp/gpuwatch-%d/job.sock" % uid)
    return paths


def parse_address(spec):
    """("unix", path) | ("udp", (host, port)) | ("tcp", (host, port)); ValueError when malformed.

    spec: a path, udp://HOST:PORT or tcp://HOST:PORT; HOST may be [v6 address].
    """
    spec = spec.strip()
    for scheme in ("udp", "tcp"):
        prefix = scheme + "://"
        if spec.lower().startswith(prefix):
            rest = spec[len(prefix):].rstrip("/")
            if rest.startswith("["):
                host, sep, port = rest[1:].partition("]:")
            else:
                host, sep, port = rest.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError("bad address %r: want %s://HOST:PORT" % (spec, scheme))
            return scheme, (host, int(port))
    if spec.lower().startswith("unix://"):
        spec = spec[len("unix://"):]
    if not spec:
        raise ValueError("empty socket path")
    return "unix", spec


class Sender:
    """Resolves the agent's address and sends datagrams to it.

    explicit: the address given by the caller or $GPUWATCH_SOCKET (None: look for the default
    paths, again at most every retry_s while none exists or the one found has gone away).
    """

    def __init__(self, explicit=None, environ=None, retry_s=5.0, paths=None, clock=time.monotonic):
        self._environ = os.environ if environ is None else environ
        self._retry_s = retry_s
        self._paths = paths  # injectable for tests; None: candidate_paths()
        self._clock = clock
        self._explicit = None
        self.error = None  # why the address is unusable, for describe()
        self.lost = 0  # messages lost after send() returned True (a TCP stream cut mid-batch)
        if explicit:
            try:
                self._explicit = parse_address(explicit)
            except ValueError as e:
                self.error = str(e)
        self._kind = None
        self._addr = None
        self._sock = None
        self._next_try = 0.0  # clock() before which the paths are not looked for again
        self._next_connect = 0.0  # clock() before which no TCP connection is attempted
        self._tcp_connected = False
        self._tcp_pending = b""
        self._resolve()

    # -- address --------------------------------------------------------------------------

    def _resolve(self):
        self._next_try = self._clock() + self._retry_s
        if self._explicit is not None:
            kind, addr = self._explicit
        elif self.error is not None:
            return
        else:
            paths = self._paths if self._paths is not None else candidate_paths(self._environ)
            found = None
            for path in paths:
                try:
                    if os.path.exists(path):
                        found = path
                        break
                except (OSError, ValueError):
                    continue
            if found is None:
                return
            kind, addr = "unix", found
        if kind in ("udp", "tcp"):
            # Resolved once: a host name costs a DNS lookup, which may block; numeric addresses
            # do not.
            try:
                infos = socket.getaddrinfo(addr[0], addr[1], 0, socket.SOCK_DGRAM if kind == "udp" else socket.SOCK_STREAM)
            except (OSError, UnicodeError) as e:
                self.error = "cannot resolve %s: %s" % (addr[0], e)
                return
            family, _, _, _, sockaddr = infos[0]
            addr = (family, sockaddr)
        if (kind, addr) != (self._kind, self._addr):
            self._close()
            self._kind, self._addr = kind, addr

    def describe(self):
        if self._kind == "unix":
            return "unix:" + self._addr
        if self._kind in ("udp", "tcp"):
            return "%s://%s:%d" % (self._kind, self._addr[1][0], self._addr[1][1])
        return "none (%s)" % (self.error or "no agent socket at " + DEFAULT_PATHS_NOTE)

    def _close(self):
        if self._tcp_pending:
            self.lost += self._tcp_pending.count(b"\n")
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None
        self._tcp_connected = False
        self._tcp_pending = b""

    def close(self):
        self._close()

    def __del__(self):
        try:
            self._close()
        except Exception:
            pass

    def after_fork_in_child(self):
        # A TCP stream shared with the parent would interleave bytes; forget it without
        # shutdown() (which would cut the parent's connection too).
        if self._kind == "tcp" and self._sock is not None:
            try:
                self._sock.detach()
            except OSError:
                pass
            self._sock = None
            self._tcp_connected = False
            self._tcp_pending = b""

    # -- sending --------------------------------------------------------------------------

    def send(self, data):
        """True when the kernel took all of data; False (dropped) otherwise. Never raises."""
        kind = self._kind
        if kind is None:
            if self._explicit is None and self.error is None and self._clock() >= self._next_try:
                self._resolve()
                kind = self._kind
            if kind is None:
                return False
        try:
            if kind == "tcp":
                return self._send_tcp(data)
            sock = self._sock
            if sock is None:
                family = socket.AF_UNIX if kind == "unix" else self._addr[0]
                sock = socket.socket(family, socket.SOCK_DGRAM)
                sock.setblocking(False)
                self._sock = sock
            sock.sendto(data, _FLAGS, self._addr if kind == "unix" else self._addr[1])
            return True
        except OSError as e:
            if kind == "unix" and e.errno in _GONE and self._explicit is None:
                # The agent went away (or moved): look for a socket again after retry_s, and
                # keep sending to the last path meanwhile; a restarted agent rebinds it.
                if self._clock() >= self._next_try:
                    self._resolve()
            return False
        except Exception:  # never into the training loop
            return False

    def _send_tcp(self, data):
        sock = self._sock
        if sock is None:
            if self._clock() < self._next_connect:
                return False
            self._next_connect = self._clock() + self._retry_s
            family, sockaddr = self._addr
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            self._sock = sock
            err = sock.connect_ex(sockaddr)
            if err not in (0, errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK):
                self._close()
                return False
            self._tcp_connected = err == 0
        if not self._tcp_connected:
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLOUT)
            if not poller.poll(0):
                return False  # still connecting
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._close()
                return False
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            self._tcp_connected = True
        try:
            if self._tcp_pending:
                # The rest of a batch the kernel took only part of: the stream must carry
                # whole lines, so it goes first, and a new batch waits behind it (dropped).
                n = sock.send(self._tcp_pending, _FLAGS)
                self._tcp_pending = self._tcp_pending[n:]
                if self._tcp_pending:
                    return False
            n = sock.send(data, _FLAGS)
            if n < len(data):
                self._tcp_pending = data[n:]
            return True
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            self._close()
            self._next_connect = self._clock() + self._retry_s
            return False
