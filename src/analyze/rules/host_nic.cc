// Host and NIC rules:
// - net_errors: NIC errors or RDMA retransmissions that keep rising, or a NIC going down. A link
//   between nodes is judged from both ends: retransmissions are counted by the sender
//   (transport retries such as local_ack_timeout_err, trace-format.md), so they rise on a node
//   whose peer's end of the link is bad. A NIC whose only rise is retransmissions, while a
//   node of the same job sees its own NIC's errors or link drop, is that node's far end: the
//   finding is the peer's, with this NIC as evidence, not a second fault here;
// - net_congestion: a NIC near its link rate for most of half a minute while a job on the node
//   waits in communication well beyond its own baseline;
// - numa_mismatch: a GPU process on CPUs of another NUMA node than its GPU's.
#include <fmt/format.h>

#include <array>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "analyze/rules/counter_runs.h"
#include "analyze/rules/rules.h"
#include "common/stats.h"

namespace gpuwatch::analyze {
namespace {

constexpr std::array kCauses = {Cause::kNetErrors, Cause::kNetCongestion, Cause::kNumaMismatch};

class HostNicRule : public Rule {
 public:
  explicit HostNicRule(const HostNicOptions& o) : o_(o) {}
  std::string_view name() const override { return "host_nic"; }
  std::span<const Cause> causes() const override { return kCauses; }

  void Observe(const trace::TraceRecord& r, Context& ctx) override {
    if (const auto* h = r.as<trace::TraceHost>()) OnHost(r, *h, ctx);
    if (const auto* p = r.as<trace::TraceProc>()) Numa(r, *p, ctx);
  }

 private:
  struct NicState {
    std::map<std::string, double> counters;  // field -> last value
    std::deque<double> increments;           // times a counter rose
    std::deque<double> own_faults;           // times its errors rose or its link went down
    std::optional<bool> up;
    std::deque<std::pair<double, bool>> load;  // (t, saturated) within the window
  };

  void OnHost(const trace::TraceRecord& r, const trace::TraceHost& h, Context& ctx);
  void Numa(const trace::TraceRecord& r, const trace::TraceProc& p, Context& ctx);
  // Whether a job on `node` (seen there, or spanning it) waits in communication well beyond its
  // own baseline now.
  bool CommWaitUp(const Context& ctx, const std::string& node, std::string* evidence) const;
  // The nodes that share a job with `node` (not `node` itself).
  std::set<std::string> JobPeers(const Context& ctx, const std::string& node) const;
  // The job peers' NICs, "node/nic" each: those with their own errors (or a link drop) since
  // `since` (kOwnFaults), or with retransmissions alone since then (kRetryingOnly).
  enum class PeerNics { kOwnFaults, kRetryingOnly };
  std::vector<std::string> PeersWith(PeerNics which, const Context& ctx, const std::string& node,
                                     double since) const;

