#include "store/block.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_set>

#include "store/chunkenc.h"
#include "store/internal/coding.h"
#include "store/internal/file_util.h"

namespace gpuwatch::store {
namespace {

using internal::Cursor;
using internal::PutBytes;
using internal::PutFixed;
using internal::PutVarint;
using internal::ZigZag;

// Format 2 adds the meta and series records; format 1 files (no records) still open.
constexpr std::string_view kHeaderMagic = "GWBLOCK2";
constexpr std::string_view kHeaderMagicV1 = "GWBLOCK1";
constexpr std::string_view kFooterMagic = "GWBLKEND";
constexpr std::string_view kMetaTag = "GWBM";
constexpr std::string_view kSeriesTag = "GWSR";
// Written just before the index: a scan stops there, so label values in the index's symbol
// table (which a remote-write client chooses) are never read as records.
constexpr std::string_view kIndexTag = "GWIX";
constexpr size_t kTagBytes = 4;
// A series record holds at most kMaxLabels labels of bounded size and a chunk list; anything
// claiming more is damage, not a record.
constexpr uint64_t kMaxRecordBody = 16 << 20;
constexpr size_t kFooterBytes = 32;  // u64 index offset, u64 index length, u32 crc, u32 0, magic
constexpr uint64_t kIndexVersion = 1;
constexpr size_t kWriteBufferBytes = 1 << 20;

using internal::Crc32;
using internal::Errno;
using internal::MappedFile;
using internal::SyncDir;
using internal::WriteAll;

namespace {

// One chunk entry as a block's index codes it (docs/format/block.md): kind, start from the
// block's, span, samples, offset, length. Sums and differences wrap: a damaged or hostile
// index must not overflow a signed one, and what is coded reads back exactly.
void PutChunkEntry(std::string* out, const ChunkMeta& c, int64_t block_min_ms) {
  out->push_back(static_cast<char>(c.kind));
  PutVarint(out, ZigZag(static_cast<int64_t>(static_cast<uint64_t>(c.min_t_ms) -
                                             static_cast<uint64_t>(block_min_ms))));
  PutVarint(out, static_cast<uint64_t>(c.max_t_ms) - static_cast<uint64_t>(c.min_t_ms));
  PutVarint(out, c.num_samples);
  PutVarint(out, c.offset);
  PutVarint(out, c.length);
}
ChunkMeta GetChunkEntry(Cursor* c, int64_t block_min_ms) {
  ChunkMeta m;
  m.kind = c->Byte();
  m.min_t_ms = static_cast<int64_t>(static_cast<uint64_t>(block_min_ms) +
                                    static_cast<uint64_t>(c->Signed()));
  m.max_t_ms = static_cast<int64_t>(static_cast<uint64_t>(m.min_t_ms) + c->Varint());
  m.num_samples = static_cast<uint32_t>(c->Varint());
  m.offset = c->Varint();
  m.length = static_cast<uint32_t>(c->Varint());
  return m;
}

}  // namespace

Status PreadAll(int fd, char* p, size_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("read " + path);
    }
    if (r == 0) return Status::Corruption(path + ": unexpected end of file");
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

// A record: tag, varint body length, body, u32 CRC-32 of everything before it.
void PutRecord(std::string* out, std::string_view tag, std::string_view body) {
  const size_t start = out->size();
  out->append(tag);
  PutVarint(out, body.size());
  out->append(body);
  PutFixed(out, Crc32(std::string_view(*out).substr(start)), 4);
}

struct Record {
  std::string_view tag;
  std::string_view body;
  size_t end = 0;  // offset just past the record
};

// The intact record at `pos`, if there is one.
std::optional<Record> ParseRecord(std::string_view file, size_t pos) {
  if (file.size() - pos < kTagBytes + 1 + 4) return std::nullopt;
  const std::string_view tag = file.substr(pos, kTagBytes);
  if (tag != kMetaTag && tag != kSeriesTag && tag != kIndexTag) return std::nullopt;
  Cursor c{file.substr(pos + kTagBytes)};
  const uint64_t len = c.Varint();
  if (!c.ok || len > kMaxRecordBody || c.d.size() - c.pos < len + 4) return std::nullopt;
  const size_t body_at = pos + kTagBytes + c.pos;
  const size_t crc_at = body_at + len;
  if (Crc32(file.substr(pos, crc_at - pos)) !=
      static_cast<uint32_t>(internal::GetFixed(file.data() + crc_at, 4)))
    return std::nullopt;
  return Record{tag, file.substr(body_at, len), crc_at + 4};
}

std::string MetaRecordBody(const BlockMeta& meta) {
  std::string body;
  PutVarint(&body, meta.seq);
  PutVarint(&body, meta.wal_covers_before);
  PutVarint(&body, meta.replaces.size());
  for (uint64_t r : meta.replaces) PutVarint(&body, r);
  return body;
}

std::optional<BlockMeta> ParseMetaRecord(std::string_view body) {
  Cursor c{body};
  BlockMeta meta;
  meta.seq = c.Varint();
  meta.wal_covers_before = c.Varint();
  const uint64_t n = c.Varint();
  if (!c.ok || n > body.size()) return std::nullopt;
  for (uint64_t i = 0; i < n && c.ok; ++i) meta.replaces.push_back(c.Varint());
  if (!c.ok || !c.done()) return std::nullopt;
  return meta;
}

// The meta record right after the magic, when it is intact.
std::optional<BlockMeta> ReadMetaRecord(std::string_view file) {
  if (file.size() < kHeaderMagic.size()) return std::nullopt;
  auto rec = ParseRecord(file, kHeaderMagic.size());
  if (!rec || rec->tag != kMetaTag) return std::nullopt;
  return ParseMetaRecord(rec->body);
}

}  // namespace

bool IsValidChunkKind(uint8_t kind) {
  if (kind == kRawChunkKind) return true;
  const int tier = kind >> 4, field = kind & 0xf;
  return (tier == 1 || tier == 2) && field < kNumRollupFields;
}

std::string BlockFileName(uint64_t seq) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08llu.gwb", static_cast<unsigned long long>(seq));
  return buf;
}

