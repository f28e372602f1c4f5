#include "cli/slurm_cmd.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <time.h>

#include <map>
#include <nlohmann/json.hpp>

#include "common/testing/test_files.h"

namespace gpuwatch::cli {
namespace {

class SlurmCmdTest : public ::testing::Test {
 protected:
  // Slurm prints local time; these expectations are for a cluster on UTC.
  void SetUp() override {
    const char* tz = getenv("TZ");
    if (tz) saved_tz_ = tz;
    setenv("TZ", "UTC", 1);
    tzset();
  }
  void TearDown() override {
    if (saved_tz_)
      setenv("TZ", saved_tz_->c_str(), 1);
    else
      unsetenv("TZ");
    tzset();
  }
  std::optional<std::string> saved_tz_;
};

EnvFn Env(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// tests/fixtures/slurm/scontrol_show_job.txt: a real capture (GooseSLURM#32; README there).
TEST_F(SlurmCmdTest, ParsesARealScontrolShowJob) {
  const ScontrolJob j = ParseScontrolShowJob(gpuwatch::testing::ReadFileOrEmpty(
      gpuwatch::testing::FixtureDir("slurm/scontrol_show_job.txt")));
  ASSERT_TRUE(j.submit_s && j.start_s);
  EXPECT_DOUBLE_EQ(*j.submit_s, 1628519417);  // 2021-08-09T14:30:17Z
  EXPECT_DOUBLE_EQ(*j.start_s, 1628519418);
  EXPECT_EQ(j.name, "velocity_python_PinAndTrigger.py-00");
  EXPECT_EQ(j.exit_code, 0);  // ExitCode=0:0
  // "Unknown" (never started) and junk leave the times unset.
  const ScontrolJob pending = ParseScontrolShowJob(
      "JobId=5 JobName=x\n   SubmitTime=2021-08-09T14:30:17 StartTime=Unknown\n");
  EXPECT_TRUE(pending.submit_s);
  EXPECT_FALSE(pending.start_s);
  EXPECT_FALSE(ParseScontrolShowJob("").submit_s);
}

TEST_F(SlurmCmdTest, PrologSaysWhoOwnsWhichGpusSinceWhen) {
  ScontrolJob sc;
  sc.submit_s = 1000;
  sc.start_s = 4000;
  sc.name = "train";
  auto line = SlurmMessage(true,
                           Env({{"SLURM_JOB_ID", "4242"},
                                {"SLURM_JOB_USER", "alice"},
                                {"SLURM_JOB_ACCOUNT", "nlp"},
                                {"SLURM_JOB_GPUS", "0,3"}}),
                           sc, 4002);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  auto m = nlohmann::json::parse(*line);
  EXPECT_EQ(m["type"], "allocation");
  EXPECT_EQ(m["job"], "4242");
  EXPECT_EQ(m["user"], "alice");
  EXPECT_EQ(m["project"], "nlp");
  EXPECT_EQ(m["template"], "train");
  EXPECT_EQ(m["devices"], nlohmann::json::array({0, 3}));
  EXPECT_EQ(m["t"], 4000.0);
  EXPECT_EQ(m["submit_t"], 1000.0);
  // Without scontrol: now, and no queue wait.
  line = SlurmMessage(true, Env({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_USER", "bob"}}), {}, 4002);
  ASSERT_TRUE(line.ok());
  m = nlohmann::json::parse(*line);
  EXPECT_EQ(m["t"], 4002.0);
  EXPECT_FALSE(m.contains("submit_t"));
  EXPECT_EQ(m["devices"], nlohmann::json::array());
  // What cannot be sent is named.
  EXPECT_NE(SlurmMessage(true, Env({{"SLURM_JOB_USER", "bob"}}), {}, 1)
                .status()
                .message()
                .find("SLURM_JOB_ID"),
            std::string::npos);
  EXPECT_FALSE(SlurmMessage(true, Env({{"SLURM_JOB_ID", "1; rm -rf /"}}), {}, 1).ok());
  EXPECT_NE(SlurmMessage(true, Env({{"SLURM_JOB_ID", "1"}}), {}, 1)
                .status()
                .message()
                .find("SLURM_JOB_USER"),
            std::string::npos);
  EXPECT_FALSE(
      SlurmMessage(
          true,
          Env({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_USER", "a"}, {"SLURM_JOB_GPUS", "gpu:a100:2"}}),
          {}, 1)
          .ok());
}

TEST_F(SlurmCmdTest, EpilogCarriesTheExitCode) {
  auto m = nlohmann::json::parse(
      *SlurmMessage(false, Env({{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_EXIT_CODE2", "3:0"}}), {}, 5));
  EXPECT_EQ(m["type"], "release");
  EXPECT_EQ(m["exit_code"], 3);
  m = nlohmann::json::parse(
      *SlurmMessage(false, Env({{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_EXIT_CODE2", "0:9"}}), {}, 5));
  EXPECT_EQ(m["exit_code"], 137);  // killed by SIGKILL
  // The wait() status: exit 2 is 0x200.
  m = nlohmann::json::parse(
      *SlurmMessage(false, Env({{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_EXIT_CODE", "512"}}), {}, 5));
  EXPECT_EQ(m["exit_code"], 2);
  m = nlohmann::json::parse(*SlurmMessage(false, Env({{"SLURM_JOB_ID", "9"}}), {}, 5));
  EXPECT_FALSE(m.contains("exit_code"));
  // With no variable, scontrol's ExitCode (as the job ends: "1:0", or a signal's "0:15").
  EXPECT_EQ(ParseScontrolShowJob("JobState=COMPLETING ExitCode=1:0").exit_code, 1);
  const ScontrolJob killed = ParseScontrolShowJob("JobState=CANCELLED ExitCode=0:15");
  EXPECT_EQ(killed.exit_code, 143);
  m = nlohmann::json::parse(*SlurmMessage(false, Env({{"SLURM_JOB_ID", "9"}}), killed, 5));
  EXPECT_EQ(m["exit_code"], 143);
  // slurmd's variable stands over scontrol's.
  m = nlohmann::json::parse(*SlurmMessage(
      false, Env({{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_EXIT_CODE2", "0:0"}}), killed, 5));
  EXPECT_EQ(m["exit_code"], 0);
  EXPECT_FALSE(ParseScontrolShowJob("ExitCode=x:0").exit_code);
}

}  // namespace
}  // namespace gpuwatch::cli
