#include "server/agent.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "collect/topology_probe.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "server/api.h"
#include "server/event_api.h"
#include "server/job_metrics.h"
#include "server/store_sink.h"
#include "topo/archive.h"
#include "trace/trace_writer.h"

namespace gpuwatch::server {

using Clock = std::chrono::steady_clock;

namespace {
// The alert book's options with each user rule's clear_after as its cause's hold.
analyze::AlertOptions AlertOptionsOf(const AgentOptions& o) {
  analyze::AlertOptions a = o.alerts;
  for (const UserRule& r : o.user_rules) a.hold_ms_by_cause["user:" + r.name] = r.clear_after_ms;
  return a;
}
}  // namespace

jobs::JobRegistryOptions JobOptionsOf(const AgentOptions& o) {
  jobs::JobRegistryOptions j = o.jobs;
  j.hang = o.diagnosis.hang;  // one hang rule for the registry, the diagnosis and the flags
  return j;
}

namespace {
// The agent's own data (its tokens, store, snapshots) is never a job's log.
JobLogPolicy JobLogPolicyOf(const AgentOptions& o) {
  JobLogPolicy p = o.job_log_policy;
  if (!o.data_dir.empty()) p.forbidden.push_back(o.data_dir);
  return p;
}
}  // namespace

Agent::Agent(AgentOptions options, std::unique_ptr<collect::GpuSource> gpu)
    : options_(std::move(options)),
      collector_(NodeCollectorOptions{.hostname = options_.hostname,
                                      .root_dir = options_.root_dir,
                                      .job_env_var = options_.job_env_var},
                 std::move(gpu)),
      jobs_(JobOptionsOf(options_), jobs::ProcfsProbe(options_.root_dir)),
      job_logs_(JobLogPolicyOf(options_), options_.job_log_policy.max_files,
                options_.job_log_policy.max_files_per_uid),
      recorder_(trace::FlightRecorderOptions{options_.recorder_bytes, options_.snapshot_window}),
      diagnosis_(
          [this](int64_t from_ms, int64_t to_ms) {
            // A hub keeps each node's place itself (HubIngest::DiagnosisWindow).
            return hub_ ? hub_->DiagnosisWindow(to_ms) : recorder_.Window(from_ms, to_ms);
          },
          options_.diagnosis),
      alerts_(AlertOptionsOf(options_), options_.data_dir) {
  if (!options_.user_rules.empty())
    user_rules_ = std::make_unique<UserRuleEvaluator>(options_.user_rules, options_.hostname);
  if (options_.learn_baselines && !options_.data_dir.empty()) {
    auto_baselines_ = std::make_unique<AutoBaselines>(
        options_.data_dir + "/baselines",
        analyze::RunOptions{.warmup_s = 120, .window_s = 600, .job = ""});
  }
  state_.hostname = options_.hostname;
  state_.simulated = options_.simulated;
  state_.hub = options_.hub;
  state_.version = options_.version;
  state_.model_label = options_.model_label;
}

Agent::~Agent() { Stop(); }

Status Agent::Init() {
  if (Status st = alerts_.Init(options_.notify, options_.hostname); !st.ok()) return st;
  if (!options_.data_dir.empty()) {
    if (::mkdir(options_.data_dir.c_str(), 0755) != 0 && errno != EEXIST)
      return Status::IoError("cannot create data dir " + options_.data_dir + ": " +
                             std::strerror(errno));
    alerts_.Restore();
  }
  {
    accounting::LedgerOptions lo = options_.accounting;
    lo.dir = options_.data_dir.empty() ? "" : options_.data_dir + "/accounting";
    auto l = accounting::Ledger::Open(lo);
    if (!l.ok()) return l.status();
    ledger_ = std::move(l).value();
  }
  if (!options_.sacct.program.empty()) {
    if (ProgramExists(options_.sacct.program)) {
      sacct_ = std::make_unique<accounting::SacctBackfill>(ledger_.get(), options_.sacct);
      GW_LOG_INFO(
          "accounting: Slurm jobs' queue waits from {} every {} s when the prolog gave none",
          options_.sacct.program, options_.sacct.interval.count() / 1000);
    } else if (options_.sacct.program != "sacct") {  // named, not the default
      GW_LOG_WARN(
          "accounting: --sacct {}: no such program; queue waits come from the Slurm "
          "prolog and the SDK only",
          options_.sacct.program);
    }
  }
  if (options_.hub) {
    HubIngestOptions ho = options_.hub_ingest;
    ho.data_dir = options_.data_dir;
    accounting::Ledger* ledger = ledger_.get();
    ho.accounting_sink = [ledger](std::string_view lines) { ledger->AddLines(lines); };
    auto h = HubIngest::Open(ho);
    if (!h.ok()) return h.status();
    hub_ = std::move(h).value();
  } else if (!options_.push.url.empty()) {
    if (options_.data_dir.empty())
      return Status::InvalidArgument(
          "--hub needs a data dir: what is not yet sent waits in <data-dir>/spool");
    HubPushOptions po = options_.push;
    po.spool_dir = options_.data_dir + "/spool";
    if (po.node.empty()) po.node = options_.hostname;
    auto p = HubPusher::Open(po);
    if (!p.ok()) return p.status();
    pusher_ = std::move(p).value();
  }
  if (!options_.forward.url.empty()) {
    if (options_.data_dir.empty())
      return Status::InvalidArgument(
          "--remote-write needs a data dir: what is not yet sent waits in <data-dir>/forward");
    HubPushOptions fo = options_.forward;
    fo.spool_dir = options_.data_dir + "/forward";
    fo.records = false;
    fo.label = "remote write";
    auto f = HubPusher::Open(fo);
    if (!f.ok()) return f.status();
    forwarder_ = std::move(f).value();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.hub) {
    state_.gpu_unavailable_reason = "a hub collects nothing of its own";
  } else if (Status st = collector_.Init(); !st.ok()) {
    state_.gpu_unavailable_reason = st.message();
    if (collector_.has_gpu_source())
      GW_LOG_WARN("no GPU metrics: {}; collecting host metrics only", st.message());
  } else {
    const collect::GpuSource& gpu = *collector_.gpu();
    state_.gpu_available = true;
    state_.system = gpu.System();
    state_.devices = gpu.Devices();
    state_.gpu_samples.resize(state_.devices.size());
    for (size_t i = 0; i < state_.devices.size(); ++i) state_.caps.push_back(gpu.Capabilities(i));
    GW_LOG_INFO("{} GPU(s) via {} (driver {}, NVML {})", state_.devices.size(),
                state_.system.library_path, state_.system.driver_version,
                state_.system.nvml_version);
  }
  return Status::Ok();
}

void Agent::RecordEvent(model::GpuEvent e) {
  const NodeEventGate::Verdict verdict = event_gate_.Admit(&e);
  if (verdict == NodeEventGate::Verdict::kDuplicate) return;
  // A storm's XIDs are all counted; only one a second is kept and logged.
  if (e.kind == model::GpuEventKind::kXid) {
    ++state_.xid_counts[{e.gpu_index, e.code}];
    state_.last_xid[e.gpu_index] = e.code;
  }
  if (verdict == NodeEventGate::Verdict::kFolded) return;
  {
    std::optional<trace::EventKind> kind;
    switch (e.kind) {
      case model::GpuEventKind::kXid:
        kind = trace::EventKind::kXid;
        break;
      case model::GpuEventKind::kEccSingleBit:
      case model::GpuEventKind::kEccDoubleBit:
        kind = trace::EventKind::kEcc;
        break;
      case model::GpuEventKind::kGpuLost:
        kind = trace::EventKind::kGpuLost;
        break;
      case model::GpuEventKind::kGpuRecovered:
        break;
    }
    std::optional<unsigned> gpu;
    if (e.gpu_index != model::kUnknownGpu) gpu = e.gpu_index;
    if (kind)
      Record(
          e.time_ms,
          trace::EventRecordLine(
              e.time_ms, options_.hostname, gpu, *kind,
              e.kind == model::GpuEventKind::kXid ? std::optional(e.code) : std::nullopt, e.text));
    // A lost GPU takes its job down: keep the minutes before it (R22).
    if (e.kind == model::GpuEventKind::kGpuLost && snapshots_due_.size() < 64)
      snapshots_due_.push_back({e.time_ms + 5000, "gpu_lost", ""});
  }
  GW_LOG_WARN("GPU {} event {}: {}", e.gpu_index, model::GpuEventKindName(e.kind), e.text);
  if (event_store_) unstored_events_.push_back(e);
  state_.recent_events.push_back(std::move(e));
  while (state_.recent_events.size() > options_.max_recent_events) state_.recent_events.pop_front();
}

void Agent::TickGpu() {
  if (!collector_.gpu_ready()) return;
  std::shared_ptr<const topo::NodeSnapshot> topology;
  {
    std::lock_guard<std::mutex> lock(mu_);
    topology = state_.topology;
  }
  GpuTick tick = collector_.SampleGpus(clock_.NowMs(), topology.get());
  for (TimedRecord& r : tick.records) Record(std::move(r));
  std::vector<store::Head::Input> to_store;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : tick.events) RecordEvent(std::move(e));
    state_.gpu_link_rates = std::move(tick.link_rates);
    state_.gpu_samples = std::move(tick.samples);
    state_.caps = std::move(tick.caps);
    state_.tick_seconds["gpu"] = tick.read_seconds;
    ++state_.tick_counts["gpu"];
    if (KeepsSeries()) {
      to_store = SeriesForStore(state_, stored_host_ms_);
      if (state_.host) stored_host_ms_ = std::max(stored_host_ms_, state_.host->time_ms);
    }
  }
  // Outside the state lock: the append waits for the WAL's sync, and scrapes must not.
  if (!to_store.empty()) StoreTick(std::move(to_store));
  FlushEvents();
}

