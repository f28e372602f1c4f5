// Ledger: GPU accounting (R24). Who held which GPUs for how long, what waiting and idling cost,
// how jobs ended — kept apart from the series and their retention, so "GPU-hours by project
// this quarter" outlives the 15 days of samples.
//
// The ledger reads the same trace records as the diagnosis (trace-format.md): an agent feeds
// it its own records, the hub every node's, `gpuwatch report --trace` a file. From them:
// - `job` records make attempts and, per node, segments: a `start` opens the node's segment
//   (a `start` after the job had ended everywhere opens a new attempt: a rerun), an `end`
//   closes it. Allocated GPU time is each segment's GPUs × its duration; a segment still open
//   runs to the last record seen from its node, never further (a silent node bills nothing).
// - Queue wait is the attempt's start minus its `queued` record, or minus the scheduler's
//   submit time carried on the start (`submit_t`, which the Slurm prolog provides; an extra
//   field, ignored by other readers as the trace format allows).
// - `gpu` samples of a GPU an open segment holds classify its time as idle (utilisation
//   under a floor), busy-waiting (utilisation up while the SMs, power and memory traffic say
//   nothing is computed: a kernel spinning on a flag, as NCCL's do in a stuck collective),
//   or working. Those tallies are kept per job and UTC hour.
// - `node` records name each GPU's model, for the price per GPU-hour; `proc` records add the
//   GPUs a job's processes use when its `start` did not list them.
//
// Persistence: a store::Wal of its own (`DATA_DIR/accounting/`, docs/format/accounting.md).
// Each change of a job's lifecycle appends that job's whole entry at once; usage tallies are
// appended by Checkpoint() (the agent calls it every minute), so a crash loses at most that
// much idle-time tally and never a start or an end. Replay keeps each job's last entry. The
// log is compacted into one segment when it holds four times what is live, dropping jobs
// that ended before the retention.
//
// Thread-safety: all methods may be called concurrently (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "store/wal.h"
#include "trace/trace_records.h"

namespace gpuwatch::accounting {

// What the report groups by.
enum class GroupBy { kUser, kProject, kTemplate, kJob };
std::string_view GroupByName(GroupBy g);
std::optional<GroupBy> ParseGroupBy(std::string_view s);

// A price per GPU-hour for GPUs whose model name contains `model` (case-insensitively; the
// longest matching key wins; "*" matches every model).
struct Price {
  std::string model;
  double usd_per_gpu_hour = 0;
};

// A soft quota: a project's GPU-hours over a trailing period. Never enforced: crossing
// `warn_fraction` and then the whole raises an alert, nothing is stopped.
struct Quota {
  std::string project;
  double gpu_hours = 0;
  int64_t period_ms = 0;
};

struct LedgerOptions {
  std::string dir;  // "" = in memory only (replay, tests)
  store::SyncPolicy sync = store::SyncPolicy::kInterval;
  int64_t retention_ms = 400LL * 86400 * 1000;  // jobs ended before now - this are dropped
  // Idle: utilisation under this. Busy-waiting: utilisation at or over busy_util_pct while
  // memory traffic is at most quiet_mem_util_pct and the SMs (sm_active, when measured) are
  // at most quiet_sm_active, or else power is at most quiet_power_fraction of the limit.
  double idle_util_pct = 5;
  double busy_util_pct = 50;
  double quiet_mem_util_pct = 10;
  double quiet_sm_active = 0.10;
  double quiet_power_fraction = 0.30;
  // A sample counts for the time since the GPU's previous one, at most this long: a gap (the
  // agent down) is unmeasured, not idle.
  int64_t max_sample_gap_ms = 30000;
  std::vector<Price> prices;
  std::vector<Quota> quotas;
  double quota_warn_fraction = 0.8;
  size_t max_jobs = 1000000;  // beyond, the oldest ended job is dropped (counted)
};

// One node's share of one attempt.
struct Segment {
  std::string node;
  std::vector<unsigned> gpus;       // physical indices
  std::vector<std::string> models;  // per GPU, "" when no node record named it
  int64_t start_ms = 0;
  int64_t end_ms = -1;  // -1: still open
  std::optional<int64_t> exit_code;
};

// One run of a job: a start (on any node) after it had ended everywhere begins the next.
struct Attempt {
  int64_t queued_ms = -1;  // -1: unknown
  int64_t start_ms = 0;
  std::vector<Segment> segments;
  bool open() const;
  int64_t end_ms() const;  // the last segment's end; -1 while open
  // Failed when any node ended it with a nonzero code; succeeded when every node said 0.
  std::optional<int64_t> exit_code() const;
};

// Per job and UTC hour: how its GPUs' measured time divided.
struct Usage {
  double measured_gpu_s = 0, idle_gpu_s = 0, busywait_gpu_s = 0;
};

struct JobEntry {
  std::string job, user, project, template_name;
  std::vector<Attempt> attempts;
  std::map<int64_t, Usage> usage_by_hour;  // key: the hour's start, ms
  int64_t pending_queued_ms = -1;          // a `queued` awaiting its start
};

struct ReportQuery {
  GroupBy by = GroupBy::kProject;
  int64_t since_ms = 0, until_ms = 0;
  std::vector<std::string> projects;  // empty = all; else only these projects' jobs
};

struct ReportRow {
  std::string key;
  uint64_t jobs = 0;      // with an attempt overlapping the window
  uint64_t attempts = 0;  // overlapping the window
  uint64_t reruns = 0;    // of those, attempts after a job's first
  uint64_t succeeded = 0, failed = 0, ended_unknown = 0, running = 0;
  double gpu_hours = 0;           // allocated, inside the window
  double measured_gpu_hours = 0;  // with samples (hourly buckets overlapping the window)
  double idle_gpu_hours = 0, busywait_gpu_hours = 0;
  uint64_t queue_waits = 0;  // attempts with a known queue wait that started in the window
  double queue_wait_s_sum = 0, queue_wait_s_max = 0;
  double cost_usd = 0;
  double unpriced_gpu_hours = 0;  // no price matched the model
  // For GroupBy::kJob: the job's own fields.
  std::string user, project, template_name, state;
  int64_t start_ms = -1, end_ms = -1;
};

struct QuotaStatus {
  Quota quota;
  double used_gpu_hours = 0;
  std::string state;  // ok | warning | exceeded
};

struct LedgerStats {
  uint64_t jobs = 0, records = 0, dropped_jobs = 0, wal_records_replayed = 0;
  uint64_t wal_damage = 0;
};

class Ledger {
 public:
  // Opens (creating) the ledger in options.dir and replays it; an empty dir keeps it in memory.
  static Result<std::unique_ptr<Ledger>> Open(LedgerOptions options);
  ~Ledger();

