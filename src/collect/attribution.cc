#include "collect/attribution.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <unordered_set>
#include <utility>

#include "common/log.h"
#include "common/strings.h"

namespace gpuwatch::collect {
namespace {

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// Container ids of every runtime gpuwatch knows are sha256 hex digests.
bool IsContainerId(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), IsLowerHex);
}

// Pod UIDs are RFC 4122 UUIDs (36 chars), except static pods whose UID is a 32-hex config hash.
bool IsPodUid(std::string_view s) {
  if (s.size() != 32 && s.size() != 36) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsLowerHex(c) || c == '-'; });
}

bool IsUuidBody(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-';
  });
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "<prefix>-<id>[.scope]" units that systemd (or cri-o's cgroupfs manager) names after the
// container. Longer prefixes that share a start must come first.
struct ScopePrefix {
  std::string_view prefix;
  std::string_view runtime;
};
constexpr ScopePrefix kScopePrefixes[] = {
    {"cri-containerd-", "containerd"},
    {"docker-", "docker"},
    {"crio-", "cri-o"},
    {"libpod-", "podman"},
    {"nerdctl-", "containerd"},
};

// Runtime of a bare 64-hex component, from its nearest recognizable ancestor.
std::string_view BareIdRuntime(const std::vector<std::string_view>& parts, size_t i) {
  while (i-- > 0) {
    if (parts[i] == "docker" || parts[i] == "ecs") return "docker";
    // cgroupfs driver: /kubepods/<qos>/pod<uid>/<id>. containerd and dockershim both write this
    // shape; dockershim is gone since Kubernetes 1.24, so containerd is the better guess.
    // (cri-o writes crio-<id> here, matched by prefix.)
    if (parts[i].find("kubepods") != std::string_view::npos) return "containerd";
  }
  return "";
}

ContainerRef ParseCgroupPath(std::string_view path) {
  ContainerRef ref;
  std::vector<std::string_view> parts = SplitAny(path, "/");
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string_view p = parts[i];
    // Pod UID: "pod<uid>" (cgroupfs) or "kubepods-<qos>-pod<uid_with_underscores>.slice"
    // (systemd, which reserves '-' as its hierarchy separator; kind nodes prefix "kubelet-").
    if (StartsWith(p, "pod") && IsPodUid(p.substr(3))) {
      ref.pod_uid = std::string(p.substr(3));
      continue;
    }
    if (p.find("kubepods") != std::string_view::npos && EndsWith(p, ".slice")) {
      const size_t at = p.rfind("-pod");
      if (at != std::string_view::npos) {
        std::string uid(p.substr(at + 4, p.size() - at - 4 - 6));
        std::replace(uid.begin(), uid.end(), '_', '-');
        if (IsPodUid(uid)) ref.pod_uid = std::move(uid);
      }
      continue;
    }
    if (IsContainerId(p)) {
      ref.id = std::string(p);
      ref.runtime = std::string(BareIdRuntime(parts, i));
      continue;
    }
    if (EndsWith(p, ".scope")) p.remove_suffix(6);
    for (const ScopePrefix& sp : kScopePrefixes) {
      if (StartsWith(p, sp.prefix) && IsContainerId(p.substr(sp.prefix.size()))) {
        ref.id = std::string(p.substr(sp.prefix.size()));
        ref.runtime = std::string(sp.runtime);
        break;
      }
    }
  }
  return ref;
}

