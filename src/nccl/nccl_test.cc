#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/test_files.h"
#include "nccl/nccl_analysis.h"
#include "nccl/nccl_log.h"

namespace gpuwatch::nccl {
namespace {

namespace fs = std::filesystem;

// ../shared/real/nccl: logs people captured from real jobs (see ../shared/real/INDEX.md). Not
// part of this repository; tests that need it skip when it is absent.
std::string RealNcclDir() { return testing::SharedDir("real/nccl"); }
std::string FixtureDir() { return testing::FixtureDir("nccl"); }

#define SKIP_WITHOUT_REAL_DATA() GW_SKIP_WITHOUT_SHARED(RealNcclDir())

std::string Real(const std::string& name) {
  return testing::ReadFileOrEmpty(RealNcclDir() + "/" + name);
}

size_t Transport(const NcclLogReport& r, const std::string& family) {
  auto it = r.transports.find(family);
  return it == r.transports.end() ? 0 : it->second;
}

const NcclProcess* FindProcess(const NcclLogReport& r, const std::string& host, int64_t pid) {
  for (const auto& p : r.processes) {
    if (p.host == host && p.pid == pid) return &p;
  }
  return nullptr;
}

std::vector<std::string> Causes(const std::vector<Finding>& f) {
  std::vector<std::string> out;
  for (const auto& x : f) out.push_back(std::string(model::CauseName(x.cause)) + "@" + x.node);
  return out;
}

bool AnyContains(const std::vector<std::string>& v, const std::string& what) {
  for (const auto& s : v) {
    if (s.find(what) != std::string::npos) return true;
  }
  return false;
}

bool AnyErrorContains(const NcclLogReport& r, const std::string& what) {
  for (const auto& e : r.errors) {
    if (e.text.find(what) != std::string::npos) return true;
  }
  return false;
}

// ---- line shapes ----------------------------------------------------------------------------

TEST(NcclPrefixTest, HostPidDeviceBehindAnyWrapper) {
  const auto r = ParseNcclLog(
      "hostA:11:12 [0] NCCL INFO cudaDriverVersion 12020\n"
      "[1,1]<stdout>:hostB:21:22 [1] NCCL INFO Using network IB\n"
      " 2025-02-18 12:54 hostC:31:32 [2] NCCL INFO misc/socket.cc:47 -> 3\n"
      "job-a1-worker-0:41:42 [3] NCCL INFO Using network Socket\n"
      "[2024-11-30 10:00:00] h.example.com:51:52 [4] transport.cc:9 NCCL WARN hello\n"
      "(RayWorkerWrapper pid=248, ip=10.1.160.68) hostF:61:62 [5] NCCL INFO Using network IB\n");
  ASSERT_EQ(r.hosts.size(), 6u);
  EXPECT_EQ(r.hosts[0].name, "hostA");
  EXPECT_EQ(r.hosts[1].name, "hostB");
  EXPECT_EQ(r.hosts[2].name, "hostC");
  EXPECT_EQ(r.hosts[3].name, "job-a1-worker-0");
  EXPECT_EQ(r.hosts[4].name, "h.example.com");
  EXPECT_EQ(r.hosts[5].name, "hostF");
  EXPECT_EQ(r.hosts[1].cuda_devices, std::vector<int>{1});
  EXPECT_EQ(r.hosts[4].cuda_devices, std::vector<int>{4});
  ASSERT_NE(FindProcess(r, "hostB", 21), nullptr);
  EXPECT_EQ(FindProcess(r, "hostB", 21)->network, "IB");
  EXPECT_EQ(FindProcess(r, "job-a1-worker-0", 41)->network, "Socket");
  EXPECT_EQ(r.cuda_driver_version, 12020);
  EXPECT_EQ(r.lines_parsed, 6u);
  EXPECT_EQ(r.lines_ignored, 0u);
  EXPECT_EQ(r.warnings.size(), 1u);
}

TEST(NcclPrefixTest, LinesWithoutNcclAreIgnored) {
  const auto r = ParseNcclLog(
      "Traceback (most recent call last):\n"
      "  File \"train.py\", line 3, in <module>\n"
      "\n"
      "NCCL INFO is mentioned in prose without a prefix? no: this one has a marker\n"
      "plain text\n");
  EXPECT_EQ(r.lines_parsed, 1u);  // the marker line: an NCCL line without host
  EXPECT_EQ(r.lines_ignored, 4u);
  EXPECT_TRUE(r.hosts.empty());
}

TEST(NcclVersionTest, BannerForms) {
  EXPECT_EQ(ParseNcclLog("NCCL version 2.18.5+cuda12.0\n").nccl_version, "2.18.5");
  EXPECT_EQ(ParseNcclLog("NCCL version 2.18.5+cuda12.0\n").nccl_version_full, "2.18.5+cuda12.0");
  EXPECT_EQ(ParseNcclLog("[1,0]<stdout>:NCCL version 2.4.2+cuda10.0\n").nccl_version, "2.4.2");
  EXPECT_EQ(ParseNcclLog("h:1:1 [0] NCCL INFO NCCL version 2.25.1+cuda12.8\n").nccl_version,
            "2.25.1");
  EXPECT_EQ(ParseNcclLog("h:1:1 [0] NCCL INFO NCCL version 2.3.7\n").nccl_version, "2.3.7");
  // Prose naming a version is not a banner; an error message's version is a fallback.
  EXPECT_FALSE(ParseNcclLog("we moved to NCCL version 2.18.3 last week\n").nccl_version);
  EXPECT_EQ(ParseNcclLog("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:400, unhandled "
                         "system error, NCCL version 2.4.8\n")
                .nccl_version,
            "2.4.8");
  EXPECT_EQ(ParseNcclLog("INFO pynccl.py:63] vLLM is using nccl==2.20.5\n").nccl_version, "2.20.5");
  // A banner wins over a fallback, whatever the order; distinct versions are all listed.
  const auto r = ParseNcclLog(
      "vLLM is using nccl==2.20.5\n"
      "a:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
      "b:2:2 [0] NCCL INFO NCCL version 2.18.1+cuda12.1\n");
  EXPECT_EQ(r.nccl_version, "2.21.5");
  EXPECT_EQ(r.nccl_versions, (std::vector<std::string>{"2.21.5+cuda12.4", "2.18.1+cuda12.1"}));
}

TEST(NcclCommTest, NewAndOldCommLines) {
  const auto r = ParseNcclLog(
      "h:1:2 [1] NCCL INFO comm 0x55a7be569d00 rank 1 nRanks 8 nNodes 2 localRanks 4 "
      "localRank 1 MNNVL 0\n"
      "h:1:2 [1] NCCL INFO comm 0x1476dca0 rank 1 nranks 8 cudaDev 1 nvmlDev 5 busId 1c000 "
      "commId 0xa015ae7e0a50005d - Init START\n"
      "g:3:4 [0] NCCL INFO ncclCommInitRank comm 0x7f rank 6 nranks 8 cudaDev 0 busId 3d000 - "
      "Init COMPLETE\n");
  EXPECT_EQ(r.ranks, 8);
  EXPECT_TRUE(r.ranks_exact);
  EXPECT_EQ(r.nodes, 2);
  EXPECT_TRUE(r.nodes_exact);
  EXPECT_EQ(r.local_ranks, 4);
  EXPECT_EQ(r.rank_hosts.at(1), "h");
  EXPECT_EQ(r.rank_hosts.at(6), "g");
  EXPECT_EQ(r.FindHost("h")->nvml_devices, std::vector<int>{5});
  EXPECT_EQ(FindProcess(r, "g", 3)->ranks, std::vector<int>{6});
}

struct ChannelCase {
  const char* line;
  int channel, from, to;
  const char* family;
  const char* detail;
  const char* direction;
};

TEST(NcclChannelTest, EveryConnectionForm) {
  const ChannelCase cases[] = {
      {"Channel 00/24 : 0[0] -> 1[1] via P2P/IPC", 0, 0, 1, "P2P/IPC", "P2P/IPC", ""},
      {"Channel 03/0 : 1[1] -> 2[2] via P2P/IPC/read", 3, 1, 2, "P2P/IPC", "P2P/IPC/read", ""},
      {"Channel 02/0 : 7[7] -> 0[0] via P2P/CUMEM", 2, 7, 0, "P2P/CUMEM", "P2P/CUMEM", ""},
      {"Channel 02/0 : 7[7] -> 0[0] via P2P/CUMEM/read/CE", 2, 7, 0, "P2P/CUMEM",
       "P2P/CUMEM/read/CE", ""},
      {"Channel 01/1 : 0[0] -> 3[3] via P2P/direct pointer", 1, 0, 3, "P2P/direct",
       "P2P/direct pointer", ""},
      {"Channel 05/0 : 2[2] -> 3[3] via P2P/indirect/1[1]", 5, 2, 3, "P2P/indirect",
       "P2P/indirect/1[1]", ""},
      {"Channel 00/0 : 0[0] -> 1[1] via P2P/NVL", 0, 0, 1, "P2P/NVL", "P2P/NVL", ""},
      {"Channel 00/0 : 0[0] -> 4[0] via P2P/MNNVL/read", 0, 0, 4, "P2P/MNNVL", "P2P/MNNVL/read",
       ""},
      {"Channel 07/0 : 4[4] -> 5[5] via SHM/direct/direct", 7, 4, 5, "SHM", "SHM/direct/direct",
       ""},
      {"Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA", 0, 1, 0, "NET/IB",
       "NET/IB/0/GDRDMA", "send"},
      {"Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/3/GDRDMA/Shared", 0, 8, 0, "NET/IB",
       "NET/IB/3/GDRDMA/Shared", "recv"},
      {"Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0(7)/GDRDMA(PCI)", 1, 0, 8, "NET/IB",
       "NET/IB/0(7)/GDRDMA(PCI)", "send"},
      {"Channel 00/0 : 1[1] -> 2[2] [send] via NET/Socket/0", 0, 1, 2, "NET/Socket", "NET/Socket/0",
       "send"},
      {"Channel 00/0 : 1[1] -> 2[2] [send] via NET/AWS Libfabric/0/GDRDMA", 0, 1, 2,
       "NET/AWS Libfabric", "NET/AWS Libfabric/0/GDRDMA", "send"},
      {"Channel 00/0 : 1[1] -> 2[2] [send] via NET/IBext_v8/0/GDRDMA", 0, 1, 2, "NET/IBext_v8",
       "NET/IBext_v8/0/GDRDMA", "send"},
      {"CollNet 00/1 : 0 [send] via COLLNET/IBext/0/GDRDMA", 0, 0, -1, "COLLNET",
       "COLLNET/IBext/0/GDRDMA", "send"},
      {"Coll 01 : 3 [receive] via COLLNET/SHARP/1", 1, 3, -1, "COLLNET", "COLLNET/SHARP/1", "recv"},
      {"Channel 00/0 : 0[0] -> 1[1] via NVLS/whatever", 0, 0, 1, "NVLS", "NVLS/whatever", ""},
      {"Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC", 0, 0, 1, "P2P/IPC", "P2P/IPC", ""},
      {"Ring 00 : 0[0] -> 1[1] via P2P/IPC", 0, 0, 1, "P2P/IPC", "P2P/IPC", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    const auto r = ParseNcclLog(std::string("node1:100:200 [0] NCCL INFO ") + c.line + "\n");
    ASSERT_EQ(r.channels.size(), 1u);
    const NcclChannel& ch = r.channels[0];
    EXPECT_EQ(ch.channel, c.channel);
    EXPECT_EQ(ch.from_rank, c.from);
    EXPECT_EQ(ch.to_rank, c.to);
    EXPECT_EQ(ch.transport, c.family);
    EXPECT_EQ(ch.transport_detail, c.detail);
    EXPECT_EQ(ch.direction, c.direction);
    EXPECT_EQ(ch.host, "node1");
    EXPECT_EQ(ch.pid, 100);
    EXPECT_EQ(ch.line_no, 1u);
    EXPECT_EQ(Transport(r, c.family), 1u);
  }
}

TEST(NcclChannelTest, DevicesAsNvmlIndexOrBusId) {
  const auto r = ParseNcclLog(
      "n:1:1 [0] NCCL INFO Channel 00/0 : 0[4] -> 1[5] via SHM/direct/direct\n"
      "n:1:1 [0] NCCL INFO Channel 00 : 0[1b000] -> 1[1c000] via SHM/direct/direct\n"
      "n:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 2 busId 1b000 - Init "
      "COMPLETE\n"
      "n:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 1C000 - Init COMPLETE\n");
  ASSERT_EQ(r.channels.size(), 2u);
  EXPECT_EQ(r.channels[0].from_dev, "4");
  EXPECT_EQ(r.channels[0].nvml_from, 4);
  EXPECT_EQ(r.channels[0].nvml_to, 5);
  // Old lines name bus ids; the comm lines (printed later) map them.
  EXPECT_EQ(r.channels[1].from_dev, "1b000");
  EXPECT_EQ(r.channels[1].nvml_from, 2);
  EXPECT_EQ(r.channels[1].nvml_to, 1);
}

TEST(NcclChannelTest, RingsTreesAndConnected) {
  const auto r = ParseNcclLog(
      "h:1:1 [0] NCCL INFO Channel 00/16 :    0   3   1   2   4   7   5   6\n"
      "h:1:1 [0] NCCL INFO Channel 01/16 :    0   3   1   2   4   7   5   6\n"
      "h:1:2 [6] NCCL INFO Trees [0] -1/-1/-1->6->5 [1] -1/-1/-1->6->5\n"
      "h:1:1 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n"
      "h:1:1 [0] NCCL INFO Connected all trees\n");
  ASSERT_EQ(r.rings.size(), 2u);
  EXPECT_EQ(r.rings[0].channel, 0);
  EXPECT_EQ(r.rings[0].ranks, (std::vector<int>{0, 3, 1, 2, 4, 7, 5, 6}));
  EXPECT_EQ(r.rings[1].channel, 1);
  EXPECT_EQ(r.tree_lines, 1u);
  EXPECT_EQ(r.connected_rings, 1u);
  EXPECT_EQ(r.connected_trees, 1u);
  EXPECT_EQ(r.ranks, 8);  // a ring holds every rank of its communicator
  EXPECT_TRUE(r.ranks_exact);
  EXPECT_TRUE(r.channels.empty());
  EXPECT_EQ(r.rank_hosts.at(6), "h");
}

TEST(NcclChannelTest, TransportFamilies) {
  EXPECT_EQ(TransportFamily("P2P/IPC/read"), "P2P/IPC");
  EXPECT_EQ(TransportFamily("P2P/direct pointer/read"), "P2P/direct");
  EXPECT_EQ(TransportFamily("P2P"), "P2P");
  EXPECT_EQ(TransportFamily("P2P/common device"), "P2P/common device");
  EXPECT_EQ(TransportFamily("SHM/CE/direct"), "SHM");
  EXPECT_EQ(TransportFamily("NET/Socket/1"), "NET/Socket");
  EXPECT_EQ(TransportFamily("NET/IB/0(3)/GDRDMA"), "NET/IB");
  EXPECT_EQ(TransportFamily("COLLNET/SHARP/0"), "COLLNET");
  EXPECT_EQ(TransportFamily("NVLS"), "NVLS");
  EXPECT_EQ(TransportFamily("UCX/0"), "UCX");
  EXPECT_EQ(TransportFamily(""), "unknown");
}

TEST(NcclNetTest, IbAndSocketDevices) {
  const auto r = ParseNcclLog(
      "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_8:1/IB [1]mlx5_16:1/RoCE [RO]; OOB "
      "ib8:192.168.1.8<0>\n"
      "a:1:1 [0] NCCL INFO Using network IB\n"
      "b:2:2 [0] NCCL INFO NET/IB : No device found.\n"
      "b:2:2 [0] NCCL INFO NET/IB : Using [RO]; OOB enp67s0:192.168.157.54<0>\n"
      "b:2:2 [0] NCCL INFO NET/Socket : Using [0]enp67s0:192.168.157.54<0> "
      "[1]enx1:fe80::52b1:b1f3%enx1<0>\n"
      "c:3:3 [0] NCCL INFO Failed to open libibverbs.so[.1]\n");
  ASSERT_EQ(r.net_devices.size(), 4u);
  EXPECT_EQ(r.net_devices[0].name, "mlx5_8");
  EXPECT_EQ(r.net_devices[0].net, "IB");
  EXPECT_EQ(r.net_devices[0].port, 1);
  EXPECT_EQ(r.net_devices[0].link_layer, "IB");
  EXPECT_EQ(r.net_devices[1].link_layer, "RoCE");
  EXPECT_EQ(r.net_devices[2].name, "enp67s0");
  EXPECT_EQ(r.net_devices[2].address, "192.168.157.54");
  EXPECT_EQ(r.net_devices[3].name, "enx1");
  EXPECT_EQ(r.net_devices[3].address, "fe80::52b1:b1f3%enx1");
  EXPECT_TRUE(r.FindHost("a")->ib_devices);
  EXPECT_FALSE(r.FindHost("b")->ib_devices);
  EXPECT_TRUE(r.FindHost("b")->ib_no_device);
  EXPECT_TRUE(r.FindHost("c")->ibverbs_missing);
  EXPECT_EQ(FindProcess(r, "a", 1)->network, "IB");
  EXPECT_EQ(FindProcess(r, "b", 2)->network, "Socket");
}

TEST(NcclNetTest, UsingNetworkOverridesTheInitLine) {
  const auto r = ParseNcclLog(
      "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:1.2.3.4<0>\n"
      "a:1:1 [0] NCCL INFO Using network Socket\n"
      "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:1.2.3.4<0>\n");
  EXPECT_EQ(FindProcess(r, "a", 1)->network, "Socket");
  EXPECT_EQ(FindProcess(r, "a", 1)->network_line.line_no, 2u);
  EXPECT_EQ(r.net_devices.size(), 1u);  // unique per host and name
}

TEST(NcclEnvTest, EnvironmentSettings) {
  const auto r = ParseNcclLog(
      "h:1:2 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to LOC\n"
      "h:1:2 [0] NCCL INFO NCCL_SHM_DISABLE set by environment to 1.\n"
      "h:1:2 [0] NCCL INFO NCCL_IB_HCA set to mlx5_4\n");
  const NcclHost* h = r.FindHost("h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->env.at("NCCL_P2P_LEVEL"), "LOC");
  EXPECT_EQ(h->env.at("NCCL_SHM_DISABLE"), "1");
  EXPECT_EQ(h->env.at("NCCL_IB_HCA"), "mlx5_4");
  ASSERT_EQ(h->p2p_off.size(), 1u);
  EXPECT_EQ(h->p2p_off[0].line_no, 1u);
  EXPECT_EQ(h->ib_hints.size(), 1u);
}

// ---- errors, warnings, timeouts ----------------------------------------------------------

TEST(NcclErrorTest, WarnWithItsChainIsOneError) {
  const auto r = ParseNcclLog(
      "X:430:2237 [0] include/topo.h:27 NCCL WARN Could not find real path of /sys/x\n"
      "X:430:2237 [0] NCCL INFO init.cu:864 -> 2\n"
      "X:430:2237 [0] NCCL INFO init.cu:887 -> 2\n"
      "X:430:2237 [0] NCCL INFO misc/group.cu:69 -> 2 [Async thread]\n");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].line_no, 1u);
  EXPECT_NE(r.errors[0].text.find("Could not find real path"), std::string::npos);
  EXPECT_NE(r.errors[0].text.find("unhandled system error"), std::string::npos);
  EXPECT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.lines_parsed, 4u);
}

TEST(NcclErrorTest, ChainsOfInterleavedThreadsStaySeparate) {
  const auto r = ParseNcclLog(
      "a:1:10 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_modify_qp failed with error Network "
      "is unreachable\n"
      "b:2:20 [1] NCCL INFO transport/net_ib.cc:700 -> 3\n"  // another host's own chain
      "a:1:10 [0] NCCL INFO transport/net_ib.cc:646 -> 2\n"
      "b:2:20 [1] NCCL INFO transport/net.cc:400 -> 3\n"
      "a:1:11 [0] NCCL INFO proxy.cc:900 -> 6\n");  // another thread: a chain of its own
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_EQ(r.errors[0].line_no, 1u);
  EXPECT_NE(r.errors[0].text.find("ibv_modify_qp"), std::string::npos);
  EXPECT_NE(r.errors[0].text.find("ncclSystemError"), std::string::npos);
  EXPECT_EQ(r.errors[1].line_no, 2u);
  EXPECT_EQ(r.errors[1].host, "b");
  EXPECT_NE(r.errors[1].text.find("ncclInternalError"), std::string::npos);
  EXPECT_EQ(r.errors[2].line_no, 5u);
  EXPECT_NE(r.errors[2].text.find("ncclRemoteError"), std::string::npos);
}

TEST(NcclErrorTest, FailureWarnsAndNoticeWarns) {
  const auto r = ParseNcclLog(
      "a:1:1 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
      "10.0.0.2<5000> with error 12, opcode 0, len 0, vendor err 129 (Recv)\n"
      "a:1:1 [0] init.cc:100 NCCL WARN NCCL_SOCKET_IFNAME set to eth9\n"
      "a:1:1 [0] proxy.cc:1 NCCL WARN [Service thread] Error encountered progressing "
      "operation=Connect, res=3, closing connection\n"
      "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL "
      "version 2.7.8\n"
      "torch.distributed.DistBackendError: NCCL error: remote process exited or there was a "
      "network error\n");
  EXPECT_EQ(r.warnings.size(), 3u);
  ASSERT_EQ(r.errors.size(), 4u);
  EXPECT_EQ(r.errors[0].line_no, 1u);
  EXPECT_EQ(r.errors[1].line_no, 3u);
  EXPECT_EQ(r.errors[2].line_no, 4u);
  EXPECT_EQ(r.errors[3].line_no, 5u);
  EXPECT_EQ(r.nccl_version, "2.7.8");
}

TEST(NcclTimeoutTest, WatchdogFields) {
  const auto r = ParseNcclLog(
      " 2025-02-18 12:54 [rank13]:[E218 04:54:22.864467604 ProcessGroupNCCL.cpp:616] [Rank 1] "
      "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=216, OpType=ALLTOALL_BASE, "
      "NumelIn=1379328, NumelOut=1572864, Timeout(ms)=600000) ran for 600045 milliseconds "
      "before timing out.\n"
      "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=9, OpType=ALLGATHER, Timeout(ms)=1800000) ran for 1800475 milliseconds "
      "before timing out.\n"
      "RuntimeError: NCCL communicator was aborted on rank 3. Original reason for failure was: "
      "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
      "OpType=ALLGATHER, Timeout(ms)=1800000) ran for 1800475 milliseconds before timing out.\n");
  ASSERT_EQ(r.timeouts.size(), 2u);  // the repeat inside "communicator was aborted" is one
  const NcclTimeout& a = r.timeouts[0];
  EXPECT_EQ(a.line_no, 1u);
  EXPECT_EQ(a.rank, 13);
  EXPECT_EQ(a.pg_rank, 1);
  EXPECT_EQ(a.seq_num, 216);
  EXPECT_EQ(a.op_type, "ALLTOALL_BASE");
  EXPECT_EQ(a.numel_in, 1379328);
  EXPECT_EQ(a.numel_out, 1572864);
  EXPECT_EQ(a.timeout_ms, 600000);
  EXPECT_EQ(a.ran_for_ms, 600045);
  const NcclTimeout& b = r.timeouts[1];
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.seq_num, 9);
  EXPECT_EQ(b.op_type, "ALLGATHER");
  EXPECT_EQ(b.numel_in, -1);
  EXPECT_EQ(b.ran_for_ms, 1800475);
  EXPECT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.lines_parsed, 3u);
}

