#include "store/block.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

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

constexpr std::string_view kHeaderMagic = "GWBLOCK1";
constexpr std::string_view kFooterMagic = "GWBLKEND";
constexpr size_t kFooterBytes = 32;  // u64 index offset, u64 index length, u32 crc, u32 0, magic
constexpr uint64_t kIndexVersion = 1;
constexpr size_t kWriteBufferBytes = 1 << 20;

using internal::Crc32;
using internal::Errno;
using internal::SyncDir;
using internal::WriteAll;

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

Result<std::unique_ptr<BlockWriter>> BlockWriter::Create(const std::string& dir, uint64_t seq) {
  std::unique_ptr<BlockWriter> w(new BlockWriter(dir, seq));
  const std::string tmp = dir + "/" + BlockFileName(seq) + ".tmp";
  w->fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return Errno("create " + tmp);
  w->buffer_.append(kHeaderMagic);
  w->offset_ = kHeaderMagic.size();
  return w;
}

BlockWriter::~BlockWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink((dir_ + "/" + BlockFileName(seq_) + ".tmp").c_str());
}

Status BlockWriter::Flush() {
  if (buffer_.empty()) return Status::Ok();
  Status st = WriteAll(fd_, buffer_, "write " + dir_ + "/" + BlockFileName(seq_));
  buffer_.clear();
  return st;
}

void BlockWriter::BeginSeries(const Labels& labels) { series_.push_back({labels, {}}); }

Status BlockWriter::AddChunk(ChunkMeta meta, std::string_view bytes) {
  if (series_.empty()) return Status::Internal("BlockWriter::AddChunk before BeginSeries");
  if (bytes.size() > UINT32_MAX) return Status::InvalidArgument("chunk too large");
  meta.offset = offset_;
  meta.length = static_cast<uint32_t>(bytes.size());
  buffer_.append(bytes);
  offset_ += bytes.size();
  series_.back().chunks.push_back(meta);
  if (buffer_.size() >= kWriteBufferBytes) return Flush();
  return Status::Ok();
}

Result<std::string> BlockWriter::Finish(BlockMeta meta) {
  meta.seq = seq_;
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
    for (const auto& c : s.chunks) {
      index.push_back(static_cast<char>(c.kind));
      PutVarint(&index, ZigZag(c.min_t_ms - meta.min_t_ms));
      PutVarint(&index, static_cast<uint64_t>(c.max_t_ms - c.min_t_ms));
      PutVarint(&index, c.num_samples);
      PutVarint(&index, c.offset);
      PutVarint(&index, c.length);
    }
  }
  const uint64_t index_offset = offset_;
  buffer_.append(index);
  PutFixed(&buffer_, index_offset, 8);
  PutFixed(&buffer_, index.size(), 8);
  PutFixed(&buffer_, Crc32(index), 4);
  PutFixed(&buffer_, 0, 4);
  buffer_.append(kFooterMagic);
  offset_ += index.size() + kFooterBytes;
  GW_RETURN_IF_ERROR(Flush());
  const std::string tmp = dir_ + "/" + BlockFileName(seq_) + ".tmp";
  const std::string final_path = dir_ + "/" + BlockFileName(seq_);
  if (::fsync(fd_) != 0) return Errno("fsync " + tmp);
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) return Errno("rename " + tmp);
  finished_ = true;
  GW_RETURN_IF_ERROR(SyncDir(dir_));
  return final_path;
}

// ---- Block ----

Result<std::unique_ptr<Block>> Block::Open(const std::string& path) {
  std::unique_ptr<Block> b(new Block(path));
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
  if (head != kHeaderMagic) return Status::Corruption(path + ": not a block file (bad magic)");
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
  series_.reserve(nseries);
  index_labels_.reserve(nseries);
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
    std::vector<ChunkMeta> chunks(nchunks);
    for (auto& m : chunks) {
      m.kind = c.Byte();
      m.min_t_ms = meta_.min_t_ms + c.Signed();
      m.max_t_ms = m.min_t_ms + static_cast<int64_t>(c.Varint());
      m.num_samples = static_cast<uint32_t>(c.Varint());
      m.offset = c.Varint();
      m.length = static_cast<uint32_t>(c.Varint());
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
    index_labels_.push_back(std::move(*made));
    series_.push_back(std::move(chunks));
  }
  if (!c.done()) return bad("trailing bytes");
  return Status::Ok();
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
    damage.push_back({path, "index", block.status().message()});
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

}  // namespace gpuwatch::store
