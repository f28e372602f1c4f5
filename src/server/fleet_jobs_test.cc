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

std::vector<FleetJobs::TimedRecord> OneStep(const std::string& node, int rank, int step,
                                            int64_t t_ms) {
  return {{Step(node, rank, rank, step, 1.0, 0.2), t_ms}};
}

// The snapshot keeps what a restarted hub cannot rebuild from its logs' tails: an ended job,
// its owner, nodes and ranks' step counts. The recent steps it leaves out come back by Replay,
// which counts only the entries past each node's position.
TEST(FleetJobsTest, ASnapshotAndReplayCountEveryStepOnce) {
  FleetJobs fj({.window_ms = 10'000});
  const int64_t t0 = 1'000'000;
  fj.AddEntry("n1", 1, {{Start("n1", 2, {0}), t0}});
  fj.AddEntry("n2", 1, {{Start("n2", 2, {1}), t0}});
  // Entries 2..11 of each node: steps 0..9.
  for (int s = 0; s < 10; ++s) {
    fj.AddEntry("n1", 2 + s, OneStep("n1", 0, s, t0 + 1000 * (s + 1)));
    fj.AddEntry("n2", 2 + s, OneStep("n2", 1, s, t0 + 1000 * (s + 1)));
  }
  uint64_t changes = 0;
  const auto snap = fj.Snapshot(&changes);
  EXPECT_EQ(changes, fj.Changes());
  EXPECT_EQ(snap["positions"], (json{{"n1", 11}, {"n2", 11}}));
  // Two more entries of n1 after the snapshot (then the hub dies).
  fj.AddEntry("n1", 12, OneStep("n1", 0, 10, t0 + 11'000));
  fj.AddEntry("n1", 13, OneStep("n1", 0, 11, t0 + 12'000));

  FleetJobs back({.window_ms = 10'000});
  ASSERT_TRUE(back.Restore(json::parse(snap.dump())).ok());
  auto j = back.Job("42");
  ASSERT_TRUE(j);
  EXPECT_EQ(j->state, "running");
  EXPECT_EQ(j->project, "nlp");
  EXPECT_EQ(j->start_ms, t0);
  EXPECT_EQ(j->nodes.at("n2"), (std::vector<unsigned>{1}));
  ASSERT_EQ(j->ranks.size(), 2u);
  EXPECT_EQ(j->ranks[0].steps_total, 10u);
  EXPECT_EQ(j->ranks[0].last_step, 9u);
  EXPECT_EQ(j->ranks[0].last_step_ms, t0 + 10'000);
  EXPECT_EQ(j->window.steps, 0u);  // no recent steps until the logs are replayed
  EXPECT_EQ(back.Position("n1"), 11u);
  EXPECT_EQ(back.Position("n3"), 0u);

  // The logs' tails replayed: n1's entries 8..13 and n2's 8..11. The first only refill the
  // windows; n1's 12 and 13 are counted.
  for (uint64_t e = 8; e <= 13; ++e)
    back.Replay("n1", e, OneStep("n1", 0, static_cast<int>(e) - 2, t0 + 1000 * (e - 1)));
  for (uint64_t e = 8; e <= 11; ++e)
    back.Replay("n2", e, OneStep("n2", 1, static_cast<int>(e) - 2, t0 + 1000 * (e - 1)));
  j = back.Job("42");
  EXPECT_EQ(j->ranks[0].steps_total, 12u);
  EXPECT_EQ(j->ranks[1].steps_total, 10u);
  EXPECT_EQ(j->ranks[0].last_step, 11u);
  EXPECT_EQ(j->window.steps, 6u + 4u);
  EXPECT_EQ(back.Position("n1"), 13u);
  // What the hub that never died says, step for step.
  const auto live = fj.Job("42");
  EXPECT_EQ(j->ranks[0].steps_total, live->ranks[0].steps_total);
  EXPECT_EQ(j->ranks[1].steps_total, live->ranks[1].steps_total);
}

// A job on nodes a and b: a ends at 9 s, b (failing) at 20 s. After the restart, b's log tail
// still holds its start and end, at or below its position: replaying them changes nothing (a
// replayed start would reopen b, and its end date the job by b alone).
TEST(FleetJobsTest, AnEndedJobOutlivesTheRestartAndReplayedJobRecordsChangeNothing) {
  auto end = [](int code) {
    return json{{"type", "job"}, {"job", "42"}, {"state", "end"}, {"exit_code", code}};
  };
  FleetJobs fj;
  fj.AddEntry("a", 1, {{Start("a", 2, {0}), 1000}});
  fj.AddEntry("b", 1, {{Start("b", 2, {0}), 1000}});
  fj.AddEntry("b", 2, {{end(3), 20'000}});
  fj.AddEntry("a", 2, {{end(0), 9000}});
  ASSERT_EQ(fj.Job("42")->end_ms, 20'000);
  FleetJobs back;
  ASSERT_TRUE(back.Restore(fj.Snapshot()).ok());
  back.Replay("b", 1, {{Start("b", 2, {0}), 1000}});
  EXPECT_EQ(back.Job("42")->state, "failed");
  back.Replay("b", 2, {{end(3), 20'000}});
  auto j = back.Job("42");
  EXPECT_EQ(j->state, "failed");
  EXPECT_EQ(j->end_ms, 20'000);
  EXPECT_EQ(j->user, "ann");
  // A job the snapshot had forgotten (over max_jobs) is not brought back by a replayed entry.
  back.Replay("b", 2, {{{{"type", "job"}, {"job", "old"}, {"state", "start"}}, 500}});
  EXPECT_FALSE(back.Job("old"));
  // Past the position, a record counts: b starts the job again.
  back.Replay("b", 3, {{Start("b", 2, {0}), 30'000}});
  EXPECT_EQ(back.Job("42")->state, "running");
  EXPECT_EQ(back.Position("b"), 3u);
  // That rerun ends well: its outcome is its own, not the earlier run's failure.
  back.Replay("b", 4, {{end(0), 40'000}});
  EXPECT_EQ(back.Job("42")->state, "finished");
  EXPECT_EQ(back.Job("42")->end_ms, 40'000);
  // A log cut short below the position: what it appends next is new.
  back.ClampPosition("b", 1);
  EXPECT_EQ(back.Position("b"), 1u);
  back.ClampPosition("a", 0);
  EXPECT_EQ(back.Position("a"), 0u);
  EXPECT_EQ(back.PositionedNodes(), std::vector<std::string>{"b"});
}

TEST(FleetJobsTest, ADamagedSnapshotIsRefusedByWhatIsWrongAndChangesNothing) {
  FleetJobs fj;
  fj.AddEntry("n", 1, {{Start("n", 1, {0}), 1000}});
  json snap = fj.Snapshot();
  FleetJobs back;
  back.Add("n", {{"type", "job"}, {"job", "mine"}, {"state", "start"}}, 5);
  json bad = snap;
  bad["jobs"][0]["ranks"] = json::array({{{"rank", "zero"}}});
  Status st = back.Restore(bad);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("job 42"), std::string::npos) << st.message();
  bad = snap;
  bad["version"] = 2;
  EXPECT_NE(back.Restore(bad).message().find("version 1"), std::string::npos);
  bad = snap;
  bad["positions"]["n"] = -4;
  EXPECT_NE(back.Restore(bad).message().find("positions"), std::string::npos);
  EXPECT_FALSE(back.Restore(json::array()).ok());
  EXPECT_TRUE(back.Job("mine"));
  EXPECT_FALSE(back.Job("42"));
  EXPECT_EQ(back.Position("n"), 0u);
}

}  // namespace
}  // namespace gpuwatch::server
