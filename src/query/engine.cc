#include "query/engine.h"

#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <optional>
#include <unordered_map>
#include <utility>

namespace gpuwatch::query {
namespace {

using store::Labels;
using store::RollupPoint;
using store::Tier;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string FormatDuration(int64_t ms) {
  if (ms % (int64_t{365} * 24 * 3600 * 1000) == 0)
    return std::to_string(ms / (int64_t{365} * 24 * 3600 * 1000)) + "y";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

// ---------------------------------------------------------------------------------------------
// Label helpers.

// The metric name and the metadata labels that go with it: Prometheus 3's type-and-unit
// labels describe the named metric, so a function or operator that drops the name drops them
// too (issue 18: 15 promqltest cases).
bool IsNameOrMetadata(const store::Label& x) {
  return x.name == store::kMetricNameLabel || x.name == "__type__" || x.name == "__unit__";
}

Labels DropName(Labels l) {
  l.erase(std::remove_if(l.begin(), l.end(), IsNameOrMetadata), l.end());
  return l;
}

// As DropName, without copying when there is no name to drop (the common case after the
// first function or operator).
void DropNameInPlace(SharedLabels* l) {
  const Labels& v = *l;
  if (std::none_of(v.begin(), v.end(), IsNameOrMetadata)) return;
  Labels* m = l->Mutable();
  m->erase(std::remove_if(m->begin(), m->end(), IsNameOrMetadata), m->end());
}

bool Contains(const std::vector<std::string>& names, std::string_view n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

void AppendKeyPart(std::string* key, std::string_view s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  key->append(reinterpret_cast<const char*>(&n), sizeof(n));
  key->append(s);
}

// An exact key for a whole label set (length-prefixed, so no value can forge a separator).
std::string LabelsKey(const Labels& l) {
  std::string key;
  for (const auto& x : l) {
    AppendKeyPart(&key, x.name);
    AppendKeyPart(&key, x.value);
  }
  return key;
}

// The matching key: `on` keeps only `names`; otherwise all labels but `names` and __name__.
std::string SignatureKey(const Labels& l, bool on, const std::vector<std::string>& names) {
  std::string key;
  if (on) {
    // By name, so the order the query lists them in does not matter.
    std::vector<std::string> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    for (const auto& n : sorted) {
      AppendKeyPart(&key, n);
      AppendKeyPart(&key, store::LabelValue(l, n));
    }
    return key;
  }
  for (const auto& x : l) {
    if (x.name == store::kMetricNameLabel || Contains(names, x.name)) continue;
    AppendKeyPart(&key, x.name);
    AppendKeyPart(&key, x.value);
  }
  return key;
}

Labels KeepOnly(const Labels& l, const std::vector<std::string>& names) {
  Labels out;
  for (const auto& x : l)
    if (Contains(names, x.name)) out.push_back(x);
  return out;
}

Labels Delete(Labels l, const std::vector<std::string>& names) {
  l.erase(std::remove_if(l.begin(), l.end(),
                         [&](const store::Label& x) { return Contains(names, x.name); }),
          l.end());
  return l;
}

Labels Without(const Labels& l, const std::vector<std::string>& names) {
  Labels out;
  for (const auto& x : l)
    if (!Contains(names, x.name) && x.name != store::kMetricNameLabel) out.push_back(x);
  return out;
}

void SetLabel(Labels* l, const std::string& name, const std::string& value) {
  auto it =
      std::lower_bound(l->begin(), l->end(), name,
                       [](const store::Label& x, const std::string& n) { return x.name < n; });
  if (it != l->end() && it->name == name) {
    if (value.empty())
      l->erase(it);
    else
      it->value = value;
  } else if (!value.empty()) {
    l->insert(it, store::Label{name, value});
  }
}

// Prometheus's API number formatting, also used for count_values labels.
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[512];
  const double a = std::fabs(v);
  const auto fmt = (a != 0 && (a < 1e-6 || a >= 1e21)) ? std::chars_format::scientific
                                                       : std::chars_format::fixed;
  auto r = std::to_chars(buf, buf + sizeof(buf), v, fmt);
  return std::string(buf, r.ptr);
}

// ---------------------------------------------------------------------------------------------
// Numeric helpers.

// Kahan–Babuška summation, as Prometheus uses for sum and avg.
struct KahanSum {
  double sum = 0, c = 0;
  void Add(double v) {
    const double t = sum + v;
    if (std::fabs(sum) >= std::fabs(v))
      c += (sum - t) + v;
    else
      c += (v - t) + sum;
    sum = t;
  }
  double Value() const { return std::isinf(sum) ? sum : sum + c; }
};

// Prometheus's kahanSumInc: one Kahan–Babuška step that gives up compensation once the sum is
// infinite.
void KahanInc(double inc, double* sum, double* c) {
  const double t = *sum + inc;
  if (std::isinf(t))
    *c = 0;
  else if (std::fabs(*sum) >= std::fabs(inc))
    *c += (*sum - t) + inc;
  else
    *c += (inc - t) + *sum;
  *sum = t;
}

// The mean as Prometheus 3 computes avg and avg_over_time: a compensated sum divided by the
// count while the sum stays finite, then an incremental mean from the value it overflowed at,
// so a mean of finite values near the double's limit stays finite (issue 18).
class MeanAccumulator {
 public:
  void Add(double v) {
    ++count_;
    if (!incremental_) {
      double sum = sum_, c = c_;
      KahanInc(v, &sum, &c);
      if (!std::isinf(sum) || count_ == 1) {
        sum_ = sum, c_ = c;
        return;
      }
      incremental_ = true;
      mean_ = sum_ / (count_ - 1);
      c_ /= count_ - 1;
    }
    const double q = (count_ - 1) / count_;
    mean_ *= q;
    c_ *= q;
    KahanInc(v / count_, &mean_, &c_);
  }
  double Value() const {
    if (incremental_) return mean_ + c_;
    return sum_ / count_ + c_ / count_;
  }

 private:
  double count_ = 0, sum_ = 0, c_ = 0, mean_ = 0;
  bool incremental_ = false;
};

// Go's math.Max and math.Min, which PromQL's clamp functions use: an infinity wins, then NaN
// wins (std::max and std::min give whichever argument comes first).
double GoMax(double x, double y) {
  if (std::isinf(x) && x > 0) return x;
  if (std::isinf(y) && y > 0) return y;
  if (std::isnan(x) || std::isnan(y)) return kNaN;
  if (x == 0 && y == 0) return std::signbit(x) ? y : x;
  return x > y ? x : y;
}
double GoMin(double x, double y) {
  if (std::isinf(x) && x < 0) return x;
  if (std::isinf(y) && y < 0) return y;
  if (std::isnan(x) || std::isnan(y)) return kNaN;
  if (x == 0 && y == 0) return std::signbit(x) ? x : y;
  return x < y ? x : y;
}

// Prometheus's quantile: linear interpolation between the closest ranks, NaN ranked below
// every number (Go's sort.Float64s order).
double Quantile(double q, std::vector<double> v) {
  if (v.empty() || std::isnan(q)) return kNaN;
  if (q < 0) return -std::numeric_limits<double>::infinity();
  if (q > 1) return std::numeric_limits<double>::infinity();
  std::sort(v.begin(), v.end(),
            [](double a, double b) { return a < b || (std::isnan(a) && !std::isnan(b)); });
  const double rank = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::max(0.0, std::floor(rank)));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  const double w = rank - std::floor(rank);
  return v[lo] * (1 - w) + v[hi] * w;
}

// Population variance as Prometheus computes it: stdvar/stddev by Welford's method (identical
// values give exactly 0), *_over_time by Welford's method with Kahan-compensated terms.
double Variance(const std::vector<double>& v) {
  if (v.empty()) return kNaN;
  double count = 0, mean = 0, m2 = 0;
  for (double x : v) {
    ++count;
    const double delta = x - mean;
    mean += delta / count;
    m2 += delta * (x - mean);
  }
  return m2 / count;
}

double VarianceOverTime(const std::vector<double>& v) {
  if (v.empty()) return kNaN;
  double count = 0, mean = 0, c_mean = 0, aux = 0, c_aux = 0;
  for (double x : v) {
    ++count;
    const double delta = x - (mean + c_mean);
    KahanInc(delta / count, &mean, &c_mean);
    KahanInc(delta * (x - (mean + c_mean)), &aux, &c_aux);
  }
  return (aux + c_aux) / count;
}

bool Compare(BinOp op, double l, double r) {
  switch (op) {
    case BinOp::kEq:
      return l == r;
    case BinOp::kNe:
      return l != r;
    case BinOp::kGt:
      return l > r;
    case BinOp::kLt:
      return l < r;
    case BinOp::kGe:
      return l >= r;
    case BinOp::kLe:
      return l <= r;
    default:
      return false;
  }
}

double Arith(BinOp op, double l, double r) {
  switch (op) {
    case BinOp::kAdd:
      return l + r;
    case BinOp::kSub:
      return l - r;
    case BinOp::kMul:
      return l * r;
    case BinOp::kDiv:
      return l / r;
    case BinOp::kMod:
      return std::fmod(l, r);
    case BinOp::kPow:
      return std::pow(l, r);
    case BinOp::kAtan2:
      return std::atan2(l, r);
    default:
      return kNaN;
  }
}

// ---------------------------------------------------------------------------------------------
// Loaded data and windows.

// One series as a selector read it. For a rollup tier `samples` holds each bucket's
// (last_t_ms, last), parallel to `buckets`, so functions that only need values treat both
// tiers alike.
struct LoadedSeries {
  SharedLabels labels;
  SharedLabels nameless;  // labels without __name__, for functions that drop it
  std::vector<store::Sample> samples;
  std::vector<RollupPoint> buckets;  // empty for raw
};

struct Loaded {
  Tier tier = Tier::kRaw;
  int64_t width_ms = 0;
  std::vector<LoadedSeries> series;
  // Where the previous step's instant lookup ended, per series: steps ascend, so the next
  // lookup scans forward from there (sequential, cache-friendly) instead of binary-searching
  // megabytes of samples again at every step.
  mutable std::vector<size_t> cursor;
  mutable int64_t cursor_key = INT64_MIN;
};

// The index of the first element of `v` whose t_ms is above `key`, as std::upper_bound,
// starting from `*pos` when the keys ascend from call to call.
template <typename T>
size_t UpperBoundFrom(const std::vector<T>& v, int64_t key, size_t* pos) {
  size_t i = *pos;
  if (i > v.size() || (i > 0 && v[i - 1].t_ms > key)) i = 0;  // keys went back: restart
  // A long way to go: binary search the rest rather than walk it.
  if (i + 64 < v.size() && v[i + 64].t_ms <= key)
    i = std::upper_bound(v.begin() + static_cast<std::ptrdiff_t>(i), v.end(), key,
                         [](int64_t x, const T& y) { return x < y.t_ms; }) -
        v.begin();
  while (i < v.size() && v[i].t_ms <= key) ++i;
  *pos = i;
  return i;
}

// The part of one series inside a range window at one step.
struct Window {
  const store::Sample* s = nullptr;
  const RollupPoint* b = nullptr;  // null for raw
  size_t n = 0;
  int64_t start_ms = 0, end_ms = 0;  // the window (start, end]
  int64_t range_ms = 0;
};

Window WindowAt(const Loaded& d, const LoadedSeries& ls, int64_t ts, int64_t range_ms) {
  Window w;
  w.start_ms = ts - range_ms;
  w.end_ms = ts;
  w.range_ms = range_ms;
  if (d.tier == Tier::kRaw) {
    const auto& s = ls.samples;
    auto lo = std::upper_bound(s.begin(), s.end(), w.start_ms,
                               [](int64_t t, const store::Sample& x) { return t < x.t_ms; });
    auto hi = std::upper_bound(lo, s.end(), ts,
                               [](int64_t t, const store::Sample& x) { return t < x.t_ms; });
    w.s = s.data() + (lo - s.begin());
    w.n = static_cast<size_t>(hi - lo);
    return w;
  }
  // Whole buckets inside [ts - range, ts).
  const auto& b = ls.buckets;
  auto lo = std::lower_bound(b.begin(), b.end(), w.start_ms,
                             [](const RollupPoint& x, int64_t t) { return x.t_ms < t; });
  auto hi = std::upper_bound(lo, b.end(), ts - d.width_ms,
                             [](int64_t t, const RollupPoint& x) { return t < x.t_ms; });
  const size_t off = static_cast<size_t>(lo - b.begin());
  w.s = ls.samples.data() + off;
  w.b = b.data() + off;
  w.n = static_cast<size_t>(hi - lo);
  return w;
}

// Prometheus's extrapolatedRate: the change over the window, counter resets added back,
// extrapolated to the window edges unless the series seems to start or end inside it.
std::optional<double> ExtrapolatedRate(const Window& w, bool is_counter, bool is_rate) {
  if (w.n < 2) return std::nullopt;
  const store::Sample& first = w.s[0];
  const store::Sample& last = w.s[w.n - 1];
  double result = last.value - first.value;
  if (is_counter) {
    for (size_t i = 1; i < w.n; ++i) {
      const double prev = w.s[i - 1].value;
      // A rollup bucket whose minimum is below the previous bucket's last value held a reset
      // even when its own last value climbed back above it.
      const bool reset = w.s[i].value < prev || (w.b && w.b[i].min < prev);
      if (reset) result += prev;
    }
  }
  const double to_start = static_cast<double>(first.t_ms - w.start_ms) / 1000;
  const double to_end = static_cast<double>(w.end_ms - last.t_ms) / 1000;
  const double sampled = static_cast<double>(last.t_ms - first.t_ms) / 1000;
  if (sampled <= 0) return std::nullopt;
  const double avg_interval = sampled / static_cast<double>(w.n - 1);
  // A sample missing near an edge means the series starts or ends inside the window: then
  // extrapolate only half an interval. The zero-point cutoff comes after that limit, as in
  // Prometheus 3 (prometheus/prometheus#13725); 2.x applied it first.
  const double threshold = avg_interval * 1.1;
  double duration_to_start = to_start < threshold ? to_start : avg_interval / 2;
  if (is_counter && result > 0 && first.value >= 0) {
    // A counter cannot be negative: do not extrapolate back past its zero point.
    const double to_zero = sampled * (first.value / result);
    if (to_zero < duration_to_start) duration_to_start = to_zero;
  }
  const double duration_to_end = to_end < threshold ? to_end : avg_interval / 2;
  result = result * ((sampled + duration_to_start + duration_to_end) / sampled);
  if (is_rate) result /= static_cast<double>(w.range_ms) / 1000;
  return result;
}

std::optional<double> InstantDelta(const Window& w, bool is_rate) {
  if (w.n < 2) return std::nullopt;
  const store::Sample& last = w.s[w.n - 1];
  const store::Sample& prev = w.s[w.n - 2];
  double result = last.value - prev.value;
  if (is_rate && last.value < prev.value) result = last.value;  // counter reset
  if (!is_rate) return result;
  const double dt = static_cast<double>(last.t_ms - prev.t_ms) / 1000;
  if (dt == 0) return std::nullopt;
  return result / dt;
}

// Prometheus's linearRegression: least squares over (seconds since `intercept_ms`, value) with
// compensated sums; a constant series has slope 0 (and an infinite one no answer).
struct Regression {
  double slope = 0, intercept = 0;
};
Regression LinearRegression(const Window& w, int64_t intercept_ms) {
  double n = 0, sx = 0, cx = 0, sy = 0, cy = 0, sxy = 0, cxy = 0, sxx = 0, cxx = 0;
  const double init_y = w.s[0].value;
  bool const_y = true;
  for (size_t i = 0; i < w.n; ++i) {
    const double y = w.s[i].value;
    if (const_y && i > 0 && y != init_y) const_y = false;
    n += 1;
    const double x = static_cast<double>(w.s[i].t_ms - intercept_ms) / 1000;
    KahanInc(x, &sx, &cx);
    KahanInc(y, &sy, &cy);
    KahanInc(x * y, &sxy, &cxy);
    KahanInc(x * x, &sxx, &cxx);
  }
  if (const_y) {
    if (std::isinf(init_y)) return {kNaN, kNaN};
    return {0, init_y};
  }
  sx += cx;
  sy += cy;
  sxy += cxy;
  sxx += cxx;
  const double cov = sxy - sx * sy / n;
  const double var = sxx - sx * sx / n;
  Regression r;
  r.slope = cov / var;
  r.intercept = sy / n - r.slope * sx / n;
  return r;
}

// Slope per second, like Prometheus's deriv (the regression anchored at the first sample).
std::optional<double> Deriv(const Window& w) {
  if (w.n < 2) return std::nullopt;
  return LinearRegression(w, w.s[0].t_ms).slope;
}

std::vector<double> Values(const Window& w) {
  std::vector<double> v(w.n);
  for (size_t i = 0; i < w.n; ++i) v[i] = w.s[i].value;
  return v;
}

double Median(std::vector<double> v) { return Quantile(0.5, std::move(v)); }

// One range function over one window at step time `t_ms` (predict_linear's anchor);
// `params` are its scalar arguments in order.
std::optional<double> OverTime(Func f, const Window& w, const std::vector<double>& params,
                               int64_t t_ms) {
  if (w.n == 0) return std::nullopt;
  const double param = params.empty() ? 0 : params[0];
  switch (f) {
    case Func::kRate:
      return ExtrapolatedRate(w, true, true);
    case Func::kIncrease:
      return ExtrapolatedRate(w, true, false);
    case Func::kDelta:
      return ExtrapolatedRate(w, false, false);
    case Func::kIrate:
      return InstantDelta(w, true);
    case Func::kIdelta:
      return InstantDelta(w, false);
    case Func::kDeriv:
      return Deriv(w);
    case Func::kLastOverTime:
      return w.s[w.n - 1].value;
    case Func::kFirstOverTime:
      return w.b ? w.b[0].first : w.s[0].value;
    case Func::kPresentOverTime:
      return 1;
    case Func::kMadOverTime: {
      auto v = Values(w);
      const double median = Median(v);
      for (double& x : v) x = std::fabs(x - median);
      return Median(std::move(v));
    }
    case Func::kPredictLinear: {
      if (w.n < 2) return std::nullopt;
      const Regression r = LinearRegression(w, t_ms);
      return r.slope * param + r.intercept;
    }
    case Func::kCountOverTime: {
      if (!w.b) return static_cast<double>(w.n);
      double c = 0;
      for (size_t i = 0; i < w.n; ++i) c += w.b[i].count;
      return c;
    }
    case Func::kSumOverTime:
    case Func::kAvgOverTime: {
      if (f == Func::kAvgOverTime && !w.b) {
        if (w.n == 0) return std::nullopt;
        MeanAccumulator m;
        for (size_t i = 0; i < w.n; ++i) m.Add(w.s[i].value);
        return m.Value();
      }
      KahanSum s;
      double count = 0;
      for (size_t i = 0; i < w.n; ++i) {
        s.Add(w.b ? w.b[i].sum : w.s[i].value);
        count += w.b ? w.b[i].count : 1;
      }
      if (f == Func::kSumOverTime) return s.Value();
      if (count == 0) return std::nullopt;
      return s.Value() / count;
    }
    case Func::kMinOverTime:
    case Func::kMaxOverTime: {
      const bool is_min = f == Func::kMinOverTime;
      double r = kNaN;
      for (size_t i = 0; i < w.n; ++i) {
        const double v = w.b ? (is_min ? w.b[i].min : w.b[i].max) : w.s[i].value;
        if (std::isnan(r) || (is_min ? v < r : v > r)) r = v;
      }
      return r;
    }
    case Func::kStddevOverTime:
      return std::sqrt(VarianceOverTime(Values(w)));
    case Func::kStdvarOverTime:
      return VarianceOverTime(Values(w));
    case Func::kQuantileOverTime:
      return Quantile(param, Values(w));
    case Func::kChanges:
    case Func::kResets: {
      double c = 0;
      for (size_t i = 1; i < w.n; ++i) {
        const double p = w.s[i - 1].value, v = w.s[i].value;
        if (f == Func::kChanges) {
          if (v != p && !(std::isnan(v) && std::isnan(p))) ++c;
        } else if (v < p || (w.b && w.b[i].min < p)) {
          ++c;
        }
      }
      return c;
    }
    default:
      return std::nullopt;
  }
}

bool IsRangeFunc(Func f) {
  switch (f) {
    case Func::kRate:
    case Func::kIncrease:
    case Func::kDelta:
    case Func::kIrate:
    case Func::kIdelta:
    case Func::kDeriv:
    case Func::kLastOverTime:
    case Func::kFirstOverTime:
    case Func::kPresentOverTime:
    case Func::kMadOverTime:
    case Func::kPredictLinear:
    case Func::kCountOverTime:
    case Func::kSumOverTime:
    case Func::kAvgOverTime:
    case Func::kMinOverTime:
    case Func::kMaxOverTime:
    case Func::kStddevOverTime:
    case Func::kStdvarOverTime:
    case Func::kQuantileOverTime:
    case Func::kChanges:
    case Func::kResets:
      return true;
    default:
      return false;
  }
}

// Functions a rollup bucket cannot answer exactly (it holds no sum of squares and no
// distribution): their selectors read raw data whenever raw reaches back far enough.
bool PrefersRaw(Func f) {
  return f == Func::kStddevOverTime || f == Func::kStdvarOverTime || f == Func::kQuantileOverTime ||
         f == Func::kMadOverTime || f == Func::kPredictLinear;
}

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

bool IsDateFunc(Func f) {
  switch (f) {
    case Func::kDayOfMonth:
    case Func::kDayOfWeek:
    case Func::kDayOfYear:
    case Func::kDaysInMonth:
    case Func::kHour:
    case Func::kMinute:
    case Func::kMonth:
    case Func::kYear:
      return true;
    default:
      return false;
  }
}

// The date functions of a Unix time in seconds, in UTC, as Go's time package gives them.
double DatePart(Func f, int64_t unix_s) {
  using namespace std::chrono;
  const int64_t days = FloorDiv(unix_s, 86400);
  const int64_t secs_of_day = unix_s - days * 86400;
  const sys_days day{std::chrono::days(days)};
  const year_month_day ymd{day};
  switch (f) {
    case Func::kDayOfMonth:
      return static_cast<unsigned>(ymd.day());
    case Func::kDayOfWeek:
      return weekday(day).c_encoding();  // Sunday = 0
    case Func::kDayOfYear:
      return static_cast<double>((day - sys_days{ymd.year() / January / 1}).count() + 1);
    case Func::kDaysInMonth:
      return static_cast<unsigned>((ymd.year() / ymd.month() / last).day());
    case Func::kHour:
      return static_cast<double>(secs_of_day / 3600);
    case Func::kMinute:
      return static_cast<double>(secs_of_day % 3600 / 60);
    case Func::kMonth:
      return static_cast<unsigned>(ymd.month());
    case Func::kYear:
      return static_cast<int>(ymd.year());
    default:
      return kNaN;
  }
}

// Natural order of label values, as Prometheus's sort_by_label (facette.io/natsort): runs of
// digits compare as numbers, the rest byte by byte.
bool NatLess(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i]));
    const bool db = std::isdigit(static_cast<unsigned char>(b[j]));
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::string_view na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      while (na.size() > 1 && na[0] == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb[0] == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie, j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i, ++j;
  }
  return a.size() - i < b.size() - j;
}

