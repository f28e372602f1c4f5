#include "cli/status_view.h"

#include <fmt/format.h>

#include "common/strings.h"
#include "model/metric_catalog.h"

namespace gpuwatch::cli {

using model::GpuMetric;

namespace {

std::string Num(const std::optional<double>& v, const char* fmt_spec = "{:.0f}") {
  return v ? fmt::format(fmt::runtime(fmt_spec), *v) : "n/a";
}

std::string Throttle(const model::GpuSample& s) {
  auto mask = s.Get(GpuMetric::kClockEventReasons);
  if (!mask) return "n/a";
  auto names = model::ClockEventReasonNames(static_cast<uint64_t>(*mask));
  if (names.empty()) return "none";
  std::string out;
  for (auto n : names) {
    if (!out.empty()) out += ",";
    out += n;
  }
  return out;
}

// Process-controlled text (comm, user, job id) is made printable: no terminal escapes.
std::string Short(std::string_view raw, size_t n) {
  std::string s = PrintableText(raw);
  if (s.size() <= n) return s;
  return s.substr(0, n - 1) + "~";
}

}  // namespace

std::string RenderStatusTable(const server::AgentState& s) {
  std::string out;
  if (!s.gpu_available) {
    out += fmt::format("gpuwatch status — {} — no GPU metrics: {}\n", s.hostname,
                       s.gpu_unavailable_reason);
  } else {
    out += fmt::format("gpuwatch status — {} — driver {}, CUDA {}, {} GPU(s)\n", s.hostname,
                       s.system.driver_version, s.system.cuda_driver_version, s.devices.size());
    out += fmt::format("{:<3} {:<26} {:<16} {:>4} {:>17} {:>5} {:>11} {:>6} {:>6} {:>5} {}\n",
                       "GPU", "Name", "Bus-Id", "Util", "Memory MiB", "Temp", "Power W", "SM MHz",
                       "ECC2b", "XIDs", "Throttle");
    for (size_t i = 0; i < s.devices.size(); ++i) {
      const auto& g = s.devices[i];
      const model::GpuSample empty;
      const auto& smp = i < s.gpu_samples.size() ? s.gpu_samples[i] : empty;
      uint64_t xids = 0;
      for (const auto& [key, c] : s.xid_counts)
        if (key.first == g.index) xids += c;
      if (smp.lost) {
        out += fmt::format("{:<3} {:<26} {:<16} GPU LOST — not answering NVML (XIDs {})\n", g.index,
                           Short(g.name, 26), Short(g.pci_bus_id, 16), xids);
        continue;
      }
      std::string mem = smp.Get(GpuMetric::kMemUsedMib) && smp.Get(GpuMetric::kMemTotalMib)
                            ? fmt::format("{:.0f}/{:.0f}", *smp.Get(GpuMetric::kMemUsedMib),
                                          *smp.Get(GpuMetric::kMemTotalMib))
                            : "n/a";
      std::string util =
          smp.Get(GpuMetric::kUtilGpuPct) ? Num(smp.Get(GpuMetric::kUtilGpuPct)) + "%" : "n/a";
      std::string power = fmt::format("{}/{}", Num(smp.Get(GpuMetric::kPowerW)),
                                      Num(smp.Get(GpuMetric::kPowerLimitW)));
      out += fmt::format("{:<3} {:<26} {:<16} {:>4} {:>17} {:>5} {:>11} {:>6} {:>6} {:>5} {}\n",
                         g.index, Short(g.name, 26), Short(g.pci_bus_id, 16), util, mem,
                         smp.Get(GpuMetric::kTempC) ? Num(smp.Get(GpuMetric::kTempC)) + "C" : "n/a",
                         power, Num(smp.Get(GpuMetric::kSmClockMhz)),
                         Num(smp.Get(GpuMetric::kEccDbeVolatile)), xids, Throttle(smp));
      for (const auto& m : smp.mig) {
        out +=
            fmt::format("    MIG GI {} CI {} {} mem {}/{} MiB\n", m.gpu_instance_id,
                        m.compute_instance_id, m.uuid, Num(m.mem_used_mib), Num(m.mem_total_mib));
      }
    }
  }
  out += "\nProcesses:\n";
  if (s.processes.empty()) {
    out += "  none\n";
  } else {
    out += fmt::format("{:<3} {:>8} {:<12} {:<14} {:<12} {:>7} {:>9} {}\n", "GPU", "PID", "User",
                       "Container", "Job", "Visible", "Mem MiB", "Command");
    for (const auto& p : s.processes) {
      out += fmt::format(
          "{:<3} {:>8} {:<12} {:<14} {:<12} {:>7} {:>9} {}\n", p.gpu_index, p.pid,
          p.user.empty() ? "?" : Short(p.user, 12),
          p.container_id.empty() ? "-" : p.container_id.substr(0, 12),
          p.job_id.empty() ? "-" : Short(p.job_id, 12),
          p.visible_index ? std::to_string(*p.visible_index) : "?",
          p.used_memory_bytes ? fmt::format("{:.0f}", *p.used_memory_bytes / 1048576.0) : "n/a",
          PrintableText(p.command));
    }
  }
  return out;
}

std::string RenderCapabilities(const server::AgentState& s) {
  std::string out;
  if (!s.gpu_available) return fmt::format("no GPU metrics: {}\n", s.gpu_unavailable_reason);
  for (size_t i = 0; i < s.devices.size() && i < s.caps.size(); ++i) {
    const auto& g = s.devices[i];
    out += fmt::format("GPU {} {} {} {}\n", g.index, g.name, g.uuid, g.pci_bus_id);
    std::string supported, unsupported;
    for (const auto& d : model::GpuMetricCatalog()) {
      const auto& c = s.caps[i].metrics[model::Idx(d.id)];
      if (c.support == model::Support::kSupported) {
        supported += fmt::format(" {}", d.name);
      } else {
        unsupported +=
            fmt::format("    {:<48} {}{}\n", d.name,
                        c.support == model::Support::kUnknown ? "not probed yet" : c.reason,
                        c.support == model::Support::kError ? " (transient; retried)" : "");
      }
    }
    out += "  supported:" + supported + "\n";
    out += unsupported.empty() ? "  unsupported: none\n" : "  unsupported:\n" + unsupported;
    out += "  features:\n";
    for (size_t f = 0; f < model::kNumGpuFeatures; ++f) {
      const auto& c = s.caps[i].features[f];
      out +=
          fmt::format("    {:<16} {}{}\n", model::GpuFeatureName(static_cast<model::GpuFeature>(f)),
                      c.support == model::Support::kSupported ? "yes"
                      : c.support == model::Support::kUnknown ? "not probed yet"
                                                              : "no",
                      c.reason.empty() ? "" : " (" + c.reason + ")");
    }
  }
  return out;
}

}  // namespace gpuwatch::cli
