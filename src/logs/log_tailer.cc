#include "logs/log_tailer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

namespace gpuwatch::logs {
namespace {

// One pread's size: big enough that a busy file costs few syscalls, small enough to sit in L2.
constexpr size_t kReadChunkBytes = 64 << 10;
// Rotations followed within one Poll. More than one happens when a file is rotated again
// before the tailer saw the previous new file; a path that changes on every stat (a
// misbehaving writer) must not keep Poll spinning.
constexpr int kMaxSwitchesPerPoll = 4;

Status ErrnoStatus(std::string_view what, const std::string& path, int err) {
  std::string msg = std::string(what) + " " + path + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Status::NotFound(std::move(msg));
    case EACCES:
    case EPERM:
      return Status::PermissionDenied(std::move(msg));
    default:
      return Status::IoError(std::move(msg));
  }
}

std::string_view FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

bool IsUtf8Continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Where to cut `s` (full, max_line_bytes long) when `next` is the byte that follows it: before
// the lead byte of a UTF-8 character that `next` continues, so that each piece stays valid
// UTF-8 when the line is. Bytes that are not UTF-8 are cut anywhere.
size_t Utf8CutPoint(const std::string& s, char next) {
  if (!IsUtf8Continuation(next)) return s.size();
  for (size_t back = 1; back <= 3 && back < s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0xC0) return s.size() - back;  // lead byte of the split character
    if ((c & 0xC0) != 0x80) break;                   // ASCII: not a UTF-8 sequence after all
  }
  return s.size();
}

}  // namespace

LogTailer::LogTailer(std::string path, LogTailerOptions options)
    : path_(std::move(path)), options_(std::move(options)) {
  options_.max_line_bytes = std::max<size_t>(options_.max_line_bytes, 16);
  options_.max_bytes_per_poll = std::max<size_t>(options_.max_bytes_per_poll, 1);
}

LogTailer::~LogTailer() { Close(); }

void LogTailer::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  partial_.clear();
  partial_cut_ = false;
}

Status LogTailer::Open(bool from_end) {
  // The path is judged before it is opened: opening a device has effects of its own (a
  // watchdog reboots the node when closed carelessly, a tape rewinds), and the path comes
  // from a job. The fstat below then confirms the file opened is the file judged.
  struct stat pre {};
  if (::lstat(path_.c_str(), &pre) != 0) return ErrnoStatus("stat", path_, errno);
  if (S_ISLNK(pre.st_mode))
    return Status::InvalidArgument(path_ + ": refused, a symbolic link (name the file itself)");
  if (!S_ISREG(pre.st_mode))
    return Status::InvalidArgument(path_ + ": refused, " + std::string(FileKind(pre.st_mode)));
  if (options_.check) {
    if (Status c = options_.check(pre); !c.ok()) return c;
  }
  // O_NONBLOCK: opening a FIFO for reading would otherwise block until a writer appears;
  // O_NOCTTY: a tty at the path must not become the agent's controlling terminal.
  // O_NOFOLLOW: a link swapped in after the lstat is refused, not followed.
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("open", path_, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("fstat", path_, err);
  }
  if (!S_ISREG(st.st_mode) || st.st_dev != pre.st_dev || st.st_ino != pre.st_ino) {
    ::close(fd);
    return Status::InvalidArgument(path_ + ": refused, " + std::string(FileKind(st.st_mode)) +
                                   " (or replaced while being opened)");
  }
  if (options_.check) {
    Status c = options_.check(st);
    if (!c.ok()) {
      ::close(fd);
      return c;
    }
  }
  if (options_.path_check) {
    // The path the open file really has: a directory on the way swapped for a link between
    // the checks and the open shows here.
    char real[PATH_MAX + 1] = {};
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = ::readlink(self.c_str(), real, PATH_MAX);
    Status c = n <= 0 ? Status::PermissionDenied(path_ + ": refused, its real path is unknown")
                      : options_.path_check(std::string(real, static_cast<size_t>(n)));
    if (!c.ok()) {
      ::close(fd);
      return c;
    }
  }
  Close();
  fd_ = fd;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  offset_ = 0;
  tail_.clear();
  if (from_end && st.st_size > 0) {
    offset_ = static_cast<uint64_t>(st.st_size);
    // Starting mid-line: the rest of that line is a piece, not a line.
    char last = '\n';
    if (::pread(fd_, &last, 1, static_cast<off_t>(offset_ - 1)) == 1 && last != '\n') {
      partial_cut_ = true;
    }
  }
  return Status::Ok();
}

Status LogTailer::Poll(std::vector<TailedLine>* out) {
  const bool first = !started_;
  started_ = true;
  size_t budget = options_.max_bytes_per_poll;
  if (fd_ < 0) {
    Status st = Open(first && options_.start_at_end);
    if (!st.ok()) return Report(std::move(st));
  }
  for (int switches = 0; switches <= kMaxSwitchesPerPoll; ++switches) {
    // The path is looked at before the old file is drained: whatever was written to the old
    // file before its rename was in it at this stat, so the drain below reads it.
    struct stat path_st {};
    const bool path_exists = ::stat(path_.c_str(), &path_st) == 0;

    struct stat fd_st {};
    const bool have_st = ::fstat(fd_, &fd_st) == 0;
    const uint64_t size = have_st ? static_cast<uint64_t>(fd_st.st_size) : 0;
    // Truncated and rewritten past the old length between two polls looks like growth; the
    // last bytes read before the offset tell them apart (one small pread when the file grew).
    bool rewritten = false;
    if (have_st && size > offset_ && !tail_.empty() && offset_ >= tail_.size()) {
      std::string now(tail_.size(), '\0');
      const ssize_t n =
          ::pread(fd_, now.data(), now.size(), static_cast<off_t>(offset_ - tail_.size()));
      rewritten = n == static_cast<ssize_t>(now.size()) && now != tail_;
    }
    if (have_st && (size < offset_ || rewritten)) {
      // The bytes after the held partial line are gone; what is held is all there will be.
      EmitHeld(out);
      offset_ = 0;
      tail_.clear();
      ++stats_.truncations;
    }
    Status st = Drain(&budget, out);
    if (!st.ok()) return Report(std::move(st));
    // Out of budget: the old file may hold more, so the switch waits for the next Poll.
    if (budget == 0) break;
    // A missing path keeps the old file: it may be between rename and create, or deleted
    // while its writer still appends through an open descriptor.
    if (!path_exists || (path_st.st_dev == dev_ && path_st.st_ino == ino_)) break;
    if (switches == kMaxSwitchesPerPoll) break;
    EmitHeld(out);
    Close();
    ++stats_.rotations;
    st = Open(/*from_end=*/false);
    if (!st.ok()) return Report(std::move(st));
  }
  return Report(Status::Ok());
}

Status LogTailer::Drain(size_t* budget, std::vector<TailedLine>* out) {
  if (buf_.size() < kReadChunkBytes) buf_.resize(kReadChunkBytes);
  while (*budget > 0) {
    const size_t want = std::min(kReadChunkBytes, *budget);
    const ssize_t n = ::pread(fd_, buf_.data(), want, static_cast<off_t>(offset_));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read", path_, errno);
    }
    if (n == 0) break;
    offset_ += static_cast<uint64_t>(n);
    *budget -= static_cast<size_t>(n);
    // Remember the last bytes before the offset (see the truncation check in Poll).
    const size_t keep = std::min<size_t>(kTailCheckBytes, static_cast<size_t>(n));
    if (keep == kTailCheckBytes) {
      tail_.assign(buf_.data() + n - keep, keep);
    } else {
      tail_.append(buf_.data(), keep);
      if (tail_.size() > kTailCheckBytes) tail_.erase(0, tail_.size() - kTailCheckBytes);
    }
    stats_.bytes += static_cast<uint64_t>(n);
    Consume(buf_.data(), static_cast<size_t>(n), out);
    // A regular file reads short only at its end: skip the pread that would return 0.
    if (static_cast<size_t>(n) < want) break;
  }
  return Status::Ok();
}

void LogTailer::Consume(const char* data, size_t n, std::vector<TailedLine>* out) {
  std::string_view in(data, n);
  const size_t max = options_.max_line_bytes;
  while (!in.empty()) {
    const size_t nl = in.find('\n');
    const size_t take = nl == std::string_view::npos ? in.size() : nl;
    const size_t room = max - partial_.size();
    if (take > room) {
      // Over-long line: hand out a full piece now instead of holding an unbounded line.
      partial_.append(in.data(), room);
      in.remove_prefix(room);
      const size_t cut = Utf8CutPoint(partial_, in.front());
      std::string rest = partial_.substr(cut);
      partial_.resize(cut);
      Emit(std::move(partial_), true, out);
      partial_ = std::move(rest);
      partial_cut_ = true;
      continue;
    }
    partial_.append(in.data(), take);
    if (nl == std::string_view::npos) break;
    in.remove_prefix(nl + 1);
    if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
    // An over-long line that ended exactly at a piece boundary has no last piece.
    if (!(partial_cut_ && partial_.empty())) Emit(std::move(partial_), partial_cut_, out);
    partial_.clear();
    partial_cut_ = false;
  }
}

void LogTailer::Emit(std::string text, bool cut, std::vector<TailedLine>* out) {
  ++stats_.lines;
  if (cut) ++stats_.cut_lines;
  out->push_back(TailedLine{std::move(text), cut});
}

void LogTailer::EmitHeld(std::vector<TailedLine>* out) {
  if (!partial_.empty()) Emit(std::move(partial_), true, out);
  partial_.clear();
  partial_cut_ = false;
}

void LogTailer::FlushPartial(std::vector<TailedLine>* out) {
  const bool had = !partial_.empty();
  EmitHeld(out);
  // Whatever the writer adds to that line later is its remainder, not a line of its own.
  partial_cut_ = had;
}

Status LogTailer::Report(Status st) {
  if (st.ok()) {
    last_error_code_ = StatusCode::kOk;
    last_error_message_.clear();
    return st;
  }
  if (st.code() == last_error_code_ && st.message() == last_error_message_) return Status::Ok();
  last_error_code_ = st.code();
  last_error_message_ = st.message();
  return st;
}

}  // namespace gpuwatch::logs