void Agent::FlushEvents() {
  if (!event_store_) return;
  std::lock_guard<std::mutex> order(flush_mu_);
  std::vector<model::GpuEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events.swap(unstored_events_);
  }
  if (events.empty()) return;
  std::vector<store::EventRecord> records;
  for (const auto& e : events) records.push_back(ToEventRecord(e, options_.hostname));
  // Each one matters (R18), so each batch is synced before the next tick.
  if (Status st = event_store_->Append(records); !st.ok())
    GW_LOG_ERROR("cannot keep {} event(s) in the event store: {}", records.size(), st.message());
}

void Agent::StoreTick(std::vector<store::Head::Input> inputs) {
  // The labels a Prometheus scrape adds (honor_labels: a series' own `job`, a training job's
  // id, is kept, as the exposition already carries it).
  if (!options_.instance.empty()) {
    for (auto& in : inputs) {
      bool has_job = false, has_instance = false;
      for (const auto& l : in.labels) {
        has_job = has_job || l.name == "job";
        has_instance = has_instance || l.name == "instance";
      }
      if (!has_instance) in.labels.push_back({"instance", options_.instance});
      if (!has_job) in.labels.push_back({"job", std::string(kScrapeJobName)});
    }
  }
  if (pusher_) pusher_->AddSeries(inputs);
  if (forwarder_) forwarder_->AddSeries(inputs);
  if (!store_) return;
  auto r = store_->Append(inputs);
  if (!r.ok()) {
    // Collection goes on; the next tick tries again (the store logs nothing it did not keep).
    if (store_errors_++ % 60 == 0)
      GW_LOG_ERROR("store: cannot keep this tick: {}", r.status().ToString());
  } else if (r->out_of_order > 0 && store_errors_++ % 60 == 0) {
    GW_LOG_WARN("store: {}", r->first_error);
  }
}

