#!/usr/bin/env python3
"""Runs Prometheus's own PromQL test files (promqltest, tests/fixtures/promqltest) against a
real gpuwatch agent: every `load` is pushed over remote-write, every `eval` asked of the HTTP
query API, and the answer compared as promqltest compares it (issue 18).

    python3 tests/promqltest/run.py build/test/gpuwatch                  # all files, summary
    python3 tests/promqltest/run.py GPUWATCH --files functions.test -v    # every case's verdict
    python3 tests/promqltest/run.py GPUWATCH --json out.json --expect tests/promqltest/expected.json
    python3 tests/promqltest/run.py GPUWATCH --files tests/promqltest/smoke.test --strict  # CI

Each case is `pass`, `fail` (a wrong answer, or an error where a result was expected, or a
result where an error was), `error` (the query was refused as not supported or failed to
parse: a construct gpuwatch lacks) or `skip` (outside what this runner can load or compare:
native histograms, staleness markers, range-vector results of instant queries). With
--expect FILE the run fails when a case that FILE lists as passing no longer passes, so the
suite guards what works today while the rest is worked on; --write-expect FILE records the
passing cases.

The format (promql/promqltest/README.md upstream): `load <interval>` then series with
expanding values (`0+10x10`, `1x3`, `_`, `_x3`, `stale`), `clear`, `eval instant at <t> <q>`
and `eval range from <t> to <t> step <d> <q>` followed by expected series or a scalar, with
`expect fail|ordered|warn|info …` lines or the older `eval_fail`, `eval_ordered`,
`eval_warn`, `eval_info`, `expected_fail_message`, `expected_fail_regexp`. Annotations
(warn/info) are not produced by gpuwatch and are not checked; the results still are. Floats
compare as promqltest does: equal within a relative 1e-6, NaN equal to NaN.
"""
import argparse
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rw  # noqa: E402  (tests/rw.py: remote-write by hand)

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "promqltest")
STALE_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
UNITS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000, "w": 604800000,
         "y": 31536000000}


def parse_duration_ms(text):
    """Prometheus durations (1h30m, 5m, 100ms) or a number of seconds."""
    text = text.strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", text):
        return int(round(float(text) * 1000))
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise ValueError("bad duration %r" % text)
    return sum(int(a) * UNITS[b] for a, b in parts)


class Unsupported(Exception):
    """Input this runner cannot load or compare (native histograms, …)."""


