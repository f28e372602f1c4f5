#include "collect/time_source.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "common/strings.h"

namespace gpuwatch::collect {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::string Quote(std::string_view s) {
  // Error messages quote what was read; a hostile or binary capture must not flood the log.
  constexpr size_t kMax = 40;
  std::string out = PrintableText(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  return "'" + out + "'";
}

// ParseDouble that also takes a leading '+' (chronyc's and systemd's human forms sign their
// offsets; a tool version may do so in ours) and rejects NaN/infinity, which no clock field
// can be.
std::optional<double> ParseFinite(std::string_view s) {
  s = TrimWhitespace(s);
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty() || s[0] == '+') return std::nullopt;
  auto v = ParseDouble(s);
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return v;
}

// One key=value pair of ntpq's or systemd's NTPMessage text.
struct KeyValue {
  std::string_view key, value;
};

bool IsKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Splits text like `associd=0 status=0615 leap_none, sync_ntp, version="ntpd 4.2.8p15 (1)",
// reftime=e8f2c3a1.12345678  Mon, Nov 13 2023 10:00:01.071, offset=-0.123` into pairs.
// A key starts a word (after the start, blank, ',' or '{') and runs to '='; its value is
// everything up to the next key, without the separators around it. Splitting on ", " would
// not do: ntpq's reftime and systemd's timestamps hold commas and blanks, and older systemd
// (245, 252) printed "Ignored=no PacketCount=1" without a comma. Text in double quotes is a
// value, never a key.
std::vector<KeyValue> ScanKeyValues(std::string_view s) {
  std::vector<KeyValue> out;
  size_t value_start = std::string_view::npos;
  std::string_view key;
  auto finish = [&](size_t end) {
    if (value_start == std::string_view::npos) return;
    std::string_view v = s.substr(value_start, end - value_start);
    // Strip separators: blanks, the ',' before the next key, a closing '}'.
    while (!v.empty() && (v.back() == ',' || v.back() == '}' || v.back() == ' ' ||
                          v.back() == '\t' || v.back() == '\n' || v.back() == '\r')) {
      v.remove_suffix(1);
    }
    v = TrimWhitespace(v);
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    out.push_back({key, v});
  };
  bool in_quotes = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"') {
      in_quotes = !in_quotes;
      continue;
    }
    if (in_quotes || !IsKeyChar(c)) continue;
    const char prev = i == 0 ? ' ' : s[i - 1];
    if (!(prev == ' ' || prev == '\t' || prev == '\n' || prev == '\r' || prev == ',' ||
          prev == '{')) {
      continue;
    }
    size_t j = i;
    while (j < s.size() && IsKeyChar(s[j])) ++j;
    if (j >= s.size() || s[j] != '=') {
      i = j > i ? j - 1 : i;  // a plain word ("leap_none"): skip it whole
      continue;
    }
    finish(i);
    key = s.substr(i, j - i);
    value_start = j + 1;
    i = j;
  }
  finish(s.size());
  return out;
}

const std::string_view* Find(const std::vector<KeyValue>& kvs, std::string_view key) {
  for (const auto& kv : kvs)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

// A systemd timespan as FORMAT_TIMESPAN prints it ("30.349ms", "469us", "1min 4s", "0"), in ms.
// A leading sign is allowed for an offset. nullopt on any unknown unit or stray text.
std::optional<double> ParseTimespanMs(std::string_view s) {
  s = TrimWhitespace(s);
  double sign = 1;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    sign = s[0] == '-' ? -1 : 1;
    s.remove_prefix(1);
  }
  if (s.empty()) return std::nullopt;
  if (s == "0") return 0.0;
  struct Unit {
    std::string_view name;
    double ms;
  };
  // Matched whole ("ms" is never read as "m" + "s"); the units FORMAT_TIMESPAN uses.
  static constexpr std::array<Unit, 11> kUnits = {{{"month", 2629800000.0},
                                                   {"min", 60000.0},
                                                   {"ms", 1.0},
                                                   {"us", 1e-3},
                                                   {"\xc2\xb5s", 1e-3},  // µs
                                                   {"ns", 1e-6},
                                                   {"y", 31557600000.0},
                                                   {"w", 604800000.0},
                                                   {"d", 86400000.0},
                                                   {"h", 3600000.0},
                                                   {"s", 1000.0}}};
  double total = 0;
  bool any = false;
  for (std::string_view part : SplitAny(s, " ")) {
    size_t n = 0;
    while (n < part.size() && ((part[n] >= '0' && part[n] <= '9') || part[n] == '.')) ++n;
    if (n == 0) return std::nullopt;
    auto v = ParseDouble(part.substr(0, n));
    if (!v) return std::nullopt;
    const std::string_view unit = part.substr(n);
    const Unit* u = nullptr;
    for (const auto& k : kUnits)
      if (unit == k.name) u = &k;
    if (u == nullptr) return std::nullopt;
    total += *v * u->ms;
    any = true;
  }
  if (!any || !std::isfinite(total)) return std::nullopt;
  return sign * total;
}

}  // namespace

