// Task rules over a job's steps: data_stall, checkpoint_stall, straggler_gpu, step_regression.
// Hand-made traces read through the real trace reader (analyze/testing/diagnose.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "analyze/testing/diagnose.h"

namespace gpuwatch::analyze {
namespace {

using testing::Diagnose;
using testing::Gpu;
using testing::Node;
using testing::Step;
using testing::StepOf;

TEST(TaskStepsRuleTest, DataStallAgainstTheJobsOwnBaseline) {
  std::string healthy = Node("n1", 100);
  std::string stalled = healthy;
  for (int i = 0; i < 900; ++i) {
    const double t = 101 + i * 0.6;
    for (int rank = 0; rank < 2; ++rank) {
      healthy += Step(t, rank, 0.6, 0.02);  // a steady 3 %
      // From t = 401 the input pipeline slows: half of every step waits for data.
      stalled += Step(t, rank, t >= 401 ? 1.2 : 0.6, t >= 401 ? 0.6 : 0.02);
    }
  }
  EXPECT_TRUE(Diagnose(healthy).empty());
  const std::vector<Finding> f = Diagnose(stalled);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kDataStall);
  EXPECT_EQ(f[0].layer(), model::Layer::kTask);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_GE(f[0].first_seen, 401);
  EXPECT_LE(f[0].first_seen, 401 + 120);
}

TEST(TaskStepsRuleTest, CheckpointStallAgainstTheJobsEarlierCheckpoints) {
  std::string trace = Node("n1", 100);
  double t = 101;
  for (int i = 0; i < 30; ++i) {
    const double ckpt = i == 10 ? 8 : i == 25 ? 95 : 0;  // a normal one, then a slow one
    trace += StepOf(t + 1 + ckpt, 0, 1 + ckpt, 0.1, ckpt);
    t += 1 + ckpt;
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kCheckpointStall);
  EXPECT_NE(f[0].summary.find("95"), std::string::npos);
}

TEST(TaskStepsRuleTest, StepRegressionAgainstTheTemplateForAJobSlowFromItsStart) {
  // A job of template "llama" on a 1x2 node whose every step takes 1.5 s: its own steps give
  // no sign, its template's baseline (1.0 s, p99 1.1 s) does.
  std::string trace =
      Node("n1", 100) +
      R"({"t":100.5,"type":"job","node":"n1","job":"j1","state":"start","template":"llama","gpus":[0,1]})"
      "\n";
  for (int i = 0; i < 400; ++i) {
    for (int rank = 0; rank < 2; ++rank) trace += StepOf(101 + i * 1.5, rank, 1.5, 0.1);
  }
  const TemplateStep llama{.template_name = "llama",
                           .shape = "1x2xGPU",
                           .version = 3,
                           .driver_version = "550.90.07",
                           .median_s = 1.0,
                           .p99_s = 1.1};
  EXPECT_TRUE(Diagnose(trace).empty());
  std::vector<Finding> f = Diagnose(trace, {llama});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kStepRegression);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_NE(f[0].summary.find("template llama"), std::string::npos) << f[0].summary;
  EXPECT_NE(f[0].evidence[0].find("v3 of llama on 1x2xGPU"), std::string::npos);
  // Judged from the end of the warm-up (2 min after the first step), held 2 min.
  EXPECT_GE(f[0].first_seen, 219.5);  // the start of the first judged step
  EXPECT_LE(f[0].first_seen, 230);
  // Within the template's spread (p99 above the line), another shape, or another driver: no
  // judgement.
  TemplateStep wide = llama;
  wide.p99_s = 1.6;
  EXPECT_TRUE(Diagnose(trace, {wide}).empty());
  TemplateStep other_shape = llama;
  other_shape.shape = "1x8xGPU";
  EXPECT_TRUE(Diagnose(trace, {other_shape}).empty());
  TemplateStep other_driver = llama;
  other_driver.driver_version = "535.104.05";
  EXPECT_TRUE(Diagnose(trace, {other_driver}).empty());
  // A template slower than the job: nothing.
  TemplateStep slower = llama;
  slower.median_s = 1.45;
  slower.p99_s = 1.6;
  EXPECT_TRUE(Diagnose(trace, {slower}).empty());
}

