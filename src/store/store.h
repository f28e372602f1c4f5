// Store: gpuwatch's embedded time-series database — the WAL-backed head for recent samples and
// immutable block files (block.h) for everything flushed, with 1-minute and 1-hour rollups,
// retention per tier and a disk budget. It is the Querier the query engine and the HTTP API
// read from.
//
// Directory layout (all under the data dir):
//   LOCK            flock()ed by the one process that may write
//   wal/            the head's write-ahead log (wal.h)
//   blocks/         <seq>.gwb block files; <seq>.gwb.tmp are unfinished writes, removed on open
//   quarantine/     damaged files moved aside by open or `store check`, with a note each
//
// Flush: when the head's unflushed samples span `block_span_ms` (2 h), on Flush() and on Close(),
// the head's chunks (all of them: open chunks are sealed) go to a new block with their rollups,
// then the WAL segments they came from are deleted. A block records which WAL segments it
// covers, so a crash between the two never replays flushed samples twice.
//
// Retention is measured from the newest sample in the store, not the wall clock, so replaying
// or backfilling old data does not delete it on arrival and a wrong clock deletes nothing.
// Raw chunks older than raw_retention go first, then 1m rollups, then 1h. Over the disk budget,
// the oldest raw data goes first, then the oldest 1m rollups, then 1h.
//
// Thread-safety: every public method may be called from any thread. Appends go straight to the
// head (its own locking); queries see a consistent snapshot of blocks + head; one background
// thread flushes, compacts and enforces retention.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "store/block.h"
#include "store/head.h"
#include "store/querier.h"

namespace gpuwatch::store {

struct StoreOptions {
  HeadOptions head;
  int64_t block_span_ms = 2 * 3600 * 1000;
  // Flushes the span triggers are at least this far apart. Backfilled samples beside live ones
  // keep the head's span over block_span_ms, which flushed every few seconds and made a block
  // (and an open file) each time (issue 17, D12); the head holds this much more instead.
  int64_t min_flush_interval_ms = 15 * 60 * 1000;
  int64_t raw_retention_ms = int64_t{7} * 86400 * 1000;
  int64_t rollup_1m_retention_ms = int64_t{90} * 86400 * 1000;
  int64_t rollup_1h_retention_ms = int64_t{365} * 86400 * 1000;
  uint64_t disk_budget_bytes = uint64_t{5} << 30;
  // Flush, compaction and retention on a background thread; off in tests that drive them.
  bool background = true;
  // For the admin commands: no lock, no writes, WAL read as it is.
  bool read_only = false;
  // Samples more than this ahead of the clock are rejected (0: no limit).
  int64_t max_future_ms = 3600 * 1000;
  std::function<int64_t()> clock_ms;  // null: the system clock
};

// What opening found: replay statistics and anything moved aside.
struct StoreOpenReport {
  WalReplayStats wal;
  uint64_t blocks = 0;
  std::vector<std::string> quarantined;  // "file: reason"
  std::vector<std::string> removed;      // superseded blocks, unfinished writes, covered WAL
};

struct StoreTierStats {
  uint64_t blocks = 0;
  uint64_t samples = 0;  // raw samples, or rollup points
  uint64_t chunk_bytes = 0;
  int64_t min_t_ms = 0, max_t_ms = 0;
};

struct StoreStats {
  uint64_t series = 0;
  uint64_t samples = 0;  // raw samples: in blocks and in the head
  uint64_t bytes_on_disk = 0;
  uint64_t block_bytes = 0;
  uint64_t wal_bytes = 0;
  uint64_t blocks = 0;
  uint64_t head_series = 0;
  uint64_t head_samples = 0;
  StoreTierStats tiers[kNumTiers];
};

// Cheap to take (no walk over series): what /metrics shows of the store's health.
struct StoreHealth {
  uint64_t blocks = 0;
  uint64_t block_bytes = 0;
  uint64_t wal_bytes = 0;
  uint64_t head_series = 0;
  uint64_t write_errors = 0;  // appends the WAL refused (disk full, EFBIG, I/O error)
  uint64_t flush_errors = 0;  // flushes to a block that failed (the data stays in the WAL)
};

struct StoreCheckReport {
  uint64_t blocks = 0;
  uint64_t chunks = 0;
  uint64_t wal_segments = 0;
  uint64_t wal_records = 0;
  std::vector<BlockDamage> block_damage;
  std::vector<WalDamage> wal_damage;  // torn tails included, marked (they are not damage)
  std::vector<std::string> quarantined;
  bool damaged() const;
};

// Called for conditions an operator must hear about (a failed flush, a full disk, damage):
// kind is "store_error" or "store_damage", severity "warning" or "critical".
using StoreEventFn =
    std::function<void(const std::string& kind, const std::string& severity, const std::string&)>;

class Store : public Querier {
 public:
  static Result<std::unique_ptr<Store>> Open(const std::string& dir, StoreOptions options,
                                             StoreOpenReport* report = nullptr);
  ~Store() override;