// sort_by_label's order: by the listed labels' values naturally, then by the whole label set.
int CompareByLabels(const Labels& a, const Labels& b, const std::vector<std::string_view>& names) {
  for (std::string_view n : names) {
    const std::string_view x = store::LabelValue(a, n), y = store::LabelValue(b, n);
    if (x == y) continue;
    if (NatLess(x, y)) return -1;
    if (NatLess(y, x)) return 1;
    return x < y ? -1 : 1;  // "01" and "1": equal as numbers, ordered by bytes
  }
  return a < b ? -1 : (b < a ? 1 : 0);
}

// Classic buckets as Prometheus prepares them: sorted by upper bound, buckets with the same
// bound (series differing in other labels) added up, counts made non-decreasing (differences
// of floating-point noise, relative 1e-12, evened out; real decreases forced up). False when
// the +Inf bucket is missing.
bool PrepareBuckets(std::vector<std::pair<double, double>>* buckets_in) {
  auto& buckets = *buckets_in;
  std::sort(buckets.begin(), buckets.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  if (buckets.empty() || !(std::isinf(buckets.back().first) && buckets.back().first > 0))
    return false;
  std::vector<std::pair<double, double>> merged;
  for (const auto& b : buckets) {
    if (!merged.empty() && merged.back().first == b.first)
      merged.back().second += b.second;
    else
      merged.push_back(b);
  }
  buckets = std::move(merged);
  const auto almost_equal = [](double a, double b) {
    constexpr double kEps = 1e-12, kMinNormal = 2.2250738585072014e-308;
    if (a == b) return true;
    const double abs_sum = std::fabs(a) + std::fabs(b), diff = std::fabs(a - b);
    if (a == 0 || b == 0 || abs_sum < kMinNormal) return diff < kEps * kMinNormal;
    return diff / std::min(abs_sum, std::numeric_limits<double>::max()) < kEps;
  };
  double prev = buckets[0].second;
  for (size_t i = 1; i < buckets.size(); ++i) {
    const double cur = buckets[i].second;
    if (cur == prev) continue;
    if (almost_equal(prev, cur) || cur < prev) {
      buckets[i].second = prev;
      continue;
    }
    prev = cur;
  }
  return true;
}

// Prometheus's BucketFraction: the share of observations between lower and upper, by linear
// interpolation inside the buckets (the lowest bucket starting at 0 when its bound is
// positive, as histogram_quantile assumes).
double BucketFraction(double lower, double upper, std::vector<std::pair<double, double>> buckets) {
  if (!PrepareBuckets(&buckets)) return kNaN;
  const double count = buckets.back().second;
  if (count == 0 || std::isnan(lower) || std::isnan(upper)) return kNaN;
  if (lower >= upper) return 0;
  double rank = 0, lower_rank = 0, upper_rank = 0;
  bool lower_set = false, upper_set = false;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const double lo = i > 0                  ? buckets[i - 1].first
                      : buckets[0].first > 0 ? 0
                                             : -std::numeric_limits<double>::infinity();
    const double hi = buckets[i].first;
    const double c = buckets[i].second;
    const auto interpolate = [&](double v) { return rank + (c - rank) * (v - lo) / (hi - lo); };
    if (!lower_set && lo >= lower) lower_rank = rank, lower_set = true;
    if (!upper_set && lo >= upper) upper_rank = rank, upper_set = true;
    if (lower_set && upper_set) break;
    if (!lower_set && lo < lower && hi > lower) lower_rank = interpolate(lower), lower_set = true;
    if (!upper_set && lo < upper && hi > upper) upper_rank = interpolate(upper), upper_set = true;
    if (lower_set && upper_set) break;
    rank = c;
  }
  if (!lower_set || lower_rank > count) lower_rank = count;
  if (!upper_set || upper_rank > count) upper_rank = count;
  return (upper_rank - lower_rank) / count;
}

