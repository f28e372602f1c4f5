// TraceReader: streams the records of a trace (../shared/spec/trace-format.md, version 1) from
// a plain, gzip (.gz) or zstd (.zst) JSON Lines file, one TraceRecord (trace_records.h) per
// Next(). It is the front end of `gpuwatch replay`.
//
// Memory is constant in the trace's length: input is decompressed in 64 KiB chunks and held
// one line at a time; a line longer than kMaxLineBytes is an error. The per-node time
// tracking (a hash of the node name -> latest t) and the Stats maps are bounded
// (kMaxTrackedNodes, kMaxStatKeys). zstd's decoder may hold a window of up to 128 MiB, its
// default limit, when the file was written with a large window (`zstd --long`).
//
// Compression is chosen by the name (".gz", ".zst", else plain) and checked against the first
// bytes, so a misnamed file is a clear error, never garbage records. Concatenated gzip members
// and zstd frames are read as one stream.
//
// What is an error (Next returns it, names "<file>:<line>: ", and returns it again on every
// later call; replay stops and exits non-zero):
// - a line that is not a JSON object (invalid JSON, or an array/number/string);
// - a record without "t" or "type" (null counts as absent), "t" not a finite number, "type"
//   not a string, "node" not a string;
// - a known field of a known type with the wrong JSON type: strict, e.g. "util_pct": "abc",
//   "gpu": -1 or 2.5 ("must be a non-negative integer"), "throttle": "idle". An integer field
//   accepts an integral float (3.0). The message names the field ("gpus[1].numa_node");
// - a line over kMaxLineBytes; corrupt compressed data (names the line being read); a read
//   error.
// What is tolerated and counted in Stats() (reported once at the end: Report()):
// - unknown "type": delivered as RecordType::kUnknown with t/node/type checked, other fields
//   unread; unknown fields of known types (nested ones too: "node.gpus.foo"); values of
//   enumerated fields the spec does not list ("event.kind=foo"); null fields (Stats only:
//   null is as valid as absent, so Report() does not mention them);
// - out-of-order records, which are still delivered in file order (the reader never buffers
//   to reorder): a record is counted out_of_order when its t is earlier than the latest t of
//   its own node (any amount), or more than 5 s (kCrossNodeSkewMs) earlier than the latest t
//   of the whole trace. A step back of up to 5 s relative to other nodes is silent (the spec's
//   tolerance for clocks of different nodes). Counts are by ms (t_ms).
// - a final line without a trailing newline that is not valid JSON: a crash mid-write. It is
//   dropped with a warning (truncated_last_line). A compressed stream that ends before its end
//   marker (a crash while writing a .gz/.zst) is a warning too (truncated_stream), and its last
//   partial line follows the same rule. Blank (whitespace-only) lines are skipped.
// - counters that reset: values are delivered as read.
// Thread-safety: a TraceReader is used by one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "trace/trace_records.h"

