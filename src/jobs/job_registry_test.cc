#include "jobs/job_registry.h"

#include <gtest/gtest.h>

#include <map>

namespace gpuwatch::jobs {
namespace {

constexpr int64_t kT0 = 1764460800000;

// A process table the test controls.
struct FakeProcs {
  std::map<uint32_t, ProcInfo> procs;
  ProcProbe Probe() {
    return [this](uint32_t pid) -> std::optional<ProcInfo> {
      auto it = procs.find(pid);
      if (it == procs.end()) return std::nullopt;
      return it->second;
    };
  }
};

model::JobMessage Start(const std::string& job, uint32_t rank) {
  model::JobMessage m;
  m.type = model::JobMessageType::kStart;
  m.job = job;
  m.rank = rank;
  m.template_name = "tmpl";
  m.world_size = 2;
  return m;
}

model::JobMessage Step(const std::string& job, uint32_t rank, uint64_t n, double dur,
                       int64_t t_ms) {
  model::JobMessage m;
  m.type = model::JobMessageType::kStep;
  m.job = job;
  m.rank = rank;
  m.step.step = n;
  m.step.duration_s = dur;
  m.step.samples = 32;
  m.step.data_wait_s = dur * 0.25;
  m.step.comm_s = dur * 0.5;
  m.t_s = static_cast<double>(t_ms) / 1000;
  return m;
}

std::vector<std::string> Kinds(const JobOutputs& o) {
  std::vector<std::string> k;
  for (const auto& e : o.events) k.push_back(e.kind);
  return k;
}

class JobRegistryTest : public ::testing::Test {
 protected:
  JobRegistryTest() {
    procs.procs[100] = {1000, 5, 'S', {}};
    procs.procs[101] = {1000, 6, 'S', {}};
    procs.procs[200] = {0, 7, 'S', {}};
  }
  JobRegistry Make(JobRegistryOptions o = {}) { return JobRegistry(o, procs.Probe()); }
  FakeProcs procs;
};

TEST_F(JobRegistryTest, WindowStatisticsPerRankAndJob) {
  JobRegistry reg = Make();
  ASSERT_FALSE(reg.Accept(Start("j", 0), {100, 1000}, kT0));
  ASSERT_FALSE(reg.Accept(Start("j", 1), {101, 1000}, kT0));
  // Rank 0: 100 steps of 0.1 s; rank 1: 50 steps of 0.2 s, in a 10 s window.
  for (int i = 0; i < 100; ++i)
    ASSERT_FALSE(reg.Accept(Step("j", 0, i, 0.1, kT0 + 100 * i), {100, 1000}, kT0 + 100 * i));
  for (int i = 0; i < 50; ++i)
    ASSERT_FALSE(reg.Accept(Step("j", 1, i, i == 49 ? 1.0 : 0.2, kT0 + 200 * i), {101, 1000},
                            kT0 + 200 * i));
  reg.CloseWindow(kT0 + 10000);
  auto job = reg.Job("j");
  ASSERT_TRUE(job);
  ASSERT_EQ(job->ranks.size(), 2u);
  const WindowStats& r0 = job->ranks[0].window;
  EXPECT_EQ(r0.steps, 100u);
  EXPECT_DOUBLE_EQ(r0.iterations_per_s, 10);
  EXPECT_DOUBLE_EQ(r0.samples_per_s, 320);
  EXPECT_DOUBLE_EQ(*r0.step_p50_s, 0.1);
  EXPECT_NEAR(*r0.data_wait_ratio, 0.25, 1e-9);
  EXPECT_NEAR(*r0.comm_ratio, 0.5, 1e-9);
  EXPECT_FALSE(r0.checkpoint_ratio);  // never reported: unknown, not 0
  const WindowStats& r1 = job->ranks[1].window;
  EXPECT_DOUBLE_EQ(r1.iterations_per_s, 5);
  EXPECT_DOUBLE_EQ(*r1.step_p50_s, 0.2);
  EXPECT_DOUBLE_EQ(*r1.step_p99_s, 1.0);
  // The job runs at its slowest rank; samples add up.
  EXPECT_DOUBLE_EQ(job->window.iterations_per_s, 5);
  EXPECT_DOUBLE_EQ(job->window.samples_per_s, 320 + 160);
  EXPECT_DOUBLE_EQ(*job->window.step_p99_s, 1.0);
  EXPECT_EQ(job->template_name, "tmpl");
  // The next window starts empty.
  reg.CloseWindow(kT0 + 25000);
  EXPECT_EQ(reg.Job("j")->ranks[0].window.steps, 0u);
  EXPECT_FALSE(reg.Job("j")->ranks[0].window.step_p50_s);
  EXPECT_EQ(reg.counters().accepted, 152u);
}

TEST_F(JobRegistryTest, TemplateRulesNameJobsWithoutATemplate) {
  JobRegistryOptions o;
  o.template_rules = {{.name = "two-rank", .user = "", .project = "nlp", .gpus = {}, .ranks = 2}};
  JobRegistry reg = Make(o);
  model::JobMessage bare = Start("j", 0);
  bare.template_name.clear();
  bare.project = "nlp";
  ASSERT_FALSE(reg.Accept(bare, {100, 1000}, kT0));
  EXPECT_EQ(reg.Job("j")->template_name, "two-rank");
  // The SDK's own template wins over the rules.
  model::JobMessage named = Start("k", 0);
  named.project = "nlp";
  ASSERT_FALSE(reg.Accept(named, {101, 1000}, kT0));
  EXPECT_EQ(reg.Job("k")->template_name, "tmpl");
}

TEST_F(JobRegistryTest, DuplicateAndOutOfOrderStepsAreRejected) {
  JobRegistry reg = Make();
  EXPECT_FALSE(reg.Accept(Step("j", 0, 5, 0.1, kT0), {100, 1000}, kT0));
  EXPECT_EQ(reg.Accept(Step("j", 0, 5, 0.1, kT0), {100, 1000}, kT0), RejectReason::kDuplicate);
  EXPECT_EQ(reg.Accept(Step("j", 0, 4, 0.1, kT0), {100, 1000}, kT0), RejectReason::kOutOfOrder);
  EXPECT_FALSE(reg.Accept(Step("j", 0, 6, 0.1, kT0), {100, 1000}, kT0));
  auto c = reg.counters();
  EXPECT_EQ(c.rejected[static_cast<size_t>(RejectReason::kDuplicate)], 1u);
  EXPECT_EQ(c.rejected[static_cast<size_t>(RejectReason::kOutOfOrder)], 1u);
  // A restart (a start from a new pid) begins a new step sequence.
  procs.procs[102] = {1000, 9, 'S', {}};
  EXPECT_FALSE(reg.Accept(Start("j", 0), {102, 1000}, kT0 + 1));
  EXPECT_FALSE(reg.Accept(Step("j", 0, 0, 0.1, kT0 + 2), {102, 1000}, kT0 + 2));
  // The same pid sending its start again (the SDK's periodic refresh) is no restart.
  EXPECT_FALSE(reg.Accept(Start("j", 0), {102, 1000}, kT0 + 3));
  EXPECT_EQ(reg.Accept(Step("j", 0, 0, 0.1, kT0 + 4), {102, 1000}, kT0 + 4),
            RejectReason::kDuplicate);
}

TEST_F(JobRegistryTest, AClientCannotClaimAnotherUsersPid) {
  JobRegistry reg = Make();
  model::JobMessage m = Start("j", 0);
  m.pid = 200;  // root's process
  EXPECT_EQ(reg.Accept(m, {100, 1000}, kT0), RejectReason::kPidNotOwned);
  m.pid = 4000000;  // no such process
  EXPECT_EQ(reg.Accept(m, {100, 1000}, kT0), RejectReason::kPidNotOwned);
  m.pid = 101;  // its own uid's process: a launcher reporting for its child
  EXPECT_FALSE(reg.Accept(m, {100, 1000}, kT0));
  EXPECT_EQ(reg.Job("j")->ranks[0].pid, 101u);
  EXPECT_TRUE(reg.Job("j")->ranks[0].pid_verified);
  // A containerized client names itself by its namespace pid: the same process.
  procs.procs[100].nspid = {100, 7};
  m.rank = 3;
  m.pid = 7;
  EXPECT_FALSE(reg.Accept(m, {100, 1000}, kT0));
  EXPECT_EQ(reg.Job("j")->ranks.back().rank, 3u);
  EXPECT_EQ(reg.Job("j")->ranks.back().pid, 100u);
  // Root may name any process.
  m.rank = 1;
  m.pid = 101;
  EXPECT_FALSE(reg.Accept(m, {200, 0}, kT0));
  // UDP/TCP: no credentials, the pid is taken as given but unverified (a job of its own: see
  // OneUserCannotSpeakForAnothersJob).
  m.job = "udp";
  m.rank = 2;
  m.pid = 200;
  EXPECT_FALSE(reg.Accept(m, Sender{}, kT0));
  EXPECT_EQ(reg.Job("udp")->ranks[0].rank, 2u);
  EXPECT_FALSE(reg.Job("udp")->ranks[0].pid_verified);
}

TEST_F(JobRegistryTest, OneUserCannotSpeakForAnothersJob) {
  JobRegistry reg = Make();
  procs.procs[300] = {2000, 8, 'S', {}};  // another user's process
  ASSERT_FALSE(reg.Accept(Start("alice", 0), {100, 1000}, kT0));
  // Bob cannot restart alice's rank, add a rank that will "die", or end her job…
  EXPECT_EQ(reg.Accept(Start("alice", 0), {300, 2000}, kT0), RejectReason::kPidNotOwned);
  EXPECT_EQ(reg.Accept(Start("alice", 1), {300, 2000}, kT0), RejectReason::kPidNotOwned);
  model::JobMessage end;
  end.type = model::JobMessageType::kEnd;
  end.job = "alice";
  end.exit_code = 1;
  EXPECT_EQ(reg.Accept(end, {300, 2000}, kT0), RejectReason::kPidNotOwned);
  // … nor can anybody over UDP/TCP, who cannot prove who they are.
  EXPECT_EQ(reg.Accept(end, Sender{}, kT0), RejectReason::kPidNotOwned);
  EXPECT_EQ(reg.Job("alice")->state, "running");
  EXPECT_EQ(reg.Job("alice")->ranks.size(), 1u);
  // Root may; alice herself may.
  EXPECT_FALSE(reg.Accept(Start("alice", 1), {200, 0}, kT0));
  end.exit_code = 0;
  end.rank = 0;
  EXPECT_FALSE(reg.Accept(end, {100, 1000}, kT0));
  // After the job ended, bob cannot write lines into its record either.
  end.rank = 1;
  EXPECT_FALSE(reg.Accept(end, {200, 0}, kT0));
  EXPECT_EQ(reg.Job("alice")->state, "finished");
  model::JobMessage line;
  line.type = model::JobMessageType::kLog;
  line.job = "alice";
  line.text = "fake";
  EXPECT_EQ(reg.Accept(line, {300, 2000}, kT0), RejectReason::kPidNotOwned);
  // Her own late line still belongs to the ended run and does not revive it.
  EXPECT_FALSE(reg.Accept(line, {100, 1000}, kT0));
  EXPECT_EQ(reg.Job("alice")->state, "finished");
}

TEST_F(JobRegistryTest, UdpRanksAreNotJudgedByThisHostsProcfs) {
  JobRegistry reg = Make();
  model::JobMessage m = Start("udp", 0);
  m.pid = 4000;  // the pid as a container sees it: no such process here
  ASSERT_FALSE(reg.Accept(m, Sender{}, kT0));
  reg.Tick(kT0 + 1000, {});
  EXPECT_EQ(reg.Job("udp")->state, "running");
  EXPECT_EQ(reg.Job("udp")->ranks[0].state, "running");
}

TEST_F(JobRegistryTest, LogFilesOnlyForCredentialedSenders) {
  JobRegistry reg = Make();
  model::JobMessage m = Start("j", 0);
  m.log_files = {"/var/log/x.log"};
  EXPECT_FALSE(reg.Accept(m, {100, 1000}, kT0));
  m.job = "udp-job";
  EXPECT_FALSE(reg.Accept(m, Sender{}, kT0));
  auto out = reg.TakeOutputs();
  ASSERT_EQ(out.log_files.size(), 1u);
  EXPECT_EQ(out.log_files[0].path, "/var/log/x.log");
  EXPECT_EQ(out.log_files[0].uid, 1000u);
}

TEST_F(JobRegistryTest, VanishedPidIsARankExitAndAFailedJob) {
  JobRegistry reg = Make();
  ASSERT_FALSE(reg.Accept(Start("j", 0), {100, 1000}, kT0));
  ASSERT_FALSE(reg.Accept(Start("j", 1), {101, 1000}, kT0));
  reg.Tick(kT0 + 1000, {});
  (void)reg.TakeOutputs();
  procs.procs.erase(101);  // SIGKILL
  reg.Tick(kT0 + 2000, {});
  auto out = reg.TakeOutputs();
  ASSERT_EQ(Kinds(out), std::vector<std::string>({"rank_exit"}));
  EXPECT_EQ(out.events[0].severity, "critical");
  EXPECT_EQ(out.events[0].rank, 1u);
  EXPECT_NE(out.events[0].message.find("died"), std::string::npos);
  EXPECT_EQ(reg.Job("j")->ranks[1].state, "died");
  EXPECT_EQ(reg.Job("j")->state, "running");  // rank 0 still runs
  // Rank 0 reports its end with a code: the job is over, and failed.
  model::JobMessage end;
  end.type = model::JobMessageType::kEnd;
  end.job = "j";
  end.exit_code = 0;
  ASSERT_FALSE(reg.Accept(end, {100, 1000}, kT0 + 3000));
  out = reg.TakeOutputs();
  EXPECT_EQ(Kinds(out), std::vector<std::string>({"rank_exit", "job_end"}));
  EXPECT_EQ(out.events[1].severity, "critical");
  EXPECT_EQ(reg.Job("j")->state, "failed");
  EXPECT_EQ(out.ended_jobs, std::vector<std::string>({"j"}));
}

TEST_F(JobRegistryTest, RecycledPidIsNotTheRank) {
  JobRegistry reg = Make();
  ASSERT_FALSE(reg.Accept(Start("j", 0), {100, 1000}, kT0));
  reg.Tick(kT0 + 1000, {});
  procs.procs[100].start_time = 999;  // the pid now names another process
  reg.Tick(kT0 + 2000, {});
  EXPECT_EQ(reg.Job("j")->state, "failed");
}

TEST_F(JobRegistryTest, CleanEndFinishesTheJob) {
  JobRegistry reg = Make();
  ASSERT_FALSE(reg.Accept(Start("j", 0), {100, 1000}, kT0));
  model::JobMessage end;
  end.type = model::JobMessageType::kEnd;
  end.job = "j";
  end.exit_code = 0;
  ASSERT_FALSE(reg.Accept(end, {100, 1000}, kT0 + 5));
  EXPECT_EQ(reg.Job("j")->state, "finished");
  auto out = reg.TakeOutputs();
  EXPECT_EQ(Kinds(out), std::vector<std::string>({"job_start", "rank_exit", "job_end"}));
  EXPECT_EQ(out.events[2].severity, "info");
  // The pid exiting afterwards is no second event.
  procs.procs.erase(100);
  reg.Tick(kT0 + 1000, {});
  EXPECT_TRUE(reg.TakeOutputs().events.empty());
}

TEST_F(JobRegistryTest, NoStepForTenMediansIsHungUntilStepsResume) {
  JobRegistryOptions o;
  o.hang.min_s = 2;
  JobRegistry reg = Make(o);
  for (int i = 0; i < 5; ++i)
    ASSERT_FALSE(reg.Accept(Step("j", 0, i, 0.5, kT0 + 500 * i), {100, 1000}, kT0 + 500 * i));
  const int64_t last = kT0 + 2000;
  reg.Tick(last + 4000, {});  // 4 s < 10 × 0.5 s
  EXPECT_EQ(reg.Job("j")->state, "running");
  procs.procs[100].state = 'T';
  reg.Tick(last + 5500, {});
  auto job = reg.Job("j");
  EXPECT_EQ(job->state, "hung");
  EXPECT_TRUE(job->ranks[0].hung);
  EXPECT_EQ(job->ranks[0].state, "stopped");
  auto out = reg.TakeOutputs();
  ASSERT_EQ(Kinds(out).back(), "job_hung");
  EXPECT_NE(out.events.back().message.find("SIGSTOP"), std::string::npos);
  reg.Tick(last + 6000, {});  // flagged once
  EXPECT_TRUE(reg.TakeOutputs().events.empty());
  procs.procs[100].state = 'S';
  ASSERT_FALSE(reg.Accept(Step("j", 0, 5, 0.5, last + 6100), {100, 1000}, last + 6100));
  EXPECT_EQ(Kinds(reg.TakeOutputs()), std::vector<std::string>({"job_resumed"}));
  EXPECT_EQ(reg.Job("j")->state, "running");
}

TEST_F(JobRegistryTest, AnOpenEvalPhaseIsNotAHang) {
  JobRegistryOptions o;
  o.hang.min_s = 2;
  o.hang.in_phase_s = 60;
  JobRegistry reg = Make(o);
  for (int i = 0; i < 5; ++i)
    ASSERT_FALSE(reg.Accept(Step("j", 0, i, 0.5, kT0 + 500 * i), {100, 1000}, kT0 + 500 * i));
  model::JobMessage ph;
  ph.type = model::JobMessageType::kPhase;
  ph.job = "j";
  ph.name = "eval";
  ASSERT_FALSE(reg.Accept(ph, {100, 1000}, kT0 + 2100));
  reg.Tick(kT0 + 30000, {});
  EXPECT_EQ(reg.Job("j")->state, "running");
  EXPECT_EQ(reg.Job("j")->ranks[0].phase, "eval");
  reg.Tick(kT0 + 70000, {});
  EXPECT_EQ(reg.Job("j")->state, "hung");
}

// Issue 19: "Job ownership comes from the scheduler or the process's credentials, never from
// what the client claims." A user's start says it is alice's, of project nlp; its process runs
// as bob (attribution reads /proc/PID/status's uid).
TEST_F(JobRegistryTest, AUsersClaimOfOwnerAndProjectIsNotTaken) {
  auto claiming = [](const std::string& job, const std::string& user, const std::string& project) {
    model::JobMessage m = Start(job, 0);
    m.user = user;
    m.project = project;
    return m;
  };
  JobRegistry reg = Make();
  ASSERT_FALSE(reg.Accept(claiming("j", "alice", "nlp"), {100, 1000}, kT0));
  EXPECT_EQ(reg.Job("j")->user, "");
  EXPECT_EQ(reg.Job("j")->project, "");
  EXPECT_EQ(reg.Job("j")->claimed_project, "nlp");
  model::ProcessAttribution p;
  p.pid = 100;
  p.gpu_index = 0;
  p.user = "bob";
  reg.Tick(kT0 + 1000, {p});
  EXPECT_EQ(reg.Job("j")->user, "bob");
  EXPECT_EQ(reg.Job("j")->project, "");
  // The same claim over UDP/TCP (no kernel credentials) is not taken either.
  model::JobMessage u = claiming("u", "alice", "nlp");
  u.pid = 101;
  ASSERT_FALSE(reg.Accept(u, Sender{}, kT0));
  EXPECT_EQ(reg.Job("u")->user, "");
  EXPECT_EQ(reg.Job("u")->project, "");
  // Root (a launcher) speaks for the job it starts, as the scheduler does.
  ASSERT_FALSE(reg.Accept(claiming("k", "carol", "vision"), {200, 0}, kT0));
  EXPECT_EQ(reg.Job("k")->user, "carol");
  EXPECT_EQ(reg.Job("k")->project, "vision");
  EXPECT_EQ(reg.Job("k")->claimed_project, "");
}

TEST_F(JobRegistryTest, JobsWithoutTheSdkComeFromAttribution) {
  JobRegistry reg = Make();
  ASSERT_FALSE(reg.Accept(Start("sdk", 0), {100, 1000}, kT0));
  model::ProcessAttribution rank0;
  rank0.pid = 100;
  rank0.gpu_index = 3;
  rank0.user = "alice";
  model::ProcessAttribution other;
  other.pid = 300;
  other.gpu_index = 1;
  other.user = "bob";
  other.job_id = "slurm-77";
  model::ProcessAttribution loose;
  loose.pid = 301;
  loose.gpu_index = 2;
  loose.container_id = std::string(64, 'c');
  reg.Tick(kT0, {rank0, other, loose});
  reg.Tick(kT0 + 10000, {rank0, other, loose});
  auto sdk = reg.Job("sdk");
  EXPECT_EQ(sdk->ranks[0].gpus, std::vector<unsigned>({3}));
  EXPECT_EQ(sdk->gpus, std::vector<unsigned>({3}));
  EXPECT_EQ(sdk->user, "alice");
  auto slurm = reg.Job("slurm-77");
  ASSERT_TRUE(slurm);
  EXPECT_EQ(slurm->source, "process");
  EXPECT_EQ(slurm->user, "bob");
  EXPECT_EQ(slurm->pids, std::vector<uint32_t>({300}));
  EXPECT_DOUBLE_EQ(slurm->gpu_seconds, 10);
  ASSERT_TRUE(reg.Job("container-cccccccccccc"));
  (void)reg.TakeOutputs();
  reg.Tick(kT0 + 20000, {rank0});
  EXPECT_EQ(reg.Job("slurm-77")->state, "gone");
  EXPECT_EQ(reg.Job("slurm-77")->gpus, std::vector<unsigned>({1}));  // what it last used
  auto kinds = Kinds(reg.TakeOutputs());
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "job_end"), 2);
}

