// Block files: the store's persisted, immutable data. A block holds every chunk the head had
// when it was flushed (or several blocks' chunks after compaction): raw chunks and the 1m/1h
// rollup chunks computed from them, with an index of series (label sets over a symbol table)
// and where each chunk lies. Layout: docs/format/block.md.
//
// Crash safety: a block is written to `<seq>.gwb.tmp`, fsynced, renamed to `<seq>.gwb` and the
// directory fsynced, so a block file either exists whole or not at all. A block names the WAL
// segments it makes redundant (`wal_covers_before`) and the blocks it replaces (compaction,
// retention), so a crash between writing a block and deleting what it supersedes is repaired
// on the next open instead of double-counting data.
//
// Every chunk carries its own CRC-32 (docs/format/chunk.md) and the index has one, so damage is
// found per chunk: a damaged chunk is skipped and reported, the rest of the block still serves.
// The index at the end is the fast path only: each series is also written as a self-describing
// record (its labels and chunk lengths, CRC-checked) in front of its chunks, and the block's
// meta as a record after the magic, so a block whose end is cut off or whose index is damaged
// is salvaged by a front-to-back scan (SalvageBlock) instead of being lost whole.
//
// Thread-safety: a Block is immutable after Open and safe to read from any number of threads
// (chunks are read with pread). BlockWriter is single-threaded.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/labels.h"
#include "store/querier.h"
#include "store/series_index.h"

namespace gpuwatch::store {

// What a chunk holds: kind = tier << 4 | field. On-disk: never renumber.
enum class RollupField : uint8_t {
  kMin = 0,
  kMax = 1,
  kSum = 2,
  kCount = 3,
  kLast = 4,
  kLastOffset = 5,  // last_t_ms - bucket start, in ms
  kFirst = 6,
  kFirstOffset = 7,  // first_t_ms - bucket start, in ms
};
inline constexpr int kNumRollupFields = 8;
inline constexpr uint8_t kRawChunkKind = 0;
inline uint8_t RollupChunkKind(Tier tier, RollupField field) {
  return static_cast<uint8_t>(static_cast<uint8_t>(tier) << 4 | static_cast<uint8_t>(field));
}
inline Tier ChunkKindTier(uint8_t kind) { return static_cast<Tier>(kind >> 4); }
inline RollupField ChunkKindField(uint8_t kind) { return static_cast<RollupField>(kind & 0xf); }
bool IsValidChunkKind(uint8_t kind);

struct ChunkMeta {
  uint8_t kind = kRawChunkKind;
  int64_t min_t_ms = 0;
  int64_t max_t_ms = 0;
  uint32_t num_samples = 0;
  uint64_t offset = 0;  // in the block file
  uint32_t length = 0;
};

struct BlockMeta {
  uint64_t seq = 0;  // unique, increasing: the file is <seq>.gwb
  int64_t min_t_ms = 0;
  int64_t max_t_ms = 0;
  // Every WAL record in segments numbered below this is in this block or an older one.
  uint64_t wal_covers_before = 0;
  std::vector<uint64_t> replaces;  // seqs of blocks whose data this one holds
};

struct TierStats {
  uint64_t samples = 0;  // raw samples, or rollup points (buckets) for 1m/1h
  uint64_t chunk_bytes = 0;
  uint64_t chunks = 0;
  int64_t min_t_ms = 0, max_t_ms = 0;  // 0/0 when the tier has no data
};

std::string BlockFileName(uint64_t seq);  // "00000042.gwb"

class BlockWriter {
 public:
  // Creates <dir>/<meta.seq>.gwb.tmp and writes the meta record (wal_covers_before, replaces;
  // min/max time come from the chunks at Finish). The destructor removes the file unless
  // Finish succeeded.
  static Result<std::unique_ptr<BlockWriter>> Create(const std::string& dir, BlockMeta meta);
  ~BlockWriter();

  // Starts the next series; its chunks follow with AddChunk. A label set may appear once.
  Status BeginSeries(const Labels& labels);
  // REQUIRES: BeginSeries was called. `meta.offset` and `meta.length` are filled in when the
  // series is written (at the next BeginSeries or Finish).
  Status AddChunk(ChunkMeta meta, std::string_view bytes);
  // Writes the index and footer, syncs, renames into place and syncs the directory.
  // Returns the final path.
  Result<std::string> Finish();
  uint64_t bytes_written() const { return offset_ + buffer_.size() + pending_.size(); }

 private:
  BlockWriter(std::string dir, BlockMeta meta) : dir_(std::move(dir)), meta_(std::move(meta)) {}
  // Writes the current series' record and chunks to the buffer.
  Status EndSeries();
  Status Flush();

