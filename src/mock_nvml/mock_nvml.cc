// libgpuwatch-mock-nvml.so: the NVML entry points of GPUWATCH_NVML_FUNCTIONS over a Scenario.
//
// The production loader dlopens this library exactly as it would libnvidia-ml.so.1, so tests
// exercise the real loading path. The scenario comes from GPUWATCH_MOCK_NVML (a shape such as
// 8xH100, or a JSON file; docs/format/mock-nvml-scenario.md) at the first nvmlInit_v2; scenario
// time is seconds since then, multiplied by GPUWATCH_MOCK_NVML_TIME_SCALE.
//
// Thread-safety: like NVML, every entry point may be called from any thread. One mutex guards
// all state; nvmlEventSetWait_v2 sleeps without it (until the next XID is due, at most 50 ms at
// a time), so device queries on one thread are never held up by a waiter on another. No C++
// exception leaves an entry point.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collect/nvml_api.h"
#include "mock_nvml/internal/scenario.h"

#define GPUWATCH_MOCK_EXPORT __attribute__((visibility("default")))

// Declared from the table, so a definition below whose parameters differ from the table is a
// compile error ("conflicting declaration of C function") rather than a wrong ABI.
#define GPUWATCH_MOCK_DECLARE(name, args) extern "C" GPUWATCH_MOCK_EXPORT nvmlReturn_t name args;
GPUWATCH_NVML_FUNCTIONS(GPUWATCH_MOCK_DECLARE)
#undef GPUWATCH_MOCK_DECLARE
extern "C" GPUWATCH_MOCK_EXPORT const char* nvmlErrorString(nvmlReturn_t result);

namespace gpuwatch::mock_nvml {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kMib = 1024.0 * 1024.0;
// Longest single sleep of nvmlEventSetWait_v2: bounds how late a shutdown is seen. An XID is
// not late: the wait sleeps exactly until the next one falls due. Short slices would make the
// mock burn CPU that real NVML (blocked in the kernel) does not, and the agent benchmark runs
// on the mock.
constexpr auto kWaitSlice = std::chrono::milliseconds(50);

struct EventSet {
  std::array<unsigned long long, kMaxGpus> registered{};  // event-type mask per GPU
  std::vector<bool> delivered;                            // per Scenario::xids entry
};

struct GpmSample {
  bool filled = false;
  unsigned gpu = 0;
  std::optional<unsigned> gpu_instance_id;  // set by nvmlGpmMigSampleGet
  double t_s = 0;
  std::array<double, kNumGpm> integrals{};  // ∫ percent dt over [0, t_s]
};

struct State {
  std::mutex mu;
  int refcount = 0;
  Scenario scenario;
  Clock::time_point start;
  double time_scale = 1;
  // Handles are the addresses of these objects; they are looked up before every use, so a
  // freed or foreign handle is an INVALID_ARGUMENT instead of a dangling dereference.
  std::vector<std::unique_ptr<EventSet>> event_sets;
  std::vector<std::unique_ptr<GpmSample>> gpm_samples;

