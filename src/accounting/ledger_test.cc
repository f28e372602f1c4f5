#include "accounting/ledger.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/testing/test_files.h"
#include "store/testing/scratch_dir.h"

namespace gpuwatch::accounting {
namespace {

namespace fs = std::filesystem;

// tests/fixtures/accounting/scripted.jsonl, written by make_scripted.py beside it, whose header
// works out every number these tests expect.
constexpr int64_t kT0Ms = 1764460800000;
constexpr double kHour = 3600;

std::string Scripted() {
  return gpuwatch::testing::ReadFileOrEmpty(
      gpuwatch::testing::FixtureDir("accounting/scripted.jsonl"));
}

LedgerOptions Priced() {
  LedgerOptions o;
  o.prices = {{"H100", 2.0}, {"A100", 1.0}};
  return o;
}

std::map<std::string, ReportRow> ByKey(const std::vector<ReportRow>& rows) {
  std::map<std::string, ReportRow> m;
  for (const auto& r : rows) m[r.key] = r;
  return m;
}

ReportQuery Whole(GroupBy by) {
  ReportQuery q;
  q.by = by;
  q.since_ms = kT0Ms;
  q.until_ms = kT0Ms + 9000 * 1000;
  return q;
}

TEST(LedgerTest, HandComputedReportByUser) {
  const std::string trace = Scripted();
  ASSERT_FALSE(trace.empty());
  auto l = Ledger::Open(Priced());
  ASSERT_TRUE(l.ok());
  (*l)->AddLines(trace);
  EXPECT_EQ((*l)->newest_ms(), kT0Ms + 8800 * 1000);
  auto rows = ByKey((*l)->Report(Whole(GroupBy::kUser)));
  ASSERT_EQ(rows.size(), 2u);

  const ReportRow& alice = rows["alice"];  // j1 and the running j3
  EXPECT_EQ(alice.jobs, 2u);
  EXPECT_EQ(alice.attempts, 2u);
  EXPECT_EQ(alice.reruns, 0u);
  EXPECT_EQ(alice.succeeded, 1u);
  EXPECT_EQ(alice.failed, 0u);
  EXPECT_EQ(alice.running, 1u);
  EXPECT_DOUBLE_EQ(alice.gpu_hours, 4.5);
  EXPECT_DOUBLE_EQ(alice.cost_usd, 9.0);
  EXPECT_EQ(alice.queue_waits, 1u);
  EXPECT_DOUBLE_EQ(alice.queue_wait_s_sum, 600);
  EXPECT_DOUBLE_EQ(alice.measured_gpu_hours, 7200 / kHour);
  EXPECT_DOUBLE_EQ(alice.idle_gpu_hours, 1200 / kHour);
  EXPECT_DOUBLE_EQ(alice.busywait_gpu_hours, 3000 / kHour);

  const ReportRow& bob = rows["bob"];  // j2: failed on node b, then rerun and succeeded
  EXPECT_EQ(bob.jobs, 1u);
  EXPECT_EQ(bob.attempts, 2u);
  EXPECT_EQ(bob.reruns, 1u);
  EXPECT_EQ(bob.failed, 1u);
  EXPECT_EQ(bob.succeeded, 1u);
  EXPECT_EQ(bob.running, 0u);
  EXPECT_DOUBLE_EQ(bob.gpu_hours, 8.0);
  EXPECT_DOUBLE_EQ(bob.cost_usd, 12.0);
  EXPECT_EQ(bob.queue_waits, 1u);  // the Slurm submit time; the rerun's wait is unknown
  EXPECT_DOUBLE_EQ(bob.queue_wait_s_max, 900);
  EXPECT_DOUBLE_EQ(bob.measured_gpu_hours, 0);
}

TEST(LedgerTest, ReportByJobAndTemplate) {
  auto l = Ledger::Open(Priced());
  ASSERT_TRUE(l.ok());
  (*l)->AddLines(Scripted());
  auto jobs = ByKey((*l)->Report(Whole(GroupBy::kJob)));
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs["j1"].state, "succeeded");
  EXPECT_EQ(jobs["j1"].start_ms, kT0Ms + 600 * 1000);
  EXPECT_EQ(jobs["j1"].end_ms, kT0Ms + 7800 * 1000);
  EXPECT_EQ(jobs["j2"].state, "succeeded");  // its last attempt
  EXPECT_EQ(jobs["j2"].user, "bob");
  EXPECT_EQ(jobs["j3"].state, "running");
  EXPECT_EQ(jobs["j3"].end_ms, -1);
  EXPECT_DOUBLE_EQ(jobs["j3"].gpu_hours, 0.5);
  auto templates = ByKey((*l)->Report(Whole(GroupBy::kTemplate)));
  EXPECT_DOUBLE_EQ(templates["llama-8b"].gpu_hours, 4.5);
  EXPECT_DOUBLE_EQ(templates["resnet50"].gpu_hours, 8.0);
  // What a token confined to projects is granted (server/scope.h).
  auto nlp = (*l)->JobsOfProjects({"nlp"});
  std::sort(nlp.begin(), nlp.end());
  EXPECT_EQ(nlp, (std::vector<std::string>{"j1", "j3"}));
  EXPECT_EQ((*l)->JobsOfProjects({"vision", "none"}), std::vector<std::string>{"j2"});
  EXPECT_TRUE((*l)->JobsOfProjects({}).empty());
  // Their segments: who held which GPUs when, as the job entries say.
  size_t want = 0;
  for (const char* id : {"j1", "j3"}) {
    const auto entry = (*l)->Job(id);
    ASSERT_TRUE(entry);
    for (const Attempt& a : entry->attempts) want += a.segments.size();
  }
  const auto segs = (*l)->SegmentsOf({"j1", "j3", "unknown"});
  EXPECT_EQ(segs.size(), want);
  ASSERT_GT(want, 0u);
  const Segment first = (*l)->Job("j1")->attempts[0].segments[0];
  EXPECT_EQ(segs[0].node, first.node);
  EXPECT_EQ(segs[0].gpus, first.gpus);
  EXPECT_EQ(segs[0].start_ms, first.start_ms);
  EXPECT_TRUE((*l)->SegmentsOf({}).empty());
}

TEST(LedgerTest, WindowClipsAllocationsAndTallies) {
  auto l = Ledger::Open(Priced());
  ASSERT_TRUE(l.ok());
  (*l)->AddLines(Scripted());
  ReportQuery q = Whole(GroupBy::kProject);
  q.since_ms = kT0Ms + 7200 * 1000;  // an hour boundary: tallies are kept by UTC hour
  auto rows = ByKey((*l)->Report(q));
  // nlp: j1's last 600 s on 2 GPUs, j3's 1600 s (7200..8800) on 1.
  EXPECT_NEAR(rows["nlp"].gpu_hours, 2800 / kHour, 1e-12);
  EXPECT_NEAR(rows["nlp"].cost_usd, 2 * 2800 / kHour, 1e-12);
  EXPECT_EQ(rows["nlp"].succeeded, 1u);    // j1 ended inside
  EXPECT_EQ(rows["nlp"].queue_waits, 0u);  // started before the window
  // The 61 samples at 7200..7800 s: busy-waiting.
  EXPECT_NEAR(rows["nlp"].busywait_gpu_hours, 610 / kHour, 1e-12);
  EXPECT_NEAR(rows["nlp"].idle_gpu_hours, 0, 1e-12);
  // vision: only the rerun, 1400 s on 4 GPUs, two of them priced at $2 and two at $1.
  EXPECT_EQ(rows["vision"].attempts, 1u);
  EXPECT_EQ(rows["vision"].failed, 0u);
  EXPECT_NEAR(rows["vision"].gpu_hours, 5600 / kHour, 1e-12);
  EXPECT_NEAR(rows["vision"].cost_usd, 2800 / kHour * 2 + 2800 / kHour * 1, 1e-12);
}

TEST(LedgerTest, UnpricedModelsAreCountedApart) {
  LedgerOptions o;
  o.prices = {{"H100", 2.0}};
  auto l = Ledger::Open(o);
  ASSERT_TRUE(l.ok());
  (*l)->AddLines(Scripted());
  auto rows = ByKey((*l)->Report(Whole(GroupBy::kProject)));
  EXPECT_DOUBLE_EQ(rows["vision"].unpriced_gpu_hours, 4.0);  // node b's A100s
  EXPECT_DOUBLE_EQ(rows["vision"].cost_usd, 8.0);
  o.prices = {{"*", 1.5}, {"H100", 2.0}};  // a default for the rest
  auto l2 = Ledger::Open(o);
  ASSERT_TRUE(l2.ok());
  (*l2)->AddLines(Scripted());
  rows = ByKey((*l2)->Report(Whole(GroupBy::kProject)));
  EXPECT_DOUBLE_EQ(rows["vision"].unpriced_gpu_hours, 0);
  EXPECT_DOUBLE_EQ(rows["vision"].cost_usd, 8.0 + 4 * 1.5);
}

TEST(LedgerTest, SoftQuotasWarnThenSayExceeded) {
  LedgerOptions o = Priced();
  o.quotas = {{"nlp", 5.0, 86400 * 1000LL},
              {"vision", 7.0, 86400 * 1000LL},
              {"speech", 10.0, 86400 * 1000LL}};
  auto l = Ledger::Open(o);
  ASSERT_TRUE(l.ok());
  (*l)->AddLines(Scripted());
  auto q = (*l)->Quotas(kT0Ms + 9000 * 1000);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_DOUBLE_EQ(q[0].used_gpu_hours, 4.5);  // 90 % of 5
  EXPECT_EQ(q[0].state, "warning");
  EXPECT_EQ(q[1].state, "exceeded");  // 8 of 7
  EXPECT_EQ(q[2].state, "ok");
  EXPECT_DOUBLE_EQ(q[2].used_gpu_hours, 0);
}

TEST(LedgerTest, BusyWaitNeedsQuietPowerOrSmsMeasured) {
  // util 100 % with neither power limit nor sm_active known: not judged busy-waiting.
  auto l = Ledger::Open({});
  ASSERT_TRUE(l.ok());
  std::string lines = R"({"t":100,"type":"job","node":"n","job":"x","state":"start","gpus":[0]})"
                      "\n";
  for (int t = 110; t <= 200; t += 10)
    lines += R"({"t":)" + std::to_string(t) +
             R"(,"type":"gpu","node":"n","gpu":0,"util_pct":100,"power_w":100})" + "\n";
  // With DCGM's sm_active: 0.02 of the SMs busy is a spin, whatever the power.
  for (int t = 210; t <= 300; t += 10)
    lines += R"({"t":)" + std::to_string(t) +
             R"(,"type":"gpu","node":"n","gpu":0,"util_pct":100,"sm_active":0.02,)"
             R"("dram_active":0.0})" +
             "\n";
  // Real work: the SMs busy and memory moving.
  for (int t = 310; t <= 400; t += 10)
    lines += R"({"t":)" + std::to_string(t) +
             R"(,"type":"gpu","node":"n","gpu":0,"util_pct":100,"sm_active":0.9,)"
             R"("dram_active":0.5})" +
             "\n";
  (*l)->AddLines(lines);
  ReportQuery q;
  q.by = GroupBy::kJob;
  q.since_ms = 0;
  q.until_ms = 1000 * 1000;
  auto rows = (*l)->Report(q);
  ASSERT_EQ(rows.size(), 1u);
  // A GPU's first sample measures nothing (there is no interval before it): 29 x 10 s.
  EXPECT_DOUBLE_EQ(rows[0].measured_gpu_hours, 290 / kHour);
  EXPECT_DOUBLE_EQ(rows[0].busywait_gpu_hours, 100 / kHour);
  EXPECT_DOUBLE_EQ(rows[0].idle_gpu_hours, 0);
  EXPECT_DOUBLE_EQ(rows[0].gpu_hours, 300 / kHour);  // open, to the node's last record
}

TEST(LedgerTest, GpusFromProcessesWhenTheStartNamesNone) {
  auto l = Ledger::Open({});
  ASSERT_TRUE(l.ok());
  (*l)->AddLines(R"({"t":100,"type":"job","node":"n","job":"x","state":"start","user":"u"})"
                 "\n"
                 R"({"t":105,"type":"proc","node":"n","pid":7,"gpu":3,"job":"x"})"
                 "\n"
                 R"({"t":106,"type":"proc","node":"n","pid":8,"gpu":5,"job":"x"})"
                 "\n"
                 R"({"t":1900,"type":"job","node":"n","job":"x","state":"end","exit_code":0})"
                 "\n");
  auto e = (*l)->Job("x");
  ASSERT_TRUE(e);
  ASSERT_EQ(e->attempts.size(), 1u);
  EXPECT_EQ(e->attempts[0].segments[0].gpus, (std::vector<unsigned>{3, 5}));
  ReportQuery q;
  q.by = GroupBy::kUser;
  q.since_ms = 0;
  q.until_ms = 10000 * 1000;
  EXPECT_DOUBLE_EQ((*l)->Report(q)[0].gpu_hours, 1.0);  // 2 GPUs x 1800 s, from the start
}

TEST(LedgerTest, ASecondEndExtendsTheAllocation) {
  // The SDK says the ranks ended; the epilog releases the GPUs 20 s later.
  auto l = Ledger::Open({});
  ASSERT_TRUE(l.ok());
  (*l)->AddLines(R"({"t":0,"type":"job","node":"n","job":"s","state":"start","gpus":[0]})"
                 "\n"
                 R"({"t":3580,"type":"job","node":"n","job":"s","state":"end","exit_code":0})"
                 "\n"
                 R"({"t":3600,"type":"job","node":"n","job":"s","state":"end","exit_code":0})"
                 "\n");
  auto e = (*l)->Job("s");
  ASSERT_TRUE(e);
  ASSERT_EQ(e->attempts.size(), 1u);
  EXPECT_EQ(e->attempts[0].end_ms(), 3600 * 1000);
  EXPECT_EQ(e->attempts[0].exit_code(), 0);
}

class LedgerDiskTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = store::testing::FreshScratchDir("ledger"); }
  void TearDown() override { fs::remove_all(dir_); }
  LedgerOptions Opts() {
    LedgerOptions o = Priced();
    o.dir = dir_;
    o.sync = store::SyncPolicy::kNever;
    return o;
  }
  std::string dir_;
};

