// Baselines: summaries, the Mann–Whitney test, learning from simulated runs, comparing runs, and
// the versioned store.
#include "analyze/baseline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "cluster_sim/simulator.h"

namespace gpuwatch::analyze {
namespace {

TEST(BaselineTest, SummaryQuantilesAndThinning) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  v.push_back(std::nan(""));  // not a number: left out
  const MetricSummary m = Summarize(v);
  EXPECT_EQ(m.n, 100u);
  EXPECT_DOUBLE_EQ(m.median, 50.5);
  EXPECT_DOUBLE_EQ(m.min, 1);
  EXPECT_DOUBLE_EQ(m.max, 100);
  EXPECT_NEAR(m.p95, 95.05, 1e-9);
  EXPECT_EQ(m.sample.size(), 100u);
  std::vector<double> many(5000, 1.0);
  EXPECT_LE(Summarize(many).sample.size(), kMaxSample);
  EXPECT_EQ(Summarize({}).n, 0u);
}

TEST(BaselineTest, MannWhitneyTellsAShiftFromNoise) {
  std::mt19937 rng(7);
  std::normal_distribution<double> a(1.0, 0.05), b(1.0, 0.05), c(1.1, 0.05);
  std::vector<double> xa, xb, xc;
  for (int i = 0; i < 200; ++i) {
    xa.push_back(a(rng));
    xb.push_back(b(rng));
    xc.push_back(c(rng));
  }
  EXPECT_GT(MannWhitneyP(xa, xb), 0.01);
  EXPECT_LT(MannWhitneyP(xa, xc), 1e-10);
  EXPECT_EQ(MannWhitneyP({1, 2}, xa), 1.0);                  // too few
  EXPECT_EQ(MannWhitneyP({5, 5, 5, 5}, {5, 5, 5, 5}), 1.0);  // all equal
  // The textbook case: {1,2,3} vs {4,5,6}, U = 0; exact p = 0.1, the normal approximation with
  // continuity correction ~0.081.
  EXPECT_NEAR(MannWhitneyP({1, 2, 3}, {4, 5, 6}), 0.081, 0.005);
}

std::unique_ptr<trace::TraceReader> SimTrace(const std::string& fault, uint64_t seed) {
  cluster_sim::SimOptions o;
  o.duration_s = 600;
  o.seed = seed;
  if (!fault.empty()) o.faults.push_back(*cluster_sim::ParseFaultSpec(fault));
  auto sim = cluster_sim::Simulate(o);
  EXPECT_TRUE(sim.ok()) << sim.status().message();
  std::string text;
  for (const auto& l : sim->trace_lines) text += l + "\n";
  return std::move(trace::TraceReader::OpenBuffer(std::move(text), "sim.jsonl")).value();
}

TEST(BaselineTest, LearnsARunsFirstStableWindowAfterWarmUp) {
  auto reader = SimTrace("", 1);
  auto runs = LearnRuns(reader.get(), {.warmup_s = 120, .window_s = 300, .job = ""});
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 1u);
  const Baseline& b = (*runs)[0];
  EXPECT_EQ(b.template_name, "sim-llm-fsdp");
  EXPECT_EQ(b.shape, "1x8xNVIDIA H100 80GB HBM3");
  EXPECT_EQ(b.source, "sim.jsonl");
  EXPECT_LE(b.window_to_ms - b.window_from_ms, 300000);
  EXPECT_GE(b.window_to_ms - b.window_from_ms, 280000);
  for (const char* m : {"step_s", "data_wait_share", "comm_share", "gpu_util_pct",
                        "gpu_util_min_pct", "temp_c", "sm_clock_mhz", "power_w", "mem_peak_mib"}) {
    ASSERT_TRUE(b.metrics.count(m)) << m;
    EXPECT_GT(b.metrics.at(m).n, 0u) << m;
  }
  const MetricSummary& step = b.metrics.at("step_s");
  EXPECT_GT(step.n, 50u);  // ~1.5 s steps over 5 minutes
  EXPECT_GT(step.median, 0.5);
  EXPECT_LT(step.median, 5);
  EXPECT_LE(b.metrics.at("gpu_util_min_pct").median, b.metrics.at("gpu_util_pct").median);
  // 30 ten-second buckets of card samples, not 300 seconds × 8 GPUs.
  EXPECT_LE(b.metrics.at("gpu_util_pct").n, 31u);
  // The job filter.
  auto none = LearnRuns(SimTrace("", 1).get(), {.warmup_s = 120, .window_s = 0, .job = "other"});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(BaselineTest, CompareFindsAThrottledRunSlowerAndTwoHealthyRunsTheSame) {
  const RunOptions whole{.warmup_s = 120, .window_s = 0, .job = ""};
  auto healthy = LearnRuns(SimTrace("", 1).get(), whole);
  auto healthy2 = LearnRuns(SimTrace("", 2).get(), whole);
  auto hot = LearnRuns(SimTrace("thermal_throttle:gpu=3,onset=200", 1).get(), whole);
  ASSERT_TRUE(healthy.ok() && healthy2.ok() && hot.ok());
  auto shift_of = [](const std::vector<MetricShift>& shifts, const std::string& m) {
    for (const auto& s : shifts) {
      if (s.metric == m) return s;
    }
    ADD_FAILURE() << "no " << m;
    return MetricShift{};
  };
  const auto same = CompareBaselines((*healthy)[0], (*healthy2)[0]);
  EXPECT_FALSE(shift_of(same, "step_s").significant) << shift_of(same, "step_s").shift_pct;
  const auto worse = CompareBaselines((*healthy)[0], (*hot)[0]);
  const MetricShift step = shift_of(worse, "step_s");
  EXPECT_TRUE(step.significant);
  EXPECT_GT(step.shift_pct, 2);
  EXPECT_LT(step.p_value, 0.01);
  const MetricShift clock = shift_of(worse, "sm_clock_mhz");
  EXPECT_LT(clock.shift_pct, 0);
}

TEST(BaselineTest, TheStoreVersionsListsAndRefusesWhatIsNotABaseline) {
  const std::string dir = ::testing::TempDir() + "/baselines-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  BaselineStore store(dir);
  auto runs = LearnRuns(SimTrace("", 1).get(), {.warmup_s = 120, .window_s = 300, .job = ""});
  ASSERT_TRUE(runs.ok());
  Baseline b = (*runs)[0];
  b.template_name = "llama/8b fsdp";  // a name that is no path
  EXPECT_EQ(*store.Add(b), 1);
  EXPECT_EQ(*store.Add(b), 2);
  auto all = store.List();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[1].version, 2);
  EXPECT_TRUE(std::filesystem::exists(
      dir + "/llama%2F8b%20fsdp/1x8xNVIDIA%20H100%2080GB%20HBM3/v0002.json"));
  auto newest = store.Get("llama/8b fsdp", "", 0);
  ASSERT_TRUE(newest.ok()) << newest.status().message();
  EXPECT_EQ(newest->version, 2);
  EXPECT_EQ(newest->metrics.at("step_s").median, b.metrics.at("step_s").median);
  EXPECT_EQ(store.Get("llama/8b fsdp", "", 1)->version, 1);
  EXPECT_EQ(store.Get("nope", "", 0).status().code(), StatusCode::kNotFound);
  // Round trip through JSON, and a broken file is skipped and named.
  auto back = BaselineFromJson(BaselineToJson(b));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->metrics.size(), b.metrics.size());
  EXPECT_EQ(back->metrics.at("step_s").sample, b.metrics.at("step_s").sample);
  const std::string shape_dir = dir + "/llama%2F8b%20fsdp/1x8xNVIDIA%20H100%2080GB%20HBM3";
  std::ofstream(shape_dir + "/v0009.json") << "{\"format\": \"gpuwatch-baseline\"";
  std::ofstream(shape_dir + "/notes.json") << "{}";
  // A wrong-typed field is a named refusal, never a crash.
  std::ofstream(shape_dir + "/v0010.json") << "{\"format\": 1}";
  std::vector<std::string> skipped;
  ASSERT_TRUE(store.List(&skipped).ok());
  ASSERT_EQ(skipped.size(), 3u);
  std::sort(skipped.begin(), skipped.end());
  EXPECT_NE(skipped[0].find("notes.json: not a version file"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[1].find("v0009.json: not JSON"), std::string::npos) << skipped[1];
  EXPECT_NE(skipped[2].find("v0010.json: not a gpuwatch baseline"), std::string::npos);
  // The file name rules: a copy whose JSON says another version is listed as its file's.
  nlohmann::json copy = BaselineToJson(b);
  copy["version"] = 1;
  std::ofstream(shape_dir + "/v0011.json") << copy.dump();
  EXPECT_EQ(store.Get("llama/8b fsdp", "", 11)->version, 11);
  nlohmann::json bad = BaselineToJson(b);
  bad["metrics"]["step_s"]["median"] = "slow";
  EXPECT_NE(BaselineFromJson(bad).status().message().find("metrics.step_s.median"),
            std::string::npos);
  EXPECT_FALSE(BaselineFromJson(nlohmann::json{{"format", "other"}}).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpuwatch::analyze
