// libFuzzer target for the silence API's parser (POST /api/v1/silences takes any bytes from
// anyone who reaches the agent's port): no input may crash it, and what it accepts must be a
// silence the alert book either takes or refuses with a reason — never one that matches
// nothing or ends before it starts. The same bytes go to AlertBook::Restore (the agent's
// alerts.json, which may be damaged): refused with a reason, or restored into a book whose
// state renders and restores again to the same state.
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
  {
    AlertBook restored;
    gpuwatch::Status st = restored.Restore(j, kNow);
    if (!st.ok() && st.message().empty()) std::abort();
    if (st.ok()) {
      const nlohmann::json state = restored.State(kNow);
      AlertBook again;
      if (!again.Restore(state, kNow).ok() || again.State(kNow) != state) std::abort();
      restored.Update({}, kNow);  // and the book works on what it restored
    }
  }
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