// chronyc -c tracking. The field order is that of chrony's client.c process_cmd_tracking(),
// whose print_report() format lists, in order: Reference ID (%R: 8 hex digits), the reference
// name or IP (%s), Stratum (%u), Ref time (%T, printed in CSV mode as epoch seconds with 9
// decimals), System time (%O: in CSV mode a bare "%.9f" of the current correction, which the
// human form prints as "N seconds slow of NTP time" when positive), Last offset, RMS offset,
// Frequency (%F: ppm, positive = "slow" in the human form), Residual freq, Skew, Root delay,
// Root dispersion, Update interval and Leap status (%L: "Normal", "Insert second",
// "Delete second", "Not synchronised", "Invalid"). Checked against chrony 4.3's chronyc
// (Debian 12) answering from a scratch chronyd -x: "7F7F0101,,10,1796050275.555304413,
// 0.000000000,...,0.0,Normal", and unsynchronised "00000000,,0,0.000000000,...,Not
// synchronised". CSV mode drops the '+' of signed fields.
Result<TimeSourceReading> ParseChronycTracking(std::string_view csv) {
  std::string_view line = TrimWhitespace(csv);
  if (line.empty()) return Status::InvalidArgument("chronyc tracking: empty output");
  if (line.find('\n') != std::string_view::npos)
    return Status::InvalidArgument("chronyc tracking: expected one CSV line, got several");
  constexpr size_t kFields = 14;
  const std::vector<std::string_view> f = SplitAny(line, ",", /*skip_empty=*/false);
  if (f.size() != kFields) {
    return Status::InvalidArgument("chronyc tracking: expected " + std::to_string(kFields) +
                                   " CSV fields, got " + std::to_string(f.size()));
  }
  const std::string_view ref_id = TrimWhitespace(f[0]);
  if (ref_id.size() != 8 || !ParseInt<uint32_t>(ref_id, 16)) {
    return Status::InvalidArgument("chronyc tracking: reference ID " + Quote(ref_id) +
                                   " is not 8 hex digits");
  }
  auto stratum = ParseInt<unsigned>(f[2]);
  if (!stratum) {
    return Status::InvalidArgument("chronyc tracking: stratum " + Quote(f[2]) + " is not a number");
  }
  // Every numeric column is checked, not only those kept: a shifted or half-written line must
  // not be read as plausible numbers.
  static constexpr std::array<std::pair<size_t, std::string_view>, 10> kNumeric = {{
      {3, "ref time"},
      {4, "system time"},
      {5, "last offset"},
      {6, "RMS offset"},
      {7, "frequency"},
      {8, "residual freq"},
      {9, "skew"},
      {10, "root delay"},
      {11, "root dispersion"},
      {12, "update interval"},
  }};
  std::array<double, kFields> num{};
  for (const auto& [i, what] : kNumeric) {
    auto v = ParseFinite(f[i]);
    if (!v) {
      return Status::InvalidArgument("chronyc tracking: " + std::string(what) + " " + Quote(f[i]) +
                                     " is not a number");
    }
    num[i] = *v;
  }
  const std::string_view leap = TrimWhitespace(f[13]);
  bool leap_ok;
  if (leap == "Normal" || leap == "Insert second" || leap == "Delete second") {
    leap_ok = true;
  } else if (leap == "Not synchronised" || leap == "Invalid") {
    leap_ok = false;
  } else {
    return Status::InvalidArgument("chronyc tracking: unknown leap status " + Quote(leap));
  }

  // Seconds to ms can overflow a double ("1e307"): no clock is that far off, so say so.
  const double offset_ms = 0.0 - num[4] * 1000, dispersion_ms = num[11] * 1000;
  if (!std::isfinite(offset_ms) || !std::isfinite(dispersion_ms))
    return Status::InvalidArgument("chronyc tracking: system time or root dispersion out of range");

  TimeSourceReading r;
  r.source = "chrony";
  r.stratum = *stratum;
  const std::string_view name = TrimWhitespace(f[1]);
  r.reference = PrintableText(name.empty() ? ref_id : name);
  r.synced = leap_ok && *stratum < 16;
  r.root_dispersion_ms = dispersion_ms;
  // The correction is positive when the local clock is behind: local minus reference is its
  // negation ("0.0 -" keeps a zero correction +0, not -0). Unsynchronised, chronyd prints a
  // zero that measures nothing, so the offset is left absent rather than claimed perfect.
  if (r.synced) r.offset_ms = offset_ms;
  return r;
}

