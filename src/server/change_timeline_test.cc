#include "server/change_timeline.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "store/testing/scratch_dir.h"

namespace gpuwatch::server {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

GpuFacts Gpu(unsigned index, std::string uuid, std::string pci, bool mig = false) {
  GpuFacts g;
  g.index = index;
  g.uuid = std::move(uuid);
  g.name = "NVIDIA H100 80GB HBM3";
  g.pci_bus_id = std::move(pci);
  g.vbios_version = "96.00.74.00.01";
  g.mig_enabled = mig;
  return g;
}

NodeFacts Facts() {
  NodeFacts f;
  f.driver_version = "550.54.15";
  f.cuda_version = "12.4";
  f.nvml_version = "12.550.54.15";
  f.kernel_release = "5.15.0-91-generic";
  f.agent_version = "0.3.0";
  f.config_hash = ConfigHash("interval=1s");
  f.gpus_known = true;
  f.gpus = {Gpu(0, "GPU-aaaa", "00000000:18:00.0"), Gpu(1, "GPU-bbbb", "00000000:2a:00.0"),
            Gpu(2, "GPU-cccc", "00000000:3a:00.0"), Gpu(3, "GPU-dddd", "00000000:5d:00.0")};
  return f;
}

std::vector<std::string> Messages(const std::vector<ChangeEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.message);
  return out;
}

// ---- node facts: hashing, JSON, files ---------------------------------------------------------

TEST(NodeFactsTest, ConfigHashIsFnv1a64) {
  // Reference values of FNV-1a 64 (Fowler/Noll/Vo test vectors).
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
  EXPECT_EQ(ConfigHash("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(ConfigHash(""), "cbf29ce484222325");
  EXPECT_NE(ConfigHash("--interval=1s"), ConfigHash("--interval=2s"));
}

TEST(NodeFactsTest, FromSystemInfoAndStaticInfo) {
  model::SystemInfo sys;
  sys.driver_version = "550.90.07";
  sys.nvml_version = "12.550.90.07";
  sys.cuda_driver_version = "12.4";
  std::vector<model::GpuStaticInfo> gpus(2);
  gpus[0].index = 1;
  gpus[0].uuid = "GPU-b";
  gpus[0].pci_bus_id = "00000000:2a:00.0";
  gpus[0].name = "NVIDIA H100 80GB HBM3";
  gpus[0].vbios_version = "96.00.74.00.01";
  gpus[0].mig_enabled = true;
  gpus[1].index = 0;
  gpus[1].uuid = "GPU-a";
  NodeFacts f = NodeFactsFrom(sys, gpus, "0.4.0", "cfg", "6.5.0-35-generic");
  EXPECT_EQ(f.driver_version, "550.90.07");
  EXPECT_EQ(f.cuda_version, "12.4");
  EXPECT_EQ(f.nvml_version, "12.550.90.07");
  EXPECT_EQ(f.agent_version, "0.4.0");
  EXPECT_EQ(f.kernel_release, "6.5.0-35-generic");
  EXPECT_EQ(f.config_hash, ConfigHash("cfg"));
  EXPECT_TRUE(f.gpus_known);
  ASSERT_EQ(f.gpus.size(), 2u);
  EXPECT_EQ(f.gpus[0].uuid, "GPU-a");  // by index
  EXPECT_EQ(f.gpus[1], (GpuFacts{1, "GPU-b", "NVIDIA H100 80GB HBM3", "00000000:2a:00.0",
                                 "96.00.74.00.01", true}));
}

TEST(NodeFactsTest, FillUnknownFromKeepsWhatThisStartCouldNotLearn) {
  NodeFacts now;  // NVML did not start: only what the agent knows itself
  now.agent_version = "0.4.0";
  now.config_hash = "0123456789abcdef";
  NodeFacts merged = FillUnknownFrom(Facts(), now);
  EXPECT_EQ(merged.driver_version, "550.54.15");
  EXPECT_EQ(merged.kernel_release, "5.15.0-91-generic");
  EXPECT_EQ(merged.agent_version, "0.4.0");
  EXPECT_EQ(merged.config_hash, "0123456789abcdef");
  EXPECT_TRUE(merged.gpus_known);
  EXPECT_EQ(merged.gpus, Facts().gpus);
}

TEST(NodeFactsTest, JsonRoundTrip) {
  NodeFacts f = Facts();
  f.gpus[1].mig_enabled = true;
  f.gpus[2].vbios_version = "";
  auto back = NodeFactsFromJson(NodeFactsToJson(f), "x");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, f);

  NodeFacts unknown_gpus;
  unknown_gpus.agent_version = "0.4.0";
  const std::string text = NodeFactsToJson(unknown_gpus);
  EXPECT_EQ(text.find("\"gpus\""), std::string::npos) << text;
  back = NodeFactsFromJson(text, "x");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, unknown_gpus);
  EXPECT_FALSE(back->gpus_known);

  NodeFacts no_gpus = unknown_gpus;  // known to have none
  no_gpus.gpus_known = true;
  back = NodeFactsFromJson(NodeFactsToJson(no_gpus), "x");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->gpus_known);
}

