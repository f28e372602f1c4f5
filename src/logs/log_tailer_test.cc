#include "logs/log_tailer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace gpuwatch::logs {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, named after the test and the process so parallel CTest runs of
// this binary never share one.
class LogTailerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/logtail_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
           std::to_string(::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = dir_ + "/job.log";
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    fs::remove_all(dir_);
  }

  // A writer's descriptor, kept open like a job's stdout: O_APPEND as `>>` opens it.
  int OpenWriter(const std::string& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0) << path;
    fds_.push_back(fd);
    return fd;
  }
  static void Write(int fd, const std::string& s) {
    ASSERT_EQ(::write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }

  // Polls once and returns the texts; fails the test on a non-OK status.
  static std::vector<std::string> PollTexts(LogTailer& t) {
    std::vector<TailedLine> lines;
    Status st = t.Poll(&lines);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::vector<std::string> texts;
    for (auto& l : lines) texts.push_back(l.text);
    return texts;
  }

  using Lines = std::vector<std::string>;
  std::string dir_, path_;
  std::vector<int> fds_;
};

TEST_F(LogTailerTest, AppendsAcrossPolls) {
  const int w = OpenWriter(path_);
  Write(w, "one\ntwo\n");
  LogTailer t(path_);
  EXPECT_EQ(PollTexts(t), (Lines{"one", "two"}));
  EXPECT_EQ(PollTexts(t), Lines{});
  Write(w, "three\n");
  EXPECT_EQ(PollTexts(t), Lines{"three"});
  EXPECT_EQ(t.stats().lines, 3u);
  EXPECT_EQ(t.stats().bytes, 14u);
  EXPECT_EQ(t.stats().rotations, 0u);
}

TEST_F(LogTailerTest, PartialLineIsHeldUntilItsNewline) {
  const int w = OpenWriter(path_);
  LogTailer t(path_);
  Write(w, "epoch 1 lo");
  EXPECT_EQ(PollTexts(t), Lines{});
  Write(w, "ss=0.5");
  EXPECT_EQ(PollTexts(t), Lines{});
  Write(w, "\nnext");
  std::vector<TailedLine> lines;
  ASSERT_TRUE(t.Poll(&lines).ok());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, "epoch 1 loss=0.5");
  EXPECT_FALSE(lines[0].cut);
  // The job ended without a final newline: the held bytes come out flagged.
  lines.clear();
  t.FlushPartial(&lines);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, "next");
  EXPECT_TRUE(lines[0].cut);
}

TEST_F(LogTailerTest, StripsCarriageReturnBeforeNewlineOnly) {
  const int w = OpenWriter(path_);
  Write(w, "dos line\r\n\r\nmid\rline\r");
  LogTailer t(path_);
  EXPECT_EQ(PollTexts(t), (Lines{"dos line", ""}));
  Write(w, "\n");  // the '\r' arrived in the previous read, its '\n' only now
  EXPECT_EQ(PollTexts(t), Lines{"mid\rline"});
}

TEST_F(LogTailerTest, RotationByRenameKeepsLinesWrittenToTheOldFileBeforeThePoll) {
  const int old_fd = OpenWriter(path_);
  Write(old_fd, "a1\n");
  LogTailer t(path_);
  EXPECT_EQ(PollTexts(t), Lines{"a1"});
  // logrotate's default: rename, then create a new file at the path. The writer still holds
  // the old file and appends to it before it reopens.
  fs::rename(path_, path_ + ".1");
  Write(old_fd, "a2 after rename\na3 unterminated");
  const int new_fd = OpenWriter(path_);
  Write(new_fd, "b1\n");
  std::vector<TailedLine> lines;
  ASSERT_TRUE(t.Poll(&lines).ok());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].text, "a2 after rename");
  EXPECT_FALSE(lines[0].cut);
  EXPECT_EQ(lines[1].text, "a3 unterminated");  // the old file's end, never to be completed
  EXPECT_TRUE(lines[1].cut);
  EXPECT_EQ(lines[2].text, "b1");
  EXPECT_EQ(t.stats().rotations, 1u);
  Write(new_fd, "b2\n");
  EXPECT_EQ(PollTexts(t), Lines{"b2"});
}

TEST_F(LogTailerTest, RenamedAwayWithoutNewFileKeepsReadingTheOldOne) {
  const int w = OpenWriter(path_);
  LogTailer t(path_);
  EXPECT_EQ(PollTexts(t), Lines{});
  fs::rename(path_, path_ + ".1");  // between rename and create
  Write(w, "still here\n");
  EXPECT_EQ(PollTexts(t), Lines{"still here"});
  EXPECT_EQ(t.stats().rotations, 0u);
}

