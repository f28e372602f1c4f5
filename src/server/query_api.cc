#include "server/query_api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "server/api.h"

namespace gpuwatch::server {
namespace {

using query::QueryResult;
using query::ValueType;

constexpr std::string_view kPrefix = "/api/v1/";
// match[] selectors per request: each one is a store lookup.
constexpr size_t kMaxMatchParams = 64;

std::optional<std::string> Param(const ApiRequest& r, const std::string& name) {
  auto it = r.params.find(name);
  if (it == r.params.end()) return std::nullopt;
  return it->second;
}

std::string Quote(std::string_view s) {
  return DumpJson(nlohmann::json(std::string(s)));  // escapes; invalid UTF-8 → U+FFFD
}

ApiResponse Error(int http_status, std::string_view type, std::string_view message) {
  return {http_status, "{\"status\":\"error\",\"errorType\":\"" + std::string(type) +
                           "\",\"error\":" + Quote(message) + "}"};
}

ApiResponse BadData(std::string_view message) { return Error(400, "bad_data", message); }

ApiResponse BadParam(std::string_view name, const Status& s) {
  return BadData("invalid parameter \"" + std::string(name) + "\": " + s.message());
}

// Evaluation failures as Prometheus reports them.
ApiResponse ExecutionError(const Status& s) {
  ApiResponse r;
  switch (s.code()) {
    case StatusCode::kUnavailable:
      r = Error(503, "unavailable", s.message());
      break;
    // Prometheus answers both with 503 and these errorTypes (web/api/v1: errorTimeout,
    // errorCanceled).
    case StatusCode::kDeadlineExceeded:
      r = Error(503, "timeout", s.message());
      break;
    case StatusCode::kCancelled:
      r = Error(503, "canceled", s.message());
      break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kResourceExhausted:
    case StatusCode::kNotSupported:
      r = Error(422, "execution", s.message());
      break;
    default:
      r = Error(500, "internal", s.message());
      break;
  }
  r.error = s.code();
  return r;
}

ApiResponse Success(const std::string& data) {
  ApiResponse r{200, {}};
  r.body.reserve(data.size() + 32);
  r.body += "{\"status\":\"success\",\"data\":";
  r.body += data;
  r.body += '}';
  return r;
}

// Seconds with up to three decimals, as Prometheus writes timestamps.
// Hot: a range query's answer is mostly timestamps and values (21,600 points for 6 h of one
// series at 1 s), so both are formatted into a stack buffer and appended once, no temporaries.
void AppendTimestamp(std::string* out, int64_t t_ms) {
  char buf[32];
  char* p = buf;
  if (t_ms < 0) {
    *p++ = '-';
    t_ms = -t_ms;
  }
  p = std::to_chars(p, buf + sizeof(buf), t_ms / 1000).ptr;
  const int frac = static_cast<int>(t_ms % 1000);
  if (frac != 0) {
    *p++ = '.';
    *p++ = static_cast<char>('0' + frac / 100);
    *p++ = static_cast<char>('0' + frac / 10 % 10);
    *p++ = static_cast<char>('0' + frac % 10);
  }
  out->append(buf, p);
}

void AppendValue(std::string* out, double v) {
  if (std::isnan(v)) {
    *out += "NaN";
  } else if (std::isinf(v)) {
    *out += v > 0 ? "+Inf" : "-Inf";
  } else {
    // Go's strconv.FormatFloat(v, 'f' or 'e', -1, 64), as Prometheus's API writes values.
    char buf[512];
    const double a = std::fabs(v);
    const auto fmt = (a != 0 && (a < 1e-6 || a >= 1e21)) ? std::chars_format::scientific
                                                         : std::chars_format::fixed;
    out->append(buf, std::to_chars(buf, buf + sizeof(buf), v, fmt).ptr);
  }
}

void AppendPoint(std::string* out, int64_t t_ms, double v) {
  *out += '[';
  AppendTimestamp(out, t_ms);
  *out += ",\"";
  AppendValue(out, v);
  *out += "\"]";
}

void AppendMetric(std::string* out, const store::Labels& labels) {
  *out += '{';
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) *out += ',';
    *out += Quote(labels[i].name) + ":" + Quote(labels[i].value);
  }
  *out += '}';
}