TEST(TaskStepsRuleTest, StepRegressionAgainstTheJobsOwnSteadyState) {
  std::string trace = Node("n1", 100);
  // 1.0 s steps; from t=500 they take 1.4 s (nothing deeper in the trace to explain it).
  double t = 101;
  while (t < 900) {
    const double d = t >= 500 ? 1.4 : 1.0;
    t += d;
    for (int rank = 0; rank < 2; ++rank) trace += StepOf(t, rank, d, 0.1);
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kStepRegression);
  EXPECT_NE(f[0].summary.find("40% over its own 1 s"), std::string::npos) << f[0].summary;
  EXPECT_GE(f[0].first_seen, 499);
  EXPECT_LE(f[0].first_seen, 502);
  // Slower by less than the factor: nothing.
  std::string mild = Node("n1", 100);
  t = 101;
  while (t < 900) {
    const double d = t >= 500 ? 1.2 : 1.0;
    t += d;
    for (int rank = 0; rank < 2; ++rank) mild += StepOf(t, rank, d, 0.1);
  }
  EXPECT_TRUE(Diagnose(mild).empty());
}

TEST(TaskStepsRuleTest, StragglerIsTheRankThatNeverWaits) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 200; ++i) {
    for (int rank = 0; rank < 4; ++rank) {
      // From t=161 rank 2's GPU is slow: the others wait 0.4 s for it in every collective.
      const bool slow = i >= 60;
      const double comm = !slow ? 0.1 : rank == 2 ? 0.05 : 0.5;
      trace += StepOf(101 + i, rank, slow ? 1.4 : 1.0, comm);
    }
  }
  std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kStragglerGpu);
  EXPECT_EQ(f[0].gpu, 2);
  EXPECT_GE(f[0].first_seen, 161);
  EXPECT_LE(f[0].first_seen, 161 + 120);
  ASSERT_EQ(f[0].evidence.size(), 2u);
  EXPECT_EQ(f[0].evidence[1], "no card sample of GPU 2 to compare with its peers");
  // With card samples the evidence says how GPU 2 differs from its peers (no throttle reason
  // held: nothing deeper to name).
  std::string cards;
  for (int i = 0; i < 10; ++i) {
    for (int g = 0; g < 4; ++g) {
      cards += Gpu(150 + i, g,
                   std::string("\"util_pct\":95,\"sm_clock_mhz\":") + (g == 2 ? "1600" : "1980") +
                       ",\"temp_c\":" + (g == 2 ? "81" : "66") + ",\"power_w\":650");
    }
  }
  const std::string node = Node("n1", 100);
  f = Diagnose(node + cards + trace.substr(node.size()));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].evidence[1], "GPU 2 vs its peers' median: SM clock 1600 vs 1980 MHz, 81 vs 66 °C")
      << f[0].evidence[1];
  // A thermally throttled GPU 2 is the deeper cause: the straggler finding goes.
  for (int i = 0; i < 10; ++i) {
    trace += Gpu(165 + i, 2, "\"util_pct\":95,\"throttle\":[\"hw_thermal\"]");
  }
  f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kThermalThrottle);
}

