// gpuwatch's built-in rules as Prometheus alerting rules (`gpuwatch rules export`, issue 7),
// for teams that alert from Prometheus on what the agents expose at /metrics.
//
// One rule per cause of ../shared/spec/findings.md that the exposed metrics can express, with
// the cause's severity, its layer and a summary naming the place; the expressions read the
// metric catalog's names (docs/metrics.md) and the thresholds are the diagnosis engine's where
// PromQL can say the same (a throttle only on a busy GPU, SBE growth over a window, memory that
// would run out within the hour). What PromQL cannot see — NCCL's transports and versions in
// the logs, topology changes, a per-template baseline — stays with the engine (`gpuwatch
// diagnose`); EngineOnlyCauses says which and why, and the export lists them in its header.
// The output passes `promtool check rules` (tested) and is pure text: no state, thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/cause.h"

namespace gpuwatch::analyze {

using model::Cause;
using model::Severity;

struct PrometheusRule {
  Cause cause;
  Severity severity;         // as the engine reports the cause
  std::string_view expr;     // PromQL
  std::string_view for_;     // "" fires at once
  std::string_view summary;  // Go template over $labels / $value
};

const std::vector<PrometheusRule>& PrometheusRules();
// The alert name of a cause: thermal_throttle → GpuwatchThermalThrottle (the exported rules'
// and the alerts the agent sends to Alertmanager).
std::string AlertName(std::string_view cause);
std::string AlertName(Cause cause);

struct EngineOnlyCause {
  Cause cause;
  std::string_view why;
};
const std::vector<EngineOnlyCause>& EngineOnlyCauses();
// The rule exported for `cause`, or nullptr when the cause is engine-only (EngineOnlyCauses).
const PrometheusRule* PrometheusRuleOf(Cause cause);

// The rules file (Prometheus 2.x YAML): groups "gpuwatch-card", "gpuwatch-task", "gpuwatch-link".
std::string PrometheusRulesYaml();

}  // namespace gpuwatch::analyze
