// Live topology snapshots: the mock NVML (through the production dlopen path) plus a sysfs tree
// built in a temporary directory, for an 8×H100 NVSwitch board, an 8×RTX 4090 PCIe box on two
// NUMA nodes (modelled on the real machine of ../shared/real/topo/nccltests307_*, whose
// captured `nvidia-smi topo -m` it must reproduce), and a box whose links degraded.
#include "collect/topology_probe.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "collect/nvml_source.h"
#include "collect/testing/mock_nvml.h"
#include "topo/topo_text.h"

namespace gpuwatch::collect {
namespace {

namespace fs = std::filesystem;

using testing::kMockNvmlLibrary;
// The mock's PCI buses for GPU0-7 (src/mock_nvml/internal/scenario.cc).
constexpr unsigned kBuses[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

using testing::OpenMockNvml;

std::string Bdf(unsigned bus, unsigned fn = 0) {
  char b[16];
  std::snprintf(b, sizeof(b), "0000:%02x:00.%u", bus, fn);
  return b;
}

// A sysfs tree: devices placed by their path below /sys/devices, linked from
// /sys/bus/pci/devices, and RDMA devices under /sys/class/infiniband.
class FakeSysfs {
 public:
  FakeSysfs() {
    root_ = fs::temp_directory_path() /
            ("gw-sysfs-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "sys/bus/pci/devices");
  }
  ~FakeSysfs() { fs::remove_all(root_); }

  void Device(const std::string& path, std::optional<int> numa, const std::string& cpus) {
    const fs::path dir = root_ / "sys/devices" / path;
    fs::create_directories(dir);
    std::ofstream(dir / "numa_node") << (numa ? *numa : -1) << "\n";
    if (!cpus.empty()) std::ofstream(dir / "local_cpulist") << cpus << "\n";
    const std::string bdf = path.substr(path.rfind('/') + 1);
    fs::create_directory_symlink(dir, root_ / "sys/bus/pci/devices" / bdf);
  }
  void Nic(const std::string& name, const std::string& path, const std::string& netdev,
           const std::string& state, const std::string& rate, const std::string& layer) {
    const fs::path ib = root_ / "sys/class/infiniband" / name;
    fs::create_directories(ib / "ports/1");
    fs::create_directory_symlink(root_ / "sys/devices" / path, ib / "device");
    fs::create_directories(root_ / "sys/devices" / path / "net" / netdev);
    std::ofstream(ib / "ports/1/state") << state << "\n";
    std::ofstream(ib / "ports/1/rate") << rate << "\n";
    std::ofstream(ib / "ports/1/link_layer") << layer << "\n";
  }
  std::string root() const { return root_.string(); }

 private:
  fs::path root_;
};

// HGX H100: each GPU and one NIC behind their own PCIe switch, one root complex per switch;
// GPU0-3 on socket 0.
void BuildHgxSysfs(FakeSysfs* sys) {
  for (unsigned i = 0; i < 8; ++i) {
    char rc[64];
    std::snprintf(rc, sizeof(rc), "pci0000:%02x/0000:%02x:01.0/0000:%02x:00.0", kBuses[i] - 3,
                  kBuses[i] - 3, kBuses[i] - 2);
    const std::string sw = rc;  // root complex / root port / switch upstream port
    const bool s0 = i < 4;
    sys->Device(sw + "/0000:" + Bdf(kBuses[i] - 1).substr(5, 2) + ":00.0/" + Bdf(kBuses[i]),
                s0 ? 0 : 1, s0 ? "0-55,112-167" : "56-111,168-223");
    sys->Device(sw + "/0000:" + Bdf(kBuses[i] - 1).substr(5, 2) + ":01.0/" + Bdf(kBuses[i] + 1),
                s0 ? 0 : 1, s0 ? "0-55,112-167" : "56-111,168-223");
    sys->Nic("mlx5_" + std::to_string(i),
             sw + "/0000:" + Bdf(kBuses[i] - 1).substr(5, 2) + ":01.0/" + Bdf(kBuses[i] + 1),
             "ibp" + std::to_string(i), "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand");
  }
}

TEST(TopologyProbeTest, Hgx8xH100) {
  FakeSysfs sys;
  BuildHgxSysfs(&sys);
  auto src = OpenMockNvml("8xH100");
  topo::NodeSnapshot s = ProbeNodeTopology(src.get(), sys.root(), "hgx-01", 1000);
  EXPECT_TRUE(s.warnings.empty()) << s.warnings[0];
  ASSERT_EQ(s.gpus.size(), 8u);
  EXPECT_EQ(s.gpus[3].pci_bus_id, "0000:5d:00.0");
  EXPECT_EQ(s.gpus[3].numa_node, 0);
  EXPECT_EQ(s.gpus[6].cpu_affinity, "56-111,168-223");
  ASSERT_EQ(s.gpus[0].nvlinks.size(), 18u);
  EXPECT_EQ(s.gpus[0].nvlinks[5].remote_kind, "nvswitch");
  EXPECT_EQ(s.gpus[0].nvlinks[5].version, 4u);
  EXPECT_EQ(s.gpus[0].pcie_max_width, 16u);
  EXPECT_EQ(s.p2p_read[0][7], "OK");
  ASSERT_EQ(s.nics.size(), 8u);
  EXPECT_EQ(s.nics[2].pci_bus_id, Bdf(kBuses[2] + 1));
  EXPECT_EQ(s.nics[2].netdevs, std::vector<std::string>{"ibp2"});
  ASSERT_EQ(s.nics[2].ports.size(), 1u);
  EXPECT_EQ(s.nics[2].ports[0].state, "ACTIVE");
  EXPECT_EQ(s.nics[2].ports[0].rate_gbps, 400.0);

  const std::string expected =
      "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tNIC1\tNIC2\tNIC3\tNIC4\tNIC5\tNIC6"
      "\tNIC7\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n";
  const std::string text = topo::RenderTopoMatrix(s.matrix);
  ASSERT_EQ(text.substr(0, expected.size()), expected) << text;
  // The rows, as nvidia-smi prints them on this board.
  std::istringstream rows(text.substr(expected.size()));
  std::string line;
  std::getline(rows, line);
  EXPECT_EQ(line,
            "GPU0\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tPIX\tNODE\tNODE\tNODE\tSYS\tSYS"
            "\tSYS\tSYS\t0-55,112-167\t0\tN/A");
  for (int i = 0; i < 5; ++i) std::getline(rows, line);
  EXPECT_EQ(line,
            "GPU5\tNV18\tNV18\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tSYS\tSYS\tSYS\tSYS\tNODE\tPIX"
            "\tNODE\tNODE\t56-111,168-223\t1\tN/A");
}

// The RTX 4090 box of NVIDIA/nccl-tests#307: two PCIe switches with four GPUs each, one per
// socket, and the bonded NIC on socket 0's switch.
TEST(TopologyProbeTest, Pcie8x4090TwoNumaMatchesTheRealCapture) {
  const char* shared = std::getenv("GPUWATCH_SOURCE_DIR");
  const std::string capture =
      std::string(shared ? shared : GPUWATCH_SOURCE_DIR) +
      "/tests/fixtures/topo/nccltests307_8x4090_pix_switches_2numa_nic_bond.txt";
  std::ifstream in(capture);
  ASSERT_TRUE(in) << capture;
  std::stringstream text;
  text << in.rdbuf();
  Result<topo::Topology> real = topo::ParseTopoMatrix(text.str());
  ASSERT_TRUE(real.ok()) << real.status().message();

  FakeSysfs sys;
  for (unsigned i = 0; i < 8; ++i) {
    const bool s0 = i < 4;
    // socket root complex / root port / switch upstream / downstream port / GPU
    const std::string sw =
        s0 ? "pci0000:00/0000:00:01.0/0000:01:00.0" : "pci0000:80/0000:80:01.0/0000:81:00.0";
    char down[16];
    std::snprintf(down, sizeof(down), "/0000:%02x:%02x.0/", s0 ? 2 : 0x82, i % 4);
    sys.Device(sw + down + Bdf(kBuses[i]), s0 ? 0 : 1, s0 ? "0-35,72-107" : "36-71,108-143");
  }
  sys.Device("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:04.0/0000:07:00.0", 0, "0-35,72-107");
  sys.Nic("mlx5_bond_0", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:04.0/0000:07:00.0", "bond0",
          "4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet");

  auto src = OpenMockNvml("8x4090");
  topo::NodeSnapshot s = ProbeNodeTopology(src.get(), sys.root(), "box", 1000);
  EXPECT_TRUE(s.warnings.empty()) << s.warnings[0];
  EXPECT_EQ(s.matrix.gpu_links, real->gpu_links);
  EXPECT_EQ(s.matrix.gpu_nic_links, real->gpu_nic_links);
  EXPECT_EQ(s.matrix.cpu_affinity, real->cpu_affinity);
  EXPECT_EQ(s.matrix.numa_affinity, real->numa_affinity);
  EXPECT_EQ(s.matrix.nic_names, real->nic_names);
  // GeForce cards: no P2P, whatever the path.
  EXPECT_EQ(s.p2p_read[0][1], "GNS");
  for (const auto& g : s.gpus) EXPECT_TRUE(g.nvlinks.empty());
}

TEST(TopologyProbeTest, DegradedLinksAreNamedInTheDiff) {
  FakeSysfs sys;
  BuildHgxSysfs(&sys);
  topo::NodeSnapshot healthy;
  {
    auto src = OpenMockNvml("8xH100");
    healthy = ProbeNodeTopology(src.get(), sys.root(), "hgx-01", 1000);
  }
  // The same board after a bad reseat: GPU2's PCIe link trained at x8, GPU5 lost NVLink 17.
  const fs::path scenario = fs::path(sys.root()) / "degraded.json";
  std::ofstream(scenario) << R"({"shape": "8xH100", "gpus": [
      {"gpu": 2, "values": {"pcie_width": 8}},
      {"gpu": 5, "values": {"nvlink_active_links": 17}}]})";
  auto src = OpenMockNvml(scenario.string());
  topo::NodeSnapshot degraded = ProbeNodeTopology(src.get(), sys.root(), "hgx-01", 2000);
  EXPECT_EQ(degraded.matrix.gpu_links[5][0], "NV17");
  const std::vector<topo::TopologyChange> d = topo::DiffSnapshots(healthy, degraded);
  ASSERT_EQ(d.size(), 2u) << d[0].summary;
  EXPECT_EQ(d[0].kind, "pcie_width_changed");
  EXPECT_EQ(d[0].summary, "GPU2 PCIe width x16 → x8 (max x16)");
  EXPECT_EQ(d[1].kind, "nvlink_lost");
  EXPECT_EQ(d[1].subject, "GPU5 NVLink 17");
}

TEST(TopologyProbeTest, MissingSysfsGivesPartialSnapshotWithReasons) {
  FakeSysfs sys;  // an empty /sys: a container without the host's sysfs
  auto src = OpenMockNvml("2xA100");
  topo::NodeSnapshot s = ProbeNodeTopology(src.get(), sys.root(), "c", 1000);
  ASSERT_EQ(s.gpus.size(), 2u);
  ASSERT_EQ(s.warnings.size(), 2u);
  EXPECT_NE(s.warnings[0].find("GPU0: no PCI placement"), std::string::npos) << s.warnings[0];
  EXPECT_EQ(s.gpus[0].numa_node, std::nullopt);
  // NVML alone still gives the GPU×GPU matrix.
  EXPECT_EQ(s.matrix.gpu_links[0][1], "NV12");
  EXPECT_TRUE(s.nics.empty());
}

TEST(TopologyProbeTest, NoGpuSourceAndBrokenNicEntries) {
  FakeSysfs sys;
  // An RDMA device without a PCI parent (soft RoCE) and one whose ports directory is missing.
  const fs::path rxe = fs::path(sys.root()) / "sys/class/infiniband/rxe0";
  fs::create_directories(rxe / "ports/1");
  std::ofstream(rxe / "ports/1/state") << "garbage without colon";
  std::ofstream(rxe / "ports/1/rate") << "fast";
  topo::NodeSnapshot s = ProbeNodeTopology(nullptr, sys.root(), "h", 1);
  ASSERT_EQ(s.nics.size(), 1u);
  EXPECT_EQ(s.nics[0].pci_bus_id, "");
  ASSERT_EQ(s.nics[0].ports.size(), 1u);
  EXPECT_EQ(s.nics[0].ports[0].state, "garbage without colon");
  EXPECT_EQ(s.nics[0].ports[0].rate_gbps, std::nullopt);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_NE(s.warnings[0].find("rxe0: no PCI placement"), std::string::npos);
}

}  // namespace
}  // namespace gpuwatch::collect
