#include "server/spool.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/file_io.h"
#include "common/log.h"
#include "common/random.h"

namespace gpuwatch::server {
namespace {

namespace fs = std::filesystem;
constexpr size_t kHeaderBytes = 8;

uint32_t Crc(std::string_view data) {
  return static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string SegmentName(uint64_t first_seq) {
  char buf[32];
  snprintf(buf, sizeof buf, "%020llu.seg", static_cast<unsigned long long>(first_seq));
  return buf;
}

Result<std::string> ReadWhole(const std::string& path) {
  std::string data;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open " + path, errno);
  char buf[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return ErrnoStatus("cannot read " + path, err);
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return data;
}

// Walks the entries of a segment's bytes: calls fn(payload) for each intact one and returns
// the offset where the intact prefix ends.
template <typename Fn>
size_t WalkEntries(std::string_view data, Fn&& fn) {
  size_t off = 0;
  while (data.size() - off >= kHeaderBytes) {
    const uint32_t len = GetU32(data.data() + off);
    const uint32_t crc = GetU32(data.data() + off + 4);
    if (len > Spool::kMaxEntryBytes || data.size() - off - kHeaderBytes < len) break;
    const std::string_view payload = data.substr(off + kHeaderBytes, len);
    if (Crc(payload) != crc) break;
    if (!fn(payload)) return off + kHeaderBytes + len;
    off += kHeaderBytes + len;
  }
  return off;
}

bool ValidDestination(const std::string& d) {
  if (d.empty() || d.size() > 64) return false;
  for (char c : d)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) return false;
  return true;
}

}  // namespace

Result<std::unique_ptr<Spool>> Spool::Open(const std::string& dir, SpoolOptions options) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir + ": " + ec.message());
  std::unique_ptr<Spool> s(new Spool(dir, options));
  GW_RETURN_IF_ERROR(s->Load());
  return s;
}

Spool::~Spool() {
  if (tail_fd_ >= 0) close(tail_fd_);
}

Status Spool::Load() {
  const std::string id_path = dir_ + "/ID";
  if (fs::exists(id_path)) {
    auto id = ReadWhole(id_path);
    if (!id.ok()) return id.status();
    id_ = std::string(*id);
    while (!id_.empty() && (id_.back() == '\n' || id_.back() == ' ')) id_.pop_back();
    if (id_.size() < 16 || id_.size() > 64 ||
        id_.find_first_not_of("0123456789abcdef") != std::string::npos)
      return Status::InvalidArgument(id_path +
                                     " is not a spool id (hex): remove the spool "
                                     "directory to start a new one");
  } else {
    auto id = RandomHex(16);
    if (!id.ok()) return id.status();
    id_ = *id;
    GW_RETURN_IF_ERROR(WriteFileAtomically(id_path, id_ + "\n"));
  }
  std::vector<uint64_t> firsts;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() == 24 && name.ends_with(".seg") && name.find_first_not_of("0123456789") == 20)
      firsts.push_back(std::stoull(name.substr(0, 20)));
    else if (name.starts_with("pos.")) {
      auto text = ReadWhole(e.path().string());
      const std::string dest = name.substr(4);
      if (text.ok() && ValidDestination(dest) && !text->empty() &&
          text->find_first_not_of("0123456789\n") == std::string::npos)
        positions_[dest] = std::stoull(*text);
      else
        GW_LOG_WARN("spool: {} is not a position; that destination resends everything held",
                    e.path().string());
    }
  }
  if (ec) return Status::IoError("cannot list " + dir_ + ": " + ec.message());
  std::sort(firsts.begin(), firsts.end());
  for (size_t i = 0; i < firsts.size(); ++i) {
    Segment seg;
    seg.first_seq = firsts[i];
    seg.path = dir_ + "/" + SegmentName(firsts[i]);
    auto data = ReadWhole(seg.path);
    if (!data.ok()) return data.status();
    const size_t intact = WalkEntries(*data, [&](std::string_view) {
      ++seg.entries;
      return true;
    });
    if (intact < data->size()) {
      // Only the newest segment can have a torn tail; damage elsewhere loses that segment's
      // rest, which is all that can be said of it.
      damaged_bytes_ += data->size() - intact;
      GW_LOG_WARN("spool: {} has {} bytes that are not whole entries after offset {}: cut off",
                  seg.path, data->size() - intact, intact);
      if (truncate(seg.path.c_str(), static_cast<off_t>(intact)) != 0)
        return ErrnoStatus("cannot truncate " + seg.path, errno);
    }
    seg.bytes = intact;
    if (i + 1 < firsts.size() && seg.first_seq + seg.entries > firsts[i + 1])
      return Status::InvalidArgument("spool " + dir_ + ": segments overlap at " + seg.path);
    bytes_ += seg.bytes;
    segments_.push_back(std::move(seg));
  }
  if (!segments_.empty()) next_seq_ = segments_.back().first_seq + segments_.back().entries;
  std::lock_guard<std::mutex> lock(mu_);
  return OpenTail();
}