// ntpq -c rv. Variables as ntpq's documentation names them: offset ("combined offset of
// server relative to this host", ms), sys_jitter (ms; "jitter" before ntpd 4.2.6), rootdisp
// (ms), stratum, refid, leap (two bits, printed "00".."11"; 11 = alarm, unsynchronised). The
// leap bits also head the status word (status=c618 -> 3), used when leap= is absent.
Result<TimeSourceReading> ParseNtpqRv(std::string_view text) {
  if (TrimWhitespace(text).empty()) return Status::InvalidArgument("ntpq rv: empty output");
  const std::vector<KeyValue> kv = ScanKeyValues(text);
  const std::string_view* offset = Find(kv, "offset");
  const std::string_view* stratum_s = Find(kv, "stratum");
  if (offset == nullptr) return Status::InvalidArgument("ntpq rv: no offset= variable");
  if (stratum_s == nullptr) return Status::InvalidArgument("ntpq rv: no stratum= variable");
  auto offset_ms = ParseFinite(*offset);
  if (!offset_ms)
    return Status::InvalidArgument("ntpq rv: offset " + Quote(*offset) + " is not a number");
  auto stratum = ParseInt<unsigned>(*stratum_s);
  if (!stratum) {
    return Status::InvalidArgument("ntpq rv: stratum " + Quote(*stratum_s) + " is not a number");
  }
  std::optional<unsigned> leap;
  if (const std::string_view* l = Find(kv, "leap")) {
    const std::string_view v = TrimWhitespace(*l);
    if (v == "00" || v == "0") leap = 0;
    if (v == "01" || v == "1") leap = 1;
    if (v == "10" || v == "2") leap = 2;
    if (v == "11" || v == "3") leap = 3;
    if (!leap) return Status::InvalidArgument("ntpq rv: unknown leap " + Quote(v));
  } else if (const std::string_view* st = Find(kv, "status")) {
    // "0615 leap_none, sync_ntp, ..." -> 0x0615; leap is the top two bits.
    const std::vector<std::string_view> words = SplitAny(*st, " ,");
    if (auto w = words.empty() ? std::nullopt : ParseInt<uint16_t>(words[0], 16))
      leap = static_cast<unsigned>(*w >> 14);
  }

  TimeSourceReading r;
  r.source = "ntpd";
  r.stratum = *stratum;
  r.synced = leap.value_or(0) != 3 && *stratum < 16;
  if (r.synced) r.offset_ms = 0.0 - *offset_ms;  // server relative to us -> us minus server
  if (const std::string_view* v = Find(kv, "refid")) r.reference = PrintableText(*v);
  const std::string_view* jitter = Find(kv, "sys_jitter");
  if (jitter == nullptr) jitter = Find(kv, "jitter");
  if (jitter != nullptr) r.jitter_ms = ParseFinite(*jitter);
  if (const std::string_view* v = Find(kv, "rootdisp")) r.root_dispersion_ms = ParseFinite(*v);
  return r;
}

