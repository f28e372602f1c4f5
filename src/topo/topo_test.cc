#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/test_files.h"
#include "topo/topo_text.h"
#include "topo/topology.h"

namespace gpuwatch::topo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// tests/fixtures/topo: two of the real captures below, copied byte for byte so the parser is
// tested on real text without ../shared.
std::string FixtureDir() { return testing::FixtureDir("topo"); }

// ../shared/real/topo: `nvidia-smi topo -m` output people posted publicly (see ../INDEX.md for
// the source and the facts of each file). Not part of this repository; tests that need it skip
// when it is absent.
std::string RealDir() { return testing::SharedDir("real/topo"); }

#define SKIP_WITHOUT_REAL_DATA() GW_SKIP_WITHOUT_SHARED(RealDir())

Topology ParseFile(const std::string& path) {
  const std::string text = testing::ReadFileOrEmpty(path);
  EXPECT_FALSE(text.empty()) << path;
  auto t = ParseTopoMatrix(text);
  EXPECT_TRUE(t.ok()) << path << ": " << t.status().ToString();
  return t.ok() ? *t : Topology{};
}

std::vector<std::string> Names(const std::string& prefix, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

bool HasWarning(const Topology& t, const std::string& needle) {
  for (const auto& w : t.warnings)
    if (w.find(needle) != std::string::npos) return true;
  return false;
}

std::string Warnings(const Topology& t) {
  std::string out;
  for (const auto& w : t.warnings) out += "\n  " + w;
  return out;
}

// Every GPU×NIC cell equal to `kind`, as (gpu, nic) pairs.
std::set<std::pair<int, int>> NicPairs(const Topology& t, const std::string& kind) {
  std::set<std::pair<int, int>> out;
  for (size_t g = 0; g < t.gpu_nic_links.size(); ++g)
    for (size_t j = 0; j < t.gpu_nic_links[g].size(); ++j)
      if (t.gpu_nic_links[g][j] == kind) out.emplace(static_cast<int>(g), static_cast<int>(j));
  return out;
}

void ExpectShape(const Topology& t, size_t gpus, size_t nics) {
  ASSERT_EQ(t.gpu_names.size(), gpus);
  ASSERT_EQ(t.nic_names.size(), nics);
  ASSERT_EQ(t.gpu_links.size(), gpus);
  for (const auto& row : t.gpu_links) ASSERT_EQ(row.size(), gpus);
  ASSERT_EQ(t.gpu_nic_links.size(), gpus);
  for (const auto& row : t.gpu_nic_links) ASSERT_EQ(row.size(), nics);
  ASSERT_EQ(t.nic_links.size(), nics);
  ASSERT_EQ(t.cpu_affinity.size(), gpus);
  ASSERT_EQ(t.numa_affinity.size(), gpus);
  ASSERT_EQ(t.numa_affinity_text.size(), gpus);
  ASSERT_EQ(t.gpu_numa_id.size(), gpus);
}

// The matrices and values (not the warnings) of two topologies.
void ExpectSameMatrix(const Topology& a, const Topology& b) {
  EXPECT_EQ(a.gpu_names, b.gpu_names);
  EXPECT_EQ(a.nic_names, b.nic_names);
  EXPECT_EQ(a.gpu_links, b.gpu_links);
  EXPECT_EQ(a.gpu_nic_links, b.gpu_nic_links);
  EXPECT_EQ(a.nic_links, b.nic_links);
  EXPECT_EQ(a.cpu_affinity, b.cpu_affinity);
  EXPECT_EQ(a.numa_affinity, b.numa_affinity);
  EXPECT_EQ(a.numa_affinity_text, b.numa_affinity_text);
  EXPECT_EQ(a.gpu_numa_id, b.gpu_numa_id);
}

// ---- The facts of each real capture (../shared/real/INDEX.md, section 2) ---------------------

// Complete, TAB-separated, legend and NIC Legend (NIC0: mlx5_bond_0). 8x RTX 4090: GPU0-3
// mutually PIX and PIX to NIC0, CPU 0-35,72-107, NUMA 0; GPU4-7 mutually PIX and SYS to NIC0,
// CPU 36-71,108-143, NUMA 1; cross-socket pairs SYS.
void CheckNccltests307(const Topology& t) {
  ExpectShape(t, 8, 1);
  EXPECT_EQ(t.gpu_names, Names("GPU", 8));
  EXPECT_EQ(t.nic_names, std::vector<std::string>{"mlx5_bond_0"});
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) {
      const std::string want = i == j ? "X" : (i < 4) == (j < 4) ? "PIX" : "SYS";
      EXPECT_EQ(t.gpu_links[i][j], want) << "GPU" << i << "/GPU" << j;
    }
    EXPECT_EQ(t.gpu_nic_links[i][0], i < 4 ? "PIX" : "SYS") << "GPU" << i;
    EXPECT_EQ(t.cpu_affinity[i], i < 4 ? "0-35,72-107" : "36-71,108-143") << "GPU" << i;
    EXPECT_EQ(t.numa_affinity[i], i < 4 ? 0 : 1) << "GPU" << i;
    EXPECT_EQ(t.numa_affinity_text[i], std::nullopt);
    EXPECT_EQ(t.gpu_numa_id[i], std::nullopt) << "GPU NUMA ID is N/A";
  }
  EXPECT_EQ(t.nic_links[0][0], "X");
  EXPECT_TRUE(t.warnings.empty()) << "a complete table:" << Warnings(t);
}