// ---- BlockWriter ----

Result<std::unique_ptr<BlockWriter>> BlockWriter::Create(const std::string& dir, BlockMeta meta) {
  std::unique_ptr<BlockWriter> w(new BlockWriter(dir, std::move(meta)));
  const std::string tmp = dir + "/" + BlockFileName(w->meta_.seq) + ".tmp";
  w->fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return Errno("create " + tmp);
  w->buffer_.append(kHeaderMagic);
  PutRecord(&w->buffer_, kMetaTag, MetaRecordBody(w->meta_));
  return w;
}

BlockWriter::~BlockWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink((dir_ + "/" + BlockFileName(meta_.seq) + ".tmp").c_str());
}

Status BlockWriter::Flush() {
  if (buffer_.empty()) return Status::Ok();
  Status st = WriteAll(fd_, buffer_, "write " + dir_ + "/" + BlockFileName(meta_.seq));
  offset_ += buffer_.size();
  buffer_.clear();
  return st;
}

Status BlockWriter::BeginSeries(const Labels& labels) {
  GW_RETURN_IF_ERROR(EndSeries());
  series_.push_back({labels, {}});
  series_open_ = true;
  return Status::Ok();
}

Status BlockWriter::AddChunk(ChunkMeta meta, std::string_view bytes) {
  if (!series_open_) return Status::Internal("BlockWriter::AddChunk before BeginSeries");
  if (bytes.size() > UINT32_MAX) return Status::InvalidArgument("chunk too large");
  meta.length = static_cast<uint32_t>(bytes.size());
  pending_.append(bytes);
  series_.back().chunks.push_back(meta);
  return Status::Ok();
}

Status BlockWriter::EndSeries() {
  if (!series_open_) return Status::Ok();
  series_open_ = false;
  // The series record goes in front of its chunks: a scan reads the labels and then knows
  // where each chunk ends.
  SeriesEntry& s = series_.back();
  std::string body;
  PutVarint(&body, s.labels.size());
  for (const auto& l : s.labels) {
    PutBytes(&body, l.name);
    PutBytes(&body, l.value);
  }
  PutVarint(&body, s.chunks.size());
  for (const auto& c : s.chunks) {
    body.push_back(static_cast<char>(c.kind));
    PutVarint(&body, c.length);
  }
  PutRecord(&buffer_, kSeriesTag, body);
  uint64_t at = offset_ + buffer_.size();
  for (auto& c : s.chunks) {
    c.offset = at;
    at += c.length;
  }
  buffer_.append(pending_);
  pending_.clear();
  if (buffer_.size() >= kWriteBufferBytes) return Flush();
  return Status::Ok();
}

