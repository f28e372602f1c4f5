#include "trace/trace_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/file_io.h"

namespace gpuwatch::trace {
namespace {

// Appends are gathered up to this size before one write (or one gzwrite).
constexpr size_t kBufferBytes = 256 << 10;

// A failed gz call: errno's Status when zlib says the error was the system's (or has no
// message), else zlib's message.
Status GzStatus(const std::string& what, gzFile gz, int saved_errno) {
  int code = Z_OK;
  const char* msg = gz != nullptr ? gzerror(gz, &code) : nullptr;
  if (code == Z_ERRNO || msg == nullptr || *msg == '\0')
    return ErrnoStatus(what, saved_errno != 0 ? saved_errno : EIO);
  return Status::IoError(what + ": " + msg);
}

}  // namespace

TraceFileWriter::~TraceFileWriter() {
  if (!is_open()) return;
  // Best effort: what was appended reaches the .tmp, as a complete gzip stream; no rename.
  FlushBuffer().IgnoreError();
  Release();
}

void TraceFileWriter::Release() {
  if (gz_ != nullptr) gzclose(static_cast<gzFile>(gz_));
  gz_ = nullptr;
  if (zst_ != nullptr) ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(zst_));
  zst_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffer_.clear();
}

Status TraceFileWriter::Open(const std::string& path) {
  if (is_open()) return Status::InvalidArgument("trace file writer already open: " + path_);
  path_ = path;
  tmp_path_ = path + ".tmp";
  bytes_appended_ = 0;
  error_ = Status::Ok();
  const int fd = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create trace file " + tmp_path_, errno);
  fd_ = fd;
  if (path.ends_with(".gz")) {
    // zlib closes the descriptor it is given; keep our own for fsync.
    const int gz_fd = ::dup(fd_);
    gzFile gz = gz_fd >= 0 ? gzdopen(gz_fd, "wb") : nullptr;
    if (gz == nullptr) {
      const int err = errno;
      if (gz_fd >= 0) ::close(gz_fd);
      Release();
      return ErrnoStatus("cannot start gzip stream in " + tmp_path_, err != 0 ? err : ENOMEM);
    }
    gzbuffer(gz, kBufferBytes);
    gz_ = gz;
  } else if (path.ends_with(".zst")) {
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    if (cctx == nullptr) {
      Release();
      return Status::IoError("cannot start zstd stream in " + tmp_path_ + ": out of memory");
    }
    // Level 3 (zstd's default): about gzip -6's ratio on trace JSON at several times its
    // speed; a checksum so a damaged file is told from a cut one.
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    zst_ = cctx;
    zst_out_.resize(ZSTD_CStreamOutSize());
  }
  buffer_.reserve(kBufferBytes + 4096);
  return Status::Ok();
}

Status TraceFileWriter::Append(std::string_view line) {
  if (!is_open()) return Status::InvalidArgument("trace file writer not open");
  if (!error_.ok()) return error_;
  buffer_.append(line);
  buffer_ += '\n';
  bytes_appended_ += line.size() + 1;
  if (buffer_.size() >= kBufferBytes) return FlushBuffer();
  return Status::Ok();
}

Status TraceFileWriter::FlushBuffer() {
  if (!error_.ok()) return error_;
  if (buffer_.empty()) return Status::Ok();
  if (zst_ != nullptr) {
    ZstdDrive(buffer_, ZSTD_e_continue).IgnoreError();  // sets error_
  } else if (gz_ == nullptr) {
    error_ = WriteAll(fd_, buffer_, "write " + tmp_path_);
  } else {
    auto gz = static_cast<gzFile>(gz_);
    std::string_view rest = buffer_;
    while (!rest.empty() && error_.ok()) {
      const auto n = static_cast<unsigned>(std::min<size_t>(rest.size(), 1u << 30));
      errno = 0;
      if (gzwrite(gz, rest.data(), n) != static_cast<int>(n))
        error_ = GzStatus("write " + tmp_path_, gz, errno);
      rest.remove_prefix(n);
    }
  }
  buffer_.clear();
  return error_;
}

Status TraceFileWriter::ZstdDrive(std::string_view in, int directive) {
  auto* cctx = static_cast<ZSTD_CCtx*>(zst_);
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  while (error_.ok()) {
    ZSTD_outBuffer output{zst_out_.data(), zst_out_.size(), 0};
    const size_t left =
        ZSTD_compressStream2(cctx, &output, &input, static_cast<ZSTD_EndDirective>(directive));
    if (ZSTD_isError(left)) {
      error_ = Status::IoError("compress " + tmp_path_ + ": " + ZSTD_getErrorName(left));
      break;
    }
    if (output.pos > 0) {
      error_ = WriteAll(fd_, std::string_view(zst_out_.data(), output.pos), "write " + tmp_path_);
    }
    // continue: until the input is taken; flush and end: until zstd has nothing left.
    const bool done = directive == ZSTD_e_continue ? input.pos == input.size : left == 0;
    if (done) break;
  }
  return error_;
}

Status TraceFileWriter::Flush() {
  if (!is_open()) return Status::InvalidArgument("trace file writer not open");
  GW_RETURN_IF_ERROR(FlushBuffer());
  if (zst_ != nullptr) return ZstdDrive({}, ZSTD_e_flush);
  if (gz_ != nullptr) {
    errno = 0;
    if (gzflush(static_cast<gzFile>(gz_), Z_SYNC_FLUSH) != Z_OK)
      error_ = GzStatus("flush " + tmp_path_, static_cast<gzFile>(gz_), errno);
  }
  return error_;
}

Status TraceFileWriter::Close() {
  if (!is_open()) return Status::InvalidArgument("trace file writer not open");
  Status st = FlushBuffer();
  if (zst_ != nullptr) {
    // The frame's end (and checksum).
    if (st.ok()) st = ZstdDrive({}, ZSTD_e_end);
    ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(zst_));
    zst_ = nullptr;
  }
  if (gz_ != nullptr) {
    // gzclose writes the trailer and closes zlib's descriptor (ours stays open for fsync).
    errno = 0;
    const int rc = gzclose(static_cast<gzFile>(gz_));
    gz_ = nullptr;
    if (rc != Z_OK && st.ok())
      st = ErrnoStatus("finish gzip stream in " + tmp_path_, errno ? errno : EIO);
  }
  if (st.ok() && ::fsync(fd_) != 0) st = ErrnoStatus("fsync " + tmp_path_, errno);
  if (::close(fd_) != 0 && st.ok()) st = ErrnoStatus("close " + tmp_path_, errno);
  fd_ = -1;
  buffer_.clear();
  if (!st.ok()) return st;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    return ErrnoStatus("rename " + tmp_path_ + " to " + path_, errno);
  // The rename is durable only once the directory entry is.
  return SyncDir(DirOf(path_));
}

Status WriteTraceFile(const std::string& path, const std::vector<std::string>& lines) {
  TraceFileWriter w;
  GW_RETURN_IF_ERROR(w.Open(path));
  Status st;
  for (const auto& line : lines) {
    st = w.Append(line);
    if (!st.ok()) break;
  }
  // Close after a failed Append only releases the file (it returns the same error).
  const Status closed = w.Close();
  if (st.ok()) st = closed;
  // A one-shot write that failed (disk full) leaves no .tmp behind.
  if (!st.ok()) ::unlink((path + ".tmp").c_str());
  return st;
}

}  // namespace gpuwatch::trace
