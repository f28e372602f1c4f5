#include "eval/scoring.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpuwatch::eval {
namespace {

ScoredFinding Finding(std::string cause, std::string node, double first_seen,
                      std::optional<int> gpu = std::nullopt, std::string severity = "warning") {
  ScoredFinding f;
  f.cause = std::move(cause);
  f.node = std::move(node);
  f.first_seen_s = first_seen;
  f.gpu = gpu;
  f.severity = std::move(severity);
  return f;
}

Fault MakeFault(std::string cause, std::string node, double start,
                std::optional<int> gpu = std::nullopt) {
  Fault f;
  f.cause = std::move(cause);
  f.node = std::move(node);
  f.start_s = start;
  f.gpu = gpu;
  return f;
}

TEST(ScoringTest, ParsesTruthAndFindings) {
  auto truth = ParseTruth(R"({"faults": [{"cause": "thermal_throttle", "node": "gpu-b03",
      "gpu": 3, "start": 1762159592.959, "end": 1762159983.264},
      {"cause": "rank_exit", "node": "n", "job": 12345, "rank": 2, "start": 5}]})");
  ASSERT_TRUE(truth.ok()) << truth.status().message();
  ASSERT_EQ(truth->size(), 2u);
  EXPECT_EQ((*truth)[0].gpu, 3);
  EXPECT_DOUBLE_EQ(*(*truth)[0].end_s, 1762159983.264);
  EXPECT_EQ((*truth)[1].job, "12345");  // a numeric job id reads as its text
  EXPECT_EQ((*truth)[1].rank, 2);
  auto findings = ParseFindings(R"({"findings": [{"cause": "xid", "layer": "card",
      "severity": "critical", "node": "n", "gpu": 1, "first_seen": 10.5, "last_seen": 20,
      "summary": "s", "evidence": [], "action": "a"}], "stats": {"records": 1}})");
  ASSERT_TRUE(findings.ok()) << findings.status().message();
  ASSERT_EQ(findings->size(), 1u);
  EXPECT_EQ((*findings)[0].severity, "critical");
  EXPECT_TRUE(ParseTruth(R"({"faults": []})")->empty());
}

TEST(ScoringTest, BadInputNamesThePlace) {
  auto err = [](Status st) { return st.message(); };
  EXPECT_NE(err(ParseTruth("{").status()).find("not valid JSON"), std::string::npos);
  EXPECT_NE(err(ParseTruth("{}").status()).find("\"faults\""), std::string::npos);
  EXPECT_NE(err(ParseTruth(R"({"faults": [{"cause": "x", "node": "n"}]})").status())
                .find("faults[0].start: missing"),
            std::string::npos);
  EXPECT_NE(
      err(ParseTruth(R"({"faults": [{"cause": "x", "node": "n", "start": "soon"}]})").status())
          .find("faults[0].start: not a number"),
      std::string::npos);
  EXPECT_NE(err(ParseTruth(R"({"faults": [{"cause": "x", "node": "n", "gpu": -1, "start": 1}]})")
                    .status())
                .find("faults[0].gpu"),
            std::string::npos);
  EXPECT_NE(err(ParseFindings(R"({"findings": [{"cause": "x", "node": "n", "severity": "bad",
      "first_seen": 1}]})")
                    .status())
                .find("findings[0].severity"),
            std::string::npos);
}

TEST(ScoringTest, LatencyWindowsFollowTheCause) {
  EXPECT_EQ(AllowedLatencySeconds("thermal_throttle"), 15);
  EXPECT_EQ(AllowedLatencySeconds("nvlink_fallback"), 15);
  EXPECT_EQ(AllowedLatencySeconds("memory_leak"), 120);
  EXPECT_EQ(AllowedLatencySeconds("gpu_idle_allocated"), 120);
}

