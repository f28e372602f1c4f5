#include "topo/snapshot.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/strings.h"

namespace gpuwatch::topo {

namespace {

using nlohmann::json;

// A snapshot file is written by us, but read back from disk or from a bug report: bound what a
// damaged or hostile one can make us allocate.
constexpr size_t kMaxGpus = 256;
constexpr size_t kMaxNics = 256;
constexpr size_t kMaxLinksPerGpu = 64;
constexpr size_t kMaxPortsPerNic = 16;
constexpr size_t kMaxWarnings = 256;

std::vector<std::string_view> PathParts(std::string_view path) {
  std::vector<std::string_view> parts;
  for (std::string_view p : SplitAny(path, "/")) {
    if (!p.empty()) parts.push_back(p);
  }
  return parts;
}

std::string Width(unsigned w) { return "x" + std::to_string(w); }

}  // namespace

std::string_view PciPathToken(PciPath p) {
  switch (p) {
    case PciPath::kSingleBridge:
      return "PIX";
    case PciPath::kMultipleBridges:
      return "PXB";
    case PciPath::kHostBridge:
      return "PHB";
    case PciPath::kNumaNode:
      return "NODE";
    case PciPath::kSystem:
      return "SYS";
  }
  return "SYS";
}

std::optional<PciPath> PathFromSysfs(std::string_view a, std::string_view b,
                                     std::optional<int> numa_a, std::optional<int> numa_b) {
  std::vector<std::string_view> pa = PathParts(a), pb = PathParts(b);
  if (pa.empty() || pb.empty() || !StartsWith(pa[0], "pci") || !StartsWith(pb[0], "pci")) {
    return std::nullopt;
  }
  if (pa[0] != pb[0]) {
    // Another root complex. Both NUMA nodes known and different: across the SMP interconnect.
    if (numa_a && numa_b && *numa_a != *numa_b) return PciPath::kSystem;
    return PciPath::kNumaNode;
  }
  size_t common = 0;  // bridges in common below the host bridge
  while (common + 1 < pa.size() && common + 1 < pb.size() && pa[common + 1] == pb[common + 1]) {
    ++common;
  }
  if (common == 0) return PciPath::kHostBridge;
  const size_t below_a = pa.size() - 1 - common, below_b = pb.size() - 1 - common;
  // One PCIe switch: its upstream port is the common bridge, then one downstream port and the
  // device on each side.
  if (below_a <= 2 && below_b <= 2) return PciPath::kSingleBridge;
  return PciPath::kMultipleBridges;
}

std::string NormalizePciBusId(std::string_view id) {
  id = TrimWhitespace(id);
  // [domain:]bus:device.function, hex.
  const size_t dot = id.rfind('.');
  if (dot == std::string_view::npos) return "";
  std::vector<std::string_view> parts = SplitAny(id.substr(0, dot), ":", /*skip_empty=*/false);
  if (parts.size() == 2) parts.insert(parts.begin(), "0");
  if (parts.size() != 3) return "";
  auto hex = [](std::string_view s, size_t max_digits, unsigned max) -> std::optional<unsigned> {
    if (s.empty() || s.size() > max_digits) return std::nullopt;
    std::optional<unsigned> v = ParseInt<unsigned>(s, 16);
    if (!v || *v > max) return std::nullopt;
    return v;
  };
  auto dom = hex(parts[0], 8, 0xFFFF), bus = hex(parts[1], 2, 0xFF), dev = hex(parts[2], 2, 0x1F),
       fn = hex(id.substr(dot + 1), 1, 7);
  if (!dom || !bus || !dev || !fn) return "";
  char out[16];
  std::snprintf(out, sizeof(out), "%04x:%02x:%02x.%x", *dom, *bus, *dev, *fn);
  return out;
}

void FinishSnapshot(NodeSnapshot* s) {
  const size_t n = s->gpus.size(), m = s->nics.size();
  Topology& t = s->matrix;
  t = Topology{};
  for (const GpuFacts& g : s->gpus) t.gpu_names.push_back("GPU" + std::to_string(g.index));
  for (const NicFacts& nic : s->nics) t.nic_names.push_back(nic.name);

  // Active NVLinks per (GPU, peer GPU) and per GPU to NVSwitches.
  std::map<std::string, size_t> by_bus;
  for (size_t i = 0; i < n; ++i) by_bus[s->gpus[i].pci_bus_id] = i;
  std::vector<std::vector<int>> direct(n, std::vector<int>(n, 0));
  std::vector<int> to_switch(n, 0);
  for (size_t i = 0; i < n; ++i) {
    for (const NvLinkFacts& l : s->gpus[i].nvlinks) {
      if (!l.active) continue;
      if (l.remote_kind == "nvswitch") {
        ++to_switch[i];
        continue;
      }
      auto it = by_bus.find(l.remote_pci_bus_id);
      if (it != by_bus.end() && it->second != i) ++direct[i][it->second];
    }
  }

  t.gpu_links.assign(n, std::vector<std::string>(n));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      std::string& cell = t.gpu_links[i][j];
      if (i == j) {
        cell = "X";
        continue;
      }
      // A direct link is counted from both ends; take the larger count in case one end's
      // remote PCI query failed.
      int nv = std::max(direct[i][j], direct[j][i]);
      nv += std::min(to_switch[i], to_switch[j]);
      if (nv > 0) {
        cell = "NV" + std::to_string(nv);
        continue;
      }
      std::optional<PciPath> p;
      if (i < s->gpu_pci_paths.size() && j < s->gpu_pci_paths[i].size()) {
        p = s->gpu_pci_paths[i][j];
      }
      if (!p) {
        p = PathFromSysfs(s->gpus[i].pci_path, s->gpus[j].pci_path, s->gpus[i].numa_node,
                          s->gpus[j].numa_node);
      }
      if (p) cell = std::string(PciPathToken(*p));
    }
  }
  t.gpu_nic_links.assign(n, std::vector<std::optional<std::string>>(m));
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < m; ++k) {
      std::optional<PciPath> p = PathFromSysfs(s->gpus[i].pci_path, s->nics[k].pci_path,
                                               s->gpus[i].numa_node, s->nics[k].numa_node);
      if (p) t.gpu_nic_links[i][k] = std::string(PciPathToken(*p));
    }
  }
  t.nic_links.assign(m, std::vector<std::optional<std::string>>(m));
  for (size_t a = 0; a < m; ++a) {
    for (size_t b = 0; b < m; ++b) {
      if (a == b) {
        t.nic_links[a][b] = "X";
        continue;
      }
      std::optional<PciPath> p = PathFromSysfs(s->nics[a].pci_path, s->nics[b].pci_path,
                                               s->nics[a].numa_node, s->nics[b].numa_node);
      if (p) t.nic_links[a][b] = std::string(PciPathToken(*p));
    }
  }
  for (const GpuFacts& g : s->gpus) {
    t.cpu_affinity.push_back(g.cpu_affinity);
    t.numa_affinity.push_back(g.numa_node);
    t.numa_affinity_text.push_back(std::nullopt);
    t.gpu_numa_id.push_back(std::nullopt);
  }
  t.warnings = s->warnings;
}

