// Host and NIC rules: net_errors, net_congestion, numa_mismatch.
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

TEST(HostNicRuleTest, NumaMismatchIdleAllocatedAndNetErrors) {
  std::string trace = Node("n1", 100);
  // GPU 1 hangs off NUMA node 1 in this node record; its process runs on node 0's CPUs.
  trace.replace(trace.find("{\"index\":1,"), 11, "{\"index\":1,\"numa_node\":1,");
  trace += R"({"t":101,"type":"job","node":"n1","job":"j9","state":"start","gpus":[0]})"
           "\n";
  trace += R"({"t":102,"type":"proc","node":"n1","pid":7,"gpu":1,"job":"j9","cpu_numa_nodes":[0]})"
           "\n";
  for (int i = 0; i < 700; ++i) {
    trace += Gpu(103 + i, 0, "\"util_pct\":0");
    if (i % 5 == 0) {
      const int errors = i >= 300 ? (i - 295) / 5 : 0;
      trace += "{\"t\":" + std::to_string(103 + i) +
               ",\"type\":\"host\",\"node\":\"n1\",\"nics\":{\"mlx5_0\":{\"link_up\":true,"
               "\"errors\":0,\"retransmits\":" +
               std::to_string(errors) + "}}}\n";
    }
  }
  const std::vector<Finding> f = Diagnose(trace);
  std::map<std::string, const Finding*> by;
  for (const auto& x : f) by[x.CauseText()] = &x;
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(by.at("numa_mismatch")->gpu, 1);
  EXPECT_DOUBLE_EQ(by.at("numa_mismatch")->first_seen, 102);
  EXPECT_EQ(by.at("gpu_idle_allocated")->job, "j9");
  EXPECT_DOUBLE_EQ(by.at("gpu_idle_allocated")->first_seen, 703);
  EXPECT_EQ(by.at("net_errors")->nic, "mlx5_0");
}

// A link between nodes judged from both ends. RDMA retransmissions are the sender's count
// (trace-format.md: transport retries such as local_ack_timeout_err, which the requester's
// ack timer raises), so a bad cable at n2's end raises n2's own receive errors and n1's
// retries of what it sends to n2. One fault, at n2; n1's retries are its evidence. Nodes that
// share no job are judged apart.
TEST(HostNicRuleTest, RetriesAtOneEndAndErrorsAtTheOtherAreTheOthersFault) {
  auto trace = [](const std::string& job_on_n2) {
    std::string t = Node("n1", 100) + Node("n2", 100);
    t += R"({"t":101,"type":"job","node":"n1","job":"j","state":"start","gpus":[0]})"
         "\n";
    t += "{\"t\":101,\"type\":\"job\",\"node\":\"n2\",\"job\":\"" + job_on_n2 +
         "\",\"state\":\"start\",\"gpus\":[0]}\n";
    for (int i = 0; i < 120; ++i) {
      const int rising = i >= 20 ? i - 19 : 0;
      const std::string at = std::to_string(105 + 5 * i);
      t += "{\"t\":" + at +
           ",\"type\":\"host\",\"node\":\"n1\",\"nics\":{\"mlx5_0\":{\"link_up\":true,"
           "\"errors\":0,\"retransmits\":" +
           std::to_string(3 * rising) + "}}}\n";
      t += "{\"t\":" + at +
           ",\"type\":\"host\",\"node\":\"n2\",\"nics\":{\"mlx5_0\":{\"link_up\":true,"
           "\"errors\":" +
           std::to_string(rising) + ",\"retransmits\":0}}}\n";
    }
    return t;
  };
  std::vector<Finding> f = Diagnose(trace("j"));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kNetErrors);
  EXPECT_EQ(f[0].node, "n2");
  EXPECT_EQ(f[0].nic, "mlx5_0");
  ASSERT_EQ(f[0].evidence.size(), 2u);
  EXPECT_NE(f[0].evidence[1].find("n1/mlx5_0"), std::string::npos) << f[0].evidence[1];
  // Two jobs: nothing ties n1's retries to n2's link; each node's NIC is its own finding.
  f = Diagnose(trace("other"));
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].node == "n1" ? f[1].node : f[0].node, "n2");
}