TEST(NodeFactsTest, ExactDocument) {
  NodeFacts f;
  f.driver_version = "550.90.07";
  f.gpus_known = true;
  f.gpus = {Gpu(0, "GPU-a", "00000000:18:00.0")};
  EXPECT_EQ(
      NodeFactsToJson(f),
      R"({"agent_version":"","config_hash":"","cuda_version":"","driver_version":"550.90.07",)"
      R"("format":1,"gpus":[{"index":0,"mig_enabled":false,"name":"NVIDIA H100 80GB HBM3",)"
      R"("pci_bus_id":"00000000:18:00.0","uuid":"GPU-a","vbios_version":"96.00.74.00.01"}],)"
      R"("kernel_release":"","nvml_version":""})"
      "\n");
}

TEST(NodeFactsTest, MissingFileIsNullopt) {
  const std::string dir = store::testing::FreshScratchDir("node_facts");
  fs::create_directories(dir);
  auto r = LoadNodeFacts(dir + "/node-facts.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->has_value());
  fs::remove_all(dir);
}

TEST(NodeFactsTest, SaveThenLoad) {
  const std::string dir = store::testing::FreshScratchDir("node_facts");
  fs::create_directories(dir);
  const std::string path = dir + "/node-facts.json";
  ASSERT_TRUE(SaveNodeFacts(path, Facts()).ok());
  auto r = LoadNodeFacts(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, Facts());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  NodeFacts next = Facts();
  next.driver_version = "550.90.07";
  ASSERT_TRUE(SaveNodeFacts(path, next).ok());  // overwrites
  r = LoadNodeFacts(path);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->driver_version, "550.90.07");
  fs::remove_all(dir);
}

TEST(NodeFactsTest, DamagedFileIsCorruptionNamingTheFile) {
  const std::string dir = store::testing::FreshScratchDir("node_facts");
  fs::create_directories(dir);
  const std::string path = dir + "/node-facts.json";
  std::string good = NodeFactsToJson(Facts());
  const std::vector<std::string> damaged = {
      "",
      good.substr(0, good.size() / 2),  // torn
      "[1,2,3]",
      "\"node\"",
      R"({"driver_version":"550.90.07"})",             // no format
      R"({"format":2,"driver_version":"550.90.07"})",  // a newer format
      R"({"format":"1"})",
      R"({"format":1,"driver_version":550})",
      R"({"format":1,"gpus":{}})",
      R"({"format":1,"gpus":[1]})",
      R"({"format":1,"gpus":[{"uuid":"GPU-a"}]})",
      R"({"format":1,"gpus":[{"index":-1}]})",
      R"({"format":1,"gpus":[{"index":4294967296}]})",
      R"({"format":1,"gpus":[{"index":0},{"index":0}]})",
      R"({"format":1,"gpus":[{"index":0,"mig_enabled":"yes"}]})",
      std::string(R"({"format":1,"driver_version":"5)") + '\0' + "\"}",  // NUL in a string
  };
  for (const auto& text : damaged) {
    WriteFile(path, text);
    auto r = LoadNodeFacts(path);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << text;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().ToString();
  }
  // Bytes flipped anywhere: either still a valid document or Corruption, never anything else.
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x20;
    WriteFile(path, bad);
    auto r = LoadNodeFacts(path);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << bad;
    }
  }
  // Unknown members are ignored (a newer agent of the same format may add some).
  WriteFile(path, R"({"format":1,"driver_version":"550.90.07","extra":[1,2]})");
  auto r = LoadNodeFacts(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->driver_version, "550.90.07");
  fs::remove_all(dir);
}

// The .tmp never replaces a good file when the write fails. Here the .tmp cannot be created (a
// directory sits at its name): this holds for root too.
TEST(NodeFactsTest, FailedWriteLeavesTheGoodFile) {
  const std::string dir = store::testing::FreshScratchDir("node_facts");
  fs::create_directories(dir);
  const std::string path = dir + "/node-facts.json";
  ASSERT_TRUE(SaveNodeFacts(path, Facts()).ok());
  const std::string before = ReadFile(path);
  fs::create_directories(path + ".tmp");
  NodeFacts next = Facts();
  next.driver_version = "550.90.07";
  Status st = SaveNodeFacts(path, next);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path + ".tmp"), std::string::npos) << st.ToString();
  EXPECT_EQ(ReadFile(path), before);
  auto r = LoadNodeFacts(path);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ(**r, Facts());
  fs::remove_all(dir);
}

