// File-system helpers shared by the store's writers (WAL, block files, the store directory):
// errno as a Status, whole writes across EINTR and short writes, directory fsync, and zlib's
// CRC-32 over any length, and a read-only file mapping. Private to src/store. Thread-safe (no
// shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuwatch::store::internal {

// IoError "<what>: <strerror(errno)>".
Status Errno(const std::string& what);
// Writes all of `data`; an error is Errno(what).
Status WriteAll(int fd, std::string_view data, const std::string& what);
// fsync of a directory, so a created, renamed or deleted entry in it is durable.
Status SyncDir(const std::string& dir);
// CRC-32 (zlib, IEEE) of `data`, continuing from `crc` (0 to start).
uint32_t Crc32(std::string_view data, uint32_t crc = 0);

// A whole file mapped read-only, for one-off scans of files that may be large (a block being
// salvaged) without reading them into memory. Move-only; unmaps on destruction.
class MappedFile {
 public:
  static Result<MappedFile> Open(const std::string& path);
  MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; }
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  ~MappedFile();
  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }

 private:
  MappedFile(void* data, size_t size) : data_(data), size_(size) {}
  void* data_;
  size_t size_;
};

}  // namespace gpuwatch::store::internal
