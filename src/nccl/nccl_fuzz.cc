// libFuzzer target for the NCCL log parser and its analysis. Their input is a job's own log,
// text the job controls, so no bytes may crash, hang or read out of bounds, and the JSON must
// always serialise (every string in it valid UTF-8).
//
// Build: scripts/fuzz.sh (clang, libFuzzer); CTest runs it through tests/fuzz_driver.cc.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "nccl/nccl_analysis.h"
#include "nccl/nccl_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::nccl;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const NcclLogReport report = ParseNcclLog(in);
  TopoHint topo;
  topo.gpu_links = {{"X", "NV12", "SYS"}, {"NV12", "X", "PIX"}, {"SYS", "PIX", "X"}};
  topo.nics = {"mlx5_0"};
  topo.ib_present = true;
  const auto without = AnalyzeNccl(report, nullptr);
  const auto with = AnalyzeNccl(report, &topo);
  (void)NcclReportJson(report, without).dump();
  (void)NcclReportJson(report, with).dump();
  return 0;
}
