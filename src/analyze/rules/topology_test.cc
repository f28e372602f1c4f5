// topology_change from the node's own records: what a reboot or a card swap leaves in a
// recording that has no topology archive to compare with.
#include <gtest/gtest.h>

#include <string>

#include "analyze/testing/diagnose.h"

namespace gpuwatch::analyze {
namespace {

using testing::Diagnose;

// A node record with GPUs at the given (index, bus, uuid) and one NIC.
std::string NodeWith(double t, const std::vector<std::tuple<int, std::string, std::string>>& gpus,
                     const std::string& nic_bus = "0000:1a:00.0", int nic_numa = 0,
                     const std::string& nic = "mlx5_0", const std::string& link = "NV18") {
  std::string g;
  for (const auto& [i, bus, uuid] : gpus) {
    if (!g.empty()) g += ",";
    g += "{\"index\":" + std::to_string(i) + ",\"pci_bus_id\":\"" + bus + "\",\"uuid\":\"" + uuid +
         "\",\"numa_node\":0,\"nvlink_count\":18}";
  }
  std::string links = "[";
  for (size_t i = 0; i < gpus.size(); ++i) {
    links += i ? ",[" : "[";
    for (size_t j = 0; j < gpus.size(); ++j) {
      links += std::string(j ? "," : "") + "\"" + (i == j ? "X" : link) + "\"";
    }
    links += "]";
  }
  links += "]";
  return "{\"t\":" + std::to_string(t) + ",\"type\":\"node\",\"node\":\"n1\",\"gpus\":[" + g +
         "],\"topology\":{\"gpu_links\":" + links + "},\"nics\":[{\"name\":\"" + nic +
         "\",\"type\":\"ib\",\"pci_bus_id\":\"" + nic_bus +
         "\",\"numa_node\":" + std::to_string(nic_numa) + ",\"link_gbps\":400}]}\n";
}

const std::vector<std::tuple<int, std::string, std::string>> kTwo = {
    {0, "00000000:18:00.0", "GPU-aaaa"}, {1, "00000000:2A:00.0", "GPU-bbbb"}};

// NVML: the order of GPUs has "no guarantees of consistency between reboots"
// (nvmlDeviceGetHandleByIndex, docs/research/failure-shapes.md §1): the same boards in the same
// slots under other indices, and the same node record repeated, are the same hardware.
TEST(TopologyRuleTest, ARebootThatFindsTheSameHardwareIsNoChange) {
  const std::vector<std::tuple<int, std::string, std::string>> renumbered = {
      {0, "00000000:2a:00.0", "GPU-bbbb"}, {1, "00000000:18:00.0", "GPU-aaaa"}};
  EXPECT_TRUE(
      Diagnose(NodeWith(100, kTwo) + NodeWith(200, kTwo) + NodeWith(900, renumbered)).empty());
}

// A GPU missing after a reboot (NVIDIA/open-gpu-kernel-modules issues on GPUs that do not come
// back until reseated: failure-shapes.md §1).
TEST(TopologyRuleTest, AGpuGoneAfterARebootIsAChangeFromTheNewRecord) {
  const auto f =
      Diagnose(NodeWith(100, kTwo) + NodeWith(700, {{0, "00000000:18:00.0", "GPU-aaaa"}}));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kTopologyChange);
  EXPECT_EQ(f[0].node, "n1");
  EXPECT_FALSE(f[0].gpu.has_value());
  EXPECT_DOUBLE_EQ(f[0].first_seen, 700);
  EXPECT_NE(f[0].summary.find("00000000:2A:00.0"), std::string::npos) << f[0].summary;
}

// A card swap: the UUID is the board's, the bus id the slot's (TrueNAS PR #19499 in
// failure-shapes.md §1): the same slot with another board.
TEST(TopologyRuleTest, ACardSwappedInTheSameSlotIsAChange) {
  const auto f =
      Diagnose(NodeWith(100, kTwo) + NodeWith(700, {{0, "00000000:18:00.0", "GPU-aaaa"},
                                                    {1, "00000000:2A:00.0", "GPU-cccc"}}));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kTopologyChange);
  EXPECT_NE(f[0].evidence[0].find("GPU-cccc"), std::string::npos);
}

// mlx5_N follows probe order (rdma-core renames devices at boot): a NIC is its bus id. Renamed
// in place it is the same NIC; on another PCIe root and NUMA node it is not.
TEST(TopologyRuleTest, ANicIsItsBusIdNotItsName) {
  EXPECT_TRUE(
      Diagnose(NodeWith(100, kTwo) + NodeWith(700, kTwo, "0000:1a:00.0", 0, "mlx5_3")).empty());
  const auto f = Diagnose(NodeWith(100, kTwo) + NodeWith(700, kTwo, "0000:9c:00.0", 1));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kTopologyChange);
}

TEST(TopologyRuleTest, LinksBetweenGpusThatChangedAreAChange) {
  const auto f =
      Diagnose(NodeWith(100, kTwo) + NodeWith(700, kTwo, "0000:1a:00.0", 0, "mlx5_0", "SYS"));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].evidence[0].find("NV18 → SYS"), std::string::npos) << f[0].evidence[0];
}

// A field one record does not give is not measured, not changed.
TEST(TopologyRuleTest, ARecordWithoutTheTopologyIsNoChange) {
  const std::string bare =
      "{\"t\":700,\"type\":\"node\",\"node\":\"n1\",\"driver_version\":\"x\"}\n";
  EXPECT_TRUE(Diagnose(NodeWith(100, kTwo) + bare).empty());
}

// A GPU that fell off the bus is missing from the node's next description: the loss, not a
// topology change (findings.md: the deepest cause).
TEST(TopologyRuleTest, AGpuLostBeforeIsNotATopologyChange) {
  const std::string lost =
      "{\"t\":650,\"type\":\"event\",\"node\":\"n1\",\"gpu\":1,\"kind\":\"xid\",\"code\":79,"
      "\"message\":\"GPU has fallen off the bus\"}\n";
  const auto f =
      Diagnose(NodeWith(100, kTwo) + lost + NodeWith(700, {{0, "00000000:18:00.0", "GPU-aaaa"}}));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kGpuLost);
}

}  // namespace
}  // namespace gpuwatch::analyze
