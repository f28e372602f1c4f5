// Card-level data model: what one GPU is (static), what it measured (per tick), which fields
// it can measure (capabilities), and the events it raised.
//
// GpuSample stores every scalar field in one array indexed by GpuMetric with a validity bit, so
// "not supported" and "not measured this tick" are never confused with zero (R2). Value types;
// no thread-safety of their own.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuwatch::model {

// One scalar per GPU per tick. Persistent (catalog order, docs): append only, never renumber.
enum class GpuMetric : uint8_t {
  kUtilGpuPct,
  kUtilMemPct,
  kMemUsedMib,
  kMemFreeMib,
  kMemTotalMib,
  kMemReservedMib,
  kTempC,
  kMemTempC,
  kPowerW,
  kPowerLimitW,
  kEnergyMj,
  kSmClockMhz,
  kMemClockMhz,
  kMaxSmClockMhz,
  kMaxMemClockMhz,
  kClockEventReasons,
  kEccSbeVolatile,
  kEccDbeVolatile,
  kEccSbeAggregate,
  kEccDbeAggregate,
  kRetiredPagesSbe,
  kRetiredPagesDbe,
  kRetiredPagesPending,
  kRemappedRowsCorrectable,
  kRemappedRowsUncorrectable,
  kRemappedRowsPending,
  kRemappedRowsFailure,
  kPcieTxBytesPerSec,
  kPcieRxBytesPerSec,
  kPcieReplay,
  kPcieGen,
  kPcieWidth,
  kPcieMaxGen,
  kPcieMaxWidth,
  kFanPct,
  kNvlinkActiveLinks,
  kNvlinkCrcFlitErrors,
  kNvlinkCrcDataErrors,
  kNvlinkReplayErrors,
  kNvlinkRecoveryErrors,
  kNvlinkTxBytes,
  kNvlinkRxBytes,
  kGpmGraphicsActive,
  kGpmSmActive,
  kGpmSmOccupancy,
  kGpmTensorActive,
  kGpmDramActive,
  kCount,
};
inline constexpr size_t kNumGpuMetrics = static_cast<size_t>(GpuMetric::kCount);
inline constexpr size_t Idx(GpuMetric m) { return static_cast<size_t>(m); }

// Clock-event reasons in words, in the trace-format vocabulary (sw_power_cap, hw_thermal, …).
std::vector<std::string_view> ClockEventReasonNames(uint64_t mask);

struct NvLinkSample {
  unsigned link = 0;
  bool active = false;
  std::optional<uint64_t> replay_errors, recovery_errors, crc_flit_errors, crc_data_errors;
  std::optional<uint64_t> tx_bytes, rx_bytes;  // counters since driver load
};

// The per-link NVLink error counters by name: the exposition's `counter` label, and with
// "_errors" appended, the JSON key.
struct NvLinkErrorCounter {
  std::string_view name;
  std::optional<uint64_t> NvLinkSample::*field;
};
inline constexpr NvLinkErrorCounter kNvLinkErrorCounters[] = {
    {"crc_flit", &NvLinkSample::crc_flit_errors},
    {"crc_data", &NvLinkSample::crc_data_errors},
    {"replay", &NvLinkSample::replay_errors},
    {"recovery", &NvLinkSample::recovery_errors},
};

struct MigSample {
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;
  std::string uuid;
  std::optional<double> mem_used_mib, mem_total_mib;
  std::optional<double> graphics_active, sm_active;  // GPM per-instance, 0..1
};

struct GpuSample {
  int64_t time_ms = 0;
  bool lost = false;  // the device answered GPU_IS_LOST this tick
  std::array<double, kNumGpuMetrics> values{};
  std::bitset<kNumGpuMetrics> valid;
  std::vector<NvLinkSample> nvlinks;
  std::vector<MigSample> mig;

  void Set(GpuMetric m, double v) {
    values[Idx(m)] = v;
    valid.set(Idx(m));
  }
  std::optional<double> Get(GpuMetric m) const {
    if (!valid.test(Idx(m))) return std::nullopt;
    return values[Idx(m)];
  }
};

struct MigInstanceInfo {
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;
  std::string uuid;
};

// Read once at start (and on topology change).
struct GpuStaticInfo {
  unsigned index = 0;      // NVML enumeration index ("gpu" label)
  std::string uuid;        // GPU-xxxxxxxx-...
  std::string pci_bus_id;  // 00000000:18:00.0 (lower-case hex, NVML form)
  std::string name;        // NVIDIA H100 80GB HBM3
  std::string serial;
  std::string vbios_version;
  std::optional<unsigned> minor_number;  // /dev/nvidiaN
  std::optional<unsigned> architecture;  // nvmlDeviceArchitecture_t value
  bool mig_enabled = false;
  std::vector<MigInstanceInfo> mig_instances;
  unsigned nvlink_count = 0;  // links that answered NvLinkState at start
  bool gpm_supported = false;
};

struct SystemInfo {
  std::string driver_version;
  std::string nvml_version;
  std::string cuda_driver_version;  // "12.4"
  std::string library_path;         // the NVML library actually loaded
};

// Capability of one field on one GPU (R2): recorded once, never retried every tick.
enum class Support : uint8_t { kUnknown, kSupported, kNotSupported, kError };
struct Capability {
  Support support = Support::kUnknown;
  std::string reason;  // e.g. "NVML_ERROR_NOT_SUPPORTED" or "no GPM on Ampere"
};
// Capabilities beyond the scalar metrics.
enum class GpuFeature : uint8_t { kProcesses, kXidEvents, kNvlinkPerLink, kMig, kGpm, kCount };
inline constexpr size_t kNumGpuFeatures = static_cast<size_t>(GpuFeature::kCount);
std::string_view GpuFeatureName(GpuFeature f);

struct GpuCapabilities {
  std::array<Capability, kNumGpuMetrics> metrics;
  std::array<Capability, kNumGpuFeatures> features;
};

struct GpuProcess {
  uint32_t pid = 0;
  std::optional<uint64_t> used_memory_bytes;
  std::optional<unsigned> gpu_instance_id, compute_instance_id;
};

// Events from the card line: XID, ECC, a GPU lost or back. Kept with their text (R18).
enum class GpuEventKind : uint8_t { kXid, kEccSingleBit, kEccDoubleBit, kGpuLost, kGpuRecovered };
std::string_view GpuEventKindName(GpuEventKind k);

// gpu_index of an event NVML raised for a device handle it never enumerated.
inline constexpr unsigned kUnknownGpu = ~0u;

struct GpuEvent {
  int64_t time_ms = 0;
  GpuEventKind kind = GpuEventKind::kXid;
  unsigned gpu_index = 0;
  std::string uuid;
  std::string pci_bus_id;
  uint64_t code = 0;  // XID number for kXid
  std::string text;
  std::string source = "nvml";  // nvml | kmsg
};

// Human description of common XIDs, for event text and `status`.
std::string_view XidDescription(uint64_t xid);

}  // namespace gpuwatch::model
