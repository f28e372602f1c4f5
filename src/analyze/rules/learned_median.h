// A job's own baseline of one quantity (a step's duration, its data-wait or comm share): the
// median of its first values after warm-up, learned once. Learned from `max_values` values, or
// from all values of the first `window_s` when there are at least `min_values` of them — a job
// that steps every 5 s gives 100 steps only after eight minutes, by when a fault may already
// be under way.
#pragma once

#include <optional>
#include <vector>

#include "common/stats.h"

namespace gpuwatch::analyze {

class LearnedMedian {
 public:
  LearnedMedian(size_t max_values, double window_s, size_t min_values)
      : max_values_(max_values), window_s_(window_s), min_values_(min_values) {}

  // Adds a value seen at t; true once the median is learned (then values are ignored).
  bool Add(double t, double v) {
    if (value_) return true;
    if (values_.empty()) first_t_ = t;
    values_.push_back(v);
    if (values_.size() >= max_values_ ||
        (t - first_t_ >= window_s_ && values_.size() >= min_values_)) {
      value_ = Median(values_);
      values_.clear();
      values_.shrink_to_fit();
    }
    return value_.has_value();
  }
  const std::optional<double>& value() const { return value_; }

 private:
  size_t max_values_;
  double window_s_;
  size_t min_values_;
  double first_t_ = 0;
  std::vector<double> values_;
  std::optional<double> value_;
};

}  // namespace gpuwatch::analyze
