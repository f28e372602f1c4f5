#include "mock_nvml/internal/scenario.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>
#include <tuple>
#include <utility>

#include "model/gpu_models.h"

namespace gpuwatch::mock_nvml {
namespace {

using nlohmann::json;

constexpr std::string_view kDefaultShape = "2xH100";
constexpr double kDefaultPeriodS = 60;
// Waves of GPU i start i/8 of a period later, so GPUs of one machine do not move in lockstep.
constexpr double kPhaseFractionPerGpu = 1.0 / 8;

// ---------------------------------------------------------------------------------------------
// Functions and capabilities.

constexpr std::string_view kFnNames[] = {
#define GPUWATCH_MOCK_FN_NAME(name, args) #name,
    GPUWATCH_NVML_FUNCTIONS(GPUWATCH_MOCK_FN_NAME)
#undef GPUWATCH_MOCK_FN_NAME
};
static_assert(std::size(kFnNames) == kNumFns);

// Functions that address one GPU (by handle, or by index for the handle lookup); an error rule
// or "unsupported" entry naming a GPU can only apply to these.
bool TargetsGpu(Fn fn) {
  switch (fn) {
    case Fn::nvmlInit_v2:
    case Fn::nvmlShutdown:
    case Fn::nvmlSystemGetDriverVersion:
    case Fn::nvmlSystemGetNVMLVersion:
    case Fn::nvmlSystemGetCudaDriverVersion_v2:
    case Fn::nvmlDeviceGetCount_v2:
    case Fn::nvmlEventSetCreate:
    case Fn::nvmlEventSetWait_v2:
    case Fn::nvmlEventSetFree:
    case Fn::nvmlGpmSampleAlloc:
    case Fn::nvmlGpmSampleFree:
    case Fn::nvmlGpmMetricsGet:
      return false;
    default:
      return true;
  }
}

struct Feature {
  std::string_view name;
  std::vector<size_t> caps;
};

const std::vector<Feature>& Features() {
  auto f = [](Fn fn) { return CapOf(fn); };
  // Leaked on purpose: no destructor runs while another thread may still be inside the library.
  static const auto* features = new std::vector<Feature>{
      {"fan", {f(Fn::nvmlDeviceGetFanSpeed)}},
      {"temp", {f(Fn::nvmlDeviceGetTemperature)}},
      {"mem_temp", {kCapMemTempField}},
      {"utilization", {f(Fn::nvmlDeviceGetUtilizationRates)}},
      {"memory", {f(Fn::nvmlDeviceGetMemoryInfo), f(Fn::nvmlDeviceGetMemoryInfo_v2)}},
      {"power", {f(Fn::nvmlDeviceGetPowerUsage)}},
      {"power_limit", {f(Fn::nvmlDeviceGetEnforcedPowerLimit)}},
      {"energy", {f(Fn::nvmlDeviceGetTotalEnergyConsumption)}},
      {"clocks", {f(Fn::nvmlDeviceGetClockInfo)}},
      {"max_clocks", {f(Fn::nvmlDeviceGetMaxClockInfo)}},
      {"clock_reasons",
       {f(Fn::nvmlDeviceGetCurrentClocksEventReasons),
        f(Fn::nvmlDeviceGetCurrentClocksThrottleReasons)}},
      {"ecc",
       {f(Fn::nvmlDeviceGetTotalEccErrors), f(Fn::nvmlDeviceGetRetiredPages),
        f(Fn::nvmlDeviceGetRetiredPagesPendingStatus), f(Fn::nvmlDeviceGetRemappedRows),
        kCapEccField, kCapRetiredField}},
      {"retired_pages",
       {f(Fn::nvmlDeviceGetRetiredPages), f(Fn::nvmlDeviceGetRetiredPagesPendingStatus),
        kCapRetiredField}},
      {"remapped_rows", {f(Fn::nvmlDeviceGetRemappedRows)}},
      {"pcie_throughput", {f(Fn::nvmlDeviceGetPcieThroughput)}},
      {"pcie_replay", {f(Fn::nvmlDeviceGetPcieReplayCounter)}},
      {"pcie_link",
       {f(Fn::nvmlDeviceGetCurrPcieLinkGeneration), f(Fn::nvmlDeviceGetCurrPcieLinkWidth),
        f(Fn::nvmlDeviceGetMaxPcieLinkGeneration), f(Fn::nvmlDeviceGetMaxPcieLinkWidth)}},
      {"nvlink",
       {f(Fn::nvmlDeviceGetNvLinkState), f(Fn::nvmlDeviceGetNvLinkErrorCounter),
        f(Fn::nvmlDeviceGetNvLinkRemotePciInfo_v2), f(Fn::nvmlDeviceGetNvLinkVersion),
        f(Fn::nvmlDeviceGetNvLinkRemoteDeviceType), kCapNvlinkField}},
      {"topology", {f(Fn::nvmlDeviceGetTopologyCommonAncestor), f(Fn::nvmlDeviceGetP2PStatus)}},
      {"processes",
       {f(Fn::nvmlDeviceGetComputeRunningProcesses_v3),
        f(Fn::nvmlDeviceGetComputeRunningProcesses_v2)}},
      {"mig",
       {f(Fn::nvmlDeviceGetMigMode), f(Fn::nvmlDeviceGetMaxMigDeviceCount),
        f(Fn::nvmlDeviceGetMigDeviceHandleByIndex), f(Fn::nvmlGpmMigSampleGet)}},
      {"gpm", {f(Fn::nvmlGpmSampleGet), f(Fn::nvmlGpmMigSampleGet)}},
      {"events", {f(Fn::nvmlDeviceGetSupportedEventTypes), f(Fn::nvmlDeviceRegisterEvents)}},
      {"field_values", {f(Fn::nvmlDeviceGetFieldValues)}},
      {"serial", {f(Fn::nvmlDeviceGetSerial)}},
      {"vbios", {f(Fn::nvmlDeviceGetVbiosVersion)}},
      {"minor_number", {f(Fn::nvmlDeviceGetMinorNumber)}},
      {"architecture", {f(Fn::nvmlDeviceGetArchitecture)}},
  };
  return *features;
}

// A feature name or an NVML function name → the capabilities it covers.
std::optional<CapSet> CapsOf(std::string_view name) {
  CapSet caps;
  for (const Feature& feature : Features()) {
    if (feature.name != name) continue;
    for (size_t cap : feature.caps) caps.set(cap);
    return caps;
  }
  if (auto fn = FnFromName(name); fn && TargetsGpu(*fn)) {
    caps.set(CapOf(*fn));
    return caps;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Fields.

constexpr double kHuge = 1e18;
constexpr Field kNoRate = Field::kCount;

// Indexed by Field, so kept in enum order; the static_asserts below pin the count and a few
// entries.
constexpr FieldInfo kFields[] = {
    {"util_gpu_pct", 0, 100, kNoRate, 0},
    {"util_mem_pct", 0, 100, kNoRate, 0},
    {"memory_total_mib", 0, kHuge, kNoRate, 0},
    {"memory_reserved_mib", 0, kHuge, kNoRate, 0},
    {"memory_used_mib", 0, kHuge, kNoRate, 0},
    {"temp_c", 0, 200, kNoRate, 0},
    {"mem_temp_c", 0, 200, kNoRate, 0},
    {"power_w", 0, 100000, kNoRate, 0},
    {"power_limit_w", 0, 100000, kNoRate, 0},
    {"energy_mj", 0, kHuge, Field::kPowerW, 1000},
    {"sm_clock_mhz", 0, 100000, kNoRate, 0},
    {"graphics_clock_mhz", 0, 100000, kNoRate, 0},
    {"mem_clock_mhz", 0, 100000, kNoRate, 0},
    {"video_clock_mhz", 0, 100000, kNoRate, 0},
    {"max_sm_clock_mhz", 0, 100000, kNoRate, 0},
    {"max_graphics_clock_mhz", 0, 100000, kNoRate, 0},
    {"max_mem_clock_mhz", 0, 100000, kNoRate, 0},
    {"max_video_clock_mhz", 0, 100000, kNoRate, 0},
    {"clock_event_reasons", 0, 9007199254740991.0, kNoRate, 0},  // 2^53-1: exact in a double
    {"ecc_sbe_volatile", 0, kHuge, kNoRate, 0},
    {"ecc_dbe_volatile", 0, kHuge, kNoRate, 0},
    {"ecc_sbe_aggregate", 0, kHuge, kNoRate, 0},
    {"ecc_dbe_aggregate", 0, kHuge, kNoRate, 0},
    {"retired_pages_sbe", 0, 4096, kNoRate, 0},
    {"retired_pages_dbe", 0, 4096, kNoRate, 0},
    {"retired_pages_pending", 0, 1, kNoRate, 0},
    {"remapped_rows_correctable", 0, 1e9, kNoRate, 0},
    {"remapped_rows_uncorrectable", 0, 1e9, kNoRate, 0},
    {"remapped_rows_pending", 0, 1, kNoRate, 0},
    {"remapped_rows_failure", 0, 1, kNoRate, 0},
    {"pcie_tx_kb_per_s", 0, 4e9, kNoRate, 0},
    {"pcie_rx_kb_per_s", 0, 4e9, kNoRate, 0},
    {"pcie_replay", 0, 4e9, kNoRate, 0},
    {"pcie_gen", 0, 16, kNoRate, 0},
    {"pcie_width", 0, 64, kNoRate, 0},
    {"pcie_max_gen", 0, 16, kNoRate, 0},
    {"pcie_max_width", 0, 64, kNoRate, 0},
    {"fan_pct", 0, 100, kNoRate, 0},
    {"nvlink_active_links", 0, NVML_NVLINK_MAX_LINKS, kNoRate, 0},
    {"nvlink_tx_kib_per_s", 0, kHuge, kNoRate, 0},
    {"nvlink_rx_kib_per_s", 0, kHuge, kNoRate, 0},
    {"nvlink_tx_kib", 0, kHuge, Field::kNvlinkTxKibPerS, 1},
    {"nvlink_rx_kib", 0, kHuge, Field::kNvlinkRxKibPerS, 1},
    {"nvlink_replay_errors", 0, kHuge, kNoRate, 0},
    {"nvlink_recovery_errors", 0, kHuge, kNoRate, 0},
    {"nvlink_crc_flit_errors", 0, kHuge, kNoRate, 0},
    {"nvlink_crc_data_errors", 0, kHuge, kNoRate, 0},
    {"nvlink_ecc_data_errors", 0, kHuge, kNoRate, 0},
    {"gpm_graphics_util_pct", 0, 100, kNoRate, 0},
    {"gpm_sm_util_pct", 0, 100, kNoRate, 0},
    {"gpm_sm_occupancy_pct", 0, 100, kNoRate, 0},
    {"gpm_tensor_util_pct", 0, 100, kNoRate, 0},
    {"gpm_dram_bw_util_pct", 0, 100, kNoRate, 0},
};
static_assert(std::size(kFields) == kNumFields);
static_assert(kFields[static_cast<size_t>(Field::kGpmDramBwUtilPct)].key == "gpm_dram_bw_util_pct");
static_assert(kFields[static_cast<size_t>(Field::kEnergyMj)].key == "energy_mj");
static_assert(kFields[static_cast<size_t>(Field::kNvlinkTxKib)].key == "nvlink_tx_kib");

bool IsCounter(Field f) { return InfoOf(f).rate_of != kNoRate; }

// Keys of the per-instance GPM values in "mig" entries, in GpmIndex order.
constexpr std::string_view kMigGpmKeys[kNumGpm] = {
    "graphics_util_pct", "sm_util_pct", "sm_occupancy_pct", "tensor_util_pct", "dram_bw_util_pct"};

// ---------------------------------------------------------------------------------------------
// Models.

// The models' real names and limits come from the table both simulators share
// (model/gpu_models.h); here each is tied to the mock's Model and NVML's architecture code.
struct ModelDefaults {
  Model model;
  const model::GpuModelSpec& spec;
};
const ModelDefaults kModels[] = {
    {Model::kH100, *model::GpuModelByKey("H100")},
    {Model::kA100, *model::GpuModelByKey("A100")},
    {Model::kRtx4090, *model::GpuModelByKey("4090")},
    {Model::kL40S, *model::GpuModelByKey("L40S")},
};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

unsigned NvmlArch(model::GpuArch a) {
  switch (a) {
    case model::GpuArch::kAmpere:
      return NVML_DEVICE_ARCH_AMPERE;
    case model::GpuArch::kAda:
      return NVML_DEVICE_ARCH_ADA;
    case model::GpuArch::kHopper:
      return NVML_DEVICE_ARCH_HOPPER;
  }
  return NVML_DEVICE_ARCH_HOPPER;
}

const model::GpuModelSpec& DefaultsOf(Model m) {
  for (const ModelDefaults& d : kModels) {
    if (d.model == m) return d.spec;
  }
  return kModels[0].spec;
}

std::optional<Model> ModelFromName(std::string_view name) {
  const model::GpuModelSpec* spec = model::GpuModelByKey(name);
  for (const ModelDefaults& d : kModels) {
    if (&d.spec == spec) return d.model;
  }
  return std::nullopt;
}

constexpr std::string_view kModelList = model::kGpuModelList;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// "<prefix>xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" from a seed: deterministic, and distinct for
// distinct seeds in practice.
std::string MakeUuid(std::string_view prefix, uint64_t seed) {
  uint64_t a = SplitMix64(seed);
  uint64_t b = SplitMix64(a ^ seed);
  char buf[64];
  std::snprintf(buf, sizeof(buf),
                "%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64, a >> 32,
                (a >> 16) & 0xFFFF, a & 0xFFFF, b >> 48, b & uint64_t{0xFFFFFFFFFFFF});
  return std::string(prefix) + buf;
}

uint64_t GpuSeed(Model m, unsigned index) { return (static_cast<uint64_t>(m) + 1) << 32 | index; }

// PCI buses of the eight GPUs of an HGX baseboard; further GPUs repeat them in the next
// domains, so every bus id stays distinct.
constexpr unsigned kHgxBuses[8] = {0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB};

Wave Constant(double v) { return Wave{v, 0, kDefaultPeriodS, 0}; }

std::string DefaultMigProfile(double gpu_total_mib, double instance_total_mib) {
  long slices = std::max(1L, std::lround(instance_total_mib / (gpu_total_mib / 8)));
  long gb = std::max(1L, std::lround(instance_total_mib / 1024));
  return std::to_string(slices) + "g." + std::to_string(gb) + "gb";
}

GpuSpec MakeGpu(Model model, unsigned index) {
  const model::GpuModelSpec& d = DefaultsOf(model);
  GpuSpec g;
  g.model = model;
  g.index = index;
  g.name = d.name;
  g.uuid = MakeUuid("GPU-", GpuSeed(model, index));
  if (d.serial_base != 0) g.serial = std::to_string(d.serial_base + index * 37ULL);
  g.vbios_version = d.vbios_version;
  g.pci_domain = index / 8;
  g.pci_bus = kHgxBuses[index % 8];
  g.pci_device_id = d.pci_device_id;
  g.pci_subsystem_id = d.pci_subsystem_id;
  g.minor_number = index;
  g.architecture = NvmlArch(d.arch);
  g.nvlink_count = d.nvlink_count;
  g.nvlink_version = d.nvlink_version;
  // HGX H100 boards give each GPU its own PCIe switch (shared with a NIC); HGX A100 boards put
  // two GPUs behind one; the PCIe shapes follow 8-GPU servers with a switch per CPU socket
  // (GPU0-3 and GPU4-7, as in ../shared/real/topo/nccltests307_*).
  g.pcie_switch = model == Model::kH100      ? index
                  : model == Model::kA100    ? index / 2
                  : model == Model::kRtx4090 ? index / 4
                                             : index / 2;
  g.mig_capable = d.mig_capable;
  for (std::string_view rest = d.unsupported; !rest.empty();) {
    const size_t comma = rest.find(',');
    g.unsupported |= *CapsOf(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }

  const double phase = index * kDefaultPeriodS * kPhaseFractionPerGpu;
  auto wave = [&](double base, double amplitude) {
    return Wave{base, amplitude, kDefaultPeriodS, phase};
  };
  const double usable = d.memory_total_mib - d.memory_reserved_mib;
  std::array<Wave, kNumFields> w;
  for (Wave& x : w) x = Constant(0);
  auto set = [&](Field f, Wave x) { w[Idx(f)] = x; };
  set(Field::kUtilGpuPct, wave(65, 25));
  set(Field::kUtilMemPct, wave(40, 20));
  set(Field::kMemoryTotalMib, Constant(d.memory_total_mib));
  set(Field::kMemoryReservedMib, Constant(d.memory_reserved_mib));
  set(Field::kMemoryUsedMib, wave(std::round(0.55 * usable), std::round(0.15 * usable)));
  set(Field::kTempC, wave(d.idle_temp_c + 20, 8));
  set(Field::kMemTempC, wave(d.idle_temp_c + 30, 8));
  set(Field::kPowerW, wave(0.55 * d.power_limit_w, 0.25 * d.power_limit_w));
  set(Field::kPowerLimitW, Constant(d.power_limit_w));
  // Counters start where a machine up for a while would be, not at 0.
  set(Field::kEnergyMj, Constant(3.6e9 + index * 1.0e8));
  set(Field::kSmClockMhz,
      wave(std::round(0.85 * d.max_sm_clock_mhz), std::round(0.1 * d.max_sm_clock_mhz)));
  set(Field::kGraphicsClockMhz, w[Idx(Field::kSmClockMhz)]);
  set(Field::kMemClockMhz, Constant(d.max_mem_clock_mhz));
  set(Field::kVideoClockMhz,
      wave(std::round(0.7 * d.max_video_clock_mhz), std::round(0.1 * d.max_video_clock_mhz)));
  set(Field::kMaxSmClockMhz, Constant(d.max_sm_clock_mhz));
  set(Field::kMaxGraphicsClockMhz, Constant(d.max_sm_clock_mhz));
  set(Field::kMaxMemClockMhz, Constant(d.max_mem_clock_mhz));
  set(Field::kMaxVideoClockMhz, Constant(d.max_video_clock_mhz));
  set(Field::kPcieTxKbPerS, wave(d.pcie_kb_per_s, 0.5 * d.pcie_kb_per_s));
  set(Field::kPcieRxKbPerS, wave(1.5 * d.pcie_kb_per_s, 0.5 * d.pcie_kb_per_s));
  set(Field::kPcieGen, Constant(d.pcie_gen));
  set(Field::kPcieWidth, Constant(d.pcie_width));
  set(Field::kPcieMaxGen, Constant(d.pcie_gen));
  set(Field::kPcieMaxWidth, Constant(d.pcie_width));
  set(Field::kFanPct, wave(45, 15));
  set(Field::kNvlinkActiveLinks, Constant(d.nvlink_count));
  if (d.nvlink_count > 0) {
    set(Field::kNvlinkTxKibPerS, wave(9.5e6, 4.5e6));
    set(Field::kNvlinkRxKibPerS, wave(9.0e6, 4.0e6));
    set(Field::kNvlinkTxKib, Constant(1.0e9 + index * 1.0e7));
    set(Field::kNvlinkRxKib, Constant(0.9e9 + index * 1.0e7));
  }
  set(Field::kGpmGraphicsUtilPct, wave(62, 25));
  set(Field::kGpmSmUtilPct, wave(52, 20));
  set(Field::kGpmSmOccupancyPct, wave(31, 10));
  set(Field::kGpmTensorUtilPct, wave(36, 20));
  set(Field::kGpmDramBwUtilPct, wave(45, 20));
  for (size_t i = 0; i < kNumFields; ++i) g.fields[i] = {Segment{0, w[i]}};
  g.processes = {ProcessList{}};
  return g;
}

struct Shape {
  unsigned count = 0;
  Model model = Model::kH100;
};

bool LooksLikeShape(std::string_view s) {
  if (s.find('/') != std::string_view::npos) return false;
  if (s.size() >= 5 && Lower(s.substr(s.size() - 5)) == ".json") return false;
  size_t x = s.find_first_of("xX");
  if (x == 0 || x == std::string_view::npos) return false;
  return std::all_of(s.begin(), s.begin() + x, [](char c) { return c >= '0' && c <= '9'; });
}

// "<N>x<MODEL>". `origin` prefixes errors ("GPUWATCH_MOCK_NVML=8xV100" or "file: /shape").
Result<Shape> ParseShape(std::string_view s, std::string_view origin) {
  auto fail = [&](std::string what) {
    return Status::InvalidArgument(std::string(origin) + ": " + what);
  };
  size_t x = s.find_first_of("xX");
  if (x == 0 || x == std::string_view::npos) {
    return fail("expected a shape <N>x<MODEL> such as 8xH100 (MODEL is " + std::string(kModelList) +
                ")");
  }
  unsigned count = 0;
  for (char c : s.substr(0, x)) {
    if (c < '0' || c > '9' || count > kMaxGpus)
      return fail("bad GPU count in '" + std::string(s) + "'");
    count = count * 10 + static_cast<unsigned>(c - '0');
  }
  if (count < 1 || count > kMaxGpus) {
    return fail("GPU count must be 1.." + std::to_string(kMaxGpus) + ", got '" +
                std::string(s.substr(0, x)) + "'");
  }
  std::optional<Model> model = ModelFromName(s.substr(x + 1));
  if (!model) {
    return fail("unknown GPU model '" + std::string(s.substr(x + 1)) + "' (expected " +
                std::string(kModelList) + ")");
  }
  return Shape{count, *model};
}

Scenario FromShape(Shape shape) {
  Scenario s;
  for (unsigned i = 0; i < shape.count; ++i) s.gpus.push_back(MakeGpu(shape.model, i));
  // Two sockets from 4 GPUs up, half the GPUs on each.
  for (GpuSpec& g : s.gpus) g.numa_node = shape.count >= 4 ? g.index * 2 / shape.count : 0;
  return s;
}

// Inserts `segment` after every segment at or before its time: a later entry for the same
// instant wins.
template <typename T>
void InsertByTime(std::vector<T>* timeline, T item) {
  auto pos = std::upper_bound(timeline->begin(), timeline->end(), item.at_s,
                              [](double t, const T& s) { return t < s.at_s; });
  timeline->insert(pos, std::move(item));
}

// ---------------------------------------------------------------------------------------------
// JSON scenario parsing. Every error names the file and the JSON pointer of the culprit.

std::string JoinKeys(std::initializer_list<std::string_view> keys) {
  std::string out;
  for (std::string_view k : keys) {
    if (!out.empty()) out += ", ";
    out += k;
  }
  return out;
}

std::string Pointer(const std::string& parent, std::string_view key) {
  return parent + "/" + std::string(key);
}
std::string Pointer(const std::string& parent, size_t index) {
  return parent + "/" + std::to_string(index);
}

class Parser {
 public:
  explicit Parser(std::string_view origin) : origin_(origin) {}

  Result<Scenario> Parse(const json& root) {
    GW_RETURN_IF_ERROR(
        ExpectObject(root, "",
                     {"shape", "driver_version", "nvml_version", "cuda_driver_version",
                      "v3_process_detail_layout", "gpus", "errors", "all_errors", "xid"}));
    std::string shape_text(kDefaultShape);
    if (root.contains("shape")) {
      Result<std::string> s = String(root["shape"], "/shape");
      if (!s.ok()) return s.status();
      shape_text = *s;
    }
    Result<Shape> shape = ParseShape(shape_text, origin_ + ": /shape");
    if (!shape.ok()) return shape.status();
    Scenario scenario = FromShape(*shape);

    if (root.contains("driver_version")) {
      Result<std::string> v = String(root["driver_version"], "/driver_version");
      if (!v.ok()) return v.status();
      scenario.driver_version = *v;
    }
    if (root.contains("nvml_version")) {
      Result<std::string> v = String(root["nvml_version"], "/nvml_version");
      if (!v.ok()) return v.status();
      scenario.nvml_version = *v;
    }
    if (root.contains("cuda_driver_version")) {
      Result<uint64_t> v = Integer(root["cuda_driver_version"], "/cuda_driver_version", 1000000);
      if (!v.ok()) return v.status();
      scenario.cuda_driver_version = static_cast<int>(*v);
    }
    if (root.contains("v3_process_detail_layout")) {
      const json& v = root["v3_process_detail_layout"];
      if (!v.is_boolean()) return TypeError(v, "/v3_process_detail_layout", "true or false");
      scenario.v3_process_detail_layout = v.get<bool>();
    }
    if (root.contains("gpus")) {
      const json& gpus = root["gpus"];
      if (!gpus.is_array()) return TypeError(gpus, "/gpus", "an array");
      for (size_t i = 0; i < gpus.size(); ++i) {
        GW_RETURN_IF_ERROR(ApplyGpu(gpus[i], Pointer("/gpus", i), &scenario));
      }
    }
    if (root.contains("errors")) {
      const json& errors = root["errors"];
      if (!errors.is_array()) return TypeError(errors, "/errors", "an array");
      for (size_t i = 0; i < errors.size(); ++i) {
        Result<ErrorRule> rule = Error(errors[i], Pointer("/errors", i), scenario);
        if (!rule.ok()) return rule.status();
        scenario.errors.push_back(*rule);
      }
    }
    if (root.contains("all_errors")) {
      Result<nvmlReturn_t> code = Code(root["all_errors"], "/all_errors");
      if (!code.ok()) return code.status();
      ErrorRule rule;
      rule.code = *code;
      scenario.errors.push_back(rule);
    }
    if (root.contains("xid")) {
      const json& xids = root["xid"];
      if (!xids.is_array()) return TypeError(xids, "/xid", "an array");
      for (size_t i = 0; i < xids.size(); ++i) {
        Result<XidSpec> xid = Xid(xids[i], Pointer("/xid", i), scenario);
        if (!xid.ok()) return xid.status();
        InsertByTime(&scenario.xids, *xid);
      }
    }
    return scenario;
  }

 private:
  Status Fail(const std::string& path, const std::string& what) const {
    return Status::InvalidArgument(origin_ + ": " + (path.empty() ? "top level" : path) + ": " +
                                   what);
  }
  Status TypeError(const json& v, const std::string& path, std::string_view expected) const {
    return Fail(path, "expected " + std::string(expected) + ", got " + v.type_name());
  }

  Status ExpectObject(const json& v, const std::string& path,
                      std::initializer_list<std::string_view> keys) const {
    if (!v.is_object()) return TypeError(v, path, "an object");
    for (const auto& item : v.items()) {
      if (std::find(keys.begin(), keys.end(), item.key()) == keys.end()) {
        return Fail(path, "unknown key \"" + item.key() + "\" (expected " + JoinKeys(keys) + ")");
      }
    }
    return Status::Ok();
  }

  Result<double> Number(const json& v, const std::string& path, double min, double max) const {
    if (!v.is_number()) return TypeError(v, path, "a number");
    double d = v.get<double>();
    if (!(d >= min && d <= max)) {
      return Fail(path, "value " + v.dump() + " out of range " + FormatRange(min, max));
    }
    return d;
  }

  Result<uint64_t> Integer(const json& v, const std::string& path, uint64_t max) const {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > max)
        return Fail(path, "value " + v.dump() + " out of range 0.." + std::to_string(max));
      return u;
    }
    if (v.is_number_integer()) return Fail(path, "value " + v.dump() + " must not be negative");
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (d == std::floor(d) && d >= 0 && d <= static_cast<double>(max)) {
        return static_cast<uint64_t>(d);
      }
      return Fail(path, "expected an integer 0.." + std::to_string(max) + ", got " + v.dump());
    }
    return TypeError(v, path, "an integer");
  }

  // An integer, or a string "0x…" for the PCI ids that are always written in hex.
  Result<uint64_t> HexOrInteger(const json& v, const std::string& path, uint64_t max) const {
    if (!v.is_string()) return Integer(v, path, max);
    const std::string& s = v.get_ref<const std::string&>();
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && s.size() <= 18 &&
        s.find_first_not_of("0123456789abcdefABCDEF", 2) == std::string::npos) {
      uint64_t u = std::stoull(s.substr(2), nullptr, 16);
      if (u <= max) return u;
    }
    return Fail(path, "expected an integer or a hex string \"0x…\", got " + v.dump());
  }