def parse_number(tok):
    low = tok.lower()
    if low in ("nan",):
        return math.nan
    if low in ("inf", "+inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "stale":
        return "stale"
    return float(tok)


def expand_values(tokens):
    """promtool's expanding notation: a list of floats, None (missing) or 'stale'."""
    out = []
    for tok in tokens:
        if tok.startswith("{{"):
            raise Unsupported("native histogram")
        if tok == "_":
            out.append(None)
            continue
        m = re.fullmatch(r"_x(\d+)", tok)
        if m:
            out.extend([None] * int(m.group(1)))
            continue
        m = re.fullmatch(r"([-+]?(?:[0-9.eE+-]+?|Inf|NaN))([-+])([0-9.eE]+|Inf|NaN)x(\d+)", tok)
        if m:
            start, sign, step, n = parse_number(m.group(1)), m.group(2), parse_number(m.group(3)), int(m.group(4))
            step = step if sign == "+" else -step
            out.extend(start + i * step for i in range(n + 1))
            continue
        m = re.fullmatch(r"([-+]?[0-9.eE+-]+|[-+]?Inf|NaN)x(\d+)", tok)
        if m:
            out.extend([parse_number(m.group(1))] * (int(m.group(2)) + 1))
            continue
        out.append(parse_number(tok))
    return out


def split_series(line):
    """'metric{a="b"} 1 2 3' -> ('metric{a="b"}', ['1', '2', '3'])."""
    line = line.strip()
    depth, quote, i = 0, None, 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c.isspace() and depth == 0:
            break
        i += 1
    return line[:i], line[i:].split()


def parse_labels(text):
    """'metric{a="b",c="d"}' -> sorted [(name, value)] with __name__."""
    text = text.strip()
    name, _, rest = text.partition("{")
    labels = {}
    if name.strip():
        labels["__name__"] = name.strip()
    rest = rest.rstrip()
    if rest.endswith("}"):
        rest = rest[:-1]
    pos = 0
    while pos < len(rest):
        m = re.match(r"\s*,?\s*([A-Za-z_][A-Za-z0-9_]*|\"[^\"]*\")\s*=\s*", rest[pos:])
        if not m:
            if rest[pos:].strip(" ,"):
                raise Unsupported("label syntax %r" % rest[pos:])
            break
        lname = m.group(1).strip('"')
        pos += m.end()
        q = rest[pos]
        end = pos + 1
        value = ""
        while rest[end] != q:
            if rest[end] == "\\":
                nxt = rest[end + 1]
                value += {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}.get(nxt, "\\" + nxt)
                end += 2
                continue
            value += rest[end]
            end += 1
        labels[lname] = value
        pos = end + 1
    return sorted(labels.items())


class Case:
    def __init__(self, file, line, kind, query, at_ms=None, start_ms=None, end_ms=None, step_ms=None):
        self.file, self.line, self.kind, self.query = file, line, kind, query
        self.at_ms, self.start_ms, self.end_ms, self.step_ms = at_ms, start_ms, end_ms, step_ms
        self.fail = False
        self.fail_msg = None
        self.fail_regexp = None
        self.ordered = False
        self.annotations = False
        self.expected = []  # [(labels or None for a scalar, [values])]
        self.unsupported = None

    def name(self):
        return "%s:%d" % (self.file, self.line)


def parse_file(path):
    """Yields ('load', interval_ms, [(labels, values)]), ('clear',) and ('eval', Case)."""
    fname = os.path.basename(path)
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        lineno = i
        if not line or line.startswith("#"):
            continue
        body = []
        while i < len(lines) and lines[i].strip() and not re.match(r"(load|clear|eval)\b", lines[i].strip()):
            if not lines[i].strip().startswith("#"):
                body.append((i + 1, lines[i].strip()))
            i += 1
        if line.startswith("load"):
            m = re.match(r"load(_with_nhcb)?\s+(\S+)", line)
            series = []
            # Metric names whose native-histogram samples this runner cannot load: queries
            # naming them are skipped.
            unsupported = set()
            for _, b in body:
                s, vals = split_series(b)
                labels = parse_labels(s)
                name = dict(labels).get("__name__", "")
                if m.group(1):
                    unsupported.add(re.sub(r"_bucket$", "", name))
                try:
                    series.append((labels, expand_values(vals)))
                except Unsupported:
                    unsupported.add(name)
            yield ("load", parse_duration_ms(m.group(2)), series, unsupported)
        elif line == "clear":
            yield ("clear",)
        elif line.startswith("eval"):
            m = re.match(r"(eval(?:_fail|_ordered|_warn|_info)?)\s+instant\s+at\s+(\S+)\s+(.*)", line)
            if m:
                case = Case(fname, lineno, "instant", m.group(3), at_ms=parse_duration_ms(m.group(2)))
            else:
                m = re.match(r"(eval(?:_fail|_ordered|_warn|_info)?)\s+range\s+from\s+(\S+)\s+to\s+(\S+)\s+step\s+(\S+)\s+(.*)", line)
                if not m:
                    raise ValueError("%s: cannot read %r" % (fname, line))
                case = Case(fname, lineno, "range", m.group(5),
                            start_ms=parse_duration_ms(m.group(2)), end_ms=parse_duration_ms(m.group(3)),
                            step_ms=parse_duration_ms(m.group(4)))
            variant = m.group(1)
            case.fail = variant == "eval_fail"
            case.ordered = variant == "eval_ordered"
            case.annotations = variant in ("eval_warn", "eval_info")
            for _, b in body:
                if b.startswith("expect "):
                    em = re.match(r"expect\s+(\w+)(?:\s+(msg|regex):\s*(.*))?", b)
                    kind = em.group(1)
                    if kind == "fail":
                        case.fail = True
                        if em.group(2) == "msg":
                            case.fail_msg = em.group(3).strip().strip('"')
                        elif em.group(2) == "regex":
                            case.fail_regexp = em.group(3).strip().strip('"')
                    elif kind == "ordered":
                        case.ordered = True
                    else:
                        case.annotations = True
                    continue
                if b.startswith("expected_fail_message"):
                    case.fail_msg = b.split(None, 1)[1].strip()
                    continue
                if b.startswith("expected_fail_regexp"):
                    case.fail_regexp = b.split(None, 1)[1].strip()
                    continue
                try:
                    if re.fullmatch(r"[-+]?([0-9.eE+-]+|Inf|NaN)", b):
                        case.expected.append((None, [parse_number(b)]))
                        continue
                    if b.startswith('"'):
                        case.unsupported = "string result"
                        continue
                    s, vals = split_series(b)
                    case.expected.append((parse_labels(s), expand_values(vals)))
                except (Unsupported, ValueError, IndexError) as e:
                    case.unsupported = str(e)
            yield ("eval", case)
        else:
            raise ValueError("%s:%d: unknown command %r" % (fname, i, line))


class Agent:
    def __init__(self, binary, workdir):
        self.binary, self.workdir, self.proc, self.port, self.n = binary, workdir, None, None, 0

    def start(self):
        self.stop()
        self.n += 1
        data = os.path.join(self.workdir, "data%d" % self.n)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        log = open(os.path.join(self.workdir, "agent%d.log" % self.n), "w")
        self.proc = subprocess.Popen(
            [self.binary, "up", "--listen", "127.0.0.1:%d" % self.port, "--data-dir", data,
             "--nvml-lib", "/nonexistent", "--kmsg", "off", "--job-socket", "off",
             "--keep-history", "off", "--learn-baselines", "off", "--log-level", "error"],
            stdout=log, stderr=subprocess.STDOUT)
        for _ in range(200):
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("agent did not start (see %s)" % log.name)
        self.token = open(os.path.join(data, "admin.token")).read().strip()

    def stop(self):
        if self.proc:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def push(self, interval_ms, series):
        # A series listed twice in one load: the later line's value wins at a timestamp, as
        # promqltest's loader keeps it.
        merged = {}
        for labels, values in series:
            points = merged.setdefault(tuple(labels), {})
            for k, v in enumerate(values):
                if v is not None:
                    points[k * interval_ms] = STALE_NAN if v == "stale" else v
        batch = []
        for labels, points in merged.items():
            samples = sorted(points.items())
            if samples:
                batch.append((list(labels), samples))
            if len(batch) >= 500:
                self._push(batch)
                batch = []
        if batch:
            self._push(batch)

    def _push(self, batch):
        status, body = rw.push(self.port, batch, self.token)
        if status != 204:
            raise RuntimeError("remote-write: %s %s" % (status, body))

    def query(self, case):
        if case.kind == "instant":
            params = {"query": case.query, "time": "%.3f" % (case.at_ms / 1000)}
            path = "/api/v1/query"
        else:
            params = {"query": case.query, "start": "%.3f" % (case.start_ms / 1000),
                      "end": "%.3f" % (case.end_ms / 1000), "step": "%.3f" % (case.step_ms / 1000)}
            path = "/api/v1/query_range"
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("POST", path, urllib.parse.urlencode(params),
                  {"Content-Type": "application/x-www-form-urlencoded"})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"{}")


