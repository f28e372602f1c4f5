// Process attribution (R4): who owns a GPU process — container, Kubernetes pod, user, batch job
// — and under which CUDA index the process itself sees the GPU.
//
// Two layers. The free functions are pure parsers of procfs text and environment values (no
// I/O, no logging; safe on any bytes, fuzzed by attribution_fuzz.cc). Attributor reads
// /proc/<pid>/{stat,cgroup,status,environ,comm} and /etc/passwd under an injectable root and
// caches each process by (pid, start time), so a process is resolved once however long it runs.
//
// Thread-safety: the free functions are thread-safe. Attributor is not; one collector thread
// owns an instance.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "model/gpu.h"
#include "model/process.h"

namespace gpuwatch::collect {

// ---- cgroup -------------------------------------------------------------------------------

struct ContainerRef {
  std::string id;       // 64 lower-case hex; "" for a host process
  std::string runtime;  // docker | containerd | cri-o | podman | "" (model/process.h vocabulary)
  std::string pod_uid;  // Kubernetes pod UID with dashes; "" outside a pod
};

// Parses the whole /proc/<pid>/cgroup text ("hier:controllers:path" lines, v1, v2 or hybrid).
// Recognized path components: docker-<id>.scope, cri-containerd-<id>.scope, crio-<id>[.scope],
// libpod-<id>.scope, nerdctl-<id>.scope, a bare <id> under /docker, /ecs or a kubepods
// hierarchy, pod<uid> and kubepods-*-pod<uid_with_underscores>.slice. When containers nest
// (docker-in-docker, kind) the innermost id wins: that is the one running the process.
// conmon scopes (libpod-conmon-, crio-conmon-) are not containers.
ContainerRef ParseCgroup(std::string_view proc_pid_cgroup);

// ---- CUDA device visibility ---------------------------------------------------------------

struct VisibleDeviceRef {
  enum class Kind {
    kIndex,      // "2": an index into the devices the process could otherwise see
    kGpuUuid,    // "GPU-8932f937-…" or a prefix of it ("GPU-8932f937"), as CUDA allows
    kMigUuid,    // "MIG-2a3f…" (R470+ form), full UUID or prefix
    kMigLegacy,  // "MIG-GPU-<gpu uuid>/<gi>/<ci>" (R450 form)
  };
  Kind kind = Kind::kIndex;
  unsigned index = 0;                // kIndex
  std::string uuid;                  // kGpuUuid/kMigUuid as written; kMigLegacy: the GPU-… part
  unsigned gpu_instance_id = 0;      // kMigLegacy
  unsigned compute_instance_id = 0;  // kMigLegacy

  bool operator==(const VisibleDeviceRef&) const = default;
};

// Parses a CUDA_VISIBLE_DEVICES value the way CUDA does: comma-separated entries, enumerated
// in the listed order; the first syntactically invalid entry hides itself and every entry after
// it. So "" → no devices; "-1", "NoDevFiles" (set by Slurm for a job without GPUs) and "void"
// → no devices; "0,1,-1,2" → {0, 1}. It never fails: CUDA never rejects the variable, it only
// sees fewer devices. Entries that are valid syntax but name no device (index out of range, an
// ambiguous prefix, a repeat) end the list too, which only ResolveVisibleIndex can know.
// Blanks around entries are trimmed (a lenience: CUDA's own tokenizer is undocumented here).
std::vector<VisibleDeviceRef> ParseCudaVisibleDevices(std::string_view value);

// NVIDIA_VISIBLE_DEVICES as the NVIDIA container runtime reads it: which physical GPUs a
// container was given.
struct ContainerDevices {
  bool all = false;                       // "all"
  std::vector<VisibleDeviceRef> devices;  // physical NVML indices or UUIDs; empty: none
};
// "all"; "none", "void" and "" give no GPU. A list of NVML indices, GPU UUIDs or MIG UUIDs.
// Any other form (the "<gpu>:<mig>" MIG index form, the volume-mounts strategy's path
// "/var/run/nvidia-container-devices") is InvalidArgument: the container's devices are then
// unknown and no visible index is claimed.
Result<ContainerDevices> ParseNvidiaVisibleDevices(std::string_view value);

// The device a process uses: a whole GPU, or one MIG instance on it.
struct DeviceTarget {
  std::string_view gpu_uuid;                                     // physical GPU-… UUID
  std::optional<unsigned> gpu_instance_id, compute_instance_id;  // both set for a MIG instance
};

// The CUDA index under which a process sees `target`, or nullopt when it does not see it or it
// cannot be known.
//   `gpus`: every physical GPU in NVML order (index, uuid, MIG instances).
//   `container`: the devices of the process's container (NVIDIA_VISIBLE_DEVICES); nullptr when
//     not in a container or the variable is unset — every GPU is then visible.
//   `cuda_visible`: parsed CUDA_VISIBLE_DEVICES; nullptr when unset.
// Base order: a container sees its GPUs re-indexed from 0 in PCI bus order — NOT in the listed
// order ("1,0" still shows physical 0 as index 0), because the runtime only exposes device
// nodes and the driver enumerates them by bus. Without CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA orders
// "fastest first"; gpuwatch assumes that equals PCI (= NVML) order, which holds on the
// homogeneous nodes it targets (ties are broken by bus id) and is wrong only on mixed-model
// hosts. A whole-GPU entry on a MIG-enabled GPU matches any instance of it.
std::optional<int> ResolveVisibleIndex(const std::vector<VisibleDeviceRef>* cuda_visible,
                                       const ContainerDevices* container,
                                       const DeviceTarget& target,
                                       const std::vector<model::GpuStaticInfo>& gpus);

// ---- procfs text --------------------------------------------------------------------------

// /proc/<pid>/environ: NUL-terminated "KEY=VALUE" entries. Bytes are kept as they are (no
// UTF-8 assumption). A final entry without its NUL was cut short (a read limit, or a process
// that rewrote its environment area) and is dropped rather than reported with a cut value.
// Entries without '=' or with an empty key are skipped; for a repeated key the first wins, as
// getenv(3) does.
std::map<std::string, std::string> ParseEnviron(std::string_view proc_environ_bytes);

struct StatusIds {
  std::optional<uint32_t> uid;  // real uid (first field of "Uid:")
  std::vector<uint32_t> nspid;  // "NSpid:" outermost first, innermost last (Linux 4.1+)
  std::optional<std::vector<unsigned>> cpus_allowed;  // "Cpus_allowed_list:" (sched affinity)
};

// A kernel CPU list ("0-55,112-167", "3", "" = none): the CPUs, ascending, deduplicated.
// nullopt when malformed or naming a CPU above kMaxCpu (bounded work on any input).
inline constexpr unsigned kMaxCpu = 65535;
std::optional<std::vector<unsigned>> ParseCpuList(std::string_view list);
StatusIds ParseStatusIds(std::string_view proc_pid_status);

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot). The comm field may hold
// spaces and ')', so fields are counted after the last ')'.
std::optional<uint64_t> ParseStatStartTime(std::string_view proc_pid_stat);