std::string ResultJson(const QueryResult& r) {
  std::string out =
      "{\"resultType\":\"" + std::string(query::ValueTypeName(r.type)) + "\",\"result\":";
  switch (r.type) {
    case ValueType::kScalar:
      AppendPoint(&out, r.t_ms, r.scalar);
      break;
    case ValueType::kString:
      out += '[';
      AppendTimestamp(&out, r.t_ms);
      out += "," + Quote(r.string) + "]";
      break;
    case ValueType::kVector:
      out += '[';
      for (size_t i = 0; i < r.vector.size(); ++i) {
        if (i) out += ',';
        out += "{\"metric\":";
        AppendMetric(&out, r.vector[i].metric);
        out += ",\"value\":";
        AppendPoint(&out, r.t_ms, r.vector[i].value);
        out += '}';
      }
      out += ']';
      break;
    case ValueType::kMatrix:
      out += '[';
      for (size_t i = 0; i < r.matrix.size(); ++i) {
        if (i) out += ',';
        out += "{\"metric\":";
        AppendMetric(&out, r.matrix[i].metric);
        out += ",\"values\":[";
        const auto& pts = r.matrix[i].points;
        out.reserve(out.size() + pts.size() * 24);
        for (size_t j = 0; j < pts.size(); ++j) {
          if (j) out += ',';
          AppendPoint(&out, pts[j].t_ms, pts[j].value);
        }
        out += "]}";
      }
      out += ']';
      break;
  }
  out += '}';
  return out;
}

std::string StringArray(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + Quote(v[i]);
  return out + "]";
}

// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// 2023-11-14T22:13:20Z, 2023-11-14T22:13:20.123+01:00.
std::optional<int64_t> ParseRfc3339Ms(std::string_view s) {
  const auto num = [&](size_t pos, size_t len, int* out) {
    if (pos + len > s.size()) return false;
    int v = 0;
    for (size_t i = pos; i < pos + len; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
  };
  int y, mo, d, h, mi, sec;
  if (!num(0, 4, &y) || s.size() < 20 || s[4] != '-' || !num(5, 2, &mo) || s[7] != '-' ||
      !num(8, 2, &d) || (s[10] != 'T' && s[10] != 't') || !num(11, 2, &h) || s[13] != ':' ||
      !num(14, 2, &mi) || s[16] != ':' || !num(17, 2, &sec))
    return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  size_t i = 19;
  int64_t ms = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int digits = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (digits < 3) ms = ms * 10 + (s[i] - '0');
      ++digits;
      ++i;
    }
    if (digits == 0) return std::nullopt;
    for (int k = digits; k < 3; ++k) ms *= 10;
  }
  int64_t offset_s = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
    ++i;
  } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    int oh, om;
    if (!num(i + 1, 2, &oh) || i + 3 >= s.size() || s[i + 3] != ':' || !num(i + 4, 2, &om) ||
        oh > 23 || om > 59)
      return std::nullopt;
    offset_s = (s[i] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
    i += 6;
  } else {
    return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  const int64_t secs =
      DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) * 86400 + h * 3600 +
      mi * 60 + sec - offset_s;
  return secs * 1000 + ms;
}

