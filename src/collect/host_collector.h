// HostCollector: the host line of a tick — CPU, memory, load, NICs and InfiniBand ports (R1
// host part, R10), read from procfs and sysfs under an injectable root so tests run on
// checked-in fixture trees (tests/fixtures/root).
//
// Every file is independent: a missing or corrupt file clears only its own fields and is logged
// once (per path, then at most once an hour while it stays bad), so a flaky driver attribute
// never floods the log nor costs the rest of the sample. CPU percentages are derived from the
// previous Collect(), so they are absent on the first call.
//
// The clock (R7) is this machine's, read only for the real root: adjtimex on every call, and
// the time daemon's own offset (TimeSourceProbe) at most once a minute, its last reading
// repeated in between.
//
// Thread-safety: not thread-safe; one collector thread owns an instance.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "collect/time_source.h"
#include "common/status.h"
#include "model/host.h"

namespace gpuwatch::collect {

// R7: the clock state from an adjtimex(2) reading. Pure; `rc` is adjtimex's return value
// (TIME_ERROR when the clock is not synchronized). Offsets are in ns when STA_NANO is set.
struct ClockState {
  double offset_ms = 0, max_error_ms = 0;
  bool synced = false;
};
ClockState ClockStateFromTimex(int rc, long offset, long maxerror, int status);

class HostCollector {
 public:
  // How often the time daemon is asked: chronyc is cheap, but a fork+exec every 5 s host tick
  // on a busy trainer is not, and the daemons themselves update only every 16-1024 s.
  static constexpr int64_t kTimeSourceProbeIntervalMs = 60 * 1000;

  // `root_dir` is prepended to every path ("/" in production; a fixture tree in tests).
  // `time_probe` reads the time daemon; null means the real tools when root_dir is "/" and
  // none for a fixture tree, so tests never run the machine's chronyc.
  explicit HostCollector(std::string root_dir = "/",
                         std::unique_ptr<TimeSourceProbe> time_probe = nullptr);

  // Fills `*out` (reset first) with everything readable now. Returns non-OK (Unavailable) only
  // when not one of the host files could be read — a wrong root, not a flaky attribute.
  // REQUIRES: out != nullptr.
  Status Collect(int64_t time_ms, model::HostSample* out);

 private:
  // Cumulative /proc/stat jiffies of the aggregate "cpu" line, kept between ticks.
  struct CpuTimes {
    uint64_t total = 0;  // user+nice+system+idle+iowait+irq+softirq+steal (guest is in user)
    uint64_t idle = 0;
    uint64_t iowait = 0;
  };

  bool ReadStat(int64_t now_ms, model::HostSample* out);
  bool ReadMeminfo(int64_t now_ms, model::HostSample* out);
  bool ReadLoadavg(int64_t now_ms, model::HostSample* out);
  bool ReadNetDev(int64_t now_ms, model::HostSample* out);
  bool ReadInfiniband(int64_t now_ms, model::HostSample* out);
  void ReadNicSysfs(int64_t now_ms, model::NicSample* nic);
  void ReadIbPort(int64_t now_ms, const std::string& port_dir, model::IbPortSample* port);
  std::optional<uint64_t> ReadCounter(int64_t now_ms, const std::string& path);
  void ReadTimeSource(int64_t now_ms, model::HostSample* out);

  // Logs `what` for `path` unless that path was already reported within the last hour.
  void Warn(int64_t now_ms, const std::string& path, std::string_view what);

  std::string root_;  // without a trailing slash; "" for "/"
  std::optional<CpuTimes> prev_cpu_;
  std::unique_ptr<TimeSourceProbe> time_probe_;   // null: no time source for this root
  std::optional<int64_t> time_probe_ms_;          // when it last ran (sample time)
  std::optional<TimeSourceReading> time_source_;  // its last answer; reset when none answers
  // path -> time of the last warning. Bounded: cleared when it grows past a cap, so churning
  // virtual interfaces (veth on a Kubernetes node) cannot grow it forever.
  std::unordered_map<std::string, int64_t> warned_;
};

}  // namespace gpuwatch::collect
