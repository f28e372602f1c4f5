// EventStore: the store's log of events (XID, ECC, job start/end, alerts, config, driver and
// topology changes, annotations) and log lines, kept apart from the time series and indexed by
// time, node, GPU, job and kind, with its own retention.
//
// Storage is a write-ahead log (store::Wal) of its own, conventionally `<data-dir>/events/`: one
// WAL record per appended batch (docs/format/events.md). The log *is* the store: Open replays
// it into memory, where events sit in time order with postings per node, GPU, job and kind.
// Segments rotate each `segment_span_ms` of event time (a UTC day by default) and at
// `wal.segment_bytes`, so retention (by age and by bytes) deletes whole segments, oldest first,
// on Open, on Append when over the byte budget, and whenever the owner calls EnforceRetention.
// Memory is bounded by the retention: what is on disk is what is in memory.
//
// Damage is tolerated as the WAL tolerates it: a torn tail is cut off, a corrupt record in an
// older segment loses the rest of that segment only, and a record whose CRC is right but whose
// body does not decode is counted and skipped. The store opens and serves everything else.
//
// Thread-safety: all methods may be called concurrently. Appends (and retention) are serialized
// with each other; queries run concurrently with each other and wait only while an append
// inserts into the index, never while it writes or syncs the log.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "store/wal.h"

namespace gpuwatch::store {

// One event or log line.
struct EventRecord {
  int64_t t_ms = 0;         // when it happened, ms since the Unix epoch; >= 0
  std::string kind;         // [a-z0-9_]{1,64}: "xid", "ecc", "job_start", "job_end", "alert",
                            // "config", "driver", "topology", "annotation", "log", …
  std::string severity;     // "info", "warning", "critical" or "" (none)
  std::string node;         // host name; "" when not about one node
  std::string gpu;          // GPU UUID; "" when not about one GPU
  std::string job;          // job id; "" when not about one job
  std::string message;      // what happened, or the log line; bytes as given (readers that emit
                            // JSON or print it sanitize it)
  std::string fields_json;  // "" or a JSON object's text, stored as given (only its braces are
                            // checked): extra structured fields, e.g. {"xid":79}

  bool operator==(const EventRecord&) const = default;
};

inline constexpr size_t kMaxEventIdBytes = 256;            // node, gpu, job
inline constexpr size_t kMaxEventKindBytes = 64;           // kind
inline constexpr size_t kMaxEventMessageBytes = 64 << 10;  // message
inline constexpr size_t kMaxEventFieldsBytes = 64 << 10;   // fields_json
inline constexpr size_t kMaxEventQueryLimit = 100000;

// WAL record type of an event batch (docs/format/events.md). On-disk: never renumber.
inline constexpr uint8_t kEventBatchRecord = 1;

// InvalidArgument naming the offending field ("event kind \"XID\": …") or OK.
Status ValidateEvent(const EventRecord& e);
// The body of a kEventBatchRecord. REQUIRES: every event passes ValidateEvent.
std::string EncodeEventBatch(const std::vector<EventRecord>& events);
// Decodes a kEventBatchRecord body; every event returned passes ValidateEvent. Corruption on
// anything else (truncation, an unknown version or severity, an invalid event). Total on any
// input: this is what the fuzz target drives.
Result<std::vector<EventRecord>> DecodeEventBatch(std::string_view payload);

struct EventStoreOptions {
  // Segments are capped at 16 MiB (not the WAL's 64 MiB) so the byte budget drops small steps.
  WalOptions wal = [] {
    WalOptions w;
    w.segment_bytes = 16ull << 20;
    return w;
  }();
  // A new segment starts when an event falls in a later span of this length (aligned to the
  // epoch, so a day is a UTC day) than the newest event of the current one. 0: size only.
  int64_t segment_span_ms = 24ll * 3600 * 1000;
  // Segments whose newest event is older than this are deleted. 0: no age limit.
  int64_t retention_ms = 30ll * 24 * 3600 * 1000;
  // The oldest segments are deleted while the log is larger than this. 0: no byte limit. The
  // segment being written is never deleted for size, so the log can exceed this by at most one
  // segment (wal.segment_bytes).
  uint64_t retention_bytes = 256ull << 20;
  // Append rejects an event this far ahead of the clock: one event from a badly set clock would
  // otherwise keep its segment, and every later one, from ever expiring by age. 0: no limit.
  int64_t max_future_ms = 24ll * 3600 * 1000;
  // Wall clock for retention and for max_future_ms; null: the system clock.
  std::function<int64_t()> clock_ms;
  // Kinds kept in a partition of their own (DIR/bulk) with their own byte budget, so that bulk
  // text — job log lines, posted annotations — never evicts hardware and job events (issue 17,
  // D2: 18 posts of annotations once erased the node's XID history). Empty: one log. The agent
  // uses {"log", "annotation"}. A batch mixing both is two WAL writes.
  std::vector<std::string> bulk_kinds;
  uint64_t bulk_retention_bytes = 256ull << 20;
};
inline constexpr char kBulkEventsDir[] = "bulk";

struct EventQuery {
  int64_t start_ms = 0;            // inclusive
  int64_t end_ms = 0;              // inclusive; REQUIRES: start_ms <= end_ms
  std::string node, gpu, job;      // "" matches any
  std::vector<std::string> kinds;  // empty matches any; otherwise any of these
  // None of these kinds (after `kinds`): the dashboard's event markers leave out job log lines,
  // which would otherwise fill the limit on a chatty job.
  std::vector<std::string> exclude_kinds;
  std::string text_contains;  // "" matches any; otherwise a byte substring of message
  size_t limit = 1000;        // 1 … kMaxEventQueryLimit
  bool newest_first = true;   // order of the result (and which end `limit` keeps)
};

struct EventStoreStats {
  uint64_t events = 0;
  uint64_t segments = 0;
  uint64_t bytes = 0;  // on disk, all segments
  std::optional<int64_t> oldest_ms, newest_ms;
  uint64_t undecodable_records = 0;  // intact records skipped on Open (bad body, unknown type)
  uint64_t segments_dropped = 0;     // by retention since Open
  std::vector<WalDamage> damage;     // found by Open (a torn tail included)
};

// What `gpuwatch store check` reports about an event log; computed without changing anything.
struct EventStoreCheck {
  WalReplayStats wal;  // segments, records, damage (with segment and offset), per-segment stats
  uint64_t events = 0;
  uint64_t undecodable_records = 0;
  uint64_t bytes = 0;
  std::optional<int64_t> oldest_ms, newest_ms;
};

class EventStore {
 public:
  // Opens (creating) the event log in `dir`, replays it and applies retention.
  static Result<std::unique_ptr<EventStore>> Open(const std::string& dir,
                                                  EventStoreOptions options = {});
  // Reads the event log in `dir` without changing it.
  static Result<EventStoreCheck> Check(const std::string& dir);