  Result<std::string> String(const json& v, const std::string& path) const {
    if (!v.is_string()) return TypeError(v, path, "a string");
    return v.get<std::string>();
  }

  static std::string FormatRange(double min, double max) {
    auto f = [](double x) {
      std::ostringstream o;
      o << x;
      return o.str();
    };
    return f(min) + ".." + f(max);
  }

  // A number (constant) or {"base", "amplitude", "period_s", "phase_s"}, kept within the field's
  // range over the whole period so integrals stay exact.
  Result<Wave> WaveOf(const json& v, const std::string& path, double min, double max,
                      unsigned gpu_index) const {
    if (v.is_number()) {
      Result<double> d = Number(v, path, min, max);
      if (!d.ok()) return d.status();
      return Constant(*d);
    }
    if (!v.is_object()) {
      return TypeError(v, path, "a number or an object {base, amplitude, period_s, phase_s}");
    }
    GW_RETURN_IF_ERROR(ExpectObject(v, path, {"base", "amplitude", "period_s", "phase_s"}));
    if (!v.contains("base")) return Fail(path, "missing key \"base\"");
    Wave w;
    Result<double> base = Number(v["base"], Pointer(path, "base"), -kHuge, kHuge);
    if (!base.ok()) return base.status();
    w.base = *base;
    if (v.contains("amplitude")) {
      Result<double> a = Number(v["amplitude"], Pointer(path, "amplitude"), 0, kHuge);
      if (!a.ok()) return a.status();
      w.amplitude = *a;
    }
    if (v.contains("period_s")) {
      Result<double> p = Number(v["period_s"], Pointer(path, "period_s"), 1e-3, kHuge);
      if (!p.ok()) return p.status();
      w.period_s = *p;
    }
    w.phase_s = gpu_index * w.period_s * kPhaseFractionPerGpu;
    if (v.contains("phase_s")) {
      Result<double> p = Number(v["phase_s"], Pointer(path, "phase_s"), -kHuge, kHuge);
      if (!p.ok()) return p.status();
      w.phase_s = *p;
    }
    if (w.base - w.amplitude < min || w.base + w.amplitude > max) {
      return Fail(path, "base ± amplitude must stay within " + FormatRange(min, max));
    }
    return w;
  }

