// Agent: the per-node collector. Runs the collection tiers (R6) on one time base and keeps
// the latest AgentState for the HTTP endpoint, the JSON API and `gpuwatch status`.
//
// Tiers: hardware (GPU fields, default 1 s), host (5 s), processes/attribution (10 s), plus an
// event thread blocked in the GPU source's event wait (XIDs as they happen). A GPU source that
// fails to initialize (no library, no driver, no GPU) is logged in one line and the agent runs
// host collection alone. The reads are NodeCollector's (server/node_collector.h); the agent
// routes what each tick read: to its state, the store, the flight recorder, the push to a hub,
// the event gate and the job registry. Thread-safety: all public methods are thread-safe; the state
// is read under the agent's mutex through WithState().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>

#include "accounting/ledger.h"
#include "accounting/sacct.h"
#include "analyze/alerts.h"
#include "collect/gpu_source.h"
#include "common/time_base.h"
#include "jobs/job_listener.h"
#include "jobs/job_registry.h"
#include "logs/kmsg.h"
#include "server/agent_state.h"
#include "server/alert_keeper.h"
#include "server/alert_notifier.h"
#include "server/auto_baselines.h"
#include "server/change_timeline.h"
#include "server/hub_ingest.h"
#include "server/hub_push.h"
#include "server/job_logs.h"
#include "server/live_diagnosis.h"
#include "server/node_collector.h"
#include "server/node_events.h"
#include "server/scrape_labels.h"
#include "server/snapshots.h"
#include "server/tier_scheduler.h"
#include "server/user_rules.h"
#include "store/event_store.h"
#include "store/store.h"
#include "trace/flight_recorder.h"

