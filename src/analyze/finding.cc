#include "analyze/finding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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

Result<Finding> FindingFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Status::InvalidArgument("a finding is a JSON object");
  Finding f;
  auto bad = [](const char* key, const char* want) {
    return Status::InvalidArgument(fmt::format("finding field '{}' must be {}", key, want));
  };
  for (auto [key, out] : {std::pair{"cause", &f.cause}, std::pair{"layer", &f.layer},
                          std::pair{"severity", &f.severity}, std::pair{"node", &f.node},
                          std::pair{"summary", &f.summary}, std::pair{"action", &f.action}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_string()) return bad(key, "a string");
    *out = j[key].get<std::string>();
  }
  if (f.cause.empty()) return bad("cause", "a non-empty string");
  if (f.severity != "info" && f.severity != "warning" && f.severity != "critical")
    return bad("severity", "info, warning or critical");
  for (auto [key, out] :
       {std::pair{"gpu", &f.gpu}, std::pair{"peer_gpu", &f.peer_gpu}, std::pair{"rank", &f.rank}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0 || j[key].get<int64_t>() > 1 << 30)
      return bad(key, "an integer >= 0");
    *out = static_cast<int>(j[key].get<int64_t>());
  }
  for (auto [key, out] : {std::pair{"job", &f.job}, std::pair{"nic", &f.nic}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_string()) return bad(key, "a string");
    *out = j[key].get<std::string>();
  }
  if (j.contains("code")) {
    if (!j["code"].is_number_integer()) return bad("code", "an integer");
    f.code = j["code"].get<int64_t>();
  }
  for (auto [key, out] :
       {std::pair{"first_seen", &f.first_seen}, std::pair{"last_seen", &f.last_seen}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number() || !std::isfinite(j[key].get<double>())) return bad(key, "a number");
    *out = j[key].get<double>();
  }
  if (j.contains("evidence")) {
    if (!j["evidence"].is_array()) return bad("evidence", "an array of strings");
    for (const auto& e : j["evidence"]) {
      if (!e.is_string()) return bad("evidence", "an array of strings");
      f.evidence.push_back(e.get<std::string>());
    }
  }
  return f;
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
