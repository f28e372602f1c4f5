#include "server/exposition.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "common/strings.h"
#include "model/metric_catalog.h"
#include "server/gpu_labels.h"
#include "server/job_metrics.h"

namespace gpuwatch::server {

using model::GpuMetric;

std::string EscapeLabelValue(std::string_view raw) {
  // Prometheus rejects a whole scrape over one label value that is not UTF-8.
  const std::string v = SanitizeUtf8(raw);
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// Rendered straight into the caller's string: no second buffer, no final copy, and a caller
// that reuses its string keeps the capacity between scrapes.
using Buf = std::string;

void Header(Buf& b, std::string_view name, model::MetricType type, std::string_view help) {
  fmt::format_to(std::back_inserter(b), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                 model::ExpositionTypeName(name, type));
}
void HeaderOther(Buf& b, std::string_view name) {
  const auto& d = model::DescribeOther(name);
  Header(b, name, d.type, d.help);
}

void Value(Buf& b, double v) {
  if (std::isnan(v)) {
    fmt::format_to(std::back_inserter(b), "NaN\n");
  } else if (std::isinf(v)) {
    fmt::format_to(std::back_inserter(b), "{}\n", v > 0 ? "+Inf" : "-Inf");
  } else if (v == std::floor(v) && std::fabs(v) < 1e15) {
    fmt::format_to(std::back_inserter(b), "{}\n", static_cast<long long>(v));
  } else {
    fmt::format_to(std::back_inserter(b), "{}\n", v);
  }
}

// name{labels[,extra]} value
void Line(Buf& b, std::string_view name, std::string_view labels, std::string_view extra,
          double v) {
  b.append(name);
  b.push_back('{');
  b.append(labels);
  if (!extra.empty()) {
    if (!labels.empty()) b.push_back(',');
    b.append(extra);
  }
  b.append(std::string_view("} "));
  Value(b, v);
}

std::string GpuLabels(const AgentState& s, const model::GpuStaticInfo& g) {
  std::string out;
  for (const auto& [name, value] : GpuLabelSet(s, g)) {
    if (!out.empty()) out += ',';
    fmt::format_to(std::back_inserter(out), "{}=\"{}\"", name, EscapeLabelValue(value));
  }
  return out;
}

}  // namespace

static void RenderJobPoints(const std::vector<JobMetricPoint>& points, Buf& b) {
  // A metric family's samples must be contiguous in the text format.
  std::vector<const JobMetricPoint*> sorted;
  for (const auto& p : points) sorted.push_back(&p);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto* a, const auto* c) { return a->name < c->name; });
  std::string_view family;
  std::string labels;
  for (const JobMetricPoint* p : sorted) {
    if (p->name != family) {
      family = p->name;
      HeaderOther(b, family);
    }
    labels.clear();
    for (const auto& l : p->labels) {
      if (!labels.empty()) labels.push_back(',');
      fmt::format_to(std::back_inserter(labels), "{}=\"{}\"", l.name, EscapeLabelValue(l.value));
    }
    Line(b, family, labels, "", p->value);
  }
}

