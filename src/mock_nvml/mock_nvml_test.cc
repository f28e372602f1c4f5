// mock_nvml_test: libgpuwatch-mock-nvml.so through dlopen/dlsym, the way the agent's loader
// sees it. Scenario time runs GPUWATCH_MOCK_NVML_TIME_SCALE times faster than the wall clock,
// so timed changes, XIDs and lost GPUs happen within a fraction of a second; every timing
// check leaves a wide margin for a loaded 2-core machine.
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "collect/nvml_api.h"

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

const std::string kLibrary = GPUWATCH_BINARY_DIR "/libgpuwatch-mock-nvml.so";
const std::string kFixtures = GPUWATCH_SOURCE_DIR "/tests/fixtures/mock/";
constexpr unsigned long long kMib = 1024ULL * 1024ULL;

struct Api {
#define GPUWATCH_TEST_POINTER(name, args) nvmlReturn_t(*name) args = nullptr;
  GPUWATCH_NVML_FUNCTIONS(GPUWATCH_TEST_POINTER)
#undef GPUWATCH_TEST_POINTER
  const char* (*nvmlErrorString)(nvmlReturn_t) = nullptr;
};

std::vector<std::string> TableNames() {
  return {
#define GPUWATCH_TEST_NAME(name, args) #name,
      GPUWATCH_NVML_FUNCTIONS(GPUWATCH_TEST_NAME)
#undef GPUWATCH_TEST_NAME
  };
}

// Loaded once per process, like the agent does; RTLD_LOCAL as the production loader uses.
const Api& Nvml() {
  static const Api* api = [] {
    void* handle = dlopen(kLibrary.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      ADD_FAILURE() << "dlopen " << kLibrary << ": " << dlerror();
      std::abort();
    }
    auto* a = new Api;
#define GPUWATCH_TEST_RESOLVE(name, args) \
  a->name = reinterpret_cast<decltype(a->name)>(dlsym(handle, #name));
    GPUWATCH_NVML_FUNCTIONS(GPUWATCH_TEST_RESOLVE)
#undef GPUWATCH_TEST_RESOLVE
    a->nvmlErrorString =
        reinterpret_cast<decltype(a->nvmlErrorString)>(dlsym(handle, "nvmlErrorString"));
    return a;
  }();
  return *api;
}

class MockNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("GPUWATCH_MOCK_NVML");
    unsetenv("GPUWATCH_MOCK_NVML_TIME_SCALE");
  }
  void TearDown() override {
    // Drop every reference so the next test starts from a fresh nvmlInit_v2.
    while (nvml().nvmlShutdown() == NVML_SUCCESS) {
    }
    for (const std::string& path : temp_files_) std::remove(path.c_str());
  }

  static const Api& nvml() { return Nvml(); }

  // Initializes with GPUWATCH_MOCK_NVML=spec (unset when empty).
  nvmlReturn_t Init(const std::string& spec, const char* time_scale = nullptr) {
    if (spec.empty()) {
      unsetenv("GPUWATCH_MOCK_NVML");
    } else {
      setenv("GPUWATCH_MOCK_NVML", spec.c_str(), 1);
    }
    if (time_scale != nullptr) setenv("GPUWATCH_MOCK_NVML_TIME_SCALE", time_scale, 1);
    nvmlReturn_t rc = nvml().nvmlInit_v2();
    started_ = Clock::now();
    return rc;
  }

  std::string WriteScenario(const std::string& text) {
    std::string path = ::testing::TempDir() + "mock_nvml_test_" + std::to_string(getpid()) + "_" +
                       std::to_string(temp_files_.size()) + ".json";
    std::ofstream(path) << text;
    temp_files_.push_back(path);
    return path;
  }

  nvmlDevice_t Device(unsigned index) {
    nvmlDevice_t device = nullptr;
    EXPECT_EQ(nvml().nvmlDeviceGetHandleByIndex_v2(index, &device), NVML_SUCCESS) << index;
    return device;
  }

  unsigned Count() {
    unsigned count = 0;
    EXPECT_EQ(nvml().nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    return count;
  }

  std::string Name(nvmlDevice_t d) {
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    EXPECT_EQ(nvml().nvmlDeviceGetName(d, buf, sizeof(buf)), NVML_SUCCESS);
    return buf;
  }

  std::string Uuid(nvmlDevice_t d) {
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    EXPECT_EQ(nvml().nvmlDeviceGetUUID(d, buf, sizeof(buf)), NVML_SUCCESS);
    return buf;
  }

  unsigned PowerMw(nvmlDevice_t d) {
    unsigned mw = 0;
    EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(d, &mw), NVML_SUCCESS);
    return mw;
  }

  nvmlFieldValue_t Field(nvmlDevice_t d, unsigned field_id, unsigned scope = 0) {
    nvmlFieldValue_t v{};
    v.fieldId = field_id;
    v.scopeId = scope;
    EXPECT_EQ(nvml().nvmlDeviceGetFieldValues(d, 1, &v), NVML_SUCCESS);
    return v;
  }

  // Sleeps until `ms` of wall time have passed since the last Init().
  void SleepUntilMs(int ms) { std::this_thread::sleep_until(started_ + milliseconds(ms)); }
  long ElapsedMs() const {
    return std::chrono::duration_cast<milliseconds>(Clock::now() - started_).count();
  }

  Clock::time_point started_;
  std::vector<std::string> temp_files_;
};