TEST_F(JobRegistryTest, BoundedByItsLimits) {
  JobRegistryOptions o;
  o.max_jobs = 3;
  o.max_ranks = 4;
  o.max_recent_jobs = 2;
  o.max_pending = 10;
  JobRegistry reg = Make(o);
  for (int i = 0; i < 3; ++i)
    EXPECT_FALSE(reg.Accept(Start("j" + std::to_string(i), 0), {100, 1000}, kT0));
  EXPECT_EQ(reg.Accept(Start("j9", 0), {100, 1000}, kT0), RejectReason::kLimit);
  EXPECT_FALSE(reg.Accept(Start("j0", 1), {100, 1000}, kT0));
  EXPECT_EQ(reg.Accept(Start("j0", 2), {100, 1000}, kT0), RejectReason::kLimit);
  for (int i = 0; i < 20; ++i) {
    model::JobMessage a;
    a.type = model::JobMessageType::kAnnotation;
    a.job = "j1";
    a.text = "x";
    EXPECT_FALSE(reg.Accept(a, {100, 1000}, kT0));
  }
  EXPECT_GT(reg.counters().outputs_dropped, 0u);
  EXPECT_LE(reg.TakeOutputs().events.size(), 10u);
  // Ended jobs are kept up to max_recent_jobs.
  for (int i = 0; i < 3; ++i) {
    model::JobMessage end;
    end.type = model::JobMessageType::kEnd;
    end.job = "j" + std::to_string(i);
    end.exit_code = 0;
    for (uint32_t r = 0; r < 2; ++r) {
      end.rank = r;
      (void)reg.Accept(end, {100, 1000}, kT0);
    }
  }
  EXPECT_EQ(reg.Jobs().size(), 2u);
}

