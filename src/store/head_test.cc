#include "store/head.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>

#include "store/internal/coding.h"
#include "store/testing/scratch_dir.h"
#include "store/wal.h"

namespace gpuwatch::store {
namespace {

namespace fs = std::filesystem;

std::vector<Matcher> Sel(std::string_view s) { return *ParseSelector(s); }

Head::Input In(std::string gpu, std::vector<Sample> samples,
               std::string metric = "DCGM_FI_DEV_GPU_UTIL") {
  return {{{"__name__", metric}, {"gpu", gpu}, {"Hostname", "n1"}}, std::move(samples)};
}

// Runs `child` in a forked process, so that RLIMIT_FSIZE and SIGXFSZ never touch the test
// runner, and expects it to return 0 (a nonzero code names the step that failed).
void RunInChild(const std::function<int()>& child) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    _exit(child());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
}

// While alive, writes more than 8 bytes past `path`'s present end fail with EFBIG, as on a
// full disk or under LimitFSIZE.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(const std::string& path) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    rlimit tight = saved_;
    tight.rlim_cur = std::filesystem::file_size(path) + 8;
    setrlimit(RLIMIT_FSIZE, &tight);
  }
  ~FileSizeLimit() { setrlimit(RLIMIT_FSIZE, &saved_); }

 private:
  rlimit saved_{};
};

class HeadTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshScratchDir("head"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<Head> OpenHead(HeadOptions o = {}) {
    auto h = Head::Open(dir_, o);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return h.ok() ? std::move(h).value() : nullptr;
  }
  std::string dir_;
};

