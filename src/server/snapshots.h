// Failure snapshots (R22): when a job fails, hangs, a GPU is lost (or an operator asks), the
// last minutes of everything this node recorded — in the trace format of
// ../shared/spec/trace-format.md, from the flight recorder — and the job's log lines are kept
// together as one replayable bundle under <data-dir>/snapshots/<id>/:
//   trace.jsonl.gz  the records of [t - window, t]
//   job.log         every log line the event store holds for the job (bounded)
//   manifest.json   what, why, when; written last, so a bundle without it is unfinished
// The window is captured when the snapshot is taken; compressing and writing happen on the
// manager's own thread so the agent's tiers never wait for a disk. Snapshots are rate limited
// (one per job and reason per `same_key_gap_ms`, one per reason per `min_gap_ms`). Beyond
// `max_snapshots` the oldest manual one goes first, then the oldest of the owner with the most:
// a user whose jobs fail by the hundred (or who fakes failures) evicts only their own, never
// another user's or the node's (issue 17, D9).
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "store/event_store.h"
#include "trace/flight_recorder.h"

namespace gpuwatch::server {

struct SnapshotOptions {
  std::string dir;                           // <data-dir>/snapshots
  int64_t window_ms = 15 * 60 * 1000;        // how much history a snapshot holds
  size_t max_snapshots = 50;                 // the oldest beyond this are deleted
  int64_t min_gap_ms = 10 * 1000;            // between any two automatic snapshots
  int64_t same_key_gap_ms = 10 * 60 * 1000;  // between two of the same job and reason
  size_t max_job_log_lines = 100000;
};

struct SnapshotInfo {
  std::string id;
  std::string reason;  // job_failed | job_hung | gpu_lost | manual | …
  std::string job;     // "" when not about one job
  std::string owner;   // whose it counts as: a job's starter ("uid:N"), "" for the node's
  std::string node;
  int64_t t_ms = 0, from_ms = 0;
  uint64_t records = 0, job_log_lines = 0;
  std::string state;  // pending | written | failed
  std::string error;  // when failed
};

class SnapshotManager {
 public:
  // The records of [from_ms, to_ms] in trace form (a flight recorder's window; on a hub every
  // node's, merged).
  using WindowFn = std::function<std::vector<std::string>(int64_t from_ms, int64_t to_ms)>;
  // `recorder` and `events` (may be null: no job.log) outlive the manager.
  SnapshotManager(SnapshotOptions options, const trace::FlightRecorder* recorder,
                  store::EventStore* events, std::string node);
  SnapshotManager(SnapshotOptions options, WindowFn window, store::EventStore* events,
                  std::string node);
  ~SnapshotManager();

  // Creates the directory, lists the bundles there, removes unfinished ones, starts the writer.
  Status Open();
  // Captures the window ending at now_ms and queues the bundle. ResourceExhausted when rate
  // limited (`manual` ones only by the per-reason gap).
  Result<SnapshotInfo> Take(const std::string& reason, const std::string& job, int64_t now_ms,
                            bool manual = false, const std::string& owner = "");
  std::vector<SnapshotInfo> List() const;  // newest first
  uint64_t evicted() const;                // deleted for max_snapshots since Open
  // The file of a bundle ("trace.jsonl.gz", "job.log", "manifest.json"); NotFound otherwise.
  Result<std::string> FilePath(const std::string& id, const std::string& file) const;
  // Writes what is queued, then stops the writer thread. Idempotent.
  void Stop();

 private:
  struct Pending {
    SnapshotInfo info;
    std::vector<std::string> lines;
  };
  void Run();
  Status Write(Pending& p);
  void Prune();  // REQUIRES: mu_ held

  const SnapshotOptions options_;
  const WindowFn window_;
  store::EventStore* events_;
  const std::string node_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, SnapshotInfo> snapshots_;  // by id (ids sort by time)
  std::deque<Pending> queue_;
  std::map<std::string, int64_t> last_by_key_;
  std::map<std::string, int64_t> last_by_reason_;
  bool stopping_ = false;
  uint64_t evicted_ = 0;
  std::thread thread_;
};

}  // namespace gpuwatch::server
