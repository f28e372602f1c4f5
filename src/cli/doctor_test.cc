// gpuwatch doctor's checks on hand-made agent state: a healthy node passes every check, and each
// problem the checklist knows turns exactly its check to warn or fail with a line naming the GPU.
#include "cli/doctor.h"

#include <gtest/gtest.h>

#include <map>

namespace gpuwatch::cli {
namespace {

using model::GpuMetric;

server::AgentState HealthyNode(size_t gpus = 4) {
  server::AgentState s;
  s.hostname = "n1";
  s.gpu_available = true;
  s.system.driver_version = "550.54.15";
  s.system.nvml_version = "12.550.54.15";
  for (size_t i = 0; i < gpus; ++i) {
    model::GpuStaticInfo d;
    d.index = static_cast<unsigned>(i);
    d.uuid = "GPU-" + std::to_string(i);
    d.nvlink_count = 18;
    s.devices.push_back(d);
    model::GpuSample g;
    g.time_ms = 1000;
    g.Set(GpuMetric::kUtilGpuPct, 95);
    g.Set(GpuMetric::kTempC, 62);
    g.Set(GpuMetric::kMemTempC, 70);
    g.Set(GpuMetric::kClockEventReasons, 0x4);  // sw_power_cap at full load: normal
    g.Set(GpuMetric::kSmClockMhz, 1980);
    g.Set(GpuMetric::kMaxSmClockMhz, 1980);
    g.Set(GpuMetric::kEccDbeVolatile, 0);
    g.Set(GpuMetric::kEccSbeVolatile, 3);
    g.Set(GpuMetric::kRemappedRowsPending, 0);
    g.Set(GpuMetric::kRemappedRowsFailure, 0);
    g.Set(GpuMetric::kPcieWidth, 16);
    g.Set(GpuMetric::kPcieMaxWidth, 16);
    g.Set(GpuMetric::kPcieGen, 5);
    g.Set(GpuMetric::kPcieMaxGen, 5);
    g.Set(GpuMetric::kNvlinkActiveLinks, 18);
    s.gpu_samples.push_back(g);
  }
  model::HostSample h;
  h.clock_synced = true;
  h.time_source_offset_ms = 0.4;
  s.host = h;
  model::ProcessAttribution p;
  p.pid = 4242;
  p.gpu_index = 1;
  p.command = "python";
  p.cpu_numa_nodes = {0};
  p.gpu_numa_node = 0;
  s.processes.push_back(p);
  return s;
}

std::map<std::string, DoctorCheck> ByName(const std::vector<DoctorCheck>& checks) {
  std::map<std::string, DoctorCheck> out;
  for (const auto& c : checks) out[c.name] = c;
  return out;
}

// Every check but `except` is ok (or skipped); `except` has `status` and a detail containing
// `text`.
void ExpectOnly(const std::vector<DoctorCheck>& checks, const std::string& except,
                const std::string& status, const std::string& text) {
  bool found = false;
  for (const auto& c : checks) {
    if (c.name == except) {
      found = true;
      EXPECT_EQ(c.status, status) << c.name;
      ASSERT_FALSE(c.details.empty());
      bool has = false;
      for (const auto& d : c.details) has = has || d.find(text) != std::string::npos;
      EXPECT_TRUE(has) << except << ": no detail with '" << text << "': " << c.details[0];
      if (status != "ok") {
        EXPECT_FALSE(c.action.empty()) << except;
      }
    } else {
      EXPECT_TRUE(c.status == "ok" || c.status == "skip") << c.name << ": " << c.status;
    }
  }
  EXPECT_TRUE(found) << except;
}

TEST(DoctorTest, AHealthyNodePassesEveryCheck) {
  const auto checks = DoctorChecks(HealthyNode(), {});
  auto by = ByName(checks);
  for (const char* name :
       {"nvml", "gpus", "ecc", "clocks", "temperature", "pcie", "nvlink", "numa", "time"}) {
    EXPECT_EQ(by[name].status, "ok") << name;
  }
  EXPECT_EQ(by["topology"].status, "skip");  // no --data-dir
  EXPECT_NE(by["nvml"].details[0].find("550.54.15"), std::string::npos);
}

TEST(DoctorTest, EachProblemTurnsItsOwnCheck) {
  {
    auto s = HealthyNode();
    s.gpu_samples[2].lost = true;
    ExpectOnly(DoctorChecks(s, {}), "gpus", "fail", "GPU 2 (GPU-2) is lost");
  }
  {
    auto s = HealthyNode();
    s.gpu_samples[1].Set(GpuMetric::kEccDbeVolatile, 2);
    ExpectOnly(DoctorChecks(s, {}), "ecc", "fail", "GPU 1: 2 uncorrectable");
  }
  {
    auto s = HealthyNode();
    s.gpu_samples[3].Set(GpuMetric::kRemappedRowsPending, 1);
    ExpectOnly(DoctorChecks(s, {}), "ecc", "warn", "GPU 3: a row remap is pending");
  }
  {
    auto s = HealthyNode();
    s.gpu_samples[0].Set(GpuMetric::kClockEventReasons, 0x8);  // hw_slowdown
    s.gpu_samples[0].Set(GpuMetric::kSmClockMhz, 1200);
    ExpectOnly(DoctorChecks(s, {}), "clocks", "fail",
               "GPU 0: hardware slowdown active: hw_slowdown (SM 1200 of 1980 MHz)");
  }
  {
    auto s = HealthyNode();
    s.gpu_samples[2].Set(GpuMetric::kClockEventReasons, 0x20);  // sw_thermal
    ExpectOnly(DoctorChecks(s, {}), "clocks", "warn", "GPU 2: thermal slowdown active");
  }
  {
    auto s = HealthyNode();
    s.gpu_samples[1].Set(GpuMetric::kTempC, 88);
    ExpectOnly(DoctorChecks(s, {}), "temperature", "warn", "GPU 1: 88 °C");
  }
  {
    auto s = HealthyNode();
    s.gpu_samples[3].Set(GpuMetric::kPcieWidth, 8);
    ExpectOnly(DoctorChecks(s, {}), "pcie", "warn", "GPU 3: PCIe link x8 of x16");
  }
  {
    auto s = HealthyNode();
    s.gpu_samples[0].Set(GpuMetric::kNvlinkActiveLinks, 16);
    ExpectOnly(DoctorChecks(s, {}), "nvlink", "warn", "GPU 0: 16 of 18 NVLinks active");
  }
  {
    auto s = HealthyNode();
    s.processes[0].cpu_numa_nodes = {1};
    s.processes[0].job_id = "77";
    ExpectOnly(DoctorChecks(s, {}), "numa", "warn",
               "pid 4242 (python, job 77) on GPU 1 (NUMA 0) runs on CPUs of NUMA 1");
  }
  {
    auto s = HealthyNode();
    s.host->time_source_offset_ms = 250;
    ExpectOnly(DoctorChecks(s, {}), "time", "warn", "250 ms off its time source");
  }
}

TEST(DoctorTest, IdleLinkGenerationAndFullLoadPowerCapAreNotProblems) {
  auto s = HealthyNode();
  s.gpu_samples[0].Set(GpuMetric::kUtilGpuPct, 0);
  s.gpu_samples[0].Set(GpuMetric::kPcieGen, 1);  // power saving at idle
  ExpectOnly(DoctorChecks(s, {}), "nvml", "ok", "550");
  s.gpu_samples[0].Set(GpuMetric::kUtilGpuPct, 90);
  ExpectOnly(DoctorChecks(s, {}), "pcie", "warn", "GPU 0: PCIe gen 1 of 5 while 90 % busy");
}

TEST(DoctorTest, NoNvmlFailsOnceAndSkipsTheGpuChecks) {
  server::AgentState s;
  s.gpu_available = false;
  s.gpu_unavailable_reason = "cannot load NVML library libnvidia-ml.so.1";
  auto by = ByName(DoctorChecks(s, {}));
  EXPECT_EQ(by["nvml"].status, "fail");
  EXPECT_EQ(by["nvml"].details[0], s.gpu_unavailable_reason);
  for (const char* name : {"gpus", "ecc", "clocks", "temperature", "pcie", "nvlink"})
    EXPECT_EQ(by[name].status, "skip") << name;
  EXPECT_EQ(by["numa"].status, "ok");
}

TEST(DoctorTest, TopologyIsComparedWithTheArchive) {
  auto s = HealthyNode(2);
  topo::NodeSnapshot snap;
  snap.hostname = "n1";
  for (unsigned i = 0; i < 2; ++i) {
    topo::GpuFacts g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.pci_bus_id = "0000:1" + std::to_string(i) + ":00.0";
    g.pcie_width = 16;
    g.pcie_max_width = 16;
    snap.gpus.push_back(g);
  }
  topo::FinishSnapshot(&snap);
  s.topology = std::make_shared<topo::NodeSnapshot>(snap);
  DoctorArchive archive{.where = "/data/topology", .version = 3, .latest = snap, .problem = ""};
  EXPECT_EQ(ByName(DoctorChecks(s, archive))["topology"].status, "ok");

  topo::NodeSnapshot now = snap;
  now.gpus[1].pcie_width = 8;
  topo::FinishSnapshot(&now);
  s.topology = std::make_shared<topo::NodeSnapshot>(now);
  auto checks = DoctorChecks(s, archive);
  ExpectOnly(checks, "topology", "warn", "GPU1");

  archive = {
      .where = "/data/topology", .version = std::nullopt, .latest = std::nullopt, .problem = ""};
  EXPECT_EQ(ByName(DoctorChecks(s, archive))["topology"].status, "skip");
  archive.problem = "topology/v0003.json: bad JSON";
  EXPECT_EQ(ByName(DoctorChecks(s, archive))["topology"].status, "warn");
}

}  // namespace
}  // namespace gpuwatch::cli