  Status ApplyValues(const json& values, const std::string& path, double at_s, GpuSpec* gpu) {
    if (!values.is_object()) return TypeError(values, path, "an object");
    for (const auto& item : values.items()) {
      std::string item_path = Pointer(path, item.key());
      std::optional<Field> field = FieldFromKey(item.key());
      if (!field) {
        return Fail(path, "unknown value \"" + item.key() +
                              "\" (see docs/format/mock-nvml-scenario.md for the list)");
      }
      const FieldInfo& info = InfoOf(*field);
      Wave w;
      if (IsCounter(*field)) {
        Result<double> d = Number(item.value(), item_path, info.min, info.max);
        if (!d.ok()) return d.status();
        w = Constant(*d);
      } else {
        Result<Wave> r = WaveOf(item.value(), item_path, info.min, info.max, gpu->index);
        if (!r.ok()) return r.status();
        w = *r;
      }
      Timeline& timeline = gpu->fields[Idx(*field)];
      if (at_s == 0 && timeline.size() == 1) {
        timeline[0].wave = w;
      } else {
        InsertByTime(&timeline, Segment{at_s, w});
      }
    }
    return Status::Ok();
  }

  Result<std::vector<ProcessSpec>> Processes(const json& v, const std::string& path) const {
    if (!v.is_array()) return TypeError(v, path, "an array");
    std::vector<ProcessSpec> out;
    for (size_t i = 0; i < v.size(); ++i) {
      const json& p = v[i];
      std::string p_path = Pointer(path, i);
      GW_RETURN_IF_ERROR(ExpectObject(
          p, p_path, {"pid", "used_memory_mib", "gpu_instance_id", "compute_instance_id"}));
      if (!p.contains("pid")) return Fail(p_path, "missing key \"pid\"");
      ProcessSpec spec;
      // "self" / "parent": the process that loaded the mock (the agent) or its parent, so
      // attribution can be tested against a process that really exists in /proc.
      if (p["pid"] == "self") {
        spec.pid = static_cast<uint32_t>(getpid());
      } else if (p["pid"] == "parent") {
        spec.pid = static_cast<uint32_t>(getppid());
      } else {
        Result<uint64_t> pid = Integer(p["pid"], Pointer(p_path, "pid"), 0xFFFFFFFFu);
        if (!pid.ok()) return pid.status();
        spec.pid = static_cast<uint32_t>(*pid);
      }
      spec.used_memory_mib = 0;
      if (p.contains("used_memory_mib")) {
        if (p["used_memory_mib"].is_null()) {
          spec.used_memory_mib.reset();
        } else {
          Result<double> m = Number(p["used_memory_mib"], Pointer(p_path, "used_memory_mib"), 0,
                                    16.0 * 1024 * 1024 * 1024);
          if (!m.ok()) return m.status();
          spec.used_memory_mib = *m;
        }
      }
      for (auto [key, dst] : {std::pair{"gpu_instance_id", &spec.gpu_instance_id},
                              std::pair{"compute_instance_id", &spec.compute_instance_id}}) {
        if (!p.contains(key)) continue;
        Result<uint64_t> id = Integer(p[key], Pointer(p_path, key), 0xFFFFFFFFu);
        if (!id.ok()) return id.status();
        *dst = static_cast<unsigned>(*id);
      }
      out.push_back(spec);
    }
    return out;
  }

