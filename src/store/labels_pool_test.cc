#include "store/labels_pool.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "store/series_index.h"

namespace gpuwatch::store {
namespace {

Labels PoolTestLabels(const std::string& gpu) {
  auto l = MakeLabels({{"__name__", "DCGM_FI_DEV_GPU_TEMP"}, {"gpu", gpu}, {"Hostname", "n1"}});
  EXPECT_TRUE(l.ok());
  return *l;
}

TEST(LabelsPoolTest, OneCopyWhileHeldGoneWhenDropped) {
  LabelsPool pool;
  auto a = pool.Intern(PoolTestLabels("0"));
  auto b = pool.Intern(PoolTestLabels("0"));
  auto c = pool.Intern(PoolTestLabels("1"));
  EXPECT_EQ(a.get(), b.get()) << "the same label set is one copy";
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(pool.size(), 2u);
  a.reset();
  EXPECT_EQ(pool.size(), 2u) << "b still holds it";
  b.reset();
  EXPECT_EQ(pool.size(), 1u) << "the last holder gone, the pool forgets it";
  auto again = pool.Intern(PoolTestLabels("0"));
  EXPECT_EQ(*again, PoolTestLabels("0"));
  EXPECT_EQ(pool.size(), 2u);
}

// A label set may outlive every handle to its pool (a block still open after the store that
// opened it let go of the pool).
TEST(LabelsPoolTest, ALabelSetOutlivesItsPoolHandle) {
  std::shared_ptr<const Labels> kept;
  {
    LabelsPool pool;
    kept = pool.Intern(PoolTestLabels("3"));
  }
  EXPECT_EQ(LabelValue(*kept, "gpu"), "3");
  kept.reset();  // its deleter reaches the pool it came from, still alive through it
}

// Indexes that share a pool share the label sets (a store's head and blocks).
TEST(LabelsPoolTest, IndexesShareTheirLabelSets) {
  LabelsPool pool;
  SeriesIndex head(pool), block(pool);
  const SeriesRef h = head.GetOrCreate(PoolTestLabels("0"));
  const SeriesRef b = block.GetOrCreate(PoolTestLabels("0"));
  EXPECT_EQ(&head.LabelsAt(h), &block.LabelsAt(b));
  EXPECT_EQ(pool.size(), 1u);
  SeriesIndex own;  // no pool given: one of its own
  EXPECT_NE(&own.LabelsAt(own.GetOrCreate(PoolTestLabels("0"))), &head.LabelsAt(h));
  // A series taken back leaves the pool when nothing else holds it.
  head.GetOrCreate(PoolTestLabels("7"));
  EXPECT_EQ(pool.size(), 2u);
  head.RemoveFrom(1);
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_FALSE(head.Find(PoolTestLabels("7")));
  EXPECT_EQ(head.Find(PoolTestLabels("0")), h);
}

// Threads interning and dropping the same label sets at once: every Intern answers a live copy
// equal to what was asked, and the pool ends empty (run under ASan/TSan in CI).
TEST(LabelsPoolTest, ConcurrentInternAndRelease) {
  LabelsPool pool;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&pool] {
      for (int i = 0; i < 20000; ++i) {
        const Labels want = PoolTestLabels(std::to_string(i % 5));
        auto got = pool.Intern(want);
        ASSERT_EQ(*got, want);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(pool.size(), 0u);
}

}  // namespace
}  // namespace gpuwatch::store
