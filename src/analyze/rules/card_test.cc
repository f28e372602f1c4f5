// Card rules: clock-event reasons, PCIe, ECC, NVLink, XIDs and lost GPUs.
// Hand-made traces read through the real trace reader (analyze/testing/diagnose.h).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "analyze/testing/diagnose.h"

namespace gpuwatch::analyze {
namespace {

using testing::Diagnose;
using testing::Gpu;
using testing::Node;
using testing::Step;
using testing::StepOf;

TEST(CardRuleTest, ThermalThrottleFromItsFirstSample) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 30; ++i) {
    const bool hot = i >= 10;
    trace += Gpu(101 + i, 1,
                 std::string("\"util_pct\":95,\"temp_c\":") + (hot ? "88" : "70") +
                     ",\"sm_clock_mhz\":" + (hot ? "1400" : "1980") +
                     ",\"throttle\":" + (hot ? "[\"sw_thermal\"]" : "[]"));
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kThermalThrottle);
  EXPECT_EQ(f[0].layer(), model::Layer::kCard);
  EXPECT_EQ(f[0].gpu, 1);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 111);
  EXPECT_DOUBLE_EQ(f[0].last_seen, 130);
  EXPECT_NE(f[0].summary.find("88"), std::string::npos);
}

TEST(CardRuleTest, XidFamiliesMapToTheirCauses) {
  std::string trace = Node("n1", 100);
  trace +=
      R"({"t":101,"type":"event","node":"n1","gpu":0,"kind":"xid","code":79,"message":"fallen off the bus"})"
      "\n";
  trace +=
      R"({"t":102,"type":"event","node":"n1","gpu":1,"kind":"xid","code":31,"message":"mmu fault"})"
      "\n";
  trace +=
      R"({"t":103,"type":"event","node":"n1","gpu":1,"kind":"xid","code":45,"message":"preemptive cleanup"})"
      "\n";
  trace +=
      R"({"t":104,"type":"event","node":"n1","gpu":1,"kind":"xid","code":31,"message":"again"})"
      "\n";
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].cause, Cause::kGpuLost);
  EXPECT_EQ(f[0].severity, Severity::kCritical);
  EXPECT_EQ(f[0].gpu, 0);
  EXPECT_EQ(f[1].cause, Cause::kXid);
  EXPECT_EQ(f[1].code, 31);
  EXPECT_DOUBLE_EQ(f[1].first_seen, 102);
  EXPECT_DOUBLE_EQ(f[1].last_seen, 104);  // one finding, extended
}

TEST(CardRuleTest, PowerAndSlowdownThrottlesEccAndTopologyEachFromTheirOwnEvidence) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 60; ++i) {
    const double t = 101 + i;
    // GPU 0 holds the power cap from t=121 with its clock well under its maximum (1980 MHz);
    // GPU 1 touches the cap one sample in five at full clock (healthy at full load).
    const bool capped = i >= 20;
    trace += Gpu(t, 0,
                 std::string("\"util_pct\":99,\"sm_clock_mhz\":") + (capped ? "1600" : "1980") +
                     ",\"throttle\":" + (capped ? "[\"sw_power_cap\"]" : "[]") +
                     // DBEs rise once at t=140; SBEs every 10 s from t=111.
                     ",\"ecc_dbe_volatile\":" + (i >= 39 ? "1" : "0") +
                     ",\"ecc_sbe_volatile\":" + std::to_string(i >= 10 ? (i - 10) / 10 + 1 : 0));
    // GPU 1: hw_slowdown from t=131 for 3 samples and more; the power brake at t=151-153.
    std::string reasons = i % 5 == 0 ? "\"sw_power_cap\"" : "";
    if (i >= 30) reasons += std::string(reasons.empty() ? "" : ",") + "\"hw_slowdown\"";
    if (i >= 50 && i < 53) reasons += ",\"hw_power_brake\"";
    trace += Gpu(t, 1, "\"util_pct\":99,\"sm_clock_mhz\":1980,\"throttle\":[" + reasons + "]");
  }
  trace +=
      R"({"t":150,"type":"event","node":"n1","gpu":1,"kind":"topology_change","message":"GPU1 NVLink 18 -> 17 links"})"
      "\n";
  std::map<std::string, Finding> by;
  for (const Finding& f : Diagnose(trace))
    by[f.CauseText() + "/" + std::to_string(f.gpu.value_or(-1))] = f;
  ASSERT_TRUE(by.count("power_throttle/0")) << by.size();
  EXPECT_DOUBLE_EQ(by["power_throttle/0"].first_seen, 121);
  ASSERT_TRUE(by.count("ecc_dbe/0"));
  EXPECT_EQ(by["ecc_dbe/0"].severity, Severity::kCritical);
  EXPECT_DOUBLE_EQ(by["ecc_dbe/0"].first_seen, 140);
  ASSERT_TRUE(by.count("ecc_sbe_growth/0"));
  ASSERT_TRUE(by.count("clock_slowdown/1"));
  EXPECT_DOUBLE_EQ(by["clock_slowdown/1"].first_seen, 131);
  ASSERT_TRUE(by.count("power_throttle/1"));  // the brake, not the flickering cap
  EXPECT_DOUBLE_EQ(by["power_throttle/1"].first_seen, 151);
  EXPECT_NE(by["power_throttle/1"].summary.find("power brake"), std::string::npos);
  ASSERT_TRUE(by.count("topology_change/-1"));  // the node's, whichever GPU the event names
  EXPECT_EQ(by.size(), 6u);
}

