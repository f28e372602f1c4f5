// The agent's own baselines: a job's first stable window, learned once, stored only when its
// template has no current baseline on the shape.
#include "server/auto_baselines.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cluster_sim/simulator.h"
#include "trace/flight_recorder.h"

namespace gpuwatch::server {
namespace {

TEST(AutoBaselinesTest, AJobsFirstStableWindowIsLearnedOnceAndOnlyWhenNoneIsCurrent) {
  cluster_sim::SimOptions o;
  o.shape = "4xH100";
  o.duration_s = 600;
  o.seed = 3;
  auto sim = cluster_sim::Simulate(o);
  ASSERT_TRUE(sim.ok());
  trace::FlightRecorder recorder(
      trace::FlightRecorderOptions{size_t{256} << 20, std::chrono::hours(1)});
  int64_t start_ms = 0;
  for (const std::string& l : sim->trace_lines) {
    const auto j = nlohmann::json::parse(l);
    const auto t = static_cast<int64_t>(std::llround(j["t"].get<double>() * 1000));
    if (j["type"] == "job" && j["state"] == "start") start_ms = t;
    recorder.Add(t, l);
  }
  ASSERT_GT(start_ms, 0);
  const std::string dir = ::testing::TempDir() + "/auto-baselines-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  AutoBaselines learner(dir, analyze::RunOptions{.warmup_s = 120, .window_s = 300, .job = ""});
  // The agent's recorder knows its node records by the trace writer's canonical key order and
  // repeats the one in force at each window's start; the simulator's lines are not in that
  // order, so the test hands it over itself.
  const std::string node_line = sim->trace_lines.front();
  ASSERT_NE(node_line.find("\"type\":\"node\""), std::string::npos);
  auto window = [&](int64_t a, int64_t b) {
    std::vector<std::string> lines = recorder.Window(a, b);
    lines.insert(lines.begin(), node_line);
    return lines;
  };
  jobs::JobView job;
  job.id = "sim-3";
  job.template_name = "sim-llm-fsdp";
  job.state = "running";
  job.start_ms = start_ms;
  // Warm-up 120 s + window 300 s + a minute for the first step.
  EXPECT_TRUE(learner.Tick(start_ms + 479000, {job}, window, 0).empty());
  auto learned = learner.Tick(start_ms + 481000, {job}, window, 0);
  ASSERT_EQ(learned.size(), 1u);
  EXPECT_NE(learned[0].find("learned baseline sim-llm-fsdp on 1x4xNVIDIA H100 80GB HBM3 from "
                            "job sim-3: version 1"),
            std::string::npos)
      << learned[0];
  EXPECT_TRUE(learner.Tick(start_ms + 486000, {job}, window, 0).empty());  // once per job
  auto stored = analyze::BaselineStore(dir).Get("sim-llm-fsdp", "", 0);
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_EQ(stored->source, "agent (job sim-3)");
  EXPECT_GT(stored->metrics.at("step_s").n, 100u);
  // Another run of the template: the baseline is current, nothing new.
  jobs::JobView again = job;
  again.id = "sim-3b";
  EXPECT_TRUE(learner.Tick(start_ms + 490000, {again}, window, 0).empty());
  // After a topology change the baseline is stale: a run's window is learned again (the same
  // records, as a job the learner has forgotten since it left the registry's list).
  EXPECT_TRUE(learner.Tick(start_ms + 491000, {}, window, 0).empty());
  const int64_t changed = stored->learned_at_ms + 1;
  ASSERT_EQ(learner.Tick(start_ms + 495000, {job}, window, changed).size(), 1u);
  EXPECT_EQ(analyze::BaselineStore(dir).Get("sim-llm-fsdp", "", 0)->version, 2);
  // A job without a template, or not running, is never learned.
  jobs::JobView anon = job;
  anon.id = "anon";
  anon.template_name = "";
  EXPECT_TRUE(learner.Tick(start_ms + 496000, {anon}, window, changed + 1).empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpuwatch::server
