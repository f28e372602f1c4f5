#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpuwatch {

Status ErrnoStatus(const std::string& what, int err) {
  std::string msg = what + ": " + std::strerror(err);
  if (err == EACCES || err == EPERM || err == EROFS) return Status::PermissionDenied(msg);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted(msg);
  return Status::IoError(msg);
}

Status WriteAll(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    const ssize_t w = ::write(fd, data.data(), data.size());
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(what, errno);
    }
    data.remove_prefix(static_cast<size_t>(w));
  }
  return Status::Ok();
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status SyncDir(const std::string& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoStatus("open directory " + dir, errno);
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return ErrnoStatus("fsync directory " + dir, err);
  return Status::Ok();
}

namespace {

Status WriteAtomically(const std::string& path, std::string_view data, bool secret) {
  const std::string tmp = path + ".tmp";
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (secret ? O_NOFOLLOW : 0),
             secret ? 0600 : 0644);
  if (fd < 0) return ErrnoStatus("create " + tmp, errno);
  Status st = Status::Ok();
  if (secret && ::fchmod(fd, 0600) != 0) st = ErrnoStatus("chmod " + tmp, errno);
  if (st.ok()) st = WriteAll(fd, data, "write " + tmp);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus("fsync " + tmp, errno);
  if (::close(fd) != 0 && st.ok()) st = ErrnoStatus("close " + tmp, errno);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = ErrnoStatus("rename " + tmp + " to " + path, errno);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return SyncDir(DirOf(path));
}

}  // namespace

Status WriteFileAtomically(const std::string& path, std::string_view data) {
  return WriteAtomically(path, data, /*secret=*/false);
}

Status WriteSecretFileAtomically(const std::string& path, std::string_view data) {
  return WriteAtomically(path, data, /*secret=*/true);
}

}  // namespace gpuwatch
