// libFuzzer target for the kernel-log reader. Its input is text people paste and logs that any
// process with access to /dev/kmsg or the journal can write into, so no bytes may crash, hang
// or read out of bounds, and the `kernel` JSON of any text must serialise (valid UTF-8) with
// one entry per reported line.
//
// Build: scripts/fuzz.sh (clang, libFuzzer); CTest runs it through tests/fuzz_driver.cc.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "logs/kernel_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::logs;
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  const KernelLine line = ParseKernelLine(in);
  if (line.kind == KernelLine::Kind::kXid && !line.xid) std::abort();

  const KernelReport r = ParseKernelText(in);
  for (const KernelLine& k : r.xids) {
    if (k.kind != KernelLine::Kind::kXid || !k.xid) std::abort();
  }
  for (const KernelLine& k : r.oom_kills) {
    if (k.kind != KernelLine::Kind::kOomKill || !k.pid) std::abort();
  }
  const nlohmann::json j = KernelReportJson(r);
  if (j["xid"].size() != r.xids.size() || j["oom_kills"].size() != r.oom_kills.size() ||
      j["fallen_off_bus"].size() != r.fallen_off_bus.size()) {
    std::abort();
  }
  (void)j.dump();  // throws, and so aborts, on invalid UTF-8
  return 0;
}
