#include "logs/launcher_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/test_files.h"

namespace gpuwatch::logs {
namespace {

namespace fs = std::filesystem;
using gpuwatch::testing::FixtureDir;
using gpuwatch::testing::ReadFileOrEmpty;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

LauncherReport ParseText(const std::string& text) {
  LauncherLogParser p;
  size_t n = 0;
  for (const std::string& l : Lines(text)) p.Feed(l, ++n);
  return p.report();
}

LauncherReport ParseFixture(const std::string& name) {
  return ParseText(ReadFileOrEmpty(FixtureDir("explain/launcher/") + name));
}

// ---- every capture: the JSON equals the collectors' expected `launcher` object --------------

TEST(LauncherLogFixturesTest, EveryCaptureGivesItsExpectedObject) {
  const std::string dir = FixtureDir("explain/launcher");
  size_t checked = 0;
  for (const gpuwatch::testing::Capture& c : gpuwatch::testing::CapturesIn(dir, ".log")) {
    ASSERT_TRUE(fs::exists(c.expected)) << c.expected;
    const nlohmann::json expected = nlohmann::json::parse(ReadFileOrEmpty(c.expected));
    ASSERT_TRUE(expected.contains("launcher")) << c.expected;
    const nlohmann::json got = LauncherReportJson(ParseText(ReadFileOrEmpty(c.input)));
    EXPECT_EQ(got, expected["launcher"]) << c.input.filename() << "\n got:      " << got.dump()
                                         << "\n expected: " << expected["launcher"].dump();
    ++checked;
  }
  EXPECT_GE(checked, 32u) << "fixtures missing from " << dir;
}

// Every explain capture, whatever its folder: a line looks like a launcher line exactly when
// the collectors list "launcher" among the file's kinds, and what they expected of the
// `launcher` object (all of it, or the keys they wrote down) is what the parser gives.
TEST(LauncherLogFixturesTest, KindRecognitionAgreesWithEveryExplainCapture) {
  size_t checked = 0;
  for (const fs::directory_entry& folder : fs::directory_iterator(FixtureDir("explain"))) {
    if (!folder.is_directory()) continue;
    for (const fs::directory_entry& e : fs::directory_iterator(folder.path())) {
      const std::string name = e.path().filename().string();
      constexpr std::string_view kSuffix = ".expected.json";
      if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) continue;
      const std::string stem = name.substr(0, name.size() - kSuffix.size());
      std::string input;
      for (const fs::directory_entry& f : fs::directory_iterator(folder.path())) {
        const std::string other = f.path().filename().string();
        if (other != name && other.starts_with(stem + ".") && !other.ends_with(kSuffix)) {
          input = ReadFileOrEmpty(f.path());
        }
      }
      ASSERT_FALSE(input.empty()) << "no input beside " << e.path();
      const nlohmann::json expected = nlohmann::json::parse(ReadFileOrEmpty(e.path()));
      bool want = false;
      for (const nlohmann::json& k : expected["kinds"]) want = want || k == "launcher";
      bool got = false;
      for (const std::string& l : Lines(input)) got = got || LooksLikeLauncherLine(l);
      EXPECT_EQ(got, want) << e.path();
      if (want) {
        const nlohmann::json j = LauncherReportJson(ParseText(input));
        for (const auto& [key, value] : expected["launcher"].items()) {
          EXPECT_EQ(j[key], value) << e.path() << " " << key;
        }
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 80u);
}

// ---- focused checks on captures (tests/fixtures/explain/launcher/SOURCES.md) -----------------

// ROCm/ROCm#5788: the glog `failed` line, then the ChildFailedError table, whose "Root Cause"
// entry is printed last (torch/distributed/elastic/multiprocessing/errors/__init__.py) but is
// listed first. The failed line and the root-cause entry are the same pid: one failure, with the
// table's time.
TEST(LauncherLogTest, TableRootCauseFirstAndMergedWithFailedLine) {
  const LauncherReport r = ParseFixture("rocm5788_torchrun_sigsegv_table_root_cause_rank0.log");
  ASSERT_EQ(r.failures.size(), 2u);
  const LauncherFailure& root = r.failures[0];
  EXPECT_TRUE(root.root_cause);
  EXPECT_EQ(root.rank, 0);
  EXPECT_EQ(root.local_rank, 0);
  EXPECT_EQ(root.pid, 6174);
  EXPECT_EQ(root.exitcode, -11);
  EXPECT_EQ(root.signal, "SIGSEGV");
  EXPECT_EQ(root.host, "xdit");
  EXPECT_EQ(root.time, "2026-01-15_05:44:28");
  EXPECT_EQ(root.line_no, 1u);  // first reported by the `failed` line
  const LauncherFailure& other = r.failures[1];
  EXPECT_FALSE(other.root_cause);
  EXPECT_EQ(other.rank, 1);
  EXPECT_EQ(other.pid, 6175);
  EXPECT_EQ(other.line_no, 23u);  // its "[1]:" line
  EXPECT_EQ(r.teardown_signals, 0u);
  EXPECT_FALSE(r.launcher_signalled);
}

// The same capture fed line by line: report() says what the lines so far say.
TEST(LauncherLogTest, IncrementalReport) {
  const std::vector<std::string> lines = Lines(ReadFileOrEmpty(
      FixtureDir("explain/launcher/rocm5788_torchrun_sigsegv_table_root_cause_rank0.log")));
  LauncherLogParser p;
  size_t n = 0;
  for (const std::string& l : lines) {
    p.Feed(l, ++n);
    if (n == 1) {
      ASSERT_EQ(p.report().failures.size(), 1u);
      EXPECT_EQ(p.report().failures[0].time, "0115 05:44:28.210000");  // glog, letter dropped
      EXPECT_FALSE(p.report().failures[0].rank);
    }
    if (n == 26) {  // "[1]:" and its time, host and rank lines
      ASSERT_EQ(p.report().failures.size(), 2u);
      EXPECT_EQ(p.report().failures[1].rank, 1);
      EXPECT_FALSE(p.report().failures[1].pid);
    }
  }
  ASSERT_EQ(p.report().failures.size(), 2u);
  EXPECT_EQ(p.report().failures[0].rank, 0);
}

// OEvortex/unsloth#10: torch ≥ 2.4's glog prefix; three peers sent SIGTERM by the agent.
TEST(LauncherLogTest, GlogFailedLineAndTeardown) {
  const LauncherReport r = ParseFixture("unsloth10_torchrun_glog_exitcode1_localrank3.log");
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].local_rank, 3);
  EXPECT_EQ(r.failures[0].pid, 33054);
  EXPECT_EQ(r.failures[0].exitcode, 1);
  EXPECT_FALSE(r.failures[0].signal);
  EXPECT_EQ(r.failures[0].time, "0801 13:23:20.000000");
  EXPECT_EQ(r.failures[0].line_no, 4u);
  EXPECT_EQ(r.teardown_signals, 3u);
  EXPECT_FALSE(r.launcher_signalled);
}

// determined-ai/determined#8915: the agent itself got SIGTERM ("Received 15 death signal",
// agent/server/api.py) and forwarded it; no worker failed.
TEST(LauncherLogTest, AgentSignalledIsNotAFailure) {
  const LauncherReport r = ParseFixture("determined8915_torchrun_agent_got_sigterm_no_failure.log");
  EXPECT_TRUE(r.failures.empty());
  EXPECT_EQ(r.teardown_signals, 4u);
  EXPECT_TRUE(r.launcher_signalled);

  // modelscope/ms-swift#64: SIGHUP when the terminal closed, glued behind a tqdm bar.
  const LauncherReport hup = ParseFixture("msswift64_torchrun_sighup_death_signal_no_failure.log");
  EXPECT_TRUE(hup.failures.empty());
  EXPECT_EQ(hup.teardown_signals, 3u);
  EXPECT_TRUE(hup.launcher_signalled);
}

// deepspeedai/DeepSpeedExamples#626: DeepSpeed's sigkill_handler logs "Killing subprocess" for
// every worker and then "exits with return code = -11" (deepspeed/launcher/launch.py); the
// printed command's --local_rank is the last spawned rank, so it is not taken.
TEST(LauncherLogTest, DeepSpeedReturnCode) {
  const LauncherReport r = ParseFixture("deepspeedexamples626_launcher_sigsegv_30s_grace.log");
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].exitcode, -11);
  EXPECT_EQ(r.failures[0].signal, "SIGSEGV");
  EXPECT_FALSE(r.failures[0].local_rank);
  EXPECT_FALSE(r.failures[0].pid);
  EXPECT_EQ(r.failures[0].time, "2023-07-10 04:26:35,999");
  EXPECT_EQ(r.teardown_signals, 2u);
}

