// Task liveness: job_hang, rank_exit, gpu_idle_allocated.
// Hand-made traces read through the real trace reader (analyze/testing/diagnose.h).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
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

TEST(TaskLivenessRuleTest, JobHangFromTheLastStepAndNotWhenAGpuWasLost) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 50; ++i) trace += StepOf(101 + i, 0, 1.0, 0.1);
  // No step after t=150; the node keeps sampling for 3 minutes.
  std::string hung = trace;
  for (int i = 0; i < 180; ++i) hung += Gpu(151 + i, 0, "\"util_pct\":100");
  std::vector<Finding> f = Diagnose(hung);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kJobHang);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_DOUBLE_EQ(f[0].first_seen, 150);
  // The same silence after the GPU fell off the bus is that, not a hang.
  hung = trace +
         R"({"t":151,"type":"event","node":"n1","gpu":0,"kind":"xid","code":79,"message":"x"})"
         "\n";
  for (int i = 0; i < 180; ++i) hung += Gpu(152 + i, 1, "\"util_pct\":100");
  f = Diagnose(hung);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kGpuLost);
}

TEST(TaskLivenessRuleTest, RankExitIsTheFirstProcessToVanish) {
  std::string trace = Node("n1", 100);
  trace += R"({"t":100,"type":"job","node":"n1","job":"j1","state":"start","gpus":[0,1,2,3]})"
           "\n";
  for (int round = 0; round < 8; ++round) {
    const double t = 105 + 10 * round;
    for (int rank = 0; rank < 4; ++rank) trace += StepOf(t - 1, rank, 1.0, 0.1);
    for (int gpu = 0; gpu < 4; ++gpu) {
      // Round 5 (t=155): rank 2's process is gone. Round 6: the launcher tears down the rest.
      if (round >= 5 && gpu == 2) continue;
      if (round >= 6 && gpu != 0) continue;
      trace += "{\"t\":" + std::to_string(t) +
               ",\"type\":\"proc\",\"node\":\"n1\",\"pid\":" + std::to_string(500 + gpu) +
               ",\"gpu\":" + std::to_string(gpu) + ",\"job\":\"j1\"}\n";
    }
  }
  trace += R"({"t":190,"type":"job","node":"n1","job":"j1","state":"end","exit_code":1})"
           "\n";
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kRankExit);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_EQ(f[0].rank, 2);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 155);
}

// A four-GPU node running job j1 (ranks 0..3 on GPUs 0..3, pids `pid0`..`pid0`+3): steps every
// second from 101 to `steps_until`, proc rounds every 10 s until `procs_until` (exclusive),
// busy GPUs every second until `gpus_until`.
std::string FourRankJob(double steps_until, double procs_until, double gpus_until,
                        uint32_t pid0 = 812914) {
  std::string t =
      R"({"t":100,"type":"node","node":"n1","gpus":[{"index":0},{"index":1},{"index":2},{"index":3}]})"
      "\n"
      R"({"t":100,"type":"job","node":"n1","job":"j1","state":"start","ranks":4,"gpus":[0,1,2,3]})"
      "\n";
  for (double s = 101; s <= std::max({steps_until, procs_until, gpus_until}); s += 1) {
    for (int g = 0; g < 4; ++g) {
      if (s <= gpus_until) {
        t += Gpu(s, g, "\"util_pct\":97,\"power_w\":600,\"sm_clock_mhz\":1980");
      }
      if (s <= steps_until) {
        t += nlohmann::json{{"t", s + 0.5}, {"type", "step"}, {"node", "n1"},     {"job", "j1"},
                            {"rank", g},    {"gpu", g},       {"duration_s", 1.0}}
                 .dump() +
             "\n";
      }
      if (s < procs_until && static_cast<int>(s) % 10 == 0) {
        t += nlohmann::json{{"t", s},          {"type", "proc"}, {"node", "n1"},
                            {"pid", pid0 + g}, {"gpu", g},       {"job", "j1"}}
                 .dump() +
             "\n";
      }
    }
  }
  return t;
}