// ---- the real logs of ../shared/real/nccl (INDEX.md's facts) --------------------------------

void CheckNccl224(const NcclLogReport& r, const std::vector<Finding>& f) {
  // mpirun "[1,N]<stdout>:" on every line; rank 0 lists 34 RoCE ports, the others sockets.
  EXPECT_EQ(r.nccl_version, "2.4.2");
  EXPECT_EQ(r.nccl_version_full, "2.4.2+cuda10.0");
  ASSERT_EQ(r.hosts.size(), 2u);
  EXPECT_EQ(r.hosts[0].name, "gpu6");
  EXPECT_EQ(r.hosts[1].name, "gpu7");
  EXPECT_EQ(r.nodes, 2);
  EXPECT_FALSE(r.nodes_exact);
  EXPECT_EQ(r.ranks, 5);  // at least: mpirun ranks 0..4
  EXPECT_FALSE(r.ranks_exact);
  size_t roce = 0;
  for (const auto& d : r.net_devices) {
    if (d.host == "gpu6" && d.net == "IB") {
      ++roce;
      EXPECT_EQ(d.link_layer, "RoCE") << d.name;
      EXPECT_EQ(d.port, 1);
    }
  }
  EXPECT_EQ(roce, 34u);
  EXPECT_EQ(r.net_devices.front().name, "mlx5_18");
  EXPECT_EQ(FindProcess(r, "gpu6", 1407)->network, "IB");
  EXPECT_EQ(FindProcess(r, "gpu6", 1409)->network, "Socket");
  EXPECT_EQ(FindProcess(r, "gpu6", 1410)->network, "Socket");
  EXPECT_EQ(FindProcess(r, "gpu7", 4105)->network, "Socket");
  bool flannel = false;
  for (const auto& d : r.net_devices) {
    flannel = flannel || (d.host == "gpu7" && d.name == "flannel.1");
  }
  EXPECT_TRUE(flannel);
  EXPECT_TRUE(r.errors.empty());
  EXPECT_TRUE(r.channels.empty());
  EXPECT_EQ(r.lines_parsed, 7u);
  // What was wrong: ranks on a node with 34 RoCE ports talk over sockets (and mix IB and
  // sockets across the job: the hang).
  EXPECT_EQ(Causes(f), (std::vector<std::string>{"net_fallback@gpu6", "net_fallback@gpu7"}));
  EXPECT_TRUE(AnyContains(f[0].evidence, "NET/Socket : Using"));
  EXPECT_TRUE(AnyContains(f[0].evidence, "mlx5_18"));
  EXPECT_NE(f[0].summary.find("mlx5_18"), std::string::npos);
  EXPECT_NE(f[1].summary.find("gpu6"), std::string::npos);
  EXPECT_TRUE(f[0].nic.empty());  // 34 candidates: none named
}

