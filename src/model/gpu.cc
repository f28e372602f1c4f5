#include "model/gpu.h"

namespace gpuwatch::model {

std::vector<std::string_view> ClockEventReasonNames(uint64_t mask) {
  // Bits as in NVML's nvmlClocksEventReason*; names from the trace-format vocabulary.
  static constexpr struct {
    uint64_t bit;
    std::string_view name;
  } kReasons[] = {
      {0x1, "idle"},        {0x2, "app_clocks"},      {0x4, "sw_power_cap"},
      {0x8, "hw_slowdown"}, {0x10, "sync_boost"},     {0x20, "sw_thermal"},
      {0x40, "hw_thermal"}, {0x80, "hw_power_brake"}, {0x100, "display_clocks"},
  };
  std::vector<std::string_view> out;
  for (const auto& r : kReasons)
    if (mask & r.bit) out.push_back(r.name);
  return out;
}

std::string_view GpuFeatureName(GpuFeature f) {
  switch (f) {
    case GpuFeature::kProcesses:
      return "processes";
    case GpuFeature::kXidEvents:
      return "xid_events";
    case GpuFeature::kNvlinkPerLink:
      return "nvlink_per_link";
    case GpuFeature::kMig:
      return "mig";
    case GpuFeature::kGpm:
      return "gpm";
    case GpuFeature::kCount:
      break;
  }
  return "unknown";
}

std::string_view GpuEventKindName(GpuEventKind k) {
  switch (k) {
    case GpuEventKind::kXid:
      return "xid";
    case GpuEventKind::kEccSingleBit:
      return "ecc_sbe";
    case GpuEventKind::kEccDoubleBit:
      return "ecc_dbe";
    case GpuEventKind::kGpuLost:
      return "gpu_lost";
    case GpuEventKind::kGpuRecovered:
      return "gpu_recovered";
  }
  return "unknown";
}

std::string_view XidDescription(uint64_t xid) {
  switch (xid) {
    case 13:
      return "Graphics engine exception";
    case 31:
      return "GPU memory page fault";
    case 43:
      return "GPU stopped processing (reset channel)";
    case 45:
      return "Preemptive cleanup, due to previous errors";
    case 48:
      return "Double-bit ECC error";
    case 61:
      return "Internal micro-controller breakpoint/warning";
    case 62:
      return "Internal micro-controller halt";
    case 63:
      return "ECC page retirement or row remapping recording event";
    case 64:
      return "ECC page retirement or row remapper recording failure";
    case 68:
      return "NVDEC0 exception";
    case 69:
      return "Graphics engine class error";
    case 74:
      return "NVLink error";
    case 79:
      return "GPU has fallen off the bus";
    case 92:
      return "High single-bit ECC error rate";
    case 94:
      return "Contained ECC error";
    case 95:
      return "Uncontained ECC error";
    case 109:
      return "Context switch timeout";
    case 119:
      return "GSP RPC timeout";
    case 120:
      return "GSP error";
    case 137:
      return "NVLink FLA privilege error";
    case 140:
      return "Unrecovered ECC error";
    case 144:
    case 145:
    case 146:
    case 147:
    case 148:
    case 149:
    case 150:
      return "NVLink error (NETIR)";
    default:
      return "";
  }
}

}  // namespace gpuwatch::model