std::string JobLog(double t, const std::string& line, std::optional<int> rank = std::nullopt) {
  nlohmann::json j = {{"t", t},      {"type", "log"},   {"node", "n1"},
                      {"job", "j1"}, {"source", "job"}, {"line", line}};
  if (rank) j["rank"] = *rank;
  return j.dump() + "\n";
}

std::string KernelLog(double t, const std::string& line) {
  return nlohmann::json{
             {"t", t}, {"type", "log"}, {"node", "n1"}, {"source", "kernel"}, {"line", line}}
             .dump() +
         "\n";
}

std::string JobEnd(double t, int exit_code) {
  return nlohmann::json{{"t", t},      {"type", "job"},  {"node", "n1"},
                        {"job", "j1"}, {"state", "end"}, {"exit_code", exit_code}}
             .dump() +
         "\n";
}

// torchrun polls its workers and, on the first failure, sends SIGTERM to the others and reports
// "failed (exitcode: N) local_rank: L (pid: P)" (torch/distributed/elastic/multiprocessing/
// api.py; docs/research/launchers.md): the whole job leaves one round of process records, and the
// launcher's line names the rank. Real lines: hpcaitech/ColossalAI#3514 (a worker the host's OOM
// killer took: exit code -9).
TEST(TaskLivenessRuleTest, ARankTheLauncherReportsFailedIsARankExitDatedByItsDeath) {
  std::string t = FourRankJob(249.5, 250, 256);
  t += JobLog(249.8, "[rank3]: Traceback (most recent call last):", 3);
  t += JobLog(249.8, "[rank3]: RuntimeError: DataLoader worker (pid 9999) is killed by signal", 3);
  for (int pid : {812914, 812915, 812916}) {
    t += JobLog(255, "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process " +
                         std::to_string(pid) + " closing signal SIGTERM");
  }
  t += JobLog(256,
              "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) "
              "local_rank: 3 (pid: 812917) of binary: /data/chenhao/anaconda3/envs/"
              "ColossalAI-Chat/bin/python");
  t += JobEnd(258, 1);
  const auto f = Diagnose(t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kRankExit);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_EQ(f[0].rank, 3);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 249.8);  // its own last lines, not the launcher's report
}

// The kernel's OOM killer: "Killed process P (name) total-vm:…" (mm/oom_kill.c; docs/research/
// xid.md) at the moment the rank died; the launcher sees exit code -9 after its next poll.
TEST(TaskLivenessRuleTest, AnOomKillDatesTheRanksDeath) {
  std::string t = FourRankJob(249.5, 250, 256);
  t += KernelLog(249.6,
                 "[18026.221140] Memory cgroup out of memory: Killed process 812917 (python3) "
                 "total-vm:120832kB, anon-rss:15596kB, file-rss:8924kB, shmem-rss:0kB, UID:0 "
                 "pgtables:276kB oom_score_adj:-997");
  t += JobLog(256,
              "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) "
              "local_rank: 3 (pid: 812917) of binary: /usr/bin/python");
  t += JobEnd(258, 1);
  const auto f = Diagnose(t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kRankExit);
  EXPECT_EQ(f[0].rank, 3);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 249.6);
}

// A hung job is torn down by ProcessGroupNCCL's watchdog ("Watchdog caught collective operation
// timeout: WorkNCCL(…) ran for … milliseconds before timing out", pytorch/pytorch#118369): the
// ranks abort and the launcher reports them failed, a consequence of the hang, not a rank's
// death. Its GPUs spin in the collective at little power meanwhile (NVIDIA/nccl#968).
TEST(TaskLivenessRuleTest, TheWatchdogsTeardownOfAHungJobIsTheHangNotARankExit) {
  std::string t = FourRankJob(200.5, 900, 200);
  for (double s = 201; s <= 820; s += 1) {
    for (int g = 0; g < 4; ++g) t += Gpu(s, g, "\"util_pct\":100,\"power_w\":180");
  }
  t += JobLog(801,
              "[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation "
              "timeout: WorkNCCL(SeqNum=96120, OpType=ALLREDUCE, Timeout(ms)=600000) ran for "
              "600231 milliseconds before timing out.",
              0);
  t += JobLog(806,
              "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) "
              "local_rank: 0 (pid: 812914) of binary: /usr/bin/python");
  t += JobEnd(810, 1);
  const auto f = Diagnose(t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kJobHang);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 200.5);  // the end of the last step
}