// Prometheus's BucketQuantile over classic buckets: (upper bound, cumulative count) pairs.
double BucketQuantile(double q, std::vector<std::pair<double, double>> buckets) {
  if (std::isnan(q)) return kNaN;
  if (q < 0) return -std::numeric_limits<double>::infinity();
  if (q > 1) return std::numeric_limits<double>::infinity();
  if (!PrepareBuckets(&buckets)) return kNaN;
  if (buckets.size() < 2) return kNaN;
  const double observations = buckets.back().second;
  if (observations == 0) return kNaN;
  double rank = q * observations;
  size_t b = 0;
  while (b < buckets.size() - 1 && !(buckets[b].second >= rank)) ++b;
  if (b == buckets.size() - 1) return buckets[buckets.size() - 2].first;
  if (b == 0 && buckets[0].first <= 0) return buckets[0].first;
  double start = 0, count = buckets[b].second;
  const double end = buckets[b].first;
  if (b > 0) {
    start = buckets[b - 1].first;
    count -= buckets[b - 1].second;
    rank -= buckets[b - 1].second;
  }
  return start + (end - start) * (rank / count);
}

// ---------------------------------------------------------------------------------------------
// Evaluation.

struct Value {
  ValueType type = ValueType::kVector;
  double scalar = 0;
  std::string str;
  Vector vec;
  Matrix mat;
};

Value ScalarValue(double v) {
  Value out;
  out.type = ValueType::kScalar;
  out.scalar = v;
  return out;
}

Status Exhausted(const std::string& what) { return Status::ResourceExhausted(what); }

Status CheckUniqueLabels(Vector* v);

class Evaluator {
 public:
  Evaluator(const store::Querier& q, const EngineOptions& o, int64_t start_ms, int64_t end_ms,
            int64_t step_ms)
      : q_(q), o_(o), start_ms_(start_ms), end_ms_(end_ms), step_ms_(step_ms) {
    for (int i = 0; i < store::kNumTiers; ++i) coverage_[i] = q_.Coverage(static_cast<Tier>(i));
  }

  // Reads every selector's data once, for all steps.
  Status Load(const Expr& e, const Expr* parent) { return Load(e, parent, start_ms_, end_ms_); }

  // As Load, for steps from `first_t` to `last_t`: a subquery's selectors are evaluated at its
  // own steps, back to a range before the first outer step.
  Status Load(const Expr& e, const Expr* parent, int64_t first_t, int64_t last_t) {
    if (e.kind == Expr::Kind::kVectorSelector || e.kind == Expr::Kind::kMatrixSelector)
      return LoadSelector(e, parent, first_t, last_t);
    if (e.kind == Expr::Kind::kSubquery) {
      const int64_t lo = (e.at == Expr::At::kNone ? first_t : AtTime(e)) - e.offset_ms;
      const int64_t hi = (e.at == Expr::At::kNone ? last_t : AtTime(e)) - e.offset_ms;
      return Load(*e.lhs, &e, SubqueryFirstStep(e, lo), hi);
    }
    for (const Expr* c : {e.lhs.get(), e.rhs.get(), e.param.get()})
      if (c) GW_RETURN_IF_ERROR(Load(*c, &e, first_t, last_t));
    for (const auto& a : e.args) GW_RETURN_IF_ERROR(Load(*a, &e, first_t, last_t));
    return Status::Ok();
  }

