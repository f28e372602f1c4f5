#include "analyze/rules/xid_catalog.h"

#include <algorithm>

namespace gpuwatch::analyze {
namespace {

using model::Cause;
using model::Severity;

// The catalog's RESET_GPU and RESTART_BM codes (xid.md, "Which Xids mean reset or drain").
constexpr int64_t kResetCodes[] = {46,  62,  64,  79,  95,  109, 110, 119, 120,
                                   136, 140, 143, 155, 156, 158, 160, 162};
// RESTART_APP codes: the application's own fault; the GPU stays healthy.
constexpr int64_t kAppCodes[] = {8,  11, 13, 25, 31, 32, 39, 40, 41, 60, 68, 69, 70,
                                 71, 72, 75, 76, 77, 80, 82, 83, 84, 85, 86, 88, 89};

bool In(int64_t code, std::initializer_list<int64_t> set) {
  return std::find(set.begin(), set.end(), code) != set.end();
}
template <size_t N>
bool In(int64_t code, const int64_t (&set)[N]) {
  return std::find(std::begin(set), std::end(set), code) != std::end(set);
}

}  // namespace

XidMeaning MeaningOfXid(int64_t code, std::string_view text) {
  const Severity reset = In(code, kResetCodes) ? Severity::kCritical : Severity::kWarning;
  if (code == 79) {
    return {Cause::kGpuLost, Severity::kCritical, "the GPU fell off the bus",
            "Drain the node and restart it (the catalog's RESTART_BM); check the GPU's power, "
            "cooling and PCIe link (AER errors before it)"};
  }
  if (In(code, {48, 63, 64, 94, 95, 140})) {
    return {Cause::kEccDbe, Severity::kCritical, "GPU memory (ECC, row remapping)",
            "Drain the node; reset the GPU; replace it if row remapping failed or it recurs"};
  }
  if (code == 74 || (code >= 144 && code <= 150)) {
    const bool nonfatal = text.find("Nonfatal") != std::string_view::npos;
    return {Cause::kNvlinkErrors, nonfatal ? Severity::kWarning : Severity::kCritical, "NVLink",
            "Check the NVLink bridge or baseboard; run nvidia-smi nvlink -e; drain if links drop"};
  }
  if (In(code, {43, 45, 154})) return {std::nullopt, Severity::kInfo, "a consequence", ""};
  if (In(code, kAppCodes)) {
    return {Cause::kXid, Severity::kWarning, "application fault",
            "Read the job's error (an illegal address or instruction); if the same GPU faults "
            "again for other jobs, run dcgmi diag on it"};
  }
  // An xid finding is a warning whatever its bucket (the job owner is told; a GPU that needs a
  // reset says so in the action): the critical causes are the ones findings.md names apart.
  if (In(code, {61, 62, 119, 120})) {
    return {Cause::kXid, Severity::kWarning, "GPU micro-controller or GSP firmware",
            "Reset the GPU (nvidia-smi -r) or restart the node; update the driver if it recurs"};
  }
  return {Cause::kXid, Severity::kWarning, "driver-reported GPU error",
          reset == Severity::kCritical
              ? "Reset the GPU or restart the node (the catalog's immediate action); look the XID "
                "up in NVIDIA's XID catalog"
              : "Look the XID up in NVIDIA's XID catalog; drain the node if it repeats"};
}

}  // namespace gpuwatch::analyze