  double NowS() const {
    return std::chrono::duration<double>(Clock::now() - start).count() * time_scale;
  }
};

// Leaked on purpose: a thread still inside the library at process exit never meets a
// destroyed mutex.
State& TheState() {
  static State* state = new State;
  return *state;
}

// Device handles are addresses in this table. It outlives every init/shutdown cycle, so a
// stale or forged handle fails a bounds check instead of being dereferenced. Slot
// gpu * kSlotsPerGpu is the GPU itself; the next kMaxMigDevices slots are its MIG devices.
constexpr size_t kSlotsPerGpu = 1 + kMaxMigDevices;
struct alignas(8) HandleSlot {
  unsigned char unused[8];
};
HandleSlot g_slots[kMaxGpus * kSlotsPerGpu];

nvmlDevice_t HandleOf(unsigned gpu, int mig_index) {
  return reinterpret_cast<nvmlDevice_t>(
      &g_slots[gpu * kSlotsPerGpu + static_cast<size_t>(1 + mig_index)]);
}

struct Target {
  const GpuSpec* gpu = nullptr;
  const MigInstanceSpec* mig = nullptr;  // set for a MIG device handle
};

std::optional<Target> Decode(const State& s, nvmlDevice_t device) {
  auto p = reinterpret_cast<uintptr_t>(device);
  auto base = reinterpret_cast<uintptr_t>(&g_slots[0]);
  if (p < base || p >= base + sizeof(g_slots) || (p - base) % sizeof(HandleSlot) != 0) {
    return std::nullopt;
  }
  size_t slot = (p - base) / sizeof(HandleSlot);
  size_t gpu = slot / kSlotsPerGpu;
  size_t sub = slot % kSlotsPerGpu;
  if (gpu >= s.scenario.gpus.size()) return std::nullopt;
  const GpuSpec& g = s.scenario.gpus[gpu];
  if (sub == 0) return Target{&g, nullptr};
  if (!g.mig_enabled || sub - 1 >= g.mig.size()) return std::nullopt;
  return Target{&g, &g.mig[sub - 1]};
}

// The functions NVML answers for a MIG device handle; any other answers NOT_SUPPORTED.
bool AcceptsMigHandle(Fn fn) {
  switch (fn) {
    case Fn::nvmlDeviceGetName:
    case Fn::nvmlDeviceGetUUID:
    case Fn::nvmlDeviceGetMemoryInfo:
    case Fn::nvmlDeviceGetMemoryInfo_v2:
    case Fn::nvmlDeviceGetGpuInstanceId:
    case Fn::nvmlDeviceGetComputeInstanceId:
    case Fn::nvmlDeviceGetComputeRunningProcesses_v3:
    case Fn::nvmlDeviceGetComputeRunningProcesses_v2:
      return true;
    default:
      return false;
  }
}

std::optional<nvmlReturn_t> Injected(const Scenario& sc, Fn fn, std::optional<unsigned> gpu,
                                     double t_s) {
  for (const ErrorRule& rule : sc.errors) {
    if (rule.fn ? *rule.fn != fn : !InAllErrorsScope(fn)) continue;
    if (rule.gpu && rule.gpu != gpu) continue;
    if (t_s < rule.from_s || t_s >= rule.until_s) continue;
    return rule.code;
  }
  return std::nullopt;
}

// Entry-point prologues, in the order NVML checks: initialized, valid handle and arguments;
// then the scenario's injected error, a lost GPU, a MIG handle where only a GPU will do, and
// an unsupported function. Body: nvmlReturn_t(State&, double t_s) or (State&, Target, t_s).
template <typename Body>
nvmlReturn_t SystemCall(Fn fn, bool args_ok, Body&& body) noexcept {
  try {
    State& s = TheState();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (!args_ok) return NVML_ERROR_INVALID_ARGUMENT;
    double t = s.NowS();
    if (std::optional<nvmlReturn_t> code = Injected(s.scenario, fn, std::nullopt, t)) return *code;
    return body(s, t);
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

template <typename Body>
nvmlReturn_t Checked(State& s, Fn fn, const Target& target, Body& body) {
  double t = s.NowS();
  const GpuSpec& gpu = *target.gpu;
  if (std::optional<nvmlReturn_t> code = Injected(s.scenario, fn, gpu.index, t)) return *code;
  if (t >= gpu.lost_at_s) return NVML_ERROR_GPU_IS_LOST;
  if (target.mig != nullptr && !AcceptsMigHandle(fn)) return NVML_ERROR_NOT_SUPPORTED;
  if (gpu.unsupported.test(CapOf(fn))) return NVML_ERROR_NOT_SUPPORTED;
  return body(s, target, t);
}

template <typename Body>
nvmlReturn_t DeviceCall(Fn fn, nvmlDevice_t device, bool args_ok, Body&& body) noexcept {
  try {
    State& s = TheState();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
    std::optional<Target> target = Decode(s, device);
    if (!target || !args_ok) return NVML_ERROR_INVALID_ARGUMENT;
    return Checked(s, fn, *target, body);
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

nvmlReturn_t CopyString(const std::string& value, char* buffer, unsigned length) {
  if (value.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buffer, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

unsigned Round(double v) { return static_cast<unsigned>(std::lround(std::max(0.0, v))); }
unsigned long long RoundLl(double v) {
  return static_cast<unsigned long long>(std::llround(std::max(0.0, v)));
}
unsigned long long FloorLl(double v) {
  return static_cast<unsigned long long>(std::floor(std::max(0.0, v)));
}

// Used memory of a GPU, kept within what the reserved area leaves. In MIG mode it is what the
// instances use, as on real hardware.
double UsedMib(const GpuSpec& gpu, double t) {
  double total = gpu.Value(Field::kMemoryTotalMib, t);
  double reserved = std::min(gpu.Value(Field::kMemoryReservedMib, t), total);
  double used = gpu.Value(Field::kMemoryUsedMib, t);
  if (gpu.mig_enabled) {
    used = 0;
    for (const MigInstanceSpec& m : gpu.mig) {
      used += std::clamp(m.memory_used_mib.At(t), 0.0, m.memory_total_mib);
    }
  }
  return std::min(used, total - reserved);
}

void FillPciInfo(unsigned domain, unsigned bus, unsigned device, unsigned function,
                 unsigned device_id, unsigned subsystem_id, nvmlPciInfo_t* pci) {
  std::memset(pci, 0, sizeof(*pci));
  // NVML writes upper-case hex, unlike sysfs.
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", domain & 0xFFFF,
                bus, device, function);
  std::snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", domain, bus, device, function);
  pci->domain = domain;
  pci->bus = bus;
  pci->device = device;
  pci->pciDeviceId = device_id;
  pci->pciSubSystemId = subsystem_id;
}

unsigned long long SupportedEvents(const GpuSpec& gpu) {
  unsigned long long types =
      nvmlEventTypeXidCriticalError | nvmlEventTypePState | nvmlEventTypeClock;
  if (!gpu.unsupported.test(CapOf(Fn::nvmlDeviceGetTotalEccErrors))) {
    types |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
  }
  if (gpu.mig_capable) types |= nvmlEventMigConfigChange;
  return types;
}

// NvLink link checks shared by the per-link functions: links past NVML's table are invalid,
// links this GPU lacks are unsupported.
nvmlReturn_t CheckLink(const GpuSpec& gpu, unsigned link) {
  if (gpu.nvlink_count == 0 || link >= gpu.nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

template <typename T>
T* FindHandle(const std::vector<std::unique_ptr<T>>& owned, const void* handle) {
  for (const auto& p : owned) {
    if (p.get() == handle) return p.get();
  }
  return nullptr;
}

std::optional<size_t> GpmIndexOf(unsigned metric_id) {
  switch (metric_id) {
    case NVML_GPM_METRIC_GRAPHICS_UTIL:
      return kGpmGraphics;
    case NVML_GPM_METRIC_SM_UTIL:
      return kGpmSm;
    case NVML_GPM_METRIC_SM_OCCUPANCY:
      return kGpmSmOccupancy;
    case NVML_GPM_METRIC_ANY_TENSOR_UTIL:
      return kGpmTensor;
    case NVML_GPM_METRIC_DRAM_BW_UTIL:
      return kGpmDram;
    default:
      return std::nullopt;
  }
}

struct GpmInfo {
  const char* short_name;
  const char* long_name;
};
constexpr GpmInfo kGpmInfo[kNumGpm] = {
    {"GR_UTIL", "Graphics engine utilization"},
    {"SM_UTIL", "SM utilization"},
    {"SM_OCCUP", "SM occupancy"},
    {"TENSOR_UTIL", "Any tensor pipe utilization"},
    {"DRAM_BW_UTIL", "DRAM bandwidth utilization"},
};

nvmlReturn_t RunningProcesses(Fn fn, nvmlDevice_t device, unsigned int* info_count,
                              nvmlProcessInfo_t* infos) {
  return DeviceCall(
      fn, device, info_count != nullptr, [&](State& s, Target d, double t) -> nvmlReturn_t {
        std::vector<ProcessSpec> procs;
        for (const ProcessSpec& p : d.gpu->ProcessesAt(t)) {
          if (d.mig != nullptr && (p.gpu_instance_id != d.mig->gpu_instance_id ||
                                   p.compute_instance_id != d.mig->compute_instance_id)) {
            continue;
          }
          procs.push_back(p);
        }
        if (*info_count < procs.size()) {
          *info_count = static_cast<unsigned>(procs.size());
          return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        if (infos == nullptr && !procs.empty()) return NVML_ERROR_INVALID_ARGUMENT;
        const bool detail = fn == Fn::nvmlDeviceGetComputeRunningProcesses_v3 &&
                            s.scenario.v3_process_detail_layout;
        for (size_t i = 0; i < procs.size(); ++i) {
          const ProcessSpec& p = procs[i];
          unsigned long long used = p.used_memory_mib
                                        ? static_cast<unsigned long long>(*p.used_memory_mib * kMib)
                                        : NVML_VALUE_NOT_AVAILABLE;
          if (detail) {
            // The R535.43–535.86 quirk: 32-byte records where the caller expects 24.
            auto* out = reinterpret_cast<nvmlProcessDetail_v1_t*>(infos) + i;
            *out = nvmlProcessDetail_v1_t{p.pid, used, p.gpu_instance_id, p.compute_instance_id, 0};
          } else {
            infos[i] = nvmlProcessInfo_t{p.pid, used, p.gpu_instance_id, p.compute_instance_id};
          }
        }
        *info_count = static_cast<unsigned>(procs.size());
        return NVML_SUCCESS;
      });
}

Result<double> TimeScaleFromEnv() {
  const char* text = std::getenv("GPUWATCH_MOCK_NVML_TIME_SCALE");
  if (text == nullptr || *text == '\0') return 1.0;
  char* end = nullptr;
  double scale = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(scale) || scale <= 0 || scale > 1e6) {
    return Status::InvalidArgument(std::string("GPUWATCH_MOCK_NVML_TIME_SCALE=") + text +
                                   ": expected a number > 0 and <= 1e6");
  }
  return scale;
}

// The one line a broken configuration prints: tests and users see why init failed.
void Complain(std::string message) {
  std::replace(message.begin(), message.end(), '\n', ' ');
  std::fprintf(stderr, "gpuwatch-mock-nvml: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace
}  // namespace gpuwatch::mock_nvml

using gpuwatch::Result;
using gpuwatch::mock_nvml::DeviceCall;
using gpuwatch::mock_nvml::Field;
using gpuwatch::mock_nvml::Fn;
using gpuwatch::mock_nvml::GpuSpec;
using gpuwatch::mock_nvml::kMaxMigDevices;
using gpuwatch::mock_nvml::kMib;
using gpuwatch::mock_nvml::Round;
using gpuwatch::mock_nvml::RoundLl;
using gpuwatch::mock_nvml::State;
using gpuwatch::mock_nvml::SystemCall;
using gpuwatch::mock_nvml::Target;
using gpuwatch::mock_nvml::TheState;

// ----------------------------------------------------------------------------------------------
// Life cycle and system queries.

extern "C" nvmlReturn_t nvmlInit_v2(void) {
  namespace sim = gpuwatch::mock_nvml;
  try {
    State& s = TheState();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.refcount > 0) {
      ++s.refcount;
      return NVML_SUCCESS;
    }
    const char* spec = std::getenv("GPUWATCH_MOCK_NVML");
    Result<sim::Scenario> scenario = sim::LoadScenario(spec != nullptr ? spec : "");
    if (!scenario.ok()) {
      sim::Complain(scenario.status().message());
      return NVML_ERROR_UNKNOWN;
    }
    Result<double> scale = sim::TimeScaleFromEnv();
    if (!scale.ok()) {
      sim::Complain(scale.status().message());
      return NVML_ERROR_UNKNOWN;
    }
    // An injected init failure ("driver not loaded") is the scenario working, not a mistake:
    // no message.
    if (auto code = sim::Injected(*scenario, Fn::nvmlInit_v2, std::nullopt, 0)) return *code;
    s.scenario = std::move(*scenario);
    s.time_scale = *scale;
    s.start = sim::Clock::now();
    s.refcount = 1;
    return NVML_SUCCESS;
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

extern "C" nvmlReturn_t nvmlShutdown(void) {
  try {
    State& s = TheState();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (auto code =
            gpuwatch::mock_nvml::Injected(s.scenario, Fn::nvmlShutdown, std::nullopt, s.NowS())) {
      return *code;
    }
    if (--s.refcount == 0) {
      s.scenario = gpuwatch::mock_nvml::Scenario{};
      s.event_sets.clear();
      s.gpm_samples.clear();
    }
    return NVML_SUCCESS;
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

extern "C" const char* nvmlErrorString(nvmlReturn_t result) {
  return gpuwatch::mock_nvml::ErrorCodeText(result);
}

extern "C" nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return SystemCall(
      Fn::nvmlSystemGetDriverVersion, version != nullptr, [&](State& s, double) -> nvmlReturn_t {
        return gpuwatch::mock_nvml::CopyString(s.scenario.driver_version, version, length);
      });
}

extern "C" nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return SystemCall(
      Fn::nvmlSystemGetNVMLVersion, version != nullptr, [&](State& s, double) -> nvmlReturn_t {
        return gpuwatch::mock_nvml::CopyString(s.scenario.nvml_version, version, length);
      });
}

extern "C" nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion) {
  return SystemCall(Fn::nvmlSystemGetCudaDriverVersion_v2, cudaDriverVersion != nullptr,
                    [&](State& s, double) -> nvmlReturn_t {
                      *cudaDriverVersion = s.scenario.cuda_driver_version;
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  return SystemCall(Fn::nvmlDeviceGetCount_v2, deviceCount != nullptr,
                    [&](State& s, double) -> nvmlReturn_t {
                      *deviceCount = static_cast<unsigned>(s.scenario.gpus.size());
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  try {
    State& s = TheState();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (device == nullptr || index >= s.scenario.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
    auto body = [&](State&, Target, double) -> nvmlReturn_t {
      *device = gpuwatch::mock_nvml::HandleOf(index, -1);
      return NVML_SUCCESS;
    };
    return gpuwatch::mock_nvml::Checked(s, Fn::nvmlDeviceGetHandleByIndex_v2,
                                        Target{&s.scenario.gpus[index], nullptr}, body);
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

// ----------------------------------------------------------------------------------------------
// Identity.

extern "C" nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  return DeviceCall(Fn::nvmlDeviceGetName, device, name != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      std::string value = d.gpu->name;
                      if (d.mig != nullptr) value += " MIG " + d.mig->profile;
                      return gpuwatch::mock_nvml::CopyString(value, name, length);
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  return DeviceCall(Fn::nvmlDeviceGetUUID, device, uuid != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      return gpuwatch::mock_nvml::CopyString(
                          d.mig != nullptr ? d.mig->uuid : d.gpu->uuid, uuid, length);
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial,
                                            unsigned int length) {
  return DeviceCall(Fn::nvmlDeviceGetSerial, device, serial != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      return gpuwatch::mock_nvml::CopyString(d.gpu->serial, serial, length);
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char* version,
                                                  unsigned int length) {
  return DeviceCall(Fn::nvmlDeviceGetVbiosVersion, device, version != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      return gpuwatch::mock_nvml::CopyString(d.gpu->vbios_version, version, length);
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return DeviceCall(Fn::nvmlDeviceGetPciInfo_v3, device, pci != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      const GpuSpec& g = *d.gpu;
                      gpuwatch::mock_nvml::FillPciInfo(g.pci_domain, g.pci_bus, g.pci_device,
                                                       g.pci_function, g.pci_device_id,
                                                       g.pci_subsystem_id, pci);
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minorNumber) {
  return DeviceCall(Fn::nvmlDeviceGetMinorNumber, device, minorNumber != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      *minorNumber = d.gpu->minor_number;
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device,
                                                  nvmlDeviceArchitecture_t* arch) {
  return DeviceCall(Fn::nvmlDeviceGetArchitecture, device, arch != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      *arch = d.gpu->architecture;
                      return NVML_SUCCESS;
                    });
}

// ----------------------------------------------------------------------------------------------
// Utilization, memory, thermals, power, clocks.

extern "C" nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                      nvmlUtilization_t* utilization) {
  return DeviceCall(Fn::nvmlDeviceGetUtilizationRates, device, utilization != nullptr,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      // As on real hardware: a GPU in MIG mode has no whole-GPU utilization.
                      if (d.gpu->mig_enabled) return NVML_ERROR_NOT_SUPPORTED;
                      utilization->gpu = Round(d.gpu->Value(Field::kUtilGpuPct, t));
                      utilization->memory = Round(d.gpu->Value(Field::kUtilMemPct, t));
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  return DeviceCall(Fn::nvmlDeviceGetMemoryInfo, device, memory != nullptr,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      if (d.mig != nullptr) {
                        double total = d.mig->memory_total_mib;
                        double used = std::clamp(d.mig->memory_used_mib.At(t), 0.0, total);
                        memory->total = RoundLl(total * kMib);
                        memory->used = RoundLl(used * kMib);
                        memory->free = memory->total - memory->used;
                        return NVML_SUCCESS;
                      }
                      // v1 counts the reserved area as used.
                      const GpuSpec& g = *d.gpu;
                      double total = g.Value(Field::kMemoryTotalMib, t);
                      double reserved = std::min(g.Value(Field::kMemoryReservedMib, t), total);
                      memory->total = RoundLl(total * kMib);
                      memory->used =
                          RoundLl((gpuwatch::mock_nvml::UsedMib(g, t) + reserved) * kMib);
                      memory->free = memory->total - std::min(memory->used, memory->total);
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  return DeviceCall(Fn::nvmlDeviceGetMemoryInfo_v2, device, memory != nullptr,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      if (memory->version != nvmlMemory_v2)
                        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
                      double total, reserved, used;
                      if (d.mig != nullptr) {
                        total = d.mig->memory_total_mib;
                        reserved = 0;
                        used = std::clamp(d.mig->memory_used_mib.At(t), 0.0, total);
                      } else {
                        total = d.gpu->Value(Field::kMemoryTotalMib, t);
                        reserved = std::min(d.gpu->Value(Field::kMemoryReservedMib, t), total);
                        used = gpuwatch::mock_nvml::UsedMib(*d.gpu, t);
                      }
                      memory->total = RoundLl(total * kMib);
                      memory->reserved = RoundLl(reserved * kMib);
                      memory->used = RoundLl(used * kMib);
                      unsigned long long taken = memory->reserved + memory->used;
                      memory->free = memory->total - std::min(taken, memory->total);
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                 nvmlTemperatureSensors_t sensorType,
                                                 unsigned int* temp) {
  return DeviceCall(Fn::nvmlDeviceGetTemperature, device,
                    temp != nullptr && sensorType == NVML_TEMPERATURE_GPU,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      *temp = Round(d.gpu->Value(Field::kTempC, t));
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  return DeviceCall(Fn::nvmlDeviceGetPowerUsage, device, power != nullptr,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      *power = Round(d.gpu->Value(Field::kPowerW, t) * 1000);
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit) {
  return DeviceCall(Fn::nvmlDeviceGetEnforcedPowerLimit, device, limit != nullptr,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      *limit = Round(d.gpu->Value(Field::kPowerLimitW, t) * 1000);
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                            unsigned long long* energy) {
  return DeviceCall(Fn::nvmlDeviceGetTotalEnergyConsumption, device, energy != nullptr,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      *energy = gpuwatch::mock_nvml::FloorLl(d.gpu->Counter(Field::kEnergyMj, t));
                      return NVML_SUCCESS;
                    });
}

namespace {
std::optional<Field> ClockField(nvmlClockType_t type, bool max) {
  switch (type) {
    case NVML_CLOCK_GRAPHICS:
      return max ? Field::kMaxGraphicsClockMhz : Field::kGraphicsClockMhz;
    case NVML_CLOCK_SM:
      return max ? Field::kMaxSmClockMhz : Field::kSmClockMhz;
    case NVML_CLOCK_MEM:
      return max ? Field::kMaxMemClockMhz : Field::kMemClockMhz;
    case NVML_CLOCK_VIDEO:
      return max ? Field::kMaxVideoClockMhz : Field::kVideoClockMhz;
  }
  return std::nullopt;
}
}  // namespace

extern "C" nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                               unsigned int* clock) {
  std::optional<Field> field = ClockField(type, false);
  return DeviceCall(Fn::nvmlDeviceGetClockInfo, device, clock != nullptr && field.has_value(),
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      *clock = Round(d.gpu->Value(*field, t));
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                  unsigned int* clock) {
  std::optional<Field> field = ClockField(type, true);
  return DeviceCall(Fn::nvmlDeviceGetMaxClockInfo, device, clock != nullptr && field.has_value(),
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      *clock = Round(d.gpu->Value(*field, t));
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(
    nvmlDevice_t device, unsigned long long* clocksEventReasons) {
  return DeviceCall(Fn::nvmlDeviceGetCurrentClocksEventReasons, device,
                    clocksEventReasons != nullptr, [&](State&, Target d, double t) -> nvmlReturn_t {
                      *clocksEventReasons = RoundLl(d.gpu->Value(Field::kClockEventReasons, t));
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(
    nvmlDevice_t device, unsigned long long* clocksThrottleReasons) {
  return DeviceCall(Fn::nvmlDeviceGetCurrentClocksThrottleReasons, device,
                    clocksThrottleReasons != nullptr,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      *clocksThrottleReasons = RoundLl(d.gpu->Value(Field::kClockEventReasons, t));
                      return NVML_SUCCESS;
                    });
}

// ----------------------------------------------------------------------------------------------
// ECC, retired pages, remapped rows.

extern "C" nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                    nvmlMemoryErrorType_t errorType,
                                                    nvmlEccCounterType_t counterType,
                                                    unsigned long long* eccCounts) {
  bool valid = eccCounts != nullptr &&
               (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED ||
                errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED) &&
               (counterType == NVML_VOLATILE_ECC || counterType == NVML_AGGREGATE_ECC);
  return DeviceCall(Fn::nvmlDeviceGetTotalEccErrors, device, valid,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      bool corrected = errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED;
                      Field f =
                          counterType == NVML_VOLATILE_ECC
                              ? (corrected ? Field::kEccSbeVolatile : Field::kEccDbeVolatile)
                              : (corrected ? Field::kEccSbeAggregate : Field::kEccDbeAggregate);
                      *eccCounts = RoundLl(d.gpu->Value(f, t));
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device,
                                                  nvmlPageRetirementCause_t cause,
                                                  unsigned int* pageCount,
                                                  unsigned long long* addresses) {
  bool dbe = cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR;
  bool valid = pageCount != nullptr &&
               (dbe || cause == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS);
  return DeviceCall(
      Fn::nvmlDeviceGetRetiredPages, device, valid,
      [&](State&, Target d, double t) -> nvmlReturn_t {
        unsigned count =
            Round(d.gpu->Value(dbe ? Field::kRetiredPagesDbe : Field::kRetiredPagesSbe, t));
        if (*pageCount < count) {
          *pageCount = count;
          return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        if (addresses == nullptr && count > 0) return NVML_ERROR_INVALID_ARGUMENT;
        // Page addresses only need to be distinct and stable; SBE and DBE pages never coincide.
        for (unsigned i = 0; i < count; ++i) {
          addresses[i] = (dbe ? 0x200000000ULL : 0x100000000ULL) + 0x1000ULL * (i + 1);
        }
        *pageCount = count;
        return NVML_SUCCESS;
      });
}

extern "C" nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                               nvmlEnableState_t* isPending) {
  return DeviceCall(Fn::nvmlDeviceGetRetiredPagesPendingStatus, device, isPending != nullptr,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      *isPending = Round(d.gpu->Value(Field::kRetiredPagesPending, t)) != 0
                                       ? NVML_FEATURE_ENABLED
                                       : NVML_FEATURE_DISABLED;
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corrRows,
                                                  unsigned int* uncRows, unsigned int* isPending,
                                                  unsigned int* failureOccurred) {
  bool valid = corrRows != nullptr && uncRows != nullptr && isPending != nullptr &&
               failureOccurred != nullptr;
  return DeviceCall(Fn::nvmlDeviceGetRemappedRows, device, valid,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      *corrRows = Round(d.gpu->Value(Field::kRemappedRowsCorrectable, t));
                      *uncRows = Round(d.gpu->Value(Field::kRemappedRowsUncorrectable, t));
                      *isPending = Round(d.gpu->Value(Field::kRemappedRowsPending, t));
                      *failureOccurred = Round(d.gpu->Value(Field::kRemappedRowsFailure, t));
                      return NVML_SUCCESS;
                    });
}

// ----------------------------------------------------------------------------------------------
// PCIe.

extern "C" nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device,
                                                    nvmlPcieUtilCounter_t counter,
                                                    unsigned int* value) {
  bool valid = value != nullptr &&
               (counter == NVML_PCIE_UTIL_TX_BYTES || counter == NVML_PCIE_UTIL_RX_BYTES);
  return DeviceCall(Fn::nvmlDeviceGetPcieThroughput, device, valid,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      Field f = counter == NVML_PCIE_UTIL_TX_BYTES ? Field::kPcieTxKbPerS
                                                                   : Field::kPcieRxKbPerS;
                      *value = Round(d.gpu->Value(f, t));
                      return NVML_SUCCESS;
                    });
}

namespace {
nvmlReturn_t UintValue(Fn fn, nvmlDevice_t device, Field field, unsigned int* out) {
  return DeviceCall(fn, device, out != nullptr, [&](State&, Target d, double t) -> nvmlReturn_t {
    *out = Round(d.gpu->Value(field, t));
    return NVML_SUCCESS;
  });
}
}  // namespace

extern "C" nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int* value) {
  return UintValue(Fn::nvmlDeviceGetPcieReplayCounter, device, Field::kPcieReplay, value);
}

extern "C" nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device,
                                                            unsigned int* currLinkGen) {
  return UintValue(Fn::nvmlDeviceGetCurrPcieLinkGeneration, device, Field::kPcieGen, currLinkGen);
}

extern "C" nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device,
                                                       unsigned int* currLinkWidth) {
  return UintValue(Fn::nvmlDeviceGetCurrPcieLinkWidth, device, Field::kPcieWidth, currLinkWidth);
}

extern "C" nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device,
                                                           unsigned int* maxLinkGen) {
  return UintValue(Fn::nvmlDeviceGetMaxPcieLinkGeneration, device, Field::kPcieMaxGen, maxLinkGen);
}

extern "C" nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device,
                                                      unsigned int* maxLinkWidth) {
  return UintValue(Fn::nvmlDeviceGetMaxPcieLinkWidth, device, Field::kPcieMaxWidth, maxLinkWidth);
}

extern "C" nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed) {
  return UintValue(Fn::nvmlDeviceGetFanSpeed, device, Field::kFanPct, speed);
}

// ----------------------------------------------------------------------------------------------
// NVLink and field values.

extern "C" nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                 nvmlEnableState_t* isActive) {
  return DeviceCall(Fn::nvmlDeviceGetNvLinkState, device,
                    isActive != nullptr && link < NVML_NVLINK_MAX_LINKS,
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      if (nvmlReturn_t rc = gpuwatch::mock_nvml::CheckLink(*d.gpu, link)) return rc;
                      *isActive = link < Round(d.gpu->Value(Field::kNvlinkActiveLinks, t))
                                      ? NVML_FEATURE_ENABLED
                                      : NVML_FEATURE_DISABLED;
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                        nvmlNvLinkErrorCounter_t counter,
                                                        unsigned long long* counterValue) {
  std::optional<Field> field;
  switch (counter) {
    case NVML_NVLINK_ERROR_DL_REPLAY:
      field = Field::kNvlinkReplayErrors;
      break;
    case NVML_NVLINK_ERROR_DL_RECOVERY:
      field = Field::kNvlinkRecoveryErrors;
      break;
    case NVML_NVLINK_ERROR_DL_CRC_FLIT:
      field = Field::kNvlinkCrcFlitErrors;
      break;
    case NVML_NVLINK_ERROR_DL_CRC_DATA:
      field = Field::kNvlinkCrcDataErrors;
      break;
    case NVML_NVLINK_ERROR_DL_ECC_DATA:
      field = Field::kNvlinkEccDataErrors;
      break;
  }
  return DeviceCall(Fn::nvmlDeviceGetNvLinkErrorCounter, device,
                    counterValue != nullptr && link < NVML_NVLINK_MAX_LINKS && field.has_value(),
                    [&](State&, Target d, double t) -> nvmlReturn_t {
                      if (nvmlReturn_t rc = gpuwatch::mock_nvml::CheckLink(*d.gpu, link)) return rc;
                      *counterValue = RoundLl(d.gpu->Value(*field, t));
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                            nvmlPciInfo_t* pci) {
  return DeviceCall(Fn::nvmlDeviceGetNvLinkRemotePciInfo_v2, device,
                    pci != nullptr && link < NVML_NVLINK_MAX_LINKS,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      if (nvmlReturn_t rc = gpuwatch::mock_nvml::CheckLink(*d.gpu, link)) return rc;
                      // HGX boards: H100 links go to 4 NVSwitches, A100 links to 6.
                      bool hopper = d.gpu->model == gpuwatch::mock_nvml::Model::kH100;
                      unsigned nvswitch = link % (hopper ? 4 : 6);
                      gpuwatch::mock_nvml::FillPciInfo(0, 0xC5 + nvswitch, 0, 0,
                                                       hopper ? 0x22A310DE : 0x1AF110DE, 0, pci);
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link,
                                                   unsigned int* version) {
  return DeviceCall(Fn::nvmlDeviceGetNvLinkVersion, device,
                    version != nullptr && link < NVML_NVLINK_MAX_LINKS,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      if (nvmlReturn_t rc = gpuwatch::mock_nvml::CheckLink(*d.gpu, link)) return rc;
                      if (d.gpu->nvlink_version == 0) return NVML_ERROR_NOT_SUPPORTED;
                      *version = d.gpu->nvlink_version;
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(
    nvmlDevice_t device, unsigned int link, nvmlIntNvLinkDeviceType_t* pNvLinkDeviceType) {
  return DeviceCall(Fn::nvmlDeviceGetNvLinkRemoteDeviceType, device,
                    pNvLinkDeviceType != nullptr && link < NVML_NVLINK_MAX_LINKS,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      if (nvmlReturn_t rc = gpuwatch::mock_nvml::CheckLink(*d.gpu, link)) return rc;
                      // Every mock NVLink goes to an NVSwitch (see RemotePciInfo above).
                      *pNvLinkDeviceType = NVML_NVLINK_DEVICE_TYPE_SWITCH;
                      return NVML_SUCCESS;
                    });
}

namespace gpuwatch::mock_nvml {
namespace {

// Both handles must be whole GPUs of the scenario; NVML answers INVALID_ARGUMENT otherwise.
template <typename Body>
nvmlReturn_t PairCall(Fn fn, nvmlDevice_t device1, nvmlDevice_t device2, bool args_ok,
                      Body&& body) noexcept {
  try {
    State& s = TheState();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
    std::optional<Target> a = Decode(s, device1), b = Decode(s, device2);
    if (!a || !b || a->mig != nullptr || b->mig != nullptr || !args_ok) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    auto inner = [&](State& st, Target ta, double t) -> nvmlReturn_t {
      if (t >= b->gpu->lost_at_s) return NVML_ERROR_GPU_IS_LOST;
      return body(st, *ta.gpu, *b->gpu, t);
    };
    return Checked(s, fn, *a, inner);
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

bool NvlinkUp(const GpuSpec& g, double t) {
  return g.nvlink_count > 0 && Round(g.Value(Field::kNvlinkActiveLinks, t)) > 0;
}

}  // namespace
}  // namespace gpuwatch::mock_nvml

extern "C" nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1,
                                                            nvmlDevice_t device2,
                                                            nvmlGpuTopologyLevel_t* pathInfo) {
  using gpuwatch::mock_nvml::GpuSpec;
  return gpuwatch::mock_nvml::PairCall(
      Fn::nvmlDeviceGetTopologyCommonAncestor, device1, device2, pathInfo != nullptr,
      [&](State&, const GpuSpec& a, const GpuSpec& b, double) -> nvmlReturn_t {
        if (a.index == b.index) {
          *pathInfo = NVML_TOPOLOGY_INTERNAL;
        } else if (a.pcie_switch == b.pcie_switch) {
          *pathInfo = NVML_TOPOLOGY_SINGLE;
        } else if (a.numa_node == b.numa_node) {
          *pathInfo = NVML_TOPOLOGY_NODE;
        } else {
          *pathInfo = NVML_TOPOLOGY_SYSTEM;
        }
        return NVML_SUCCESS;
      });
}

extern "C" nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                               nvmlGpuP2PCapsIndex_t p2pIndex,
                                               nvmlGpuP2PStatus_t* p2pStatus) {
  using gpuwatch::mock_nvml::GpuSpec;
  return gpuwatch::mock_nvml::PairCall(
      Fn::nvmlDeviceGetP2PStatus, device1, device2,
      p2pStatus != nullptr && p2pIndex >= NVML_P2P_CAPS_INDEX_READ &&
          p2pIndex < NVML_P2P_CAPS_INDEX_UNKNOWN,
      [&](State&, const GpuSpec& a, const GpuSpec& b, double t) -> nvmlReturn_t {
        const bool nvlink =
            gpuwatch::mock_nvml::NvlinkUp(a, t) && gpuwatch::mock_nvml::NvlinkUp(b, t);
        if (p2pIndex == NVML_P2P_CAPS_INDEX_NVLINK) {
          *p2pStatus = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        } else if (nvlink) {
          *p2pStatus = NVML_P2P_STATUS_OK;
        } else if (a.model == gpuwatch::mock_nvml::Model::kRtx4090 ||
                   b.model == gpuwatch::mock_nvml::Model::kRtx4090) {
          // GeForce drivers report P2P as unsupported by the GPU.
          *p2pStatus = NVML_P2P_STATUS_GPU_NOT_SUPPORTED;
        } else if (a.numa_node != b.numa_node) {
          *p2pStatus = NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED;
        } else {
          *p2pStatus = NVML_P2P_STATUS_OK;
        }
        return NVML_SUCCESS;
      });
}

extern "C" nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                                 nvmlFieldValue_t* values) {
  namespace sim = gpuwatch::mock_nvml;
  return DeviceCall(
      Fn::nvmlDeviceGetFieldValues, device,
      valuesCount >= 0 && (values != nullptr || valuesCount == 0),
      [&](State&, Target d, double t) -> nvmlReturn_t {
        const GpuSpec& g = *d.gpu;
        long long now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
        for (int i = 0; i < valuesCount; ++i) {
          nvmlFieldValue_t& v = values[i];
          v.timestamp = now_us;
          v.latencyUsec = 0;
          v.nvmlReturn = NVML_SUCCESS;
          auto unsupported = [&](size_t cap) { return g.unsupported.test(cap); };
          switch (v.fieldId) {
            case NVML_FI_DEV_ECC_CURRENT:
              if (unsupported(sim::kCapEccField)) {
                v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
                break;
              }
              v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
              v.value.uiVal = 1;
              break;
            case NVML_FI_DEV_RETIRED_SBE:
            case NVML_FI_DEV_RETIRED_DBE:
              if (unsupported(sim::kCapRetiredField)) {
                v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
                break;
              }
              v.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
              v.value.ullVal =
                  RoundLl(g.Value(v.fieldId == NVML_FI_DEV_RETIRED_SBE ? Field::kRetiredPagesSbe
                                                                       : Field::kRetiredPagesDbe,
                                  t));
              break;
            case NVML_FI_DEV_RETIRED_PENDING:
              if (unsupported(sim::kCapRetiredField)) {
                v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
                break;
              }
              v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
              v.value.uiVal = Round(g.Value(Field::kRetiredPagesPending, t));
              break;
            case NVML_FI_DEV_MEMORY_TEMP:
              if (unsupported(sim::kCapMemTempField)) {
                v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
                break;
              }
              v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
              v.value.uiVal = Round(g.Value(Field::kMemTempC, t));
              break;
            case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
            case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
              if (unsupported(sim::kCapNvlinkField) || g.nvlink_count == 0) {
                v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
                break;
              }
              if (v.scopeId >= g.nvlink_count) {
                v.nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
                break;
              }
              v.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
              v.value.ullVal = sim::FloorLl(g.Counter(
                  v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? Field::kNvlinkTxKib
                                                                     : Field::kNvlinkRxKib,
                  t));
              break;
            default:
              v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
              break;
          }
        }
        return NVML_SUCCESS;
      });
}

// ----------------------------------------------------------------------------------------------
// Processes and MIG.

extern "C" nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                unsigned int* infoCount,
                                                                nvmlProcessInfo_t* infos) {
  return gpuwatch::mock_nvml::RunningProcesses(Fn::nvmlDeviceGetComputeRunningProcesses_v3, device,
                                               infoCount, infos);
}

extern "C" nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                unsigned int* infoCount,
                                                                nvmlProcessInfo_t* infos) {
  return gpuwatch::mock_nvml::RunningProcesses(Fn::nvmlDeviceGetComputeRunningProcesses_v2, device,
                                               infoCount, infos);
}

extern "C" nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                             unsigned int* pendingMode) {
  return DeviceCall(
      Fn::nvmlDeviceGetMigMode, device, currentMode != nullptr && pendingMode != nullptr,
      [&](State&, Target d, double) -> nvmlReturn_t {
        if (!d.gpu->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
        unsigned mode = d.gpu->mig_enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
        *currentMode = mode;
        *pendingMode = mode;
        return NVML_SUCCESS;
      });
}

extern "C" nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  return DeviceCall(Fn::nvmlDeviceGetMaxMigDeviceCount, device, count != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      if (!d.gpu->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
                      *count = d.gpu->mig_enabled ? kMaxMigDevices : 0;
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                            nvmlDevice_t* migDevice) {
  return DeviceCall(Fn::nvmlDeviceGetMigDeviceHandleByIndex, device,
                    migDevice != nullptr && index < kMaxMigDevices,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      if (!d.gpu->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
                      // Indices past the configured instances are holes, as after a partial
                      // MIG reconfiguration: callers must skip NOT_FOUND.
                      if (!d.gpu->mig_enabled || index >= d.gpu->mig.size()) {
                        return NVML_ERROR_NOT_FOUND;
                      }
                      *migDevice =
                          gpuwatch::mock_nvml::HandleOf(d.gpu->index, static_cast<int>(index));
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  return DeviceCall(Fn::nvmlDeviceGetGpuInstanceId, device, id != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      if (d.mig == nullptr) return NVML_ERROR_NOT_SUPPORTED;
                      *id = d.mig->gpu_instance_id;
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  return DeviceCall(Fn::nvmlDeviceGetComputeInstanceId, device, id != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      if (d.mig == nullptr) return NVML_ERROR_NOT_SUPPORTED;
                      *id = d.mig->compute_instance_id;
                      return NVML_SUCCESS;
                    });
}

// ----------------------------------------------------------------------------------------------
// Events.

extern "C" nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  return SystemCall(Fn::nvmlEventSetCreate, set != nullptr, [&](State& s, double) -> nvmlReturn_t {
    auto created = std::make_unique<gpuwatch::mock_nvml::EventSet>();
    created->delivered.assign(s.scenario.xids.size(), false);
    *set = reinterpret_cast<nvmlEventSet_t>(created.get());
    s.event_sets.push_back(std::move(created));
    return NVML_SUCCESS;
  });
}

extern "C" nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                                 nvmlEventSet_t set) {
  return DeviceCall(Fn::nvmlDeviceRegisterEvents, device, set != nullptr,
                    [&](State& s, Target d, double) -> nvmlReturn_t {
                      auto* es = gpuwatch::mock_nvml::FindHandle(s.event_sets, set);
                      if (es == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
                      if (eventTypes & ~gpuwatch::mock_nvml::SupportedEvents(*d.gpu)) {
                        return NVML_ERROR_NOT_SUPPORTED;
                      }
                      es->registered[d.gpu->index] |= eventTypes;
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                         unsigned long long* eventTypes) {
  return DeviceCall(Fn::nvmlDeviceGetSupportedEventTypes, device, eventTypes != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      *eventTypes = gpuwatch::mock_nvml::SupportedEvents(*d.gpu);
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                            unsigned int timeoutms) {
  namespace sim = gpuwatch::mock_nvml;
  try {
    const auto deadline = sim::Clock::now() + std::chrono::milliseconds(timeoutms);
    while (true) {
      auto next_due = sim::Clock::time_point::max();
      {
        State& s = TheState();
        std::lock_guard<std::mutex> lock(s.mu);
        // Re-checked every slice: a shutdown or nvmlEventSetFree on another thread ends the
        // wait instead of leaving it on freed state.
        if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
        sim::EventSet* es = sim::FindHandle(s.event_sets, set);
        if (es == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        double t = s.NowS();
        if (auto code = sim::Injected(s.scenario, Fn::nvmlEventSetWait_v2, std::nullopt, t)) {
          return *code;
        }
        const std::vector<sim::XidSpec>& xids = s.scenario.xids;
        for (size_t i = 0; i < xids.size(); ++i) {
          const sim::XidSpec& x = xids[i];
          if (es->delivered[i] || !(es->registered[x.gpu] & nvmlEventTypeXidCriticalError)) {
            continue;
          }
          if (x.at_s > t) {  // sorted by at_s: the first future one is the next due
            next_due =
                sim::Clock::now() + std::chrono::duration_cast<sim::Clock::duration>(
                                        std::chrono::duration<double>((x.at_s - t) / s.time_scale));
            break;
          }
          es->delivered[i] = true;
          data->device = sim::HandleOf(x.gpu, -1);
          data->eventType = nvmlEventTypeXidCriticalError;
          data->eventData = x.code;
          data->gpuInstanceId = x.gpu_instance_id;
          data->computeInstanceId = x.compute_instance_id;
          return NVML_SUCCESS;
        }
      }
      auto now = sim::Clock::now();
      if (now >= deadline) return NVML_ERROR_TIMEOUT;
      const auto wake = std::min({deadline, next_due, now + sim::kWaitSlice});
      std::this_thread::sleep_until(wake);
    }
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

extern "C" nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  return SystemCall(Fn::nvmlEventSetFree, set != nullptr, [&](State& s, double) -> nvmlReturn_t {
    auto it = std::find_if(s.event_sets.begin(), s.event_sets.end(),
                           [&](const auto& p) { return p.get() == static_cast<const void*>(set); });
    if (it == s.event_sets.end()) return NVML_ERROR_INVALID_ARGUMENT;
    s.event_sets.erase(it);
    return NVML_SUCCESS;
  });
}

// ----------------------------------------------------------------------------------------------
// GPM.

extern "C" nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device,
                                                  nvmlGpmSupport_t* gpmSupport) {
  return DeviceCall(Fn::nvmlGpmQueryDeviceSupport, device, gpmSupport != nullptr,
                    [&](State&, Target d, double) -> nvmlReturn_t {
                      if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION) {
                        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
                      }
                      gpmSupport->isSupportedDevice =
                          d.gpu->unsupported.test(CapOf(Fn::nvmlGpmSampleGet)) ? 0 : 1;
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* gpmSample) {
  return SystemCall(Fn::nvmlGpmSampleAlloc, gpmSample != nullptr,
                    [&](State& s, double) -> nvmlReturn_t {
                      auto sample = std::make_unique<gpuwatch::mock_nvml::GpmSample>();
                      *gpmSample = reinterpret_cast<nvmlGpmSample_t>(sample.get());
                      s.gpm_samples.push_back(std::move(sample));
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
  return SystemCall(
      Fn::nvmlGpmSampleFree, gpmSample != nullptr, [&](State& s, double) -> nvmlReturn_t {
        auto it = std::find_if(s.gpm_samples.begin(), s.gpm_samples.end(), [&](const auto& p) {
          return p.get() == static_cast<const void*>(gpmSample);
        });
        if (it == s.gpm_samples.end()) return NVML_ERROR_INVALID_ARGUMENT;
        s.gpm_samples.erase(it);
        return NVML_SUCCESS;
      });
}

extern "C" nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
  namespace sim = gpuwatch::mock_nvml;
  return DeviceCall(Fn::nvmlGpmSampleGet, device, gpmSample != nullptr,
                    [&](State& s, Target d, double t) -> nvmlReturn_t {
                      sim::GpmSample* sample = sim::FindHandle(s.gpm_samples, gpmSample);
                      if (sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
                      *sample = sim::GpmSample{true, d.gpu->index, std::nullopt, t, {}};
                      for (size_t i = 0; i < sim::kNumGpm; ++i) {
                        sample->integrals[i] =
                            sim::IntegralOf(d.gpu->fields[sim::Idx(sim::kGpmFields[i])], 0, t);
                      }
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId,
                                            nvmlGpmSample_t gpmSample) {
  namespace sim = gpuwatch::mock_nvml;
  return DeviceCall(Fn::nvmlGpmMigSampleGet, device, gpmSample != nullptr,
                    [&](State& s, Target d, double t) -> nvmlReturn_t {
                      sim::GpmSample* sample = sim::FindHandle(s.gpm_samples, gpmSample);
                      if (sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
                      if (!d.gpu->mig_enabled) return NVML_ERROR_NOT_SUPPORTED;
                      // A GPU instance's activity is the mean of its compute instances'.
                      std::array<double, sim::kNumGpm> sums{};
                      int instances = 0;
                      for (const sim::MigInstanceSpec& m : d.gpu->mig) {
                        if (m.gpu_instance_id != gpuInstanceId) continue;
                        ++instances;
                        for (size_t i = 0; i < sim::kNumGpm; ++i)
                          sums[i] += m.gpm[i].Integral(0, t);
                      }
                      if (instances == 0) return NVML_ERROR_INVALID_ARGUMENT;
                      *sample = sim::GpmSample{true, d.gpu->index, gpuInstanceId, t, {}};
                      for (size_t i = 0; i < sim::kNumGpm; ++i)
                        sample->integrals[i] = sums[i] / instances;
                      return NVML_SUCCESS;
                    });
}

extern "C" nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* metricsGet) {
  namespace sim = gpuwatch::mock_nvml;
  return SystemCall(
      Fn::nvmlGpmMetricsGet, metricsGet != nullptr, [&](State& s, double) -> nvmlReturn_t {
        if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION) {
          return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        if (metricsGet->numMetrics > NVML_GPM_METRIC_MAX) return NVML_ERROR_INVALID_ARGUMENT;
        const sim::GpmSample* a = sim::FindHandle(s.gpm_samples, metricsGet->sample1);
        const sim::GpmSample* b = sim::FindHandle(s.gpm_samples, metricsGet->sample2);
        if (a == nullptr || b == nullptr || !a->filled || !b->filled || a->gpu != b->gpu ||
            a->gpu_instance_id != b->gpu_instance_id || !(b->t_s > a->t_s)) {
          return NVML_ERROR_INVALID_ARGUMENT;
        }
        const double dt = b->t_s - a->t_s;
        for (unsigned i = 0; i < metricsGet->numMetrics; ++i) {
          nvmlGpmMetric_t& m = metricsGet->metrics[i];
          m.value = 0;
          m.metricInfo = {nullptr, nullptr, nullptr};
          if (m.metricId == 0 || m.metricId >= NVML_GPM_METRIC_MAX) {
            m.nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
            continue;
          }
          std::optional<size_t> index = sim::GpmIndexOf(m.metricId);
          if (!index) {
            m.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
          }
          m.nvmlReturn = NVML_SUCCESS;
          m.value = std::clamp((b->integrals[*index] - a->integrals[*index]) / dt, 0.0, 100.0);
          // NVML's metricInfo strings are static and typed char* for C; never written through.
          m.metricInfo.shortName = const_cast<char*>(sim::kGpmInfo[*index].short_name);
          m.metricInfo.longName = const_cast<char*>(sim::kGpmInfo[*index].long_name);
          m.metricInfo.unit = const_cast<char*>("%");
        }
        return NVML_SUCCESS;
      });
}