  Result<MigInstanceSpec> MigInstance(const json& v, const std::string& path,
                                      const GpuSpec& gpu) const {
    GW_RETURN_IF_ERROR(
        ExpectObject(v, path,
                     {"gpu_instance_id", "compute_instance_id", "memory_total_mib",
                      "memory_used_mib", "uuid", "profile", "graphics_util_pct", "sm_util_pct",
                      "sm_occupancy_pct", "tensor_util_pct", "dram_bw_util_pct"}));
    for (std::string_view key : {"gpu_instance_id", "memory_total_mib"}) {
      if (!v.contains(key)) return Fail(path, "missing key \"" + std::string(key) + "\"");
    }
    MigInstanceSpec m;
    Result<uint64_t> gi = Integer(v["gpu_instance_id"], Pointer(path, "gpu_instance_id"), 1000);
    if (!gi.ok()) return gi.status();
    m.gpu_instance_id = static_cast<unsigned>(*gi);
    if (v.contains("compute_instance_id")) {
      Result<uint64_t> ci =
          Integer(v["compute_instance_id"], Pointer(path, "compute_instance_id"), 1000);
      if (!ci.ok()) return ci.status();
      m.compute_instance_id = static_cast<unsigned>(*ci);
    }
    Result<double> total =
        Number(v["memory_total_mib"], Pointer(path, "memory_total_mib"), 1, kHuge);
    if (!total.ok()) return total.status();
    m.memory_total_mib = *total;
    m.memory_used_mib = Constant(0);
    if (v.contains("memory_used_mib")) {
      Result<Wave> used = WaveOf(v["memory_used_mib"], Pointer(path, "memory_used_mib"), 0,
                                 m.memory_total_mib, gpu.index);
      if (!used.ok()) return used.status();
      m.memory_used_mib = *used;
    }
    m.uuid = MakeUuid("MIG-",
                      SplitMix64(GpuSeed(gpu.model, gpu.index)) ^
                          (static_cast<uint64_t>(m.gpu_instance_id) << 16 | m.compute_instance_id));
    if (v.contains("uuid")) {
      Result<std::string> u = String(v["uuid"], Pointer(path, "uuid"));
      if (!u.ok()) return u.status();
      m.uuid = *u;
    }
    m.profile = DefaultMigProfile(gpu.Value(Field::kMemoryTotalMib, 0), m.memory_total_mib);
    if (v.contains("profile")) {
      Result<std::string> p = String(v["profile"], Pointer(path, "profile"));
      if (!p.ok()) return p.status();
      m.profile = *p;
    }
    // Instance activity defaults to the GPU's own GPM waves, shifted per GPU instance.
    for (size_t i = 0; i < kNumGpm; ++i) {
      m.gpm[i] = gpu.fields[Idx(kGpmFields[i])][0].wave;
      m.gpm[i].phase_s += m.gpu_instance_id * 5.0;
      if (!v.contains(kMigGpmKeys[i])) continue;
      Result<Wave> w = WaveOf(v[kMigGpmKeys[i]], Pointer(path, kMigGpmKeys[i]), 0, 100, gpu.index);
      if (!w.ok()) return w.status();
      m.gpm[i] = *w;
    }
    return m;
  }

