// The agent's flags reach what they set: the --job-hang-* flags are the one hang policy of the
// job registry, the live diagnosis and (through the registry's gpuwatch_job_hung) the exported
// Prometheus rule.
#include "cli/agent_flags.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "analyze/diagnoser.h"
#include "analyze/testing/diagnose.h"

namespace gpuwatch::cli {
namespace {

TEST(AgentFlagsTest, TheHangFlagsReachTheRegistryAndTheDiagnosis) {
  CLI::App app;
  AgentFlags flags;
  AddAgentFlags(&app, &flags);
  app.parse("--job-hang-factor 3 --job-hang-min 20s --job-hang-in-phase 5m", false);
  auto o = MakeOptions(flags, "test");
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_DOUBLE_EQ(o->diagnosis.hang.factor, 3);
  EXPECT_DOUBLE_EQ(o->diagnosis.hang.min_s, 20);
  EXPECT_DOUBLE_EQ(o->diagnosis.hang.in_phase_s, 300);
  const jobs::JobRegistryOptions j = server::JobOptionsOf(*o);
  EXPECT_DOUBLE_EQ(j.hang.factor, 3);
  EXPECT_DOUBLE_EQ(j.hang.min_s, 20);
  EXPECT_DOUBLE_EQ(j.hang.in_phase_s, 300);
  server::Agent agent(*o, nullptr);
  EXPECT_DOUBLE_EQ(agent.diagnosis_options().hang.factor, 3);
  EXPECT_DOUBLE_EQ(agent.diagnosis_options().hang.min_s, 20);

  // And the engine judges by them: steps of 1 s stop at 200; with a 20 s minimum and a factor
  // of 3 the job is hung 20 s later, where the defaults (60 s) see nothing yet.
  std::string trace = analyze::testing::Node("n1", 100);
  for (int i = 0; i < 100; ++i) trace += analyze::testing::StepOf(101 + i, 0, 1.0, 0.1);
  for (int i = 0; i < 40; ++i) trace += analyze::testing::Gpu(201 + i, 0, "\"util_pct\":0");
  auto hung = analyze::testing::Diagnose(trace, {}, o->diagnosis);
  ASSERT_EQ(hung.size(), 1u);
  EXPECT_EQ(hung[0].cause, analyze::Cause::kJobHang);
  EXPECT_TRUE(analyze::testing::Diagnose(trace).empty());
}

TEST(AgentFlagsTest, BadHangFlagsAreRefusedByName) {
  CLI::App app;
  AgentFlags flags;
  AddAgentFlags(&app, &flags);
  app.parse("--job-hang-factor 0", false);
  auto o = MakeOptions(flags, "test");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("--job-hang-factor"), std::string::npos);
}

// Issue 18: with no --data-dir the agent keeps history in the XDG state dir (a user) or
// /var/lib/gpuwatch (root); "none" keeps nothing.
TEST(AgentFlagsTest, DataDirDefaultsToTheStateDirAndNoneKeepsNothing) {
  const std::string tmp = ::testing::TempDir() + "/agent_flags_state_" + std::to_string(getpid());
  std::filesystem::remove_all(tmp);
  ASSERT_EQ(setenv("XDG_STATE_HOME", tmp.c_str(), 1), 0);
  EXPECT_EQ(UserStateDir(), tmp + "/gpuwatch");
  EXPECT_EQ(DefaultDataDir(), geteuid() == 0 ? "/var/lib/gpuwatch" : tmp + "/gpuwatch");
  ASSERT_EQ(unsetenv("XDG_STATE_HOME"), 0);
  const char* home = getenv("HOME");
  if (home && *home) {
    EXPECT_EQ(UserStateDir(), std::string(home) + "/.local/state/gpuwatch");
  }

  AgentFlags none;
  none.data_dir = "none";
  ASSERT_TRUE(ResolveDataDir(&none).ok());
  EXPECT_EQ(none.data_dir, "");
  AgentFlags given;
  given.data_dir = tmp + "/given";
  ASSERT_TRUE(ResolveDataDir(&given).ok());
  EXPECT_EQ(given.data_dir, tmp + "/given") << "a given dir is kept as is";
  if (geteuid() != 0) {
    // Only where the default is the user's: root's would touch /var/lib.
    ASSERT_EQ(setenv("XDG_STATE_HOME", tmp.c_str(), 1), 0);
    AgentFlags dflt;
    ASSERT_TRUE(ResolveDataDir(&dflt).ok());
    EXPECT_EQ(dflt.data_dir, tmp + "/gpuwatch");
    struct stat sb {};
    ASSERT_EQ(stat(dflt.data_dir.c_str(), &sb), 0);
    EXPECT_EQ(sb.st_mode & 0777, 0700u);
    unsetenv("XDG_STATE_HOME");
  }
  std::filesystem::remove_all(tmp);
}

TEST(AgentFlagsTest, DefaultDiskBudgetFitsTheFileSystem) {
  // A tenth of the file system, within 64 MiB .. 5 GiB; 5 GiB when it cannot be read.
  const uint64_t b = DefaultDiskBudgetBytes(::testing::TempDir());
  EXPECT_GE(b, 64ull << 20);
  EXPECT_LE(b, 5ull << 30);
  EXPECT_EQ(DefaultDiskBudgetBytes("/nonexistent/dir"), 5ull << 30);
  AgentFlags f;
  f.data_dir = ::testing::TempDir();
  auto o = MakeStoreOptions(f);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->disk_budget_bytes, b);
  f.disk_budget = "100MiB";
  o = MakeStoreOptions(f);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->disk_budget_bytes, 100ull << 20);
}

