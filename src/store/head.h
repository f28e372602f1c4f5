// Head: the store's in-memory, write-ahead-logged recent data. Series are interned in a
// SeriesIndex; each series keeps sealed chunks and one open ChunkEncoder. Every append is in
// the WAL before it is acknowledged; Open replays the WAL, so after a crash the head holds
// exactly what was acknowledged (per the sync policy).
//
// WAL records (docs/format/wal.md, "Head records"): a series record the first time a label
// set is seen, then sample batches that refer to it by ref. One batch = one WAL record = one
// fsync, so remote-write requests and agent ticks cost one sync each.
//
// Thread-safety: Append* may run concurrently with queries; appends are serialized by one
// mutex (the WAL orders them anyway), queries take per-series locks.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/chunkenc.h"
#include "store/labels.h"
#include "store/sample_list.h"
#include "store/series_index.h"
#include "store/wal.h"

namespace gpuwatch::store {

// Sample timestamps the store takes: the Unix epoch up to the end of int64 nanoseconds
// (2262-04-11), the range the query API accepts. A sample near INT64_MIN once overflowed the
// rollup buckets and stopped every flush (issue 17, D1).
inline constexpr int64_t kMinSampleTimeMs = 0;
inline constexpr int64_t kMaxSampleTimeMs = 9'223'372'036'854;

struct HeadOptions {
  WalOptions wal;
  // A series' open chunk is sealed when it spans this much time or holds this many samples.
  int64_t chunk_span_ms = 2 * 3600 * 1000;
  size_t chunk_max_samples = 7200;
  // Samples up to this much older than their series' newest are accepted out of order (0:
  // none, the agent's own store, whose collectors write in order). The hub sets it so that an
  // agent resending after an outage, or a Prometheus-style sender resending beside its live
  // samples, is taken whole. Such samples wait, sorted, beside the series' chunks and go to
  // the next block as one chunk of their own; a timestamp the head already holds is a
  // duplicate (same value) or refused (another value), never stored twice.
  int64_t out_of_order_window_ms = 0;
  // Samples an open chunk buffers raw (16 bytes each) before encoding them as one block:
  // 2^block_shift. Every open series holds that buffer at its full size once it filled it, so
  // on a hub with a million series it is most of the head's memory (bench/fleet/RESULTS.md).
  int block_shift = kDefaultBlockShift;
  // Where the head's index keeps its label sets: a store's pool, shared with its blocks.
  LabelsPool pool;
};

// What happened to the samples of one batch; rejected samples are counted with the reason of
// the first one (returned to remote-write clients as a 400 when nothing was accepted).
struct AppendResult {
  uint64_t accepted = 0;
  uint64_t duplicates = 0;    // same timestamp and bit-identical value as the last one: a retry
  uint64_t out_of_order = 0;  // older than the series' newest sample (beyond the window)
  uint64_t conflicts = 0;     // a timestamp the head holds, with another value
  uint64_t accepted_out_of_order = 0;  // of `accepted`: within the out-of-order window
  uint64_t invalid = 0;                // bad label set
  uint64_t out_of_bounds = 0;          // timestamp outside [kMinSampleTimeMs, kMaxSampleTimeMs]
  uint64_t series_limited = 0;         // samples of new series over AppendLimits::max_new_series
  uint64_t new_series = 0;             // series this batch created
  std::string first_error;
  // With AppendLimits::want_refs: each input's series ref, parallel to the batch (kNoSeriesRef
  // where its labels were invalid or it was over the series limit). A caller that knows a
  // series by its ref next time passes Input::ref and skips the label work (remote-write).
  std::vector<uint32_t> refs;
  uint64_t rejected() const {
    return out_of_order + conflicts + invalid + out_of_bounds + series_limited;
  }
};

struct AppendLimits {
  // New series this batch may create; the samples of any further new series are refused
  // (counted in series_limited). Existing series are never refused.
  uint64_t max_new_series = UINT64_MAX;
  bool want_refs = false;  // fill AppendResult::refs
};

inline constexpr uint32_t kNoSeriesRef = UINT32_MAX;

struct SeriesSamples {
  Labels labels;
  std::vector<Sample> samples;
};

// What a flush takes from the head: every sealed chunk, i.e. everything in the WAL segments
// numbered below wal_first_kept.
struct HeadFlushChunk {
  int64_t min_t_ms = 0, max_t_ms = 0;
  uint32_t num_samples = 0;
  // Shared with the head, which keeps the chunk queryable until DropFlushed: a copy doubled
  // the head's chunk memory during every flush (bench/fleet/RESULTS.md, run 5).
  std::shared_ptr<const std::string> bytes;
};
struct HeadFlushSeries {
  Labels labels;
  std::vector<HeadFlushChunk> chunks;  // sealed chunks, then the out-of-order one if any
  uint32_t series_ref = 0;             // the head's, for DropFlushed
  size_t sealed_chunks = 0;            // of `chunks`, the ones DropFlushed takes from sealed
};
struct HeadFlush {
  uint64_t wal_first_kept = 0;
  std::vector<HeadFlushSeries> series;
  uint64_t samples = 0;
};

class Head {
 public:
  static Result<std::unique_ptr<Head>> Open(const std::string& dir, HeadOptions options,
                                            WalReplayStats* replay_stats = nullptr);
  // Replays the WAL without changing it (no torn-tail truncation, no new segment): for the
  // admin commands, which may run beside a live agent. Append fails on such a head.
  // Segments below `first_segment` are skipped (see Wal::Check).
  static Result<std::unique_ptr<Head>> OpenReadOnly(const std::string& dir, HeadOptions options,
                                                    uint64_t first_segment,
                                                    WalReplayStats* replay_stats = nullptr);
  ~Head();