// timedatectl show-timesync: systemd's timedatectl.c print_timesync_property() prints
// NTPMessage as "{ Leap=%u, Version=%u, Mode=%u, Stratum=%u, Precision=%i, RootDelay=<span>,
// RootDispersion=<span>, Reference=<hex or string>, OriginateTimestamp=<FORMAT_TIMESTAMP>, …,
// DestinationTimestamp=…, Ignored=yes|no, PacketCount=%u, Jitter=<span> }", and nothing when
// no packet was received yet. It has no Offset field: the offset appears only in the human
// `timesync-status`, computed from microsecond values that show-timesync prints to the second.
Result<TimeSourceReading> ParseTimedatectlTimesync(std::string_view text) {
  std::optional<std::string_view> server_name, server_address, message, poll;
  for (std::string_view line : SplitAny(text, "\n")) {
    line = TrimWhitespace(line);
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    const std::string_view key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "ServerName") server_name = value;
    if (key == "ServerAddress") server_address = value;
    if (key == "NTPMessage") message = value;
    if (key == "PollIntervalUSec") poll = value;
  }
  if (!server_name && !server_address && !message && !poll) {
    return Status::InvalidArgument(
        "timedatectl show-timesync: none of ServerName=, ServerAddress=, PollIntervalUSec=, "
        "NTPMessage= found");
  }
  TimeSourceReading r;
  r.source = "timesyncd";
  r.reference = PrintableText(server_name && !server_name->empty() ? *server_name
                              : server_address                     ? *server_address
                                                                   : std::string_view());
  if (!message) return r;  // no packet yet: not synchronised, nothing measured

  std::string_view m = TrimWhitespace(*message);
  if (m.size() < 2 || m.front() != '{' || m.back() != '}') {
    return Status::InvalidArgument("timedatectl show-timesync: NTPMessage " + Quote(m) +
                                   " is not { … }");
  }
  const std::vector<KeyValue> kv = ScanKeyValues(m.substr(1, m.size() - 2));
  const std::string_view* leap_s = Find(kv, "Leap");
  const std::string_view* stratum_s = Find(kv, "Stratum");
  if (leap_s == nullptr || stratum_s == nullptr) {
    return Status::InvalidArgument(
        "timedatectl show-timesync: NTPMessage without Leap= or Stratum=");
  }
  auto leap = ParseInt<unsigned>(*leap_s);
  auto stratum = ParseInt<unsigned>(*stratum_s);
  if (!leap || *leap > 3) {
    return Status::InvalidArgument("timedatectl show-timesync: Leap " + Quote(*leap_s) +
                                   " is not 0..3");
  }
  if (!stratum) {
    return Status::InvalidArgument("timedatectl show-timesync: Stratum " + Quote(*stratum_s) +
                                   " is not a number");
  }
  r.stratum = *stratum;
  // Stratum 0 in a server's reply is a kiss-o'-death or "unspecified": nothing to sync to.
  r.synced = *leap != 3 && *stratum >= 1 && *stratum < 16;
  if (const std::string_view* v = Find(kv, "RootDispersion"))
    r.root_dispersion_ms = ParseTimespanMs(*v);
  if (const std::string_view* v = Find(kv, "Jitter")) r.jitter_ms = ParseTimespanMs(*v);
  if (r.reference.empty()) {
    // A stratum-1 server's reference is four raw bytes printed as a string ("GPS", "PPS").
    if (const std::string_view* v = Find(kv, "Reference")) r.reference = PrintableText(*v);
  }
  if (const std::string_view* v = Find(kv, "Offset")) {
    // Not printed by any systemd we know of; honoured if a build adds it. Its sign follows
    // timesync-status: "+" = the server ahead of us, as NTP's theta.
    auto offset = ParseTimespanMs(*v);
    if (!offset) {
      return Status::InvalidArgument("timedatectl show-timesync: Offset " + Quote(*v) +
                                     " is not a time span");
    }
    if (r.synced) r.offset_ms = 0.0 - *offset;
  }
  return r;
}