  const std::vector<Tier>& tiers() const { return tiers_; }
  // Deadline and cancellation.
  Status CheckTime() const {
    if (o_.cancelled && o_.cancelled->load(std::memory_order_relaxed))
      return Status::Cancelled("query cancelled: the client went away or the agent is stopping");
    if (o_.deadline && std::chrono::steady_clock::now() >= *o_.deadline)
      return Status::DeadlineExceeded(
          "query timed out; narrow the time range or the selectors, or raise --query-timeout");
    return Status::Ok();
  }
  Status AddWork(int64_t n) {
    work_ += n;
    if (work_ > o_.max_work)
      return Exhausted("query would visit more than " + std::to_string(o_.max_work) +
                       " samples over all its steps; narrow the range windows, the time range "
                       "or the selectors, or use a larger step");
    if (work_ >= next_check_) {
      next_check_ = work_ + kWorkCheckInterval;
      return CheckTime();
    }
    return Status::Ok();
  }
  Status AddSamples(int64_t n) {
    samples_ += n;
    if (samples_ > o_.max_samples)
      return Exhausted(
          "query processing would load too many samples into memory in query execution "
          "(limit " +
          std::to_string(o_.max_samples) + "); narrow the time range or the selectors");
    return Status::Ok();
  }

  Result<Value> Eval(const Expr& e, int64_t t) {
    switch (e.kind) {
      case Expr::Kind::kNumber:
        return ScalarValue(e.number);
      case Expr::Kind::kString: {
        Value v;
        v.type = ValueType::kString;
        v.str = e.str;
        return v;
      }
      case Expr::Kind::kVectorSelector:
        return InstantSelector(e, t);
      case Expr::Kind::kMatrixSelector:
        return MatrixSelector(e, t);
      case Expr::Kind::kUnaryMinus: {
        auto v = Eval(*e.lhs, t);
        if (!v.ok()) return v;
        if (v->type == ValueType::kScalar) {
          v->scalar = -v->scalar;
        } else {
          for (auto& s : v->vec) {
            s.value = -s.value;
            DropNameInPlace(&s.metric);
            s.t_ms = t;
          }
        }
        return v;
      }
      case Expr::Kind::kBinary:
        return Binary(e, t);
      case Expr::Kind::kCall:
        return Call(e, t);
      case Expr::Kind::kAggregate:
        return Aggregate(e, t);
      case Expr::Kind::kSubquery: {
        auto series = Subquery(e, t);
        if (!series.ok()) return series.status();
        Value out;
        out.type = ValueType::kMatrix;
        for (auto& s : *series) {
          GW_RETURN_IF_ERROR(AddSamples(static_cast<int64_t>(s.points.size())));
          out.mat.push_back(std::move(s));
        }
        return out;
      }
    }
    return Status::Internal("unknown expression kind");
  }

 private:
  // ----- tiers and loading -----

  // Where a tier's data certainly starts: a rollup tier's first bucket may hold data only
  // near its end, so its start is counted from the bucket's end. Without this a coarse tier
  // would seem to reach further back than raw merely because its bucket starts are rounded
  // down.
  int64_t StartBound(Tier tier) const {
    const auto& c = coverage_[static_cast<int>(tier)];
    return c.empty() ? std::numeric_limits<int64_t>::max() : c.min_t_ms + store::TierWidthMs(tier);
  }

  bool Reaches(Tier tier, int64_t need_min_ms) const { return StartBound(tier) <= need_min_ms; }

  Tier ChooseTier(int64_t need_min_ms, int64_t range_ms, bool prefers_raw) const {
    if (o_.force_tier) return *o_.force_tier;
    if (!o_.use_rollups) return Tier::kRaw;
    // Only raw samples answer exactly as Prometheus does: windows (t - range, t] and the
    // newest sample at or before t. A bucket [b, b + width) cannot say which of its samples
    // lie on either side of a window edge inside it (issue 18: 24 promqltest cases answered
    // wrong at steps >= 60 s). So raw is read whenever it holds the range; a rollup tier only
    // where retention has trimmed raw and the rollup reaches further back (a coarser answer
    // rather than none; downsampled views are the panel endpoint's job).
    if (Reaches(Tier::kRaw, need_min_ms)) return Tier::kRaw;
    if (!coverage_[static_cast<int>(Tier::kRaw)].empty()) {
      bool rollup_older = false;
      for (Tier tier : {Tier::k1m, Tier::k1h})
        rollup_older = rollup_older ||
                       StartBound(tier) + store::TierWidthMs(Tier::k1h) < StartBound(Tier::kRaw);
      if (!rollup_older) return Tier::kRaw;
    }
    const auto allowed = [&](Tier tier) {
      if (tier == Tier::kRaw) return true;
      const int64_t w = store::TierWidthMs(tier);
      // A range needs at least three bucket widths to hold two whole buckets at any step
      // alignment (rate needs two points).
      return !prefers_raw && step_ms_ >= w && (range_ms == 0 || range_ms >= 3 * w);
    };
    constexpr Tier kCoarseToFine[] = {Tier::k1h, Tier::k1m, Tier::kRaw};
    constexpr Tier kFineToCoarse[] = {Tier::kRaw, Tier::k1m, Tier::k1h};
    for (Tier tier : kCoarseToFine)
      if (allowed(tier) && Reaches(tier, need_min_ms)) return tier;
    // The step allows only tiers that retention has trimmed: a coarser tier that still holds
    // the data answers at a lower resolution rather than not at all.
    for (Tier tier : kFineToCoarse)
      if (Reaches(tier, need_min_ms)) return tier;
    // The store is younger than the query. Tiers whose data start within an hour of the
    // oldest data are equivalent (they were filled from the same samples); among them take
    // what the step allows, else the finest.
    int64_t oldest = std::numeric_limits<int64_t>::max();
    for (Tier tier : kFineToCoarse) oldest = std::min(oldest, StartBound(tier));
    if (oldest == std::numeric_limits<int64_t>::max()) return Tier::kRaw;
    const auto candidate = [&](Tier tier) {
      return !coverage_[static_cast<int>(tier)].empty() &&
             StartBound(tier) - oldest <= store::TierWidthMs(Tier::k1h);
    };
    for (Tier tier : kCoarseToFine)
      if (allowed(tier) && candidate(tier)) return tier;
    for (Tier tier : kFineToCoarse)
      if (candidate(tier)) return tier;
    return Tier::kRaw;
  }

  Status LoadSelector(const Expr& e, const Expr* parent, int64_t span_first, int64_t span_last) {
    GW_RETURN_IF_ERROR(CheckTime());
    const bool matrix = e.kind == Expr::Kind::kMatrixSelector;
    const bool prefers_raw =
        parent && parent->kind == Expr::Kind::kCall && PrefersRaw(parent->func);
    const int64_t lookback = o_.lookback.count();
    // With @ every step reads the same instant; else the steps' span.
    const int64_t first_t = e.at == Expr::At::kNone ? span_first : AtTime(e);
    const int64_t last_t = e.at == Expr::At::kNone ? span_last : AtTime(e);
    const int64_t need_min = first_t - e.offset_ms - (matrix ? e.range_ms : lookback);
    const Tier tier = ChooseTier(need_min, matrix ? e.range_ms : 0, prefers_raw);
    tiers_.push_back(tier);
    Loaded d;
    d.tier = tier;
    d.width_ms = store::TierWidthMs(tier);
    const int64_t maxt = last_t - e.offset_ms;
    int64_t count = 0;
    if (tier == Tier::kRaw) {
      auto r = q_.SelectRaw(e.matchers, need_min, maxt);
      if (!r.ok()) return r.status();
      GW_RETURN_IF_ERROR(AddSeries(r->size()));
      d.series.reserve(r->size());
      for (auto& s : *r) {
        count += static_cast<int64_t>(s.samples.size());
        d.series.push_back(LoadedSeries{std::move(s.labels), {}, std::move(s.samples), {}});
        d.series.back().nameless = DropName(d.series.back().labels);
      }
    } else {
      const int64_t w = d.width_ms;
      // Matrix: whole buckets in [t - range, t). Instant: the bucket holding t (its first
      // sample may be at t) back to the newest one ending within the lookback, which is at
      // least one bucket width so the 1h tier is never empty between bucket ends.
      const int64_t mint = matrix ? need_min : first_t - e.offset_ms - InstantLookback(w) - w;
      // An instant selector reads only each bucket's first and last sample.
      auto r =
          q_.SelectRollups(tier, e.matchers, mint, matrix ? maxt - w : maxt,
                           matrix ? store::kRollupAll : store::kRollupFirst | store::kRollupLast);
      if (!r.ok()) return r.status();
      GW_RETURN_IF_ERROR(AddSeries(r->size()));
      d.series.reserve(r->size());
      for (auto& s : *r) {
        count += static_cast<int64_t>(s.points.size());
        LoadedSeries ls;
        ls.labels = std::move(s.labels);
        ls.nameless = DropName(ls.labels);
        ls.samples.reserve(s.points.size());
        for (const auto& p : s.points) ls.samples.push_back({p.last_t_ms, p.last});
        ls.buckets = std::move(s.points);
        d.series.push_back(std::move(ls));
      }
    }
    GW_RETURN_IF_ERROR(AddSamples(count));
    data_[&e] = std::move(d);
    return Status::Ok();
  }

