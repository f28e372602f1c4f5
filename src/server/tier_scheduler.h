// TierScheduler: runs named ticks at their intervals on one thread of its own — an agent's
// collection tiers, a hub's and an agent's diagnosis and accounting (issue 19: a part both
// need). On the steady clock: a 1 Hz tier stays at 1 Hz however long a tick took, and a tick
// that overran is not replayed in a burst (its next run is an interval after now). Each tick's
// CPU time (the thread's own clock, so waits and other threads do not count) goes to `on_cpu`.
// Thread-safety: Start and Stop from one owner thread; the ticks run on the scheduler's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpuwatch::server {

class TierScheduler {
 public:
  struct Tier {
    std::string name;
    std::chrono::milliseconds interval;
    std::function<void()> tick;
    std::chrono::milliseconds first_after{0};  // the first run, after Start
  };
  using CpuFn = std::function<void(const std::string& name, double cpu_s)>;

  TierScheduler() = default;
  TierScheduler(const TierScheduler&) = delete;
  TierScheduler& operator=(const TierScheduler&) = delete;
  ~TierScheduler() { Stop(); }

  // Runs `tiers` (in this order when several are due) until Stop. REQUIRES: not running, and
  // at least one tier.
  void Start(std::vector<Tier> tiers, CpuFn on_cpu = nullptr);
  // Wakes the thread and joins it; a tick under way finishes first. Idempotent.
  void Stop();
  bool running() const { return thread_.joinable(); }

 private:
  void Run(std::vector<Tier> tiers, const CpuFn& on_cpu);

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace gpuwatch::server
