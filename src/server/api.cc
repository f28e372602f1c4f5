#include "server/api.h"

#include <algorithm>

#include "model/metric_catalog.h"

namespace gpuwatch::server {

using nlohmann::json;

namespace {

json Opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::string_view SupportName(model::Support s) {
  switch (s) {
    case model::Support::kUnknown:
      return "unknown";
    case model::Support::kSupported:
      return "supported";
    case model::Support::kNotSupported:
      return "not_supported";
    case model::Support::kError:
      return "error";
  }
  return "unknown";
}

json GpuIdentity(const model::GpuStaticInfo& g) {
  json j = {{"index", g.index}, {"uuid", g.uuid}, {"pci_bus_id", g.pci_bus_id}, {"name", g.name}};
  if (g.minor_number) j["minor_number"] = *g.minor_number;
  return j;
}

}  // namespace

json GpusJson(const AgentState& s) {
  json gpus = json::array();
  for (size_t i = 0; i < s.devices.size(); ++i) {
    const auto& g = s.devices[i];
    json j = GpuIdentity(g);
    j["serial"] = g.serial;
    j["vbios_version"] = g.vbios_version;
    j["mig_enabled"] = g.mig_enabled;
    j["nvlink_count"] = g.nvlink_count;
    j["gpm_supported"] = g.gpm_supported;
    if (i < s.gpu_samples.size()) {
      const auto& smp = s.gpu_samples[i];
      j["time_ms"] = smp.time_ms;
      j["lost"] = smp.lost;
      json fields = json::object();
      for (const auto& d : model::GpuMetricCatalog()) {
        if (auto v = smp.Get(d.id)) fields[std::string(d.name)] = *v * d.export_scale;
      }
      j["metrics"] = std::move(fields);
      if (auto mask = smp.Get(model::GpuMetric::kClockEventReasons)) {
        json reasons = json::array();
        for (auto r : model::ClockEventReasonNames(static_cast<uint64_t>(*mask)))
          reasons.push_back(r);
        j["clock_event_reasons"] = std::move(reasons);
      }
      json links = json::array();
      for (const auto& l : smp.nvlinks) {
        json lj = {{"link", l.link}, {"active", l.active}};
        auto put = [&](const std::string& k, const std::optional<uint64_t>& v) {
          if (v) lj[k] = *v;
        };
        for (const auto& c : model::kNvLinkErrorCounters)
          put(std::string(c.name) + "_errors", l.*c.field);
        put("tx_bytes", l.tx_bytes);
        put("rx_bytes", l.rx_bytes);
        links.push_back(std::move(lj));
      }
      if (!links.empty()) j["nvlinks"] = std::move(links);
      json mig = json::array();
      for (const auto& m : smp.mig) {
        mig.push_back({{"gpu_instance_id", m.gpu_instance_id},
                       {"compute_instance_id", m.compute_instance_id},
                       {"uuid", m.uuid},
                       {"mem_used_mib", Opt(m.mem_used_mib)},
                       {"mem_total_mib", Opt(m.mem_total_mib)},
                       {"sm_active", Opt(m.sm_active)},
                       {"graphics_active", Opt(m.graphics_active)}});
      }
      if (!mig.empty()) j["mig"] = std::move(mig);
    }
    json xids = json::object();
    for (const auto& [key, count] : s.xid_counts)
      if (key.first == g.index) xids[std::to_string(key.second)] = count;
    j["xid_counts"] = std::move(xids);
    if (auto it = s.last_xid.find(g.index); it != s.last_xid.end()) j["last_xid"] = it->second;
    gpus.push_back(std::move(j));
  }
  return {{"hostname", s.hostname},
          {"simulated", s.simulated},
          {"gpu_available", s.gpu_available},
          {"reason", s.gpu_unavailable_reason},
          {"driver_version", s.system.driver_version},
          {"nvml_version", s.system.nvml_version},
          {"cuda_driver_version", s.system.cuda_driver_version},
          {"gpus", std::move(gpus)}};
}

json ProcessesJson(const AgentState& s) {
  json procs = json::array();
  for (const auto& p : s.processes) {
    json j = {{"pid", p.pid},
              {"gpu", p.gpu_index},
              {"gpu_uuid", p.gpu_uuid},
              {"command", p.command},
              {"user", p.user},
              {"container_id", p.container_id},
              {"container_runtime", p.container_runtime},
              {"pod_uid", p.pod_uid},
              {"job_id", p.job_id}};
    j["uid"] = p.uid ? json(*p.uid) : json(nullptr);
    j["container_pid"] = p.container_pid ? json(*p.container_pid) : json(nullptr);
    j["visible_index"] = p.visible_index ? json(*p.visible_index) : json(nullptr);
    j["cpu_numa_nodes"] = p.cpu_numa_nodes;
    j["gpu_numa_node"] =
        p.gpu_numa_node && *p.gpu_numa_node >= 0 ? json(*p.gpu_numa_node) : json(nullptr);
    j["numa_mismatch"] = p.numa_mismatch();
    j["used_memory_bytes"] = p.used_memory_bytes ? json(*p.used_memory_bytes) : json(nullptr);
    if (p.gpu_instance_id) j["gpu_instance_id"] = *p.gpu_instance_id;
    if (p.compute_instance_id) j["compute_instance_id"] = *p.compute_instance_id;
    procs.push_back(std::move(j));
  }
  return {{"hostname", s.hostname}, {"processes", std::move(procs)}};
}

json CapabilitiesJson(const AgentState& s) {
  json gpus = json::array();
  for (size_t i = 0; i < s.devices.size() && i < s.caps.size(); ++i) {
    json j = GpuIdentity(s.devices[i]);
    json fields = json::object();
    for (const auto& d : model::GpuMetricCatalog()) {
      const auto& c = s.caps[i].metrics[model::Idx(d.id)];
      json cj = {{"support", SupportName(c.support)}};
      if (!c.reason.empty()) cj["reason"] = c.reason;
      fields[std::string(d.name)] = std::move(cj);
    }
    j["fields"] = std::move(fields);
    json features = json::object();
    for (size_t f = 0; f < model::kNumGpuFeatures; ++f) {
      const auto& c = s.caps[i].features[f];
      json cj = {{"support", SupportName(c.support)}};
      if (!c.reason.empty()) cj["reason"] = c.reason;
      features[std::string(model::GpuFeatureName(static_cast<model::GpuFeature>(f)))] =
          std::move(cj);
    }
    j["features"] = std::move(features);
    gpus.push_back(std::move(j));
  }
  return {{"hostname", s.hostname},
          {"simulated", s.simulated},
          {"gpu_available", s.gpu_available},
          {"reason", s.gpu_unavailable_reason},
          {"gpus", std::move(gpus)}};
}

json EventJson(const model::GpuEvent& e) {
  json j = {{"time_ms", e.time_ms}, {"kind", model::GpuEventKindName(e.kind)},
            {"uuid", e.uuid},       {"pci_bus_id", e.pci_bus_id},
            {"text", e.text},       {"source", e.source}};
  j["gpu"] = e.gpu_index == model::kUnknownGpu ? json(nullptr) : json(e.gpu_index);
  if (e.kind == model::GpuEventKind::kXid) j["xid"] = e.code;
  return j;
}

json EventsJson(const AgentState& s) {
  json ev = json::array();
  for (const auto& e : s.recent_events) ev.push_back(EventJson(e));
  return {{"hostname", s.hostname}, {"events", std::move(ev)}};
}

std::string DumpJson(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

json HostJson(const AgentState& s) {
  if (!s.host)
    return {
        {"hostname", s.hostname}, {"simulated", s.simulated}, {"hub", s.hub}, {"host", nullptr}};
  const auto& h = *s.host;
  json nics = json::array();
  for (const auto& n : h.nics)
    nics.push_back({{"name", n.name},
                    {"rx_bytes", n.rx_bytes},
                    {"tx_bytes", n.tx_bytes},
                    {"rx_errors", n.rx_errors},
                    {"tx_errors", n.tx_errors}});
  return {{"hostname", s.hostname},
          {"simulated", s.simulated},
          {"hub", s.hub},
          {"time_ms", h.time_ms},
          {"cpu_util_pct", Opt(h.cpu_util_pct)},
          {"iowait_pct", Opt(h.iowait_pct)},
          {"mem_used_bytes", Opt(h.mem_used_bytes)},
          {"mem_total_bytes", Opt(h.mem_total_bytes)},
          {"load1", Opt(h.load1)},
          {"nics", std::move(nics)}};
}

namespace {

nlohmann::json WindowJson(const jobs::WindowStats& w) {
  nlohmann::json j;
  j["end_ms"] = w.end_ms;
  j["window_s"] = w.window_s;
  j["steps"] = w.steps;
  j["iterations_per_s"] = w.iterations_per_s;
  j["samples_per_s"] = w.samples_per_s;
  j["step_p50_s"] = Opt(w.step_p50_s);
  j["step_p95_s"] = Opt(w.step_p95_s);
  j["step_p99_s"] = Opt(w.step_p99_s);
  j["data_wait_ratio"] = Opt(w.data_wait_ratio);
  j["comm_ratio"] = Opt(w.comm_ratio);
  j["checkpoint_ratio"] = Opt(w.checkpoint_ratio);
  j["loss"] = Opt(w.loss);
  j["grad_norm"] = Opt(w.grad_norm);
  return j;
}

}  // namespace

nlohmann::json JobJson(const jobs::JobView& v, bool with_ranks,
                       const std::optional<analyze::TemplateStep>& baseline) {
  nlohmann::json j;
  j["id"] = v.id;
  j["source"] = v.source;
  j["template"] = v.template_name;
  j["user"] = v.user;
  j["project"] = v.project;
  if (!v.claimed_project.empty()) j["claimed_project"] = v.claimed_project;  // not taken
  j["state"] = v.state;
  j["start_ms"] = v.start_ms;
  j["end_ms"] = v.end_ms ? nlohmann::json(v.end_ms) : nlohmann::json();
  j["last_step_ms"] = v.last_step_ms ? nlohmann::json(v.last_step_ms) : nlohmann::json();
  j["world_size"] = v.world_size ? nlohmann::json(*v.world_size) : nlohmann::json();
  j["ranks_reporting"] = v.ranks.size();
  // The job's progress and pace, as its slowest rank gives them: ranks of a synchronous job take
  // the same steps, and one that lags sets everyone's step time.
  uint64_t steps_total = 0;
  std::optional<double> median_step_s;
  for (const auto& r : v.ranks) {
    steps_total = std::max(steps_total, r.steps_total);
    if (r.median_step_s && (!median_step_s || *r.median_step_s > *median_step_s))
      median_step_s = r.median_step_s;
  }
  j["steps_total"] = steps_total;
  j["median_step_s"] = Opt(median_step_s);
  j["gpus"] = v.gpus;
  j["pids"] = v.pids;
  j["container"] = v.container;
  j["gpu_seconds"] = v.gpu_seconds;
  j["window"] = WindowJson(v.window);
  if (!v.nodes.empty()) {
    j["nodes"] = nlohmann::json::array();
    for (const auto& [node, gpus] : v.nodes) j["nodes"].push_back({{"node", node}, {"gpus", gpus}});
  }
  j["baseline"] = nullptr;
  if (baseline)
    j["baseline"] = {{"template", baseline->template_name},
                     {"shape", baseline->shape},
                     {"version", baseline->version},
                     {"step_median_s", baseline->median_s},
                     {"step_p99_s", baseline->p99_s}};
  if (with_ranks) {
    j["ranks"] = nlohmann::json::array();
    for (const auto& r : v.ranks) {
      nlohmann::json rj;
      rj["rank"] = r.rank;
      rj["pid"] = r.pid ? nlohmann::json(*r.pid) : nlohmann::json();
      rj["pid_verified"] = r.pid_verified;
      rj["local_rank"] = r.local_rank ? nlohmann::json(*r.local_rank) : nlohmann::json();
      rj["state"] = r.state;
      rj["exit_code"] = r.exit_code ? nlohmann::json(*r.exit_code) : nlohmann::json();
      rj["hung"] = r.hung;
      rj["gpus"] = r.gpus;
      rj["container"] = r.container;
      rj["user"] = r.user;
      rj["steps_total"] = r.steps_total;
      rj["last_step"] = r.last_step ? nlohmann::json(*r.last_step) : nlohmann::json();
      rj["last_step_ms"] = r.last_step_ms ? nlohmann::json(r.last_step_ms) : nlohmann::json();
      rj["median_step_s"] = Opt(r.median_step_s);
      rj["phase"] = r.phase;
      rj["window"] = WindowJson(r.window);
      rj["scalars"] = r.scalars;
      if (!r.node.empty()) rj["node"] = r.node;
      j["ranks"].push_back(std::move(rj));
    }
  }
  return j;
}

nlohmann::json JobsJson(const std::vector<jobs::JobView>& jobs, const std::string& socket_path,
                        const BaselineOf& baseline_of) {
  nlohmann::json j;
  j["socket"] = socket_path;
  j["jobs"] = nlohmann::json::array();
  for (const auto& v : jobs)
    j["jobs"].push_back(JobJson(v, false, baseline_of ? baseline_of(v.id) : std::nullopt));
  return j;
}

}  // namespace gpuwatch::server