  // The instant a selector's @ modifier names: a time, or the query's start or end (an
  // instant query's both are its time).
  int64_t AtTime(const Expr& e) const {
    switch (e.at) {
      case Expr::At::kStart:
        return start_ms_;
      case Expr::At::kEnd:
        return end_ms_;
      default:
        return e.at_ms;
    }
  }
  int64_t SubqueryStep(const Expr& e) const {
    return e.step_ms > 0 ? e.step_ms : std::max<int64_t>(1, o_.default_subquery_step.count());
  }
  // A subquery's steps are the multiples of its resolution (Prometheus aligns them to the
  // epoch, so overlapping windows of successive outer steps share them); the first one after
  // `lo - range`.
  int64_t SubqueryFirstStep(const Expr& e, int64_t lo) const {
    const int64_t step = SubqueryStep(e);
    return (FloorDiv(lo - e.range_ms, step) + 1) * step;
  }

  // The subquery's series in its window at outer step t, (t' - range, t'] with t' its @ time
  // or t, minus its offset: the inner expression evaluated at each multiple of the resolution
  // there. Inner results are kept by time, so a range query's overlapping windows evaluate
  // each inner step once.
  Result<std::vector<Series>> Subquery(const Expr& e, int64_t t) {
    const int64_t hi = SelectorTime(e, t);
    const int64_t step = SubqueryStep(e);
    // Bounded like a range query's resolution: a [10y:1ms] window would otherwise evaluate
    // and hold billions of inner steps.
    if (e.range_ms / step > o_.max_points_per_series)
      return Status::InvalidArgument(
          "subquery " + ExprToString(e) + " has " + std::to_string(e.range_ms / step) +
          " steps per window (limit " + std::to_string(o_.max_points_per_series) +
          "); use a coarser resolution");
    auto& cache = subquery_cache_[&e];
    const auto keep_from = cache.lower_bound(hi - e.range_ms);
    for (auto it = cache.begin(); it != keep_from; ++it)
      subquery_points_ -= static_cast<int64_t>(it->second.size());
    cache.erase(cache.begin(), keep_from);
    std::map<Labels, size_t> index;
    std::vector<Series> out;
    for (int64_t ti = SubqueryFirstStep(e, hi); ti <= hi; ti += step) {
      GW_RETURN_IF_ERROR(CheckTime());
      auto it = cache.find(ti);
      if (it == cache.end()) {
        auto v = Eval(*e.lhs, ti);
        if (!v.ok()) return v.status();
        GW_RETURN_IF_ERROR(CheckUniqueLabels(&v->vec));
        // What subqueries hold at once counts against the samples limit.
        subquery_points_ += static_cast<int64_t>(v->vec.size());
        if (samples_ + subquery_points_ > o_.max_samples)
          return Exhausted(
              "query processing would load too many samples into memory in query execution "
              "(limit " +
              std::to_string(o_.max_samples) + "); narrow the subquery's range or resolution");
        it = cache.emplace(ti, std::move(v->vec)).first;
      }
      GW_RETURN_IF_ERROR(AddWork(static_cast<int64_t>(it->second.size()) + 1));
      for (const auto& s : it->second) {
        auto [pos, fresh] = index.try_emplace(s.metric.get(), out.size());
        if (fresh) out.push_back(Series{s.metric, {}});
        out[pos->second].points.push_back({ti, s.value});
      }
    }
    std::sort(out.begin(), out.end(),
              [](const Series& a, const Series& b) { return a.metric < b.metric; });
    return out;
  }

  // A window over points a subquery produced, for the range functions.
  static Window PointsWindow(const std::vector<store::Sample>& points, int64_t end_ms,
                             int64_t range_ms) {
    Window w;
    w.s = points.data();
    w.n = points.size();
    w.start_ms = end_ms - range_ms;
    w.end_ms = end_ms;
    w.range_ms = range_ms;
    return w;
  }

  // Where a selector looks at step t: its @ time or t, moved back by its offset.
  int64_t SelectorTime(const Expr& e, int64_t t) const {
    return (e.at == Expr::At::kNone ? t : AtTime(e)) - e.offset_ms;
  }

  int64_t InstantLookback(int64_t width_ms) const {
    return std::max<int64_t>(o_.lookback.count(), width_ms);
  }

  Status AddSeries(size_t n) {
    series_ += static_cast<int64_t>(n);
    if (series_ > o_.max_series)
      return Exhausted("query selects too many series: " + std::to_string(series_) + " (limit " +
                       std::to_string(o_.max_series) +
                       "); add label matchers to narrow the selectors");
    return Status::Ok();
  }

  const Loaded& Data(const Expr& e) const { return data_.at(&e); }

  // ----- selectors -----

  Result<Value> InstantSelector(const Expr& e, int64_t t) {
    const Loaded& d = Data(e);
    const int64_t ts = SelectorTime(e, t);
    GW_RETURN_IF_ERROR(AddWork(static_cast<int64_t>(d.series.size())));
    Value out;
    out.type = ValueType::kVector;
    out.vec.reserve(d.series.size());
    if (d.cursor.size() != d.series.size() || ts < d.cursor_key)
      d.cursor.assign(d.series.size(), 0);
    d.cursor_key = ts;
    for (size_t i = 0; i < d.series.size(); ++i) {
      const LoadedSeries& ls = d.series[i];
      if (d.tier == Tier::kRaw) {
        const auto& s = ls.samples;
        const size_t k = UpperBoundFrom(s, ts, &d.cursor[i]);
        if (k == 0) continue;
        auto it = s.begin() + static_cast<std::ptrdiff_t>(k - 1);
        if (it->t_ms <= ts - o_.lookback.count()) continue;
        out.vec.push_back({ls.labels, it->value, it->t_ms});
      } else {
        // The newest sample at or before ts the buckets know: the last of the bucket holding
        // ts if it is not after ts, else that bucket's first if it is not, else the previous
        // bucket's last. Exact when ts is a bucket start (the sample at ts opens the bucket).
        const auto& b = ls.buckets;
        const size_t k = UpperBoundFrom(b, ts, &d.cursor[i]);
        if (k == 0) continue;
        const RollupPoint* p = &b[k - 1];
        double v;
        int64_t vt;
        if (p->last_t_ms <= ts) {
          v = p->last, vt = p->last_t_ms;
        } else if (p->first_t_ms <= ts) {
          v = p->first, vt = p->first_t_ms;
        } else if (k >= 2) {
          v = b[k - 2].last, vt = b[k - 2].last_t_ms;
        } else {
          continue;
        }
        if (vt <= ts - InstantLookback(d.width_ms)) continue;
        out.vec.push_back({ls.labels, v, vt});
      }
    }
    return out;
  }

  Result<Value> MatrixSelector(const Expr& e, int64_t t) {
    const Loaded& d = Data(e);
    Value out;
    out.type = ValueType::kMatrix;
    for (const auto& ls : d.series) {
      const Window w = WindowAt(d, ls, SelectorTime(e, t), e.range_ms);
      if (w.n == 0) continue;
      Series s;
      s.metric = ls.labels;
      for (size_t i = 0; i < w.n; ++i) s.points.push_back({w.s[i].t_ms, w.s[i].value});
      GW_RETURN_IF_ERROR(AddSamples(static_cast<int64_t>(w.n)));
      GW_RETURN_IF_ERROR(AddWork(static_cast<int64_t>(w.n)));
      out.mat.push_back(std::move(s));
    }
    return out;
  }

  // ----- functions -----

  Result<double> ScalarArg(const Expr& e, int64_t t) {
    auto v = Eval(e, t);
    if (!v.ok()) return v.status();
    return v->scalar;
  }