TEST(NodeFactsTest, ReadOnlyDirectoryLeavesTheGoodFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root, which ignores directory permissions";
  const std::string dir = store::testing::FreshScratchDir("node_facts");
  fs::create_directories(dir);
  const std::string path = dir + "/node-facts.json";
  ASSERT_TRUE(SaveNodeFacts(path, Facts()).ok());
  const std::string before = ReadFile(path);
  ASSERT_EQ(::chmod(dir.c_str(), 0555), 0);
  NodeFacts next = Facts();
  next.driver_version = "550.90.07";
  Status st = SaveNodeFacts(path, next);
  ::chmod(dir.c_str(), 0755);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
  EXPECT_EQ(ReadFile(path), before);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  fs::remove_all(dir);
}

TEST(NodeFactsTest, UnreadableIsAnIoErrorNotCorruption) {
  const std::string dir = store::testing::FreshScratchDir("node_facts");
  fs::create_directories(dir + "/node-facts.json");  // a directory: read() fails with EISDIR
  auto r = LoadNodeFacts(dir + "/node-facts.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().ToString();
  fs::remove_all(dir);
}

// ---- the diff -------------------------------------------------------------------------------

TEST(ChangeTimelineTest, SameFactsNoEvents) {
  EXPECT_TRUE(DiffNodeFacts(Facts(), Facts()).empty());
}

TEST(ChangeTimelineTest, DriverChangeFoldsNvml) {
  NodeFacts after = Facts();
  after.driver_version = "550.90.07";
  after.nvml_version = "12.550.90.07";
  const auto events = DiffNodeFacts(Facts(), after);
  ASSERT_EQ(events.size(), 1u) << ::testing::PrintToString(Messages(events));
  EXPECT_EQ(events[0].kind, "driver_change");
  EXPECT_EQ(events[0].severity, "info");
  EXPECT_EQ(events[0].message, "driver 550.54.15 -> 550.90.07");
  EXPECT_EQ(events[0].fields_json, R"({"from":"550.54.15","to":"550.90.07","what":"driver"})");
  EXPECT_FALSE(events[0].gpu_index.has_value());
  EXPECT_EQ(events[0].gpu_uuid, "");
}

TEST(ChangeTimelineTest, CudaChange) {
  NodeFacts after = Facts();
  after.driver_version = "560.35.03";
  after.cuda_version = "12.6";
  const auto events = DiffNodeFacts(Facts(), after);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].message, "driver 550.54.15 -> 560.35.03");
  EXPECT_EQ(events[1].kind, "driver_change");
  EXPECT_EQ(events[1].message, "CUDA 12.4 -> 12.6 (the CUDA version the driver supports)");
  EXPECT_EQ(events[1].fields_json, R"({"from":"12.4","to":"12.6","what":"cuda"})");
}

TEST(ChangeTimelineTest, NvmlChangeAloneIsAnEvent) {
  NodeFacts after = Facts();
  after.nvml_version = "12.550.54.16";
  const auto events = DiffNodeFacts(Facts(), after);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, "driver_change");
  EXPECT_EQ(events[0].message, "NVML 12.550.54.15 -> 12.550.54.16");
  EXPECT_EQ(events[0].fields_json, R"({"from":"12.550.54.15","to":"12.550.54.16","what":"nvml"})");
}

TEST(ChangeTimelineTest, KernelChange) {
  NodeFacts after = Facts();
  after.kernel_release = "5.15.0-94-generic";
  const auto events = DiffNodeFacts(Facts(), after);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, "driver_change");
  EXPECT_EQ(events[0].message, "kernel 5.15.0-91-generic -> 5.15.0-94-generic");
  EXPECT_EQ(events[0].fields_json,
            R"({"from":"5.15.0-91-generic","to":"5.15.0-94-generic","what":"kernel"})");
}

TEST(ChangeTimelineTest, ConfigAndAgentChanges) {
  NodeFacts after = Facts();
  after.config_hash = ConfigHash("interval=2s");
  after.agent_version = "0.4.0";
  const auto events = DiffNodeFacts(Facts(), after);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, "config_change");
  EXPECT_EQ(events[0].severity, "info");
  EXPECT_EQ(events[0].message, "configuration changed (hash " + ConfigHash("interval=1s") + " -> " +
                                   ConfigHash("interval=2s") + ")");
  EXPECT_EQ(events[0].fields_json, R"({"from":")" + ConfigHash("interval=1s") + R"(","to":")" +
                                       ConfigHash("interval=2s") + R"(","what":"config"})");
  EXPECT_EQ(events[1].kind, "config_change");
  EXPECT_EQ(events[1].message, "gpuwatch 0.3.0 -> 0.4.0");
  EXPECT_EQ(events[1].fields_json, R"({"from":"0.3.0","to":"0.4.0","what":"agent"})");
}

TEST(ChangeTimelineTest, UnknownIsNotAChange) {
  NodeFacts unknown;  // NVML did not start, nothing else known
  EXPECT_TRUE(DiffNodeFacts(Facts(), unknown).empty());
  EXPECT_TRUE(DiffNodeFacts(unknown, Facts()).empty());
  NodeFacts no_uuid = Facts();  // a field unknown on one GPU
  no_uuid.gpus[1].uuid = "";
  no_uuid.gpus[2].vbios_version = "";
  EXPECT_TRUE(DiffNodeFacts(Facts(), no_uuid).empty())
      << ::testing::PrintToString(Messages(DiffNodeFacts(Facts(), no_uuid)));
}