  Status ApplyCaps(const json& v, const std::string& path, bool supported, GpuSpec* gpu) const {
    if (!v.is_array()) return TypeError(v, path, "an array of strings");
    for (size_t i = 0; i < v.size(); ++i) {
      Result<std::string> name = String(v[i], Pointer(path, i));
      if (!name.ok()) return name.status();
      std::optional<CapSet> caps = CapsOf(*name);
      if (!caps) {
        std::string features;
        for (const Feature& f : Features())
          features += (features.empty() ? "" : ", ") + std::string(f.name);
        return Fail(Pointer(path, i),
                    "unknown feature \"" + *name +
                        "\" (expected an NVML device function name or one of: " + features + ")");
      }
      if (supported) {
        gpu->unsupported &= ~*caps;
      } else {
        gpu->unsupported |= *caps;
      }
    }
    return Status::Ok();
  }

  Status ApplyGpu(const json& entry, const std::string& path, Scenario* scenario) {
    GW_RETURN_IF_ERROR(ExpectObject(entry, path,
                                    {"gpu",
                                     "model",
                                     "name",
                                     "uuid",
                                     "serial",
                                     "vbios_version",
                                     "pci_bus_id",
                                     "pci_device_id",
                                     "pci_subsystem_id",
                                     "minor_number",
                                     "architecture",
                                     "nvlink_count",
                                     "nvlink_version",
                                     "numa_node",
                                     "pcie_switch",
                                     "unsupported",
                                     "supported",
                                     "values",
                                     "changes",
                                     "processes",
                                     "mig",
                                     "lost_at_s"}));
    if (!entry.contains("gpu")) return Fail(path, "missing key \"gpu\"");
    Result<uint64_t> index = Integer(entry["gpu"], Pointer(path, "gpu"), kMaxGpus);
    if (!index.ok()) return index.status();
    if (*index >= scenario->gpus.size()) {
      return Fail(Pointer(path, "gpu"), "GPU " + std::to_string(*index) +
                                            " does not exist (shape has " +
                                            std::to_string(scenario->gpus.size()) + ")");
    }
    GpuSpec& gpu = scenario->gpus[*index];

    if (entry.contains("model")) {
      Result<std::string> name = String(entry["model"], Pointer(path, "model"));
      if (!name.ok()) return name.status();
      std::optional<Model> model = ModelFromName(*name);
      if (!model) {
        return Fail(Pointer(path, "model"), "unknown GPU model \"" + *name + "\" (expected " +
                                                std::string(kModelList) + ")");
      }
      const unsigned numa_node = gpu.numa_node;  // the socket is the slot's, not the card's
      gpu = MakeGpu(*model, gpu.index);
      gpu.numa_node = numa_node;
    }
    for (auto [key, dst] :
         {std::pair{"name", &gpu.name}, std::pair{"uuid", &gpu.uuid},
          std::pair{"serial", &gpu.serial}, std::pair{"vbios_version", &gpu.vbios_version}}) {
      if (!entry.contains(key)) continue;
      Result<std::string> s = String(entry[key], Pointer(path, key));
      if (!s.ok()) return s.status();
      *dst = *s;
    }
    if (entry.contains("pci_bus_id")) {
      std::string p = Pointer(path, "pci_bus_id");
      Result<std::string> s = String(entry["pci_bus_id"], p);
      if (!s.ok()) return s.status();
      unsigned domain, bus, device, function;
      char tail;
      if (std::sscanf(s->c_str(), "%8x:%2x:%2x.%1x%c", &domain, &bus, &device, &function, &tail) !=
              4 ||
          device > 0x1F || function > 7) {
        return Fail(p, "expected \"DDDDDDDD:BB:DD.F\" (hex), got \"" + *s + "\"");
      }
      gpu.pci_domain = domain;
      gpu.pci_bus = bus;
      gpu.pci_device = device;
      gpu.pci_function = function;
    }
    for (auto [key, dst] : {std::pair{"pci_device_id", &gpu.pci_device_id},
                            std::pair{"pci_subsystem_id", &gpu.pci_subsystem_id}}) {
      if (!entry.contains(key)) continue;
      Result<uint64_t> id = HexOrInteger(entry[key], Pointer(path, key), 0xFFFFFFFFu);
      if (!id.ok()) return id.status();
      *dst = static_cast<unsigned>(*id);
    }
    for (auto [key, dst, max] :
         {std::tuple{"minor_number", &gpu.minor_number, 255u},
          std::tuple{"architecture", &gpu.architecture, 0xFFFFFFFFu},
          std::tuple{"nvlink_count", &gpu.nvlink_count, unsigned{NVML_NVLINK_MAX_LINKS}},
          std::tuple{"nvlink_version", &gpu.nvlink_version, 7u},
          std::tuple{"numa_node", &gpu.numa_node, 63u},
          std::tuple{"pcie_switch", &gpu.pcie_switch, 255u}}) {
      if (!entry.contains(key)) continue;
      Result<uint64_t> n = Integer(entry[key], Pointer(path, key), max);
      if (!n.ok()) return n.status();
      *dst = static_cast<unsigned>(*n);
      if (dst == &gpu.nvlink_count) {
        gpu.fields[Idx(Field::kNvlinkActiveLinks)] = {Segment{0, Constant(gpu.nvlink_count)}};
      }
    }
    if (entry.contains("unsupported")) {
      GW_RETURN_IF_ERROR(
          ApplyCaps(entry["unsupported"], Pointer(path, "unsupported"), false, &gpu));
    }
    if (entry.contains("supported")) {
      GW_RETURN_IF_ERROR(ApplyCaps(entry["supported"], Pointer(path, "supported"), true, &gpu));
    }
    if (entry.contains("values")) {
      GW_RETURN_IF_ERROR(ApplyValues(entry["values"], Pointer(path, "values"), 0, &gpu));
    }
    if (entry.contains("processes")) {
      Result<std::vector<ProcessSpec>> procs =
          Processes(entry["processes"], Pointer(path, "processes"));
      if (!procs.ok()) return procs.status();
      gpu.processes[0].processes = *procs;
    }
    if (entry.contains("changes")) {
      GW_RETURN_IF_ERROR(ApplyChanges(entry["changes"], Pointer(path, "changes"), &gpu));
    }
    if (entry.contains("mig")) {
      std::string mig_path = Pointer(path, "mig");
      const json& mig = entry["mig"];
      if (!mig.is_array()) return TypeError(mig, mig_path, "an array of instances");
      if (!gpu.mig_capable) {
        return Fail(mig_path, "GPU " + std::to_string(gpu.index) + " (" + gpu.name +
                                  ") does not support MIG (only H100 and A100 do)");
      }
      if (mig.size() > kMaxMigDevices) {
        return Fail(mig_path, "at most " + std::to_string(kMaxMigDevices) + " MIG instances");
      }
      gpu.mig_enabled = true;
      gpu.mig.clear();
      for (size_t i = 0; i < mig.size(); ++i) {
        Result<MigInstanceSpec> m = MigInstance(mig[i], Pointer(mig_path, i), gpu);
        if (!m.ok()) return m.status();
        for (const MigInstanceSpec& other : gpu.mig) {
          if (other.gpu_instance_id == m->gpu_instance_id &&
              other.compute_instance_id == m->compute_instance_id) {
            return Fail(Pointer(mig_path, i), "duplicate (gpu_instance_id, compute_instance_id)");
          }
        }
        gpu.mig.push_back(*m);
      }
    }
    if (entry.contains("lost_at_s")) {
      Result<double> t = Number(entry["lost_at_s"], Pointer(path, "lost_at_s"), 0, kHuge);
      if (!t.ok()) return t.status();
      gpu.lost_at_s = *t;
    }
    return Status::Ok();
  }