// --- JSON ------------------------------------------------------------------------------------

namespace {

template <typename T>
json Opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json PathJson(const std::optional<PciPath>& p) {
  return p ? json(std::string(PciPathToken(*p))) : json(nullptr);
}

std::optional<PciPath> PathFromToken(std::string_view t) {
  for (PciPath p : {PciPath::kSingleBridge, PciPath::kMultipleBridges, PciPath::kHostBridge,
                    PciPath::kNumaNode, PciPath::kSystem}) {
    if (PciPathToken(p) == t) return p;
  }
  return std::nullopt;
}

// Reads JSON fields with the path of the first wrong one in the error.
class Reader {
 public:
  Status Fail(const std::string& where, const std::string& what) const {
    return Status::InvalidArgument("topology snapshot: " + where + ": " + what);
  }
  template <typename T>
  Status Get(const json& o, const char* key, const std::string& where, T* out, bool required) {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) {
      return required ? Fail(where + "." + key, "missing") : Status::Ok();
    }
    if constexpr (std::is_same_v<T, std::string>) {
      if (!it->is_string()) return Fail(where + "." + key, "not a string");
      *out = it->template get<std::string>();
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) return Fail(where + "." + key, "not a boolean");
      *out = it->template get<bool>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!it->is_number()) return Fail(where + "." + key, "not a number");
      *out = it->template get<T>();
    } else {
      if (!it->is_number_integer()) return Fail(where + "." + key, "not an integer");
      if constexpr (std::is_unsigned_v<T>) {
        if (it->is_number_unsigned() ? false : it->template get<int64_t>() < 0) {
          return Fail(where + "." + key, "negative");
        }
      }
      *out = it->template get<T>();
    }
    return Status::Ok();
  }
  template <typename T>
  Status GetOpt(const json& o, const char* key, const std::string& where, std::optional<T>* out) {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) {
      out->reset();
      return Status::Ok();
    }
    T v{};
    GW_RETURN_IF_ERROR(Get(o, key, where, &v, true));
    *out = v;
    return Status::Ok();
  }
  Status Array(const json& o, const char* key, const std::string& where, size_t max,
               const json** out) {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) {
      static const json kEmpty = json::array();
      *out = &kEmpty;
      return Status::Ok();
    }
    if (!it->is_array()) return Fail(where + "." + key, "not an array");
    if (it->size() > max) {
      return Fail(where + "." + key, "more than " + std::to_string(max) + " entries");
    }
    *out = &*it;
    return Status::Ok();
  }
};

}  // namespace