  HostNicOptions o_;
  std::map<std::pair<std::string, std::string>, NicState> nics_;  // (node, NIC)
};

bool HostNicRule::CommWaitUp(const Context& ctx, const std::string& node,
                             std::string* evidence) const {
  // The jobs on this node (any record of theirs here: start, proc, log, step): their steps here,
  // or, for a job that spans nodes, the steps of its ranks elsewhere (a collective holds every rank
  // to the slowest link, so the wait shows on every node of the job, also where this NIC is not).
  for (const auto& [key, ts] : ctx.tasks()) {
    if (ts.ended || ts.comm_share.size() < 5) continue;
    if (key.first != node && ctx.Task(node, key.second) == nullptr) continue;
    const double now = MedianOfValues(ts.comm_share);
    const double base = ts.comm_base_share.value_or(now);
    if (now >= o_.comm_share_floor ||
        (ts.comm_base_share && now >= o_.comm_factor * base && now - base >= 0.05)) {
      *evidence = fmt::format(
          "job {} spends {:.0f}% of each step in exposed comm (baseline {:.0f}%){}", key.second,
          now * 100, base * 100, key.first == node ? "" : " on its ranks on " + key.first);
      return true;
    }
  }
  return false;
}

std::set<std::string> HostNicRule::JobPeers(const Context& ctx, const std::string& node) const {
  // The node's jobs first (a few), then their nodes: one pass over a hub's tasks a job, not one
  // a task.
  std::set<std::string> jobs, peers;
  for (const auto& [key, ts] : ctx.tasks())
    if (key.first == node) jobs.insert(key.second);
  for (const std::string& job : jobs) {
    for (const std::string& n : ctx.NodesOf(job))
      if (n != node) peers.insert(n);
  }
  return peers;
}

std::vector<std::string> HostNicRule::PeersWith(PeerNics which, const Context& ctx,
                                                const std::string& node, double since) const {
  std::vector<std::string> out;
  for (const std::string& peer : JobPeers(ctx, node)) {
    for (auto it = nics_.lower_bound({peer, ""}); it != nics_.end() && it->first.first == peer;
         ++it) {
      const NicState& n = it->second;
      const bool own = !n.own_faults.empty() && n.own_faults.back() >= since;
      const bool retrying = !n.increments.empty() && n.increments.back() >= since;
      if (which == PeerNics::kOwnFaults ? own : retrying && !own)
        out.push_back(peer + "/" + it->first.second);
    }
  }
  return out;
}

void HostNicRule::OnHost(const trace::TraceRecord& r, const trace::TraceHost& h, Context& ctx) {
  if (!h.nics) return;
  for (const auto& [name, nic] : *h.nics) {
    NicState& s = nics_[{r.node, name}];
    bool rose = false, errors_rose = false;
    for (auto [field, value] :
         {std::pair{"errors", nic.errors}, std::pair{"retransmits", nic.retransmits}}) {
      if (!value) continue;
      auto it = s.counters.find(field);
      if (it != s.counters.end() && *value > it->second) {
        rose = true;
        errors_rose = errors_rose || std::string_view(field) == "errors";
      }
      s.counters[field] = *value;
    }
    const double window_start = r.t - o_.counter_window_s;
    if (rose) {
      s.increments.push_back(r.t);
      while (!s.increments.empty() && s.increments.front() < window_start) {
        s.increments.pop_front();
      }
    }
    const bool down = nic.link_up && !*nic.link_up && s.up.value_or(false);
    if (nic.link_up) s.up = *nic.link_up;
    if (errors_rose || down) s.own_faults.push_back(r.t);
    while (!s.own_faults.empty() && s.own_faults.front() < window_start) s.own_faults.pop_front();
    // Retries alone here while a job peer's own end fails: the peer's fault, seen from here.
    // (The peers are looked up only when there is something to report.)
    const bool own = !s.own_faults.empty();
    if ((down || (rose && static_cast<int>(s.increments.size()) >= o_.counter_increments)) &&
        (own || PeersWith(PeerNics::kOwnFaults, ctx, r.node, window_start).empty())) {
      Finding f = MakeFinding(Cause::kNetErrors, Severity::kWarning, r.node);
      f.nic = name;
      f.first_seen = down ? r.t : RunStart(s.increments, o_.MaxIncrementGap());
      f.summary = down ? fmt::format("NIC {} went down", name)
                       : fmt::format("NIC {} errors or RDMA retransmissions keep rising", name);
      f.evidence = {down ? "link_up false"
                         : fmt::format("errors/retransmits rose {} times in {} s",
                                       s.increments.size(), Num(o_.counter_window_s))};
      if (own) {
        const std::vector<std::string> far =
            PeersWith(PeerNics::kRetryingOnly, ctx, r.node, window_start);
        if (!far.empty())
          f.evidence.push_back(fmt::format(
              "the far end: RDMA retransmissions alone rise on {} of the same job (its sends "
              "to this node are retried)",
              fmt::join(far, ", ")));
      }
      f.action =
          "Check the cable, transceiver and switch port (ibstat, ethtool -S, the switch "
          "counters)";
      ctx.Report(std::move(f), r.t);
    }
    // net_congestion: near the link rate for most of the window, while a job waits in comm.
    std::optional<double> link_gbps;
    if (const trace::TraceNode* n = ctx.Node(r.node); n && n->nics) {
      for (const auto& ni : *n->nics) {
        if (ni.name == name) link_gbps = ni.link_gbps;
      }
    }
    if (!link_gbps || *link_gbps <= 0 || !(nic.tx_mbs || nic.rx_mbs)) continue;
    const double gbps = std::max(nic.tx_mbs.value_or(0), nic.rx_mbs.value_or(0)) * 8 / 1000;
    s.load.push_back({r.t, gbps >= o_.nic_saturation * *link_gbps});
    while (!s.load.empty() && s.load.front().first < r.t - o_.nic_window_s) s.load.pop_front();
    size_t hot = 0;
    for (const auto& [lt, h2] : s.load) hot += h2 ? 1 : 0;
    std::string why;
    if (s.load.size() >= 3 && s.load.back().first - s.load.front().first >= o_.nic_window_s * 0.6 &&
        hot * 5 >= s.load.size() * 4 && CommWaitUp(ctx, r.node, &why)) {
      double first = r.t;
      for (const auto& [lt, h2] : s.load) {
        if (h2) {
          first = lt;
          break;
        }
      }
      Finding f = MakeFinding(Cause::kNetCongestion, Severity::kWarning, r.node);
      f.nic = name;
      f.first_seen = first;
      f.summary =
          fmt::format("NIC {} runs at {:.0f} of its {} Gb/s while a job waits in communication",
                      name, gbps, Num(*link_gbps));
      f.evidence = {fmt::format("{} of {} host samples at >= {:.0f}% of the link rate", hot,
                                s.load.size(), o_.nic_saturation * 100),
                    why};
      f.action =
          "Check the fabric's congestion counters and the other jobs on this NIC and "
          "switch; spread the ranks or rebalance the traffic";
      ctx.Report(std::move(f), r.t);
    }
  }
}

void HostNicRule::Numa(const trace::TraceRecord& r, const trace::TraceProc& p, Context& ctx) {
  if (!p.gpu || !p.cpu_numa_nodes || p.cpu_numa_nodes->empty()) return;
  const trace::TraceNodeGpu* info = ctx.NodeGpu(r.node, *p.gpu);
  if (!info || !info->numa_node) return;
  const auto& nodes = *p.cpu_numa_nodes;
  if (std::find(nodes.begin(), nodes.end(), static_cast<uint32_t>(*info->numa_node)) !=
      nodes.end()) {
    return;
  }
  Finding f =
      MakeFinding(Cause::kNumaMismatch, Severity::kWarning, r.node, static_cast<int>(*p.gpu));
  f.summary = fmt::format(
      "The process feeding GPU {} (pid {}) runs on NUMA node(s) {} while "
      "the GPU hangs off node {}",
      *p.gpu, p.pid.value_or(0), fmt::join(nodes, ","), *info->numa_node);
  f.evidence = {fmt::format("cpu_numa_nodes [{}] vs GPU numa_node {}", fmt::join(nodes, ","),
                            *info->numa_node)};
  f.action =
      "Bind each rank to its GPU's NUMA node (numactl --cpunodebind, or the launcher's "
      "binding options)";
  ctx.Report(std::move(f), r.t);
}

}  // namespace

std::unique_ptr<Rule> MakeHostNicRule(const HostNicOptions& o) {
  return std::make_unique<HostNicRule>(o);
}

}  // namespace gpuwatch::analyze