TEST_F(LedgerDiskTest, ReopenGivesTheSameReport) {
  std::vector<ReportRow> before;
  {
    auto l = Ledger::Open(Opts());
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    (*l)->AddLines(Scripted());
    ASSERT_TRUE((*l)->Checkpoint(kT0Ms + 9000 * 1000).ok());
    before = (*l)->Report(Whole(GroupBy::kUser));
  }
  auto l = Ledger::Open(Opts());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto after = (*l)->Report(Whole(GroupBy::kUser));
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].key, before[i].key);
    EXPECT_DOUBLE_EQ(after[i].gpu_hours, before[i].gpu_hours);
    EXPECT_DOUBLE_EQ(after[i].idle_gpu_hours, before[i].idle_gpu_hours);
    EXPECT_DOUBLE_EQ(after[i].busywait_gpu_hours, before[i].busywait_gpu_hours);
    EXPECT_EQ(after[i].failed, before[i].failed);
    EXPECT_DOUBLE_EQ(after[i].cost_usd, before[i].cost_usd);
  }
  // The running job's GPU goes on being tallied after the restart.
  (*l)->AddLines(R"({"t":1764469610,"type":"gpu","node":"a","gpu":4,"util_pct":0,"power_w":70})"
                 "\n"
                 R"({"t":1764469620,"type":"gpu","node":"a","gpu":4,"util_pct":0,"power_w":70})"
                 "\n");
  auto j3 = (*l)->Job("j3");
  ASSERT_TRUE(j3);
  double idle = 0;
  for (const auto& [h, u] : j3->usage_by_hour) idle += u.idle_gpu_s;
  EXPECT_DOUBLE_EQ(idle, 10);
}