namespace gpuwatch::server {

struct AgentOptions {
  std::string hostname;
  // The `instance` label of the agent's stored series, as a scrape would set it
  // ("<hostname>:<port>"); "" stores the series without instance and job labels.
  std::string instance;
  std::string version;
  // The GPUs are gpuwatch demo's simulation: the API says so, and the dashboard and
  // `gpuwatch top` show a SIMULATED banner.
  bool simulated = false;
  std::string root_dir = "/";   // procfs/sysfs root (tests use fixture trees)
  std::string data_dir;         // "" keeps nothing on disk
  JobLogPolicy job_log_policy;  // where declared job logs may be (server/job_logs.h)
  std::chrono::milliseconds gpu_interval{1000};
  std::chrono::milliseconds host_interval{5000};
  std::chrono::milliseconds process_interval{10000};
  std::string job_env_var = "SLURM_JOB_ID";
  std::string model_label = "model_name";  // or dcgm-exporter's "modelName"
  size_t max_recent_events = 1000;
  // The task-level line (R5): the job tier closes a statistics window each job_interval.
  std::chrono::milliseconds job_interval{15000};
  // R8: the topology is snapshotted at start and at this interval, compared with the newest
  // archived version (<data-dir>/topology/), archived when it changed, and each change is a
  // topology_change event.
  std::chrono::milliseconds topology_interval{60 * 60 * 1000};
  jobs::JobRegistryOptions jobs;
  // The flight recorder keeps this much of everything in trace form (R22, `gpuwatch record`);
  // failure snapshots hold the same window.
  std::chrono::milliseconds snapshot_window{15 * 60 * 1000};
  size_t max_snapshots = 50;  // failure snapshots kept (server/snapshots.h)
  size_t recorder_bytes = size_t{64} << 20;
  // The effective configuration as text: its hash changing between starts is a config_change
  // event on the time line (R21).
  std::string config_text;
  // Findings become alerts (analyze/alerts.h), told to a webhook and/or Alertmanager.
  analyze::AlertOptions alerts;
  NotifierOptions notify;
  // The operator's own rules (--rules FILE), evaluated on the store each diagnosis tick.
  // REQUIRES: a store (SetStore) or a querier (SetRulesQuerier) when not empty.
  std::vector<UserRule> user_rules;
  // The diagnosis engine's settings (analyze/diagnoser_options.h). Its hang policy is the one
  // the job registry judges by too (Agent copies it into `jobs`): the --job-hang-* flags.
  analyze::DiagnoserOptions diagnosis = LiveDiagnosisOptions();
  // With a data dir: learn each template's baseline from a run's first stable window, when
  // the template has none current on this shape (server/auto_baselines.h).
  bool learn_baselines = true;
  // `gpuwatch hub`: no collection of its own; the agents' records arrive through hub_ingest
  // (POST /api/v1/records) and the diagnosis, alerts and API run over all nodes at once.
  bool hub = false;
  HubIngestOptions hub_ingest;  // its data_dir is set from data_dir
  // `gpuwatch up --hub URL`: push series and records to the hub (server/hub_push.h); url ""
  // is off. REQUIRES: a data dir (the spool is under <data-dir>/spool).
  HubPushOptions push;
  // GPU accounting: prices, soft quotas, retention (its dir is set from data_dir).
  accounting::LedgerOptions accounting;
  // Queue waits of Slurm jobs from sacct, when the program is there (accounting/sacct.h);
  // program "" is off.
  accounting::SacctOptions sacct;
  // --remote-write URL: the series (an agent's own, or what a hub takes in) also go to a
  // Prometheus-compatible cluster (VictoriaMetrics, Mimir, Thanos receive, Prometheus), through
  // a spool of their own under <data-dir>/forward. url "" is off.
  HubPushOptions forward;
};

// The job registry's options with the diagnosis's hang policy (one rule for both).
jobs::JobRegistryOptions JobOptionsOf(const AgentOptions& o);

class Agent {
 public:
  // `gpu` may be null (no GPU backend at all).
  Agent(AgentOptions options, std::unique_ptr<collect::GpuSource> gpu);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Initializes the GPU source and opens the data dir. Only a data-dir failure is an error;
  // a GPU source failure leaves gpu_available false with the reason.
  Status Init();
  // Keeps every hardware tick (and host tick) in `store` from now on. REQUIRES: before Start();
  // `store` outlives the agent's threads (Stop() before destroying it).
  void SetStore(store::Store* store) { store_ = store; }
  // Where --rules query, when not the store: a hub's --read-from cluster. REQUIRES: before
  // Start(); outlives the agent's threads.
  void SetRulesQuerier(const store::Querier* q) { rules_querier_ = q; }
  // Keeps every recorded event (XID, ECC, GPU lost/recovered) in `events`, as SetStore.
  void SetEventStore(store::EventStore* events) { event_store_ = events; }
  // Listens for jobs (docs/job-protocol.md). An error names the socket or address that failed.
  // REQUIRES: before Start().
  Status StartJobListener(const jobs::JobListenerOptions& options);
  const jobs::JobRegistry& jobs() const { return jobs_; }
  // The jobs the API lists: this node's (the registry's), or on a hub every node's.
  std::vector<jobs::JobView> JobList() const { return hub_ ? hub_->jobs().Jobs() : jobs_.Jobs(); }
  std::optional<jobs::JobView> JobById(const std::string& id) const {
    return hub_ ? hub_->jobs().Job(id) : jobs_.Job(id);
  }
  // The live diagnosis engine's settings (its hang policy is the registry's: JobOptionsOf).
  const analyze::DiagnoserOptions& diagnosis_options() const {
    return diagnosis_.diagnoser().context().options();
  }
  // Reads the kernel log (/dev/kmsg) for NVRM Xid lines: a second source of XID events,
  // deduplicated against NVML's. REQUIRES: before Start().
  Status StartKernelLog(const std::string& path);
  // The Unix socket jobs send to; "" when none.
  std::string job_socket_path() const { return listener_ ? listener_->socket_path() : ""; }
  // The last records in trace form, [from_ms, to_ms] (the flight recorder; on a hub, every
  // node's, merged).
  std::vector<std::string> TraceWindow(int64_t from_ms, int64_t to_ms) const {
    return hub_ ? hub_->Window(from_ms, to_ms) : recorder_.Window(from_ms, to_ms);
  }
  // The findings of the diagnosis engine on this node's records (findings.md form);
  // `job` / `node` filter ("" for all).
  nlohmann::json Findings(const std::string& job = "", const std::string& node = "") const {
    return diagnosis_.Document(job, node);
  }
  std::vector<analyze::Finding> FindingList() const { return diagnosis_.Findings(); }
  std::optional<analyze::TemplateStep> JobBaseline(const std::string& job) const {
    return diagnosis_.JobBaseline(job);
  }
  // Runs the diagnosis engine over the records added since the last call and folds its
  // findings into the alerts (every 5 s on the tier thread; tests call it directly).
  void TickDiagnosis();
  // Writes the ledger's changed tallies (each minute and at Stop).
  void TickAccounting();
  void SaveFleetJobs();  // a hub's job list to its data dir (HubIngest::SaveJobs)
  // Maintenance windows (silences marked maintenance, of this node) on the timeline: a
  // maintenance_start event when one begins, maintenance_end when it ends or is expired, so the
  // diagnosis and anyone reading the events know (tier thread).
  void TrackMaintenance(int64_t now_ms);
  // The alerts and silences (docs/format/alerts.md): {"alerts": [...], "silences": [...]}.
  nlohmann::json AlertsJson() const;
  // Adds a silence or maintenance window; returns its id. Errors name what is wrong.
  // Const: the HTTP server holds a const Agent; silences live in the alert book, under its own
  // lock, apart from everything the agent collects.
  Result<std::string> AddSilence(analyze::Silence s) const;
  Status ExpireSilence(const std::string& id) const;
  // The notifier's counters; all zero without one.
  AlertNotifier::Counters NotifierCounters() const { return alerts_.NotifierCounters(); }
  // "" without a data dir.
  const std::string& data_dir() const { return options_.data_dir; }
  // The hub's receiver of record streams; null unless AgentOptions::hub.
  HubIngest* hub() const { return hub_.get(); }
  // The push to a hub; null unless AgentOptions::push.url.
  const HubPusher* pusher() const { return pusher_.get(); }
  // The remote-write destination's sender; null without --remote-write. A hub's HTTP server
  // hands it what it stored.
  HubPusher* forwarder() const { return forwarder_.get(); }
  // GPU accounting over the records this process sees (its own, or a hub's nodes'); set by
  // Init (kept under <data-dir>/accounting, or in memory without a data dir).
  const accounting::Ledger* ledger() const { return ledger_.get(); }
  bool is_hub() const { return options_.hub; }
  // Failure snapshots; null without a data dir.
  SnapshotManager* snapshots() const { return snapshots_.get(); }
  // Starts the tier and event threads. REQUIRES: Init() succeeded.
  void Start();
  // Stops and joins the threads; idempotent.
  void Stop();

