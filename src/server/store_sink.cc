#include "server/store_sink.h"

#include "model/metric_catalog.h"
#include "server/gpu_labels.h"

namespace gpuwatch::server {

namespace {

// The link rates (R10, R12) as /metrics shows them (exposition.cc RenderLinkRates), so the
// dashboard's links screen and a query over the past read the same series a scrape would.
void AddLinkRates(const std::vector<LinkRate>& rates, const std::string& hostname, int64_t after_ms,
                  std::vector<store::Head::Input>* out) {
  for (const LinkRate& r : rates) {
    if (r.time_ms <= after_ms) continue;
    auto add = [&](std::string_view name, const std::optional<double>& v, const char* direction) {
      if (!v) return;
      store::Head::Input in;
      in.labels = {{std::string(store::kMetricNameLabel), std::string(name)},
                   {"Hostname", hostname},
                   {"link_type", r.kind}};
      for (const auto& [k, val] : r.labels) in.labels.push_back({k, val});
      if (direction) in.labels.push_back({"direction", direction});
      in.samples.push_back({r.time_ms, *v});
      out->push_back(std::move(in));
    };
    add("gpuwatch_link_bytes_per_second", r.rx_bytes_per_s, "rx");
    add("gpuwatch_link_bytes_per_second", r.tx_bytes_per_s, "tx");
    add("gpuwatch_link_rated_bytes_per_second", r.rated_bytes_per_s, nullptr);
    add("gpuwatch_link_utilization_ratio", r.rx_util, "rx");
    add("gpuwatch_link_utilization_ratio", r.tx_util, "tx");
    add("gpuwatch_link_errors_per_second", r.errors_per_s, nullptr);
    add("gpuwatch_link_drops_per_second", r.drops_per_s, nullptr);
    add("gpuwatch_link_retransmits_per_second", r.retransmits_per_s, nullptr);
    add("gpuwatch_link_xmit_wait_per_second", r.xmit_wait_per_s, nullptr);
    add("gpuwatch_link_ecn_marked_per_second", r.ecn_marked_per_s, nullptr);
  }
}

}  // namespace

std::vector<store::Head::Input> SeriesForStore(const AgentState& s, int64_t host_after_ms) {
  std::vector<store::Head::Input> out;
  const size_t n = std::min(s.devices.size(), s.gpu_samples.size());
  for (size_t i = 0; i < n; ++i) {
    const auto& g = s.devices[i];
    const auto& smp = s.gpu_samples[i];
    if (smp.time_ms == 0) continue;  // not sampled yet
    std::vector<store::Label> base;
    for (auto& [name, value] : GpuLabelSet(s, g))
      base.push_back({std::move(name), std::move(value)});
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
  // GPU link rates are of the last hardware tick, as the GPU fields above; host ones of the last
  // host tick, kept once like the host fields below.
  AddLinkRates(s.gpu_link_rates, s.hostname, 0, &out);
  if (s.host && s.host->time_ms > host_after_ms) {
    AddLinkRates(s.host_link_rates, s.hostname, host_after_ms, &out);
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
