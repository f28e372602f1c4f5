// NCCL transport diagnosis (R9): from a parsed NCCL log, and optionally the node's topology,
// the link-level findings of ../shared/spec/findings.md that the log proves —
//   nvlink_fallback: GPUs of one node that have NVLink talk over shared memory or the network
//                    (or NCCL was told not to use P2P between them at all);
//   net_fallback:    inter-node traffic goes over TCP sockets although RDMA NICs are present.
//
// Conservative by design: a finding needs both the fallback in the log and evidence that the
// better path exists (the topology, or the log itself: NVLS, MNNVL, P2P read, an SXM board,
// listed IB devices, IB settings). P2P transports ("P2P/IPC", "P2P/CUMEM", "P2P/direct
// pointer") name the mechanism, not the path: NCCL routes P2P over NVLink whenever the pair
// has it, so P2P between NVLink GPUs is not a fallback.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/cause.h"
#include "nccl/nccl_log.h"

namespace gpuwatch::nccl {

// What the topology says, as plain strings, so this module does not depend on the topology
// module (the CLI converts). One matrix stands for every host of the log (nodes of a job are
// alike).
struct TopoHint {
  // gpu_links[i][j]: the `nvidia-smi topo -m` entry between GPU i and GPU j (NVML indices):
  // "X", "NV<n>", "PIX", "PXB", "PHB", "NODE", "SYS".
  std::vector<std::vector<std::string>> gpu_links;
  std::vector<std::string> nics;  // "mlx5_0", …
  bool ib_present = false;        // an IB/RoCE (RDMA) NIC is present

  bool operator==(const TopoHint&) const = default;
};

// One finding in the form of findings.md (offline: no first_seen / last_seen).
struct Finding {
  model::Cause cause = model::Cause::kNvlinkFallback;  // nvlink/net_fallback, version_mismatch
  model::Severity severity = model::Severity::kWarning;
  std::string node;
  std::optional<int> gpu;       // set when the finding concerns exactly one GPU pair
  std::optional<int> peer_gpu;  // its other end
  std::string nic;              // "" unless one RDMA NIC is the one left unused
  std::string summary;
  std::vector<std::string> evidence;  // log lines as `line 12: "…"`, topology facts
  std::string action;
};

// One finding per cause and node. `topo` may be null.
std::vector<Finding> AnalyzeNccl(const NcclLogReport& report, const TopoHint* topo);

// findings.md's JSON form of one finding (gpu, peer_gpu, nic only when known).
nlohmann::json FindingJson(const Finding& f);

// The JSON report of a log and its findings (scripted checks rely on this shape):
//   {"nccl_version": "2.18.3", "ranks": 8, "nodes": 1,
//    "transports": {"P2P/IPC": 48, "SHM": 0, "NET/IB": 0, …},
//    "channels": [{"channel": 0, "from_rank": 0, "to_rank": 1, "transport": "P2P/IPC"}, …],
//    "errors": ["line 12: …"], "findings": [ … ]}
// Unknown values are null; "transports" always lists P2P/IPC, P2P/CUMEM, P2P/NVL, P2P/direct,
// SHM, NET/IB, NET/Socket, COLLNET and NVLS, plus any other family seen.
nlohmann::json NcclReportJson(const NcclLogReport& report, const std::vector<Finding>& findings);

}  // namespace gpuwatch::nccl