void CheckNccl707(const NcclLogReport& r, const std::vector<Finding>& f) {
  EXPECT_EQ(r.nccl_version, "2.7.6");
  ASSERT_EQ(r.hosts.size(), 1u);
  const NcclHost& h = r.hosts[0];
  EXPECT_EQ(h.name, "10-90-43-152");
  EXPECT_EQ(h.cuda_devices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(h.gpu_names.at(0), "A100-SXM4-40GB");
  EXPECT_EQ(h.gpu_names.at(3), "A100-SXM4-40GB");
  EXPECT_EQ(r.ranks, 4);
  EXPECT_EQ(r.nodes, 1);
  size_t ib = 0, roce = 0;
  for (const auto& d : r.net_devices) {
    ib += d.link_layer == "IB";
    roce += d.link_layer == "RoCE";
  }
  EXPECT_EQ(ib, 7u);
  EXPECT_EQ(roce, 2u);
  EXPECT_EQ(r.net_devices[6].name, "mlx5_15");
  EXPECT_EQ(r.net_devices[8].name, "mlx5_17");
  EXPECT_EQ(h.env.at("NCCL_P2P_LEVEL"), "LOC");
  EXPECT_EQ(h.env.at("NCCL_SHM_DISABLE"), "1");
  EXPECT_EQ(FindProcess(r, "10-90-43-152", 120890)->network, "IB");
  // What was wrong: P2P off (LOC) and SHM off on SXM A100s, so GPU-to-GPU traffic inside the
  // node went through the NICs (where GDRDMA then failed).
  ASSERT_EQ(Causes(f), std::vector<std::string>{"nvlink_fallback@10-90-43-152"});
  EXPECT_TRUE(AnyContains(f[0].evidence, "NCCL_P2P_LEVEL set by environment to LOC"));
  EXPECT_TRUE(AnyContains(f[0].evidence, "A100-SXM4-40GB"));
  EXPECT_NE(f[0].summary.find("network"), std::string::npos);
}

void CheckPytorch40273(const NcclLogReport& r, const std::vector<Finding>& f) {
  EXPECT_EQ(r.nccl_version, "2.4.2");
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_EQ(r.hosts[0].name, "XXX");
  EXPECT_EQ(r.hosts[0].cuda_devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.hosts[0].env.at("NCCL_IB_DISABLE"), "1");
  EXPECT_EQ(r.ranks, 2);
  EXPECT_EQ(r.nodes, 1);
  EXPECT_EQ(FindProcess(r, "XXX", 430)->network, "Socket");
  EXPECT_EQ(r.net_devices.size(), 1u);
  EXPECT_EQ(r.net_devices[0].name, "xgbe0");
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_NE(r.warnings[0].text.find("include/topo.h:27 NCCL WARN Could not find real path"),
            std::string::npos);
  // Two failures (one per rank), each a WARN followed by its "init.cu:864 -> 2" chain.
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors[0].line_no, 9u);
  EXPECT_EQ(r.errors[1].line_no, 19u);
  EXPECT_TRUE(AnyErrorContains(r, "unhandled system error"));
  EXPECT_EQ(r.lines_ignored, 6u);  // the interleaved Python traceback and blank lines
  EXPECT_TRUE(f.empty());          // one node, IB disabled without IB hardware in sight
}