TEST(CardRuleTest, CountersThatKeepRisingAndOneThatReset) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 10; ++i) {
    // GPU 0: replays rise at 105, 106, 107. GPU 1: a reset (driver reload), then static.
    const int replays = i < 5 ? 0 : i - 4;
    trace += Gpu(101 + i, 0, "\"util_pct\":50,\"pcie_replay\":" + std::to_string(replays));
    trace +=
        Gpu(101 + i, 1, std::string("\"util_pct\":50,\"pcie_replay\":") + (i < 3 ? "900" : "2"));
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kPcieReplay);
  EXPECT_EQ(f[0].gpu, 0);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 106);
}

TEST(CardRuleTest, NarrowPcieLinkAndLostNvlink) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 5; ++i) {
    trace += Gpu(101 + i, 0, "\"util_pct\":10,\"pcie_gen\":5,\"pcie_width\":8");
    trace += Gpu(101 + i, 1,
                 "\"util_pct\":10,\"pcie_gen\":1,\"pcie_width\":16,\"nvlink_active_links\":17");
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].cause, Cause::kNvlinkErrors);  // at once: the first sample with a link missing
  EXPECT_EQ(f[0].gpu, 1);
  EXPECT_EQ(f[1].cause, Cause::kPcieDowngrade);  // gen 1 on an idle GPU is not one
  EXPECT_EQ(f[1].gpu, 0);
  EXPECT_DOUBLE_EQ(f[1].first_seen, 101);
}

// nvml.h: HW Slowdown (0x8) "is an indicator of: temperature being too high, External Power Brake
// Assertion is triggered, …"; HW Thermal Slowdown and HW Power Brake Slowdown are its
// sub-reasons (docs/research/clock-reasons.md §2). With the thermal bit beside it the cause is
// thermal, with the brake bit power; alone it is a slowdown.
TEST(CardRuleTest, HwSlowdownBesideAThermalOrBrakeBitIsThatCause) {
  auto trace = [](const char* reasons) {
    std::string t = Node("n1", 100);
    for (int i = 0; i < 20; ++i) {
      t += Gpu(101 + i, 0,
               std::string("\"util_pct\":96,\"temp_c\":90,\"sm_clock_mhz\":990,\"throttle\":") +
                   reasons);
    }
    return t;
  };
  auto f = Diagnose(trace(R"(["hw_slowdown","hw_thermal"])"));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kThermalThrottle);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 101);
  f = Diagnose(trace(R"(["hw_slowdown","hw_power_brake"])"));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kPowerThrottle);
  f = Diagnose(trace(R"(["hw_slowdown"])"));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kClockSlowdown);
}