  // One tick of a tier, synchronously (used by Start()'s threads, `status` and tests).
  void TickGpu();
  void TickHost();
  void TickProcesses();
  void PollEvents(int timeout_ms);
  // The job tier: closes the registry's window, stores its statistics, publishes them.
  void TickJobs();
  // The topology check (R8): snapshot, compare, archive, events. At start and each
  // topology_interval; synchronous (tests, `gpuwatch doctor`).
  void TickTopology();
  // Routes what the registry produced (events, raw steps, log lines) to the stores; each second.
  void DrainJobs();
  void ReadKernelLog(std::vector<JobLogLine>* lines);  // new NVRM lines; XIDs recorded

  template <typename F>
  auto WithState(F&& fn) const {
    std::lock_guard<std::mutex> lock(mu_);
    return fn(static_cast<const AgentState&>(state_));
  }

 private:
  void RecordEvent(model::GpuEvent e);  // REQUIRES: mu_ held
  // Appends the events RecordEvent kept to the event store. REQUIRES: mu_ not held (the
  // append waits for an fsync, and scrapes must not).
  void FlushEvents();
  void StoreTick(std::vector<store::Head::Input> inputs);  // tier thread
  // Series are made each tick when something keeps them: the store or the push to a hub.
  bool KeepsSeries() const { return store_ || pusher_ || forwarder_; }
  // One trace record: into the flight recorder and, with --hub, the push's spool.
  void Record(int64_t t_ms, std::string line);
  void Record(TimedRecord r) { Record(r.t_ms, std::move(r.line)); }
  std::unique_ptr<accounting::Ledger> ledger_;        // before hub_: the hub feeds it
  std::unique_ptr<accounting::SacctBackfill> sacct_;  // null: no sacct
  std::unique_ptr<HubIngest> hub_;
  std::unique_ptr<HubPusher> pusher_;
  std::unique_ptr<HubPusher> forwarder_;
  uint64_t store_errors_ = 0;
  void StartTiers();  // the tiers on tiers_
  void RunEvents();

