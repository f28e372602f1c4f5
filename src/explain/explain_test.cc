// gpuwatch explain on real captures: every file under tests/fixtures/explain/<kind>/ (each from a
// public issue thread, named in that folder's SOURCES.md) gives the kinds and the values its
// NAME.expected.json holds; ../shared/real's captures are recognised as what they are; and the
// findings the files support together.
#include "explain/explain.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "common/testing/test_files.h"

namespace gpuwatch::explain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFixtures = testing::FixtureDir("explain");

std::string Slurp(const fs::path& p) { return testing::ReadFileOrEmpty(p.string()); }

json ExplainOne(const fs::path& p) {
  return Explain({{p.string(), Slurp(p)}}, "").document["files"][0];
}

// The helper's topology form (gpu_count, nic_count, pairs read off the matrix, affinities)
// against `gpuwatch topo import --json`'s.
void ExpectTopology(const json& want, const json& got, const std::string& name) {
  EXPECT_EQ(got["gpus"], want["gpu_count"]) << name;
  EXPECT_EQ(got["nics"].size(), want["nic_count"].get<size_t>()) << name;
  auto index = [&](const std::string& label) -> std::pair<bool, int> {  // (is a GPU, index)
    if (label.rfind("GPU", 0) == 0) return {true, std::stoi(label.substr(3))};
    if (label.rfind("NIC", 0) == 0) return {false, std::stoi(label.substr(3))};
    for (size_t i = 0; i < got["nics"].size(); ++i) {
      if (got["nics"][i] == label) return {false, static_cast<int>(i)};
    }
    return {false, -1};
  };
  for (const json& pair : want["pairs"]) {
    const auto [a_gpu, a] = index(pair[0].get<std::string>());
    const auto [b_gpu, b] = index(pair[1].get<std::string>());
    if (!a_gpu) continue;  // NIC×NIC: not in topo import's JSON (GPU rows and GPU×NIC only)
    if (b_gpu) {
      EXPECT_EQ(got["links"][a][b], pair[2]) << name << ": " << pair.dump();
    } else {
      ASSERT_GE(b, 0) << name << ": " << pair.dump();
      EXPECT_EQ(got["gpu_nic_links"][a][b], pair[2]) << name << ": " << pair.dump();
    }
  }
  if (want.contains("cpu_affinity")) {
    for (const auto& [gpu, cpus] : want["cpu_affinity"].items()) {
      EXPECT_EQ(got["cpu_affinity"][std::stoi(gpu.substr(3))], cpus) << name << " " << gpu;
    }
  }
  if (want.contains("numa_affinity")) {
    for (const auto& [gpu, numa] : want["numa_affinity"].items()) {
      const json& g = got["numa_affinity"][std::stoi(gpu.substr(3))];
      EXPECT_EQ(g.is_number() ? std::to_string(g.get<int>()) : g.dump(), numa.get<std::string>())
          << name << " " << gpu;
    }
  }
}

TEST(ExplainTest, EveryCaptureGivesItsExpectedKindsAndValues) {
  size_t files = 0;
  for (const char* kind : {"kernel", "launcher", "smi", "nccl", "nccl_tests", "topology"}) {
    for (const testing::Capture& c : testing::CapturesIn(kFixtures + "/" + kind, "")) {
      const fs::path& p = c.input;
      ASSERT_TRUE(fs::exists(c.expected)) << p;
      const json want = json::parse(Slurp(c.expected));
      const json got = ExplainOne(p);
      const std::string name = p.filename().string();
      ASSERT_EQ(got["kinds"], want["kinds"]) << name;
      // Each key the expected object gives (the collectors of the NCCL captures wrote the
      // launcher part of a mixed file only in part).
      for (const char* kind : {"kernel", "launcher", "smi", "nccl_tests"}) {
        if (!want.contains(kind)) continue;
        for (const auto& [key, value] : want[kind].items()) {
          EXPECT_EQ(got[kind][key], value) << name << " " << kind << "." << key;
        }
      }
      if (want.contains("nccl")) {
        const json& w = want["nccl"];
        const json& g = got["nccl"];
        // The collectors wrote ranks and nodes from the comm lines' nRanks / nNodes, null
        // without them; `gpuwatch nccl --json` gives a lower bound from the ranks and hosts seen
        // then (its contract), so only a stated value is compared.
        for (const char* key : {"nccl_version", "ranks", "nodes"}) {
          if (w.contains(key) && !w[key].is_null()) {
            EXPECT_EQ(g[key], w[key]) << name << " " << key;
          }
        }
        if (w.contains("transports")) {
          // The collectors counted the "Channel … via X" connection lines. The nccl --json
          // contract also counts NVLS and CollNet channels from NCCL's channel summary ("2 coll
          // channels, 2 collnet channels, 0 nvls channels"), which has no connection lines.
          json nonzero = json::object();
          for (const auto& [family, n] : g["transports"].items()) {
            if (n.get<int64_t>() > 0 && family != "NVLS" && family != "COLLNET")
              nonzero[family] = n;
          }
          json want_t = w["transports"];
          want_t.erase("NVLS");
          want_t.erase("COLLNET");
          EXPECT_EQ(nonzero, want_t) << name;
        }
      }
      if (want.contains("topology")) ExpectTopology(want["topology"], got["topology"], name);
      ++files;
    }
  }
  EXPECT_GE(files, 80u);
}

