// NvmlSource against the mock NVML (loaded through the production dlopen path).
#include "collect/nvml_source.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "collect/testing/mock_nvml.h"

namespace gpuwatch::collect {
namespace {

using model::GpuMetric;
using model::Support;

using testing::kMockNvmlLibrary;

using testing::OpenMockNvml;

TEST(NvmlLibraryTest, MissingLibraryIsUnavailable) {
  auto lib = NvmlLibrary::Load("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("cannot load NVML library"), std::string::npos);
}

TEST(NvmlLibraryTest, NonNvmlLibraryIsRejected) {
  auto lib = NvmlLibrary::Load("libm.so.6");
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.status().message().find("is not an NVML library"), std::string::npos);
}

TEST(NvmlLibraryTest, MockResolvesEveryEntry) {
  auto lib = NvmlLibrary::Load(kMockNvmlLibrary);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  int expected = 0;
#define GPUWATCH_COUNT(name, args) ++expected;
  GPUWATCH_NVML_FUNCTIONS(GPUWATCH_COUNT)
#undef GPUWATCH_COUNT
  EXPECT_EQ((*lib)->resolved(), expected);
  EXPECT_NE((*lib)->fn().nvmlErrorString, nullptr);
}

TEST(NvmlSourceTest, DriverWithBrokenV3ProcessLayout) {
  EXPECT_TRUE(DriverHasBrokenProcessV3("535.54.03"));
  EXPECT_TRUE(DriverHasBrokenProcessV3("535.86.10"));
  EXPECT_FALSE(DriverHasBrokenProcessV3("535.104.05"));
  EXPECT_FALSE(DriverHasBrokenProcessV3("550.90.07"));
  EXPECT_FALSE(DriverHasBrokenProcessV3("garbage"));
}

TEST(NvmlSourceTest, UnsupportedFieldRecordedOnceWithReason) {
  auto src = OpenMockNvml("4xL40S");
  ASSERT_EQ(src->Devices().size(), 4u);
  model::GpuSample s;
  ASSERT_TRUE(src->Sample(0, 1000, &s).ok());
  auto caps = src->Capabilities(0);
  EXPECT_EQ(caps.metrics[model::Idx(GpuMetric::kUtilGpuPct)].support, Support::kSupported);
  EXPECT_EQ(caps.metrics[model::Idx(GpuMetric::kNvlinkActiveLinks)].support,
            Support::kNotSupported);
  EXPECT_EQ(caps.metrics[model::Idx(GpuMetric::kGpmSmActive)].support, Support::kNotSupported);
  EXPECT_FALSE(s.Get(GpuMetric::kNvlinkActiveLinks).has_value());
}

TEST(NvmlSourceTest, KeysOnUuidAndBusId) {
  auto src = OpenMockNvml("8xA100");
  std::set<std::string> keys;
  for (const auto& d : src->Devices()) {
    EXPECT_EQ(d.uuid.rfind("GPU-", 0), 0u);
    EXPECT_EQ(d.pci_bus_id.size(), 16u) << d.pci_bus_id;  // 00000000:18:00.0
    keys.insert(d.uuid + "/" + d.pci_bus_id);
  }
  EXPECT_EQ(keys.size(), 8u);
}

TEST(NvmlSourceTest, MigInstancesEnumerated) {
  auto src = OpenMockNvml(std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/mock/mig.json");
  bool any_mig = false;
  for (size_t i = 0; i < src->Devices().size(); ++i) {
    const auto& d = src->Devices()[i];
    if (!d.mig_enabled) continue;
    any_mig = true;
    EXPECT_FALSE(d.mig_instances.empty());
    model::GpuSample s;
    ASSERT_TRUE(src->Sample(i, 1000, &s).ok());
    ASSERT_EQ(s.mig.size(), d.mig_instances.size());
    for (const auto& m : s.mig) {
      EXPECT_EQ(m.uuid.rfind("MIG-", 0), 0u) << m.uuid;
      ASSERT_TRUE(m.mem_total_mib.has_value());
      EXPECT_GT(*m.mem_total_mib, 0);
    }
  }
  EXPECT_TRUE(any_mig);
}

}  // namespace
}  // namespace gpuwatch::collect