  AgentOptions options_;
  // This node's hardware (the tiers' reads); a hub initializes none.
  NodeCollector collector_;
  store::Store* store_ = nullptr;
  const store::Querier* rules_querier_ = nullptr;
  int64_t stored_host_ms_ = 0;  // newest host tick already in the store (tier thread only)
  jobs::JobRegistry jobs_;
  std::unique_ptr<jobs::JobListener> listener_;
  JobLogs job_logs_;                        // the job drain's (tier thread)
  std::unique_ptr<logs::KmsgReader> kmsg_;  // the job drain's (tier thread)
  NodeEventGate event_gate_;                // guarded by mu_: XIDs seen twice, storms
  trace::FlightRecorder recorder_;
  LiveDiagnosis diagnosis_;  // reads recorder_
  // Its own lock: the API adds silences through a const Agent, apart from what it collects.
  mutable AlertKeeper alerts_;
  std::unique_ptr<UserRuleEvaluator> user_rules_;  // tier thread only
  std::unique_ptr<AutoBaselines> auto_baselines_;  // tier thread only
  // When the template baselines were last read for the diagnosis (tier thread only); -1 asks
  // for a read at the next tick (at start, and after a baseline is learned).
  int64_t templates_read_ms_ = -1;
  std::map<std::string, analyze::Silence> open_maintenance_;  // by id (tier thread only)
  std::unique_ptr<SnapshotManager> snapshots_;
  struct SnapshotDue {
    int64_t due_ms;
    std::string reason, job;
  };
  std::vector<SnapshotDue> snapshots_due_;  // guarded by mu_
  bool stopping_drain_ = false;             // written only while the tier thread is not running
  void RecordTrace(const jobs::JobOutputs& out, const std::vector<JobLogLine>& lines);
  // R21: what changed on this node since the last start (driver, CUDA, kernel, GPUs, config),
  // and NCCL versions per job template from the jobs' logs.
  void RecordNodeChanges();
  void ObserveNcclVersions(const std::vector<JobLogLine>& lines,
                           const std::vector<std::string>& ended_jobs);
  void KeepChangeEvents(const std::vector<ChangeEvent>& changes, const std::string& job);
  NcclVersionTracker nccl_versions_;  // tier thread
  TimeBase clock_;

  mutable std::mutex mu_;
  AgentState state_;
  store::EventStore* event_store_ = nullptr;
  std::vector<model::GpuEvent> unstored_events_;  // guarded by mu_; FlushEvents empties it
  std::mutex flush_mu_;                           // keeps event batches in order

  std::atomic<bool> stopping_{false};  // the event thread's stop
  std::thread events_thread_;
  TierScheduler tiers_;  // last: stopped before anything its ticks use is destroyed
};

}  // namespace gpuwatch::server
