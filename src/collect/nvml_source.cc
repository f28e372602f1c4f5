#include "collect/nvml_source.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/strings.h"
#include "model/metric_catalog.h"

namespace gpuwatch::collect {

using model::GpuMetric;
using model::Idx;
using model::Support;

namespace {

constexpr double kMib = 1024.0 * 1024.0;

bool IsUnsupported(nvmlReturn_t rc) {
  return rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_NO_PERMISSION ||
         rc == NVML_ERROR_FUNCTION_NOT_FOUND || rc == NVML_ERROR_INVALID_ARGUMENT;
}

bool IsLost(nvmlReturn_t rc) {
  return rc == NVML_ERROR_GPU_IS_LOST || rc == NVML_ERROR_GPU_NOT_FOUND;
}

std::string ToLowerHex(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string CudaVersionString(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// A per-GPU total over its NVLinks. The total is exported only when every link answered this
// tick: a link missing from the sum would make a counter go down, which Prometheus reads as a
// reset (a false error spike at the drop and again when the link returns). The metric is
// unsupported only when every link said so.
struct LinkTotal {
  double sum = 0;
  size_t ok = 0, unsupported = 0;
  nvmlReturn_t unsupported_rc = NVML_SUCCESS;

  void Add(nvmlReturn_t rc, double v) {
    if (rc == NVML_SUCCESS) {
      sum += v;
      ++ok;
    } else if (IsUnsupported(rc)) {
      ++unsupported;
      unsupported_rc = rc;
    }
  }
  void Apply(GpuMetric m, size_t links, model::Capability* cap, model::GpuSample* out) const {
    if (links > 0 && ok == links) {
      out->Set(m, sum);
      *cap = {Support::kSupported, ""};
    } else if (links > 0 && unsupported == links) {
      *cap = {Support::kNotSupported, NvmlErrorName(unsupported_rc)};
    }
  }
};

}  // namespace

bool DriverHasBrokenProcessV3(std::string_view driver_version) {
  // "535.54.03" → major 535, minor 54.
  auto parts = SplitAny(driver_version, ".");
  if (parts.size() < 2) return false;
  auto major = ParseInt<int>(parts[0]);
  auto minor = ParseInt<int>(parts[1]);
  return major && minor && *major == 535 && *minor >= 43 && *minor <= 86;
}

struct NvmlSource::Device {
  unsigned index = 0;
  nvmlDevice_t handle = nullptr;
  model::GpuCapabilities caps;
  bool lost = false;
  std::chrono::steady_clock::time_point lost_since;
  std::chrono::steady_clock::time_point next_lost_probe;
  std::vector<unsigned> links;  // NVLinks that answered at start
  // Values read once at start (max clocks, max PCIe link) and copied into each sample.
  std::vector<std::pair<GpuMetric, double>> static_values;
  // GPM keeps the previous sample; metrics are the difference of two samples.
  nvmlGpmSample_t gpm_prev = nullptr, gpm_cur = nullptr;
  bool gpm_primed = false;
  struct Mig {
    nvmlDevice_t handle = nullptr;
    model::MigInstanceInfo info;
    nvmlGpmSample_t gpm_prev = nullptr, gpm_cur = nullptr;
    bool gpm_primed = false;
  };
  std::vector<Mig> migs;
  bool static_pending = false;    // a static field answered a transient error at start
  bool links_pending = false;     // NVLink discovery hit a transient error
  bool use_event_reasons = true;  // nvmlDeviceGetCurrentClocksEventReasons vs the older name
  // Each error code is logged once per field so a flapping field cannot flood the log.
  std::array<nvmlReturn_t, model::kNumGpuMetrics> last_logged_error{};
};

NvmlSource::NvmlSource(NvmlSourceOptions options) : options_(std::move(options)) {}

NvmlSource::~NvmlSource() {
  if (!lib_) return;
  const auto& f = lib_->fn();
  for (auto& d : state_) {
    if (f.nvmlGpmSampleFree) {
      if (d->gpm_prev) f.nvmlGpmSampleFree(d->gpm_prev);
      if (d->gpm_cur) f.nvmlGpmSampleFree(d->gpm_cur);
      for (auto& m : d->migs) {
        if (m.gpm_prev) f.nvmlGpmSampleFree(m.gpm_prev);
        if (m.gpm_cur) f.nvmlGpmSampleFree(m.gpm_cur);
      }
    }
  }
  if (event_set_ && f.nvmlEventSetFree) f.nvmlEventSetFree(event_set_);
  if (initialized_ && f.nvmlShutdown) f.nvmlShutdown();
}

Status NvmlSource::Init() {
  auto lib = NvmlLibrary::Load(options_.library_path);
  if (!lib.ok()) return lib.status();
  lib_ = std::move(lib).value();
  const auto& f = lib_->fn();
  nvmlReturn_t rc = f.nvmlInit_v2();
  if (rc != NVML_SUCCESS) {
    return Status::Unavailable(
        std::string("nvmlInit failed: ") + NvmlErrorName(rc) +
        (rc == NVML_ERROR_DRIVER_NOT_LOADED ? " (no NVIDIA driver loaded)" : ""));
  }
  initialized_ = true;
  system_.library_path = lib_->path();
  char buf[256];
  if (f.nvmlSystemGetDriverVersion &&
      f.nvmlSystemGetDriverVersion(buf, sizeof(buf)) == NVML_SUCCESS)
    system_.driver_version = buf;
  if (f.nvmlSystemGetNVMLVersion && f.nvmlSystemGetNVMLVersion(buf, sizeof(buf)) == NVML_SUCCESS)
    system_.nvml_version = buf;
  int cuda = 0;
  if (f.nvmlSystemGetCudaDriverVersion_v2 &&
      f.nvmlSystemGetCudaDriverVersion_v2(&cuda) == NVML_SUCCESS)
    system_.cuda_driver_version = CudaVersionString(cuda);

  v3_process_layout_broken_ = DriverHasBrokenProcessV3(system_.driver_version);

  unsigned count = 0;
  rc = f.nvmlDeviceGetCount_v2(&count);
  if (rc != NVML_SUCCESS)
    return Status::Unavailable(std::string("nvmlDeviceGetCount: ") + NvmlErrorName(rc));
  if (count == 0) return Status::Unavailable("NVML reports no GPU on this machine");

  if (f.nvmlEventSetCreate && f.nvmlEventSetCreate(&event_set_) != NVML_SUCCESS)
    event_set_ = nullptr;

  for (unsigned i = 0; i < count; ++i) {
    auto d = std::make_unique<Device>();
    d->index = i;
    model::GpuStaticInfo info;
    info.index = i;
    rc = f.nvmlDeviceGetHandleByIndex_v2(i, &d->handle);
    if (rc != NVML_SUCCESS) {
      // A GPU that cannot even be opened is listed (so its absence is visible) and lost.
      GW_LOG_WARN("GPU {}: nvmlDeviceGetHandleByIndex: {}", i, NvmlErrorName(rc));
      d->lost = true;
      d->handle = nullptr;
      info.uuid = "unknown-" + std::to_string(i);
      devices_.push_back(info);
      state_.push_back(std::move(d));
      continue;
    }
    devices_.push_back(info);
    state_.push_back(std::move(d));
    ProbeStatic(*state_.back());
  }
  return Status::Ok();
}

void NvmlSource::ReadStaticValues(Device& d) {
  const auto& f = lib_->fn();
  // Only a lasting answer (NOT_SUPPORTED, NO_PERMISSION, no symbol) latches; a transient error
  // at start leaves the field pending and the next tick asks again.
  d.static_pending = false;
  auto one = [&](GpuMetric m, auto&& read) {
    auto& cap = d.caps.metrics[Idx(m)];
    if (cap.support == Support::kSupported || cap.support == Support::kNotSupported) return;
    unsigned v = 0;
    nvmlReturn_t rc = read(&v);
    if (rc == NVML_SUCCESS) {
      d.static_values.emplace_back(m, v);
      cap = {Support::kSupported, ""};
    } else if (IsUnsupported(rc)) {
      cap = {Support::kNotSupported, NvmlErrorName(rc)};
    } else {
      cap = {Support::kError, NvmlErrorName(rc)};
      d.static_pending = true;
    }
  };
  auto max_clock = [&](nvmlClockType_t t) {
    return [&f, &d, t](unsigned* v) {
      return f.nvmlDeviceGetMaxClockInfo ? f.nvmlDeviceGetMaxClockInfo(d.handle, t, v)
                                         : NVML_ERROR_FUNCTION_NOT_FOUND;
    };
  };
  auto uint_fn = [&](nvmlReturn_t (*fn)(nvmlDevice_t, unsigned*)) {
    return [&d, fn](unsigned* v) { return fn ? fn(d.handle, v) : NVML_ERROR_FUNCTION_NOT_FOUND; };
  };
  one(GpuMetric::kMaxSmClockMhz, max_clock(NVML_CLOCK_SM));
  one(GpuMetric::kMaxMemClockMhz, max_clock(NVML_CLOCK_MEM));
  one(GpuMetric::kPcieMaxGen, uint_fn(f.nvmlDeviceGetMaxPcieLinkGeneration));
  one(GpuMetric::kPcieMaxWidth, uint_fn(f.nvmlDeviceGetMaxPcieLinkWidth));
}

void NvmlSource::DiscoverNvLinks(Device& d) {
  const auto& f = lib_->fn();
  // The links present: those that answer their state. A transient error on any link leaves
  // discovery pending so a link is not written off for the agent's lifetime.
  d.links.clear();
  d.links_pending = false;
  if (!f.nvmlDeviceGetNvLinkState) return;
  for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; ++l) {
    nvmlEnableState_t st{};
    nvmlReturn_t rc = f.nvmlDeviceGetNvLinkState(d.handle, l, &st);
    if (rc == NVML_SUCCESS)
      d.links.push_back(l);
    else if (!IsUnsupported(rc))
      d.links_pending = true;
  }
}

void NvmlSource::ProbeStatic(Device& d) {
  const auto& f = lib_->fn();
  auto& info = devices_[d.index];
  char buf[256];
  auto str = [&](auto fn, std::string* out) {
    if (fn && fn(d.handle, buf, sizeof(buf)) == NVML_SUCCESS) *out = buf;
  };
  str(f.nvmlDeviceGetUUID, &info.uuid);
  str(f.nvmlDeviceGetName, &info.name);
  str(f.nvmlDeviceGetSerial, &info.serial);
  str(f.nvmlDeviceGetVbiosVersion, &info.vbios_version);
  nvmlPciInfo_t pci{};
  if (f.nvmlDeviceGetPciInfo_v3 && f.nvmlDeviceGetPciInfo_v3(d.handle, &pci) == NVML_SUCCESS) {
    pci.busId[sizeof(pci.busId) - 1] = 0;
    info.pci_bus_id = ToLowerHex(pci.busId);
  }
  unsigned u = 0;
  if (f.nvmlDeviceGetMinorNumber && f.nvmlDeviceGetMinorNumber(d.handle, &u) == NVML_SUCCESS)
    info.minor_number = u;
  nvmlDeviceArchitecture_t arch = 0;
  if (f.nvmlDeviceGetArchitecture && f.nvmlDeviceGetArchitecture(d.handle, &arch) == NVML_SUCCESS)
    info.architecture = arch;

  ReadStaticValues(d);
  DiscoverNvLinks(d);
  info.nvlink_count = static_cast<unsigned>(d.links.size());
  d.caps.features[static_cast<size_t>(model::GpuFeature::kNvlinkPerLink)] =
      d.links.empty() ? model::Capability{Support::kNotSupported, "no NVLink answered"}
                      : model::Capability{Support::kSupported, ""};
  if (d.links.empty()) {
    for (GpuMetric m :
         {GpuMetric::kNvlinkActiveLinks, GpuMetric::kNvlinkCrcFlitErrors,
          GpuMetric::kNvlinkCrcDataErrors, GpuMetric::kNvlinkReplayErrors,
          GpuMetric::kNvlinkRecoveryErrors, GpuMetric::kNvlinkTxBytes, GpuMetric::kNvlinkRxBytes})
      d.caps.metrics[Idx(m)] = {Support::kNotSupported, "no NVLink on this GPU"};
  }

  SetupMig(d);
  SetupGpm(d);

  // XID and ECC events, restricted to what this GPU supports.
  auto& xid_cap = d.caps.features[static_cast<size_t>(model::GpuFeature::kXidEvents)];
  if (!event_set_ || !f.nvmlDeviceRegisterEvents) {
    xid_cap = {Support::kNotSupported, "NVML event API unavailable"};
  } else {
    // Single-bit ECC events are not registered: DCGM_FI_DEV_ECC_SBE_* count them, and a weak
    // memory cell can raise thousands an hour.
    unsigned long long supported = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError;
    unsigned long long avail = 0;
    if (f.nvmlDeviceGetSupportedEventTypes &&
        f.nvmlDeviceGetSupportedEventTypes(d.handle, &avail) == NVML_SUCCESS)
      supported &= avail;
    nvmlReturn_t rc = supported ? f.nvmlDeviceRegisterEvents(d.handle, supported, event_set_)
                                : NVML_ERROR_NOT_SUPPORTED;
    xid_cap = rc == NVML_SUCCESS && (supported & nvmlEventTypeXidCriticalError)
                  ? model::Capability{Support::kSupported, ""}
                  : model::Capability{Support::kNotSupported, NvmlErrorName(rc)};
  }
}

void NvmlSource::SetupGpm(Device& d) {
  const auto& f = lib_->fn();
  auto& cap = d.caps.features[static_cast<size_t>(model::GpuFeature::kGpm)];
  nvmlGpmSupport_t sup{};
  sup.version = NVML_GPM_SUPPORT_VERSION;
  nvmlReturn_t rc = f.nvmlGpmQueryDeviceSupport ? f.nvmlGpmQueryDeviceSupport(d.handle, &sup)
                                                : NVML_ERROR_FUNCTION_NOT_FOUND;
  bool ok = rc == NVML_SUCCESS && sup.isSupportedDevice && f.nvmlGpmSampleAlloc &&
            f.nvmlGpmSampleGet && f.nvmlGpmMetricsGet;
  if (ok) {
    ok = f.nvmlGpmSampleAlloc(&d.gpm_prev) == NVML_SUCCESS &&
         f.nvmlGpmSampleAlloc(&d.gpm_cur) == NVML_SUCCESS;
    for (auto& m : d.migs) {
      if (f.nvmlGpmSampleAlloc(&m.gpm_prev) != NVML_SUCCESS ||
          f.nvmlGpmSampleAlloc(&m.gpm_cur) != NVML_SUCCESS)
        m.gpm_prev = m.gpm_cur = nullptr;
    }
  }
  devices_[d.index].gpm_supported = ok;
  std::string reason =
      rc != NVML_SUCCESS ? NvmlErrorName(rc) : "GPM needs Hopper or newer (device not supported)";
  cap = ok ? model::Capability{Support::kSupported, ""}
           : model::Capability{Support::kNotSupported, reason};
  if (!ok) {
    for (GpuMetric m :
         {GpuMetric::kGpmGraphicsActive, GpuMetric::kGpmSmActive, GpuMetric::kGpmSmOccupancy,
          GpuMetric::kGpmTensorActive, GpuMetric::kGpmDramActive})
      d.caps.metrics[Idx(m)] = {Support::kNotSupported, reason};
  }
}

void NvmlSource::SetupMig(Device& d) {
  const auto& f = lib_->fn();
  auto& cap = d.caps.features[static_cast<size_t>(model::GpuFeature::kMig)];
  unsigned cur = 0, pending = 0;
  nvmlReturn_t rc = f.nvmlDeviceGetMigMode ? f.nvmlDeviceGetMigMode(d.handle, &cur, &pending)
                                           : NVML_ERROR_FUNCTION_NOT_FOUND;
  if (rc != NVML_SUCCESS) {
    cap = {Support::kNotSupported, NvmlErrorName(rc)};
    return;
  }
  cap = {Support::kSupported, cur == NVML_DEVICE_MIG_ENABLE ? "enabled" : "disabled"};
  auto& info = devices_[d.index];
  info.mig_enabled = cur == NVML_DEVICE_MIG_ENABLE;
  if (!info.mig_enabled || !f.nvmlDeviceGetMaxMigDeviceCount ||
      !f.nvmlDeviceGetMigDeviceHandleByIndex)
    return;
  unsigned max = 0;
  if (f.nvmlDeviceGetMaxMigDeviceCount(d.handle, &max) != NVML_SUCCESS) return;
  for (unsigned i = 0; i < max; ++i) {
    Device::Mig m;
    if (f.nvmlDeviceGetMigDeviceHandleByIndex(d.handle, i, &m.handle) != NVML_SUCCESS) continue;
    char buf[128];
    if (f.nvmlDeviceGetUUID && f.nvmlDeviceGetUUID(m.handle, buf, sizeof(buf)) == NVML_SUCCESS)
      m.info.uuid = buf;
    if (f.nvmlDeviceGetGpuInstanceId)
      f.nvmlDeviceGetGpuInstanceId(m.handle, &m.info.gpu_instance_id);
    if (f.nvmlDeviceGetComputeInstanceId)
      f.nvmlDeviceGetComputeInstanceId(m.handle, &m.info.compute_instance_id);
    info.mig_instances.push_back(m.info);
    d.migs.push_back(m);
  }
}

model::GpuCapabilities NvmlSource::Capabilities(size_t index) const {
  std::lock_guard<std::mutex> lock(caps_mu_);
  return state_.at(index)->caps;
}

void NvmlSource::MarkLost(Device& d, int64_t time_ms, nvmlReturn_t rc) {
  const auto now = std::chrono::steady_clock::now();
  d.next_lost_probe = now + options_.lost_retry_interval;
  if (d.lost) return;
  d.lost = true;
  d.lost_since = now;
  const auto& info = devices_[d.index];
  GW_LOG_ERROR("GPU {} ({}, {}) is lost: {}; other GPUs are still served", d.index, info.uuid,
               info.pci_bus_id, NvmlErrorName(rc));
}

Status NvmlSource::Sample(size_t index, int64_t time_ms, model::GpuSample* out) {
  if (index >= state_.size()) return Status::InvalidArgument("no GPU " + std::to_string(index));
  Device& d = *state_[index];
  *out = model::GpuSample{};
  out->time_ms = time_ms;
  if (!d.handle) {
    out->lost = true;
    return Status::GpuLost("GPU " + std::to_string(index) + " has no NVML handle");
  }
  if (d.lost && std::chrono::steady_clock::now() < d.next_lost_probe) {
    out->lost = true;
    return Status::GpuLost("GPU " + std::to_string(index) + " is lost");
  }
  const auto& f = lib_->fn();
  std::unique_lock<std::mutex> caps_lock(caps_mu_);
  nvmlReturn_t lost_rc = NVML_SUCCESS;

  // Runs one NVML read for metric `m` unless it is known unsupported. `read` returns the NVML
  // code and, on success, stores the value(s). Returns true on success.
  auto probe = [&](GpuMetric m, auto&& read) -> bool {
    auto& cap = d.caps.metrics[Idx(m)];
    if (cap.support == Support::kNotSupported || lost_rc != NVML_SUCCESS) return false;
    nvmlReturn_t rc = read();
    if (rc == NVML_SUCCESS) {
      if (cap.support != Support::kSupported) cap = {Support::kSupported, ""};
      return true;
    }
    if (IsLost(rc)) {
      lost_rc = rc;
      return false;
    }
    if (IsUnsupported(rc)) {
      cap = {Support::kNotSupported, NvmlErrorName(rc)};
    } else {
      // Transient (UNKNOWN, TIMEOUT, …): keep probing, log each new code once.
      cap = {Support::kError, NvmlErrorName(rc)};
      if (d.last_logged_error[Idx(m)] != rc) {
        d.last_logged_error[Idx(m)] = rc;
        GW_LOG_WARN("GPU {}: {} read failed: {}", d.index, model::Describe(m).name,
                    NvmlErrorName(rc));
      }
    }
    return false;
  };
  auto uint_field = [&](GpuMetric m, auto fn, double scale = 1.0) {
    probe(m, [&]() -> nvmlReturn_t {
      if (!fn) return NVML_ERROR_FUNCTION_NOT_FOUND;
      unsigned v = 0;
      nvmlReturn_t rc = fn(d.handle, &v);
      if (rc == NVML_SUCCESS) out->Set(m, v * scale);
      return rc;
    });
  };

  probe(GpuMetric::kUtilGpuPct, [&]() -> nvmlReturn_t {
    if (!f.nvmlDeviceGetUtilizationRates) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlUtilization_t u{};
    nvmlReturn_t rc = f.nvmlDeviceGetUtilizationRates(d.handle, &u);
    if (rc == NVML_SUCCESS) {
      out->Set(GpuMetric::kUtilGpuPct, u.gpu);
      out->Set(GpuMetric::kUtilMemPct, u.memory);
      d.caps.metrics[Idx(GpuMetric::kUtilMemPct)] = {Support::kSupported, ""};
    } else if (IsUnsupported(rc)) {
      d.caps.metrics[Idx(GpuMetric::kUtilMemPct)] = {Support::kNotSupported, NvmlErrorName(rc)};
    }
    return rc;
  });

  probe(GpuMetric::kMemUsedMib, [&]() -> nvmlReturn_t {
    // _v2 adds the reserved amount; older drivers answer only the v1 call.
    if (f.nvmlDeviceGetMemoryInfo_v2 &&
        d.caps.metrics[Idx(GpuMetric::kMemReservedMib)].support != Support::kNotSupported) {
      nvmlMemory_v2_t m{};
      m.version = nvmlMemory_v2;
      nvmlReturn_t rc = f.nvmlDeviceGetMemoryInfo_v2(d.handle, &m);
      if (rc == NVML_SUCCESS) {
        out->Set(GpuMetric::kMemUsedMib, m.used / kMib);
        out->Set(GpuMetric::kMemFreeMib, m.free / kMib);
        out->Set(GpuMetric::kMemTotalMib, m.total / kMib);
        out->Set(GpuMetric::kMemReservedMib, m.reserved / kMib);
        for (GpuMetric x :
             {GpuMetric::kMemFreeMib, GpuMetric::kMemTotalMib, GpuMetric::kMemReservedMib})
          d.caps.metrics[Idx(x)] = {Support::kSupported, ""};
        return rc;
      }
      if (IsLost(rc)) return rc;
      // Only a lasting answer switches to v1 for good. A transient error leaves this tick
      // without memory values: v1's `used` includes the reserved part, so mixing the two
      // calls would make FB_USED jump.
      if (!IsUnsupported(rc) && rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH) return rc;
      d.caps.metrics[Idx(GpuMetric::kMemReservedMib)] = {Support::kNotSupported, NvmlErrorName(rc)};
    }
    if (!f.nvmlDeviceGetMemoryInfo) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlMemory_t m{};
    nvmlReturn_t rc = f.nvmlDeviceGetMemoryInfo(d.handle, &m);
    if (rc == NVML_SUCCESS) {
      out->Set(GpuMetric::kMemUsedMib, m.used / kMib);
      out->Set(GpuMetric::kMemFreeMib, m.free / kMib);
      out->Set(GpuMetric::kMemTotalMib, m.total / kMib);
      for (GpuMetric x : {GpuMetric::kMemFreeMib, GpuMetric::kMemTotalMib})
        d.caps.metrics[Idx(x)] = {Support::kSupported, ""};
    }
    return rc;
  });

  probe(GpuMetric::kTempC, [&]() -> nvmlReturn_t {
    if (!f.nvmlDeviceGetTemperature) return NVML_ERROR_FUNCTION_NOT_FOUND;
    unsigned v = 0;
    nvmlReturn_t rc = f.nvmlDeviceGetTemperature(d.handle, NVML_TEMPERATURE_GPU, &v);
    if (rc == NVML_SUCCESS) out->Set(GpuMetric::kTempC, v);
    return rc;
  });
  uint_field(GpuMetric::kPowerW, f.nvmlDeviceGetPowerUsage, 1e-3);
  uint_field(GpuMetric::kPowerLimitW, f.nvmlDeviceGetEnforcedPowerLimit, 1e-3);
  probe(GpuMetric::kEnergyMj, [&]() -> nvmlReturn_t {
    if (!f.nvmlDeviceGetTotalEnergyConsumption) return NVML_ERROR_FUNCTION_NOT_FOUND;
    unsigned long long v = 0;
    nvmlReturn_t rc = f.nvmlDeviceGetTotalEnergyConsumption(d.handle, &v);
    if (rc == NVML_SUCCESS) out->Set(GpuMetric::kEnergyMj, static_cast<double>(v));
    return rc;
  });
  auto clock = [&](GpuMetric m, nvmlClockType_t t) {
    probe(m, [&]() -> nvmlReturn_t {
      if (!f.nvmlDeviceGetClockInfo) return NVML_ERROR_FUNCTION_NOT_FOUND;
      unsigned v = 0;
      nvmlReturn_t rc = f.nvmlDeviceGetClockInfo(d.handle, t, &v);
      if (rc == NVML_SUCCESS) out->Set(m, v);
      return rc;
    });
  };
  clock(GpuMetric::kSmClockMhz, NVML_CLOCK_SM);
  clock(GpuMetric::kMemClockMhz, NVML_CLOCK_MEM);
  probe(GpuMetric::kClockEventReasons, [&]() -> nvmlReturn_t {
    unsigned long long v = 0;
    nvmlReturn_t rc = NVML_ERROR_FUNCTION_NOT_FOUND;
    if (d.use_event_reasons && f.nvmlDeviceGetCurrentClocksEventReasons) {
      rc = f.nvmlDeviceGetCurrentClocksEventReasons(d.handle, &v);
      if (rc == NVML_ERROR_FUNCTION_NOT_FOUND) d.use_event_reasons = false;
    }
    if (!d.use_event_reasons || !f.nvmlDeviceGetCurrentClocksEventReasons) {
      if (!f.nvmlDeviceGetCurrentClocksThrottleReasons) return NVML_ERROR_FUNCTION_NOT_FOUND;
      rc = f.nvmlDeviceGetCurrentClocksThrottleReasons(d.handle, &v);
    }
    if (rc == NVML_SUCCESS) out->Set(GpuMetric::kClockEventReasons, static_cast<double>(v));
    return rc;
  });
  auto ecc = [&](GpuMetric m, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter) {
    probe(m, [&]() -> nvmlReturn_t {
      if (!f.nvmlDeviceGetTotalEccErrors) return NVML_ERROR_FUNCTION_NOT_FOUND;
      unsigned long long v = 0;
      nvmlReturn_t rc = f.nvmlDeviceGetTotalEccErrors(d.handle, type, counter, &v);
      if (rc == NVML_SUCCESS) out->Set(m, static_cast<double>(v));
      return rc;
    });
  };
  ecc(GpuMetric::kEccSbeVolatile, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC);
  ecc(GpuMetric::kEccDbeVolatile, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC);
  ecc(GpuMetric::kEccSbeAggregate, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC);
  ecc(GpuMetric::kEccDbeAggregate, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC);
  probe(GpuMetric::kRetiredPagesPending, [&]() -> nvmlReturn_t {
    if (!f.nvmlDeviceGetRetiredPagesPendingStatus) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlEnableState_t v{};
    nvmlReturn_t rc = f.nvmlDeviceGetRetiredPagesPendingStatus(d.handle, &v);
    if (rc == NVML_SUCCESS) out->Set(GpuMetric::kRetiredPagesPending, v == NVML_FEATURE_ENABLED);
    return rc;
  });
  probe(GpuMetric::kRemappedRowsCorrectable, [&]() -> nvmlReturn_t {
    if (!f.nvmlDeviceGetRemappedRows) return NVML_ERROR_FUNCTION_NOT_FOUND;
    unsigned corr = 0, unc = 0, pending = 0, failure = 0;
    nvmlReturn_t rc = f.nvmlDeviceGetRemappedRows(d.handle, &corr, &unc, &pending, &failure);
    const model::Capability c = rc == NVML_SUCCESS
                                    ? model::Capability{Support::kSupported, ""}
                                    : model::Capability{Support::kNotSupported, NvmlErrorName(rc)};
    if (rc == NVML_SUCCESS || IsUnsupported(rc)) {
      for (GpuMetric x : {GpuMetric::kRemappedRowsUncorrectable, GpuMetric::kRemappedRowsPending,
                          GpuMetric::kRemappedRowsFailure})
        d.caps.metrics[Idx(x)] = c;
    }
    if (rc == NVML_SUCCESS) {
      out->Set(GpuMetric::kRemappedRowsCorrectable, corr);
      out->Set(GpuMetric::kRemappedRowsUncorrectable, unc);
      out->Set(GpuMetric::kRemappedRowsPending, pending != 0);
      out->Set(GpuMetric::kRemappedRowsFailure, failure != 0);
    }
    return rc;
  });
  auto pcie_tp = [&](GpuMetric m, nvmlPcieUtilCounter_t c) {
    probe(m, [&]() -> nvmlReturn_t {
      if (!f.nvmlDeviceGetPcieThroughput) return NVML_ERROR_FUNCTION_NOT_FOUND;
      unsigned v = 0;
      nvmlReturn_t rc = f.nvmlDeviceGetPcieThroughput(d.handle, c, &v);
      if (rc == NVML_SUCCESS) out->Set(m, v * 1024.0);  // NVML reports KB/s
      return rc;
    });
  };
  pcie_tp(GpuMetric::kPcieTxBytesPerSec, NVML_PCIE_UTIL_TX_BYTES);
  pcie_tp(GpuMetric::kPcieRxBytesPerSec, NVML_PCIE_UTIL_RX_BYTES);
  uint_field(GpuMetric::kPcieReplay, f.nvmlDeviceGetPcieReplayCounter);
  uint_field(GpuMetric::kPcieGen, f.nvmlDeviceGetCurrPcieLinkGeneration);
  uint_field(GpuMetric::kPcieWidth, f.nvmlDeviceGetCurrPcieLinkWidth);
  uint_field(GpuMetric::kFanPct, f.nvmlDeviceGetFanSpeed);

  if (lost_rc == NVML_SUCCESS) SampleFieldValues(d, out);
  if (lost_rc == NVML_SUCCESS && !d.links.empty()) SampleNvLinks(d, out);
  if (lost_rc == NVML_SUCCESS && d.gpm_cur) SampleGpm(d, out);
  if (lost_rc == NVML_SUCCESS && !d.migs.empty()) SampleMig(d, out);
  caps_lock.unlock();

  if (lost_rc != NVML_SUCCESS) {
    MarkLost(d, time_ms, lost_rc);
    *out = model::GpuSample{};
    out->time_ms = time_ms;
    out->lost = true;
    return Status::GpuLost(std::string("GPU stopped answering NVML: ") + NvmlErrorName(lost_rc));
  }
  if (d.lost) {
    d.lost = false;
    GW_LOG_INFO("GPU {} ({}) answers NVML again", d.index, devices_[d.index].uuid);
  }
  if (d.static_pending || d.links_pending) {
    std::lock_guard<std::mutex> lock(caps_mu_);
    if (d.static_pending) ReadStaticValues(d);
    if (d.links_pending && d.links.empty()) {
      DiscoverNvLinks(d);
      if (!d.links.empty()) {
        for (auto& c : d.caps.metrics) {
          if (c.reason == "no NVLink on this GPU") c = {};
        }
        d.caps.features[static_cast<size_t>(model::GpuFeature::kNvlinkPerLink)] = {
            Support::kSupported, ""};
      }
    }
  }
  for (const auto& [m, v] : d.static_values) out->Set(m, v);
  return Status::Ok();
}

void NvmlSource::SampleFieldValues(Device& d, model::GpuSample* out) {
  const auto& f = lib_->fn();
  if (!f.nvmlDeviceGetFieldValues) {
    for (GpuMetric m :
         {GpuMetric::kMemTempC, GpuMetric::kRetiredPagesSbe, GpuMetric::kRetiredPagesDbe})
      d.caps.metrics[Idx(m)] = {Support::kNotSupported, "NVML_ERROR_FUNCTION_NOT_FOUND"};
    return;
  }
  // One batched call for the scalar fields and every link's throughput counters.
  struct Want {
    GpuMetric metric;
    unsigned field;
    unsigned link;  // scope
  };
  std::vector<Want> wants;
  for (auto [m, fid] : {std::pair{GpuMetric::kMemTempC, NVML_FI_DEV_MEMORY_TEMP},
                        std::pair{GpuMetric::kRetiredPagesSbe, NVML_FI_DEV_RETIRED_SBE},
                        std::pair{GpuMetric::kRetiredPagesDbe, NVML_FI_DEV_RETIRED_DBE}}) {
    if (d.caps.metrics[Idx(m)].support != Support::kNotSupported) wants.push_back({m, fid, 0});
  }
  const bool want_tx =
      d.caps.metrics[Idx(GpuMetric::kNvlinkTxBytes)].support != Support::kNotSupported;
  const bool want_rx =
      d.caps.metrics[Idx(GpuMetric::kNvlinkRxBytes)].support != Support::kNotSupported;
  for (unsigned l : d.links) {
    if (want_tx)
      wants.push_back({GpuMetric::kNvlinkTxBytes, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, l});
    if (want_rx)
      wants.push_back({GpuMetric::kNvlinkRxBytes, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, l});
  }
  if (wants.empty()) return;
  std::vector<nvmlFieldValue_t> values(wants.size());
  for (size_t i = 0; i < wants.size(); ++i) {
    values[i].fieldId = wants[i].field;
    values[i].scopeId = wants[i].link;
  }
  nvmlReturn_t rc =
      f.nvmlDeviceGetFieldValues(d.handle, static_cast<int>(values.size()), values.data());
  if (rc != NVML_SUCCESS) {
    if (IsUnsupported(rc))
      for (const auto& w : wants)
        d.caps.metrics[Idx(w.metric)] = {Support::kNotSupported, NvmlErrorName(rc)};
    return;
  }
  auto as_double = [](const nvmlFieldValue_t& v) -> double {
    switch (v.valueType) {
      case NVML_VALUE_TYPE_DOUBLE:
        return v.value.dVal;
      case NVML_VALUE_TYPE_UNSIGNED_INT:
        return v.value.uiVal;
      case NVML_VALUE_TYPE_UNSIGNED_LONG:
        return static_cast<double>(v.value.ulVal);
      case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return static_cast<double>(v.value.ullVal);
      case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return static_cast<double>(v.value.sllVal);
      case NVML_VALUE_TYPE_SIGNED_INT:
        return v.value.siVal;
      case NVML_VALUE_TYPE_UNSIGNED_SHORT:
        return v.value.usVal;
      default:
        return v.value.dVal;
    }
  };
  // Per-link throughput goes to the link samples (SampleNvLinks fills the rest of them).
  LinkTotal tx, rx;
  out->nvlinks.clear();
  for (unsigned l : d.links) {
    model::NvLinkSample ls;
    ls.link = l;
    out->nvlinks.push_back(ls);
  }
  auto link_sample = [&](unsigned l) -> model::NvLinkSample* {
    for (auto& ls : out->nvlinks)
      if (ls.link == l) return &ls;
    return nullptr;
  };
  for (size_t i = 0; i < wants.size(); ++i) {
    const auto& w = wants[i];
    const auto& v = values[i];
    const bool is_tx = w.metric == GpuMetric::kNvlinkTxBytes;
    if (is_tx || w.metric == GpuMetric::kNvlinkRxBytes) {
      const double kib = v.nvmlReturn == NVML_SUCCESS ? as_double(v) : 0;
      (is_tx ? tx : rx).Add(v.nvmlReturn, kib * 1024.0);  // NVML reports KiB
      if (auto* ls = link_sample(w.link); ls && v.nvmlReturn == NVML_SUCCESS)
        (is_tx ? ls->tx_bytes : ls->rx_bytes) = static_cast<uint64_t>(kib) * 1024;
      continue;
    }
    if (v.nvmlReturn == NVML_SUCCESS) {
      d.caps.metrics[Idx(w.metric)] = {Support::kSupported, ""};
      out->Set(w.metric, as_double(v));
    } else if (IsUnsupported(v.nvmlReturn)) {
      d.caps.metrics[Idx(w.metric)] = {Support::kNotSupported, NvmlErrorName(v.nvmlReturn)};
    }
  }
  if (want_tx)
    tx.Apply(GpuMetric::kNvlinkTxBytes, d.links.size(),
             &d.caps.metrics[Idx(GpuMetric::kNvlinkTxBytes)], out);
  if (want_rx)
    rx.Apply(GpuMetric::kNvlinkRxBytes, d.links.size(),
             &d.caps.metrics[Idx(GpuMetric::kNvlinkRxBytes)], out);
}

void NvmlSource::SampleNvLinks(Device& d, model::GpuSample* out) {
  const auto& f = lib_->fn();
  if (out->nvlinks.size() != d.links.size()) {
    out->nvlinks.clear();
    for (unsigned l : d.links) {
      model::NvLinkSample s;
      s.link = l;
      out->nvlinks.push_back(s);
    }
  }
  struct Counter {
    GpuMetric metric;
    nvmlNvLinkErrorCounter_t id;
    std::optional<uint64_t> model::NvLinkSample::*field;
  };
  static constexpr Counter kCounters[] = {
      {GpuMetric::kNvlinkReplayErrors, NVML_NVLINK_ERROR_DL_REPLAY,
       &model::NvLinkSample::replay_errors},
      {GpuMetric::kNvlinkRecoveryErrors, NVML_NVLINK_ERROR_DL_RECOVERY,
       &model::NvLinkSample::recovery_errors},
      {GpuMetric::kNvlinkCrcFlitErrors, NVML_NVLINK_ERROR_DL_CRC_FLIT,
       &model::NvLinkSample::crc_flit_errors},
      {GpuMetric::kNvlinkCrcDataErrors, NVML_NVLINK_ERROR_DL_CRC_DATA,
       &model::NvLinkSample::crc_data_errors},
  };
  std::array<LinkTotal, 4> totals{};
  unsigned active = 0, states_read = 0;
  for (auto& s : out->nvlinks) {
    nvmlEnableState_t st{};
    if (f.nvmlDeviceGetNvLinkState(d.handle, s.link, &st) == NVML_SUCCESS) {
      s.active = st == NVML_FEATURE_ENABLED;
      active += s.active;
      ++states_read;
    }
    for (size_t c = 0; c < 4; ++c) {
      const auto& k = kCounters[c];
      if (d.caps.metrics[Idx(k.metric)].support == Support::kNotSupported ||
          !f.nvmlDeviceGetNvLinkErrorCounter)
        continue;
      unsigned long long v = 0;
      nvmlReturn_t rc = f.nvmlDeviceGetNvLinkErrorCounter(d.handle, s.link, k.id, &v);
      if (rc == NVML_SUCCESS) s.*(k.field) = v;
      totals[c].Add(rc, static_cast<double>(v));
    }
  }
  // "0 links active" only when the links answered: a failed read is no reading, not a down link.
  if (states_read > 0) {
    out->Set(GpuMetric::kNvlinkActiveLinks, active);
    d.caps.metrics[Idx(GpuMetric::kNvlinkActiveLinks)] = {Support::kSupported, ""};
  }
  for (size_t c = 0; c < 4; ++c) {
    const GpuMetric m = kCounters[c].metric;
    if (d.caps.metrics[Idx(m)].support == Support::kNotSupported) continue;
    totals[c].Apply(m, d.links.size(), &d.caps.metrics[Idx(m)], out);
  }
}

void NvmlSource::SampleGpm(Device& d, model::GpuSample* out) {
  const auto& f = lib_->fn();
  if (f.nvmlGpmSampleGet(d.handle, d.gpm_cur) != NVML_SUCCESS) return;
  if (!d.gpm_primed) {
    // GPM metrics are rates between two samples: the first tick only primes.
    d.gpm_primed = true;
    std::swap(d.gpm_prev, d.gpm_cur);
    return;
  }
  static constexpr std::pair<unsigned, GpuMetric> kIds[] = {
      {NVML_GPM_METRIC_GRAPHICS_UTIL, GpuMetric::kGpmGraphicsActive},
      {NVML_GPM_METRIC_SM_UTIL, GpuMetric::kGpmSmActive},
      {NVML_GPM_METRIC_SM_OCCUPANCY, GpuMetric::kGpmSmOccupancy},
      {NVML_GPM_METRIC_ANY_TENSOR_UTIL, GpuMetric::kGpmTensorActive},
      {NVML_GPM_METRIC_DRAM_BW_UTIL, GpuMetric::kGpmDramActive},
  };
  auto mg = std::make_unique<nvmlGpmMetricsGet_t>();
  *mg = {};
  mg->version = NVML_GPM_METRICS_GET_VERSION;
  mg->numMetrics = std::size(kIds);
  mg->sample1 = d.gpm_prev;
  mg->sample2 = d.gpm_cur;
  for (size_t i = 0; i < std::size(kIds); ++i) mg->metrics[i].metricId = kIds[i].first;
  nvmlReturn_t rc = f.nvmlGpmMetricsGet(mg.get());
  std::swap(d.gpm_prev, d.gpm_cur);
  if (rc != NVML_SUCCESS) return;
  for (size_t i = 0; i < std::size(kIds); ++i) {
    const auto m = kIds[i].second;
    if (mg->metrics[i].nvmlReturn == NVML_SUCCESS) {
      out->Set(m, mg->metrics[i].value / 100.0);  // GPM reports percent; DCGM_FI_PROF_* are ratios
      d.caps.metrics[Idx(m)] = {Support::kSupported, ""};
    } else if (IsUnsupported(mg->metrics[i].nvmlReturn)) {
      d.caps.metrics[Idx(m)] = {Support::kNotSupported, NvmlErrorName(mg->metrics[i].nvmlReturn)};
    }
  }
}

void NvmlSource::SampleMig(Device& d, model::GpuSample* out) {
  const auto& f = lib_->fn();
  for (auto& m : d.migs) {
    model::MigSample s;
    s.gpu_instance_id = m.info.gpu_instance_id;
    s.compute_instance_id = m.info.compute_instance_id;
    s.uuid = m.info.uuid;
    nvmlMemory_t mem{};
    if (f.nvmlDeviceGetMemoryInfo && f.nvmlDeviceGetMemoryInfo(m.handle, &mem) == NVML_SUCCESS) {
      s.mem_used_mib = mem.used / kMib;
      s.mem_total_mib = mem.total / kMib;
    }
    if (m.gpm_cur && f.nvmlGpmMigSampleGet &&
        f.nvmlGpmMigSampleGet(d.handle, m.info.gpu_instance_id, m.gpm_cur) == NVML_SUCCESS) {
      if (m.gpm_primed) {
        auto mg = std::make_unique<nvmlGpmMetricsGet_t>();
        *mg = {};
        mg->version = NVML_GPM_METRICS_GET_VERSION;
        mg->numMetrics = 2;
        mg->sample1 = m.gpm_prev;
        mg->sample2 = m.gpm_cur;
        mg->metrics[0].metricId = NVML_GPM_METRIC_GRAPHICS_UTIL;
        mg->metrics[1].metricId = NVML_GPM_METRIC_SM_UTIL;
        if (f.nvmlGpmMetricsGet(mg.get()) == NVML_SUCCESS) {
          if (mg->metrics[0].nvmlReturn == NVML_SUCCESS)
            s.graphics_active = mg->metrics[0].value / 100.0;
          if (mg->metrics[1].nvmlReturn == NVML_SUCCESS) s.sm_active = mg->metrics[1].value / 100.0;
        }
      }
      m.gpm_primed = true;
      std::swap(m.gpm_prev, m.gpm_cur);
    }
    out->mig.push_back(std::move(s));
  }
}

Status NvmlSource::Processes(size_t index, std::vector<model::GpuProcess>* out) {
  out->clear();
  if (index >= state_.size()) return Status::InvalidArgument("no GPU " + std::to_string(index));
  Device& d = *state_[index];
  if (!d.handle || d.lost) return Status::GpuLost("GPU " + std::to_string(index) + " is lost");
  const auto& f = lib_->fn();
  // Drivers 535.43–535.86 wrote 32-byte records through _v3 into 24-byte arrays; there _v2 is
  // the safe call (see nvml_api.h).
  auto fn = f.nvmlDeviceGetComputeRunningProcesses_v3 && !v3_process_layout_broken_
                ? f.nvmlDeviceGetComputeRunningProcesses_v3
                : f.nvmlDeviceGetComputeRunningProcesses_v2;
  auto& cap = d.caps.features[static_cast<size_t>(model::GpuFeature::kProcesses)];
  if (!fn) {
    std::lock_guard<std::mutex> lock(caps_mu_);
    cap = {Support::kNotSupported, "NVML_ERROR_FUNCTION_NOT_FOUND"};
    return Status::NotSupported("no process query in this NVML");
  }
  std::vector<nvmlProcessInfo_t> infos(32);
  nvmlReturn_t rc = NVML_SUCCESS;
  // The list can grow between the size query and the read: retry a few times.
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned n = static_cast<unsigned>(infos.size());
    rc = fn(d.handle, &n, infos.data());
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      infos.resize(std::max<size_t>(n + 8, infos.size() * 2));
      continue;
    }
    if (rc == NVML_SUCCESS) infos.resize(std::min<size_t>(n, infos.size()));
    break;
  }
  {
    std::lock_guard<std::mutex> lock(caps_mu_);
    if (rc == NVML_SUCCESS)
      cap = {Support::kSupported, ""};
    else if (IsUnsupported(rc))
      cap = {Support::kNotSupported, NvmlErrorName(rc)};
  }
  if (rc != NVML_SUCCESS) {
    if (IsLost(rc)) return Status::GpuLost(NvmlErrorName(rc));
    return Status::Unavailable(std::string("process query: ") + NvmlErrorName(rc));
  }
  for (const auto& p : infos) {
    // One entry per (pid, MIG instance): a driver may list a pid twice (several contexts).
    const bool mig = devices_[index].mig_enabled && p.gpuInstanceId != 0xFFFFFFFFu;
    auto same = [&](const model::GpuProcess& x) {
      return x.pid == p.pid &&
             x.gpu_instance_id == (mig ? std::optional<unsigned>(p.gpuInstanceId) : std::nullopt) &&
             x.compute_instance_id ==
                 (mig ? std::optional<unsigned>(p.computeInstanceId) : std::nullopt);
    };
    if (auto it = std::find_if(out->begin(), out->end(), same); it != out->end()) {
      if (p.usedGpuMemory != NVML_VALUE_NOT_AVAILABLE)
        it->used_memory_bytes = it->used_memory_bytes.value_or(0) + p.usedGpuMemory;
      continue;
    }
    model::GpuProcess gp;
    gp.pid = p.pid;
    if (p.usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) gp.used_memory_bytes = p.usedGpuMemory;
    // 0xFFFFFFFF marks "not a MIG process".
    if (mig) {
      gp.gpu_instance_id = p.gpuInstanceId;
      gp.compute_instance_id = p.computeInstanceId;
    }
    out->push_back(gp);
  }
  return Status::Ok();
}