Result<std::string> BlockWriter::Finish() {
  GW_RETURN_IF_ERROR(EndSeries());
  BlockMeta& meta = meta_;
  bool any = false;
  for (const auto& s : series_)
    for (const auto& c : s.chunks) {
      meta.min_t_ms = any ? std::min(meta.min_t_ms, c.min_t_ms) : c.min_t_ms;
      meta.max_t_ms = any ? std::max(meta.max_t_ms, c.max_t_ms) : c.max_t_ms;
      any = true;
    }
  // Symbols: every label name and value once, sorted; series refer to them by position.
  std::map<std::string_view, uint64_t> symbols;
  for (const auto& s : series_)
    for (const auto& l : s.labels) {
      symbols.emplace(l.name, 0);
      symbols.emplace(l.value, 0);
    }
  uint64_t next = 0;
  for (auto& [k, v] : symbols) v = next++;

  std::string index;
  PutVarint(&index, kIndexVersion);
  PutVarint(&index, meta.seq);
  PutVarint(&index, ZigZag(meta.min_t_ms));
  PutVarint(&index, ZigZag(meta.max_t_ms));
  PutVarint(&index, meta.wal_covers_before);
  PutVarint(&index, meta.replaces.size());
  for (uint64_t r : meta.replaces) PutVarint(&index, r);
  PutVarint(&index, symbols.size());
  for (const auto& [k, v] : symbols) PutBytes(&index, k);
  PutVarint(&index, series_.size());
  for (const auto& s : series_) {
    PutVarint(&index, s.labels.size());
    for (const auto& l : s.labels) {
      PutVarint(&index, symbols[l.name]);
      PutVarint(&index, symbols[l.value]);
    }
    PutVarint(&index, s.chunks.size());
    for (const auto& c : s.chunks) PutChunkEntry(&index, c, meta.min_t_ms);
  }
  PutRecord(&buffer_, kIndexTag, "");
  const uint64_t index_offset = offset_ + buffer_.size();
  buffer_.append(index);
  PutFixed(&buffer_, index_offset, 8);
  PutFixed(&buffer_, index.size(), 8);
  PutFixed(&buffer_, Crc32(index), 4);
  PutFixed(&buffer_, 0, 4);
  buffer_.append(kFooterMagic);
  GW_RETURN_IF_ERROR(Flush());
  const std::string tmp = dir_ + "/" + BlockFileName(meta.seq) + ".tmp";
  const std::string final_path = dir_ + "/" + BlockFileName(meta.seq);
  if (::fsync(fd_) != 0) return Errno("fsync " + tmp);
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) return Errno("rename " + tmp);
  finished_ = true;
  GW_RETURN_IF_ERROR(SyncDir(dir_));
  return final_path;
}

// ---- Block ----

Result<std::unique_ptr<Block>> Block::Open(const std::string& path, LabelsPool pool) {
  std::unique_ptr<Block> b(new Block(path, std::move(pool)));
  b->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (b->fd_ < 0) return Errno("open " + path);
  struct stat sb {};
  if (::fstat(b->fd_, &sb) != 0) return Errno("fstat " + path);
  b->file_bytes_ = static_cast<uint64_t>(sb.st_size);
  if (b->file_bytes_ < kHeaderMagic.size() + kFooterBytes)
    return Status::Corruption(path + ": too short for a block file (" +
                              std::to_string(b->file_bytes_) + " bytes)");
  std::string head(kHeaderMagic.size(), '\0');
  GW_RETURN_IF_ERROR(PreadAll(b->fd_, head.data(), head.size(), 0, path));
  if (head != kHeaderMagic && head != kHeaderMagicV1)
    return Status::Corruption(path + ": not a block file (bad magic)");
  std::string footer(kFooterBytes, '\0');
  GW_RETURN_IF_ERROR(
      PreadAll(b->fd_, footer.data(), footer.size(), b->file_bytes_ - kFooterBytes, path));
  if (std::string_view(footer).substr(24) != kFooterMagic)
    return Status::Corruption(path + ": bad footer magic (truncated or overwritten)");
  const uint64_t index_offset = internal::GetFixed(footer.data(), 8);
  const uint64_t index_len = internal::GetFixed(footer.data() + 8, 8);
  const auto index_crc = static_cast<uint32_t>(internal::GetFixed(footer.data() + 16, 4));
  if (index_offset < kHeaderMagic.size() || index_len > b->file_bytes_ ||
      index_offset + index_len != b->file_bytes_ - kFooterBytes)
    return Status::Corruption(path + ": footer points outside the file");
  std::string index(index_len, '\0');
  GW_RETURN_IF_ERROR(PreadAll(b->fd_, index.data(), index.size(), index_offset, path));
  if (Crc32(index) != index_crc) return Status::Corruption(path + ": index CRC mismatch");
  GW_RETURN_IF_ERROR(b->ParseIndex(index, index_offset));
  return b;
}

