#include "store/sample_list.h"

#include <gtest/gtest.h>

#include <limits>
#include <utility>
#include <vector>

namespace gpuwatch::store {
namespace {

std::vector<int64_t> Times(const SampleList& l) {
  std::vector<int64_t> out;
  for (const Sample& s : l) out.push_back(s.t_ms);
  return out;
}

// Inline up to kInline, then on the heap; the samples stay in order through the move.
TEST(SampleListTest, GrowsPastItsInlineSamples) {
  SampleList l;
  EXPECT_TRUE(l.empty());
  for (int64_t t = 1; t <= 100; ++t) l.push_back({t, static_cast<double>(t) / 2});
  ASSERT_EQ(l.size(), 100u);
  EXPECT_GE(l.capacity(), 100u);
  for (size_t i = 0; i < l.size(); ++i) {
    EXPECT_EQ(l[i].t_ms, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(l[i].value, static_cast<double>(i + 1) / 2);
  }
  EXPECT_EQ(l.front().t_ms, 1);
  EXPECT_EQ(l.back().t_ms, 100);
  l.clear();
  EXPECT_TRUE(l.empty());
}

// A sample pushed from the list itself survives the growth that moves the list.
TEST(SampleListTest, PushingOneOfItsOwnSamplesWhileGrowing) {
  SampleList l{{1, 10}, {2, 20}};
  ASSERT_EQ(l.size(), l.capacity());
  l.push_back(l[0]);
  EXPECT_EQ(Times(l), (std::vector<int64_t>{1, 2, 1}));
  EXPECT_EQ(l[2].value, 10);
}

// Copies are deep and moves take the heap storage (or copy the inline samples); the moved-from
// list is empty and usable.
TEST(SampleListTest, CopiesAndMoves) {
  SampleList small{{1, 1}};
  SampleList big;
  for (int64_t t = 0; t < 10; ++t) big.emplace_back(t, 0);

  SampleList small_copy = small, big_copy = big;
  big_copy[0].t_ms = 99;
  EXPECT_EQ(big[0].t_ms, 0) << "the copy has storage of its own";
  EXPECT_EQ(small_copy, small);

  const Sample* heap = big.data();
  SampleList taken = std::move(big);
  EXPECT_EQ(taken.data(), heap);
  EXPECT_EQ(taken.size(), 10u);
  EXPECT_TRUE(big.empty());  // NOLINT(bugprone-use-after-move): specified here
  big.push_back({5, 5});
  EXPECT_EQ(Times(big), (std::vector<int64_t>{5}));

  SampleList moved_small = std::move(small);
  EXPECT_EQ(Times(moved_small), (std::vector<int64_t>{1}));
  EXPECT_TRUE(small.empty());  // NOLINT(bugprone-use-after-move)

  // Assignments over lists that hold storage of their own, and onto themselves.
  taken = small_copy;
  EXPECT_EQ(Times(taken), (std::vector<int64_t>{1}));
  taken = std::move(big_copy);
  EXPECT_EQ(taken.size(), 10u);
  EXPECT_EQ(taken[0].t_ms, 99);
  SampleList& self = taken;
  taken = self;
  EXPECT_EQ(taken.size(), 10u);
  taken = std::move(self);
  EXPECT_EQ(taken.size(), 10u);
}

// Equality is of the samples bit for bit: a retry's identical NaN is equal, -0 is not 0.
TEST(SampleListTest, EqualityIsBitwise) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ((SampleList{{1, nan}}), (SampleList{{1, nan}}));
  EXPECT_FALSE((SampleList{{1, 0.0}}) == (SampleList{{1, -0.0}}));
  EXPECT_FALSE((SampleList{{1, 0.0}}) == (SampleList{{1, 0.0}, {2, 0.0}}));
  const std::vector<Sample> v{{1, 1}, {2, 2}, {3, 3}};
  EXPECT_EQ(SampleList(v.begin(), v.end()), (SampleList{{1, 1}, {2, 2}, {3, 3}}));
}

}  // namespace
}  // namespace gpuwatch::store
