#include "nccl/nccl_analysis.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "common/strings.h"

namespace gpuwatch::nccl {
namespace {

constexpr size_t kMaxEvidenceLines = 6;

bool Contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

std::string Ev(const NcclLine& l) {
  return "line " + std::to_string(l.line_no) + ": \"" + l.text + "\"";
}
std::string Ev(const NcclChannel& c) {
  return "line " + std::to_string(c.line_no) + ": \"" + c.text + "\"";
}

std::string Join(const std::vector<std::string>& v, size_t max_items) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < max_items; ++i) {
    if (i > 0) out += ", ";
    out += v[i];
  }
  if (v.size() > max_items) out += " and " + std::to_string(v.size() - max_items) + " more";
  return out;
}

const std::string* TopoEntry(const TopoHint& t, int a, int b) {
  if (a < 0 || b < 0) return nullptr;
  const auto ua = static_cast<size_t>(a);
  const auto ub = static_cast<size_t>(b);
  if (ua >= t.gpu_links.size() || ub >= t.gpu_links[ua].size()) return nullptr;
  return &t.gpu_links[ua][ub];
}

bool IsNvEntry(const std::string& e) { return StartsWith(e, "NV"); }

bool TopoNv(const TopoHint& t, int a, int b) {
  const std::string* e = TopoEntry(t, a, b);
  return e && IsNvEntry(*e);
}

bool TopoHasNv(const TopoHint& t) {
  for (const auto& row : t.gpu_links) {
    for (const auto& e : row) {
      if (IsNvEntry(e)) return true;
    }
  }
  return false;
}

// RDMA device names as nvidia-smi topo -m and ibv_devices list them.
bool IsRdmaNicName(const std::string& n) {
  static constexpr std::string_view kPrefixes[] = {"mlx", "bnxt_re", "irdma", "efa", "erdma",
                                                   "hns", "qedr",    "ionic", "rdma"};
  return std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                     [&](std::string_view p) { return StartsWith(n, p); });
}

std::string EnvValue(const NcclHost& h, const std::string& name) {
  auto it = h.env.find(name);
  return it == h.env.end() ? "" : it->second;
}

const char* kNvlinkAction =
    "Let NCCL use P2P over NVLink: unset NCCL_P2P_DISABLE, NCCL_P2P_LEVEL=LOC and "
    "NCCL_SHM_DISABLE; run the ranks of a node in one container with --ipc=host (or one "
    "process); check `nvidia-smi topo -m` and `nvidia-smi nvlink --status` for links that are "
    "down and, on NVSwitch systems, that nvidia-fabricmanager runs";

const char* kNetAction =
    "Make NCCL use RDMA: check that rdma-core/libibverbs is installed and the IB devices are "
    "visible (in containers: /dev/infiniband and an unlimited locked-memory ulimit), unset "
    "NCCL_IB_DISABLE and NCCL_NET=Socket, set NCCL_IB_HCA to devices that exist; then confirm "
    "`Using network IB` in the NCCL log";

// What the report holds for one host, gathered once (the report's lists are flat).
struct HostView {
  std::vector<const NcclChannel*> channels;
  std::vector<const NcclProcess*> processes;
  std::vector<const NcclNetDevice*> net_devices;
};

