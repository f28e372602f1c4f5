#include "analyze/rules/rules.h"

namespace gpuwatch::analyze {

std::vector<std::unique_ptr<Rule>> MakeRules(const DiagnoserOptions& o) {
  std::vector<std::unique_ptr<Rule>> rules;
  rules.push_back(MakeCardRule(o.card));
  rules.push_back(MakeThermalTrendRule(o.trend));
  rules.push_back(MakeMemoryRule(o.memory));
  rules.push_back(MakeTaskStepsRule(o.task));
  rules.push_back(MakeTaskLivenessRule(o.task, o.hang, o.card));
  rules.push_back(MakeHostNicRule(o.host_nic));
  rules.push_back(MakeCrossNodeRule(o.cross_node));
  rules.push_back(MakeNcclFallbackRule(o.nccl));
  rules.push_back(MakeTopologyRule());
  return rules;
}

}  // namespace gpuwatch::analyze
