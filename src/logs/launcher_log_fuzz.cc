// libFuzzer target for the launcher-log reader. A job writes its own log, and people paste any
// part of one, so no bytes may crash, hang or read out of bounds; the state stays within its
// caps, root causes come first, and the `launcher` JSON serialises (valid UTF-8).
//
// Build: scripts/fuzz.sh (clang, libFuzzer); CTest runs it through tests/fuzz_driver.cc.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "logs/launcher_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::logs;
  std::string_view in(reinterpret_cast<const char*>(data), size);

  LauncherLogParser parser;
  size_t line_no = 0;
  while (!in.empty()) {
    const size_t nl = in.find('\n');
    const std::string_view line = in.substr(0, nl);
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    (void)LooksLikeLauncherLine(line);
    parser.Feed(line, ++line_no);
    if (line_no % 64 == 0) (void)parser.report();  // interleave reads with feeding
  }
  const LauncherReport& r = parser.report();
  if (r.failures.size() > kMaxLauncherEntries || r.watchdog_timeouts.size() > kMaxLauncherEntries ||
      r.cuda_oom.size() > kMaxLauncherEntries) {
    std::abort();
  }
  bool others = false;
  for (const LauncherFailure& f : r.failures) {
    if (f.root_cause && others) std::abort();
    others = others || !f.root_cause;
  }
  (void)LauncherReportJson(r).dump();  // throws, and so aborts, on invalid UTF-8
  return 0;
}
