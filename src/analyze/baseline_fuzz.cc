// libFuzzer target for the baseline JSON reader (`gpuwatch baseline import FILE` takes files from
// anywhere, and the store reads whatever lies under its directory): no input may crash it, and
// what it accepts must survive its own writer unchanged.
//
// CTest runs it through tests/fuzz_driver.cc; scripts/fuzz.sh builds it with real libFuzzer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "analyze/baseline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::analyze;
  const nlohmann::json j = nlohmann::json::parse(
      std::string_view(reinterpret_cast<const char*>(data), size), nullptr, false);
  if (j.is_discarded()) return 0;
  auto b = BaselineFromJson(j);
  if (!b.ok()) {
    if (b.status().message().empty()) std::abort();  // every rejection says why
    return 0;
  }
  auto again = BaselineFromJson(BaselineToJson(*b));
  if (!again.ok() || again->metrics.size() != b->metrics.size() ||
      again->template_name != b->template_name || again->shape != b->shape)
    std::abort();
  for (const auto& [name, m] : b->metrics) {
    if (m.sample.size() > kMaxSample) std::abort();
    if (again->metrics.at(name).sample.size() != m.sample.size()) std::abort();
  }
  PathSafe(b->template_name);
  return 0;
}