void NvlinkFallback(const NcclLogReport& r, const TopoHint* topo, const NcclHost& h,
                    const HostView& view, std::vector<Finding>* out) {
  const bool topo_nv = topo && TopoHasNv(*topo);
  const bool host_nv = !h.nvlink_hints.empty();
  auto pair_nvlinked = [&](int a, int b) {
    if (topo) return TopoNv(*topo, a, b);
    if (host_nv) return true;
    if (a < 0 || b < 0) return false;
    const auto p = std::minmax(a, b);
    return h.nvlink_pairs.count({p.first, p.second}) > 0;
  };
  auto on_host = [&](int rank) {
    auto it = r.rank_hosts.find(rank);
    return it != r.rank_hosts.end() && it->second == h.name;
  };
  const bool one_node = r.nodes_exact && r.nodes && *r.nodes == 1;

  // Connections between two GPUs of this node over SHM, or over the network.
  std::vector<const NcclChannel*> hits;
  std::set<std::pair<int, int>> pairs;
  std::set<std::string> families;
  for (const NcclChannel* cp : view.channels) {
    const NcclChannel& c = *cp;
    if (c.to_rank < 0) continue;
    const bool net = StartsWith(c.transport, "NET");
    if (c.transport != "SHM" && !net) continue;
    if (net && !(one_node || (on_host(c.from_rank) && on_host(c.to_rank)))) continue;
    if (!pair_nvlinked(c.nvml_from, c.nvml_to)) continue;
    hits.push_back(&c);
    pairs.insert(std::minmax(c.nvml_from, c.nvml_to));
    families.insert(c.transport);
  }

  // P2P switched off on a node whose GPUs have NVLink: every connection between them falls
  // back, whether or not the log shows channel lines.
  const size_t gpus = std::max({h.cuda_devices.size(), h.nvml_devices.size(),
                                static_cast<size_t>(r.local_ranks.value_or(0))});
  const bool nv_evidence = topo ? topo_nv : (host_nv || !h.nvlink_pairs.empty());
  const bool p2p_off = !h.p2p_off.empty() && gpus >= 2 && nv_evidence;
  if (hits.empty() && !p2p_off) return;

  Finding f;
  f.cause = model::Cause::kNvlinkFallback;
  f.node = h.name;
  std::vector<std::string> pair_names;
  for (const auto& [a, b] : pairs) {
    pair_names.push_back(a >= 0 && b >= 0 ? "GPU " + std::to_string(a) + "-" + std::to_string(b)
                                          : "GPUs of unknown index");
  }
  if (pairs.size() == 1 && pairs.begin()->first >= 0 && pairs.begin()->second >= 0) {
    f.gpu = pairs.begin()->first;
    f.peer_gpu = pairs.begin()->second;
  }
  const std::string shm_disable = EnvValue(h, "NCCL_SHM_DISABLE");
  if (!hits.empty()) {
    std::vector<std::string> fam(families.begin(), families.end());
    f.summary = "On " + h.name + ", NCCL connects GPUs that have NVLink over " + Join(fam, 4) +
                " instead of NVLink (" + Join(pair_names, 6) + "; " + std::to_string(hits.size()) +
                " channel connection" + (hits.size() == 1 ? "" : "s") + ")";
  } else {
    std::string why;
    const std::string disable = EnvValue(h, "NCCL_P2P_DISABLE");
    const std::string level = EnvValue(h, "NCCL_P2P_LEVEL");
    if (disable == "1") why = "NCCL_P2P_DISABLE=1";
    if (level == "LOC" || level == "0") {
      why += (why.empty() ? "" : ", ") + ("NCCL_P2P_LEVEL=" + level);
    }
    if (why.empty()) why = "NCCL could not enable P2P";
    f.summary =
        "On " + h.name + ", P2P between GPUs is off (" + why +
        ") although they have NVLink: NCCL sends their traffic over " +
        (shm_disable == "1" ? "the network (NCCL_SHM_DISABLE=1)" : "shared memory or the network");
  }
  const bool over_net = std::any_of(families.begin(), families.end(),
                                    [](const std::string& x) { return StartsWith(x, "NET"); }) ||
                        (hits.empty() && shm_disable == "1");
  f.summary += over_net ? "; traffic inside the node runs at network speed"
                        : "; traffic inside the node runs at PCIe/host-memory speed";

  // Why we believe the NVLink is there.
  if (topo) {
    size_t n = 0;
    for (const auto& [a, b] : pairs) {
      if (n++ >= 3) break;
      if (const std::string* e = TopoEntry(*topo, a, b)) {
        f.evidence.push_back("topo -m: GPU" + std::to_string(a) + " - GPU" + std::to_string(b) +
                             " " + *e);
      }
    }
    for (size_t a = 0; pairs.empty() && a < topo->gpu_links.size(); ++a) {
      for (size_t b = a + 1; b < topo->gpu_links[a].size(); ++b) {
        if (!IsNvEntry(topo->gpu_links[a][b])) continue;
        f.evidence.push_back("topo -m: GPU" + std::to_string(a) + " - GPU" + std::to_string(b) +
                             " " + topo->gpu_links[a][b]);
        break;
      }
      if (!f.evidence.empty()) break;
    }
  } else {
    for (size_t i = 0; i < h.nvlink_hints.size() && i < 2; ++i) {
      f.evidence.push_back(Ev(h.nvlink_hints[i]));
    }
    size_t n = 0;
    for (const auto& [pair, line] : h.nvlink_pairs) {
      if (!pairs.count(pair)) continue;
      if (n++ >= 2) break;
      f.evidence.push_back(Ev(line) + " (P2P read: NVLink between GPU " +
                           std::to_string(pair.first) + " and " + std::to_string(pair.second) +
                           ")");
    }
  }
  for (size_t i = 0; i < h.p2p_off.size() && i < 3; ++i) f.evidence.push_back(Ev(h.p2p_off[i]));
  for (size_t i = 0; i < hits.size() && i < kMaxEvidenceLines; ++i) {
    f.evidence.push_back(Ev(*hits[i]));
  }
  if (hits.size() > kMaxEvidenceLines) {
    f.evidence.push_back("… and " + std::to_string(hits.size() - kMaxEvidenceLines) +
                         " more connections like these");
  }
  if (shm_disable == "1") f.evidence.push_back("NCCL_SHM_DISABLE=1 on " + h.name);
  f.action = kNvlinkAction;
  out->push_back(std::move(f));
}

