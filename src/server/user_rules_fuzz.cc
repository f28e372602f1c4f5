// libFuzzer target for the user rules file (--rules FILE): no input may crash the parser or the
// PromQL parser under it, every rejection says why, and what it accepts is a rule set the
// evaluator can hold, with valid names, severities and non-negative durations.
//
// CTest runs it through tests/fuzz_driver.cc.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/user_rules.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::server;
  auto rules = ParseUserRules(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!rules.ok()) {
    if (rules.status().message().empty()) std::abort();
    return 0;
  }
  for (const UserRule& r : *rules) {
    if (r.name.empty() || r.expr.empty() || r.for_ms < 0 || r.clear_after_ms < 0) std::abort();
    if (r.severity > gpuwatch::model::Severity::kCritical) std::abort();
    FillTemplate(r.summary, {{"gpu", "1"}}, 2.5);
  }
  UserRuleEvaluator ev(*rules, "n");
  if (ev.Holds().size() != rules->size()) std::abort();
  return 0;
}