// /etc/passwd: uid → first name listed for it. Comment, blank and NIS ("+"/"-") lines skipped.
std::unordered_map<uint32_t, std::string> ParsePasswd(std::string_view etc_passwd);

// ---- Attributor ---------------------------------------------------------------------------

// One process NVML reported on one GPU.
struct GpuProcessRef {
  unsigned gpu_index = 0;  // physical NVML index (model::GpuStaticInfo::index)
  model::GpuProcess process;
};

class Attributor {
 public:
  // `job_env_var` is read first; when the process lacks it, the batch schedulers' own job
  // variables follow in kJobEnvFallbacks order.
  explicit Attributor(std::string root_dir = "/", std::string job_env_var = "SLURM_JOB_ID");

  // Scheduler job-id variables tried after the configured one. Each is set only inside a job of
  // its scheduler, so none can misfire. TORCHELASTIC_RUN_ID is deliberately not here: torchrun
  // defaults it to "none" and it names a rendezvous, not a job.
  static constexpr std::string_view kJobEnvFallbacks[] = {"SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"};

  // One attribution per entry of `procs`, in order. Call once per tick with the processes of
  // every GPU together: pids absent from the call are evicted from the cache. A process that
  // vanished or cannot be read still gets an entry with what NVML said.
  std::vector<model::ProcessAttribution> Attribute(const std::vector<GpuProcessRef>& procs,
                                                   const std::vector<model::GpuStaticInfo>& gpus);

  size_t cached_processes() const { return cache_.size(); }

 private:
  // Everything about a process that does not depend on which GPU it is seen on.
  struct ProcInfo {
    std::optional<uint64_t> start_time;  // cache key together with the pid
    std::optional<uint32_t> container_pid;
    std::string command;
    std::optional<uint32_t> uid;
    std::string user;
    ContainerRef container;
    std::string job_id;
    bool env_known = false;  // environ was readable: visibility can be judged
    std::optional<std::vector<VisibleDeviceRef>> cuda_visible;
    bool container_devices_known = true;  // false: NVIDIA_VISIBLE_DEVICES in a form not parsed
    std::optional<ContainerDevices> container_devices;
  };

  ProcInfo Resolve(uint32_t pid, std::optional<uint64_t> start_time);
  std::string UserName(uint32_t uid);
  // NUMA (R11): node -> its CPUs (from /sys/devices/system/node), and each GPU's node from its
  // PCI device in sysfs, read once per Attribute call / cached per bus id.
  void LoadNumaNodes();
  std::optional<int> GpuNumaNode(const std::string& pci_bus_id);
  std::map<unsigned, std::vector<unsigned>> numa_cpus_;
  std::unordered_map<std::string, std::optional<int>> gpu_numa_;

  std::string root_;
  std::string job_env_var_;
  std::unordered_map<uint32_t, ProcInfo> cache_;
  std::unordered_map<uint32_t, std::string> passwd_;
  int64_t passwd_mtime_ns_ = -1;  // reloaded when /etc/passwd changes
};

}  // namespace gpuwatch::collect
