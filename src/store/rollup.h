// Rollups: the 1-minute and 1-hour tiers of the store. A rollup point summarizes one series
// over one bucket [t, t + width) aligned to the Unix epoch: min, max, sum, count and the first
// and last samples. Points of the same bucket computed from different pieces of a series (two
// blocks that split a bucket, a block and the head) combine exactly, so rollups can be computed
// whenever raw data is persisted and merged at query or compaction time. Pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "store/chunkenc.h"
#include "store/querier.h"

namespace gpuwatch::store {

// The bucket start of t_ms (floor division, also for negative timestamps).
int64_t BucketStart(int64_t t_ms, int64_t width_ms);

// Rollup points of `samples` (ascending by time), appended to `out` in bucket order.
// NaN samples count but do not move min and max (as Prometheus's min_over_time ignores them).
void AppendRollups(std::span<const Sample> samples, int64_t width_ms,
                   std::vector<RollupPoint>* out);

// Combines two points of the same bucket.
RollupPoint CombineRollups(const RollupPoint& a, const RollupPoint& b);

// Merges `b` into `a`; both ascending by bucket; the result is ascending with one point per
// bucket.
void MergeRollups(std::vector<RollupPoint>* a, const std::vector<RollupPoint>& b);

}  // namespace gpuwatch::store