// ../shared/real (INDEX.md): each capture is recognised as the kind its folder holds.
TEST(ExplainTest, TheSharedRealCapturesAreRecognised) {
  const fs::path real = fs::path(GPUWATCH_SOURCE_DIR) / ".." / "shared" / "real";
  if (!fs::exists(real)) GTEST_SKIP() << real << " is absent (it lives beside the checkout)";
  const std::map<std::string, std::string> kind_of = {{"nccl", "nccl"},
                                                      {"topo", "topology"},
                                                      {"xid", "kernel"},
                                                      {"smi", "smi"},
                                                      {"nccltests", "nccl_tests"}};
  for (const auto& [dir, kind] : kind_of) {
    for (const auto& entry : fs::directory_iterator(real / dir)) {
      const std::string name = entry.path().filename().string();
      const json got = ExplainOne(entry.path());
      std::set<std::string> kinds;
      for (const json& k : got["kinds"]) kinds.insert(k.get<std::string>());
      // The device plugin's own line is not the driver's (INDEX.md: "Use it as a negative").
      if (name.rfind("k8sdp189", 0) == 0) {
        EXPECT_EQ(kinds.count("kernel"), 0u) << name;
        continue;
      }
      // The nccl folder holds PyTorch watchdog failures too: the launcher kind.
      const bool ok = kinds.count(kind) == 1 || (dir == "nccl" && kinds.count("launcher") == 1);
      EXPECT_TRUE(ok) << name << " " << got["kinds"].dump();
    }
  }
}

// A GPU that fell off the bus, as the driver logs it (gpu-burn issue 1, tests/fixtures/explain/
// kernel/gpuburn1_*): gpu_lost, critical, on the node the journal names when it names one.
TEST(ExplainTest, AKernelLogOfAGpuFallenOffTheBusIsGpuLost) {
  const fs::path p = kFixtures + "/kernel/gpuburn1_xid79_after_aer_surprise_down_dmesg.log";
  const Explanation e = Explain({{p.string(), Slurp(p)}}, "node-7");
  ASSERT_FALSE(e.findings.empty());
  EXPECT_EQ(e.findings[0].cause, analyze::Cause::kGpuLost);
  EXPECT_EQ(e.findings[0].severity, analyze::Severity::kCritical);
  EXPECT_EQ(e.document["node"], "node-7");
  EXPECT_EQ(e.document["findings"][0]["cause"], "gpu_lost");
}

// torchrun's report of a worker the host's OOM killer took (hpcaitech/ColossalAI#3514): a rank
// died; and the same file with the scheduler's SIGTERM (determined-ai/determined#8915) is not.
TEST(ExplainTest, ALauncherLogOfADeadWorkerIsARankExitAndACancelledJobIsNot) {
  const fs::path dead =
      kFixtures + "/launcher/colossalai3514_torchrun_old_logging_sigkill_localrank3.log";
  Explanation e = Explain({{dead.string(), Slurp(dead)}}, "n1");
  ASSERT_EQ(e.findings.size(), 1u);
  EXPECT_EQ(e.findings[0].cause, analyze::Cause::kRankExit);
  const fs::path cancelled =
      kFixtures + "/launcher/determined8915_torchrun_agent_got_sigterm_no_failure.log";
  e = Explain({{cancelled.string(), Slurp(cancelled)}}, "n1");
  EXPECT_TRUE(e.findings.empty()) << e.document.dump();
}

// An NCCL log that used SHM between NVLink GPUs (P2P level LOC; fixture chimera2_*) with the
// node's topo -m beside it: nvlink_fallback, judged from the two files together.
TEST(ExplainTest, AnNcclLogAndATopologyTogetherShowAFallback) {
  const fs::path log = kFixtures + "/nccl/chimera2_p2p_level_loc_shm_connected_all_rings_trees.log";
  // An 8-GPU NVLink machine's matrix (fixture mooncake2039_*).
  const fs::path topo =
      kFixtures + "/topology/mooncake2039_8x_h100_nv18_12nic_full_with_nic_legend.txt";
  const Explanation e = Explain({{log.string(), Slurp(log)}, {topo.string(), Slurp(topo)}}, "");
  bool fallback = false;
  for (const analyze::Finding& f : e.findings)
    fallback |= f.cause == analyze::Cause::kNvlinkFallback;
  EXPECT_TRUE(fallback) << e.document["findings"].dump();
}

TEST(ExplainTest, FilesAreReadPlainOrGzipAndUnreadableOnesAreErrors) {
  EXPECT_EQ(ReadInput("/nonexistent/file.log").status().code(), StatusCode::kNotFound);
  const fs::path dir = fs::temp_directory_path() / "gpuwatch-explain-test";
  fs::create_directories(dir);
  const std::string plain = "NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.\n";
  { std::ofstream(dir / "k.log") << plain; }
  ASSERT_EQ(std::system(
                ("gzip -c " + (dir / "k.log").string() + " > " + (dir / "k.gz").string()).c_str()),
            0);
  EXPECT_EQ(*ReadInput((dir / "k.log").string()), plain);
  EXPECT_EQ(*ReadInput((dir / "k.gz").string()), plain);
  std::string gz = Slurp(dir / "k.gz");
  { std::ofstream(dir / "cut.gz", std::ios::binary) << gz.substr(0, gz.size() / 2); }
  EXPECT_EQ(ReadInput((dir / "cut.gz").string()).status().code(), StatusCode::kCorruption);
  fs::remove_all(dir);
}

TEST(ExplainTest, TextNothingRecognisesSaysSo) {
  const Explanation e = Explain({{"notes.txt", "lunch at noon\n"}}, "");
  EXPECT_TRUE(e.document["files"][0]["kinds"].empty());
  EXPECT_EQ(e.document["files"][0]["warnings"].size(), 1u);
  EXPECT_TRUE(e.findings.empty());
  EXPECT_EQ(e.document["node"], "unknown");
  EXPECT_NE(RenderExplanation(e).find("nothing recognised"), std::string::npos);
}

}  // namespace
}  // namespace gpuwatch::explain