  Result<Value> Call(const Expr& e, int64_t t) {
    const Func f = e.func;
    Value out;
    out.type = e.type;
    if (IsRangeFunc(f)) {
      const Expr* sel = nullptr;
      std::vector<double> params;
      for (const auto& a : e.args) {
        if (a->type == ValueType::kMatrix) {
          sel = a.get();
          continue;
        }
        auto p = ScalarArg(*a, t);
        if (!p.ok()) return p.status();
        params.push_back(*p);
      }
      const bool keeps_name = f == Func::kLastOverTime || f == Func::kFirstOverTime;
      if (sel->kind == Expr::Kind::kSubquery) {
        auto series = Subquery(*sel, t);
        if (!series.ok()) return series.status();
        const int64_t end = SelectorTime(*sel, t);
        std::vector<store::Sample> points;
        for (auto& s : *series) {
          points.clear();
          for (const auto& p : s.points) points.push_back({p.t_ms, p.value});
          auto v = OverTime(f, PointsWindow(points, end, sel->range_ms), params, t);
          if (!v) continue;
          out.vec.push_back(
              {keeps_name ? s.metric : SharedLabels(DropName(s.metric.get())), *v, t});
        }
        return out;
      }
      const Loaded& d = Data(*sel);
      for (const auto& ls : d.series) {
        const Window w = WindowAt(d, ls, SelectorTime(*sel, t), sel->range_ms);
        GW_RETURN_IF_ERROR(AddWork(static_cast<int64_t>(w.n) + 1));
        // predict_linear anchors its line at the step's time, not the window's end
        // (Prometheus: enh.Ts), so an offset or @ predicts from the samples to t.
        auto v = OverTime(f, w, params, t);
        if (!v) continue;
        out.vec.push_back({keeps_name ? ls.labels : ls.nameless, *v, t});
      }
      return out;
    }
    if (IsDateFunc(f) && e.args.empty()) {
      // No argument: the evaluation time, as vector(time()).
      out.vec.push_back({{}, DatePart(f, FloorDiv(t, 1000)), t});
      return out;
    }
    switch (f) {
      case Func::kTime:
        return ScalarValue(static_cast<double>(t) / 1000);
      case Func::kPi:
        return ScalarValue(std::numbers::pi);
      case Func::kHistogramQuantile:
      case Func::kHistogramFraction:
        return Histogram(e, t);
      case Func::kVector: {
        auto s = ScalarArg(*e.args[0], t);
        if (!s.ok()) return s.status();
        out.vec.push_back({{}, *s, t});
        return out;
      }
      case Func::kScalar: {
        auto v = Eval(*e.args[0], t);
        if (!v.ok()) return v;
        return ScalarValue(v->vec.size() == 1 ? v->vec[0].value : kNaN);
      }
      case Func::kAbsent:
      case Func::kAbsentOverTime:
        return Absent(e, t);
      default:
        break;
    }
    auto arg = Eval(*e.args[0], t);
    if (!arg.ok()) return arg;
    out.vec = std::move(arg->vec);
    std::vector<double> params;
    for (size_t i = 1; i < e.args.size(); ++i) {
      if (e.args[i]->type != ValueType::kScalar) continue;
      auto p = ScalarArg(*e.args[i], t);
      if (!p.ok()) return p.status();
      params.push_back(*p);
    }
    switch (f) {
      case Func::kSort:
      case Func::kSortDesc: {
        const bool desc = f == Func::kSortDesc;
        // NaN last either way, as Prometheus.
        std::stable_sort(out.vec.begin(), out.vec.end(),
                         [desc](const InstantSample& a, const InstantSample& b) {
                           if (std::isnan(a.value)) return false;
                           if (std::isnan(b.value)) return true;
                           return desc ? a.value > b.value : a.value < b.value;
                         });
        return out;
      }
      case Func::kLabelReplace:
        return LabelReplace(e, std::move(out));
      case Func::kLabelJoin:
        return LabelJoin(e, std::move(out));
      case Func::kSortByLabel:
      case Func::kSortByLabelDesc: {
        const bool desc = f == Func::kSortByLabelDesc;
        std::vector<std::string_view> names;
        for (size_t i = 1; i < e.args.size(); ++i) names.push_back(e.args[i]->str);
        std::stable_sort(out.vec.begin(), out.vec.end(),
                         [&](const InstantSample& a, const InstantSample& b) {
                           const int c = CompareByLabels(a.metric, b.metric, names);
                           return desc ? c > 0 : c < 0;
                         });
        return out;
      }
      case Func::kClamp:
        if (params[1] < params[0]) {
          out.vec.clear();
          return out;
        }
        break;
      default:
        break;
    }
    for (auto& s : out.vec) {
      const double v = s.value;
      double r = v;
      switch (f) {
        case Func::kAbs:
          r = std::fabs(v);
          break;
        case Func::kCeil:
          r = std::ceil(v);
          break;
        case Func::kFloor:
          r = std::floor(v);
          break;
        case Func::kExp:
          r = std::exp(v);
          break;
        case Func::kLn:
          r = std::log(v);
          break;
        case Func::kLog2:
          r = std::log2(v);
          break;
        case Func::kLog10:
          r = std::log10(v);
          break;
        case Func::kSqrt:
          r = std::sqrt(v);
          break;
        case Func::kSgn:
          r = v > 0 ? 1 : v < 0 ? -1 : v;
          break;
        case Func::kRound: {
          const double to = params.empty() ? 1 : params[0];
          const double inv = 1 / to;
          r = std::floor(v * inv + 0.5) / inv;
          break;
        }
        case Func::kClamp:
          r = GoMax(params[0], GoMin(params[1], v));
          break;
        case Func::kClampMin:
          r = GoMax(v, params[0]);
          break;
        case Func::kClampMax:
          r = GoMin(v, params[0]);
          break;
        case Func::kTimestamp:
          r = static_cast<double>(s.t_ms) / 1000;
          break;
        case Func::kAcos:
          r = std::acos(v);
          break;
        case Func::kAcosh:
          r = std::acosh(v);
          break;
        case Func::kAsin:
          r = std::asin(v);
          break;
        case Func::kAsinh:
          r = std::asinh(v);
          break;
        case Func::kAtan:
          r = std::atan(v);
          break;
        case Func::kAtanh:
          r = std::atanh(v);
          break;
        case Func::kCos:
          r = std::cos(v);
          break;
        case Func::kCosh:
          r = std::cosh(v);
          break;
        case Func::kSin:
          r = std::sin(v);
          break;
        case Func::kSinh:
          r = std::sinh(v);
          break;
        case Func::kTan:
          r = std::tan(v);
          break;
        case Func::kTanh:
          r = std::tanh(v);
          break;
        case Func::kDeg:
          r = v * 180 / std::numbers::pi;
          break;
        case Func::kRad:
          r = v * std::numbers::pi / 180;
          break;
        default:
          if (IsDateFunc(f)) {
            // The value is a Unix time in seconds (Go's int64 conversion truncates it).
            r = !std::isfinite(v) || std::fabs(v) > 9.2e18 ? kNaN
                                                           : DatePart(f, static_cast<int64_t>(v));
            break;
          }
          return Status::Internal("function " + std::string(FuncName(f)) + " not evaluated");
      }
      s.value = r;
      DropNameInPlace(&s.metric);
      s.t_ms = t;
    }
    return out;
  }

  Result<Value> Absent(const Expr& e, int64_t t) {
    const Expr& arg = *e.args[0];
    Value out;
    out.type = ValueType::kVector;
    bool present = false;
    if (e.func == Func::kAbsentOverTime && arg.kind == Expr::Kind::kSubquery) {
      auto series = Subquery(arg, t);
      if (!series.ok()) return series.status();
      present = !series->empty();
    } else if (e.func == Func::kAbsentOverTime) {
      const Loaded& d = Data(arg);
      for (const auto& ls : d.series)
        if (WindowAt(d, ls, SelectorTime(arg, t), arg.range_ms).n > 0) present = true;
    } else {
      auto v = Eval(arg, t);
      if (!v.ok()) return v;
      present = !v->vec.empty();
    }
    if (present) return out;
    // Labels from the selector's equality matchers; a label matched more than once or by
    // another operator is left out, as Prometheus does.
    Labels l;
    if (arg.kind == Expr::Kind::kVectorSelector || arg.kind == Expr::Kind::kMatrixSelector) {
      std::vector<std::string> dropped;
      for (const auto& m : arg.matchers) {
        if (m.name() == store::kMetricNameLabel) continue;
        const bool seen = !store::LabelValue(l, m.name()).empty() || Contains(dropped, m.name());
        if (m.op() == store::MatchOp::kEqual && !seen) {
          SetLabel(&l, m.name(), m.value());
        } else {
          SetLabel(&l, m.name(), "");
          dropped.push_back(m.name());
        }
      }
    }
    out.vec.push_back({std::move(l), 1, t});
    return out;
  }

  // Go's regexp Expand syntax: $1, ${1}, $name, ${name}, $$.
  static std::string Expand(std::string_view tmpl, const re2::RE2& re,
                            const std::vector<re2::StringPiece>& groups) {
    std::string out;
    for (size_t i = 0; i < tmpl.size(); ++i) {
      if (tmpl[i] != '$' || i + 1 >= tmpl.size()) {
        out += tmpl[i];
        continue;
      }
      if (tmpl[i + 1] == '$') {
        out += '$';
        ++i;
        continue;
      }
      std::string name;
      size_t j = i + 1;
      if (tmpl[j] == '{') {
        const size_t close = tmpl.find('}', j);
        if (close == std::string_view::npos) {
          out += tmpl[i];
          continue;
        }
        name = std::string(tmpl.substr(j + 1, close - j - 1));
        j = close + 1;
      } else {
        while (j < tmpl.size() &&
               (std::isalnum(static_cast<unsigned char>(tmpl[j])) || tmpl[j] == '_'))
          ++j;
        name = std::string(tmpl.substr(i + 1, j - i - 1));
      }
      if (name.empty()) {
        out += tmpl[i];
        continue;
      }
      int idx = -1;
      if (std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        idx = name.size() < 4 ? std::stoi(name) : -1;
      } else {
        const auto& named = re.NamedCapturingGroups();
        auto it = named.find(name);
        if (it != named.end()) idx = it->second;
      }
      if (idx >= 0 && static_cast<size_t>(idx) < groups.size())
        out.append(groups[idx].data(), groups[idx].size());
      i = j - 1;
    }
    return out;
  }

  Result<Value> LabelJoin(const Expr& e, Value in) {
    const std::string& dst = e.args[1]->str;
    const std::string& sep = e.args[2]->str;
    for (auto& s : in.vec) {
      std::string value;
      for (size_t i = 3; i < e.args.size(); ++i) {
        if (i > 3) value += sep;
        value += store::LabelValue(s.metric, e.args[i]->str);
      }
      if (value.size() > store::kMaxLabelValueBytes)
        return Status::InvalidArgument("label_join(): value of \"" + dst + "\" is too long");
      SetLabel(s.metric.Mutable(), dst, value);
    }
    return in;
  }

  // histogram_quantile(φ, v) and histogram_fraction(lower, upper, v) over classic histograms:
  // the series of v grouped by their labels without `le` and the name; each group's buckets
  // give one value.
  Result<Value> Histogram(const Expr& e, int64_t t) {
    std::vector<double> params;
    for (size_t i = 0; i + 1 < e.args.size(); ++i) {
      auto p = ScalarArg(*e.args[i], t);
      if (!p.ok()) return p.status();
      params.push_back(*p);
    }
    auto in = Eval(*e.args.back(), t);
    if (!in.ok()) return in;
    struct Group {
      Labels metric;
      std::vector<std::pair<double, double>> buckets;
    };
    std::vector<Group> groups;
    std::unordered_map<std::string, size_t> index;
    for (auto& s : in->vec) {
      const std::string_view le = store::LabelValue(s.metric, "le");
      // Go's strconv.ParseFloat: a series whose le does not parse is left out.
      std::string text(le);
      char* end = nullptr;
      // strtod skips leading spaces, which Go's ParseFloat refuses; a NaN bound has no
      // place in the order.
      const double upper = text.empty() || std::isspace(static_cast<unsigned char>(text[0]))
                               ? kNaN
                               : std::strtod(text.c_str(), &end);
      if (std::isnan(upper) || end != text.c_str() + text.size()) continue;
      Labels m = Delete(DropName(s.metric.get()), {"le"});
      auto [it, fresh] = index.try_emplace(LabelsKey(m), groups.size());
      if (fresh) groups.push_back({std::move(m), {}});
      groups[it->second].buckets.push_back({upper, s.value});
    }
    Value out;
    out.type = ValueType::kVector;
    for (auto& g : groups) {
      const double v = e.func == Func::kHistogramQuantile
                           ? BucketQuantile(params[0], std::move(g.buckets))
                           : BucketFraction(params[0], params[1], std::move(g.buckets));
      out.vec.push_back({std::move(g.metric), v, t});
    }
    return out;
  }