namespace gpuwatch::trace {
namespace internal {
class ByteSource;  // the decompressed bytes under the lines (trace_reader.cc)
}  // namespace internal

inline constexpr size_t kMaxLineBytes = size_t{16} << 20;  // 16 MiB, newline excluded
inline constexpr int64_t kCrossNodeSkewMs = 5000;          // the spec's cross-node tolerance
inline constexpr size_t kMaxTrackedNodes = 65536;          // nodes beyond are not order-checked
inline constexpr size_t kMaxStatKeys = 1024;               // distinct names per Stats map

enum class TraceCompression { kPlain, kGzip, kZstd };

struct TraceReadStats {
  uint64_t lines = 0;                                        // lines consumed, blank ones included
  uint64_t blank_lines = 0;                                  // skipped
  uint64_t records = 0;                                      // delivered
  std::array<uint64_t, kRecordTypeCount> records_by_type{};  // index: RecordType
  // Bounded maps (kMaxStatKeys distinct keys each, names cut to 64 bytes); a key that does
  // not fit is counted in dropped_stat_keys instead.
  // Each counts occurrences: a node record with 8 GPUs that each carry "foo" adds 8.
  std::map<std::string, uint64_t> unknown_types;   // "foo"
  std::map<std::string, uint64_t> unknown_fields;  // "gpu.foo", "node.gpus.bar"
  std::map<std::string, uint64_t> unknown_values;  // "event.kind=foo", "gpu.throttle=bar"
  std::map<std::string, uint64_t> null_fields;     // "gpu.fan_pct", "host.nics.tx_mbs"
  uint64_t dropped_stat_keys = 0;
  uint64_t out_of_order = 0;              // records (each counted once)
  uint64_t out_of_order_within_node = 0;  // of which: earlier than their own node's latest
  uint64_t first_out_of_order_line = 0;   // 0 = none
  int64_t max_step_back_ms = 0;           // the largest step back among those counted
  uint64_t untracked_node_records = 0;    // records of nodes beyond kMaxTrackedNodes
  uint64_t truncated_last_line = 0;       // line number of a dropped unterminated last line
  bool truncated_stream = false;          // .gz/.zst ended before its end marker
  uint64_t bytes = 0;                     // uncompressed bytes consumed
  // With SetSkipMalformed: records that were malformed and skipped, and the first one's error.
  uint64_t malformed_records = 0;
  std::string first_malformed;

  uint64_t count(RecordType t) const { return records_by_type[static_cast<size_t>(t)]; }
  // One line per thing worth telling (unknown types, fields and values, out-of-order
  // records, truncation), for the end of a replay; empty when the trace was clean.
  std::vector<std::string> Report() const;
  // "node=1 gpu=7680 host=192 …" (types with records, in RecordType order).
  std::string CountsLine() const;
};

class TraceReader {
 public:
  // Opens `path`; compression by name, verified by magic bytes. NotFound / IoError from the
  // file system, Corruption when the content does not match the name.
  static Result<std::unique_ptr<TraceReader>> Open(const std::string& path);
  // Reads `data` as if it were a file called `name` (compression by name, as Open). For
  // tests and the fuzz target.
  static Result<std::unique_ptr<TraceReader>> OpenBuffer(std::string data, std::string name);

  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // The next record into *out: true, or false at the end of the trace. An error is sticky.
  Result<bool> Next(TraceRecord* out);
  // A malformed record (not a JSON object, a known field of the wrong type) is skipped and
  // counted (Stats().malformed_records) instead of stopping the reader; I/O and decompression
  // errors still stop it. For a reader of records this process wrote itself (the agent's flight
  // recorder), where one bad record must not cost the rest of the window.
  void SetSkipMalformed(bool skip) { skip_malformed_ = skip; }

  const TraceReadStats& Stats() const { return stats_; }
  const std::string& name() const { return name_; }
  TraceCompression compression() const { return compression_; }

 private:
  TraceReader(std::string name, TraceCompression compression,
              std::unique_ptr<internal::ByteSource> source);
  static Result<std::unique_ptr<TraceReader>> Make(std::string name,
                                                   std::unique_ptr<internal::ByteSource> raw);

  // The next line (without '\n') into line_: true, or false at the end. Sets
  // line_terminated_.
  Result<bool> ReadLine();
  Status Fail(Status s);
  void CheckOrder(const TraceRecord& rec);

  std::string name_;
  TraceCompression compression_;
  std::unique_ptr<internal::ByteSource> source_;
  std::string chunk_;     // decoded bytes not yet split into lines
  size_t chunk_pos_ = 0;  // first unconsumed byte of chunk_
  std::string line_;      // the current line
  bool line_terminated_ = false;
  bool eof_ = false;
  uint64_t line_no_ = 0;
  Status error_;  // sticky
  bool skip_malformed_ = false;
  int64_t max_t_ms_ = 0;
  bool any_t_ = false;
  // Keyed by the node name's hash: a name may be long, and a collision costs only a count.
  std::unordered_map<size_t, int64_t> last_t_ms_by_node_;
  TraceReadStats stats_;
};

}  // namespace gpuwatch::trace
