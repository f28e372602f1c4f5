#include "store/internal/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gpuwatch::store::internal {

Status Errno(const std::string& what) {
  return Status::IoError(what + ": " + std::strerror(errno));
}

Status WriteAll(int fd, std::string_view data, const std::string& what) {
  const char* p = data.data();
  size_t n = data.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno(what);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open " + dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status::Ok() : Errno("fsync " + dir);
}

uint32_t Crc32(std::string_view data, uint32_t crc) {
  uLong c = crc;
  // zlib's length is uInt: feed large inputs in pieces.
  for (size_t off = 0; off < data.size(); off += 1u << 30) {
    const size_t n = std::min<size_t>(data.size() - off, 1u << 30);
    c = crc32(c, reinterpret_cast<const Bytef*>(data.data() + off), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(c);
}

Result<MappedFile> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open " + path);
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    Status st = Errno("fstat " + path);
    ::close(fd);
    return st;
  }
  const auto size = static_cast<size_t>(sb.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      Status st = Errno("mmap " + path);
      ::close(fd);
      return st;
    }
  }
  ::close(fd);  // the mapping stays valid
  return MappedFile(data, size);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace gpuwatch::store::internal
