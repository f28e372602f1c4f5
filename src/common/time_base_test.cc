#include "common/time_base.h"

#include <gtest/gtest.h>

#include <chrono>

namespace gpuwatch {
namespace {

TEST(TimeBaseTest, NeverGoesBackwardsAndTracksWallClock) {
  TimeBase tb;
  int64_t prev = tb.NowMs();
  for (int i = 0; i < 1000; ++i) {
    int64_t now = tb.NowMs();
    ASSERT_GE(now, prev);
    prev = now;
  }
  using namespace std::chrono;
  const int64_t wall = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  EXPECT_LE(std::llabs(wall - tb.NowMs()), 1000);
  EXPECT_EQ(tb.resyncs(), 0u);
}

}  // namespace
}  // namespace gpuwatch
