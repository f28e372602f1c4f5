#include "store/wal.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "common/strings.h"
#include "store/internal/file_util.h"

namespace gpuwatch::store {
namespace {

constexpr size_t kHeaderBytes = 9;  // u32 len, u32 crc, u8 type

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

using internal::Crc32;
using internal::Errno;
using internal::SyncDir;
using internal::WriteAll;

uint32_t RecordCrc(uint8_t type, std::string_view payload) {
  const char t = static_cast<char>(type);
  return Crc32(payload, Crc32(std::string_view(&t, 1)));
}

// Reads one segment; calls fn for each intact record and counts it in `seg`. Returns the offset
// of the end of the last intact record and fills `damage` if the segment does not end there.
uint64_t ScanSegment(const std::string& path, const std::string& name, const Wal::RecordFn& fn,
                     WalSegmentStats* seg, std::optional<WalDamage>* damage) {
  auto file = ReadSmallFile(path, size_t{1} << 40);
  if (!file.ok) {
    *damage = WalDamage{name, 0, 0, std::string("cannot read: ") + std::strerror(file.err), false};
    return 0;
  }
  const std::string& d = file.data;
  seg->bytes = d.size();
  uint64_t off = 0;
  while (off < d.size()) {
    if (d.size() - off < kHeaderBytes) {
      *damage = WalDamage{name, off, d.size() - off, "truncated record header", false};
      return off;
    }
    const uint32_t len = GetU32(d.data() + off);
    const uint32_t crc = GetU32(d.data() + off + 4);
    const auto type = static_cast<uint8_t>(d[off + 8]);
    if (len > kMaxWalRecordBytes || len > d.size() - off - kHeaderBytes) {
      *damage = WalDamage{name, off, d.size() - off,
                          len > kMaxWalRecordBytes
                              ? "record length " + std::to_string(len) + " is impossible"
                              : "record runs past the end of the segment",
                          false};
      return off;
    }
    const std::string_view payload(d.data() + off + kHeaderBytes, len);
    if (RecordCrc(type, payload) != crc) {
      *damage = WalDamage{name, off, d.size() - off, "CRC mismatch", false};
      return off;
    }
    if (fn) fn(type, payload);
    ++seg->records;
    off += kHeaderBytes + len;
  }
  return off;
}

std::string SegmentName(uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08llu.wal", static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace

Result<std::vector<uint64_t>> ListWalSegments(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return Errno("opendir " + dir);
  std::vector<uint64_t> out;
  while (dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name.size() != 12 || name.substr(8) != ".wal") continue;
    if (auto n = ParseInt<uint64_t>(name.substr(0, 8)); n && *n > 0) out.push_back(*n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string Wal::SegmentPath(uint64_t number) const { return dir_ + "/" + SegmentName(number); }

Result<std::unique_ptr<Wal>> Wal::Open(const std::string& dir, WalOptions options,
                                       const RecordFn& fn, WalReplayStats* stats) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir " + dir);
  auto segments = ListWalSegments(dir);
  if (!segments.ok()) return segments.status();
  std::unique_ptr<Wal> wal(new Wal(dir, options));
  WalReplayStats local;
  WalReplayStats& st = stats ? *stats : local;
  for (size_t i = 0; i < segments->size(); ++i) {
    const uint64_t n = (*segments)[i];
    const std::string path = wal->SegmentPath(n);
    std::optional<WalDamage> damage;
    WalSegmentStats seg{n, 0, 0};
    const uint64_t good = ScanSegment(path, SegmentName(n), fn, &seg, &damage);
    ++st.segments;
    st.records += seg.records;
    if (damage) {
      const bool newest = i + 1 == segments->size();
      if (newest) {
        // The tail of the write a crash interrupted: never acknowledged, cut it off so appends
        // continue on a record boundary.
        damage->torn_tail = true;
        if (::truncate(path.c_str(), static_cast<off_t>(good)) != 0)
          return Errno("truncate " + path);
        seg.bytes = good;
      }
      st.damage.push_back(*damage);
    }
    st.segment_stats.push_back(seg);
  }
  std::lock_guard<std::mutex> lock(wal->mu_);
  const uint64_t next =
      std::max<uint64_t>(segments->empty() ? 1 : segments->back(), options.first_segment);
  GW_RETURN_IF_ERROR(wal->OpenSegment(next));
  return wal;
}

Result<WalReplayStats> Wal::Check(const std::string& dir, const RecordFn& fn,
                                  uint64_t first_segment) {
  auto segments = ListWalSegments(dir);
  if (!segments.ok()) return segments.status();
  std::erase_if(*segments, [&](uint64_t n) { return n < first_segment; });
  WalReplayStats st;
  for (size_t i = 0; i < segments->size(); ++i) {
    std::optional<WalDamage> damage;
    WalSegmentStats seg{(*segments)[i], 0, 0};
    ScanSegment(dir + "/" + SegmentName((*segments)[i]), SegmentName((*segments)[i]), fn, &seg,
                &damage);
    ++st.segments;
    st.records += seg.records;
    st.segment_stats.push_back(seg);
    if (damage) {
      damage->torn_tail = i + 1 == segments->size() && damage->reason != "CRC mismatch";
      st.damage.push_back(*damage);
    }
  }
  return st;
}

Wal::~Wal() {
  if (fd_ >= 0) {
    if (options_.sync != SyncPolicy::kNever) ::fsync(fd_);
    ::close(fd_);
  }
}

Status Wal::OpenSegment(uint64_t number) {
  if (fd_ >= 0) {
    if (::fsync(fd_) != 0) return Errno("fsync " + SegmentPath(segment_));
    ::close(fd_);
    fd_ = -1;
  }
  const std::string path = SegmentPath(number);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open " + path);
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    ::close(fd);
    return Errno("fstat " + path);
  }
  fd_ = fd;
  segment_ = number;
  segment_size_ = static_cast<uint64_t>(sb.st_size);
  // A new file's directory entry must be durable too, or a crash can lose the whole segment.
  return SyncDir(dir_);
}

Status Wal::Append(uint8_t type, std::string_view payload) {
  if (payload.size() > kMaxWalRecordBytes)
    return Status::InvalidArgument("WAL record of " + std::to_string(payload.size()) +
                                   " bytes exceeds the limit");
  std::string rec(kHeaderBytes + payload.size(), '\0');
  PutU32(rec.data(), static_cast<uint32_t>(payload.size()));
  PutU32(rec.data() + 4, RecordCrc(type, payload));
  rec[8] = static_cast<char>(type);
  std::memcpy(rec.data() + kHeaderBytes, payload.data(), payload.size());

  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return Status::Unavailable("WAL is closed");
  if (segment_size_ > 0 && segment_size_ + rec.size() > options_.segment_bytes)
    GW_RETURN_IF_ERROR(OpenSegment(segment_ + 1));
  Status st = WriteAll(fd_, rec, "write");
  if (!st.ok()) {
    // Cut a partial record off so the log stays a sequence of whole records.
    if (::ftruncate(fd_, static_cast<off_t>(segment_size_)) != 0) {
      ::close(fd_);
      fd_ = -1;
      return Status::IoError(st.message() +
                             "; and the partial record could not be removed: WAL closed");
    }
    return st;
  }
  segment_size_ += rec.size();
  if (options_.sync == SyncPolicy::kAlways && ::fdatasync(fd_) != 0) return Errno("fdatasync WAL");
  return Status::Ok();
}

Status Wal::Sync() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return Status::Unavailable("WAL is closed");
  return ::fdatasync(fd_) == 0 ? Status::Ok() : Errno("fdatasync WAL");
}

Result<uint64_t> Wal::Rotate() {
  std::lock_guard<std::mutex> lock(mu_);
  GW_RETURN_IF_ERROR(OpenSegment(segment_ + 1));
  return segment_;
}

Status Wal::TruncateBefore(uint64_t first_kept) {
  auto segments = ListWalSegments(dir_);
  if (!segments.ok()) return segments.status();
  for (uint64_t n : *segments) {
    if (n >= first_kept) break;
    if (::unlink(SegmentPath(n).c_str()) != 0 && errno != ENOENT)
      return Errno("unlink " + SegmentPath(n));
  }
  return SyncDir(dir_);
}

uint64_t Wal::current_segment() const {
  std::lock_guard<std::mutex> lock(mu_);
  return segment_;
}

}  // namespace gpuwatch::store
