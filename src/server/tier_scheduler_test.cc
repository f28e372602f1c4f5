#include "server/tier_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>

namespace gpuwatch::server {
namespace {

using namespace std::chrono_literals;

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// A tier runs at once unless it says when first; Stop does not wait for an hour's interval;
// every tick's CPU is reported under its tier's name.
TEST(TierSchedulerTest, FirstRunsAndPromptStop) {
  std::atomic<int> now_runs{0}, later_runs{0};
  std::mutex mu;
  std::map<std::string, int> cpu_reports;
  TierScheduler s;
  s.Start({{"now", 1h, [&] { ++now_runs; }}, {"later", 1h, [&] { ++later_runs; }, 1h}},
          [&](const std::string& name, double cpu_s) {
            EXPECT_GE(cpu_s, 0);
            std::lock_guard<std::mutex> lock(mu);
            ++cpu_reports[name];
          });
  EXPECT_TRUE(s.running());
  ASSERT_TRUE(WaitFor([&] { return now_runs.load() == 1; }, 5s));
  const auto t0 = std::chrono::steady_clock::now();
  s.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_FALSE(s.running());
  EXPECT_EQ(now_runs.load(), 1);
  EXPECT_EQ(later_runs.load(), 0);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(cpu_reports, (std::map<std::string, int>{{"now", 1}}));
  s.Stop();  // idempotent
}

// A tick that overran its interval thirty times over is not made up in a burst: the tier goes
// on an interval after it, so 100 ms later it has run about ten times, not forty.
TEST(TierSchedulerTest, AnOverrunIsNotReplayed) {
  std::atomic<int> runs{0};
  std::atomic<bool> slow_done{false};
  TierScheduler s;
  s.Start({{"t", 10ms, [&] {
              if (runs.fetch_add(1) == 0) {
                std::this_thread::sleep_for(300ms);
                slow_done = true;
              }
            }}});
  ASSERT_TRUE(WaitFor([&] { return slow_done.load(); }, 5s));
  std::this_thread::sleep_for(100ms);
  s.Stop();
  EXPECT_LE(runs.load(), 1 + 15);
}

}  // namespace
}  // namespace gpuwatch::server
