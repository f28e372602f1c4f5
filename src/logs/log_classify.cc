#include "logs/log_classify.h"

#include <initializer_list>

namespace gpuwatch::logs {
namespace {

using Kind = LogLineClass::Kind;
using Severity = LogLineClass::Severity;
using sv = std::string_view;

constexpr size_t npos = sv::npos;

bool Has(sv line, sv needle) { return line.find(needle) != npos; }

bool HasAny(sv line, std::initializer_list<sv> needles) {
  for (sv n : needles) {
    if (line.find(n) != npos) return true;
  }
  return false;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsWordChar(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// s ends with ":<digits>:<digits>" — the "host:pid:tid" of NCCL's line prefix.
bool EndsWithPidTid(sv s) {
  for (int field = 0; field < 2; ++field) {
    size_t n = 0;
    while (n < s.size() && IsDigit(s[s.size() - 1 - n])) ++n;
    if (n == 0 || n == s.size() || s[s.size() - 1 - n] != ':') return false;
    s.remove_suffix(n + 1);
  }
  return !s.empty();  // a host name
}

// "<file>:<line>" as NCCL puts before WARN and in INFO error traces: no blank, ':' then digits.
bool IsFileLine(sv token) {
  const size_t colon = token.rfind(':');
  if (colon == npos || colon == 0 || colon + 1 == token.size()) return false;
  for (size_t i = colon + 1; i < token.size(); ++i) {
    if (!IsDigit(token[i])) return false;
  }
  return true;
}

// `before` is the text ahead of "NCCL <LEVEL>": does it end in "host:pid:tid [dev] " with an
// optional "file:line " after the bracket?
bool HasNcclPrefix(sv before) {
  if (before.empty() || before.back() != ' ') return false;
  before.remove_suffix(1);
  if (!before.empty() && before.back() != ']') {  // WARN: "[0] include/topo.h:27 NCCL WARN"
    const size_t sp = before.rfind(' ');
    if (sp == npos || !IsFileLine(before.substr(sp + 1))) return false;
    before = before.substr(0, sp);
  }
  if (before.empty() || before.back() != ']') return false;
  const size_t lb = before.rfind('[');
  if (lb == npos || lb < 2 || before[lb - 1] != ' ') return false;
  sv dev = before.substr(lb + 1, before.size() - lb - 2);
  if (!dev.empty() && dev.front() == '-') dev.remove_prefix(1);
  if (dev.empty() || dev.size() > 4) return false;
  for (char c : dev) {
    if (!IsDigit(c)) return false;
  }
  sv host = before.substr(0, lb - 1);
  if (const size_t sp = host.rfind(' '); sp != npos) host = host.substr(sp + 1);
  return EndsWithPidTid(host);
}

enum class NcclLevel { kNone, kInfo, kWarn, kTrace, kVersion };

// Where NCCL's own message starts (after "NCCL INFO "), and the level.
NcclLevel FindNcclDebug(sv line, sv* message) {
  for (size_t pos = line.find("NCCL "); pos != npos; pos = line.find("NCCL ", pos + 1)) {
    const sv after = line.substr(pos + 5);
    NcclLevel level = NcclLevel::kNone;
    size_t len = 0;
    if (after.substr(0, 4) == "INFO") {
      level = NcclLevel::kInfo, len = 4;
    } else if (after.substr(0, 4) == "WARN") {
      level = NcclLevel::kWarn, len = 4;
    } else if (after.substr(0, 5) == "TRACE") {
      level = NcclLevel::kTrace, len = 5;
    } else if (after.substr(0, 8) == "version " && after.size() > 8 && IsDigit(after[8])) {
      // NCCL < 2.19 printed "NCCL version 2.18.5+cuda12.0" bare (behind launcher prefixes).
      sv before = line.substr(0, pos);
      while (!before.empty() && before.back() == ' ') before.remove_suffix(1);
      const sv version = after.substr(8, after.find(' ', 8) - 8);
      if ((before.empty() || before.back() == ':') && version.find("+cuda") != npos) {
        *message = after;
        return NcclLevel::kVersion;
      }
      continue;
    }
    if (level == NcclLevel::kNone) continue;
    if (after.size() > len && after[len] != ' ') continue;
    if (!HasNcclPrefix(line.substr(0, pos))) continue;
    *message = after.substr(len < after.size() ? len + 1 : len);
    return level;
  }
  return NcclLevel::kNone;
}

// An NCCL INFO error trace, "misc/socket.cc:47 -> 3" ("[Async thread]" may follow): NCCL logs
// one per stack frame an error result passes through, so it marks a failure even at INFO.
bool IsNcclErrorTrace(sv message) {
  const size_t sp = message.find(' ');
  if (sp == npos || !IsFileLine(message.substr(0, sp))) return false;
  sv rest = message.substr(sp);
  if (rest.substr(0, 4) != " -> ") return false;
  rest.remove_prefix(4);
  size_t n = 0;
  while (n < rest.size() && IsDigit(rest[n])) ++n;
  if (n == 0 || (n < rest.size() && rest[n] != ' ')) return false;
  return !(n == 1 && rest[0] == '0');  // ncclSuccess is not traced, but be safe
}

// A library status name other than its SUCCESS value: "CUBLAS_STATUS_EXECUTION_FAILED".
bool HasFailedStatus(sv line, sv prefix) {
  for (size_t p = line.find(prefix); p != npos; p = line.find(prefix, p + 1)) {
    if (line.substr(p + prefix.size(), 7) != "SUCCESS") return true;
  }
  return false;
}

bool IsOom(sv line) {
  if (HasAny(line, {"out of memory", "Out of memory", "OutOfMemoryError", "MemoryError",
                    "OOM when allocating", "oom-kill", "oom_kill event", "OOMKilled",
                    "std::bad_alloc"})) {
    return true;
  }
  return Has(line, "Killed process ") && Has(line, "oom");
}

bool IsNcclTimeout(sv line, NcclLevel level) {
  if (HasAny(line, {"Watchdog caught collective operation timeout", "Heartbeat monitor timed out",
                    "watchdog got stuck"})) {
    return true;
  }
  if (level == NcclLevel::kWarn) return HasAny(line, {"timeout", "Timeout", "timed out"});
  if (level != NcclLevel::kNone) return false;  // INFO lines print timeout settings
  // PyTorch's other reports of a collective that did not finish. Bare "timeout" is not enough:
  // "NCCL timeout set to 1800 s" is a setting, not a failure.
  return Has(line, "NCCL") &&
         HasAny(line, {"timed out", "Timed out", "timing out", "Timeout at", "Socket Timeout",
                       "collective timeout", "operation timeout", "error or timeout"});
}

bool IsCudaError(sv line) {
  return HasAny(line, {"CUDA error", "cudaError", "CUDA_ERROR_", "Cuda failure",
                       "cuda runtime error", "CUDA driver error", "an illegal memory access",
                       "an illegal instruction was encountered", "unspecified launch failure",
                       "device-side assert", "misaligned address",
                       "uncorrectable ECC error encountered", "no CUDA-capable device"}) ||
         HasFailedStatus(line, "CUBLAS_STATUS_") || HasFailedStatus(line, "CUDNN_STATUS_");
}

bool IsNcclError(sv line, NcclLevel level, sv nccl_message) {
  if (level == NcclLevel::kInfo || level == NcclLevel::kTrace) {
    return IsNcclErrorTrace(nccl_message);
  }
  return HasAny(
      line, {"NCCL error", "unhandled system error", "unhandled cuda error",
             "remote process exited", "ncclSystemError", "ncclInternalError",
             "ncclUnhandledCudaError", "ncclRemoteError", "ncclInvalidUsage", "ncclInvalidArgument",
             "NCCL communicator was aborted", "run with NCCL_DEBUG="});
}

// `word` in `line` with no letter, digit or '_' on either side: "ERROR" the level, not
// "ERROR_HANDLING" or "NO_ERRORS".
bool HasWord(sv line, sv word) {
  for (size_t p = line.find(word); p != npos; p = line.find(word, p + 1)) {
    const bool left = p == 0 || !IsWordChar(line[p - 1]);
    const size_t end = p + word.size();
    const bool right = end == line.size() || !IsWordChar(line[end]);
    if (left && right) return true;
  }
  return false;
}

// Skips blanks and launcher tags at the start of a line: "[rank0]: ", "[1,0]<stderr>:".
sv SkipLinePrefixes(sv s) {
  while (true) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    if (s.empty() || s.front() != '[') return s;
    const size_t rb = s.find(']');
    if (rb == npos || rb > 32) return s;
    sv rest = s.substr(rb + 1);
    if (!rest.empty() && rest.front() == '<') {
      const size_t gt = rest.find('>');
      if (gt == npos || gt > 16) return s;
      rest.remove_prefix(gt + 1);
    }
    if (rest.empty() || rest.front() != ':') return s;
    s = rest.substr(1);
  }
}

// glog's error prefix: "E0816 01:45:40.18 …" or c10's "[E816 01:45:40.18 …]".
bool HasGlogErrorPrefix(sv s) {
  if (!s.empty() && s.front() == '[') s.remove_prefix(1);
  if (s.size() < 7 || s.front() != 'E') return false;
  size_t n = 1;
  while (n < s.size() && IsDigit(s[n])) ++n;
  return (n == 4 || n == 5) && n + 2 < s.size() && s[n] == ' ' && IsDigit(s[n + 1]) &&
         IsDigit(s[n + 2]);
}

// "ValueError: …", "torch.distributed.DistBackendError: …", "SomeException: …" as the first
// word of the line: the last line of a Python traceback. Only the first word, because
// "Mean Absolute Error: 0.12" is a metric.
bool IsPythonExceptionLine(sv s) {
  const size_t colon = s.find(": ");
  if (colon == npos) return s.size() > 5 && (s.ends_with("Error:") || s.ends_with("Exception:"));
  const sv name = s.substr(0, colon);
  if (!(name.ends_with("Error") || name.ends_with("Exception"))) return false;
  for (char c : name) {
    if (!IsWordChar(c) && c != '.') return false;
  }
  return true;
}

bool IsGenericError(sv line) {
  if (HasWord(line, "ERROR") || HasWord(line, "FATAL")) return true;
  // "error:" as a tool's level word: "srun: error: …", "slurmstepd: error: …", "error: …".
  if (line.substr(0, 7) == "error: " || Has(line, ": error: ")) return true;
  const sv s = SkipLinePrefixes(line);
  return HasGlogErrorPrefix(s) || IsPythonExceptionLine(s);
}

Severity SeverityOf(Kind k) {
  switch (k) {
    case Kind::kNone:
      return Severity::kNone;
    case Kind::kNcclWarn:
      return Severity::kWarning;
    case Kind::kNcclError:
    case Kind::kTraceback:
    case Kind::kError:
      return Severity::kError;
    case Kind::kNcclTimeout:
    case Kind::kCudaError:
    case Kind::kOom:
    case Kind::kXid:
      return Severity::kCritical;
  }
  return Severity::kNone;
}

Kind KindOf(sv line, NcclLevel level, sv nccl_message) {
  if (Has(line, "NVRM: Xid")) return Kind::kXid;
  if (IsOom(line)) return Kind::kOom;
  if (IsNcclTimeout(line, level)) return Kind::kNcclTimeout;
  if (IsCudaError(line)) return Kind::kCudaError;
  if (IsNcclError(line, level, nccl_message)) return Kind::kNcclError;
  if (level == NcclLevel::kWarn) return Kind::kNcclWarn;
  // NCCL's own INFO/TRACE/version lines say "error" only in settings and names.
  if (level != NcclLevel::kNone) return Kind::kNone;
  if (Has(line, "Traceback (most recent call last)")) return Kind::kTraceback;
  if (IsGenericError(line)) return Kind::kError;
  return Kind::kNone;
}

}  // namespace

LogLineClass ClassifyLogLine(std::string_view line) {
  LogLineClass c;
  sv nccl_message;
  const NcclLevel level = FindNcclDebug(line, &nccl_message);
  c.nccl = level != NcclLevel::kNone;
  c.kind = KindOf(line, level, nccl_message);
  c.severity = SeverityOf(c.kind);
  return c;
}

std::string_view LogLineKindName(LogLineClass::Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kNcclWarn:
      return "nccl_warn";
    case Kind::kNcclTimeout:
      return "nccl_timeout";
    case Kind::kCudaError:
      return "cuda_error";
    case Kind::kOom:
      return "oom";
    case Kind::kNcclError:
      return "nccl_error";
    case Kind::kXid:
      return "xid";
    case Kind::kTraceback:
      return "traceback";
    case Kind::kError:
      return "error";
  }
  return "none";
}

std::string_view LogSeverityName(LogLineClass::Severity severity) {
  switch (severity) {
    case Severity::kNone:
      return "none";
    case Severity::kWarning:
      return "warning";
    case Severity::kError:
      return "error";
    case Severity::kCritical:
      return "critical";
  }
  return "none";
}

}  // namespace gpuwatch::logs