std::optional<std::string> FindSystemTool(std::string_view name) {
  if (name.empty() || name.find('/') != std::string_view::npos || name == "." || name == "..")
    return std::nullopt;
  static constexpr std::array<std::string_view, 4> kDirs = {"/usr/bin", "/usr/sbin", "/bin",
                                                            "/sbin"};
  for (std::string_view dir : kDirs) {
    std::string path = std::string(dir) + "/" + std::string(name);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0)
      return path;
  }
  return std::nullopt;
}

namespace {

std::string ErrnoMessage(int err) { return std::strerror(err); }

// Kills the child's process group (a shell's children too) and reaps the child. SIGKILL cannot
// be caught, so the blocking waitpid returns as soon as the kernel tears the process down.
void KillAndReap(pid_t pid, int* status) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);  // in case it left its group
  while (::waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

Result<std::string> RunCommand(const std::vector<std::string>& argv,
                               std::chrono::milliseconds timeout, size_t max_output_bytes) {
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/')
    return Status::InvalidArgument("RunCommand: argv[0] must be an absolute path");
  const std::string& path = argv[0];
  const auto deadline = SteadyClock::now() + timeout;

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::IoError("pipe2: " + ErrnoMessage(errno));

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawnattr_init(&attr);
  // dup2 clears FD_CLOEXEC on the child's stdout; both pipe ends themselves close on exec.
  ::posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  ::posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  sigset_t mask, defaults;
  sigemptyset(&mask);
  sigemptyset(&defaults);
  // The agent ignores SIGPIPE (HTTP); ignored signals survive exec, so restore the defaults.
  for (int sig : {SIGPIPE, SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&defaults, sig);
  ::posix_spawnattr_setsigmask(&attr, &mask);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);
  // Its own process group, so a timeout kills what it started too (sh -c 'sleep 5').
  ::posix_spawnattr_setpgroup(&attr, 0);
  ::posix_spawnattr_setflags(
      &attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // LC_ALL=C: timedatectl localises, and a locale with a decimal comma would break chronyc's
  // CSV. Nothing else of the agent's environment is passed on.
  std::array<char*, 3> env = {const_cast<char*>("LC_ALL=C"),
                              const_cast<char*>("PATH=/usr/sbin:/usr/bin:/sbin:/bin"), nullptr};

  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, path.c_str(), &fa, &attr, args.data(), env.data());
  ::posix_spawn_file_actions_destroy(&fa);
  ::posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    // glibc reports exec failures here (and reaps the failed child itself).
    const std::string msg = "cannot run " + path + ": " + ErrnoMessage(rc);
    return rc == ENOENT ? Status::NotFound(msg) : Status::Unavailable(msg);
  }

  std::string out;
  bool eof = false, timed_out = false, too_big = false;
  std::string io_error;
  std::array<char, 4096> buf;
  while (!eof) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (n < 0) {
      if (errno == EINTR) continue;
      io_error = "poll: " + ErrnoMessage(errno);
      break;
    }
    if (n == 0) continue;  // the deadline check above ends the loop
    const ssize_t r = ::read(fds[0], buf.data(), buf.size());
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      io_error = "read: " + ErrnoMessage(errno);
      break;
    }
    if (r == 0) {
      eof = true;
      break;
    }
    if (out.size() + static_cast<size_t>(r) > max_output_bytes) {
      too_big = true;
      break;
    }
    out.append(buf.data(), static_cast<size_t>(r));
  }
  ::close(fds[0]);

  int status = 0;
  bool reaped = false, status_known = true;
  if (eof) {
    // Output closed: the command is exiting. Wait for it within what is left of the deadline,
    // polling: a blocking waitpid would hang on a command that closed stdout and kept running.
    auto nap = std::chrono::microseconds(200);
    while (true) {
      const pid_t w = ::waitpid(pid, &status, WNOHANG);
      if (w == pid) {
        reaped = true;
        break;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {  // ECHILD: SIGCHLD is ignored, the kernel reaped it; exit status unknown
        reaped = true;
        status_known = false;
        break;
      }
      if (SteadyClock::now() >= deadline) {
        timed_out = true;
        break;
      }
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(nap).count();
      timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      ::nanosleep(&ts, nullptr);
      nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(10));
    }
  }
  if (!reaped) KillAndReap(pid, &status);

  if (timed_out) {
    return Status::Unavailable(path + " timed out after " + std::to_string(timeout.count()) +
                               " ms (killed)");
  }
  if (too_big) {
    return Status::ResourceExhausted(path + " wrote more than " + std::to_string(max_output_bytes) +
                                     " bytes (killed)");
  }
  if (!io_error.empty()) return Status::IoError(path + ": " + io_error);
  if (status_known) {
    if (WIFSIGNALED(status))
      return Status::Unavailable(path + " killed by signal " + std::to_string(WTERMSIG(status)));
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      return Status::Unavailable(path + " exited with status " +
                                 std::to_string(WEXITSTATUS(status)));
    }
  }
  return out;
}