TEST(ScoringTest, MatchingRules) {
  const std::vector<Fault> faults = {MakeFault("thermal_throttle", "a", 100, 3),
                                     MakeFault("data_stall", "a", 200)};
  const std::vector<ScoredFinding> findings = {
      Finding("thermal_throttle", "a", 110, 3),             // match, 10 s late
      Finding("thermal_throttle", "a", 116, 3),             // too late (> 15 s): false alarm
      Finding("thermal_throttle", "a", 105, 4),             // another GPU: false alarm
      Finding("thermal_throttle", "b", 105, 3),             // another node: false alarm
      Finding("data_stall", "a", 290, 1),                   // fault names no gpu: any gpu
      Finding("thermal_throttle", "a", 99, 3),              // before the onset: false alarm
      Finding("xid", "a", 100, 3, "info"),                  // info never counts
      Finding("thermal_throttle", "a", 101, 3, "critical")  // also matches: latency 1 s
  };
  ScenarioScore s = ScoreScenario("x", faults, findings);
  ASSERT_EQ(s.latency_s.size(), 2u);
  EXPECT_DOUBLE_EQ(*s.latency_s[0], 1.0);
  EXPECT_DOUBLE_EQ(*s.latency_s[1], 90.0);
  EXPECT_EQ(s.matched_fault[0], 0u);
  EXPECT_EQ(s.matched_fault[1], std::nullopt);
  EXPECT_EQ(s.matched_fault[2], std::nullopt);
  EXPECT_EQ(s.matched_fault[3], std::nullopt);
  EXPECT_EQ(s.matched_fault[4], 1u);
  EXPECT_EQ(s.matched_fault[5], std::nullopt);
  EXPECT_FALSE(s.counted[6]);
  EXPECT_EQ(s.matched_fault[7], 0u);

  const Summary sum = Summarize({s});
  EXPECT_EQ(sum.overall.faults, 2u);
  EXPECT_EQ(sum.overall.detected, 2u);
  EXPECT_EQ(sum.overall.findings, 7u);
  EXPECT_EQ(sum.overall.matched_findings, 3u);
  EXPECT_DOUBLE_EQ(*sum.overall.Recall(), 1.0);
  EXPECT_DOUBLE_EQ(*sum.overall.Precision(), 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(*sum.overall.F1(), 2 * (3.0 / 7.0) / (3.0 / 7.0 + 1.0));
  EXPECT_DOUBLE_EQ(*sum.overall.MedianLatency(), 45.5);
  EXPECT_DOUBLE_EQ(*sum.overall.WorstLatency(), 90.0);
  EXPECT_EQ(sum.by_cause.at("thermal_throttle").findings, 6u);
  EXPECT_EQ(sum.by_cause.at("data_stall").matched_findings, 1u);
}

TEST(ScoringTest, HealthyRunsCountEveryFindingAsAFalseAlarm) {
  ScenarioScore healthy = ScoreScenario("healthy", {}, {Finding("straggler_gpu", "a", 5, 1)});
  ScenarioScore quiet = ScoreScenario("quiet", {}, {});
  ScenarioScore missed = ScoreScenario("missed", {MakeFault("gpu_lost", "a", 10, 5)}, {});
  const Summary sum = Summarize({healthy, quiet, missed});
  EXPECT_EQ(sum.scenarios, 3u);
  EXPECT_EQ(sum.healthy_scenarios, 2u);
  EXPECT_EQ(sum.healthy_false_alarms, 1u);
  EXPECT_DOUBLE_EQ(*sum.overall.Precision(), 0.0);
  EXPECT_DOUBLE_EQ(*sum.overall.Recall(), 0.0);
  EXPECT_DOUBLE_EQ(*sum.overall.F1(), 0.0);
  EXPECT_EQ(sum.overall.MedianLatency(), std::nullopt);
  EXPECT_EQ(sum.by_cause.at("gpu_lost").Precision(), std::nullopt);  // no finding of it
}

// Every truth file of the example scenarios reads.
TEST(ScoringTest, ExampleTruthFilesParse) {
  const std::filesystem::path dir =
      std::filesystem::path(GPUWATCH_SOURCE_DIR) / "../shared/scenarios";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " absent (project cloned alone)";
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 11 || name.substr(name.size() - 11) != ".truth.json") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    auto t = ParseTruth(ss.str());
    EXPECT_TRUE(t.ok()) << name << ": " << t.status().message();
    ++files;
  }
  EXPECT_EQ(files, 6u);
}

}  // namespace
}  // namespace gpuwatch::eval