void Agent::TickHost() {
  HostTick tick = collector_.SampleHost(clock_.NowMs());
  if (tick.status.ok()) Record(std::move(tick.record));
  if (!tick.vanished.empty()) {
    // A NIC or port that left between two ticks (driver crash, PCIe error, unplugged cable on
    // some drivers): a change on the time line now, not at the next hourly topology check.
    std::vector<ChangeEvent> changes;
    for (const VanishedLink& v : tick.vanished) {
      ChangeEvent e;
      e.kind = "topology_change";
      e.severity = "warning";
      e.message = (v.kind == "nic" ? "NIC " : "InfiniBand port ") + v.name + " disappeared";
      e.fields_json = nlohmann::json{
          {"what", v.kind == "nic" ? "nic_removed" : "nic_port_removed"},
          {"subject",
           v.name}}.dump();
      changes.push_back(std::move(e));
    }
    KeepChangeEvents(changes, "");
  }
  std::vector<store::Head::Input> to_store;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (tick.status.ok()) {
      state_.host = std::move(tick.sample);
      state_.host_link_rates = std::move(tick.link_rates);
    }
    state_.tick_seconds["host"] = tick.read_seconds;
    ++state_.tick_counts["host"];
    // With GPUs the hardware tick stores the host sample beside its own; without, it is here.
    if (KeepsSeries() && !collector_.gpu_ready() && state_.host) {
      to_store = SeriesForStore(state_, stored_host_ms_);
      stored_host_ms_ = std::max(stored_host_ms_, state_.host->time_ms);
    }
  }
  if (!to_store.empty()) StoreTick(std::move(to_store));
}

void Agent::TickProcesses() {
  if (!collector_.gpu_ready()) {
    // Without GPUs there is no attribution, but reporting jobs still need their liveness.
    jobs_.Tick(clock_.NowMs(), {});
    return;
  }
  const auto start = Clock::now();
  std::vector<model::ProcessAttribution> attributed = collector_.Attribute();
  const int64_t now_ms = clock_.NowMs();
  jobs_.Tick(now_ms, attributed);
  // A process without a scheduler job id may be a rank that reported over the job protocol:
  // its job is the registry's. The proc records need it (live diagnosis tells a rank's exit
  // from a job's end by the job's processes), and so does `status`.
  bool unnamed = false;
  for (const auto& p : attributed) unnamed = unnamed || p.job_id.empty();
  if (unnamed) {
    std::map<uint32_t, std::string> job_of;
    for (const jobs::JobView& j : jobs_.Jobs()) {
      if (j.source != "sdk" || j.state == "finished" || j.state == "failed" || j.state == "gone")
        continue;
      for (uint32_t pid : j.pids) job_of.emplace(pid, j.id);
    }
    for (auto& p : attributed) {
      if (!p.job_id.empty()) continue;
      if (auto it = job_of.find(p.pid); it != job_of.end()) p.job_id = it->second;
    }
  }
  for (const auto& p : attributed)
    Record(now_ms, trace::ProcRecord(
                       now_ms, options_.hostname, p,
                       p.cpu_numa_nodes.empty() ? std::nullopt : std::optional(p.cpu_numa_nodes)));
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  state_.processes = std::move(attributed);
  state_.tick_seconds["processes"] = secs;
  ++state_.tick_counts["processes"];
}

Status Agent::StartJobListener(const jobs::JobListenerOptions& options) {
  listener_ =
      std::make_unique<jobs::JobListener>(options, &jobs_, [this] { return clock_.NowMs(); });
  Status st = listener_->Start();
  if (!st.ok()) listener_.reset();
  return st;
}

void Agent::TickJobs() {
  const auto start = Clock::now();
  const int64_t now_ms = clock_.NowMs();
  jobs_.CloseWindow(now_ms);
  std::vector<jobs::JobView> views = jobs_.Jobs();
  const jobs::RegistryCounters counters = jobs_.counters();
  std::vector<store::Head::Input> to_store;
  if (store_)
    to_store = JobSeriesForStore(JobMetricPoints(options_.hostname, views, counters), now_ms);
  std::map<std::string, uint64_t> hits = {{"jobs.max_log_files", job_logs_.refused_over_limit()},
                                          {"jobs.log_roots", job_logs_.refused_by_policy()}};
  if (snapshots_) hits["snapshots.max"] = snapshots_->evicted();
  if (listener_) {
    const jobs::ListenerStats ls = listener_->stats();
    hits["jobs.tcp_max_connections"] = ls.tcp_refused;
    hits["jobs.tcp_idle_timeout"] = ls.tcp_idle_closed;
  }
  if (event_store_) hits["events.retention"] = event_store_->stats().segments_dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.jobs = std::move(views);
    state_.job_counters = counters;
    state_.limit_hits = std::move(hits);
    state_.tick_seconds["jobs"] = std::chrono::duration<double>(Clock::now() - start).count();
    ++state_.tick_counts["jobs"];
  }
  if (!to_store.empty()) StoreTick(std::move(to_store));
}

Status Agent::StartKernelLog(const std::string& path) {
  logs::KmsgReaderOptions o;
  o.path = path;
  kmsg_ = std::make_unique<logs::KmsgReader>(o);
  Status st = kmsg_->Open();
  if (!st.ok()) kmsg_.reset();
  return st;
}

void Agent::ReadKernelLog(std::vector<JobLogLine>* lines) {
  if (!kmsg_) return;
  std::vector<logs::KmsgEntry> entries;
  if (Status st = kmsg_->Read(&entries); !st.ok()) {
    GW_LOG_WARN("kernel log: {}; no longer read", st.message());
    kmsg_.reset();
    return;
  }
  std::vector<model::GpuEvent> events;
  for (auto& en : entries) {
    auto xid = logs::ParseNvrmXid(en.record.message);
    if (!xid) continue;
    model::GpuEvent e;
    e.time_ms = en.time_ms;
    e.kind = model::GpuEventKind::kXid;
    e.code = xid->xid;
    e.gpu_index = model::kUnknownGpu;
    e.pci_bus_id = xid->pci_bus_id;
    if (const model::GpuStaticInfo* d = collector_.DeviceByBusId(xid->pci_bus_id)) {
      e.gpu_index = d->index;
      e.uuid = d->uuid;
    }
    e.text = xid->text.empty() ? std::string(model::XidDescription(xid->xid)) : xid->text;
    e.source = "kmsg";
    events.push_back(std::move(e));
    JobLogLine l;
    l.line = en.record.message;
    l.path = "kernel";
    l.cls = logs::ClassifyLogLine(l.line);
    lines->push_back(std::move(l));
  }
  if (!events.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : events) RecordEvent(std::move(e));
  }
}

