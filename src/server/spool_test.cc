#include "server/spool.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "store/testing/scratch_dir.h"

namespace gpuwatch::server {
namespace {

namespace fs = std::filesystem;

class SpoolTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = store::testing::FreshScratchDir("spool"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<Spool> OpenSpool(SpoolOptions o = {}) {
    o.sync = false;
    auto s = Spool::Open(dir_, o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::string dir_;
};

std::vector<uint64_t> Seqs(const std::vector<SpoolEntry>& v) {
  std::vector<uint64_t> out;
  for (const auto& e : v) out.push_back(e.seq);
  return out;
}

TEST_F(SpoolTest, PositionMovesOnlyOnAckAndSurvivesRestart) {
  auto s = OpenSpool();
  const std::string id = s->id();
  EXPECT_EQ(id.size(), 32u);
  for (int i = 1; i <= 5; ++i) ASSERT_EQ(*s->Append("entry " + std::to_string(i)), uint64_t(i));
  EXPECT_EQ(s->Position("hub"), 1u);
  auto got = s->Read(s->Position("hub"), 1 << 20);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(Seqs(*got), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ((*got)[2].payload, "entry 3");
  // A failed send acknowledges nothing; a good one moves the position past what it carried.
  ASSERT_TRUE(s->Ack("hub", 4).ok());
  EXPECT_EQ(s->Position("hub"), 4u);
  // Another destination keeps its own position.
  EXPECT_EQ(s->Position("vm"), 1u);
  s.reset();
  s = OpenSpool();
  EXPECT_EQ(s->id(), id);
  EXPECT_EQ(s->Position("hub"), 4u);
  EXPECT_EQ(Seqs(*s->Read(4, 1 << 20)), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(*s->Append("entry 6"), 6u);  // numbering goes on after a restart
}

TEST_F(SpoolTest, ReadIsBoundedByBytesButReturnsAtLeastOne) {
  auto s = OpenSpool();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(s->Append(std::string(100, 'x')).ok());
  EXPECT_EQ(s->Read(1, 250)->size(), 2u);
  EXPECT_EQ(s->Read(1, 10)->size(), 1u);
  EXPECT_TRUE(s->Read(5, 1 << 20)->empty());
}

TEST_F(SpoolTest, AckedSegmentsAreDeletedAndTheBoundDropsTheOldestUnsent) {
  SpoolOptions o;
  o.segment_bytes = 1000;
  o.max_bytes = 5000;
  auto s = OpenSpool(o);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(s->Append(std::string(292, 'a' + i % 26)).ok());
  // 300 bytes an entry, 4 a segment (closed at 1000 bytes or more... 1200), 5000 bytes held.
  SpoolStats st = s->Stats();
  EXPECT_LE(st.bytes, 5000u);
  EXPECT_GT(st.dropped_entries, 0u);
  EXPECT_EQ(st.first_seq, st.dropped_entries + 1);
  EXPECT_EQ(st.next_seq, 21u);
  // A destination behind the deleted part starts at the oldest held.
  EXPECT_EQ(s->Position("hub"), st.first_seq);
  auto got = s->Read(1, 1 << 20);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->front().seq, st.first_seq);
  EXPECT_EQ(got->back().seq, 20u);
  ASSERT_TRUE(s->Ack("hub", 21).ok());
  EXPECT_EQ(s->Stats().segments, 1u);  // only the one being appended to
}

TEST_F(SpoolTest, TornTailIsCutAndNothingBeforeItIsLost) {
  {
    auto s = OpenSpool();
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE(s->Append("record " + std::to_string(i)).ok());
  }
  // A crash in the middle of the fourth append: its header and half its payload.
  std::string seg;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().extension() == ".seg") seg = e.path().string();
  ASSERT_FALSE(seg.empty());
  {
    std::ofstream f(seg, std::ios::app | std::ios::binary);
    f.write("\x20\x00\x00\x00\x01\x02\x03\x04half", 12);
  }
  auto s = OpenSpool();
  EXPECT_EQ(s->Stats().damaged_bytes, 12u);
  EXPECT_EQ(Seqs(*s->Read(1, 1 << 20)), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(*s->Append("record 4"), 4u);
  EXPECT_EQ(s->Read(4, 1 << 20)->at(0).payload, "record 4");
}

TEST_F(SpoolTest, KillNineAfterAppendKeepsTheEntry) {
  // Append returns once the entry is written and synced: a SIGKILL right after loses nothing.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto s = Spool::Open(dir_, {});
    if (!s.ok()) _exit(2);
    for (int i = 1; i <= 50; ++i)
      if (!(*s)->Append("sample batch " + std::to_string(i)).ok()) _exit(3);
    kill(getpid(), SIGKILL);
    _exit(4);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  auto s = OpenSpool();
  auto got = s->Read(1, 1 << 20);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 50u);
  EXPECT_EQ(got->back().payload, "sample batch 50");
}

TEST_F(SpoolTest, BadDestinationAndBadIdAreRefusedWithTheReason) {
  auto s = OpenSpool();
  Status st = s->Ack("../etc", 1);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("destination"), std::string::npos);
  s.reset();
  std::ofstream(dir_ + "/ID") << "not hex at all\n";
  auto bad = Spool::Open(dir_, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ID"), std::string::npos);
}

}  // namespace
}  // namespace gpuwatch::server
