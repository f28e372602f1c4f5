#include "server/panel_api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/strings.h"
#include "store/rollup.h"

namespace gpuwatch::server {
namespace {

using store::Tier;

ApiResponse BadParam(std::string_view name, std::string_view why) {
  return ApiError(400, "bad_data",
                  "invalid parameter \"" + std::string(name) + "\": " + std::string(why));
}

// One series' buckets: NaN min/max mean "no sample"; `has` marks buckets with one.
struct Buckets {
  std::vector<double> min, max, last;
  std::vector<int64_t> last_t;
  std::vector<bool> has;
  explicit Buckets(size_t n)
      : min(n, std::numeric_limits<double>::quiet_NaN()),
        max(n, std::numeric_limits<double>::quiet_NaN()),
        last(n, 0),
        last_t(n, std::numeric_limits<int64_t>::min()),
        has(n, false) {}
  // NaN samples count for `last` but not for min and max, as the rollups keep them.
  void Add(size_t i, double lo, double hi, double v, int64_t t) {
    if (!std::isnan(lo) && (std::isnan(min[i]) || lo < min[i])) min[i] = lo;
    if (!std::isnan(hi) && (std::isnan(max[i]) || hi > max[i])) max[i] = hi;
    if (t >= last_t[i]) last[i] = v, last_t[i] = t;
    has[i] = true;
  }
};

void AppendNumber(std::string* out, double v) {
  if (std::isnan(v)) {
    *out += "\"NaN\"";
  } else if (std::isinf(v)) {
    *out += v > 0 ? "\"+Inf\"" : "\"-Inf\"";
  } else {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof(buf), v);
    out->append(buf, r.ptr);
  }
}

void AppendColumn(std::string* out, const char* name, const Buckets& b,
                  const std::vector<double>& col, bool min_max) {
  *out += ",\"";
  *out += name;
  *out += "\":[";
  for (size_t i = 0; i < col.size(); ++i) {
    if (i) *out += ',';
    // A bucket whose samples were all NaN has no min or max but a NaN last.
    if (!b.has[i] || (min_max && std::isnan(col[i])))
      *out += "null";
    else
      AppendNumber(out, col[i]);
  }
  *out += ']';
}

}  // namespace

