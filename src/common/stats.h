// Robust statistics over small samples: the median and the median absolute deviation, the one
// copy every module uses (a second copy drifts).
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace gpuwatch {

// REQUIRES: !v.empty().
inline double Median(std::vector<double> v) {
  const size_t n = v.size();
  std::nth_element(v.begin(), v.begin() + n / 2, v.end());
  const double upper = v[n / 2];
  if (n % 2 == 1) return upper;
  return (*std::max_element(v.begin(), v.begin() + n / 2) + upper) / 2;
}

// The median of the values of (key, value) pairs, such as a time window's (t, sample).
// REQUIRES: !pairs.empty().
template <typename Pairs>
double MedianOfValues(const Pairs& pairs) {
  std::vector<double> v;
  v.reserve(pairs.size());
  for (const auto& p : pairs) v.push_back(p.second);
  return Median(std::move(v));
}

// Median absolute deviation, scaled to a normal distribution's standard deviation.
// REQUIRES: !v.empty().
inline double Mad(const std::vector<double>& v) {
  const double m = Median(v);
  std::vector<double> dev;
  dev.reserve(v.size());
  for (double x : v) dev.push_back(std::fabs(x - m));
  return 1.4826 * Median(std::move(dev));
}

}  // namespace gpuwatch