// A scheduler that stops the job signals the launcher, which shuts its workers down ("Received 15
// death signal, shutting down workers": determined-ai/determined#8915): no rank died of itself.
TEST(TaskLivenessRuleTest, AJobItsSchedulerStoppedHasNoRankExit) {
  std::string t = FourRankJob(249.5, 250, 256);
  t += JobLog(250,
              "[2024-02-27T21:35:32.106313Z] fa88a9df || WARNING: torch.distributed.elastic.agent."
              "server.api:Received 15 death signal, shutting down workers");
  for (int pid : {812914, 812915, 812916, 812917}) {
    t += JobLog(250,
                "[2024-02-27T21:35:32.106517Z] fa88a9df || WARNING: torch.distributed."
                "elastic.multiprocessing.api:Sending process " +
                    std::to_string(pid) + " closing signal SIGTERM");
  }
  t += JobEnd(254, 1);
  EXPECT_TRUE(Diagnose(t).empty());
}

// No step for a while, with the job's GPUs drawing their stepping power: a phase at work (an
// evaluation), judged by the in-phase limit, not a hang; ranks waiting in a collective spin at
// little power instead (docs/research/failure-shapes.md §5).
TEST(TaskLivenessRuleTest, AnEvaluationBetweenStepsIsNotAHang) {
  std::string t = FourRankJob(200.5, 600, 200);
  for (double s = 201; s <= 500; s += 1) {
    for (int g = 0; g < 4; ++g) t += Gpu(s, g, "\"util_pct\":95,\"power_w\":560");
  }
  EXPECT_TRUE(Diagnose(t).empty());
}

// A GPU a job's process holds though its start record named none (a scheduler that gives no GPU
// list), at 0 % for ten minutes; and nothing once the job's processes are gone without an end.
TEST(TaskLivenessRuleTest, AGpuHeldByAJobsProcessAndIdleForTenMinutes) {
  std::string t = R"({"t":100,"type":"node","node":"n1","gpus":[{"index":0},{"index":1}]})"
                  "\n"
                  R"({"t":100,"type":"job","node":"n1","job":"j9","state":"start"})"
                  "\n";
  for (double s = 101; s <= 900; s += 1) {
    t += Gpu(s, 0, "\"util_pct\":96");
    t += Gpu(s, 1, "\"util_pct\":0,\"mem_used_mib\":1200");
    if (static_cast<int>(s) % 10 == 0) {
      for (int g = 0; g < 2; ++g) {
        t += nlohmann::json{{"t", s},         {"type", "proc"}, {"node", "n1"},
                            {"pid", 500 + g}, {"gpu", g},       {"job", "j9"}}
                 .dump() +
             "\n";
      }
    }
  }
  auto f = Diagnose(t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kGpuIdleAllocated);
  EXPECT_EQ(f[0].job, "j9");
  EXPECT_DOUBLE_EQ(f[0].first_seen, 701);
  // The same, but the job's processes leave at 200 and it never says it ended.
  std::string gone = R"({"t":100,"type":"node","node":"n1","gpus":[{"index":0},{"index":1}]})"
                     "\n"
                     R"({"t":100,"type":"job","node":"n1","job":"j9","state":"start","gpus":[0,1]})"
                     "\n";
  for (double s = 101; s <= 900; s += 1) {
    gone += Gpu(s, 1, "\"util_pct\":0");
    if (s < 200 && static_cast<int>(s) % 10 == 0) {
      gone += nlohmann::json{{"t", s},     {"type", "proc"}, {"node", "n1"},
                             {"pid", 501}, {"gpu", 1},       {"job", "j9"}}
                  .dump() +
              "\n";
    }
  }
  EXPECT_TRUE(Diagnose(gone).empty());
}

