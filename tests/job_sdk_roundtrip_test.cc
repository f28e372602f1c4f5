// The C++ SDK (sdk/cpp/gpuwatch.hpp) against the agent's own end of the job protocol: a real
// JobListener on a Unix socket feeding a JobRegistry, so every message the SDK writes must
// pass the agent's parser and land where the docs say.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "../sdk/cpp/gpuwatch.hpp"
#include "common/time_base.h"
#include "jobs/job_listener.h"
#include "jobs/job_registry.h"
#include "jobs/testing/eventually.h"

namespace gpuwatch::jobs {
namespace {

using ::gpuwatch::jobs::testing::Eventually;

TEST(JobSdkRoundTripTest, CppSdkMessagesAreAllAccepted) {
  char tmpl[] = "/tmp/gw-sdk-rt-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  JobRegistry registry(JobRegistryOptions{}, ProcfsProbe("/"));
  JobListenerOptions lo;
  lo.socket_path = dir + "/job.sock";
  JobListener listener(lo, &registry, WallClockMs);
  ASSERT_TRUE(listener.Start().ok());
  {
    ::gpuwatch::Options o;
    o.job = "rt-job";
    o.template_name = "roundtrip";
    o.user = "tester";
    o.project = "gpuwatch";
    o.rank = 1;
    o.world_size = 2;
    o.local_rank = 1;
    o.address = lo.socket_path;
    o.log_files = {dir + "/train.log"};
    ::gpuwatch::Client c(o);
    for (int i = 0; i < 20; ++i) {
      { auto d = c.phase("data"); }
      auto s = c.step(64);
      { auto cm = c.phase("comm"); }
      c.log(2.5 - i * 0.1, 1.0);
      c.scalar("lr", 0.001);
    }
    { auto e = c.phase("eval"); }
    { auto ck = c.phase("checkpoint"); }
    c.annotate("switched to TP=4");
    c.log_line("host:1:1 [0] NCCL INFO Channel 00/02 : 0[0] -> 1[1] via P2P/IPC",
               ::gpuwatch::Stream::kStderr);
    c.end(3);
    EXPECT_EQ(c.dropped(), 0u);
  }
  ASSERT_TRUE(Eventually([&] {
    auto j = registry.Job("rt-job");
    return j && j->state == "failed";
  }));
  auto j = *registry.Job("rt-job");
  EXPECT_EQ(j.template_name, "roundtrip");
  EXPECT_EQ(j.user, "tester");
  EXPECT_EQ(j.project, "gpuwatch");
  EXPECT_EQ(j.world_size, 2u);
  ASSERT_EQ(j.ranks.size(), 1u);
  EXPECT_EQ(j.ranks[0].rank, 1u);
  EXPECT_EQ(j.ranks[0].pid, static_cast<uint32_t>(getpid()));
  EXPECT_TRUE(j.ranks[0].pid_verified);
  EXPECT_EQ(j.ranks[0].steps_total, 20u);
  EXPECT_EQ(j.ranks[0].last_step, 19u);
  EXPECT_EQ(j.ranks[0].exit_code, 3);
  EXPECT_EQ(j.ranks[0].scalars.at("lr"), 0.001);
  const RegistryCounters c = registry.counters();
  for (size_t i = 0; i < kRejectReasons; ++i)
    EXPECT_EQ(c.rejected[i], 0u) << RejectReasonName(static_cast<RejectReason>(i));
  JobOutputs out = registry.TakeOutputs();
  std::vector<std::string> kinds;
  for (const auto& e : out.events) kinds.push_back(e.kind);
  for (const char* want : {"job_start", "phase", "checkpoint_start", "checkpoint_end", "annotation",
                           "rank_exit", "job_end"})
    EXPECT_NE(std::find(kinds.begin(), kinds.end(), want), kinds.end()) << want;
  ASSERT_EQ(out.logs.size(), 1u);
  EXPECT_EQ(out.logs[0].stream, "stderr");
  ASSERT_EQ(out.log_files.size(), 1u);
  EXPECT_EQ(out.log_files[0].path, dir + "/train.log");
  ASSERT_FALSE(out.steps.empty());
  EXPECT_EQ(out.steps[0].step.samples, 64);
  EXPECT_TRUE(out.steps[0].step.data_wait_s.has_value());
  EXPECT_TRUE(out.steps[0].step.comm_s.has_value());
  listener.Stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpuwatch::jobs
