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
// Durable across the hub's restarts (Snapshot / Restore, HubIngest keeps the file): every job
// with its state, owner, nodes and ranks' step counts, and for each node the position in the
// hub's record log (HubIngest) up to which its entries are counted in. The recent steps are not
// kept: the restarted hub rebuilds them by Replay of the log's newest entries, where an entry at
// or below the node's position only refills the windows and one past it is counted — so a step
// is counted once whether the hub stopped cleanly or crashed between snapshots. (A hub with no
// snapshot to read counts what its recorders reload: the logs' newest entries.)
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

#include "common/status.h"
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
  // The job and step records of one entry of the node's record log, `log_seq` its sequence
  // number there: counted in, and the node's position moves to it.
  struct TimedRecord {
    nlohmann::json record;
    int64_t t_ms;
  };
  void AddEntry(const std::string& node, uint64_t log_seq, const std::vector<TimedRecord>& records);
  // An entry read back from the log after a restart: at or below the node's position it only
  // refills the recent steps of jobs already known (their counts hold it); past it, AddEntry.
  void Replay(const std::string& node, uint64_t log_seq, const std::vector<TimedRecord>& records);
  // The node's position (0: none).
  uint64_t Position(const std::string& node) const;
  // Lowers the node's position to at most `max_seq` (0 forgets it): its log was cut short or
  // replaced, and what it appends next is new.
  void ClampPosition(const std::string& node, uint64_t max_seq);
  std::vector<std::string> PositionedNodes() const;

  // Everything but the recent steps, with the positions: {"version":1,"positions":{node:seq},
  // "jobs":[...]}. `changes` (optional): the change counter it was taken at.
  nlohmann::json Snapshot(uint64_t* changes = nullptr) const;
  // Replaces the state with a snapshot's; a snapshot that does not read (a damaged file) is an
  // error naming what was wrong, and leaves the state as it was.
  Status Restore(const nlohmann::json& snapshot);
  // Bumped by every change (a snapshot is due when it moved).
  uint64_t Changes() const;

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
    std::optional<uint64_t> last_step;  // kept beside `recent`: a restored rank has no steps
    int64_t last_step_ms = 0;
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
  // `count`: false when replaying what a restored job already counts (only `recent` fills,
  // and only for jobs known). REQUIRES: mu_ held.
  void AddLocked(const std::string& node, const nlohmann::json& record, int64_t t_ms, bool count);
  void Evict();  // REQUIRES: mu_ held

  const FleetJobsOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, JobRec> jobs_;
  std::map<std::string, uint64_t> positions_;  // node -> its newest log entry counted in
  uint64_t changes_ = 0;
};

}  // namespace gpuwatch::server