// ComputationalRadiationPhysics/picongpu#198: srun's "%s: %s %s: Exited with exit code %d"
// (Slurm's _task_finish) with a task range: one failure per task.
TEST(LauncherLogTest, SrunTaskRange) {
  const LauncherReport r = ParseFixture("picongpu198_slurm_srun_tasks_exited_code1.log");
  ASSERT_EQ(r.failures.size(), 2u);
  EXPECT_EQ(r.failures[0].rank, 10);
  EXPECT_EQ(r.failures[1].rank, 11);
  EXPECT_EQ(r.failures[1].host, "taurusi2031");
  EXPECT_EQ(r.failures[1].exitcode, 1);
  EXPECT_EQ(r.failures[1].line_no, 2u);
}

// pytorch/pytorch#118369: a watchdog line glued behind a progress bar, one SeqNum printed twice
// (one entry), and a watchdog that fired 7 h after its 30 min timeout.
TEST(LauncherLogTest, WatchdogDeduplicatedPerRankAndSeq) {
  const LauncherReport r =
      ParseFixture("pytorch118369_watchdog_progressbar_prefix_duplicate_seq.log");
  ASSERT_EQ(r.watchdog_timeouts.size(), 4u);
  const WatchdogTimeout& first = r.watchdog_timeouts[0];
  EXPECT_EQ(first.rank, 0);
  EXPECT_EQ(first.op, "ALLREDUCE");
  EXPECT_EQ(first.seq, 96120);
  EXPECT_EQ(first.timeout_ms, 1800000);
  EXPECT_EQ(first.ran_for_ms, 25624887);
  EXPECT_EQ(first.line_no, 1u);
  EXPECT_EQ(r.watchdog_timeouts[3].rank, 7);
  EXPECT_EQ(r.watchdog_timeouts[3].line_no, 5u);
}

