#include "common/time_base.h"

#include <cstdlib>
#include <ctime>

namespace gpuwatch {

std::string FormatUtc(int64_t ms, const char* format) {
  // Floor, not truncation: -1 ms is the last second of 1969.
  const std::time_t secs = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  const size_t n = std::strftime(buf, sizeof(buf), format, &tm);
  return std::string(buf, n);
}

int64_t WallClockMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

TimeBase::TimeBase(std::chrono::milliseconds resync_threshold)
    : threshold_(resync_threshold),
      anchor_steady_(std::chrono::steady_clock::now()),
      anchor_wall_ms_(WallClockMs()) {}

int64_t TimeBase::NowMs() {
  using namespace std::chrono;
  std::lock_guard<std::mutex> lock(mu_);
  const auto steady = steady_clock::now();
  const int64_t mono_ms =
      anchor_wall_ms_ + duration_cast<milliseconds>(steady - anchor_steady_).count();
  const int64_t wall = WallClockMs();
  if (std::llabs(wall - mono_ms) > threshold_.count()) {
    last_step_ms_ = wall - mono_ms;
    ++resyncs_;
    anchor_steady_ = steady;
    anchor_wall_ms_ = wall;
    return wall;
  }
  return mono_ms;
}

uint64_t TimeBase::resyncs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resyncs_;
}

int64_t TimeBase::last_step_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_step_ms_;
}

}  // namespace gpuwatch
