#!/usr/bin/env python3
"""Runs every query of NVIDIA's public dcgm-exporter Grafana dashboard (grafana.com 12239,
tests/fixtures/grafana) against a gpuwatch agent on the mock NVML, the way Grafana sends them
(issue 18): each must come back with data.

    python3 tests/grafana/dashboard_queries.py build/test/gpuwatch build/test/libgpuwatch-mock-nvml.so
    python3 tests/grafana/dashboard_queries.py GPUWATCH MOCK -v                # every request's verdict
    python3 tests/grafana/dashboard_queries.py GPUWATCH MOCK --shape 8xA100    # another mock shape

The agent runs `gpuwatch up` with a fresh --data-dir, a 1 s hardware tier, on a free loopback
port, and is stopped by PID at the end. Once it has samples, the runner does what Grafana does
when the dashboard is opened:

- Templating: each `query` variable (`label_values(metric{…}, label)`, `label_values(label)`,
  `metrics(re)`, `label_names()`, `query_result(q)`) is asked of the agent as Grafana's
  Prometheus data source asks it: `label_values(metric, label)` through /api/v1/series
  (GET and POST) and, as newer Grafana does, /api/v1/label/<label>/values?match[]=…; the answers
  must agree and not be empty. Variables are resolved in order, each with the values of the
  ones before it, sorted and filtered by the variable's `sort` and `regex`.
- Three selections per dashboard: All (a multi-value or include-All variable becomes the regex
  alternation `(a|b)` of its escaped values, or its allValue), the first value alone, and two
  values. Values are escaped as Grafana's Prometheus data source escapes them (regex
  metacharacters get a doubled backslash); the agent runs with a dotted --hostname so that
  path is exercised.
- Built-in variables as Grafana computes them for the time range and the panel's width:
  `$__interval`/`$__interval_ms` (the range over max data points, rounded as Grafana rounds
  it, at least the data source's scrape interval or the query's min interval, times
  intervalFactor), `$__rate_interval` (max(interval + scrape, 4 x scrape)), `$__range`,
  `$__range_s`, `$__range_ms`, `${__from}`, `${__to}`.
- Two data source settings ("profiles"): Grafana's defaults (scrape interval unset = 15 s) over
  the dashboard's own time range, and a scrape interval equal to the agent's tier (1 s) over
  the last 5 minutes.
- Every panel target is run both as an instant query (time = now) and as a range query (start
  and end rounded down to the step, as Grafana does), each by GET and by POST form-encoded. Each
  must answer success with at least one series holding a non-NaN sample.

An empty answer is explained: the metric has no series at all, a label the query filters on is
missing, or the expression's selectors have data and the operation empties it. A query may be
listed as expected-empty in tests/grafana/expected_empty.json, a JSON list of
{"dashboard": FILE, "expr": EXPR as written in the dashboard, "reason": WHY}, and only with a
written reason; one so listed that returns data fails the run too, so the list stays honest.
It is empty: on the mock's H100s every query of both dashboards returns data.

Exit status: 0 when every query passed, 1 when one failed (each named with its cause), 2 when
the agent could not be started or never had data.
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
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "grafana")
EXPECTED_EMPTY = os.path.join(HERE, "expected_empty.json")
NOT_SUPPORTED = re.compile(r"not supported|unknown function|parse error|unexpected", re.I)
UNITS_MS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000, "w": 604800000,
            "y": 31536000000}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
            "and", "or", "unless", "atan2", "inf", "nan"}


# ---------------------------------------------------------------------------------------------
# Grafana's arithmetic (public/app/core/utils/rangeutil.ts, pkg/promlib/models/query.go,
# pkg/components/gtime).

def parse_duration_ms(text):
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", text.strip())
    if not parts or "".join(a + b for a, b in parts) != text.strip():
        raise ValueError("bad duration %r" % text)
    return int(sum(float(a) * UNITS_MS[b] for a, b in parts))


def round_interval_ms(ms):
    """rangeutil.roundInterval: the interval Grafana rounds range/maxDataPoints to."""
    table = [(15, 10), (35, 20), (75, 50), (150, 100), (350, 200), (750, 500), (1500, 1000),
             (3500, 2000), (7500, 5000), (12500, 10000), (17500, 15000), (25000, 20000),
             (45000, 30000), (90000, 60000), (210000, 120000), (450000, 300000),
             (1050000, 600000), (2100000, 1200000), (5400000, 3600000), (9000000, 7200000),
             (16200000, 10800000), (32400000, 21600000), (86400000, 43200000),
             (604800000, 86400000), (1209600000, 604800000), (3888000000, 2592000000)]
    for limit, value in table:
        if ms < limit:
            return value
    return 31536000000


def format_interval(ms):
    """gtime.FormatInterval: the text $__interval becomes."""
    for unit, size in (("y", UNITS_MS["y"]), ("d", UNITS_MS["d"]), ("h", UNITS_MS["h"]),
                       ("m", UNITS_MS["m"]), ("s", UNITS_MS["s"])):
        if ms >= size:
            return "%d%s" % (ms // size, unit)
    return "%dms" % max(ms, 1)


def go_duration(ms):
    """Go's time.Duration.String(), which $__rate_interval is written with (1m0s, 4s, 1.5s)."""
    if ms == 0:
        return "0s"
    if ms < 1000:
        return "%dms" % ms
    h, rest = divmod(ms, 3600000)
    m, rest = divmod(rest, 60000)
    s = rest / 1000
    text = ("%g" % s if s != int(s) else "%d" % s) + "s"
    if h:
        return "%dh%dm%s" % (h, m, text)
    if m:
        return "%dm%s" % (m, text)
    return text