TEST_F(LogTailerTest, CopyTruncateRestartsAtZero) {
  const int w = OpenWriter(path_);
  Write(w, "before-1\nbefore-2\n");
  LogTailer t(path_);
  EXPECT_EQ(PollTexts(t), (Lines{"before-1", "before-2"}));
  // logrotate copytruncate: copy, then truncate in place; the O_APPEND writer goes on at 0.
  fs::copy_file(path_, path_ + ".1");
  ASSERT_EQ(::truncate(path_.c_str(), 0), 0);
  Write(w, "after\n");
  EXPECT_EQ(PollTexts(t), Lines{"after"});
  EXPECT_EQ(t.stats().truncations, 1u);
  EXPECT_EQ(t.stats().rotations, 0u);
}

TEST_F(LogTailerTest, TruncatedAndRewrittenLongerBetweenPollsIsATruncation) {
  const int w = OpenWriter(path_);
  Write(w, "after rotation\n");
  LogTailer t(path_);
  EXPECT_EQ(PollTexts(t), Lines{"after rotation"});
  // `: > log; echo ... >> log` between two polls: longer than before, so the size alone
  // says "grew"; the bytes before the old offset say "rewritten".
  ASSERT_EQ(::truncate(path_.c_str(), 0), 0);
  Write(w, "after truncation, longer\n");
  EXPECT_EQ(PollTexts(t), Lines{"after truncation, longer"});
  EXPECT_EQ(t.stats().truncations, 1u);
  // Plain growth is no truncation.
  Write(w, "more\n");
  EXPECT_EQ(PollTexts(t), Lines{"more"});
  EXPECT_EQ(t.stats().truncations, 1u);
}

TEST_F(LogTailerTest, DeletedAndRecreatedIsANewFile) {
  int w = OpenWriter(path_);
  Write(w, "first life with a long line\n");
  LogTailer t(path_);
  EXPECT_EQ(PollTexts(t), Lines{"first life with a long line"});
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  EXPECT_EQ(PollTexts(t), Lines{});  // gone: the open descriptor is all there is
  w = OpenWriter(path_);
  Write(w, "second\n");
  EXPECT_EQ(PollTexts(t), Lines{"second"});
  EXPECT_EQ(t.stats().rotations, 1u);
}

TEST_F(LogTailerTest, MissingFileReportsOnceThenReadsItFromTheStartWhenItAppears) {
  LogTailerOptions opts;
  opts.start_at_end = true;  // does not apply: the file is created after the start
  LogTailer t(path_, opts);
  std::vector<TailedLine> lines;
  Status st = t.Poll(&lines);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_TRUE(t.Poll(&lines).ok()) << "the same condition is reported once";
  EXPECT_TRUE(t.Poll(&lines).ok());
  EXPECT_FALSE(t.is_open());
  const int w = OpenWriter(path_);
  Write(w, "born\n");
  EXPECT_EQ(PollTexts(t), Lines{"born"});
  EXPECT_TRUE(t.is_open());
}

TEST_F(LogTailerTest, StartAtEndSkipsExistingContentAndFlagsTheLineUnderWay) {
  const int w = OpenWriter(path_);
  Write(w, "history\nhalf a li");
  LogTailerOptions opts;
  opts.start_at_end = true;
  LogTailer t(path_, opts);
  EXPECT_EQ(PollTexts(t), Lines{});
  Write(w, "ne\nfresh\n");
  std::vector<TailedLine> lines;
  ASSERT_TRUE(t.Poll(&lines).ok());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text, "ne");
  EXPECT_TRUE(lines[0].cut);
  EXPECT_EQ(lines[1].text, "fresh");
  EXPECT_FALSE(lines[1].cut);
}

TEST_F(LogTailerTest, DefaultReadsExistingContentFromTheStart) {
  const int w = OpenWriter(path_);
  Write(w, "written before the first poll\n");
  LogTailer t(path_);
  EXPECT_EQ(PollTexts(t), Lines{"written before the first poll"});
}

TEST_F(LogTailerTest, OverLongLineComesOutInCutPieces) {
  const int w = OpenWriter(path_);
  LogTailerOptions opts;
  opts.max_line_bytes = 16;
  LogTailer t(path_, opts);
  Write(w, std::string(40, 'x') + "\nshort\n" + std::string(32, 'y') + "\n");
  std::vector<TailedLine> lines;
  ASSERT_TRUE(t.Poll(&lines).ok());
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0].text, std::string(16, 'x'));
  EXPECT_EQ(lines[1].text, std::string(16, 'x'));
  EXPECT_EQ(lines[2].text, std::string(8, 'x'));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(lines[i].cut) << i;
  EXPECT_EQ(lines[3].text, "short");
  EXPECT_FALSE(lines[3].cut);
  // Exactly two pieces: no empty third piece for the newline at the boundary.
  EXPECT_EQ(lines[4].text, std::string(16, 'y'));
  EXPECT_EQ(lines[5].text, std::string(16, 'y'));
  EXPECT_TRUE(lines[5].cut);
  EXPECT_EQ(t.stats().cut_lines, 5u);
}

