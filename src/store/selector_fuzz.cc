// libFuzzer target for the PromQL selector parser: query text arrives over HTTP from anyone
// who can reach the agent, so no input may crash it, hang it or make RE2 use unbounded memory.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "store/labels.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto m = gpuwatch::store::ParseSelector(in);
  if (m.ok()) {
    for (const auto& x : *m) (void)x.Matches(in);
  }
  return 0;
}