std::string SnapshotToJson(const NodeSnapshot& s) {
  json j;
  j["format"] = "gpuwatch-topology";
  j["version"] = 1;
  j["taken_at_ms"] = s.taken_at_ms;
  j["hostname"] = s.hostname;
  j["driver_version"] = s.driver_version;
  json gpus = json::array();
  for (const GpuFacts& g : s.gpus) {
    json links = json::array();
    for (const NvLinkFacts& l : g.nvlinks) {
      links.push_back({{"link", l.link},
                       {"active", l.active},
                       {"remote_pci_bus_id", l.remote_pci_bus_id},
                       {"remote_kind", l.remote_kind},
                       {"remote_gpu", Opt(l.remote_gpu)},
                       {"version", Opt(l.version)}});
    }
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"uuid", g.uuid},
                    {"pci_bus_id", g.pci_bus_id},
                    {"pci_path", g.pci_path},
                    {"numa_node", Opt(g.numa_node)},
                    {"cpu_affinity", Opt(g.cpu_affinity)},
                    {"pcie_gen", Opt(g.pcie_gen)},
                    {"pcie_max_gen", Opt(g.pcie_max_gen)},
                    {"pcie_width", Opt(g.pcie_width)},
                    {"pcie_max_width", Opt(g.pcie_max_width)},
                    {"nvlinks", links}});
  }
  j["gpus"] = gpus;
  json nics = json::array();
  for (const NicFacts& nic : s.nics) {
    json ports = json::array();
    for (const NicPortFacts& p : nic.ports) {
      ports.push_back({{"port", p.port},
                       {"state", p.state},
                       {"rate_gbps", Opt(p.rate_gbps)},
                       {"link_layer", p.link_layer}});
    }
    nics.push_back({{"name", nic.name},
                    {"pci_bus_id", nic.pci_bus_id},
                    {"pci_path", nic.pci_path},
                    {"numa_node", Opt(nic.numa_node)},
                    {"cpu_affinity", Opt(nic.cpu_affinity)},
                    {"netdevs", nic.netdevs},
                    {"ports", ports}});
  }
  j["nics"] = nics;
  json paths = json::array();
  for (const auto& row : s.gpu_pci_paths) {
    json r = json::array();
    for (const auto& p : row) r.push_back(PathJson(p));
    paths.push_back(r);
  }
  j["gpu_pci_paths"] = paths;
  json p2p = json::array();
  for (const auto& row : s.p2p_read) {
    json r = json::array();
    for (const auto& v : row) r.push_back(Opt(v));
    p2p.push_back(r);
  }
  j["p2p_read"] = p2p;
  // The derived matrix, for readers that want only the `topo -m` view (not read back).
  j["matrix"] = {{"gpus", s.matrix.gpu_names.size()},
                 {"links", s.matrix.gpu_links},
                 {"nics", s.matrix.nic_names},
                 {"gpu_nic_links", json::array()}};
  for (const auto& row : s.matrix.gpu_nic_links) {
    json r = json::array();
    for (const auto& v : row) r.push_back(Opt(v));
    j["matrix"]["gpu_nic_links"].push_back(r);
  }
  j["warnings"] = s.warnings;
  return j.dump(1);
}

