// Link rates (R10, R12): per-second rates of every link counter the agent reads — NIC bytes,
// errors and drops; InfiniBand/RoCE port bytes, errors, retransmissions and transmit waits;
// NVLink bytes and errors per link and per far end; PCIe throughput — and each link's
// utilisation as a share of its rated bandwidth.
//
// Counters are differenced between two ticks of the same link. A counter that went backwards
// was reset (driver reload, port reset, NIC re-enumerated): like Prometheus's rate(), its new
// value is taken as the increase since the reset, and the link is flagged `reset` for that tick.
// A link seen for the first time has no rate yet; one that vanished is reported once in
// `vanished` (a NIC that disappears is an event, not a silent gap; only NICs backed by a device,
// since veth and bridge interfaces come and go with containers).
//
// Rated bandwidth, per direction: a NIC's speed (Mb/s from sysfs), an IB port's rate (Gb/s), an
// NVLink by generation (NVLink1 20 GB/s; 2-4 25 GB/s; 5 50 GB/s — a link's share of the
// 160/300/600/900/1800 GB/s bidirectional totals NVIDIA quotes), PCIe by current generation and
// width (per lane after encoding: 0.25, 0.5, 0.985, 1.969, 3.938, 7.563 GB/s for gen 1-6).
//
// Thread-safety: none; owned by the agent's tier thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/gpu.h"
#include "model/host.h"
#include "topo/snapshot.h"

namespace gpuwatch::server {

struct LinkRate {
  // "nic" (interface), "ib_port" (device, port), "nvlink" (gpu, link), "nvlink_peer" (gpu,
  // peer: "GPU3" or "nvswitch"), "pcie" (gpu).
  std::string kind;
  std::vector<std::pair<std::string, std::string>> labels;
  int64_t time_ms = 0;
  std::optional<double> rx_bytes_per_s, tx_bytes_per_s;
  std::optional<double> rated_bytes_per_s;  // per direction
  std::optional<double> rx_util, tx_util;   // share of rated, 0..1 (may exceed 1 by noise)
  std::optional<double> errors_per_s;       // NIC rx+tx errors; IB symbol+receive errors;
                                            // NVLink CRC+replay+recovery
  std::optional<double> drops_per_s;        // NIC rx+tx drops; IB transmit discards
  std::optional<double> retransmits_per_s;  // IB local_ack_timeout_err+out_of_sequence+
                                            // packet_seq_err+rnr_nak_retry_err+
                                            // implied_nak_seq_err
  std::optional<double> xmit_wait_per_s;    // IB port_xmit_wait ticks per second (congestion)
  std::optional<double> ecn_marked_per_s;   // RoCE packets that arrived ECN-marked
  bool reset = false;                       // a counter of this link went backwards
};

struct VanishedLink {
  std::string kind;  // "nic" or "ib_port"
  std::string name;  // "eth0", "mlx5_0/1"
};

// Rated per-direction bandwidth in bytes/s; nullopt for an unknown generation.
std::optional<double> NvlinkRatedBytesPerSec(unsigned version);
std::optional<double> PcieRatedBytesPerSec(unsigned gen, unsigned width);

// Increase of a cumulative counter from `prev` to `cur`, reset-aware (see above).
uint64_t CounterIncrease(uint64_t prev, uint64_t cur, bool* reset);

class LinkRateTracker {
 public:
  // Rates of the NICs and IB ports between the previous host sample and `h`.
  std::vector<LinkRate> UpdateHost(const model::HostSample& h, std::vector<VanishedLink>* vanished);
  // Rates of NVLinks (per link and per far end) and PCIe utilisation, from the GPU samples of
  // this tick. `topology` (may be null) gives each link's generation and far end.
  std::vector<LinkRate> UpdateGpus(const std::vector<model::GpuStaticInfo>& devices,
                                   const std::vector<model::GpuSample>& samples,
                                   const topo::NodeSnapshot* topology);

 private:
  std::optional<model::HostSample> prev_host_;
  std::map<unsigned, model::GpuSample> prev_gpu_;  // by GPU index
};

}  // namespace gpuwatch::server
