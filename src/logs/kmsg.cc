#include "logs/kmsg.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <utility>

namespace gpuwatch::logs {
namespace {

// Strict unsigned decimal: digits only, no sign, no blanks, no overflow.
template <typename T>
std::optional<T> ParseDecimal(std::string_view s) {
  if (s.empty()) return std::nullopt;
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<uint32_t> ParseHex(std::string_view s, size_t max_digits) {
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The kernel writes "\xNN" for the bytes it escapes (msg_add_ext_text in printk.c). A
// backslash not followed by two hex digits cannot come from the kernel and is kept as is.
std::string UnescapeKmsg(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] == 'x') {
      const int hi = HexDigit(s[i + 2]), lo = HexDigit(s[i + 3]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

bool ConsumePrefix(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}

// "PCI:0000:18:00", "0000:18:00", "18:00", with an optional ".f" → "00000000:18:00.0"; "" when
// it is not a bus address.
std::string NormalizePciBusId(std::string_view id) {
  id = TrimBlanks(id);
  ConsumePrefix(&id, "PCI:");
  uint32_t function = 0;
  if (const size_t dot = id.find('.'); dot != std::string_view::npos) {
    auto f = ParseHex(id.substr(dot + 1), 1);
    if (!f || *f > 7) return "";
    function = *f;
    id = id.substr(0, dot);
  }
  std::string_view parts[3];
  size_t n = 0;
  while (true) {
    const size_t colon = id.find(':');
    if (n == 3) return "";
    parts[n++] = id.substr(0, colon);
    if (colon == std::string_view::npos) break;
    id.remove_prefix(colon + 1);
  }
  if (n < 2) return "";
  std::optional<uint32_t> domain = 0u;
  if (n == 3) domain = ParseHex(parts[0], 8);
  const auto bus = ParseHex(parts[n - 2], 2);
  const auto device = ParseHex(parts[n - 1], 2);
  if (!domain || !bus || !device || *device > 0x1f) return "";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08x:%02x:%02x.%x", *domain, *bus, *device, function);
  return buf;
}

}  // namespace

// ---- records --------------------------------------------------------------------------------

Result<KmsgRecord> ParseKmsgRecord(std::string_view record) {
  // Dictionary lines follow the first '\n'; the message itself never holds a raw one.
  const std::string_view line = record.substr(0, record.find('\n'));
  const size_t semi = line.find(';');
  if (semi == std::string_view::npos) return Status::InvalidArgument("kmsg: no ';' in record");
  std::string_view header = line.substr(0, semi);
  std::string_view fields[4];
  for (size_t i = 0; i < 4; ++i) {
    const size_t comma = header.find(',');
    if (comma == std::string_view::npos && i < 3) {
      return Status::InvalidArgument("kmsg: fewer than 4 header fields");
    }
    fields[i] = header.substr(0, comma);
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
  }
  const auto prio = ParseDecimal<unsigned>(fields[0]);
  const auto seq = ParseDecimal<uint64_t>(fields[1]);
  const auto usec = ParseDecimal<uint64_t>(fields[2]);
  if (!prio || !seq || !usec || fields[3].empty()) {
    return Status::InvalidArgument("kmsg: malformed header field");
  }
  KmsgRecord r;
  r.facility = *prio >> 3;
  r.level = *prio & 7;
  r.seq = *seq;
  r.usec = *usec;
  r.flags = fields[3].front();
  r.message = UnescapeKmsg(line.substr(semi + 1));
  return r;
}

// ---- Xid ------------------------------------------------------------------------------------

std::optional<XidLine> ParseNvrmXid(std::string_view line) {
  constexpr std::string_view kTag = "NVRM: Xid";
  const size_t at = line.find(kTag);
  if (at == std::string_view::npos) return std::nullopt;
  const bool quoted = at > 0 && line[at - 1] == '"';
  std::string_view s = line.substr(at + kTag.size());
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  if (!ConsumePrefix(&s, "(")) return std::nullopt;
  const size_t close = s.find(')');
  if (close == std::string_view::npos) return std::nullopt;
  const std::string_view id = s.substr(0, close);
  s.remove_prefix(close + 1);
  if (!ConsumePrefix(&s, ":")) return std::nullopt;
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  const auto xid = ParseDecimal<uint64_t>(s.substr(0, digits));
  if (!xid) return std::nullopt;
  s.remove_prefix(digits);
  if (!s.empty() && s.front() != ',') return std::nullopt;  // "13x": not a number
  ConsumePrefix(&s, ",");
  s = TrimBlanks(s);
  if (quoted && !s.empty() && s.back() == '"') s = TrimBlanks(s.substr(0, s.size() - 1));

  XidLine x;
  x.pci_bus_id = NormalizePciBusId(id);
  x.xid = *xid;
  // "pid=1234, name=python3, <text>"; R5xx drivers print "pid='<unknown>', name=<unknown>"
  // when no process context is known; some drivers print pid= without name=.
  if (ConsumePrefix(&s, "pid=")) {
    const size_t comma = s.find(',');
    std::string_view v = TrimBlanks(s.substr(0, comma));
    if (v.size() >= 2 && v.front() == '\'' && v.back() == '\'') v = v.substr(1, v.size() - 2);
    x.pid = ParseDecimal<uint32_t>(v);
    s = comma == std::string_view::npos ? std::string_view() : TrimBlanks(s.substr(comma + 1));
  }
  if (ConsumePrefix(&s, "name=")) {
    // A comm may hold ", " itself; the driver gives no way to tell, so the first one ends it.
    const size_t sep = s.find(", ");
    std::string_view v = TrimBlanks(s.substr(0, sep));
    if (v.size() >= 2 && v.front() == '\'' && v.back() == '\'') v = v.substr(1, v.size() - 2);
    if (v != "<unknown>") x.process_name = std::string(v);
    s = sep == std::string_view::npos ? std::string_view() : TrimBlanks(s.substr(sep + 2));
  }
  x.text = std::string(s);
  return x;
}

// ---- KmsgReader -----------------------------------------------------------------------------

namespace {
constexpr size_t kReadBufferBytes = 64 << 10;  // > CONSOLE_EXT_LOG_MAX (8 KiB): one record fits
constexpr size_t kMaxPendingBytes = 64 << 10;  // a "record" longer than this is not one

int64_t ClockMs(clockid_t id) {
  struct timespec ts {};
  ::clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}
}  // namespace

int64_t KmsgBootRealtimeMs() { return ClockMs(CLOCK_REALTIME) - ClockMs(CLOCK_MONOTONIC); }

KmsgReader::KmsgReader(KmsgReaderOptions options) : options_(std::move(options)) {
  if (options_.max_records_per_read == 0) options_.max_records_per_read = 1;
}

KmsgReader::~KmsgReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status KmsgReader::Open() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  pending_.clear();
  next_seq_.reset();
  const int fd = ::open(options_.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    std::string msg = "open " + options_.path + ": " + std::strerror(err);
    if (err == ENOENT) return Status::NotFound(std::move(msg));
    if (err == EACCES || err == EPERM) return Status::PermissionDenied(std::move(msg));
    return Status::IoError(std::move(msg));
  }
  // On /dev/kmsg SEEK_END moves past the records in the ring buffer (devkmsg_llseek).
  if (options_.start_at_end && ::lseek(fd, 0, SEEK_END) < 0 && errno != ESPIPE) {
    const int err = errno;
    ::close(fd);
    return Status::IoError("lseek " + options_.path + ": " + std::strerror(err));
  }
  fd_ = fd;
  return Status::Ok();
}

void KmsgReader::HandleLine(std::string_view line, int64_t boot_ms, std::vector<KmsgEntry>* out,
                            size_t* emitted) {
  if (line.empty() || line.front() == ' ') return;  // a dictionary line
  Result<KmsgRecord> r = ParseKmsgRecord(line);
  if (!r.ok()) {
    ++malformed_;
    return;
  }
  if (next_seq_ && r->seq > *next_seq_) lost_records_ += r->seq - *next_seq_;
  next_seq_ = r->seq + 1;
  KmsgEntry e;
  e.time_ms = boot_ms + static_cast<int64_t>(r->usec / 1000);
  e.record = std::move(r.value());
  out->push_back(std::move(e));
  ++*emitted;
}

Status KmsgReader::Read(std::vector<KmsgEntry>* out) {
  if (fd_ < 0) return Status::Unavailable("kmsg reader is not open");
  const int64_t boot_ms = options_.boot_realtime_ms.value_or(KmsgBootRealtimeMs());
  const size_t max = options_.max_records_per_read;
  size_t emitted = 0;
  // Splits the complete lines of pending_ until the record budget is spent; the rest stays.
  auto drain_pending = [&] {
    size_t pos = 0;
    while (emitted < max) {
      const size_t nl = pending_.find('\n', pos);
      if (nl == std::string::npos) break;
      HandleLine(std::string_view(pending_).substr(pos, nl - pos), boot_ms, out, &emitted);
      pos = nl + 1;
    }
    pending_.erase(0, pos);
    if (pending_.size() > kMaxPendingBytes && pending_.find('\n') == std::string::npos) {
      ++malformed_;
      pending_.clear();
    }
  };
  drain_pending();
  if (buf_.size() < kReadBufferBytes) buf_.resize(kReadBufferBytes);
  while (emitted < max) {
    const ssize_t n = ::read(fd_, buf_.data(), buf_.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;  // nothing more now
      // The ring buffer wrapped past our position; the next read returns the oldest record
      // still held, and the sequence gap tells how many were lost.
      if (errno == EPIPE) {
        ++overruns_;
        continue;
      }
      return Status::IoError("read " + options_.path + ": " + std::strerror(errno));
    }
    if (n == 0) break;  // end of a regular file, or a FIFO without a writer
    pending_.append(buf_.data(), static_cast<size_t>(n));
    drain_pending();
  }
  return Status::Ok();
}

}  // namespace gpuwatch::logs
