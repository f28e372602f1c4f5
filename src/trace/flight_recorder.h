// FlightRecorder: the last minutes of trace records, in memory, for failure snapshots (R22).
//
// A ring of rendered trace lines kept sorted by t, bounded by bytes (payload plus a fixed
// per-line overhead) and by age (relative to the newest t added, not to a wall clock, so the
// bound is deterministic and testable); the oldest lines are dropped first.
//
// Ordering: sources (GPU tick, host tick, job socket, log tailers) add with slightly different
// delays, so a line may arrive a little older than the newest. Add appends in-order lines
// (the common case, O(1)) and inserts a late one at its place (binary search; the deque moves
// only the lines newer than it — a handful for the jitter between sources). Sorting on
// insert rather than on read keeps eviction by age exact (the front is the truly oldest
// line) and makes Window two binary searches and a copy. Equal t keeps insertion order.
//
// Node records: a trace must start with the node record of each node. The recorder
// recognises a node record by the writer's canonical prefix ({"t":..,"type":"node",
// "node":"<name>"...}, see trace_writer.h), or by the caller's word (AddNodeRecord: a hub
// takes records in any key order, as trace-format.md allows), and, per node, keeps the latest node
// record that has left the ring (pinned: outside the byte bound, one per node). Window(from, to)
// starts with, for every node known, the node record in force at `from` — the latest one with t <=
// from, from the ring or the pinned copy — even when it is older than the window; node records
// inside the window follow at their place.
//
// Thread-safe: all methods may be called concurrently. One mutex; lines are immutable and
// shared, so Window holds it only to collect references (a few ms for a full 64 MiB ring)
// and copies the text after releasing it — a snapshot never stalls the collectors' Adds.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gpuwatch::trace {

struct FlightRecorderOptions {
  size_t max_bytes = size_t{64} << 20;
  std::chrono::milliseconds max_age = std::chrono::minutes(15);
};

struct FlightRecorderStats {
  size_t lines = 0;  // in the ring (pinned node records not included)
  size_t bytes = 0;  // charged to the ring: sum of line sizes + kLineOverheadBytes each
  size_t pinned_node_records = 0;
  uint64_t dropped_lines = 0;  // evicted or refused since construction
  uint64_t dropped_bytes = 0;  // their line sizes + kLineOverheadBytes each
  int64_t oldest_t_ms = 0;     // of the ring; 0 when empty
  int64_t newest_t_ms = 0;
};

class FlightRecorder {
 public:
  // Bytes charged per line beyond its text: the ring entry, the shared string and its
  // control block, and allocator headers — so max_bytes bounds memory, not just text.
  static constexpr size_t kLineOverheadBytes = 128;

  explicit FlightRecorder(FlightRecorderOptions options = {});

  // Adds one rendered record (one JSON line without newline) stamped t_ms. A line older than
  // the age bound, or larger than the byte bound on its own, is dropped (and counted) at once.
  void Add(int64_t t_ms, std::string line);
  // Adds a node record of `node` in any form (its keys in any order).
  void AddNodeRecord(int64_t t_ms, std::string line, std::string node);

  struct TimedLine {
    int64_t t_ms;  // the line's own "t" (a hoisted node record's: the window's first line's)
    std::string line;
  };

  // The lines with from_ms <= t <= to_ms in non-decreasing t, preceded by the node record in
  // force at from_ms for each node (see above). Empty when from_ms > to_ms.
  std::vector<std::string> Window(int64_t from_ms, int64_t to_ms) const;
  // The same lines with their times (for a merge with other recorders' windows).
  std::vector<TimedLine> TimedWindow(int64_t from_ms, int64_t to_ms) const;

  FlightRecorderStats Stats() const;

 private:
  struct Entry {
    int64_t t_ms;
    std::shared_ptr<const std::string> line;
    std::string node;  // the node's name for a node record, "" for any other record
  };

  void AddEntry(Entry e);
  void EvictLocked();
  void DropFrontLocked();

  const FlightRecorderOptions options_;
  mutable std::mutex mu_;
  std::deque<Entry> ring_;               // sorted by t_ms; equal t in insertion order
  std::map<std::string, Entry> pinned_;  // node -> latest node record evicted from the ring
  size_t bytes_ = 0;
  uint64_t dropped_lines_ = 0;
  uint64_t dropped_bytes_ = 0;
};

}  // namespace gpuwatch::trace