TEST_F(LedgerDiskTest, LifecycleSurvivesACrashBeforeAnyCheckpoint) {
  // A child adds the trace and dies without a checkpoint or a destructor.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto l = Ledger::Open(Opts());
    if (!l.ok()) _exit(2);
    (*l)->AddLines(Scripted());
    _exit(0);  // no Checkpoint, no destructor: what a SIGKILL leaves
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto l = Ledger::Open(Opts());
  ASSERT_TRUE(l.ok());
  auto rows = ByKey((*l)->Report(Whole(GroupBy::kUser)));
  // Starts and ends were logged as they came; the last record of node a (t0+8800) was a
  // sample, never logged, so the running j3 bills to its last logged sight: its start.
  EXPECT_DOUBLE_EQ(rows["bob"].gpu_hours, 8.0);
  EXPECT_EQ(rows["bob"].failed, 1u);
  EXPECT_DOUBLE_EQ(rows["alice"].gpu_hours, 4.0);
  EXPECT_EQ(rows["alice"].running, 1u);
}

TEST_F(LedgerDiskTest, ACorruptRecordCostsThatRecordOnly) {
  {
    auto l = Ledger::Open(Opts());
    ASSERT_TRUE(l.ok());
    (*l)->AddLines(Scripted());
    ASSERT_TRUE((*l)->Checkpoint(kT0Ms + 9000 * 1000).ok());
  }
  // Flip a byte inside the first job entry of the first segment ("j1" queued).
  std::string seg;
  for (const auto& f : fs::directory_iterator(dir_))
    if (f.path().extension() == ".wal") seg = f.path().string();
  ASSERT_FALSE(seg.empty());
  std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  const size_t at = bytes.find("\"job\":\"j1\"");
  ASSERT_NE(at, std::string::npos);
  f.seekp(static_cast<std::streamoff>(at + 8));
  f.put('X');
  f.close();
  auto l = Ledger::Open(Opts());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_GE((*l)->Stats().wal_damage, 1u);
  // j1's later entries are intact, so its state is whole; j2 too.
  auto rows = ByKey((*l)->Report(Whole(GroupBy::kUser)));
  EXPECT_DOUBLE_EQ(rows["bob"].gpu_hours, 8.0);
  EXPECT_DOUBLE_EQ(rows["alice"].gpu_hours, 4.5);
}