std::optional<double> ParseFloat(std::string_view s) {
  double v;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

Result<int64_t> TimeParam(const ApiRequest& r, const std::string& name,
                          std::optional<int64_t> fallback) {
  auto v = Param(r, name);
  if (!v) {
    if (fallback) return *fallback;
    return Status::InvalidArgument("invalid parameter \"" + name +
                                   "\": cannot parse \"\" to a valid timestamp");
  }
  auto t = ParseApiTimestampMs(*v);
  if (!t.ok())
    return Status::InvalidArgument("invalid parameter \"" + name + "\": " + t.status().message());
  return t;
}

Result<std::vector<std::vector<store::Matcher>>> MatchParams(const ApiRequest& r) {
  std::vector<std::vector<store::Matcher>> out;
  auto [lo, hi] = r.params.equal_range("match[]");
  for (auto it = lo; it != hi; ++it) {
    if (out.size() >= kMaxMatchParams)
      return Status::InvalidArgument("too many match[] parameters (limit " +
                                     std::to_string(kMaxMatchParams) + ")");
    auto m = store::ParseSelector(it->second);
    if (!m.ok())
      return Status::InvalidArgument("invalid parameter \"match[]\": " + m.status().message());
    if (std::all_of(m->begin(), m->end(), [](const store::Matcher& x) { return x.MatchesEmpty(); }))
      return Status::InvalidArgument(
          "invalid parameter \"match[]\": match[] must contain at least one non-empty matcher");
    out.push_back(std::move(m).value());
  }
  return out;
}

// The series the match[] selectors select in [start, end], deduplicated and sorted.
Result<std::vector<store::Labels>> MatchedSeries(const store::Querier& q,
                                                 const query::EngineOptions& o,
                                                 const std::vector<std::vector<store::Matcher>>& ms,
                                                 int64_t start, int64_t end) {
  std::set<store::Labels> all;
  for (const auto& m : ms) {
    auto s = q.Series(m, start, end);
    if (!s.ok()) return s.status();
    for (auto& l : *s) all.insert(std::move(l));
    if (static_cast<int64_t>(all.size()) > o.max_series)
      return Status::ResourceExhausted("match[] selects more than " + std::to_string(o.max_series) +
                                       " series");
  }
  return std::vector<store::Labels>(all.begin(), all.end());
}

ApiResponse Query(const store::Querier& q, const query::EngineOptions& o, const ApiRequest& r) {
  auto t = TimeParam(r, "time", r.now_ms);
  if (!t.ok()) return BadData(t.status().message());
  if (auto s = query::ValidateTimestamp(*t, "time"); !s.ok()) return BadParam("time", s);
  auto expr = query::ParseExpr(Param(r, "query").value_or(""), o.parse);
  if (!expr.ok()) return BadParam("query", expr.status());
  auto res = query::InstantQuery(q, o, **expr, *t);
  if (!res.ok()) return ExecutionError(res.status());
  return Success(ResultJson(*res));
}

ApiResponse QueryRange(const store::Querier& q, const query::EngineOptions& o,
                       const ApiRequest& r) {
  auto start = TimeParam(r, "start", std::nullopt);
  if (!start.ok()) return BadData(start.status().message());
  auto end = TimeParam(r, "end", std::nullopt);
  if (!end.ok()) return BadData(end.status().message());
  auto step_text = Param(r, "step");
  if (!step_text)
    return BadData("invalid parameter \"step\": cannot parse \"\" to a valid duration");
  auto step = ParseApiDurationMs(*step_text);
  if (!step.ok()) return BadParam("step", step.status());
  if (auto s = query::ValidateRange(o, *start, *end, *step); !s.ok()) return BadData(s.message());
  auto expr = query::ParseExpr(Param(r, "query").value_or(""), o.parse);
  if (!expr.ok()) return BadParam("query", expr.status());
  if ((*expr)->type != ValueType::kScalar && (*expr)->type != ValueType::kVector) {
    return BadData(std::string("invalid expression type \"") +
                   ((*expr)->type == ValueType::kMatrix ? "range vector" : "string") +
                   "\" for range query, must be Scalar or instant Vector");
  }
  auto res = query::RangeQuery(q, o, **expr, *start, *end, *step);
  if (!res.ok()) return ExecutionError(res.status());
  return Success(ResultJson(*res));
}

// start/end default to everything, as in Prometheus.
Result<std::pair<int64_t, int64_t>> StartEnd(const ApiRequest& r) {
  auto start = TimeParam(r, "start", query::kMinTimeMs);
  if (!start.ok()) return start.status();
  auto end = TimeParam(r, "end", query::kMaxTimeMs);
  if (!end.ok()) return end.status();
  GW_RETURN_IF_ERROR(query::ValidateTimestamp(*start, "start"));
  GW_RETURN_IF_ERROR(query::ValidateTimestamp(*end, "end"));
  if (*end < *start) return Status::InvalidArgument("end timestamp must not be before start time");
  return std::make_pair(*start, *end);
}

ApiResponse LabelsApi(const store::Querier& q, const query::EngineOptions& o, const ApiRequest& r,
                      const std::optional<std::string>& values_of) {
  auto range = StartEnd(r);
  if (!range.ok()) return BadData(range.status().message());
  auto ms = MatchParams(r);
  if (!ms.ok()) return BadData(ms.status().message());
  std::vector<std::string> out;
  if (ms->empty()) {
    // The store answers names and values from its index, without a time range.
    auto res = values_of ? q.LabelValues(*values_of, {}) : q.LabelNames({});
    if (!res.ok()) return ExecutionError(res.status());
    out = std::move(res).value();
  } else {
    auto series = MatchedSeries(q, o, *ms, range->first, range->second);
    if (!series.ok()) return ExecutionError(series.status());
    std::set<std::string> set;
    for (const auto& l : *series) {
      for (const auto& x : l) {
        if (!values_of)
          set.insert(x.name);
        else if (x.name == *values_of)
          set.insert(x.value);
      }
    }
    out.assign(set.begin(), set.end());
  }
  return Success(StringArray(out));
}

ApiResponse SeriesApi(const store::Querier& q, const query::EngineOptions& o, const ApiRequest& r) {
  auto range = StartEnd(r);
  if (!range.ok()) return BadData(range.status().message());
  auto ms = MatchParams(r);
  if (!ms.ok()) return BadData(ms.status().message());
  if (ms->empty()) return BadData("no match[] parameter provided");
  auto series = MatchedSeries(q, o, *ms, range->first, range->second);
  if (!series.ok()) return ExecutionError(series.status());
  std::string out = "[";
  for (size_t i = 0; i < series->size(); ++i) {
    if (i) out += ',';
    AppendMetric(&out, (*series)[i]);
  }
  return Success(out + "]");
}

}  // namespace

