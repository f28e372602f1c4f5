// Wal: the store's write-ahead log. Every acknowledged write is in the log before it is
// acknowledged, so a crash loses nothing that was acknowledged (per the sync policy).
//
// The log is a directory of numbered segment files (00000001.wal, …). Each record is
//   u32 payload length | u32 CRC-32 of (type, payload) | u8 type | payload
// (little endian; docs/format/wal.md). Replay reads every segment in order and hands each
// intact record to a callback. A record cut short at the end of the newest segment is the tail
// of a write a crash interrupted: replay truncates it away (it was never acknowledged). Any
// other bad record is damage, reported with the segment, offset and bytes skipped; replay
// resumes at the next intact record (its header and CRC check out), so one flipped byte costs
// one record, not the rest of the segment. Open copies a damaged newest segment to the
// quarantine directory and rewrites it with its intact records, since appends continue there.
//
// Thread-safety: Append/Sync/Rotate are serialized by an internal mutex; Replay must run before
// the first Append (Open does it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::store {

enum class SyncPolicy {
  kAlways,    // fsync before Append returns: nothing acknowledged is ever lost
  kInterval,  // the caller (store) calls Sync() on a timer: at most that interval is lost on power
              // loss
  kNever,     // leave it to the OS: survives a process crash, not a power loss
};

struct WalOptions {
  SyncPolicy sync = SyncPolicy::kAlways;
  uint64_t segment_bytes = 64ull << 20;  // a new segment once one reaches this size
  // The number of the first segment when the log is empty: the store keeps numbering above the
  // segments its blocks cover, so a new segment is never mistaken for a flushed one.
  uint64_t first_segment = 1;
  // Where a damaged newest segment is copied before Open rewrites it (default DIR/quarantine).
  std::string quarantine_dir;
};

struct WalDamage {
  std::string segment;  // file name
  uint64_t offset = 0;  // where the first bad record starts
  uint64_t bytes_lost = 0;
  std::string reason;      // "CRC mismatch", "record length exceeds segment", …
  bool torn_tail = false;  // the newest segment's unacknowledged tail (truncated, not an error)
};
// Damage is reported the same way by Open and Check: Check changes nothing, Open also repairs.

// One segment as replay (or Check) found it. Records are handed to the callback in segment
// order, so a caller that needs to know which segment a record came from (to drop whole
// segments by age) counts `records` off in order.
struct WalSegmentStats {
  uint64_t number = 0;
  uint64_t bytes = 0;    // file size after replay (a torn tail already cut off by Open)
  uint64_t records = 0;  // intact records, the ones handed to the callback
};

struct WalReplayStats {
  uint64_t records = 0;
  uint64_t segments = 0;
  std::vector<WalDamage> damage;
  std::vector<WalSegmentStats> segment_stats;  // ascending by number
};

inline constexpr uint32_t kMaxWalRecordBytes = 16u << 20;

class Wal {
 public:
  using RecordFn = std::function<void(uint8_t type, std::string_view payload)>;

  // Opens (creating) the log in `dir`, replays it into `fn`, truncates a torn tail and opens
  // a segment for appending.
  static Result<std::unique_ptr<Wal>> Open(const std::string& dir, WalOptions options,
                                           const RecordFn& fn, WalReplayStats* stats);
  ~Wal();

  // Appends one record; with SyncPolicy::kAlways it is on stable storage when this returns OK.
  // An I/O error (disk full, …) is returned and the log stays consistent: a partial record is
  // cut off again so the next append starts on a record boundary.
  Status Append(uint8_t type, std::string_view payload);
  Status Sync();
  // Starts a new segment; returns the number of the first segment that is still needed after
  // the caller has persisted everything up to now (so older ones can be deleted).
  Result<uint64_t> Rotate();
  // Deletes segments numbered below `first_kept`.
  Status TruncateBefore(uint64_t first_kept);

  uint64_t current_segment() const;
  // Reads a log without changing it (for `store check`); `fn`, when given, sees each intact
  // record as replay would.
  // Segments numbered below `first_segment` are left out (a flushed block already holds them).
  static Result<WalReplayStats> Check(const std::string& dir, const RecordFn& fn = nullptr,
                                      uint64_t first_segment = 0);

 private:
  Wal(std::string dir, WalOptions options) : dir_(std::move(dir)), options_(options) {}
  Status OpenSegment(uint64_t number);  // REQUIRES: mu_ held
  std::string SegmentPath(uint64_t number) const;
  Status Quarantine(const std::string& path, const std::vector<WalDamage>& damage) const;

  const std::string dir_;
  const WalOptions options_;
  mutable std::mutex mu_;
  int fd_ = -1;
  uint64_t segment_ = 0;
  uint64_t segment_size_ = 0;
};

// Segment numbers present in `dir`, ascending.
Result<std::vector<uint64_t>> ListWalSegments(const std::string& dir);

}  // namespace gpuwatch::store
