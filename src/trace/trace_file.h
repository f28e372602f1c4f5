// Trace files: JSON Lines, gzip-compressed when the path ends in ".gz", zstd when it ends in
// ".zst" (trace-format.md, "Encoding"), written crash-safe: the data goes to "<path>.tmp", which is
// fsynced and then renamed onto <path> (and the directory fsynced), so <path> is either absent, the
// previous file, or the whole new trace — never half of one. A crash, or a writer destroyed without
// Close, leaves "<path>.tmp" behind (for salvage: JSONL, and a gzip prefix that zcat reads up
// to the cut; for zstd, a frame that `gpuwatch replay` reads up to the last Flush and reports
// as cut) and never touches <path>.
//
// Every error is a Status that names the file. Thread-safety: WriteTraceFile is reentrant; a
// TraceFileWriter is used by one thread at a time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::trace {

// Writes `lines` (one record each, without newlines; a '\n' is added after each) to `path`.
Status WriteTraceFile(const std::string& path, const std::vector<std::string>& lines);

// Streaming form for `gpuwatch record`, which appends for minutes: Open, Append…, Close.
class TraceFileWriter {
 public:
  TraceFileWriter() = default;
  ~TraceFileWriter();  // without Close: releases the handle, leaves <path>.tmp, no rename
  TraceFileWriter(const TraceFileWriter&) = delete;
  TraceFileWriter& operator=(const TraceFileWriter&) = delete;

  // Creates (truncates) <path>.tmp. REQUIRES: not open.
  Status Open(const std::string& path);
  // Appends one record and a '\n'. Buffered. REQUIRES: open.
  Status Append(std::string_view line);
  // Pushes buffered data to the kernel (and, for gzip and zstd, a flush point, so a crash
  // after it leaves a .tmp that decompresses up to here). No fsync. REQUIRES: open.
  Status Flush();
  // Finishes the stream, fsyncs, renames <path>.tmp onto <path>, fsyncs the directory. On an
  // error the .tmp stays and <path> is untouched. The writer is closed either way.
  Status Close();

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  uint64_t bytes_appended() const { return bytes_appended_; }  // uncompressed, newlines included

 private:
  Status FlushBuffer();
  void Release();

  std::string path_, tmp_path_;
  int fd_ = -1;
  void* gz_ = nullptr;   // gzFile when compressing (zlib.h stays out of this header)
  void* zst_ = nullptr;  // ZSTD_CCtx when compressing with zstd
  std::string zst_out_;  // zstd's output buffer
  // Runs the zstd stream over `in` with the end directive (continue, flush, end) and writes
  // what it produces.
  Status ZstdDrive(std::string_view in, int directive);
  std::string buffer_;
  uint64_t bytes_appended_ = 0;
  Status error_;  // the first write error: later calls return it
};

}  // namespace gpuwatch::trace
