// The engine on short hand-made traces: what holds across the rules (a healthy trace, the
// deepest cause, maintenance windows, the findings document). Each rule family's own tests are
// beside it in rules/.
#include "analyze/diagnoser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "analyze/testing/diagnose.h"
#include "trace/trace_reader.h"

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

// Cause text at the JSON edge: findings.md's names and "user:<rule>", nothing else.
TEST(DiagnoserTest, CauseTextParsesOnlyKnownCausesAndUserRules) {
  ASSERT_TRUE(ParseCauseText("gpu_lost").has_value());
  EXPECT_EQ(ParseCauseText("gpu_lost")->cause, Cause::kGpuLost);
  const auto user = ParseCauseText("user:GpuHot");
  ASSERT_TRUE(user.has_value());
  EXPECT_EQ(user->cause, Cause::kUserRule);
  EXPECT_EQ(user->rule, "GpuHot");
  EXPECT_FALSE(ParseCauseText("nonsense").has_value());
  EXPECT_FALSE(ParseCauseText("user:").has_value());
  EXPECT_FALSE(ParseCauseText("").has_value());
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

// STYLE: "whatever is keyed by job, pid or series is forgotten when its owner ends". A thousand
// short jobs start, step, log and end on one node over a day and a half of records: the engine's
// per-job state stays as small at the last job as at the hundredth.
TEST(DiagnoserTest, StateStaysBoundedAsAThousandJobsComeAndGo) {
  Diagnoser d;
  trace::TraceRecord rec;
  auto feed = [&](const std::string& line) {
    auto reader = trace::TraceReader::OpenBuffer(line, "churn.jsonl");
    ASSERT_TRUE(reader.ok());
    while (true) {
      Result<bool> more = (*reader)->Next(&rec);
      ASSERT_TRUE(more.ok()) << more.status().message();
      if (!*more) break;
      d.Observe(rec);
    }
  };
  feed(Node("n1", 0));
  double t = 1;
  size_t at_100 = 0, most = 0;
  for (int j = 0; j < 1000; ++j) {
    const std::string job = "job-" + std::to_string(j);
    std::string lines = nlohmann::json{{"t", t},     {"type", "job"},    {"node", "n1"},
                                       {"job", job}, {"state", "start"}, {"gpus", {0, 1}}}
                            .dump() +
                        "\n";
    for (int s = 0; s < 30; ++s) {
      t += 2;
      for (int g = 0; g < 2; ++g) {
        lines += Gpu(t, g, "\"util_pct\":95,\"power_w\":600,\"mem_used_mib\":30000");
        lines +=
            nlohmann::json{
                {"t", t},   {"type", "step"},    {"node", "n1"},  {"job", job},         {"rank", g},
                {"gpu", g}, {"duration_s", 2.0}, {"comm_s", 0.2}, {"data_wait_s", 0.01}}
                .dump() +
            "\n";
        if (s % 5 == 0) {
          lines += nlohmann::json{{"t", t},       {"type", "proc"},
                                  {"node", "n1"}, {"pid", 1000 + j * 2 + g},
                                  {"gpu", g},     {"job", job}}
                       .dump() +
                   "\n";
        }
      }
      if (s % 10 == 0) {
        lines += nlohmann::json{{"t", t},
                                {"type", "log"},
                                {"node", "n1"},
                                {"job", job},
                                {"source", "job"},
                                {"rank", 0},
                                {"line", "step " + std::to_string(s) + " | loss 1.2"}}
                     .dump() +
                 "\n";
      }
    }
    t += 1;
    lines += nlohmann::json{{"t", t},     {"type", "job"},  {"node", "n1"},
                            {"job", job}, {"state", "end"}, {"exit_code", 0}}
                 .dump() +
             "\n";
    t += 10;
    feed(lines);
    most = std::max(most, d.JobEntries());
    if (j == 100) at_100 = d.JobEntries();
  }
  EXPECT_TRUE(d.Finish(t).empty());
  // Jobs are forgotten ten minutes after they end: about ten of these 72 s jobs at a time.
  EXPECT_LE(most, 200u);
  EXPECT_LE(d.JobEntries(), at_100 + 20);
  EXPECT_LE(d.context().JobCount(), 20u);
}

}  // namespace
}  // namespace gpuwatch::analyze
