// libFuzzer target for sacct's parsable output (accounting/sacct.h): no input may crash the
// parser; what it accepts is no step's line, and its times are positive.
//
// CTest runs it through tests/fuzz_driver.cc over tests/fixtures/slurm/sacct.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "accounting/sacct.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::accounting;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto jobs = ParseSacct(in);
  if (!jobs.ok()) {
    if (jobs.status().message().empty()) std::abort();
    return 0;
  }
  for (const SacctJob& j : *jobs) {
    if (j.id.empty() || j.id.find('.') != std::string::npos) std::abort();
    if ((j.submit_ms && *j.submit_ms <= 0) || (j.start_ms && *j.start_ms <= 0)) std::abort();
  }
  return 0;
}