// A job of four nodes with one rank each: no node alone has peers to compare its rank with.
// The ranks are compared across the job's nodes by step number: n3's clock runs 1.5 s ahead, so
// its steps carry later times than the same steps elsewhere (and come later in the merged
// stream), yet step N there is compared with step N on the others. Rank 2 on n2 is the one
// the others wait for.
TEST(TaskStepsRuleTest, StragglerIsFoundAcrossNodesByStepNumber) {
  std::string trace;
  for (int node = 0; node < 4; ++node) trace += Node("n" + std::to_string(node), 100);
  std::vector<std::pair<double, std::string>> steps;
  for (int i = 0; i < 200; ++i) {
    const bool slow = i >= 60;  // from step 60 (t = 161) rank 2's GPU is slow
    for (int rank = 0; rank < 4; ++rank) {
      const double t = 101 + i + (rank == 3 ? 1.5 : 0);
      nlohmann::json j = {{"t", t},
                          {"type", "step"},
                          {"node", "n" + std::to_string(rank)},
                          {"job", "j1"},
                          {"rank", rank},
                          {"gpu", 0},
                          {"step", i},
                          {"duration_s", slow ? 1.4 : 1.0},
                          {"data_wait_s", 0.01},
                          {"comm_s", !slow       ? 0.1
                                     : rank == 2 ? 0.05
                                                 : 0.5}};
      steps.push_back({t, j.dump() + "\n"});
    }
  }
  std::stable_sort(steps.begin(), steps.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [t, line] : steps) trace += line;
  std::map<Cause, std::vector<Finding>> by_cause;
  for (Finding& f : Diagnose(trace)) by_cause[f.cause].push_back(std::move(f));
  ASSERT_EQ(by_cause[Cause::kStragglerGpu].size(), 1u);
  const Finding& f = by_cause[Cause::kStragglerGpu][0];
  EXPECT_EQ(f.node, "n2");
  EXPECT_EQ(f.gpu, 0);
  EXPECT_EQ(f.job, "j1");
  EXPECT_GE(f.first_seen, 161);
  EXPECT_LE(f.first_seen, 161 + 120);
  ASSERT_FALSE(f.evidence.empty());
  EXPECT_NE(f.evidence[0].find("4 ranks on 4 nodes"), std::string::npos) << f.evidence[0];
  // n3's clock is named too (rules/cross_node), and nothing else.
  ASSERT_EQ(by_cause[Cause::kClockSkew].size(), 1u);
  EXPECT_EQ(by_cause[Cause::kClockSkew][0].node, "n3");
  EXPECT_EQ(by_cause.size(), 2u);
}

// A job stepping every 5 s has 100 steps only after eight minutes: its baseline is learned from
// the first three minutes after warm-up instead (rules/learned_median.h), so a slowdown at six
// minutes is still judged against healthy steps.
TEST(TaskStepsRuleTest, ASlowSteppingJobLearnsItsBaselineInMinutesNotSteps) {
  std::string trace = Node("n1", 100);
  double t = 101;
  while (t < 1500) {
    const double d = t >= 460 ? 7.0 : 5.0;
    t += d;
    for (int rank = 0; rank < 2; ++rank) trace += StepOf(t, rank, d, 0.3);
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kStepRegression);
  EXPECT_GE(f[0].first_seen, 455);
  EXPECT_LE(f[0].first_seen, 470);
}

// One rank whose own input arrives late (its shard on a slow disk) keeps the others waiting in
// their collective just as a slow GPU would; its own data wait tells the two apart: not a
// straggling GPU.
TEST(TaskStepsRuleTest, ARankStarvedByItsOwnInputIsNotAStragglingGpu) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 300; ++i) {
    const double t = 101 + i;
    for (int rank = 0; rank < 4; ++rank) {
      const bool slow = rank == 2 && t >= 250;
      nlohmann::json j = {{"t", t},
                          {"type", "step"},
                          {"node", "n1"},
                          {"job", "j1"},
                          {"rank", rank},
                          {"gpu", rank},
                          {"duration_s", 1.0},
                          {"data_wait_s", slow ? 0.32 : 0.02},
                          {"comm_s", slow ? 0.08 : (t >= 250 ? 0.38 : 0.08)}};
      trace += j.dump() + "\n";
    }
  }
  for (const Finding& f : Diagnose(trace)) EXPECT_NE(f.cause, Cause::kStragglerGpu);
}

}  // namespace
}  // namespace gpuwatch::analyze
