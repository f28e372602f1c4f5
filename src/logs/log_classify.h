// Log line classification: what one captured line of a job's output says — NCCL debug output,
// an NCCL timeout or error, a CUDA error, an out-of-memory, a kernel Xid, a Python traceback,
// a generic error — so the agent can count and surface failures without storing every line.
//
// Runs on every captured line, so it is plain substring search over the line (no regex, no
// allocation, no lower-casing). Matching is case-sensitive on purpose: the tools write these
// markers with fixed case, and "ERROR" the log level is not "error" in "error rate".
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace gpuwatch::logs {

struct LogLineClass {
  // What the line reports. When several apply, the most specific wins, in this order: kXid,
  // kOom, kNcclTimeout, kCudaError, kNcclError, kNcclWarn, kTraceback, kError. If stored as
  // numbers: append only, never renumber (names: LogLineKindName).
  enum class Kind : uint8_t {
    kNone,
    kNcclWarn,     // an NCCL WARN line that names none of the failures below
    kNcclTimeout,  // PyTorch's NCCL watchdog timeout, an NCCL WARN about a timeout
    kCudaError,    // "CUDA error: …", cudaError*, CUBLAS_STATUS_*, illegal memory access, …
    kOom,          // CUDA or host out of memory, the kernel or Slurm OOM killer
    kNcclError,    // NCCL's error results ("unhandled system error", "NCCL error", …)
    kXid,          // an "NVRM: Xid" kernel line copied into the log
    kTraceback,    // "Traceback (most recent call last):"
    kError,        // a generic error line: the ERROR/FATAL level, "error:", "FooError: …"
  };
  // kCritical: the job is failing (it cannot go on: kOom, kCudaError, kNcclTimeout, kXid).
  // kError: something failed (kNcclError, kTraceback, kError). kWarning: kNcclWarn.
  enum class Severity : uint8_t { kNone, kWarning, kError, kCritical };

  // The line is NCCL debug output: "host:pid:tid [dev] NCCL INFO|WARN|TRACE …" (WARN lines
  // carry "file.cc:123 " before "NCCL WARN"), anywhere in the line so that mpirun's
  // "[1,0]<stdout>:" and timestamp prefixes do not hide it, or the "NCCL version 2.x.y+cudaA.B"
  // line that NCCL before 2.19 printed on its own.
  bool nccl = false;
  Kind kind = Kind::kNone;
  Severity severity = Severity::kNone;
};

LogLineClass ClassifyLogLine(std::string_view line);

// "none", "nccl_warn", "nccl_timeout", "cuda_error", "oom", "nccl_error", "xid", "traceback",
// "error".
std::string_view LogLineKindName(LogLineClass::Kind kind);
// "none", "warning", "error", "critical".
std::string_view LogSeverityName(LogLineClass::Severity severity);

}  // namespace gpuwatch::logs
