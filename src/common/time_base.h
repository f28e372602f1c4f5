// TimeBase: the one clock every sample is stamped with.
//
// Wall-clock milliseconds since the Unix epoch, advanced by the monotonic clock so that a
// scheduler tick never goes backwards or jumps when NTP slews the wall clock; when the two
// drift apart by more than `resync_threshold` (an NTP step, a suspend), the base re-anchors
// and reports it so the jump can become an event. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace gpuwatch {

// The system clock in ms since the Unix epoch, unsmoothed: for deadlines, retention and
// request defaults, where TimeBase's monotonic correction is not needed.
int64_t WallClockMs();

// ms since the Unix epoch as UTC text in strftime's `format` ("2026-11-30T18:22:02Z").
std::string FormatUtc(int64_t ms, const char* format = "%Y-%m-%dT%H:%M:%SZ");

class TimeBase {
 public:
  explicit TimeBase(std::chrono::milliseconds resync_threshold = std::chrono::milliseconds(1000));

  // Wall-clock ms (Unix epoch), monotonic-corrected.
  int64_t NowMs();
  // Number of times the base re-anchored to the wall clock since construction.
  uint64_t resyncs() const;
  // Last measured wall-minus-monotonic discrepancy at re-anchor, in ms.
  int64_t last_step_ms() const;

 private:
  mutable std::mutex mu_;
  std::chrono::milliseconds threshold_;
  std::chrono::steady_clock::time_point anchor_steady_;
  int64_t anchor_wall_ms_;
  uint64_t resyncs_ = 0;
  int64_t last_step_ms_ = 0;
};

}  // namespace gpuwatch