// True when `s` has the shape of `pattern`: 'h' is a lower-case hex digit, 'H' an upper-case
// one, any other character stands for itself.
bool MatchesHexPattern(std::string_view s, std::string_view pattern) {
  if (s.size() != pattern.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool digit = c >= '0' && c <= '9';
    if (pattern[i] == 'h') {
      if (!digit && !(c >= 'a' && c <= 'f')) return false;
    } else if (pattern[i] == 'H') {
      if (!digit && !(c >= 'A' && c <= 'F')) return false;
    } else if (c != pattern[i]) {
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// The shared library itself.

// Reads the dynamic symbol table of an ELF64 file: defined symbols with their binding.
std::vector<std::pair<std::string, unsigned>> DefinedDynamicSymbols(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::pair<std::string, unsigned>> out;
  if (bytes.size() < sizeof(Elf64_Ehdr)) return out;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(bytes.data());
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(bytes.data() + eh->e_shoff);
  for (unsigned i = 0; i < eh->e_shnum; ++i) {
    if (sections[i].sh_type != SHT_DYNSYM) continue;
    const char* strtab = bytes.data() + sections[sections[i].sh_link].sh_offset;
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(bytes.data() + sections[i].sh_offset);
    size_t n = sections[i].sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < n; ++k) {
      if (syms[k].st_shndx == SHN_UNDEF || syms[k].st_name == 0) continue;
      out.emplace_back(strtab + syms[k].st_name, ELF64_ST_BIND(syms[k].st_info));
    }
  }
  return out;
}

TEST_F(MockNvmlTest, ExportsExactlyTheNvmlTableAndImplementsAllOfIt) {
  std::set<std::string> expected;
  for (const std::string& name : TableNames()) expected.insert(name);
  expected.insert("nvmlErrorString");
  std::set<std::string> exported;
  for (const auto& [name, binding] : DefinedDynamicSymbols(kLibrary)) {
    exported.insert(name);
    // A weak definition is the NOT_SUPPORTED fallback of mock_nvml_stubs.cc.
    EXPECT_EQ(binding, unsigned{STB_GLOBAL}) << name << " is not implemented by the mock";
  }
  EXPECT_EQ(exported, expected);
  const Api& api = nvml();
  EXPECT_NE(api.nvmlInit_v2, nullptr);
  EXPECT_NE(api.nvmlGpmMetricsGet, nullptr);
  EXPECT_NE(api.nvmlErrorString, nullptr);
}

TEST_F(MockNvmlTest, ErrorStringsMatchNvml) {
  EXPECT_STREQ(nvml().nvmlErrorString(NVML_SUCCESS), "Success");
  EXPECT_STREQ(nvml().nvmlErrorString(NVML_ERROR_GPU_IS_LOST), "GPU is lost");
  EXPECT_STREQ(nvml().nvmlErrorString(NVML_ERROR_NOT_SUPPORTED), "Not Supported");
  EXPECT_STREQ(nvml().nvmlErrorString(12345), "Unknown Error");
}

// ---------------------------------------------------------------------------------------------
// Life cycle.

TEST_F(MockNvmlTest, CallsBeforeInitAreUninitialized) {
  unsigned count = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvml().nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
  nvmlEventSet_t set = nullptr;
  EXPECT_EQ(nvml().nvmlEventSetCreate(&set), NVML_ERROR_UNINITIALIZED);
  char buf[80];
  EXPECT_EQ(nvml().nvmlSystemGetDriverVersion(buf, sizeof(buf)), NVML_ERROR_UNINITIALIZED);
}

TEST_F(MockNvmlTest, InitIsReferenceCounted) {
  ASSERT_EQ(Init("2xH100"), NVML_SUCCESS);
  // The second init keeps the first configuration, as NVML does.
  ASSERT_EQ(Init("8xA100"), NVML_SUCCESS);
  EXPECT_EQ(Count(), 2u);
  ASSERT_EQ(nvml().nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(Count(), 2u);
  ASSERT_EQ(nvml().nvmlShutdown(), NVML_SUCCESS);
  unsigned count = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvml().nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
}

TEST_F(MockNvmlTest, StaleHandleFromAnEarlierInitIsRejected) {
  ASSERT_EQ(Init("4xH100"), NVML_SUCCESS);
  nvmlDevice_t gpu3 = Device(3);
  ASSERT_EQ(nvml().nvmlShutdown(), NVML_SUCCESS);
  ASSERT_EQ(Init("2xH100"), NVML_SUCCESS);
  unsigned mw = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(gpu3, &mw), NVML_ERROR_INVALID_ARGUMENT);
  int on_stack = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(reinterpret_cast<nvmlDevice_t>(&on_stack), &mw),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(nullptr, &mw), NVML_ERROR_INVALID_ARGUMENT);
}

// ---------------------------------------------------------------------------------------------
// Shapes and identities.

TEST_F(MockNvmlTest, DefaultIsTwoH100WithDriver550) {
  ASSERT_EQ(Init(""), NVML_SUCCESS);
  EXPECT_EQ(Count(), 2u);
  EXPECT_EQ(Name(Device(0)), "NVIDIA H100 80GB HBM3");
  char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  ASSERT_EQ(nvml().nvmlSystemGetDriverVersion(buf, sizeof(buf)), NVML_SUCCESS);
  EXPECT_STREQ(buf, "550.90.07");
  ASSERT_EQ(nvml().nvmlSystemGetNVMLVersion(buf, sizeof(buf)), NVML_SUCCESS);
  EXPECT_STREQ(buf, "12.550.90.07");
  int cuda = 0;
  ASSERT_EQ(nvml().nvmlSystemGetCudaDriverVersion_v2(&cuda), NVML_SUCCESS);
  EXPECT_EQ(cuda, 12040);
}

struct ShapeCase {
  const char* shape;
  unsigned count;
  const char* name;
  unsigned arch;
  unsigned long long memory_total_mib;
  unsigned power_limit_w;
  unsigned max_sm_clock_mhz;
  unsigned pcie_max_gen;
  unsigned nvlinks;
  bool fan, mem_temp, ecc, gpm, mig, serial;
};

TEST_F(MockNvmlTest, ShapesLookLikeTheRealBoards) {
  const ShapeCase cases[] = {
      {"8xH100", 8, "NVIDIA H100 80GB HBM3", NVML_DEVICE_ARCH_HOPPER, 81559, 700, 1980, 5, 18,
       false, true, true, true, true, true},
      {"8xA100", 8, "NVIDIA A100-SXM4-80GB", NVML_DEVICE_ARCH_AMPERE, 81920, 400, 1410, 4, 12,
       false, true, true, false, true, true},
      {"8x4090", 8, "NVIDIA GeForce RTX 4090", NVML_DEVICE_ARCH_ADA, 24564, 450, 3120, 4, 0, true,
       false, false, false, false, false},
      {"4xL40S", 4, "NVIDIA L40S", NVML_DEVICE_ARCH_ADA, 46068, 350, 2520, 4, 0, false, false, true,
       false, false, true},
      {"3xh100", 3, "NVIDIA H100 80GB HBM3", NVML_DEVICE_ARCH_HOPPER, 81559, 700, 1980, 5, 18,
       false, true, true, true, true, true},
  };
  for (const ShapeCase& c : cases) {
    SCOPED_TRACE(c.shape);
    ASSERT_EQ(Init(c.shape), NVML_SUCCESS);
    ASSERT_EQ(Count(), c.count);
    for (unsigned i : {0u, c.count - 1}) {
      SCOPED_TRACE(i);
      nvmlDevice_t d = Device(i);
      EXPECT_EQ(Name(d), c.name);
      nvmlDeviceArchitecture_t arch = 0;
      ASSERT_EQ(nvml().nvmlDeviceGetArchitecture(d, &arch), NVML_SUCCESS);
      EXPECT_EQ(arch, c.arch);
      nvmlMemory_v2_t mem{};
      mem.version = nvmlMemory_v2;
      ASSERT_EQ(nvml().nvmlDeviceGetMemoryInfo_v2(d, &mem), NVML_SUCCESS);
      EXPECT_EQ(mem.total, c.memory_total_mib * kMib);
      EXPECT_EQ(mem.total, mem.reserved + mem.used + mem.free);
      EXPECT_GT(mem.used, 0u);
      unsigned limit_mw = 0;
      ASSERT_EQ(nvml().nvmlDeviceGetEnforcedPowerLimit(d, &limit_mw), NVML_SUCCESS);
      EXPECT_EQ(limit_mw, c.power_limit_w * 1000);
      EXPECT_LE(PowerMw(d), limit_mw);
      unsigned clock = 0;
      ASSERT_EQ(nvml().nvmlDeviceGetMaxClockInfo(d, NVML_CLOCK_SM, &clock), NVML_SUCCESS);
      EXPECT_EQ(clock, c.max_sm_clock_mhz);
      unsigned gen = 0, width = 0;
      ASSERT_EQ(nvml().nvmlDeviceGetMaxPcieLinkGeneration(d, &gen), NVML_SUCCESS);
      ASSERT_EQ(nvml().nvmlDeviceGetMaxPcieLinkWidth(d, &width), NVML_SUCCESS);
      EXPECT_EQ(gen, c.pcie_max_gen);
      EXPECT_EQ(width, 16u);

      unsigned links = 0;
      for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
        nvmlEnableState_t active;
        nvmlReturn_t rc = nvml().nvmlDeviceGetNvLinkState(d, link, &active);
        EXPECT_TRUE(rc == NVML_SUCCESS || rc == NVML_ERROR_NOT_SUPPORTED) << rc;
        if (rc == NVML_SUCCESS) ++links;
      }
      EXPECT_EQ(links, c.nvlinks);
      nvmlFieldValue_t tx = Field(d, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0);
      EXPECT_EQ(tx.nvmlReturn, c.nvlinks > 0 ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED);

      unsigned fan = 0;
      EXPECT_EQ(nvml().nvmlDeviceGetFanSpeed(d, &fan),
                c.fan ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED);
      nvmlFieldValue_t mem_temp = Field(d, NVML_FI_DEV_MEMORY_TEMP);
      EXPECT_EQ(mem_temp.nvmlReturn, c.mem_temp ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED);
      unsigned long long ecc = 0;
      EXPECT_EQ(nvml().nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                   NVML_VOLATILE_ECC, &ecc),
                c.ecc ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED);
      nvmlGpmSupport_t gpm{NVML_GPM_SUPPORT_VERSION, 7};
      ASSERT_EQ(nvml().nvmlGpmQueryDeviceSupport(d, &gpm), NVML_SUCCESS);
      EXPECT_EQ(gpm.isSupportedDevice, c.gpm ? 1u : 0u);
      unsigned current = 9, pending = 9;
      EXPECT_EQ(nvml().nvmlDeviceGetMigMode(d, &current, &pending),
                c.mig ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED);
      if (c.mig) {
        EXPECT_EQ(current, unsigned{NVML_DEVICE_MIG_DISABLE});
      }
      char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
      EXPECT_EQ(nvml().nvmlDeviceGetSerial(d, serial, sizeof(serial)),
                c.serial ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED);
    }
    ASSERT_EQ(nvml().nvmlShutdown(), NVML_SUCCESS);
  }
}

