#include "cli/job_view.h"

#include <gtest/gtest.h>

namespace gpuwatch::cli {
namespace {

const char* kJob = R"({
  "id": "12345", "source": "sdk", "template": "llama", "user": "alice", "project": "nlp",
  "state": "running", "world_size": 2, "ranks_reporting": 2, "gpus": [0, 1], "pids": [10, 11],
  "gpu_seconds": 7200,
  "window": {"iterations_per_s": 1.25, "samples_per_s": 640, "step_p50_s": 0.8,
             "step_p95_s": 0.95, "step_p99_s": 1.2, "data_wait_ratio": 0.05, "comm_ratio": 0.2,
             "checkpoint_ratio": null, "loss": 2.5},
  "ranks": [
    {"rank": 0, "pid": 10, "state": "running", "hung": false, "gpus": [0], "steps_total": 100,
     "last_step": 99, "phase": "", "exit_code": null,
     "window": {"iterations_per_s": 1.25, "step_p50_s": 0.8, "step_p95_s": 0.9,
                "step_p99_s": 1.0, "data_wait_ratio": 0.05, "comm_ratio": 0.2, "loss": 2.5}},
    {"rank": 1, "pid": 11, "state": "died", "hung": false, "gpus": [1], "steps_total": 50,
     "last_step": 49, "phase": "eval", "exit_code": 137, "window": {}}
  ]})";

TEST(JobViewTest, JobsTable) {
  nlohmann::json reply = {{"socket", "/run/gpuwatch/job.sock"},
                          {"jobs", nlohmann::json::array({nlohmann::json::parse(kJob)})}};
  std::string out = RenderJobsTable(reply);
  EXPECT_NE(out.find("JOB"), std::string::npos);
  EXPECT_NE(out.find("12345"), std::string::npos);
  EXPECT_NE(out.find("0,1"), std::string::npos);
  EXPECT_NE(out.find("1.25"), std::string::npos);
  EXPECT_NE(out.find("800.0"), std::string::npos);  // p50 in ms
  EXPECT_NE(out.find("950.0"), std::string::npos);
  EXPECT_NE(out.find("5.0"), std::string::npos);   // data %
  EXPECT_NE(out.find("20.0"), std::string::npos);  // comm %
  EXPECT_NE(out.find("2.00"), std::string::npos);  // GPU hours
  EXPECT_EQ(RenderJobsTable({{"socket", "/s"}, {"jobs", nlohmann::json::array()}}),
            "no jobs (jobs report to /s)\n");
}

TEST(JobViewTest, JobTableHasOneRowPerRank) {
  std::string out = RenderJobTable(nlohmann::json::parse(kJob));
  EXPECT_NE(out.find("job 12345"), std::string::npos);
  EXPECT_NE(out.find("died(137)"), std::string::npos);
  EXPECT_NE(out.find("eval"), std::string::npos);
  EXPECT_NE(out.find("1000.0"), std::string::npos);  // rank 0 p99
  size_t lines = std::count(out.begin(), out.end(), '\n');
  EXPECT_EQ(lines, 2u + 1 + 2);  // header, summary, table head, two ranks
}

TEST(JobViewTest, HostileStringsAreNotPrintedRaw) {
  auto j = nlohmann::json::parse(kJob);
  j["id"] = "evil\x1b[2Jjob";
  std::string out = RenderJobTable(j);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_EQ(EncodePathSegment("a/b c"), "a%2Fb%20c");
}

}  // namespace
}  // namespace gpuwatch::cli
