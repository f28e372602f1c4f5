#include "store/wal.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "common/strings.h"
#include "store/testing/scratch_dir.h"

namespace gpuwatch::store {
namespace {

namespace fs = std::filesystem;

class WalTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshScratchDir("wal"); }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> ReplayAll(WalReplayStats* st = nullptr, WalOptions o = {}) {
    std::vector<std::string> got;
    auto wal = Wal::Open(
        dir_, o,
        [&](uint8_t type, std::string_view p) {
          got.push_back(std::to_string(type) + ":" + std::string(p));
        },
        st);
    EXPECT_TRUE(wal.ok()) << wal.status().ToString();
    return got;
  }
  std::string dir_;
};

TEST_F(WalTest, AppendReplayAndContinue) {
  {
    auto wal = Wal::Open(dir_, {}, nullptr, nullptr);
    ASSERT_TRUE(wal.ok());
    for (int i = 0; i < 100; ++i) ASSERT_TRUE((*wal)->Append(1, "rec" + std::to_string(i)).ok());
  }
  {
    WalReplayStats st;
    std::vector<std::string> got;
    auto wal = Wal::Open(
        dir_, {}, [&](uint8_t, std::string_view p) { got.emplace_back(p); }, &st);
    ASSERT_TRUE(wal.ok());
    ASSERT_EQ(got.size(), 100u);
    EXPECT_EQ(got[42], "rec42");
    EXPECT_TRUE(st.damage.empty());
    ASSERT_TRUE((*wal)->Append(2, "after-reopen").ok());
  }
  auto all = ReplayAll();
  ASSERT_EQ(all.size(), 101u);
  EXPECT_EQ(all.back(), "2:after-reopen");
}