void Agent::RecordTrace(const jobs::JobOutputs& out, const std::vector<JobLogLine>& lines) {
  const std::string& node = options_.hostname;
  for (const auto& e : out.events) {
    if (e.kind == "job_queued" || e.kind == "job_allocated" || e.kind == "job_released") {
      // The scheduler's (and a launcher's) lifecycle, from the event's own fields: an
      // allocation is a start with the scheduler's owner, project and GPUs, a release its end.
      const nlohmann::json f = nlohmann::json::parse(e.fields_json, nullptr, false);
      if (!f.is_object()) continue;
      trace::JobLifecycle j;
      j.job = e.job;
      j.state = e.kind == "job_queued"      ? trace::JobState::kQueued
                : e.kind == "job_allocated" ? trace::JobState::kStart
                                            : trace::JobState::kEnd;
      j.template_name = f.value("template", "");
      j.user = f.value("user", "");
      j.project = f.value("project", "");
      if (f.contains("devices")) {
        // Slurm numbers GPUs by /dev/nvidiaN minor, which need not be NVML's index
        // (PrincetonUniversity/jobstats#34: /dev/nvidia0 was GPU 6 in nvidia-smi).
        std::vector<unsigned> gpus;
        for (const auto& d : f["devices"]) {
          const unsigned minor = d.get<unsigned>();
          const model::GpuStaticInfo* dev = collector_.DeviceByMinor(minor);
          gpus.push_back(dev ? dev->index : minor);
        }
        j.gpus = std::move(gpus);
      }
      if (f.contains("submit_ms")) j.submit_ms = f["submit_ms"].get<int64_t>();
      if (f.contains("exit_code")) j.exit_code = f["exit_code"].get<int>();
      Record(e.t_ms, trace::JobRecord(e.t_ms, node, j));
    } else if (e.kind == "job_start" || e.kind == "job_end") {
      trace::JobLifecycle j;
      j.job = e.job;
      j.state = e.kind == "job_start" ? trace::JobState::kStart : trace::JobState::kEnd;
      if (auto v = jobs_.Job(e.job)) {
        if (j.state == trace::JobState::kStart) {
          j.template_name = v->template_name;
          j.user = v->user;
          j.project = v->project;
          j.ranks = v->world_size;
          if (!v->gpus.empty()) j.gpus = v->gpus;
        } else {
          // The job's exit code: the first failing rank's, else 0 when every rank said 0.
          bool all_known = !v->ranks.empty();
          for (const auto& r : v->ranks) {
            if (r.exit_code && *r.exit_code != 0 && !j.exit_code) j.exit_code = r.exit_code;
            all_known &= r.exit_code.has_value();
          }
          if (!j.exit_code && all_known) j.exit_code = 0;
        }
      }
      Record(e.t_ms, trace::JobRecord(e.t_ms, node, j));
    } else if (e.kind == "checkpoint_start" || e.kind == "checkpoint_end" ||
               e.kind == "annotation") {
      const trace::EventKind k = e.kind == "annotation"         ? trace::EventKind::kAnnotation
                                 : e.kind == "checkpoint_start" ? trace::EventKind::kCheckpointStart
                                                                : trace::EventKind::kCheckpointEnd;
      Record(e.t_ms,
             trace::EventRecordLine(e.t_ms, node, std::nullopt, k, std::nullopt, e.message, e.job));
    }
  }
  for (const auto& s : out.steps)
    Record(s.t_ms, trace::StepRecord(s.t_ms, node, s.job, s.rank, s.gpu, s.step));
  const int64_t now_ms = clock_.NowMs();
  for (const auto& l : lines) {
    const trace::LogSource src = l.path == "kernel" ? trace::LogSource::kKernel
                                 : l.cls.nccl       ? trace::LogSource::kNccl
                                                    : trace::LogSource::kJob;
    const int64_t t = l.t_ms ? l.t_ms : now_ms;
    Record(t, trace::LogRecord(t, node, l.job, l.job.empty() ? std::nullopt : std::optional(l.rank),
                               src, l.line));
  }
}

void Agent::KeepChangeEvents(const std::vector<ChangeEvent>& changes, const std::string& job) {
  if (changes.empty()) return;
  const int64_t now_ms = clock_.NowMs();
  std::vector<store::EventRecord> records;
  for (const auto& c : changes) {
    GW_LOG_INFO("change: {}", c.message);
    records.push_back(ToEventRecord(c, now_ms, options_.hostname, job));
    const trace::EventKind k = c.kind == "driver_change"       ? trace::EventKind::kDriverChange
                               : c.kind == "topology_change"   ? trace::EventKind::kTopologyChange
                               : c.kind == "maintenance_start" ? trace::EventKind::kMaintenanceStart
                               : c.kind == "maintenance_end"   ? trace::EventKind::kMaintenanceEnd
                                                               : trace::EventKind::kConfigChange;
    Record(now_ms, trace::EventRecordLine(now_ms, options_.hostname, c.gpu_index, k, std::nullopt,
                                          c.message, job));
  }
  if (event_store_) {
    std::lock_guard<std::mutex> order(flush_mu_);
    if (Status st = event_store_->Append(records); !st.ok())
      GW_LOG_ERROR("cannot keep {} change event(s): {}", records.size(), st.message());
  }
}