  struct Input {
    std::vector<Label> labels;  // unsorted is fine
    SampleList samples;
    // A series this head already holds (a ref from AppendResult::refs): `labels` are then
    // ignored. Refs are the head's own and stay valid while it is open (series are never
    // removed from a head); one it never gave is refused as invalid.
    uint32_t ref = kNoSeriesRef;
  };
  // Validates, logs and applies one batch. A batch too large for one WAL record is logged as
  // several, each applied once it is durable. An I/O error from the WAL fails the rest of the
  // batch: the records already written stay (a retry finds their samples as duplicates), and
  // the series the failed record created are taken back out of the index.
  Result<AppendResult> Append(const std::vector<Input>& batch, const AppendLimits& limits = {});

  // Label sets of the selected series with a chunk overlapping [mint_ms, maxt_ms] (by chunk
  // bounds, without decoding).
  std::vector<Labels> SeriesInRange(const std::vector<Matcher>& matchers, int64_t mint_ms,
                                    int64_t maxt_ms) const;
  // Samples of every series the matchers select, within [mint_ms, maxt_ms].
  std::vector<SeriesSamples> Query(const std::vector<Matcher>& matchers, int64_t mint_ms,
                                   int64_t maxt_ms) const;

  // Flushing to a block (store.h): CutForFlush starts a new WAL segment, seals every open chunk
  // and returns copies of all sealed chunks; they stay queryable here until DropFlushed, which
  // the caller calls once the block holding them is in place. Then TruncateWal(wal_first_kept).
  // Appends may continue throughout. One flush at a time.
  Result<HeadFlush> CutForFlush();
  void DropFlushed(const HeadFlush& flush);
  Status TruncateWal(uint64_t first_kept) { return wal_->TruncateBefore(first_kept); }

  // Makes `labels`' newest persisted sample known, so older samples are still rejected as out
  // of order after the head's own copy was flushed and the process restarted.
  void SeedLast(const Labels& labels, int64_t t_ms, double value);

  // Time range of the samples not yet flushed; false when there are none.
  bool UnflushedRange(int64_t* min_t_ms, int64_t* max_t_ms) const;
  uint64_t wal_bytes() const;

  const SeriesIndex& index() const { return index_; }
  uint64_t num_samples() const;
  // Bytes of sealed chunks plus the open chunks' encoded blocks (not their buffered samples).
  uint64_t chunk_bytes() const;
  Status Sync() { return wal_ ? wal_->Sync() : Status::Ok(); }

