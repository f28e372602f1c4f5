#include "server/link_rates.h"

#include <gtest/gtest.h>

#include <string>

#include "server/agent_state.h"
#include "server/exposition.h"

namespace gpuwatch::server {
namespace {

model::HostSample Host(int64_t t_ms, uint64_t rx, uint64_t tx, uint64_t errors) {
  model::HostSample h;
  h.time_ms = t_ms;
  model::NicSample n;
  n.name = "ens1f0";
  n.physical = true;
  n.rx_bytes = rx;
  n.tx_bytes = tx;
  n.rx_errors = errors;
  n.speed_mbps = 1000;
  h.nics.push_back(n);
  model::NicSample veth = n;
  veth.name = "veth1234";
  veth.physical = false;
  h.nics.push_back(veth);
  model::IbPortSample p;
  p.device = "mlx5_0";
  p.port = 1;
  p.state = "ACTIVE";
  p.rate_gbps = 400;
  p.rcv_bytes = rx * 10;
  p.xmit_bytes = tx * 10;
  p.local_ack_timeout_err = errors;
  p.packet_seq_err = errors;
  p.port_xmit_wait = errors * 1000;
  h.ib_ports.push_back(p);
  return h;
}

const LinkRate* Find(const std::vector<LinkRate>& rates, std::string_view kind,
                     std::string_view value) {
  for (const auto& r : rates) {
    if (r.kind != kind) continue;
    for (const auto& [k, v] : r.labels) {
      if (v == value) return &r;
    }
  }
  return nullptr;
}

TEST(LinkRatesTest, RatedBandwidth) {
  EXPECT_DOUBLE_EQ(*NvlinkRatedBytesPerSec(4), 25e9);
  EXPECT_DOUBLE_EQ(*NvlinkRatedBytesPerSec(5), 50e9);
  EXPECT_EQ(NvlinkRatedBytesPerSec(0), std::nullopt);
  EXPECT_NEAR(*PcieRatedBytesPerSec(5, 16), 63.0e9, 0.01e9);
  EXPECT_NEAR(*PcieRatedBytesPerSec(4, 8), 15.75e9, 0.01e9);
  EXPECT_EQ(PcieRatedBytesPerSec(9, 16), std::nullopt);
  EXPECT_EQ(PcieRatedBytesPerSec(4, 0), std::nullopt);
}

TEST(LinkRatesTest, NicAndIbRatesAndUtilisation) {
  LinkRateTracker t;
  std::vector<VanishedLink> gone;
  std::vector<LinkRate> first = t.UpdateHost(Host(1000, 1000, 2000, 0), &gone);
  const LinkRate* nic = Find(first, "nic", "ens1f0");
  ASSERT_NE(nic, nullptr);
  EXPECT_EQ(nic->rx_bytes_per_s, std::nullopt);  // one sample: no rate yet
  EXPECT_DOUBLE_EQ(*nic->rated_bytes_per_s, 125e6);

  // 2 s later: 125 MB/s in (a saturated 1 GbE link), 12.5 MB/s out, 4 errors.
  std::vector<LinkRate> r =
      t.UpdateHost(Host(3000, 1000 + 250'000'000, 2000 + 25'000'000, 4), &gone);
  nic = Find(r, "nic", "ens1f0");
  ASSERT_NE(nic, nullptr);
  EXPECT_DOUBLE_EQ(*nic->rx_bytes_per_s, 125e6);
  EXPECT_DOUBLE_EQ(*nic->tx_bytes_per_s, 12.5e6);
  EXPECT_DOUBLE_EQ(*nic->rx_util, 1.0);
  EXPECT_DOUBLE_EQ(*nic->tx_util, 0.1);
  EXPECT_DOUBLE_EQ(*nic->errors_per_s, 2.0);
  EXPECT_FALSE(nic->reset);
  const LinkRate* ib = Find(r, "ib_port", "mlx5_0");
  ASSERT_NE(ib, nullptr);
  EXPECT_DOUBLE_EQ(*ib->rated_bytes_per_s, 50e9);
  EXPECT_DOUBLE_EQ(*ib->rx_bytes_per_s, 1.25e9);
  EXPECT_DOUBLE_EQ(*ib->rx_util, 0.025);
  EXPECT_DOUBLE_EQ(*ib->retransmits_per_s, 4.0);  // 4 + 4 over 2 s
  EXPECT_DOUBLE_EQ(*ib->xmit_wait_per_s, 2000.0);
  EXPECT_EQ(ib->ecn_marked_per_s, std::nullopt);  // not offered by this HCA
  EXPECT_TRUE(gone.empty());
}

TEST(LinkRatesTest, CounterResetCountsTheNewValueAsTheIncrease) {
  LinkRateTracker t;
  std::vector<VanishedLink> gone;
  t.UpdateHost(Host(1000, 5'000'000'000, 100, 10), &gone);
  // The driver was reloaded: counters restarted from 0 and are now at 1 MB.
  std::vector<LinkRate> r = t.UpdateHost(Host(2000, 1'000'000, 100, 0), &gone);
  const LinkRate* nic = Find(r, "nic", "ens1f0");
  ASSERT_NE(nic, nullptr);
  EXPECT_TRUE(nic->reset);
  EXPECT_DOUBLE_EQ(*nic->rx_bytes_per_s, 1e6);  // never negative, never a 5 GB spike
  EXPECT_DOUBLE_EQ(*nic->tx_bytes_per_s, 0.0);
  // A 32-bit style wrap is also a reset (the kernel's 64-bit counters do not wrap in practice).
  bool reset = false;
  EXPECT_EQ(CounterIncrease(4294967290u, 5, &reset), 5u);
  EXPECT_TRUE(reset);
}

TEST(LinkRatesTest, AVanishedNicIsReportedOnceAndVethChurnIsNot) {
  LinkRateTracker t;
  std::vector<VanishedLink> gone;
  t.UpdateHost(Host(1000, 1, 1, 0), &gone);
  model::HostSample h = Host(2000, 2, 2, 0);
  h.nics.clear();      // both the NIC and the veth are gone
  h.ib_ports.clear();  // and the HCA port
  t.UpdateHost(h, &gone);
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(gone[0].kind, "nic");
  EXPECT_EQ(gone[0].name, "ens1f0");
  EXPECT_EQ(gone[1].kind, "ib_port");
  EXPECT_EQ(gone[1].name, "mlx5_0/1");
  gone.clear();
  t.UpdateHost(h, &gone);  // still gone: not reported again
  EXPECT_TRUE(gone.empty());
  // It comes back: a rate again from the next pair of samples, counters from wherever they are.
  t.UpdateHost(Host(4000, 100, 100, 0), &gone);
  std::vector<LinkRate> r = t.UpdateHost(Host(5000, 1100, 100, 0), &gone);
  EXPECT_DOUBLE_EQ(*Find(r, "nic", "ens1f0")->rx_bytes_per_s, 1000.0);
}

TEST(LinkRatesTest, NvlinkPerLinkPerPeerAndPcie) {
  topo::NodeSnapshot topology;
  topo::GpuFacts g;
  g.index = 0;
  for (unsigned l = 0; l < 4; ++l) {
    topo::NvLinkFacts f;
    f.link = l;
    f.active = true;
    f.version = 4;
    f.remote_kind = l < 2 ? "gpu" : "nvswitch";
    if (l < 2) f.remote_gpu = 1;
    g.nvlinks.push_back(f);
  }
  topology.gpus.push_back(g);
  model::GpuStaticInfo dev;
  dev.index = 0;
  dev.uuid = "GPU-0";
  auto sample = [](int64_t t_ms, uint64_t bytes, uint64_t errors) {
    model::GpuSample s;
    s.time_ms = t_ms;
    s.Set(model::GpuMetric::kPcieTxBytesPerSec, 6.3e9);
    s.Set(model::GpuMetric::kPcieRxBytesPerSec, 31.5e9);
    s.Set(model::GpuMetric::kPcieGen, 5);
    s.Set(model::GpuMetric::kPcieWidth, 16);
    for (unsigned l = 0; l < 4; ++l) {
      model::NvLinkSample n;
      n.link = l;
      n.active = true;
      n.tx_bytes = bytes * (l + 1);
      n.rx_bytes = bytes;
      n.replay_errors = errors;
      s.nvlinks.push_back(n);
    }
    return s;
  };
  LinkRateTracker t;
  t.UpdateGpus({dev}, {sample(1000, 0, 0)}, &topology);
  std::vector<LinkRate> r = t.UpdateGpus({dev}, {sample(2000, 5'000'000'000, 3)}, &topology);
  const LinkRate* pcie = Find(r, "pcie", "0");
  ASSERT_NE(pcie, nullptr);
  EXPECT_NEAR(*pcie->rx_util, 0.5, 0.001);
  EXPECT_NEAR(*pcie->tx_util, 0.1, 0.001);
  const LinkRate* link1 = nullptr;
  for (const auto& x : r) {
    if (x.kind == "nvlink" && x.labels[2].second == "1") link1 = &x;
  }
  ASSERT_NE(link1, nullptr);
  EXPECT_DOUBLE_EQ(*link1->tx_bytes_per_s, 10e9);
  EXPECT_DOUBLE_EQ(*link1->tx_util, 0.4);
  EXPECT_DOUBLE_EQ(*link1->errors_per_s, 3.0);
  const LinkRate* to_gpu1 = Find(r, "nvlink_peer", "GPU1");
  ASSERT_NE(to_gpu1, nullptr);
  EXPECT_DOUBLE_EQ(*to_gpu1->tx_bytes_per_s, 15e9);  // links 0 and 1: 5 + 10 GB/s
  EXPECT_DOUBLE_EQ(*to_gpu1->rated_bytes_per_s, 50e9);
  EXPECT_DOUBLE_EQ(*to_gpu1->tx_util, 0.3);
  const LinkRate* to_switch = Find(r, "nvlink_peer", "nvswitch");
  ASSERT_NE(to_switch, nullptr);
  EXPECT_DOUBLE_EQ(*to_switch->tx_bytes_per_s, 35e9);  // links 2 and 3: 15 + 20 GB/s

  // Exposed as gauges with the link's labels.
  AgentState s;
  s.hostname = "h";
  s.gpu_link_rates = r;
  std::string out;
  RenderPrometheus(s, &out);
  EXPECT_NE(out.find("gpuwatch_link_utilization_ratio{Hostname=\"h\",link_type=\"nvlink_peer\","
                     "gpu=\"0\",UUID=\"GPU-0\",peer=\"GPU1\",direction=\"tx\"} 0.3"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("# TYPE gpuwatch_link_rated_bytes_per_second gauge"), std::string::npos);
}

}  // namespace
}  // namespace gpuwatch::server