// One entry of a device list; nullopt when it is not valid syntax.
std::optional<VisibleDeviceRef> ParseDeviceEntry(std::string_view e) {
  e = TrimWhitespace(e);
  VisibleDeviceRef ref;
  if (!e.empty() && std::all_of(e.begin(), e.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    auto idx = ParseInt<unsigned>(e);
    if (!idx) return std::nullopt;  // overflow
    ref.kind = VisibleDeviceRef::Kind::kIndex;
    ref.index = *idx;
    return ref;
  }
  if (StartsWith(e, "MIG-GPU-")) {
    std::vector<std::string_view> f = SplitAny(e.substr(4), "/", /*skip_empty=*/false);
    if (f.size() != 3 || !IsUuidBody(f[0].substr(4))) return std::nullopt;
    auto gi = ParseInt<unsigned>(f[1]);
    auto ci = ParseInt<unsigned>(f[2]);
    if (!gi || !ci) return std::nullopt;
    ref.kind = VisibleDeviceRef::Kind::kMigLegacy;
    ref.uuid = std::string(f[0]);
    ref.gpu_instance_id = *gi;
    ref.compute_instance_id = *ci;
    return ref;
  }
  if (StartsWith(e, "MIG-") || StartsWith(e, "GPU-")) {
    if (!IsUuidBody(e.substr(4))) return std::nullopt;
    ref.kind = e[0] == 'M' ? VisibleDeviceRef::Kind::kMigUuid : VisibleDeviceRef::Kind::kGpuUuid;
    ref.uuid = std::string(e);
    return ref;
  }
  return std::nullopt;
}

bool PrefixMatch(std::string_view uuid, std::string_view prefix) {
  if (prefix.size() > uuid.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; };
    if (lower(uuid[i]) != lower(prefix[i])) return false;
  }
  return true;
}

// A device as CUDA enumerates it: a whole GPU, or one MIG instance on it.
struct Logical {
  size_t gpu = 0;             // position in `gpus`
  std::optional<size_t> mig;  // position in gpus[gpu].mig_instances
  bool operator==(const Logical&) const = default;
};

// Resolves `ref` among `candidates` (positions into gpus; MIG refs may pick an instance of a
// whole-GPU candidate). nullopt when nothing or more than one thing matches.
std::optional<Logical> Match(const VisibleDeviceRef& ref, const std::vector<Logical>& candidates,
                             const std::vector<model::GpuStaticInfo>& gpus) {
  std::optional<Logical> found;
  int hits = 0;
  for (const Logical& c : candidates) {
    const model::GpuStaticInfo& g = gpus[c.gpu];
    switch (ref.kind) {
      case VisibleDeviceRef::Kind::kIndex:
        if (g.index == ref.index && !c.mig) {
          found = c;
          ++hits;
        }
        break;
      case VisibleDeviceRef::Kind::kGpuUuid:
        if (PrefixMatch(g.uuid, ref.uuid)) {
          found = c;
          ++hits;
        }
        break;
      case VisibleDeviceRef::Kind::kMigUuid:
      case VisibleDeviceRef::Kind::kMigLegacy:
        if (ref.kind == VisibleDeviceRef::Kind::kMigLegacy && !PrefixMatch(g.uuid, ref.uuid)) {
          break;
        }
        for (size_t m = 0; m < g.mig_instances.size(); ++m) {
          if (c.mig && *c.mig != m) continue;
          const model::MigInstanceInfo& mi = g.mig_instances[m];
          const bool ok = ref.kind == VisibleDeviceRef::Kind::kMigUuid
                              ? PrefixMatch(mi.uuid, ref.uuid)
                              : mi.gpu_instance_id == ref.gpu_instance_id &&
                                    mi.compute_instance_id == ref.compute_instance_id;
          if (ok) {
            found = Logical{c.gpu, m};
            ++hits;
          }
        }
        break;
    }
  }
  if (hits != 1) return std::nullopt;
  return found;
}

}  // namespace

ContainerRef ParseCgroup(std::string_view text) {
  ContainerRef pod_only;
  for (std::string_view line : SplitAny(text, "\n")) {
    // "hier-ID:controller-list:path"; the path itself may contain ':'.
    const size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    const size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    ContainerRef ref = ParseCgroupPath(line.substr(c2 + 1));
    // v1 hierarchies usually agree; in hybrid mode the v2 line may be just "/". Take the first
    // line that names a container.
    if (!ref.id.empty()) return ref;
    if (pod_only.pod_uid.empty() && !ref.pod_uid.empty()) pod_only = std::move(ref);
  }
  return pod_only;
}