Status NvmlSource::WaitEvents(int timeout_ms, int64_t now_ms, std::vector<model::GpuEvent>* out) {
  if (!lib_ || !event_set_ || !lib_->fn().nvmlEventSetWait_v2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return Status::NotSupported("NVML events unavailable");
  }
  const auto& f = lib_->fn();
  nvmlEventData_t data{};
  // The v1 nvmlEventSetWait fallback writes no instance ids: pre-fill "not MIG".
  data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFFu;
  nvmlReturn_t rc = f.nvmlEventSetWait_v2(event_set_, &data, static_cast<unsigned>(timeout_ms));
  if (rc == NVML_ERROR_TIMEOUT) return Status::Ok();
  if (rc != NVML_SUCCESS) {
    // GPU_IS_LOST here names no device; the sampling path finds which one. Back off so a
    // persistent failure cannot spin.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 200)));
    return Status::Unavailable(std::string("nvmlEventSetWait: ") + NvmlErrorName(rc));
  }
  model::GpuEvent e;
  e.time_ms = now_ms;
  e.gpu_index = model::kUnknownGpu;
  for (const auto& d : state_) {
    if (d->handle == data.device) {
      e.gpu_index = d->index;
      e.uuid = devices_[d->index].uuid;
      e.pci_bus_id = devices_[d->index].pci_bus_id;
    }
  }
  if (data.eventType & nvmlEventTypeXidCriticalError) {
    e.kind = model::GpuEventKind::kXid;
    e.code = data.eventData;
    auto desc = model::XidDescription(e.code);
    e.text = "XID " + std::to_string(e.code) + (desc.empty() ? "" : ": " + std::string(desc));
  } else if (data.eventType & nvmlEventTypeDoubleBitEccError) {
    e.kind = model::GpuEventKind::kEccDoubleBit;
    e.text = "double-bit ECC error";
  } else if (data.eventType & nvmlEventTypeSingleBitEccError) {
    e.kind = model::GpuEventKind::kEccSingleBit;
    e.text = "single-bit ECC error";
  } else {
    return Status::Ok();
  }
  if (e.gpu_index == model::kUnknownGpu) e.text += " (from a device handle NVML did not enumerate)";
  if (data.gpuInstanceId != 0xFFFFFFFFu && e.gpu_index < devices_.size() &&
      devices_[e.gpu_index].mig_enabled)
    e.text += " (MIG GI " + std::to_string(data.gpuInstanceId) + ")";
  out->push_back(std::move(e));
  return Status::Ok();
}