// XPixelGroup/BasicSR#737: the 2025 form, "[PG ID 0 PG GUID 0(default_pg) Rank N]" on the
// following line, NumelIn/NumelOut inside WorkNCCL(…).
TEST(LauncherLogTest, WatchdogPgGuidForm) {
  const LauncherReport r = ParseFixture("basicsr737_watchdog_pg_guid_form.log");
  ASSERT_EQ(r.watchdog_timeouts.size(), 3u);
  EXPECT_EQ(r.watchdog_timeouts[2].rank, 2);
  EXPECT_EQ(r.watchdog_timeouts[2].ran_for_ms, 600061);
  // The PG form of the rank is read too when the message carries it.
  LauncherLogParser p;
  p.Feed(
      "[rank9]:[E626 06:24:44.1 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0(default_pg) Rank 9] "
      "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, OpType=BROADCAST, "
      "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.",
      1);
  ASSERT_EQ(p.report().watchdog_timeouts.size(), 1u);
  EXPECT_EQ(p.report().watchdog_timeouts[0].rank, 9);
  EXPECT_EQ(p.report().watchdog_timeouts[0].op, "BROADCAST");
  // The what() of the DistBackendError repeats it: no second entry.
  p.Feed(
      "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 9] Process group watchdog thread terminated "
      "with exception: [Rank 9] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, "
      "OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds "
      "before timing out.",
      2);
  EXPECT_EQ(p.report().watchdog_timeouts.size(), 1u);
}

// YJiangcm/LTE#3: two ranks' old-form OOM messages interleaved on one line. Sizes: GiB × 1024
// from the printed two decimals (docs/format/explain.md).
TEST(LauncherLogTest, TwoCudaOomsOnOneLine) {
  const LauncherReport r = ParseFixture("lte3_cuda_oom_two_ranks_interleaved_a100_80g.log");
  ASSERT_EQ(r.cuda_oom.size(), 2u);
  EXPECT_EQ(r.cuda_oom[0].gpu, 0);
  EXPECT_EQ(r.cuda_oom[0].tried_to_allocate_mib, 2048.0);
  EXPECT_EQ(r.cuda_oom[0].total_capacity_mib, 81049.6);
  EXPECT_EQ(r.cuda_oom[0].free_mib, 307.31);
  EXPECT_EQ(r.cuda_oom[1].gpu, 3);
  EXPECT_EQ(r.cuda_oom[1].free_mib, 355.31);
}

