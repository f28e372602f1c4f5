// The agent against the mock NVML, loaded through the production dlopen path.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "collect/nvml_source.h"
#include "model/metric_catalog.h"
#include "server/agent.h"
#include "server/api.h"
#include "server/exposition.h"
#include "store/event_store.h"
#include "store/head.h"

namespace gpuwatch {
namespace {

using model::GpuMetric;
using model::Support;

const std::string kMock = std::string(GPUWATCH_BINARY_DIR) + "/libgpuwatch-mock-nvml.so";
const std::string kFixtures = std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures";

std::unique_ptr<server::Agent> MakeAgent(const std::string& scenario,
                                         const std::string& lib = kMock) {
  setenv("GPUWATCH_MOCK_NVML", scenario.c_str(), 1);
  collect::NvmlSourceOptions o;
  o.library_path = lib;
  o.lost_retry_interval = std::chrono::milliseconds(200);
  server::AgentOptions ao;
  ao.hostname = "test-node";
  ao.root_dir = kFixtures + "/root";
  auto agent = std::make_unique<server::Agent>(ao, std::make_unique<collect::NvmlSource>(o));
  EXPECT_TRUE(agent->Init().ok());
  return agent;
}

std::string Metrics(const server::Agent& a) {
  std::string out;
  a.WithState([&](const server::AgentState& s) {
    server::RenderPrometheus(s, &out);
    return 0;
  });
  return out;
}

TEST(AgentMockTest, EightH100AllFields) {
  auto agent = MakeAgent("8xH100");
  agent->TickGpu();
  agent->TickGpu();  // GPM needs two samples
  agent->WithState([](const server::AgentState& s) {
    EXPECT_TRUE(s.gpu_available);
    EXPECT_EQ(s.devices.size(), 8u);
    EXPECT_EQ(s.system.driver_version, "550.90.07");
    std::set<std::string> uuids, buses;
    for (const auto& d : s.devices) {
      uuids.insert(d.uuid);
      buses.insert(d.pci_bus_id);
      EXPECT_EQ(d.name.rfind("NVIDIA H100", 0), 0u) << d.name;
      EXPECT_EQ(d.nvlink_count, 18u);
      EXPECT_TRUE(d.gpm_supported);
    }
    EXPECT_EQ(uuids.size(), 8u);
    EXPECT_EQ(buses.size(), 8u);
    for (const auto& smp : s.gpu_samples) {
      EXPECT_FALSE(smp.lost);
      for (GpuMetric m :
           {GpuMetric::kUtilGpuPct, GpuMetric::kMemUsedMib, GpuMetric::kMemTotalMib,
            GpuMetric::kTempC, GpuMetric::kMemTempC, GpuMetric::kPowerW, GpuMetric::kEnergyMj,
            GpuMetric::kSmClockMhz, GpuMetric::kMaxSmClockMhz, GpuMetric::kClockEventReasons,
            GpuMetric::kEccDbeVolatile, GpuMetric::kPcieGen, GpuMetric::kNvlinkActiveLinks,
            GpuMetric::kNvlinkTxBytes, GpuMetric::kGpmSmActive, GpuMetric::kGpmTensorActive})
        EXPECT_TRUE(smp.Get(m).has_value()) << model::Describe(m).name;
      auto util = *smp.Get(GpuMetric::kUtilGpuPct);
      EXPECT_GE(util, 0);
      EXPECT_LE(util, 100);
      auto sm = *smp.Get(GpuMetric::kGpmSmActive);
      EXPECT_GE(sm, 0);
      EXPECT_LE(sm, 1.0) << "GPM percent must be exported as a ratio";
      EXPECT_FALSE(smp.Get(GpuMetric::kFanPct).has_value()) << "H100 SXM has no fan reading";
      EXPECT_EQ(smp.nvlinks.size(), 18u);
    }
    // The capability list says why the fan is missing, once, not as a zero.
    const auto& fan = s.caps[0].metrics[model::Idx(GpuMetric::kFanPct)];
    EXPECT_EQ(fan.support, Support::kNotSupported);
    EXPECT_EQ(fan.reason, "NVML_ERROR_NOT_SUPPORTED");
    return 0;
  });
  const auto m = Metrics(*agent);
  EXPECT_NE(m.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"7\""), std::string::npos);
  EXPECT_EQ(m.find("DCGM_FI_DEV_FAN_SPEED"), std::string::npos);
}

TEST(AgentMockTest, ConsumerCardLacksEccAndNvlink) {
  auto agent = MakeAgent("8x4090");
  agent->TickGpu();
  agent->WithState([](const server::AgentState& s) {
    EXPECT_EQ(s.devices.size(), 8u);
    const auto& smp = s.gpu_samples[0];
    EXPECT_FALSE(smp.Get(GpuMetric::kEccDbeVolatile).has_value());
    EXPECT_FALSE(smp.Get(GpuMetric::kNvlinkActiveLinks).has_value());
    EXPECT_FALSE(smp.Get(GpuMetric::kGpmSmActive).has_value());
    EXPECT_TRUE(smp.Get(GpuMetric::kFanPct).has_value());
    EXPECT_EQ(s.caps[0].metrics[model::Idx(GpuMetric::kEccDbeVolatile)].support,
              Support::kNotSupported);
    EXPECT_EQ(s.caps[0].features[static_cast<size_t>(model::GpuFeature::kGpm)].support,
              Support::kNotSupported);
    return 0;
  });
}

TEST(AgentMockTest, MissingLibraryStillServesHost) {
  auto agent = MakeAgent("8xH100", "/nonexistent/libnvidia-ml.so.1");
  agent->TickGpu();
  agent->TickHost();
  agent->WithState([](const server::AgentState& s) {
    EXPECT_FALSE(s.gpu_available);
    EXPECT_NE(s.gpu_unavailable_reason.find("cannot load NVML library"), std::string::npos);
    EXPECT_TRUE(s.host.has_value());
    return 0;
  });
  EXPECT_NE(Metrics(*agent).find("gpuwatch_host_memory_total_bytes"), std::string::npos);
}

TEST(AgentMockTest, GpuLostMidRunAndXidEvents) {
  auto agent = MakeAgent(kFixtures + "/mock/lost_and_xid.json");
  agent->Start();
  bool done = false;
  for (int i = 0; i < 100 && !done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    done = agent->WithState([](const server::AgentState& s) {
      return s.gpu_samples.size() == 4 && s.gpu_samples[2].lost && s.xid_counts.count({2, 79}) &&
             s.xid_counts.count({1, 31});
    });
  }
  agent->Stop();
  ASSERT_TRUE(done) << "GPU 2 was not lost or the XIDs did not arrive";
  agent->WithState([](const server::AgentState& s) {
    EXPECT_EQ(s.xid_counts.at({2, 79}), 1u);
    EXPECT_EQ(s.xid_counts.at({1, 31}), 1u);
    EXPECT_TRUE(s.gpu_samples[0].Get(GpuMetric::kUtilGpuPct).has_value())
        << "other GPUs keep being served";
    int lost_events = 0;
    for (const auto& e : s.recent_events) {
      if (e.kind == model::GpuEventKind::kGpuLost) {
        ++lost_events;
        EXPECT_EQ(e.gpu_index, 2u);
        EXPECT_EQ(e.uuid, s.devices[2].uuid);
      }
      if (e.kind == model::GpuEventKind::kXid && e.code == 79) {
        EXPECT_NE(e.text.find("fallen off the bus"), std::string::npos) << e.text;
      }
    }
    EXPECT_EQ(lost_events, 1) << "a lost GPU is one event, not one per tick";
    return 0;
  });
}

// With a store, every hardware tick is kept under the /metrics names and labels (R20).
TEST(AgentMockTest, TicksAreKeptInTheStore) {
  const std::string dir = ::testing::TempDir() + "/agent_store_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  {
    store::StoreOptions o;
    o.background = false;
    auto head = store::Store::Open(dir, o);
    ASSERT_TRUE(head.ok()) << head.status().ToString();
    auto agent = MakeAgent("8xH100");
    agent->SetStore(head->get());
    agent->TickHost();
    agent->TickGpu();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    agent->TickGpu();
    auto q = *(*head)->SelectRaw(
        *store::ParseSelector("DCGM_FI_DEV_GPU_UTIL{Hostname=\"test-node\"}"), 0, INT64_MAX);
    ASSERT_EQ(q.size(), 8u);
    EXPECT_EQ(q[0].samples.size(), 2u);
    EXPECT_FALSE(store::LabelValue(q[0].labels, "UUID").empty());
    EXPECT_EQ(
        (*head)
            ->SelectRaw(*store::ParseSelector("gpuwatch_host_memory_used_bytes"), 0, INT64_MAX)
            ->size(),
        1u);
  }
  store::StoreOptions o;
  o.background = false;
  auto reopened = store::Store::Open(dir, o);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->SelectRaw(*store::ParseSelector("gpuwatch_gpu_up"), 0, INT64_MAX)->size(),
            8u);
  reopened->reset();
  std::filesystem::remove_all(dir);
}

