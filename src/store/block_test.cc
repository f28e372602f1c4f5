#include "store/block.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "store/chunkenc.h"
#include "store/internal/file_util.h"
#include "store/testing/scratch_dir.h"

namespace gpuwatch::store {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kT0 = 1'699'999'200'000;

std::string Chunk(int64_t t0, int n, double base) {
  ChunkEncoder enc;
  for (int i = 0; i < n; ++i) EXPECT_TRUE(enc.Append(t0 + i * 1000, base + i % 7).ok());
  return enc.Finish();
}

Labels Series(int i) {
  return *MakeLabels({{"__name__", "DCGM_FI_DEV_GPU_TEMP"}, {"gpu", std::to_string(i)}});
}

class BlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshScratchDir("block");
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `series` series of two raw chunks of 600 samples each and one 1m rollup group of 20 points.
  std::string Write(int series, uint64_t seq = 7) {
    BlockMeta meta;
    meta.seq = seq;
    meta.wal_covers_before = 42;
    meta.replaces = {3, 5};
    auto w = BlockWriter::Create(dir_, meta);
    EXPECT_TRUE(w.ok());
    for (int i = 0; i < series; ++i) {
      EXPECT_TRUE((*w)->BeginSeries(Series(i)).ok());
      for (int c = 0; c < 2; ++c) {
        ChunkMeta m;
        m.min_t_ms = kT0 + c * 600'000;
        m.max_t_ms = m.min_t_ms + 599'000;
        m.num_samples = 600;
        EXPECT_TRUE((*w)->AddChunk(m, Chunk(m.min_t_ms, 600, i)).ok());
      }
      for (int f = 0; f < kNumRollupFields; ++f) {
        ChunkMeta m;
        m.kind = RollupChunkKind(Tier::k1m, static_cast<RollupField>(f));
        m.min_t_ms = kT0;
        m.max_t_ms = kT0 + 19 * 60'000;
        m.num_samples = 20;
        ChunkEncoder enc;
        for (int k = 0; k < 20; ++k) EXPECT_TRUE(enc.Append(kT0 + k * 60'000, f + k).ok());
        EXPECT_TRUE((*w)->AddChunk(m, enc.Finish()).ok());
      }
    }
    auto path = (*w)->Finish();
    EXPECT_TRUE(path.ok()) << path.status().ToString();
    return *path;
  }

  static void FlipByte(const std::string& path, uint64_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(c ^ 0x5a));
  }

  // Salvages `path` into block 100 and opens it.
  std::unique_ptr<Block> Salvage(const std::string& path, BlockSalvage* out) {
    std::string written;
    auto s = SalvageBlock(path, 7, dir_, 100, &written);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return nullptr;
    *out = *s;
    if (written.empty()) return nullptr;
    auto b = Block::Open(written);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(b).value() : nullptr;
  }

  std::string dir_;
};

TEST_F(BlockTest, WrittenBlockOpensWithEveryChunkWhereTheIndexSays) {
  const std::string path = Write(3);
  auto b = Block::Open(path);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->meta().wal_covers_before, 42u);
  EXPECT_EQ((*b)->meta().replaces, (std::vector<uint64_t>{3, 5}));
  ASSERT_EQ((*b)->num_series(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_EQ((*b)->chunks(i).size(), 10u);
    for (const ChunkMeta& m : (*b)->chunks(i)) {
      auto bytes = (*b)->ReadChunk(m);
      ASSERT_TRUE(bytes.ok());
      auto samples = DecodeChunk(*bytes);
      ASSERT_TRUE(samples.ok()) << samples.status().ToString();
      EXPECT_EQ(samples->size(), m.num_samples);
      EXPECT_EQ(samples->front().t_ms, m.min_t_ms);
      EXPECT_EQ(samples->back().t_ms, m.max_t_ms);
    }
  }
  EXPECT_EQ((*b)->tier_stats(Tier::kRaw).samples, 3u * 1200);
}

// Issue 17, D13: a block cut by one byte lost every sample, because the index is at its end.
TEST_F(BlockTest, D13_BlockCutByOneByteIsSalvagedWhole) {
  const std::string path = Write(4);
  fs::resize_file(path, fs::file_size(path) - 1);
  ASSERT_FALSE(Block::Open(path).ok());
  BlockSalvage s;
  auto b = Salvage(path, &s);
  ASSERT_TRUE(b);
  EXPECT_TRUE(s.meta_found);
  EXPECT_EQ(s.series, 4u);
  EXPECT_EQ(s.chunks, 40u);
  EXPECT_EQ(s.samples, 4u * 1200);
  EXPECT_EQ(s.chunks_lost, 0u);
  EXPECT_TRUE(s.first_damage.empty()) << s.first_damage;
  EXPECT_EQ(b->num_series(), 4u);
  EXPECT_EQ(b->tier_stats(Tier::kRaw).samples, 4u * 1200);
  EXPECT_EQ(b->tier_stats(Tier::k1m).samples, 4u * 20);
  // The replacement carries the meta the damaged block had and names it as replaced.
  EXPECT_EQ(b->meta().seq, 100u);
  EXPECT_EQ(b->meta().wal_covers_before, 42u);
  EXPECT_EQ(b->meta().replaces, (std::vector<uint64_t>{7}));
}

TEST_F(BlockTest, D13_BlockCutInTheMiddleKeepsTheSeriesBeforeTheCut) {
  const std::string path = Write(4);
  auto whole = Block::Open(path);
  ASSERT_TRUE(whole.ok());
  // Cut inside the second raw chunk of series 2: series 0 and 1 whole, series 2 keeps its
  // first chunk, series 3 is gone.
  const ChunkMeta cut = (*whole)->chunks(2)[1];
  whole->reset();
  fs::resize_file(path, cut.offset + cut.length / 2);
  BlockSalvage s;
  auto b = Salvage(path, &s);
  ASSERT_TRUE(b);
  EXPECT_EQ(s.series, 3u);
  EXPECT_EQ(s.samples, 2u * 1200 + 600);
  EXPECT_EQ(s.chunks_lost, 9u) << "the cut chunk and the rollup group after it";
  EXPECT_NE(s.first_damage.find("gpu=\"2\""), std::string::npos) << s.first_damage;
  ASSERT_EQ(b->num_series(), 3u);
  EXPECT_EQ(b->chunks(2).size(), 1u);
}

TEST_F(BlockTest, D13_DamagedSeriesRecordIsSkippedAndTheScanResyncs) {
  const std::string path = Write(4);
  auto whole = Block::Open(path);
  ASSERT_TRUE(whole.ok());
  // The series record of series 1 lies just before its first chunk; damage its labels and
  // the index both, so that only the scan can read the file.
  const uint64_t record_end = (*whole)->chunks(1)[0].offset;
  const uint64_t index_at = (*whole)->chunks(3).back().offset + (*whole)->chunks(3).back().length;
  uint64_t series1_bytes = 0;
  for (const ChunkMeta& m : (*whole)->chunks(1)) series1_bytes += m.length;
  whole->reset();
  FlipByte(path, record_end - 8);
  FlipByte(path, index_at + 9 + 3);  // past the 9-byte record in front of the index
  ASSERT_FALSE(Block::Open(path).ok());
  BlockSalvage s;
  auto b = Salvage(path, &s);
  ASSERT_TRUE(b);
  EXPECT_EQ(s.series, 3u);
  EXPECT_EQ(s.samples, 3u * 1200);
  ASSERT_EQ(b->num_series(), 3u);
  for (uint32_t i = 0; i < 3; ++i)
    EXPECT_NE(LabelsToString(b->labels(i)), LabelsToString(Series(1)));
  EXPECT_GT(s.bytes_skipped, series1_bytes) << "series 1's record and chunks, and the index";
}

TEST_F(BlockTest, D13_RollupGroupWithOneDamagedFieldGoesWholeRawStays) {
  const std::string path = Write(1);
  auto whole = Block::Open(path);
  ASSERT_TRUE(whole.ok());
  const ChunkMeta sum = (*whole)->chunks(0)[2 + static_cast<int>(RollupField::kSum)];
  whole->reset();
  FlipByte(path, sum.offset + 2);
  fs::resize_file(path, fs::file_size(path) - 1);
  BlockSalvage s;
  auto b = Salvage(path, &s);
  ASSERT_TRUE(b);
  EXPECT_EQ(s.chunks, 2u);
  EXPECT_EQ(s.chunks_lost, 8u);
  EXPECT_EQ(b->tier_stats(Tier::kRaw).samples, 1200u);
  EXPECT_EQ(b->tier_stats(Tier::k1m).chunks, 0u);
}

TEST_F(BlockTest, D13_NothingIntactWritesNoBlock) {
  const std::string path = Write(2);
  fs::resize_file(path, 30);  // the magic and the meta record only
  BlockSalvage s;
  EXPECT_FALSE(Salvage(path, &s));
  EXPECT_EQ(s.series, 0u);
  EXPECT_TRUE(s.meta_found);
  EXPECT_FALSE(fs::exists(dir_ + "/" + BlockFileName(100)));
  EXPECT_FALSE(fs::exists(dir_ + "/" + BlockFileName(100) + ".tmp"));
}

// The index holds label values verbatim, and a remote-write client chooses them: a scan stops
// at the record in front of the index, so what follows is never read as records.
TEST_F(BlockTest, D13_TheScanStopsAtTheIndex) {
  const std::string a = Write(1, 7), b = Write(2, 8);
  auto read = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string bytes_a = read(a), bytes_b = read(b);
  const size_t ix_a = bytes_a.find("GWIX"), ix_b = bytes_b.find("GWIX");
  const size_t series_b = bytes_b.find("GWSR", bytes_b.find("GWSR") + 1);  // gpu="1"
  ASSERT_NE(ix_a, std::string::npos);
  ASSERT_NE(series_b, std::string::npos);
  // Block a up to its index marker (with the marker's length and CRC: 9 bytes), then block
  // b's series record and chunks where a's index was.
  std::string forged = bytes_a.substr(0, ix_a + 9) + bytes_b.substr(series_b, ix_b - series_b);
  std::vector<std::string> seen;
  auto scan = ScanBlock(forged, [&](const SalvagedSeries& s) {
    seen.push_back(LabelsToString(s.labels));
    return Status::Ok();
  });
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(seen.size(), 1u);
  // Without the marker, the same bytes would have been read as a second series.
  std::string unmarked = bytes_a.substr(0, ix_a) + bytes_b.substr(series_b, ix_b - series_b);
  seen.clear();
  ASSERT_TRUE(ScanBlock(unmarked, [&](const SalvagedSeries& s) {
                seen.push_back(LabelsToString(s.labels));
                return Status::Ok();
              }).ok());
  EXPECT_EQ(seen.size(), 2u);
}

TEST_F(BlockTest, CheckBlockSaysWhatASalvageWouldKeep) {
  const std::string path = Write(2);
  fs::resize_file(path, fs::file_size(path) - 1);
  uint64_t chunks = 0;
  auto damage = CheckBlock(path, &chunks);
  ASSERT_EQ(damage.size(), 1u);
  EXPECT_NE(damage[0].reason.find("footer"), std::string::npos) << damage[0].reason;
  EXPECT_NE(damage[0].reason.find("2 series with 20 intact chunks (2400 raw samples)"),
            std::string::npos)
      << damage[0].reason;
}

TEST_F(BlockTest, FormatOneBlocksStillOpenButHaveNothingToScan) {
  // Format 1 had no records; its index never pointed at them, so a format-2 file with the old
  // magic reads the same way a format-1 file does.
  const std::string path = Write(1);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.write("GWBLOCK1", 8);
  }
  auto b = Block::Open(path);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->num_series(), 1u);
  auto file = internal::MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  auto scan = ScanBlock(file->bytes(), [](const SalvagedSeries&) { return Status::Ok(); });
  EXPECT_EQ(scan.status().code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace gpuwatch::store