Result<NodeSnapshot> SnapshotFromJson(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  Reader r;
  if (j.is_discarded()) return r.Fail("(document)", "not valid JSON");
  if (!j.is_object()) return r.Fail("(document)", "not a JSON object");
  std::string format;
  GW_RETURN_IF_ERROR(r.Get(j, "format", "", &format, true));
  if (format != "gpuwatch-topology") return r.Fail(".format", "not \"gpuwatch-topology\"");
  int version = 0;
  GW_RETURN_IF_ERROR(r.Get(j, "version", "", &version, true));
  if (version != 1) return r.Fail(".version", "unsupported version " + std::to_string(version));

  NodeSnapshot s;
  GW_RETURN_IF_ERROR(r.Get(j, "taken_at_ms", "", &s.taken_at_ms, true));
  GW_RETURN_IF_ERROR(r.Get(j, "hostname", "", &s.hostname, false));
  GW_RETURN_IF_ERROR(r.Get(j, "driver_version", "", &s.driver_version, false));
  const json* gpus = nullptr;
  GW_RETURN_IF_ERROR(r.Array(j, "gpus", "", kMaxGpus, &gpus));
  for (size_t i = 0; i < gpus->size(); ++i) {
    const json& g = (*gpus)[i];
    const std::string w = ".gpus[" + std::to_string(i) + "]";
    if (!g.is_object()) return r.Fail(w, "not an object");
    GpuFacts f;
    GW_RETURN_IF_ERROR(r.Get(g, "index", w, &f.index, true));
    GW_RETURN_IF_ERROR(r.Get(g, "name", w, &f.name, false));
    GW_RETURN_IF_ERROR(r.Get(g, "uuid", w, &f.uuid, false));
    GW_RETURN_IF_ERROR(r.Get(g, "pci_bus_id", w, &f.pci_bus_id, false));
    GW_RETURN_IF_ERROR(r.Get(g, "pci_path", w, &f.pci_path, false));
    GW_RETURN_IF_ERROR(r.GetOpt(g, "numa_node", w, &f.numa_node));
    GW_RETURN_IF_ERROR(r.GetOpt(g, "cpu_affinity", w, &f.cpu_affinity));
    GW_RETURN_IF_ERROR(r.GetOpt(g, "pcie_gen", w, &f.pcie_gen));
    GW_RETURN_IF_ERROR(r.GetOpt(g, "pcie_max_gen", w, &f.pcie_max_gen));
    GW_RETURN_IF_ERROR(r.GetOpt(g, "pcie_width", w, &f.pcie_width));
    GW_RETURN_IF_ERROR(r.GetOpt(g, "pcie_max_width", w, &f.pcie_max_width));
    const json* links = nullptr;
    GW_RETURN_IF_ERROR(r.Array(g, "nvlinks", w, kMaxLinksPerGpu, &links));
    for (size_t k = 0; k < links->size(); ++k) {
      const json& l = (*links)[k];
      const std::string lw = w + ".nvlinks[" + std::to_string(k) + "]";
      if (!l.is_object()) return r.Fail(lw, "not an object");
      NvLinkFacts nl;
      GW_RETURN_IF_ERROR(r.Get(l, "link", lw, &nl.link, true));
      GW_RETURN_IF_ERROR(r.Get(l, "active", lw, &nl.active, true));
      GW_RETURN_IF_ERROR(r.Get(l, "remote_pci_bus_id", lw, &nl.remote_pci_bus_id, false));
      GW_RETURN_IF_ERROR(r.Get(l, "remote_kind", lw, &nl.remote_kind, false));
      GW_RETURN_IF_ERROR(r.GetOpt(l, "remote_gpu", lw, &nl.remote_gpu));
      GW_RETURN_IF_ERROR(r.GetOpt(l, "version", lw, &nl.version));
      f.nvlinks.push_back(std::move(nl));
    }
    s.gpus.push_back(std::move(f));
  }
  const json* nics = nullptr;
  GW_RETURN_IF_ERROR(r.Array(j, "nics", "", kMaxNics, &nics));
  for (size_t i = 0; i < nics->size(); ++i) {
    const json& o = (*nics)[i];
    const std::string w = ".nics[" + std::to_string(i) + "]";
    if (!o.is_object()) return r.Fail(w, "not an object");
    NicFacts nic;
    GW_RETURN_IF_ERROR(r.Get(o, "name", w, &nic.name, true));
    GW_RETURN_IF_ERROR(r.Get(o, "pci_bus_id", w, &nic.pci_bus_id, false));
    GW_RETURN_IF_ERROR(r.Get(o, "pci_path", w, &nic.pci_path, false));
    GW_RETURN_IF_ERROR(r.GetOpt(o, "numa_node", w, &nic.numa_node));
    GW_RETURN_IF_ERROR(r.GetOpt(o, "cpu_affinity", w, &nic.cpu_affinity));
    const json* netdevs = nullptr;
    GW_RETURN_IF_ERROR(r.Array(o, "netdevs", w, kMaxNics, &netdevs));
    for (const json& d : *netdevs) {
      if (!d.is_string()) return r.Fail(w + ".netdevs", "not a string");
      nic.netdevs.push_back(d.get<std::string>());
    }
    const json* ports = nullptr;
    GW_RETURN_IF_ERROR(r.Array(o, "ports", w, kMaxPortsPerNic, &ports));
    for (size_t k = 0; k < ports->size(); ++k) {
      const json& p = (*ports)[k];
      const std::string pw = w + ".ports[" + std::to_string(k) + "]";
      if (!p.is_object()) return r.Fail(pw, "not an object");
      NicPortFacts pf;
      GW_RETURN_IF_ERROR(r.Get(p, "port", pw, &pf.port, true));
      GW_RETURN_IF_ERROR(r.Get(p, "state", pw, &pf.state, false));
      GW_RETURN_IF_ERROR(r.GetOpt(p, "rate_gbps", pw, &pf.rate_gbps));
      GW_RETURN_IF_ERROR(r.Get(p, "link_layer", pw, &pf.link_layer, false));
      nic.ports.push_back(std::move(pf));
    }
    s.nics.push_back(std::move(nic));
  }
  const size_t n = s.gpus.size();
  for (const char* key : {"gpu_pci_paths", "p2p_read"}) {
    const json* rows = nullptr;
    GW_RETURN_IF_ERROR(r.Array(j, key, "", kMaxGpus, &rows));
    if (!rows->empty() && rows->size() != n) {
      return r.Fail(std::string(".") + key, "not one row per GPU");
    }
    for (size_t i = 0; i < rows->size(); ++i) {
      const json& row = (*rows)[i];
      const std::string w = std::string(".") + key + "[" + std::to_string(i) + "]";
      if (!row.is_array() || row.size() != n) return r.Fail(w, "not one entry per GPU");
      if (std::string_view(key) == "gpu_pci_paths") {
        s.gpu_pci_paths.emplace_back();
        for (const json& v : row) {
          if (v.is_null()) {
            s.gpu_pci_paths.back().push_back(std::nullopt);
            continue;
          }
          std::optional<PciPath> p =
              v.is_string() ? PathFromToken(v.get<std::string>()) : std::nullopt;
          if (!p) return r.Fail(w, "not PIX, PXB, PHB, NODE, SYS or null");
          s.gpu_pci_paths.back().push_back(p);
        }
      } else {
        s.p2p_read.emplace_back();
        for (const json& v : row) {
          if (!v.is_null() && !v.is_string()) return r.Fail(w, "not a string or null");
          s.p2p_read.back().push_back(v.is_null() ? std::nullopt
                                                  : std::optional(v.get<std::string>()));
        }
      }
    }
  }
  const json* warnings = nullptr;
  GW_RETURN_IF_ERROR(r.Array(j, "warnings", "", kMaxWarnings, &warnings));
  for (const json& w : *warnings) {
    if (!w.is_string()) return r.Fail(".warnings", "not a string");
    s.warnings.push_back(w.get<std::string>());
  }
  FinishSnapshot(&s);
  return s;
}

