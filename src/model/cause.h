// The cause catalog: the one vocabulary of what the diagnosis can conclude
// (../shared/spec/findings.md, "Causes"), with each cause's attributes in one table. Every other
// list of causes — finding layers, alert events and inhibitions, the engine's "deepest cause"
// pass, the exported Prometheus rules, eval's latency classes, the simulator's planters and the
// demo's fault list — is derived from this table, and tests check that each cause has what it
// needs. Names appear only at the JSON and command-line edges (CauseName / CauseFromName).
//
// Immutable static data; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string_view>

namespace gpuwatch::model {

// findings.md's order. In memory only (never persisted as a number; JSON carries the name).
enum class Cause : uint8_t {
  kDataStall,
  kCheckpointStall,
  kMemoryLeak,
  kJobHang,
  kRankExit,
  kStepRegression,
  kThermalThrottle,
  kPowerThrottle,
  kClockSlowdown,
  kStragglerGpu,
  kEccSbeGrowth,
  kEccDbe,
  kXid,
  kGpuLost,
  kNvlinkFallback,
  kNetFallback,
  kNvlinkErrors,
  kPcieDowngrade,
  kPcieReplay,
  kNetCongestion,
  kNetErrors,
  kNumaMismatch,
  kTopologyChange,
  kClockSkew,
  kVersionMismatch,
  kGpuIdleAllocated,
  // Not a cause of findings.md: an operator's own rule (server/user_rules), whose finding
  // carries the rule's name ("user:<name>" at the JSON edge).
  kUserRule,
};
inline constexpr size_t kCauseCount = static_cast<size_t>(Cause::kUserRule);  // findings.md's

// findings.md's layers; kUser for an operator's rule.
enum class Layer : uint8_t { kTask, kCard, kLink, kUser };
std::string_view LayerName(Layer l);  // "task", "card", "link", "user"

// findings.md's severities, in rising order.
enum class Severity : uint8_t { kInfo, kWarning, kCritical };
std::string_view SeverityName(Severity s);  // "info", "warning", "critical"
std::optional<Severity> SeverityFromName(std::string_view name);

// How an alert on the cause lives (analyze/alerts): an event is reported when it happens and
// held for a while after it was last seen; a condition holds while its evidence does and
// resolves after a short hysteresis.
enum class CauseKind : uint8_t { kEvent, kCondition };

// The keys a finding of the cause names (findings.md, "Which cause, and where"): what eval
// matches it on.
enum class Place : uint8_t {
  kNode,         // nvlink_fallback, net_fallback, topology_change, clock_skew, version_mismatch
  kNodeGpu,      // card causes and link causes of one GPU
  kNodeNic,      // NIC causes
  kNodeJob,      // task causes
  kNodeJobRank,  // rank_exit
};

// Where a cause must be to explain a symptom.
enum class Scope : uint8_t {
  kSameGpu,   // the same node and GPU
  kSameNode,  // the same node
  kJobNodes,  // any node the symptom's job runs on (a synchronous job waits for its slowest node)
  kSameJob,   // a finding of the same job, on any node
};

struct Explains {
  Cause symptom;
  Scope scope;
};

struct CauseInfo {
  Cause cause;
  std::string_view name;  // findings.md's
  Layer layer;
  CauseKind kind;
  Place place;
  // findings.md, Evaluation: the causes that need a baseline or a trend (a 120 s allowed
  // latency instead of 15 s).
  bool needs_baseline_or_trend;
  // The symptoms this cause explains: a finding of `symptom` in `scope` that began while this
  // cause was there (kExplainSlackS either side) is its consequence (findings.md: "Deepest
  // cause only"), so the engine drops it and the alert book inhibits it.
  std::span<const Explains> explains;
  std::string_view meaning;  // findings.md's one line
};

// A cause whose evidence starts this much after its symptom's still explains it, and a symptom
// that starts this much after the cause was last seen: the two are seen a little apart (the job
// stops stepping a moment before the XID is logged; a straggler's slow steps before the
// throttle's third consecutive sample; a rank dies seconds after its GPU was lost).
inline constexpr double kExplainSlackS = 120;

// Every cause of findings.md, in its order (kUserRule is not among them).
std::span<const CauseInfo> CauseCatalog();
// REQUIRES: c != kUserRule has an entry; kUserRule gets a synthetic "user" entry.
const CauseInfo& Describe(Cause c);
std::string_view CauseName(Cause c);  // findings.md's name; "user" for kUserRule
std::optional<Cause> CauseFromName(std::string_view name);  // findings.md's causes only
inline Layer LayerOf(Cause c) { return Describe(c).layer; }

// Whether a finding of `cause` explains one of `symptom` placed as given (the graph's edge and
// its scope; the caller checks time). `same_gpu`, `same_node`, `same_job`: whether the two
// findings share those keys; `cause_on_symptom_job_node`: the cause's node runs the symptom's
// job.
struct PlaceMatch {
  bool same_gpu = false;
  bool same_node = false;
  bool same_job = false;
  bool cause_on_symptom_job_node = false;
};
bool CauseExplains(Cause cause, Cause symptom, const PlaceMatch& where);

// Names for logs and test failures.
std::ostream& operator<<(std::ostream& os, Cause c);
std::ostream& operator<<(std::ostream& os, Severity s);

}  // namespace gpuwatch::model
