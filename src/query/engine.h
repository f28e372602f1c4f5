// PromQL evaluation against a store::Querier: instant and range queries for the subset
// docs/promql.md describes, with Prometheus's semantics (5-minute lookback, left-open
// windows, extrapolated rate/increase, __name__ dropped where the meaning changes).
//
// A range query is evaluated step by step, but each selector reads the store once, over the
// whole span it needs, and each step looks up its window in that data by binary search. Each
// selector reads one tier: raw, 1m or 1h rollups, the coarsest the step allows that reaches
// back far enough (docs/promql.md, "Tiers"). The limits in EngineOptions bound what one query
// can cost, since the API is open to anyone who can reach the agent; exceeding one is a
// ResourceExhausted error, bad parameters are InvalidArgument, running out of time is
// DeadlineExceeded and a cancelled query is Cancelled.
//
// Thread-safety: the functions are reentrant; concurrent queries share nothing but the
// Querier, which is thread-safe by contract.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "query/promql.h"
#include "store/labels.h"
#include "store/querier.h"

namespace gpuwatch::query {

// Timestamps a query may name: the Unix epoch up to the end of int64 nanoseconds
// (2262-04-11), the range every Prometheus client can represent.
inline constexpr int64_t kMinTimeMs = 0;
inline constexpr int64_t kMaxTimeMs = 9'223'372'036'854;

struct EngineOptions {
  // How far back an instant selector looks for a sample (Prometheus's lookback delta).
  std::chrono::milliseconds lookback{std::chrono::minutes(5)};
  // A subquery written without a resolution (`x[5m:]`) steps by this: Prometheus's default
  // global evaluation_interval.
  std::chrono::milliseconds default_subquery_step{std::chrono::minutes(1)};
  // Samples (raw samples or rollup buckets) read from the store plus points held in a range
  // query's result, per query.
  int64_t max_samples = 50'000'000;
  // Series all selectors of one query may select together.
  int64_t max_series = 100'000;
  // Prometheus's rule: (end - start) / step may not exceed this.
  int64_t max_points_per_series = 11'000;
  // Longest start..end span of a range query.
  std::chrono::milliseconds max_range{std::chrono::hours(24 * 365 * 10)};
  // Let selectors read the 1m/1h rollup tiers when the step allows it.
  bool use_rollups = true;
  // Reads this tier for every selector, bypassing the choice (tests, debugging).
  std::optional<store::Tier> force_tier;
  ParseOptions parse;
  // Work: samples visited by selectors and range functions, summed over every step.
  // max_samples counts what is loaded, once; a [10y] window that every one of 11,000 steps
  // scans again costs steps × samples, and only this limit sees that (issue 17, D4).
  int64_t max_work = 1'000'000'000;
  // Per query, set by the caller: evaluation stops with DeadlineExceeded once `deadline` has
  // passed, or with Cancelled once *cancelled is true (the client left, the agent stops).
  // Checked at every step and every kWorkCheckInterval samples of work.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  const std::atomic<bool>* cancelled = nullptr;
};
inline constexpr int64_t kWorkCheckInterval = 1 << 20;

// A label set shared by every step's sample of one series: selectors hand out the loaded
// series' labels without allocating, and the first change copies them (copy-on-write). A
// range query over 1280 series at 360 steps would otherwise copy 460k label sets.
// Not thread-safe across copies (evaluation is single-threaded).
class SharedLabels {
 public:
  SharedLabels() : p_(Empty()) {}
  SharedLabels(store::Labels l)  // NOLINT: implicit, a Labels is-a label set
      : p_(std::make_shared<store::Labels>(std::move(l))) {}
  SharedLabels(std::initializer_list<store::Label> il) : SharedLabels(store::Labels(il)) {}
  operator const store::Labels&() const { return *p_; }  // NOLINT: implicit by design
  const store::Labels& get() const { return *p_; }
  // The labels to change, copied first if another sample shares them.
  store::Labels* Mutable() {
    if (p_.use_count() != 1) p_ = std::make_shared<store::Labels>(*p_);
    return p_.get();
  }
  store::Labels::const_iterator begin() const { return p_->begin(); }
  store::Labels::const_iterator end() const { return p_->end(); }
  size_t size() const { return p_->size(); }
  bool empty() const { return p_->empty(); }
  friend bool operator==(const SharedLabels& a, const SharedLabels& b) {
    return a.p_ == b.p_ || *a.p_ == *b.p_;
  }
  friend bool operator<(const SharedLabels& a, const SharedLabels& b) { return *a.p_ < *b.p_; }

 private:
  static const std::shared_ptr<store::Labels>& Empty() {
    static const auto* empty =
        new std::shared_ptr<store::Labels>(std::make_shared<store::Labels>());
    return *empty;
  }
  std::shared_ptr<store::Labels> p_;
};

struct InstantSample {
  SharedLabels metric;
  double value = 0;
  // The sample's own timestamp for an instant selector's output (timestamp() reads it);
  // the evaluation time otherwise.
  int64_t t_ms = 0;
};
using Vector = std::vector<InstantSample>;

struct Point {
  int64_t t_ms = 0;
  double value = 0;
};
struct Series {
  SharedLabels metric;
  std::vector<Point> points;  // ascending t_ms
};
using Matrix = std::vector<Series>;

struct QueryResult {
  ValueType type = ValueType::kVector;  // a range query's result is always kMatrix
  int64_t t_ms = 0;                     // evaluation time of an instant query
  double scalar = 0;
  std::string string;
  Vector vector;
  Matrix matrix;  // a range query's series are sorted by labels
  // The tier each selector read, in the order the selectors appear in the query.
  std::vector<store::Tier> tiers;
};

// REQUIRES: `expr` came from ParseExpr.
Result<QueryResult> InstantQuery(const store::Querier& querier, const EngineOptions& options,
                                 const Expr& expr, int64_t t_ms);
Result<QueryResult> RangeQuery(const store::Querier& querier, const EngineOptions& options,
                               const Expr& expr, int64_t start_ms, int64_t end_ms, int64_t step_ms);

// Parse, then evaluate.
Result<QueryResult> InstantQuery(const store::Querier& querier, const EngineOptions& options,
                                 std::string_view query, int64_t t_ms);
Result<QueryResult> RangeQuery(const store::Querier& querier, const EngineOptions& options,
                               std::string_view query, int64_t start_ms, int64_t end_ms,
                               int64_t step_ms);

// The parameter checks RangeQuery makes, with Prometheus's messages; the API calls them
// before evaluating so bad parameters get a 400 rather than an evaluation error.
Status ValidateTimestamp(int64_t t_ms, std::string_view what);
Status ValidateRange(const EngineOptions& options, int64_t start_ms, int64_t end_ms,
                     int64_t step_ms);

}  // namespace gpuwatch::query