namespace {

// Link rates (R10, R12): one family per measure, a series per link with its kind's labels.
void RenderLinkRates(const AgentState& s, const std::string& host, Buf& b) {
  std::vector<const LinkRate*> all;
  for (const auto& r : s.host_link_rates) all.push_back(&r);
  for (const auto& r : s.gpu_link_rates) all.push_back(&r);
  if (all.empty()) return;
  auto labels_of = [](const LinkRate& r) {
    std::string l = fmt::format("link_type=\"{}\"", r.kind);
    for (const auto& [k, v] : r.labels) l += fmt::format(",{}=\"{}\"", k, EscapeLabelValue(v));
    return l;
  };
  auto directional = [&](const char* name, std::optional<double> LinkRate::*rx,
                         std::optional<double> LinkRate::*tx) {
    bool have = false;
    for (const LinkRate* r : all) have |= (r->*rx).has_value() || (r->*tx).has_value();
    if (!have) return;
    HeaderOther(b, name);
    for (const LinkRate* r : all) {
      const std::string l = labels_of(*r);
      if (auto v = r->*rx) Line(b, name, host, l + ",direction=\"rx\"", *v);
      if (auto v = r->*tx) Line(b, name, host, l + ",direction=\"tx\"", *v);
    }
  };
  auto single = [&](const char* name, std::optional<double> LinkRate::*field) {
    bool have = false;
    for (const LinkRate* r : all) have |= (r->*field).has_value();
    if (!have) return;
    HeaderOther(b, name);
    for (const LinkRate* r : all)
      if (auto v = r->*field) Line(b, name, host, labels_of(*r), *v);
  };
  directional("gpuwatch_link_bytes_per_second", &LinkRate::rx_bytes_per_s,
              &LinkRate::tx_bytes_per_s);
  single("gpuwatch_link_rated_bytes_per_second", &LinkRate::rated_bytes_per_s);
  directional("gpuwatch_link_utilization_ratio", &LinkRate::rx_util, &LinkRate::tx_util);
  single("gpuwatch_link_errors_per_second", &LinkRate::errors_per_s);
  single("gpuwatch_link_drops_per_second", &LinkRate::drops_per_s);
  single("gpuwatch_link_retransmits_per_second", &LinkRate::retransmits_per_s);
  single("gpuwatch_link_xmit_wait_per_second", &LinkRate::xmit_wait_per_s);
  single("gpuwatch_link_ecn_marked_per_second", &LinkRate::ecn_marked_per_s);
}

}  // namespace

