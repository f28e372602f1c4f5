// libFuzzer target for the silence API's parser (POST /api/v1/silences takes any bytes from
// anyone who reaches the agent's port): no input may crash it, and what it accepts must be a
// silence the alert book either takes or refuses with a reason — never one that matches
// nothing or ends before it starts.
//
// CTest runs it through tests/fuzz_driver.cc; scripts/fuzz.sh builds it with real libFuzzer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "analyze/alerts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::analyze;
  constexpr int64_t kNow = 1'764'460'800'000;
  const nlohmann::json j = nlohmann::json::parse(
      std::string_view(reinterpret_cast<const char*>(data), size), nullptr, false);
  if (j.is_discarded()) return 0;
  auto s = SilenceFromJson(j, kNow);
  if (!s.ok()) {
    if (s.status().message().empty()) std::abort();  // every rejection says why
    return 0;
  }
  AlertBook book;
  auto id = book.AddSilence(*s, kNow);
  if (!id.ok()) {
    if (id.status().message().empty()) std::abort();
    return 0;
  }
  const auto listed = book.Silences(kNow);
  if (listed.size() != 1 || listed[0].id != *id) std::abort();
  const Silence& got = listed[0];
  if (got.ends_ms <= got.starts_ms || got.ends_ms <= kNow) std::abort();
  if (got.node.empty() && got.job.empty() && got.cause.empty() && !got.gpu) std::abort();
  SilenceToJson(got).dump();  // renders whatever it holds
  if (!book.ExpireSilence(*id, kNow).ok()) std::abort();
  return 0;
}
