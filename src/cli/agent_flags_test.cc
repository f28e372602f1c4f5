// The agent's flags reach what they set: the --job-hang-* flags are the one hang policy of the
// job registry, the live diagnosis and (through the registry's gpuwatch_job_hung) the exported
// Prometheus rule.
#include "cli/agent_flags.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gpuwatch::cli
