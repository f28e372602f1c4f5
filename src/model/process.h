// Attribution model (R4): a GPU process with everything needed to name its owner.
// Value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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
};

}  // namespace gpuwatch::model
