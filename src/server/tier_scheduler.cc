#include "server/tier_scheduler.h"

#include <time.h>

#include <algorithm>

namespace gpuwatch::server {
namespace {

using Clock = std::chrono::steady_clock;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

void TierScheduler::Start(std::vector<Tier> tiers, CpuFn on_cpu) {
  if (tiers.empty() || thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this, tiers = std::move(tiers), on_cpu = std::move(on_cpu)]() mutable {
    Run(std::move(tiers), on_cpu);
  });
}

void TierScheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TierScheduler::Run(std::vector<Tier> tiers, const CpuFn& on_cpu) {
  const auto start = Clock::now();
  std::vector<Clock::time_point> next;
  for (const Tier& t : tiers) next.push_back(start + t.first_after);
  while (true) {
    for (size_t i = 0; i < tiers.size(); ++i) {
      if (Clock::now() < next[i]) continue;
      const double cpu0 = ThreadCpuSeconds();
      tiers[i].tick();
      if (on_cpu) on_cpu(tiers[i].name, ThreadCpuSeconds() - cpu0);
      next[i] += tiers[i].interval;
      if (next[i] < Clock::now()) next[i] = Clock::now() + tiers[i].interval;
    }
    const Clock::time_point wake = *std::min_element(next.begin(), next.end());
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_until(lock, wake, [this] { return stopping_; })) return;
  }
}

}  // namespace gpuwatch::server