// --- diff ------------------------------------------------------------------------------------

namespace {

std::string Num(const std::optional<unsigned>& v) { return v ? std::to_string(*v) : "?"; }
std::string Num(const std::optional<int>& v) { return v ? std::to_string(*v) : "?"; }

void Add(std::vector<TopologyChange>* out, std::string kind, std::string subject,
         std::string before, std::string after, std::string summary) {
  out->push_back({std::move(kind), std::move(subject), std::move(before), std::move(after),
                  std::move(summary)});
}

std::string Peer(const NvLinkFacts& l) {
  if (l.remote_gpu) return "GPU" + std::to_string(*l.remote_gpu);
  if (!l.remote_pci_bus_id.empty()) return l.remote_kind + " " + l.remote_pci_bus_id;
  return l.remote_kind;
}

void DiffGpu(const GpuFacts& a, const GpuFacts& b, std::vector<TopologyChange>* out) {
  const std::string g = "GPU" + std::to_string(b.index);
  if (a.pci_bus_id != b.pci_bus_id || a.index != b.index) {
    Add(out, "gpu_moved", g, "GPU" + std::to_string(a.index) + " at " + a.pci_bus_id,
        g + " at " + b.pci_bus_id,
        g + " (" + b.uuid + ") moved: was GPU" + std::to_string(a.index) + " at " + a.pci_bus_id +
            ", now " + g + " at " + b.pci_bus_id);
  }
  if (a.pcie_width && b.pcie_width && *a.pcie_width != *b.pcie_width) {
    Add(out, "pcie_width_changed", g, Width(*a.pcie_width), Width(*b.pcie_width),
        g + " PCIe width " + Width(*a.pcie_width) + " → " + Width(*b.pcie_width) +
            (b.pcie_max_width ? " (max " + Width(*b.pcie_max_width) + ")" : ""));
  }
  if (a.pcie_max_gen && b.pcie_max_gen && *a.pcie_max_gen != *b.pcie_max_gen) {
    Add(out, "pcie_gen_changed", g, "gen" + Num(a.pcie_max_gen), "gen" + Num(b.pcie_max_gen),
        g + " maximum PCIe generation " + Num(a.pcie_max_gen) + " → " + Num(b.pcie_max_gen));
  }
  if (a.numa_node != b.numa_node) {
    Add(out, "numa_changed", g, Num(a.numa_node), Num(b.numa_node),
        g + " NUMA node " + Num(a.numa_node) + " → " + Num(b.numa_node));
  }
  if (a.cpu_affinity && b.cpu_affinity && *a.cpu_affinity != *b.cpu_affinity) {
    Add(out, "cpu_affinity_changed", g, *a.cpu_affinity, *b.cpu_affinity,
        g + " CPU affinity " + *a.cpu_affinity + " → " + *b.cpu_affinity);
  }
  std::map<unsigned, const NvLinkFacts*> before;
  for (const NvLinkFacts& l : a.nvlinks) before[l.link] = &l;
  std::set<unsigned> seen;
  for (const NvLinkFacts& l : b.nvlinks) {
    seen.insert(l.link);
    const std::string subj = g + " NVLink " + std::to_string(l.link);
    auto it = before.find(l.link);
    const bool was_active = it != before.end() && it->second->active;
    if (was_active && !l.active) {
      Add(out, "nvlink_lost", subj, "active", "inactive",
          subj + " to " + Peer(*it->second) + " went down");
    } else if (!was_active && l.active) {
      Add(out, "nvlink_restored", subj, it == before.end() ? "absent" : "inactive", "active",
          subj + " to " + Peer(l) + " is up");
    } else if (was_active && l.active && it->second->remote_pci_bus_id != l.remote_pci_bus_id &&
               !it->second->remote_pci_bus_id.empty() && !l.remote_pci_bus_id.empty()) {
      Add(out, "nvlink_peer_changed", subj, Peer(*it->second), Peer(l),
          subj + " now goes to " + Peer(l) + " (was " + Peer(*it->second) + ")");
    }
  }
  for (const auto& [link, l] : before) {
    if (seen.count(link) == 0 && l->active) {
      const std::string subj = g + " NVLink " + std::to_string(link);
      Add(out, "nvlink_lost", subj, "active", "absent",
          subj + " to " + Peer(*l) + " no longer answers");
    }
  }
}

std::string PortState(const NicPortFacts& p) {
  std::string s = p.state;
  if (p.rate_gbps) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), " %g Gb/s", *p.rate_gbps);
    s += buf;
  }
  return s;
}

}  // namespace

