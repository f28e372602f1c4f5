// libFuzzer target for the nccl-tests output parser and the link-baseline JSON. Captures are
// pasted text from anywhere and baseline files sit on disk where anyone with access may edit
// them, so no bytes may crash, hang or read out of bounds; a parsed run must turn into a
// baseline whose JSON serialises (every string valid UTF-8) and reads back to the same points.
//
// Build: scripts/fuzz.sh (clang, libFuzzer); CTest runs it through tests/fuzz_driver.cc.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "nccl/linkbase.h"
#include "nccl/nccl_tests.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::nccl;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  // The same bytes read as a baseline file: rejected or read, never a crash.
  (void)BaselineFromJson(in);

  auto report = ParseNcclTestsOutput(in);
  if (!report.ok()) return 0;
  (void)report->PeakBusbwGbps();
  BaselineSource src;
  src.key = report->hosts.empty() ? "fuzz-node" : "";
  src.collective = report->collective.empty() ? "all_gather_perf" : "";
  src.source_file = "fuzz.txt";
  auto base = BaselineFromReport(*report, src);
  if (!base.ok()) return 0;
  const std::string text = BaselineToJson(*base).dump();
  auto back = BaselineFromJson(text);
  if (!back.ok() || back->points.size() != base->points.size()) std::abort();
  const Comparison c = CompareToBaseline(*base, *back);
  if (c.median_ratio && c.verdict == Verdict::kDegraded) std::abort();  // a run is its own peer
  (void)ComparisonJson(c).dump();
  return 0;
}