namespace {

// A change that takes capacity away (a link down or narrower, a device gone) warns; the rest
// (a link back, a device added) is information.
bool IsLoss(const topo::TopologyChange& c) {
  return c.kind == "nvlink_lost" || c.kind == "gpu_removed" || c.kind == "nic_removed" ||
         c.kind == "pcie_width_changed" || c.kind == "pcie_gen_changed" ||
         c.kind == "nic_port_changed" || c.kind == "link_changed";
}

std::optional<unsigned> GpuOfSubject(const std::string& subject) {
  if (subject.rfind("GPU", 0) != 0) return std::nullopt;
  size_t end = 3;
  while (end < subject.size() && subject[end] >= '0' && subject[end] <= '9') ++end;
  return ParseInt<unsigned>(std::string_view(subject).substr(3, end - 3));
}

}  // namespace

void Agent::TickTopology() {
  const auto t0 = Clock::now();
  const int64_t now_ms = clock_.NowMs();
  auto snap = std::make_shared<topo::NodeSnapshot>(
      collect::ProbeNodeTopology(collector_.gpu(), options_.root_dir, options_.hostname, now_ms));
  int version = 0;
  int64_t stale_before_ms = 0;
  std::vector<topo::TopologyChange> changes;
  if (!options_.data_dir.empty()) {
    topo::TopologyArchive archive(options_.data_dir + "/topology");
    std::vector<std::string> skipped;
    auto latest = archive.Latest(&skipped);
    for (const auto& why : skipped) GW_LOG_WARN("topology archive: skipped {}", why);
    bool write = false;
    if (latest.ok()) {
      changes = topo::DiffSnapshots(latest->second, *snap);
      version = latest->first;
      stale_before_ms = latest->second.taken_at_ms;
      write = !changes.empty();
    } else if (latest.status().code() == StatusCode::kNotFound) {
      write = true;  // the node's first snapshot: nothing to compare with
    } else {
      GW_LOG_ERROR("topology archive: {}", latest.status().message());
    }
    if (write) {
      auto v = archive.Append(*snap);
      if (v.ok()) {
        version = *v;
        stale_before_ms = now_ms;
        GW_LOG_INFO("topology: archived version {} ({} GPUs, {} NICs, {} warnings)", *v,
                    snap->gpus.size(), snap->nics.size(), snap->warnings.size());
      } else {
        GW_LOG_ERROR("topology archive: {}", v.status().message());
      }
    }
  }
  // A GPU added, removed or moved is already on the change timeline from the node's facts
  // (NVML's device list is fixed while the agent runs): archived, not reported twice.
  std::vector<ChangeEvent> events;
  for (const topo::TopologyChange& c : changes) {
    if (c.kind == "gpu_added" || c.kind == "gpu_removed" || c.kind == "gpu_moved") continue;
    nlohmann::json fields = {
        {"what", c.kind},   {"subject", c.subject},        {"before", c.before},
        {"after", c.after}, {"topology_version", version}, {"baselines_stale", true}};
    ChangeEvent e;
    e.kind = "topology_change";
    e.severity = IsLoss(c) ? "warning" : "info";
    e.message = c.summary;
    e.fields_json = fields.dump();
    e.gpu_index = GpuOfSubject(c.subject);
    if (e.gpu_index) {
      for (const auto& g : snap->gpus) {
        if (g.index == *e.gpu_index) e.gpu_uuid = g.uuid;
      }
    }
    events.push_back(std::move(e));
  }
  KeepChangeEvents(events, "");
  if (!changes.empty()) collector_.RequestNodeRecord();  // the next one shows the change
  std::lock_guard<std::mutex> lock(mu_);
  state_.topology = std::move(snap);
  state_.topology_version = version;
  state_.baselines_stale_before_ms = stale_before_ms;
  if (!changes.empty()) state_.topology_changes = std::move(changes);
  state_.tick_seconds["topology"] = std::chrono::duration<double>(Clock::now() - t0).count();
  ++state_.tick_counts["topology"];
}

void Agent::RecordNodeChanges() {
  if (options_.data_dir.empty()) return;
  struct utsname u {};
  std::string kernel = uname(&u) == 0 ? u.release : "";
  NodeFacts now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    now = NodeFactsFrom(state_.system, state_.devices, options_.version, options_.config_text,
                        kernel);
  }
  now.gpus_known = collector_.gpu_ready();
  const std::string path = options_.data_dir + "/node-facts.json";
  auto prev = LoadNodeFacts(path);
  if (!prev.ok()) GW_LOG_WARN("{}; starting the change timeline afresh", prev.status().message());
  if (prev.ok() && *prev) {
    now = FillUnknownFrom(**prev, std::move(now));
    KeepChangeEvents(DiffNodeFacts(**prev, now), "");
  }
  if (Status st = SaveNodeFacts(path, now); !st.ok())
    GW_LOG_ERROR("cannot keep the node's facts for the change timeline: {}", st.message());
  auto nccl = LoadNcclVersions(options_.data_dir + "/nccl-versions.json");
  if (nccl.ok() && *nccl) nccl_versions_ = std::move(**nccl);
}

void Agent::ObserveNcclVersions(const std::vector<JobLogLine>& lines,
                                const std::vector<std::string>& ended_jobs) {
  bool seen = false;
  for (const auto& l : lines) {
    if (l.job.empty()) continue;
    auto version = ParseNcclVersionLine(l.line);
    if (!version) continue;
    seen = true;
    auto job = jobs_.Job(l.job);
    auto change = nccl_versions_.Observe(job ? job->template_name : "", l.job, *version);
    if (change) KeepChangeEvents({*change}, l.job);
  }
  for (const auto& j : ended_jobs) nccl_versions_.ForgetJob(j);
  if (seen && !options_.data_dir.empty()) {
    if (Status st = SaveNcclVersions(options_.data_dir + "/nccl-versions.json", nccl_versions_);
        !st.ok())
      GW_LOG_WARN("cannot keep NCCL versions: {}", st.message());
  }
}

