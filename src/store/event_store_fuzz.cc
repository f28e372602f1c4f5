// Fuzz target for the event-batch decoder (the body of an event-log WAL record, which replay
// reads from disk). Whatever decodes must be valid events, and must survive
// decode -> encode -> decode unchanged with a deterministic encoding (the input itself need not
// be canonical: overlong varints and fields appended to an event body are accepted).
// Built with libFuzzer by hand (see scripts/fuzz.sh) and, with tests/fuzz_driver.cc, in CTest.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "store/event_store.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using gpuwatch::store::DecodeEventBatch;
  using gpuwatch::store::EncodeEventBatch;
  auto decoded = DecodeEventBatch(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!decoded.ok()) return 0;
  for (const auto& e : *decoded) Check(gpuwatch::store::ValidateEvent(e).ok());
  const std::string again = EncodeEventBatch(*decoded);
  auto redecoded = DecodeEventBatch(again);
  Check(redecoded.ok() && *redecoded == *decoded);
  Check(EncodeEventBatch(*redecoded) == again);
  return 0;
}
