// Queue waits from sacct (accounting/sacct.h): the parser on sacct's parsable forms, and the
// backfill against a stand-in sacct that checks how it is asked.
#include "accounting/sacct.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/testing/test_files.h"
#include "store/testing/scratch_dir.h"

namespace gpuwatch::accounting {
namespace {

constexpr int64_t kNov30Ms = 1764460800000;  // 2025-11-30T00:00:00Z

TEST(ParseSacct, TheBackfillsOwnFormUnixSecondsNoHeader) {
  // SLURM_TIME_FORMAT=%s sacct -X -n -P -j ... --format=JobIDRaw,Submit,Start
  auto jobs =
      ParseSacct("4242|1764460500|1764460800\n4243|1764460700|Unknown\n4244|1764460701|0\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].id, "4242");
  EXPECT_EQ((*jobs)[0].submit_ms, kNov30Ms - 300000);
  EXPECT_EQ((*jobs)[0].start_ms, kNov30Ms);
  EXPECT_FALSE((*jobs)[1].start_ms);  // pending
  EXPECT_FALSE((*jobs)[2].start_ms);
}

TEST(ParseSacct, HeaderStepsTrailingBarsAndErrors) {
  // -p (a '|' after every field) with a header in another column order; steps are skipped.
  auto jobs = ParseSacct(
      "JobID|State|Start|Submit|\n"
      "77_3|COMPLETED|1764460800|1764460200|\n"
      "77_3.batch|COMPLETED|1764460800|1764460800|\n"
      "77_3.0|COMPLETED|1764460801|1764460801|\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].id, "77_3");
  EXPECT_EQ((*jobs)[0].submit_ms, kNov30Ms - 600000);
  EXPECT_EQ((*jobs)[0].start_ms, kNov30Ms);
  EXPECT_TRUE(ParseSacct("").ok());
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"4242|1764460500\n", "line 1: 2 fields, 3 expected"},
      {"4242|1764460500|1764460800\n4243|yesterday|1764460800\n", "line 2: Submit"},
      {"JobID|Submit\n1|2\n", "lacks JobIDRaw (or JobID), Submit or Start"},
  };
  for (const auto& [text, why] : bad) {
    auto r = ParseSacct(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  }
}

TEST(ParseSacct, SlurmsStandardTimeIsLocal) {
  const char* tz = std::getenv("TZ");
  const std::string old_tz = tz ? tz : "";
  ::setenv("TZ", "UTC", 1);
  ::tzset();
  EXPECT_EQ(ParseSlurmLocalTime("2025-11-30T00:00:00"), 1764460800.0);
  EXPECT_FALSE(ParseSlurmLocalTime("2025-11-30 00:00:00"));
  EXPECT_FALSE(ParseSlurmLocalTime("Unknown"));
  auto jobs = ParseSacct("9|2025-11-29T23:55:00|2025-11-30T00:00:00\n");
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ((*jobs)[0].submit_ms, kNov30Ms - 300000);
  if (tz)
    ::setenv("TZ", old_tz.c_str(), 1);
  else
    ::unsetenv("TZ");
  ::tzset();
}

// Real sacct output from public sources (tests/fixtures/slurm/sacct/SOURCES.md names each, with
// the --format it was made with), in Slurm's standard local time; read in UTC, so the expected
// times are those wall-clock readings as UTC.
class RealSacct : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tz = std::getenv("TZ");
    had_tz_ = tz != nullptr;
    old_tz_ = tz ? tz : "";
    ::setenv("TZ", "UTC", 1);
    ::tzset();
  }
  void TearDown() override {
    if (had_tz_)
      ::setenv("TZ", old_tz_.c_str(), 1);
    else
      ::unsetenv("TZ");
    ::tzset();
  }
  static std::vector<SacctJob> Parse(const char* file, std::string_view format) {
    const std::string text = gpuwatch::testing::ReadFileOrEmpty(
        gpuwatch::testing::FixtureDir(std::string("slurm/sacct/") + file));
    EXPECT_FALSE(text.empty()) << file;
    auto jobs = ParseSacct(text, format);
    EXPECT_TRUE(jobs.ok()) << file << ": " << jobs.status().ToString();
    return jobs.ok() ? *jobs : std::vector<SacctJob>{};
  }
  bool had_tz_ = false;
  std::string old_tz_;
};

constexpr char kCostSimFormat[] =
    "State,JobID,ReqCPUS,ReqMem,ReqNodes,Constraints,Submit,Eligible,Start,Elapsed,Suspended,End,"
    "ExitCode,DerivedExitCode,AllocNodes,NCPUS,MaxDiskRead,MaxDiskWrite,MaxPages,MaxRSS,"
    "MaxVMSize,CPUTime,UserCPU,SystemCPU,TotalCPU";

TEST_F(RealSacct, AnArrayJobsTasksWithoutTheirBatchSteps) {
  // aws-samples/hpc-cost-simulator: sacct -P -n, JobID the second column; 846_0..7 and a .batch
  // step each (whose Submit is the step's start, not the task's).
  const auto jobs = Parse("hpc_cost_simulator_array.txt", kCostSimFormat);
  ASSERT_EQ(jobs.size(), 8u);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(jobs[i].id, "846_" + std::to_string(i));
    EXPECT_EQ(jobs[i].submit_ms, int64_t{1657037999000});  // 2022-07-05T16:19:59
    EXPECT_EQ(jobs[i].start_ms, int64_t{1657038082000});   // 2022-07-05T16:21:22: 83 s queued
  }
}