def to_float(s):
    return {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}.get(s) if s in ("NaN", "+Inf", "-Inf") else float(s)


def almost_equal(a, b):
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    abs_sum = abs(a) + abs(b)
    diff = abs(a - b)
    min_normal = 2.2250738585072014e-308
    if a == 0 or b == 0 or abs_sum < min_normal:
        return diff < 1e-6 * min_normal
    return diff / min(abs_sum, 1.7976931348623157e308) < 1e-6


def labels_key(labels):
    return tuple(labels)


def compare(case, status, reply):
    """None when the reply matches the case, else what differs."""
    if status != 200:
        err = reply.get("error", "")
        if case.fail:
            if case.fail_msg and case.fail_msg not in err:
                return "error %r, expected message %r" % (err, case.fail_msg)
            if case.fail_regexp and not re.search(case.fail_regexp, err):
                return "error %r, expected to match %r" % (err, case.fail_regexp)
            return None
        return "error %d %s" % (status, err)
    if case.fail:
        return "succeeded, expected an error"
    data = reply["data"]
    rtype = data["resultType"]
    if rtype == "scalar":
        got = {None: [to_float(data["result"][1])]}
        order = [None]
    elif rtype == "vector":
        got, order = {}, []
        for s in data["result"]:
            k = labels_key(sorted(s["metric"].items()))
            got[k] = [to_float(s["value"][1])]
            order.append(k)
    elif rtype == "matrix":
        got, order = {}, []
        for s in data["result"]:
            k = labels_key(sorted(s["metric"].items()))
            got[k] = {int(round(float(t) * 1000)): to_float(v) for t, v in s["values"]}
            order.append(k)
    else:
        return "result type %s" % rtype
    want = {}
    for labels, values in case.expected:
        want[None if labels is None else labels_key(labels)] = values
    if len(want) != len(got):
        return "%d series, expected %d: got %s" % (len(got), len(want), sorted(map(str, got))[:6])
    for k, values in want.items():
        if k not in got:
            if k is None and rtype == "vector" and len(got) == 1 and () in got:
                return "vector {} where a scalar was expected"
            return "missing %s; got %s" % (dict(k) if k else "scalar", sorted(map(str, got))[:4])
        g = got[k]
        if case.kind == "range":
            expect = {case.start_ms + i * case.step_ms: v for i, v in enumerate(values) if v is not None}
            if set(expect) != set(g):
                return "%s: points at %s, expected %s" % (dict(k), sorted(g)[:8], sorted(expect)[:8])
            for t, v in expect.items():
                if v == "stale" or not almost_equal(v, g[t]):
                    return "%s at %d: %r, expected %r" % (dict(k), t, g[t], v)
        else:
            if not almost_equal(values[0], g[0]):
                return "%s: %r, expected %r" % (dict(k) if k else "scalar", g[0], values[0])
    if case.ordered and case.kind == "instant":
        want_order = [None if l is None else labels_key(l) for l, _ in case.expected]
        if want_order != order:
            return "order %s, expected %s" % (order, want_order)
    return None