 private:
  struct SealedChunk {
    int64_t min_t_ms = 0, max_t_ms = 0;
    uint32_t num_samples = 0;
    std::shared_ptr<const std::string> bytes;  // never null; shared with a flush's cut
  };
  struct MemSeries {
    explicit MemSeries(int block_shift) : open(block_shift) {}
    mutable std::mutex mu;
    bool logged = false;  // its series record is in the WAL (append_mu_)
    std::vector<SealedChunk> sealed;
    ChunkEncoder open;
    // The newest sample: written only under append_mu_ (and mu), so an appender reads it
    // without mu.
    bool has_last = false;
    int64_t last_t_ms = 0;
    double last_value = 0;
    // The newest samples, so a sender's retry of a whole request (older samples included) is
    // recognized as duplicates rather than rejected as out of order.
    static constexpr size_t kRecent = 32;
    std::array<Sample, kRecent> recent{};
    size_t recent_next = 0;
    bool IsRecentDuplicate(int64_t t_ms, double v) const;
    uint64_t samples = 0;
    // Samples accepted out of order (HeadOptions::out_of_order_window_ms), ascending and
    // unique; `ooo_flushing` holds the ones a flush cut took, queryable until DropFlushed.
    std::vector<Sample> ooo, ooo_flushing;
    // The samples the head holds within [lo, hi] (chunks and out-of-order ones), ascending
    // and unique by timestamp. REQUIRES: mu held.
    std::vector<Sample> Held(int64_t lo, int64_t hi) const;
    // Prefetch hints for applying a sample, in two steps a few samples apart: the series'
    // own lines first, then (once those are in cache) the buffers an append writes.
    void PrefetchSelf() const;
    void PrefetchBuffers() const;
  };
  // WAL record types. On-disk: never renumber.
  // kBatchRecord: samples as (ref, timestamp, 8-byte double), ~17 bytes each; still read.
  // kCompactBatchRecord: the same series part, samples coded by WalSampleCoder (head.cc),
  // what Append writes.
  enum RecordType : uint8_t { kBatchRecord = 1, kCompactBatchRecord = 2 };

  explicit Head(HeadOptions options) : options_(options), index_(options_.pool) {}
  void Replay(uint8_t type, std::string_view payload);
  void FinishReplay();
  // Applies one sample already in the WAL. REQUIRES: s.mu held.
  void ApplySample(MemSeries& s, int64_t t_ms, double v);
  // Keeps one out-of-order sample already in the WAL (a timestamp s holds is left alone).
  // REQUIRES: s.mu held.
  void ApplyOutOfOrder(MemSeries& s, int64_t t_ms, double v);
  MemSeries& SeriesFor(SeriesRef ref);  // REQUIRES: append_mu_ held

  HeadOptions options_;
  std::unique_ptr<Wal> wal_;
  SeriesIndex index_;
  std::mutex append_mu_;
  mutable std::mutex series_mu_;  // guards the series_ vector itself (growth)
  std::vector<std::unique_ptr<MemSeries>> series_;
  std::vector<SeriesRef> replay_refs_;  // logged ref -> index ref, during replay only
  struct ReplayedSample {
    MemSeries* series;
    int64_t t_ms;
    double value;
  };
  std::vector<ReplayedSample> replay_batch_;  // one record's samples, reused
  uint64_t replay_bad_records_ = 0;
  uint64_t replay_out_of_bounds_ = 0;
  std::string dir_;
  // The unflushed samples' time range, guarded by range_mu_: appends and replay widen it
  // (NoteUnflushed), CutForFlush empties it, UnflushedRange reads it.
  mutable std::mutex range_mu_;
  bool has_unflushed_ = false;
  int64_t unflushed_min_t_ms_ = 0, unflushed_max_t_ms_ = 0;
  void NoteUnflushed(int64_t min_t_ms, int64_t max_t_ms);
  // Seals s.open. REQUIRES: s.mu held.
  void Seal(MemSeries& s);
};

}  // namespace gpuwatch::store