Block::~Block() {
  if (fd_ >= 0) ::close(fd_);
}

Status Block::ParseIndex(std::string_view index, uint64_t index_offset) {
  Cursor c{index};
  auto bad = [&](const std::string& what) {
    return Status::Corruption(path_ + ": index: " + what + " at byte " + std::to_string(c.pos));
  };
  if (c.Varint() != kIndexVersion || !c.ok) return bad("unknown index version");
  meta_.seq = c.Varint();
  meta_.min_t_ms = c.Signed();
  meta_.max_t_ms = c.Signed();
  meta_.wal_covers_before = c.Varint();
  const uint64_t nrep = c.Varint();
  if (!c.ok || nrep > index.size()) return bad("bad header");
  for (uint64_t i = 0; i < nrep && c.ok; ++i) meta_.replaces.push_back(c.Varint());
  const uint64_t nsym = c.Varint();
  if (!c.ok || nsym > index.size()) return bad("bad symbol count");
  std::vector<std::string_view> symbols(nsym);
  for (auto& s : symbols) s = c.Bytes();
  const uint64_t nseries = c.Varint();
  if (!c.ok || nseries > index.size()) return bad("bad series count");
  chunk_at_.reserve(nseries + 1);
  for (uint64_t i = 0; i < nseries; ++i) {
    const uint64_t nlabels = c.Varint();
    if (!c.ok || nlabels > kMaxLabels) return bad("bad label count");
    std::vector<Label> labels(nlabels);
    for (auto& l : labels) {
      const uint64_t n = c.Varint(), v = c.Varint();
      if (!c.ok || n >= nsym || v >= nsym) return bad("symbol out of range");
      l.name = std::string(symbols[n]);
      l.value = std::string(symbols[v]);
    }
    auto made = MakeLabels(std::move(labels));
    if (!made.ok()) return bad("invalid label set (" + made.status().message() + ")");
    bool created = false;
    index_.GetOrCreate(*made, &created);
    if (!created) return bad("duplicate series " + LabelsToString(*made));
    const uint64_t nchunks = c.Varint();
    if (!c.ok || nchunks > index.size()) return bad("bad chunk count");
    const size_t entries_at = c.pos;
    for (uint64_t k = 0; k < nchunks; ++k) {
      const ChunkMeta m = GetChunkEntry(&c, meta_.min_t_ms);
      if (!c.ok) return bad("truncated chunk entry");
      if (!IsValidChunkKind(m.kind)) return bad("unknown chunk kind " + std::to_string(m.kind));
      if (m.offset < kHeaderMagic.size() || m.offset > index_offset ||
          m.length > index_offset - m.offset)
        return bad("chunk outside the data section");
      TierStats& t = tiers_[static_cast<int>(ChunkKindTier(m.kind))];
      // One chunk per range counts: raw, or the `last` field of a rollup group.
      if (m.kind == kRawChunkKind || ChunkKindField(m.kind) == RollupField::kLast) {
        const bool first = t.samples == 0;
        t.samples += m.num_samples;
        t.min_t_ms = first ? m.min_t_ms : std::min(t.min_t_ms, m.min_t_ms);
        t.max_t_ms = first ? m.max_t_ms : std::max(t.max_t_ms, m.max_t_ms);
      }
      t.chunks++;
      t.chunk_bytes += m.length;
    }
    // The series' entries as the index codes them, kept for chunks(i).
    chunk_index_.append(index.substr(entries_at, c.pos - entries_at));
    chunk_at_.push_back(chunk_index_.size());
  }
  chunk_index_.shrink_to_fit();
  if (!c.done()) return bad("trailing bytes");
  // Each block held its series' labels three times (a list, the index's copy, the index's
  // key): 2.6 KiB a series a block. Now the index holds them from the store's pool, shared
  // with the head and the other blocks, and keeps no lookup by hash (bench/fleet/RESULTS.md).
  index_.DropKeyLookup();
  return Status::Ok();
}