  // Validates the whole batch (InvalidArgument naming the first bad event and field, also for an
  // event more than max_future_ms ahead: nothing is stored), logs it as one WAL record and
  // indexes it. An I/O error (disk full) stores nothing
  // and the store stays readable; later appends may succeed once there is room.
  Status Append(const std::vector<EventRecord>& events);

  Result<std::vector<EventRecord>> Query(const EventQuery& q) const;

  // Deletes the segments retention no longer keeps (their events leave memory too).
  Status EnforceRetention(int64_t now_ms);

  // Both partitions together (damage in the bulk one is named "bulk/<segment>").
  EventStoreStats stats() const;
  EventStoreStats BulkStats() const;  // the bulk partition alone (zero without one)
  Status Sync();

 private:
  // (time, arrival sequence): the total order of events; seq breaks ties stably.
  struct Key {
    int64_t t_ms;
    uint64_t seq;
    auto operator<=>(const Key&) const = default;
  };
  // An event in memory: identifiers interned (job ids churn, node and GPU ids repeat).
  struct Entry {
    int64_t t_ms = 0;
    uint64_t segment = 0;
    uint32_t kind = 0, node = 0, gpu = 0, job = 0;  // StringPool ids; 0 = ""
    uint8_t severity = 0;                           // on-disk code (events.md)
    std::string message;
    std::string fields_json;
  };
  struct Segment {
    uint64_t bytes = 0;
    uint64_t events = 0;
    std::optional<int64_t> newest_ms;
  };
  // Reference-counted interning, so ids of expired jobs are freed with their events.
  class StringPool {
   public:
    uint32_t Ref(const std::string& s);  // "" -> 0, not counted
    void Unref(uint32_t id);
    std::optional<uint32_t> Find(const std::string& s) const;  // nullopt: never seen
    const std::string& Get(uint32_t id) const;

   private:
    std::unordered_map<std::string, uint32_t> ids_;
    std::vector<const std::string*> names_{nullptr};  // keys of ids_ (node-stable)
    std::vector<uint64_t> refs_{0};
    std::vector<uint32_t> free_;
  };
  using Postings = std::unordered_map<uint32_t, std::vector<Key>>;

  EventStore(std::string dir, EventStoreOptions options)
      : dir_(std::move(dir)), options_(std::move(options)) {}
  // This log alone, without the bulk partition.
  Status AppendOwn(const std::vector<EventRecord>& events);
  Result<std::vector<EventRecord>> QueryOwn(const EventQuery& q) const;
  Status EnforceRetentionOwn(int64_t now_ms);
  EventStoreStats StatsOwn() const;
  static Result<EventStoreCheck> CheckOwn(const std::string& dir);
  bool IsBulk(const std::string& kind) const;
  int64_t Now() const;
  // REQUIRES: index_mu_ held exclusively. `bulk`: append unsorted, SortIndex() later (replay).
  void Index(const EventRecord& e, uint64_t segment, bool bulk);
  void SortIndex();
  // REQUIRES: append_mu_ held.
  Status EnforceRetentionLocked(int64_t now_ms);
  // REQUIRES: append_mu_ held; drops segments below `first_kept` from memory.
  void DropSegmentsBelow(uint64_t first_kept);
  EventRecord ToRecord(const Entry& e) const;

  const std::string dir_;
  const EventStoreOptions options_;
  std::unique_ptr<Wal> wal_;

  // Lock order: append_mu_, then index_mu_. Writers of segments_ and the index hold both, so
  // holding either one is enough to read them.
  std::mutex append_mu_;  // serializes Append and retention (and the WAL writes they do)
  mutable std::shared_mutex index_mu_;
  std::map<uint64_t, Segment> segments_;
  uint64_t total_bytes_ = 0;
  std::deque<Entry> entries_;  // by seq: entries_[seq - first_seq_]
  uint64_t first_seq_ = 0;
  std::vector<Key> by_time_;
  Postings by_kind_, by_node_, by_gpu_, by_job_;
  StringPool pool_;
  uint64_t undecodable_records_ = 0;
  uint64_t segments_dropped_ = 0;
  std::vector<WalDamage> damage_;
  std::unique_ptr<EventStore> bulk_;  // the bulk partition, when bulk_kinds is set
};

}  // namespace gpuwatch::store