def relative_ms(text, now_ms):
    """'now', 'now-15m' (Grafana's relative times; rounding such as now/d is not used here)."""
    text = text.strip()
    if text == "now":
        return now_ms
    m = re.fullmatch(r"now-(\S+)", text)
    if not m:
        raise ValueError("time %r: only now and now-<duration> are supported here" % text)
    return now_ms - parse_duration_ms(m.group(1))


class TimeRange:
    def __init__(self, from_ms, to_ms):
        self.from_ms, self.to_ms = from_ms, to_ms


def panel_time_range(panel, dash_from, dash_to, now_ms):
    """The dashboard range, with the panel's relative time (timeFrom) and timeShift."""
    to_ms = relative_ms(dash_to, now_ms)
    from_ms = relative_ms(dash_from, now_ms)
    if panel.get("timeFrom"):
        from_ms = to_ms - parse_duration_ms(panel["timeFrom"].lstrip("now-"))
    if panel.get("timeShift"):
        shift = parse_duration_ms(panel["timeShift"])
        from_ms, to_ms = from_ms - shift, to_ms - shift
    return TimeRange(from_ms, to_ms)


def intervals(target, panel, tr, profile):
    """(interval_ms, step_ms, rate_interval_ms) for one target, as Grafana computes them."""
    scrape = profile["scrape"] or "15s"
    scrape_ms = parse_duration_ms(scrape)
    # The low limit: the query's own min interval, else the panel's, else the data source's
    # scrape interval (the frontend's lowLimit; the backend's GetIntervalFrom).
    requested = target.get("interval") or panel.get("interval") or ""
    if requested.startswith("$") or requested.startswith("${"):
        requested = ""  # $__interval / $__rate_interval as the min step: the computed one
    low_ms = parse_duration_ms(requested.lstrip(">")) if requested else scrape_ms
    width = int(panel.get("gridPos", {}).get("w", 24) / 24.0 * 1900)  # a 1920 px screen
    max_points = int(panel.get("maxDataPoints") or width or 1500)
    span = max(tr.to_ms - tr.from_ms, 1)
    interval = round_interval_ms(span / max_points)
    interval = max(interval, low_ms)
    safe = round_interval_ms(span / 11000)  # Grafana's 11000-point safety limit
    interval = max(interval, safe)
    factor = int(target.get("intervalFactor") or 1)
    step = interval * factor
    rate_low = low_ms if requested else scrape_ms
    rate = max(interval + rate_low, 4 * rate_low)
    return interval, step, rate


def align_down(ms, step_ms):
    return (ms // step_ms) * step_ms


def seconds(ms):
    """A time or step as Grafana writes it (strconv.FormatFloat 'f', -1): 1796236554, 0.5."""
    whole, frac = divmod(int(ms), 1000)
    return str(whole) if not frac else ("%d.%03d" % (whole, frac)).rstrip("0")


# ---------------------------------------------------------------------------------------------
# Template variables (public/app/features/templating/template_srv.ts, the Prometheus data
# source's interpolateQueryExpr and its escaping).

VAR_RE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^}]+))?(?::([^}]+))?\}")


