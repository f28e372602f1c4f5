// Durable file writes shared by the modules that keep small state and trace files (the change
// timeline, trace files, snapshots): errno as a Status that says what kind of failure it was,
// whole writes across EINTR and short writes, directory fsync, and write-to-temp-then-rename.
// Thread-safe (no state).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuwatch {

// "<what>: <strerror(err)>" as PermissionDenied (EACCES, EPERM, EROFS), ResourceExhausted
// (ENOSPC, EDQUOT) or IoError.
Status ErrnoStatus(const std::string& what, int err);
// Writes all of `data`; an error is ErrnoStatus(what).
Status WriteAll(int fd, std::string_view data, const std::string& what);
// The directory part of `path` ("." for a bare name, "/" for a file in the root).
std::string DirOf(const std::string& path);
// fsync of a directory, so an entry created, renamed or deleted in it is durable.
Status SyncDir(const std::string& dir);
// <path>.tmp, fsync, rename onto `path`, fsync the directory: a crash leaves the old file or
// the new one, never a part; a failure leaves the old file and no .tmp.
Status WriteFileAtomically(const std::string& path, std::string_view data);
// The same for a secret (a tokens file): mode 0600 from the moment the .tmp exists, whatever the
// umask or a leftover .tmp's mode, and never through a symlink at <path>.tmp.
Status WriteSecretFileAtomically(const std::string& path, std::string_view data);

}  // namespace gpuwatch
