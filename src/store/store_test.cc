#include "store/store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "store/rollup.h"
#include "store/testing/scratch_dir.h"

namespace gpuwatch::store {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kT0 = 1'699'999'200'000;  // ms, a whole hour
constexpr int64_t kHourMs = 3'600'000;

std::vector<Matcher> Sel(std::string_view s) { return *ParseSelector(s); }

Head::Input In(const std::string& gpu, std::vector<Sample> samples,
               const std::string& metric = "DCGM_FI_DEV_GPU_TEMP") {
  return {{{"__name__", metric}, {"gpu", gpu}, {"Hostname", "n1"}}, std::move(samples)};
}

// Temperature-like integer data, one sample per second.
double Value(int gpu, int64_t t_ms) { return 40 + gpu + static_cast<double>((t_ms / 1000) % 17); }

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshScratchDir("store"); }
  void TearDown() override { fs::remove_all(dir_); }

  static StoreOptions Manual() {
    StoreOptions o;
    o.background = false;
    o.head.wal.sync = SyncPolicy::kNever;
    return o;
  }
  std::unique_ptr<Store> OpenStore(StoreOptions o = Manual(), StoreOpenReport* rep = nullptr) {
    auto s = Store::Open(dir_, o, rep);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  // `seconds` samples per GPU from `start_ms`, one batch per minute.
  static void Fill(Store* s, int gpus, int64_t start_ms, int seconds) {
    for (int64_t t0 = start_ms; t0 < start_ms + seconds * 1000LL; t0 += 60'000) {
      std::vector<Head::Input> batch;
      for (int g = 0; g < gpus; ++g) {
        std::vector<Sample> v;
        for (int64_t t = t0; t < std::min<int64_t>(t0 + 60'000, start_ms + seconds * 1000LL);
             t += 1000)
          v.push_back({t, Value(g, t)});
        batch.push_back(In(std::to_string(g), std::move(v)));
      }
      auto r = s->Append(batch);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    }
  }
  static size_t CountSamples(const Store& s, std::string_view sel, int64_t lo, int64_t hi) {
    auto r = s.SelectRaw(Sel(sel), lo, hi);
    EXPECT_TRUE(r.ok());
    size_t n = 0;
    for (const auto& ss : *r) n += ss.samples.size();
    return n;
  }
  std::vector<std::string> BlockFiles() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_ + "/blocks"))
      if (e.path().extension() == ".gwb") out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string dir_;
};

TEST_F(StoreTest, FlushKeepsEverySampleQueryableAcrossBlocksAndHead) {
  auto s = OpenStore();
  Fill(s.get(), 4, kT0, 3600);
  ASSERT_TRUE(s->Flush().ok());
  Fill(s.get(), 4, kT0 + kHourMs, 1800);  // stays in the head
  EXPECT_EQ(BlockFiles().size(), 1u);
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + 2 * kHourMs), 4u * 5400);
  auto one = s->SelectRaw(Sel(R"(DCGM_FI_DEV_GPU_TEMP{gpu="2"})"), kT0 + kHourMs - 2000,
                          kT0 + kHourMs + 1000);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  ASSERT_EQ((*one)[0].samples.size(), 4u);  // two from the block, two from the head
  for (const auto& x : (*one)[0].samples) EXPECT_EQ(x.value, Value(2, x.t_ms));

  const StoreStats st = s->Stats();
  EXPECT_EQ(st.series, 4u);
  EXPECT_EQ(st.samples, 4u * 5400);
  EXPECT_EQ(st.tiers[0].samples, 4u * 3600);
  EXPECT_EQ(st.tiers[1].samples, 4u * 60);  // 1m points in blocks
  EXPECT_EQ(st.tiers[2].samples, 4u);
  EXPECT_GT(st.bytes_on_disk, 0u);
}