// A hub's store takes agents' resends out of order and buffers 128 raw samples a series, not
// 512: a million series' buffers are its memory (bench/fleet/RESULTS.md, run 5). An agent keeps
// the store's defaults.
TEST(AgentFlagsTest, AHubsStoreIsShapedForManySeries) {
  AgentFlags f;
  f.data_dir = ::testing::TempDir();
  auto agent = MakeStoreOptions(f);
  ASSERT_TRUE(agent.ok());
  EXPECT_EQ(agent->head.block_shift, store::kDefaultBlockShift);
  EXPECT_EQ(agent->head.out_of_order_window_ms, 0);
  f.is_hub = true;
  auto hub = MakeStoreOptions(f);
  ASSERT_TRUE(hub.ok()) << hub.status().ToString();
  EXPECT_EQ(hub->head.block_shift, 7);
  EXPECT_EQ(hub->head.out_of_order_window_ms, 3600 * 1000);
}

}  // namespace
}  // namespace gpuwatch::cli

namespace gpuwatch::cli {
namespace {

TEST(AgentFlagsTest, PricesAndQuotasParseOrAreRefusedByEntry) {
  auto p = ParseGpuPrices("H100=2.49, A100-SXM4=1.10,*=0.5");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[1].model, "A100-SXM4");
  EXPECT_DOUBLE_EQ((*p)[1].usd_per_gpu_hour, 1.10);
  EXPECT_EQ((*p)[2].model, "*");
  EXPECT_TRUE(ParseGpuPrices("")->empty());
  for (const char* bad : {"H100", "=2", "H100=-1", "H100=cheap", "H100=inf"}) {
    auto r = ParseGpuPrices(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
  auto q = ParseQuotas("nlp=5000/30d,vision-2=800/7d");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_EQ(q->size(), 2u);
  EXPECT_EQ((*q)[1].project, "vision-2");
  EXPECT_DOUBLE_EQ((*q)[0].gpu_hours, 5000);
  EXPECT_EQ((*q)[0].period_ms, 30LL * 86400 * 1000);
  for (const char* bad : {"nlp=5000", "nlp/30d", "=5/1d", "nlp=0/30d", "nlp=5/soon"})
    EXPECT_FALSE(ParseQuotas(bad).ok()) << bad;
  AgentFlags f;
  f.quotas = "nlp=5/1d";
  f.gpu_prices = "H100=2";
  auto o = MakeOptions(f, "test");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->accounting.quotas.size(), 1u);
  EXPECT_EQ(o->accounting.prices.size(), 1u);
  EXPECT_EQ(o->accounting.retention_ms, 400LL * 86400 * 1000);
  f.accounting_retention = "forever";
  EXPECT_FALSE(MakeOptions(f, "test").ok());
}

TEST(AgentFlagsTest, SacctIsAskedEveryIntervalUnlessOff) {
  AgentFlags f;  // the defaults: sacct from PATH, every 5 minutes
  auto o = MakeOptions(f, "test");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->sacct.program, "sacct");
  EXPECT_EQ(o->sacct.interval, std::chrono::minutes(5));
  f.sacct = "off";
  f.sacct_interval = "30s";
  o = MakeOptions(f, "test");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->sacct.program, "");
  EXPECT_EQ(o->sacct.interval, std::chrono::seconds(30));
  for (const char* bad : {"0s", "500ms", "soon"}) {
    f.sacct_interval = bad;
    auto r = MakeOptions(f, "test");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--sacct-interval"), std::string::npos);
  }
}

}  // namespace
}  // namespace gpuwatch::cli