TEST(NcclRealLogTest, Nccl224HorovodSocketsBesideRoce) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccl224_horovod_mpirun_roce_34nics_nccl242.log"));
  CheckNccl224(r, AnalyzeNccl(r, nullptr));
}

TEST(NcclRealLogTest, Nccl707P2pLocShmDisabled) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccl707_a100_ib_mixed_roce_p2p_loc_shm_disabled_gdr_fail.log"));
  CheckNccl707(r, AnalyzeNccl(r, nullptr));
}

TEST(NcclRealLogTest, Pytorch40273WarnAndErrorChain) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(
      Real("pytorch40273_2gpu_socket_nccl_warn_topo_realpath_unhandled_system_error.log"));
  CheckPytorch40273(r, AnalyzeNccl(r, nullptr));
}

TEST(NcclRealLogTest, Nccl892RingOrderAndTrees) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccl892_h800_8gpu_single_process_trees_ring_order.log"));
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_EQ(r.hosts[0].name, "036260b61d3a");
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_EQ(r.processes[0].pid, 33347);
  ASSERT_EQ(r.rings.size(), 1u);
  EXPECT_EQ(r.rings[0].channel, 0);
  EXPECT_EQ(r.rings[0].ranks, (std::vector<int>{0, 3, 1, 2, 4, 7, 5, 6}));
  EXPECT_EQ(r.ranks, 8);
  EXPECT_TRUE(r.ranks_exact);
  EXPECT_EQ(r.tree_lines, 3u);
  EXPECT_EQ(r.rank_hosts.at(5), "036260b61d3a");
  EXPECT_EQ(r.lines_parsed, 8u);
  EXPECT_TRUE(r.errors.empty());
  // "NVLS is not supported?": no NVLS in the log is not a fault in the vocabulary.
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclRealLogTest, Nccl1538K8sP2pCumem) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccl1538_k8s_worker_p2p_cumem.log"));
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_EQ(r.hosts[0].name, "job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0");
  EXPECT_EQ(r.channels.size(), 11u);
  for (const auto& c : r.channels) {
    EXPECT_EQ(c.transport, "P2P/CUMEM");
    EXPECT_EQ(c.transport_detail, "P2P/CUMEM");  // no "/read"
  }
  EXPECT_EQ(Transport(r, "P2P/CUMEM"), 11u);
  EXPECT_EQ(r.transports.size(), 1u);
  EXPECT_EQ(r.ranks, 8);  // ranks 0..7 appear
  EXPECT_EQ(r.nodes, 1);
  EXPECT_EQ(r.channels[0].channel, 2);
  EXPECT_EQ(r.channels[0].from_rank, 7);
  EXPECT_EQ(r.channels[0].to_rank, 0);
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclRealLogTest, Nccltests213CommLines) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccltests213_8rank_1node_comm_trees.log"));
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_EQ(r.hosts[0].name, "hw14");
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_EQ(r.processes[0].pid, 798);
  EXPECT_EQ(r.processes[0].ranks, (std::vector<int>{0, 1, 2, 5}));
  EXPECT_EQ(r.ranks, 8);
  EXPECT_TRUE(r.ranks_exact);
  EXPECT_EQ(r.nodes, 1);  // each node formed its own one-node communicator
  EXPECT_TRUE(r.nodes_exact);
  EXPECT_EQ(r.local_ranks, 8);
  EXPECT_EQ(r.tree_lines, 2u);
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclRealLogTest, Nccl1609Nvls) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccl1609_h800_4rank_nvls_timeout_issue.log"));
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_EQ(r.hosts[0].name, "tj5-sc-ai-h800r-dev01");
  EXPECT_EQ(r.hosts[0].cuda_devices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(r.processes.size(), 4u);
  EXPECT_EQ(r.ranks, 4);
  // Three of the four ranks printed "16 nvls channels".
  EXPECT_EQ(Transport(r, "NVLS"), 48u);
  EXPECT_EQ(Transport(r, "COLLNET"), 0u);
  EXPECT_FALSE(r.hosts[0].nvlink_hints.empty());
  EXPECT_TRUE(r.errors.empty());
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclRealLogTest, Nccl1817P2pDirectPointer) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r =
      ParseNcclLog(Real("nccl1817_8gpu_single_process_p2p_direct_pointer_p2p_slower_than_shm.log"));
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_EQ(r.processes[0].pid, 3884994);
  EXPECT_EQ(r.channels.size(), 11u);
  std::set<int> ranks;
  for (const auto& c : r.channels) {
    EXPECT_EQ(c.transport, "P2P/direct");
    EXPECT_EQ(c.transport_detail, "P2P/direct pointer");
    ranks.insert(c.from_rank);
    ranks.insert(c.to_rank);
  }
  EXPECT_EQ(ranks.size(), 8u);
  EXPECT_EQ(r.channels[0].channel, 1);
  EXPECT_EQ(r.channels[0].nvml_from, 0);
  EXPECT_EQ(r.channels[0].nvml_to, 3);
  EXPECT_EQ(r.hosts[0].nvml_devices, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(r.ranks, 8);
  // "P2P slower than SHM": P2P is what NCCL should use here, and no NVLink is in sight.
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclRealLogTest, Nccl1235P2pIpcRead) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccl1235_4gpu_node_p2p_ipc_read_multinode_error.log"));
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_EQ(r.hosts[0].name, "ng30903");
  EXPECT_EQ(r.processes.size(), 4u);
  EXPECT_EQ(r.channels.size(), 15u);
  int max_channel = -1;
  for (const auto& c : r.channels) {
    EXPECT_EQ(c.transport_detail, "P2P/IPC/read");
    max_channel = std::max(max_channel, c.channel);
  }
  EXPECT_EQ(max_channel, 23);
  EXPECT_EQ(Transport(r, "P2P/IPC"), 15u);
  EXPECT_EQ(r.ranks, 4);
  EXPECT_EQ(r.hosts[0].nvml_devices, (std::vector<int>{0, 1, 2, 3}));
  // P2P read is NCCL's choice on NVLink-joined Ampere pairs: four pairs are NVLink.
  EXPECT_EQ(r.hosts[0].nvlink_pairs.size(), 4u);
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclRealLogTest, Vllm8447RayInterleaved) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("vllm8447_2node_pp_ib_hang.log"));
  EXPECT_EQ(r.nccl_version, "2.20.5");  // "vLLM is using nccl==2.20.5"
  EXPECT_EQ(r.ranks, 2);
  EXPECT_TRUE(r.ranks_exact);
  EXPECT_EQ(r.nodes, 2);
  EXPECT_TRUE(r.nodes_exact);
  EXPECT_EQ(r.local_ranks, 1);
  EXPECT_EQ(FindProcess(r, "VM-160-69-tencentos", 561)->network, "IB");
  ASSERT_EQ(r.rings.size(), 2u);
  EXPECT_EQ(r.rings[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.rank_hosts.at(0), "VM-160-69-tencentos");
  EXPECT_EQ(r.lines_ignored, 2u);  // the Ray worker's "Found nccl from library" lines
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclRealLogTest, Nccltests307RoceBond) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccltests307_8x4090_roce_bond_slow_allreduce.log"));
  EXPECT_EQ(r.nccl_version, "2.21.5");
  EXPECT_EQ(r.cuda_driver_version, 12060);
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_EQ(r.hosts[0].name, "node031");
  EXPECT_EQ(r.hosts[0].gpu_names.at(7), "NVIDIA GeForce RTX 4090");
  ASSERT_EQ(r.net_devices.size(), 1u);
  EXPECT_EQ(r.net_devices[0].name, "mlx5_bond_0");
  EXPECT_EQ(r.net_devices[0].link_layer, "RoCE");
  EXPECT_EQ(FindProcess(r, "node031", 1936469)->network, "IB");
  EXPECT_EQ(r.ranks, 8);  // "Rank 7"
  EXPECT_EQ(r.nodes, 1);
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
  // With its topology (topo/nccltests307_*: PIX switches, SYS across sockets, no NVLink) the
  // slow all-reduce is not a fallback either.
  TopoHint topo;
  for (int i = 0; i < 8; ++i) {
    std::vector<std::string> row;
    for (int j = 0; j < 8; ++j) row.push_back(i == j ? "X" : (i / 4 == j / 4 ? "PIX" : "SYS"));
    topo.gpu_links.push_back(row);
  }
  topo.nics = {"mlx5_bond_0"};
  topo.ib_present = true;
  EXPECT_TRUE(AnalyzeNccl(r, &topo).empty());
}

