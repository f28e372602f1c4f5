// libFuzzer target for the template rules file (--template-rules): no input may crash the
// parser; a refusal says why, and an accepted file names only rules that match something.
//
// CTest runs it through tests/fuzz_driver.cc; scripts/fuzz.sh builds it with real libFuzzer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "jobs/template_rules.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::jobs;
  auto rules = ParseTemplateRules(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!rules.ok()) {
    if (rules.status().message().empty()) std::abort();
    return 0;
  }
  for (const TemplateRule& r : *rules) {
    if (r.name.empty() || (r.user.empty() && r.project.empty() && !r.gpus && !r.ranks))
      std::abort();
    // A job with exactly the rule's labels is named by it or by an earlier rule.
    if (MatchTemplate(*rules, r.user, r.project, r.gpus, r.ranks).empty()) std::abort();
  }
  return 0;
}