std::vector<ChunkMeta> Block::chunks(uint32_t i) const {
  std::vector<ChunkMeta> out;
  Cursor c{std::string_view(chunk_index_).substr(chunk_at_[i], chunk_at_[i + 1] - chunk_at_[i])};
  while (!c.done()) out.push_back(GetChunkEntry(&c, meta_.min_t_ms));
  return out;
}

Result<std::string> Block::ReadChunk(const ChunkMeta& chunk) const {
  std::string out(chunk.length, '\0');
  GW_RETURN_IF_ERROR(PreadAll(fd_, out.data(), out.size(), chunk.offset, path_));
  return out;
}

std::vector<BlockDamage> CheckBlock(const std::string& path, uint64_t* chunks_checked) {
  std::vector<BlockDamage> damage;
  auto block = Block::Open(path);
  if (!block.ok()) {
    std::string reason = block.status().message();
    // Say what a salvage would keep, so that `store check` without quarantining tells the
    // operator what is at stake.
    if (auto file = MappedFile::Open(path); file.ok()) {
      auto scan = ScanBlock(file->bytes(), [](const SalvagedSeries&) { return Status::Ok(); });
      if (scan.ok())
        reason += "; a scan finds " + std::to_string(scan->series) + " series with " +
                  std::to_string(scan->chunks) + " intact chunks (" +
                  std::to_string(scan->samples) + " raw samples) to salvage";
      else
        reason += "; nothing to salvage: " + scan.status().message();
    }
    damage.push_back({path, "index", reason});
    return damage;
  }
  const Block& b = **block;
  for (uint32_t i = 0; i < b.num_series(); ++i) {
    for (const ChunkMeta& m : b.chunks(i)) {
      ++*chunks_checked;
      auto bytes = b.ReadChunk(m);
      Status st = bytes.status();
      if (st.ok()) {
        auto dec = ChunkDecoder::Open(*bytes);
        st = dec.status();
        if (st.ok()) {
          int64_t t;
          double v;
          size_t n = 0;
          while (dec->Next(&t, &v)) ++n;
          st = dec->status();
          if (st.ok() && n != m.num_samples)
            st = Status::Corruption("holds " + std::to_string(n) + " samples, index says " +
                                    std::to_string(m.num_samples));
        }
      }
      if (!st.ok())
        damage.push_back({path,
                          LabelsToString(b.labels(i)) + " chunk kind " + std::to_string(m.kind) +
                              " at offset " + std::to_string(m.offset),
                          st.message()});
    }
  }
  return damage;
}

// ---- Salvage ----

namespace {

// Decodes a chunk whole: its CRC, and the time range and count the index would have held.
Status DescribeChunk(std::string_view bytes, ChunkMeta* m) {
  auto dec = ChunkDecoder::Open(bytes);
  if (!dec.ok()) return dec.status();
  int64_t t;
  double v;
  uint32_t n = 0;
  while (dec->Next(&t, &v)) {
    if (n == 0) m->min_t_ms = t;
    m->max_t_ms = t;
    ++n;
  }
  GW_RETURN_IF_ERROR(dec->status());
  if (n == 0) return Status::Corruption("empty chunk");
  m->num_samples = n;
  return Status::Ok();
}

}  // namespace

