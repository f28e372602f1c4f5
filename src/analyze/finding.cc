#include "analyze/finding.h"

#include <algorithm>
#include <tuple>

namespace gpuwatch::analyze {

namespace {

struct CauseLayer {
  std::string_view cause, layer;
};
// findings.md, "Causes".
constexpr CauseLayer kCauses[] = {
    {"data_stall", "task"},
    {"checkpoint_stall", "task"},
    {"memory_leak", "task"},
    {"job_hang", "task"},
    {"rank_exit", "task"},
    {"step_regression", "task"},
    {"thermal_throttle", "card"},
    {"power_throttle", "card"},
    {"clock_slowdown", "card"},
    {"straggler_gpu", "card"},
    {"ecc_sbe_growth", "card"},
    {"ecc_dbe", "card"},
    {"xid", "card"},
    {"gpu_lost", "card"},
    {"nvlink_fallback", "link"},
    {"net_fallback", "link"},
    {"nvlink_errors", "link"},
    {"pcie_downgrade", "link"},
    {"pcie_replay", "link"},
    {"net_congestion", "link"},
    {"net_errors", "link"},
    {"numa_mismatch", "link"},
    {"topology_change", "link"},
    {"clock_skew", "link"},
    {"version_mismatch", "link"},
    {"gpu_idle_allocated", "task"},
};

}  // namespace

std::vector<std::string_view> Causes() {
  std::vector<std::string_view> out;
  for (const CauseLayer& c : kCauses) out.push_back(c.cause);
  return out;
}

std::string_view LayerOf(std::string_view cause) {
  for (const auto& c : kCauses) {
    if (c.cause == cause) return c.layer;
  }
  return "";
}

nlohmann::json FindingToJson(const Finding& f) {
  nlohmann::json j;
  j["cause"] = f.cause;
  j["layer"] = f.layer;
  j["severity"] = f.severity;
  j["node"] = f.node;
  if (f.gpu) j["gpu"] = *f.gpu;
  if (f.peer_gpu) j["peer_gpu"] = *f.peer_gpu;
  if (f.nic) j["nic"] = *f.nic;
  if (f.job) j["job"] = *f.job;
  if (f.rank) j["rank"] = *f.rank;
  if (f.code) j["code"] = *f.code;
  j["first_seen"] = f.first_seen;
  j["last_seen"] = f.last_seen;
  j["summary"] = f.summary;
  j["evidence"] = f.evidence;
  j["action"] = f.action;
  return j;
}

nlohmann::json FindingsDocument(std::vector<Finding> findings, const nlohmann::json& stats) {
  std::sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    return std::tie(a.first_seen, a.cause, a.node, a.gpu) <
           std::tie(b.first_seen, b.cause, b.node, b.gpu);
  });
  nlohmann::json list = nlohmann::json::array();
  for (const Finding& f : findings) list.push_back(FindingToJson(f));
  return {{"findings", list}, {"stats", stats}};
}

}  // namespace gpuwatch::analyze