TEST_F(LogTailerTest, OverLongLineIsCutOnAUtf8Boundary) {
  const int w = OpenWriter(path_);
  LogTailerOptions opts;
  opts.max_line_bytes = 16;
  LogTailer t(path_, opts);
  // 14 ASCII bytes, then "é" (2 bytes) and "€" (3 bytes): byte 16 falls inside the "€".
  Write(w, std::string(14, 'a') + "\xc3\xa9\xe2\x82\xac" + "z\n");
  std::vector<TailedLine> lines;
  ASSERT_TRUE(t.Poll(&lines).ok());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text, std::string(14, 'a') + "\xc3\xa9");
  EXPECT_EQ(lines[1].text, "\xe2\x82\xacz");
}

TEST_F(LogTailerTest, PerPollByteCapLeavesTheRestForTheNextPoll) {
  const int w = OpenWriter(path_);
  std::string all;
  for (int i = 0; i < 100; ++i) all += "line " + std::to_string(1000 + i) + "\n";  // 10 bytes
  Write(w, all);
  LogTailerOptions opts;
  opts.max_bytes_per_poll = 95;
  LogTailer t(path_, opts);
  std::vector<std::string> got;
  int polls = 0;
  while (got.size() < 100 && polls < 50) {
    const uint64_t before = t.stats().bytes;
    auto texts = PollTexts(t);
    EXPECT_LE(t.stats().bytes - before, 95u);
    got.insert(got.end(), texts.begin(), texts.end());
    ++polls;
  }
  ASSERT_EQ(got.size(), 100u);
  EXPECT_EQ(got.front(), "line 1000");
  EXPECT_EQ(got.back(), "line 1099");
  EXPECT_EQ(polls, 11);  // 1000 bytes at 95 per poll
}

TEST_F(LogTailerTest, ByteCapDefersTheSwitchUntilTheOldFileIsRead) {
  const int old_fd = OpenWriter(path_);
  LogTailerOptions opts;
  opts.max_bytes_per_poll = 8;
  LogTailer t(path_, opts);
  EXPECT_EQ(PollTexts(t), Lines{});
  fs::rename(path_, path_ + ".1");
  Write(old_fd, "old-1\nold-2\n");  // 12 bytes: more than one poll
  Write(OpenWriter(path_), "new\n");
  std::vector<std::string> got;
  for (int i = 0; i < 5; ++i) {
    auto texts = PollTexts(t);
    got.insert(got.end(), texts.begin(), texts.end());
  }
  EXPECT_EQ(got, (Lines{"old-1", "old-2", "new"}));
  EXPECT_EQ(t.stats().rotations, 1u);
}

TEST_F(LogTailerTest, CheckCallbackRefusesOnceAndIsRetried) {
  const int w = OpenWriter(path_);
  Write(w, "secret\n");
  bool allow = false;
  struct stat seen {};
  LogTailerOptions opts;
  opts.check = [&](const struct stat& st) {
    seen = st;
    if (!allow) return Status::PermissionDenied(path_ + ": owner is not the job's user");
    return Status::Ok();
  };
  LogTailer t(path_, opts);
  std::vector<TailedLine> lines;
  Status st = t.Poll(&lines);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
  EXPECT_EQ(seen.st_uid, ::getuid());
  EXPECT_TRUE(S_ISREG(seen.st_mode));
  EXPECT_TRUE(t.Poll(&lines).ok());
  EXPECT_TRUE(lines.empty());
  EXPECT_FALSE(t.is_open());
  allow = true;
  EXPECT_EQ(PollTexts(t), Lines{"secret"});
}

TEST_F(LogTailerTest, FifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  bool checked = false;
  LogTailerOptions opts;
  opts.check = [&](const struct stat&) {
    checked = true;
    return Status::Ok();
  };
  LogTailer t(path_, opts);
  std::vector<TailedLine> lines;
  Status st = t.Poll(&lines);  // would hang here without O_NONBLOCK
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("FIFO"), std::string::npos) << st.message();
  EXPECT_FALSE(checked) << "non-regular files are refused before the check runs";
  EXPECT_TRUE(t.Poll(&lines).ok());
}

TEST_F(LogTailerTest, DirectoryIsRefused) {
  fs::create_directories(path_);
  LogTailer t(path_);
  std::vector<TailedLine> lines;
  Status st = t.Poll(&lines);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("directory"), std::string::npos) << st.message();
}

TEST_F(LogTailerTest, RotationToARefusedFileIsReportedAndRetried) {
  const int w = OpenWriter(path_);
  Write(w, "ok\n");
  LogTailer t(path_);
  EXPECT_EQ(PollTexts(t), Lines{"ok"});
  fs::rename(path_, path_ + ".1");
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  std::vector<TailedLine> lines;
  EXPECT_EQ(t.Poll(&lines).code(), StatusCode::kInvalidArgument);
  fs::remove(path_);
  Write(OpenWriter(path_), "regular again\n");
  std::vector<TailedLine> more;
  Status st = t.Poll(&more);
  EXPECT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].text, "regular again");
}

}  // namespace
}  // namespace gpuwatch::logs