Status Spool::OpenTail() {
  if (tail_fd_ >= 0) close(tail_fd_);
  tail_fd_ = -1;
  if (segments_.empty() || segments_.back().bytes >= options_.segment_bytes) {
    Segment seg;
    seg.first_seq = next_seq_;
    seg.path = dir_ + "/" + SegmentName(next_seq_);
    segments_.push_back(seg);
  }
  const std::string& path = segments_.back().path;
  tail_fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (tail_fd_ < 0) return ErrnoStatus("cannot open " + path, errno);
  return SyncDir(dir_);
}

Result<uint64_t> Spool::Append(std::string_view payload) {
  if (payload.size() > kMaxEntryBytes)
    return Status::InvalidArgument("spool entry of " + std::to_string(payload.size()) +
                                   " bytes is over the limit");
  std::string rec;
  rec.reserve(kHeaderBytes + payload.size());
  PutU32(&rec, static_cast<uint32_t>(payload.size()));
  PutU32(&rec, Crc(payload));
  rec.append(payload);
  std::lock_guard<std::mutex> lock(mu_);
  if (segments_.back().bytes >= options_.segment_bytes) GW_RETURN_IF_ERROR(OpenTail());
  Segment& tail = segments_.back();
  if (Status st = WriteAll(tail_fd_, rec, "spool " + tail.path); !st.ok()) {
    // A part written stays behind as a torn tail: cut it now so the next entry is readable.
    if (ftruncate(tail_fd_, static_cast<off_t>(tail.bytes)) != 0)
      GW_LOG_WARN("spool: cannot cut {} back after a failed write", tail.path);
    return st;
  }
  if (options_.sync && fdatasync(tail_fd_) != 0)
    return ErrnoStatus("cannot sync " + tail.path, errno);
  tail.bytes += rec.size();
  ++tail.entries;
  bytes_ += rec.size();
  const uint64_t seq = next_seq_++;
  while (bytes_ > options_.max_bytes && segments_.size() > 1) DeleteFrontLocked(true);
  return seq;
}

void Spool::DeleteFrontLocked(bool unsent) {
  const Segment seg = segments_.front();
  if (unsent) {
    dropped_entries_ += seg.entries;
    GW_LOG_WARN("spool {}: over its {} bytes: the oldest {} entries ({} to {}) are deleted unsent",
                dir_, options_.max_bytes, seg.entries, seg.first_seq,
                seg.first_seq + seg.entries - 1);
  }
  std::error_code ec;
  fs::remove(seg.path, ec);
  bytes_ -= seg.bytes;
  segments_.erase(segments_.begin());
}

Result<std::vector<SpoolEntry>> Spool::Read(uint64_t from, uint64_t max_bytes) const {
  std::vector<SpoolEntry> out;
  std::vector<Segment> segs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    segs = segments_;
  }
  uint64_t taken = 0;
  for (const auto& seg : segs) {
    if (seg.first_seq + seg.entries <= from || seg.entries == 0) continue;
    auto data = ReadWhole(seg.path);
    if (!data.ok()) {
      // Deleted meanwhile (over the bound): the next segment goes on.
      if (!fs::exists(seg.path)) continue;
      return data.status();
    }
    uint64_t seq = seg.first_seq;
    bool full = false;
    WalkEntries(std::string_view(*data).substr(0, seg.bytes), [&](std::string_view payload) {
      if (seq >= from) {
        if (!out.empty() && taken + payload.size() > max_bytes) {
          full = true;
          return false;
        }
        out.push_back({seq, std::string(payload)});
        taken += payload.size();
      }
      ++seq;
      return true;
    });
    if (full) break;
  }
  return out;
}

uint64_t Spool::Position(const std::string& destination) const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t first = segments_.empty() ? next_seq_ : segments_.front().first_seq;
  auto it = positions_.find(destination);
  return it == positions_.end() ? first : std::max(it->second, first);
}

uint64_t Spool::MinPositionLocked() const {
  uint64_t m = UINT64_MAX;
  for (const auto& [dest, pos] : positions_) m = std::min(m, pos);
  return positions_.empty() ? 0 : m;
}

Status Spool::Ack(const std::string& destination, uint64_t next) {
  if (!ValidDestination(destination))
    return Status::InvalidArgument("spool destination '" + destination +
                                   "' is not a short name of [A-Za-z0-9_.-]");
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t& pos = positions_[destination];
  if (next <= pos) return Status::Ok();
  pos = std::min(next, next_seq_);
  GW_RETURN_IF_ERROR(WriteFileAtomically(dir_ + "/pos." + destination, std::to_string(pos) + "\n"));
  // Segments every destination is past, except the one being appended to.
  const uint64_t done = MinPositionLocked();
  while (segments_.size() > 1 && segments_.front().first_seq + segments_.front().entries <= done)
    DeleteFrontLocked(false);
  return Status::Ok();
}

SpoolStats Spool::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SpoolStats s;
  s.first_seq = segments_.empty() ? next_seq_ : segments_.front().first_seq;
  s.next_seq = next_seq_;
  s.bytes = bytes_;
  s.segments = segments_.size();
  s.dropped_entries = dropped_entries_;
  s.damaged_bytes = damaged_bytes_;
  return s;
}

}  // namespace gpuwatch::server
