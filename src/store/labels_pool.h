// LabelsPool: one copy of each label set for a whole store. The head's index and every open
// block's index hold a series' label set by a shared pointer into the pool instead of a copy
// each: a hub's store keeps ~20 blocks after a week, and each block's own copy of its series'
// labels was ~0.8 KiB a series (bench/fleet/RESULTS.md, "Memory over time"). What Prometheus's
// block indexes do with a symbol table on disk, done in memory across blocks.
//
// A label set leaves the pool when the last holder drops it (a block closed by compaction or
// retention, a head's series taken back), so a churning label (a pid, a job id) does not grow
// the pool for the store's lifetime. A LabelsPool is a handle: copies share one pool, which
// lives until the last handle and the last label set from it are gone.
// Thread-safety: Intern may run from any number of threads.
#pragma once

#include <memory>

#include "store/labels.h"

namespace gpuwatch::store {

class LabelsPool {
 public:
  LabelsPool();
  // The pool's copy of `labels` (added when it has none). REQUIRES: `labels` from MakeLabels.
  std::shared_ptr<const Labels> Intern(Labels labels) const;
  size_t size() const;  // distinct label sets held

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// A hash of a label set's names and values (the pool's and the series index's lookup key).
size_t HashLabels(const Labels& labels);

}  // namespace gpuwatch::store