std::vector<TopologyChange> DiffSnapshots(const NodeSnapshot& a, const NodeSnapshot& b) {
  std::vector<TopologyChange> out;
  // GPUs are matched by UUID (a GPU that moved is the same card), else by PCI address.
  std::vector<bool> matched_a(a.gpus.size(), false);
  for (const GpuFacts& gb : b.gpus) {
    const GpuFacts* ga = nullptr;
    for (size_t i = 0; i < a.gpus.size() && ga == nullptr; ++i) {
      if (!matched_a[i] && !gb.uuid.empty() && a.gpus[i].uuid == gb.uuid) {
        ga = &a.gpus[i];
        matched_a[i] = true;
      }
    }
    for (size_t i = 0; i < a.gpus.size() && ga == nullptr; ++i) {
      if (!matched_a[i] && (gb.uuid.empty() || a.gpus[i].uuid.empty()) &&
          a.gpus[i].pci_bus_id == gb.pci_bus_id) {
        ga = &a.gpus[i];
        matched_a[i] = true;
      }
    }
    const std::string g = "GPU" + std::to_string(gb.index);
    if (ga == nullptr) {
      Add(&out, "gpu_added", g, "", gb.pci_bus_id,
          g + " (" + gb.name + ", " + gb.uuid + ") appeared at " + gb.pci_bus_id);
      continue;
    }
    DiffGpu(*ga, gb, &out);
  }
  for (size_t i = 0; i < a.gpus.size(); ++i) {
    if (matched_a[i]) continue;
    const GpuFacts& ga = a.gpus[i];
    const std::string g = "GPU" + std::to_string(ga.index);
    Add(&out, "gpu_removed", g, ga.pci_bus_id, "",
        g + " (" + ga.name + ", " + ga.uuid + ") at " + ga.pci_bus_id + " is gone");
  }

  std::map<std::string, const NicFacts*> nics_a, nics_b;
  for (const NicFacts& n : a.nics) nics_a[n.name] = &n;
  for (const NicFacts& n : b.nics) nics_b[n.name] = &n;
  for (const auto& [name, nb] : nics_b) {
    auto it = nics_a.find(name);
    if (it == nics_a.end()) {
      Add(&out, "nic_added", name, "", nb->pci_bus_id,
          "NIC " + name + " appeared at " + nb->pci_bus_id);
      continue;
    }
    const NicFacts& na = *it->second;
    if (na.pci_bus_id != nb->pci_bus_id) {
      Add(&out, "nic_moved", name, na.pci_bus_id, nb->pci_bus_id,
          "NIC " + name + " moved from " + na.pci_bus_id + " to " + nb->pci_bus_id);
    }
    for (const NicPortFacts& pb : nb->ports) {
      const std::string subj = name + " port " + std::to_string(pb.port);
      auto pa = std::find_if(na.ports.begin(), na.ports.end(),
                             [&](const NicPortFacts& p) { return p.port == pb.port; });
      if (pa == na.ports.end()) {
        Add(&out, "nic_port_changed", subj, "absent", PortState(pb), subj + " appeared");
      } else if (pa->state != pb.state || pa->rate_gbps != pb.rate_gbps) {
        Add(&out, "nic_port_changed", subj, PortState(*pa), PortState(pb),
            subj + " " + PortState(*pa) + " → " + PortState(pb));
      }
    }
  }
  for (const auto& [name, na] : nics_a) {
    if (nics_b.count(name) == 0) {
      Add(&out, "nic_removed", name, na->pci_bus_id, "",
          "NIC " + name + " at " + na->pci_bus_id + " is gone");
    }
  }

  // Matrix cells the facts above do not already explain (a PCIe path NVML now reports
  // differently, a NIC now on another switch). Cells involving an added/removed/moved device
  // are explained by that change.
  std::set<std::string> explained;
  for (const TopologyChange& c : out) {
    if (c.kind == "gpu_added" || c.kind == "gpu_removed" || c.kind == "gpu_moved" ||
        c.kind == "nvlink_lost" || c.kind == "nvlink_restored" || c.kind == "nic_added" ||
        c.kind == "nic_removed" || c.kind == "nic_moved") {
      explained.insert(c.subject.substr(0, c.subject.find(' ')));
    }
  }
  for (TopologyChange& c : DiffMatrices(a.matrix, b.matrix)) {
    if (c.kind != "link_changed") continue;
    const size_t dash = c.subject.find('-');
    const std::string x = c.subject.substr(0, dash), y = c.subject.substr(dash + 1);
    if (explained.count(x) != 0 || explained.count(y) != 0) continue;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<TopologyChange> DiffMatrices(const Topology& a, const Topology& b) {
  std::vector<TopologyChange> out;
  auto index_of = [](const std::vector<std::string>& names) {
    std::map<std::string, size_t> m;
    for (size_t i = 0; i < names.size(); ++i) m[names[i]] = i;
    return m;
  };
  const auto ga = index_of(a.gpu_names), gb = index_of(b.gpu_names);
  const auto na = index_of(a.nic_names), nb = index_of(b.nic_names);
  for (const auto& [name, j] : gb) {
    if (ga.count(name) == 0) Add(&out, "gpu_added", name, "", "", name + " appeared");
  }
  for (const auto& [name, i] : ga) {
    if (gb.count(name) == 0) Add(&out, "gpu_removed", name, "", "", name + " is gone");
  }
  for (const auto& [name, j] : nb) {
    if (na.count(name) == 0) Add(&out, "nic_added", name, "", "", "NIC " + name + " appeared");
  }
  for (const auto& [name, i] : na) {
    if (nb.count(name) == 0) Add(&out, "nic_removed", name, "", "", "NIC " + name + " is gone");
  }
  auto cell = [](const std::string& v) { return v.empty() ? std::string("?") : v; };
  auto ocell = [](const std::optional<std::string>& v) { return v ? *v : std::string("?"); };
  // GPU pairs once each (the matrix is symmetric as printed).
  for (const auto& [x, ia] : ga) {
    for (const auto& [y, ja] : ga) {
      if (x >= y || gb.count(x) == 0 || gb.count(y) == 0) continue;
      const size_t ib = gb.at(x), jb = gb.at(y);
      if (ia >= a.gpu_links.size() || ja >= a.gpu_links[ia].size() || ib >= b.gpu_links.size() ||
          jb >= b.gpu_links[ib].size()) {
        continue;
      }
      const std::string &va = a.gpu_links[ia][ja], &vb = b.gpu_links[ib][jb];
      if (va.empty() || vb.empty() || va == vb) continue;  // absent cells are not a change
      Add(&out, "link_changed", x + "-" + y, cell(va), cell(vb),
          x + "–" + y + " " + cell(va) + " → " + cell(vb));
    }
  }
  for (const auto& [x, ia] : ga) {
    if (gb.count(x) == 0) continue;
    const size_t ib = gb.at(x);
    for (const auto& [nic, ka] : na) {
      if (nb.count(nic) == 0) continue;
      const size_t kb = nb.at(nic);
      if (ia >= a.gpu_nic_links.size() || ka >= a.gpu_nic_links[ia].size() ||
          ib >= b.gpu_nic_links.size() || kb >= b.gpu_nic_links[ib].size()) {
        continue;
      }
      const auto &va = a.gpu_nic_links[ia][ka], &vb = b.gpu_nic_links[ib][kb];
      if (!va || !vb || *va == *vb) continue;
      Add(&out, "link_changed", x + "-" + nic, ocell(va), ocell(vb),
          x + "–" + nic + " " + ocell(va) + " → " + ocell(vb));
    }
    auto get = [](const auto& v, size_t i) {
      return i < v.size() ? v[i] : std::decay_t<decltype(v[0])>{};
    };
    const auto numa_a = get(a.numa_affinity, ia), numa_b = get(b.numa_affinity, ib);
    if (numa_a && numa_b && *numa_a != *numa_b) {
      Add(&out, "numa_changed", x, std::to_string(*numa_a), std::to_string(*numa_b),
          x + " NUMA affinity " + std::to_string(*numa_a) + " → " + std::to_string(*numa_b));
    }
    const auto cpu_a = get(a.cpu_affinity, ia), cpu_b = get(b.cpu_affinity, ib);
    if (cpu_a && cpu_b && *cpu_a != *cpu_b) {
      Add(&out, "cpu_affinity_changed", x, *cpu_a, *cpu_b,
          x + " CPU affinity " + *cpu_a + " → " + *cpu_b);
    }
  }
  return out;
}

}  // namespace gpuwatch::topo