std::string FormatSampleValue(double v) {
  std::string out;
  AppendValue(&out, v);
  return out;
}

Result<int64_t> ParseApiTimestampMs(std::string_view text) {
  const auto bad = [&] {
    return Status::InvalidArgument("cannot parse \"" + std::string(text.substr(0, 64)) +
                                   "\" to a valid timestamp");
  };
  if (auto f = ParseFloat(text)) {
    if (!std::isfinite(*f)) return bad();
    // Checked before the conversion: a double beyond int64 would be undefined behaviour.
    if (*f < 0 || *f > static_cast<double>(query::kMaxTimeMs) / 1000)
      return Status::InvalidArgument("timestamp " + std::string(text.substr(0, 64)) +
                                     " is outside the supported range (1970-01-01 to "
                                     "2262-04-11)");
    return static_cast<int64_t>(std::llround(*f * 1000));
  }
  if (auto t = ParseRfc3339Ms(text)) return *t;
  return bad();
}

Result<int64_t> ParseApiDurationMs(std::string_view text) {
  if (auto f = ParseFloat(text)) {
    if (!std::isfinite(*f) || *f * 1000 > 9.2e18 || *f * 1000 < -9.2e18)
      return Status::InvalidArgument("cannot parse \"" + std::string(text.substr(0, 64)) +
                                     "\" to a valid duration. It overflows int64");
    return static_cast<int64_t>(std::llround(*f * 1000));
  }
  auto d = query::ParseDurationMs(text, int64_t{100} * 365 * 24 * 3600 * 1000);
  if (!d.ok())
    return Status::InvalidArgument("cannot parse \"" + std::string(text.substr(0, 64)) +
                                   "\" to a valid duration");
  return d;
}

std::optional<std::string> ApiParam(const ApiRequest& r, const std::string& name) {
  return Param(r, name);
}

ApiResponse ApiError(int http_status, std::string_view type, std::string_view message) {
  return Error(http_status, type, message);
}

bool IsQueryApiPath(std::string_view path) {
  if (path.substr(0, kPrefix.size()) != kPrefix) return false;
  const std::string_view rest = path.substr(kPrefix.size());
  if (rest == "query" || rest == "query_range" || rest == "labels" || rest == "series") return true;
  return rest.substr(0, 6) == "label/" && rest.size() > 13 &&
         rest.substr(rest.size() - 7) == "/values";
}

ApiResponse HandleQueryApi(const store::Querier& querier, const query::EngineOptions& options,
                           const ApiRequest& request) {
  if (!IsQueryApiPath(request.path))
    return Error(404, "not_found", "unknown API endpoint \"" + request.path + "\"");
  const std::string_view rest = std::string_view(request.path).substr(kPrefix.size());
  if (rest == "query") return Query(querier, options, request);
  if (rest == "query_range") return QueryRange(querier, options, request);
  if (rest == "labels") return LabelsApi(querier, options, request, std::nullopt);
  if (rest == "series") return SeriesApi(querier, options, request);
  const std::string name(rest.substr(6, rest.size() - 6 - 7));
  if (!store::IsValidLabelName(name)) return BadData("invalid label name: \"" + name + "\"");
  return LabelsApi(querier, options, request, name);
}

}  // namespace gpuwatch::server