ApiResponse HandlePanelApi(const store::Querier& querier, const ApiRequest& r) {
  auto match = ApiParam(r, "match");
  if (!match || match->empty()) return BadParam("match", "a series selector is required");
  auto matchers = store::ParseSelector(*match);
  if (!matchers.ok()) return BadParam("match", matchers.status().message());
  auto start_text = ApiParam(r, "start"), end_text = ApiParam(r, "end");
  if (!start_text) return BadParam("start", "required");
  if (!end_text) return BadParam("end", "required");
  auto start = ParseApiTimestampMs(*start_text);
  if (!start.ok()) return BadParam("start", start.status().message());
  auto end = ParseApiTimestampMs(*end_text);
  if (!end.ok()) return BadParam("end", end.status().message());
  if (*end < *start) return BadParam("end", "before start");
  auto width = ParseInt<int64_t>(ApiParam(r, "width").value_or(""));
  if (!width || *width < 1 || *width > kPanelMaxWidth)
    return BadParam("width", "the chart's width in pixels, 1 to " + std::to_string(kPanelMaxWidth));
  int64_t max_series = kPanelDefaultMaxSeries;
  if (auto m = ApiParam(r, "max_series")) {
    auto n = ParseInt<int64_t>(*m);
    if (!n || *n < 1 || *n > 100'000) return BadParam("max_series", "1 to 100000");
    max_series = *n;
  }

  // The step: the range over the pixels, at least a second.
  int64_t step = std::max<int64_t>(1000, (*end - *start + *width - 1) / *width);
  step = (step + 999) / 1000 * 1000;
  // The coarsest tier whose buckets fit in a step and that reaches back to `start` (its first
  // bucket ends by then); else the finest of the fitting ones that holds anything.
  const store::TierCoverage raw = querier.Coverage(Tier::kRaw);
  Tier tier = Tier::kRaw;
  for (Tier t : {Tier::k1h, Tier::k1m}) {
    const int64_t w = store::TierWidthMs(t);
    const store::TierCoverage c = querier.Coverage(t);
    // It reaches back when its first bucket ends by `start`, or when it starts with the
    // data itself (a store younger than the view: every tier begins together).
    const bool reaches = c.min_t_ms + w <= *start || (!raw.empty() && c.min_t_ms <= raw.min_t_ms);
    if (w <= step && !c.empty() && reaches) {
      tier = t;
      break;
    }
  }
  if (tier == Tier::kRaw && (raw.empty() || raw.min_t_ms > *start)) {
    // Raw retention has passed `start`: a rollup tier that fits still answers from there.
    for (Tier t : {Tier::k1m, Tier::k1h}) {
      const int64_t w = store::TierWidthMs(t);
      const store::TierCoverage c = querier.Coverage(t);
      if (w <= step && !c.empty() && (raw.empty() || c.min_t_ms < raw.min_t_ms)) {
        tier = t;
        break;
      }
    }
  }
  if (tier != Tier::kRaw) {
    const int64_t w = store::TierWidthMs(tier);
    step = (step + w - 1) / w * w;
  }
  const int64_t first = store::BucketStart(*start, step);
  const int64_t last = store::BucketStart(*end, step);
  const size_t n = static_cast<size_t>((last - first) / step + 1);
  // Count the series before reading any sample, and bound the answer: series × buckets cells
  // of ~33 bytes each.
  auto listed = querier.Series(*matchers, first, last + step - 1);
  if (!listed.ok()) return ApiError(503, "unavailable", listed.status().message());
  if (static_cast<int64_t>(listed->size()) > max_series)
    return ApiError(422, "execution",
                    "the selector selects " + std::to_string(listed->size()) +
                        " series (max_series " + std::to_string(max_series) +
                        "); add label matchers");
  if (listed->size() * n > static_cast<size_t>(kPanelMaxCells))
    return ApiError(422, "execution",
                    std::to_string(listed->size()) + " series × " + std::to_string(n) +
                        " buckets is more than " + std::to_string(kPanelMaxCells) +
                        " points; narrow the selector or the width");

  struct Out {
    store::Labels labels;
    Buckets b;
  };
  std::vector<Out> series;
  // t is within [first, last + step): its bucket's position.
  const auto index = [&](int64_t t) { return static_cast<size_t>((t - first) / step); };
  if (tier == Tier::kRaw) {
    auto sel = querier.SelectRaw(*matchers, first, last + step - 1);
    if (!sel.ok()) return ApiError(503, "unavailable", sel.status().message());
    for (auto& s : *sel) {
      Out o{std::move(s.labels), Buckets(n)};
      for (const auto& x : s.samples) {
        if (x.t_ms < first || x.t_ms >= last + step) continue;
        o.b.Add(index(x.t_ms), x.value, x.value, x.value, x.t_ms);
      }
      series.push_back(std::move(o));
    }
  } else {
    auto sel = querier.SelectRollups(tier, *matchers, first, last + step - 1,
                                     store::kRollupMinMax | store::kRollupLast);
    if (!sel.ok()) return ApiError(503, "unavailable", sel.status().message());
    for (auto& s : *sel) {
      Out o{std::move(s.labels), Buckets(n)};
      for (const auto& p : s.points) {
        if (p.t_ms < first || p.t_ms >= last + step) continue;
        o.b.Add(index(p.t_ms), p.min, p.max, p.last, p.last_t_ms);
      }
      series.push_back(std::move(o));
    }
  }
  std::sort(series.begin(), series.end(),
            [](const Out& a, const Out& b) { return a.labels < b.labels; });

  std::string body = "{\"status\":\"success\",\"data\":{\"step\":";
  AppendNumber(&body, static_cast<double>(step) / 1000);
  body += ",\"tier\":\"" + std::string(store::TierName(tier)) + "\",\"times\":[";
  for (size_t i = 0; i < n; ++i) {
    if (i) body += ',';
    AppendNumber(&body, static_cast<double>(first + static_cast<int64_t>(i) * step) / 1000);
  }
  body += "],\"series\":[";
  for (size_t k = 0; k < series.size(); ++k) {
    if (k) body += ',';
    nlohmann::json metric = nlohmann::json::object();
    for (const auto& l : series[k].labels) metric[l.name] = l.value;
    body += "{\"metric\":" + metric.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const Buckets& b = series[k].b;
    AppendColumn(&body, "min", b, b.min, true);
    AppendColumn(&body, "max", b, b.max, true);
    AppendColumn(&body, "last", b, b.last, false);
    body += '}';
  }
  body += "]}}";
  return {200, std::move(body)};
}

}  // namespace gpuwatch::server
