#include "logs/launcher_log.h"

#include <array>
#include <utility>

#include "common/strings.h"
#include "logs/internal/stamps.h"

namespace gpuwatch::logs {
namespace {

using internal::ClockLength;
using internal::DateTimeLength;
using internal::FirstBracketedTime;
using internal::TrimRight;
using json = nlohmann::json;

constexpr std::string_view kFailedTag = "failed (exitcode: ";
constexpr std::string_view kDeepSpeedTag = "exits with return code = ";
constexpr std::string_view kSrunTag = "srun: error: ";
constexpr std::string_view kWatchdogTag = "Watchdog caught collective operation timeout";
constexpr std::string_view kOomTag = "CUDA out of memory. Tried to allocate ";

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsAlnum(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A decimal integer at the start of `s`, with an optional '-'; nullopt when it has more than
// 19 digits or does not fit T.
template <typename T>
std::optional<T> LeadingInt(std::string_view s) {
  size_t n = (!s.empty() && s.front() == '-') ? 1 : 0;
  const size_t first = n;
  while (n < s.size() && n - first < 19 && IsDigit(s[n])) ++n;
  if (n == first || (n < s.size() && IsDigit(s[n]))) return std::nullopt;
  return ParseInt<T>(s.substr(0, n));
}

// The integer after the first `key` in `s`.
template <typename T>
std::optional<T> IntAfter(std::string_view s, std::string_view key) {
  const size_t p = s.find(key);
  if (p == std::string_view::npos) return std::nullopt;
  return LeadingInt<T>(s.substr(p + key.size()));
}

// Linux signal numbers (signal(7), x86 and ARM numbering).
std::optional<std::string> SignalName(int signo) {
  static constexpr std::array<std::string_view, 32> kNames = {
      "",          "SIGHUP",  "SIGINT",    "SIGQUIT", "SIGILL",   "SIGTRAP", "SIGABRT", "SIGBUS",
      "SIGFPE",    "SIGKILL", "SIGUSR1",   "SIGSEGV", "SIGUSR2",  "SIGPIPE", "SIGALRM", "SIGTERM",
      "SIGSTKFLT", "SIGCHLD", "SIGCONT",   "SIGSTOP", "SIGTSTP",  "SIGTTIN", "SIGTTOU", "SIGURG",
      "SIGXCPU",   "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO",   "SIGPWR",  "SIGSYS"};
  if (signo <= 0 || signo >= static_cast<int>(kNames.size())) return std::nullopt;
  return std::string(kNames[signo]);
}

// A negative exit code is a death by that signal (Python's subprocess convention, which torch
// elastic and DeepSpeed print).
std::optional<std::string> SignalOfExitCode(std::optional<int> code) {
  if (!code || *code >= 0 || *code < -64) return std::nullopt;
  return SignalName(-*code);
}

// srun prints strsignal(WTERMSIG(status)) for a task killed by a signal (Slurm's
// _task_finish), optionally followed by " (core dumped)"; these are glibc's texts.
std::optional<std::string> SignalOfStrsignal(std::string_view text) {
  struct Entry {
    std::string_view text, name;
  };
  static constexpr Entry kTexts[] = {
      {"Hangup", "SIGHUP"},
      {"Interrupt", "SIGINT"},
      {"Quit", "SIGQUIT"},
      {"Illegal instruction", "SIGILL"},
      {"Trace/breakpoint trap", "SIGTRAP"},
      {"Aborted", "SIGABRT"},
      {"Bus error", "SIGBUS"},
      {"Floating point exception", "SIGFPE"},
      {"Killed", "SIGKILL"},
      {"User defined signal 1", "SIGUSR1"},
      {"Segmentation fault", "SIGSEGV"},
      {"User defined signal 2", "SIGUSR2"},
      {"Broken pipe", "SIGPIPE"},
      {"Alarm clock", "SIGALRM"},
      {"Terminated", "SIGTERM"},
      {"CPU time limit exceeded", "SIGXCPU"},
      {"File size limit exceeded", "SIGXFSZ"},
      {"Bad system call", "SIGSYS"},
      {"Power failure", "SIGPWR"},
  };
  constexpr std::string_view kCore = " (core dumped)";
  if (EndsWith(text, kCore)) text.remove_suffix(kCore.size());
  for (const Entry& e : kTexts) {
    if (text == e.text) return std::string(e.name);
  }
  return std::nullopt;
}

// "Signal 9 (SIGKILL) received by PID 1626" (torch elastic's traceback for a signal death).
std::optional<std::string> SignalOfTraceback(std::string_view s) {
  const size_t p = s.find("Signal ");
  if (p == std::string_view::npos) return std::nullopt;
  std::string_view rest = s.substr(p + 7);
  while (!rest.empty() && IsDigit(rest.front())) rest.remove_prefix(1);
  if (rest.substr(0, 5) != " (SIG") return std::nullopt;
  rest.remove_prefix(2);
  const size_t close = rest.find(')');
  if (close == std::string_view::npos || close > 12) return std::nullopt;
  return std::string(rest.substr(0, close));
}

// The time a launcher line's prefix prints: glog's "E0801 13:23:20.000000" (without the
// severity letter), else a bracketed stamp with a clock ("[2023-10-13 17:40:02,544]",
// "[2024-02-27T21:35:32.106313Z]"), else a bare date and time.
std::optional<std::string> LineTime(std::string_view head) {
  for (size_t i = 0; i + 14 <= head.size(); ++i) {
    const char c = head[i];
    if ((c == 'I' || c == 'W' || c == 'E' || c == 'F') && (i == 0 || !IsAlnum(head[i - 1])) &&
        IsDigit(head[i + 1]) && IsDigit(head[i + 2]) && IsDigit(head[i + 3]) &&
        IsDigit(head[i + 4]) && head[i + 5] == ' ') {
      if (const size_t clock = ClockLength(head, i + 6); clock > 0) {
        return std::string(head.substr(i + 1, 5 + clock));
      }
    }
  }
  if (auto t = FirstBracketedTime(head, /*allow_uptime=*/false)) return std::string(*t);
  for (size_t i = 0; i + 19 <= head.size(); ++i) {
    if (i > 0 && IsDigit(head[i - 1])) continue;
    if (const size_t n = DateTimeLength(head, i); n > 0) return std::string(head.substr(i, n));
  }
  return std::nullopt;
}

// "[rank3]:" (torchrun --tee / PyTorch's rank prefix) anywhere in the line.
std::optional<int> RankPrefix(std::string_view s) {
  size_t p = s.find("[rank");
  while (p != std::string_view::npos) {
    std::string_view rest = s.substr(p + 5);
    size_t n = 0;
    while (n < rest.size() && n < 9 && IsDigit(rest[n])) ++n;
    if (n > 0 && n < rest.size() && rest[n] == ']') return ParseInt<int>(rest.substr(0, n));
    p = s.find("[rank", p + 5);
  }
  return std::nullopt;
}

// ---- sizes ----------------------------------------------------------------------------------

// "576.00 KiB" at the start of `s` in MiB. The decimal is read as an integer and a count of
// fraction digits, so the result is one correctly rounded division: 576.00 KiB is exactly
// 0.5625 and 79.15 GiB is the double nearest 81049.6 (no binary noise from 79.15 × 1024).
// PyTorch's format_size prints "bytes", "KiB", "MiB", "GiB".
std::optional<double> ParseSizeMib(std::string_view s) {
  uint64_t mantissa = 0;
  size_t digits = 0, frac = 0, i = 0;
  bool dot = false;
  for (; i < s.size(); ++i) {
    if (IsDigit(s[i])) {
      if (++digits > 15) return std::nullopt;
      mantissa = mantissa * 10 + static_cast<uint64_t>(s[i] - '0');
      if (dot) ++frac;
    } else if (s[i] == '.' && !dot && digits > 0) {
      dot = true;
    } else {
      break;
    }
  }
  if (digits == 0 || frac > 6 || i >= s.size() || s[i] != ' ') return std::nullopt;
  std::string_view unit = s.substr(i + 1);
  size_t u = 0;
  while (u < unit.size() &&
         ((unit[u] >= 'a' && unit[u] <= 'z') || (unit[u] >= 'A' && unit[u] <= 'Z'))) {
    ++u;
  }
  unit = unit.substr(0, u);
  double mult = 1, den = 1;
  if (unit == "bytes" || unit == "byte" || unit == "B") {
    den = 1048576;
  } else if (unit == "KiB") {
    den = 1024;
  } else if (unit == "MiB") {
  } else if (unit == "GiB") {
    mult = 1024;
  } else if (unit == "TiB") {
    mult = 1048576;
  } else {
    return std::nullopt;
  }
  for (size_t k = 0; k < frac; ++k) den *= 10;
  return static_cast<double>(mantissa) * mult / den;
}

// The "<number> <unit>" that ends right before s[end] ("…; 576.00 KiB| free;").
std::optional<double> SizeBefore(std::string_view s, size_t end) {
  size_t i = end;
  while (i > 0 && IsBlank(s[i - 1])) --i;
  while (i > 0 && ((s[i - 1] >= 'a' && s[i - 1] <= 'z') || (s[i - 1] >= 'A' && s[i - 1] <= 'Z'))) {
    --i;
  }
  if (i == 0 || s[i - 1] != ' ') return std::nullopt;
  --i;
  size_t start = i;
  while (start > 0 && (IsDigit(s[start - 1]) || s[start - 1] == '.')) --start;
  if (start == i) return std::nullopt;
  return ParseSizeMib(s.substr(start, end - start));
}

// One "CUDA out of memory. Tried to allocate …" message, `seg` starting after that text.
CudaOom ParseCudaOom(std::string_view seg) {
  CudaOom o;
  o.tried_to_allocate_mib = ParseSizeMib(seg);
  if (const size_t g = seg.find("GPU "); g != std::string_view::npos) {
    o.gpu = LeadingInt<int>(seg.substr(g + 4));
  }
  // Old: "(GPU 0; 79.15 GiB total capacity; 77.13 GiB already allocated; 307.31 MiB free; …)".
  if (const size_t t = seg.find(" total capacity"); t != std::string_view::npos) {
    o.total_capacity_mib = SizeBefore(seg, t);
  }
  for (std::string_view f : {" free;", " free)", " free "}) {
    if (const size_t p = seg.find(f); p != std::string_view::npos) {
      o.free_mib = SizeBefore(seg, p);
      break;
    }
  }
  // New: "GPU 0 has a total capacity of 23.65 GiB of which 11.06 MiB is free" ("capacty" in
  // some 2.1 builds).
  if (const size_t t = seg.find("has a total capac"); t != std::string_view::npos) {
    std::string_view rest = seg.substr(t);
    if (const size_t of = rest.find(" of "); of != std::string_view::npos) {
      o.total_capacity_mib = ParseSizeMib(rest.substr(of + 4));
    }
    if (const size_t w = rest.find("of which "); w != std::string_view::npos) {
      o.free_mib = ParseSizeMib(rest.substr(w + 9));
    }
  }
  return o;
}

// ---- table ----------------------------------------------------------------------------------

// A rule of the table: the line ends in 10 or more of '=', '-' or '*'.
bool IsBar(std::string_view s) {
  if (s.size() < 10) return false;
  const char c = s.back();
  if (c != '=' && c != '-' && c != '*') return false;
  size_t n = 0;
  while (n < s.size() && s[s.size() - 1 - n] == c) ++n;
  return n >= 10 && (n == s.size() || IsBlank(s[s.size() - 1 - n]));
}

// "[3]:" at the end of the line.
bool IsEntryHeader(std::string_view s) {
  if (!EndsWith(s, "]:")) return false;
  s.remove_suffix(2);
  size_t n = 0;
  while (n < s.size() && n < 6 && IsDigit(s[s.size() - 1 - n])) ++n;
  if (n == 0 || n >= s.size() || s[s.size() - 1 - n] != '[') return false;
  return n + 1 == s.size() || !IsAlnum(s[s.size() - 2 - n]);
}

// "  exitcode  : -9 (pid: 1626)" → key "exitcode", value "-9 (pid: 1626)"; the key is a word
// after blanks (or at the start), before blanks and ':'. Prefixes with their own colons
// ("stderr: ") are passed over.
bool SplitField(std::string_view s, std::string_view* key, std::string_view* value) {
  static constexpr std::string_view kKeys[] = {"time",       "host",      "rank", "exitcode",
                                               "error_file", "traceback", "msg"};
  size_t from = 0;
  for (int tries = 0; tries < 8; ++tries) {
    const size_t colon = s.find(':', from);
    if (colon == std::string_view::npos) return false;
    size_t end = colon;
    while (end > 0 && IsBlank(s[end - 1])) --end;
    size_t begin = end;
    while (begin > 0 && (IsAlnum(s[begin - 1]))) --begin;
    const std::string_view word = s.substr(begin, end - begin);
    if (begin == 0 || IsBlank(s[begin - 1])) {
      for (std::string_view k : kKeys) {
        if (word == k) {
          *key = k;
          *value = TrimWhitespace(s.substr(colon + 1));
          return true;
        }
      }
    }
    from = colon + 1;
  }
  return false;
}

// Whether two reports name the same failed worker: the same pid; without one, the same
// local_rank and nothing that differs.
bool SameFailure(const LauncherFailure& a, const LauncherFailure& b) {
  if (a.pid && b.pid) return *a.pid == *b.pid;
  if (!a.local_rank || !b.local_rank || *a.local_rank != *b.local_rank) return false;
  auto differ = [](const auto& x, const auto& y) { return x && y && *x != *y; };
  return !differ(a.rank, b.rank) && !differ(a.host, b.host) && !differ(a.exitcode, b.exitcode);
}

// Folds `from` into `into`. The table's rank, host and time win when `from` is a table entry;
// otherwise `into` keeps what it has.
void Merge(const LauncherFailure& from, bool from_table, LauncherFailure* into) {
  auto take = [from_table](const auto& src, auto* dst, bool table_wins) {
    if (src && (!*dst || (from_table && table_wins))) *dst = src;
  };
  take(from.rank, &into->rank, true);
  take(from.host, &into->host, true);
  take(from.time, &into->time, true);
  take(from.local_rank, &into->local_rank, false);
  take(from.pid, &into->pid, false);
  take(from.exitcode, &into->exitcode, false);
  take(from.signal, &into->signal, false);
  into->root_cause = into->root_cause || from.root_cause;
  if (from.line_no != 0 && (into->line_no == 0 || from.line_no < into->line_no)) {
    into->line_no = from.line_no;
  }
}

json OrNull(const std::optional<std::string>& v) {
  return v ? json(SanitizeUtf8(*v)) : json(nullptr);
}

template <typename T>
json OrNull(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace

// ---- LauncherLogParser ----------------------------------------------------------------------

void LauncherLogParser::AddFailure(LauncherFailure f) {
  // Only a pid or a local rank can name a failure reported before (SameFailure).
  if (f.pid || f.local_rank) {
    for (LauncherFailure& have : failures_) {
      if (SameFailure(have, f)) {
        Merge(f, /*from_table=*/false, &have);
        failures_dirty_ = true;
        return;
      }
    }
  }
  if (failures_.size() >= kMaxLauncherEntries) return;
  failures_.push_back(std::move(f));
  failures_dirty_ = true;
}

void LauncherLogParser::EndTableEntry() {
  if (entry_ && *entry_ + 1 == failures_.size() && !failures_[*entry_].pid) {
    // An entry cut before its exitcode line: fold it into the `failed` line's report of the
    // same local rank, if there is one.
    const LauncherFailure cut = failures_[*entry_];
    for (size_t i = 0; i < *entry_; ++i) {
      if (SameFailure(failures_[i], cut)) {
        Merge(cut, /*from_table=*/true, &failures_[i]);
        failures_.pop_back();
        break;
      }
    }
  }
  entry_.reset();
  entry_header_seen_ = false;
  failures_dirty_ = true;
}

void LauncherLogParser::ApplyTableField(std::string_view key, std::string_view value) {
  if (!entry_) {
    if (failures_.size() >= kMaxLauncherEntries) {
      entry_header_seen_ = false;
      return;
    }
    LauncherFailure f;
    f.line_no = entry_line_no_;
    f.root_cause = entry_is_root_;
    failures_.push_back(std::move(f));
    entry_ = failures_.size() - 1;
  }
  failures_dirty_ = true;
  LauncherFailure& f = failures_[*entry_];
  if (key == "time") {
    if (!value.empty()) f.time = std::string(value);
  } else if (key == "host") {
    if (!value.empty()) f.host = std::string(value);
  } else if (key == "rank") {
    // "11 (local_rank: 3)"
    f.rank = LeadingInt<int>(value);
    if (auto l = IntAfter<int>(value, "local_rank: ")) f.local_rank = l;
  } else if (key == "exitcode") {
    // "-9 (pid: 1626)"
    f.exitcode = LeadingInt<int>(value);
    if (auto p = IntAfter<int64_t>(value, "pid: ")) f.pid = p;
    if (!f.signal) f.signal = SignalOfExitCode(f.exitcode);
    if (!f.pid) return;
    // The same worker reported before (the `failed` line, or the table pasted twice).
    for (size_t i = 0; i < failures_.size(); ++i) {
      if (i == *entry_ || !SameFailure(failures_[i], f)) continue;
      const LauncherFailure entry = f;
      Merge(entry, /*from_table=*/true, &failures_[i]);
      failures_.erase(failures_.begin() + static_cast<std::ptrdiff_t>(*entry_));
      entry_ = i < *entry_ ? i : i - 1;
      return;
    }
  } else if (key == "traceback" || key == "msg") {
    if (auto sig = SignalOfTraceback(value)) f.signal = std::move(sig);
  }
}

bool LauncherLogParser::FeedTableLine(std::string_view s, size_t line_no) {
  if (IsBar(s)) {
    EndTableEntry();
    in_root_section_ = false;
    return true;
  }
  if (EndsWith(s, "Root Cause (first observed failure):") || EndsWith(s, "Root Cause:")) {
    EndTableEntry();
    in_root_section_ = true;
    return true;
  }
  if (EndsWith(s, "Failures:")) {  // "Failures:" (torch ≥ 1.10), "Other Failures:" (1.9)
    EndTableEntry();
    in_root_section_ = false;
    return true;
  }
  if (IsEntryHeader(s)) {
    EndTableEntry();
    entry_header_seen_ = true;
    entry_is_root_ = in_root_section_;
    entry_line_no_ = line_no;
    return true;
  }
  if (entry_header_seen_ || entry_) {
    std::string_view key, value;
    if (SplitField(s, &key, &value)) {
      ApplyTableField(key, value);
      return true;
    }
    EndTableEntry();
  }
  return false;
}

void LauncherLogParser::Feed(std::string_view line, size_t line_no) {
  const std::string_view s = TrimRight(line);
  if (s.empty()) {
    if (entry_header_seen_ || entry_) EndTableEntry();
    return;
  }
  if (FeedTableLine(s, line_no)) return;

  // torch elastic: "failed (exitcode: -9) local_rank: 3 (pid: 812917) of binary: …".
  if (const size_t p = s.find(kFailedTag); p != std::string_view::npos) {
    const std::string_view rest = s.substr(p + kFailedTag.size());
    LauncherFailure f;
    f.exitcode = LeadingInt<int>(rest);
    f.local_rank = IntAfter<int>(rest, "local_rank: ");
    f.pid = IntAfter<int64_t>(rest, "(pid: ");
    f.signal = SignalOfExitCode(f.exitcode);
    f.time = LineTime(s.substr(0, p));
    f.line_no = line_no;
    if (f.exitcode) AddFailure(std::move(f));
  }
  // DeepSpeed: "[time] [ERROR] [launch.py:…:sigkill_handler] [cmd…] exits with return code = N".
  if (const size_t p = s.find(kDeepSpeedTag); p != std::string_view::npos) {
    LauncherFailure f;
    f.exitcode = LeadingInt<int>(s.substr(p + kDeepSpeedTag.size()));
    f.signal = SignalOfExitCode(f.exitcode);
    f.time = LineTime(s.substr(0, p));
    f.line_no = line_no;
    if (f.exitcode) AddFailure(std::move(f));
  }
  // Slurm: "srun: error: HOST: task(s) 0-3,5: Exited with exit code 1" / ": Killed".
  if (const size_t p = s.find(kSrunTag); p != std::string_view::npos) {
    std::string_view rest = s.substr(p + kSrunTag.size());
    const size_t host_end = rest.find(": ");
    const std::string_view host = rest.substr(0, host_end);
    if (host_end != std::string_view::npos && !host.empty() && !Contains(host, " ")) {
      rest = rest.substr(host_end + 2);
      const size_t list_begin = rest.substr(0, 6) == "tasks "  ? 6
                                : rest.substr(0, 5) == "task " ? 5
                                                               : 0;
      const size_t list_end = rest.find(": ");
      if (list_begin > 0 && list_end != std::string_view::npos && list_end > list_begin) {
        const std::string_view list = rest.substr(list_begin, list_end - list_begin);
        const std::string_view reason = TrimWhitespace(rest.substr(list_end + 2));
        LauncherFailure f;
        f.host = std::string(host);
        f.time = LineTime(s.substr(0, p));
        f.line_no = line_no;
        constexpr std::string_view kExited = "Exited with exit code ";
        if (reason.substr(0, kExited.size()) == kExited) {
          f.exitcode = LeadingInt<int>(reason.substr(kExited.size()));
        } else {
          f.signal = SignalOfStrsignal(reason);
        }
        std::string_view items = list;
        while (!items.empty() && failures_.size() < kMaxLauncherEntries) {
          const size_t comma = items.find(',');
          const std::string_view item = items.substr(0, comma);
          items = comma == std::string_view::npos ? std::string_view() : items.substr(comma + 1);
          const size_t dash = item.find('-');
          const auto lo = LeadingInt<int>(item.substr(0, dash));
          const auto hi =
              dash == std::string_view::npos ? lo : LeadingInt<int>(item.substr(dash + 1));
          if (!lo || !hi || *lo < 0 || *hi < *lo) break;
          for (int64_t t = *lo; t <= *hi && failures_.size() < kMaxLauncherEntries; ++t) {
            LauncherFailure task = f;
            task.rank = static_cast<int>(t);
            AddFailure(std::move(task));
          }
        }
      }
    }
  }
  // ProcessGroupNCCL's watchdog.
  if (const size_t w = s.find(kWatchdogTag);
      w != std::string_view::npos && report_.watchdog_timeouts.size() < kMaxLauncherEntries) {
    const std::string_view rest = s.substr(w);
    const size_t work = rest.find("WorkNCCL(");
    if (work != std::string_view::npos) {
      std::string_view args = rest.substr(work);
      const size_t ran = args.find(") ran for ");
      if (ran != std::string_view::npos) args = args.substr(0, ran + 1);
      WatchdogTimeout t;
      t.line_no = line_no;
      // "[Rank 1] Watchdog …" or "[PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog …".
      const std::string_view before = s.substr(0, w);
      if (const size_t open = before.rfind('['); open != std::string_view::npos) {
        t.rank = IntAfter<int>(before.substr(open), "Rank ");
      }
      if (!t.rank) t.rank = RankPrefix(s);
      t.seq = IntAfter<int64_t>(args, "SeqNum=");
      if (const size_t op = args.find("OpType="); op != std::string_view::npos) {
        std::string_view v = args.substr(op + 7);
        v = v.substr(0, v.find_first_of(",)"));
        if (!v.empty()) t.op = std::string(TrimWhitespace(v));
      }
      t.timeout_ms = IntAfter<int64_t>(args, "Timeout(ms)=");
      if (ran != std::string_view::npos) {
        t.ran_for_ms = LeadingInt<int64_t>(rest.substr(work + ran + 10));
      }
      if (watchdog_seen_.emplace(t.rank, t.seq, t.op.value_or("")).second) {
        report_.watchdog_timeouts.push_back(std::move(t));
      }
    }
  }
  // CUDA out of memory; ranks' messages can share a line.
  std::optional<int> oom_rank;
  if (Contains(s, kOomTag)) oom_rank = RankPrefix(s);
  for (size_t p = s.find(kOomTag);
       p != std::string_view::npos && report_.cuda_oom.size() < kMaxLauncherEntries;) {
    const size_t begin = p + kOomTag.size();
    const size_t next = s.find(kOomTag, begin);
    CudaOom o = ParseCudaOom(s.substr(begin, next == std::string_view::npos ? next : next - begin));
    o.rank = oom_rank;
    o.line_no = line_no;
    report_.cuda_oom.push_back(std::move(o));
    p = next;
  }
  // The launcher tearing the job down, or stopped itself.
  if ((Contains(s, "Sending process ") && Contains(s, " closing signal ")) ||
      Contains(s, "Killing subprocess ")) {
    ++report_.teardown_signals;
  }
  if (Contains(s, "death signal, shutting down workers") ||
      (Contains(s, "SignalException") && Contains(s, " got signal: ")) ||
      Contains(s, "Main process received SIG") ||
      ((Contains(s, "Received SIGTERM") || Contains(s, "Received SIGINT") ||
        Contains(s, "Received SIGHUP")) &&
       !Contains(s, "[rank")) ||
      (Contains(s, "*** ") && Contains(s, " CANCELLED AT "))) {
    report_.launcher_signalled = true;
  }
}

const LauncherReport& LauncherLogParser::report() const {
  if (failures_dirty_) {
    report_.failures.clear();
    for (const LauncherFailure& f : failures_)
      if (f.root_cause) report_.failures.push_back(f);
    for (const LauncherFailure& f : failures_)
      if (!f.root_cause) report_.failures.push_back(f);
    failures_dirty_ = false;
  }
  return report_;
}

bool LooksLikeLauncherLine(std::string_view s) {
  static constexpr std::string_view kMarkers[] = {
      "torch.distributed.elastic",
      "failed (exitcode: ",
      "closing signal SIG",
      "death signal, shutting down workers",
      "ChildFailedError",
      "Root Cause (first observed failure)",
      "(local_rank: ",
      "received by PID ",
      "sigkill_handler",
      "exits with return code = ",
      "Killing subprocess ",
      "Main process received SIG",
      "Watchdog caught collective operation timeout",
      "detected by watchdog at work",
      "watchdog thread terminated with exception",
      "CUDA out of memory",
  };
  for (std::string_view m : kMarkers) {
    if (Contains(s, m)) return true;
  }
  if (Contains(s, "exitcode") && Contains(s, "(pid: ")) return true;  // a table's exitcode line
  if (Contains(s, kSrunTag) && (Contains(s, ": task ") || Contains(s, ": tasks "))) return true;
  if (Contains(s, "*** ") && Contains(s, " CANCELLED AT ")) return true;
  return false;
}

json LauncherReportJson(const LauncherReport& r) {
  json failures = json::array();
  for (const LauncherFailure& f : r.failures) {
    failures.push_back({{"rank", OrNull(f.rank)},
                        {"local_rank", OrNull(f.local_rank)},
                        {"pid", OrNull(f.pid)},
                        {"exitcode", OrNull(f.exitcode)},
                        {"signal", OrNull(f.signal)},
                        {"host", OrNull(f.host)},
                        {"time", OrNull(f.time)}});
  }
  json watchdog = json::array();
  for (const WatchdogTimeout& t : r.watchdog_timeouts) {
    watchdog.push_back({{"rank", OrNull(t.rank)},
                        {"op", OrNull(t.op)},
                        {"seq", OrNull(t.seq)},
                        {"timeout_ms", OrNull(t.timeout_ms)},
                        {"ran_for_ms", OrNull(t.ran_for_ms)}});
  }
  json oom = json::array();
  for (const CudaOom& o : r.cuda_oom) {
    oom.push_back({{"gpu", OrNull(o.gpu)},
                   {"tried_to_allocate_mib", OrNull(o.tried_to_allocate_mib)},
                   {"total_capacity_mib", OrNull(o.total_capacity_mib)},
                   {"free_mib", OrNull(o.free_mib)}});
  }
  return {{"failures", std::move(failures)},
          {"watchdog_timeouts", std::move(watchdog)},
          {"cuda_oom", std::move(oom)}};
}

}  // namespace gpuwatch::logs