TEST(NcclRealLogTest, Nccltests287SocketOnlyBox) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccltests287_2x5090_socket_nccl2251_error.log"));
  EXPECT_EQ(r.nccl_version, "2.25.1");
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_EQ(r.hosts[0].name, "GENOA-06");
  EXPECT_EQ(r.hosts[0].gpu_names.at(1), "NVIDIA GeForce RTX 5090");
  EXPECT_TRUE(r.hosts[0].ibverbs_missing);
  EXPECT_EQ(FindProcess(r, "GENOA-06", 4766)->network, "Socket");
  EXPECT_EQ(r.ranks, 2);
  EXPECT_EQ(r.nodes, 1);
  EXPECT_EQ(r.lines_parsed + r.lines_ignored, 17u);
  EXPECT_TRUE(r.errors.empty());
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());  // one node, no RDMA NIC
}

TEST(NcclRealLogTest, Nccltests185TwoNodesRoce) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r =
      ParseNcclLog(Real("nccltests185_dgxh100_2node_roce_ibv_modify_qp_unreachable.log"));
  EXPECT_EQ(r.nccl_version, "2.19.3");
  ASSERT_EQ(r.hosts.size(), 2u);
  EXPECT_EQ(r.hosts[0].name, "dgxh100-3");
  EXPECT_EQ(r.hosts[1].name, "dgxh100-4");
  EXPECT_EQ(r.hosts[0].gpu_names.at(0), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(r.ranks, 2);
  EXPECT_EQ(r.nodes, 2);
  ASSERT_EQ(r.net_devices.size(), 4u);
  for (const auto& d : r.net_devices) EXPECT_EQ(d.link_layer, "RoCE");
  EXPECT_EQ(FindProcess(r, "dgxh100-3", 2152176)->network, "IB");
  EXPECT_EQ(FindProcess(r, "dgxh100-4", 460770)->network, "IB");
  EXPECT_TRUE(r.errors.empty());  // the ibv_modify_qp WARN is not in the excerpt
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclRealLogTest, Nccl1052TwoNodesRoceMlx5_4) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccl1052_h800_2node_roce_mlx5_4_completion_error.log"));
  EXPECT_EQ(r.nccl_version, "2.18.5");
  EXPECT_EQ(r.ranks, 2);
  EXPECT_EQ(r.nodes, 2);
  ASSERT_NE(r.FindHost("node2"), nullptr);
  ASSERT_NE(r.FindHost("node4"), nullptr);
  EXPECT_EQ(r.FindHost("node4")->gpu_names.at(0), "NVIDIA H800");
  EXPECT_EQ(r.FindHost("node2")->env.at("NCCL_IB_HCA"), "mlx5_4");
  ASSERT_EQ(r.net_devices.size(), 2u);
  EXPECT_EQ(r.net_devices[0].name, "mlx5_4");
  EXPECT_EQ(r.net_devices[0].link_layer, "RoCE");
  EXPECT_EQ(r.rank_hosts.at(1), "node4");
  EXPECT_TRUE(r.errors.empty());  // the completion-error WARN is not in the excerpt
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclRealLogTest, AikitoriaNoIbSocket) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("aikitoria38_4090_plus_rtx6000ada_nccl2312_no_ib_socket.log"));
  EXPECT_EQ(r.nccl_version, "2.31.2");
  EXPECT_EQ(r.nccl_version_full, "2.31.2+cuda13.3");
  EXPECT_EQ(r.cuda_driver_version, 13030);
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_EQ(r.hosts[0].gpu_names.at(0), "NVIDIA RTX 6000 Ada Generation");
  EXPECT_TRUE(r.hosts[0].ib_no_device);
  EXPECT_FALSE(r.hosts[0].ib_devices);
  ASSERT_EQ(r.net_devices.size(), 2u);
  EXPECT_EQ(r.net_devices[0].name, "enp67s0");
  EXPECT_EQ(r.net_devices[1].name, "enp68s0");
  EXPECT_EQ(FindProcess(r, "definitley-not-a-banana", 2274)->network, "Socket");
  EXPECT_EQ(r.lines_parsed, 15u);
  // No IB hardware and one box: sockets are all there is.
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclRealLogTest, Nccl1610WatchdogAndSocketErrors) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccl1610_watchdog_alltoall_timeout_socket_errors.log"));
  ASSERT_EQ(r.timeouts.size(), 2u);
  EXPECT_EQ(r.timeouts[0].op_type, "ALLTOALL_BASE");
  EXPECT_EQ(r.timeouts[0].seq_num, 216);
  EXPECT_EQ(r.timeouts[0].rank, 13);
  EXPECT_EQ(r.timeouts[0].pg_rank, 1);
  EXPECT_EQ(r.timeouts[1].op_type, "ALLREDUCE");
  EXPECT_EQ(r.timeouts[1].seq_num, 57);
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_EQ(r.hosts[0].name, "ncivki7qpk7pmo1btv0h0");
  // Two timeouts and one socket.cc error chain (three frames).
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_EQ(r.errors[2].line_no, 5u);
  EXPECT_NE(r.errors[2].text.find("misc/socket.cc:47 -> 3"), std::string::npos);
  EXPECT_NE(r.errors[2].text.find("ncclInternalError"), std::string::npos);
  EXPECT_FALSE(AnyErrorContains(r, "collective mismatch"));  // different SeqNums
  EXPECT_EQ(r.ranks, 16);
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclRealLogTest, Nccl1409CollectiveMismatch) {
  SKIP_WITHOUT_REAL_DATA();
  const auto r = ParseNcclLog(Real("nccl1409_watchdog_broadcast_vs_allreduce_mismatch.log"));
  ASSERT_EQ(r.timeouts.size(), 2u);
  EXPECT_EQ(r.timeouts[0].rank, 7);
  EXPECT_EQ(r.timeouts[0].op_type, "BROADCAST");
  EXPECT_EQ(r.timeouts[0].seq_num, 80078);
  EXPECT_EQ(r.timeouts[0].ran_for_ms, 600026);
  EXPECT_EQ(r.timeouts[1].rank, 3);
  EXPECT_EQ(r.timeouts[1].op_type, "ALLREDUCE");
  EXPECT_EQ(r.timeouts[1].seq_num, 80078);
  EXPECT_TRUE(AnyErrorContains(r, "collective mismatch: SeqNum 80078"));
  EXPECT_FALSE(r.nccl_version);
  EXPECT_FALSE(r.nodes);
  EXPECT_EQ(r.lines_parsed, 3u);
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

// Every real log parses, and nothing in any of them is left unread but blank lines, shell
// lines, tracebacks and nccl-tests preamble.
TEST(NcclRealLogTest, EveryRealLogParses) {
  SKIP_WITHOUT_REAL_DATA();
  size_t logs = 0;
  for (const auto& e : fs::directory_iterator(RealNcclDir())) {
    if (e.path().extension() != ".log") continue;
    ++logs;
    SCOPED_TRACE(e.path().filename().string());
    const auto r = ParseNcclLog(testing::ReadFileOrEmpty(e.path().string()));
    EXPECT_GT(r.lines_parsed, 0u);
    EXPECT_LE(r.lines_ignored, 6u);
    EXPECT_EQ(r.lines_truncated, 0u);
    EXPECT_NO_THROW((void)NcclReportJson(r, AnalyzeNccl(r, nullptr)).dump());
  }
  EXPECT_EQ(logs, 17u);
}

// ---- the checked-in fixtures (work without ../shared) ---------------------------------------

TEST(NcclFixtureTest, Nccl224) {
  const auto r = ParseNcclLog(
      testing::ReadFileOrEmpty(FixtureDir() + "/nccl224_horovod_mpirun_roce_34nics_nccl242.log"));
  CheckNccl224(r, AnalyzeNccl(r, nullptr));
}

TEST(NcclFixtureTest, Nccl707) {
  const auto r = ParseNcclLog(testing::ReadFileOrEmpty(
      FixtureDir() + "/nccl707_a100_ib_mixed_roce_p2p_loc_shm_disabled_gdr_fail.log"));
  CheckNccl707(r, AnalyzeNccl(r, nullptr));
}

TEST(NcclFixtureTest, Pytorch40273) {
  const auto r = ParseNcclLog(testing::ReadFileOrEmpty(
      FixtureDir() +
      "/pytorch40273_2gpu_socket_nccl_warn_topo_realpath_unhandled_system_error.log"));
  CheckPytorch40273(r, AnalyzeNccl(r, nullptr));
}

TEST(NcclFixtureTest, SyntheticTwoNodes) {
  const auto r =
      ParseNcclLog(testing::ReadFileOrEmpty(FixtureDir() + "/synthetic_2node_shm_socket.log"));
  EXPECT_EQ(r.nccl_version, "2.19.3");
  EXPECT_EQ(r.ranks, 4);
  EXPECT_EQ(r.nodes, 2);
  EXPECT_EQ(r.local_ranks, 2);
  EXPECT_EQ(Transport(r, "SHM"), 2u);
  EXPECT_EQ(Transport(r, "NET/Socket"), 1u);
  EXPECT_EQ(Transport(r, "NET/IB"), 1u);
  EXPECT_EQ(r.FindHost("node-b")->nvml_devices, std::vector<int>{0});  // the receiving end
  EXPECT_EQ(r.rank_hosts.at(2), "node-b");
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_NE(r.errors[0].text.find("connection closed"), std::string::npos);
  EXPECT_NE(r.errors[0].text.find("ncclRemoteError"), std::string::npos);
  ASSERT_EQ(r.timeouts.size(), 1u);
  EXPECT_EQ(r.timeouts[0].rank, 1);
  EXPECT_EQ(r.lines_parsed, 25u);
  const auto f = AnalyzeNccl(r, nullptr);
  ASSERT_EQ(Causes(f), (std::vector<std::string>{"nvlink_fallback@node-a", "net_fallback@node-a"}));
  EXPECT_EQ(f[0].gpu, 0);
  EXPECT_EQ(f[0].peer_gpu, 1);
  EXPECT_TRUE(AnyContains(f[0].evidence, "line 16:"));
  EXPECT_TRUE(AnyContains(f[0].evidence, "NVLS multicast support"));
  EXPECT_TRUE(AnyContains(f[1].evidence, "NCCL_IB_HCA set to mlx5_0"));
}

// ---- the analysis -----------------------------------------------------------------------

TopoHint FourGpuTopo() {
  // GPU0-1 and GPU2-3 are NVLink pairs; across the pairs only PCIe.
  TopoHint t;
  t.gpu_links = {{"X", "NV4", "SYS", "SYS"},
                 {"NV4", "X", "SYS", "SYS"},
                 {"SYS", "SYS", "X", "NV4"},
                 {"SYS", "SYS", "NV4", "X"}};
  return t;
}

TEST(NcclAnalysisTest, ShmBetweenNvlinkPairIsAFallback) {
  const auto r = ParseNcclLog(
      "n:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n"
      "n:1:1 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via SHM/direct/direct\n"
      "n:1:1 [0] NCCL INFO Channel 00/0 : 2[2] -> 3[3] via P2P/IPC\n");
  const TopoHint topo = FourGpuTopo();
  const auto f = AnalyzeNccl(r, &topo);
  ASSERT_EQ(Causes(f), std::vector<std::string>{"nvlink_fallback@n"});
  EXPECT_EQ(f[0].gpu, 0);  // only the 0-1 pair: 1-2 has no NVLink, 2-3 uses P2P
  EXPECT_EQ(f[0].peer_gpu, 1);
  EXPECT_EQ(model::LayerOf(f[0].cause), model::Layer::kLink);
  EXPECT_EQ(f[0].severity, model::Severity::kWarning);
  EXPECT_TRUE(AnyContains(f[0].evidence, "topo -m: GPU0 - GPU1 NV4"));
  EXPECT_TRUE(AnyContains(f[0].evidence, "line 1:"));
  EXPECT_FALSE(AnyContains(f[0].evidence, "line 2:"));
  // Without the topology and without NVLink in the log: nothing to go on.
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclAnalysisTest, TopologyWithoutNvlinkFindsNothing) {
  const auto r = ParseNcclLog(
      "n:1:1 [0] NCCL INFO NVLS multicast support is available on dev 0\n"
      "n:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n");
  TopoHint topo;
  topo.gpu_links = {{"X", "PIX"}, {"PIX", "X"}};
  EXPECT_TRUE(AnalyzeNccl(r, &topo).empty());  // the topology outranks the log's hints
  EXPECT_EQ(AnalyzeNccl(r, nullptr).size(), 1u);
}

TEST(NcclAnalysisTest, LogEvidenceOfNvlinkWithoutTopology) {
  // P2P read proves NVLink for the pair it joins only.
  const auto r = ParseNcclLog(
      "n:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
      "n:1:1 [0] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via SHM/direct/direct\n"
      "n:1:1 [0] NCCL INFO Channel 01/0 : 1[1] -> 2[2] via SHM/direct/direct\n");
  const auto f = AnalyzeNccl(r, nullptr);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].gpu, 0);
  EXPECT_EQ(f[0].peer_gpu, 1);
  EXPECT_TRUE(AnyContains(f[0].evidence, "P2P read: NVLink between GPU 0 and 1"));
  // MNNVL and SXM boards are NVLink for the whole node.
  for (const char* hint :
       {"n:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 1\n",
        "#  Rank  0 Group  0 Pid 1 on n device  0 [0x1b] Tesla V100-SXM2-32GB\n",
        "n:1:1 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 12, bw 40.0/40.0, type NVL/PIX, "
        "sameChannels 1\n"}) {
    SCOPED_TRACE(hint);
    const auto r2 =
        ParseNcclLog(std::string(hint) +
                     "n:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n");
    EXPECT_EQ(Causes(AnalyzeNccl(r2, nullptr)), std::vector<std::string>{"nvlink_fallback@n"});
  }
  // "nvlinkCentricSched" is a setting, not NVLink.
  const auto r3 = ParseNcclLog(
      "n:1:1 [0] NCCL INFO Comm config nvlinkCentricSched set to 1\n"
      "n:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n");
  EXPECT_TRUE(AnalyzeNccl(r3, nullptr).empty());
}