// --- topology (R8) -----------------------------------------------------------------------------

namespace {

std::optional<topo::PciPath> PathOfLevel(nvmlGpuTopologyLevel_t level) {
  switch (level) {
    case NVML_TOPOLOGY_INTERNAL:  // two GPUs on one board: one bridge between them
    case NVML_TOPOLOGY_SINGLE:
      return topo::PciPath::kSingleBridge;
    case NVML_TOPOLOGY_MULTIPLE:
      return topo::PciPath::kMultipleBridges;
    case NVML_TOPOLOGY_HOSTBRIDGE:
      return topo::PciPath::kHostBridge;
    case NVML_TOPOLOGY_NODE:
      return topo::PciPath::kNumaNode;
    case NVML_TOPOLOGY_SYSTEM:
      return topo::PciPath::kSystem;
  }
  return std::nullopt;  // a level a newer driver added: the sysfs path decides instead
}

// `nvidia-smi topo -p2p r` legend.
const char* P2PToken(nvmlGpuP2PStatus_t st) {
  switch (st) {
    case NVML_P2P_STATUS_OK:
      return "OK";
    case NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED:
      return "CNS";
    case NVML_P2P_STATUS_GPU_NOT_SUPPORTED:
      return "GNS";
    case NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED:
      return "TNS";
    case NVML_P2P_STATUS_DISABLED_BY_REGKEY:
      return "DIS";
    case NVML_P2P_STATUS_NOT_SUPPORTED:
      return "NS";
    case NVML_P2P_STATUS_UNKNOWN:
      break;
  }
  return "U";
}

const char* RemoteKind(nvmlIntNvLinkDeviceType_t t) {
  switch (t) {
    case NVML_NVLINK_DEVICE_TYPE_GPU:
      return "gpu";
    case NVML_NVLINK_DEVICE_TYPE_IBMNPU:
      return "npu";
    case NVML_NVLINK_DEVICE_TYPE_SWITCH:
      return "nvswitch";
    case NVML_NVLINK_DEVICE_TYPE_UNKNOWN:
      break;
  }
  return "unknown";
}

}  // namespace

