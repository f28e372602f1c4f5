// JobRegistry: the agent's picture of the jobs on its node (R5) — every job that reports
// through the job protocol (docs/job-protocol.md) and every job seen only through GPU process
// attribution, with per-rank step statistics over rolling windows, liveness and hang
// detection.
//
// The registry is pure state: it never does I/O besides the injected process probe. What the
// agent must write (events, raw steps, log lines, log files to tail) accumulates as outputs
// that the agent takes with TakeOutputs() and routes to the store, the event store and the
// flight recorder. Memory is bounded by the options: jobs, ranks, recent jobs, outputs
// waiting to be taken, and per-rank samples.
//
// Thread-safety: all methods may be called concurrently (one internal mutex). The listener
// thread calls Accept, the agent's tier thread Tick/CloseWindow/TakeOutputs, HTTP handlers
// the views.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "jobs/job_protocol.h"
#include "jobs/template_rules.h"
#include "model/hang_policy.h"
#include "model/job.h"
#include "model/process.h"

namespace gpuwatch::jobs {

// Who sent a message, as far as the transport can tell.
struct Sender {
  std::optional<uint32_t> pid, uid;  // kernel credentials (Unix socket); nullopt: UDP/TCP
  bool verified() const { return pid.has_value(); }
};

// What the registry needs to know about a live process.
struct ProcInfo {
  uint32_t uid = 0;
  uint64_t start_time = 0;      // clock ticks since boot (/proc/PID/stat field 22): detects reuse
  char state = 'R';             // /proc/PID/stat field 3: 'T' stopped, 'Z' zombie, …
  std::vector<uint32_t> nspid;  // "NSpid:" outermost first: the pid inside its container last
};
// nullopt: no such process.
using ProcProbe = std::function<std::optional<ProcInfo>(uint32_t pid)>;
// Reads <root_dir>/proc/<pid>/{stat,status}.
ProcProbe ProcfsProbe(std::string root_dir);

struct JobRegistryOptions {
  int64_t window_ms = 15000;  // the job tier: statistics are over this window (R6: 15–60 s)
  // When a rank is hung (model/hang_policy.h): the one rule the diagnosis and the flags share.
  // A rank in a phase other than data/comm (eval, a checkpoint) is judged hung only after
  // hang.in_phase_s: those phases have no step time to compare with.
  model::HangPolicy hang;
  double raw_steps_max_hz = 20;  // raw step outputs per rank per second at most
  size_t max_jobs = 1024;        // running jobs (protocol and attribution)
  // Running jobs one uid may start over the protocol; senders without credentials (UDP, TCP)
  // share one such share. One local user cannot take every slot (issue 17, D9).
  size_t max_jobs_per_uid = 64;
  size_t max_ranks = 4096;               // over all running jobs
  size_t max_recent_jobs = 256;          // ended jobs kept for `gpuwatch jobs`
  size_t max_pending = 200000;           // outputs not yet taken; beyond, dropped and counted
  size_t max_pending_bytes = 64u << 20;  // … and their text (log lines) at most this many bytes
  size_t reservoir = 1024;               // step durations sampled per rank per window for quantiles
  size_t median_steps = 256;             // recent steps the hang median is taken over
  std::string job_env_var = "SLURM_JOB_ID";  // only names the attribution source in views
  // A job without the SDK's template gets the first of these its labels match (jobs/
  // template_rules.h), in its views and so in its trace start record.
  std::vector<TemplateRule> template_rules;
};

// Something for the event store (and the trace's `event`/`job` records).
struct JobEvent {
  int64_t t_ms = 0;
  // job_start, job_end, rank_exit, job_hung, job_resumed, checkpoint_start, checkpoint_end,
  // annotation, phase
  std::string kind;
  std::string severity;  // info | warning | critical
  std::string job;
  std::optional<uint32_t> rank;
  std::string message;
  std::string fields_json;  // {"rank":3,"pid":41233,"exit_code":1}
};

struct StepOutput {
  int64_t t_ms = 0;  // the step's end
  std::string job;
  uint32_t rank = 0;
  std::optional<unsigned> gpu;  // the rank's GPU when it uses exactly one
  model::StepReport step;
};

struct LogOutput {
  int64_t t_ms = 0;
  std::string job;
  uint32_t rank = 0;
  std::string stream;
  std::string line;
};

// A log file a job declared, for the agent to tail on the job's behalf.
struct LogFileRequest {
  std::string job;
  uint32_t rank = 0;
  std::string path;
  std::optional<uint32_t> uid;  // the declaring process's uid (files must be owned by it)
};

struct JobOutputs {
  std::vector<JobEvent> events;
  std::vector<StepOutput> steps;
  std::vector<LogOutput> logs;
  std::vector<LogFileRequest> log_files;
  std::vector<std::string> ended_jobs;  // jobs whose log tailers may stop
};

// Statistics of one rank (or one job) over the last closed window.
struct WindowStats {
  int64_t end_ms = 0;  // 0: no window closed yet
  double window_s = 0;
  uint64_t steps = 0;
  double iterations_per_s = 0, samples_per_s = 0;
  std::optional<double> step_p50_s, step_p95_s, step_p99_s;
  // Shares of step time: waiting for data, exposed communication, blocked on checkpoints.
  std::optional<double> data_wait_ratio, comm_ratio, checkpoint_ratio;
  std::optional<double> loss, grad_norm;  // the window's last reported values
};

struct RankView {
  uint32_t rank = 0;
  std::optional<uint32_t> pid;
  bool pid_verified = false;
  std::optional<uint32_t> local_rank;
  std::string state;  // running | stopped (SIGSTOP) | ended | died
  std::optional<int> exit_code;
  bool hung = false;
  std::vector<unsigned> gpus;  // physical indices, from process attribution
  std::string container, user;
  uint64_t steps_total = 0;
  std::optional<uint64_t> last_step;
  int64_t last_step_ms = 0;
  std::optional<double> median_step_s;
  std::string phase;  // the open phase, "" when none
  WindowStats window;
  std::map<std::string, double> scalars;  // last values
  std::string node;  // the node it runs on (a hub's view, server/fleet_jobs.h); "" on an agent
};

struct JobView {
  std::string id;
  std::string source;  // sdk (the job protocol) | process (attribution only)
  std::string template_name, user, project;
  std::string claimed_project;  // a user's SDK's word on its project, not taken (JobRec)
  std::string state;            // running | hung | finished | failed | gone (processes vanished)
  int64_t start_ms = 0, end_ms = 0, last_step_ms = 0;
  std::optional<uint32_t> world_size;
  std::vector<unsigned> gpus;
  std::vector<uint32_t> pids;
  std::string container;
  double gpu_seconds = 0;  // GPU time: seconds each of its GPUs had one of its processes
  // Who started it over the protocol (the quota's key): "uid:N", "uid:none" for an
  // uncredentialed sender, "" for a job seen only through its processes.
  std::string starter;
  WindowStats window;  // iterations/s of the slowest rank, samples/s summed, worst p50/p95/p99
  std::vector<RankView> ranks;
  // The nodes it runs on with their GPUs (a hub's view, server/fleet_jobs.h); empty on an agent.
  std::map<std::string, std::vector<unsigned>> nodes;
};

struct RegistryCounters {
  uint64_t accepted = 0;
  RejectCounts rejected{};
  uint64_t outputs_dropped = 0;
};

class JobRegistry {
 public:
  JobRegistry(JobRegistryOptions options, ProcProbe probe);