def regular_escape(value):
    return value.replace("\\", "\\\\").replace("'", "\\\\'")


def special_regex_escape(value):
    value = value.replace("\\", "\\\\\\\\")
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)


def format_variable(var, values, fmt):
    """The text Grafana puts in the query for a variable holding `values`."""
    is_all = values == "__all__"
    if is_all:
        if var.get("allValue"):
            return var["allValue"]
        values = var["_options"]
    if fmt == "raw":
        return ",".join(values)
    if fmt == "pipe":
        return "|".join(values)
    if fmt == "csv":
        return ",".join(values)
    if fmt == "regex":
        escaped = [re.escape(v) for v in values]
        return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"
    if not var.get("multi") and not var.get("includeAll"):
        return regular_escape(values[0])
    escaped = [special_regex_escape(v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def interpolate(text, variables, builtins):
    def sub(m):
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if name in builtins:
            return builtins[name]
        var = variables.get(name)
        if var is None or "_current" not in var:
            return m.group(0)  # unknown: left as Grafana leaves it
        return format_variable(var, var["_current"], fmt)
    return VAR_RE.sub(sub, text)


def builtins_for(tr, interval_ms, rate_ms):
    span = tr.to_ms - tr.from_ms
    return {
        "__interval": format_interval(interval_ms), "__interval_ms": str(interval_ms),
        "__rate_interval": go_duration(rate_ms), "__rate_interval_ms": str(rate_ms),
        "__range": "%ds" % round(span / 1000), "__range_s": str(round(span / 1000)),
        "__range_ms": str(span), "__from": str(tr.from_ms), "__to": str(tr.to_ms),
    }


# ---------------------------------------------------------------------------------------------
# The agent.

class Agent:
    def __init__(self, binary, mock, workdir, shape, hostname, gpu_interval):
        self.binary, self.mock, self.workdir = binary, mock, workdir
        self.shape, self.hostname, self.gpu_interval = shape, hostname, gpu_interval
        self.proc, self.port, self.log_path = None, None, None

    def start(self, timeout_s):
        for attempt in range(3):  # a port taken between the probe and the agent's bind
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            data = os.path.join(self.workdir, "data%d" % attempt)
            self.log_path = os.path.join(self.workdir, "agent%d.log" % attempt)
            env = dict(os.environ, GPUWATCH_MOCK_NVML=self.shape)
            env.pop("GPUWATCH_MOCK_NVML_TIME_SCALE", None)
            with open(self.log_path, "w") as log:
                self.proc = subprocess.Popen(
                    [self.binary, "up", "--nvml-lib", self.mock, "--data-dir", data,
                     "--listen", "127.0.0.1:%d" % self.port, "--kmsg", "off",
                     "--job-socket", "off", "--gpu-interval", self.gpu_interval,
                     "--hostname", self.hostname],
                    stdout=log, stderr=subprocess.STDOUT, env=env)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if "cannot listen" in self.log():
                    break
                if self.proc.poll() is not None:
                    raise RuntimeError("gpuwatch up exited with %d:\n%s" % (self.proc.returncode, self.log()[-3000:]))
                if self.ours():
                    return
                time.sleep(0.1)
            else:
                raise RuntimeError("gpuwatch up did not answer within %ds:\n%s" % (timeout_s, self.log()[-3000:]))
            self.stop()
        raise RuntimeError("gpuwatch up could not listen:\n%s" % self.log()[-3000:])

    def ours(self):
        """The agent on the port is the one started here (its Hostname), not a stranger."""
        try:
            status, body = self.request("GET", "/api/v1/label/Hostname/values", {})
        except (OSError, ValueError):
            return False
        return status == 200 and self.hostname in body.get("data", [])

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                print("dashboard_queries: gpuwatch (pid %d) ignored SIGTERM for 10 s; killed" % self.proc.pid)
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def request(self, method, path, params, timeout=30):
        """(HTTP status, decoded JSON). params: a dict, or a list of pairs for match[]."""
        body = urllib.parse.urlencode(params, doseq=True)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            if method == "GET":
                c.request("GET", path + ("?" + body if body else ""))
            else:
                c.request("POST", path, body, {"Content-Type": "application/x-www-form-urlencoded"})
            r = c.getresponse()
            raw = r.read()
        finally:
            c.close()
        try:
            return r.status, json.loads(raw or b"{}")
        except ValueError:
            return r.status, {"status": "error", "error": raw[:300].decode("utf-8", "replace")}


# ---------------------------------------------------------------------------------------------
# Reading the dashboard.

def panels_of(dash):
    """Every panel, rows' collapsed panels included."""
    for p in dash.get("panels", []):
        yield p
        for q in p.get("panels", []):
            yield q
    for row in dash.get("rows", []):  # dashboards older than schema 16
        for p in row.get("panels", []):
            yield p


def targets_of(dash):
    """(panel, target) for every Prometheus target with an expression."""
    for p in panels_of(dash):
        for t in p.get("targets", []) or []:
            if t.get("expr") and not t.get("hide"):
                yield p, t


def variable_query(var):
    q = var.get("query")
    if isinstance(q, dict):
        q = q.get("query", "")
    return q or var.get("definition", "")


def sort_values(values, sort):
    """Grafana's variable sort: 1/2 alphabetical, 3/4 numerical, 5/6 case-insensitive."""
    if sort in (1, 2):
        values = sorted(values)
    elif sort in (3, 4):
        def num(v):
            m = re.search(r"-?\d+(\.\d+)?", v)
            return float(m.group(0)) if m else -math.inf
        values = sorted(values, key=num)
    elif sort in (5, 6):
        values = sorted(values, key=str.lower)
    if sort in (2, 4, 6):
        values = values[::-1]
    return values


# ---------------------------------------------------------------------------------------------
# Checking answers.

def has_data(reply):
    """(series with a non-NaN sample, why not) for a query's JSON answer."""
    data = reply.get("data") or {}
    rtype, result = data.get("resultType"), data.get("result")
    if rtype == "scalar":
        return (0, "scalar NaN") if result[1] == "NaN" else (1, "")
    if rtype not in ("vector", "matrix"):
        return 0, "result type %r" % rtype
    n = 0
    for s in result or []:
        values = [s["value"]] if rtype == "vector" else s.get("values", [])
        if any(v[1] != "NaN" for v in values):
            n += 1
    if n:
        return n, ""
    return 0, "%d series, every sample NaN" % len(result) if result else "no series"


def selectors(expr):
    """(metric, [(label, op, value)]) for each vector selector of a PromQL expression."""
    out = []
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    i = 0
    while i < len(text):
        c = text[i]
        if c in "\"'`":
            j = i + 1
            while j < len(text) and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == "[":
            i = text.find("]", i) + 1 or len(text)
            continue
        m = re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", text[i:])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_.")):
            name, j = m.group(0), i + m.end()
            rest = text[j:].lstrip()
            if rest.startswith("("):
                i = j
                continue
            matchers = []
            if rest.startswith("{"):
                k = j + (len(text[j:]) - len(rest))
                depth_end = k
                quote = None
                while depth_end < len(text):
                    ch = text[depth_end]
                    if quote:
                        if ch == "\\":
                            depth_end += 2
                            continue
                        if ch == quote:
                            quote = None
                    elif ch in "\"'`":
                        quote = ch
                    elif ch == "}":
                        break
                    depth_end += 1
                body = text[k + 1:depth_end]
                for lm in re.finditer(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', body):
                    matchers.append((lm.group(1), lm.group(2), lm.group(3)))
                j = depth_end + 1
            if name.lower() not in KEYWORDS:
                out.append((name, matchers))
            i = j
            continue
        if m:
            i += m.end()
            continue
        i += 1
    return out


def explain_empty(agent, expr, start_s, end_s):
    """Why a query is empty: a missing series, a missing label, or the operation."""
    reasons = []
    for metric, matchers in selectors(expr):
        rng = {"start": "%.3f" % start_s, "end": "%.3f" % end_s}
        status, reply = agent.request("GET", "/api/v1/series", dict(rng, **{"match[]": metric}))
        if status != 200 or not reply.get("data"):
            reasons.append("missing series: no %s at all" % metric)
            continue
        for label, op, value in matchers:
            sel = '%s{%s%s"%s"}' % (metric, label, op, value)
            status, reply = agent.request("GET", "/api/v1/series", dict(rng, **{"match[]": sel}))
            if status == 200 and reply.get("data"):
                continue
            status, lv = agent.request("GET", "/api/v1/label/%s/values" % label, dict(rng, **{"match[]": metric}))
            if status == 200 and not lv.get("data"):
                reasons.append("missing label: %s has no %r label" % (metric, label))
            else:
                reasons.append("no %s matches %s%s\"%s\" (values: %s)" % (
                    metric, label, op, value, ", ".join(lv.get("data", [])[:6])))
    if not reasons:
        reasons.append("its selectors have data: the operation empties it")
    return "; ".join(reasons)


# ---------------------------------------------------------------------------------------------
# The run.

class Query:
    """One expression of one dashboard: a panel target or a templating query."""

    def __init__(self, dash_name, where, expr):
        self.dash_name, self.where, self.expr = dash_name, where, expr
        self.runs = 0
        self.failures = []  # (variant, why)
        self.series = []
        self.expected_empty = None  # the reason, when listed


class Runner:
    def __init__(self, agent, args):
        self.agent, self.args = agent, args
        self.verbose = args.verbose
        self.queries = []

    def log(self, text):
        if self.verbose:
            print(text)

    def resolve_variables(self, dash, query_index, tr, profile, selection):
        """Grafana's variables for one selection, each queried with the ones before it."""
        variables = {}
        interval, _, rate = intervals({}, {}, tr, profile)
        builtins = builtins_for(tr, interval, rate)
        for var in dash.get("templating", {}).get("list", []):
            var = dict(var)
            name, vtype = var.get("name"), var.get("type")
            variables[name] = var
            if vtype == "query":
                raw = variable_query(var)
                expr = interpolate(raw, variables, builtins)
                q = query_index.setdefault(("templating", name, raw), Query(
                    dash["_file"], "variable $%s" % name, raw))
                values = self.variable_values(q, expr, tr, selection)
            elif vtype == "custom":
                values = [v.strip() for v in re.split(r"(?<!\\),", var.get("query", "")) if v.strip()]
            elif vtype in ("constant", "textbox"):
                values = [var.get("query", "")]
            elif vtype == "interval":
                values = [v.strip() for v in var.get("query", "").split(",") if v.strip()]
            else:
                continue  # datasource, adhoc: not part of the query text
            if var.get("regex"):
                rx = re.compile(var["regex"].strip("/"))
                kept = []
                for v in values:
                    m = rx.search(v)
                    if m:
                        kept.append(m.group(1) if m.groups() else v)
                values = kept
            values = sort_values(list(dict.fromkeys(values)), var.get("sort", 0))
            var["_options"] = values
            if not values:
                var["_current"] = [""]
            elif selection == "all" and var.get("includeAll"):
                var["_current"] = "__all__"
            elif selection == "all" and var.get("multi"):
                var["_current"] = values
            elif selection == "two" and var.get("multi") and len(values) >= 2:
                var["_current"] = [values[1], values[-1]] if len(values) > 2 else values[:2]
            else:
                var["_current"] = [values[0]]
        return variables

    def variable_values(self, q, expr, tr, selection):
        """A templating query's values, asked as Grafana asks them; checked like a target."""
        rng = {"start": str(tr.from_ms // 1000), "end": str(-(-tr.to_ms // 1000))}
        m = re.fullmatch(r"\s*label_values\((?:(.*),)?\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", expr, re.S)
        answers = {}
        if m and m.group(1):
            match = m.group(1).strip()
            label = m.group(2)
            for method in ("GET", "POST"):
                status, reply = self.agent.request(method, "/api/v1/series", dict(rng, **{"match[]": match}))
                if status == 200 and reply.get("status") == "success":
                    answers["series " + method] = sorted({s[label] for s in reply["data"] if label in s})
                else:
                    answers["series " + method] = "HTTP %d %s" % (status, reply.get("error", ""))
            status, reply = self.agent.request("GET", "/api/v1/label/%s/values" % label,
                                               dict(rng, **{"match[]": match}))
            answers["label values"] = (sorted(reply["data"]) if status == 200 and reply.get("status") == "success"
                                       else "HTTP %d %s" % (status, reply.get("error", "")))
        elif m:
            status, reply = self.agent.request("GET", "/api/v1/label/%s/values" % m.group(2), rng)
            answers["label values"] = (sorted(reply["data"]) if status == 200 and reply.get("status") == "success"
                                       else "HTTP %d %s" % (status, reply.get("error", "")))
        elif re.fullmatch(r"\s*metrics\((.*)\)\s*", expr):
            rx = re.compile(re.fullmatch(r"\s*metrics\((.*)\)\s*", expr).group(1).strip())
            status, reply = self.agent.request("GET", "/api/v1/label/__name__/values", rng)
            answers["label values"] = (sorted(v for v in reply["data"] if rx.search(v)) if status == 200
                                       else "HTTP %d %s" % (status, reply.get("error", "")))
        elif re.fullmatch(r"\s*label_names\(\)\s*", expr):
            for method in ("GET", "POST"):
                status, reply = self.agent.request(method, "/api/v1/labels", rng)
                answers["labels " + method] = (sorted(reply["data"]) if status == 200
                                               else "HTTP %d %s" % (status, reply.get("error", "")))
        elif re.fullmatch(r"\s*query_result\((.*)\)\s*", expr, re.S):
            inner = re.fullmatch(r"\s*query_result\((.*)\)\s*", expr, re.S).group(1)
            for method in ("GET", "POST"):
                status, reply = self.agent.request(method, "/api/v1/query", {"query": inner, "time": "%.3f" % (tr.to_ms / 1000)})
                if status == 200:
                    answers["query " + method] = sorted(
                        "%s %s" % (json.dumps(r.get("metric", {}), sort_keys=True), r["value"][1])
                        for r in reply["data"]["result"])
                else:
                    answers["query " + method] = "HTTP %d %s" % (status, reply.get("error", ""))
        else:
            q.runs += 1
            q.failures.append((selection, "templating query form not understood: %r" % expr))
            return []
        values = None
        for how, got in answers.items():
            q.runs += 1
            variant = "%s %s" % (selection, how)
            if isinstance(got, str):
                q.failures.append((variant, got))
                self.log("FAIL  %s  %s: %s" % (q.where, variant, got))
            elif not got:
                why = "no values for %s" % expr
                if m and m.group(1):
                    why += "; " + explain_empty(self.agent, m.group(1), tr.from_ms / 1000, tr.to_ms / 1000)
                    if why.endswith("the operation empties it"):
                        why = "missing label: no series of %s has a %r label" % (m.group(1), m.group(2))
                q.failures.append((variant, why))
                self.log("FAIL  %s  %s: empty" % (q.where, variant))
            else:
                if values is not None and got != values:
                    q.failures.append((variant, "answers differ: %s vs %s" % (got, values)))
                values = got if values is None else values
                q.series.append(len(got))
                self.log("ok    %s  %s: %s" % (q.where, variant, got))
        return values or []

    def run_target(self, q, dash, panel, target, variables, profile, selection, now_ms):
        dash_time = dash.get("time", {"from": "now-6h", "to": "now"})
        if profile["range"]:
            dash_time = {"from": profile["range"], "to": "now"}
        tr = panel_time_range(panel, dash_time["from"], dash_time["to"], now_ms)
        interval, step, rate = intervals(target, panel, tr, profile)
        expr = interpolate(target["expr"], variables, builtins_for(tr, step, rate))
        start = align_down(tr.from_ms, step)
        end = align_down(tr.to_ms, step)
        instant = {"query": expr, "time": seconds(tr.to_ms)}
        ranged = {"query": expr, "start": seconds(start), "end": seconds(end), "step": seconds(step)}
        answers = {}
        for kind, path, params in (("instant", "/api/v1/query", instant),
                                   ("range", "/api/v1/query_range", ranged)):
            for method in ("GET", "POST"):
                variant = "%s %s %s %s" % (profile["name"], selection, kind, method)
                q.runs += 1
                try:
                    status, reply = self.agent.request(method, path, params)
                except (OSError, http.client.HTTPException) as e:
                    q.failures.append((variant, "transport: %s" % e))
                    continue
                if status != 200 or reply.get("status") != "success":
                    err = reply.get("error", "")
                    kind_of = "unsupported" if NOT_SUPPORTED.search(err) else "error"
                    why = "%s: HTTP %d %s: %s (query %s)" % (kind_of, status, reply.get("errorType", ""), err, expr)
                    q.failures.append((variant, why))
                    self.log("FAIL  %-40s %s: %s" % (q.where, variant, why))
                    continue
                n, why = has_data(reply)
                if not n:
                    why = "%s: %s (query %s)" % (why, explain_empty(self.agent, expr, start / 1000, tr.to_ms / 1000), expr)
                    q.failures.append((variant, why))
                    self.log("FAIL  %-40s %s: %s" % (q.where, variant, why))
                    continue
                answers[(kind, method)] = sorted(json.dumps(s["metric"], sort_keys=True) for s in reply["data"]["result"])
                q.series.append(n)
                self.log("ok    %-40s %s: %d series (step %ss) %s" % (q.where, variant, n, seconds(step), expr))
            # Grafana sends either method: the same question gets the same series.
            if (kind, "GET") in answers and (kind, "POST") in answers:
                if answers[(kind, "GET")] != answers[(kind, "POST")]:
                    q.failures.append(("%s %s %s" % (profile["name"], selection, kind),
                                       "GET and POST answers name different series"))

    def run(self, dashboards, profiles, now_ms):
        for dash in dashboards:
            index = {}
            # Templating queries and panel targets, in dashboard order.
            for var in dash.get("templating", {}).get("list", []):
                if var.get("type") == "query":
                    raw = variable_query(var)
                    index[("templating", var["name"], raw)] = Query(dash["_file"], "variable $%s" % var["name"], raw)
            tq = []
            for panel, target in targets_of(dash):
                where = "%s [%s]" % (panel.get("title", "panel %s" % panel.get("id")), target.get("refId", "A"))
                q = Query(dash["_file"], where, target["expr"])
                tq.append((q, panel, target))
                index[("target", where, target["expr"])] = q
            for profile in profiles:
                dash_time = dash.get("time", {"from": "now-6h", "to": "now"})
                if profile["range"]:
                    dash_time = {"from": profile["range"], "to": "now"}
                tr = TimeRange(relative_ms(dash_time["from"], now_ms), relative_ms(dash_time["to"], now_ms))
                for selection in ("all", "one", "two"):
                    variables = self.resolve_variables(dash, index, tr, profile, selection)
                    for q, panel, target in tq:
                        self.run_target(q, dash, panel, target, variables, profile, selection, now_ms)
            self.queries += list(index.values())


def max_step_ms(dashboards, profiles, now_ms):
    """The largest range-query step any target will use: data must reach back before the last
    step boundary, or Grafana's aligned range ends before the first sample."""
    worst = 1000
    for dash in dashboards:
        for profile in profiles:
            dash_time = dash.get("time", {"from": "now-6h", "to": "now"})
            if profile["range"]:
                dash_time = {"from": profile["range"], "to": "now"}
            for panel, target in targets_of(dash):
                tr = panel_time_range(panel, dash_time["from"], dash_time["to"], now_ms)
                worst = max(worst, intervals(target, panel, tr, profile)[1])
    return worst


def load_expected_empty(path):
    if not os.path.exists(path):
        return []
    entries = json.load(open(path))
    for e in entries:
        if not str(e.get("reason", "")).strip() or not e.get("expr"):
            raise ValueError("%s: every entry needs an expr and a written reason: %r" % (path, e))
    return entries


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpuwatch", help="the gpuwatch binary")
    ap.add_argument("mock_nvml", help="libgpuwatch-mock-nvml.so")
    ap.add_argument("--dashboards", nargs="*", help="dashboard JSON files (default: every *.json in tests/fixtures/grafana)")
    ap.add_argument("--expected-empty", default=EXPECTED_EMPTY, help="queries allowed to be empty, each with a reason")
    ap.add_argument("--shape", default="4xH100", help="GPUWATCH_MOCK_NVML shape (default 4xH100)")
    ap.add_argument("--gpu-interval", default="1s")
    ap.add_argument("--timeout", type=float, default=60, help="seconds to wait for the agent and its data")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every request's verdict")
    args = ap.parse_args()

    files = args.dashboards or sorted(os.path.join(FIXTURES, f) for f in os.listdir(FIXTURES) if f.endswith(".json"))
    dashboards = []
    for f in files:
        with open(f) as fh:
            d = json.load(fh)
        d["_file"] = os.path.basename(f)
        dashboards.append(d)
    expected_empty = load_expected_empty(args.expected_empty)
    profiles = [{"name": "default", "scrape": None, "range": None},
                {"name": "scrape=%s" % args.gpu_interval, "scrape": args.gpu_interval, "range": "now-5m"}]

    t0 = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="gw_grafana_")
    # A dotted host name, so the regex escaping of variable values is exercised.
    hostname = "gw-dash-%d.grafana.test" % os.getpid()
    agent = Agent(os.path.abspath(args.gpuwatch), os.path.abspath(args.mock_nvml), workdir,
                  args.shape, hostname, args.gpu_interval)
    try:
        try:
            agent.start(args.timeout)
        except RuntimeError as e:
            print("dashboard_queries: %s" % e)
            return 2
        # Wait (bounded) until every simulated GPU has a sample, then until Grafana's coarsest
        # aligned range end is past that moment.
        status, gpus = agent.request("GET", "/api/v1/gpus", {})
        want = len(gpus.get("gpus", [])) if status == 200 else 0
        if not want:
            print("dashboard_queries: the agent found no GPU on the mock NVML (%s):\n%s" % (
                gpus.get("reason", "HTTP %d" % status), agent.log()[-3000:]))
            return 2
        deadline = t0 + args.timeout
        seen_at = None
        while time.monotonic() < deadline:
            status, reply = agent.request("GET", "/api/v1/query", {"query": 'count(DCGM_FI_DEV_FB_FREE{Hostname="%s"})' % hostname})
            result = reply.get("data", {}).get("result", []) if status == 200 else []
            if result and int(float(result[0]["value"][1])) == want:
                seen_at = time.time()
                break
            time.sleep(0.2)
        if seen_at is None:
            print("dashboard_queries: no DCGM_FI_DEV_FB_FREE for every GPU within %gs:\n%s" % (args.timeout, agent.log()[-3000:]))
            return 2
        step = max_step_ms(dashboards, profiles, int(seen_at * 1000))
        ready_ms = seen_at * 1000 + 2 * parse_duration_ms(args.gpu_interval)
        while align_down(int(time.time() * 1000), step) < ready_ms:
            if time.monotonic() > deadline:
                print("dashboard_queries: the largest Grafana step (%gs) needs more time than --timeout" % (step / 1000))
                return 2
            time.sleep(0.2)
        now_ms = int(time.time() * 1000)
        runner = Runner(agent, args)
        runner.run(dashboards, profiles, now_ms)
    finally:
        agent.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    # The table: one row per query, its requests summed over profiles, selections and methods.
    failed, listed_but_passed = [], []
    print("%-34s %-40s %-9s %-8s %s" % ("dashboard", "query", "requests", "series", "verdict"))
    for q in runner.queries:
        listed = [e for e in expected_empty if e.get("dashboard", q.dash_name) == q.dash_name and e["expr"] == q.expr]
        ok = q.runs - len(q.failures)
        series = "%d-%d" % (min(q.series), max(q.series)) if q.series else "-"
        if listed:
            verdict = "expected empty" if q.failures else "PASSES BUT LISTED EMPTY"
            if not q.failures:
                listed_but_passed.append((q, listed[0]["reason"]))
        else:
            verdict = "pass" if not q.failures and q.runs else "FAIL"
            if q.failures or not q.runs:
                failed.append(q)
        print("%-34s %-40s %4d/%-4d %-8s %s" % (q.dash_name[:34], q.where[:40], ok, q.runs, series, verdict))
    n_pass = sum(1 for q in runner.queries if not q.failures and q.runs)
    print("\n%d queries (%d panel targets, %d templating queries) in %d dashboard(s): %d pass, %d fail, %d expected empty; %d requests in %.1fs" % (
        len(runner.queries), sum(1 for q in runner.queries if not q.where.startswith("variable")),
        sum(1 for q in runner.queries if q.where.startswith("variable")), len(dashboards), n_pass, len(failed),
        len(runner.queries) - n_pass - len(failed), sum(q.runs for q in runner.queries), time.monotonic() - t0))
    for q in failed:
        print("\nFAIL %s: %s\n  %s" % (q.dash_name, q.where, q.expr))
        causes = {}
        for variant, why in q.failures:
            causes.setdefault(why, []).append(variant)
        for why, variants in causes.items():
            print("  - %s\n    in %d request(s): %s" % (why, len(variants), ", ".join(variants[:4]) + (" ..." if len(variants) > 4 else "")))
    for q, reason in listed_but_passed:
        print("\nLISTED EMPTY BUT RETURNS DATA %s: %s (%s): remove it from %s" % (q.dash_name, q.where, reason, args.expected_empty))
    return 1 if failed or listed_but_passed else 0


if __name__ == "__main__":
    sys.exit(main())