// Space-aligned. Rows GPU0-GPU6 (GPU7 cut). All GPU pairs NV8. NIC0-NIC8. PIX pairs: GPU0-NIC2,
// GPU1-NIC4, GPU2-NIC6, GPU3-NIC8, GPU4-NIC1, GPU5-NIC3, GPU6-NIC5. GPU0-3 CPU 0-47,96-143,
// NUMA 0; GPU4-6 CPU 48-95,144-191, NUMA 1. No GPU NUMA ID column.
void CheckNccl933(const Topology& t) {
  ExpectShape(t, 8, 9);
  EXPECT_EQ(t.gpu_names, Names("GPU", 8));
  EXPECT_EQ(t.nic_names, Names("NIC", 9));
  for (int i = 0; i < 7; ++i) {
    for (int j = 0; j < 8; ++j) EXPECT_EQ(t.gpu_links[i][j], i == j ? "X" : "NV8") << i << "/" << j;
    EXPECT_EQ(t.cpu_affinity[i], i < 4 ? "0-47,96-143" : "48-95,144-191") << "GPU" << i;
    EXPECT_EQ(t.numa_affinity[i], i < 4 ? 0 : 1) << "GPU" << i;
  }
  const std::set<std::pair<int, int>> pix = {{0, 2}, {1, 4}, {2, 6}, {3, 8},
                                             {4, 1}, {5, 3}, {6, 5}};
  EXPECT_EQ(NicPairs(t, "PIX"), pix);
  // The GPU7 row was cut: its cells are absent, not guessed from symmetry.
  EXPECT_EQ(t.gpu_links[7], std::vector<std::string>(8));
  for (int j = 0; j < 9; ++j) EXPECT_EQ(t.gpu_nic_links[7][j], std::nullopt);
  EXPECT_EQ(t.cpu_affinity[7], std::nullopt);
  EXPECT_EQ(t.numa_affinity[7], std::nullopt);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(t.gpu_numa_id[i], std::nullopt);
  EXPECT_TRUE(HasWarning(t, "table cut after GPU6 row (missing rows GPU7..NIC8)")) << Warnings(t);
  EXPECT_TRUE(HasWarning(t, "no NIC Legend")) << Warnings(t);
}

TEST(TopoFixtureTest, Nccltests307CompleteWithNicLegend) {
  CheckNccltests307(
      ParseFile(FixtureDir() + "/nccltests307_8x4090_pix_switches_2numa_nic_bond.txt"));
}

TEST(TopoFixtureTest, Nccl933SpaceAlignedCutAfterGpu6) {
  CheckNccl933(ParseFile(FixtureDir() + "/nccl933_8gpu_nv8_9nic_partial.txt"));
}

TEST(TopoFixtureTest, FixturesAreByteCopiesOfTheRealCaptures) {
  SKIP_WITHOUT_REAL_DATA();
  for (const auto& e : fs::directory_iterator(FixtureDir())) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(testing::ReadFileOrEmpty(e.path().string()),
              testing::ReadFileOrEmpty(RealDir() + "/" + name))
        << name;
  }
}

TEST(TopoRealTest, Club3090TwoGpusPhbTabsGpuNumaId) {
  SKIP_WITHOUT_REAL_DATA();
  // Complete, TABs, legend. GPU0-GPU1 PHB, CPU 0-63, NUMA 0, GPU NUMA ID N/A after an empty
  // field (a double TAB).
  Topology t = ParseFile(RealDir() + "/club3090_1229_2x5090_phb_tabs_gpu_numa_id.txt");
  ExpectShape(t, 2, 0);
  EXPECT_EQ(t.gpu_names, Names("GPU", 2));
  EXPECT_EQ(t.gpu_links, (std::vector<std::vector<std::string>>{{"X", "PHB"}, {"PHB", "X"}}));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(t.cpu_affinity[i], "0-63");
    EXPECT_EQ(t.numa_affinity[i], 0);
    EXPECT_EQ(t.gpu_numa_id[i], std::nullopt);
  }
  EXPECT_TRUE(t.warnings.empty()) << Warnings(t);
  EXPECT_EQ(TopoImportJson(t), json::parse(R"({"gpus": 2, "links": [["X","PHB"],["PHB","X"]],
      "nics": [], "gpu_nic_links": [[],[]], "cpu_affinity": ["0-63","0-63"],
      "numa_affinity": [0,0]})"));
}