// A job that reports no steps hangs too: the NCCL watchdog's line says how long the collective
// ran before it timed out (pytorch/pytorch#118369's line), which dates the hang.
TEST(TaskLivenessRuleTest, TheWatchdogsTimeoutDatesAHangOfAJobWithoutSteps) {
  const std::string line =
      "[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=96120, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800123 "
      "milliseconds before timing out.";
  const auto f = Diagnose(Node("n1", 100) + JobLog(2100, line, 0));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kJobHang);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_NEAR(f[0].first_seen, 2100 - 1800.123, 1e-6);
}

// One rank a node (1-GPU nodes): job j1 on n0, n1, n2, rank k on nk's GPU 0. Steps end every
// second from 101 to `steps_until`; proc rounds every 5 s, n1's until `n1_procs_until`
// (exclusive), the others' until `procs_until`; GPU samples every second to `until`, at
// `util_after(node)` once the steps stopped (busy ones at `busy_power_after` W, against 300 W
// while stepping); the job's end records at `end_t` (none at 0).
std::string OneRankANode(double steps_until, double n1_procs_until, double procs_until,
                         double until, const std::function<int(int)>& util_after, double end_t,
                         int exit_code, int busy_power_after = 110) {
  std::string t;
  for (int k = 0; k < 3; ++k) {
    const std::string node = "n" + std::to_string(k);
    t += nlohmann::json{{"t", 100}, {"type", "node"}, {"node", node}, {"gpus", {{{"index", 0}}}}}
             .dump() +
         "\n";
    t += nlohmann::json{{"t", 100},         {"type", "job"}, {"node", node}, {"job", "j1"},
                        {"state", "start"}, {"ranks", 3},    {"gpus", {0}}}
             .dump() +
         "\n";
  }
  for (double s = 101; s <= until; s += 1) {
    for (int k = 0; k < 3; ++k) {
      const std::string node = "n" + std::to_string(k);
      const int util = s <= steps_until ? 97 : util_after(k);
      // Spinning in a collective keeps the GPU busy on little power (NVIDIA/nccl#968).
      const int power = s <= steps_until ? 300 : util > 50 ? busy_power_after : 80;
      t += nlohmann::json{{"t", s},   {"type", "gpu"},    {"node", node},
                          {"gpu", 0}, {"util_pct", util}, {"power_w", power}}
               .dump() +
           "\n";
      if (static_cast<int>(s) % 5 == 0 && s < (k == 1 ? n1_procs_until : procs_until)) {
        t += nlohmann::json{{"t", s},          {"type", "proc"}, {"node", node},
                            {"pid", 7000 + k}, {"gpu", 0},       {"job", "j1"}}
                 .dump() +
             "\n";
      }
      if (s <= steps_until) {
        t += nlohmann::json{{"t", s + 0.5}, {"type", "step"}, {"node", node},     {"job", "j1"},
                            {"rank", k},    {"gpu", 0},       {"duration_s", 1.0}}
                 .dump() +
             "\n";
      }
    }
    if (end_t > 0 && s == end_t) {
      for (int k = 0; k < 3; ++k)
        t += nlohmann::json{{"t", s},      {"type", "job"},  {"node", "n" + std::to_string(k)},
                            {"job", "j1"}, {"state", "end"}, {"exit_code", exit_code}}
                 .dump() +
             "\n";
    }
  }
  return t;
}

// A rank stuck outside its collective with one rank a node: its GPU idles, the others' spin on
// other nodes (NVIDIA/nccl#968). The hang is listed where the stuck rank is, once.
TEST(TaskLivenessRuleTest, AHangWithOneRankANodeIsListedOnTheStuckRanksNode) {
  const std::string trace = OneRankANode(
      150, 400, 400, 260, [](int k) { return k == 1 ? 0 : 100; }, 0, 0);
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kJobHang);
  EXPECT_EQ(f[0].node, "n1");
  EXPECT_EQ(f[0].job, "j1");
}

// The only process of the job on n1 dies: n1 keeps sampling with no process of the job, while
// n0's and n2's ranks wait for it in their collective (GPUs spinning, no step) until torn down.
TEST(TaskLivenessRuleTest, ALoneRankThatLeftItsNodeWhileTheOthersWaitIsARankExit) {
  const std::string trace = OneRankANode(
      153, 155, 185, 190, [](int k) { return k == 1 ? 0 : 100; }, 190, 1);
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u) << (f.empty() ? "" : f[0].summary);
  EXPECT_EQ(f[0].cause, Cause::kRankExit);
  EXPECT_EQ(f[0].node, "n1");
  EXPECT_EQ(f[0].rank, 1);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 155);
}