void RenderPrometheus(const AgentState& s, std::string* out) {
  Buf& b = *out;
  b.clear();
  const std::string host = fmt::format("Hostname=\"{}\"", EscapeLabelValue(s.hostname));
  std::vector<std::string> labels;
  labels.reserve(s.devices.size());
  for (const auto& g : s.devices) labels.push_back(GpuLabels(s, g));
  const size_t n = std::min(s.devices.size(), s.gpu_samples.size());

  HeaderOther(b, "gpuwatch_agent_info");
  Line(b, "gpuwatch_agent_info", host,
       fmt::format("version=\"{}\",nvml_version=\"{}\",driver_version=\"{}\",cuda_version=\"{}\"",
                   EscapeLabelValue(s.version), EscapeLabelValue(s.system.nvml_version),
                   EscapeLabelValue(s.system.driver_version),
                   EscapeLabelValue(s.system.cuda_driver_version)),
       1);
  if (!s.tick_seconds.empty()) {
    HeaderOther(b, "gpuwatch_agent_tick_seconds");
    for (const auto& [tier, secs] : s.tick_seconds)
      Line(b, "gpuwatch_agent_tick_seconds", host, fmt::format("tier=\"{}\"", tier), secs);
  }
  if (!s.alerts_firing.empty()) {
    HeaderOther(b, "gpuwatch_alerts_firing");
    for (const auto& [key, n] : s.alerts_firing)
      Line(b, "gpuwatch_alerts_firing", host,
           fmt::format("severity=\"{}\",state=\"{}\"", key.first, key.second),
           static_cast<double>(n));
  }
  if (!s.alert_notifications.empty()) {
    HeaderOther(b, "gpuwatch_alert_notifications_total");
    for (const auto& [key, n] : s.alert_notifications)
      Line(b, "gpuwatch_alert_notifications_total", host,
           fmt::format("receiver=\"{}\",result=\"{}\"", key.first, key.second),
           static_cast<double>(n));
  }
  if (!s.tier_cpu_seconds.empty()) {
    HeaderOther(b, "gpuwatch_agent_tier_cpu_seconds_total");
    for (const auto& [tier, secs] : s.tier_cpu_seconds)
      Line(b, "gpuwatch_agent_tier_cpu_seconds_total", host, fmt::format("tier=\"{}\"", tier),
           secs);
  }

  if (!s.devices.empty()) {
    HeaderOther(b, "gpuwatch_gpu_info");
    for (const auto& g : s.devices) {
      Line(b, "gpuwatch_gpu_info", labels[g.index],
           fmt::format("serial=\"{}\",vbios_version=\"{}\",minor_number=\"{}\",mig_mode=\"{}\"",
                       EscapeLabelValue(g.serial), EscapeLabelValue(g.vbios_version),
                       g.minor_number ? std::to_string(*g.minor_number) : "",
                       g.mig_enabled ? "enabled" : "disabled"),
           1);
    }
    HeaderOther(b, "gpuwatch_gpu_up");
    for (size_t i = 0; i < n; ++i)
      Line(b, "gpuwatch_gpu_up", labels[i], "", s.gpu_samples[i].lost ? 0 : 1);
  }

  // One block per catalog scalar; a field no GPU has this tick is left out entirely.
  for (const auto& d : model::GpuMetricCatalog()) {
    bool any = false;
    for (size_t i = 0; i < n && !any; ++i) any = s.gpu_samples[i].valid.test(model::Idx(d.id));
    if (!any) continue;
    Header(b, d.name, d.type, d.help);
    for (size_t i = 0; i < n; ++i) {
      const auto& smp = s.gpu_samples[i];
      if (!smp.valid.test(model::Idx(d.id))) continue;
      Line(b, d.name, labels[i], "", smp.values[model::Idx(d.id)] * d.export_scale);
    }
  }

  // Throttle reasons by name: one series per known reason so an alert can name it.
  {
    bool any = false;
    for (size_t i = 0; i < n && !any; ++i)
      any = s.gpu_samples[i].Get(GpuMetric::kClockEventReasons).has_value();
    if (any) {
      HeaderOther(b, "gpuwatch_clock_event_reason_active");
      const auto all = model::ClockEventReasonNames(~0ULL);
      for (size_t i = 0; i < n; ++i) {
        auto mask = s.gpu_samples[i].Get(GpuMetric::kClockEventReasons);
        if (!mask) continue;
        const auto active = model::ClockEventReasonNames(static_cast<uint64_t>(*mask));
        for (auto r : all) {
          bool on = std::find(active.begin(), active.end(), r) != active.end();
          Line(b, "gpuwatch_clock_event_reason_active", labels[i], fmt::format("reason=\"{}\"", r),
               on);
        }
      }
    }
  }

  // Per-link NVLink.
  {
    bool any = false;
    for (size_t i = 0; i < n && !any; ++i) any = !s.gpu_samples[i].nvlinks.empty();
    if (any) {
      HeaderOther(b, "gpuwatch_nvlink_link_up");
      for (size_t i = 0; i < n; ++i)
        for (const auto& l : s.gpu_samples[i].nvlinks)
          Line(b, "gpuwatch_nvlink_link_up", labels[i], fmt::format("link=\"{}\"", l.link),
               l.active);
      HeaderOther(b, "gpuwatch_nvlink_link_errors_total");
      for (size_t i = 0; i < n; ++i) {
        for (const auto& l : s.gpu_samples[i].nvlinks) {
          for (const auto& c : model::kNvLinkErrorCounters)
            if (const auto& v = l.*c.field)
              Line(b, "gpuwatch_nvlink_link_errors_total", labels[i],
                   fmt::format("link=\"{}\",counter=\"{}\"", l.link, c.name),
                   static_cast<double>(*v));
        }
      }
      using LinkCounter = std::optional<uint64_t> model::NvLinkSample::*;
      const std::pair<const char*, LinkCounter> kBytes[] = {
          {"gpuwatch_nvlink_link_tx_bytes_total", &model::NvLinkSample::tx_bytes},
          {"gpuwatch_nvlink_link_rx_bytes_total", &model::NvLinkSample::rx_bytes}};
      for (const auto& [metric, field] : kBytes) {
        bool have = false;
        for (size_t i = 0; i < n && !have; ++i)
          for (const auto& l : s.gpu_samples[i].nvlinks) have |= (l.*field).has_value();
        if (!have) continue;
        HeaderOther(b, metric);
        for (size_t i = 0; i < n; ++i)
          for (const auto& l : s.gpu_samples[i].nvlinks)
            if (auto v = l.*field)
              Line(b, metric, labels[i], fmt::format("link=\"{}\"", l.link),
                   static_cast<double>(*v));
      }
    }
  }

  // MIG instances.
  {
    bool any = false;
    for (size_t i = 0; i < n && !any; ++i) any = !s.gpu_samples[i].mig.empty();
    if (any) {
      struct MigSeries {
        const char* name;
        std::optional<double> model::MigSample::*field;
        double scale;
      };
      static constexpr MigSeries kMig[] = {
          {"gpuwatch_mig_memory_used_bytes", &model::MigSample::mem_used_mib, 1048576.0},
          {"gpuwatch_mig_memory_total_bytes", &model::MigSample::mem_total_mib, 1048576.0},
          {"gpuwatch_mig_sm_active", &model::MigSample::sm_active, 1.0},
      };
      for (const auto& ms : kMig) {
        bool have = false;
        for (size_t i = 0; i < n && !have; ++i)
          for (const auto& m : s.gpu_samples[i].mig) have |= (m.*(ms.field)).has_value();
        if (!have) continue;
        HeaderOther(b, ms.name);
        for (size_t i = 0; i < n; ++i)
          for (const auto& m : s.gpu_samples[i].mig)
            if (auto v = m.*(ms.field))
              Line(b, ms.name, labels[i],
                   fmt::format("GPU_I_ID=\"{}\",GPU_I_PROFILE=\"\",mig_uuid=\"{}\"",
                               m.gpu_instance_id, EscapeLabelValue(m.uuid)),
                   *v * ms.scale);
      }
    }
  }

  // XIDs: a counter per code, plus dcgm-exporter's last-code gauge for its dashboards.
  if (!s.devices.empty()) {
    HeaderOther(b, "gpuwatch_xid_errors_total");
    for (const auto& [key, count] : s.xid_counts)
      if (key.first < labels.size())
        Line(b, "gpuwatch_xid_errors_total", labels[key.first],
             fmt::format("xid=\"{}\"", key.second), static_cast<double>(count));
    HeaderOther(b, "DCGM_FI_DEV_XID_ERRORS");
    for (size_t i = 0; i < s.devices.size(); ++i) {
      auto it = s.last_xid.find(static_cast<unsigned>(i));
      Line(b, "DCGM_FI_DEV_XID_ERRORS", labels[i], "",
           it == s.last_xid.end() ? 0 : static_cast<double>(it->second));
    }
  }

  // Attribution: an info series per (GPU, user, job, container), and per-process memory.
  if (!s.processes.empty()) {
    std::map<std::pair<unsigned, std::string>, bool> seen;
    HeaderOther(b, "gpuwatch_gpu_attribution_info");
    for (const auto& p : s.processes) {
      if (p.gpu_index >= labels.size()) continue;
      std::string extra =
          fmt::format("user=\"{}\",job=\"{}\",container=\"{}\"", EscapeLabelValue(p.user),
                      EscapeLabelValue(p.job_id), EscapeLabelValue(p.container_id));
      if (!seen.emplace(std::pair{p.gpu_index, extra}, true).second) continue;
      Line(b, "gpuwatch_gpu_attribution_info", labels[p.gpu_index], extra, 1);
    }
    HeaderOther(b, "gpuwatch_process_gpu_memory_bytes");
    for (const auto& p : s.processes) {
      if (p.gpu_index >= labels.size() || !p.used_memory_bytes) continue;
      Line(b, "gpuwatch_process_gpu_memory_bytes", labels[p.gpu_index],
           fmt::format(
               "pid=\"{}\",command=\"{}\",user=\"{}\",container=\"{}\",pod_uid=\"{}\",job=\"{}\","
               "visible_index=\"{}\",GPU_I_ID=\"{}\"",
               p.pid, EscapeLabelValue(p.command), EscapeLabelValue(p.user),
               EscapeLabelValue(p.container_id), EscapeLabelValue(p.pod_uid),
               EscapeLabelValue(p.job_id), p.visible_index ? std::to_string(*p.visible_index) : "",
               p.gpu_instance_id ? std::to_string(*p.gpu_instance_id) : ""),
           static_cast<double>(*p.used_memory_bytes));
    }
    // R11: only where both ends are known, so a 0 is a statement, not a missing reading.
    bool numa_known = false;
    for (const auto& p : s.processes)
      numa_known |= !p.cpu_numa_nodes.empty() && p.gpu_numa_node && *p.gpu_numa_node >= 0;
    if (numa_known) {
      HeaderOther(b, "gpuwatch_process_numa_mismatch");
      for (const auto& p : s.processes) {
        if (p.gpu_index >= labels.size() || p.cpu_numa_nodes.empty() || !p.gpu_numa_node ||
            *p.gpu_numa_node < 0)
          continue;
        std::string nodes;
        for (unsigned n : p.cpu_numa_nodes) nodes += (nodes.empty() ? "" : ",") + std::to_string(n);
        Line(b, "gpuwatch_process_numa_mismatch", labels[p.gpu_index],
             fmt::format(
                 "pid=\"{}\",command=\"{}\",job=\"{}\",cpu_numa_nodes=\"{}\",gpu_numa_node=\"{}\"",
                 p.pid, EscapeLabelValue(p.command), EscapeLabelValue(p.job_id), nodes,
                 *p.gpu_numa_node),
             p.numa_mismatch() ? 1 : 0);
      }
    }
  }

  // Host.
  if (s.host) {
    const auto& h = *s.host;
    constexpr double kHz = 100.0;  // USER_HZ: /proc/stat ticks are 1/100 s on Linux
    HeaderOther(b, "gpuwatch_host_cpu_seconds_total");
    const double busy =
        static_cast<double>(h.cpu_total_jiffies - h.cpu_idle_jiffies - h.cpu_iowait_jiffies);
    Line(b, "gpuwatch_host_cpu_seconds_total", host, "mode=\"busy\"", busy / kHz);
    Line(b, "gpuwatch_host_cpu_seconds_total", host, "mode=\"idle\"", h.cpu_idle_jiffies / kHz);
    Line(b, "gpuwatch_host_cpu_seconds_total", host, "mode=\"iowait\"", h.cpu_iowait_jiffies / kHz);
    auto opt = [&](const char* name, const std::optional<double>& v) {
      if (!v) return;
      HeaderOther(b, name);
      Line(b, name, host, "", *v);
    };
    opt("gpuwatch_host_cpu_utilization_percent", h.cpu_util_pct);
    opt("gpuwatch_host_cpu_iowait_percent", h.iowait_pct);
    HeaderOther(b, "gpuwatch_host_cpus");
    Line(b, "gpuwatch_host_cpus", host, "", h.cpu_count);
    opt("gpuwatch_host_memory_total_bytes", h.mem_total_bytes);
    opt("gpuwatch_host_memory_available_bytes", h.mem_available_bytes);
    opt("gpuwatch_host_memory_used_bytes", h.mem_used_bytes);
    opt("gpuwatch_host_swap_used_bytes", h.swap_used_bytes);
    opt("gpuwatch_host_load1", h.load1);
    opt("gpuwatch_host_load5", h.load5);
    opt("gpuwatch_host_load15", h.load15);
    if (h.clock_offset_ms) {
      opt("gpuwatch_host_clock_offset_seconds", std::optional(*h.clock_offset_ms / 1000));
      opt("gpuwatch_host_clock_max_error_seconds", std::optional(*h.clock_max_error_ms / 1000));
    }
    if (h.clock_synced)
      opt("gpuwatch_host_clock_synced", std::optional(*h.clock_synced ? 1.0 : 0.0));
    if (!h.time_source.empty()) {
      const std::string src = fmt::format("source=\"{}\"", EscapeLabelValue(h.time_source));
      if (h.time_source_offset_ms) {
        HeaderOther(b, "gpuwatch_host_time_source_offset_seconds");
        Line(b, "gpuwatch_host_time_source_offset_seconds", host, src,
             *h.time_source_offset_ms / 1000);
      }
      if (h.time_source_synced) {
        HeaderOther(b, "gpuwatch_host_time_source_synced");
        Line(b, "gpuwatch_host_time_source_synced", host, src, *h.time_source_synced ? 1 : 0);
      }
    }
    if (!h.nics.empty()) {
      auto nic = [&](const char* name, auto get) {
        HeaderOther(b, name);
        for (const auto& x : h.nics)
          Line(b, name, host, fmt::format("interface=\"{}\"", EscapeLabelValue(x.name)),
               static_cast<double>(get(x)));
      };
      nic("gpuwatch_nic_receive_bytes_total", [](const model::NicSample& x) { return x.rx_bytes; });
      nic("gpuwatch_nic_transmit_bytes_total",
          [](const model::NicSample& x) { return x.tx_bytes; });
      using NicCounter = uint64_t model::NicSample::*;
      const std::tuple<const char*, NicCounter, NicCounter> kDirectional[] = {
          {"gpuwatch_nic_errors_total", &model::NicSample::rx_errors, &model::NicSample::tx_errors},
          {"gpuwatch_nic_dropped_total", &model::NicSample::rx_dropped,
           &model::NicSample::tx_dropped}};
      for (const auto& [name, rx, tx] : kDirectional) {
        HeaderOther(b, name);
        for (const auto& x : h.nics) {
          const auto ifl = fmt::format("interface=\"{}\"", EscapeLabelValue(x.name));
          Line(b, name, host, ifl + ",direction=\"rx\"", static_cast<double>(x.*rx));
          Line(b, name, host, ifl + ",direction=\"tx\"", static_cast<double>(x.*tx));
        }
      }
      bool any_up = false;
      for (const auto& x : h.nics) any_up |= x.link_up.has_value();
      if (any_up) {
        HeaderOther(b, "gpuwatch_nic_up");
        for (const auto& x : h.nics)
          if (x.link_up)
            Line(b, "gpuwatch_nic_up", host,
                 fmt::format("interface=\"{}\"", EscapeLabelValue(x.name)), *x.link_up);
      }
    }
    if (!h.ib_ports.empty()) {
      auto port_labels = [&](const model::IbPortSample& p) {
        return fmt::format("device=\"{}\",port=\"{}\"", EscapeLabelValue(p.device), p.port);
      };
      auto ib = [&](const char* name, std::optional<uint64_t> model::IbPortSample::*field) {
        bool have = false;
        for (const auto& p : h.ib_ports) have |= (p.*field).has_value();
        if (!have) return;
        HeaderOther(b, name);
        for (const auto& p : h.ib_ports)
          if (auto v = p.*field) Line(b, name, host, port_labels(p), static_cast<double>(*v));
      };
      ib("gpuwatch_ib_port_receive_bytes_total", &model::IbPortSample::rcv_bytes);
      ib("gpuwatch_ib_port_transmit_bytes_total", &model::IbPortSample::xmit_bytes);
      HeaderOther(b, "gpuwatch_ib_port_errors_total");
      const std::pair<const char*, std::optional<uint64_t> model::IbPortSample::*> errs[] = {
          {"symbol_error", &model::IbPortSample::symbol_errors},
          {"port_rcv_errors", &model::IbPortSample::rcv_errors},
          {"link_downed", &model::IbPortSample::link_downed},
          {"link_error_recovery", &model::IbPortSample::link_error_recovery},
          {"port_xmit_discards", &model::IbPortSample::xmit_discards},
          {"local_ack_timeout_err", &model::IbPortSample::local_ack_timeout_err},
          {"out_of_sequence", &model::IbPortSample::out_of_sequence},
          {"packet_seq_err", &model::IbPortSample::packet_seq_err},
          {"rnr_nak_retry_err", &model::IbPortSample::rnr_nak_retry_err},
          {"implied_nak_seq_err", &model::IbPortSample::implied_nak_seq_err},
      };
      for (const auto& p : h.ib_ports)
        for (const auto& [cname, field] : errs)
          if (auto v = p.*field)
            Line(b, "gpuwatch_ib_port_errors_total", host,
                 port_labels(p) + fmt::format(",counter=\"{}\"", cname), static_cast<double>(*v));
      const std::pair<const char*, std::optional<uint64_t> model::IbPortSample::*> congestion[] = {
          {"port_xmit_wait", &model::IbPortSample::port_xmit_wait},
          {"np_ecn_marked_roce_packets", &model::IbPortSample::np_ecn_marked_roce_packets},
          {"np_cnp_sent", &model::IbPortSample::np_cnp_sent},
          {"rp_cnp_handled", &model::IbPortSample::rp_cnp_handled},
      };
      bool have_congestion = false;
      for (const auto& p : h.ib_ports)
        for (const auto& [cname, field] : congestion) have_congestion |= (p.*field).has_value();
      if (have_congestion) {
        HeaderOther(b, "gpuwatch_ib_port_congestion_total");
        for (const auto& p : h.ib_ports)
          for (const auto& [cname, field] : congestion)
            if (auto v = p.*field)
              Line(b, "gpuwatch_ib_port_congestion_total", host,
                   port_labels(p) + fmt::format(",counter=\"{}\"", cname), static_cast<double>(*v));
      }
      HeaderOther(b, "gpuwatch_ib_port_up");
      for (const auto& p : h.ib_ports)
        Line(b, "gpuwatch_ib_port_up", host,
             port_labels(p) + fmt::format(",link_layer=\"{}\"", EscapeLabelValue(p.link_layer)),
             p.state == "ACTIVE");
      bool have_rate = false;
      for (const auto& p : h.ib_ports) have_rate |= p.rate_gbps.has_value();
      if (have_rate) {
        HeaderOther(b, "gpuwatch_ib_port_rate_gbps");
        for (const auto& p : h.ib_ports)
          if (p.rate_gbps)
            Line(b, "gpuwatch_ib_port_rate_gbps", host, port_labels(p), *p.rate_gbps);
      }
    }
  }
  RenderLinkRates(s, host, b);
  RenderJobPoints(JobMetricPoints(s.hostname, s.jobs, s.job_counters), b);
  if (!s.limit_hits.empty()) {
    HeaderOther(b, "gpuwatch_limit_hits_total");
    const std::string host = "Hostname=\"" + EscapeLabelValue(s.hostname) + "\"";
    for (const auto& [limit, n] : s.limit_hits)
      Line(b, "gpuwatch_limit_hits_total", host, fmt::format("limit=\"{}\"", limit),
           static_cast<double>(n));
  }
}