  Status ApplyChanges(const json& changes, const std::string& path, GpuSpec* gpu) {
    if (!changes.is_array()) return TypeError(changes, path, "an array");
    for (size_t i = 0; i < changes.size(); ++i) {
      const json& c = changes[i];
      std::string c_path = Pointer(path, i);
      GW_RETURN_IF_ERROR(ExpectObject(c, c_path, {"at_s", "values", "processes"}));
      if (!c.contains("at_s")) return Fail(c_path, "missing key \"at_s\"");
      Result<double> at = Number(c["at_s"], Pointer(c_path, "at_s"), 0, kHuge);
      if (!at.ok()) return at.status();
      if (c.contains("values")) {
        GW_RETURN_IF_ERROR(ApplyValues(c["values"], Pointer(c_path, "values"), *at, gpu));
      }
      if (c.contains("processes")) {
        Result<std::vector<ProcessSpec>> procs =
            Processes(c["processes"], Pointer(c_path, "processes"));
        if (!procs.ok()) return procs.status();
        InsertByTime(&gpu->processes, ProcessList{*at, *procs});
      }
    }
    return Status::Ok();
  }

  Result<nvmlReturn_t> Code(const json& v, const std::string& path) const {
    if (v.is_string()) {
      const std::string& name = v.get_ref<const std::string&>();
      std::optional<nvmlReturn_t> code = ErrorCodeFromName(name);
      if (!code) return Fail(path, "unknown NVML error code \"" + name + "\"");
      if (*code == NVML_SUCCESS) return Fail(path, "NVML_SUCCESS is not an error");
      return *code;
    }
    if (v.is_number_integer() || v.is_number_unsigned()) {
      int64_t n = v.get<int64_t>();
      if (n <= 0 || n > 0x7FFFFFFF) return Fail(path, "error code must be 1..2147483647");
      return static_cast<nvmlReturn_t>(n);
    }
    return TypeError(v, path, "an error code name (\"NVML_ERROR_UNKNOWN\") or number");
  }

