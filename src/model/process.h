// Attribution model (R4): a GPU process with everything needed to name its owner.
// Value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuwatch::model {

struct ProcessAttribution {
  uint32_t pid = 0;                       // host pid (as NVML reports it)
  std::optional<uint32_t> container_pid;  // innermost NSpid, when in a pid namespace
  unsigned gpu_index = 0;                 // physical NVML index
  std::string gpu_uuid;
  std::optional<unsigned> gpu_instance_id, compute_instance_id;  // MIG
  std::optional<uint64_t> used_memory_bytes;
  std::string command;  // /proc/PID/comm
  std::optional<uint32_t> uid;
  std::string user;                  // name, or the uid in decimal when unresolved
  std::string container_id;          // 64-hex (docker/containerd/podman/cri-o), "" on the host
  std::string container_runtime;     // docker | containerd | cri-o | podman | ""
  std::string pod_uid;               // Kubernetes pod UID when the cgroup shows one
  std::string job_id;                // SLURM_JOB_ID or the configured env var
  std::optional<int> visible_index;  // the CUDA index this process sees the GPU as
  // NUMA (R11): the nodes the process's CPU affinity covers (empty: unknown), and the GPU's.
  std::vector<unsigned> cpu_numa_nodes;
  std::optional<int> gpu_numa_node;
  // True when both are known and the affinity excludes the GPU's node: the process's host
  // memory traffic to its GPU crosses the socket interconnect.
  bool numa_mismatch() const {
    if (!gpu_numa_node || *gpu_numa_node < 0 || cpu_numa_nodes.empty()) return false;
    for (unsigned n : cpu_numa_nodes)
      if (static_cast<int>(n) == *gpu_numa_node) return false;
    return true;
  }
};

}  // namespace gpuwatch::model