TEST(ChangeTimelineTest, SwappedCardIsReplaced) {
  NodeFacts after = Facts();
  after.gpus[2].uuid = "GPU-eeee";
  after.gpus[2].name = "NVIDIA H100 PCIe";
  const auto events = DiffNodeFacts(Facts(), after);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, "topology_change");
  EXPECT_EQ(events[0].severity, "warning");
  EXPECT_EQ(events[0].message,
            "GPU 2 replaced: NVIDIA H100 80GB HBM3 GPU-cccc at 00000000:3a:00.0 -> "
            "NVIDIA H100 PCIe GPU-eeee at 00000000:3a:00.0");
  EXPECT_EQ(events[0].fields_json,
            R"({"from":"GPU-cccc","gpu":2,"name":"NVIDIA H100 PCIe",)"
            R"("pci_bus_id":"00000000:3a:00.0","to":"GPU-eeee","uuid":"GPU-eeee",)"
            R"("what":"gpu_replaced"})");
  EXPECT_EQ(events[0].gpu_index, 2u);
  EXPECT_EQ(events[0].gpu_uuid, "GPU-eeee");
}

TEST(ChangeTimelineTest, RemovedCardIsOneRemovalNotACascade) {
  // GPU 2 left; the card behind it is enumerated as GPU 2 now.
  NodeFacts after = Facts();
  after.gpus.erase(after.gpus.begin() + 2);
  after.gpus[2].index = 2;
  const auto events = DiffNodeFacts(Facts(), after);
  EXPECT_EQ(Messages(events),
            (std::vector<std::string>{
                "GPU count 4 -> 3",
                "GPU 2 removed: NVIDIA H100 80GB HBM3 GPU-cccc at 00000000:3a:00.0",
                "GPU 2 moved: NVIDIA H100 80GB HBM3 GPU-dddd was GPU 3 at 00000000:5d:00.0, is "
                "GPU 2 at 00000000:5d:00.0",
            }));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, "topology_change");
  EXPECT_EQ(events[0].severity, "warning");
  EXPECT_EQ(events[0].fields_json, R"({"from":4,"to":3,"what":"gpu_count"})");
  EXPECT_FALSE(events[0].gpu_index.has_value());
  EXPECT_EQ(events[1].fields_json,
            R"({"gpu":2,"name":"NVIDIA H100 80GB HBM3","pci_bus_id":"00000000:3a:00.0",)"
            R"("uuid":"GPU-cccc","what":"gpu_removed"})");
  EXPECT_EQ(events[1].gpu_uuid, "GPU-cccc");
  EXPECT_EQ(events[2].fields_json,
            R"({"from":"00000000:5d:00.0","from_index":3,"gpu":2,"to":"00000000:5d:00.0",)"
            R"("to_index":2,"uuid":"GPU-dddd","what":"gpu_moved"})");
  for (const auto& e : events) EXPECT_EQ(e.kind, "topology_change");
}

TEST(ChangeTimelineTest, AddedCard) {
  NodeFacts before = Facts();
  before.gpus.pop_back();
  const auto events = DiffNodeFacts(before, Facts());
  EXPECT_EQ(Messages(events), (std::vector<std::string>{
                                  "GPU count 3 -> 4",
                                  "GPU 3 added: NVIDIA H100 80GB HBM3 GPU-dddd at 00000000:5d:00.0",
                              }));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].gpu_index, 3u);
  EXPECT_EQ(events[1].fields_json,
            R"({"gpu":3,"name":"NVIDIA H100 80GB HBM3","pci_bus_id":"00000000:5d:00.0",)"
            R"("uuid":"GPU-dddd","what":"gpu_added"})");
}

TEST(ChangeTimelineTest, CardInAnotherSlot) {
  // The same card answers at another PCI address (moved to another slot).
  NodeFacts after = Facts();
  after.gpus[1].pci_bus_id = "00000000:9a:00.0";
  const auto events = DiffNodeFacts(Facts(), after);
  EXPECT_EQ(Messages(events),
            (std::vector<std::string>{"GPU 1 moved: NVIDIA H100 80GB HBM3 GPU-bbbb was GPU 1 at "
                                      "00000000:2a:00.0, is GPU 1 at 00000000:9a:00.0"}));
}

TEST(ChangeTimelineTest, MigModeToggled) {
  NodeFacts after = Facts();
  after.gpus[3].mig_enabled = true;
  auto events = DiffNodeFacts(Facts(), after);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, "topology_change");
  EXPECT_EQ(events[0].severity, "warning");
  EXPECT_EQ(events[0].message, "GPU 3 MIG mode enabled");
  EXPECT_EQ(events[0].fields_json,
            R"({"from":"disabled","gpu":3,"to":"enabled","uuid":"GPU-dddd","what":"mig"})");
  EXPECT_EQ(events[0].gpu_index, 3u);
  events = DiffNodeFacts(after, Facts());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].message, "GPU 3 MIG mode disabled");
}