TEST_F(JobRegistryTest, AJobShorterThanAWindowEndsWithItsStatistics) {
  JobRegistry reg = Make();
  for (int i = 0; i < 10; ++i)
    ASSERT_FALSE(reg.Accept(Step("j", 0, i, 0.1, kT0 + 100 * i), {100, 1000}, kT0 + 100 * i));
  model::JobMessage end;
  end.type = model::JobMessageType::kEnd;
  end.job = "j";
  end.exit_code = 0;
  end.t_s = (kT0 + 1000) / 1000.0;
  ASSERT_FALSE(reg.Accept(end, {100, 1000}, kT0 + 1000));
  auto j = reg.Job("j");
  EXPECT_EQ(j->state, "finished");
  EXPECT_EQ(j->ranks[0].window.steps, 10u);
  EXPECT_DOUBLE_EQ(*j->ranks[0].window.step_p50_s, 0.1);
  EXPECT_DOUBLE_EQ(j->window.iterations_per_s, 10);
  EXPECT_DOUBLE_EQ(*j->ranks[0].median_step_s, 0.1);  // kept after the per-step state is freed
}

TEST_F(JobRegistryTest, RawStepsAreRateCapped) {
  JobRegistryOptions o;
  o.raw_steps_max_hz = 10;
  JobRegistry reg = Make(o);
  // 1 kHz for one second: about 10 raw steps, and every step in the statistics.
  for (int i = 0; i < 1000; ++i)
    ASSERT_FALSE(reg.Accept(Step("j", 0, i, 0.001, kT0 + i), {100, 1000}, kT0 + i));
  auto out = reg.TakeOutputs();
  EXPECT_EQ(out.steps.size(), 10u);
  reg.CloseWindow(kT0 + 1000);
  EXPECT_EQ(reg.Job("j")->ranks[0].window.steps, 1000u);
}