  // Applies one parsed message from `sender` received at `now_ms`. nullopt: accepted;
  // otherwise why it was refused (counted either way).
  std::optional<RejectReason> Accept(const model::JobMessage& m, const Sender& sender,
                                     int64_t now_ms);
  // Counts rejections made before a message reached the registry (the parser's).
  void CountRejected(const RejectCounts& counts);

  // The process tier: joins ranks with the GPU processes of this tick (which GPUs each rank
  // uses), keeps jobs seen only through attribution, checks each rank's pid (a vanished pid is
  // a rank exit) and flags hung jobs.
  void Tick(int64_t now_ms, const std::vector<model::ProcessAttribution>& procs);
  // The job tier: closes the statistics window of every rank.
  void CloseWindow(int64_t now_ms);

  JobOutputs TakeOutputs();
  std::vector<JobView> Jobs() const;  // running first, then recent, newest first
  std::optional<JobView> Job(const std::string& id) const;
  RegistryCounters counters() const;

 private:
  struct Window {
    int64_t start_ms = 0;
    uint64_t steps = 0, seen = 0;  // seen: steps offered to the reservoir
    double duration_s = 0, samples = 0, data_s = 0, comm_s = 0, checkpoint_s = 0;
    bool any_data = false, any_comm = false, any_checkpoint = false;
    std::optional<double> loss, grad_norm;
    std::vector<double> reservoir;
  };
  struct Rank {
    uint32_t rank = 0;
    std::optional<uint32_t> pid, uid;
    bool pid_verified = false;
    std::optional<uint64_t> pid_start_time;
    bool stopped = false;
    std::optional<uint32_t> local_rank;
    enum class State { kRunning, kEnded, kDied } state = State::kRunning;
    std::optional<int> exit_code;
    bool hung = false;
    std::set<unsigned> gpus;
    std::string container, user;
    int64_t start_ms = 0, last_step_ms = 0, last_activity_ms = 0, last_raw_ms = 0;
    uint64_t steps_total = 0;
    std::optional<uint64_t> last_step;
    std::string phase;
    int64_t phase_since_ms = 0;
    std::deque<double> recent;             // the last median_steps durations
    std::optional<double> final_median_s;  // kept when `recent` is freed (job retired)
    Window window;
    WindowStats stats;
    std::map<std::string, double> scalars;
  };
  struct JobRec {
    std::string id;
    bool sdk = true;
    // The uid of the first credentialed sender: only it (and root) may speak for the job, so
    // one user cannot end, restart or add dying ranks to another's job. nullopt: the job was
    // started over UDP/TCP (or by attribution), where nobody can prove who they are.
    std::optional<uint32_t> owner_uid;
    // Who started it over the protocol, for the per-uid quota: the sender's uid, or nullopt
    // for an uncredentialed sender. Unset for jobs seen only through GPU processes.
    bool started_by_protocol = false;
    std::optional<uint32_t> starter_uid;
    // The owner and project: the scheduler's (an allocation), a root sender's (a launcher), or
    // the owner from the job's processes' credentials. Never a user's own word (issue 19).
    std::string template_name, user, project;
    // What a user's SDK `start` said of its project: it only names the job's class by the
    // operator's template rules, and is shown as such, never taken as the job's project.
    std::string claimed_project;
    std::optional<uint32_t> world_size;
    int64_t start_ms = 0, end_ms = 0, last_step_ms = 0;
    std::string state = "running";
    bool hung = false;
    std::map<uint32_t, Rank> ranks;
    // Attribution: processes and GPUs of this job's processes that are not ranks.
    std::set<uint32_t> pids;
    std::set<unsigned> gpus;
    std::string container;
    double gpu_seconds = 0;
    int64_t last_seen_ms = 0;  // attribution-only jobs: last tick with a process
    WindowStats stats;
  };