TEST(ChangeTimelineTest, VbiosUpdate) {
  NodeFacts after = Facts();
  after.gpus[0].vbios_version = "96.00.99.00.01";
  const auto events = DiffNodeFacts(Facts(), after);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, "driver_change");
  EXPECT_EQ(events[0].severity, "info");
  EXPECT_EQ(events[0].message, "GPU 0 VBIOS 96.00.74.00.01 -> 96.00.99.00.01");
  EXPECT_EQ(events[0].fields_json,
            R"({"from":"96.00.74.00.01","gpu":0,"to":"96.00.99.00.01","uuid":"GPU-aaaa",)"
            R"("what":"vbios"})");
}

TEST(ChangeTimelineTest, GpuSetUnknownOnOneSide) {
  NodeFacts after = Facts();
  after.gpus_known = false;
  after.gpus.clear();
  EXPECT_TRUE(DiffNodeFacts(Facts(), after).empty());
  EXPECT_TRUE(DiffNodeFacts(after, Facts()).empty());
  NodeFacts none = Facts();  // known to have no GPUs: every card is gone
  none.gpus.clear();
  EXPECT_EQ(DiffNodeFacts(Facts(), none).size(), 5u);
}

TEST(ChangeTimelineTest, EverythingAtOnceInAFixedOrder) {
  NodeFacts after = Facts();
  after.driver_version = "560.35.03";
  after.cuda_version = "12.6";
  after.nvml_version = "12.560.35.03";
  after.kernel_release = "6.8.0-45-generic";
  after.config_hash = ConfigHash("x");
  after.agent_version = "0.4.0";
  after.gpus[0].mig_enabled = true;
  after.gpus[0].vbios_version = "96.00.99.00.01";
  after.gpus[1].uuid = "GPU-ffff";
  after.gpus.push_back(Gpu(4, "GPU-9999", "00000000:ba:00.0"));
  const auto events = DiffNodeFacts(Facts(), after);
  std::vector<std::string> what;
  for (const auto& e : events) {
    what.push_back(e.kind + "/" + nlohmann::json::parse(e.fields_json)["what"].get<std::string>());
  }
  EXPECT_EQ(what, (std::vector<std::string>{
                      "driver_change/driver", "driver_change/cuda", "driver_change/kernel",
                      "topology_change/gpu_count", "topology_change/mig", "driver_change/vbios",
                      "topology_change/gpu_replaced", "topology_change/gpu_added",
                      "config_change/config", "config_change/agent"}));
  EXPECT_EQ(DiffNodeFacts(Facts(), after), events);  // deterministic
}

TEST(ChangeTimelineTest, EventRecordsAreValidStoreEvents) {
  NodeFacts after = Facts();
  after.driver_version = "560.35.03";
  after.gpus[2].uuid = "GPU-eeee";
  for (const auto& e : DiffNodeFacts(Facts(), after)) {
    const store::EventRecord r = ToEventRecord(e, 1'700'000'000'000, "gpu-a01");
    EXPECT_TRUE(store::ValidateEvent(r).ok()) << store::ValidateEvent(r).ToString();
    EXPECT_EQ(r.kind, e.kind);
    EXPECT_EQ(r.node, "gpu-a01");
    EXPECT_EQ(r.gpu, e.gpu_uuid);
    EXPECT_EQ(r.message, e.message);
    EXPECT_EQ(r.fields_json, e.fields_json);
  }
  NcclVersionTracker t;
  ASSERT_FALSE(t.Observe("tmpl", "j1", "2.18.3+cuda12.2").has_value());
  auto e = t.Observe("tmpl", "j2", "2.21.5+cuda12.4");
  ASSERT_TRUE(e.has_value());
  const store::EventRecord r = ToEventRecord(*e, 1'700'000'000'000, "gpu-a01", "j2");
  EXPECT_TRUE(store::ValidateEvent(r).ok());
  EXPECT_EQ(r.job, "j2");
}

// ---- NCCL versions --------------------------------------------------------------------------

