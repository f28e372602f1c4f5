// libFuzzer target for the time-source parsers. Their input is another program's stdout —
// chronyc, ntpq, timedatectl, whatever answers to those names under /usr/bin or /sbin, in any
// version, cut off by a timeout or the 64 KiB cap — so none may crash, hang or read out of
// bounds on any bytes, and what they accept must be self-consistent.
//
// CTest runs it through tests/fuzz_driver.cc; scripts/fuzz.sh builds it with real libFuzzer.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "collect/time_source.h"

namespace {

void Check(const gpuwatch::Result<gpuwatch::collect::TimeSourceReading>& r) {
  if (!r.ok()) {
    if (r.status().message().empty()) std::abort();  // every rejection says why
    return;
  }
  // An accepted reading never carries an offset the daemon did not vouch for, nor NaN/inf.
  if (r->offset_ms && (!r->synced || !std::isfinite(*r->offset_ms))) std::abort();
  if (r->root_dispersion_ms && !std::isfinite(*r->root_dispersion_ms)) std::abort();
  if (r->jitter_ms && !std::isfinite(*r->jitter_ms)) std::abort();
  if (r->source.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::collect;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  Check(ParseChronycTracking(in));
  Check(ParseNtpqRv(in));
  Check(ParseTimedatectlTimesync(in));
  return 0;
}