void NetFallback(const NcclLogReport& r, const TopoHint* topo, const NcclHost& h,
                 const HostView& view, std::vector<Finding>* out) {
  // Traffic of this host over sockets: processes that chose the Socket net, NET/Socket
  // channel connections.
  std::vector<std::string> socket_evidence;
  for (const NcclProcess* p : view.processes) {
    if (p->network == "Socket" && socket_evidence.size() < 3) {
      socket_evidence.push_back(Ev(p->network_line));
    }
  }
  size_t socket_channels = 0;
  for (const NcclChannel* c : view.channels) {
    if (c->transport != "NET/Socket") continue;
    if (socket_channels++ < 3) socket_evidence.push_back(Ev(*c));
  }
  if (socket_evidence.empty()) return;

  // RDMA NICs that are there.
  std::vector<std::string> own_nics;
  for (const NcclNetDevice* d : view.net_devices) {
    if (StartsWith(d->net, "IB")) own_nics.push_back(d->name);
  }
  std::vector<std::string> topo_nics;
  if (topo) {
    for (const auto& n : topo->nics) {
      if (IsRdmaNicName(n)) topo_nics.push_back(n);
    }
  }
  const bool topo_rdma = topo && (topo->ib_present || !topo_nics.empty());
  const std::string ib_disable = EnvValue(h, "NCCL_IB_DISABLE");
  const bool ib_off = h.ib_no_device || h.ibverbs_missing || ib_disable == "1";
  const bool hinted = ib_off && !h.ib_hints.empty();
  std::vector<const NcclHost*> others;
  for (const auto& o : r.hosts) {
    if (o.name != h.name && o.ib_devices && others.size() < 8) others.push_back(&o);
  }
  if (own_nics.empty() && !topo_rdma && !hinted && others.empty()) return;

  Finding f;
  f.cause = model::Cause::kNetFallback;
  f.node = h.name;
  std::string where;
  if (!own_nics.empty()) {
    where = "NCCL lists " + Join(own_nics, 3) + " on this node";
  } else if (topo_rdma) {
    where = topo_nics.empty() ? "the topology shows RDMA NICs"
                              : "the topology shows " + Join(topo_nics, 3);
  } else if (hinted) {
    where = "the node has IB settings or devices although NET/IB found none usable";
  } else {
    std::vector<std::string> names;
    for (const auto* o : others) names.push_back(o->name);
    where = "other nodes of this job use IB (" + Join(names, 3) +
            "), so its ranks do not agree on the network";
  }
  f.summary = "Inter-node NCCL traffic of " + h.name +
              " goes over TCP sockets (NET/Socket) although RDMA NICs are present: " + where;
  const std::vector<std::string>& nics = !own_nics.empty() ? own_nics : topo_nics;
  if (nics.size() == 1) f.nic = nics[0];

  for (const auto& e : socket_evidence) f.evidence.push_back(e);
  if (socket_channels > 3) {
    f.evidence.push_back("… and " + std::to_string(socket_channels - 3) +
                         " more NET/Socket connections");
  }
  if (!own_nics.empty()) {
    for (size_t i = 0; i < h.net_lines.size() && i < 2; ++i) {
      if (!Contains(h.net_lines[i].text, "NET/Socket")) f.evidence.push_back(Ev(h.net_lines[i]));
    }
  } else if (topo_rdma) {
    f.evidence.push_back("topo -m NICs: " +
                         (topo_nics.empty() ? std::string("RDMA present") : Join(topo_nics, 8)));
  }
  if (hinted) {
    for (size_t i = 0; i < h.ib_hints.size() && i < 2; ++i) f.evidence.push_back(Ev(h.ib_hints[i]));
  }
  if (ib_disable == "1") f.evidence.push_back("NCCL_IB_DISABLE=1 on " + h.name);
  if (h.ib_no_device) f.evidence.push_back("NET/IB : No device found (on " + h.name + ")");
  if (h.ibverbs_missing) f.evidence.push_back("libibverbs could not be opened on " + h.name);
  if (own_nics.empty() && !topo_rdma && !hinted) {
    for (size_t i = 0; i < others.size() && i < 2; ++i) {
      if (!others[i]->net_lines.empty()) f.evidence.push_back(Ev(others[i]->net_lines[0]));
    }
  }
  f.action = kNetAction;
  out->push_back(std::move(f));
}

}  // namespace