TEST(NcclAnalysisTest, IntraNodeNetBetweenNvlinkGpus) {
  const auto r = ParseNcclLog(
      "n:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n"
      "n:2:2 [1] NCCL INFO comm 0x2 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 MNNVL 0\n"
      "n:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA\n");
  const TopoHint topo = FourGpuTopo();
  const auto f = AnalyzeNccl(r, &topo);
  ASSERT_EQ(Causes(f), std::vector<std::string>{"nvlink_fallback@n"});
  EXPECT_NE(f[0].summary.find("NET/IB"), std::string::npos);
}

TEST(NcclAnalysisTest, P2pDisabledOnNvlinkNode) {
  const std::string log =
      "n:1:1 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.\n"
      "n:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0\n";
  const TopoHint topo = FourGpuTopo();
  const auto f = AnalyzeNccl(ParseNcclLog(log), &topo);
  ASSERT_EQ(Causes(f), std::vector<std::string>{"nvlink_fallback@n"});
  EXPECT_NE(f[0].summary.find("NCCL_P2P_DISABLE=1"), std::string::npos);
  EXPECT_NE(f[0].summary.find("shared memory"), std::string::npos);
  EXPECT_FALSE(f[0].gpu);
  // Without NVLink evidence the setting is no fallback.
  EXPECT_TRUE(AnalyzeNccl(ParseNcclLog(log), nullptr).empty());
}