TEST_F(StoreTest, SamplesFarInTheFutureAreRejectedAndDoNotExpireTheRest) {
  StoreOptions o = Manual();
  o.clock_ms = [] { return kT0 + kHourMs; };
  o.raw_retention_ms = 2 * kHourMs;
  auto s = OpenStore(o);
  Fill(s.get(), 1, kT0, 600);
  auto r = s->Append({In("0", {{kT0 + 700'000, 1}, {kT0 + 400 * 86400'000LL, 2}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, 1u);
  EXPECT_EQ(r->invalid, 1u);
  EXPECT_NE(r->first_error.find("ahead of this machine's clock"), std::string::npos)
      << r->first_error;
  ASSERT_TRUE(s->Flush().ok());
  ASSERT_TRUE(s->EnforceRetention().ok());
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, INT64_MAX), 601u);
}

// D1 (issue 17): one acknowledged sample near INT64_MIN beside a normal one made every later
// flush fail, restarts included. It is refused now, and the store flushes and reopens.
TEST_F(StoreTest, D1_SampleNearInt64MinCannotStopFlushing) {
  {
    auto s = OpenStore();
    auto r = s->Append({In("0", {{INT64_MIN, 1}, {INT64_MIN + 3'600'000, 1}, {kT0, 1}})});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->accepted, 1u);
    EXPECT_EQ(r->out_of_bounds, 2u);
    ASSERT_TRUE(s->Flush().ok());
    ASSERT_TRUE(s->Close().ok());
  }
  auto s = OpenStore();
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", 0, INT64_MAX), 1u);
  ASSERT_TRUE(s->Flush().ok());
}