TEST_F(HeadTest, AppendQueryAndRejects) {
  auto head = OpenHead();
  auto r = head->Append({In("0", {{1000, 97}, {2000, 98}}), In("1", {{1000, 50}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 3u);
  // A retry of the newest sample is a duplicate; an older one is out of order.
  r = head->Append({In("0", {{2000, 98}, {1500, 1}, {3000, 99}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 1u);
  EXPECT_EQ(r->duplicates, 1u);
  EXPECT_EQ(r->out_of_order, 1u);
  EXPECT_NE(r->first_error.find("out of order sample for DCGM_FI_DEV_GPU_UTIL{"), std::string::npos)
      << r->first_error;
  r = head->Append({{{{"1bad", "x"}}, {{1, 1}}}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->invalid, 1u);
  auto q = head->Query(Sel("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"}"), 0, 5000);
  ASSERT_EQ(q.size(), 1u);
  ASSERT_EQ(q[0].samples.size(), 3u);
  EXPECT_EQ(q[0].samples[2].value, 99);
  EXPECT_EQ(head->Query(Sel("DCGM_FI_DEV_GPU_UTIL"), 1500, 2500)[0].samples.size(), 1u);
}

TEST_F(HeadTest, RetriedRequestIsDuplicatesNotOutOfOrder) {
  auto head = OpenHead();
  ASSERT_TRUE(head->Append({In("0", {{1000, 1}, {2000, 2}, {3000, 3}})}).ok());
  auto r = head->Append({In("0", {{1000, 1}, {2000, 2}, {3000, 3}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->duplicates, 3u);
  EXPECT_EQ(r->out_of_order, 0u);
  r = head->Append({In("0", {{2000, 2.5}})});  // same time, another value: a real conflict
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out_of_order, 1u);
}

// The hub's window (HeadOptions::out_of_order_window_ms): an agent resending after an outage,
// or a remote-write sender resending beside its live samples (Prometheus's own remote-write
// retries a failed shard while newer samples go out on others), is taken whole, once.
TEST_F(HeadTest, OutOfOrderWindowAcceptsOnceAndRefusesConflicts) {
  HeadOptions o;
  o.out_of_order_window_ms = 3600'000;
  auto head = OpenHead(o);
  ASSERT_TRUE(head->Append({In("0", {{3'600'000, 10}, {7'200'000, 20}})}).ok());
  // Within the hour before the newest: accepted, in any order within the batch.
  auto r = head->Append({In("0", {{5'000'000, 15}, {4'000'000, 14}, {7'100'000, 19}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 3u);
  EXPECT_EQ(r->accepted_out_of_order, 3u);
  EXPECT_EQ(r->rejected(), 0u);
  // The same again (a retry) counts nothing twice; a timestamp the head holds with another
  // value is a conflict; beyond the window is out of order.
  r = head->Append({In(
      "0", {{4'000'000, 14}, {5'000'000, 15}, {3'600'000, 10}, {5'000'000, 99}, {3'000'000, 1}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 0u);
  EXPECT_EQ(r->duplicates, 3u);
  EXPECT_EQ(r->conflicts, 1u);
  EXPECT_EQ(r->out_of_order, 1u);
  r = head->Append({In("0", {{4'000'000, 41}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->conflicts, 1u);
  EXPECT_NE(r->first_error.find("another value"), std::string::npos) << r->first_error;
  // A repeat inside one batch is one sample.
  r = head->Append({In("0", {{6'000'000, 16}, {6'000'000, 16}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 1u);
  EXPECT_EQ(r->duplicates, 1u);
  const std::vector<Sample> want = {{3'600'000, 10}, {4'000'000, 14}, {5'000'000, 15},
                                    {6'000'000, 16}, {7'100'000, 19}, {7'200'000, 20}};
  auto check = [&](const Head& h, const char* when) {
    auto got = h.Query(Sel("{gpu=\"0\"}"), 0, 10'000'000);
    ASSERT_EQ(got.size(), 1u) << when;
    ASSERT_EQ(got[0].samples.size(), want.size()) << when;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[0].samples[i].t_ms, want[i].t_ms) << when;
      EXPECT_EQ(got[0].samples[i].value, want[i].value) << when;
    }
    EXPECT_EQ(h.num_samples(), want.size()) << when;
    EXPECT_EQ(h.SeriesInRange(Sel("{gpu=\"0\"}"), 4'500'000, 5'500'000).size(), 1u) << when;
  };
  check(*head, "live");
  // The WAL replays the out-of-order samples where they were.
  head.reset();
  head = OpenHead(o);
  check(*head, "after reopen");
  // In the flush, they are chunks of their own, after the in-order ones.
  auto cut = head->CutForFlush();
  ASSERT_TRUE(cut.ok());
  ASSERT_EQ(cut->series.size(), 1u);
  EXPECT_EQ(cut->series[0].sealed_chunks, 1u);
  ASSERT_EQ(cut->series[0].chunks.size(), 2u);
  EXPECT_EQ(cut->series[0].chunks[1].num_samples, 4u);
  EXPECT_EQ(cut->samples, 6u);
  check(*head, "cut, block not yet in place");
  head->DropFlushed(*cut);
  EXPECT_EQ(head->num_samples(), 0u);
}

// A head may buffer fewer raw samples a series (a hub's many series): its chunks say their
// block size and read back whole, through queries and through a flush's cut, which shares the
// sealed chunk with the head instead of copying it.
TEST_F(HeadTest, SmallerBlocksReadBackWhole) {
  HeadOptions o;
  o.block_shift = 4;  // 16 samples a block
  o.chunk_max_samples = 50;
  auto head = OpenHead(o);
  std::vector<Sample> want;
  for (int64_t t = 1; t <= 70; ++t) want.push_back({t * 1000, static_cast<double>(t % 7)});
  for (const Sample& x : want) ASSERT_TRUE(head->Append({In("0", {x})}).ok());
  auto got = head->Query(Sel("{gpu=\"0\"}"), 0, 100'000);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].samples.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[0].samples[i].value, want[i].value);
  auto cut = head->CutForFlush();
  ASSERT_TRUE(cut.ok());
  ASSERT_EQ(cut->series.size(), 1u);
  ASSERT_EQ(cut->series[0].chunks.size(), 2u);  // 50 sealed at the limit, 20 sealed by the cut
  EXPECT_EQ(cut->series[0].chunks[0].num_samples, 50u);
  size_t n = 0;
  for (const auto& c : cut->series[0].chunks) {
    ASSERT_NE(c.bytes, nullptr);
    EXPECT_EQ(static_cast<int>((*c.bytes)[1]), 4) << "the block shift, in the chunk's header";
    auto dec = ChunkDecoder::Open(*c.bytes);
    ASSERT_TRUE(dec.ok());
    int64_t t;
    double v;
    while (dec->Next(&t, &v)) EXPECT_EQ(v, want[n++].value);
  }
  EXPECT_EQ(n, want.size());
  EXPECT_EQ(head->Query(Sel("{gpu=\"0\"}"), 0, 100'000)[0].samples.size(), want.size())
      << "queryable until DropFlushed";
  head->DropFlushed(*cut);
  EXPECT_EQ(head->num_samples(), 0u);
}

TEST_F(HeadTest, WithoutAWindowOlderSamplesAreOutOfOrder) {
  auto head = OpenHead();
  ASSERT_TRUE(head->Append({In("0", {{2000, 2}})}).ok());
  auto r = head->Append({In("0", {{1999, 1}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out_of_order, 1u);
  EXPECT_EQ(r->accepted_out_of_order, 0u);
}

TEST_F(HeadTest, SealsChunksAndQueriesAcrossThem) {
  HeadOptions o;
  o.chunk_span_ms = 600 * 1000;
  auto head = OpenHead(o);
  std::vector<Sample> s;
  for (int i = 0; i < 3600; ++i)
    s.push_back({1704067200000 + i * 1000LL, static_cast<double>(40 + i % 7)});
  ASSERT_TRUE(head->Append({In("0", s)}).ok());
  auto q = head->Query(Sel("DCGM_FI_DEV_GPU_UTIL"), 0, INT64_MAX);
  ASSERT_EQ(q.size(), 1u);
  ASSERT_EQ(q[0].samples.size(), 3600u);
  for (int i = 0; i < 3600; ++i) ASSERT_EQ(q[0].samples[i].t_ms, s[i].t_ms);
  EXPECT_LT(head->chunk_bytes(), 3600u) << "integer series must compress below 1 byte/sample";
}

TEST_F(HeadTest, ReopenReplaysEverything) {
  {
    auto head = OpenHead();
    for (int b = 0; b < 50; ++b)
      ASSERT_TRUE(head->Append({In(std::to_string(b % 4), {{1000 + b * 1000LL, b * 1.5}})}).ok());
  }
  WalReplayStats st;
  auto head = Head::Open(dir_, {}, &st);
  ASSERT_TRUE(head.ok());
  EXPECT_TRUE(st.damage.empty());
  EXPECT_EQ((*head)->num_samples(), 50u);
  EXPECT_EQ((*head)->index().size(), 4u);
  auto q = (*head)->Query(Sel("DCGM_FI_DEV_GPU_UTIL{gpu=\"3\"}"), 0, INT64_MAX);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].samples.back().value, 47 * 1.5);  // the last b with b % 4 == 3
}

// Replay applies a record's samples with their series fetched ahead (ForEachPrefetched): each
// series of a batch wider than the look-ahead gets its own samples, and the newest last.
TEST_F(HeadTest, ReopenReplaysAWideBatchSeriesBySeries) {
  constexpr int kSeries = 100;
  {
    auto head = OpenHead();
    for (int t = 1; t <= 3; ++t) {
      std::vector<Head::Input> batch;
      for (int g = 0; g < kSeries; ++g)
        batch.push_back(In(std::to_string(g), {{t * 1000LL, g + t * 0.25}}));
      ASSERT_EQ(head->Append(batch)->accepted, size_t{kSeries});
    }
  }
  auto head = OpenHead();
  ASSERT_EQ(head->num_samples(), 3u * kSeries);
  for (int g = 0; g < kSeries; ++g) {
    auto q =
        head->Query(Sel("DCGM_FI_DEV_GPU_UTIL{gpu=\"" + std::to_string(g) + "\"}"), 0, INT64_MAX);
    ASSERT_EQ(q.size(), 1u) << g;
    ASSERT_EQ(q[0].samples.size(), 3u) << g;
    for (int t = 1; t <= 3; ++t) {
      EXPECT_EQ(q[0].samples[t - 1].t_ms, t * 1000LL) << g;
      EXPECT_EQ(q[0].samples[t - 1].value, g + t * 0.25) << g;
    }
  }
}

// The WAL codes integral values as varints and keeps every other double's bits: each comes
// back from a replay exactly, whatever its kind.
TEST_F(HeadTest, ReplayKeepsEveryValueExactly) {
  uint64_t stale_bits = 0x7ff0000000000002ULL;  // Prometheus' stale marker, a NaN payload
  double stale;
  std::memcpy(&stale, &stale_bits, sizeof stale);
  const std::vector<double> values = {0.0,
                                      -0.0,
                                      1.0,
                                      -5.0,
                                      97.0,
                                      0.5,
                                      245.37,
                                      1e300,
                                      -1e-300,
                                      9007199254740992.0,  // 2^53, the last exact integer
                                      9007199254740994.0,  // past it: kept as a double
                                      -9007199254740992.0,
                                      std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity(),
                                      std::numeric_limits<double>::quiet_NaN(),
                                      stale,
                                      81920.0 * 1024 * 1024};
  {
    auto head = OpenHead();
    // First a series with every value in turn (its timestamps up by uneven steps), then one
    // series a value at the first timestamp: the record's time differences go both ways.
    std::vector<Sample> all;
    for (size_t i = 0; i < values.size(); ++i)
      all.push_back({1'700'000'000'000LL + static_cast<int64_t>(i * i * 977), values[i]});
    std::vector<Head::Input> batch = {In("all", all)};
    for (size_t i = 0; i < values.size(); ++i)
      batch.push_back(In(std::to_string(i), {{1'700'000'000'000LL, values[i]}}));
    ASSERT_EQ(head->Append(batch)->accepted, 2 * values.size());
  }
  auto head = OpenHead();
  ASSERT_EQ(head->num_samples(), 2 * values.size());
  auto bits = [](double v) {
    uint64_t b;
    std::memcpy(&b, &v, sizeof b);
    return b;
  };
  auto q = head->Query(Sel("DCGM_FI_DEV_GPU_UTIL{gpu=\"all\"}"), 0, INT64_MAX);
  ASSERT_EQ(q.size(), 1u);
  ASSERT_EQ(q[0].samples.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(q[0].samples[i].t_ms, 1'700'000'000'000LL + static_cast<int64_t>(i * i * 977));
    EXPECT_EQ(bits(q[0].samples[i].value), bits(values[i])) << i;
    auto one =
        head->Query(Sel("DCGM_FI_DEV_GPU_UTIL{gpu=\"" + std::to_string(i) + "\"}"), 0, INT64_MAX);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(bits(one[0].samples.at(0).value), bits(values[i])) << i;
  }
}

// The WAL's samples take a few bytes each where a batch is a tick of integer fields.
TEST_F(HeadTest, WalSamplesAreCompact) {
  constexpr int kSeries = 1000, kTicks = 10;
  {
    auto head = OpenHead();
    for (int t = 0; t < kTicks; ++t) {
      std::vector<Head::Input> batch;
      for (int g = 0; g < kSeries; ++g)
        batch.push_back(In(std::to_string(g), {{1'700'000'000'000LL + t * 1000, 40.0 + t}}));
      ASSERT_EQ(head->Append(batch)->accepted, size_t{kSeries});
    }
  }
  uint64_t wal_bytes = 0;
  for (const auto& e : fs::directory_iterator(dir_ + "/wal")) wal_bytes += e.file_size();
  // Series definitions (~55 bytes each, once) plus per sample a 2-byte ref, a 1-byte time
  // difference and a 1- or 2-byte value: ~5, so ~105 KB. As (ref, timestamp, double) it was
  // ~17 a sample (~225 KB here).
  EXPECT_LT(wal_bytes, uint64_t{kSeries} * 60 + uint64_t{kSeries} * kTicks * 6) << wal_bytes;
}

// A record whose CRC holds but whose samples stop making sense partway (a sample of a series it
// never defined): the samples before it are applied, as they were appended, and none after.
TEST_F(HeadTest, ReplayAppliesARecordUpToItsFirstBadSample) {
  {
    fs::create_directories(dir_);
    auto wal = Wal::Open(
        dir_ + "/wal", {}, [](uint8_t, std::string_view) {}, nullptr);
    ASSERT_TRUE(wal.ok()) << wal.status().ToString();
    using internal::PutDouble;
    using internal::PutVarint;
    using internal::ZigZag;
    std::string rec;
    PutVarint(&rec, 2);  // two series: logged refs 0 and 1
    for (uint64_t ref : {0, 1}) {
      PutVarint(&rec, ref);
      PutVarint(&rec, 2);
      for (const std::string& part :
           {std::string("__name__"), std::string("m"), std::string("gpu"), std::to_string(ref)}) {
        PutVarint(&rec, part.size());
        rec += part;
      }
    }
    PutVarint(&rec, 4);
    for (auto [ref, value] :
         std::vector<std::pair<uint64_t, double>>{{0, 1}, {1, 2}, {7, 3}, {0, 4}}) {
      PutVarint(&rec, ref);
      PutVarint(&rec, ZigZag(1000 * static_cast<int64_t>(value)));
      PutDouble(&rec, value);
    }
    ASSERT_TRUE((*wal)->Append(/*Head's kBatchRecord, never renumbered*/ 1, rec).ok());
    // The compact type: a sample of ref 0 (t 5000, the integer 9), then one whose value code
    // is odd but not 1.
    rec.clear();
    PutVarint(&rec, 0);
    PutVarint(&rec, 2);
    PutVarint(&rec, 0);
    PutVarint(&rec, ZigZag(5000));
    PutVarint(&rec, ZigZag(9) << 1);
    PutVarint(&rec, 1);
    PutVarint(&rec, ZigZag(1000));
    PutVarint(&rec, 3);
    ASSERT_TRUE((*wal)->Append(/*kCompactBatchRecord*/ 2, rec).ok());
  }
  auto head = OpenHead();
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->num_samples(), 3u);
  auto q = head->Query(Sel("m"), 0, INT64_MAX);
  ASSERT_EQ(q.size(), 2u);
  ASSERT_EQ(q[0].samples.size(), 2u);
  EXPECT_EQ(q[0].samples[1].t_ms, 5000);
  EXPECT_EQ(q[0].samples[1].value, 9.0);
  ASSERT_EQ(q[1].samples.size(), 1u);
}

// A batch that fails to reach the WAL (disk full) must not leave the log referring to a series
// it never defined: the next batch's new series must replay under the right labels.
TEST_F(HeadTest, FailedBatchDoesNotShiftSeriesRefs) {
  RunInChild([&] {
    auto h = Head::Open(dir_, {});
    if (!h.ok()) return 10;
    if (!(*h)->Append({In("x", {{1000, 1}})}).ok()) return 11;
    {
      FileSizeLimit full(dir_ + "/wal/00000001.wal");
      if ((*h)->Append({In("a", {{1000, 2}})}).ok()) return 12;
    }
    if (!(*h)->Append({In("b", {{1000, 3}})}).ok()) return 13;
    return 0;
  });
  auto head = OpenHead();
  auto b = head->Query(Sel("DCGM_FI_DEV_GPU_UTIL{gpu=\"b\"}"), 0, INT64_MAX);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].samples[0].value, 3);
  EXPECT_TRUE(head->Query(Sel("DCGM_FI_DEV_GPU_UTIL{gpu=\"a\"}"), 0, INT64_MAX).empty());
}

// D12 (issue 17): a refused write (here: the file-size limit, as LimitFSIZE or a full disk)
// takes its new series back, so no phantom label value stays behind.
TEST_F(HeadTest, D12_RefusedWriteLeavesNoPhantomSeries) {
  RunInChild([&] {
    auto h = Head::Open(dir_, {});
    if (!h.ok()) return 10;
    if (!(*h)->Append({In("x", {{1000, 1}})}).ok()) return 11;
    {
      FileSizeLimit full(dir_ + "/wal/00000001.wal");
      if ((*h)->Append({In("phantom", {{1000, 2}})}).ok()) return 12;
    }
    const auto values = (*h)->index().LabelValues("gpu", {});
    if (values != std::vector<std::string>{"x"}) return 13;
    if ((*h)->index().size() != 1) return 14;
    // The series can still be made by a later write that succeeds.
    auto again = (*h)->Append({In("phantom", {{1000, 2}})});
    if (!again.ok() || again->accepted != 1 || again->new_series != 1) return 15;
    return 0;
  });
}

// D1 (issue 17): a sample near INT64_MIN once overflowed the rollup bucket arithmetic and
// stopped every flush. Timestamps outside 1970..2262 are refused by name; the rest is kept.
TEST_F(HeadTest, D1_TimestampsOutOfBoundsAreRefused) {
  auto head = OpenHead();
  auto r = head->Append({In("0", {{INT64_MIN, 1}, {-1, 1}, {1000, 2}, {kMaxSampleTimeMs + 1, 3}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 1u);
  EXPECT_EQ(r->out_of_bounds, 3u);
  EXPECT_NE(r->first_error.find("out of bounds"), std::string::npos) << r->first_error;
  // At the bounds exactly, samples are taken.
  r = head->Append({In("1", {{kMinSampleTimeMs, 1}, {kMaxSampleTimeMs, 2}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 2u);
}

// D12 (issue 17): a batch larger than one WAL record (16 MiB) is logged as several records,
// every sample accepted and replayed; it used to be a retryable 500 forever.
TEST_F(HeadTest, D12_BatchOverOneWalRecordIsSplitAndReplayed) {
  std::vector<Head::Input> batch;
  const std::string pad(200, 'p');
  for (int i = 0; i < 120'000; ++i)
    batch.push_back({{{"__name__", "bb"}, {"id", std::to_string(i)}, {"p", pad}}, {{1000, 1}}});
  {
    auto head = OpenHead();
    auto r = head->Append(batch);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->accepted, 120'000u);
    EXPECT_EQ(r->new_series, 120'000u);
    EXPECT_GT(head->wal_bytes(), uint64_t{kMaxWalRecordBytes});
  }
  auto head = OpenHead();
  EXPECT_EQ(head->index().size(), 120'000u);
  EXPECT_EQ(head->num_samples(), 120'000u);
}

// new_series is what remote-write charges a sender's series share with: a series the index
// already holds is not new, even when this WAL segment defines it again (after a restart or a
// flush). Found by the soak run (bench/soak).
TEST_F(HeadTest, NewSeriesCountsIndexCreationNotRelogging) {
  {
    auto head = OpenHead();
    auto r = head->Append({In("0", {{1000, 1}}), In("1", {{1000, 1}})});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->new_series, 2u);
  }
  auto head = OpenHead();  // replayed: the series exist, not yet logged in the new segment
  auto r = head->Append({In("0", {{2000, 1}}), In("2", {{2000, 1}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 2u);
  EXPECT_EQ(r->new_series, 1u);
  AppendLimits none;
  none.max_new_series = 0;
  r = head->Append({In("1", {{3000, 1}})}, none);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 1u) << "an existing series is never refused by the series limit";
}

// A caller that knows a series by its ref (the remote-write gate, per sender) appends by ref:
// the same series, its definition still written where the WAL segment lacks it, so a restart
// replays both; a ref the head never gave is refused, not guessed.
TEST_F(HeadTest, AppendByRefIsTheSameSeriesAndSurvivesReplay) {
  uint32_t ref0 = kNoSeriesRef, ref1 = kNoSeriesRef;
  AppendLimits want;
  want.want_refs = true;
  {
    auto head = OpenHead();
    auto r = head->Append(
        {In("0", {{1000, 1}}), {{{"1bad", "x"}}, {{1000, 1}}}, In("1", {{1000, 2}})}, want);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->refs.size(), 3u);
    EXPECT_EQ(r->refs[1], kNoSeriesRef);  // invalid labels
    EXPECT_NE(r->refs[0], r->refs[2]);
    ref0 = r->refs[0];
    ref1 = r->refs[2];
    EXPECT_TRUE(head->Append({In("0", {{1500, 5}})}).value().refs.empty()) << "only when asked";
    Head::Input by_ref{{}, {{2000, 3}}, ref0};
    r = head->Append({by_ref}, want);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->accepted, 1u);
    EXPECT_EQ(r->new_series, 0u);
    EXPECT_EQ(r->refs, std::vector<uint32_t>{ref0});
    // Out of order by ref still names the series.
    r = head->Append({Head::Input{{}, {{1200, 9}}, ref0}});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->out_of_order, 1u);
    EXPECT_NE(r->first_error.find("gpu=\"0\""), std::string::npos) << r->first_error;
    r = head->Append({Head::Input{{}, {{3000, 1}}, 99}});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->invalid, 1u);
    EXPECT_NE(r->first_error.find("series ref 99"), std::string::npos) << r->first_error;
  }
  {
    // Replayed, then appended by ref into a fresh WAL segment that has not defined it yet.
    auto head = OpenHead();
    auto q = head->Query(Sel("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"}"), 0, 5000);
    ASSERT_EQ(q.size(), 1u);
    EXPECT_EQ(q[0].samples.size(), 3u);
    // Replay recreates one segment's series in the order they were defined: the same refs.
    auto r = head->Append({In("1", {{4000, 2}})}, want);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->refs, std::vector<uint32_t>{ref1});
    r = head->Append({Head::Input{{}, {{4000, 4}}, ref0}});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->accepted, 1u);
  }
  auto head = OpenHead();
  auto q = head->Query(Sel("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"}"), 0, 5000);
  ASSERT_EQ(q.size(), 1u);
  ASSERT_EQ(q[0].samples.size(), 4u);
  EXPECT_EQ(q[0].samples[3].value, 4);
}

TEST_F(HeadTest, NewSeriesLimitRefusesOnlyNewSeries) {
  auto head = OpenHead();
  ASSERT_TRUE(head->Append({In("0", {{1000, 1}})}).ok());
  AppendLimits limits;
  limits.max_new_series = 1;
  auto r = head->Append(
      {In("0", {{2000, 1}}), In("1", {{2000, 1}}), In("2", {{2000, 1}, {3000, 1}})}, limits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 2u);  // the existing series and the first new one
  EXPECT_EQ(r->new_series, 1u);
  EXPECT_EQ(r->series_limited, 2u);
  EXPECT_NE(r->first_error.find("series limit"), std::string::npos);
}

// SIGKILL at random points during heavy ingest, 20 times: every acknowledged sample is there
// after a restart, and nothing is corrupt.
TEST_F(HeadTest, KillNineKeepsEveryAcknowledgedSample) {
  std::mt19937 rng(777);
  int64_t t_next = 1000;
  for (int round = 0; round < 20; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      auto h = Head::Open(dir_, {});
      if (!h.ok()) _exit(10);
      for (int64_t t = t_next;; t += 1000) {
        std::vector<Head::Input> batch;
        for (int g = 0; g < 8; ++g)
          batch.push_back(In(std::to_string(g), {{t, static_cast<double>((t / 1000 + g) % 101)}}));
        auto r = (*h)->Append(batch);
        if (!r.ok() || r->accepted != 8) _exit(11);
        if (write(fds[1], &t, sizeof(t)) != sizeof(t)) _exit(12);  // acknowledged
      }
    }
    close(fds[1]);
    usleep(std::uniform_int_distribution<int>(2000, 50000)(rng));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    int64_t acked = -1, v;
    while (read(fds[0], &v, sizeof(v)) == sizeof(v)) acked = v;
    close(fds[0]);
    WalReplayStats st;
    auto head = Head::Open(dir_, {}, &st);
    ASSERT_TRUE(head.ok()) << head.status().ToString();
    for (const auto& d : st.damage) EXPECT_TRUE(d.torn_tail) << d.segment << ": " << d.reason;
    auto q = (*head)->Query(Sel("DCGM_FI_DEV_GPU_UTIL"), 0, INT64_MAX);
    int64_t newest = t_next - 1000;
    for (const auto& s : q) {
      const int g = std::stoi(std::string(LabelValue(s.labels, "gpu")));
      for (size_t i = 0; i < s.samples.size(); ++i) {
        ASSERT_EQ(s.samples[i].t_ms, 1000 + static_cast<int64_t>(i) * 1000)
            << "gap or reorder, round " << round;
        ASSERT_EQ(s.samples[i].value, static_cast<double>((s.samples[i].t_ms / 1000 + g) % 101))
            << "round " << round;
      }
      if (!s.samples.empty()) newest = std::max(newest, s.samples.back().t_ms);
    }
    if (acked >= 0) {
      ASSERT_EQ(q.size(), 8u);
      for (const auto& s : q)
        ASSERT_GE(s.samples.back().t_ms, acked) << "acknowledged sample lost, round " << round;
    }
    t_next = newest + 1000;
  }
}

}  // namespace
}  // namespace gpuwatch::store
