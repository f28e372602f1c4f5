#include "trace/trace_writer.h"

#include <algorithm>
#include <cmath>

#include "trace/internal/json_writer.h"

namespace gpuwatch::trace {
namespace {

using internal::JsonWriter;
using model::GpuMetric;

constexpr double kMib = 1024.0 * 1024.0;
constexpr double kBytesPerMb = 1e6;  // the trace's MB/s is decimal

// {"t":..,"type":..,"node":.. — the prefix every record starts with.
JsonWriter Begin(int64_t t_ms, std::string_view type, std::string_view node) {
  JsonWriter w;
  w.BeginObject();
  w.Key("t");
  w.TimeMs(t_ms);
  w.Field("type", type);
  w.Field("node", node);
  return w;
}

std::string Finish(JsonWriter& w) {
  w.EndObject();
  return w.Take();
}

// Sum of whichever of `ms` are valid; nullopt when none is.
std::optional<double> SumValid(const model::GpuSample& s, std::initializer_list<GpuMetric> ms) {
  std::optional<double> sum;
  for (GpuMetric m : ms)
    if (auto v = s.Get(m)) sum = sum.value_or(0) + *v;
  return sum;
}

// MB/s between two readings of a byte counter; nullopt across a reset (the counter went down)
// or when time did not advance.
std::optional<double> RateMbs(double prev_bytes, int64_t prev_ms, double cur_bytes,
                              int64_t cur_ms) {
  if (cur_ms <= prev_ms || cur_bytes < prev_bytes) return std::nullopt;
  return (cur_bytes - prev_bytes) / (static_cast<double>(cur_ms - prev_ms) / 1000.0) / kBytesPerMb;
}

std::optional<double> CounterRateMbs(const model::GpuSample& cur, const model::GpuSample* prev,
                                     GpuMetric m) {
  if (prev == nullptr) return std::nullopt;
  auto c = cur.Get(m), p = prev->Get(m);
  if (!c || !p) return std::nullopt;
  return RateMbs(*p, prev->time_ms, *c, cur.time_ms);
}

std::optional<double> Scaled(std::optional<double> v, double divisor) {
  if (!v) return std::nullopt;
  return *v / divisor;
}

// Clock-event reasons with a trace name (the spec's list); NVML's display_clocks has none.
bool IsSpecThrottleReason(std::string_view name) {
  static constexpr std::string_view kSpec[] = {"sw_power_cap", "hw_slowdown",    "hw_thermal",
                                               "sw_thermal",   "hw_power_brake", "sync_boost",
                                               "idle",         "app_clocks"};
  return std::find(std::begin(kSpec), std::end(kSpec), name) != std::end(kSpec);
}

template <typename T>
std::optional<double> OptSum(std::initializer_list<std::optional<T>> vs) {
  std::optional<double> sum;
  for (const auto& v : vs)
    if (v) sum = sum.value_or(0) + static_cast<double>(*v);
  return sum;
}

}  // namespace

std::string FormatTraceTime(int64_t t_ms) {
  JsonWriter w;
  w.TimeMs(t_ms);
  return w.Take();
}

// ---- node ----

NodeGpuExtra NodeGpuExtraFromSample(unsigned index, const model::GpuSample& s) {
  NodeGpuExtra e;
  e.index = index;
  e.memory_total_mib = s.Get(GpuMetric::kMemTotalMib);
  e.power_limit_w = s.Get(GpuMetric::kPowerLimitW);
  e.max_sm_clock_mhz = s.Get(GpuMetric::kMaxSmClockMhz);
  e.max_mem_clock_mhz = s.Get(GpuMetric::kMaxMemClockMhz);
  e.pcie_max_gen = s.Get(GpuMetric::kPcieMaxGen);
  e.pcie_max_width = s.Get(GpuMetric::kPcieMaxWidth);
  return e;
}

std::string NodeRecord(int64_t t_ms, std::string_view node, const model::SystemInfo& system,
                       const std::vector<model::GpuStaticInfo>& gpus, const NodeExtras& extras) {
  JsonWriter w = Begin(t_ms, "node", node);
  w.NonEmptyField("driver_version", system.driver_version);
  w.NonEmptyField("cuda_version", system.cuda_driver_version);
  if (extras.nccl_version) w.NonEmptyField("nccl_version", *extras.nccl_version);
  w.Field("clock_offset_ms", extras.clock_offset_ms);
  w.Key("gpus");
  w.BeginArray();
  for (const auto& g : gpus) {
    const NodeGpuExtra* extra = nullptr;
    for (const auto& e : extras.gpus)
      if (e.index == g.index) extra = &e;
    w.BeginObject();
    w.FieldUInt("index", g.index);
    w.NonEmptyField("uuid", g.uuid);
    w.NonEmptyField("name", g.name);
    w.NonEmptyField("pci_bus_id", g.pci_bus_id);
    if (extra != nullptr) {
      if (extra->numa_node) w.FieldInt("numa_node", *extra->numa_node);
      w.NonEmptyField("cpu_affinity", extra->cpu_affinity);
      w.Field("memory_total_mib", extra->memory_total_mib);
      w.Field("power_limit_w", extra->power_limit_w);
      w.Field("max_sm_clock_mhz", extra->max_sm_clock_mhz);
      w.Field("max_mem_clock_mhz", extra->max_mem_clock_mhz);
      w.Field("pcie_max_gen", extra->pcie_max_gen);
      w.Field("pcie_max_width", extra->pcie_max_width);
    }
    w.FieldUInt("nvlink_count", g.nvlink_count);
    w.FieldBool("mig_mode", g.mig_enabled);
    w.EndObject();
  }
  w.EndArray();
  if (extras.gpu_links) {
    w.Key("topology");
    w.BeginObject();
    w.Key("gpu_links");
    w.BeginArray();
    for (const auto& row : *extras.gpu_links) {
      w.BeginArray();
      for (const auto& cell : row) w.String(cell);
      w.EndArray();
    }
    w.EndArray();
    w.EndObject();
  }
  if (!extras.nics.empty()) {
    w.Key("nics");
    w.BeginArray();
    for (const auto& n : extras.nics) {
      w.BeginObject();
      w.Field("name", n.name);
      w.NonEmptyField("type", n.type);
      w.NonEmptyField("pci_bus_id", n.pci_bus_id);
      if (n.numa_node) w.FieldInt("numa_node", *n.numa_node);
      w.Field("link_gbps", n.link_gbps);
      w.EndObject();
    }
    w.EndArray();
  }
  return Finish(w);
}

// ---- gpu ----

std::string GpuRecord(std::string_view node, unsigned gpu, const model::GpuSample& s,
                      const model::GpuSample* prev) {
  JsonWriter w = Begin(s.time_ms, "gpu", node);
  w.FieldUInt("gpu", gpu);
  w.Field("util_pct", s.Get(GpuMetric::kUtilGpuPct));
  w.Field("mem_util_pct", s.Get(GpuMetric::kUtilMemPct));
  w.Field("sm_active", s.Get(GpuMetric::kGpmSmActive));
  w.Field("sm_occupancy", s.Get(GpuMetric::kGpmSmOccupancy));
  w.Field("tensor_active", s.Get(GpuMetric::kGpmTensorActive));
  w.Field("dram_active", s.Get(GpuMetric::kGpmDramActive));
  w.Field("mem_used_mib", s.Get(GpuMetric::kMemUsedMib));
  w.Field("temp_c", s.Get(GpuMetric::kTempC));
  w.Field("mem_temp_c", s.Get(GpuMetric::kMemTempC));
  w.Field("power_w", s.Get(GpuMetric::kPowerW));
  w.Field("energy_j", Scaled(s.Get(GpuMetric::kEnergyMj), 1000.0));
  w.Field("sm_clock_mhz", s.Get(GpuMetric::kSmClockMhz));
  w.Field("mem_clock_mhz", s.Get(GpuMetric::kMemClockMhz));
  if (auto mask = s.Get(GpuMetric::kClockEventReasons); mask && *mask >= 0 && *mask < 0x1p64) {
    w.Key("throttle");
    w.BeginArray();
    for (std::string_view r : model::ClockEventReasonNames(static_cast<uint64_t>(*mask)))
      if (IsSpecThrottleReason(r)) w.String(r);
    w.EndArray();
  }
  w.Field("fan_pct", s.Get(GpuMetric::kFanPct));
  w.Field("pcie_tx_mbs", Scaled(s.Get(GpuMetric::kPcieTxBytesPerSec), kBytesPerMb));
  w.Field("pcie_rx_mbs", Scaled(s.Get(GpuMetric::kPcieRxBytesPerSec), kBytesPerMb));
  w.Field("pcie_gen", s.Get(GpuMetric::kPcieGen));
  w.Field("pcie_width", s.Get(GpuMetric::kPcieWidth));
  w.Field("pcie_replay", s.Get(GpuMetric::kPcieReplay));
  w.Field("nvlink_tx_mbs", CounterRateMbs(s, prev, GpuMetric::kNvlinkTxBytes));
  w.Field("nvlink_rx_mbs", CounterRateMbs(s, prev, GpuMetric::kNvlinkRxBytes));
  w.Field("nvlink_active_links", s.Get(GpuMetric::kNvlinkActiveLinks));
  w.Field("nvlink_crc_errors",
          SumValid(s, {GpuMetric::kNvlinkCrcFlitErrors, GpuMetric::kNvlinkCrcDataErrors}));
  w.Field("nvlink_replay", s.Get(GpuMetric::kNvlinkReplayErrors));
  w.Field("nvlink_recovery", s.Get(GpuMetric::kNvlinkRecoveryErrors));
  w.Field("ecc_sbe_volatile", s.Get(GpuMetric::kEccSbeVolatile));
  w.Field("ecc_dbe_volatile", s.Get(GpuMetric::kEccDbeVolatile));
  w.Field("retired_pages", SumValid(s, {GpuMetric::kRetiredPagesSbe, GpuMetric::kRetiredPagesDbe}));
  if (auto v = s.Get(GpuMetric::kRemappedRowsPending); v && !std::isnan(*v))
    w.FieldBool("remapped_rows_pending", *v != 0);
  if (auto v = s.Get(GpuMetric::kRemappedRowsFailure); v && !std::isnan(*v))
    w.FieldBool("remapped_rows_failure", *v != 0);
  return Finish(w);
}

std::vector<std::string> MigRecords(std::string_view node, unsigned gpu,
                                    const model::GpuSample& s) {
  std::vector<std::string> out;
  out.reserve(s.mig.size());
  for (const auto& m : s.mig) {
    JsonWriter w = Begin(s.time_ms, "gpu", node);
    w.FieldUInt("gpu", gpu);
    w.Field("mig", std::to_string(m.gpu_instance_id) + "/" + std::to_string(m.compute_instance_id));
    w.Field("mem_used_mib", m.mem_used_mib);
    w.Field("sm_active", m.sm_active);
    out.push_back(Finish(w));
  }
  return out;
}

// ---- host ----

std::string HostRecord(std::string_view node, const model::HostSample& s,
                       const model::HostSample* prev) {
  JsonWriter w = Begin(s.time_ms, "host", node);
  w.Field("cpu_pct", s.cpu_util_pct);
  w.Field("iowait_pct", s.iowait_pct);
  w.Field("mem_used_mib", Scaled(s.mem_used_bytes, kMib));
  w.Field("mem_total_mib", Scaled(s.mem_total_bytes, kMib));
  w.Field("load1", s.load1);
  if (s.nics.empty() && s.ib_ports.empty()) return Finish(w);

  const auto rate = [&](std::optional<uint64_t> p, std::optional<uint64_t> c) {
    return p && c
               ? RateMbs(static_cast<double>(*p), prev->time_ms, static_cast<double>(*c), s.time_ms)
               : std::nullopt;
  };
  w.Key("nics");
  w.BeginObject();
  for (const auto& n : s.nics) {
    const model::NicSample* pn = nullptr;
    if (prev != nullptr)
      for (const auto& x : prev->nics)
        if (x.name == n.name) pn = &x;
    w.Key(n.name);
    w.BeginObject();
    if (pn != nullptr) {
      w.Field("tx_mbs", rate(pn->tx_bytes, n.tx_bytes));
      w.Field("rx_mbs", rate(pn->rx_bytes, n.rx_bytes));
    }
    if (n.link_up) w.FieldBool("link_up", *n.link_up);
    w.FieldUInt("errors", n.rx_errors + n.tx_errors);
    w.EndObject();
  }
  for (const auto& p : s.ib_ports) {
    const model::IbPortSample* pp = nullptr;
    if (prev != nullptr)
      for (const auto& x : prev->ib_ports)
        if (x.device == p.device && x.port == p.port) pp = &x;
    w.Key(p.port == 1 ? p.device : p.device + "/" + std::to_string(p.port));
    w.BeginObject();
    if (pp != nullptr) {
      w.Field("tx_mbs", rate(pp->xmit_bytes, p.xmit_bytes));
      w.Field("rx_mbs", rate(pp->rcv_bytes, p.rcv_bytes));
    }
    if (!p.state.empty()) w.FieldBool("link_up", p.state == "ACTIVE");
    w.Field("errors", OptSum({p.symbol_errors, p.rcv_errors}));
    w.Field("retransmits", OptSum({p.local_ack_timeout_err, p.packet_seq_err}));
    w.EndObject();
  }
  w.EndObject();
  return Finish(w);
}

// ---- proc ----

std::string ProcRecord(int64_t t_ms, std::string_view node, const model::ProcessAttribution& p,
                       const std::optional<std::vector<unsigned>>& cpu_numa_nodes) {
  JsonWriter w = Begin(t_ms, "proc", node);
  w.FieldUInt("pid", p.pid);
  w.FieldUInt("gpu", p.gpu_index);
  if (p.used_memory_bytes)
    w.Field("mem_used_mib", static_cast<double>(*p.used_memory_bytes) / kMib);
  w.NonEmptyField("user", p.user);
  w.NonEmptyField("container", std::string_view(p.container_id).substr(0, 12));
  w.NonEmptyField("job", p.job_id);
  if (cpu_numa_nodes) {
    w.Key("cpu_numa_nodes");
    w.BeginArray();
    for (unsigned n : *cpu_numa_nodes) w.UInt(n);
    w.EndArray();
  }
  if (p.visible_index) w.FieldInt("visible_index", *p.visible_index);
  return Finish(w);
}

// ---- job ----

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return "queued";
    case JobState::kStart:
      return "start";
    case JobState::kEnd:
      return "end";
  }
  return "start";
}