TEST_F(RealSacct, PendingCancelledAndStepOnlyOutput) {
  auto pending = Parse("hpc_cost_simulator_issue5_pending.txt", kCostSimFormat);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].id, "31259618");
  EXPECT_EQ(pending[0].submit_ms, int64_t{1650540268000});  // 2022-04-21T11:24:28
  EXPECT_FALSE(pending[0].start_ms);                        // Start=Unknown
  auto cancelled = Parse("hpc_cost_simulator_issue61_cancelled_before_start.txt",
                         std::string(kCostSimFormat) + ",Partition");
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0].id, "141");
  EXPECT_EQ(cancelled[0].submit_ms, int64_t{1662745154000});  // 2022-09-09T17:39:14
  EXPECT_FALSE(cancelled[0].start_ms);                        // Start=None
  // salloc's step "2346371.interactive" alone: no job.
  EXPECT_TRUE(Parse("hpc_cost_simulator_issue63_interactive_step.txt", kCostSimFormat).empty());
}

TEST_F(RealSacct, AJobWithItsStepsAndAHeaderedAllocationList) {
  // fractal-slurm-tools (University of Zurich): -P -n, 35 columns, JobName%30; the last row is
  // one field short upstream (an anonymising edit), which the columns read do not reach.
  const auto uzh = Parse("fractal_slurm_tools_test_fixture.txt",
                         "JobID,JobName%30,NodeList,NTasks,Submit,Start,End,State,Elapsed,CPUTime,"
                         "CPUTimeRaw,TotalCPU,NCPUS,MaxDiskRead,AveDiskRead,MaxDiskReadTask,"
                         "MaxDiskWrite,AveDiskWrite,MaxDiskWriteTask,MaxRSS,MaxRSSTask,AveRSS,"
                         "MaxVMSize,AveVMSize,MaxVMSizeTask,AveCPU,MinCPU,MinCPUTask,ReqTRES%40,"
                         "AllocTRES%40,Partition,QOS,SubmitLine,WorkDir,ElapsedRaw");
  ASSERT_EQ(uzh.size(), 3u);
  EXPECT_EQ(uzh[0].id, "22496092");
  EXPECT_EQ(uzh[0].submit_ms, int64_t{1753173849000});  // 2025-07-22T08:44:09
  EXPECT_EQ(uzh[0].start_ms, int64_t{1753173854000});   // 08:44:14
  EXPECT_EQ(uzh[1].id, "23314079");
  EXPECT_EQ(uzh[1].start_ms, int64_t{1758016868000});
  EXPECT_EQ(uzh[2].id, "22305195");
  EXPECT_FALSE(uzh[2].start_ms);  // cancelled before it started: Start=None
  // slurm_sim_tools: -P -X with a header (JobIDRaw read), every row ending in '|' (NTasks
  // empty); the --format given here is overridden by the header.
  const auto sim = Parse("slurm_sim_tools_micro_cluster_tutorial.txt", "Submit");
  ASSERT_EQ(sim.size(), 4u);
  EXPECT_EQ(sim[1].id, "1002");
  EXPECT_EQ(sim[1].submit_ms, int64_t{1641013275000});  // 2022-01-01T05:01:15
  EXPECT_EQ(sim[1].start_ms, int64_t{1641013276000});
  // gc3pie issue 656: -p -n (a '|' after each field), lowercase names.
  const auto gc3 = Parse("gc3pie_issue656_parsable_noheader.txt",
                         "jobid,exitcode,state,ncpus,elapsed,totalcpu,submit,start,end,maxrss,"
                         "maxvmsize");
  ASSERT_EQ(gc3.size(), 1u);
  EXPECT_EQ(gc3[0].id, "46601126");
  EXPECT_EQ(gc3[0].submit_ms, int64_t{1573641152000});  // 2019-11-13T10:32:32
  EXPECT_EQ(gc3[0].start_ms, int64_t{1573641155000});
}

std::string SlurmJobStart(const std::string& job, int64_t t_ms) {
  return R"({"t":)" + std::to_string(static_cast<double>(t_ms) / 1000) +
         R"(,"type":"job","node":"n1","job":")" + job +
         R"(","state":"start","user":"alice","project":"nlp","gpus":[0]})" + "\n";
}

class SacctBackfillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = store::testing::FreshScratchDir("sacct");
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A stand-in sacct: logs its arguments and SLURM_TIME_FORMAT, prints `reply`.
  std::string FakeSacct(const std::string& reply) {
    const std::string path = dir_ + "/sacct";
    std::ofstream(path) << "#!/bin/sh\necho \"$SLURM_TIME_FORMAT $*\" >>" << dir_
                        << "/calls\ncat <<'EOF'\n"
                        << reply << "EOF\n";
    ::chmod(path.c_str(), 0755);
    return path;
  }
  std::vector<std::string> Calls() {
    std::ifstream in(dir_ + "/calls");
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  std::string dir_;
};

// Two Slurm jobs without a queue wait and one SDK job: sacct is asked about the Slurm ones,
// the one it knows gets its wait (and keeps it across a reopen of the ledger), the one it does
// not is asked max_tries times and then left alone.
TEST_F(SacctBackfillTest, GivesSlurmJobsTheirQueueWaitAndStopsAskingAboutStrangers) {
  LedgerOptions lo;
  lo.dir = dir_ + "/ledger";
  auto ledger = Ledger::Open(lo);
  ASSERT_TRUE(ledger.ok()) << ledger.status().ToString();
  (*ledger)->AddLines(SlurmJobStart("4242", kNov30Ms + 2000) +
                      SlurmJobStart("4243", kNov30Ms + 5000) +
                      SlurmJobStart("llama-run", kNov30Ms + 6000));
  EXPECT_EQ((*ledger)->JobsWithoutQueueWait(10), (std::vector<std::string>{"4243", "4242"}));

  SacctOptions so;
  // The allocation started 2 s before the job's start record (the ranks came up after it).
  so.program = FakeSacct("4242|1764460500|1764460800\n");
  so.max_tries = 2;
  SacctBackfill backfill(ledger->get(), so);
  auto r = backfill.RunOnce();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 1u);
  auto calls = Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], "%s -X -n -P -j 4243,4242 --format=JobIDRaw,Submit,Start");
  auto job = (*ledger)->Job("4242");
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->attempts[0].queued_ms, kNov30Ms - 300000);
  EXPECT_EQ((*ledger)->JobsWithoutQueueWait(10), std::vector<std::string>{"4243"});

  EXPECT_EQ(*backfill.RunOnce(), 0u);  // 4243's second try
  EXPECT_EQ(*backfill.RunOnce(), 0u);  // left alone: sacct is not run
  EXPECT_EQ(Calls().size(), 2u);

  // Persisted: the ledger read back has the wait.
  ledger->reset();
  auto again = Ledger::Open(lo);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Job("4242")->attempts[0].queued_ms, kNov30Ms - 300000);
}

TEST_F(SacctBackfillTest, ASacctThatFailsOrHangsIsAnErrorNotAWait) {
  auto ledger = std::move(Ledger::Open({})).value();
  ledger->AddLines(SlurmJobStart("4242", kNov30Ms));
  SacctOptions so;
  so.program = dir_ + "/none";
  EXPECT_EQ(SacctBackfill(ledger.get(), so).RunOnce().status().code(), StatusCode::kNotFound);
  const std::string failing = dir_ + "/failing";
  std::ofstream(failing)
      << "#!/bin/sh\necho 'sacct: error: Problem talking to the database'\nexit 1\n";
  ::chmod(failing.c_str(), 0755);
  so.program = failing;
  auto r = SacctBackfill(ledger.get(), so).RunOnce();
  EXPECT_NE(r.status().message().find("exited with status 1"), std::string::npos)
      << r.status().ToString();
  const std::string hanging = dir_ + "/hanging";
  std::ofstream(hanging) << "#!/bin/sh\nexec sleep 30\n";
  ::chmod(hanging.c_str(), 0755);
  so.program = hanging;
  so.timeout = std::chrono::milliseconds(200);
  r = SacctBackfill(ledger.get(), so).RunOnce();
  EXPECT_NE(r.status().message().find("took over"), std::string::npos) << r.status().ToString();
  // A submit time after the start fits no attempt.
  EXPECT_FALSE(ledger->SetSubmitTime("4242", kNov30Ms + 1000, kNov30Ms));
  EXPECT_FALSE(ledger->SetSubmitTime("4242", kNov30Ms - 1000, kNov30Ms + 7200'000));  // another run
  EXPECT_TRUE(ledger->SetSubmitTime("4242", kNov30Ms - 1000, kNov30Ms));
  EXPECT_FALSE(ledger->SetSubmitTime("4242", kNov30Ms - 2000, kNov30Ms));  // it has one now
}

}  // namespace
}  // namespace gpuwatch::accounting