TEST(NcclAnalysisTest, SocketsBesideTopologyNics) {
  const auto r = ParseNcclLog(
      "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n"
      "a:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
      "a:1:1 [0] NCCL INFO Using network Socket\n"
      "a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n");
  TopoHint topo;
  topo.nics = {"mlx5_0"};
  topo.ib_present = true;
  const auto f = AnalyzeNccl(r, &topo);
  ASSERT_EQ(Causes(f), std::vector<std::string>{"net_fallback@a"});
  EXPECT_EQ(f[0].nic, "mlx5_0");
  EXPECT_TRUE(AnyContains(f[0].evidence, "topo -m NICs: mlx5_0"));
  EXPECT_TRUE(AnyContains(f[0].evidence, "Using network Socket"));
  EXPECT_TRUE(AnyContains(f[0].evidence, "via NET/Socket/0"));
  // No RDMA NIC in sight: sockets are right.
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
  TopoHint plain;
  plain.nics = {"eth0"};
  EXPECT_TRUE(AnalyzeNccl(r, &plain).empty());
}

TEST(NcclAnalysisTest, SocketsOnOneNodeAreNoFallback) {
  const auto r = ParseNcclLog(
      "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:1.2.3.4<0>\n"
      "a:1:1 [0] NCCL INFO Using network Socket\n"
      "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n");
  EXPECT_TRUE(AnalyzeNccl(r, nullptr).empty());
}

TEST(NcclAnalysisTest, NoDeviceFoundNeedsIbHints) {
  const std::string base =
      "a:1:1 [0] NCCL INFO NET/IB : No device found.\n"
      "a:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
      "b:2:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>\n";
  EXPECT_TRUE(AnalyzeNccl(ParseNcclLog(base), nullptr).empty());
  const auto f =
      AnalyzeNccl(ParseNcclLog("a:1:1 [0] NCCL INFO NCCL_IB_HCA set to mlx5_2\n" + base), nullptr);
  EXPECT_EQ(Causes(f), std::vector<std::string>{"net_fallback@a"});
  // IB switched off by hand on a node with an IPoIB interface.
  const auto g =
      AnalyzeNccl(ParseNcclLog("a:1:1 [0] NCCL INFO Bootstrap : Using ib0:192.168.1.8<0>\n"
                               "a:1:1 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
                               "a:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
                               "b:2:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>\n"),
                  nullptr);
  ASSERT_EQ(Causes(g), std::vector<std::string>{"net_fallback@a"});
  EXPECT_TRUE(AnyContains(g[0].evidence, "NCCL_IB_DISABLE=1"));
}

// ---- the JSON contract ------------------------------------------------------------------

TEST(NcclJsonTest, ContractShape) {
  const auto r = ParseNcclLog(
      "h:1:1 [0] NCCL INFO NCCL version 2.18.3+cuda12.2\n"
      "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0\n"
      "h:1:1 [0] NCCL INFO Channel 00/24 : 0[0] -> 1[1] via P2P/IPC\n"
      "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] via COLLNET/SHARP/0\n"
      "h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via UCX/0\n"
      "h:1:1 [0] misc/shmutils.cc:1 NCCL WARN Error: failed to extend /dev/shm/nccl-x\n");
  const auto j = NcclReportJson(r, AnalyzeNccl(r, nullptr));
  std::set<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"nccl_version", "ranks", "nodes", "transports", "channels",
                                         "errors", "findings"}));
  EXPECT_EQ(j["nccl_version"], "2.18.3");
  EXPECT_EQ(j["ranks"], 8);
  EXPECT_EQ(j["nodes"], 1);
  for (const char* family : {"P2P/IPC", "P2P/CUMEM", "P2P/NVL", "P2P/direct", "SHM", "NET/IB",
                             "NET/Socket", "COLLNET", "NVLS"}) {
    EXPECT_TRUE(j["transports"].contains(family)) << family;
  }
  EXPECT_EQ(j["transports"]["P2P/IPC"], 1);
  EXPECT_EQ(j["transports"]["SHM"], 0);
  EXPECT_EQ(j["transports"]["UCX"], 1);
  ASSERT_EQ(j["channels"].size(), 3u);
  EXPECT_EQ(j["channels"][0],
            nlohmann::json::parse(
                R"({"channel": 0, "from_rank": 0, "to_rank": 1, "transport": "P2P/IPC"})"));
  EXPECT_TRUE(j["channels"][1]["to_rank"].is_null());
  ASSERT_EQ(j["errors"].size(), 1u);
  EXPECT_EQ(j["errors"][0].get<std::string>().rfind("line 6: ", 0), 0u);
  EXPECT_TRUE(j["findings"].is_array());

  const auto empty = NcclReportJson(ParseNcclLog(""), {});
  EXPECT_TRUE(empty["nccl_version"].is_null());
  EXPECT_TRUE(empty["ranks"].is_null());
  EXPECT_TRUE(empty["nodes"].is_null());
  EXPECT_TRUE(empty["channels"].empty());
}

TEST(NcclJsonTest, FindingForm) {
  Finding f;
  f.cause = model::Cause::kNetFallback;
  f.node = "gpu6";
  f.summary = "s";
  f.evidence = {"line 1: \"x\""};
  f.action = "a";
  auto j = FindingJson(f);
  EXPECT_EQ(j, nlohmann::json::parse(R"({"cause": "net_fallback", "layer": "link",
      "severity": "warning", "node": "gpu6", "summary": "s", "evidence": ["line 1: \"x\""],
      "action": "a"})"));
  f.gpu = 0;
  f.peer_gpu = 1;
  f.nic = "mlx5_0";
  j = FindingJson(f);
  EXPECT_EQ(j["gpu"], 0);
  EXPECT_EQ(j["peer_gpu"], 1);
  EXPECT_EQ(j["nic"], "mlx5_0");
}

// ---- bad input --------------------------------------------------------------------------

TEST(NcclRobustnessTest, EveryTruncationOfTheFixtures) {
  for (const auto& e : fs::directory_iterator(FixtureDir())) {
    if (e.path().extension() != ".log") continue;
    const std::string text = testing::ReadFileOrEmpty(e.path().string());
    SCOPED_TRACE(e.path().filename().string());
    for (size_t n = 0; n <= text.size(); ++n) {
      const auto r = ParseNcclLog(std::string_view(text).substr(0, n));
      (void)NcclReportJson(r, AnalyzeNccl(r, nullptr)).dump();
    }
  }
}

TEST(NcclRobustnessTest, GarbledAndBinaryBytes) {
  std::mt19937_64 rng(42);
  const std::string seed =
      testing::ReadFileOrEmpty(FixtureDir() + "/synthetic_2node_shm_socket.log");
  ASSERT_FALSE(seed.empty());
  for (int i = 0; i < 300; ++i) {
    std::string s = seed;
    for (int k = 0; k < 40; ++k) s[rng() % s.size()] = static_cast<char>(rng());
    const auto r = ParseNcclLog(s);
    EXPECT_NO_THROW((void)NcclReportJson(r, AnalyzeNccl(r, nullptr)).dump());
  }
  std::string binary(1 << 16, '\0');
  for (auto& c : binary) c = static_cast<char>(rng());
  const auto r = ParseNcclLog(binary);
  EXPECT_NO_THROW((void)NcclReportJson(r, AnalyzeNccl(r, nullptr)).dump());
  // Invalid UTF-8 and control bytes inside fields that reach the JSON.
  const auto u = ParseNcclLog(
      "h\xff:1:1 [0] NCCL INFO x\n"
      "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via \xc3\x28X\x01/0\n"
      "h:1:1 [0] t.cc:1 NCCL WARN failed \xe2\x82 \x7f\n");
  ASSERT_EQ(u.channels.size(), 1u);
  EXPECT_NO_THROW((void)NcclReportJson(u, AnalyzeNccl(u, nullptr)).dump());
  ASSERT_EQ(u.errors.size(), 1u);
}

