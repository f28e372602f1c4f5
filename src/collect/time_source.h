// Time sources (R7): the node's clock offset from its reference as the time daemon measured it
// — chrony, ntpd (or NTPsec) or systemd-timesyncd — read through their own command-line tools.
//
// Why not adjtimex alone: adjtimex's offset is what the kernel is still slewing out. chronyd
// does not use the kernel PLL at all (it steers the frequency), so under chrony adjtimex reads
// ~0 however far the clock is off. The daemon's own estimate is the number to compare nodes by.
//
// The parsers are pure functions over captured text; every rejection names what was wrong.
// TimeSourceProbe runs the tools (fork/exec with a hard deadline) through an injectable runner,
// so tests feed fixture text and simulate timeouts without spawning.
//
// Thread-safety: the parsers and RunCommand are thread-safe (RunCommand uses posix_spawn and
// O_CLOEXEC descriptors, so a concurrent spawn elsewhere in the process inherits nothing);
// a TimeSourceProbe is not: one collector thread owns it.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::collect {

struct TimeSourceReading {
  std::string source;  // "chrony" | "ntpd" | "timesyncd"
  // Local clock minus reference: positive when this node's clock is ahead (fast). Absent when
  // the tool does not report it (timedatectl show-timesync, see ParseTimedatectlTimesync) and
  // when not synced (the daemons then print a 0 that measures nothing).
  std::optional<double> offset_ms;
  std::optional<double> root_dispersion_ms;
  std::optional<double> jitter_ms;  // ntpd sys_jitter, timesyncd Jitter; chrony has none
  std::optional<unsigned> stratum;
  std::string reference;  // reference name/IP, refid, or the timesyncd server name
  // The daemon considers the clock synchronised: leap status not "unsynchronised" and a
  // stratum below 16.
  bool synced = false;
};

// `chronyc -c tracking`: one CSV line of 14 fields (see time_source.cc for the order and
// where it was checked). System time is printed as chrony's correction (positive = local clock
// slow); offset_ms is its negation.
Result<TimeSourceReading> ParseChronycTracking(std::string_view csv);

// `ntpq -c rv` (ntpd and NTPsec): comma-separated key=value pairs over several lines. offset
// and sys_jitter are in ms; ntpd's offset is the server's relative to this host (positive =
// local clock slow), so offset_ms is its negation.
Result<TimeSourceReading> ParseNtpqRv(std::string_view text);

// `timedatectl show-timesync`: Key=Value lines. systemd prints NTPMessage={ Leap=…, Stratum=…,
// RootDispersion=…, …, Jitter=… } but no offset: its four timestamps are printed to the
// second, too coarse to derive one (`timedatectl timesync-status` computes it from the
// microsecond D-Bus values, show-timesync does not). An Offset= inside NTPMessage is read
// when present; otherwise offset_ms is absent. No NTPMessage (no packet yet) = not synced.
Result<TimeSourceReading> ParseTimedatectlTimesync(std::string_view text);

// Runs argv (argv[0] an absolute path; no PATH lookup) with stdin from /dev/null, stderr
// discarded, stdout captured, in its own process group and with the environment reduced to
// LC_ALL=C and a fixed PATH (so numbers and names are never localised). Returns stdout when
// the command exits 0 within `timeout` with at most `max_output_bytes` of output. On timeout or
// too much output the whole process group is SIGKILLed and reaped: no zombie, and the caller
// is never held longer than `timeout` (plus the kill). Errors: NotFound (cannot exec),
// Unavailable (non-zero exit, signal, timeout), ResourceExhausted (output too large),
// IoError (pipe/poll failures).
inline constexpr size_t kMaxCommandOutputBytes = 64 * 1024;
Result<std::string> RunCommand(const std::vector<std::string>& argv,
                               std::chrono::milliseconds timeout,
                               size_t max_output_bytes = kMaxCommandOutputBytes);

// The first executable named `name` in /usr/bin, /usr/sbin, /bin, /sbin, or nullopt. A fixed
// list, not $PATH: the agent runs as root and must not run whatever a PATH entry offers.
std::optional<std::string> FindSystemTool(std::string_view name);

// Runs one command: argv[0] is the bare tool name ("chronyc"); must return within `timeout`.
// NotFound means "not installed" — the probe moves on without complaint.
using CommandRunner = std::function<Result<std::string>(const std::vector<std::string>& argv,
                                                        std::chrono::milliseconds timeout)>;

// FindSystemTool + RunCommand: the production runner.
CommandRunner SystemCommandRunner();

class TimeSourceProbe {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{2000};

  // `timeout` bounds a whole Probe(), all tools together: each tool gets what is left.
  explicit TimeSourceProbe(CommandRunner runner = SystemCommandRunner(),
                           std::chrono::milliseconds timeout = kDefaultTimeout);

  // Tries chronyc -c tracking, ntpq -c rv, timedatectl show-timesync — the tool that answered
  // last time first — and returns the first reading that parses. Unavailable (naming each
  // tool's failure) when none answers; the caller then keeps adjtimex.
  Result<TimeSourceReading> Probe();

  // The tool that answered last ("chronyc", "ntpq", "timedatectl"), or "" before any did.
  std::string_view preferred_tool() const;

 private:
  CommandRunner runner_;
  std::chrono::milliseconds timeout_;
  int preferred_ = -1;  // index into the tool table; -1 = none answered yet
};

}  // namespace gpuwatch::collect