void Agent::TrackMaintenance(int64_t now_ms) {
  std::map<std::string, analyze::Silence> active;
  for (analyze::Silence& s : alerts_.Silences(now_ms)) {
    // A window of this node or one of its GPUs; one narrowed to a job or a cause only holds
    // back alerts (the silence), it does not put the node in maintenance.
    if (s.maintenance && s.starts_ms <= now_ms && now_ms < s.ends_ms && s.job.empty() &&
        s.cause.empty() && (s.node.empty() || s.node == options_.hostname))
      active.emplace(s.id, std::move(s));
  }
  std::vector<ChangeEvent> events;
  auto event = [&](const char* kind, const analyze::Silence& s) {
    ChangeEvent e;
    e.kind = kind;
    e.severity = "info";
    e.gpu_index = s.gpu ? std::optional<unsigned>(static_cast<unsigned>(*s.gpu)) : std::nullopt;
    e.message =
        fmt::format("maintenance {} {}{} until {}{}", s.id,
                    std::string_view(kind) == "maintenance_start" ? "began" : "ended",
                    s.gpu ? fmt::format(" on GPU {}", *s.gpu) : "", analyze::Rfc3339Ms(s.ends_ms),
                    s.comment.empty() ? "" : ": " + s.comment);
    nlohmann::json fields = {{"silence", s.id},
                             {"starts_at", analyze::Rfc3339Ms(s.starts_ms)},
                             {"ends_at", analyze::Rfc3339Ms(s.ends_ms)}};
    if (!s.created_by.empty()) fields["created_by"] = s.created_by;
    e.fields_json = fields.dump();
    events.push_back(std::move(e));
  };
  for (const auto& [id, s] : active) {
    if (open_maintenance_.count(id) == 0) event("maintenance_start", s);
  }
  for (const auto& [id, s] : open_maintenance_) {
    if (active.count(id) == 0) event("maintenance_end", s);
  }
  open_maintenance_ = std::move(active);
  // Dated now: the live diagnosis reads what lands after its cursor, and the window's own
  // bounds are in the message and fields.
  KeepChangeEvents(events, "");
}

void Agent::TickDiagnosis() {
  const int64_t now_ms = clock_.NowMs();
  TrackMaintenance(now_ms);
  // Template baselines (learned here, or imported with gpuwatch baseline import) are read every
  // 5 minutes: a few small files, and what an operator imports is used soon after.
  if (!options_.data_dir.empty() &&
      (templates_read_ms_ < 0 || now_ms - templates_read_ms_ >= 300000)) {
    templates_read_ms_ = now_ms;
    int64_t stale_before_ms = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stale_before_ms = state_.baselines_stale_before_ms;
    }
    auto all = analyze::BaselineStore(options_.data_dir + "/baselines").List();
    if (all.ok())
      diagnosis_.SetTemplateBaselines(analyze::CurrentTemplateSteps(*all, stale_before_ms));
  }
  {
    // The engine forgets an ended job only once its alerts have resolved.
    std::set<std::string> firing_jobs = alerts_.FiringJobs();
    diagnosis_.SetKeepJob([firing_jobs = std::move(firing_jobs)](const std::string& job) {
      return firing_jobs.count(job) != 0;
    });
  }
  // A hub reads only as far as every live node has delivered (HubIngest::DiagnosisTimeMs).
  if (!hub_) {
    diagnosis_.Tick(now_ms);
  } else if (const int64_t upto_ms = hub_->DiagnosisTimeMs(now_ms); upto_ms >= 0) {
    diagnosis_.Tick(std::min(now_ms, upto_ms + LiveDiagnosis::kLagMs));
  }
  // The user rules query the store: outside the alert book's lock, which the API also takes.
  std::vector<analyze::Finding> findings = diagnosis_.Findings();
  // A hub refusing this agent's token is an alert here, not a silent loop of 401s.
  if (pusher_) {
    if (std::string why = pusher_->auth_error(); !why.empty()) {
      analyze::Finding f = analyze::MakeFinding(model::Cause::kUserRule, model::Severity::kCritical,
                                                options_.hostname);
      f.rule = "gpuwatch_hub_push_refused";
      f.first_seen = f.last_seen = static_cast<double>(now_ms) / 1000;
      f.summary = why;
      f.evidence = {why};
      f.action =
          "give the agent a write token the hub's --tokens file lists (--hub-token-file); "
          "nothing is lost meanwhile: the spool keeps it";
      findings.push_back(std::move(f));
    }
  }
  // Soft quotas: an alert as a project nears or passes its GPU-hours, never a stop.
  if (ledger_) {
    for (const accounting::QuotaStatus& q : ledger_->Quotas(now_ms)) {
      if (q.state == "ok") continue;
      analyze::Finding f = analyze::MakeFinding(model::Cause::kUserRule, model::Severity::kWarning,
                                                options_.hostname);
      f.rule = "gpuwatch_quota:" + q.quota.project;
      f.first_seen = f.last_seen = static_cast<double>(now_ms) / 1000;
      f.summary = fmt::format(
          "project {} used {:.1f} of its {:.0f} GPU-hours over the last {:.0f} days ({:.0f} %){}",
          q.quota.project, q.used_gpu_hours, q.quota.gpu_hours,
          static_cast<double>(q.quota.period_ms) / 86400000,
          100 * q.used_gpu_hours / q.quota.gpu_hours,
          q.state == "exceeded" ? ": over its soft quota" : "");
      f.evidence = {f.summary};
      f.action = fmt::format(
          "gpuwatch report --by job --since {:.0f}d shows which jobs used it; nothing is stopped "
          "(the quota is soft)",
          std::ceil(static_cast<double>(q.quota.period_ms) / 86400000));
      findings.push_back(std::move(f));
    }
  }
  if (const store::Querier* q = rules_querier_ ? rules_querier_ : store_; user_rules_ && q) {
    for (auto& f : user_rules_->Evaluate(*q, now_ms)) findings.push_back(std::move(f));
    if (!user_rules_->last_error().empty())
      GW_LOG_WARN("user rules: {}", user_rules_->last_error());
  }
  auto counts = alerts_.Update(findings, now_ms);
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.alerts_firing = std::move(counts);
    if (alerts_.notifies()) {
      const AlertNotifier::Counters c = alerts_.NotifierCounters();
      state_.alert_notifications = {{{"webhook", "sent"}, c.webhook_sent},
                                    {{"webhook", "failed"}, c.webhook_failed},
                                    {{"webhook", "dropped"}, c.webhook_dropped},
                                    {{"alertmanager", "sent"}, c.alertmanager_sent},
                                    {{"alertmanager", "failed"}, c.alertmanager_failed}};
    }
  }
  if (auto_baselines_) {
    int64_t stale_before_ms = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stale_before_ms = state_.baselines_stale_before_ms;
    }
    for (const std::string& line : auto_baselines_->Tick(
             now_ms, jobs_.Jobs(),
             [this](int64_t from, int64_t to) { return recorder_.Window(from, to); },
             stale_before_ms)) {
      GW_LOG_INFO("{}", line);
      templates_read_ms_ = -1;  // judge by it from the next tick
    }
  }
}

