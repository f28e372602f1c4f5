#include "model/metric_catalog.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

namespace gpuwatch::model {
namespace {

TEST(MetricCatalogTest, IndexedByEnum) {
  auto cat = GpuMetricCatalog();
  ASSERT_EQ(cat.size(), kNumGpuMetrics);
  for (size_t i = 0; i < cat.size(); ++i) EXPECT_EQ(Idx(cat[i].id), i) << cat[i].name;
}

TEST(MetricCatalogTest, NamesUniqueAndValid) {
  std::set<std::string_view> names;
  auto check = [&](std::string_view n) {
    EXPECT_TRUE(names.insert(n).second) << "duplicate " << n;
    for (char c : n) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_') << n;
  };
  for (const auto& d : GpuMetricCatalog()) check(d.name);
  for (const auto& d : OtherMetricCatalog()) check(d.name);
}

TEST(MetricCatalogTest, ClockEventReasonNames) {
  auto names = ClockEventReasonNames(0x4 | 0x40);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "sw_power_cap");
  EXPECT_EQ(names[1], "hw_thermal");
}

TEST(MetricCatalogTest, DocsMetricsMdIsGenerated) {
  std::ifstream in(std::string(GPUWATCH_SOURCE_DIR) + "/docs/metrics.md");
  ASSERT_TRUE(in) << "docs/metrics.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), RenderMetricsMarkdown())
      << "docs/metrics.md is stale: run `build/gpuwatch docs metrics > docs/metrics.md`";
}

}  // namespace
}  // namespace gpuwatch::model