void RenderLimitCounters(std::string_view hostname, const LimitCounters& c, std::string* out) {
  Buf& b = *out;
  const std::string host = "Hostname=\"" + EscapeLabelValue(hostname) + "\"";
  auto one = [&](std::string_view name, double v) {
    HeaderOther(b, name);
    Line(b, name, host, "", v);
  };
  // One counter by the values of one label.
  auto by_label = [&](std::string_view name, std::string_view label,
                      const std::vector<std::pair<std::string_view, uint64_t>>& counts) {
    HeaderOther(b, name);
    for (const auto& [value, n] : counts)
      Line(b, name, host, fmt::format("{}=\"{}\"", label, value), static_cast<double>(n));
  };
  auto by_reason = [&](std::string_view name,
                       const std::vector<std::pair<std::string_view, uint64_t>>& counts) {
    by_label(name, "reason", counts);
  };
  one("gpuwatch_http_requests_total", static_cast<double>(c.http_requests));
  one("gpuwatch_http_connections", static_cast<double>(c.http_connections));
  by_reason("gpuwatch_http_refused_total", c.http_refused);
  if (c.tls) {
    if (c.tls_not_after_s)
      one("gpuwatch_http_tls_certificate_not_after_seconds",
          static_cast<double>(*c.tls_not_after_s));
    by_label("gpuwatch_http_tls_reloads_total", "result",
             {{"loaded", c.tls_reloads}, {"refused", c.tls_reload_failures}});
  }
  by_reason("gpuwatch_queries_refused_total", c.queries_refused);
  one("gpuwatch_remote_write_series", static_cast<double>(c.remote_write_series));
  by_reason("gpuwatch_remote_write_refused_samples_total",
            {{"series_limit", c.remote_write_refused_series_limit},
             {"out_of_bounds", c.remote_write_refused_out_of_bounds}});
  by_reason("gpuwatch_remote_write_refused_requests_total",
            {{"too_large", c.remote_write_refused_too_large},
             {"forward_backlog", c.remote_write_refused_forward_backlog}});
  if (c.has_store) {
    one("gpuwatch_store_blocks", static_cast<double>(c.store_blocks));
    one("gpuwatch_store_block_bytes", static_cast<double>(c.store_block_bytes));
    one("gpuwatch_store_wal_bytes", static_cast<double>(c.store_wal_bytes));
    one("gpuwatch_store_head_series", static_cast<double>(c.store_head_series));
    HeaderOther(b, "gpuwatch_store_errors_total");
    Line(b, "gpuwatch_store_errors_total", host, "op=\"write\"",
         static_cast<double>(c.store_write_errors));
    Line(b, "gpuwatch_store_errors_total", host, "op=\"flush\"",
         static_cast<double>(c.store_flush_errors));
  }
  one("gpuwatch_pushes_shed_total", static_cast<double>(c.pushes_shed));
  // A sender (server/hub_push.h): the agent's push to its hub, a hub's forward to a cluster.
  auto sender = [&](const std::string& prefix, const HubPusher::Counters& p) {
    by_label(prefix + "_requests_total", "result",
             {{"sent", p.requests_sent}, {"failed", p.requests_failed}});
    by_label(prefix + "_entries_total", "result",
             {{"sent", p.entries_sent}, {"dropped", p.entries_dropped}});
    one(prefix + "_backlog_entries", static_cast<double>(p.backlog_entries));
    one(prefix + "_last_success_timestamp_seconds", static_cast<double>(p.last_success_ms) / 1000);
  };
  if (const auto& p = c.push) {
    sender("gpuwatch_hub_push", *p);
    one("gpuwatch_hub_push_auth_refused", p->auth_refused ? 1 : 0);
  }
  if (const auto& f = c.forward) {
    sender("gpuwatch_remote_write_forward", *f);
    one("gpuwatch_remote_write_forward_spool_bytes", static_cast<double>(f->spool_bytes));
  }
  if (c.has_events) {
    HeaderOther(b, "gpuwatch_events_bytes");
    Line(b, "gpuwatch_events_bytes", host, "partition=\"events\"",
         static_cast<double>(c.events_bytes - c.events_bulk_bytes));
    Line(b, "gpuwatch_events_bytes", host, "partition=\"bulk\"",
         static_cast<double>(c.events_bulk_bytes));
  }
}

}  // namespace gpuwatch::server
