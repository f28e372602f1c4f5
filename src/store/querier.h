// Querier: the read side of the store as the query engine sees it — raw samples and the
// 1-minute / 1-hour rollup tiers, selected by label matchers over a time range.
//
// The store (store/store.h) implements it over its head and block files; tests implement it
// in memory. Rollup points cover [t_ms, t_ms + tier width) of one series: min, max, sum and
// count of the raw samples in it, and the first and last of them with their timestamps (the
// first makes an instant lookup at a bucket start exact: the sample at t opens the bucket).
//
// Thread-safety: implementations are safe to call from any number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/chunkenc.h"
#include "store/head.h"
#include "store/labels.h"

namespace gpuwatch::store {

enum class Tier { kRaw = 0, k1m = 1, k1h = 2 };
inline constexpr int kNumTiers = 3;
std::string_view TierName(Tier tier);  // "raw", "1m", "1h"
int64_t TierWidthMs(Tier tier);        // 0 for raw, 60'000, 3'600'000

struct RollupPoint {
  int64_t t_ms = 0;  // bucket start, a multiple of the tier width
  double min = 0, max = 0, sum = 0, count = 0, last = 0;
  int64_t last_t_ms = 0;  // timestamp of the sample `last` came from
  double first = 0;
  int64_t first_t_ms = 0;  // timestamp of the sample `first` came from
};

struct SeriesRollups {
  Labels labels;
  std::vector<RollupPoint> points;  // ascending t_ms, one per bucket
};

// The oldest and newest timestamps a tier holds data for (both 0 when it holds none).
struct TierCoverage {
  int64_t min_t_ms = 0;
  int64_t max_t_ms = 0;
  bool empty() const { return min_t_ms == 0 && max_t_ms == 0; }
};

// The parts of rollup points a caller needs (bits); a store may leave the others zero and so
// decode less (an instant selector needs only first and last).
enum RollupParts : uint32_t {
  kRollupMinMax = 1,
  kRollupSumCount = 2,
  kRollupFirst = 4,
  kRollupLast = 8,
  kRollupAll = 15,
};

class Querier {
 public:
  virtual ~Querier() = default;

  // Raw samples of every series the matchers select within [mint_ms, maxt_ms], each series'
  // samples ascending and unique by timestamp. Series without samples there are left out.
  virtual Result<std::vector<SeriesSamples>> SelectRaw(const std::vector<Matcher>& matchers,
                                                       int64_t mint_ms, int64_t maxt_ms) const = 0;
  // Rollup points of `tier` (k1m or k1h) whose buckets start within [mint_ms, maxt_ms], with
  // at least the `parts` (RollupParts bits) filled in.
  virtual Result<std::vector<SeriesRollups>> SelectRollups(Tier tier,
                                                           const std::vector<Matcher>& matchers,
                                                           int64_t mint_ms, int64_t maxt_ms,
                                                           uint32_t parts = kRollupAll) const = 0;
  virtual TierCoverage Coverage(Tier tier) const = 0;

  // Label sets of the series the matchers select that have data in [mint_ms, maxt_ms].
  virtual Result<std::vector<Labels>> Series(const std::vector<Matcher>& matchers, int64_t mint_ms,
                                             int64_t maxt_ms) const = 0;
  // Sorted label names / values of `name` over the series the matchers select (all series
  // when `matchers` is empty).
  virtual Result<std::vector<std::string>> LabelNames(
      const std::vector<Matcher>& matchers) const = 0;
  virtual Result<std::vector<std::string>> LabelValues(
      const std::string& name, const std::vector<Matcher>& matchers) const = 0;
};

}  // namespace gpuwatch::store