TEST(NcclRobustnessTest, HugeLines) {
  // A 10 MB line is read up to kMaxLineBytes; the lines around it still count.
  std::string text = "h:1:1 [0] NCCL INFO Using network IB\n";
  text += "h:1:1 [0] NCCL INFO NET/IB : Using ";
  for (int i = 0; text.size() < 10'000'000; ++i) {
    text += "[" + std::to_string(i) + "]mlx5_" + std::to_string(i) + ":1/IB ";
  }
  text += "\n" + std::string(5'000'000, '[') + "\n";
  text += "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n";
  const auto r = ParseNcclLog(text);
  EXPECT_EQ(r.lines_truncated, 2u);
  EXPECT_EQ(r.channels.size(), 1u);
  EXPECT_EQ(r.lines_parsed + r.lines_ignored, 4u);
  EXPECT_LE(r.net_devices.size(), kMaxNetDevices);
  EXPECT_GT(r.net_devices.size(), 1000u);
}

TEST(NcclRobustnessTest, CapsBoundMemory) {
  std::string text;
  const size_t n = kMaxChannels + 10;
  text.reserve(n * 64);
  for (size_t i = 0; i < n; ++i) {
    text += "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n";
  }
  for (size_t i = 0; i < kMaxEntries + 5; ++i) text += "h:1:1 [0] t.cc:1 NCCL WARN failed\n";
  for (size_t i = 0; i < kMaxTransportFamilies + 5; ++i) {
    text += "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via T" + std::to_string(i) + "/0\n";
  }
  const auto r = ParseNcclLog(text);
  EXPECT_EQ(r.channels.size(), kMaxChannels);
  EXPECT_EQ(r.channels_dropped, 10u + kMaxTransportFamilies + 5);
  EXPECT_EQ(Transport(r, "P2P/IPC"), n);  // counted, kept or not
  EXPECT_LE(r.transports.size(), kMaxTransportFamilies + 1);
  EXPECT_GT(Transport(r, "other"), 0u);
  EXPECT_EQ(r.warnings.size(), kMaxEntries);
  EXPECT_EQ(r.errors.size(), kMaxEntries);
  EXPECT_GT(r.entries_dropped, 0u);
}

TEST(NcclRobustnessTest, CrlfAndInterleavedRanks) {
  // Two processes' lines interleaved line by line, with CRLF endings.
  const auto r = ParseNcclLog(
      "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\r\n"
      "h:2:2 [1] NCCL INFO comm 0x2 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 MNNVL 0\r\n"
      "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\r\n"
      "h:2:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC\r\n"
      "h:1:1 [0] NCCL INFO Using network IB\r\n"
      "h:2:2 [1] NCCL INFO Using network Socket\r\n");
  ASSERT_EQ(r.processes.size(), 2u);
  EXPECT_EQ(r.processes[0].ranks, std::vector<int>{0});
  EXPECT_EQ(r.processes[1].ranks, std::vector<int>{1});
  EXPECT_EQ(r.processes[0].network, "IB");
  EXPECT_EQ(r.processes[1].network, "Socket");
  EXPECT_EQ(r.channels[1].transport_detail, "P2P/IPC");
  EXPECT_EQ(r.lines_parsed, 6u);
}

// version_mismatch: nodes of one job on different NCCL builds or CUDA drivers; the node that
// differs from the majority is named, with its line and one line of the others.
TEST(NcclVersionMismatchTest, TheOddNodeOut) {
  const std::string log =
      "node-a:100:100 [0] NCCL INFO cudaDriverVersion 12020\n"
      "node-a:100:100 [0] NCCL INFO NCCL version 2.18.3+cuda12.1\n"
      "node-b:200:200 [0] NCCL INFO cudaDriverVersion 12020\n"
      "node-b:200:200 [0] NCCL INFO NCCL version 2.18.3+cuda12.1\n"
      "node-c:300:300 [0] NCCL INFO cudaDriverVersion 12040\n"
      "node-c:300:300 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\n"
      "node-a:100:100 [0] NCCL INFO comm 0x1 rank 0 nRanks 3 nNodes 3 localRanks 1 localRank 0 "
      "MNNVL 0\n";
  const NcclLogReport r = ParseNcclLog(log);
  ASSERT_EQ(r.hosts.size(), 3u);
  ASSERT_EQ(r.hosts[2].nccl_versions.size(), 1u);
  EXPECT_EQ(r.hosts[2].nccl_versions[0].first, "2.19.3+cuda12.3");
  const std::vector<Finding> f = AnalyzeNccl(r, nullptr);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, model::Cause::kVersionMismatch);
  EXPECT_EQ(model::LayerOf(f[0].cause), model::Layer::kLink);
  EXPECT_EQ(f[0].node, "node-c");
  EXPECT_EQ(f[0].summary,
            "NCCL 2.19.3+cuda12.3 on node-c, 2.18.3+cuda12.1 on node-a, node-b; CUDA driver 12.4 "
            "on node-c, 12.2 on node-a, node-b");
  ASSERT_EQ(f[0].evidence.size(), 4u);
  EXPECT_EQ(f[0].evidence[0].rfind("line 6:", 0), 0u) << f[0].evidence[0];
  EXPECT_EQ(f[0].evidence[1].rfind("line 2:", 0), 0u) << f[0].evidence[1];
  EXPECT_FALSE(f[0].action.empty());
  const nlohmann::json j = FindingJson(f[0]);
  EXPECT_EQ(j["cause"], "version_mismatch");
  EXPECT_FALSE(j.contains("gpu"));
}

TEST(NcclVersionMismatchTest, AgreeingNodesAndOneNodeWithTwoBuilds) {
  const std::string same =
      "a:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
      "b:2:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n";
  EXPECT_TRUE(AnalyzeNccl(ParseNcclLog(same), nullptr).empty());
  // Two processes of one node load different NCCL libraries (two virtualenvs on one node).
  const std::string mixed =
      "a:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
      "a:2:2 [1] NCCL INFO NCCL version 2.20.5+cuda12.2\n";
  const std::vector<Finding> f = AnalyzeNccl(ParseNcclLog(mixed), nullptr);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].node, "a");
  EXPECT_EQ(f[0].summary, "NCCL 2.21.5+cuda12.4, 2.20.5+cuda12.2 on a (two builds on one node)");
  // Two nodes tie: rank 0's node is the reference, though seen second.
  const std::string tie =
      "a:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
      "b:2:2 [0] NCCL INFO NCCL version 2.20.5+cuda12.2\n"
      "b:2:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n";
  const std::vector<Finding> t = AnalyzeNccl(ParseNcclLog(tie), nullptr);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].node, "a");
  // Versions without a host (pre-2.19 bare banners) compare nothing.
  const std::string bare = "NCCL version 2.4.2+cuda10.0\nNCCL version 2.4.8+cuda10.1\n";
  EXPECT_TRUE(AnalyzeNccl(ParseNcclLog(bare), nullptr).empty());
}

TEST(NcclRealLogTest, Nccltests185WithOneNodeOnAnotherDriver) {
  SKIP_WITHOUT_REAL_DATA();
  std::string log = Real("nccltests185_dgxh100_2node_roce_ibv_modify_qp_unreachable.log");
  // As captured, both nodes report cudaDriverVersion 12000: no mismatch.
  EXPECT_TRUE(AnalyzeNccl(ParseNcclLog(log), nullptr).empty());
  // The same log with dgxh100-4 on a newer driver. Two nodes tie and no line ties rank 0 to a
  // host, so the first host seen (dgxh100-3, in the nccl-tests header) is the reference.
  const std::string from = "dgxh100-4:460770:460770 [0] NCCL INFO cudaDriverVersion 12000";
  const size_t at = log.find(from);
  ASSERT_NE(at, std::string::npos);
  log.replace(at, from.size(), "dgxh100-4:460770:460770 [0] NCCL INFO cudaDriverVersion 12020");
  const std::vector<Finding> f = AnalyzeNccl(ParseNcclLog(log), nullptr);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, model::Cause::kVersionMismatch);
  EXPECT_EQ(f[0].node, "dgxh100-4");
  EXPECT_EQ(f[0].summary, "CUDA driver 12.2 on dgxh100-4, 12.0 on dgxh100-3");
}

}  // namespace
}  // namespace gpuwatch::nccl