TEST_F(WalTest, TornTailAtEveryLengthIsCutOff) {
  {
    auto wal = Wal::Open(dir_, {}, nullptr, nullptr);
    ASSERT_TRUE(wal.ok());
    ASSERT_TRUE((*wal)->Append(1, "first").ok());
    ASSERT_TRUE((*wal)->Append(1, "second-record").ok());
  }
  const std::string seg = dir_ + "/00000001.wal";
  const auto full = fs::file_size(seg);
  const auto first_end = 9 + 5;
  std::ifstream in(seg, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  for (uintmax_t len = first_end; len < full; ++len) {
    {
      std::ofstream out(seg, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(len));
    }
    WalReplayStats st;
    auto got = ReplayAll(&st);
    ASSERT_EQ(got.size(), 1u) << "len " << len;
    EXPECT_EQ(got[0], "1:first");
    if (len > first_end) {
      ASSERT_EQ(st.damage.size(), 1u);
      EXPECT_TRUE(st.damage[0].torn_tail);
    }
    EXPECT_EQ(fs::file_size(seg), static_cast<uintmax_t>(first_end))
        << "torn tail must be truncated";
  }
}

// D10 (issue 17): a flipped byte costs the record it is in; replay resumes at the next one.
TEST_F(WalTest, CorruptionInOldSegmentCostsOnlyThatRecord) {
  {
    WalOptions o;
    o.segment_bytes = 200;
    auto wal = Wal::Open(dir_, o, nullptr, nullptr);
    ASSERT_TRUE(wal.ok());
    for (int i = 0; i < 40; ++i)
      ASSERT_TRUE((*wal)->Append(1, "record-number-" + std::to_string(i)).ok());
    EXPECT_GT((*wal)->current_segment(), 3u);
  }
  // Flip one byte in the middle of segment 2.
  const std::string seg2 = dir_ + "/00000002.wal";
  {
    std::fstream f(seg2, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    char c;
    f.seekg(30);
    f.get(c);
    f.seekp(30);
    f.put(static_cast<char>(c ^ 0x40));
  }
  auto check = Wal::Check(dir_);
  ASSERT_TRUE(check.ok());
  ASSERT_EQ(check->damage.size(), 1u);
  EXPECT_EQ(check->damage[0].segment, "00000002.wal");
  EXPECT_FALSE(check->damage[0].torn_tail);
  WalReplayStats st;
  auto got = ReplayAll(&st);
  EXPECT_EQ(got.size(), 39u) << "only the damaged record is lost";
  EXPECT_EQ(got.back(), "1:record-number-39");
  ASSERT_EQ(st.damage.size(), 1u);
  EXPECT_TRUE(st.damage[0].reason.starts_with("CRC mismatch; replay resumed"))
      << st.damage[0].reason;
  EXPECT_EQ(st.damage[0].offset, check->damage[0].offset) << "Check and Open agree";
  EXPECT_EQ(st.damage[0].bytes_lost, check->damage[0].bytes_lost);
}

// D10 (issue 17): a flipped byte in the newest segment used to count as a torn tail and cut
// off every acknowledged record after it. Now only that record is lost; the segment is copied
// to quarantine/ and rewritten, so the next open finds it clean and appends continue.
TEST_F(WalTest, D10_FlippedByteInNewestSegmentKeepsEveryRecordAfterIt) {
  {
    auto wal = Wal::Open(dir_, {}, nullptr, nullptr);
    ASSERT_TRUE(wal.ok());
    for (int i = 0; i < 100; ++i)
      ASSERT_TRUE((*wal)->Append(1, "record-number-" + std::to_string(i)).ok());
  }
  const std::string seg = dir_ + "/00000001.wal";
  std::string bytes;
  {
    std::ifstream in(seg, std::ios::binary);
    bytes.assign((std::istreambuf_iterator<char>(in)), {});
  }
  bytes[2000] ^= 0x01;
  std::ofstream(seg, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  auto check = Wal::Check(dir_);
  ASSERT_TRUE(check.ok());
  ASSERT_EQ(check->damage.size(), 1u);
  EXPECT_FALSE(check->damage[0].torn_tail);
  WalReplayStats st;
  auto got = ReplayAll(&st);
  EXPECT_EQ(got.size(), 99u);
  EXPECT_EQ(got.back(), "1:record-number-99");
  ASSERT_EQ(st.damage.size(), 1u);
  EXPECT_FALSE(st.damage[0].torn_tail);
  EXPECT_EQ(st.damage[0].offset, check->damage[0].offset);
  EXPECT_LE(st.damage[0].offset, 2000u);
  EXPECT_GT(st.damage[0].offset + st.damage[0].bytes_lost, 2000u);
  EXPECT_TRUE(fs::exists(dir_ + "/quarantine/00000001.wal"));
  EXPECT_TRUE(fs::exists(dir_ + "/quarantine/00000001.wal.why"));
  // Rewritten: clean on the next open, and appends land after the kept records.
  {
    auto wal = Wal::Open(dir_, {}, nullptr, nullptr);
    ASSERT_TRUE(wal.ok());
    ASSERT_TRUE((*wal)->Append(1, "after").ok());
  }
  WalReplayStats again;
  got = ReplayAll(&again);
  EXPECT_TRUE(again.damage.empty());
  ASSERT_EQ(got.size(), 100u);
  EXPECT_EQ(got.back(), "1:after");
}

TEST_F(WalTest, RotateAndTruncateBefore) {
  auto wal = Wal::Open(dir_, {}, nullptr, nullptr);
  ASSERT_TRUE(wal.ok());
  ASSERT_TRUE((*wal)->Append(1, "old").ok());
  auto first = (*wal)->Rotate();
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*wal)->Append(1, "new").ok());
  ASSERT_TRUE((*wal)->TruncateBefore(*first).ok());
  wal->reset();
  auto got = ReplayAll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "1:new");
}

// Per-segment stats let a caller map replayed records to segments (the event store drops
// whole segments by age); Check with a callback sees the same records as replay.
TEST_F(WalTest, SegmentStatsCountRecordsPerSegmentAndCheckReplays) {
  {
    auto wal = Wal::Open(dir_, {}, nullptr, nullptr);
    ASSERT_TRUE(wal.ok());
    ASSERT_TRUE((*wal)->Append(1, "a").ok());
    ASSERT_TRUE((*wal)->Append(1, "bb").ok());
    ASSERT_TRUE((*wal)->Rotate().ok());
    ASSERT_TRUE((*wal)->Append(2, "ccc").ok());
  }
  {  // a torn tail in the newest segment: its bytes are counted after the cut
    std::ofstream out(dir_ + "/00000002.wal", std::ios::binary | std::ios::app);
    out << "xyz";
  }
  std::vector<std::string> seen;
  auto check = Wal::Check(dir_, [&](uint8_t, std::string_view p) { seen.emplace_back(p); });
  ASSERT_TRUE(check.ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "bb", "ccc"}));
  ASSERT_EQ(check->segment_stats.size(), 2u);
  EXPECT_EQ(check->segment_stats[1].bytes, 9u + 3u + 3u) << "Check changes nothing";
  WalReplayStats st;
  auto got = ReplayAll(&st);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(st.segment_stats.size(), 2u);
  EXPECT_EQ(st.segment_stats[0].number, 1u);
  EXPECT_EQ(st.segment_stats[0].records, 2u);
  EXPECT_EQ(st.segment_stats[0].bytes, 9u + 1u + 9u + 2u);
  EXPECT_EQ(st.segment_stats[1].number, 2u);
  EXPECT_EQ(st.segment_stats[1].records, 1u);
  EXPECT_EQ(st.segment_stats[1].bytes, 9u + 3u) << "the torn tail is not counted";
}

