// File-system helpers shared by the store's writers (WAL, block files, the store directory):
// errno as a Status, whole writes across EINTR and short writes, directory fsync, and zlib's
// CRC-32 over any length. Private to src/store. Thread-safe (no state).
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

}  // namespace gpuwatch::store::internal
