// The host's half of a topology snapshot (R8), from sysfs under an injectable root: where each
// GPU sits in the PCI tree (its path below /sys/devices), its NUMA node and local CPU list, and
// the RDMA NICs (/sys/class/infiniband) with their PCI placement, net devices and ports.
//
// Every file is optional: a GPU whose PCI device sysfs does not have (a container without /sys,
// the mock NVML on a machine without those GPUs) keeps its NVML facts and gets a warning naming
// the missing path; an unreadable port attribute leaves that attribute absent. Never a crash,
// never a guess.
//
// Thread-safety: stateless functions; call from one thread per snapshot.
#pragma once

#include <cstdint>
#include <string>

#include "collect/gpu_source.h"
#include "common/status.h"
#include "topo/snapshot.h"

namespace gpuwatch::collect {

// Fills pci_path, numa_node and cpu_affinity of each GPU in `s` (by its pci_bus_id) and
// appends the RDMA NICs. `root` is prepended to /sys paths ("" or "/" in production).
void ProbeSysfsTopology(const std::string& root, topo::NodeSnapshot* s);

// A whole snapshot: the GPU source's facts (NotSupported is fine: sysfs only), sysfs, then
// FinishSnapshot. `gpu` may be null (no GPU source).
topo::NodeSnapshot ProbeNodeTopology(GpuSource* gpu, const std::string& root,
                                     const std::string& hostname, int64_t now_ms);

}  // namespace gpuwatch::collect