Result<BlockSalvage> ScanBlock(std::string_view file,
                               const std::function<Status(const SalvagedSeries&)>& emit) {
  if (file.substr(0, kHeaderMagicV1.size()) == kHeaderMagicV1)
    return Status::NotSupported(
        "a format-1 block (written before gpuwatch kept series records in blocks)");
  BlockSalvage out;
  auto damage = [&](size_t at, const std::string& why) {
    if (out.first_damage.empty()) out.first_damage = "offset " + std::to_string(at) + ": " + why;
  };
  if (auto meta = ReadMetaRecord(file)) {
    out.meta_found = true;
    out.meta = std::move(*meta);
  } else {
    damage(kHeaderMagic.size(), "no intact meta record");
  }
  std::unordered_set<std::string> seen;
  size_t pos = std::min(file.size(), kHeaderMagic.size());
  SalvagedSeries series;
  std::vector<bool> intact;
  while (pos < file.size()) {
    auto rec = ParseRecord(file, pos);
    if (!rec) {
      // Resync on the next series or index record that is intact; what lies between is the
      // footer or damage. A record whose tag and length still read but whose CRC does not is
      // skipped whole first: its body holds label values, which could spell a record.
      size_t next = pos + 1;
      if (file.substr(pos, kTagBytes) == kSeriesTag) {
        Cursor len{file.substr(pos + kTagBytes)};
        const uint64_t n = len.Varint();
        if (len.ok && n <= kMaxRecordBody && file.size() - pos - kTagBytes - len.pos >= n + 4)
          next = pos + kTagBytes + len.pos + n + 4;
      }
      size_t series_at = file.find(kSeriesTag, next), index_at = file.find(kIndexTag, next);
      for (;;) {
        next = std::min(series_at, index_at);
        if (next == std::string_view::npos || ParseRecord(file, next)) break;
        if (next == series_at)
          series_at = file.find(kSeriesTag, next + 1);
        else
          index_at = file.find(kIndexTag, next + 1);
      }
      const size_t stop = next == std::string_view::npos ? file.size() : next;
      out.bytes_skipped += stop - pos;
      pos = stop;
      continue;
    }
    pos = rec->end;
    if (rec->tag == kIndexTag) break;  // the rest is the index and the footer
    if (rec->tag != kSeriesTag) continue;
    Cursor c{rec->body};
    const uint64_t nlabels = c.Varint();
    std::vector<Label> labels;
    for (uint64_t i = 0; i < nlabels && i <= kMaxLabels && c.ok; ++i) {
      const std::string_view n = c.Bytes(), v = c.Bytes();
      labels.push_back({std::string(n), std::string(v)});
    }
    const uint64_t nchunks = c.Varint();
    std::vector<ChunkMeta> metas;
    for (uint64_t i = 0; c.ok && i < nchunks && i <= rec->body.size(); ++i) {
      ChunkMeta m;
      m.kind = c.Byte();
      m.length = static_cast<uint32_t>(c.Varint());
      metas.push_back(m);
    }
    auto made = MakeLabels(std::move(labels));
    if (!c.ok || !c.done() || nlabels > kMaxLabels || !made.ok()) {
      damage(pos, "a series record that does not parse");
      continue;  // its chunks are skipped by the resync
    }
    series.labels = std::move(*made);
    series.chunks.clear();
    intact.clear();
    for (ChunkMeta m : metas) {
      m.offset = pos;
      Status st = m.length > file.size() - pos
                      ? Status::Corruption("cut off at the end of the file")
                  : IsValidChunkKind(m.kind)
                      ? DescribeChunk(file.substr(pos, m.length), &m)
                      : Status::Corruption("unknown chunk kind " + std::to_string(m.kind));
      if (!st.ok()) damage(pos, LabelsToString(series.labels) + ": " + st.message());
      intact.push_back(st.ok());
      series.chunks.emplace_back(m, st.ok() ? file.substr(pos, m.length) : std::string_view());
      pos = std::min<size_t>(file.size(), pos + m.length);
    }
    // Keep raw chunks that decoded and rollup groups whose eight fields all did, with one
    // length: a reader combines the fields point by point.
    std::vector<std::pair<ChunkMeta, std::string_view>> kept;
    for (size_t i = 0; i < series.chunks.size();) {
      const ChunkMeta& m = series.chunks[i].first;
      if (m.kind == kRawChunkKind) {
        if (intact[i]) kept.push_back(series.chunks[i]);
        ++i;
        continue;
      }
      size_t n = 0;
      if (ChunkKindField(m.kind) == RollupField::kMin && intact[i]) {
        while (n < static_cast<size_t>(kNumRollupFields) && i + n < series.chunks.size() &&
               intact[i + n] &&
               series.chunks[i + n].first.kind ==
                   RollupChunkKind(ChunkKindTier(m.kind), static_cast<RollupField>(n)) &&
               series.chunks[i + n].first.num_samples == m.num_samples)
          ++n;
      }
      if (n == static_cast<size_t>(kNumRollupFields)) {
        kept.insert(kept.end(), series.chunks.begin() + i, series.chunks.begin() + i + n);
        i += n;
      } else {
        ++i;  // a field of a broken group: the group's other fields go with it
      }
    }
    out.chunks_lost += series.chunks.size() - kept.size();
    if (kept.empty()) continue;
    if (!seen.insert(LabelsToString(series.labels)).second) {
      damage(pos, "series " + LabelsToString(series.labels) + " twice");
      out.chunks_lost += kept.size();
      continue;
    }
    series.chunks = std::move(kept);
    ++out.series;
    out.chunks += series.chunks.size();
    for (const auto& [m, bytes] : series.chunks)
      if (m.kind == kRawChunkKind) out.samples += m.num_samples;
    GW_RETURN_IF_ERROR(emit(series));
  }
  return out;
}

