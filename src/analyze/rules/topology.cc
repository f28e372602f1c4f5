// topology_change: the node's GPU/NIC topology differs from what it was (findings.md: "differs
// from the archived snapshot"). Two kinds of evidence:
// - the live agent compares each snapshot with its archive and writes a topology_change event
//   (server/agent, topo/archive);
// - a node record that describes other hardware than the node's previous one: a GPU or NIC gone
//   or new, a card swapped in the same slot (its UUID is the board's, its bus id the slot's), a
//   NIC on another PCIe root or NUMA node, a GPU pair linked differently, fewer NVLinks.
//   This is what a reboot or a card swap leaves in a recording that has no archive to compare
//   with. NVML numbers GPUs afresh at each boot ("no guarantees of consistency between reboots",
//   nvmlDeviceGetHandleByIndex; docs/research/failure-shapes.md §1), so GPUs are matched by
//   bus id and UUID, never by index; an mlx5_N name follows probe order (rdma-core renames
//   devices at boot), so a NIC is matched by its bus id when it has one. A field one record
//   does not give (absent: not measured) is not a change, nor is anything else a node record
//   carries (versions, clock offset, power limits).
#include <fmt/format.h>

#include <array>
#include <map>
#include <set>

#include "analyze/rules/rules.h"
#include "common/strings.h"

namespace gpuwatch::analyze {
namespace {

constexpr std::array kCauses = {Cause::kTopologyChange};

std::string Lower(const std::optional<std::string>& s) { return s ? ToLower(*s) : ""; }

// What changed from `a` to `b`, in words; empty when the hardware is the same.
std::vector<std::string> Differences(const trace::TraceNode& a, const trace::TraceNode& b) {
  std::vector<std::string> out;
  if (a.gpus && b.gpus) {
    // Keyed by bus id (the slot) when both give it, else by UUID (the board).
    auto key = [](const trace::TraceNodeGpu& g) {
      return g.pci_bus_id ? "pci " + Lower(g.pci_bus_id) : "uuid " + Lower(g.uuid);
    };
    std::map<std::string, const trace::TraceNodeGpu*> before, after;
    for (const auto& g : *a.gpus) before[key(g)] = &g;
    for (const auto& g : *b.gpus) after[key(g)] = &g;
    for (const auto& [k, g] : before) {
      auto it = after.find(k);
      if (it == after.end()) {
        out.push_back(fmt::format("GPU at {} ({}) is gone", g->pci_bus_id.value_or("?"),
                                  g->uuid.value_or("no uuid")));
        continue;
      }
      const trace::TraceNodeGpu* h = it->second;
      if (g->uuid && h->uuid && Lower(g->uuid) != Lower(h->uuid)) {
        out.push_back(fmt::format("the GPU at {} is another board: {} → {}",
                                  g->pci_bus_id.value_or("?"), *g->uuid, *h->uuid));
      }
      if (g->numa_node && h->numa_node && *g->numa_node != *h->numa_node) {
        out.push_back(fmt::format("GPU at {} moved from NUMA node {} to {}",
                                  g->pci_bus_id.value_or("?"), *g->numa_node, *h->numa_node));
      }
      if (g->nvlink_count && h->nvlink_count && *g->nvlink_count != *h->nvlink_count) {
        out.push_back(fmt::format("GPU at {} has {} NVLinks, had {}", g->pci_bus_id.value_or("?"),
                                  *h->nvlink_count, *g->nvlink_count));
      }
    }
    for (const auto& [k, g] : after) {
      if (before.count(k) == 0) {
        out.push_back(fmt::format("a GPU at {} ({}) is new", g->pci_bus_id.value_or("?"),
                                  g->uuid.value_or("no uuid")));
      }
    }
  }
  if (a.nics && b.nics) {
    auto key = [](const trace::TraceNodeNic& n) {
      return n.pci_bus_id ? "pci " + Lower(n.pci_bus_id) : "name " + n.name.value_or("?");
    };
    std::map<std::string, const trace::TraceNodeNic*> before, after;
    for (const auto& n : *a.nics) before[key(n)] = &n;
    for (const auto& n : *b.nics) after[key(n)] = &n;
    for (const auto& [k, n] : before) {
      auto it = after.find(k);
      if (it == after.end()) {
        out.push_back(fmt::format("NIC {} ({}) is gone", n->name.value_or("?"),
                                  n->pci_bus_id.value_or("no bus id")));
        continue;
      }
      const trace::TraceNodeNic* m = it->second;
      if (n->numa_node && m->numa_node && *n->numa_node != *m->numa_node) {
        out.push_back(fmt::format("NIC {} moved from NUMA node {} to {}", n->name.value_or("?"),
                                  *n->numa_node, *m->numa_node));
      }
      if (n->type && m->type && *n->type != *m->type) {
        out.push_back(
            fmt::format("NIC {} is {} now, was {}", n->name.value_or("?"), *m->type, *n->type));
      }
    }
    for (const auto& [k, n] : after) {
      if (before.count(k) == 0) {
        out.push_back(fmt::format("NIC {} ({}) is new", n->name.value_or("?"),
                                  n->pci_bus_id.value_or("no bus id")));
      }
    }
  }
  // The GPU×GPU matrix, by bus id (indices may be renumbered).
  if (a.topology && b.topology && a.topology->gpu_links && b.topology->gpu_links && a.gpus &&
      b.gpus) {
    auto by_bus = [](const trace::TraceNode& n) {
      std::map<std::pair<std::string, std::string>, std::string> links;
      const auto& m = *n.topology->gpu_links;
      std::map<uint32_t, std::string> bus;
      for (const auto& g : *n.gpus) {
        if (g.index && g.pci_bus_id) bus[*g.index] = Lower(g.pci_bus_id);
      }
      for (size_t i = 0; i < m.size(); ++i) {
        for (size_t j = 0; j < m[i].size(); ++j) {
          auto bi = bus.find(static_cast<uint32_t>(i)), bj = bus.find(static_cast<uint32_t>(j));
          if (i != j && bi != bus.end() && bj != bus.end()) {
            links[{bi->second, bj->second}] = m[i][j];
          }
        }
      }
      return links;
    };
    const auto la = by_bus(a), lb = by_bus(b);
    for (const auto& [pair, link] : la) {
      auto it = lb.find(pair);
      if (it != lb.end() && it->second != link && pair.first < pair.second) {
        out.push_back(fmt::format("{} ↔ {}: {} → {}", pair.first, pair.second, link, it->second));
      }
    }
  }
  return out;
}

class TopologyRule : public Rule {
 public:
  std::string_view name() const override { return "topology"; }
  std::span<const Cause> causes() const override { return kCauses; }