  Result<ErrorRule> Error(const json& v, const std::string& path, const Scenario& scenario) const {
    GW_RETURN_IF_ERROR(ExpectObject(v, path, {"function", "code", "gpu", "at_s", "until_s"}));
    for (std::string_view key : {"function", "code"}) {
      if (!v.contains(key)) return Fail(path, "missing key \"" + std::string(key) + "\"");
    }
    ErrorRule rule;
    Result<std::string> fn = String(v["function"], Pointer(path, "function"));
    if (!fn.ok()) return fn.status();
    if (*fn != "*") {
      rule.fn = FnFromName(*fn);
      if (!rule.fn) {
        return Fail(Pointer(path, "function"),
                    "unknown NVML function \"" + *fn + "\" (see GPUWATCH_NVML_FUNCTIONS)");
      }
    }
    Result<nvmlReturn_t> code = Code(v["code"], Pointer(path, "code"));
    if (!code.ok()) return code.status();
    rule.code = *code;
    if (v.contains("gpu")) {
      Result<uint64_t> gpu = Integer(v["gpu"], Pointer(path, "gpu"), kMaxGpus);
      if (!gpu.ok()) return gpu.status();
      if (*gpu >= scenario.gpus.size()) {
        return Fail(Pointer(path, "gpu"), "GPU " + std::to_string(*gpu) + " does not exist");
      }
      if (rule.fn && !TargetsGpu(*rule.fn)) {
        return Fail(Pointer(path, "gpu"), *fn + " does not address a GPU");
      }
      rule.gpu = static_cast<unsigned>(*gpu);
    }
    if (v.contains("at_s")) {
      Result<double> t = Number(v["at_s"], Pointer(path, "at_s"), 0, kHuge);
      if (!t.ok()) return t.status();
      rule.from_s = *t;
    }
    if (v.contains("until_s")) {
      Result<double> t = Number(v["until_s"], Pointer(path, "until_s"), 0, kHuge);
      if (!t.ok()) return t.status();
      rule.until_s = *t;
    }
    return rule;
  }

  Result<XidSpec> Xid(const json& v, const std::string& path, const Scenario& scenario) const {
    GW_RETURN_IF_ERROR(
        ExpectObject(v, path, {"at_s", "gpu", "code", "gpu_instance_id", "compute_instance_id"}));
    for (std::string_view key : {"at_s", "gpu", "code"}) {
      if (!v.contains(key)) return Fail(path, "missing key \"" + std::string(key) + "\"");
    }
    XidSpec x;
    Result<double> at = Number(v["at_s"], Pointer(path, "at_s"), 0, kHuge);
    if (!at.ok()) return at.status();
    x.at_s = *at;
    Result<uint64_t> gpu = Integer(v["gpu"], Pointer(path, "gpu"), kMaxGpus);
    if (!gpu.ok()) return gpu.status();
    if (*gpu >= scenario.gpus.size()) {
      return Fail(Pointer(path, "gpu"), "GPU " + std::to_string(*gpu) + " does not exist");
    }
    x.gpu = static_cast<unsigned>(*gpu);
    Result<uint64_t> code = Integer(v["code"], Pointer(path, "code"), 0xFFFFFFFFu);
    if (!code.ok()) return code.status();
    x.code = *code;
    for (auto [key, dst] : {std::pair{"gpu_instance_id", &x.gpu_instance_id},
                            std::pair{"compute_instance_id", &x.compute_instance_id}}) {
      if (!v.contains(key)) continue;
      Result<uint64_t> id = Integer(v[key], Pointer(path, key), 0xFFFFFFFFu);
      if (!id.ok()) return id.status();
      *dst = static_cast<unsigned>(*id);
    }
    return x;
  }

