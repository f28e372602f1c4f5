// FleetJobs: the hub's jobs, across nodes, from the agents' record streams (issue 19).
//
// An agent knows a job from its ranks over the job socket (jobs/job_registry.h); the hub knows
// it from the `job` and `step` records every node running it sends (trace-format.md): a
// multi-node job is one job here, with the nodes and GPUs it runs on and every rank. The views
// are the registry's (jobs::JobView), so /api/v1/jobs reads the same on a hub as on an agent,
// with `nodes` and each rank's `node` added.
//
// A job is running from its first `start` until every node that started it sent `end`; then
// finished (every exit code 0 or absent) or failed. Window statistics are over the last
// window_ms of the job's own steps (its newest step time, not the hub's clock: a node catching
// up after an outage is judged on its own time line). Memory is bounded: max_steps_per_rank
// recent steps a rank, max_jobs jobs (ended ones are forgotten oldest first, then running
// ones that have been silent longest).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "jobs/job_registry.h"

namespace gpuwatch::server {

struct FleetJobsOptions {
  int64_t window_ms = 60'000;
  size_t max_steps_per_rank = 128;
  size_t max_jobs = 4096;
  size_t max_ranks_per_job = 65'536;
};

class FleetJobs {
 public:
  explicit FleetJobs(FleetJobsOptions options = {}) : options_(options) {}

  // A record of `node` (its `job` and `step` records count; others are ignored).
  void Add(const std::string& node, const nlohmann::json& record, int64_t t_ms);

  // Running first, then ended, newest first.
  std::vector<jobs::JobView> Jobs() const;
  std::optional<jobs::JobView> Job(const std::string& id) const;

 private:
  struct Step {
    int64_t t_ms;
    uint64_t step;
    double duration_s, samples;
    std::optional<double> data_wait_s, comm_s, checkpoint_s, loss, grad_norm;
  };
  struct Rank {
    std::string node;
    std::optional<unsigned> gpu;
    uint64_t steps_total = 0;
    std::deque<Step> recent;
  };
  struct JobRec {
    std::string template_name, user, project;
    int64_t start_ms = 0, end_ms = 0, last_seen_ms = 0;
    std::optional<uint32_t> world_size;
    std::map<std::string, std::set<unsigned>> gpus_by_node;
    std::set<std::string> started, ended;
    bool failed = false;
    std::map<uint32_t, Rank> ranks;
    bool running() const { return !started.empty() && ended.size() < started.size(); }
  };
  jobs::JobView View(const std::string& id, const JobRec& j) const;
  void Evict();  // REQUIRES: mu_ held

  const FleetJobsOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, JobRec> jobs_;
};

}  // namespace gpuwatch::server