std::vector<VisibleDeviceRef> ParseCudaVisibleDevices(std::string_view value) {
  std::vector<VisibleDeviceRef> out;
  if (value.empty()) return out;
  for (std::string_view e : SplitAny(value, ",", /*skip_empty=*/false)) {
    std::optional<VisibleDeviceRef> ref = ParseDeviceEntry(e);
    if (!ref) break;  // CUDA: an invalid entry hides itself and all that follow
    out.push_back(std::move(*ref));
  }
  return out;
}

Result<ContainerDevices> ParseNvidiaVisibleDevices(std::string_view value) {
  ContainerDevices out;
  const std::string_view v = TrimWhitespace(value);
  if (v.empty() || v == "void" || v == "none") return out;
  for (std::string_view e : SplitAny(v, ",")) {
    if (TrimWhitespace(e) == "all") {
      out.all = true;
      out.devices.clear();
      return out;
    }
    std::optional<VisibleDeviceRef> ref = ParseDeviceEntry(e);
    if (!ref) {
      return Status::InvalidArgument("NVIDIA_VISIBLE_DEVICES entry '" + std::string(e) +
                                     "' is not an index or a UUID");
    }
    out.devices.push_back(std::move(*ref));
  }
  return out;
}

std::optional<int> ResolveVisibleIndex(const std::vector<VisibleDeviceRef>* cuda_visible,
                                       const ContainerDevices* container,
                                       const DeviceTarget& target,
                                       const std::vector<model::GpuStaticInfo>& gpus) {
  std::vector<Logical> all;
  for (size_t i = 0; i < gpus.size(); ++i) all.push_back({i, std::nullopt});
  std::sort(all.begin(), all.end(), [&](const Logical& a, const Logical& b) {
    return gpus[a.gpu].index < gpus[b.gpu].index;
  });

  // What the process could see before CUDA_VISIBLE_DEVICES: the host's GPUs, or its
  // container's, re-indexed in bus order whatever order they were listed in.
  std::vector<Logical> base;
  if (container == nullptr || container->all) {
    base = all;
  } else {
    for (const VisibleDeviceRef& ref : container->devices) {
      std::optional<Logical> l = Match(ref, all, gpus);
      if (!l) return std::nullopt;  // the container's devices are not known exactly
      if (std::find(base.begin(), base.end(), *l) == base.end()) base.push_back(*l);
    }
    std::sort(base.begin(), base.end(), [&](const Logical& a, const Logical& b) {
      if (gpus[a.gpu].index != gpus[b.gpu].index) return gpus[a.gpu].index < gpus[b.gpu].index;
      return a.mig < b.mig;
    });
  }

  std::vector<Logical> visible;
  if (cuda_visible == nullptr) {
    visible = std::move(base);
  } else {
    for (const VisibleDeviceRef& ref : *cuda_visible) {
      std::optional<Logical> l;
      if (ref.kind == VisibleDeviceRef::Kind::kIndex) {
        if (ref.index < base.size()) l = base[ref.index];
      } else {
        l = Match(ref, base, gpus);
      }
      // Out of range, unknown, ambiguous or repeated: CUDA stops enumerating here.
      if (!l || std::find(visible.begin(), visible.end(), *l) != visible.end()) break;
      visible.push_back(*l);
    }
  }

  for (size_t i = 0; i < visible.size(); ++i) {
    const Logical& l = visible[i];
    if (gpus[l.gpu].uuid != target.gpu_uuid) continue;
    if (!l.mig || !target.gpu_instance_id || !target.compute_instance_id) {
      return static_cast<int>(i);
    }
    const model::MigInstanceInfo& mi = gpus[l.gpu].mig_instances[*l.mig];
    if (mi.gpu_instance_id == *target.gpu_instance_id &&
        mi.compute_instance_id == *target.compute_instance_id) {
      return static_cast<int>(i);
    }
  }
  return std::nullopt;
}

