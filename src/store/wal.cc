#include "store/wal.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
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

// Whether a whole, intact record starts at `off`; its payload length in *len.
bool RecordAt(const std::string& d, uint64_t off, uint32_t* len, std::string* why) {
  if (d.size() - off < kHeaderBytes) {
    if (why) *why = "truncated record header";
    return false;
  }
  *len = GetU32(d.data() + off);
  if (*len > kMaxWalRecordBytes) {
    if (why) *why = "record length " + std::to_string(*len) + " is impossible";
    return false;
  }
  if (*len > d.size() - off - kHeaderBytes) {
    if (why) *why = "record runs past the end of the segment";
    return false;
  }
  const uint32_t crc = GetU32(d.data() + off + 4);
  const auto type = static_cast<uint8_t>(d[off + 8]);
  if (RecordCrc(type, std::string_view(d.data() + off + kHeaderBytes, *len)) != crc) {
    if (why) *why = "CRC mismatch";
    return false;
  }
  return true;
}

// The first offset at or after `from` where an intact record starts, or npos. A flipped byte
// must not cost every record after it (issue 17, D10): replay resumes at the next record whose
// header and CRC check out. The CRC work is bounded, so a segment of garbage cannot make the
// scan quadratic; past the budget the rest counts as lost.
uint64_t FindNextRecord(const std::string& d, uint64_t from) {
  uint64_t crc_budget = uint64_t{512} << 20;
  for (uint64_t p = from; p + kHeaderBytes <= d.size(); ++p) {
    const uint32_t len = GetU32(d.data() + p);
    if (len > kMaxWalRecordBytes || len > d.size() - p - kHeaderBytes) continue;
    if (len > crc_budget) return std::string::npos;
    crc_budget -= len;
    uint32_t l;
    if (RecordAt(d, p, &l, nullptr)) return p;
  }
  return std::string::npos;
}

// Reads one segment; calls fn for each intact record and counts it in `seg`; appends what is
// damaged to `damage` and the byte ranges of the intact records to `intact`. Damage that runs
// to the end of the newest segment and looks like an interrupted write (a short header or a
// record cut off) is its torn tail.
void ScanSegment(const std::string& path, const std::string& name, bool newest,
                 const Wal::RecordFn& fn, WalSegmentStats* seg, std::vector<WalDamage>* damage,
                 std::vector<std::pair<uint64_t, uint64_t>>* intact) {
  auto file = ReadSmallFile(path, size_t{1} << 40);
  if (!file.ok) {
    damage->push_back(
        WalDamage{name, 0, 0, std::string("cannot read: ") + std::strerror(file.err), false});
    return;
  }
  const std::string& d = file.data;
  seg->bytes = d.size();
  uint64_t off = 0;
  while (off < d.size()) {
    uint32_t len = 0;
    std::string why;
    if (RecordAt(d, off, &len, &why)) {
      if (fn)
        fn(static_cast<uint8_t>(d[off + 8]), std::string_view(d.data() + off + kHeaderBytes, len));
      ++seg->records;
      intact->emplace_back(off, off + kHeaderBytes + len);
      off += kHeaderBytes + len;
      continue;
    }
    const uint64_t next = FindNextRecord(d, off + 1);
    if (next == std::string::npos) {
      const bool cut_short = why != "CRC mismatch" && why.find("impossible") == std::string::npos;
      damage->push_back(WalDamage{name, off, d.size() - off, why, newest && cut_short});
      return;
    }
    damage->push_back(WalDamage{
        name, off, next - off,
        why + "; replay resumed at the next intact record, offset " + std::to_string(next), false});
    off = next;
  }
}

// Leaves only the intact records in the segment: a truncation when they are a prefix (a torn
// tail), else a rewrite through a temporary file and a rename.
Status RewriteSegment(const std::string& path,
                      const std::vector<std::pair<uint64_t, uint64_t>>& intact, uint64_t* bytes) {
  uint64_t prefix = 0;
  bool contiguous = true;
  for (const auto& [b, e] : intact) {
    if (b != prefix) contiguous = false;
    prefix = e;
  }
  if (contiguous) {
    if (::truncate(path.c_str(), static_cast<off_t>(prefix)) != 0) return Errno("truncate " + path);
    *bytes = prefix;
    return Status::Ok();
  }
  auto file = ReadSmallFile(path, size_t{1} << 40);
  if (!file.ok) return Status::IoError("cannot read " + path + ": " + std::strerror(file.err));
  std::string kept;
  for (const auto& [b, e] : intact) kept.append(file.data, b, e - b);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open " + tmp);
  Status st = WriteAll(fd, kept, "write " + tmp);
  if (st.ok() && ::fsync(fd) != 0) st = Errno("fsync " + tmp);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = Errno("rename " + tmp);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  *bytes = kept.size();
  return SyncDir(path.substr(0, path.rfind('/')));
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

Status Wal::Quarantine(const std::string& path, const std::vector<WalDamage>& damage) const {
  const std::string qdir =
      options_.quarantine_dir.empty() ? dir_ + "/quarantine" : options_.quarantine_dir;
  if (::mkdir(qdir.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir " + qdir);
  const std::string name = path.substr(path.rfind('/') + 1);
  std::string target = qdir + "/" + name;
  for (int i = 1; std::filesystem::exists(target); ++i)
    target = qdir + "/" + name + "." + std::to_string(i);
  std::error_code ec;
  std::filesystem::copy_file(path, target, ec);
  if (ec) return Status::IoError("copy " + path + " to " + target + ": " + ec.message());
  std::string why;
  for (const auto& d : damage)
    why += "offset " + std::to_string(d.offset) + ": " + d.reason + " (" +
           std::to_string(d.bytes_lost) + " bytes skipped)\n";
  const int fd = ::open((target + ".why").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    WriteAll(fd, why, "write").IgnoreError();
    ::close(fd);
  }
  return Status::Ok();
}

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
    const bool newest = i + 1 == segments->size();
    std::vector<WalDamage> damage;
    std::vector<std::pair<uint64_t, uint64_t>> intact;
    WalSegmentStats seg{n, 0, 0};
    ScanSegment(path, SegmentName(n), newest, fn, &seg, &damage, &intact);
    ++st.segments;
    st.records += seg.records;
    if (newest && !damage.empty()) {
      // Appends continue in this segment, so it must end on a record boundary and hold only
      // intact records. A torn tail alone (an interrupted, unacknowledged write) is cut off;
      // anything else is damage: the segment is copied aside first, then rewritten with its
      // intact records.
      const bool only_torn_tail = damage.size() == 1 && damage[0].torn_tail;
      if (!only_torn_tail) GW_RETURN_IF_ERROR(wal->Quarantine(path, damage));
      GW_RETURN_IF_ERROR(RewriteSegment(path, intact, &seg.bytes));
    }
    st.damage.insert(st.damage.end(), damage.begin(), damage.end());
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
    std::vector<WalDamage> damage;
    std::vector<std::pair<uint64_t, uint64_t>> intact;
    WalSegmentStats seg{(*segments)[i], 0, 0};
    ScanSegment(dir + "/" + SegmentName((*segments)[i]), SegmentName((*segments)[i]),
                i + 1 == segments->size(), fn, &seg, &damage, &intact);
    ++st.segments;
    st.records += seg.records;
    st.segment_stats.push_back(seg);
    st.damage.insert(st.damage.end(), damage.begin(), damage.end());
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