std::optional<BlockMeta> ReadBlockMetaRecord(const std::string& path) {
  auto file = MappedFile::Open(path);
  if (!file.ok()) return std::nullopt;
  return ReadMetaRecord(file->bytes());
}

Result<BlockSalvage> SalvageBlock(const std::string& path, uint64_t damaged_seq,
                                  const std::string& dir, uint64_t seq, std::string* written,
                                  const std::vector<std::pair<int64_t, int64_t>>& exclude) {
  auto file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  BlockMeta meta = ReadMetaRecord(file->bytes()).value_or(BlockMeta{});
  meta.seq = seq;
  meta.min_t_ms = meta.max_t_ms = 0;
  meta.replaces = {damaged_seq};
  std::unique_ptr<BlockWriter> writer;
  uint64_t excluded = 0;
  const auto excluded_at = [&](int64_t t) {
    return std::any_of(exclude.begin(), exclude.end(),
                       [&](const auto& r) { return t >= r.first && t <= r.second; });
  };
  auto scan = ScanBlock(file->bytes(), [&](const SalvagedSeries& s) -> Status {
    // Chunks that reach into an excluded time are re-encoded without the samples there (a
    // compaction's merged rollup chunks span all of its inputs). Every field of a rollup group
    // has the same timestamps, so the group stays aligned.
    std::vector<std::pair<ChunkMeta, std::string_view>> keep;
    std::vector<std::string> reencoded;
    reencoded.reserve(s.chunks.size());
    for (const auto& [m, bytes] : s.chunks) {
      const bool overlaps = std::any_of(exclude.begin(), exclude.end(), [&](const auto& r) {
        return m.min_t_ms <= r.second && m.max_t_ms >= r.first;
      });
      if (!overlaps) {
        keep.emplace_back(m, bytes);
        continue;
      }
      auto samples = DecodeChunk(bytes);
      if (!samples.ok()) return samples.status();
      ChunkEncoder enc;
      ChunkMeta trimmed = m;
      trimmed.num_samples = 0;
      for (const auto& x : *samples) {
        if (excluded_at(x.t_ms)) continue;
        GW_RETURN_IF_ERROR(enc.Append(x.t_ms, x.value));
        if (trimmed.num_samples++ == 0) trimmed.min_t_ms = x.t_ms;
        trimmed.max_t_ms = x.t_ms;
      }
      if (trimmed.num_samples == 0) {
        ++excluded;
        continue;
      }
      reencoded.push_back(enc.Finish());
      keep.emplace_back(trimmed, reencoded.back());
    }
    if (keep.empty()) return Status::Ok();
    if (!writer) {
      auto w = BlockWriter::Create(dir, meta);
      if (!w.ok()) return w.status();
      writer = std::move(w).value();
    }
    GW_RETURN_IF_ERROR(writer->BeginSeries(s.labels));
    for (const auto& [m, bytes] : keep) GW_RETURN_IF_ERROR(writer->AddChunk(m, bytes));
    return Status::Ok();
  });
  if (!scan.ok()) return scan.status();
  scan->chunks -= excluded;
  scan->chunks_lost += excluded;
  if (writer) {
    auto p = writer->Finish();
    if (!p.ok()) return p.status();
    *written = std::move(p).value();
  }
  return scan;
}

}  // namespace gpuwatch::store
