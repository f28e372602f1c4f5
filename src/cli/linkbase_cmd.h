// `gpuwatch linkbase import|show|compare` (R12): nccl-tests output (all_reduce_perf,
// all_gather_perf, …) stored as a node set's link baseline — bus bandwidth per message size —
// and later runs judged against it. The store and the verdict rule are nccl/linkbase.h; this is
// the command-line face: reading the file, choosing key, collective and directory, the table
// and the JSON (a contract for scripted checks; keep the shapes).
//
//   import FILE [--name KEY] [--collective C]   the next version; compared with the previous
//   show                                        every key and collective, versions, peak busbw
//   compare FILE [--name KEY] [--collective C]  judged against the latest version, not stored
//
// The directory: --dir, else <--data-dir>/linkbase, else kDefaultLinkbaseDir.
//
// Exit codes: 0 done (compare: ok); 2 unreadable or unusable input, no baseline, a store error;
// compare only: 3 degraded, 4 insufficient (no common size of 1 MiB or more: nothing judged).
#pragma once

#include <ostream>
#include <string>

#include "cli/command.h"

namespace gpuwatch::cli {

inline constexpr char kDefaultLinkbaseDir[] = "/var/lib/gpuwatch/linkbase";
inline constexpr int kExitDegraded = 3;
inline constexpr int kExitInsufficient = 4;

struct LinkbaseOptions {
  std::string file;        // the nccl-tests output (import, compare)
  std::string name;        // --name: the key; "" = the capture's node set
  std::string collective;  // --collective: when the capture does not say which it ran
  std::string dir;         // --dir
  std::string data_dir;    // --data-dir: the agent's; baselines under <data-dir>/linkbase
  bool json = false;
};

// --dir, else <data_dir>/linkbase, else kDefaultLinkbaseDir.
std::string LinkbaseDir(const LinkbaseOptions& o);

int RunLinkbaseImport(const LinkbaseOptions& o, std::ostream& out, std::ostream& err);
int RunLinkbaseShow(const LinkbaseOptions& o, std::ostream& out, std::ostream& err);
int RunLinkbaseCompare(const LinkbaseOptions& o, std::ostream& out, std::ostream& err);

// `gpuwatch linkbase import | show | compare`.
void RegisterLinkbaseCommands(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
