// The job protocol's parser (docs/job-protocol.md): datagram or stream lines of JSON from
// training jobs → model::JobMessage, every violation rejected with one counted reason.
//
// Everything here reads untrusted bytes from any local user: sizes are checked before
// parsing, nesting is checked before the JSON parser sees the line, every field is range
// checked, and nothing throws (fuzzed by job_protocol_fuzz.cc). Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/job.h"

namespace gpuwatch::jobs {

// Why a message was refused (the `reason` label of gpuwatch_job_messages_rejected_total).
enum class RejectReason {
  kOversized,
  kMalformed,
  kBadVersion,
  kUnknownType,
  kBadField,
  kBadTime,
  kPidNotOwned,
  kDuplicate,
  kOutOfOrder,
  kLimit,
  kQuota,         // one uid's share of the registry is used up
  kNotPermitted,  // the scheduler's messages (allocation, release) from other than root
  kCount,         // not a reason: the number of reasons
};
inline constexpr size_t kRejectReasons = static_cast<size_t>(RejectReason::kCount);
std::string_view RejectReasonName(RejectReason r);

using RejectCounts = std::array<uint64_t, kRejectReasons>;

// Protocol limits (docs/job-protocol.md).
inline constexpr size_t kMaxDatagramBytes = 65000;
inline constexpr size_t kMaxJobIdBytes = 128;
inline constexpr uint32_t kMaxRank = 1048575;
inline constexpr size_t kMaxLogFiles = 16;
inline constexpr size_t kMaxScalars = 32;
inline constexpr size_t kMaxAnnotationBytes = 4096;
inline constexpr size_t kMaxLogLineBytes = 16384;
inline constexpr double kMaxPastS = 3600, kMaxFutureS = 300;

struct LineResult {
  bool ok = false;
  model::JobMessage message;  // when ok
  RejectReason reason = RejectReason::kMalformed;
  std::string detail;  // when !ok: what was wrong, for a debug log ("step: duration_s <= 0")
};

// One message. `now_s` is the receiver's Unix time, the reference for `t`; a message without
// `t` gets `now_s`.
LineResult ParseJobLine(std::string_view line, double now_s);

struct DatagramResult {
  std::vector<model::JobMessage> messages;  // the accepted lines, in order
  RejectCounts rejected{};
  std::string first_detail;  // of the first rejected line
};

// A datagram (or a chunk of complete stream lines): '\n'-separated lines, empty lines skipped.
// A payload over kMaxDatagramBytes is one kOversized rejection, unparsed, unless `stream`:
// complete lines of a TCP stream are judged line by line (each within the limit).
DatagramResult ParseJobDatagram(std::string_view payload, double now_s, bool stream = false);

}  // namespace gpuwatch::jobs