  Result<Value> LabelReplace(const Expr& e, Value in) {
    const std::string& dst = e.args[1]->str;
    const std::string& repl = e.args[2]->str;
    const std::string& src = e.args[3]->str;
    auto& re = regex_cache_[&e];
    if (!re) {
      re2::RE2::Options opts;
      opts.set_log_errors(false);
      opts.set_max_mem(8 << 20);
      re = std::make_unique<re2::RE2>("^(?:" + e.args[4]->str + ")$", opts);
      if (!re->ok())
        return Status::InvalidArgument("invalid regular expression in label_replace(): " +
                                       e.args[4]->str);
    }
    std::vector<re2::StringPiece> groups(static_cast<size_t>(re->NumberOfCapturingGroups()) + 1);
    for (auto& s : in.vec) {
      const std::string_view v = store::LabelValue(s.metric, src);
      if (!re->Match(re2::StringPiece(v.data(), v.size()), 0, v.size(), re2::RE2::UNANCHORED,
                     groups.data(), static_cast<int>(groups.size())))
        continue;
      std::string value = Expand(repl, *re, groups);
      if (value.size() > store::kMaxLabelValueBytes)
        return Status::InvalidArgument("label_replace(): value of \"" + dst + "\" is too long");
      SetLabel(s.metric.Mutable(), dst, value);
    }
    return in;
  }

  // ----- binary operators -----

  Result<Value> Binary(const Expr& e, int64_t t) {
    auto l = Eval(*e.lhs, t);
    if (!l.ok()) return l;
    auto r = Eval(*e.rhs, t);
    if (!r.ok()) return r;
    const BinOp op = e.bin_op;
    const bool cmp = IsComparison(op);
    if (l->type == ValueType::kScalar && r->type == ValueType::kScalar) {
      if (cmp) return ScalarValue(Compare(op, l->scalar, r->scalar) ? 1 : 0);
      return ScalarValue(Arith(op, l->scalar, r->scalar));
    }
    Value out;
    out.type = ValueType::kVector;
    if (l->type == ValueType::kScalar || r->type == ValueType::kScalar) {
      const bool scalar_left = l->type == ValueType::kScalar;
      Vector& vec = scalar_left ? r->vec : l->vec;
      const double sv = scalar_left ? l->scalar : r->scalar;
      for (auto& s : vec) {
        const double lv = scalar_left ? sv : s.value;
        const double rv = scalar_left ? s.value : sv;
        if (cmp) {
          const bool keep = Compare(op, lv, rv);
          if (e.return_bool) {
            s.value = keep ? 1 : 0;
            DropNameInPlace(&s.metric);
          } else if (!keep) {
            continue;  // a filter keeps the vector's own value and name
          }
        } else {
          s.value = Arith(op, lv, rv);
          DropNameInPlace(&s.metric);
        }
        s.t_ms = t;
        out.vec.push_back(std::move(s));
      }
      return out;
    }
    if (IsSetOperator(op)) return SetOp(e, std::move(l).value(), std::move(r).value(), t);
    return VectorVector(e, std::move(l).value(), std::move(r).value(), t);
  }

  Result<Value> SetOp(const Expr& e, Value l, Value r, int64_t t) {
    Value out;
    out.type = ValueType::kVector;
    std::unordered_map<std::string, bool> right;
    for (const auto& s : r.vec)
      right[SignatureKey(s.metric, e.matching_on, e.matching_labels)] = true;
    switch (e.bin_op) {
      case BinOp::kAnd:
      case BinOp::kUnless: {
        const bool want = e.bin_op == BinOp::kAnd;
        for (auto& s : l.vec)
          if (right.count(SignatureKey(s.metric, e.matching_on, e.matching_labels)) == want)
            out.vec.push_back(std::move(s));
        break;
      }
      case BinOp::kOr: {
        std::unordered_map<std::string, bool> left;
        for (auto& s : l.vec) {
          left[SignatureKey(s.metric, e.matching_on, e.matching_labels)] = true;
          out.vec.push_back(std::move(s));
        }
        for (auto& s : r.vec)
          if (!left.count(SignatureKey(s.metric, e.matching_on, e.matching_labels)))
            out.vec.push_back(std::move(s));
        break;
      }
      default:
        break;
    }
    return out;
  }

  // Prometheus's VectorBinop: one-to-one, or many-to-one (group_left) and one-to-many
  // (group_right, handled as group_left with the sides swapped and swapped back for the
  // operation).
  Result<Value> VectorVector(const Expr& e, Value l, Value r, int64_t t) {
    const BinOp op = e.bin_op;
    const bool cmp = IsComparison(op);
    const bool one_to_many = e.card == Expr::Card::kOneToMany;
    const bool one_to_one = e.card == Expr::Card::kOneToOne;
    Value out;
    out.type = ValueType::kVector;
    if (l.vec.empty() || r.vec.empty()) return out;
    Vector& many = one_to_many ? r.vec : l.vec;
    Vector& one = one_to_many ? l.vec : r.vec;
    const auto sig = [&](const Labels& m) {
      return SignatureKey(m, e.matching_on, e.matching_labels);
    };
    std::unordered_map<std::string, size_t> one_side;
    for (size_t i = 0; i < one.size(); ++i) {
      auto [it, inserted] = one_side.emplace(sig(one[i].metric), i);
      if (!inserted)
        return Status::InvalidArgument(
            "found duplicate series for the match group on the " +
            std::string(one_to_many ? "left" : "right") + " hand-side of the operation: [" +
            store::LabelsToString(one[it->second].metric) + ", " +
            store::LabelsToString(one[i].metric) +
            "];many-to-many matching not allowed: matching labels must be unique on one side");
    }
    // Per match signature: the lhs seen (one-to-one), or the result label sets made from it
    // (many-to-one, where they must differ).
    std::unordered_map<std::string, size_t> matched;
    std::unordered_map<std::string, std::unordered_map<std::string, bool>> made;
    // Two series of the left side for one match is an error even when the comparison would
    // filter them away (Prometheus's operators.test), so that is checked first, before any
    // series is consumed.
    std::vector<std::string> keys(many.size());
    for (size_t i = 0; i < many.size(); ++i) {
      keys[i] = sig(many[i].metric);
      if (!one_to_one || !one_side.count(keys[i])) continue;
      auto [m, first] = matched.emplace(keys[i], i);
      if (!first)
        return Status::InvalidArgument(
            "multiple matches for labels: many-to-one matching must be explicit "
            "(group_left/group_right): " +
            store::LabelsToString(many[m->second].metric) + " and " +
            store::LabelsToString(many[i].metric));
    }
    for (size_t i = 0; i < many.size(); ++i) {
      auto& s = many[i];
      const std::string& key = keys[i];
      auto it = one_side.find(key);
      if (it == one_side.end()) continue;
      const InstantSample& o = one[it->second];
      const double lv = one_to_many ? o.value : s.value;
      const double rv = one_to_many ? s.value : o.value;
      double value;
      if (cmp) {
        const bool keep = Compare(op, lv, rv);
        if (!e.return_bool && !keep) continue;
        value = e.return_bool ? (keep ? 1 : 0) : lv;
      } else {
        value = Arith(op, lv, rv);
      }
      // The result's labels come from the "many" side (the left for one-to-one).
      Labels metric = std::move(s.metric);
      if (!cmp || e.return_bool) metric = DropName(std::move(metric));
      if (one_to_one && e.has_matching) {
        // Prometheus: on() keeps only its labels (so __name__ goes unless listed); ignoring()
        // removes its labels and leaves __name__ to the rule above.
        if (e.matching_on)
          metric = KeepOnly(metric, e.matching_labels);
        else
          metric = Delete(std::move(metric), e.matching_labels);
      }
      for (const auto& name : e.include_labels) {
        // group_x(labels) copies them from the "one" side; absent there, absent here.
        metric = Delete(std::move(metric), {name});
        const std::string_view v = store::LabelValue(o.metric, name);
        if (!v.empty()) {
          metric.push_back({name, std::string(v)});
          std::sort(metric.begin(), metric.end());
        }
      }
      if (!one_to_one && !made[key].emplace(LabelsKey(metric), true).second) {
        return Status::InvalidArgument(
            "multiple matches for labels: grouping labels must ensure unique matches");
      }
      out.vec.push_back({std::move(metric), value, t});
    }
    return out;
  }

  // ----- aggregation -----

