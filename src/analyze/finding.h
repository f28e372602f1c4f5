// A finding (../shared/spec/findings.md): a cause, where, since when, how bad, why and what to
// do. The vocabulary of causes is fixed by that file; this module only produces findings in it.
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::analyze {

struct Finding {
  std::string cause;
  std::string layer;     // task | card | link
  std::string severity;  // info | warning | critical
  std::string node;
  std::optional<int> gpu, peer_gpu, rank;
  std::optional<std::string> job, nic;
  std::optional<int64_t> code;  // the XID of an `xid` finding
  double first_seen = 0;        // Unix seconds
  double last_seen = 0;
  std::string summary;
  std::vector<std::string> evidence;
  std::string action;
};

// The layer findings.md gives a cause ("card" for thermal_throttle); "" for an unknown cause.
std::string_view LayerOf(std::string_view cause);
// Every cause of findings.md, in its order.
std::vector<std::string_view> Causes();

// findings.md's JSON form of one finding; gpu/peer_gpu/job/rank/nic/code only when set.
nlohmann::json FindingToJson(const Finding& f);
// Back from that form (the agent's saved alert state). Errors name the field; unknown fields
// are ignored (a later version may add some).
Result<Finding> FindingFromJson(const nlohmann::json& j);
// {"findings": [...], "stats": {...}}: findings ordered by first_seen, then cause, node, gpu.
nlohmann::json FindingsDocument(std::vector<Finding> findings, const nlohmann::json& stats);

}  // namespace gpuwatch::analyze