// A job finishing node by node (rank 0 writes the final checkpoint after the others left): the
// others' GPUs do not spin, so n1's and n2's processes leaving first is no exit.
TEST(TaskLivenessRuleTest, AJobFinishingNodeByNodeHasNoRankExit) {
  // n1 leaves at 155; n0 and n2 run on at 5 % until 200, then the job ends with exit code 0.
  const std::string trace = OneRankANode(
      153, 155, 200, 205, [](int k) { return k == 1 ? 0 : 5; }, 205, 0);
  const std::vector<Finding> f = Diagnose(trace);
  for (const Finding& x : f) ADD_FAILURE() << x.cause << " on " << x.node << ": " << x.summary;
}

// A loaded node's process round that comes late, or not at all once, while every rank steps on:
// no exit (the round after holds the process again, and the others never stopped stepping).
TEST(TaskLivenessRuleTest, AMissedProcessRoundOfALoneRankIsNoExit) {
  const std::string full = OneRankANode(
      300, 400, 400, 300, [](int) { return 97; }, 300, 0);
  std::string trace;
  size_t dropped = 0;
  for (size_t pos = 0; pos < full.size();) {
    const size_t end = full.find('\n', pos);
    const std::string line = full.substr(pos, end - pos + 1);
    pos = end + 1;
    const auto r = nlohmann::json::parse(line);
    // n1's rounds at 160, 165 and 170 never come.
    if (r["type"] == "proc" && r["node"] == "n1" && r["t"] >= 160 && r["t"] <= 170) {
      ++dropped;
      continue;
    }
    trace += line;
  }
  ASSERT_EQ(dropped, 3u);
  const std::vector<Finding> f = Diagnose(trace);
  for (const Finding& x : f) ADD_FAILURE() << x.cause << " on " << x.node << ": " << x.summary;
}

// The same missed rounds, then n1's rank really dies at 255 while the others wait: that exit is
// judged afresh, dated by its own missing round.
TEST(TaskLivenessRuleTest, AnExitAfterMissedRoundsIsStillFound) {
  const std::string full = OneRankANode(
      253, 255, 300, 300, [](int k) { return k == 1 ? 0 : 100; }, 300, 1);
  std::string trace;
  for (size_t pos = 0; pos < full.size();) {
    const size_t end = full.find('\n', pos);
    const std::string line = full.substr(pos, end - pos + 1);
    pos = end + 1;
    const auto r = nlohmann::json::parse(line);
    if (r["type"] == "proc" && r["node"] == "n1" && r["t"] >= 160 && r["t"] <= 170) continue;
    trace += line;
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kRankExit);
  EXPECT_EQ(f[0].node, "n1");
  EXPECT_DOUBLE_EQ(f[0].first_seen, 255);
}

// n1 leaves while n0 and n2 stay busy with no step: at their stepping power they work (a final
// evaluation), not wait; spinning on little power but then ending with exit code 0, they were
// finishing one by one, and the exit judged meanwhile is taken back.
TEST(TaskLivenessRuleTest, AJobStillWorkingOrEndingWellOnItsOtherNodesHasNoRankExit) {
  auto busy = [](int k) { return k == 1 ? 0 : 97; };
  std::vector<Finding> f = Diagnose(OneRankANode(153, 155, 200, 205, busy, 205, 0, 300));
  for (const Finding& x : f) ADD_FAILURE() << x.cause << " on " << x.node << ": " << x.summary;
  f = Diagnose(OneRankANode(153, 155, 200, 205, busy, 205, 0, 110));
  for (const Finding& x : f) ADD_FAILURE() << x.cause << " on " << x.node << ": " << x.summary;
  // The same spinning, ended with exit code 1: the exit stands.
  f = Diagnose(OneRankANode(153, 155, 200, 205, busy, 205, 1, 110));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kRankExit);
}

}  // namespace
}  // namespace gpuwatch::analyze
