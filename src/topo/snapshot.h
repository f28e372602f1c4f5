// A live topology snapshot of one node (R8): what NVML says about each GPU and each pair of GPUs
// (PCIe common ancestor, P2P support, every NVLink with its state, version and far end) and what
// sysfs says about placement (the PCI path of each GPU and NIC, NUMA node, local CPU list, the
// RDMA devices with their ports). FinishSnapshot derives the `nvidia-smi topo -m` matrix from
// these facts, so a live snapshot renders, diffs and archives exactly like an imported capture.
//
// The facts are kept, not only the matrix, because the changes that matter are below its
// resolution: a GPU that lost one of 18 NVLinks still shows NV17 to every peer, a PCIe link that
// trained at x8 instead of x16 shows nothing at all.
//
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topo/topology.h"

namespace gpuwatch::topo {

// The PCIe path between two devices, in nvidia-smi's words (NVML's nvmlGpuTopologyLevel_t).
enum class PciPath : int {
  kSingleBridge = 0,  // PIX: at most one PCIe bridge (a switch, or the same board)
  kMultipleBridges,   // PXB: several bridges, no host bridge
  kHostBridge,        // PHB: through the CPU's PCIe host bridge
  kNumaNode,          // NODE: between host bridges of one NUMA node
  kSystem,            // SYS: across NUMA nodes
};
std::string_view PciPathToken(PciPath p);  // "PIX", "PXB", "PHB", "NODE", "SYS"

// The PCIe path between two devices from their sysfs paths below /sys/devices ("pci0000:17/
// 0000:17:01.0/0000:18:00.0"): another root complex is NODE or SYS by NUMA node (NODE when
// either node is unknown: a machine without NUMA information has one node); under one root
// complex, only the host bridge in common is PHB, one switch (each device at most two levels
// below the common bridge: a downstream port and the device) is PIX, deeper is PXB. nullopt
// when a path is empty or not under a "pci" root.
std::optional<PciPath> PathFromSysfs(std::string_view a, std::string_view b,
                                     std::optional<int> numa_a, std::optional<int> numa_b);

// "00000000:18:00.0", "0000:18:00.0" or "18:00.0" → "0000:18:00.0" (sysfs form: 4-digit domain,
// lower case). Empty when the text is not a PCI address.
std::string NormalizePciBusId(std::string_view id);

struct NvLinkFacts {
  unsigned link = 0;
  bool active = false;
  std::string remote_pci_bus_id;  // normalised; empty when NVML did not say
  // "gpu", "nvswitch", "npu" (IBM NPU) or "unknown", from nvmlDeviceGetNvLinkRemoteDeviceType,
  // else from whether the far end is one of this node's GPUs.
  std::string remote_kind = "unknown";
  std::optional<unsigned> remote_gpu;  // the peer's index when remote_kind is "gpu"
  std::optional<unsigned> version;     // NVLink generation (rated bandwidth follows from it)

  bool operator==(const NvLinkFacts&) const = default;
};

struct GpuFacts {
  unsigned index = 0;
  std::string name, uuid;
  std::string pci_bus_id;  // normalised
  std::string pci_path;    // below /sys/devices; empty when sysfs did not have the device
  std::optional<int> numa_node;
  std::optional<std::string> cpu_affinity;  // local_cpulist, "0-55,112-167"
  std::optional<unsigned> pcie_gen, pcie_max_gen, pcie_width, pcie_max_width;
  std::vector<NvLinkFacts> nvlinks;  // every link NVML answered for, in link order

  bool operator==(const GpuFacts&) const = default;
};

struct NicPortFacts {
  unsigned port = 1;
  std::string state;  // "ACTIVE", "DOWN", … (the word after "4: " in sysfs)
  std::optional<double> rate_gbps;
  std::string link_layer;  // "InfiniBand" | "Ethernet"

  bool operator==(const NicPortFacts&) const = default;
};

// An RDMA-capable NIC (/sys/class/infiniband), the NICs nvidia-smi's matrix shows.
struct NicFacts {
  std::string name;  // mlx5_0
  std::string pci_bus_id;
  std::string pci_path;
  std::optional<int> numa_node;
  std::optional<std::string> cpu_affinity;
  std::vector<std::string> netdevs;  // ib0, ens1f0np0 …
  std::vector<NicPortFacts> ports;

  bool operator==(const NicFacts&) const = default;
};

struct NodeSnapshot {
  int64_t taken_at_ms = 0;
  std::string hostname;
  std::string driver_version;
  std::vector<GpuFacts> gpus;
  std::vector<NicFacts> nics;
  // GPU×GPU PCIe path from nvmlDeviceGetTopologyCommonAncestor; nullopt where NVML could not
  // say (FinishSnapshot then falls back to the sysfs paths).
  std::vector<std::vector<std::optional<PciPath>>> gpu_pci_paths;
  // GPU×GPU P2P read support as `nvidia-smi topo -p2p r` prints it: "OK", "CNS" (chipset not
  // supported), "GNS" (GPU not supported), "TNS" (topology not supported), "DIS" (disabled by
  // registry key), "NS" (not supported), "U" (unknown); nullopt where NVML did not answer.
  std::vector<std::vector<std::optional<std::string>>> p2p_read;
  Topology matrix;  // derived by FinishSnapshot
  // What could not be read and why ("GPU3: no /sys/bus/pci/devices/0000:1b:00.0").
  std::vector<std::string> warnings;
};

// Fills `matrix` from the facts. GPU pairs: NV<n> where they share n active NVLinks, directly or
// both through NVSwitches (then n is the smaller of their active switch links, as nvidia-smi
// prints NV18 on HGX H100), else the NVML PCIe path, else the sysfs one, else absent. GPU×NIC
// and NIC×NIC from sysfs paths. CPU and NUMA affinity per GPU.
void FinishSnapshot(NodeSnapshot* s);

// The archive's and the API's JSON form (docs/format/topology.md). FromJson accepts what ToJson
// writes and names the first field that is wrong; the matrix is re-derived, never trusted.
std::string SnapshotToJson(const NodeSnapshot& s);
Result<NodeSnapshot> SnapshotFromJson(std::string_view text);

// One difference between two topologies, in words an operator acts on.
struct TopologyChange {
  // gpu_added, gpu_removed, gpu_moved (same UUID at another PCI address or index),
  // nvlink_lost, nvlink_restored, nvlink_peer_changed, pcie_width_changed, pcie_gen_changed,
  // numa_changed, cpu_affinity_changed, nic_added, nic_removed, nic_moved, nic_port_changed,
  // link_changed (a matrix cell).
  std::string kind;
  std::string subject;  // "GPU3", "GPU3 NVLink 7", "mlx5_2 port 1", "GPU0-GPU5"
  std::string before, after;
  std::string summary;  // "GPU3 PCIe width x16 → x8 (max x16)"

  bool operator==(const TopologyChange&) const = default;
};

// Changes from `a` to `b`. Between two snapshots the facts are compared and the matrix cells
// that the facts do not already explain; current PCIe generation is not compared (GPUs lower
// it when idle by design) but the maximum is, and the width is.
std::vector<TopologyChange> DiffSnapshots(const NodeSnapshot& a, const NodeSnapshot& b);
// Changes between two matrices (for imported `topo -m` captures, which have nothing else).
std::vector<TopologyChange> DiffMatrices(const Topology& a, const Topology& b);

}  // namespace gpuwatch::topo