nlohmann::json Agent::AlertsJson() const { return alerts_.Json(WallClockMs()); }

Result<std::string> Agent::AddSilence(analyze::Silence s) const {
  return alerts_.AddSilence(std::move(s), WallClockMs());
}

Status Agent::ExpireSilence(const std::string& id) const {
  return alerts_.ExpireSilence(id, WallClockMs());
}

void Agent::DrainJobs() {
  jobs::JobOutputs out = jobs_.TakeOutputs();
  if (KeepsSeries() && !out.steps.empty()) StoreTick(RawStepSeries(options_.hostname, out.steps));
  for (const auto& f : out.log_files) job_logs_.Follow(f);
  std::vector<JobLogLine> lines = job_logs_.Poll();
  for (const auto& job : out.ended_jobs) {
    auto rest = job_logs_.EndJob(job);
    for (auto& l : rest) lines.push_back(std::move(l));
  }
  for (auto& l : out.logs) {
    JobLogLine j{l.job, l.rank, "", std::move(l.line), false, {}, l.t_ms};
    j.cls = logs::ClassifyLogLine(j.line);
    lines.push_back(std::move(j));
  }
  ReadKernelLog(&lines);
  FlushEvents();
  RecordTrace(out, lines);
  ObserveNcclVersions(lines, out.ended_jobs);
  // Failures are snapshotted a few seconds late, so the dying lines of their logs are in.
  std::vector<SnapshotDue> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : out.events) {
      if (snapshots_due_.size() >= 64) break;  // the rate limits would refuse the rest anyway
      if (e.kind == "job_end" && e.severity == "critical")
        snapshots_due_.push_back({e.t_ms + 5000, "job_failed", e.job});
      else if (e.kind == "job_hung")
        snapshots_due_.push_back({e.t_ms + 5000, "job_hung", e.job});
    }
    const int64_t now = clock_.NowMs();
    for (auto it = snapshots_due_.begin(); it != snapshots_due_.end();) {
      if (it->due_ms <= now || stopping_drain_) {
        due.push_back(std::move(*it));
        it = snapshots_due_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& d : due) {
    if (!snapshots_) continue;
    // A job's failure counts against whoever started it, for the snapshot cap.
    std::string owner;
    if (!d.job.empty())
      if (auto v = jobs_.Job(d.job)) owner = v->starter;
    auto r = snapshots_->Take(d.reason, d.job, clock_.NowMs(), false, owner);
    if (!r.ok()) GW_LOG_INFO("no {} snapshot for {}: {}", d.reason, d.job, r.status().message());
  }
  if (!event_store_ || (out.events.empty() && lines.empty())) return;
  std::vector<store::EventRecord> records;
  records.reserve(out.events.size() + lines.size());
  const std::string node = options_.hostname.substr(0, store::kMaxEventIdBytes);
  const int64_t now_ms = clock_.NowMs();
  for (auto& e : out.events) {
    store::EventRecord r;
    r.t_ms = e.t_ms;
    r.kind = e.kind;
    r.severity = e.severity;
    r.node = node;
    r.job = e.job;
    r.message = e.message.substr(0, store::kMaxEventMessageBytes);
    r.fields_json = e.fields_json;
    if (r.fields_json.empty() && e.rank) r.fields_json = fmt::format("{{\"rank\":{}}}", *e.rank);
    records.push_back(std::move(r));
  }
  for (auto& l : lines) {
    store::EventRecord r;
    r.t_ms = l.t_ms ? l.t_ms : now_ms;
    r.kind = "log";
    r.node = node;
    r.job = l.job.substr(0, store::kMaxEventIdBytes);
    // The trace format's log sources: kernel, nccl (a job's NCCL_DEBUG output), job.
    const char* source = l.path == "kernel" ? "kernel" : l.cls.nccl ? "nccl" : "job";
    switch (l.cls.severity) {
      case logs::LogLineClass::Severity::kNone:
        break;
      case logs::LogLineClass::Severity::kWarning:
      case logs::LogLineClass::Severity::kError:
        r.severity = "warning";
        break;
      case logs::LogLineClass::Severity::kCritical:
        r.severity = "critical";
        break;
    }
    r.fields_json = fmt::format(
        R"({{"source":"{}","class":"{}","level":"{}"{}{}}})", source,
        logs::LogLineKindName(l.cls.kind), logs::LogSeverityName(l.cls.severity),
        l.job.empty() ? "" : fmt::format(R"(,"rank":{})", l.rank), l.cut ? R"(,"cut":true)" : "");
    r.message = std::move(l.line);
    if (r.message.size() > store::kMaxEventMessageBytes)
      r.message.resize(store::kMaxEventMessageBytes);
    records.push_back(std::move(r));
  }
  // Job events were put first; the batches are cut small, so a flood of log lines can never
  // make one over-large batch that takes a job's end down with it.
  std::lock_guard<std::mutex> order(flush_mu_);
  size_t begin = 0;
  while (begin < records.size()) {
    size_t end = begin, bytes = 0;
    while (end < records.size() && end - begin < 1000 && bytes < (4u << 20))
      bytes += records[end++].message.size() + 256;
    std::vector<store::EventRecord> batch(std::make_move_iterator(records.begin() + begin),
                                          std::make_move_iterator(records.begin() + end));
    if (Status st = event_store_->Append(batch); !st.ok())
      GW_LOG_ERROR("cannot keep {} job event(s) and log line(s): {}", batch.size(), st.message());
    begin = end;
  }
}

