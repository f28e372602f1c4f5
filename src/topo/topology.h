// The PCIe/NVLink topology of one node as `nvidia-smi topo -m` reports it: which GPUs and NICs
// there are, how each pair is connected (X, NV<n>, PIX, PXB, PHB, NODE, SYS), and each GPU's
// CPU and NUMA affinity. Entries are kept exactly as printed, so a token this code does not
// know survives verbatim (and the parser says so in `warnings`).
//
// A topology read from a cut excerpt is partial: the matrix keeps every column of the header
// and marks the cells of rows that were not printed as absent ("" in gpu_links, nullopt
// elsewhere), and `warnings` says what is missing.
//
// Thread-safety: value types and pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuwatch::topo {

struct Topology {
  std::vector<std::string> gpu_names;  // "GPU0", "GPU1", … in column order
  // As the NIC Legend names them ("mlx5_0"), else the column label ("NIC0", or "mlx5_0" in
  // older nvidia-smi versions, which print the device name as the label).
  std::vector<std::string> nic_names;
  // GPU×GPU, exactly as printed; "" where the cell was not printed (row cut). The parser never
  // produces "" for a printed cell: whitespace separates cells, and "N/A" reads as absent.
  std::vector<std::vector<std::string>> gpu_links;
  // GPU×NIC from the GPU rows, or from the NIC row's cell when the GPU row was not printed.
  std::vector<std::vector<std::optional<std::string>>> gpu_nic_links;
  // NIC×NIC from the NIC rows; nullopt where that row was not printed.
  std::vector<std::vector<std::optional<std::string>>> nic_links;
  // Per GPU. nullopt when the column is missing, the row was cut, or the value is "N/A".
  std::vector<std::optional<std::string>> cpu_affinity;  // "0-55,112-167"
  std::vector<std::optional<int>> numa_affinity;         // the node when it is one integer
  // The NUMA Affinity cell verbatim when it is not one integer (a GPU affine to several nodes
  // prints "6-7"); nullopt otherwise. numa_affinity is then nullopt.
  std::vector<std::optional<std::string>> numa_affinity_text;
  std::vector<std::optional<int>> gpu_numa_id;  // "GPU NUMA ID" (Grace/C2C systems), mostly N/A
  // What was partial or unknown, e.g. "table cut after GPU5 row (missing rows GPU6..NIC3)".
  std::vector<std::string> warnings;

  bool operator==(const Topology&) const = default;
};

// The kind of path a matrix entry names. Ordered from closest to farthest, so comparing levels
// compares paths: X < NV# < PIX < PXB < PHB < NODE < SYS < unknown.
enum class LinkLevel : int {
  kSelf = 0,  // X
  kNvlink,    // NV<n>: a bonded set of n NVLinks
  kPix,       // at most one PCIe bridge
  kPxb,       // several PCIe bridges, no host bridge
  kPhb,       // a PCIe host bridge (the CPU)
  kNode,      // host bridges within one NUMA node
  kSys,       // across NUMA nodes (SMP interconnect); older drivers print SOC
  kUnknown,   // anything else, including "" (absent)
};

LinkLevel ClassifyLink(std::string_view entry);
std::string_view LinkLevelName(LinkLevel level);  // "X", "NV#", "PIX", … "unknown"
// static_cast<int>(ClassifyLink(entry)): smaller is closer.
int LinkRank(std::string_view entry);
// NV18 → 18; 0 for anything that is not NV followed by digits (or does not fit an int).
int NvlinkCount(std::string_view entry);
// <0 when `a` is the closer path, 0 when equal, >0 when `b` is closer. Levels first; between
// two NVLink entries more links is closer (NV18 before NV6).
int CompareLinks(std::string_view a, std::string_view b);

}  // namespace gpuwatch::topo
