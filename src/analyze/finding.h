// A finding (../shared/spec/findings.md, docs/format/findings.md): a cause, where, since when,
// how bad, why, what to do, and what it costs the job it hurts. The vocabulary of causes is the
// catalog's (model/cause.h); this module only produces findings in it. Names of causes, layers
// and severities are written and read only here, at the JSON edge.
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/cause.h"

namespace gpuwatch::analyze {

using model::Cause;
using model::Severity;

// What a card or link finding costs the running job it hurts (issue 16: the chain from symptom
// to cause, task → card → link, in numbers).
struct Impact {
  std::string job;
  // The job's recent median step against its reference: its template's baseline, else its own
  // steps before the cause began, else its peers on healthy GPUs. 0 when unknown.
  double step_s = 0;
  double reference_step_s = 0;
  std::string reference;  // "baseline v3 of llama-8b", "its own steps before", "its peers"
  // The slowest rank of the job and its GPU, when the ranks say it.
  std::optional<int> slowest_rank, slowest_gpu;
  // How much of the job's slowdown this cause explains, 0..1 (its GPU's own compute slowdown
  // against the job's); nullopt when it cannot be told.
  std::optional<double> explained_share;

  double SlowdownShare() const {
    return reference_step_s > 0 && step_s > 0 ? step_s / reference_step_s - 1 : 0;
  }
  bool operator==(const Impact&) const = default;
};

struct Finding {
  Cause cause = Cause::kUserRule;
  std::string rule;  // Cause::kUserRule only: the operator's rule ("user:<rule>" in JSON)
  Severity severity = Severity::kWarning;
  std::string node;
  std::optional<int> gpu, peer_gpu, rank;
  std::optional<std::string> job, nic;
  std::optional<int64_t> code;  // the XID of an `xid` finding
  double first_seen = 0;        // Unix seconds
  double last_seen = 0;
  std::string summary;
  std::vector<std::string> evidence;
  std::string action;
  std::optional<Impact> impact;  // a card or link finding that hurts a running job
  // A task finding: the deeper causes that were looked for on its nodes and not found.
  std::vector<Cause> ruled_out;

  model::Layer layer() const { return model::LayerOf(cause); }
  // findings.md's name, or "user:<rule>".
  std::string CauseText() const;
  bool is_info() const { return severity == Severity::kInfo; }
};

// A finding of `cause` at `node` (and `gpu`), with the given severity: the rules' constructor.
Finding MakeFinding(Cause cause, Severity severity, const std::string& node,
                    std::optional<int> gpu = std::nullopt);

// "thermal_throttle" or "user:<name>" back to the cause (and the rule's name); nullopt for a
// name findings.md does not have.
struct CauseRef {
  Cause cause;
  std::string rule;
};
std::optional<CauseRef> ParseCauseText(std::string_view text);

// Whether finding `cause` explains finding `symptom`: the catalog's graph and its scope, and
// time — the symptom began while the cause was there (from its first_seen to its last_seen,
// model::kExplainSlackS either side); an info finding explains nothing. `symptom_job_nodes`: the
// nodes the symptom's job runs on, when known.
bool Explains(const Finding& cause, const Finding& symptom,
              const std::set<std::string>& symptom_job_nodes = {});

// findings.md's JSON form of one finding; gpu/peer_gpu/job/rank/nic/code only when set, and
// "impact" / "ruled_out" when the engine knows them (docs/format/findings.md).
nlohmann::json FindingToJson(const Finding& f);
// Back from that form (the agent's saved alert state). Errors name the field; unknown fields
// are ignored (a later version may add some).
Result<Finding> FindingFromJson(const nlohmann::json& j);
// {"findings": [...], "stats": {...}}: findings ordered by first_seen, then cause, node, gpu.
nlohmann::json FindingsDocument(std::vector<Finding> findings, const nlohmann::json& stats);

}  // namespace gpuwatch::analyze