TEST(TopoRealTest, Nccltests307) {
  SKIP_WITHOUT_REAL_DATA();
  Topology t = ParseFile(RealDir() + "/nccltests307_8x4090_pix_switches_2numa_nic_bond.txt");
  CheckNccltests307(t);
  const json j = TopoImportJson(t);
  EXPECT_EQ(j["nics"], json::array({"mlx5_bond_0"}));
  EXPECT_EQ(j["gpu_nic_links"][0], json::array({"PIX"}));
  EXPECT_EQ(j["gpu_nic_links"][7], json::array({"SYS"}));
  EXPECT_EQ(j["numa_affinity"], json::array({0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(TopoRealTest, Nccl1453H100Nv18NicRowsCutAfterNic5) {
  SKIP_WITHOUT_REAL_DATA();
  // TABs. All 8 GPU rows, NIC rows NIC0-NIC5 (NIC6-8 and the NIC legend cut). Every GPU pair
  // NV18. PIX: GPU0-NIC8, GPU1-NIC7, GPU2-NIC6, GPU3-NIC5, GPU4-NIC4, GPU5-NIC3, GPU6-NIC2,
  // GPU7-NIC1. NIC0 SYS to every GPU and NIC. GPU0-3 CPU 0-79 NUMA 0; GPU4-7 CPU 80-159
  // NUMA 1. GPU NUMA ID N/A.
  Topology t = ParseFile(RealDir() + "/nccl1453_h100_8gpu_nv18_9nic_partial.txt");
  ExpectShape(t, 8, 9);
  EXPECT_EQ(t.nic_names, Names("NIC", 9)) << "the legend was cut: names are the labels";
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ(t.gpu_links[i][j], i == j ? "X" : "NV18") << i << "/" << j;
    EXPECT_EQ(t.gpu_nic_links[i][0], "SYS") << "GPU" << i << "/NIC0";
    EXPECT_EQ(t.cpu_affinity[i], i < 4 ? "0-79" : "80-159");
    EXPECT_EQ(t.numa_affinity[i], i < 4 ? 0 : 1);
    EXPECT_EQ(t.gpu_numa_id[i], std::nullopt);
  }
  const std::set<std::pair<int, int>> pix = {{0, 8}, {1, 7}, {2, 6}, {3, 5},
                                             {4, 4}, {5, 3}, {6, 2}, {7, 1}};
  EXPECT_EQ(NicPairs(t, "PIX"), pix);
  for (int k = 0; k < 9; ++k) EXPECT_EQ(t.nic_links[0][k], k == 0 ? "X" : "SYS") << "NIC0/NIC" << k;
  EXPECT_EQ(t.nic_links[5][5], "X");
  EXPECT_EQ(t.nic_links[5][6], "NODE");
  EXPECT_EQ(t.nic_links[1][2], "NODE");
  for (int r = 6; r < 9; ++r)
    for (int k = 0; k < 9; ++k) EXPECT_EQ(t.nic_links[r][k], std::nullopt) << "NIC" << r;
  EXPECT_TRUE(HasWarning(t, "table cut after NIC5 row (missing rows NIC6..NIC8)")) << Warnings(t);
  EXPECT_TRUE(HasWarning(t, "no NIC Legend: NIC names are the column labels NIC0..NIC8"))
      << Warnings(t);
  EXPECT_EQ(t.warnings.size(), 2u) << Warnings(t);
}

TEST(TopoRealTest, Nccl933) {
  SKIP_WITHOUT_REAL_DATA();
  CheckNccl933(ParseFile(RealDir() + "/nccl933_8gpu_nv8_9nic_partial.txt"));
}

TEST(TopoRealTest, Ucxpy749DgxA100NoNvlinkMlx5ColumnsNumaRange) {
  SKIP_WITHOUT_REAL_DATA();
  // TABs, no NV# entries (PXB or SYS). Columns mlx5_0..mlx5_11. PXB: GPU0/1-mlx5_0/1,
  // GPU2/3-mlx5_2/3, GPU4/5-mlx5_6/7, GPU6/7-mlx5_8/9. CPU 112-127,240-255 and NUMA Affinity
  // 6-7 (a range) on every GPU. Rows GPU0-7 and mlx5_0 (ending in two empty TAB fields).
  Topology t = ParseFile(RealDir() + "/ucxpy749_dgx_a100_no_nvlink_shown_12_mlx5_partial.txt");
  ExpectShape(t, 8, 12);
  EXPECT_EQ(t.nic_names, Names("mlx5_", 12));
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(NvlinkCount(t.gpu_links[i][j]), 0);
      const std::string want = i == j ? "X" : i / 2 == j / 2 ? "PXB" : "SYS";
      EXPECT_EQ(t.gpu_links[i][j], want) << i << "/" << j;
    }
    EXPECT_EQ(t.cpu_affinity[i], "112-127,240-255");
    EXPECT_EQ(t.numa_affinity[i], std::nullopt) << "6-7 is not one node";
    EXPECT_EQ(t.numa_affinity_text[i], "6-7");
  }
  std::set<std::pair<int, int>> pxb;
  const int nic_of_pair[4] = {0, 2, 6, 8};
  for (int g = 0; g < 8; ++g)
    for (int k = 0; k < 2; ++k) pxb.emplace(g, nic_of_pair[g / 2] + k);
  EXPECT_EQ(NicPairs(t, "PXB"), pxb);
  EXPECT_EQ(NicPairs(t, "SYS").size(), 8u * 12 - pxb.size());
  std::vector<std::optional<std::string>> mlx5_0 = {"X", "PXB"};
  mlx5_0.resize(12, "SYS");
  EXPECT_EQ(t.nic_links[0], mlx5_0);
  EXPECT_TRUE(HasWarning(t, "table cut after mlx5_0 row (missing rows mlx5_1..mlx5_11)"))
      << Warnings(t);
  EXPECT_EQ(t.warnings.size(), 1u) << Warnings(t);
  EXPECT_EQ(TopoImportJson(t)["numa_affinity"][0], "6-7");
}

TEST(TopoRealTest, Nccltests78Dgx2SixteenGpusNoNumaColumn) {
  SKIP_WITHOUT_REAL_DATA();
  // 16 GPUs, every pair NV6, mlx5_0..9, CPU Affinity but no NUMA Affinity column. Rows GPU0-3.
  // GPU0/1: mlx5_0 PIX, mlx5_1 PXB. GPU2/3: mlx5_0 PXB, mlx5_1 PIX. mlx5_2/3 NODE; mlx5_4-9
  // SYS. CPU 0-23,48-71.
  Topology t = ParseFile(RealDir() + "/nccltests78_dgx2_16gpu_nv6_10_mlx5_no_numa_col_partial.txt");
  ExpectShape(t, 16, 10);
  EXPECT_EQ(t.gpu_names, Names("GPU", 16));
  EXPECT_EQ(t.nic_names, Names("mlx5_", 10));
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 16; ++j)
      EXPECT_EQ(t.gpu_links[i][j], i == j ? "X" : "NV6") << i << "/" << j;
    EXPECT_EQ(NvlinkCount(t.gpu_links[i][(i + 1) % 16]), 6);
    EXPECT_EQ(t.gpu_nic_links[i][0], i < 2 ? "PIX" : "PXB");
    EXPECT_EQ(t.gpu_nic_links[i][1], i < 2 ? "PXB" : "PIX");
    for (int j = 2; j < 10; ++j) EXPECT_EQ(t.gpu_nic_links[i][j], j < 4 ? "NODE" : "SYS");
    EXPECT_EQ(t.cpu_affinity[i], "0-23,48-71");
  }
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(t.numa_affinity[i], std::nullopt);
    EXPECT_EQ(t.numa_affinity_text[i], std::nullopt);
    EXPECT_EQ(t.gpu_numa_id[i], std::nullopt);
  }
  for (int i = 4; i < 16; ++i) EXPECT_EQ(t.cpu_affinity[i], std::nullopt);
  EXPECT_TRUE(HasWarning(t, "table cut after GPU3 row (missing rows GPU4..mlx5_9)")) << Warnings(t);
  const json j = TopoImportJson(t);
  EXPECT_EQ(j["gpus"], 16);
  EXPECT_EQ(j["numa_affinity"], json(std::vector<json>(16, nullptr)));
  EXPECT_EQ(j["links"][4][0], nullptr);
  EXPECT_EQ(j["links"][3][0], "NV6");
}