  void Observe(const trace::TraceRecord& r, Context& ctx) override {
    if (const auto* n = r.as<trace::TraceNode>()) {
      auto it = last_.find(r.node);
      if (it != last_.end()) {
        const std::vector<std::string> diff = Differences(it->second, *n);
        if (!diff.empty()) {
          Finding f = MakeFinding(Cause::kTopologyChange, Severity::kWarning, r.node);
          f.summary = fmt::format("The node's hardware changed: {}", diff.front());
          f.evidence = diff;
          f.evidence.push_back("the node record changed against the previous one");
          f.action =
              "Compare with the archived topology (gpuwatch topo diff); reseat what was lost; "
              "rerun the node's acceptance tests before it takes jobs";
          ctx.Report(std::move(f), r.t);
        }
      }
      last_[r.node] = *n;
      return;
    }
    const auto* e = r.as<trace::TraceEvent>();
    if (!e || e->kind.value_or("") != "topology_change") return;
    const std::string message = e->message.value_or("");
    Finding f = MakeFinding(Cause::kTopologyChange, Severity::kWarning, r.node);
    f.summary = "The node's topology changed: " + message;
    f.evidence = {"topology_change: " + message};
    f.action = "Compare with the archived topology (gpuwatch topo diff); reseat what was lost";
    ctx.Report(std::move(f), r.t);
  }

 private:
  std::map<std::string, trace::TraceNode> last_;  // per node; bounded by the nodes
};

}  // namespace

std::unique_ptr<Rule> MakeTopologyRule() { return std::make_unique<TopologyRule>(); }

}  // namespace gpuwatch::analyze