TEST_F(LedgerDiskTest, CompactionBoundsTheLogAndDropsJobsPastRetention) {
  LedgerOptions o = Opts();
  o.retention_ms = 86400 * 1000LL;
  {
    auto l = Ledger::Open(o);
    ASSERT_TRUE(l.ok());
    // 3000 short jobs, each logged at start and end: more than 4x what is live plus 1 MiB.
    std::string lines;
    for (int i = 0; i < 3000; ++i) {
      const std::string id = "job-" + std::to_string(i);
      lines += R"({"t":)" + std::to_string(1000 + i) + R"(,"type":"job","node":"n","job":")" + id +
               R"(","state":"start","user":"u","project":"p","gpus":[0,1,2,3]})" + "\n";
      lines += R"({"t":)" + std::to_string(1000 + i) + R"(.5,"type":"job","node":"n","job":")" +
               id + R"(","state":"end","exit_code":0})" + "\n";
    }
    (*l)->AddLines(lines);
    // Two days later: all of them ended before the retention.
    ASSERT_TRUE((*l)->Checkpoint(3 * 86400 * 1000LL).ok());
    EXPECT_EQ((*l)->Stats().jobs, 0u);
  }
  uintmax_t bytes = 0;
  for (const auto& f : fs::directory_iterator(dir_))
    if (f.path().extension() == ".wal") bytes += fs::file_size(f.path());
  EXPECT_LT(bytes, 4096u);
  auto l = Ledger::Open(o);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->Stats().jobs, 0u);
}

}  // namespace
}  // namespace gpuwatch::accounting
