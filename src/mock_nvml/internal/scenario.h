// Scenario: the machine the mock NVML library pretends to be.
//
// A scenario is a list of GPUs built from a shape ("8xH100") and refined by an optional JSON file
// (docs/format/mock-nvml-scenario.md): identity strings, per-field values as constants or slow
// sine waves, timed changes, unsupported functions, injected errors, a lost-GPU time, XID
// events, processes and MIG instances. A Scenario is immutable once loaded and every reading is
// a pure function of (scenario, scenario time), which is what makes the mock deterministic.
// Value types with no shared state; the C entry points in mock_nvml.cc add the locking.
//
// Only the header-only parts of common/status.h are used: the mock is a self-contained shared
// library and links nothing of gpuwatch (it is built with -Wl,--no-undefined to keep it so).
#pragma once

#include <array>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collect/nvml_api.h"
#include "common/status.h"

namespace gpuwatch::mock_nvml {

inline constexpr unsigned kMaxGpus = 64;
// What NVML's nvmlDeviceGetMaxMigDeviceCount reports for H100 and A100 with MIG enabled.
inline constexpr unsigned kMaxMigDevices = 7;
// NVML's gpuInstanceId / computeInstanceId for "not in a MIG instance".
inline constexpr unsigned kNoInstance = 0xFFFFFFFFu;
inline constexpr double kNever = std::numeric_limits<double>::infinity();

// Every NVML entry point of GPUWATCH_NVML_FUNCTIONS, in table order.
enum class Fn : uint8_t {
#define GPUWATCH_MOCK_FN_ENUM(name, args) name,
  GPUWATCH_NVML_FUNCTIONS(GPUWATCH_MOCK_FN_ENUM)
#undef GPUWATCH_MOCK_FN_ENUM
      kCount
};
inline constexpr size_t kNumFns = static_cast<size_t>(Fn::kCount);
std::string_view FnName(Fn fn);
std::optional<Fn> FnFromName(std::string_view name);
// The functions an `all_errors` code (or an `errors` rule for "*") applies to: everything but
// the life-cycle calls that must work for a test to reach the device queries at all (init,
// shutdown, count, handle lookup, event-set and GPM-sample allocation).
bool InAllErrorsScope(Fn fn);

// What a GPU can lack ("unsupported"): each function, plus the field ids of
// nvmlDeviceGetFieldValues that have no function of their own.
enum CapExtra : size_t {
  kCapMemTempField = kNumFns,  // NVML_FI_DEV_MEMORY_TEMP
  kCapEccField,                // NVML_FI_DEV_ECC_CURRENT
  kCapRetiredField,            // NVML_FI_DEV_RETIRED_SBE / _DBE / _PENDING
  kCapNvlinkField,             // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX
  kNumCaps,
};
using CapSet = std::bitset<kNumCaps>;
inline size_t CapOf(Fn fn) { return static_cast<size_t>(fn); }

// Numeric per-GPU values a scenario can set (the keys of "values"). Counters are integrals of
// a rate field; setting a counter sets its value at that moment.
enum class Field : uint8_t {
  kUtilGpuPct,
  kUtilMemPct,
  kMemoryTotalMib,
  kMemoryReservedMib,
  kMemoryUsedMib,
  kTempC,
  kMemTempC,
  kPowerW,
  kPowerLimitW,
  kEnergyMj,  // counter of kPowerW
  kSmClockMhz,
  kGraphicsClockMhz,
  kMemClockMhz,
  kVideoClockMhz,
  kMaxSmClockMhz,
  kMaxGraphicsClockMhz,
  kMaxMemClockMhz,
  kMaxVideoClockMhz,
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
  kPcieTxKbPerS,
  kPcieRxKbPerS,
  kPcieReplay,
  kPcieGen,
  kPcieWidth,
  kPcieMaxGen,
  kPcieMaxWidth,
  kFanPct,
  kNvlinkActiveLinks,
  kNvlinkTxKibPerS,
  kNvlinkRxKibPerS,
  kNvlinkTxKib,  // counter of kNvlinkTxKibPerS, per link
  kNvlinkRxKib,  // counter of kNvlinkRxKibPerS, per link
  kNvlinkReplayErrors,
  kNvlinkRecoveryErrors,
  kNvlinkCrcFlitErrors,
  kNvlinkCrcDataErrors,
  kNvlinkEccDataErrors,
  kGpmGraphicsUtilPct,
  kGpmSmUtilPct,
  kGpmSmOccupancyPct,
  kGpmTensorUtilPct,
  kGpmDramBwUtilPct,
  kCount,
};
inline constexpr size_t kNumFields = static_cast<size_t>(Field::kCount);
inline size_t Idx(Field f) { return static_cast<size_t>(f); }

struct FieldInfo {
  std::string_view key;  // JSON key in "values"
  double min;
  double max;
  // For counters: the rate field integrated, and the factor from its unit per second to the
  // counter's unit (W → mJ is 1000). Not a counter when rate_of is Field::kCount.
  Field rate_of;
  double rate_factor;
};
const FieldInfo& InfoOf(Field f);
std::optional<Field> FieldFromKey(std::string_view key);

// GPM metrics the mock computes, in the order of GpuSpec/MigInstanceSpec arrays.
enum GpmIndex : size_t { kGpmGraphics, kGpmSm, kGpmSmOccupancy, kGpmTensor, kGpmDram, kNumGpm };
// The GPU-level value behind each GPM metric.
inline constexpr Field kGpmFields[kNumGpm] = {Field::kGpmGraphicsUtilPct, Field::kGpmSmUtilPct,
                                              Field::kGpmSmOccupancyPct, Field::kGpmTensorUtilPct,
                                              Field::kGpmDramBwUtilPct};

// base + amplitude * sin(2π (t + phase_s) / period_s); a constant when amplitude is 0.
struct Wave {
  double base = 0;
  double amplitude = 0;
  double period_s = 60;
  double phase_s = 0;