TEST(NcclVersionTest, HandWrittenLines) {
  const std::vector<std::pair<std::string, std::string>> match = {
      {"gpu-a01:41233:41233 [0] NCCL INFO NCCL version 2.18.3+cuda12.2", "2.18.3+cuda12.2"},
      {"node031:1936469:1936469 [7] NCCL INFO NCCL version 2.21.5+cuda12.4\r", "2.21.5+cuda12.4"},
      {"host-1:5:6 [-1] NCCL INFO NCCL version 2.19.3", "2.19.3"},  // no CUDA in the build name
      {"NCCL version 2.18.5+cuda12.0", "2.18.5+cuda12.0"},
      {"NCCL version 2.18.5+cuda12.0   ", "2.18.5+cuda12.0"},
      {"[1,0]<stdout>:NCCL version 2.4.2+cuda10.0", "2.4.2+cuda10.0"},
      {"[1,0]<stdout>:gpu6:1407:1407 [0] NCCL INFO NCCL version 2.4.2+cuda10.0", "2.4.2+cuda10.0"},
      {"> NCCL version 2.7.6+cuda11.1", "2.7.6+cuda11.1"},
      {"[0] NCCL version 2.7.6+cuda11.1", "2.7.6+cuda11.1"},
      {"[80746] NCCL version 2.7.6+cuda11.1", "2.7.6+cuda11.1"},
      {" 2025-02-18 12:54 NCCL version 2.21.5+cuda12.4", "2.21.5+cuda12.4"},
      {"    NCCL version 2.21.5+cuda12.4", "2.21.5+cuda12.4"},
      {"(RayWorkerWrapper pid=248, ip=10.1.160.68) h:1:2 [0] NCCL INFO NCCL version "
       "2.20.5+cuda12.4",
       "2.20.5+cuda12.4"},
  };
  for (const auto& [line, want] : match) {
    EXPECT_EQ(ParseNcclVersionLine(line), std::optional<std::string>(want)) << line;
  }
  const std::vector<std::string> no_match = {
      "",
      "NCCL version",
      "NCCL version ",
      "node2:14159:14159 [0] NCCL INFO cudaDriverVersion 12020",
      "definitley-not-a-banana:2274:2274 [0] NCCL INFO NCCL git version unknown unknown",
      "dgxh100-4:460770:460842 [0] NCCL INFO Using non-device net plugin version 0",
      "INFO 09-12 23:40:47 pynccl.py:63] vLLM is using nccl==2.20.5",
      "NCCL version 2.18.5",  // the bare form always names its CUDA
      "NCCL version 2.18+cuda12.0",
      "NCCL version v2.18.5+cuda12.0",
      "Using NCCL version 2.18.5+cuda12.0 in the build",
      "The NCCL version 2.18.5+cuda12.0",
      "NCCL version 2.18.5+cuda12.0 is broken",
      "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL "
      "version 2.7.8",
      "torch.distributed.DistBackendError: NCCL error, NCCL version 2.19.3",
      "gpu-a01:41233:41233 [0] NCCL WARN NCCL version 2.18.3+cuda12.2 mismatch",
      "gpu-a01:41233 [0] NCCL INFO NCCL version 2.18.3",  // no tid: not NCCL's prefix
      "gpu-a01:41233:41233 NCCL INFO NCCL version 2.18.3",
  };
  for (const auto& line : no_match) {
    EXPECT_EQ(ParseNcclVersionLine(line), std::nullopt) << line;
  }
}

std::string RealNcclDir() { return std::string(GPUWATCH_SOURCE_DIR) + "/../shared/real/nccl"; }

TEST(NcclVersionTest, EveryRealNcclLog) {
  if (!fs::is_directory(RealNcclDir())) {
    GTEST_SKIP() << RealNcclDir() << " is absent: real-capture tests need ../shared";
  }
  // file -> {line number (1-based) -> version}, found with grep -n 'NCCL version' and read by
  // eye ("NCCL git version …" is not the banner).
  using Found = std::map<size_t, std::string>;
  const std::map<std::string, Found> want = {
      {"aikitoria38_4090_plus_rtx6000ada_nccl2312_no_ib_socket.log", {{6, "2.31.2+cuda13.3"}}},
      {"nccl1052_h800_2node_roce_mlx5_4_completion_error.log", {{6, "2.18.5+cuda12.0"}}},
      {"nccl1235_4gpu_node_p2p_ipc_read_multinode_error.log", {}},
      {"nccl1409_watchdog_broadcast_vs_allreduce_mismatch.log", {}},
      {"nccl1538_k8s_worker_p2p_cumem.log", {}},
      {"nccl1609_h800_4rank_nvls_timeout_issue.log", {}},
      {"nccl1610_watchdog_alltoall_timeout_socket_errors.log", {}},
      {"nccl1817_8gpu_single_process_p2p_direct_pointer_p2p_slower_than_shm.log", {}},
      {"nccl224_horovod_mpirun_roce_34nics_nccl242.log", {{2, "2.4.2+cuda10.0"}}},
      {"nccl707_a100_ib_mixed_roce_p2p_loc_shm_disabled_gdr_fail.log", {{12, "2.7.6+cuda11.1"}}},
      {"nccl892_h800_8gpu_single_process_trees_ring_order.log", {}},
      {"nccltests185_dgxh100_2node_roce_ibv_modify_qp_unreachable.log", {{5, "2.19.3+cuda12.3"}}},
      {"nccltests213_8rank_1node_comm_trees.log", {}},
      {"nccltests287_2x5090_socket_nccl2251_error.log", {{9, "2.25.1+cuda12.8"}}},
      {"nccltests307_8x4090_roce_bond_slow_allreduce.log", {{7, "2.21.5+cuda12.4"}}},
      {"pytorch40273_2gpu_socket_nccl_warn_topo_realpath_unhandled_system_error.log",
       {{4, "2.4.2+cuda9.0"}}},
      // vLLM's own "vLLM is using nccl==2.20.5" is not NCCL's banner.
      {"vllm8447_2node_pp_ib_hang.log", {}},
  };
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(RealNcclDir())) {
    const std::string name = entry.path().filename().string();
    auto it = want.find(name);
    if (it == want.end()) {
      ADD_FAILURE() << "new capture " << name << ": add the NCCL versions it holds to this test";
      continue;
    }
    ++files;
    std::ifstream in(entry.path());
    Found got;
    size_t n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (auto v = ParseNcclVersionLine(line)) got[n] = *v;
    }
    EXPECT_EQ(got, it->second) << name;
  }
  EXPECT_EQ(files, want.size());
}