Status NvmlSource::ProbeTopology(topo::NodeSnapshot* out) {
  if (!initialized_) return Status::Unavailable("NVML is not initialized");
  if (!out->gpus.empty()) return Status::InvalidArgument("ProbeTopology wants an empty snapshot");
  const auto& f = lib_->fn();
  out->driver_version = system_.driver_version;
  auto warn = [&](std::string w) { out->warnings.push_back(std::move(w)); };
  const size_t first = out->gpus.size();
  for (const auto& dp : state_) {
    const Device& d = *dp;
    const model::GpuStaticInfo& info = devices_[d.index];
    const std::string g = "GPU" + std::to_string(d.index);
    topo::GpuFacts gf;
    gf.index = d.index;
    gf.name = info.name;
    gf.uuid = info.uuid;
    gf.pci_bus_id = topo::NormalizePciBusId(info.pci_bus_id);
    if (d.lost) {
      warn(g + ": lost; only its identity is known");
      out->gpus.push_back(std::move(gf));
      continue;
    }
    auto uint_of = [&](auto fn, const char* what) -> std::optional<unsigned> {
      unsigned v = 0;
      if (fn == nullptr) return std::nullopt;
      nvmlReturn_t rc = fn(d.handle, &v);
      if (rc == NVML_SUCCESS) return v;
      if (!IsUnsupported(rc)) warn(g + ": " + what + ": " + NvmlErrorName(rc));
      return std::nullopt;
    };
    gf.pcie_gen = uint_of(f.nvmlDeviceGetCurrPcieLinkGeneration, "PCIe generation");
    gf.pcie_max_gen = uint_of(f.nvmlDeviceGetMaxPcieLinkGeneration, "max PCIe generation");
    gf.pcie_width = uint_of(f.nvmlDeviceGetCurrPcieLinkWidth, "PCIe width");
    gf.pcie_max_width = uint_of(f.nvmlDeviceGetMaxPcieLinkWidth, "max PCIe width");
    if (f.nvmlDeviceGetNvLinkState != nullptr) {
      for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; ++l) {
        nvmlEnableState_t st{};
        nvmlReturn_t rc = f.nvmlDeviceGetNvLinkState(d.handle, l, &st);
        if (rc != NVML_SUCCESS) {
          if (!IsUnsupported(rc)) {
            warn(g + " NVLink " + std::to_string(l) + ": state: " + NvmlErrorName(rc));
          }
          continue;
        }
        topo::NvLinkFacts lf;
        lf.link = l;
        lf.active = st == NVML_FEATURE_ENABLED;
        nvmlPciInfo_t pci{};
        if (f.nvmlDeviceGetNvLinkRemotePciInfo_v2 != nullptr &&
            f.nvmlDeviceGetNvLinkRemotePciInfo_v2(d.handle, l, &pci) == NVML_SUCCESS) {
          pci.busId[sizeof(pci.busId) - 1] = 0;
          lf.remote_pci_bus_id = topo::NormalizePciBusId(pci.busId);
        }
        nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
        if (f.nvmlDeviceGetNvLinkRemoteDeviceType != nullptr &&
            f.nvmlDeviceGetNvLinkRemoteDeviceType(d.handle, l, &type) == NVML_SUCCESS) {
          lf.remote_kind = RemoteKind(type);
        }
        unsigned version = 0;
        if (f.nvmlDeviceGetNvLinkVersion != nullptr &&
            f.nvmlDeviceGetNvLinkVersion(d.handle, l, &version) == NVML_SUCCESS) {
          lf.version = version;
        }
        gf.nvlinks.push_back(std::move(lf));
      }
    }
    out->gpus.push_back(std::move(gf));
  }
  // The far end of each NVLink: one of our GPUs (older drivers lack the device-type query, so
  // a remote PCI address that is one of ours also says "gpu"), else what the type said.
  for (size_t i = first; i < out->gpus.size(); ++i) {
    for (topo::NvLinkFacts& l : out->gpus[i].nvlinks) {
      for (size_t j = first; j < out->gpus.size(); ++j) {
        if (j != i && !l.remote_pci_bus_id.empty() &&
            out->gpus[j].pci_bus_id == l.remote_pci_bus_id) {
          l.remote_kind = "gpu";
          l.remote_gpu = out->gpus[j].index;
        }
      }
    }
  }

  const size_t n = state_.size();
  out->gpu_pci_paths.assign(n, std::vector<std::optional<topo::PciPath>>(n));
  out->p2p_read.assign(n, std::vector<std::optional<std::string>>(n));
  bool ancestor_warned = false, p2p_warned = false;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i == j || state_[i]->lost || state_[j]->lost) continue;
      nvmlDevice_t a = state_[i]->handle, b = state_[j]->handle;
      nvmlGpuTopologyLevel_t level{};
      if (f.nvmlDeviceGetTopologyCommonAncestor != nullptr) {
        nvmlReturn_t rc = f.nvmlDeviceGetTopologyCommonAncestor(a, b, &level);
        if (rc == NVML_SUCCESS) {
          out->gpu_pci_paths[i][j] = PathOfLevel(level);
        } else if (!ancestor_warned) {
          ancestor_warned = true;
          warn(std::string("PCIe common ancestor: ") + NvmlErrorName(rc) +
               " (the sysfs PCI paths decide)");
        }
      }
      nvmlGpuP2PStatus_t p2p{};
      if (f.nvmlDeviceGetP2PStatus != nullptr) {
        nvmlReturn_t rc = f.nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_READ, &p2p);
        if (rc == NVML_SUCCESS) {
          out->p2p_read[i][j] = P2PToken(p2p);
        } else if (!p2p_warned) {
          p2p_warned = true;
          warn(std::string("P2P status: ") + NvmlErrorName(rc));
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace gpuwatch::collect