  double At(double t_s) const;
  double Integral(double from_s, double to_s) const;
};

// One value in force from at_s until the next segment. Timelines are sorted by at_s and start
// with a segment at 0.
struct Segment {
  double at_s = 0;
  Wave wave;
};
using Timeline = std::vector<Segment>;
double ValueAt(const Timeline& timeline, double t_s);
double IntegralOf(const Timeline& timeline, double from_s, double to_s);

enum class Model : uint8_t { kH100, kA100, kRtx4090, kL40S };

struct ProcessSpec {
  uint32_t pid = 0;
  std::optional<double> used_memory_mib;  // nullopt → NVML_VALUE_NOT_AVAILABLE
  unsigned gpu_instance_id = kNoInstance;
  unsigned compute_instance_id = kNoInstance;
};
struct ProcessList {
  double at_s = 0;
  std::vector<ProcessSpec> processes;
};

struct MigInstanceSpec {
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;
  std::string uuid;     // MIG-xxxxxxxx-…
  std::string profile;  // "3g.40gb", appended to the parent's name
  double memory_total_mib = 0;
  Wave memory_used_mib;
  std::array<Wave, kNumGpm> gpm;
};

struct GpuSpec {
  Model model = Model::kH100;
  unsigned index = 0;
  std::string name, uuid, serial, vbios_version;
  unsigned pci_domain = 0, pci_bus = 0, pci_device = 0, pci_function = 0;
  unsigned pci_device_id = 0, pci_subsystem_id = 0;
  unsigned minor_number = 0;
  unsigned architecture = 0;
  unsigned nvlink_count = 0;
  unsigned nvlink_version = 0;  // NVLink generation (nvmlDeviceGetNvLinkVersion); 0 = no NVLink
  // Placement, for nvmlDeviceGetTopologyCommonAncestor / nvmlDeviceGetP2PStatus: GPUs with the
  // same pcie_switch share one PCIe switch (PIX); else the same numa_node is NODE, else SYS.
  unsigned numa_node = 0;
  unsigned pcie_switch = 0;
  bool mig_capable = false;
  CapSet unsupported;
  std::array<Timeline, kNumFields> fields;
  std::vector<ProcessList> processes;  // sorted by at_s, first at 0
  bool mig_enabled = false;
  std::vector<MigInstanceSpec> mig;
  double lost_at_s = kNever;

  double Value(Field f, double t_s) const;
  // Counter value at t_s: the last value set for it plus the integral of its rate since then.
  double Counter(Field f, double t_s) const;
  const std::vector<ProcessSpec>& ProcessesAt(double t_s) const;
};

struct ErrorRule {
  std::optional<Fn> fn;  // nullopt: "*", every function InAllErrorsScope
  nvmlReturn_t code = NVML_ERROR_UNKNOWN;
  std::optional<unsigned> gpu;  // nullopt: every GPU and the system-level functions
  double from_s = 0;
  double until_s = kNever;
};

struct XidSpec {
  double at_s = 0;
  unsigned gpu = 0;
  unsigned long long code = 0;
  unsigned gpu_instance_id = kNoInstance;
  unsigned compute_instance_id = kNoInstance;
};

struct Scenario {
  std::string driver_version = "550.90.07";
  std::string nvml_version = "12.550.90.07";
  int cuda_driver_version = 12040;
  // Emulates R535.43–535.86: _v3 writes 32-byte nvmlProcessDetail_v1_t records (see
  // nvml_api.h). Opt-in only, since a caller that trusts _v3 gets its array overrun.
  bool v3_process_detail_layout = false;
  std::vector<GpuSpec> gpus;
  std::vector<ErrorRule> errors;  // first match wins
  std::vector<XidSpec> xids;      // sorted by at_s, ties in file order
};

// Loads GPUWATCH_MOCK_NVML's value: a shape ("8xH100") or the path of a JSON scenario file.
// The error message is one line that starts with the shape or path.
Result<Scenario> LoadScenario(std::string_view spec);
// Parses scenario JSON text; `origin` prefixes error messages (the file path).
Result<Scenario> ParseScenarioJson(std::string_view text, std::string_view origin);

// Error codes by name ("NVML_ERROR_GPU_IS_LOST"), and nvmlErrorString's text.
std::optional<nvmlReturn_t> ErrorCodeFromName(std::string_view name);
const char* ErrorCodeText(nvmlReturn_t code);

}  // namespace gpuwatch::mock_nvml
