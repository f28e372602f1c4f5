"""Prometheus remote-write 1.0 from Python with no dependencies, for the shell tests and the
hostile-load benchmark: the protobuf written by hand, snappy as literal blocks only (valid
snappy that any decoder inflates, just not compressed). After the reproduction helper in
issue 17; see docs/limits.md."""
import http.client
import struct


def varint(n):
    n &= 2**64 - 1
    out = b""
    while n > 127:
        out += bytes([n & 127 | 128])
        n >>= 7
    return out + bytes([n])


def field(key, data):
    return varint(key << 3 | 2) + varint(len(data)) + data


def timeseries(labels, samples):
    out = b"".join(field(1, field(1, k.encode()) + field(2, v.encode())) for k, v in labels)
    out += b"".join(field(2, b"\x09" + struct.pack("<d", x) + b"\x10" + varint(t)) for t, x in samples)
    return out


def snappy(data):
    """Snappy block format: the length, then literals of at most 64 KiB."""
    out = [varint(len(data))]  # joined once: += on bytes copied a 20 MiB body 300 times
    for i in range(0, len(data), 65536):
        chunk = data[i:i + 65536]
        out += [b"\xf4", struct.pack("<H", len(chunk) - 1), chunk]
    return b"".join(out)


def body(series):
    """series: [(labels [(name, value)], samples [(t_ms, value)])]"""
    return snappy(b"".join(field(1, timeseries(l, s)) for l, s in series))


def post(port, data, token=None, path="/api/v1/write", timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"}
    if token:
        headers["Authorization"] = "Bearer " + token
    c.request("POST", path, data, headers)
    r = c.getresponse()
    return r.status, r.read()[:300]


def push(port, series, token=None):
    return post(port, body(series), token)