// R8: the topology check archives the first snapshot quietly, then each change as a new
// version with one topology_change event per change; an unchanged node writes nothing.
TEST(AgentMockTest, TopologyCheckArchivesAndReportsChanges) {
  const std::string dir = ::testing::TempDir() + "/agent_topo_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto events = store::EventStore::Open(dir + "/events");
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  const std::string degraded = dir + "/degraded.json";
  std::ofstream(degraded) << R"({"shape": "8xH100", "gpus": [
      {"gpu": 2, "values": {"pcie_width": 8}},
      {"gpu": 5, "values": {"nvlink_active_links": 17}}]})";
  auto run = [&](const std::string& scenario) {
    setenv("GPUWATCH_MOCK_NVML", scenario.c_str(), 1);
    collect::NvmlSourceOptions o;
    o.library_path = kMock;
    server::AgentOptions ao;
    ao.hostname = "test-node";
    ao.root_dir = kFixtures + "/root";
    ao.data_dir = dir;
    server::Agent agent(ao, std::make_unique<collect::NvmlSource>(o));
    EXPECT_TRUE(agent.Init().ok());
    agent.SetEventStore(events->get());
    agent.TickTopology();
    return agent.WithState([](const server::AgentState& s) {
      EXPECT_TRUE(s.topology != nullptr);
      return std::tuple(s.topology_version, s.baselines_stale_before_ms,
                        s.topology ? s.topology->matrix.gpu_links[5][0] : "");
    });
  };
  auto topology_events = [&] {
    store::EventQuery q;
    q.end_ms = INT64_MAX;
    q.kinds = {"topology_change"};
    auto r = (*events)->Query(q);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : std::vector<store::EventRecord>{};
  };

  auto [v1, stale1, cell1] = run("8xH100");
  EXPECT_EQ(v1, 1);
  EXPECT_GT(stale1, 0);
  EXPECT_EQ(cell1, "NV18");
  EXPECT_TRUE(topology_events().empty());

  auto [v2, stale2, cell2] = run(degraded);
  EXPECT_EQ(v2, 2);
  EXPECT_GE(stale2, stale1);
  EXPECT_EQ(cell2, "NV17");
  std::vector<store::EventRecord> ev = topology_events();
  ASSERT_EQ(ev.size(), 2u);
  std::set<std::string> messages;
  for (const auto& e : ev) {
    messages.insert(e.message);
    EXPECT_EQ(e.severity, "warning");
    EXPECT_NE(e.fields_json.find("\"baselines_stale\":true"), std::string::npos);
    EXPECT_NE(e.fields_json.find("\"topology_version\":2"), std::string::npos);
    EXPECT_FALSE(e.gpu.empty());
  }
  EXPECT_EQ(messages.count("GPU2 PCIe width x16 → x8 (max x16)"), 1u);
  EXPECT_EQ(messages.count("GPU5 NVLink 17 to nvswitch 0000:c6:00.0 went down"), 1u)
      << *messages.begin();

  auto [v3, stale3, cell3] = run(degraded);  // nothing changed since v2
  EXPECT_EQ(v3, 2);
  EXPECT_EQ(stale3, stale2);
  EXPECT_EQ(topology_events().size(), 2u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir + "/topology"),
                          std::filesystem::directory_iterator{}),
            2);
  events->reset();
  std::filesystem::remove_all(dir);
}