TEST(TopoRealTest, Deepep145PromptLineNv18EighteenNics) {
  SKIP_WITHOUT_REAL_DATA();
  // Shell prompt first. 8 GPUs NV18, NIC0-NIC17 (an extra space after the NIC7 column). Rows
  // GPU0-3. GPU0/1 PXB to NIC0-3; GPU2/3 PXB to NIC6-9; NIC4/5 NODE; NIC10-17 SYS. CPU
  // 0-55,112-167, NUMA 0.
  Topology t = ParseFile(RealDir() + "/deepep145_h100_8gpu_nv18_18nic_partial.txt");
  ExpectShape(t, 8, 18);
  EXPECT_EQ(t.nic_names, Names("NIC", 18));
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ(t.gpu_links[i][j], i == j ? "X" : "NV18") << i << "/" << j;
    const int pxb_from = i < 2 ? 0 : 6, pxb_to = i < 2 ? 3 : 9;
    for (int n = 0; n < 18; ++n) {
      const char* want = n >= pxb_from && n <= pxb_to ? "PXB" : n >= 10 ? "SYS" : "NODE";
      EXPECT_EQ(t.gpu_nic_links[i][n], want) << "GPU" << i << "/NIC" << n;
    }
    EXPECT_EQ(t.cpu_affinity[i], "0-55,112-167");
    EXPECT_EQ(t.numa_affinity[i], 0);
    EXPECT_EQ(t.gpu_numa_id[i], std::nullopt);
  }
  EXPECT_TRUE(HasWarning(t, "table cut after GPU3 row (missing rows GPU4..NIC17)")) << Warnings(t);
}

