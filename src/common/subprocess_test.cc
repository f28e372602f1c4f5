#include "common/subprocess.h"

#include <gtest/gtest.h>

namespace gpuwatch {
namespace {

using std::chrono::milliseconds;

TEST(RunCommand, ReadsStdoutWithTheEnvironmentSetOverTheCallers) {
  ::setenv("GPUWATCH_TEST_KEPT", "kept", 1);
  ::setenv("GPUWATCH_TEST_SET", "old", 1);
  auto r = RunCommand({"sh", "-c", "echo \"$GPUWATCH_TEST_KEPT $GPUWATCH_TEST_SET\"; echo err >&2"},
                      {{"GPUWATCH_TEST_SET", "new"}}, milliseconds(10000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->out, "kept new\n");  // stderr is not read
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_FALSE(r->timed_out);
}

TEST(RunCommand, ExitCodesTimeoutsAndOutputBound) {
  auto failed = RunCommand({"sh", "-c", "echo partial; exit 3"}, {}, milliseconds(10000));
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->exit_code, 3);
  EXPECT_EQ(failed->out, "partial\n");
  const auto start = std::chrono::steady_clock::now();
  auto slow = RunCommand({"sleep", "30"}, {}, milliseconds(200));
  ASSERT_TRUE(slow.ok());
  EXPECT_TRUE(slow->timed_out);
  EXPECT_EQ(slow->exit_code, 128 + 9);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  auto big = RunCommand({"sh", "-c", "yes | head -c 100000"}, {}, milliseconds(10000), 100);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->out.size(), 100u);
  EXPECT_EQ(big->exit_code, 0);  // read to the end, so the writer was not stopped by a full pipe
}

TEST(RunCommand, AMissingProgramIsNotFound) {
  EXPECT_FALSE(ProgramExists("gpuwatch-no-such-program"));
  EXPECT_TRUE(ProgramExists("sh"));
  EXPECT_TRUE(ProgramExists("/bin/sh"));
  EXPECT_FALSE(ProgramExists("/etc/passwd"));  // not executable
  EXPECT_EQ(RunCommand({"gpuwatch-no-such-program"}, {}, milliseconds(1000)).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(RunCommand({}, {}, milliseconds(1000)).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpuwatch
