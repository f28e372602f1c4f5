// The one driving loop of the diagnosis: records from a TraceReader into a Diagnoser, for
// `gpuwatch replay` (a trace file) and the live agent (its flight recorder's window) alike, with
// an explicit policy for a record that cannot be read.
// Thread-safety: none; the caller owns the reader and the diagnoser.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "analyze/diagnoser.h"
#include "common/status.h"
#include "trace/trace_reader.h"

namespace gpuwatch::analyze {

enum class ReadErrorPolicy {
  // The trace is someone's file: a malformed record stops the run with its file:line error
  // (../shared/spec/trace-format.md: "must reject, with a clear message naming the line").
  kStop,
  // The records are this process's own (the flight recorder): a malformed one is skipped and
  // counted, and the rest of the window is still read. I/O errors stop either way.
  kSkipRecord,
};

struct DriveResult {
  uint64_t records = 0;  // delivered to the diagnoser
  uint64_t skipped = 0;  // malformed records skipped (kSkipRecord)
  std::string first_skipped_error;
  bool any = false;  // at least one record
  double first_t = 0, last_t = 0;
};

// Reads `reader` to its end into `diagnoser`. `before_each` (may be empty) runs before each
// record is observed: replay's pacing at --speed. Returns the reader's error under kStop, or an
// I/O error under either policy; the records before the error have been observed.
Result<DriveResult> Drive(trace::TraceReader& reader, Diagnoser& diagnoser, ReadErrorPolicy policy,
                          const std::function<void(const trace::TraceRecord&)>& before_each = {});

}  // namespace gpuwatch::analyze