TEST(TopoRealTest, Deepep60TopoMpPcieViewFourteenNics) {
  SKIP_WITHOUT_REAL_DATA();
  // `topo -mp`: no NV#. 8 GPUs, 14 NICs, rows GPU0-3. GPU0-3 mutually NODE, SYS to GPU4-7.
  // PIX: GPU0-NIC0, GPU1-NIC1, GPU2-NIC2, GPU3-NIC7. CPU 0-47,96-143, NUMA 0.
  Topology t = ParseFile(RealDir() + "/deepep60_topo_mp_8gpu_pcie_view_14nic_partial.txt");
  ExpectShape(t, 8, 14);
  EXPECT_EQ(t.nic_names, Names("NIC", 14));
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(ClassifyLink(t.gpu_links[i][j]) == LinkLevel::kNvlink, false);
      EXPECT_EQ(t.gpu_links[i][j], i == j ? "X" : j < 4 ? "NODE" : "SYS") << i << "/" << j;
    }
    EXPECT_EQ(t.cpu_affinity[i], "0-47,96-143");
    EXPECT_EQ(t.numa_affinity[i], 0);
  }
  const std::set<std::pair<int, int>> pix = {{0, 0}, {1, 1}, {2, 2}, {3, 7}};
  EXPECT_EQ(NicPairs(t, "PIX"), pix);
}

TEST(TopoRealTest, EveryCaptureParsesAndRoundTrips) {
  SKIP_WITHOUT_REAL_DATA();
  int files = 0;
  for (const auto& e : fs::directory_iterator(RealDir())) {
    if (e.path().extension() != ".txt") continue;
    ++files;
    SCOPED_TRACE(e.path().filename().string());
    const Topology t = ParseFile(e.path().string());
    EXPECT_GE(t.gpu_names.size(), 2u);
    auto again = ParseTopoMatrix(RenderTopoMatrix(t));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    ExpectSameMatrix(*again, t);
    if (t.warnings.empty()) {
      EXPECT_EQ(*again, t);
    }
    // The JSON contract's shape.
    const json j = TopoImportJson(t);
    std::set<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
    EXPECT_EQ(keys, (std::set<std::string>{"gpus", "links", "nics", "gpu_nic_links", "cpu_affinity",
                                           "numa_affinity"}));
    EXPECT_EQ(j["links"].size(), t.gpu_names.size());
    EXPECT_EQ(j["gpu_nic_links"].size(), t.gpu_names.size());
    EXPECT_EQ(j["gpu_nic_links"][0].size(), t.nic_names.size());
  }
  EXPECT_EQ(files, 8);
}

// ---- Link vocabulary -------------------------------------------------------------------------

TEST(TopologyTest, NvlinkCount) {
  EXPECT_EQ(NvlinkCount("NV18"), 18);
  EXPECT_EQ(NvlinkCount("NV6"), 6);
  EXPECT_EQ(NvlinkCount("NV1"), 1);
  EXPECT_EQ(NvlinkCount("PIX"), 0);
  EXPECT_EQ(NvlinkCount("X"), 0);
  EXPECT_EQ(NvlinkCount("NV"), 0);
  EXPECT_EQ(NvlinkCount("NV#"), 0);
  EXPECT_EQ(NvlinkCount("NV1x"), 0);
  EXPECT_EQ(NvlinkCount("nv18"), 0);
  EXPECT_EQ(NvlinkCount("NV99999999999999999999"), 0);
  EXPECT_EQ(NvlinkCount(""), 0);
}

TEST(TopologyTest, RankOrdersFromClosestToFarthest) {
  const std::vector<std::string> order = {"X", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS", "C2C"};
  for (size_t k = 1; k < order.size(); ++k)
    EXPECT_LT(LinkRank(order[k - 1]), LinkRank(order[k])) << order[k - 1] << " < " << order[k];
  EXPECT_EQ(ClassifyLink("SOC"), LinkLevel::kSys) << "older drivers' name for SYS";
  EXPECT_EQ(ClassifyLink(""), LinkLevel::kUnknown);
  EXPECT_EQ(LinkLevelName(ClassifyLink("NV12")), "NV#");
  EXPECT_LT(CompareLinks("NV18", "NV6"), 0) << "more links is closer";
  EXPECT_GT(CompareLinks("PIX", "NV1"), 0);
  EXPECT_EQ(CompareLinks("SOC", "SYS"), 0);
  EXPECT_EQ(CompareLinks("NV8", "NV8"), 0);
  EXPECT_LT(CompareLinks("SYS", "garbage"), 0);
}

// ---- Formats the parser tolerates ------------------------------------------------------------

const char kSmall[] =
    "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV4\tPIX\t0-15\t0\t\tN/A\n"
    "GPU1\tNV4\t X \tSYS\t16-31\t1\t\tN/A\n"
    "NIC0\tPIX\tSYS\t X \n"
    "\n"
    "Legend:\n\n  X    = Self\n\n"
    "NIC Legend:\n\n  NIC0: mlx5_0\n";

void CheckSmall(const Topology& t) {
  ExpectShape(t, 2, 1);
  EXPECT_EQ(t.gpu_links, (std::vector<std::vector<std::string>>{{"X", "NV4"}, {"NV4", "X"}}));
  EXPECT_EQ(t.nic_names, std::vector<std::string>{"mlx5_0"});
  EXPECT_EQ(t.gpu_nic_links[0][0], "PIX");
  EXPECT_EQ(t.gpu_nic_links[1][0], "SYS");
  EXPECT_EQ(t.cpu_affinity[1], "16-31");
  EXPECT_EQ(t.numa_affinity[1], 1);
  EXPECT_TRUE(t.warnings.empty()) << Warnings(t);
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size())
    s.replace(p, from.size(), to);
  return s;
}

