// libFuzzer target for the nvidia-smi text reader. Its input is whatever someone kept and
// pasted — any of nvidia-smi's forms, mixed, quoted, cut anywhere, or not nvidia-smi at all —
// so no bytes may crash it, hang it or grow its memory past the caps, and the JSON must always
// serialise (every string in it valid UTF-8) with every key of docs/format/explain.md.
//
// CTest runs it through tests/fuzz_driver.cc; scripts/fuzz.sh builds it with real libFuzzer.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "collect/smi_text.h"

namespace {

bool KnownReason(const std::string& s) {
  for (const char* r : {"idle", "app_clocks", "sw_power_cap", "hw_slowdown", "hw_thermal",
                        "hw_power_brake", "sync_boost", "sw_thermal", "display_clock"})
    if (s == r) return true;
  return false;
}

void Check(const gpuwatch::collect::SmiReport& r) {
  using namespace gpuwatch::collect;
  if (r.gpus.size() > kMaxSmiGpus || r.processes.size() > kMaxSmiProcesses ||
      r.warnings.size() > kMaxSmiWarnings + 1 || r.forms.size() > 6)
    std::abort();
  for (const auto& g : r.gpus) {
    if (g.mig_devices.size() > kMaxSmiMigDevicesPerGpu) std::abort();
    for (const auto* v :
         {&g.temp_c, &g.power_w, &g.power_limit_w, &g.mem_used_mib, &g.mem_total_mib, &g.util_pct})
      if (*v && !std::isfinite(**v)) std::abort();
    if (g.clock_event_reasons)
      for (const auto& s : *g.clock_event_reasons)
        if (!KnownReason(s)) std::abort();
  }
  const nlohmann::json j = SmiReportJson(r);
  (void)j.dump();
  if (!j.contains("driver_version") || !j.contains("cuda_version") ||
      j["gpus"].size() != r.gpus.size() || j["processes"].size() != r.processes.size())
    std::abort();
  for (const auto& g : j["gpus"])
    if (g.size() != 16 || g["ecc"].size() != 9) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::collect;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)LooksLikeSmi(in);
  Check(ParseSmiText(in));
  return 0;
}
