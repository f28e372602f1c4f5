#include "topo/archive.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "common/file_io.h"
#include "common/strings.h"

namespace gpuwatch::topo {

namespace {

// Snapshots of the largest nodes (16 GPUs × 18 links, 18 NICs) are ~100 KiB.
constexpr size_t kMaxSnapshotBytes = 16 << 20;

std::optional<int> VersionOfName(std::string_view name) {
  // v000001.json
  if (name.size() < 7 || name[0] != 'v' || name.substr(name.size() - 5) != ".json") {
    return std::nullopt;
  }
  std::optional<int> v = ParseInt<int>(name.substr(1, name.size() - 6));
  if (!v || *v <= 0) return std::nullopt;
  return v;
}

Status MakeDirs(const std::string& dir) {
  std::string path;
  for (std::string_view part : SplitAny(dir, "/")) {
    path += (path.empty() && dir[0] != '/') ? "" : "/";
    path += part;
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus("create " + path, errno);
    }
  }
  return Status::Ok();
}

}  // namespace

std::string TopologyArchive::PathOf(int version) const {
  char name[32];
  std::snprintf(name, sizeof(name), "/v%06d.json", version);
  return dir_ + name;
}

Result<std::vector<ArchivedVersion>> TopologyArchive::List() const {
  std::vector<ArchivedVersion> out;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return out;
    return ErrnoStatus("topology archive " + dir_, errno);
  }
  while (dirent* e = ::readdir(d)) {
    std::optional<int> v = VersionOfName(e->d_name);
    if (!v) continue;
    ArchivedVersion a;
    a.version = *v;
    a.path = PathOf(*v);
    struct stat st {};
    if (::stat(a.path.c_str(), &st) == 0) {
      a.taken_at_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
    }
    out.push_back(std::move(a));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const ArchivedVersion& a, const ArchivedVersion& b) {
    return a.version < b.version;
  });
  return out;
}

Result<NodeSnapshot> TopologyArchive::Load(int version) const {
  const std::string path = PathOf(version);
  FileReadResult f = ReadSmallFile(path, kMaxSnapshotBytes);
  if (!f.ok) {
    if (f.err == ENOENT) {
      return Status::NotFound("topology version " + std::to_string(version) + " is not in " + dir_);
    }
    return ErrnoStatus("read " + path, f.err);
  }
  Result<NodeSnapshot> s = SnapshotFromJson(f.data);
  if (!s.ok()) return Status::Corruption(path + ": " + s.status().message());
  return s;
}

Result<std::pair<int, NodeSnapshot>> TopologyArchive::Latest(
    std::vector<std::string>* skipped) const {
  Result<std::vector<ArchivedVersion>> list = List();
  if (!list.ok()) return list.status();
  for (auto it = list->rbegin(); it != list->rend(); ++it) {
    Result<NodeSnapshot> s = Load(it->version);
    if (s.ok()) return std::pair<int, NodeSnapshot>(it->version, std::move(*s));
    if (skipped != nullptr) skipped->push_back(s.status().message());
  }
  return Status::NotFound("no topology snapshot in " + dir_);
}

Result<int> TopologyArchive::Append(const NodeSnapshot& s) {
  GW_RETURN_IF_ERROR(MakeDirs(dir_));
  Result<std::vector<ArchivedVersion>> list = List();
  if (!list.ok()) return list.status();
  const int version = list->empty() ? 1 : list->back().version + 1;
  GW_RETURN_IF_ERROR(WriteFileAtomically(PathOf(version), SnapshotToJson(s)));
  // Oldest beyond the cap go; a failure to delete only costs disk.
  const int excess = static_cast<int>(list->size()) + 1 - kMaxVersions;
  for (int i = 0; i < excess; ++i) ::unlink((*list)[static_cast<size_t>(i)].path.c_str());
  return version;
}

}  // namespace gpuwatch::topo