  void Add(const trace::TraceRecord& r);
  // Reads trace lines (JSON Lines, as a recorder or a hub entry holds them) and adds the
  // record types the ledger uses; malformed lines are skipped.
  void AddLines(std::string_view ndjson);

  // Writes the entries of jobs whose tallies changed since the last call; compacts the log
  // when due. `now_ms` drives the retention.
  Status Checkpoint(int64_t now_ms);

  std::vector<ReportRow> Report(const ReportQuery& q) const;
  std::vector<QuotaStatus> Quotas(int64_t now_ms) const;
  std::optional<JobEntry> Job(const std::string& id) const;
  // The ids of the jobs whose project (the scheduler's, else the job's own) is one of these.
  std::vector<std::string> JobsOfProjects(const std::vector<std::string>& projects) const;
  // Every node segment of these jobs' attempts (who held which GPUs when), without the rest
  // of their entries.
  std::vector<Segment> SegmentsOf(const std::set<std::string>& jobs) const;
  LedgerStats Stats() const;

  // The scheduler's word after the fact (accounting/sacct.h): jobs whose id is a Slurm job id
  // (digits, or an array task "123_4") with an attempt that has no queue wait, the latest
  // started first, at most `max`, those in `skip` left out.
  std::vector<std::string> JobsWithoutQueueWait(size_t max,
                                                const std::set<std::string>& skip = {}) const;
  // Gives the job's attempt that the scheduler started at `start_ms` — the one without a queue
  // wait whose start is nearest it, within an hour (the ranks start a little after the
  // allocation) — its submit time, and writes the entry. False when none fits, or the submit
  // time is after that start.
  bool SetSubmitTime(const std::string& job, int64_t submit_ms, int64_t start_ms);

  // The newest record time seen (ms), 0 before any: a replayed trace's "now".
  int64_t newest_ms() const;

 private:
  explicit Ledger(LedgerOptions options) : options_(std::move(options)) {}
  struct NodeInfo {
    std::map<unsigned, std::string> models;
    std::map<unsigned, double> power_limit_w;
    int64_t last_seen_ms = 0;
  };
  struct GpuKey {
    std::string node;
    unsigned gpu;
    bool operator<(const GpuKey& o) const { return node != o.node ? node < o.node : gpu < o.gpu; }
  };

  void AddJobLocked(const trace::TraceRecord& r, const trace::TraceJob& j);
  void AddGpuLocked(const trace::TraceRecord& r, const trace::TraceGpu& g);
  void AddProcLocked(const trace::TraceRecord& r, const trace::TraceProc& p);
  void AddNodeLocked(const trace::TraceRecord& r, const trace::TraceNode& n);
  Segment* OpenSegmentLocked(JobEntry& e, const std::string& node);
  void HoldLocked(const std::string& node, const Segment& s, const std::string& job);
  void ReleaseLocked(const std::string& node, const Segment& s, const std::string& job);
  JobEntry& EntryLocked(const std::string& id);
  void PersistLocked(const JobEntry& e);
  void PersistNodeLocked(const std::string& node, const NodeInfo& n);
  Status CompactLocked(int64_t now_ms);
  double PriceLocked(const std::string& model) const;
  void ApplyWalRecord(uint8_t type, std::string_view payload);
  // A segment's end for accounting: its end, or its node's last record while open.
  int64_t EffectiveEndLocked(const Segment& s) const;

  const LedgerOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<store::Wal> wal_;
  std::unordered_map<std::string, JobEntry> jobs_;
  std::map<std::string, NodeInfo> nodes_;
  std::map<GpuKey, std::string> holders_;  // which open segment's job holds a GPU
  std::map<GpuKey, int64_t> last_sample_ms_;
  std::vector<std::string> dirty_;  // jobs whose tallies changed since the last Checkpoint
  uint64_t wal_bytes_ = 0, live_bytes_estimate_ = 0;
  int64_t newest_ms_ = 0;
  LedgerStats stats_;
};

}  // namespace gpuwatch::accounting
