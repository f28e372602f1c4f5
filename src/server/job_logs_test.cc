// Declared job logs (issue 17, D5): only regular files under the allowed roots, owned by the
// declaring uid (root included), never through a symbolic link.
#include "server/job_logs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace gpuwatch::server {
namespace {

namespace fs = std::filesystem;

TEST(JobLogPolicy, RootsAndForbiddenDirectories) {
  JobLogPolicy p;
  p.roots = {"/tmp", "/scratch"};
  p.forbidden.push_back("/tmp/gw-data");
  EXPECT_TRUE(CheckJobLogPath(p, "/tmp/run1/train.log", 1000).ok());
  EXPECT_TRUE(CheckJobLogPath(p, "/scratch/a.log", 1000).ok());
  auto etc = CheckJobLogPath(p, "/etc/shadow", 0);
  ASSERT_FALSE(etc.ok());
  EXPECT_NE(etc.message().find("under /etc"), std::string::npos) << etc.message();
  EXPECT_FALSE(CheckJobLogPath(p, "/opt/x.log", 0).ok());
  EXPECT_FALSE(CheckJobLogPath(p, "/tmpfoo/x.log", 0).ok()) << "a prefix is not a directory";
  EXPECT_FALSE(CheckJobLogPath(p, "/tmp/gw-data/admin.token", 0).ok());
  EXPECT_FALSE(CheckJobLogPath(p, "/proc/1/environ", 0).ok());
}

TEST(JobLogPolicy, HomeOfTheDeclaringUid) {
  JobLogPolicy p;
  p.roots = {"~"};
  // Root's home is /root, which is forbidden; a uid without a home has no "~".
  EXPECT_FALSE(CheckJobLogPath(p, "/root/x.log", 0).ok());
  EXPECT_FALSE(CheckJobLogPath(p, "/home/nobody/x.log", 4'000'000'000u).ok());
}

TEST(JobLogPolicy, ParseRoots) {
  auto r = ParseJobLogRoots("~, /tmp ,/scratch/");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<std::string>{"~", "/tmp", "/scratch/"}));
  EXPECT_FALSE(ParseJobLogRoots("/").ok());
  EXPECT_FALSE(ParseJobLogRoots("relative/dir").ok());
  EXPECT_FALSE(ParseJobLogRoots("/tmp/../etc").ok());
}

class JobLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gw_joblogs_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<JobLogLine> FollowAndPoll(const std::string& path, uint32_t uid) {
    JobLogPolicy p;
    p.roots = {fs::temp_directory_path().string()};
    JobLogs logs(p);
    logs.Follow({"j", 0, path, uid});
    return logs.Poll();
  }
  fs::path dir_;
};

TEST_F(JobLogsTest, OwnFileUnderARootIsRead) {
  std::ofstream(dir_ / "train.log") << "step 1\nstep 2\n";
  auto lines = FollowAndPoll(dir_ / "train.log", ::getuid());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].line, "step 2");
}

TEST_F(JobLogsTest, D5_SymlinksAndForbiddenFilesAreNeverRead) {
  // /etc/hostname stands for /etc/shadow: a file under a forbidden directory, owned by root.
  ASSERT_TRUE(fs::exists("/etc/hostname") || fs::exists("/etc/passwd"));
  const fs::path target = fs::exists("/etc/hostname") ? "/etc/hostname" : "/etc/passwd";
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  const uint32_t owner = st.st_uid;
  // Named directly, by its owner: outside the roots.
  EXPECT_TRUE(FollowAndPoll(target, owner).empty());
  // Through a link in an allowed directory.
  fs::create_symlink(target, dir_ / "link.log");
  EXPECT_TRUE(FollowAndPoll(dir_ / "link.log", owner).empty());
  // Through a linked directory on the way.
  fs::create_directory_symlink(target.parent_path(), dir_ / "etc");
  EXPECT_TRUE(FollowAndPoll(dir_ / "etc" / target.filename(), owner).empty());
}

TEST_F(JobLogsTest, D5_RootIsHeldToOwnershipToo) {
  std::ofstream(dir_ / "other.log") << "secret\n";
  if (::getuid() != 0) GTEST_SKIP() << "needs root to chown";
  ASSERT_EQ(::chown((dir_ / "other.log").c_str(), 65534, 65534), 0);
  // A uid-0 sender no longer reads a file another uid owns.
  EXPECT_TRUE(FollowAndPoll(dir_ / "other.log", 0).empty());
  EXPECT_EQ(FollowAndPoll(dir_ / "other.log", 65534).size(), 1u);
}

TEST_F(JobLogsTest, FilesPerUidAreBounded) {
  JobLogPolicy p;
  p.roots = {fs::temp_directory_path().string()};
  JobLogs logs(p, /*max_files=*/100, /*max_files_per_uid=*/2);
  EXPECT_TRUE(logs.Follow({"a", 0, (dir_ / "1").string(), 1000}));
  EXPECT_TRUE(logs.Follow({"a", 1, (dir_ / "2").string(), 1000}));
  EXPECT_FALSE(logs.Follow({"b", 0, (dir_ / "3").string(), 1000}));
  EXPECT_TRUE(logs.Follow({"c", 0, (dir_ / "4").string(), 1001})) << "another uid has its own";
  logs.EndJob("a");
  EXPECT_TRUE(logs.Follow({"b", 0, (dir_ / "3").string(), 1000})) << "ended jobs free their share";
}

}  // namespace
}  // namespace gpuwatch::server