TEST_F(MockNvmlTest, IdentitiesAreUniqueWellFormedAndDeterministic) {
  ASSERT_EQ(Init("16xH100"), NVML_SUCCESS);
  constexpr std::string_view kUuidShape = "GPU-hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh";
  // NVML writes upper-case hex, unlike sysfs.
  constexpr std::string_view kBusIdShape = "HHHHHHHH:HH:HH.H";
  std::set<std::string> uuids, buses, serials;
  std::vector<std::string> first_uuids;
  for (unsigned i = 0; i < 16; ++i) {
    nvmlDevice_t d = Device(i);
    std::string uuid = Uuid(d);
    EXPECT_TRUE(MatchesHexPattern(uuid, kUuidShape)) << uuid;
    uuids.insert(uuid);
    first_uuids.push_back(uuid);
    nvmlPciInfo_t pci{};
    ASSERT_EQ(nvml().nvmlDeviceGetPciInfo_v3(d, &pci), NVML_SUCCESS);
    EXPECT_TRUE(MatchesHexPattern(pci.busId, kBusIdShape)) << pci.busId;
    EXPECT_EQ(pci.pciDeviceId, 0x233010DEu);
    buses.insert(pci.busId);
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
    ASSERT_EQ(nvml().nvmlDeviceGetSerial(d, serial, sizeof(serial)), NVML_SUCCESS);
    serials.insert(serial);
    char vbios[NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE];
    ASSERT_EQ(nvml().nvmlDeviceGetVbiosVersion(d, vbios, sizeof(vbios)), NVML_SUCCESS);
    EXPECT_GT(std::strlen(vbios), 0u);
    unsigned minor = 99;
    ASSERT_EQ(nvml().nvmlDeviceGetMinorNumber(d, &minor), NVML_SUCCESS);
    EXPECT_EQ(minor, i);
  }
  EXPECT_EQ(uuids.size(), 16u);
  EXPECT_EQ(buses.size(), 16u);
  EXPECT_EQ(serials.size(), 16u);
  nvmlPciInfo_t pci{};
  ASSERT_EQ(nvml().nvmlDeviceGetPciInfo_v3(Device(0), &pci), NVML_SUCCESS);
  EXPECT_STREQ(pci.busId, "00000000:18:00.0");
  EXPECT_STREQ(pci.busIdLegacy, "0000:18:00.0");
  EXPECT_EQ(pci.bus, 0x18u);

  ASSERT_EQ(nvml().nvmlShutdown(), NVML_SUCCESS);
  ASSERT_EQ(Init("16xH100"), NVML_SUCCESS);
  for (unsigned i = 0; i < 16; ++i) EXPECT_EQ(Uuid(Device(i)), first_uuids[i]);
}

// ---------------------------------------------------------------------------------------------
// Argument validation.

TEST_F(MockNvmlTest, ValidatesArgumentsLikeNvml) {
  ASSERT_EQ(Init("2xA100"), NVML_SUCCESS);
  nvmlDevice_t d = Device(0);
  nvmlDevice_t out = nullptr;
  EXPECT_EQ(nvml().nvmlDeviceGetHandleByIndex_v2(2, &out), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlDeviceGetHandleByIndex_v2(0, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlDeviceGetCount_v2(nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(d, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlDeviceGetName(d, nullptr, 96), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlDeviceGetPciInfo_v3(d, nullptr), NVML_ERROR_INVALID_ARGUMENT);

  char small[5];
  EXPECT_EQ(nvml().nvmlDeviceGetName(d, small, sizeof(small)), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(nvml().nvmlDeviceGetUUID(d, small, sizeof(small)), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(nvml().nvmlSystemGetDriverVersion(small, sizeof(small)), NVML_ERROR_INSUFFICIENT_SIZE);
  // Exactly the string plus its terminator fits.
  char exact[sizeof("NVIDIA A100-SXM4-80GB")];
  EXPECT_EQ(nvml().nvmlDeviceGetName(d, exact, sizeof(exact)), NVML_SUCCESS);
  EXPECT_EQ(nvml().nvmlDeviceGetName(d, exact, sizeof(exact) - 1), NVML_ERROR_INSUFFICIENT_SIZE);

  nvmlMemory_v2_t mem{};
  mem.version = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetMemoryInfo_v2(d, &mem), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  nvmlMemory_t mem1{};
  ASSERT_EQ(nvml().nvmlDeviceGetMemoryInfo(d, &mem1), NVML_SUCCESS);
  EXPECT_EQ(mem1.total, mem1.used + mem1.free);

  unsigned value = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetTemperature(d, static_cast<nvmlTemperatureSensors_t>(7), &value),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlDeviceGetClockInfo(d, static_cast<nvmlClockType_t>(9), &value),
            NVML_ERROR_INVALID_ARGUMENT);
  nvmlEnableState_t state;
  EXPECT_EQ(nvml().nvmlDeviceGetNvLinkState(d, NVML_NVLINK_MAX_LINKS, &state),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlDeviceGetNvLinkState(d, 12, &state), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvml().nvmlDeviceGetNvLinkState(d, 11, &state), NVML_SUCCESS);
  unsigned long long counter = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetNvLinkErrorCounter(d, 0, static_cast<nvmlNvLinkErrorCounter_t>(42),
                                                   &counter),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlDeviceGetFieldValues(d, 1, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlDeviceGetFieldValues(d, -1, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  nvmlFieldValue_t unknown = Field(d, 99999);
  EXPECT_EQ(unknown.nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
  nvmlFieldValue_t bad_link = Field(d, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 12);
  EXPECT_EQ(bad_link.nvmlReturn, NVML_ERROR_INVALID_ARGUMENT);
  nvmlGpmSupport_t gpm{NVML_GPM_SUPPORT_VERSION + 1, 0};
  EXPECT_EQ(nvml().nvmlGpmQueryDeviceSupport(d, &gpm), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
}

// ---------------------------------------------------------------------------------------------
// Dynamic values and timed changes.

TEST_F(MockNvmlTest, DynamicValuesVaryDeterministicallyWithinRange) {
  ASSERT_EQ(Init("2xH100", "200"), NVML_SUCCESS);
  nvmlDevice_t d = Device(0);
  std::set<unsigned> utils, powers;
  unsigned long long last_energy = 0, last_tx = 0;
  for (int i = 0; i < 6; ++i) {
    nvmlUtilization_t u{};
    ASSERT_EQ(nvml().nvmlDeviceGetUtilizationRates(d, &u), NVML_SUCCESS);
    EXPECT_LE(u.gpu, 100u);
    EXPECT_LE(u.memory, 100u);
    utils.insert(u.gpu);
    unsigned mw = PowerMw(d);
    EXPECT_LE(mw, 700000u);
    EXPECT_GT(mw, 0u);
    powers.insert(mw);
    unsigned temp = 0;
    ASSERT_EQ(nvml().nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
    EXPECT_GE(temp, 20u);
    EXPECT_LE(temp, 95u);
    unsigned long long energy = 0;
    ASSERT_EQ(nvml().nvmlDeviceGetTotalEnergyConsumption(d, &energy), NVML_SUCCESS);
    EXPECT_GT(energy, last_energy);
    last_energy = energy;
    nvmlFieldValue_t tx = Field(d, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 3);
    ASSERT_EQ(tx.nvmlReturn, NVML_SUCCESS);
    EXPECT_EQ(tx.valueType, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
    EXPECT_GT(tx.value.ullVal, last_tx);
    last_tx = tx.value.ullVal;
    std::this_thread::sleep_for(milliseconds(25));  // 5 s of scenario time
  }
  EXPECT_GT(utils.size(), 1u);
  EXPECT_GT(powers.size(), 1u);
}

TEST_F(MockNvmlTest, ScenarioFileAppliesValuesThenTimedChanges) {
  // at_s 20 at 100x is 200 ms of wall time.
  ASSERT_EQ(Init(kFixtures + "timed_changes.json", "100"), NVML_SUCCESS);
  ASSERT_EQ(Count(), 2u);
  nvmlDevice_t d0 = Device(0), d1 = Device(1);
  char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  ASSERT_EQ(nvml().nvmlSystemGetDriverVersion(buf, sizeof(buf)), NVML_SUCCESS);
  EXPECT_STREQ(buf, "535.183.01");
  unsigned minor = 0;
  ASSERT_EQ(nvml().nvmlDeviceGetMinorNumber(d0, &minor), NVML_SUCCESS);
  EXPECT_EQ(minor, 4u);
  ASSERT_EQ(nvml().nvmlDeviceGetMinorNumber(d1, &minor), NVML_SUCCESS);
  EXPECT_EQ(minor, 0u);
  EXPECT_EQ(Name(d1), "NVIDIA H100 PCIe");
  nvmlPciInfo_t pci{};
  ASSERT_EQ(nvml().nvmlDeviceGetPciInfo_v3(d1, &pci), NVML_SUCCESS);
  EXPECT_STREQ(pci.busId, "00000000:9A:00.0");

  ASSERT_LT(ElapsedMs(), 150) << "machine too slow for the timing of this test";
  EXPECT_EQ(PowerMw(d0), 300000u);
  nvmlUtilization_t u{};
  ASSERT_EQ(nvml().nvmlDeviceGetUtilizationRates(d0, &u), NVML_SUCCESS);
  EXPECT_EQ(u.gpu, 10u);
  unsigned long long reasons = 99;
  ASSERT_EQ(nvml().nvmlDeviceGetCurrentClocksEventReasons(d0, &reasons), NVML_SUCCESS);
  EXPECT_EQ(reasons, 0u);
  unsigned count = 0;
  ASSERT_EQ(nvml().nvmlDeviceGetComputeRunningProcesses_v3(d0, &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
  unsigned long long energy = 0;
  ASSERT_EQ(nvml().nvmlDeviceGetTotalEnergyConsumption(d0, &energy), NVML_SUCCESS);
  // 1e6 mJ at 0 plus 300 W for under 15 s of scenario time.
  EXPECT_GE(energy, 1000000u);
  EXPECT_LT(energy, 1000000u + 300u * 1000u * 15u);

  SleepUntilMs(300);
  EXPECT_EQ(PowerMw(d0), 600000u);
  ASSERT_EQ(nvml().nvmlDeviceGetUtilizationRates(d0, &u), NVML_SUCCESS);
  EXPECT_EQ(u.gpu, 95u);
  unsigned temp = 0;
  ASSERT_EQ(nvml().nvmlDeviceGetTemperature(d0, NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
  EXPECT_EQ(temp, 83u);
  ASSERT_EQ(nvml().nvmlDeviceGetCurrentClocksThrottleReasons(d0, &reasons), NVML_SUCCESS);
  EXPECT_EQ(reasons, nvmlClocksEventReasonSwPowerCap);
  nvmlProcessInfo_t infos[4];
  count = 4;
  ASSERT_EQ(nvml().nvmlDeviceGetComputeRunningProcesses_v3(d0, &count, infos), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(infos[0].pid, 4000021u);
  EXPECT_EQ(infos[0].usedGpuMemory, 70000u * kMib);
  EXPECT_EQ(infos[0].gpuInstanceId, 0xFFFFFFFFu);

  // Energy integrates power: 600 W for the scenario time between two reads (± timing slack).
  unsigned long long e1 = 0, e2 = 0;
  auto before = Clock::now();
  ASSERT_EQ(nvml().nvmlDeviceGetTotalEnergyConsumption(d0, &e1), NVML_SUCCESS);
  auto after_first = Clock::now();
  std::this_thread::sleep_for(milliseconds(50));
  auto before_second = Clock::now();
  ASSERT_EQ(nvml().nvmlDeviceGetTotalEnergyConsumption(d0, &e2), NVML_SUCCESS);
  auto after = Clock::now();
  auto scenario_s = [](Clock::duration d) {
    return std::chrono::duration<double>(d).count() * 100;
  };
  double min_mj = 600 * 1000 * scenario_s(before_second - after_first);
  double max_mj = 600 * 1000 * scenario_s(after - before);
  EXPECT_GE(static_cast<double>(e2 - e1), min_mj - 1);
  EXPECT_LE(static_cast<double>(e2 - e1), max_mj + 1);

  // GPU 1's utilization wave: 50 ± 40 over 10 s, so it moves and stays within 10..90.
  std::set<unsigned> utils;
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(nvml().nvmlDeviceGetUtilizationRates(d1, &u), NVML_SUCCESS);
    EXPECT_GE(u.gpu, 10u);
    EXPECT_LE(u.gpu, 90u);
    utils.insert(u.gpu);
    std::this_thread::sleep_for(milliseconds(15));
  }
  EXPECT_GT(utils.size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Unsupported fields, injected errors, lost GPUs.

TEST_F(MockNvmlTest, UnsupportedFeaturesAnswerNotSupported) {
  std::string path = WriteScenario(R"({
    "shape": "2xH100",
    "gpus": [
      {"gpu": 0, "unsupported": ["power", "ecc", "nvlink", "gpm", "processes",
                                  "nvmlDeviceGetMinorNumber"]},
      {"gpu": 1, "supported": ["fan"], "values": {"fan_pct": 61}}
    ]
  })");
  ASSERT_EQ(Init(path), NVML_SUCCESS);
  nvmlDevice_t d0 = Device(0), d1 = Device(1);
  unsigned value = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(d0, &value), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvml().nvmlDeviceGetMinorNumber(d0, &value), NVML_ERROR_NOT_SUPPORTED);
  unsigned long long ecc = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetTotalEccErrors(d0, NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                               NVML_AGGREGATE_ECC, &ecc),
            NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Field(d0, NVML_FI_DEV_RETIRED_SBE).nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Field(d0, NVML_FI_DEV_ECC_CURRENT).nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Field(d0, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0).nvmlReturn,
            NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Field(d0, NVML_FI_DEV_MEMORY_TEMP).nvmlReturn, NVML_SUCCESS);
  nvmlEnableState_t state;
  EXPECT_EQ(nvml().nvmlDeviceGetNvLinkState(d0, 0, &state), NVML_ERROR_NOT_SUPPORTED);
  nvmlGpmSupport_t gpm{NVML_GPM_SUPPORT_VERSION, 1};
  ASSERT_EQ(nvml().nvmlGpmQueryDeviceSupport(d0, &gpm), NVML_SUCCESS);
  EXPECT_EQ(gpm.isSupportedDevice, 0u);
  unsigned count = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetComputeRunningProcesses_v2(d0, &count, nullptr),
            NVML_ERROR_NOT_SUPPORTED);
  // Only the named GPU is affected; "supported" restores what the model lacks.
  EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(d1, &value), NVML_SUCCESS);
  EXPECT_EQ(nvml().nvmlDeviceGetFanSpeed(d1, &value), NVML_SUCCESS);
  EXPECT_EQ(value, 61u);
  EXPECT_EQ(nvml().nvmlDeviceGetFanSpeed(d0, &value), NVML_ERROR_NOT_SUPPORTED);
  nvmlFieldValue_t sbe = Field(d1, NVML_FI_DEV_RETIRED_SBE);
  EXPECT_EQ(sbe.nvmlReturn, NVML_SUCCESS);
  EXPECT_EQ(sbe.value.ullVal, 0u);
}

TEST_F(MockNvmlTest, ErrorRulesApplyByFunctionGpuAndTime) {
  std::string path = WriteScenario(R"({
    "shape": "2xH100",
    "errors": [
      {"function": "nvmlDeviceGetPowerUsage", "code": "NVML_ERROR_UNKNOWN", "gpu": 1},
      {"function": "nvmlDeviceGetTemperature", "code": 10, "at_s": 20},
      {"function": "nvmlDeviceGetClockInfo", "code": "NVML_ERROR_NO_PERMISSION", "until_s": 20},
      {"function": "nvmlSystemGetDriverVersion", "code": "NVML_ERROR_LIB_RM_VERSION_MISMATCH"}
    ]
  })");
  ASSERT_EQ(Init(path, "100"), NVML_SUCCESS);
  nvmlDevice_t d0 = Device(0), d1 = Device(1);
  unsigned value = 0;
  ASSERT_LT(ElapsedMs(), 150) << "machine too slow for the timing of this test";
  EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(d0, &value), NVML_SUCCESS);
  EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(d1, &value), NVML_ERROR_UNKNOWN);
  EXPECT_EQ(nvml().nvmlDeviceGetTemperature(d0, NVML_TEMPERATURE_GPU, &value), NVML_SUCCESS);
  EXPECT_EQ(nvml().nvmlDeviceGetClockInfo(d1, NVML_CLOCK_SM, &value), NVML_ERROR_NO_PERMISSION);
  char buf[80];
  EXPECT_EQ(nvml().nvmlSystemGetDriverVersion(buf, sizeof(buf)),
            NVML_ERROR_LIB_RM_VERSION_MISMATCH);
  SleepUntilMs(300);
  EXPECT_EQ(nvml().nvmlDeviceGetTemperature(d0, NVML_TEMPERATURE_GPU, &value), NVML_ERROR_TIMEOUT);
  EXPECT_EQ(nvml().nvmlDeviceGetTemperature(d1, NVML_TEMPERATURE_GPU, &value), NVML_ERROR_TIMEOUT);
  EXPECT_EQ(nvml().nvmlDeviceGetClockInfo(d1, NVML_CLOCK_SM, &value), NVML_SUCCESS);
}

TEST_F(MockNvmlTest, AllErrorsMakesEveryQueryReturnTheCode) {
  std::vector<nvmlReturn_t> codes;
  for (nvmlReturn_t c = NVML_ERROR_UNINITIALIZED; c <= NVML_ERROR_INVALID_STATE; ++c) {
    codes.push_back(c);
  }
  codes.push_back(NVML_ERROR_UNKNOWN);
  codes.push_back(4242);  // a code newer than any header
  for (nvmlReturn_t code : codes) {
    SCOPED_TRACE(code);
    std::string path =
        WriteScenario(R"({"shape": "2x4090", "all_errors": )" + std::to_string(code) + "}");
    ASSERT_EQ(Init(path), NVML_SUCCESS);
    // Enumeration still works, so every per-device query can be reached.
    ASSERT_EQ(Count(), 2u);
    nvmlDevice_t d = Device(1);
    char buf[96];
    unsigned value = 0;
    EXPECT_EQ(nvml().nvmlDeviceGetName(d, buf, sizeof(buf)), code);
    EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(d, &value), code);
    EXPECT_EQ(nvml().nvmlDeviceGetFanSpeed(d, &value), code);
    EXPECT_EQ(nvml().nvmlSystemGetDriverVersion(buf, sizeof(buf)), code);
    nvmlFieldValue_t v{};
    v.fieldId = NVML_FI_DEV_MEMORY_TEMP;
    EXPECT_EQ(nvml().nvmlDeviceGetFieldValues(d, 1, &v), code);
    nvmlEventSet_t set = nullptr;
    ASSERT_EQ(nvml().nvmlEventSetCreate(&set), NVML_SUCCESS);
    EXPECT_EQ(nvml().nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, set), code);
    nvmlEventData_t data{};
    EXPECT_EQ(nvml().nvmlEventSetWait_v2(set, &data, 10), code);
    EXPECT_EQ(nvml().nvmlEventSetFree(set), NVML_SUCCESS);
    ASSERT_EQ(nvml().nvmlShutdown(), NVML_SUCCESS);
  }
}

TEST_F(MockNvmlTest, InjectedInitErrorFailsInitQuietly) {
  std::string path = WriteScenario(
      R"({"errors": [{"function": "nvmlInit_v2", "code": "NVML_ERROR_DRIVER_NOT_LOADED"}]})");
  ::testing::internal::CaptureStderr();
  nvmlReturn_t rc = Init(path);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, NVML_ERROR_DRIVER_NOT_LOADED);
  EXPECT_EQ(err, "");
  unsigned count = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
}

TEST_F(MockNvmlTest, LostGpuAndXidEventsFromFixture) {
  // At 10x: XID 31 on GPU 1 at 100 ms, XID 79 on GPU 2 at 250 ms, GPU 2 lost from 300 ms.
  ASSERT_EQ(Init(kFixtures + "lost_and_xid.json", "10"), NVML_SUCCESS);
  ASSERT_EQ(Count(), 4u);
  nvmlDevice_t gpus[4];
  for (unsigned i = 0; i < 4; ++i) gpus[i] = Device(i);
  ASSERT_LT(ElapsedMs(), 100) << "machine too slow for the timing of this test";
  EXPECT_GT(PowerMw(gpus[2]), 0u);

  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(nvml().nvmlEventSetCreate(&set), NVML_SUCCESS);
  for (nvmlDevice_t d : gpus) {
    unsigned long long supported = 0;
    ASSERT_EQ(nvml().nvmlDeviceGetSupportedEventTypes(d, &supported), NVML_SUCCESS);
    ASSERT_TRUE(supported & nvmlEventTypeXidCriticalError);
    ASSERT_EQ(nvml().nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  }
  nvmlEventData_t data{};
  ASSERT_EQ(nvml().nvmlEventSetWait_v2(set, &data, 2000), NVML_SUCCESS);
  EXPECT_GE(ElapsedMs(), 95);
  EXPECT_EQ(data.device, gpus[1]);
  EXPECT_EQ(data.eventType, nvmlEventTypeXidCriticalError);
  EXPECT_EQ(data.eventData, 31u);
  EXPECT_EQ(data.gpuInstanceId, 0xFFFFFFFFu);
  ASSERT_EQ(nvml().nvmlEventSetWait_v2(set, &data, 2000), NVML_SUCCESS);
  EXPECT_GE(ElapsedMs(), 245);
  EXPECT_EQ(data.device, gpus[2]);
  EXPECT_EQ(data.eventData, 79u);

  // Nothing else is due: the wait times out after about timeoutms, not sooner or much later.
  auto before = Clock::now();
  EXPECT_EQ(nvml().nvmlEventSetWait_v2(set, &data, 100), NVML_ERROR_TIMEOUT);
  auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - before).count();
  EXPECT_GE(waited, 100);
  EXPECT_LT(waited, 1000);
  EXPECT_EQ(nvml().nvmlEventSetWait_v2(set, &data, 0), NVML_ERROR_TIMEOUT);

  SleepUntilMs(350);
  unsigned value = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(gpus[2], &value), NVML_ERROR_GPU_IS_LOST);
  char uuid[96];
  EXPECT_EQ(nvml().nvmlDeviceGetUUID(gpus[2], uuid, sizeof(uuid)), NVML_ERROR_GPU_IS_LOST);
  nvmlDevice_t again = nullptr;
  EXPECT_EQ(nvml().nvmlDeviceGetHandleByIndex_v2(2, &again), NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(gpus[1], &value), NVML_SUCCESS);
  EXPECT_EQ(Count(), 4u);

  // A second event set sees the same events once more: delivery is per set.
  nvmlEventSet_t other = nullptr;
  ASSERT_EQ(nvml().nvmlEventSetCreate(&other), NVML_SUCCESS);
  ASSERT_EQ(nvml().nvmlDeviceRegisterEvents(gpus[1], nvmlEventTypeXidCriticalError, other),
            NVML_SUCCESS);
  ASSERT_EQ(nvml().nvmlEventSetWait_v2(other, &data, 0), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 31u);
  EXPECT_EQ(nvml().nvmlEventSetWait_v2(other, &data, 0), NVML_ERROR_TIMEOUT);
  EXPECT_EQ(nvml().nvmlEventSetFree(other), NVML_SUCCESS);
  EXPECT_EQ(nvml().nvmlEventSetWait_v2(other, &data, 0), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlEventSetFree(set), NVML_SUCCESS);
}

TEST_F(MockNvmlTest, EventWaitDoesNotBlockOtherThreads) {
  ASSERT_EQ(Init("2xH100"), NVML_SUCCESS);
  nvmlDevice_t d = Device(0);
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(nvml().nvmlEventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(nvml().nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  std::atomic<nvmlReturn_t> waiter_rc{-1};
  std::thread waiter([&] {
    nvmlEventData_t data{};
    waiter_rc = nvml().nvmlEventSetWait_v2(set, &data, 300);
  });
  std::this_thread::sleep_for(milliseconds(20));
  auto before = Clock::now();
  for (int i = 0; i < 100; ++i) PowerMw(d);
  auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - before).count();
  EXPECT_LT(took, 150) << "device calls were held up by the waiting thread";
  EXPECT_EQ(waiter_rc.load(), -1) << "the wait ended early";
  waiter.join();
  EXPECT_EQ(waiter_rc.load(), NVML_ERROR_TIMEOUT);
}

TEST_F(MockNvmlTest, ShutdownEndsAWaitInProgress) {
  ASSERT_EQ(Init("2xH100"), NVML_SUCCESS);
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(nvml().nvmlEventSetCreate(&set), NVML_SUCCESS);
  std::atomic<nvmlReturn_t> waiter_rc{-1};
  std::thread waiter([&] {
    nvmlEventData_t data{};
    waiter_rc = nvml().nvmlEventSetWait_v2(set, &data, 5000);
  });
  std::this_thread::sleep_for(milliseconds(30));
  auto before = Clock::now();
  ASSERT_EQ(nvml().nvmlShutdown(), NVML_SUCCESS);
  waiter.join();
  EXPECT_LT(std::chrono::duration_cast<milliseconds>(Clock::now() - before).count(), 1000);
  EXPECT_EQ(waiter_rc.load(), NVML_ERROR_UNINITIALIZED);
}

// ---------------------------------------------------------------------------------------------
// Processes.

TEST_F(MockNvmlTest, ProcessesReportInsufficientSizeWithTheNeededCount) {
  ASSERT_EQ(Init(kFixtures + "lost_and_xid.json"), NVML_SUCCESS);
  nvmlDevice_t d0 = Device(0);
  for (auto fn : {nvml().nvmlDeviceGetComputeRunningProcesses_v3,
                  nvml().nvmlDeviceGetComputeRunningProcesses_v2}) {
    unsigned count = 0;
    EXPECT_EQ(fn(d0, &count, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(count, 3u);
    nvmlProcessInfo_t infos[8] = {};
    count = 2;
    EXPECT_EQ(fn(d0, &count, infos), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(count, 3u);
    EXPECT_EQ(fn(d0, nullptr, infos), NVML_ERROR_INVALID_ARGUMENT);
    count = 8;
    ASSERT_EQ(fn(d0, &count, infos), NVML_SUCCESS);
    ASSERT_EQ(count, 3u);
    EXPECT_EQ(infos[0].pid, static_cast<unsigned>(getpid()));  // "pid": "self"
    EXPECT_EQ(infos[0].usedGpuMemory, 20480u * kMib);
    EXPECT_EQ(infos[1].pid, 4000001u);
    EXPECT_EQ(infos[2].usedGpuMemory, NVML_VALUE_NOT_AVAILABLE);
    EXPECT_EQ(infos[2].computeInstanceId, 0xFFFFFFFFu);
  }
  unsigned count = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetComputeRunningProcesses_v3(Device(1), &count, nullptr),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 1u);
  count = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetComputeRunningProcesses_v3(Device(3), &count, nullptr),
            NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
}

TEST_F(MockNvmlTest, V3DetailLayoutQuirkWritesThirtyTwoByteRecords) {
  std::string path = WriteScenario(R"({
    "v3_process_detail_layout": true,
    "gpus": [{"gpu": 0, "processes": [{"pid": 11, "used_memory_mib": 1}, {"pid": 22}]}]
  })");
  ASSERT_EQ(Init(path), NVML_SUCCESS);
  nvmlProcessDetail_v1_t detail[4] = {};
  unsigned count = 4;
  ASSERT_EQ(nvml().nvmlDeviceGetComputeRunningProcesses_v3(
                Device(0), &count, reinterpret_cast<nvmlProcessInfo_t*>(detail)),
            NVML_SUCCESS);
  ASSERT_EQ(count, 2u);
  EXPECT_EQ(detail[0].pid, 11u);
  EXPECT_EQ(detail[1].pid, 22u);
  nvmlProcessInfo_t infos[4] = {};
  count = 4;
  ASSERT_EQ(nvml().nvmlDeviceGetComputeRunningProcesses_v2(Device(0), &count, infos), NVML_SUCCESS);
  EXPECT_EQ(infos[1].pid, 22u);
}

// ---------------------------------------------------------------------------------------------
// MIG and GPM.

TEST_F(MockNvmlTest, MigInstancesFromFixture) {
  ASSERT_EQ(Init(kFixtures + "mig.json"), NVML_SUCCESS);
  nvmlDevice_t gpu = Device(0);
  unsigned current = 0, pending = 0, max_count = 0;
  ASSERT_EQ(nvml().nvmlDeviceGetMigMode(gpu, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, unsigned{NVML_DEVICE_MIG_ENABLE});
  EXPECT_EQ(pending, unsigned{NVML_DEVICE_MIG_ENABLE});
  ASSERT_EQ(nvml().nvmlDeviceGetMaxMigDeviceCount(gpu, &max_count), NVML_SUCCESS);
  EXPECT_EQ(max_count, 7u);
  nvmlUtilization_t util{};
  EXPECT_EQ(nvml().nvmlDeviceGetUtilizationRates(gpu, &util), NVML_ERROR_NOT_SUPPORTED);

  struct Expected {
    unsigned gi;
    unsigned long long total_mib, used_mib;
    const char* profile;
  };
  const Expected expected[] = {
      {1, 40192, 12000, "3g.40gb"}, {5, 19968, 4096, "2g.20gb"}, {13, 9856, 0, "1g.10gb"}};
  std::set<std::string> uuids;
  for (unsigned i = 0; i < max_count; ++i) {
    nvmlDevice_t mig = nullptr;
    nvmlReturn_t rc = nvml().nvmlDeviceGetMigDeviceHandleByIndex(gpu, i, &mig);
    if (i >= 3) {
      EXPECT_EQ(rc, NVML_ERROR_NOT_FOUND) << i;
      continue;
    }
    ASSERT_EQ(rc, NVML_SUCCESS) << i;
    std::string uuid = Uuid(mig);
    EXPECT_EQ(uuid.rfind("MIG-", 0), 0u) << uuid;
    uuids.insert(uuid);
    EXPECT_EQ(Name(mig), std::string("NVIDIA A100-SXM4-80GB MIG ") + expected[i].profile);
    unsigned gi = 0, ci = 99;
    ASSERT_EQ(nvml().nvmlDeviceGetGpuInstanceId(mig, &gi), NVML_SUCCESS);
    ASSERT_EQ(nvml().nvmlDeviceGetComputeInstanceId(mig, &ci), NVML_SUCCESS);
    EXPECT_EQ(gi, expected[i].gi);
    EXPECT_EQ(ci, 0u);
    nvmlMemory_t mem{};
    ASSERT_EQ(nvml().nvmlDeviceGetMemoryInfo(mig, &mem), NVML_SUCCESS);
    EXPECT_EQ(mem.total, expected[i].total_mib * kMib);
    EXPECT_EQ(mem.used, expected[i].used_mib * kMib);
    // MIG devices answer only the MIG-level queries.
    unsigned mw = 0;
    EXPECT_EQ(nvml().nvmlDeviceGetPowerUsage(mig, &mw), NVML_ERROR_NOT_SUPPORTED);
    nvmlDevice_t nested = nullptr;
    EXPECT_EQ(nvml().nvmlDeviceGetMigDeviceHandleByIndex(mig, 0, &nested),
              NVML_ERROR_NOT_SUPPORTED);
  }
  EXPECT_EQ(uuids.size(), 3u);
  nvmlDevice_t mig = nullptr;
  EXPECT_EQ(nvml().nvmlDeviceGetMigDeviceHandleByIndex(gpu, 7, &mig), NVML_ERROR_INVALID_ARGUMENT);
  unsigned id = 0;
  EXPECT_EQ(nvml().nvmlDeviceGetGpuInstanceId(gpu, &id), NVML_ERROR_NOT_SUPPORTED);

  // Processes carry their instance ids; a MIG handle sees only its own.
  unsigned count = 8;
  nvmlProcessInfo_t infos[8];
  ASSERT_EQ(nvml().nvmlDeviceGetComputeRunningProcesses_v3(gpu, &count, infos), NVML_SUCCESS);
  ASSERT_EQ(count, 2u);
  EXPECT_EQ(infos[1].gpuInstanceId, 5u);
  ASSERT_EQ(nvml().nvmlDeviceGetMigDeviceHandleByIndex(gpu, 1, &mig), NVML_SUCCESS);
  count = 8;
  ASSERT_EQ(nvml().nvmlDeviceGetComputeRunningProcesses_v3(mig, &count, infos), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(infos[0].pid, 4000012u);

  // The parent's used memory is what its instances use.
  nvmlMemory_v2_t mem{};
  mem.version = nvmlMemory_v2;
  ASSERT_EQ(nvml().nvmlDeviceGetMemoryInfo_v2(gpu, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, (12000u + 4096u) * kMib);

  // GPU 1 is MIG-capable but not in MIG mode; A100 has no GPM.
  nvmlDevice_t plain = Device(1);
  ASSERT_EQ(nvml().nvmlDeviceGetMigMode(plain, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, unsigned{NVML_DEVICE_MIG_DISABLE});
  ASSERT_EQ(nvml().nvmlDeviceGetMaxMigDeviceCount(plain, &max_count), NVML_SUCCESS);
  EXPECT_EQ(max_count, 0u);
  EXPECT_EQ(nvml().nvmlDeviceGetMigDeviceHandleByIndex(plain, 0, &mig), NVML_ERROR_NOT_FOUND);
  nvmlGpmSample_t sample = nullptr;
  ASSERT_EQ(nvml().nvmlGpmSampleAlloc(&sample), NVML_SUCCESS);
  EXPECT_EQ(nvml().nvmlGpmMigSampleGet(gpu, 1, sample), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvml().nvmlGpmSampleGet(gpu, sample), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvml().nvmlGpmSampleFree(sample), NVML_SUCCESS);
}

TEST_F(MockNvmlTest, GpmMetricsComeFromTwoSamplesOnHopper) {
  std::string path = WriteScenario(R"({
    "shape": "2xH100",
    "gpus": [
      {"gpu": 0, "values": {"gpm_graphics_util_pct": 71, "gpm_sm_util_pct": 42,
                            "gpm_sm_occupancy_pct": 23, "gpm_tensor_util_pct": 64,
                            "gpm_dram_bw_util_pct": 35}},
      {"gpu": 1, "mig": [
        {"gpu_instance_id": 1, "memory_total_mib": 40000, "sm_util_pct": 30},
        {"gpu_instance_id": 2, "memory_total_mib": 20000,
         "sm_util_pct": {"base": 50, "amplitude": 50, "period_s": 3}}
      ]}
    ]
  })");
  ASSERT_EQ(Init(path, "10"), NVML_SUCCESS);
  nvmlDevice_t d0 = Device(0), d1 = Device(1);
  nvmlGpmSample_t s1 = nullptr, s2 = nullptr, s3 = nullptr;
  ASSERT_EQ(nvml().nvmlGpmSampleAlloc(&s1), NVML_SUCCESS);
  ASSERT_EQ(nvml().nvmlGpmSampleAlloc(&s2), NVML_SUCCESS);
  ASSERT_EQ(nvml().nvmlGpmSampleAlloc(&s3), NVML_SUCCESS);
  ASSERT_EQ(nvml().nvmlGpmSampleGet(d0, s1), NVML_SUCCESS);
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_EQ(nvml().nvmlGpmSampleGet(d0, s2), NVML_SUCCESS);

  auto request = std::make_unique<nvmlGpmMetricsGet_t>();
  std::memset(request.get(), 0, sizeof(*request));
  request->version = NVML_GPM_METRICS_GET_VERSION;
  request->sample1 = s1;
  request->sample2 = s2;
  const unsigned ids[] = {NVML_GPM_METRIC_GRAPHICS_UTIL,
                          NVML_GPM_METRIC_SM_UTIL,
                          NVML_GPM_METRIC_SM_OCCUPANCY,
                          NVML_GPM_METRIC_ANY_TENSOR_UTIL,
                          NVML_GPM_METRIC_DRAM_BW_UTIL,
                          NVML_GPM_METRIC_FP64_UTIL,
                          0};
  request->numMetrics = std::size(ids);
  for (unsigned i = 0; i < std::size(ids); ++i) request->metrics[i].metricId = ids[i];
  ASSERT_EQ(nvml().nvmlGpmMetricsGet(request.get()), NVML_SUCCESS);
  const double want[] = {71, 42, 23, 64, 35};
  for (unsigned i = 0; i < 5; ++i) {
    EXPECT_EQ(request->metrics[i].nvmlReturn, NVML_SUCCESS) << i;
    EXPECT_NEAR(request->metrics[i].value, want[i], 1e-6) << i;
    EXPECT_NE(request->metrics[i].metricInfo.shortName, nullptr);
  }
  EXPECT_EQ(request->metrics[5].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(request->metrics[6].nvmlReturn, NVML_ERROR_INVALID_ARGUMENT);

  // Default waves: an average of the wave between the samples, within 0..100.
  ASSERT_EQ(nvml().nvmlGpmSampleGet(d1, s1), NVML_SUCCESS);
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_EQ(nvml().nvmlGpmSampleGet(d1, s2), NVML_SUCCESS);
  ASSERT_EQ(nvml().nvmlGpmMetricsGet(request.get()), NVML_SUCCESS);
  for (unsigned i = 0; i < 5; ++i) {
    EXPECT_EQ(request->metrics[i].nvmlReturn, NVML_SUCCESS);
    EXPECT_GE(request->metrics[i].value, 0);
    EXPECT_LE(request->metrics[i].value, 100);
  }

  // Per GPU instance on a MIG-enabled H100.
  ASSERT_EQ(nvml().nvmlGpmMigSampleGet(d1, 1, s1), NVML_SUCCESS);
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_EQ(nvml().nvmlGpmMigSampleGet(d1, 1, s2), NVML_SUCCESS);
  ASSERT_EQ(nvml().nvmlGpmMetricsGet(request.get()), NVML_SUCCESS);
  EXPECT_NEAR(request->metrics[1].value, 30, 1e-6);
  ASSERT_EQ(nvml().nvmlGpmMigSampleGet(d1, 2, s3), NVML_SUCCESS);
  EXPECT_EQ(nvml().nvmlGpmMigSampleGet(d1, 3, s3), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml().nvmlGpmMigSampleGet(d0, 1, s3), NVML_ERROR_NOT_SUPPORTED);  // no MIG

  // Samples must come from the same GPU (instance), in order; the version is checked.
  request->sample2 = s3;
  EXPECT_EQ(nvml().nvmlGpmMetricsGet(request.get()), NVML_ERROR_INVALID_ARGUMENT);
  request->sample1 = s2;
  request->sample2 = s1;
  EXPECT_EQ(nvml().nvmlGpmMetricsGet(request.get()), NVML_ERROR_INVALID_ARGUMENT);
  request->version = 2;
  EXPECT_EQ(nvml().nvmlGpmMetricsGet(request.get()), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  for (nvmlGpmSample_t s : {s1, s2, s3}) EXPECT_EQ(nvml().nvmlGpmSampleFree(s), NVML_SUCCESS);
  EXPECT_EQ(nvml().nvmlGpmSampleFree(s1), NVML_ERROR_INVALID_ARGUMENT);
}

// ---------------------------------------------------------------------------------------------
// Bad configurations.

struct BadCase {
  std::string spec;  // GPUWATCH_MOCK_NVML, or JSON text to write to a file when is_json
  bool is_json;
  std::string expected;  // a substring of the one error line
};

TEST_F(MockNvmlTest, BadConfigurationFailsInitWithOneClearLine) {
  const BadCase cases[] = {
      {"8xV100", false, "GPUWATCH_MOCK_NVML=8xV100: unknown GPU model 'V100'"},
      {"0xH100", false, "GPU count must be 1..64"},
      {"65xH100", false, "GPU count must be 1..64"},
      {"/nonexistent/scenario.json", false,
       "/nonexistent/scenario.json: cannot open: No such file or directory"},
      {"{\n  \"shape\": \"2xH100\",\n  \"gpus\": [ {\"gpu\": 0,} ]\n}", true, ": line 3, column"},
      {"", true, "line 1, column 1"},
      {"[1, 2]", true, "top level: expected an object, got array"},
      {R"({"gpus": [{"gpu": 0, "lost_at": 3}]})", true, "/gpus/0: unknown key \"lost_at\""},
      {R"({"shape": "2xH100", "gpus": [{"gpu": 5}]})", true,
       "/gpus/0/gpu: GPU 5 does not exist (shape has 2)"},
      {R"({"shape": "8xT4"})", true, "/shape: unknown GPU model 'T4'"},
      {R"({"errors": [{"function": "nvmlDeviceGetName", "code": "NVML_ERROR_NOPE"}]})", true,
       "/errors/0/code: unknown NVML error code \"NVML_ERROR_NOPE\""},
      {R"({"errors": [{"function": "nvmlDeviceGetNames", "code": 1}]})", true,
       "/errors/0/function: unknown NVML function \"nvmlDeviceGetNames\""},
      {R"({"errors": [{"function": "nvmlSystemGetDriverVersion", "code": 1, "gpu": 0}]})", true,
       "does not address a GPU"},
      {R"({"all_errors": "NVML_SUCCESS"})", true, "NVML_SUCCESS is not an error"},
      {R"({"gpus": [{"gpu": 0, "values": {"util_gpu_pct": {"base": 90, "amplitude": 20}}}]})", true,
       "/gpus/0/values/util_gpu_pct: base ± amplitude must stay within 0..100"},
      {R"({"gpus": [{"gpu": 0, "values": {"power_watts": 3}}]})", true,
       "unknown value \"power_watts\""},
      {R"({"gpus": [{"gpu": 0, "values": {"energy_mj": {"base": 1}}}]})", true,
       "/gpus/0/values/energy_mj: expected a number, got object"},
      {R"({"gpus": [{"gpu": 0, "unsupported": ["fans"]}]})", true,
       "/gpus/0/unsupported/0: unknown feature \"fans\""},
      {R"({"shape": "1x4090", "gpus": [{"gpu": 0, "mig": []}]})", true,
       "/gpus/0/mig: GPU 0 (NVIDIA GeForce RTX 4090) does not support MIG"},
      {R"({"xid": [{"at_s": 1, "gpu": 0}]})", true, "/xid/0: missing key \"code\""},
      {R"({"gpus": [{"gpu": 0, "changes": [{"at_s": -1}]}]})", true,
       "/gpus/0/changes/0/at_s: value -1 out of range"},
      {R"({"gpus": [{"gpu": 0, "pci_bus_id": "18:00.0"}]})", true,
       "/gpus/0/pci_bus_id: expected \"DDDDDDDD:BB:DD.F\""},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.spec);
    std::string spec = c.is_json ? WriteScenario(c.spec) : c.spec;
    ::testing::internal::CaptureStderr();
    nvmlReturn_t rc = Init(spec);
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, NVML_ERROR_UNKNOWN);
    EXPECT_EQ(err.rfind("gpuwatch-mock-nvml: ", 0), 0u) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_NE(err.find(c.expected), std::string::npos) << err;
    if (c.is_json) {
      EXPECT_NE(err.find(spec), std::string::npos) << "names the file: " << err;
    }
    unsigned count = 0;
    EXPECT_EQ(nvml().nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  }

  ::testing::internal::CaptureStderr();
  nvmlReturn_t rc = Init("2xH100", "fast");
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, NVML_ERROR_UNKNOWN);
  EXPECT_NE(err.find("GPUWATCH_MOCK_NVML_TIME_SCALE=fast"), std::string::npos) << err;
}

}  // namespace