TEST(ParseTopoMatrixTest, SmallTabSeparated) {
  auto t = ParseTopoMatrix(kSmall);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  CheckSmall(*t);
}

TEST(ParseTopoMatrixTest, SpacesCrlfAnsiQuotesAndNoBreakSpaces) {
  const std::string text = kSmall;
  for (const std::string& variant :
       {Replace(text, "\t", "    "), Replace(text, "\n", "\r\n"),
        Replace(Replace(text, "NV4", "\x1b[32mNV4\x1b[0m"), "GPU0", "\x1b[1mGPU0\x1b[0m"),
        "> " + Replace(text, "\n", "\n> "), Replace(text, "\t", "\xc2\xa0\xc2\xa0"),
        "user@host:~$ nvidia-smi topo -m\n" + text}) {
    SCOPED_TRACE(variant);
    auto t = ParseTopoMatrix(variant);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    CheckSmall(*t);
  }
}

TEST(ParseTopoMatrixTest, OldDriversSocAndMlxLabels) {
  auto t = ParseTopoMatrix(
      "        GPU0    GPU1    mlx4_0  CPU Affinity\n"
      "GPU0     X      SOC     PHB     0-7\n"
      "GPU1    SOC      X      SOC     8-15\n"
      "mlx4_0  PHB     SOC      X\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->gpu_links[0][1], "SOC");
  EXPECT_EQ(t->nic_names, std::vector<std::string>{"mlx4_0"});
  EXPECT_EQ(t->nic_links[0][0], "X");
  EXPECT_TRUE(t->warnings.empty()) << Warnings(*t);
}

TEST(ParseTopoMatrixTest, OneGpuWithAffinityIsAMatrix) {
  auto t = ParseTopoMatrix("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-11\t0\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->gpu_links, (std::vector<std::vector<std::string>>{{"X"}}));
  EXPECT_EQ(t->numa_affinity[0], 0);
}

TEST(ParseTopoMatrixTest, NicRowFillsCellsOfACutGpuRow) {
  auto t = ParseTopoMatrix(
      "\tGPU0\tGPU1\tNIC0\tCPU Affinity\n"
      "GPU0\t X \tPIX\tPXB\t0-7\n"
      "NIC0\tPXB\tNODE\t X \n");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->gpu_nic_links[1][0], "NODE") << "printed in the NIC0 row";
  EXPECT_EQ(t->gpu_links[1], std::vector<std::string>(2));
  EXPECT_TRUE(HasWarning(*t, "missing rows: GPU1")) << Warnings(*t);
}

TEST(ParseTopoMatrixTest, GpuAndNicRowsThatDisagreeAreReported) {
  auto t = ParseTopoMatrix(
      "\tGPU0\tNIC0\tCPU Affinity\n"
      "GPU0\t X \tPIX\t0-7\n"
      "NIC0\tSYS\t X \n");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->gpu_nic_links[0][0], "PIX") << "the GPU row wins";
  EXPECT_TRUE(HasWarning(*t, "GPU0/NIC0 is 'PIX' but NIC0/GPU0 is 'SYS'")) << Warnings(*t);
}

// ---- Bad input -------------------------------------------------------------------------------

TEST(ParseTopoMatrixTest, EmptyInputIsInvalid) {
  for (const char* in : {"", "\n\n", " \t \r\n"}) {
    auto t = ParseTopoMatrix(in);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("empty input"), std::string::npos);
  }
}

TEST(ParseTopoMatrixTest, NoHeaderNamesTheLine) {
  auto t = ParseTopoMatrix("\n\nhello world\nGPU0 is fine\n");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("line 3 is 'hello world'"), std::string::npos)
      << t.status().message();

  auto rows = ParseTopoMatrix("some log\nGPU0\t X \tNV18\t0-7\nGPU1\tNV18\t X \t0-7\n");
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("line 2 ('GPU0"), std::string::npos)
      << rows.status().message();
  EXPECT_NE(rows.status().message().find("no header"), std::string::npos);
}

TEST(ParseTopoMatrixTest, TruncatedMidRow) {
  const std::string text = testing::ReadFileOrEmpty(
      FixtureDir() + "/nccltests307_8x4090_pix_switches_2numa_nic_bond.txt");
  const size_t cut = text.find("GPU5\tSYS\tSYS") + std::string("GPU5\tSYS\tSYS").size();
  ASSERT_NE(cut, std::string::npos);
  for (const std::string& in : {text.substr(0, cut), text.substr(0, cut - 1)}) {
    auto t = ParseTopoMatrix(in);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ExpectShape(*t, 8, 1);
    EXPECT_EQ(t->gpu_links[4][5], "PIX");
    EXPECT_EQ(t->gpu_links[5][0], "SYS");
    EXPECT_EQ(t->gpu_links[5][2], "");
    EXPECT_EQ(t->cpu_affinity[5], std::nullopt);
    EXPECT_EQ(t->nic_names, std::vector<std::string>{"NIC0"}) << "the NIC legend was cut";
    EXPECT_TRUE(HasWarning(*t, "row GPU5 cut after")) << Warnings(*t);
    EXPECT_TRUE(HasWarning(*t, "table cut after GPU5 row (missing rows GPU6..NIC0)"))
        << Warnings(*t);
  }
  // Cut right after the header.
  auto header_only = ParseTopoMatrix(text.substr(0, text.find('\n') + 1));
  ASSERT_TRUE(header_only.ok());
  EXPECT_TRUE(HasWarning(*header_only, "table cut after the header (no rows)"))
      << Warnings(*header_only);
}