  Result<Value> Aggregate(const Expr& e, int64_t t) {
    auto in = Eval(*e.lhs, t);
    if (!in.ok()) return in;
    double param = 0;
    if (e.param && e.param->type == ValueType::kScalar) {
      auto p = ScalarArg(*e.param, t);
      if (!p.ok()) return p.status();
      param = *p;
    }
    const AggOp op = e.agg_op;
    // Prometheus converts k to an int64 before looking at the input: NaN and values past the
    // range are errors, even over an empty vector.
    if ((op == AggOp::kTopk || op == AggOp::kBottomk || op == AggOp::kLimitk) &&
        !(param <= 9223372036854774784.0 && param >= -9223372036854775808.0))
      return Status::InvalidArgument("Scalar value " + FormatValue(param) + " overflows int64");
    std::vector<std::string> grouping = e.grouping;
    if (op == AggOp::kCountValues && !e.without) grouping.push_back(e.param->str);

    struct Group {
      Labels metric;
      std::vector<size_t> members;
    };
    std::vector<Group> groups;
    std::unordered_map<std::string, size_t> index;
    Vector& vec = in->vec;
    if (op == AggOp::kCountValues) {
      // The value becomes a label first, so it takes part in grouping.
      for (auto& s : vec) SetLabel(s.metric.Mutable(), e.param->str, FormatValue(s.value));
    }
    std::string key;
    for (size_t i = 0; i < vec.size(); ++i) {
      const Labels& m = vec[i].metric;
      // The key straight from the labels; the group's label set only for a new group.
      key.clear();
      for (const auto& x : m) {
        const bool in = e.without
                            ? !Contains(e.grouping, x.name) && x.name != store::kMetricNameLabel
                            : Contains(grouping, x.name);
        if (!in) continue;
        AppendKeyPart(&key, x.name);
        AppendKeyPart(&key, x.value);
      }
      auto [it, inserted] = index.try_emplace(key, groups.size());
      if (inserted)
        groups.push_back({e.without ? Without(m, e.grouping) : KeepOnly(m, grouping), {}});
      groups[it->second].members.push_back(i);
    }
    Value out;
    out.type = ValueType::kVector;
    for (auto& g : groups) {
      const auto values = [&] {
        std::vector<double> v;
        v.reserve(g.members.size());
        for (size_t i : g.members) v.push_back(vec[i].value);
        return v;
      };
      double r = 0;
      switch (op) {
        case AggOp::kSum: {
          KahanSum s;
          for (size_t i : g.members) s.Add(vec[i].value);
          r = s.Value();
          break;
        }
        case AggOp::kAvg: {
          MeanAccumulator m;
          for (size_t i : g.members) m.Add(vec[i].value);
          r = m.Value();
          break;
        }
        case AggOp::kCount:
        case AggOp::kCountValues:
          r = static_cast<double>(g.members.size());
          break;
        case AggOp::kGroup:
          r = 1;
          break;
        case AggOp::kMin:
        case AggOp::kMax: {
          r = kNaN;
          for (size_t i : g.members) {
            const double v = vec[i].value;
            if (std::isnan(r) || (op == AggOp::kMin ? v < r : v > r)) r = v;
          }
          break;
        }
        case AggOp::kStddev:
          r = std::sqrt(Variance(values()));
          break;
        case AggOp::kStdvar:
          r = Variance(values());
          break;
        case AggOp::kQuantile:
          r = Quantile(param, values());
          break;
        case AggOp::kLimitk: {
          // Prometheus's limitk: any k of the group; it takes them in input order, which for
          // both is series order (sorted by labels).
          if (!(param >= 1)) continue;
          const size_t k = param >= static_cast<double>(g.members.size())
                               ? g.members.size()
                               : static_cast<size_t>(param);
          for (size_t i = 0; i < k; ++i) {
            InstantSample s = std::move(vec[g.members[i]]);
            s.t_ms = t;
            out.vec.push_back(std::move(s));
          }
          continue;
        }
        case AggOp::kTopk:
        case AggOp::kBottomk: {
          if (!(param >= 1)) continue;
          const size_t k = param >= static_cast<double>(g.members.size())
                               ? g.members.size()
                               : static_cast<size_t>(param);
          const bool top = op == AggOp::kTopk;
          std::vector<size_t> m = g.members;
          // NaN ranks below every number for both, as Prometheus.
          std::stable_sort(m.begin(), m.end(), [&](size_t a, size_t b) {
            const double x = vec[a].value, y = vec[b].value;
            if (std::isnan(x)) return false;
            if (std::isnan(y)) return true;
            return top ? x > y : x < y;
          });
          for (size_t i = 0; i < k; ++i) {
            InstantSample s = std::move(vec[m[i]]);
            s.t_ms = t;
            out.vec.push_back(std::move(s));
          }
          continue;
        }
      }
      out.vec.push_back({std::move(g.metric), r, t});
    }
    return out;
  }

  const store::Querier& q_;
  const EngineOptions& o_;
  const int64_t start_ms_, end_ms_, step_ms_;
  store::TierCoverage coverage_[store::kNumTiers];
  std::unordered_map<const Expr*, Loaded> data_;
  std::unordered_map<const Expr*, std::map<int64_t, Vector>> subquery_cache_;
  int64_t subquery_points_ = 0;  // samples the subquery caches hold now
  std::unordered_map<const Expr*, std::unique_ptr<re2::RE2>> regex_cache_;
  std::vector<Tier> tiers_;
  int64_t samples_ = 0;
  int64_t work_ = 0;
  int64_t next_check_ = kWorkCheckInterval;
  int64_t series_ = 0;
};

Status CheckUniqueLabels(Vector* v) {
  std::vector<const InstantSample*> p;
  p.reserve(v->size());
  for (const auto& s : *v) p.push_back(&s);
  std::sort(p.begin(), p.end(),
            [](const InstantSample* a, const InstantSample* b) { return a->metric < b->metric; });
  for (size_t i = 1; i < p.size(); ++i)
    if (p[i]->metric == p[i - 1]->metric)
      return Status::InvalidArgument("vector cannot contain metrics with the same labelset: " +
                                     store::LabelsToString(p[i]->metric));
  return Status::Ok();
}

}  // namespace

Status ValidateTimestamp(int64_t t_ms, std::string_view what) {
  if (t_ms < kMinTimeMs || t_ms > kMaxTimeMs)
    return Status::InvalidArgument(std::string(what) +
                                   " is outside the supported range (1970-01-01 to 2262-04-11)");
  return Status::Ok();
}

Status ValidateRange(const EngineOptions& o, int64_t start_ms, int64_t end_ms, int64_t step_ms) {
  GW_RETURN_IF_ERROR(ValidateTimestamp(start_ms, "start"));
  GW_RETURN_IF_ERROR(ValidateTimestamp(end_ms, "end"));
  if (end_ms < start_ms)
    return Status::InvalidArgument("end timestamp must not be before start time");
  if (step_ms <= 0)
    return Status::InvalidArgument(
        "zero or negative query resolution step widths are not accepted. Try a positive integer");
  if (end_ms - start_ms > o.max_range.count())
    return Status::InvalidArgument("query time range of " + FormatDuration(end_ms - start_ms) +
                                   " exceeds the limit of " + FormatDuration(o.max_range.count()));
  if ((end_ms - start_ms) / step_ms > o.max_points_per_series) {
    std::string limit = std::to_string(o.max_points_per_series);
    if (limit.size() > 3) limit.insert(limit.size() - 3, ",");
    return Status::InvalidArgument("exceeded maximum resolution of " + limit +
                                   " points per timeseries. Try decreasing the query resolution "
                                   "(?step=XX)");
  }
  return Status::Ok();
}

Result<QueryResult> InstantQuery(const store::Querier& querier, const EngineOptions& options,
                                 const Expr& expr, int64_t t_ms) {
  GW_RETURN_IF_ERROR(ValidateTimestamp(t_ms, "time"));
  Evaluator ev(querier, options, t_ms, t_ms, 0);
  GW_RETURN_IF_ERROR(ev.Load(expr, nullptr));
  auto v = ev.Eval(expr, t_ms);
  if (!v.ok()) return v.status();
  QueryResult out;
  out.type = v->type;
  out.t_ms = t_ms;
  out.scalar = v->scalar;
  out.string = std::move(v->str);
  out.vector = std::move(v->vec);
  out.matrix = std::move(v->mat);
  out.tiers = ev.tiers();
  if (out.type == ValueType::kVector) GW_RETURN_IF_ERROR(CheckUniqueLabels(&out.vector));
  return out;
}

Result<QueryResult> RangeQuery(const store::Querier& querier, const EngineOptions& options,
                               const Expr& expr, int64_t start_ms, int64_t end_ms,
                               int64_t step_ms) {
  GW_RETURN_IF_ERROR(ValidateRange(options, start_ms, end_ms, step_ms));
  if (expr.type != ValueType::kScalar && expr.type != ValueType::kVector)
    return Status::InvalidArgument(
        "invalid expression type \"" +
        std::string(expr.type == ValueType::kMatrix ? "range vector" : "string") +
        "\" for range query, must be Scalar or instant Vector");
  Evaluator ev(querier, options, start_ms, end_ms, step_ms);
  GW_RETURN_IF_ERROR(ev.Load(expr, nullptr));
  QueryResult out;
  out.type = ValueType::kMatrix;
  std::unordered_map<std::string, size_t> index;
  const int64_t steps = (end_ms - start_ms) / step_ms;  // bounded by ValidateRange
  for (int64_t i = 0; i <= steps; ++i) {
    GW_RETURN_IF_ERROR(ev.CheckTime());
    const int64_t t = start_ms + i * step_ms;
    auto v = ev.Eval(expr, t);
    if (!v.ok()) return v.status();
    if (v->type == ValueType::kScalar) {
      if (out.matrix.empty()) out.matrix.emplace_back();
      out.matrix[0].points.push_back({t, v->scalar});
      GW_RETURN_IF_ERROR(ev.AddSamples(1));
      continue;
    }
    for (auto& s : v->vec) {
      auto [it, inserted] = index.emplace(LabelsKey(s.metric), out.matrix.size());
      if (inserted) out.matrix.push_back({std::move(s.metric), {}});
      auto& points = out.matrix[it->second].points;
      if (!points.empty() && points.back().t_ms == t)
        return Status::InvalidArgument("vector cannot contain metrics with the same labelset: " +
                                       store::LabelsToString(out.matrix[it->second].metric));
      points.push_back({t, s.value});
    }
    GW_RETURN_IF_ERROR(ev.AddSamples(static_cast<int64_t>(v->vec.size())));
  }
  std::sort(out.matrix.begin(), out.matrix.end(),
            [](const Series& a, const Series& b) { return a.metric < b.metric; });
  out.tiers = ev.tiers();
  return out;
}

Result<QueryResult> InstantQuery(const store::Querier& querier, const EngineOptions& options,
                                 std::string_view query, int64_t t_ms) {
  auto e = ParseExpr(query, options.parse);
  if (!e.ok()) return e.status();
  return InstantQuery(querier, options, **e, t_ms);
}

Result<QueryResult> RangeQuery(const store::Querier& querier, const EngineOptions& options,
                               std::string_view query, int64_t start_ms, int64_t end_ms,
                               int64_t step_ms) {
  auto e = ParseExpr(query, options.parse);
  if (!e.ok()) return e.status();
  return RangeQuery(querier, options, **e, start_ms, end_ms, step_ms);
}

}  // namespace gpuwatch::query