// D9 (issue 17): one uid could hold all 1024 running-job slots, so every other user's start
// was refused. Each uid now has its share; senders without credentials share one.
TEST(JobRegistryQuota, D9_OneUidCannotTakeEverySlot) {
  JobRegistryOptions o;
  o.max_jobs_per_uid = 3;
  JobRegistry reg(o, nullptr);
  const Sender hog{1234, 65534};
  for (int i = 0; i < 3; ++i)
    ASSERT_FALSE(reg.Accept(Start("h" + std::to_string(i), 0), hog, kT0)) << i;
  EXPECT_EQ(reg.Accept(Start("h3", 0), hog, kT0), RejectReason::kQuota);
  EXPECT_EQ(RejectReasonName(RejectReason::kQuota), "quota");
  // Another user still starts a job; more messages of a running job are not new jobs.
  EXPECT_FALSE(reg.Accept(Start("legit", 0), Sender{1235, 1000}, kT0));
  EXPECT_FALSE(reg.Accept(Start("h0", 1), hog, kT0));
  // Uncredentialed senders (UDP/TCP) share one share.
  for (int i = 0; i < 3; ++i)
    ASSERT_FALSE(reg.Accept(Start("u" + std::to_string(i), 0), Sender{}, kT0));
  EXPECT_EQ(reg.Accept(Start("u3", 0), Sender{}, kT0), RejectReason::kQuota);
  EXPECT_EQ(reg.Job("h0")->starter, "uid:65534");
  EXPECT_EQ(reg.Job("u0")->starter, "uid:none");
}

}  // namespace
}  // namespace gpuwatch::jobs