std::string JobRecord(int64_t t_ms, std::string_view node, const JobLifecycle& j) {
  JsonWriter w = Begin(t_ms, "job", node);
  w.Field("job", j.job);
  w.Field("state", JobStateName(j.state));
  w.NonEmptyField("template", j.template_name);
  w.NonEmptyField("user", j.user);
  w.NonEmptyField("project", j.project);
  if (j.ranks) w.FieldUInt("ranks", *j.ranks);
  if (j.gpus) {
    w.Key("gpus");
    w.BeginArray();
    for (unsigned g : *j.gpus) w.UInt(g);
    w.EndArray();
  }
  if (j.exit_code) w.FieldInt("exit_code", *j.exit_code);
  if (j.submit_ms) w.Field("submit_t", static_cast<double>(*j.submit_ms) / 1000);
  return Finish(w);
}

// ---- step ----

std::string StepRecord(int64_t t_ms, std::string_view node, std::string_view job, uint32_t rank,
                       std::optional<unsigned> gpu, const model::StepReport& step) {
  JsonWriter w = Begin(t_ms, "step", node);
  w.Field("job", job);
  w.FieldUInt("rank", rank);
  if (gpu) w.FieldUInt("gpu", *gpu);
  w.FieldUInt("step", step.step);
  w.Field("duration_s", step.duration_s);
  w.Field("samples", step.samples);
  w.Field("data_wait_s", step.data_wait_s);
  w.Field("comm_s", step.comm_s);
  w.Field("checkpoint_s", step.checkpoint_s);
  w.Field("loss", step.loss);
  w.Field("grad_norm", step.grad_norm);
  return Finish(w);
}