// shllln/GenerativeGraph#5 (2019, "cached"): KiB sizes, KiB / 1024 exactly; pytorch#16417 (new
// form); carolchenyx/MGFN.#35 ("capacty", "0 bytes").
TEST(LauncherLogTest, CudaOomSizeUnits) {
  const LauncherReport kib = ParseFixture("generativegraph5_cuda_oom_kib_cached_form.log");
  ASSERT_EQ(kib.cuda_oom.size(), 1u);
  EXPECT_EQ(kib.cuda_oom[0].tried_to_allocate_mib, 1.0);
  EXPECT_EQ(kib.cuda_oom[0].free_mib, 0.5625);
  EXPECT_EQ(kib.cuda_oom[0].total_capacity_mib, 11438.08);

  const LauncherReport modern = ParseFixture("pytorch16417_cuda_oom_new_form_23gib.log");
  ASSERT_EQ(modern.cuda_oom.size(), 1u);
  EXPECT_EQ(modern.cuda_oom[0].total_capacity_mib, 24217.6);
  EXPECT_EQ(modern.cuda_oom[0].free_mib, 11.06);

  const LauncherReport typo = ParseFixture("mgfn35_cuda_oom_capacty_typo_zero_bytes_free.log");
  ASSERT_EQ(typo.cuda_oom.size(), 1u);
  EXPECT_EQ(typo.cuda_oom[0].free_mib, 0.0);
  EXPECT_EQ(typo.cuda_oom[0].total_capacity_mib, 6144.0);

  // format_size prints "bytes" up to 1 KiB: 512 bytes is 1/2048 MiB, not 0.
  LauncherLogParser p;
  p.Feed(
      "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512 bytes. GPU 5 "
      "has a total capacity of 79.15 GiB of which 6.81 MiB is free.",
      1);
  ASSERT_EQ(p.report().cuda_oom.size(), 1u);
  EXPECT_EQ(p.report().cuda_oom[0].tried_to_allocate_mib, 512.0 / 1048576.0);
  EXPECT_EQ(p.report().cuda_oom[0].gpu, 5);
  EXPECT_EQ(p.report().cuda_oom[0].rank, 5);
}

// fidelity/stoke#31: a lone table line quoted in backticks before the `failed` line is not a
// second failure.
TEST(LauncherLogTest, LoneTracebackLineIsNotAFailure) {
  const LauncherReport r = ParseFixture("stoke31_torch_distributed_launch_sigkill_localrank0.log");
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].pid, 10398);
  EXPECT_EQ(r.failures[0].signal, "SIGKILL");
  EXPECT_EQ(r.teardown_signals, 1u);
}

// NVlabs/nvdiffrecmc#21: the peers the agent SIGKILLed after its 30 s grace ("Unable to shutdown
// process … forcefully exitting via 9") are teardown, not failures.
TEST(LauncherLogTest, ForcedPeerKillsAreNotFailures) {
  const LauncherReport r = ParseFixture("nvdiffrecmc21_torchrun_sigsegv_forced_sigkill_peers.log");
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].pid, 5528);
  EXPECT_EQ(r.failures[0].signal, "SIGSEGV");
  EXPECT_EQ(r.teardown_signals, 2u);
}

// ---- forms without a capture here (constructed in the sources' formats) ---------------------

// torch 1.9's table (errors/__init__.py then): "Root Cause:" first, "Other Failures:", fields
// without padding, "msg: \"Signal 15 (SIGTERM) received by PID …\"".
TEST(LauncherLogTest, Torch19Table) {
  const LauncherReport r = ParseText(
      "***************************************\n"
      "            train.py FAILED            \n"
      "=======================================\n"
      "Root Cause:\n"
      "[0]:\n"
      "  time: 2021-07-01_10:00:00\n"
      "  rank: 4 (local_rank: 0)\n"
      "  exitcode: 1 (pid: 100)\n"
      "  error_file: <N/A>\n"
      "  msg: \"Process failed with exitcode 1\"\n"
      "=======================================\n"
      "Other Failures:\n"
      "[1]:\n"
      "  time: 2021-07-01_10:00:01\n"
      "  rank: 5 (local_rank: 1)\n"
      "  exitcode: -15 (pid: 101)\n"
      "  error_file: <N/A>\n"
      "  msg: \"Signal 15 (SIGTERM) received by PID 101\"\n"
      "***************************************\n");
  ASSERT_EQ(r.failures.size(), 2u);
  EXPECT_TRUE(r.failures[0].root_cause);
  EXPECT_EQ(r.failures[0].rank, 4);
  EXPECT_EQ(r.failures[0].exitcode, 1);
  EXPECT_FALSE(r.failures[0].signal);
  EXPECT_FALSE(r.failures[0].host);  // 1.9 printed none
  EXPECT_EQ(r.failures[1].rank, 5);
  EXPECT_EQ(r.failures[1].signal, "SIGTERM");
  EXPECT_EQ(r.failures[1].time, "2021-07-01_10:00:01");
}

