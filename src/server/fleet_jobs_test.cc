#include "server/fleet_jobs.h"

#include <gtest/gtest.h>

namespace gpuwatch::server {
namespace {

using nlohmann::json;

json Start(const std::string& node, int ranks, std::vector<int> gpus) {
  return {{"type", "job"},    {"job", "42"},      {"node", node},
          {"state", "start"}, {"template", "t1"}, {"user", "ann"},
          {"project", "nlp"}, {"ranks", ranks},   {"gpus", gpus}};
}
json Step(const std::string& node, int rank, int gpu, int step, double d, double comm) {
  return {{"type", "step"}, {"job", "42"},       {"node", node},    {"rank", rank},
          {"gpu", gpu},     {"step", step},      {"duration_s", d}, {"samples", 8},
          {"comm_s", comm}, {"data_wait_s", 0.1}};
}

TEST(FleetJobsTest, AMultiNodeJobIsOneJobWithEveryNodeAndRank) {
  FleetJobs fj({.window_ms = 10'000});
  const int64_t t0 = 1'000'000;
  fj.Add("n1", Start("n1", 4, {0, 1}), t0);
  fj.Add("n2", Start("n2", 4, {2, 3}), t0 + 500);
  // Ten steps of 1 s on every rank; rank 3 on n2 spends 0.4 s of each in communication.
  for (int s = 0; s < 10; ++s) {
    const int64_t t = t0 + 1000 + s * 1000;
    fj.Add("n1", Step("n1", 0, 0, s, 1.0, 0.2), t);
    fj.Add("n1", Step("n1", 1, 1, s, 1.0, 0.2), t);
    fj.Add("n2", Step("n2", 2, 2, s, 1.0, 0.2), t);
    fj.Add("n2", Step("n2", 3, 3, s, 1.0, 0.4), t);
  }
  auto j = fj.Job("42");
  ASSERT_TRUE(j);
  EXPECT_EQ(j->state, "running");
  EXPECT_EQ(j->template_name, "t1");
  EXPECT_EQ(j->project, "nlp");
  EXPECT_EQ(j->world_size, 4u);
  EXPECT_EQ(j->start_ms, t0);
  ASSERT_EQ(j->nodes.size(), 2u);
  EXPECT_EQ(j->nodes.at("n1"), (std::vector<unsigned>{0, 1}));
  EXPECT_EQ(j->nodes.at("n2"), (std::vector<unsigned>{2, 3}));
  ASSERT_EQ(j->ranks.size(), 4u);
  EXPECT_EQ(j->ranks[3].node, "n2");
  EXPECT_EQ(j->ranks[3].steps_total, 10u);
  EXPECT_EQ(j->ranks[3].last_step, 9u);
  // The window: (newest - 10 s, newest] of the job's own steps, which holds all ten.
  EXPECT_EQ(j->window.steps, 4u * 10);
  EXPECT_DOUBLE_EQ(*j->window.step_p50_s, 1.0);
  EXPECT_DOUBLE_EQ(j->window.iterations_per_s, 1.0);
  EXPECT_DOUBLE_EQ(j->window.samples_per_s, 4 * 10 * 8 / 10.0);
  // Ten more seconds later only those newer count.
  for (int r = 0; r < 4; ++r)
    fj.Add(r < 2 ? "n1" : "n2", Step(r < 2 ? "n1" : "n2", r, r, 10, 1.0, 0.2), t0 + 15'000);
  j = fj.Job("42");
  EXPECT_EQ(j->window.steps, 4u * 6);  // steps ending at t0+6 s .. t0+10 s, and t0+15 s
  EXPECT_NEAR(*j->window.comm_ratio, (0.2 * 3 * 6 + 0.4 * 5 + 0.2) / 24, 1e-12);
  EXPECT_NEAR(*j->ranks[0].window.comm_ratio, 0.2, 1e-12);
  // It ends when every node that started it has ended; a nonzero exit fails it.
  fj.Add("n1", {{"type", "job"}, {"job", "42"}, {"state", "end"}, {"exit_code", 0}}, t0 + 20'000);
  EXPECT_EQ(fj.Job("42")->state, "running");
  fj.Add("n2", {{"type", "job"}, {"job", "42"}, {"state", "end"}, {"exit_code", 1}}, t0 + 21'000);
  EXPECT_EQ(fj.Job("42")->state, "failed");
  EXPECT_EQ(fj.Job("42")->end_ms, t0 + 21'000);
}

TEST(FleetJobsTest, BoundedJobsForgetEndedOnesFirst) {
  FleetJobs fj({.max_jobs = 2});
  fj.Add("n", {{"type", "job"}, {"job", "a"}, {"state", "start"}}, 1000);
  fj.Add("n", {{"type", "job"}, {"job", "a"}, {"state", "end"}}, 2000);
  fj.Add("n", {{"type", "job"}, {"job", "b"}, {"state", "start"}}, 3000);
  fj.Add("n", {{"type", "job"}, {"job", "c"}, {"state", "start"}}, 4000);
  EXPECT_FALSE(fj.Job("a"));
  EXPECT_TRUE(fj.Job("b"));
  EXPECT_TRUE(fj.Job("c"));
  auto all = fj.Jobs();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, "c");  // running, newest first
}

TEST(FleetJobsTest, JunkRecordsAreIgnored) {
  FleetJobs fj;
  fj.Add("n", {{"type", "step"}, {"job", "x"}, {"rank", -1}, {"duration_s", 1}}, 1);
  fj.Add("n", {{"type", "step"}, {"job", "x"}, {"rank", 1e12}, {"duration_s", 1}}, 1);
  fj.Add("n", {{"type", "step"}, {"job", ""}, {"rank", 0}, {"duration_s", 1}}, 1);
  fj.Add("n", {{"type", "gpu"}, {"job", "y"}}, 1);
  auto x = fj.Job("x");
  ASSERT_TRUE(x);
  EXPECT_TRUE(x->ranks.empty());
  EXPECT_FALSE(fj.Job("y"));
}

}  // namespace
}  // namespace gpuwatch::server