TEST(BucketStart, SaturatesInsteadOfOverflowing) {
  EXPECT_EQ(BucketStart(-1, 3'600'000), -3'600'000);
  EXPECT_EQ(BucketStart(7'200'001, 3'600'000), 7'200'000);
  const int64_t lowest = (INT64_MIN / 3'600'000) * 3'600'000;
  EXPECT_EQ(BucketStart(INT64_MIN, 3'600'000), lowest);
  EXPECT_EQ(BucketStart(INT64_MIN + 1, 60'000), (INT64_MIN / 60'000) * 60'000);
}

// D12 (issue 17): backfilled samples next to live ones kept the head's span over 2 h, and it
// flushed every few seconds (≈800 blocks an hour, one open file each). Span-triggered flushes
// are now at least min_flush_interval_ms apart.
TEST_F(StoreTest, D12_BackfillBesideLiveDataDoesNotFlushInALoop) {
  std::atomic<int64_t> now{kT0 + 3 * kHourMs};
  StoreOptions o = Manual();
  o.background = true;
  o.clock_ms = [&now] { return now.load(); };
  auto s = OpenStore(o);
  auto blocks = [&] { return s->Stats().blocks; };
  for (int k = 0; k < 4; ++k) {
    // One live sample "now" and one backfilled three hours back, each second.
    ASSERT_TRUE(
        s->Append({In("live", {{now.load() + k * 1000, 1}}), In("old", {{kT0 + k * 1000, 1}})})
            .ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  }
  EXPECT_EQ(blocks(), 1u) << "one flush, not one per append";
  now += 15 * 60 * 1000;
  ASSERT_TRUE(s->Append({In("live", {{now.load(), 1}}), In("old", {{kT0 + 10'000, 1}})}).ok());
  for (int i = 0; i < 30 && blocks() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(blocks(), 2u) << "the next flush comes once the interval has passed";
}

TEST_F(StoreTest, SecondWriterIsRefused) {
  auto s = OpenStore();
  auto second = Store::Open(dir_, Manual());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("LOCK"), std::string::npos) << second.status().message();
}

TEST_F(StoreTest, CloseFlushesAndReopenSeedsOutOfOrderRejection) {
  {
    auto s = OpenStore();
    Fill(s.get(), 2, kT0, 600);
    ASSERT_TRUE(s->Close().ok());
  }
  auto s = OpenStore();
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + kHourMs), 1200u);
  EXPECT_EQ(s->Stats().head_samples, 0u);
  // Older than the newest persisted sample: rejected; a retry of the newest: a duplicate.
  auto r = s->Append({In("0", {{kT0 + 1000, 1}, {kT0 + 599'000, Value(0, kT0 + 599'000)}})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out_of_order, 1u);
  EXPECT_EQ(r->duplicates, 1u);
  EXPECT_EQ(r->accepted, 0u);
}

TEST_F(StoreTest, WalSurvivesRestartAfterFlushWithRenumberedSeries) {
  // Series are re-logged after each flush and each restart, in a different order than they
  // were first created: replay must still attribute every sample to its own series.
  {
    auto s = OpenStore();
    Fill(s.get(), 3, kT0, 120);
    ASSERT_TRUE(s->Flush().ok());
    ASSERT_TRUE(s->Append({In("2", {{kT0 + 200'000, 7}})}).ok());
    ASSERT_TRUE(s->Append({In("0", {{kT0 + 200'000, 5}})}).ok());
  }  // Close flushes
  {
    auto s = OpenStore();
    ASSERT_TRUE(s->Append({In("1", {{kT0 + 300'000, 11}})}).ok());
    ASSERT_TRUE(s->Append({In("2", {{kT0 + 300'000, 12}})}).ok());
    s.reset();
  }
  {
    // Crash-like: append, then abandon without close (the WAL holds it) in a child process.
    const pid_t pid = ::fork();
    if (pid == 0) {
      auto s = Store::Open(dir_, Manual());
      if (!s.ok()) ::_exit(2);
      if (!(*s)->Append({In("0", {{kT0 + 400'000, 21}})}).ok()) ::_exit(3);
      if (!(*s)->Append({In("1", {{kT0 + 400'000, 22}})}).ok()) ::_exit(3);
      ::_exit(0);  // no destructors: nothing flushed
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto s = OpenStore();
  auto check = [&](const std::string& gpu, int64_t t, double want) {
    auto r = s->SelectRaw(Sel("DCGM_FI_DEV_GPU_TEMP{gpu=\"" + gpu + "\"}"), t, t);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u) << gpu << " @" << t;
    ASSERT_EQ((*r)[0].samples.size(), 1u);
    EXPECT_EQ((*r)[0].samples[0].value, want) << gpu << " @" << t;
  };
  check("2", kT0 + 200'000, 7);
  check("0", kT0 + 200'000, 5);
  check("1", kT0 + 300'000, 11);
  check("2", kT0 + 300'000, 12);
  check("0", kT0 + 400'000, 21);
  check("1", kT0 + 400'000, 22);
}

TEST_F(StoreTest, RollupsFromBlocksAndHeadMatchRawData) {
  auto s = OpenStore();
  Fill(s.get(), 2, kT0, 5400);  // 1.5 h
  ASSERT_TRUE(s->Flush().ok());
  Fill(s.get(), 2, kT0 + 5400'000, 5400);  // splits the second hour between block and head
  for (Tier tier : {Tier::k1m, Tier::k1h}) {
    auto got =
        s->SelectRollups(tier, Sel(R"(DCGM_FI_DEV_GPU_TEMP{gpu="1"})"), kT0, kT0 + 3 * kHourMs);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(got->size(), 1u);
    auto raw = s->SelectRaw(Sel(R"(DCGM_FI_DEV_GPU_TEMP{gpu="1"})"), kT0, kT0 + 3 * kHourMs);
    std::vector<RollupPoint> want;
    AppendRollups((*raw)[0].samples, TierWidthMs(tier), &want);
    const auto& pts = (*got)[0].points;
    ASSERT_EQ(pts.size(), want.size()) << TierName(tier);
    for (size_t i = 0; i < pts.size(); ++i) {
      EXPECT_EQ(pts[i].t_ms, want[i].t_ms);
      EXPECT_EQ(pts[i].min, want[i].min);
      EXPECT_EQ(pts[i].max, want[i].max);
      EXPECT_EQ(pts[i].sum, want[i].sum);
      EXPECT_EQ(pts[i].count, want[i].count);
      EXPECT_EQ(pts[i].last, want[i].last);
      EXPECT_EQ(pts[i].last_t_ms, want[i].last_t_ms);
      EXPECT_EQ(pts[i].first, want[i].first);
      EXPECT_EQ(pts[i].first_t_ms, want[i].first_t_ms);
    }
  }
  EXPECT_EQ(s->Coverage(Tier::kRaw).min_t_ms, kT0);
  EXPECT_EQ(s->Coverage(Tier::k1h).max_t_ms, kT0 + 10800'000 - 1000);
}

// Out-of-order samples reach the blocks: queries and rollups count each sample once, before
// and after the flush that writes them beside the in-order chunks.
TEST_F(StoreTest, OutOfOrderSamplesFlushIntoBlocksAndRollUpOnce) {
  StoreOptions o = Manual();
  o.head.out_of_order_window_ms = 3600'000;
  auto s = OpenStore(o);
  // Every even second first, then the odd ones of the same half hour.
  std::vector<Sample> even, odd;
  for (int64_t t = kT0; t < kT0 + 1800'000; t += 1000)
    (((t - kT0) / 1000) % 2 == 0 ? even : odd).push_back({t, static_cast<double>(t % 97)});
  ASSERT_TRUE(s->Append({In("0", even, "DCGM_FI_DEV_GPU_TEMP")}).ok());
  auto r = s->Append({In("0", odd, "DCGM_FI_DEV_GPU_TEMP")});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->accepted, odd.size());
  EXPECT_EQ(r->accepted_out_of_order, odd.size() - 1);  // the last odd second is the newest
  auto expect_whole = [&](const char* when) {
    auto raw = s->SelectRaw(Sel("DCGM_FI_DEV_GPU_TEMP"), kT0, kT0 + kHourMs);
    ASSERT_TRUE(raw.ok());
    ASSERT_EQ(raw->size(), 1u);
    const auto& got = (*raw)[0].samples;
    ASSERT_EQ(got.size(), 1800u) << when;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i].t_ms, kT0 + static_cast<int64_t>(i) * 1000) << when;
    auto roll = s->SelectRollups(Tier::k1m, Sel("DCGM_FI_DEV_GPU_TEMP"), kT0, kT0 + kHourMs);
    ASSERT_TRUE(roll.ok());
    ASSERT_EQ(roll->size(), 1u);
    ASSERT_EQ((*roll)[0].points.size(), 30u) << when;
    for (const auto& p : (*roll)[0].points) {
      EXPECT_EQ(p.count, 60) << when;
      EXPECT_EQ(p.first_t_ms, p.t_ms) << when;
      EXPECT_EQ(p.last_t_ms, p.t_ms + 59'000) << when;
    }
  };
  expect_whole("in the head");
  ASSERT_TRUE(s->Flush().ok());
  expect_whole("in a block");
  s.reset();
  s = OpenStore(o);
  expect_whole("reopened");
}

TEST_F(StoreTest, CompactionMergesADayAndKeepsRollupsExact) {
  auto s = OpenStore();
  for (int i = 0; i < 4; ++i) {
    Fill(s.get(), 2, kT0 + i * 1800'000LL, 1800);
    ASSERT_TRUE(s->Flush().ok());
  }
  const auto before =
      s->SelectRollups(Tier::k1h, Sel("DCGM_FI_DEV_GPU_TEMP"), kT0, kT0 + 2 * kHourMs);
  ASSERT_EQ(BlockFiles().size(), 4u);
  ASSERT_TRUE(s->Compact(/*closed_days_only=*/false).ok());
  EXPECT_EQ(BlockFiles().size(), 1u);
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + 2 * kHourMs), 2u * 7200);
  const auto after =
      s->SelectRollups(Tier::k1h, Sel("DCGM_FI_DEV_GPU_TEMP"), kT0, kT0 + 2 * kHourMs);
  ASSERT_EQ(after->size(), before->size());
  for (size_t i = 0; i < after->size(); ++i) {
    ASSERT_EQ((*after)[i].points.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ((*after)[i].points[k].count, 3600);
      EXPECT_EQ((*after)[i].points[k].sum, (*before)[i].points[k].sum);
    }
  }
  // And it survives a reopen: the replaced blocks are gone.
  s.reset();
  s = OpenStore();
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + 2 * kHourMs), 2u * 7200);
}

TEST_F(StoreTest, CrashAfterCompactionBeforeDeletingInputsDoesNotDoubleCount) {
  auto s = OpenStore();
  Fill(s.get(), 1, kT0, 1800);
  ASSERT_TRUE(s->Flush().ok());
  Fill(s.get(), 1, kT0 + 1800'000, 1800);
  ASSERT_TRUE(s->Flush().ok());
  const auto inputs = BlockFiles();
  ASSERT_EQ(inputs.size(), 2u);
  fs::create_directories(dir_ + "/saved");
  for (const auto& f : inputs) fs::copy_file(f, dir_ + "/saved/" + fs::path(f).filename().string());
  ASSERT_TRUE(s->Compact(false).ok());
  s.reset();
  // Put the inputs back, as if the crash came after the rename but before the unlinks.
  for (const auto& f : inputs) fs::copy_file(dir_ + "/saved/" + fs::path(f).filename().string(), f);
  StoreOpenReport rep;
  s = OpenStore(Manual(), &rep);
  EXPECT_EQ(rep.removed.size(), 2u);
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + kHourMs), 3600u);
  auto h = s->SelectRollups(Tier::k1h, Sel("DCGM_FI_DEV_GPU_TEMP"), kT0, kT0);
  ASSERT_EQ(h->size(), 1u);
  EXPECT_EQ((*h)[0].points[0].count, 3600);
}

// The triple fault: a compaction's output is damaged and its inputs survive (a crash before
// their deletion). The inputs hold its data whole: the output is quarantined, not salvaged
// beside them, and nothing is counted twice.
TEST_F(StoreTest, D13_DamagedCompactionOutputWithItsInputsIsNotSalvagedTwice) {
  auto s = OpenStore();
  Fill(s.get(), 1, kT0, 1800);
  ASSERT_TRUE(s->Flush().ok());
  Fill(s.get(), 1, kT0 + 1800'000, 1800);
  ASSERT_TRUE(s->Flush().ok());
  const auto inputs = BlockFiles();
  fs::create_directories(dir_ + "/saved");
  for (const auto& f : inputs) fs::copy_file(f, dir_ + "/saved/" + fs::path(f).filename().string());
  ASSERT_TRUE(s->Compact(false).ok());
  s.reset();
  const auto output = BlockFiles();
  ASSERT_EQ(output.size(), 1u);
  fs::resize_file(output[0], fs::file_size(output[0]) - 1);
  for (const auto& f : inputs) fs::copy_file(dir_ + "/saved/" + fs::path(f).filename().string(), f);
  StoreOpenReport rep;
  s = OpenStore(Manual(), &rep);
  ASSERT_EQ(rep.quarantined.size(), 1u);
  EXPECT_NE(rep.quarantined[0].find("the blocks it replaced are all still here"), std::string::npos)
      << rep.quarantined[0];
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + kHourMs), 3600u);
  EXPECT_EQ(BlockFiles().size(), 2u);
}

// The same with only one input back (a crash between the two deletions): the salvage leaves
// out that input's time, so the raw samples and the rollups' counts are exact.
TEST_F(StoreTest, D13_SalvageLeavesOutWhatASurvivingInputHolds) {
  auto s = OpenStore();
  Fill(s.get(), 1, kT0, 1800);
  ASSERT_TRUE(s->Flush().ok());
  Fill(s.get(), 1, kT0 + 1800'000, 1800);
  ASSERT_TRUE(s->Flush().ok());
  const auto inputs = BlockFiles();
  ASSERT_EQ(inputs.size(), 2u);
  fs::create_directories(dir_ + "/saved");
  fs::copy_file(inputs[0], dir_ + "/saved/first.gwb");
  ASSERT_TRUE(s->Compact(false).ok());
  s.reset();
  const auto output = BlockFiles();
  ASSERT_EQ(output.size(), 1u);
  fs::resize_file(output[0], fs::file_size(output[0]) - 1);
  fs::copy_file(dir_ + "/saved/first.gwb", inputs[0]);
  StoreOpenReport rep;
  s = OpenStore(Manual(), &rep);
  ASSERT_EQ(rep.quarantined.size(), 1u);
  EXPECT_NE(rep.quarantined[0].find("left out: the time of 1 replaced block(s) still here"),
            std::string::npos)
      << rep.quarantined[0];
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + kHourMs), 3600u);
  auto h = s->SelectRollups(Tier::k1m, Sel("DCGM_FI_DEV_GPU_TEMP"), kT0, kT0 + kHourMs);
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->size(), 1u);
  double count = 0;
  for (const auto& p : (*h)[0].points) count += p.count;
  EXPECT_EQ(count, 3600) << "no minute counted twice";
}

TEST_F(StoreTest, RetentionDropsTiersByAgeFromTheNewestSample) {
  StoreOptions o = Manual();
  o.raw_retention_ms = 2 * kHourMs;
  o.rollup_1m_retention_ms = 4 * kHourMs;
  auto s = OpenStore(o);
  for (int h = 0; h < 6; ++h) {
    Fill(s.get(), 1, kT0 + h * kHourMs, 3600);
    ASSERT_TRUE(s->Flush().ok());
  }
  ASSERT_TRUE(s->EnforceRetention().ok());
  const int64_t newest = kT0 + 6 * kHourMs - 1000;
  const auto raw = s->Coverage(Tier::kRaw);
  EXPECT_GE(raw.min_t_ms, newest - 3 * kHourMs);
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + 3 * kHourMs - 1), 0u);
  EXPECT_GT(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", newest - kHourMs, newest), 0u);
  EXPECT_GE(s->Coverage(Tier::k1m).min_t_ms, newest - 5 * kHourMs);
  EXPECT_EQ(s->Coverage(Tier::k1h).min_t_ms, kT0);  // a year: all kept
  // Blocks left with rollups only merge into one; the raw-bearing ones merge per day.
  const auto before = s->SelectRollups(Tier::k1h, Sel("DCGM_FI_DEV_GPU_TEMP"), kT0, newest);
  ASSERT_TRUE(s->Compact(/*closed_days_only=*/false).ok());
  EXPECT_LE(BlockFiles().size(), 3u);
  const auto after = s->SelectRollups(Tier::k1h, Sel("DCGM_FI_DEV_GPU_TEMP"), kT0, newest);
  ASSERT_EQ((*after)[0].points.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ((*after)[0].points[i].sum, (*before)[0].points[i].sum);
}

TEST_F(StoreTest, DiskBudgetDropsOldestRawFirst) {
  StoreOptions o = Manual();
  auto s = OpenStore(o);
  for (int h = 0; h < 4; ++h) {
    Fill(s.get(), 8, kT0 + h * kHourMs, 3600);
    ASSERT_TRUE(s->Flush().ok());
  }
  const uint64_t full = s->Stats().bytes_on_disk;
  s.reset();
  o.disk_budget_bytes = full * 3 / 4;
  s = OpenStore(o);
  std::vector<std::string> events;
  s->SetEventSink([&](const std::string& kind, const std::string&, const std::string& msg) {
    events.push_back(kind + ": " + msg);
  });
  ASSERT_TRUE(s->EnforceRetention().ok());
  const StoreStats st = s->Stats();
  EXPECT_LE(st.bytes_on_disk, o.disk_budget_bytes);
  EXPECT_GT(st.tiers[0].min_t_ms, kT0);                       // the oldest raw went
  EXPECT_EQ(st.tiers[1].min_t_ms, kT0);                       // rollups of it stayed
  EXPECT_EQ(st.tiers[0].max_t_ms, kT0 + 4 * kHourMs - 1000);  // the newest raw stayed
  EXPECT_FALSE(events.empty());
}

TEST_F(StoreTest, DamagedChunkIsReportedSkippedAndQuarantinedKeepingTheRest) {
  {
    auto s = OpenStore();
    Fill(s.get(), 4, kT0, 3600);
    ASSERT_TRUE(s->Close().ok());
  }
  const auto files = BlockFiles();
  ASSERT_EQ(files.size(), 1u);
  // Flip a byte in the middle of the first chunk's data.
  {
    auto b = Block::Open(files[0]);
    ASSERT_TRUE(b.ok());
    const ChunkMeta m = (*b)->chunks(0)[0];
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(m.offset + m.length / 2));
    char c;
    f.seekg(static_cast<std::streamoff>(m.offset + m.length / 2));
    f.get(c);
    f.seekp(static_cast<std::streamoff>(m.offset + m.length / 2));
    f.put(static_cast<char>(c ^ 0x5a));
  }
  auto rep = Store::Check(dir_, /*quarantine=*/false);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->damaged());
  ASSERT_EQ(rep->block_damage.size(), 1u);
  EXPECT_NE(rep->block_damage[0].reason.find("checksum"), std::string::npos)
      << rep->block_damage[0].reason;
  {
    // The store opens and serves the other three series.
    auto s = OpenStore();
    EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + kHourMs), 3u * 3600);
  }
  rep = Store::Check(dir_, /*quarantine=*/true);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->quarantined.size(), 1u);
  EXPECT_TRUE(fs::exists(dir_ + "/quarantine/" + fs::path(files[0]).filename().string()));
  rep = Store::Check(dir_, false);
  EXPECT_FALSE(rep->damaged());
  auto s = OpenStore();
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + kHourMs), 3u * 3600);
  // The damaged series still has its rollups (they were intact).
  auto r = s->SelectRollups(Tier::k1h, Sel("DCGM_FI_DEV_GPU_TEMP"), kT0, kT0);
  EXPECT_EQ(r->size(), 4u);
}

// Issue 17, D13: a block cut short lost all its samples (the index is at its end). Opening the
// store now salvages the intact series from their records, quarantines the damaged file and
// names what it kept; what was only in the WAL still serves.
TEST_F(StoreTest, D13_TruncatedBlockIsSalvagedOnOpenAndWalStillServes) {
  {
    auto s = OpenStore();
    Fill(s.get(), 2, kT0, 600);
    ASSERT_TRUE(s->Flush().ok());
    Fill(s.get(), 2, kT0 + 600'000, 600);
    // The WAL as a crash would leave it: the second part not flushed.
    fs::copy(dir_ + "/wal", dir_ + "/wal.saved");
  }
  // Closing flushed the second part; undo that to get the crash state back.
  auto files = BlockFiles();
  ASSERT_EQ(files.size(), 2u);
  fs::remove(files[1]);
  fs::remove_all(dir_ + "/wal");
  fs::rename(dir_ + "/wal.saved", dir_ + "/wal");
  fs::resize_file(files[0], fs::file_size(files[0]) - 7);

  auto check = Store::Check(dir_, false);
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->damaged());
  EXPECT_NE(check->block_damage[0].reason.find("a scan finds 2 series"), std::string::npos)
      << check->block_damage[0].reason;
  StoreOpenReport rep;
  {
    auto s = OpenStore(Manual(), &rep);
    ASSERT_EQ(rep.quarantined.size(), 1u);
    EXPECT_NE(rep.quarantined[0].find("footer"), std::string::npos) << rep.quarantined[0];
    EXPECT_NE(rep.quarantined[0].find("salvaged 2 series, 34 chunks (1200 raw samples) into "
                                      "blocks/00000002.gwb; 0 chunks lost"),
              std::string::npos)
        << rep.quarantined[0];
    EXPECT_TRUE(fs::exists(dir_ + "/quarantine/" + fs::path(files[0]).filename().string()));
    // The salvaged first part and what was only in the WAL.
    EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + kHourMs), 2400u);
    ASSERT_TRUE(s->Close().ok());
  }
  // Once salvaged, the store is whole: nothing left to report, nothing counted twice.
  auto again = Store::Check(dir_, false);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->damaged());
  auto s = OpenStore();
  EXPECT_EQ(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + kHourMs), 2400u);
}

TEST_F(StoreTest, ReadOnlyOpenSeesWalWithoutChangingIt) {
  auto s = OpenStore();
  Fill(s.get(), 2, kT0, 600);
  ASSERT_TRUE(s->Flush().ok());
  Fill(s.get(), 2, kT0 + 600'000, 60);
  StoreOptions ro = Manual();
  ro.read_only = true;
  auto r = Store::Open(dir_, ro);  // beside the writer, as `store stats` runs beside the agent
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->Stats().samples, 2u * 660);
  EXPECT_FALSE((*r)->Flush().ok());
}

TEST_F(StoreTest, DiskFullFailsWritesClearlyAndKeepsReads) {
  // RLIMIT_FSIZE in a child: writes past the limit fail with EFBIG like a full disk.
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    auto s = Store::Open(dir_, Manual());
    if (!s.ok()) ::_exit(2);
    Fill(s->get(), 2, kT0, 600);
    if (!(*s)->Flush().ok()) ::_exit(3);
    struct rlimit lim {
      4096, 4096
    };
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int failed = 0;
    std::string events;
    (*s)->SetEventSink([&](const std::string& kind, const std::string&, const std::string& m) {
      events += kind + ": " + m + "\n";
    });
    for (int i = 0; i < 200; ++i) {
      std::vector<Sample> v;
      for (int k = 0; k < 50; ++k) v.push_back({kT0 + 600'000 + i * 50'000 + k * 1000, 1.5});
      auto r = (*s)->Append({In("0", v)});
      if (!r.ok()) {
        ++failed;
        if (r.status().message().find("write") == std::string::npos) ::_exit(4);
      }
    }
    if (failed == 0) ::_exit(5);
    if (events.find("store_error") == std::string::npos) ::_exit(6);
    // Reads keep working.
    auto q = (*s)->SelectRaw(Sel("DCGM_FI_DEV_GPU_TEMP"), kT0, kT0 + kHourMs);
    if (!q.ok() || q->size() != 2) ::_exit(7);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0);
  // No corruption: the store opens and `check` finds nothing but maybe a torn tail.
  auto rep = Store::Check(dir_, false);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->block_damage.empty());
  for (const auto& d : rep->wal_damage) EXPECT_TRUE(d.torn_tail) << d.reason;
  auto s = OpenStore();
  EXPECT_GE(CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, kT0 + 600'000), 1200u);
}

// SIGKILL at random points during heavy ingest with frequent flushes: every acknowledged
// sample (fsync policy kAlways) is there after a restart and nothing is corrupt.
TEST_F(StoreTest, KillNineDuringIngestLosesNothingAcknowledged) {
  std::mt19937 rng(20261130);
  int64_t next_t = kT0;
  for (int round = 0; round < 20; ++round) {
    int pipefd[2];
    ASSERT_EQ(::pipe(pipefd), 0);
    const int64_t start_t = next_t;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(pipefd[0]);
      StoreOptions o;
      o.head.wal.sync = SyncPolicy::kAlways;
      o.block_span_ms = 60'000;  // a flush every minute of data: several per round
      auto s = Store::Open(dir_, o);
      if (!s.ok()) ::_exit(2);
      for (int64_t t = start_t;; t += 1000) {
        std::vector<Head::Input> batch;
        for (int g = 0; g < 8; ++g) batch.push_back(In(std::to_string(g), {{t, Value(g, t)}}));
        auto r = (*s)->Append(batch);
        if (!r.ok() || r->accepted != 8) ::_exit(3);
        // Acknowledged: tell the parent.
        if (::write(pipefd[1], &t, sizeof t) != sizeof t) ::_exit(4);
      }
    }
    ::close(pipefd[1]);
    ::usleep(std::uniform_int_distribution<int>(20'000, 250'000)(rng));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    int64_t acked = start_t - 1000, t;
    while (::read(pipefd[0], &t, sizeof t) == sizeof t) acked = t;
    ::close(pipefd[0]);
    ASSERT_TRUE(WIFSIGNALED(status)) << "round " << round << " child exited " << status;

    auto s = OpenStore();
    ASSERT_TRUE(s) << "round " << round;
    const size_t want = static_cast<size_t>((acked - kT0) / 1000 + 1) * 8;
    const size_t got = CountSamples(*s, "DCGM_FI_DEV_GPU_TEMP", kT0, acked);
    ASSERT_EQ(got, want) << "round " << round << ": acknowledged up to " << acked;
    auto all = s->SelectRaw(Sel(R"(DCGM_FI_DEV_GPU_TEMP{gpu="3"})"), kT0, acked);
    for (const auto& x : (*all)[0].samples) ASSERT_EQ(x.value, Value(3, x.t_ms));
    // Continue after what the store holds (a sample written but not acknowledged may be there).
    auto newest = s->SelectRaw(Sel(R"(DCGM_FI_DEV_GPU_TEMP{gpu="0"})"), acked, acked + 3'600'000);
    next_t = newest->empty() ? acked + 1000 : (*newest)[0].samples.back().t_ms + 1000;
    s.reset();
    auto rep = Store::Check(dir_, false);
    ASSERT_TRUE(rep.ok());
    EXPECT_TRUE(rep->block_damage.empty()) << rep->block_damage[0].reason;
  }
}

}  // namespace
}  // namespace gpuwatch::store