// A table pasted twice, and a table printed before the `failed` line: still one entry per pid.
TEST(LauncherLogTest, RepeatedReportsMerge) {
  const std::string table =
      "Root Cause (first observed failure):\n[0]:\n  time      : 2024-06-16_20:34:34\n"
      "  host      : node-a\n  rank      : 8 (local_rank: 0)\n  exitcode  : -6 (pid: 76626)\n"
      "  error_file: <N/A>\n  traceback : Signal 6 (SIGABRT) received by PID 76626\n"
      "============================================================\n";
  const LauncherReport r = ParseText(
      table + table +
      "E0616 20:34:35.000000 1 api.py:1] failed (exitcode: -6) local_rank: 0 (pid: 76626) of "
      "binary: python\n");
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].rank, 8);
  EXPECT_EQ(r.failures[0].host, "node-a");
  EXPECT_EQ(r.failures[0].time, "2024-06-16_20:34:34");  // the table's
  EXPECT_EQ(r.failures[0].signal, "SIGABRT");
  EXPECT_EQ(r.failures[0].line_no, 2u);
}

// An entry cut before its exitcode line joins the `failed` line of the same local rank.
TEST(LauncherLogTest, CutTableEntryMergesByLocalRank) {
  const LauncherReport r = ParseText(
      "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 2 "
      "(pid: 3167) of binary: python\n"
      "Failures:\n[1]:\n  time      : 2022-03-28_19:11:13\n  host      : 5c6c6efee186\n"
      "  rank      : 2 (local_rank: 2)\n\nTraceback (most recent call last):\n");
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].pid, 3167);
  EXPECT_EQ(r.failures[0].rank, 2);
  EXPECT_EQ(r.failures[0].host, "5c6c6efee186");
}

// srun prints strsignal() for a task killed by a signal, " (core dumped)" after it, and "Out Of
// Memory" for the cgroup OOM kill (Slurm's _task_finish); task lists are ranges and commas.
TEST(LauncherLogTest, SrunSignalsAndTaskLists) {
  const LauncherReport r = ParseText(
      "srun: error: gpu-a01: task 3: Killed\n"
      "srun: error: gpu-a02: tasks 4-5,7: Segmentation fault (core dumped)\n"
      "srun: error: gpu-a03: task 9: Out Of Memory\n"
      "srun: error: Unable to create step for job 42: Invalid generic resource specification\n");
  ASSERT_EQ(r.failures.size(), 5u);
  EXPECT_EQ(r.failures[0].rank, 3);
  EXPECT_EQ(r.failures[0].signal, "SIGKILL");
  EXPECT_FALSE(r.failures[0].exitcode);
  EXPECT_EQ(r.failures[1].rank, 4);
  EXPECT_EQ(r.failures[2].rank, 5);
  EXPECT_EQ(r.failures[3].rank, 7);
  EXPECT_EQ(r.failures[3].signal, "SIGSEGV");
  EXPECT_EQ(r.failures[4].rank, 9);
  EXPECT_EQ(r.failures[4].host, "gpu-a03");
  EXPECT_FALSE(r.failures[4].signal);
}

