#include "server/store_sink.h"

#include "model/metric_catalog.h"

namespace gpuwatch::server {

std::vector<store::Head::Input> SeriesForStore(const AgentState& s, int64_t host_after_ms) {
  std::vector<store::Head::Input> out;
  const size_t n = std::min(s.devices.size(), s.gpu_samples.size());
  for (size_t i = 0; i < n; ++i) {
    const auto& g = s.devices[i];
    const auto& smp = s.gpu_samples[i];
    if (smp.time_ms == 0) continue;  // not sampled yet
    const std::vector<store::Label> base = {{"gpu", std::to_string(g.index)},
                                            {"UUID", g.uuid},
                                            {"pci_bus_id", g.pci_bus_id},
                                            {s.model_label, g.name},
                                            {"Hostname", s.hostname}};
    auto add = [&](std::string_view name, double v, std::vector<store::Label> extra = {}) {
      store::Head::Input in;
      in.labels = base;
      in.labels.push_back({std::string(store::kMetricNameLabel), std::string(name)});
      for (auto& l : extra) in.labels.push_back(std::move(l));
      in.samples.push_back({smp.time_ms, v});
      out.push_back(std::move(in));
    };
    add("gpuwatch_gpu_up", smp.lost ? 0 : 1);
    for (const auto& d : model::GpuMetricCatalog())
      if (auto v = smp.Get(d.id)) add(d.name, *v * d.export_scale);
    for (const auto& [key, count] : s.xid_counts)
      if (key.first == g.index)
        add("gpuwatch_xid_errors_total", static_cast<double>(count),
            {{"xid", std::to_string(key.second)}});
  }
  if (s.host && s.host->time_ms > host_after_ms) {
    const auto& h = *s.host;
    const std::pair<const char*, const std::optional<double>*> kHost[] = {
        {"gpuwatch_host_cpu_utilization_percent", &h.cpu_util_pct},
        {"gpuwatch_host_cpu_iowait_percent", &h.iowait_pct},
        {"gpuwatch_host_memory_used_bytes", &h.mem_used_bytes},
        {"gpuwatch_host_load1", &h.load1}};
    std::optional<double> offset_s, synced;
    if (h.clock_offset_ms) offset_s = *h.clock_offset_ms / 1000;
    if (h.clock_synced) synced = *h.clock_synced ? 1.0 : 0.0;
    for (const auto& [name, v] : {std::pair<const char*, const std::optional<double>*>{
                                      "gpuwatch_host_clock_offset_seconds", &offset_s},
                                  {"gpuwatch_host_clock_synced", &synced}}) {
      if (!*v) continue;
      out.push_back({{{std::string(store::kMetricNameLabel), name}, {"Hostname", s.hostname}},
                     {{h.time_ms, **v}}});
    }
    if (!h.time_source.empty() && h.time_source_offset_ms) {
      out.push_back(
          {{{std::string(store::kMetricNameLabel), "gpuwatch_host_time_source_offset_seconds"},
            {"Hostname", s.hostname},
            {"source", h.time_source}},
           {{h.time_ms, *h.time_source_offset_ms / 1000}}});
    }
    for (const auto& [name, v] : kHost) {
      if (!*v) continue;
      out.push_back({{{std::string(store::kMetricNameLabel), name}, {"Hostname", s.hostname}},
                     {{h.time_ms, **v}}});
    }
  }
  return out;
}

}  // namespace gpuwatch::server