namespace gpuwatch::jobs {
namespace {

// The Slurm prolog's allocation and the epilog's release (deploy/slurm): root's word only.
TEST(JobRegistrySchedulerTest, OnlyRootAllocatesAndItsOwnerStandsOverTheClients) {
  JobRegistry reg({}, nullptr);
  model::JobMessage a;
  a.type = model::JobMessageType::kAllocation;
  a.job = "4242";
  a.user = "alice";
  a.project = "nlp";
  a.devices = {0, 1};
  a.submit_t_s = 1764460700.0;
  EXPECT_EQ(reg.Accept(a, Sender{}, kT0), RejectReason::kNotPermitted);           // UDP/TCP
  EXPECT_EQ(reg.Accept(a, Sender{500, 1000}, kT0), RejectReason::kNotPermitted);  // a user
  EXPECT_FALSE(reg.Accept(a, Sender{1, 0}, kT0));                                 // root
  // The job's own start claims another owner: the scheduler's stands.
  model::JobMessage s = Start("4242", 0);
  s.user = "mallory";
  s.project = "other";
  EXPECT_FALSE(reg.Accept(s, Sender{600, 1000}, kT0 + 1000));
  EXPECT_EQ(reg.Job("4242")->user, "alice");
  EXPECT_EQ(reg.Job("4242")->project, "nlp");
  model::JobMessage r;
  r.type = model::JobMessageType::kRelease;
  r.job = "4242";
  r.exit_code = 0;
  EXPECT_EQ(reg.Accept(r, Sender{600, 1000}, kT0 + 5000), RejectReason::kNotPermitted);
  EXPECT_FALSE(reg.Accept(r, Sender{1, 0}, kT0 + 5000));
  model::JobMessage q;
  q.type = model::JobMessageType::kQueued;
  q.job = "4243";
  q.user = "bob";
  EXPECT_FALSE(reg.Accept(q, Sender{}, kT0));  // anyone may say a job waits
  std::vector<std::string> kinds;
  std::string allocated_fields;
  for (const auto& e : reg.TakeOutputs().events) {
    kinds.push_back(e.kind);
    if (e.kind == "job_allocated") allocated_fields = e.fields_json;
  }
  EXPECT_EQ(kinds,
            (std::vector<std::string>{"job_allocated", "job_start", "job_released", "job_queued"}));
  EXPECT_EQ(allocated_fields,
            R"({"devices":[0,1],"project":"nlp","submit_ms":1764460700000,"user":"alice"})");
  EXPECT_EQ(reg.counters().rejected[static_cast<size_t>(RejectReason::kNotPermitted)], 3u);
}

}  // namespace
}  // namespace gpuwatch::jobs