// ---- event ----

std::string_view EventKindName(EventKind k) {
  switch (k) {
    case EventKind::kXid:
      return "xid";
    case EventKind::kEcc:
      return "ecc";
    case EventKind::kGpuLost:
      return "gpu_lost";
    case EventKind::kDriverChange:
      return "driver_change";
    case EventKind::kConfigChange:
      return "config_change";
    case EventKind::kTopologyChange:
      return "topology_change";
    case EventKind::kMaintenanceStart:
      return "maintenance_start";
    case EventKind::kMaintenanceEnd:
      return "maintenance_end";
    case EventKind::kCheckpointStart:
      return "checkpoint_start";
    case EventKind::kCheckpointEnd:
      return "checkpoint_end";
    case EventKind::kAnnotation:
      return "annotation";
  }
  return "annotation";
}

std::string EventRecordLine(int64_t t_ms, std::string_view node, std::optional<unsigned> gpu,
                            EventKind kind, std::optional<uint64_t> code, std::string_view message,
                            std::string_view job) {
  JsonWriter w = Begin(t_ms, "event", node);
  if (gpu) w.FieldUInt("gpu", *gpu);
  w.Field("kind", EventKindName(kind));
  if (code) w.FieldUInt("code", *code);
  w.NonEmptyField("message", message);
  w.NonEmptyField("job", job);
  return Finish(w);
}

// ---- log ----

std::string_view LogSourceName(LogSource s) {
  switch (s) {
    case LogSource::kNccl:
      return "nccl";
    case LogSource::kJob:
      return "job";
    case LogSource::kKernel:
      return "kernel";
    case LogSource::kNcclTests:
      return "nccl-tests";
  }
  return "job";
}

std::string LogRecord(int64_t t_ms, std::string_view node, std::string_view job,
                      std::optional<uint32_t> rank, LogSource source, std::string_view line) {
  JsonWriter w = Begin(t_ms, "log", node);
  w.NonEmptyField("job", job);
  if (rank) w.FieldUInt("rank", *rank);
  w.Field("source", LogSourceName(source));
  w.Field("line", line);
  return Finish(w);
}

}  // namespace gpuwatch::trace
