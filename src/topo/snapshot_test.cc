#include "topo/snapshot.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "topo/archive.h"
#include "topo/topo_text.h"

namespace gpuwatch::topo {
namespace {

namespace fs = std::filesystem;

TEST(PathFromSysfsTest, ClassifiesLikeNvidiaSmi) {
  // One switch: upstream port 0000:18:00.0 in common, a downstream port and the device below.
  const std::string a = "pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0";
  const std::string b = "pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:04.0/0000:1b:00.0";
  EXPECT_EQ(PathFromSysfs(a, b, 0, 0), PciPath::kSingleBridge);
  // Behind a second, cascaded switch: PXB.
  const std::string c =
      "pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:08.0/0000:20:00.0/0000:21:00.0/0000:22:00.0";
  EXPECT_EQ(PathFromSysfs(a, c, 0, 0), PciPath::kMultipleBridges);
  // Two root ports of one host bridge: PHB.
  EXPECT_EQ(PathFromSysfs("pci0000:17/0000:17:01.0/0000:18:00.0",
                          "pci0000:17/0000:17:02.0/0000:30:00.0", 0, 0),
            PciPath::kHostBridge);
  // Another root complex: NODE on one NUMA node (or when the node is unknown), SYS across.
  const std::string d = "pci0000:97/0000:97:01.0/0000:98:00.0";
  EXPECT_EQ(PathFromSysfs(a, d, 0, 0), PciPath::kNumaNode);
  EXPECT_EQ(PathFromSysfs(a, d, std::nullopt, 1), PciPath::kNumaNode);
  EXPECT_EQ(PathFromSysfs(a, d, 0, 1), PciPath::kSystem);
  EXPECT_EQ(PathFromSysfs("", d, 0, 0), std::nullopt);
  EXPECT_EQ(PathFromSysfs("platform/foo", d, 0, 0), std::nullopt);
}

TEST(NormalizePciBusIdTest, AcceptsNvmlAndSysfsForms) {
  EXPECT_EQ(NormalizePciBusId("00000000:1B:00.0"), "0000:1b:00.0");
  EXPECT_EQ(NormalizePciBusId("0000:1b:00.0"), "0000:1b:00.0");
  EXPECT_EQ(NormalizePciBusId("1B:00.1"), "0000:1b:00.1");
  EXPECT_EQ(NormalizePciBusId(" 00000001:c5:00.0\n"), "0001:c5:00.0");
  EXPECT_EQ(NormalizePciBusId("0000::00.0"), "");
  EXPECT_EQ(NormalizePciBusId("0000:1b:20.0"), "");  // device > 31
  EXPECT_EQ(NormalizePciBusId("0000:1b:00.8"), "");  // function > 7
  EXPECT_EQ(NormalizePciBusId("garbage"), "");
}

// An HGX H100 board as NVML and sysfs describe it: 8 GPUs with 18 NVLinks each to NVSwitches,
// each GPU behind its own PCIe switch shared with one NIC, GPU0-3 on NUMA node 0.
NodeSnapshot Hgx() {
  NodeSnapshot s;
  s.taken_at_ms = 1'700'000'000'000;
  s.hostname = "hgx-01";
  s.driver_version = "550.90.07";
  const unsigned buses[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
  for (unsigned i = 0; i < 8; ++i) {
    GpuFacts g;
    g.index = i;
    g.name = "NVIDIA H100 80GB HBM3";
    g.uuid = "GPU-" + std::to_string(1000 + i);
    char bdf[16];
    std::snprintf(bdf, sizeof(bdf), "0000:%02x:00.0", buses[i]);
    g.pci_bus_id = bdf;
    // One root complex per PCIe stack, as on current Xeon/EPYC: GPUs of a socket are NODE.
    char rootc[16];
    std::snprintf(rootc, sizeof(rootc), "pci0000:%02x", buses[i] - 3);
    char sw[64];
    std::snprintf(sw, sizeof(sw), "/0000:%02x:01.0/0000:%02x:00.0/0000:%02x:00.0", buses[i] - 2,
                  buses[i] - 1, buses[i] - 1);
    // root complex / root port / switch upstream / downstream / GPU
    g.pci_path = std::string(rootc) + "/0000:00:0" + std::to_string(i) + ".0" + sw + "/" + bdf;
    g.numa_node = i < 4 ? 0 : 1;
    g.cpu_affinity = i < 4 ? "0-55,112-167" : "56-111,168-223";
    g.pcie_gen = 5;
    g.pcie_max_gen = 5;
    g.pcie_width = 16;
    g.pcie_max_width = 16;
    for (unsigned l = 0; l < 18; ++l) {
      NvLinkFacts lf;
      lf.link = l;
      lf.active = true;
      char sw_bdf[16];
      std::snprintf(sw_bdf, sizeof(sw_bdf), "0000:%02x:00.0", 0xc5 + l % 4);
      lf.remote_pci_bus_id = sw_bdf;
      lf.remote_kind = "nvswitch";
      lf.version = 4;
      g.nvlinks.push_back(lf);
    }
    s.gpus.push_back(g);
  }
  // mlx5_i on GPU i's switch: the GPU's path with its own last downstream port.
  for (unsigned i = 0; i < 8; ++i) {
    NicFacts nic;
    nic.name = "mlx5_" + std::to_string(i);
    const std::string& gp = s.gpus[i].pci_path;
    const std::string sw = gp.substr(0, gp.rfind('/'));  // …/downstream port
    const std::string up = sw.substr(0, sw.rfind('/'));  // …/upstream port
    char bdf[16];
    std::snprintf(bdf, sizeof(bdf), "0000:%02x:00.1", buses[i] + 1);
    nic.pci_path = up + "/0000:99:0" + std::to_string(i) + ".0/" + bdf;
    nic.pci_bus_id = bdf;
    nic.numa_node = s.gpus[i].numa_node;
    nic.netdevs = {"ibp" + std::to_string(i)};
    nic.ports = {{1, "ACTIVE", 400.0, "InfiniBand"}};
    s.nics.push_back(nic);
  }
  s.gpu_pci_paths.assign(8, std::vector<std::optional<PciPath>>(8));
  for (size_t i = 0; i < 8; ++i) {
    for (size_t j = 0; j < 8; ++j) {
      if (i != j)
        s.gpu_pci_paths[i][j] = (i < 4) == (j < 4) ? PciPath::kNumaNode : PciPath::kSystem;
    }
  }
  FinishSnapshot(&s);
  return s;
}

TEST(FinishSnapshotTest, HgxH100RendersLikeNvidiaSmi) {
  NodeSnapshot s = Hgx();
  const Topology& t = s.matrix;
  ASSERT_EQ(t.gpu_names.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    for (size_t j = 0; j < 8; ++j) EXPECT_EQ(t.gpu_links[i][j], i == j ? "X" : "NV18");
  }
  ASSERT_EQ(t.nic_names.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    for (size_t k = 0; k < 8; ++k) {
      const char* want = i == k ? "PIX" : (i < 4) == (k < 4) ? "NODE" : "SYS";
      EXPECT_EQ(t.gpu_nic_links[i][k], want) << "GPU" << i << " mlx5_" << k;
    }
  }
  EXPECT_EQ(t.cpu_affinity[5], "56-111,168-223");
  EXPECT_EQ(t.numa_affinity[2], 0);
  // The rendering parses back to the same matrix (the renderer is nvidia-smi's layout).
  Result<Topology> back = ParseTopoMatrix(RenderTopoMatrix(t));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->gpu_links, t.gpu_links);
  EXPECT_EQ(back->gpu_nic_links, t.gpu_nic_links);
  EXPECT_EQ(back->numa_affinity, t.numa_affinity);
}

TEST(FinishSnapshotTest, InactiveLinkLowersEveryPairOfThatGpu) {
  NodeSnapshot s = Hgx();
  s.gpus[3].nvlinks[7].active = false;
  FinishSnapshot(&s);
  EXPECT_EQ(s.matrix.gpu_links[3][0], "NV17");
  EXPECT_EQ(s.matrix.gpu_links[0][3], "NV17");
  EXPECT_EQ(s.matrix.gpu_links[0][1], "NV18");
}

TEST(FinishSnapshotTest, DirectLinksAndPcieFallback) {
  // Two PCIe boards with an NVLink bridge (4 links), one without; the pair without NVLink takes
  // NVML's path, and with NVML silent, sysfs's.
  NodeSnapshot s;
  for (unsigned i = 0; i < 3; ++i) {
    GpuFacts g;
    g.index = i;
    g.pci_bus_id = "0000:0" + std::to_string(i + 1) + ":00.0";
    g.pci_path = "pci0000:00/0000:00:0" + std::to_string(i + 1) + ".0/" + g.pci_bus_id;
    s.gpus.push_back(g);
  }
  for (unsigned l = 0; l < 4; ++l) {
    s.gpus[0].nvlinks.push_back({l, true, "0000:02:00.0", "gpu", 1, 3});
    s.gpus[1].nvlinks.push_back({l, true, "0000:01:00.0", "gpu", 0, 3});
  }
  s.gpu_pci_paths.assign(3, std::vector<std::optional<PciPath>>(3));
  s.gpu_pci_paths[0][2] = s.gpu_pci_paths[2][0] = PciPath::kNumaNode;
  FinishSnapshot(&s);
  EXPECT_EQ(s.matrix.gpu_links[0][1], "NV4");
  EXPECT_EQ(s.matrix.gpu_links[1][0], "NV4");
  EXPECT_EQ(s.matrix.gpu_links[0][2], "NODE");  // NVML
  EXPECT_EQ(s.matrix.gpu_links[1][2], "PHB");   // sysfs: two root ports
}

TEST(SnapshotJsonTest, RoundTrips) {
  NodeSnapshot s = Hgx();
  s.p2p_read.assign(8, std::vector<std::optional<std::string>>(8, "OK"));
  s.p2p_read[0][0] = std::nullopt;
  s.warnings = {"GPU9: no PCI placement"};
  s.gpus[2].numa_node = std::nullopt;
  FinishSnapshot(&s);
  Result<NodeSnapshot> back = SnapshotFromJson(SnapshotToJson(s));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->gpus, s.gpus);
  EXPECT_EQ(back->nics, s.nics);
  EXPECT_EQ(back->gpu_pci_paths, s.gpu_pci_paths);
  EXPECT_EQ(back->p2p_read, s.p2p_read);
  EXPECT_EQ(back->matrix, s.matrix);
  EXPECT_EQ(back->taken_at_ms, s.taken_at_ms);
  EXPECT_EQ(back->hostname, "hgx-01");
  EXPECT_TRUE(DiffSnapshots(s, *back).empty());
}

TEST(SnapshotJsonTest, BadInputNamesTheField) {
  auto err = [](std::string_view text) {
    Result<NodeSnapshot> r = SnapshotFromJson(text);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(err("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(err("[]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(err(R"({"format":"x","version":1})").find(".format"), std::string::npos);
  EXPECT_NE(err(R"({"format":"gpuwatch-topology","version":2,"taken_at_ms":0})").find(".version"),
            std::string::npos);
  EXPECT_NE(err(R"({"format":"gpuwatch-topology","version":1,"taken_at_ms":0,
                    "gpus":[{"index":-1}]})")
                .find(".gpus[0].index"),
            std::string::npos);
  EXPECT_NE(err(R"({"format":"gpuwatch-topology","version":1,"taken_at_ms":0,
                    "gpus":[{"index":0,"nvlinks":[{"link":0}]}]})")
                .find(".gpus[0].nvlinks[0].active"),
            std::string::npos);
  EXPECT_NE(err(R"({"format":"gpuwatch-topology","version":1,"taken_at_ms":0,
                    "gpus":[{"index":0}],"gpu_pci_paths":[["PIX","XYZ"]]})")
                .find("gpu_pci_paths[0]"),
            std::string::npos);
  EXPECT_EQ(err(R"({"format":"gpuwatch-topology","version":1,"taken_at_ms":5})"), "ok");
}

bool Has(const std::vector<TopologyChange>& changes, std::string_view kind,
         std::string_view subject) {
  for (const TopologyChange& c : changes) {
    if (c.kind == kind && c.subject == subject) return true;
  }
  return false;
}

TEST(DiffSnapshotsTest, NamesWhatChanged) {
  const NodeSnapshot a = Hgx();
  EXPECT_TRUE(DiffSnapshots(a, a).empty());

  NodeSnapshot b = Hgx();
  b.gpus[3].pcie_width = 8;              // link trained narrow
  b.gpus[5].pcie_gen = 1;                // idle downshift: not a change
  b.gpus[6].nvlinks[2].active = false;   // an NVLink lost
  b.nics.pop_back();                     // mlx5_7 gone
  b.nics[0].ports[0].state = "DOWN";     // port down
  b.nics[1].ports[0].rate_gbps = 200.0;  // port retrained at half rate
  NicFacts extra = b.nics[2];
  extra.name = "mlx5_9";
  b.nics.push_back(extra);
  FinishSnapshot(&b);
  const std::vector<TopologyChange> d = DiffSnapshots(a, b);
  EXPECT_TRUE(Has(d, "pcie_width_changed", "GPU3"));
  EXPECT_TRUE(Has(d, "nvlink_lost", "GPU6 NVLink 2"));
  EXPECT_TRUE(Has(d, "nic_removed", "mlx5_7"));
  EXPECT_TRUE(Has(d, "nic_added", "mlx5_9"));
  EXPECT_TRUE(Has(d, "nic_port_changed", "mlx5_0 port 1"));
  EXPECT_TRUE(Has(d, "nic_port_changed", "mlx5_1 port 1"));
  EXPECT_FALSE(Has(d, "pcie_gen_changed", "GPU5"));
  // GPU6's NV18 → NV17 cells are explained by the lost link, not repeated per pair.
  for (const TopologyChange& c : d) EXPECT_NE(c.kind, "link_changed") << c.summary;
  for (const TopologyChange& c : d) {
    if (c.kind != "pcie_width_changed") continue;
    EXPECT_EQ(c.summary, "GPU3 PCIe width x16 → x8 (max x16)");
  }
  EXPECT_EQ(d.size(), 6u);
}

TEST(DiffSnapshotsTest, GpuMovedAddedRemoved) {
  const NodeSnapshot a = Hgx();
  NodeSnapshot b = Hgx();
  std::swap(b.gpus[0].uuid, b.gpus[1].uuid);  // cards swapped between slots
  b.gpus.pop_back();
  FinishSnapshot(&b);
  const std::vector<TopologyChange> d = DiffSnapshots(a, b);
  EXPECT_TRUE(Has(d, "gpu_moved", "GPU0"));
  EXPECT_TRUE(Has(d, "gpu_moved", "GPU1"));
  EXPECT_TRUE(Has(d, "gpu_removed", "GPU7"));
}

TEST(DiffMatricesTest, ImportedCapturesCompare) {
  std::ifstream in(std::string(GPUWATCH_SOURCE_DIR) +
                   "/tests/fixtures/topo/nccltests307_8x4090_pix_switches_2numa_nic_bond.txt");
  std::stringstream text;
  text << in.rdbuf();
  Result<Topology> a = ParseTopoMatrix(text.str());
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_TRUE(DiffMatrices(*a, *a).empty());
  Topology b = *a;
  b.gpu_links[1][2] = b.gpu_links[2][1] = "SYS";
  b.numa_affinity[7] = 0;
  const std::vector<TopologyChange> d = DiffMatrices(*a, b);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].summary, "GPU1–GPU2 PIX → SYS");
  EXPECT_TRUE(Has(d, "numa_changed", "GPU7"));
}

class ArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gw-topo-archive-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ArchiveTest, AppendListLatest) {
  TopologyArchive archive((dir_ / "topology").string());
  Result<std::vector<ArchivedVersion>> empty = archive.List();
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(archive.Latest().status().code(), StatusCode::kNotFound);

  NodeSnapshot a = Hgx();
  ASSERT_EQ(*archive.Append(a), 1);
  NodeSnapshot b = Hgx();
  b.gpus[0].pcie_width = 4;
  ASSERT_EQ(*archive.Append(b), 2);
  auto latest = archive.Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->first, 2);
  EXPECT_EQ(latest->second.gpus[0].pcie_width, 4u);
  auto v1 = archive.Load(1);
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1->gpus[0].pcie_width, 16u);
  EXPECT_EQ(archive.Load(9).status().code(), StatusCode::kNotFound);
}

TEST_F(ArchiveTest, CorruptNewestIsSkippedNotFatal) {
  TopologyArchive archive(dir_.string());
  ASSERT_TRUE(archive.Append(Hgx()).ok());
  ASSERT_TRUE(archive.Append(Hgx()).ok());
  // A torn or hand-edited file: the check must fall back to the newest good version.
  std::ofstream(dir_ / "v000002.json") << "{\"format\":\"gpuwatch-topology\",\"vers";
  std::vector<std::string> skipped;
  auto latest = archive.Latest(&skipped);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->first, 1);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("v000002.json"), std::string::npos);
  // The next version numbers after the damaged one, never over it.
  EXPECT_EQ(*archive.Append(Hgx()), 3);
  // Stray files are not versions.
  std::ofstream(dir_ / "notes.txt") << "x";
  std::ofstream(dir_ / "v000004.json.tmp") << "x";
  EXPECT_EQ(archive.List()->size(), 3u);
}

}  // namespace
}  // namespace gpuwatch::topo