// An XID storm is counted in full but kept and logged once per second.
TEST(AgentMockTest, XidStormIsCountedButFolded) {
  const std::string path = ::testing::TempDir() + "/xid_storm.json";
  {
    std::ofstream f(path);
    f << "{\"shape\": \"2xH100\", \"xid\": [";
    for (int i = 0; i < 50; ++i) f << "{\"at_s\": 0.1, \"gpu\": 0, \"code\": 13},";
    f << "{\"at_s\": 1.6, \"gpu\": 0, \"code\": 13}]}\n";
  }
  auto agent = MakeAgent(path);
  for (int i = 0; i < 100; ++i) {
    agent->PollEvents(50);
    if (agent->WithState([](const server::AgentState& s) {
          return s.xid_counts.count({0, 13}) && s.xid_counts.at({0, 13}) == 51;
        }))
      break;
  }
  agent->WithState([](const server::AgentState& s) {
    EXPECT_EQ(s.xid_counts.at({0, 13}), 51u) << "every XID is counted";
    std::vector<std::string> texts;
    for (const auto& e : s.recent_events)
      if (e.kind == model::GpuEventKind::kXid) texts.push_back(e.text);
    EXPECT_EQ(texts.size(), 2u) << "the storm is kept as one event per second";
    if (texts.size() == 2) {
      EXPECT_NE(texts[1].find("(49 more like it in the"), std::string::npos) << texts[1];
    }
    return 0;
  });
  std::remove(path.c_str());
}

// Every NVML error code from every device query: no crash, the agent keeps serving.
class AllErrorsTest : public ::testing::TestWithParam<int> {};

TEST_P(AllErrorsTest, NoCrashAndHostStillServed) {
  const std::string path =
      ::testing::TempDir() + "/all_errors_" + std::to_string(GetParam()) + ".json";
  {
    std::ofstream f(path);
    f << "{\"shape\": \"2xH100\", \"all_errors\": " << GetParam() << "}\n";
  }
  auto agent = MakeAgent(path);
  for (int i = 0; i < 3; ++i) {
    agent->TickGpu();
    agent->TickProcesses();
    agent->PollEvents(0);
  }
  agent->TickHost();
  const auto m = Metrics(*agent);
  EXPECT_NE(m.find("gpuwatch_host_memory_total_bytes"), std::string::npos);
  agent->WithState([](const server::AgentState& s) {
    for (const auto& smp : s.gpu_samples) EXPECT_FALSE(smp.Get(GpuMetric::kUtilGpuPct).has_value());
    return 0;
  });
  auto caps =
      agent->WithState([](const server::AgentState& s) { return server::CapabilitiesJson(s); });
  EXPECT_TRUE(caps.is_object());
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(EveryNvmlError, AllErrorsTest,
                         ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                           17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
                                           999));

}  // namespace
}  // namespace gpuwatch