TEST(ParseTopoMatrixTest, UnknownAndGarbledTokensAreKeptAndReported) {
  std::string text = kSmall;
  text = Replace(text, "GPU1\tNV4\t X \tSYS", "GPU1\tC2C\t X \tS\x01S");
  auto t = ParseTopoMatrix(text);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->gpu_links[1][0], "C2C");
  EXPECT_EQ(t->gpu_nic_links[1][0], "S\x01S");
  EXPECT_TRUE(HasWarning(*t, "unknown link 'C2C' at GPU1/GPU0 (kept as printed)")) << Warnings(*t);
  EXPECT_TRUE(HasWarning(*t, "unknown link 'S?S' at GPU1/NIC0")) << Warnings(*t);
  // Unknown, but the JSON still dumps.
  EXPECT_NO_THROW((void)TopoImportJson(*t).dump());
}

TEST(ParseTopoMatrixTest, ShiftedCellsAreReported) {
  // A cell lost from a space-aligned row moves X off the diagonal.
  auto t = ParseTopoMatrix(
      "     GPU0 GPU1 GPU2 CPU Affinity\n"
      "GPU0  X   NV2  NV2  0-7\n"
      "GPU1  X   NV2  0-7\n"
      "GPU2  NV2  NV2  X   0-7\n");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(HasWarning(*t, "row GPU1: 'X' in column GPU0")) << Warnings(*t);
  EXPECT_TRUE(HasWarning(*t, "row GPU1 cut after 3 of 4 cells")) << Warnings(*t);
}

TEST(ParseTopoMatrixTest, DuplicatesExtraCellsAndSecondMatrix) {
  std::string text = std::string(kSmall) + "\n" + kSmall;
  text.insert(text.find("NIC0\tPIX"), "GPU0\t X \tNV4\tPIX\t0-15\t0\tN/A\textra\n");
  auto t = ParseTopoMatrix(text);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->gpu_links[0][1], "NV4");
  EXPECT_TRUE(HasWarning(*t, "duplicate row GPU0 (ignored)")) << Warnings(*t);
  EXPECT_TRUE(HasWarning(*t, "a second matrix at line")) << Warnings(*t);
  auto extra = ParseTopoMatrix(Replace(kSmall, "0-15\t0\t\tN/A", "0-15\t0\t\tN/A\tmore\tcells"));
  ASSERT_TRUE(extra.ok());
  EXPECT_TRUE(HasWarning(*extra, "row GPU0 has 2 cells past the last column (ignored)"))
      << Warnings(*extra);
}

TEST(ParseTopoMatrixTest, BinaryBytesNeverCrash) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::string junk(1 + rng() % 4096, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    (void)ParseTopoMatrix(junk);
    // Junk below a real header: rows of garbage still parse into a partial table.
    auto t = ParseTopoMatrix(std::string(kSmall).substr(0, 60) + "\nGPU0 " + junk);
    if (t.ok()) {
      EXPECT_LE(t->warnings.size(), 65u);
      (void)TopoImportJson(*t).dump();
      (void)RenderTopoMatrix(*t);
    }
  }
}