  // REQUIRES: mu_ held.
  JobRec* FindOrCreate(const std::string& id, int64_t now_ms, std::optional<RejectReason>* err);
  void Emit(JobEvent e);
  void EndRank(JobRec& job, Rank& r, int64_t t_ms, std::optional<int> code, bool died);
  void MaybeEndJob(JobRec& job, int64_t t_ms);
  void Retire(const std::string& id, int64_t now_ms);
  // Closes one job's window. `final`: the job is over, so ended ranks count in its totals.
  void CloseJobWindow(JobRec& job, int64_t now_ms, bool final);
  void CheckHang(JobRec& job, int64_t now_ms);
  JobView View(const JobRec& j) const;
  size_t RankCount() const;
  bool PushOutput(size_t bytes = 0);  // false when the output queue is full (counted)
  // The record of a job that left running_: its per-step state (reservoir, recent steps) is
  // freed, what the views show is kept.
  static void Shrink(JobRec& job);
  JobRec* FindRecent(const std::string& id);

  const JobRegistryOptions options_;
  const ProcProbe probe_;
  mutable std::mutex mu_;
  std::map<std::string, JobRec> running_;
  std::deque<JobRec> recent_;  // newest first
  // The scheduler's allocations (allocation .. release): who owns the job and its project, over
  // what a client's start claims. Bounded by max_jobs.
  struct Allocation {
    std::string user, project;
  };
  std::map<std::string, Allocation> allocations_;
  // REQUIRES: mu_ held. The scheduler's messages and `queued`: events only, no rank.
  std::optional<RejectReason> AcceptSchedulerMessage(const model::JobMessage& m,
                                                     const Sender& sender, int64_t t_ms);
  JobOutputs pending_;
  size_t pending_count_ = 0, pending_bytes_ = 0;
  RegistryCounters counters_;
  int64_t last_tick_ms_ = 0;
  std::minstd_rand rng_{12345};
};

}  // namespace gpuwatch::jobs
