// AutoBaselines: the agent learns a template's baseline by itself (issue 7, R13: "or
// automatically from the first stable window of a run, after warm-up"). When a running job with
// a template has been up for its warm-up plus the learning window, the job's records in the
// flight recorder go through the same analyze::LearnRuns as `gpuwatch baseline learn`, and the
// result is stored under <data-dir>/baselines — only when the template has no current baseline
// on this shape (none learned since the node's topology last changed), so baselines do not pile
// up one per run. Each job is tried once.
//
// Thread-safety: Tick from one thread (the agent's tier thread).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "analyze/baseline.h"
#include "jobs/job_registry.h"

namespace gpuwatch::server {

class AutoBaselines {
 public:
  using WindowFn = std::function<std::vector<std::string>(int64_t from_ms, int64_t to_ms)>;
  // `dir`: where baselines live; `o`: warm-up and window (o.window_s > 0).
  AutoBaselines(std::string dir, analyze::RunOptions o)
      : store_(std::move(dir)), o_(std::move(o)) {}

  // Learns what is due; returns one line per baseline stored ("" when none).
  std::vector<std::string> Tick(int64_t now_ms, const std::vector<jobs::JobView>& jobs,
                                const WindowFn& window, int64_t stale_before_ms);

 private:
  analyze::BaselineStore store_;
  analyze::RunOptions o_;
  std::set<std::string> tried_;  // job ids, bounded by pruning jobs no longer listed
};

}  // namespace gpuwatch::server
