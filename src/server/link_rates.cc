#include "server/link_rates.h"

#include <initializer_list>
#include <set>

namespace gpuwatch::server {

namespace {

using model::GpuMetric;

// Sum of the increases of the counters present in both samples; nullopt when none is.
struct Increase {
  double dt_s = 0;
  bool reset = false;

  std::optional<double> Rate(
      std::initializer_list<std::pair<std::optional<uint64_t>, std::optional<uint64_t>>> pairs) {
    bool any = false;
    double sum = 0;
    for (const auto& [p, c] : pairs) {
      if (!p || !c) continue;
      any = true;
      sum += static_cast<double>(CounterIncrease(*p, *c, &reset));
    }
    if (!any || dt_s <= 0) return std::nullopt;
    return sum / dt_s;
  }
};

std::optional<double> Share(std::optional<double> rate, std::optional<double> rated) {
  if (!rate || !rated || *rated <= 0) return std::nullopt;
  return *rate / *rated;
}

}  // namespace

std::optional<double> NvlinkRatedBytesPerSec(unsigned version) {
  switch (version) {
    case 1:
      return 20e9;
    case 2:
    case 3:
    case 4:
      return 25e9;
    case 5:
      return 50e9;
  }
  return std::nullopt;
}

std::optional<double> PcieRatedBytesPerSec(unsigned gen, unsigned width) {
  static constexpr double kPerLane[] = {0, 0.25e9, 0.5e9, 0.985e9, 1.969e9, 3.938e9, 7.563e9};
  if (gen == 0 || gen >= std::size(kPerLane) || width == 0 || width > 32) return std::nullopt;
  return kPerLane[gen] * width;
}

uint64_t CounterIncrease(uint64_t prev, uint64_t cur, bool* reset) {
  if (cur >= prev) return cur - prev;
  *reset = true;
  return cur;
}

std::vector<LinkRate> LinkRateTracker::UpdateHost(const model::HostSample& h,
                                                  std::vector<VanishedLink>* vanished) {
  std::vector<LinkRate> out;
  const model::HostSample* prev = prev_host_ ? &*prev_host_ : nullptr;
  const double dt_s = prev ? static_cast<double>(h.time_ms - prev->time_ms) / 1000.0 : 0;
  for (const model::NicSample& n : h.nics) {
    LinkRate r;
    r.kind = "nic";
    r.labels = {{"interface", n.name}};
    r.time_ms = h.time_ms;
    if (n.speed_mbps) r.rated_bytes_per_s = *n.speed_mbps * 1e6 / 8;
    const model::NicSample* p = nullptr;
    if (prev != nullptr) {
      for (const auto& x : prev->nics) {
        if (x.name == n.name) p = &x;
      }
    }
    if (p != nullptr && dt_s > 0) {
      Increase inc{dt_s};
      r.rx_bytes_per_s = inc.Rate({{p->rx_bytes, n.rx_bytes}});
      r.tx_bytes_per_s = inc.Rate({{p->tx_bytes, n.tx_bytes}});
      r.errors_per_s = inc.Rate({{p->rx_errors, n.rx_errors}, {p->tx_errors, n.tx_errors}});
      r.drops_per_s = inc.Rate({{p->rx_dropped, n.rx_dropped}, {p->tx_dropped, n.tx_dropped}});
      r.reset = inc.reset;
      r.rx_util = Share(r.rx_bytes_per_s, r.rated_bytes_per_s);
      r.tx_util = Share(r.tx_bytes_per_s, r.rated_bytes_per_s);
    }
    out.push_back(std::move(r));
  }
  for (const model::IbPortSample& port : h.ib_ports) {
    LinkRate r;
    r.kind = "ib_port";
    r.labels = {{"device", port.device}, {"port", std::to_string(port.port)}};
    r.time_ms = h.time_ms;
    if (port.rate_gbps) r.rated_bytes_per_s = *port.rate_gbps * 1e9 / 8;
    const model::IbPortSample* p = nullptr;
    if (prev != nullptr) {
      for (const auto& x : prev->ib_ports) {
        if (x.device == port.device && x.port == port.port) p = &x;
      }
    }
    if (p != nullptr && dt_s > 0) {
      Increase inc{dt_s};
      r.rx_bytes_per_s = inc.Rate({{p->rcv_bytes, port.rcv_bytes}});
      r.tx_bytes_per_s = inc.Rate({{p->xmit_bytes, port.xmit_bytes}});
      r.errors_per_s =
          inc.Rate({{p->symbol_errors, port.symbol_errors}, {p->rcv_errors, port.rcv_errors}});
      r.drops_per_s = inc.Rate({{p->xmit_discards, port.xmit_discards}});
      r.retransmits_per_s = inc.Rate({{p->local_ack_timeout_err, port.local_ack_timeout_err},
                                      {p->out_of_sequence, port.out_of_sequence},
                                      {p->packet_seq_err, port.packet_seq_err},
                                      {p->rnr_nak_retry_err, port.rnr_nak_retry_err},
                                      {p->implied_nak_seq_err, port.implied_nak_seq_err}});
      r.xmit_wait_per_s = inc.Rate({{p->port_xmit_wait, port.port_xmit_wait}});
      r.ecn_marked_per_s =
          inc.Rate({{p->np_ecn_marked_roce_packets, port.np_ecn_marked_roce_packets}});
      r.reset = inc.reset;
      r.rx_util = Share(r.rx_bytes_per_s, r.rated_bytes_per_s);
      r.tx_util = Share(r.tx_bytes_per_s, r.rated_bytes_per_s);
    }
    out.push_back(std::move(r));
  }
  if (prev != nullptr && vanished != nullptr) {
    std::set<std::string> nics, ports;
    for (const auto& n : h.nics) nics.insert(n.name);
    for (const auto& p : h.ib_ports) ports.insert(p.device + "/" + std::to_string(p.port));
    for (const auto& n : prev->nics) {
      if (n.physical && nics.count(n.name) == 0) vanished->push_back({"nic", n.name});
    }
    for (const auto& p : prev->ib_ports) {
      const std::string name = p.device + "/" + std::to_string(p.port);
      if (ports.count(name) == 0) vanished->push_back({"ib_port", name});
    }
  }
  prev_host_ = h;
  return out;
}

std::vector<LinkRate> LinkRateTracker::UpdateGpus(const std::vector<model::GpuStaticInfo>& devices,
                                                  const std::vector<model::GpuSample>& samples,
                                                  const topo::NodeSnapshot* topology) {
  std::vector<LinkRate> out;
  for (size_t i = 0; i < samples.size() && i < devices.size(); ++i) {
    const model::GpuSample& s = samples[i];
    if (s.time_ms == 0 || s.lost) continue;
    const model::GpuStaticInfo& dev = devices[i];
    const std::string gpu = std::to_string(dev.index);
    const topo::GpuFacts* facts = nullptr;
    if (topology != nullptr) {
      for (const auto& g : topology->gpus) {
        if (g.index == dev.index) facts = &g;
      }
    }

    // PCIe: NVML already reports a rate (a 20 ms window); the share is of what the link can
    // carry as trained now.
    auto tx = s.Get(GpuMetric::kPcieTxBytesPerSec), rx = s.Get(GpuMetric::kPcieRxBytesPerSec);
    auto gen = s.Get(GpuMetric::kPcieGen), width = s.Get(GpuMetric::kPcieWidth);
    if (tx || rx) {
      LinkRate r;
      r.kind = "pcie";
      r.labels = {{"gpu", gpu}, {"UUID", dev.uuid}};
      r.time_ms = s.time_ms;
      r.tx_bytes_per_s = tx;
      r.rx_bytes_per_s = rx;
      if (gen && width) {
        r.rated_bytes_per_s =
            PcieRatedBytesPerSec(static_cast<unsigned>(*gen), static_cast<unsigned>(*width));
      }
      r.rx_util = Share(r.rx_bytes_per_s, r.rated_bytes_per_s);
      r.tx_util = Share(r.tx_bytes_per_s, r.rated_bytes_per_s);
      out.push_back(std::move(r));
    }

    if (s.nvlinks.empty()) {
      prev_gpu_[dev.index] = s;
      continue;
    }
    auto pit = prev_gpu_.find(dev.index);
    const model::GpuSample* prev = pit != prev_gpu_.end() ? &pit->second : nullptr;
    const double dt_s = prev ? static_cast<double>(s.time_ms - prev->time_ms) / 1000.0 : 0;
    // Per far end: the links' rates summed (only links that have one) and their rated sum.
    struct PeerSum {
      std::optional<double> rx, tx, rated, errors;
      bool reset = false;
    };
    std::map<std::string, PeerSum> peers;
    auto add = [](std::optional<double>* sum, std::optional<double> v) {
      if (v) *sum = sum->value_or(0) + *v;
    };
    for (const model::NvLinkSample& l : s.nvlinks) {
      LinkRate r;
      r.kind = "nvlink";
      r.labels = {{"gpu", gpu}, {"UUID", dev.uuid}, {"link", std::to_string(l.link)}};
      r.time_ms = s.time_ms;
      std::string peer = "unknown";
      if (facts != nullptr) {
        for (const auto& lf : facts->nvlinks) {
          if (lf.link != l.link) continue;
          if (lf.version && l.active) r.rated_bytes_per_s = NvlinkRatedBytesPerSec(*lf.version);
          peer = lf.remote_gpu ? "GPU" + std::to_string(*lf.remote_gpu) : lf.remote_kind;
        }
      }
      const model::NvLinkSample* pl = nullptr;
      if (prev != nullptr) {
        for (const auto& x : prev->nvlinks) {
          if (x.link == l.link) pl = &x;
        }
      }
      if (pl != nullptr && dt_s > 0) {
        Increase inc{dt_s};
        r.rx_bytes_per_s = inc.Rate({{pl->rx_bytes, l.rx_bytes}});
        r.tx_bytes_per_s = inc.Rate({{pl->tx_bytes, l.tx_bytes}});
        r.errors_per_s = inc.Rate({{pl->crc_flit_errors, l.crc_flit_errors},
                                   {pl->crc_data_errors, l.crc_data_errors},
                                   {pl->replay_errors, l.replay_errors},
                                   {pl->recovery_errors, l.recovery_errors}});
        r.reset = inc.reset;
        r.rx_util = Share(r.rx_bytes_per_s, r.rated_bytes_per_s);
        r.tx_util = Share(r.tx_bytes_per_s, r.rated_bytes_per_s);
      }
      PeerSum& ps = peers[peer];
      add(&ps.rx, r.rx_bytes_per_s);
      add(&ps.tx, r.tx_bytes_per_s);
      add(&ps.rated, r.rated_bytes_per_s);
      add(&ps.errors, r.errors_per_s);
      ps.reset |= r.reset;
      out.push_back(std::move(r));
    }
    for (const auto& [peer, ps] : peers) {
      LinkRate r;
      r.kind = "nvlink_peer";
      r.labels = {{"gpu", gpu}, {"UUID", dev.uuid}, {"peer", peer}};
      r.time_ms = s.time_ms;
      r.rx_bytes_per_s = ps.rx;
      r.tx_bytes_per_s = ps.tx;
      r.rated_bytes_per_s = ps.rated;
      r.errors_per_s = ps.errors;
      r.reset = ps.reset;
      r.rx_util = Share(r.rx_bytes_per_s, r.rated_bytes_per_s);
      r.tx_util = Share(r.tx_bytes_per_s, r.rated_bytes_per_s);
      out.push_back(std::move(r));
    }
    prev_gpu_[dev.index] = s;
  }
  return out;
}

}  // namespace gpuwatch::server
