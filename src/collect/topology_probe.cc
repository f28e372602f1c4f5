#include "collect/topology_probe.h"

#include <climits>
#include <cstdlib>
#include <map>

#include "collect/internal/sysfs.h"
#include "common/strings.h"

namespace gpuwatch::collect {

namespace {

using internal::ErrnoText;
using internal::ListDir;

// The device's directory below <root>/sys/devices, resolved through its /sys/bus/pci/devices or
// class symlink: "pci0000:17/0000:17:01.0/0000:18:00.0". Empty (with `why`) when absent.
std::string PciPathOf(const std::string& sys, const std::string& link, std::string* why) {
  char buf[PATH_MAX];
  if (::realpath(link.c_str(), buf) == nullptr) {
    *why = link + ": " + ErrnoText(errno);
    return "";
  }
  std::string real = buf;
  // realpath of the root resolves too (a fixture tree under /tmp may itself be a symlink).
  std::string devices = sys + "/devices/";
  if (char rb[PATH_MAX]; ::realpath((sys + "/devices").c_str(), rb) != nullptr) {
    devices = std::string(rb) + "/";
  }
  if (!StartsWith(real, devices)) {
    *why = link + " resolves outside " + devices;
    return "";
  }
  std::string rel = real.substr(devices.size());
  if (!StartsWith(rel, "pci")) {
    *why = link + " is not a PCI device (" + rel + ")";
    return "";
  }
  return rel;
}

std::optional<int> ReadNuma(const std::string& dir) {
  FileReadResult f = ReadSmallFile(dir + "/numa_node", 64);
  if (!f.ok) return std::nullopt;
  std::optional<int> v = ParseInt<int>(f.data);
  // -1: the platform did not say (single-socket machines, many VMs).
  if (!v || *v < 0) return std::nullopt;
  return v;
}

std::optional<std::string> ReadCpuList(const std::string& dir) {
  FileReadResult f = ReadSmallFile(dir + "/local_cpulist", 4096);
  if (!f.ok) return std::nullopt;
  std::string_view s = TrimWhitespace(f.data);
  if (s.empty()) return std::nullopt;
  return std::string(s);
}

std::optional<std::string> ReadTrimmed(const std::string& path) {
  FileReadResult f = ReadSmallFile(path, 256);
  if (!f.ok) return std::nullopt;
  return std::string(TrimWhitespace(f.data));
}

}  // namespace

void ProbeSysfsTopology(const std::string& root_in, topo::NodeSnapshot* s) {
  std::string root = root_in;
  while (!root.empty() && root.back() == '/') root.pop_back();
  const std::string sys = root + "/sys";
  auto warn = [&](std::string w) { s->warnings.push_back(std::move(w)); };

  for (topo::GpuFacts& g : s->gpus) {
    if (g.pci_bus_id.empty()) {
      warn("GPU" + std::to_string(g.index) + ": no PCI address from the driver");
      continue;
    }
    const std::string link = sys + "/bus/pci/devices/" + g.pci_bus_id;
    std::string why;
    g.pci_path = PciPathOf(sys, link, &why);
    if (g.pci_path.empty()) {
      warn("GPU" + std::to_string(g.index) + ": no PCI placement (" + why + ")");
      continue;
    }
    g.numa_node = ReadNuma(link);
    g.cpu_affinity = ReadCpuList(link);
  }

  const std::string ib = sys + "/class/infiniband";
  std::vector<std::string> devices;
  int err = 0;
  if (!ListDir(ib, &devices, &err)) {
    // No RDMA hardware (or ib_core not loaded) is the common case, not a fault.
    if (err != ENOENT) warn(ib + ": " + ErrnoText(err));
    return;
  }
  for (const std::string& name : devices) {
    topo::NicFacts nic;
    nic.name = name;
    const std::string dev = ib + "/" + name + "/device";
    std::string why;
    nic.pci_path = PciPathOf(sys, dev, &why);
    if (nic.pci_path.empty()) {
      // Soft RDMA devices (rxe, siw) have no PCI device of their own.
      warn(name + ": no PCI placement (" + why + ")");
    } else {
      nic.pci_bus_id = nic.pci_path.substr(nic.pci_path.rfind('/') + 1);
      nic.numa_node = ReadNuma(dev);
      nic.cpu_affinity = ReadCpuList(dev);
    }
    std::vector<std::string> names;
    if (ListDir(dev + "/net", &names, &err)) nic.netdevs = names;
    if (ListDir(ib + "/" + name + "/ports", &names, &err)) {
      for (const std::string& p : names) {
        std::optional<unsigned> num = ParseInt<unsigned>(p);
        if (!num) continue;
        const std::string pd = ib + "/" + name + "/ports/" + p;
        topo::NicPortFacts port;
        port.port = *num;
        if (auto st = ReadTrimmed(pd + "/state")) port.state = internal::ParseIbPortState(*st);
        if (auto rate = ReadTrimmed(pd + "/rate"))
          port.rate_gbps = internal::ParseIbRateGbps(*rate);
        if (auto ll = ReadTrimmed(pd + "/link_layer")) port.link_layer = *ll;
        nic.ports.push_back(std::move(port));
      }
    } else {
      warn(ib + "/" + name + "/ports: " + ErrnoText(err));
    }
    s->nics.push_back(std::move(nic));
  }
}

topo::NodeSnapshot ProbeNodeTopology(GpuSource* gpu, const std::string& root,
                                     const std::string& hostname, int64_t now_ms) {
  topo::NodeSnapshot s;
  s.taken_at_ms = now_ms;
  s.hostname = hostname;
  if (gpu != nullptr) {
    Status st = gpu->ProbeTopology(&s);
    if (!st.ok() && st.code() != StatusCode::kNotSupported) {
      s.warnings.push_back("GPU topology: " + st.message());
    }
  }
  ProbeSysfsTopology(root, &s);
  topo::FinishSnapshot(&s);
  return s;
}

}  // namespace gpuwatch::collect
