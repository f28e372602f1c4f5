// Spool: what an agent has to send to its hub, on disk until the hub has it (issue 19).
//
// An append-only log of entries (one remote-write request, or one batch of trace records),
// each with a sequence number, in segment files under one directory, plus a saved send position
// per destination. The position moves only when a send succeeded (Ack), so after an outage, a
// hub restart or the agent's own restart the sender resends from there, oldest first, with the
// entries as they were written: the original timestamps. Prometheus's agent mode loses what it
// had not sent when it restarts (prometheus/prometheus#8809); this does not.
//
// Layout (docs/format/spool.md):
//   ID                  random hex, made once: a new spool (data dir wiped) is a new stream,
//                       so the hub does not take its sequence numbers for old ones
//   <first seq>.seg     entries: u32 length, u32 CRC-32 of the payload (little endian), payload
//   pos.<destination>   the next sequence number to send there (text; written atomically)
//
// Bounds: a segment is closed at segment_bytes; when the spool holds more than max_bytes the
// oldest segments are deleted even if unsent (counted in Stats().dropped_entries and logged:
// an outage longer than the disk allows loses its oldest part, never the newest). Segments
// every destination has acknowledged are deleted at once.
// Crash safety: each Append is written and fdatasync'ed before it returns; on open, a torn or
// damaged tail of the newest segment is cut off (what follows it was never acknowledged to
// anyone). A position file lost or stale only causes a resend, which the hub takes once.
//
// Thread-safety: all methods are thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::server {

struct SpoolOptions {
  uint64_t max_bytes = uint64_t{512} << 20;
  uint64_t segment_bytes = uint64_t{8} << 20;
  bool sync = true;  // fdatasync each append (tests turn it off)
};

struct SpoolEntry {
  uint64_t seq = 0;
  std::string payload;
};

struct SpoolStats {
  uint64_t first_seq = 0;  // the oldest entry held (== next_seq when empty)
  uint64_t next_seq = 0;   // the sequence number the next Append gets
  uint64_t bytes = 0;
  uint64_t segments = 0;
  uint64_t dropped_entries = 0;  // deleted unsent (over max_bytes) since open
  uint64_t damaged_bytes = 0;    // cut off at open (a torn or damaged tail)
};

class Spool {
 public:
  static constexpr uint32_t kMaxEntryBytes = 64u << 20;

  // Opens or creates the spool in `dir`. An error names the file that failed.
  static Result<std::unique_ptr<Spool>> Open(const std::string& dir, SpoolOptions options = {});
  ~Spool();
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  // The spool's random id (the ID file).
  const std::string& id() const { return id_; }
  // Appends one entry; returns its sequence number once it is on disk.
  Result<uint64_t> Append(std::string_view payload);
  // Entries with seq >= from, oldest first, up to about max_bytes of payload (at least one
  // entry when there is one). Entries already deleted are skipped: the first returned may be
  // later than `from`.
  Result<std::vector<SpoolEntry>> Read(uint64_t from, uint64_t max_bytes) const;
  // The saved position of `destination` (a short name: [A-Za-z0-9_.-]); first_seq when the
  // destination has none yet.
  uint64_t Position(const std::string& destination) const;
  // Everything below `next` reached `destination`: saves the position and deletes segments
  // every destination has passed.
  Status Ack(const std::string& destination, uint64_t next);
  SpoolStats Stats() const;

 private:
  struct Segment {
    uint64_t first_seq = 0;
    uint64_t entries = 0;
    uint64_t bytes = 0;
    std::string path;
  };
  Spool(std::string dir, SpoolOptions options) : dir_(std::move(dir)), options_(options) {}
  Status Load();
  Status OpenTail();  // REQUIRES: mu_ held
  void DeleteFrontLocked(bool unsent);
  uint64_t MinPositionLocked() const;

  const std::string dir_;
  const SpoolOptions options_;
  std::string id_;
  mutable std::mutex mu_;
  std::vector<Segment> segments_;  // ascending first_seq; the last is the one appended to
  int tail_fd_ = -1;
  uint64_t next_seq_ = 1;
  uint64_t bytes_ = 0;
  std::map<std::string, uint64_t> positions_;
  uint64_t dropped_entries_ = 0;
  uint64_t damaged_bytes_ = 0;
};

}  // namespace gpuwatch::server
