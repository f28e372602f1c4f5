// `gpuwatch topo [show|list|diff]`: the live side of the topology (R8). `topo` alone probes this
// node (NVML + sysfs) and prints the `nvidia-smi topo -m` matrix with the facts below it (NVLinks
// per GPU, PCIe links, NICs and their ports); `topo list` and `topo show V` read the agent's
// archive (<data-dir>/topology/); `topo diff [A] [B]` names what changed between two topologies,
// each an archived version ("v3" or "3"), "live", or a file (a snapshot JSON or a `topo -m`
// capture). Without arguments diff compares the newest archived version with the live node.
#pragma once

#include <ostream>
#include <string>

#include "cli/command.h"

namespace gpuwatch::cli {

struct TopoOptions {
  std::string nvml_lib;    // for "live"
  std::string root = "/";  // sysfs root for "live" (tests use a fixture tree)
  std::string data_dir;    // the agent's --data-dir (archive at <data-dir>/topology)
  bool json = false;
  bool p2p = false;  // also print the P2P read matrix
};

// Exit codes: 0 done (for diff: no change), 1 diff found changes, 2 error (message on err).
int RunTopoLive(const TopoOptions& o, std::ostream& out, std::ostream& err);
int RunTopoList(const TopoOptions& o, std::ostream& out, std::ostream& err);
int RunTopoShow(const TopoOptions& o, const std::string& version, std::ostream& out,
                std::ostream& err);
int RunTopoDiff(const TopoOptions& o, const std::string& a, const std::string& b, std::ostream& out,
                std::ostream& err);

// `gpuwatch topo [list | show | diff | import]` and `gpuwatch nccl`.
void RegisterTopoCommands(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
