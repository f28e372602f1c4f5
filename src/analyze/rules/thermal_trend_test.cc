// The thermal trend rule (R19).
// Hand-made traces read through the real trace reader (analyze/testing/diagnose.h).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "analyze/testing/diagnose.h"

namespace gpuwatch::analyze {
namespace {

using testing::Diagnose;
using testing::Gpu;
using testing::Node;
using testing::Step;
using testing::StepOf;

TEST(ThermalTrendRuleTest, TemperatureTrendAtSteadyLoadIsAnInfoFinding) {
  // 20 minutes at full, steady load, one sample a second. GPU 1 warms 0.5 °C a minute from
  // minute 5 (a failing fan); GPU 0 stays at 68 °C with a little noise.
  auto trace_of = [](auto temp_of, auto power_of) {
    std::string trace = Node("n1", 100);
    for (int i = 0; i < 1200; ++i) {
      const double t = 101 + i;
      for (int g = 0; g < 2; ++g) {
        trace += Gpu(t, g,
                     "\"util_pct\":97,\"sm_clock_mhz\":1980,\"temp_c\":" +
                         std::to_string(g == 1 ? temp_of(i) : 68 + (i % 7) * 0.3) +
                         ",\"power_w\":" + std::to_string(power_of(i)) + ",\"throttle\":[]");
      }
    }
    return trace;
  };
  auto steady_power = [](int i) { return 650.0 + (i % 5); };
  std::vector<Finding> f = Diagnose(trace_of(
      [](int i) { return 66 + (i % 7) * 0.3 + std::max(0, i - 300) / 120.0; }, steady_power));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kThermalThrottle);
  EXPECT_EQ(f[0].severity, Severity::kInfo);
  EXPECT_EQ(f[0].gpu, 1);
  EXPECT_NE(f[0].summary.find("warming steadily"), std::string::npos) << f[0].summary;
  EXPECT_EQ(f[0].evidence[0].rfind("temp_c slope 0.", 0), 0u) << f[0].evidence[0];
  // A GPU settling to its load (fast, then slower: 40 → 70 °C with a 3-minute time constant)
  // is not a trend, nor is a rise that follows rising power.
  EXPECT_TRUE(Diagnose(trace_of([](int i) { return 70 - 30 * std::exp(-i / 180.0); }, steady_power))
                  .empty());
  EXPECT_TRUE(Diagnose(trace_of([](int i) { return 60 + i / 120.0; },
                                [](int i) { return 500.0 + i * 0.15; }))
                  .empty());
}

}  // namespace
}  // namespace gpuwatch::analyze