// The launcher stopped from outside: torch elastic's SignalException ("Process %d got signal:
// %s", multiprocessing/api.py), DeepSpeed's "Main process received SIGTERM, exiting"
// (launch.py sig_names), slurmstepd's "*** STEP … CANCELLED AT … ***". A worker's own "Received
// SIGTERM" (Lightning tags it "[rank: N]") is the launcher's teardown reaching it, not that.
TEST(LauncherLogTest, LauncherSignalled) {
  for (std::string_view line :
       {"torch.distributed.elastic.multiprocessing.api.SignalException: Process 40121 got "
        "signal: 15",
        "[2024-01-01 00:00:00,000] [INFO] [launch.py:1:sigkill_handler] Main process received "
        "SIGTERM, exiting",
        "slurmstepd: error: *** STEP 1234.0 ON gpu-a01 CANCELLED AT 2024-03-04T10:11:12 DUE TO "
        "TIME LIMIT ***",
        "W0616 00:37:22.830000 4015698 torch/distributed/elastic/agent/server/api.py:719] Received "
        "Signals.SIGTERM death signal, shutting down workers",
        "Received SIGTERM, shutting down"}) {
    LauncherLogParser p;
    p.Feed(line, 1);
    EXPECT_TRUE(p.report().launcher_signalled) << line;
    EXPECT_TRUE(LooksLikeLauncherLine(line) || line.starts_with("Received")) << line;
  }
  LauncherLogParser worker;
  worker.Feed("[rank: 1] Received SIGTERM: 15", 1);
  EXPECT_FALSE(worker.report().launcher_signalled);
}

TEST(LauncherLogTest, StateIsBounded) {
  LauncherLogParser p;
  p.Feed("srun: error: n1: tasks 0-99999: Killed", 1);
  EXPECT_EQ(p.report().failures.size(), kMaxLauncherEntries);
  for (size_t i = 0; i < kMaxLauncherEntries + 10; ++i) {
    p.Feed("[Rank " + std::to_string(i) +
               "] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=X, "
               "Timeout(ms)=1) ran for 2 milliseconds before timing out.",
           i + 2);
  }
  EXPECT_EQ(p.report().watchdog_timeouts.size(), kMaxLauncherEntries);
}

// ---- garbage and cut lines -------------------------------------------------------------------

TEST(LauncherLogTest, GarbageAndTruncatedLines) {
  LauncherLogParser p;
  size_t n = 0;
  for (std::string_view s : {"",
                             "\r",
                             "[0]:",
                             "  time      :",
                             "  exitcode  : (pid: )",
                             "  exitcode  : -999999999999 (pid: 1)",
                             "failed (exitcode: ",
                             "failed (exitcode: x) local_rank: 1 (pid: 2)",
                             "exits with return code = ",
                             "srun: error: ",
                             "srun: error: h: tasks 5-2: Killed",
                             "srun: error: h: task : Killed",
                             "Watchdog caught collective operation timeout",
                             "Watchdog caught collective operation timeout: WorkNCCL(",
                             "CUDA out of memory. Tried to allocate ",
                             "CUDA out of memory. Tried to allocate 1.5",
                             "CUDA out of memory. Tried to allocate 99999999999999999999 GiB",
                             "[rank",
                             "[rank99999999999]:",
                             "Signal 9 (SIG",
                             "\xff\xfe",
                             "=========="}) {
    p.Feed(s, ++n);
  }
  const LauncherReport& r = p.report();
  // The one well-formed failure in there: "[0]:" then an exitcode line with a pid.
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].pid, 1);
  EXPECT_FALSE(r.failures[0].exitcode);       // out of range for an exit code
  ASSERT_EQ(r.watchdog_timeouts.size(), 1u);  // "WorkNCCL(" with nothing after it
  EXPECT_FALSE(r.watchdog_timeouts[0].seq);
  // "…Tried to allocate " alone loses its trailing blank and is no message; the other two are
  // messages whose size cannot be read.
  ASSERT_EQ(r.cuda_oom.size(), 2u);
  EXPECT_FALSE(r.cuda_oom[0].tried_to_allocate_mib);
  EXPECT_FALSE(r.cuda_oom[1].tried_to_allocate_mib);
  EXPECT_FALSE(r.cuda_oom[1].gpu);
  EXPECT_NO_THROW(LauncherReportJson(r).dump());
  EXPECT_FALSE(LooksLikeLauncherLine(""));
  EXPECT_FALSE(LooksLikeLauncherLine("Epoch 3: loss=0.1"));
}

TEST(LauncherLogTest, InvalidUtf8InHostSerialises) {
  LauncherLogParser p;
  p.Feed("srun: error: \xff\xfe: task 0: Exited with exit code 2", 1);
  ASSERT_EQ(p.report().failures.size(), 1u);
  const nlohmann::json j = LauncherReportJson(p.report());
  EXPECT_NO_THROW(j.dump());
  EXPECT_EQ(j["failures"][0]["exitcode"], 2);
}

}  // namespace
}  // namespace gpuwatch::logs