TEST_F(WalTest, OversizeRecordRejected) {
  auto wal = Wal::Open(dir_, {}, nullptr, nullptr);
  ASSERT_TRUE(wal.ok());
  EXPECT_EQ((*wal)->Append(1, std::string(kMaxWalRecordBytes + 1, 'x')).code(),
            StatusCode::kInvalidArgument);
}

// Disk full (a file-size limit): the append fails with a clear error, the log stays whole, and
// everything appended before is replayed.
TEST_F(WalTest, DiskFullFailsCleanly) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of being killed
    auto wal = Wal::Open(dir_, {}, nullptr, nullptr);
    if (!wal.ok()) _exit(10);
    rlimit lim{4096, 4096};
    setrlimit(RLIMIT_FSIZE, &lim);
    int ok = 0;
    Status last;
    for (int i = 0; i < 1000; ++i) {
      last = (*wal)->Append(1, std::string(100, 'a' + i % 26));
      if (!last.ok()) break;
      ++ok;
    }
    if (last.ok() || last.code() != StatusCode::kIoError) _exit(11);
    if (last.message().find("File too large") == std::string::npos) _exit(12);
    _exit(ok > 0 && ok < 1000 ? 0 : 13);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  WalReplayStats st;
  auto got = ReplayAll(&st);
  EXPECT_EQ(got.size(), 4096u / 109);  // whole records only
  EXPECT_TRUE(st.damage.empty()) << "the partial record must have been cut off: "
                                 << st.damage[0].reason;
}

// SIGKILL at random points during heavy appends: every acknowledged record survives, intact.
TEST_F(WalTest, KillNineNeverLosesAcknowledgedRecords) {
  std::mt19937 rng(12345);
  uint64_t next = 0;  // records are numbered across runs
  for (int round = 0; round < 20; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      WalOptions o;
      o.segment_bytes = 64 << 10;  // rotate often, too
      auto wal = Wal::Open(dir_, o, nullptr, nullptr);
      if (!wal.ok()) _exit(10);
      for (uint64_t i = next;; ++i) {
        std::string payload = "seq=" + std::to_string(i) + ";" + std::string(i % 300, 'p');
        if (!(*wal)->Append(1, payload).ok()) _exit(11);
        // Acknowledged: tell the parent.
        if (write(fds[1], &i, sizeof(i)) != sizeof(i)) _exit(12);
      }
    }
    close(fds[1]);
    usleep(std::uniform_int_distribution<int>(2000, 60000)(rng));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    uint64_t acked = next, v;
    bool any = false;
    while (read(fds[0], &v, sizeof(v)) == sizeof(v)) {
      acked = v;
      any = true;
    }
    close(fds[0]);
    // Replay: all acknowledged records up to `acked` must be present, in order, intact.
    std::vector<uint64_t> seqs;
    WalReplayStats st;
    auto wal = Wal::Open(
        dir_, {},
        [&](uint8_t, std::string_view p) {
          auto semi = p.find(';');
          seqs.push_back(ParseInt<uint64_t>(p.substr(4, semi - 4)).value_or(~0ull));
          EXPECT_EQ(p.size() - semi - 1, seqs.back() % 300) << "record body damaged";
        },
        &st);
    ASSERT_TRUE(wal.ok());
    for (const auto& d : st.damage) EXPECT_TRUE(d.torn_tail) << d.segment << " " << d.reason;
    if (seqs.empty()) {
      ASSERT_FALSE(any) << "round " << round << ": acknowledged records lost";
      continue;  // killed before the first append finished
    }
    for (size_t i = 0; i < seqs.size(); ++i) ASSERT_EQ(seqs[i], i) << "round " << round;
    if (any) {
      ASSERT_GE(seqs.back(), acked) << "round " << round << ": acknowledged record lost";
    }
    next = seqs.back() + 1;
  }
}

}  // namespace
}  // namespace gpuwatch::store