TEST(ParseTopoMatrixTest, TenMegabyteLinesAreBounded) {
  const size_t kTen = 10 << 20;
  const auto start = std::chrono::steady_clock::now();
  // No header in 10 MB: an error whose message quotes the line, not copies it.
  auto none = ParseTopoMatrix(std::string(kTen, 'A'));
  ASSERT_FALSE(none.ok());
  EXPECT_LT(none.status().message().size(), 512u);

  // A row of 10 MB of cells: the extra cells are counted, not kept.
  std::string row = "\tGPU0\tGPU1\tCPU Affinity\nGPU0 X NV2 0-3";
  while (row.size() < kTen) row += " SYS";
  auto wide = ParseTopoMatrix(row);
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(wide->gpu_links[0][1], "NV2");
  EXPECT_TRUE(HasWarning(*wide, "cells past the last column")) << Warnings(*wide);

  // A 10 MB header: columns past the caps are ignored.
  std::string header = "\t";
  for (int i = 0; header.size() < kTen; ++i) header += "GPU" + std::to_string(i) + "\t";
  auto huge = ParseTopoMatrix(header + "\nGPU0\t X \n");
  ASSERT_TRUE(huge.ok());
  EXPECT_LE(huge->gpu_names.size(), 128u);
  EXPECT_TRUE(HasWarning(*huge, "more columns than")) << Warnings(*huge);

  // One 10 MB token as a cell: kept verbatim, quoted briefly.
  auto token = ParseTopoMatrix("\tGPU0\tGPU1\tCPU Affinity\nGPU0 X " + std::string(kTen, 'Z'));
  ASSERT_TRUE(token.ok());
  EXPECT_EQ(token->gpu_links[0][1].size(), kTen);
  for (const auto& w : token->warnings) EXPECT_LT(w.size(), 512u);

  // 200k duplicate rows: the warnings are capped.
  std::string dups = "\tGPU0\tGPU1\tCPU Affinity\n";
  for (int i = 0; i < 200000; ++i) dups += "GPU0 X NV2 0-3\n";
  auto many = ParseTopoMatrix(dups);
  ASSERT_TRUE(many.ok());
  EXPECT_LE(many->warnings.size(), 65u);
  EXPECT_TRUE(HasWarning(*many, "more warnings")) << Warnings(*many);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

// ---- Render and JSON -------------------------------------------------------------------------

Topology HandBuilt() {
  Topology t;
  t.gpu_names = Names("GPU", 3);
  t.nic_names = {"mlx5_0", "mlx5_1"};
  t.gpu_links = {{"X", "NV12", "SYS"}, {"NV12", "X", "PHB"}, {"SYS", "PHB", "X"}};
  t.gpu_nic_links = {{"PIX", "SYS"}, {"PXB", "SYS"}, {"SYS", "NODE"}};
  t.nic_links = {{"X", "SYS"}, {"SYS", "X"}};
  t.cpu_affinity = {"0-55,112-167", "0-55,112-167", std::nullopt};
  t.numa_affinity = {0, std::nullopt, std::nullopt};
  t.numa_affinity_text = {std::nullopt, "6-7", std::nullopt};
  t.gpu_numa_id = {std::nullopt, 2, std::nullopt};
  return t;
}

TEST(RenderTopoMatrixTest, RoundTrip) {
  const Topology t = HandBuilt();
  const std::string text = RenderTopoMatrix(t);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "\tGPU0\tGPU1\tGPU2\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID");
  EXPECT_NE(text.find("GPU0\t X \tNV12\tSYS\tPIX\tSYS\t0-55,112-167\t0\tN/A\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\nLegend:\n"), std::string::npos);
  EXPECT_NE(text.find("\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n"), std::string::npos);
  auto back = ParseTopoMatrix(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, t) << text << Warnings(*back);
}

TEST(RenderTopoMatrixTest, LabelsWithoutLegendAndNoNics) {
  Topology t = HandBuilt();
  t.nic_names = {"NIC0", "NIC1"};
  const std::string text = RenderTopoMatrix(t);
  EXPECT_EQ(text.find("NIC Legend"), std::string::npos);
  auto back = ParseTopoMatrix(text);
  ASSERT_TRUE(back.ok());
  ExpectSameMatrix(*back, t);

  Topology bare;
  bare.gpu_names = Names("GPU", 2);
  bare.gpu_links = {{"X", "NV2"}, {"NV2", "X"}};
  bare.gpu_nic_links = {{}, {}};
  bare.cpu_affinity = {"0-3", "4-7"};
  bare.numa_affinity = {0, 0};
  bare.numa_affinity_text = {std::nullopt, std::nullopt};
  bare.gpu_numa_id = {std::nullopt, std::nullopt};
  auto bare_back = ParseTopoMatrix(RenderTopoMatrix(bare));
  ASSERT_TRUE(bare_back.ok());
  EXPECT_EQ(*bare_back, bare);
}

TEST(RenderTopoMatrixTest, RaggedHandBuiltTopologyDoesNotCrash) {
  Topology t;
  t.gpu_names = Names("GPU", 3);
  t.nic_names = {"mlx5_0"};
  t.gpu_links = {{"X"}};
  const std::string text = RenderTopoMatrix(t);
  auto back = ParseTopoMatrix(text);
  ASSERT_TRUE(back.ok()) << text;
  EXPECT_EQ(back->gpu_links[0][0], "X");
  const json j = TopoImportJson(t);
  EXPECT_EQ(j["links"][0], json::array({"X", nullptr, nullptr}));
  EXPECT_EQ(j["gpu_nic_links"][2], json::array({nullptr}));
}

TEST(TopoImportJsonTest, ContractShape) {
  const json j = TopoImportJson(HandBuilt());
  EXPECT_EQ(j, json::parse(R"({
    "gpus": 3,
    "links": [["X","NV12","SYS"],["NV12","X","PHB"],["SYS","PHB","X"]],
    "nics": ["mlx5_0","mlx5_1"],
    "gpu_nic_links": [["PIX","SYS"],["PXB","SYS"],["SYS","NODE"]],
    "cpu_affinity": ["0-55,112-167","0-55,112-167",null],
    "numa_affinity": [0,"6-7",null]
  })"));
}

TEST(TopoImportJsonTest, InvalidUtf8IsMadeValid) {
  Topology t = HandBuilt();
  t.gpu_links[0][1] = "NV\xff";
  EXPECT_NO_THROW((void)TopoImportJson(t).dump());
}

}  // namespace
}  // namespace gpuwatch::topo
