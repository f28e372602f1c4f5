// The engine on short hand-made traces: what holds across the rules (a healthy trace, the
// deepest cause, maintenance windows, the findings document). Each rule family's own tests are
// beside it in rules/.
#include "analyze/diagnoser.h"

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

TEST(DiagnoserTest, HealthyTraceHasNoFindings) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 120; ++i) {
    // Power-cap flickers at full load: a sample in ten, at full clock.
    const bool flick = i % 10 == 0;
    for (int g = 0; g < 2; ++g) {
      trace += Gpu(101 + i, g,
                   std::string("\"util_pct\":97,\"sm_clock_mhz\":1980,\"pcie_gen\":5,"
                               "\"pcie_width\":16,\"nvlink_active_links\":18,\"pcie_replay\":3,"
                               "\"throttle\":") +
                       (flick ? "[\"sw_power_cap\"]" : "[]"));
    }
  }
  EXPECT_TRUE(Diagnose(trace).empty());
}

TEST(DiagnoserTest, WhatBeginsInAMaintenanceWindowIsInfo) {
  auto event = [](double t, const std::string& rest) {
    return "{\"t\":" + std::to_string(t) + ",\"type\":\"event\",\"node\":\"n1\"," + rest + "}\n";
  };
  std::string trace = Node("n1", 100);
  trace += event(150, R"("gpu":0,"kind":"maintenance_start","message":"reseat GPU 0")");
  trace += event(160, R"("gpu":0,"kind":"gpu_lost","message":"reset for the reseat")");
  trace += event(170, R"("gpu":1,"kind":"xid","code":31,"message":"fault on the other GPU")");
  trace += event(200, R"("gpu":0,"kind":"maintenance_end")");
  trace += event(300, R"("gpu":0,"kind":"xid","code":31,"message":"after the window")");
  std::vector<Finding> f = Diagnose(trace);
  std::map<std::pair<Cause, int>, Severity> severity;
  for (const Finding& x : f) severity[{x.cause, x.gpu.value_or(-1)}] = x.severity;
  EXPECT_EQ(severity[std::make_pair(Cause::kGpuLost, 0)], Severity::kInfo);
  // Not the GPU in maintenance, and after the window:
  EXPECT_EQ(severity[std::make_pair(Cause::kXid, 1)], Severity::kWarning);
  EXPECT_EQ(severity[std::make_pair(Cause::kXid, 0)], Severity::kWarning);
  for (const Finding& x : f) {
    if (x.cause != Cause::kGpuLost) continue;
    EXPECT_NE(x.evidence.back().find("maintenance window from 1970-01-01T00:02:30Z of GPU 0: "
                                     "reseat GPU 0"),
              std::string::npos)
        << x.evidence.back();
  }
  // A whole-node window still open at the end covers every GPU.
  trace = Node("n1", 100) + event(150, R"("kind":"maintenance_start")") +
          event(170, R"("gpu":1,"kind":"xid","code":31,"message":"x")");
  f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kInfo);
}

TEST(DiagnoserTest, DocumentIsFindingsJson) {
  Finding f;
  f.cause = Cause::kGpuLost;
  f.severity = Severity::kCritical;
  f.node = "n1";
  f.gpu = 5;
  f.first_seen = 10;
  f.last_seen = 12;
  const nlohmann::json doc = FindingsDocument({f}, {{"records", 3}});
  EXPECT_EQ(doc["findings"][0]["gpu"], 5);
  EXPECT_FALSE(doc["findings"][0].contains("job"));
  EXPECT_EQ(doc["stats"]["records"], 3);
  EXPECT_EQ(doc["findings"][0]["cause"], "gpu_lost");
  EXPECT_EQ(doc["findings"][0]["layer"], "card");
  EXPECT_EQ(doc["findings"][0]["severity"], "critical");
}

}  // namespace
}  // namespace gpuwatch::analyze