void Agent::PollEvents(int timeout_ms) {
  std::vector<model::GpuEvent> events = collector_.WaitEvents(timeout_ms, clock_.NowMs());
  if (events.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : events) RecordEvent(std::move(e));
  }
  FlushEvents();
}

void Agent::Start() {
  stopping_ = false;
  if (!options_.data_dir.empty() && !snapshots_) {
    SnapshotOptions so;
    so.dir = options_.data_dir + "/snapshots";
    so.window_ms = options_.snapshot_window.count();
    so.max_snapshots = options_.max_snapshots;
    snapshots_ = std::make_unique<SnapshotManager>(
        so, [this](int64_t from_ms, int64_t to_ms) { return TraceWindow(from_ms, to_ms); },
        event_store_, options_.hostname);
    if (Status st = snapshots_->Open(); !st.ok()) {
      GW_LOG_ERROR("failure snapshots are off: {}", st.message());
      snapshots_.reset();
    }
  }
  if (!options_.hub) RecordNodeChanges();
  stopping_drain_ = false;
  alerts_.Start();
  if (pusher_) pusher_->Start();
  if (forwarder_) forwarder_->Start();
  if (sacct_) sacct_->Start();
  StartTiers();
  if (collector_.gpu_ready()) events_thread_ = std::thread([this] { RunEvents(); });
}

void Agent::Stop() {
  stopping_ = true;
  const bool was_running = tiers_.running();
  tiers_.Stop();
  alerts_.Stop();
  if (events_thread_.joinable()) events_thread_.join();
  if (listener_) listener_->Stop();
  if (was_running) {
    stopping_drain_ = true;  // snapshots still due are taken now
    DrainJobs();             // what the last second of jobs reported
  }
  if (snapshots_) snapshots_->Stop();
  if (sacct_) sacct_->Stop();
  if (was_running) TickAccounting();
  if (was_running && hub_) SaveFleetJobs();
  // After the last drain: its records reach the spool, sent at the next start.
  if (pusher_) pusher_->Stop();
  if (forwarder_) forwarder_->Stop();
}

namespace {
// The record types the ledger reads (accounting/ledger.h): the writer puts "type" right after
// "t", so a look at the line's head spares parsing the rest.
bool ForAccounting(std::string_view line) {
  const size_t at = line.substr(0, 48).find("\"type\":\"");
  if (at == std::string_view::npos) return false;
  const std::string_view type = line.substr(at + 8, 5);
  return type.starts_with("job\"") || type.starts_with("gpu\"") || type == "proc\"" ||
         type == "node\"";
}
}  // namespace

void Agent::Record(int64_t t_ms, std::string line) {
  if (ledger_ && ForAccounting(line)) ledger_->AddLines(line);
  if (pusher_) pusher_->AddRecord(line);
  recorder_.Add(t_ms, std::move(line));
}

void Agent::StartTiers() {
  using std::chrono::milliseconds;
  // The topology check first: the first node record of the trace then carries the wiring.
  std::vector<TierScheduler::Tier> tiers;
  auto tier = [this](const char* name, milliseconds interval, void (Agent::*tick)(),
                     milliseconds first_after = milliseconds(0)) {
    return TierScheduler::Tier{name, interval, [this, tick] { (this->*tick)(); }, first_after};
  };
  if (!options_.hub)
    tiers = {tier("topology", options_.topology_interval, &Agent::TickTopology),
             tier("gpu", options_.gpu_interval, &Agent::TickGpu),
             tier("host", options_.host_interval, &Agent::TickHost),
             tier("processes", options_.process_interval, &Agent::TickProcesses),
             tier("jobs", options_.job_interval, &Agent::TickJobs, options_.job_interval),
             tier("drain", milliseconds(1000), &Agent::DrainJobs)};
  // A hub only judges what its agents send.
  tiers.push_back(tier("diagnosis", milliseconds(5000), &Agent::TickDiagnosis));
  tiers.push_back(
      tier("accounting", milliseconds(60000), &Agent::TickAccounting, milliseconds(60000)));
  if (hub_)
    tiers.push_back(
        tier("fleet-jobs", milliseconds(30000), &Agent::SaveFleetJobs, milliseconds(30000)));
  // The agent's own overhead, by tier (gpuwatch_agent_tier_cpu_seconds_total).
  tiers_.Start(std::move(tiers), [this](const std::string& name, double cpu_s) {
    std::lock_guard<std::mutex> lock(mu_);
    state_.tier_cpu_seconds[name] += cpu_s;
  });
}

void Agent::TickAccounting() {
  if (!ledger_) return;
  if (Status s = ledger_->Checkpoint(clock_.NowMs()); !s.ok())
    GW_LOG_WARN("accounting: {}", s.message());
}

void Agent::SaveFleetJobs() {
  if (Status s = hub_->SaveJobs(); !s.ok()) GW_LOG_WARN("hub: the job list: {}", s.message());
}

void Agent::RunEvents() {
  // Short waits so Stop() is prompt; NVML returns at once when an event arrives.
  while (!stopping_) PollEvents(250);
}

}  // namespace gpuwatch::server