TEST(NcclVersionTrackerTest, FirstSightSameAndChange) {
  NcclVersionTracker t;
  EXPECT_EQ(t.Observe("llama-8b", "100", "2.18.3"), std::nullopt);  // first sight
  EXPECT_EQ(t.Observe("llama-8b", "100", "2.18.3"), std::nullopt);  // another rank
  EXPECT_EQ(t.Observe("llama-8b", "101", "2.18.3"), std::nullopt);  // same version
  EXPECT_EQ(t.TemplateVersion("llama-8b"), "2.18.3");
  auto e = t.Observe("llama-8b", "102", "2.21.5");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, "driver_change");
  EXPECT_EQ(e->severity, "info");
  EXPECT_EQ(e->message,
            "job 102 (template llama-8b) runs NCCL 2.21.5, the previous job of this template ran "
            "2.18.3");
  EXPECT_EQ(e->fields_json,
            R"({"from":"2.18.3","job":"102","previous_job":"101","template":"llama-8b",)"
            R"("to":"2.21.5","what":"nccl"})");
  EXPECT_FALSE(e->gpu_index.has_value());
  EXPECT_EQ(t.Observe("llama-8b", "102", "2.21.5"), std::nullopt);  // its other ranks
  EXPECT_EQ(t.TemplateVersion("llama-8b"), "2.21.5");
  EXPECT_EQ(t.Observe("other", "103", "2.18.3"), std::nullopt);  // another template: first sight
  EXPECT_EQ(t.Observe("", "104", "2.18.3"), std::nullopt);       // no template
  EXPECT_EQ(t.Observe("llama-8b", "105", ""), std::nullopt);     // no version
  EXPECT_EQ(t.templates(), 2u);
  // No job id: each call is a job of its own.
  e = t.Observe("other", "", "2.19.3");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message,
            "a job (template other) runs NCCL 2.19.3, the previous job of this template ran "
            "2.18.3");
}

TEST(NcclVersionTrackerTest, MismatchInsideAJob) {
  NcclVersionTracker t;
  for (int rank = 0; rank < 7; ++rank) {
    EXPECT_EQ(t.Observe("gpt", "200", "2.18.3+cuda12.2"), std::nullopt);
  }
  auto e = t.Observe("gpt", "200", "2.21.5+cuda12.4");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, "driver_change");
  EXPECT_EQ(e->severity, "warning");
  EXPECT_EQ(e->message,
            "ranks of job 200 (template gpt) run different NCCL versions: 2.18.3+cuda12.2 on 7 "
            "ranks, 2.21.5+cuda12.4 on 1 rank");
  EXPECT_EQ(e->fields_json, R"({"job":"200","template":"gpt","versions":{"2.18.3+cuda12.2":7,)"
                            R"("2.21.5+cuda12.4":1},"what":"nccl_mismatch"})");
  EXPECT_EQ(t.Observe("gpt", "200", "2.21.5+cuda12.4"), std::nullopt);  // known already
  e = t.Observe("gpt", "200", "2.19.3+cuda12.3");                       // a third version
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message,
            "ranks of job 200 (template gpt) run different NCCL versions: 2.18.3+cuda12.2 on 7 "
            "ranks, 2.19.3+cuda12.3 on 1 rank, 2.21.5+cuda12.4 on 2 ranks");
  EXPECT_EQ(t.JobVersions("200"),
            (std::map<std::string, size_t>{
                {"2.18.3+cuda12.2", 7}, {"2.19.3+cuda12.3", 1}, {"2.21.5+cuda12.4", 2}}));
  // The template remembers the version the job started with.
  EXPECT_EQ(t.TemplateVersion("gpt"), "2.18.3+cuda12.2");
  t.ForgetJob("200");
  EXPECT_TRUE(t.JobVersions("200").empty());
  EXPECT_EQ(t.jobs(), 0u);
}