CommandRunner SystemCommandRunner() {
  return [](const std::vector<std::string>& argv,
            std::chrono::milliseconds timeout) -> Result<std::string> {
    if (argv.empty()) return Status::InvalidArgument("empty command");
    std::optional<std::string> path = FindSystemTool(argv[0]);
    if (!path) {
      return Status::NotFound(argv[0] + " not found in /usr/bin, /usr/sbin, /bin, /sbin");
    }
    std::vector<std::string> resolved = argv;
    resolved[0] = std::move(*path);
    return RunCommand(resolved, timeout);
  };
}

namespace {

struct Tool {
  std::string_view name;
  std::array<std::string_view, 3> args;  // argv after the name; empty strings end it
  Result<TimeSourceReading> (*parse)(std::string_view);
};

// The order of preference: chrony and ntpd measure continuously and report a filtered offset;
// timesyncd (SNTP) reports no offset through show-timesync at all.
constexpr std::array<Tool, 3> kTools = {{
    {"chronyc", {"-c", "tracking", ""}, &ParseChronycTracking},
    {"ntpq", {"-c", "rv", ""}, &ParseNtpqRv},
    {"timedatectl", {"show-timesync", "", ""}, &ParseTimedatectlTimesync},
}};

}  // namespace

TimeSourceProbe::TimeSourceProbe(CommandRunner runner, std::chrono::milliseconds timeout)
    : runner_(runner ? std::move(runner) : SystemCommandRunner()), timeout_(timeout) {}

std::string_view TimeSourceProbe::preferred_tool() const {
  return preferred_ < 0 ? std::string_view() : kTools[static_cast<size_t>(preferred_)].name;
}

Result<TimeSourceReading> TimeSourceProbe::Probe() {
  std::array<int, kTools.size()> order{};
  size_t n = 0;
  if (preferred_ >= 0) order[n++] = preferred_;
  for (int i = 0; i < static_cast<int>(kTools.size()); ++i)
    if (i != preferred_) order[n++] = i;

  const auto deadline = SteadyClock::now() + timeout_;
  std::string errors;
  auto note = [&](std::string_view tool, std::string_view what) {
    if (!errors.empty()) errors += "; ";
    errors += std::string(tool) + ": " + std::string(what);
  };
  for (int idx : order) {
    const Tool& tool = kTools[static_cast<size_t>(idx)];
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) {
      note(tool.name, "not tried, time budget spent");
      continue;
    }
    std::vector<std::string> argv = {std::string(tool.name)};
    for (std::string_view a : tool.args)
      if (!a.empty()) argv.emplace_back(a);
    Result<std::string> out = Status::Internal("runner not called");
    try {
      out = runner_(argv, left);
    } catch (const std::exception& e) {  // an injected runner must not take the agent down
      out = Status::Internal(std::string("runner threw: ") + e.what());
    } catch (...) {
      out = Status::Internal("runner threw");
    }
    if (!out.ok()) {
      note(tool.name, out.status().code() == StatusCode::kNotFound ? "not installed"
                                                                   : out.status().ToString());
      continue;
    }
    Result<TimeSourceReading> r = tool.parse(*out);
    if (!r.ok()) {
      note(tool.name, r.status().message());
      continue;
    }
    preferred_ = idx;
    return r;
  }
  return Status::Unavailable("no time source answered (" + errors + ")");
}

}  // namespace gpuwatch::collect