TEST(HostNicRuleTest, NetCongestionNeedsASaturatedNicAndAWaitingJob) {
  auto run = [](bool waiting) {
    std::string trace =
        Node("n1", 100, ",\"nics\":[{\"name\":\"mlx5_0\",\"type\":\"ib\",\"link_gbps\":400}]");
    double t = 101;
    for (int i = 0; i < 600; ++i, t += 1) {
      // From t=500 the NIC carries 48 GB/s (384 of 400 Gb/s).
      const bool hot = t >= 500;
      trace += StepOf(t, 0, hot && waiting ? 1.5 : 1.0, hot && waiting ? 0.6 : 0.1);
      if (i % 5 == 0) {
        trace += "{\"t\":" + std::to_string(t) +
                 ",\"type\":\"host\",\"node\":\"n1\",\"nics\":{\"mlx5_0\":{\"tx_mbs\":" +
                 (hot ? "48000" : "9000") + ",\"rx_mbs\":8000,\"link_up\":true}}}\n";
      }
    }
    return Diagnose(trace);
  };
  // A busy NIC alone (another job's traffic, a healthy all-reduce) is not congestion.
  EXPECT_TRUE(run(false).empty());
  const std::vector<Finding> f = run(true);
  ASSERT_EQ(f.size(), 1u) << f[0].cause;
  EXPECT_EQ(f[0].cause, Cause::kNetCongestion);
  EXPECT_EQ(f[0].nic, "mlx5_0");
  EXPECT_GE(f[0].first_seen, 500);
  EXPECT_LE(f[0].first_seen, 500 + 120);
}

// A job over two nodes whose ranks report steps from n1 only, and the saturated NIC on n2: a
// collective runs at the pace of its slowest link, so the wait shows on n1's ranks (NVIDIA
// nccl-tests doc/PERFORMANCE.md: in a ring all-reduce every rank sends and receives
// 2(n-1)/n of the data, and the operation ends when the last rank's transfers do).
TEST(HostNicRuleTest, NetCongestionOnANodeOfTheJobWhoseRanksReportElsewhere) {
  auto run = [](bool job_on_n2) {
    std::string trace =
        Node("n1", 100) +
        Node("n2", 100, ",\"nics\":[{\"name\":\"mlx5_0\",\"type\":\"ib\",\"link_gbps\":400}]");
    trace.replace(trace.rfind("\"node\":\"n1\""), 11, "\"node\":\"n2\"");
    trace += std::string(R"({"t":100,"type":"job","node":"n2","job":")") +
             (job_on_n2 ? "j1" : "j2") + R"(","state":"start","gpus":[0,1]})" + "\n";
    double t = 101;
    for (int i = 0; i < 600; ++i, t += 1) {
      const bool hot = t >= 500;
      trace += StepOf(t, 0, hot ? 1.5 : 1.0, hot ? 0.6 : 0.1);
      if (i % 5 == 0) {
        trace += "{\"t\":" + std::to_string(t) +
                 ",\"type\":\"host\",\"node\":\"n2\",\"nics\":{\"mlx5_0\":{\"tx_mbs\":" +
                 (hot ? "48000" : "9000") + ",\"rx_mbs\":8000,\"link_up\":true}}}\n";
      }
    }
    return Diagnose(trace);
  };
  const std::vector<Finding> f = run(true);
  ASSERT_EQ(f.size(), 1u) << f[0].cause;
  EXPECT_EQ(f[0].cause, Cause::kNetCongestion);
  EXPECT_EQ(f[0].node, "n2");
  EXPECT_EQ(f[0].nic, "mlx5_0");
  // Another job on n2 saturates its NIC; j1's slower steps on n1 are not its doing.
  for (const Finding& x : run(false)) EXPECT_NE(x.cause, Cause::kNetCongestion);
}

}  // namespace
}  // namespace gpuwatch::analyze