  // Flushes the head to a block and stops the background thread. Idempotent.
  Status Close();

  Result<AppendResult> Append(const std::vector<Head::Input>& batch,
                              const AppendLimits& limits = {});
  Status Flush();
  // Merges blocks of the same UTC day into one (rollup-only blocks: of the same 30 days);
  // `closed_days_only` leaves the newest day alone.
  Status Compact(bool closed_days_only);
  Status EnforceRetention();
  StoreHealth Health() const;
  uint64_t head_series() const;  // Health().head_series without the walk over blocks
  StoreStats Stats() const;
  void SetEventSink(StoreEventFn fn);

  // Verifies every block chunk and WAL record of a store directory. With `quarantine`, damaged
  // block files are moved to quarantine/ and replaced by a block of their intact chunks, and
  // damaged WAL segments are copied there. REQUIRES: no process has the store open when
  // quarantining (the LOCK is taken).
  static Result<StoreCheckReport> Check(const std::string& dir, bool quarantine);

  // Querier.
  Result<std::vector<SeriesSamples>> SelectRaw(const std::vector<Matcher>& matchers,
                                               int64_t mint_ms, int64_t maxt_ms) const override;
  Result<std::vector<SeriesRollups>> SelectRollups(Tier tier, const std::vector<Matcher>& matchers,
                                                   int64_t mint_ms, int64_t maxt_ms,
                                                   uint32_t parts = kRollupAll) const override;
  TierCoverage Coverage(Tier tier) const override;
  Result<std::vector<Labels>> Series(const std::vector<Matcher>& matchers, int64_t mint_ms,
                                     int64_t maxt_ms) const override;
  Result<std::vector<std::string>> LabelNames(const std::vector<Matcher>& matchers) const override;
  Result<std::vector<std::string>> LabelValues(const std::string& name,
                                               const std::vector<Matcher>& matchers) const override;

  const Head& head() const { return *head_; }
  const std::string& dir() const { return dir_; }

 private:
  Store(std::string dir, StoreOptions options) : dir_(std::move(dir)), options_(options) {}
  using BlockList = std::vector<std::shared_ptr<const Block>>;
  BlockList Snapshot() const;
  Status LoadBlocks(StoreOpenReport* report);
  void SeedHead();
  void BackgroundLoop();
  // Writes `inputs` merged into one new block keeping only chunk kinds `keep` accepts, and
  // swaps it in place of them. An empty result deletes the inputs.
  Status ReplaceBlocks(const BlockList& inputs, const std::function<bool(uint8_t kind)>& keep);
  // REQUIRES: maintenance_mu_ held.
  Status FlushLocked();
  void Report(const std::string& kind, const std::string& severity, const std::string& message);
  int64_t NewestSampleMs() const;

  const std::string dir_;
  const StoreOptions options_;
  std::string blocks_dir_;
  int lock_fd_ = -1;
  // One copy of each label set for the head and every block (store/labels_pool.h).
  LabelsPool labels_pool_;
  std::unique_ptr<Head> head_;

  // Guards blocks_ and makes "add a block + drop its chunks from the head" atomic for queries.
  mutable std::shared_mutex blocks_mu_;
  BlockList blocks_;  // ascending seq
  std::atomic<uint64_t> next_seq_{1};

  // One maintenance operation (flush, compaction, retention) at a time.
  std::mutex maintenance_mu_;

  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool stopping_ = false;
  int64_t last_span_flush_ms_ = 0;  // the background thread's
  std::atomic<uint64_t> write_errors_{0}, flush_errors_{0};
  bool closed_ = false;
  std::thread bg_;

  std::mutex event_mu_;
  StoreEventFn event_fn_;
  std::string last_error_;  // reported once until it changes
};

}  // namespace gpuwatch::store
