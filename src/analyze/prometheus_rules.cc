#include "analyze/prometheus_rules.h"

#include <fmt/format.h>

namespace gpuwatch::analyze {
namespace {

// Per-GPU series carry dcgm-exporter's labels (Hostname, gpu, UUID, …); per-job series Hostname,
// job and rank. A throttle costs time only on a working GPU: the engine's busy_util_pct (30 %).
const std::vector<PrometheusRule> kRules = {
    // ---- card ----
    {Cause::kThermalThrottle, Severity::kWarning,
     R"(max by (Hostname, gpu, UUID) (gpuwatch_clock_event_reason_active{reason=~"sw_thermal|hw_thermal"}) == 1 and on (Hostname, gpu) DCGM_FI_DEV_GPU_UTIL >= 30)",
     "1m", "{{ $labels.Hostname }} GPU {{ $labels.gpu }} is thermally throttled while busy"},
    {Cause::kPowerThrottle, Severity::kWarning,
     // A one-sample power-cap flicker at full load is normal: throttled most of 5 minutes.
     R"(max by (Hostname, gpu, UUID) (avg_over_time(gpuwatch_clock_event_reason_active{reason=~"sw_power_cap|hw_power_brake"}[5m])) > 0.5 and on (Hostname, gpu) avg_over_time(DCGM_FI_DEV_GPU_UTIL[5m]) >= 30)",
     "1m", "{{ $labels.Hostname }} GPU {{ $labels.gpu }} is held at its power limit while busy"},
    {Cause::kClockSlowdown, Severity::kWarning,
     R"(max by (Hostname, gpu, UUID) (gpuwatch_clock_event_reason_active{reason="hw_slowdown"}) == 1 and on (Hostname, gpu) DCGM_FI_DEV_GPU_UTIL >= 30)",
     "1m", "{{ $labels.Hostname }} GPU {{ $labels.gpu }} has its clocks cut by hardware slowdown"},
    {Cause::kGpuLost, Severity::kCritical, R"(gpuwatch_gpu_up == 0)", "",
     "{{ $labels.Hostname }} GPU {{ $labels.gpu }} ({{ $labels.UUID }}) fell off the bus"},
    {Cause::kXid, Severity::kWarning,
     // 79 is gpu_lost and 48 ecc_dbe: their own rules. A (GPU, XID) series is born at 1 with the
     // code's first occurrence, where increase() sees nothing: a series new in the last 10
     // minutes counts too.
     R"(increase(gpuwatch_xid_errors_total{xid!~"79|48"}[10m]) > 0 or (gpuwatch_xid_errors_total{xid!~"79|48"} unless gpuwatch_xid_errors_total{xid!~"79|48"} offset 10m))",
     "", "{{ $labels.Hostname }} GPU {{ $labels.gpu }} raised XID {{ $labels.xid }}"},
    {Cause::kEccDbe, Severity::kCritical,
     R"(increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0 or increase(gpuwatch_xid_errors_total{xid="48"}[10m]) > 0 or (gpuwatch_xid_errors_total{xid="48"} unless gpuwatch_xid_errors_total{xid="48"} offset 10m))",
     "",
     "{{ $labels.Hostname }} GPU {{ $labels.gpu }} had an uncorrectable (double-bit) ECC error"},
    {Cause::kEccSbeGrowth, Severity::kWarning,
     R"(increase(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL[30m]) >= 3)", "",
     "{{ $labels.Hostname }} GPU {{ $labels.gpu }}: corrected ECC errors keep growing "
     "({{ $value }} in 30 min)"},
    {Cause::kPcieDowngrade, Severity::kWarning,
     R"(DCGM_FI_DEV_PCIE_LINK_WIDTH < DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH)", "5m",
     "{{ $labels.Hostname }} GPU {{ $labels.gpu }} runs its PCIe link at x{{ $value }}, below "
     "its maximum width"},
    {Cause::kPcieReplay, Severity::kWarning, R"(increase(gpuwatch_pcie_replays_total[10m]) >= 3)",
     "",
     "{{ $labels.Hostname }} GPU {{ $labels.gpu }}: PCIe replays keep growing ({{ $value }} in "
     "10 min)"},
    {Cause::kNvlinkErrors, Severity::kWarning,
     R"(sum by (Hostname, gpu, UUID) (increase({__name__=~"DCGM_FI_DEV_NVLINK_(CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR_COUNT_TOTAL"}[10m])) > 0)",
     "", "{{ $labels.Hostname }} GPU {{ $labels.gpu }}: NVLink errors ({{ $value }} in 10 min)"},
    {Cause::kMemoryLeak, Severity::kWarning,
     // Growing for 10 minutes at a pace that fills the card within the hour.
     R"(deriv(DCGM_FI_DEV_FB_USED[15m]) > 0 and predict_linear(DCGM_FI_DEV_FB_USED[15m], 3600) > DCGM_FI_DEV_FB_TOTAL)",
     "10m",
     "{{ $labels.Hostname }} GPU {{ $labels.gpu }}: memory grows {{ $value }} MiB/s and runs "
     "out within the hour"},
    {Cause::kGpuIdleAllocated, Severity::kWarning,
     R"(max_over_time(DCGM_FI_DEV_GPU_UTIL[10m]) == 0 and on (Hostname, gpu) gpuwatch_process_gpu_memory_bytes)",
     "", "{{ $labels.Hostname }} GPU {{ $labels.gpu }} is held by a process and idle for 10 min"},
    // ---- task ----
    {Cause::kJobHang, Severity::kCritical, R"(gpuwatch_job_hung == 1)", "",
     "Job {{ $labels.job }} on {{ $labels.Hostname }} has live processes and finishes no step"},
    {Cause::kRankExit, Severity::kCritical,
     R"(gpuwatch_job_rank_up == 0 and on (Hostname, job) (max by (Hostname, job) (gpuwatch_job_rank_up) == 1))",
     "",
     "Rank {{ $labels.rank }} of job {{ $labels.job }} on {{ $labels.Hostname }} exited while "
     "the job runs"},
    {Cause::kDataStall, Severity::kWarning,
     R"(max by (Hostname, job) (gpuwatch_job_data_wait_ratio) > 0.3)", "5m",
     "Job {{ $labels.job }} on {{ $labels.Hostname }} waits for input data "
     "{{ $value | humanizePercentage }} of each step"},
    {Cause::kCheckpointStall, Severity::kWarning,
     // Blocked on checkpoints most of 5 minutes: the engine's 300 s budget for a checkpoint
     // with no history, seen through the job tier's windows (it also compares with the job's).
     R"(max by (Hostname, job) (gpuwatch_job_checkpoint_ratio) > 0.5)", "5m",
     "Job {{ $labels.job }} on {{ $labels.Hostname }} has spent {{ $value | humanizePercentage }} "
     "of its time blocked on checkpoints for 5 minutes"},
    {Cause::kStragglerGpu, Severity::kWarning,
     // The straggler waits least in communication: the others wait for it.
     R"(gpuwatch_job_comm_ratio < on (Hostname, job) group_left () (0.8 * quantile by (Hostname, job) (0.5, gpuwatch_job_comm_ratio)) and gpuwatch_job_comm_ratio + 0.08 < on (Hostname, job) group_left () quantile by (Hostname, job) (0.5, gpuwatch_job_comm_ratio))",
     "5m",
     "Rank {{ $labels.rank }} of job {{ $labels.job }} on {{ $labels.Hostname }} is the one the "
     "others wait for"},
    {Cause::kStepRegression, Severity::kWarning,
     R"(gpuwatch_job_step_seconds{quantile="0.5"} > 1.2 * min_over_time(gpuwatch_job_step_seconds{quantile="0.5"}[6h]))",
     "15m",
     "Job {{ $labels.job }} on {{ $labels.Hostname }}: median step {{ $value }} s, over 1.2x its "
     "best of 6 h"},
    {Cause::kNumaMismatch, Severity::kWarning, R"(gpuwatch_process_numa_mismatch == 1)", "5m",
     "{{ $labels.Hostname }} GPU {{ $labels.gpu }}: pid {{ $labels.pid }} runs on CPU NUMA node(s) "
     "{{ $labels.cpu_numa_nodes }}, its GPU is on {{ $labels.gpu_numa_node }}"},
    // ---- link ----
    {Cause::kNetErrors, Severity::kWarning,
     R"(sum by (Hostname, device, port) (increase(gpuwatch_ib_port_errors_total[10m])) > 0 or sum by (Hostname, interface) (increase(gpuwatch_nic_errors_total[10m])) > 0)",
     "",
     "{{ $labels.Hostname }} {{ $labels.device }}{{ $labels.interface }}: link errors "
     "({{ $value }} in 10 min)"},
    {Cause::kNetCongestion, Severity::kWarning,
     R"(gpuwatch_link_utilization_ratio{link_type=~"nic|ib_port"} > 0.9 and on (Hostname) (max by (Hostname) (gpuwatch_job_comm_ratio) > 0.3))",
     "5m",
     "{{ $labels.Hostname }} {{ $labels.device }}{{ $labels.interface }} runs at "
     "{{ $value | humanizePercentage }} of its rate while a job waits in communication"},
    {Cause::kClockSkew, Severity::kWarning,
     R"(abs(gpuwatch_host_time_source_offset_seconds) > 0.1)", "5m",
     "{{ $labels.Hostname }}'s clock is {{ $value }} s off its time source ({{ $labels.source }})"},
};

const std::vector<EngineOnlyCause> kEngineOnly = {
    {Cause::kNvlinkFallback, "the transport NCCL chose is in its log lines, not in a metric"},
    {Cause::kNetFallback, "the transport NCCL chose is in its log lines, not in a metric"},
    {Cause::kVersionMismatch, "NCCL and driver versions across nodes come from the jobs' logs"},
    {Cause::kTopologyChange,
     "a change against the node's archived topology is an event, not a metric"},
};

// A YAML double-quoted scalar.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string AlertName(std::string_view cause) {
  std::string out = "Gpuwatch";
  bool upper = true;
  for (char c : cause) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(c - 'a' + 'A') : c;
    upper = false;
  }
  return out;
}

std::string AlertName(Cause cause) { return AlertName(model::CauseName(cause)); }

const std::vector<PrometheusRule>& PrometheusRules() { return kRules; }
const std::vector<EngineOnlyCause>& EngineOnlyCauses() { return kEngineOnly; }

const PrometheusRule* PrometheusRuleOf(Cause cause) {
  for (const PrometheusRule& r : kRules) {
    if (r.cause == cause) return &r;
  }
  return nullptr;
}

std::string PrometheusRulesYaml() {
  std::string out =
      "# gpuwatch's built-in rules as Prometheus alerting rules (`gpuwatch rules export`), over\n"
      "# the metrics the agents serve at /metrics (docs/metrics.md). Severities and causes are\n"
      "# those of gpuwatch's findings; docs/runbook.md says what each means and what to do.\n"
      "# Causes only gpuwatch's diagnosis engine concludes (`gpuwatch diagnose`):\n";
  for (const auto& e : kEngineOnly) {
    out += fmt::format("#   {}: {}\n", model::CauseName(e.cause), e.why);
  }
  out += "groups:\n";
  for (std::string_view layer : {"card", "task", "link"}) {
    out += fmt::format("  - name: gpuwatch-{}\n    rules:\n", layer);
    for (const PrometheusRule& r : kRules) {
      if (model::LayerName(model::LayerOf(r.cause)) != layer) continue;
      out +=
          fmt::format("      - alert: {}\n        expr: {}\n", AlertName(r.cause), Quote(r.expr));
      if (!r.for_.empty()) out += fmt::format("        for: {}\n", r.for_);
      out += fmt::format(
          "        labels:\n          severity: {}\n          cause: {}\n          layer: {}\n"
          "        annotations:\n          summary: {}\n          runbook: {}\n",
          model::SeverityName(r.severity), model::CauseName(r.cause), layer, Quote(r.summary),
          Quote(fmt::format("docs/runbook.md, cause `{}`", model::CauseName(r.cause))));
    }
  }
  return out;
}

}  // namespace gpuwatch::analyze