TEST(NcclVersionTrackerTest, BoundedLeastRecentlySeenFirst) {
  NcclVersionTracker t(/*max_templates=*/3, /*max_jobs=*/2);
  EXPECT_EQ(t.Observe("a", "1", "2.18.3"), std::nullopt);
  EXPECT_EQ(t.Observe("b", "2", "2.18.3"), std::nullopt);
  EXPECT_EQ(t.Observe("c", "3", "2.18.3"), std::nullopt);
  EXPECT_EQ(t.Observe("a", "4", "2.18.3"), std::nullopt);  // a is fresh again
  EXPECT_EQ(t.Observe("d", "5", "2.18.3"), std::nullopt);  // evicts b
  EXPECT_EQ(t.templates(), 3u);
  EXPECT_EQ(t.jobs(), 2u);
  EXPECT_EQ(t.TemplateVersion("b"), std::nullopt);
  EXPECT_EQ(t.TemplateVersion("a"), "2.18.3");
  EXPECT_TRUE(t.JobVersions("3").empty());  // jobs 1-3 evicted
  EXPECT_EQ(t.JobVersions("5").size(), 1u);
  // b was forgotten: its next job is a first sight again.
  EXPECT_EQ(t.Observe("b", "6", "2.21.5"), std::nullopt);
  EXPECT_TRUE(t.Observe("a", "7", "2.21.5").has_value());

  NcclVersionTracker big;
  for (int i = 0; i < 5000; ++i) {
    EXPECT_EQ(big.Observe("t" + std::to_string(i), std::to_string(i), "2.18.3"), std::nullopt);
  }
  EXPECT_EQ(big.templates(), NcclVersionTracker::kDefaultMaxTemplates);
  EXPECT_EQ(big.jobs(), NcclVersionTracker::kDefaultMaxJobs);
}

TEST(NcclVersionTrackerTest, JsonRoundTripSurvivesARestart) {
  NcclVersionTracker t(3, 3);
  ASSERT_FALSE(t.Observe("a", "1", "2.18.3").has_value());
  ASSERT_FALSE(t.Observe("b", "2", "2.19.3").has_value());
  ASSERT_FALSE(t.Observe("b", "2", "2.19.3").has_value());
  ASSERT_TRUE(t.Observe("b", "2", "2.21.5").has_value());
  ASSERT_FALSE(t.Observe("c", "3", "2.18.3").has_value());
  const std::string text = t.ToJson();
  EXPECT_EQ(text, R"({"format":1,"jobs":[{"job":"1","template":"a","versions":{"2.18.3":1}},)"
                  R"({"job":"2","template":"b","versions":{"2.19.3":2,"2.21.5":1}},)"
                  R"({"job":"3","template":"c","versions":{"2.18.3":1}}],)"
                  R"("templates":[{"job":"1","nccl":"2.18.3","template":"a"},)"
                  R"({"job":"2","nccl":"2.19.3","template":"b"},)"
                  R"({"job":"3","nccl":"2.18.3","template":"c"}]})"
                  "\n");
  auto back = NcclVersionTracker::FromJson(text, "x", 3, 3);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), text);
  // The restored tracker goes on where the old one stopped, LRU order included.
  auto e = back->Observe("b", "9", "2.21.5");
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("the previous job of this template ran 2.19.3"), std::string::npos);
  ASSERT_FALSE(back->Observe("d", "10", "2.18.3").has_value());  // evicts a, the oldest
  EXPECT_EQ(back->TemplateVersion("a"), std::nullopt);
  EXPECT_EQ(back->TemplateVersion("c"), "2.18.3");
  // Smaller bounds on restore keep the most recent entries.
  auto small = NcclVersionTracker::FromJson(text, "x", 1, 1);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->TemplateVersion("c"), "2.18.3");
  EXPECT_EQ(small->templates(), 1u);
  EXPECT_EQ(small->JobVersions("3").size(), 1u);
}

TEST(NcclVersionTrackerTest, FilesAndDamage) {
  const std::string dir = store::testing::FreshScratchDir("nccl_versions");
  fs::create_directories(dir);
  const std::string path = dir + "/nccl-versions.json";
  auto missing = LoadNcclVersions(path);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());

  NcclVersionTracker t;
  ASSERT_FALSE(t.Observe("a", "1", "2.18.3").has_value());
  ASSERT_TRUE(SaveNcclVersions(path, t).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  auto loaded = LoadNcclVersions(path);
  ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status().ToString();
  EXPECT_EQ((*loaded)->TemplateVersion("a"), "2.18.3");

  for (const std::string& bad : {
           std::string("{\"format\":1,\"templates\":["),
           std::string("{\"format\":7}"),
           std::string(R"({"format":1,"templates":{}})"),
           std::string(R"({"format":1,"templates":[{"template":"a"}]})"),
           std::string(R"({"format":1,"jobs":[{"job":"1","versions":{"2.18.3":0}}]})"),
           std::string(R"({"format":1,"jobs":[{"job":"1","versions":{"2.18.3":-1}}]})"),
           std::string(R"({"format":1,"jobs":[{"job":"1"}]})"),
           std::string(R"({"format":1,"jobs":[{"versions":{}}]})"),
       }) {
    WriteFile(path, bad);
    auto r = LoadNcclVersions(path);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << bad;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().ToString();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpuwatch::server