  struct SeriesEntry {
    Labels labels;
    std::vector<ChunkMeta> chunks;
  };
  std::string dir_;
  BlockMeta meta_;
  int fd_ = -1;
  bool finished_ = false;
  std::string buffer_;   // written out in ~1 MiB pieces
  uint64_t offset_ = 0;  // where buffer_ ends in the file
  std::string pending_;  // the current series' chunks, written after its record
  bool series_open_ = false;
  std::vector<SeriesEntry> series_;
};

class Block {
 public:
  // Reads the footer and index (CRC-checked); chunks are read on demand.
  // `pool`: where the index keeps its label sets (a store's, shared with its head and other
  // blocks; by default one of the block's own).
  static Result<std::unique_ptr<Block>> Open(const std::string& path, LabelsPool pool = {});
  ~Block();

  const std::string& path() const { return path_; }
  const BlockMeta& meta() const { return meta_; }
  uint64_t file_bytes() const { return file_bytes_; }
  const TierStats& tier_stats(Tier tier) const { return tiers_[static_cast<int>(tier)]; }

  size_t num_series() const { return chunk_at_.size() - 1; }
  // The index's own copy: a block's index is written only while it is parsed.
  const Labels& labels(uint32_t i) const { return index_.LabelsAt(i); }
  // The series' chunks, in file order (decoded from the block's compact copy of its index).
  std::vector<ChunkMeta> chunks(uint32_t i) const;
  // Positions of the series the matchers select, ascending.
  std::vector<SeriesRef> Select(const std::vector<Matcher>& matchers) const {
    return index_.Select(matchers);
  }
  const SeriesIndex& index() const { return index_; }
  // The chunk's bytes (its CRC is checked when it is decoded).
  Result<std::string> ReadChunk(const ChunkMeta& chunk) const;

 private:
  Block(std::string path, LabelsPool pool) : path_(std::move(path)), index_(std::move(pool)) {}
  Status ParseIndex(std::string_view index, uint64_t index_offset);

  std::string path_;
  int fd_ = -1;
  uint64_t file_bytes_ = 0;
  BlockMeta meta_;
  // Every series' chunk entries as the index codes them, one series after another (kind,
  // start from the block's, span, samples, offset, length: ~20 bytes a chunk against a
  // ChunkMeta's 40), series i's from chunk_at_[i] to chunk_at_[i + 1]. A vector of ChunkMeta
  // a series was ~0.7 KiB a series a block, what each block still cost a hub's memory after
  // its labels moved to the store's pool (bench/fleet/RESULTS.md, "Memory over time").
  std::string chunk_index_;
  std::vector<uint64_t> chunk_at_{0};
  SeriesIndex index_;
  TierStats tiers_[kNumTiers];
};

struct BlockDamage {
  std::string file;
  std::string where;  // "index", or the series and chunk
  std::string reason;
};

// Opens the block and decodes every chunk; damage is listed, not returned as an error.
// `chunks_checked` counts the chunks read. When the index cannot be read, the reason says what
// a salvage would keep.
std::vector<BlockDamage> CheckBlock(const std::string& path, uint64_t* chunks_checked);

// What a front-to-back scan of a block file found.
struct BlockSalvage {
  bool meta_found = false;  // the meta record was intact (else `meta` holds defaults)
  BlockMeta meta;
  uint64_t series = 0;         // series with at least one intact chunk
  uint64_t chunks = 0;         // intact chunks (a rollup group of eight counts eight)
  uint64_t samples = 0;        // raw samples in them
  uint64_t chunks_lost = 0;    // chunks a series record names that did not decode
  uint64_t bytes_skipped = 0;  // bytes that were no intact record or chunk (index, damage)
  std::string first_damage;    // where the first damaged record or chunk was, and why
};

// One salvaged series: its label set and the chunks that decoded, in file order, with
// min/max time and counts taken from the chunks themselves.
struct SalvagedSeries {
  Labels labels;
  std::vector<std::pair<ChunkMeta, std::string_view>> chunks;
};

// Scans `file` (a whole block file's bytes) record by record, resyncing on the next intact
// record after damage, and calls `emit` for every series with intact chunks. A rollup group
// is kept only with all eight fields intact. Fails only for a file older than series records
// (format 1) or when `emit` fails.
Result<BlockSalvage> ScanBlock(std::string_view file,
                               const std::function<Status(const SalvagedSeries&)>& emit);

// The meta record of the block at `path`, when it is intact (format 2).
std::optional<BlockMeta> ReadBlockMetaRecord(const std::string& path);

// Scans the block at `path` and writes what is intact as a new block <dir>/<seq>.gwb that
// replaces it (its `replaces` is the damaged block's seq, `damaged_seq`, alone: blocks the
// damaged one replaced are not claimed, so a survivor among them is never deleted for a copy
// that lost part of its data). `*written` gets the new block's path, or stays empty when
// nothing was intact.
// `exclude`: time ranges whose chunks are left out (a surviving input of the damaged block
// still holds them; counted in chunks_lost).
Result<BlockSalvage> SalvageBlock(const std::string& path, uint64_t damaged_seq,
                                  const std::string& dir, uint64_t seq, std::string* written,
                                  const std::vector<std::pair<int64_t, int64_t>>& exclude = {});

}  // namespace gpuwatch::store
