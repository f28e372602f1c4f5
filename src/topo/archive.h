// TopologyArchive: the node's topology snapshots, versioned and timestamped, one JSON file per
// version under a directory (`<data-dir>/topology/v000001.json`, …; docs/format/topology.md).
// A version is written only when the topology changed, so the archive is the node's topology
// history and the latest version is what the next check compares against.
//
// Writes are atomic (temporary file, fsync, rename, fsync of the directory): a crash leaves the
// previous version intact. A file that does not parse is skipped with a warning, never fatal —
// the check then compares against the newest version that does.
//
// Thread-safety: none; one owner (the agent's topology check, or a CLI command).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "topo/snapshot.h"

namespace gpuwatch::topo {

struct ArchivedVersion {
  int version = 0;
  int64_t taken_at_ms = 0;
  std::string path;
};

class TopologyArchive {
 public:
  explicit TopologyArchive(std::string dir) : dir_(std::move(dir)) {}

  // Versions present, oldest first (from the file names; files are not parsed). A missing
  // directory is an empty archive.
  Result<std::vector<ArchivedVersion>> List() const;
  Result<NodeSnapshot> Load(int version) const;
  // The newest version that parses; NotFound when there is none. `skipped` collects the
  // newer files that did not parse, with the reason.
  Result<std::pair<int, NodeSnapshot>> Latest(std::vector<std::string>* skipped = nullptr) const;
  // Writes `s` as the next version and returns its number.
  Result<int> Append(const NodeSnapshot& s);

  const std::string& dir() const { return dir_; }

  // At most this many versions are kept; Append deletes the oldest beyond it. A node's
  // topology changes a handful of times in its life; a flapping link could otherwise write a
  // version every hour forever.
  static constexpr int kMaxVersions = 1000;

 private:
  std::string PathOf(int version) const;
  std::string dir_;
};

}  // namespace gpuwatch::topo