// Applications clocks set by an administrator (nvidia-smi -ac) raise "Applications Clocks
// Setting"; the A100's default applications clock is below its maximum, so the reason alone is
// not a fault, a clock held well below the maximum is (clock-reasons.md §3).
TEST(CardRuleTest, AnApplicationsClockHeldLowIsASlowdownAndAtFullClockNothing) {
  auto trace = [](int clock) {
    std::string t = Node("n1", 100);
    for (int i = 0; i < 20; ++i) {
      t += Gpu(101 + i, 0,
               "\"util_pct\":96,\"sm_clock_mhz\":" + std::to_string(clock) +
                   ",\"throttle\":[\"app_clocks\"]");
    }
    return t;
  };
  EXPECT_TRUE(Diagnose(trace(1980)).empty());
  const auto f = Diagnose(trace(1200));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kClockSlowdown);
  EXPECT_EQ(f[0].gpu, 0);
}

// The driver writes every XID to the kernel log ("NVRM: Xid (PCI:…): code, …"); NVML's events
// reach only a process that listened at the time (docs/research/xid.md). A kernel line alone is
// the XID, on the GPU whose bus id the node record gives. Real line: NVIDIA's driver as pasted
// in akash-network issue 244 (tests/fixtures/explain/kernel/akash244_*).
TEST(CardRuleTest, AnXidOnlyInTheKernelLogIsFoundOnItsGpu) {
  const std::string node =
      R"({"t":100,"type":"node","node":"n1","gpus":[{"index":0,"pci_bus_id":"00000000:00:05.0"},)"
      R"({"index":1,"pci_bus_id":"00000000:00:07.0"}]})"
      "\n";
  const std::string line =
      "[Mon Aug  5 03:54:13 2024] NVRM: Xid (PCI:0000:00:07): 31, pid=2512125, name=python3.10, "
      "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 faulted @ "
      "0x73ac_1c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE";
  nlohmann::json log = {
      {"t", 200}, {"type", "log"}, {"node", "n1"}, {"source", "kernel"}, {"line", line}};
  const auto f = Diagnose(node + log.dump() + "\n");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kXid);
  EXPECT_EQ(f[0].gpu, 1);
  EXPECT_EQ(f[0].code, 31);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 200);
}

// The catalog's consequences are no cause of their own: Xid 45 "caused by previous Xid 149"
// (NVIDIA/open-gpu-kernel-modules#1150) and Xid 154, the recovery action a preceding error
// needs; and a GPU that falls off the bus prints "NVRM: GPU 0000:06:00.0: GPU has fallen off the
// bus." (#1151) or no Xid at all at probe time (NVIDIA/NVSentinel#155).
TEST(CardRuleTest, KernelLinesOfConsequencesAndOfALostGpu) {
  const std::string node =
      R"({"t":100,"type":"node","node":"n1","gpus":[{"index":0,"pci_bus_id":"00000000:06:00.0"}]})"
      "\n";
  auto log = [](double t, const std::string& line) {
    return nlohmann::json{
               {"t", t}, {"type", "log"}, {"node", "n1"}, {"source", "kernel"}, {"line", line}}
               .dump() +
           "\n";
  };
  EXPECT_TRUE(Diagnose(node +
                       log(200,
                           "NVRM: Xid (PCI:0000:06:00): 45, pid=4011, name=python, Ch 00000001 "
                           "caused by previous Xid 149") +
                       log(201,
                           "NVRM: Xid (PCI:0000:06:00): 154, GPU recovery action changed from 0x0 "
                           "(None) to 0x1 (GPU Reset Required)"))
                  .empty());
  const auto f = Diagnose(node + log(300, "NVRM: GPU 0000:06:00.0: GPU has fallen off the bus."));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kGpuLost);
  EXPECT_EQ(f[0].gpu, 0);
  EXPECT_EQ(f[0].severity, Severity::kCritical);
}

}  // namespace
}  // namespace gpuwatch::analyze
