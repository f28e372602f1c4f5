// Host-level data model: CPU, memory, load, NICs and InfiniBand ports (R1 host part, R10).
// Value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuwatch::model {

struct NicSample {
  std::string name;
  // Cumulative counters since boot, from /proc/net/dev.
  uint64_t rx_bytes = 0, tx_bytes = 0;
  uint64_t rx_packets = 0, tx_packets = 0;
  uint64_t rx_errors = 0, tx_errors = 0;
  uint64_t rx_dropped = 0, tx_dropped = 0;
  std::optional<bool> link_up;       // /sys/class/net/<if>/operstate
  std::optional<double> speed_mbps;  // /sys/class/net/<if>/speed
  // Backed by a device (/sys/class/net/<if>/device): a NIC, not a veth, bridge or tunnel, whose
  // coming and going is container churn rather than a fault.
  bool physical = false;
};

struct IbPortSample {
  std::string device;  // mlx5_0
  unsigned port = 1;
  std::string state;  // "ACTIVE"
  std::optional<double> rate_gbps;
  std::string link_layer;  // InfiniBand | Ethernet
  // Counters as read; data counters already converted from 4-byte words to bytes.
  std::optional<uint64_t> xmit_bytes, rcv_bytes, xmit_packets, rcv_packets;
  std::optional<uint64_t> symbol_errors, rcv_errors, link_downed, link_error_recovery;
  std::optional<uint64_t> xmit_discards, port_xmit_wait;
  // hw_counters (RDMA transport): retransmission-related.
  std::optional<uint64_t> local_ack_timeout_err, out_of_sequence, packet_seq_err;
  std::optional<uint64_t> rnr_nak_retry_err, implied_nak_seq_err;
  // hw_counters (RoCE congestion control): packets that arrived ECN-marked, congestion
  // notifications this port sent as receiver, and those it acted on as sender.
  std::optional<uint64_t> np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled;
};

struct HostSample {
  int64_t time_ms = 0;
  // Derived between two ticks; absent on the first.
  std::optional<double> cpu_util_pct, iowait_pct;
  unsigned cpu_count = 0;
  // Cumulative jiffies since boot (for rate() in PromQL).
  uint64_t cpu_total_jiffies = 0, cpu_idle_jiffies = 0, cpu_iowait_jiffies = 0;
  std::optional<double> mem_total_bytes, mem_available_bytes, mem_used_bytes;
  std::optional<double> swap_used_bytes;
  std::optional<double> load1, load5, load15;
  std::vector<NicSample> nics;
  std::vector<IbPortSample> ib_ports;
  // R7: the kernel's view of its clock discipline (adjtimex): the offset still being slewed
  // out, the maximum error bound, and whether a time source (NTP/PTP/chrony) keeps it synced.
  std::optional<double> clock_offset_ms, clock_max_error_ms;
  std::optional<bool> clock_synced;
  // R7: the time daemon's own view (chrony, ntpd or timesyncd; asked at most once a minute,
  // the last answer repeated in between): which one answered ("" when none did), this clock
  // minus the reference (positive = this node ahead; absent when the daemon gives no offset or
  // is not synchronised), and whether it considers the clock synchronised.
  std::string time_source;
  std::optional<double> time_source_offset_ms;
  std::optional<bool> time_source_synced;
};

}  // namespace gpuwatch::model