namespace {

std::string CudaVersionText(int v) {
  // cudaDriverVersion 12020 -> "12.2" (NCCL prints CUDA's 1000*major + 10*minor).
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// The nodes of one log that differ from the others in one version: every host's first reported
// value is grouped; the largest group is the job's (a tie goes to rank 0's node, else to the
// first host seen), and each host outside it — or reporting two values itself — is
// a node that differs. Appends "<what> X on this node, Y on n1, n2" and the evidence per node.
template <typename T>
void VersionGroups(const NcclLogReport& r,
                   const std::vector<std::pair<T, NcclLine>> NcclHost::*field,
                   const std::function<std::string(const T&)>& text, const char* what,
                   std::map<std::string, Finding>* by_node) {
  std::vector<const NcclHost*> hosts;
  for (const auto& h : r.hosts) {
    if (!(h.*field).empty()) hosts.push_back(&h);
  }
  if (hosts.size() < 2 && !(hosts.size() == 1 && (hosts[0]->*field).size() > 1)) return;
  std::map<T, std::vector<const NcclHost*>> groups;
  for (const NcclHost* h : hosts) groups[(h->*field)[0].first].push_back(h);
  // Ties go to rank 0's node where the log ties rank 0 to a host, else to the first host seen.
  const NcclHost* first = hosts[0];
  if (auto it = r.rank_hosts.find(0); it != r.rank_hosts.end()) {
    for (const NcclHost* h : hosts) {
      if (h->name == it->second) first = h;
    }
  }
  const T* reference = &(first->*field)[0].first;
  for (const auto& [value, members] : groups) {
    if (members.size() > groups[*reference].size()) reference = &value;
  }
  const std::vector<const NcclHost*>& ref_hosts = groups[*reference];
  for (const NcclHost* h : hosts) {
    const auto& values = h->*field;
    const bool differs = values[0].first != *reference || values.size() > 1;
    if (!differs) continue;
    std::vector<std::string> mine, others;
    for (const auto& [v, line] : values) mine.push_back(text(v));
    for (const NcclHost* o : ref_hosts) {
      if (o != h) others.push_back(o->name);
    }
    Finding& f = (*by_node)[h->name];
    f.cause = model::Cause::kVersionMismatch;
    f.node = h->name;
    if (!f.summary.empty()) f.summary += "; ";
    f.summary += std::string(what) + " " + Join(mine, 4) + " on " + h->name;
    if (!others.empty()) {
      f.summary += ", " + text(*reference) + " on " + Join(others, 4);
    } else if (values.size() > 1) {
      f.summary += " (two builds on one node)";
    }
    for (const auto& [v, line] : values) {
      if (f.evidence.size() < kMaxEvidenceLines) f.evidence.push_back(Ev(line));
    }
    for (const NcclHost* o : ref_hosts) {
      if (o == h || f.evidence.size() >= kMaxEvidenceLines) continue;
      f.evidence.push_back(Ev((o->*field)[0].second));
      break;  // one line of the majority is enough to show what the others run
    }
  }
}

// version_mismatch (R12): the ranks of one job on different NCCL builds or CUDA drivers. NCCL
// does not check that its peers match; the result is a hang at init, wrong protocol choices,
// or silent slowness.
void VersionMismatch(const NcclLogReport& r, std::vector<Finding>* out) {
  std::map<std::string, Finding> by_node;
  VersionGroups<std::string>(
      r, &NcclHost::nccl_versions, [](const std::string& v) { return v; }, "NCCL", &by_node);
  VersionGroups<int>(r, &NcclHost::cuda_driver_versions, CudaVersionText, "CUDA driver", &by_node);
  for (const auto& h : r.hosts) {  // first-seen order
    auto it = by_node.find(h.name);
    if (it == by_node.end()) continue;
    Finding f = std::move(it->second);
    f.action =
        "Run every node of the job on the same NVIDIA driver, CUDA and NCCL build (one container "
        "image, one driver version across the node pool); drain the node that differs until it "
        "is updated.";
    out->push_back(std::move(f));
  }
}

}  // namespace

std::vector<Finding> AnalyzeNccl(const NcclLogReport& report, const TopoHint* topo) {
  std::vector<Finding> out;
  std::unordered_map<std::string_view, HostView> views;
  for (const auto& h : report.hosts) views[h.name];
  for (const auto& c : report.channels) {
    if (auto it = views.find(c.host); it != views.end()) it->second.channels.push_back(&c);
  }
  for (const auto& p : report.processes) {
    if (auto it = views.find(p.host); it != views.end()) it->second.processes.push_back(&p);
  }
  for (const auto& d : report.net_devices) {
    if (auto it = views.find(d.host); it != views.end()) it->second.net_devices.push_back(&d);
  }
  for (const auto& h : report.hosts) NvlinkFallback(report, topo, h, views[h.name], &out);

  // Sockets matter only between nodes: communicators of one node (nNodes 1) never use the net.
  const bool single_node = report.nodes_exact && report.nodes && *report.nodes <= 1;
  const bool socket_channels = report.transports.count("NET/Socket") > 0;
  const bool multi_node = !single_node && (report.hosts.size() > 1 ||
                                           (report.nodes && *report.nodes > 1) || socket_channels);
  if (multi_node) {
    for (const auto& h : report.hosts) NetFallback(report, topo, h, views[h.name], &out);
  }
  VersionMismatch(report, &out);
  return out;
}

nlohmann::json FindingJson(const Finding& f) {
  nlohmann::json j;
  j["cause"] = model::CauseName(f.cause);
  j["layer"] = model::LayerName(model::LayerOf(f.cause));
  j["severity"] = model::SeverityName(f.severity);
  j["node"] = f.node;
  if (f.gpu) j["gpu"] = *f.gpu;
  if (f.peer_gpu) j["peer_gpu"] = *f.peer_gpu;
  if (!f.nic.empty()) j["nic"] = f.nic;
  j["summary"] = f.summary;
  j["evidence"] = f.evidence;
  j["action"] = f.action;
  return j;
}

nlohmann::json NcclReportJson(const NcclLogReport& r, const std::vector<Finding>& findings) {
  using nlohmann::json;
  json j;
  j["nccl_version"] = r.nccl_version ? json(*r.nccl_version) : json(nullptr);
  j["ranks"] = r.ranks ? json(*r.ranks) : json(nullptr);
  j["nodes"] = r.nodes ? json(*r.nodes) : json(nullptr);
  json transports = json::object();
  for (const char* family : {"P2P/IPC", "P2P/CUMEM", "P2P/NVL", "P2P/direct", "SHM", "NET/IB",
                             "NET/Socket", "COLLNET", "NVLS"}) {
    transports[family] = 0;
  }
  for (const auto& [family, n] : r.transports) transports[family] = n;
  j["transports"] = std::move(transports);
  json channels = json::array();
  for (const auto& c : r.channels) {
    json cj;
    cj["channel"] = c.channel >= 0 ? json(c.channel) : json(nullptr);
    cj["from_rank"] = c.from_rank >= 0 ? json(c.from_rank) : json(nullptr);
    cj["to_rank"] = c.to_rank >= 0 ? json(c.to_rank) : json(nullptr);
    cj["transport"] = c.transport;
    channels.push_back(std::move(cj));
  }
  j["channels"] = std::move(channels);
  json errors = json::array();
  for (const auto& e : r.errors) {
    errors.push_back("line " + std::to_string(e.line_no) + ": " + e.text);
  }
  j["errors"] = std::move(errors);
  json fj = json::array();
  for (const auto& f : findings) fj.push_back(FindingJson(f));
  j["findings"] = std::move(fj);
  return j;
}

}  // namespace gpuwatch::nccl