NOT_SUPPORTED = re.compile(r"not supported|unknown function|is not supported by gpuwatch")


def run_file(agent, path, verbose):
    results = []
    histogram_names = set()
    stale_names = set()
    loaded = False
    for cmd in parse_file(path):
        if cmd[0] == "clear":
            loaded = False
            stale_names, histogram_names = set(), set()
            agent.start()
            continue
        if cmd[0] == "load":
            _, interval, series, unsupported = cmd
            if not loaded:
                agent.start()
                loaded = True
            histogram_names |= unsupported
            for labels, vals in series:
                if any(v == "stale" for v in vals):
                    # Only queries that name such a series depend on staleness handling.
                    stale_names.add(dict(labels).get("__name__", ""))
            agent.push(interval, series)
            continue
        case = cmd[1]
        if not loaded:
            agent.start()
            loaded = True
        def named(names):
            return [n for n in names if not n or re.search(r"\b%s\b" % re.escape(n), case.query)]
        skip = (case.unsupported or ("native histograms" if named(histogram_names) else None)
                or ("staleness markers" if named(stale_names) else None))
        if skip:
            results.append((case, "skip", skip))
            continue
        try:
            status, reply = agent.query(case)
        except (OSError, ValueError) as e:
            results.append((case, "fail", "transport: %s" % e))
            continue
        if status != 200 and not case.fail and NOT_SUPPORTED.search(reply.get("error", "")):
            results.append((case, "error", reply.get("error", "")))
            continue
        if status == 200 and case.kind == "instant" and reply["data"]["resultType"] == "matrix":
            results.append((case, "skip", "range vector result"))
            continue
        diff = compare(case, status, reply)
        results.append((case, "pass" if diff is None else "fail", diff or ""))
    if verbose:
        for case, verdict, why in results:
            print("%-5s %s %s%s" % (verdict, case.name(), case.query, ("  -- " + why) if why else ""))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary")
    ap.add_argument("--files", nargs="*", help="test files (default: every *.test in the fixtures)")
    ap.add_argument("--json", help="write every case's verdict here")
    ap.add_argument("--expect", help="fail if a case listed as passing in this file fails")
    ap.add_argument("--write-expect", help="write the passing cases here")
    ap.add_argument("--strict", action="store_true", help="fail on any fail or error verdict")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if not args.files and not os.path.isdir(FIXTURES):
        print("promqltest: no fixtures at %s; nothing to run" % FIXTURES)
        return 0
    files = args.files or sorted(f for f in os.listdir(FIXTURES) if f.endswith(".test"))
    workdir = tempfile.mkdtemp(prefix="gw_promqltest_")
    agent = Agent(os.path.abspath(args.binary), workdir)
    totals = {"pass": 0, "fail": 0, "error": 0, "skip": 0}
    verdicts = {}
    try:
        for f in files:
            path = f if os.path.exists(f) else os.path.join(FIXTURES, f)
            res = run_file(agent, path, args.verbose)
            counts = {k: sum(1 for _, v, _ in res if v == k) for k in totals}
            for k in totals:
                totals[k] += counts[k]
            print("%-28s pass %4d  fail %4d  error %4d  skip %4d" % (
                os.path.basename(f), counts["pass"], counts["fail"], counts["error"], counts["skip"]))
            for case, verdict, why in res:
                verdicts["%s %s" % (case.name(), case.query)] = {"verdict": verdict, "why": why}
    finally:
        agent.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print("%-28s pass %4d  fail %4d  error %4d  skip %4d" % (
        "total", totals["pass"], totals["fail"], totals["error"], totals["skip"]))
    if args.json:
        json.dump({"totals": totals, "cases": verdicts}, open(args.json, "w"), indent=1, sort_keys=True)
    if args.write_expect:
        passing = sorted(k for k, v in verdicts.items() if v["verdict"] == "pass")
        json.dump(passing, open(args.write_expect, "w"), indent=0)
    if args.strict and (totals["fail"] or totals["error"]):
        return 1
    if args.expect:
        want = json.load(open(args.expect))
        lost = [k for k in want if verdicts.get(k, {}).get("verdict") != "pass"]
        for k in lost:
            print("REGRESSION: %s -- %s" % (k, verdicts.get(k, {}).get("why", "case not run")))
        if lost:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
