// MemoryQuerier: a store::Querier over series held in vectors, for tests of the query engine
// and the query API. Rollup tiers are computed from the raw samples exactly as the interface
// defines them (min/max/sum/count/last per bucket [t, t + width)), and each tier can be
// trimmed to a retention start so tests can drive the engine's tier fallback.
//
// Thread-safety: not thread-safe while being filled; const methods are safe to call
// concurrently afterwards.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "store/querier.h"

namespace gpuwatch::query::testing {

class MemoryQuerier final : public store::Querier {
 public:
  // REQUIRES: `samples` ascending and unique by t_ms; `labels` valid (store::MakeLabels).
  void Add(store::Labels labels, std::vector<store::Sample> samples) {
    series_.push_back({std::move(labels), std::move(samples)});
  }
  // Hides data of `tier` older than `min_t_ms`, as retention would have deleted it.
  void Retain(store::Tier tier, int64_t min_t_ms) { retain_[static_cast<int>(tier)] = min_t_ms; }
  // How many Select calls were made (the engine must read each selector once).
  int selects() const { return selects_; }

  Result<std::vector<store::SeriesSamples>> SelectRaw(const std::vector<store::Matcher>& matchers,
                                                      int64_t mint_ms,
                                                      int64_t maxt_ms) const override {
    ++selects_;
    std::vector<store::SeriesSamples> out;
    const int64_t lo = std::max(mint_ms, retain_[0]);
    for (const auto& s : series_) {
      if (!Matches(s.labels, matchers)) continue;
      store::SeriesSamples r{s.labels, {}};
      for (const auto& x : s.samples)
        if (x.t_ms >= lo && x.t_ms <= maxt_ms) r.samples.push_back(x);
      if (!r.samples.empty()) out.push_back(std::move(r));
    }
    return out;
  }

  Result<std::vector<store::SeriesRollups>> SelectRollups(
      store::Tier tier, const std::vector<store::Matcher>& matchers, int64_t mint_ms,
      int64_t maxt_ms,
      uint32_t /*parts: all are always filled in*/ = store::kRollupAll) const override {
    ++selects_;
    std::vector<store::SeriesRollups> out;
    const int64_t lo = std::max(mint_ms, retain_[static_cast<int>(tier)]);
    for (const auto& s : series_) {
      if (!Matches(s.labels, matchers)) continue;
      store::SeriesRollups r{s.labels, {}};
      for (const auto& p : Rollups(s.samples, store::TierWidthMs(tier)))
        if (p.t_ms >= lo && p.t_ms <= maxt_ms) r.points.push_back(p);
      if (!r.points.empty()) out.push_back(std::move(r));
    }
    return out;
  }

  store::TierCoverage Coverage(store::Tier tier) const override {
    store::TierCoverage c;
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    const int64_t keep = retain_[static_cast<int>(tier)];
    for (const auto& s : series_) {
      if (tier == store::Tier::kRaw) {
        for (const auto& x : s.samples) {
          if (x.t_ms < keep) continue;
          lo = std::min(lo, x.t_ms);
          hi = std::max(hi, x.t_ms);
        }
      } else {
        for (const auto& p : Rollups(s.samples, store::TierWidthMs(tier))) {
          if (p.t_ms < keep) continue;
          lo = std::min(lo, p.t_ms);
          hi = std::max(hi, p.t_ms);
        }
      }
    }
    if (lo <= hi) c = {lo, hi};
    return c;
  }

  Result<std::vector<store::Labels>> Series(const std::vector<store::Matcher>& matchers,
                                            int64_t mint_ms, int64_t maxt_ms) const override {
    std::vector<store::Labels> out;
    for (const auto& s : series_) {
      if (!Matches(s.labels, matchers)) continue;
      for (const auto& x : s.samples) {
        if (x.t_ms >= mint_ms && x.t_ms <= maxt_ms) {
          out.push_back(s.labels);
          break;
        }
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  Result<std::vector<std::string>> LabelNames(
      const std::vector<store::Matcher>& matchers) const override {
    std::vector<std::string> out;
    for (const auto& s : series_)
      if (Matches(s.labels, matchers))
        for (const auto& l : s.labels) out.push_back(l.name);
    return SortedUnique(std::move(out));
  }

  Result<std::vector<std::string>> LabelValues(
      const std::string& name, const std::vector<store::Matcher>& matchers) const override {
    std::vector<std::string> out;
    for (const auto& s : series_) {
      if (!Matches(s.labels, matchers)) continue;
      const auto v = store::LabelValue(s.labels, name);
      if (!v.empty()) out.emplace_back(v);
    }
    return SortedUnique(std::move(out));
  }

  static std::vector<store::RollupPoint> Rollups(const std::vector<store::Sample>& samples,
                                                 int64_t width) {
    std::vector<store::RollupPoint> out;
    for (const auto& x : samples) {
      const int64_t start = FloorDiv(x.t_ms, width) * width;
      if (out.empty() || out.back().t_ms != start) {
        out.push_back({start, x.value, x.value, 0, 0, x.value, x.t_ms, x.value, x.t_ms});
      }
      auto& p = out.back();
      p.min = std::min(p.min, x.value);
      p.max = std::max(p.max, x.value);
      p.sum += x.value;
      p.count += 1;
      p.last = x.value;
      p.last_t_ms = x.t_ms;
    }
    return out;
  }

 private:
  struct Stored {
    store::Labels labels;
    std::vector<store::Sample> samples;
  };

  static int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && (a < 0)); }

  static bool Matches(const store::Labels& l, const std::vector<store::Matcher>& matchers) {
    for (const auto& m : matchers)
      if (!m.Matches(store::LabelValue(l, m.name()))) return false;
    return true;
  }

  static std::vector<std::string> SortedUnique(std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }

  std::vector<Stored> series_;
  int64_t retain_[store::kNumTiers] = {std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::min()};
  mutable int selects_ = 0;
};

}  // namespace gpuwatch::query::testing
