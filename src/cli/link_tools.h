// `gpuwatch topo import FILE [--json]` and `gpuwatch nccl FILE [--topo TOPOFILE] [--json]`:
// the offline side of the link layer (R8, R9) — a `nvidia-smi topo -m` capture parsed into the
// topology model, and an NCCL_DEBUG=INFO log into versions, ranks and the transport of every
// channel, compared with the topology (`nvlink_fallback`, `net_fallback`). The JSON shapes are a
// contract for scripted checks (issue 5).
#pragma once

#include <ostream>
#include <string>

namespace gpuwatch::cli {

// Exit codes: 0 parsed (warnings on stderr), 2 unreadable file or nothing parseable in it.
int RunTopoImport(const std::string& file, bool json, std::ostream& out, std::ostream& err);
int RunNcclAnalysis(const std::string& file, const std::string& topo_file, bool json,
                    std::ostream& out, std::ostream& err);

}  // namespace gpuwatch::cli