std::map<std::string, std::string> ParseEnviron(std::string_view bytes) {
  std::map<std::string, std::string> env;
  size_t start = 0;
  while (start < bytes.size()) {
    const size_t nul = bytes.find('\0', start);
    if (nul == std::string_view::npos) break;  // unterminated: cut short, value unreliable
    const std::string_view entry = bytes.substr(start, nul - start);
    start = nul + 1;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

StatusIds ParseStatusIds(std::string_view text) {
  StatusIds ids;
  for (std::string_view line : SplitAny(text, "\n")) {
    if (StartsWith(line, "Uid:")) {
      std::vector<std::string_view> f = SplitAny(line.substr(4), " \t");
      if (!f.empty()) ids.uid = ParseInt<uint32_t>(f[0]);
    } else if (StartsWith(line, "Cpus_allowed_list:")) {
      std::string_view v = line.substr(18);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      ids.cpus_allowed = ParseCpuList(v);
    } else if (StartsWith(line, "NSpid:")) {
      ids.nspid.clear();
      for (std::string_view f : SplitAny(line.substr(6), " \t")) {
        auto v = ParseInt<uint32_t>(f);
        if (!v) {
          // Partial lists would shift "innermost is last": all or nothing.
          ids.nspid.clear();
          break;
        }
        ids.nspid.push_back(*v);
      }
    }
  }
  return ids;
}

std::optional<std::vector<unsigned>> ParseCpuList(std::string_view list) {
  while (!list.empty() && (list.back() == '\n' || list.back() == ' ')) list.remove_suffix(1);
  std::vector<unsigned> cpus;
  if (list.empty()) return cpus;
  for (std::string_view part : SplitAny(list, ",")) {
    const size_t dash = part.find('-');
    auto lo = ParseInt<unsigned>(part.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : ParseInt<unsigned>(part.substr(dash + 1));
    if (!lo || !hi || *lo > *hi || *hi > kMaxCpu) return std::nullopt;
    for (unsigned c = *lo; c <= *hi; ++c) cpus.push_back(c);
    if (cpus.size() > kMaxCpu + 1) return std::nullopt;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

void Attributor::LoadNumaNodes() {
  numa_cpus_.clear();
  // The kernel lists its nodes ("0-1", or sparse "0,2"): read those, not every possible name.
  const std::string dir = root_ + "/sys/devices/system/node/";
  FileReadResult online = ReadSmallFile(dir + "online", 4096);
  if (!online.ok) return;                  // no NUMA sysfs: nothing is claimed
  auto nodes = ParseCpuList(online.data);  // the same list format as CPUs
  if (!nodes) return;
  for (unsigned node : *nodes) {
    FileReadResult f = ReadSmallFile(dir + "node" + std::to_string(node) + "/cpulist", 1 << 16);
    if (!f.ok) continue;
    if (auto cpus = ParseCpuList(f.data)) numa_cpus_[node] = std::move(*cpus);
    if (numa_cpus_.size() >= 64) break;
  }
}

std::optional<int> Attributor::GpuNumaNode(const std::string& pci_bus_id) {
  auto it = gpu_numa_.find(pci_bus_id);
  if (it != gpu_numa_.end()) return it->second;
  // NVML's "00000000:18:00.0" is sysfs's "0000:18:00.0" (a 4-digit domain, lower case).
  std::string sysfs = pci_bus_id.size() > 8 && pci_bus_id.compare(0, 4, "0000") == 0
                          ? pci_bus_id.substr(4)
                          : pci_bus_id;
  for (char& c : sysfs) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::optional<int> node;
  FileReadResult f = ReadSmallFile(root_ + "/sys/bus/pci/devices/" + sysfs + "/numa_node", 64);
  if (f.ok) {
    std::string_view v = f.data;
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
    node = ParseInt<int>(v);  // -1: the platform does not say
  }
  if (gpu_numa_.size() < 1024) gpu_numa_[pci_bus_id] = node;
  return node;
}

std::optional<uint64_t> ParseStatStartTime(std::string_view text) {
  const size_t paren = text.rfind(')');
  if (paren == std::string_view::npos) return std::nullopt;
  // Fields after "pid (comm)" start at field 3 (state); field 22 is the 20th of them.
  std::vector<std::string_view> f = SplitAny(text.substr(paren + 1), " \n");
  if (f.size() < 20) return std::nullopt;
  return ParseInt<uint64_t>(f[19]);
}

std::unordered_map<uint32_t, std::string> ParsePasswd(std::string_view text) {
  std::unordered_map<uint32_t, std::string> users;
  for (std::string_view line : SplitAny(text, "\n")) {
    if (line.empty() || line[0] == '#' || line[0] == '+' || line[0] == '-') continue;
    std::vector<std::string_view> f = SplitAny(line, ":", /*skip_empty=*/false);
    if (f.size() < 3 || f[0].empty()) continue;
    if (auto uid = ParseInt<uint32_t>(f[2])) users.emplace(*uid, std::string(f[0]));
  }
  return users;
}

Attributor::Attributor(std::string root_dir, std::string job_env_var)
    : root_(std::move(root_dir)), job_env_var_(std::move(job_env_var)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

std::string Attributor::UserName(uint32_t uid) {
  // Re-read only when the file changed: users are added while the agent runs. Directory users
  // (LDAP, SSSD) are not in the file and fall back to the number.
  const std::string path = root_ + "/etc/passwd";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                             static_cast<int64_t>(st.st_mtim.tv_nsec);
    if (mtime_ns != passwd_mtime_ns_) {
      FileReadResult f = ReadSmallFile(path, 16 << 20);
      if (f.ok) {
        passwd_ = ParsePasswd(f.data);
        passwd_mtime_ns_ = mtime_ns;
      }
    }
  }
  auto it = passwd_.find(uid);
  return it != passwd_.end() ? it->second : std::to_string(uid);
}

Attributor::ProcInfo Attributor::Resolve(uint32_t pid, std::optional<uint64_t> start_time) {
  ProcInfo info;
  info.start_time = start_time;
  const std::string dir = root_ + "/proc/" + std::to_string(pid);
  // A process may exit between NVML's report and these reads, and without root most of them
  // fail with EACCES: only debug logs, and only once per process since the result is cached.
  FileReadResult f = ReadSmallFile(dir + "/cgroup");
  if (f.ok) {
    info.container = ParseCgroup(f.data);
  } else {
    GW_LOG_DEBUG("attribution: pid {}: cgroup unreadable (errno {})", pid, f.err);
  }
  f = ReadSmallFile(dir + "/status");
  if (f.ok) {
    StatusIds ids = ParseStatusIds(f.data);
    info.uid = ids.uid;
    if (ids.nspid.size() > 1) info.container_pid = ids.nspid.back();
  } else {
    GW_LOG_DEBUG("attribution: pid {}: status unreadable (errno {})", pid, f.err);
  }
  if (info.uid) info.user = UserName(*info.uid);
  f = ReadSmallFile(dir + "/comm", 256);
  if (f.ok) {
    std::string_view comm = f.data;
    if (!comm.empty() && comm.back() == '\n') comm.remove_suffix(1);
    info.command = std::string(comm);
  }
  f = ReadSmallFile(dir + "/environ");
  if (!f.ok) {
    GW_LOG_DEBUG("attribution: pid {}: environ unreadable (errno {}); no job id", pid, f.err);
    return info;
  }
  info.env_known = true;
  const std::map<std::string, std::string> env = ParseEnviron(f.data);
  auto it = env.find(job_env_var_);
  for (size_t i = 0; it == env.end() && i < std::size(kJobEnvFallbacks); ++i) {
    it = env.find(std::string(kJobEnvFallbacks[i]));
  }
  if (it != env.end()) info.job_id = it->second;
  if (auto cvd = env.find("CUDA_VISIBLE_DEVICES"); cvd != env.end()) {
    info.cuda_visible = ParseCudaVisibleDevices(cvd->second);
  }
  // Outside a container the variable restricts nothing: only the container runtime acts on it.
  if (auto nvd = env.find("NVIDIA_VISIBLE_DEVICES");
      nvd != env.end() && !info.container.id.empty()) {
    Result<ContainerDevices> devs = ParseNvidiaVisibleDevices(nvd->second);
    if (devs.ok()) {
      info.container_devices = std::move(devs).value();
    } else {
      info.container_devices_known = false;
      GW_LOG_DEBUG("attribution: pid {}: {}", pid, devs.status().ToString());
    }
  }
  return info;
}

std::vector<model::ProcessAttribution> Attributor::Attribute(
    const std::vector<GpuProcessRef>& procs, const std::vector<model::GpuStaticInfo>& gpus) {
  std::vector<model::ProcessAttribution> out;
  out.reserve(procs.size());
  std::unordered_set<uint32_t> seen;
  if (!procs.empty()) LoadNumaNodes();
  // A process's CPU affinity can change while it runs (taskset, numactl): read each tick.
  std::unordered_map<uint32_t, std::vector<unsigned>> cpu_nodes;
  for (const GpuProcessRef& ref : procs) {
    const uint32_t pid = ref.process.pid;
    if (seen.insert(pid).second) {
      // The start time tells a recycled pid from the process cached under it.
      FileReadResult f = ReadSmallFile(root_ + "/proc/" + std::to_string(pid) + "/stat", 4096);
      std::optional<uint64_t> start = f.ok ? ParseStatStartTime(f.data) : std::nullopt;
      auto it = cache_.find(pid);
      if (it == cache_.end() || it->second.start_time != start) {
        cache_.insert_or_assign(pid, Resolve(pid, start));
      }
    }
    const ProcInfo& info = cache_.at(pid);
    if (!numa_cpus_.empty() && !cpu_nodes.count(pid)) {
      std::vector<unsigned>& nodes = cpu_nodes[pid];
      FileReadResult st =
          ReadSmallFile(root_ + "/proc/" + std::to_string(pid) + "/status", 1 << 16);
      std::optional<std::vector<unsigned>> allowed;
      if (st.ok) allowed = ParseStatusIds(st.data).cpus_allowed;
      if (allowed) {
        for (const auto& [node, cpus] : numa_cpus_) {
          // Both lists are sorted: one linear intersection test.
          auto a = allowed->begin();
          auto b = cpus.begin();
          while (a != allowed->end() && b != cpus.end()) {
            if (*a == *b) {
              nodes.push_back(node);
              break;
            }
            if (*a < *b)
              ++a;
            else
              ++b;
          }
        }
      }
    }

    model::ProcessAttribution& a = out.emplace_back();
    a.pid = pid;
    a.container_pid = info.container_pid;
    a.gpu_index = ref.gpu_index;
    a.gpu_instance_id = ref.process.gpu_instance_id;
    a.compute_instance_id = ref.process.compute_instance_id;
    a.used_memory_bytes = ref.process.used_memory_bytes;
    a.command = info.command;
    a.uid = info.uid;
    a.user = info.user;
    a.container_id = info.container.id;
    a.container_runtime = info.container.runtime;
    a.pod_uid = info.container.pod_uid;
    a.job_id = info.job_id;
    auto gpu = std::find_if(gpus.begin(), gpus.end(), [&](const model::GpuStaticInfo& g) {
      return g.index == ref.gpu_index;
    });
    if (auto n = cpu_nodes.find(pid); n != cpu_nodes.end()) a.cpu_numa_nodes = n->second;
    if (gpu == gpus.end()) continue;
    a.gpu_uuid = gpu->uuid;
    if (!gpu->pci_bus_id.empty()) a.gpu_numa_node = GpuNumaNode(gpu->pci_bus_id);
    if (info.env_known && info.container_devices_known) {
      DeviceTarget target{gpu->uuid, ref.process.gpu_instance_id, ref.process.compute_instance_id};
      a.visible_index = ResolveVisibleIndex(
          info.cuda_visible ? &*info.cuda_visible : nullptr,
          info.container_devices ? &*info.container_devices : nullptr, target, gpus);
    }
  }
  // Exited processes leave the cache with their last tick.
  std::erase_if(cache_, [&](const auto& kv) { return !seen.contains(kv.first); });
  return out;
}

}  // namespace gpuwatch::collect