  std::string origin_;
};

// nlohmann's "[json.exception.parse_error.101] parse error at line 3, column 5: …" → "line 3,
// column 5: …", on one line.
std::string SyntaxErrorText(const std::string& what) {
  std::string text = what;
  if (size_t at = text.find(" at line "); at != std::string::npos) {
    text = text.substr(at + 4);
  } else if (size_t bracket = text.find("] "); bracket != std::string::npos) {
    text = text.substr(bracket + 2);
  }
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

struct ErrorCodeInfo {
  nvmlReturn_t code;
  std::string_view name;
  const char* text;  // nvmlErrorString's wording
};

constexpr ErrorCodeInfo kErrorCodes[] = {
    {NVML_SUCCESS, "NVML_SUCCESS", "Success"},
    {NVML_ERROR_UNINITIALIZED, "NVML_ERROR_UNINITIALIZED", "Uninitialized"},
    {NVML_ERROR_INVALID_ARGUMENT, "NVML_ERROR_INVALID_ARGUMENT", "Invalid Argument"},
    {NVML_ERROR_NOT_SUPPORTED, "NVML_ERROR_NOT_SUPPORTED", "Not Supported"},
    {NVML_ERROR_NO_PERMISSION, "NVML_ERROR_NO_PERMISSION", "Insufficient Permissions"},
    {NVML_ERROR_ALREADY_INITIALIZED, "NVML_ERROR_ALREADY_INITIALIZED", "Already Initialized"},
    {NVML_ERROR_NOT_FOUND, "NVML_ERROR_NOT_FOUND", "Not Found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "NVML_ERROR_INSUFFICIENT_SIZE", "Insufficient Size"},
    {NVML_ERROR_INSUFFICIENT_POWER, "NVML_ERROR_INSUFFICIENT_POWER", "Insufficient External Power"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "NVML_ERROR_DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {NVML_ERROR_TIMEOUT, "NVML_ERROR_TIMEOUT", "Timeout"},
    {NVML_ERROR_IRQ_ISSUE, "NVML_ERROR_IRQ_ISSUE", "Interrupt Request Issue"},
    {NVML_ERROR_LIBRARY_NOT_FOUND, "NVML_ERROR_LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "NVML_ERROR_FUNCTION_NOT_FOUND", "Function Not Found"},
    {NVML_ERROR_CORRUPTED_INFOROM, "NVML_ERROR_CORRUPTED_INFOROM", "Corrupted infoROM"},
    {NVML_ERROR_GPU_IS_LOST, "NVML_ERROR_GPU_IS_LOST", "GPU is lost"},
    {NVML_ERROR_RESET_REQUIRED, "NVML_ERROR_RESET_REQUIRED", "GPU requires restart"},
    {NVML_ERROR_OPERATING_SYSTEM, "NVML_ERROR_OPERATING_SYSTEM",
     "The operating system has blocked the request."},
    {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
     "RM has detected an NVML/RM version mismatch."},
    {NVML_ERROR_IN_USE, "NVML_ERROR_IN_USE", "In use by another client"},
    {NVML_ERROR_MEMORY, "NVML_ERROR_MEMORY", "Insufficient Memory"},
    {NVML_ERROR_NO_DATA, "NVML_ERROR_NO_DATA", "No data"},
    {NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
     "The requested vgpu operation is not available on target device, becasue ECC is enabled"},
    {NVML_ERROR_INSUFFICIENT_RESOURCES, "NVML_ERROR_INSUFFICIENT_RESOURCES",
     "Ran out of critical resources, other than memory"},
    {NVML_ERROR_FREQ_NOT_SUPPORTED, "NVML_ERROR_FREQ_NOT_SUPPORTED", "Frequency not supported"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
     "Argument version mismatch"},
    {NVML_ERROR_DEPRECATED, "NVML_ERROR_DEPRECATED", "Deprecated"},
    {NVML_ERROR_NOT_READY, "NVML_ERROR_NOT_READY", "Not Ready"},
    {NVML_ERROR_GPU_NOT_FOUND, "NVML_ERROR_GPU_NOT_FOUND", "GPU not found"},
    {NVML_ERROR_INVALID_STATE, "NVML_ERROR_INVALID_STATE", "Invalid state"},
    {NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED",
     "Reset type not supported"},
    {NVML_ERROR_UNKNOWN, "NVML_ERROR_UNKNOWN", "Unknown Error"},
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public functions.

std::string_view FnName(Fn fn) {
  size_t i = static_cast<size_t>(fn);
  return i < kNumFns ? kFnNames[i] : std::string_view("?");
}

std::optional<Fn> FnFromName(std::string_view name) {
  for (size_t i = 0; i < kNumFns; ++i) {
    if (kFnNames[i] == name) return static_cast<Fn>(i);
  }
  return std::nullopt;
}

bool InAllErrorsScope(Fn fn) {
  switch (fn) {
    case Fn::nvmlInit_v2:
    case Fn::nvmlShutdown:
    case Fn::nvmlDeviceGetCount_v2:
    case Fn::nvmlDeviceGetHandleByIndex_v2:
    case Fn::nvmlEventSetCreate:
    case Fn::nvmlEventSetFree:
    case Fn::nvmlGpmSampleAlloc:
    case Fn::nvmlGpmSampleFree:
      return false;
    default:
      return true;
  }
}

const FieldInfo& InfoOf(Field f) { return kFields[Idx(f)]; }

std::optional<Field> FieldFromKey(std::string_view key) {
  for (size_t i = 0; i < kNumFields; ++i) {
    if (kFields[i].key == key) return static_cast<Field>(i);
  }
  return std::nullopt;
}

double Wave::At(double t_s) const {
  if (amplitude == 0) return base;
  return base + amplitude * std::sin(2 * std::numbers::pi * (t_s + phase_s) / period_s);
}

double Wave::Integral(double from_s, double to_s) const {
  if (to_s <= from_s) return 0;
  double sum = base * (to_s - from_s);
  if (amplitude != 0) {
    const double k = 2 * std::numbers::pi / period_s;
    sum -= amplitude / k * (std::cos(k * (to_s + phase_s)) - std::cos(k * (from_s + phase_s)));
  }
  return sum;
}

namespace {
// The segment in force at t_s (the first one before time 0).
size_t SegmentAt(const Timeline& timeline, double t_s) {
  size_t i = 0;
  while (i + 1 < timeline.size() && timeline[i + 1].at_s <= t_s) ++i;
  return i;
}
}  // namespace

double ValueAt(const Timeline& timeline, double t_s) {
  return timeline[SegmentAt(timeline, t_s)].wave.At(t_s);
}

double IntegralOf(const Timeline& timeline, double from_s, double to_s) {
  double sum = 0;
  for (size_t i = 0; i < timeline.size(); ++i) {
    double start = std::max(i == 0 ? from_s : timeline[i].at_s, from_s);
    double end = std::min(i + 1 < timeline.size() ? timeline[i + 1].at_s : kNever, to_s);
    sum += timeline[i].wave.Integral(start, end);
  }
  return sum;
}

double GpuSpec::Value(Field f, double t_s) const {
  const FieldInfo& info = InfoOf(f);
  return std::clamp(ValueAt(fields[Idx(f)], t_s), info.min, info.max);
}

double GpuSpec::Counter(Field f, double t_s) const {
  const FieldInfo& info = InfoOf(f);
  const Timeline& timeline = fields[Idx(f)];
  const Segment& set = timeline[SegmentAt(timeline, t_s)];
  if (info.rate_of == kNoRate) return set.wave.base;
  double since = set.at_s;
  return set.wave.base + info.rate_factor * IntegralOf(fields[Idx(info.rate_of)], since, t_s);
}

const std::vector<ProcessSpec>& GpuSpec::ProcessesAt(double t_s) const {
  size_t i = 0;
  while (i + 1 < processes.size() && processes[i + 1].at_s <= t_s) ++i;
  return processes[i].processes;
}

Result<Scenario> ParseScenarioJson(std::string_view text, std::string_view origin) {
  try {
    json root = json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/true,
                            /*ignore_comments=*/true);
    return Parser(origin).Parse(root);
  } catch (const json::parse_error& e) {
    return Status::InvalidArgument(std::string(origin) + ": " + SyntaxErrorText(e.what()));
  } catch (const std::exception& e) {
    // Every access above is type-checked first; this is a backstop so nothing escapes the C ABI.
    return Status::InvalidArgument(std::string(origin) + ": " + SyntaxErrorText(e.what()));
  }
}

Result<Scenario> LoadScenario(std::string_view spec) {
  if (spec.empty()) spec = kDefaultShape;
  if (LooksLikeShape(spec)) {
    Result<Shape> shape = ParseShape(spec, "GPUWATCH_MOCK_NVML=" + std::string(spec));
    if (!shape.ok()) return shape.status();
    return FromShape(*shape);
  }
  std::string path(spec);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::InvalidArgument(path + ": cannot open: " + std::strerror(errno) +
                                   " (GPUWATCH_MOCK_NVML takes a shape like 8xH100 or a JSON "
                                   "scenario file)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::InvalidArgument(path + ": read error");
  return ParseScenarioJson(text.str(), path);
}

std::optional<nvmlReturn_t> ErrorCodeFromName(std::string_view name) {
  for (const ErrorCodeInfo& e : kErrorCodes) {
    if (e.name == name) return e.code;
  }
  return std::nullopt;
}

const char* ErrorCodeText(nvmlReturn_t code) {
  for (const ErrorCodeInfo& e : kErrorCodes) {
    if (e.code == code) return e.text;
  }
  return "Unknown Error";
}

}  // namespace gpuwatch::mock_nvml
