#include "cli/status_view.h"

#include <gtest/gtest.h>

namespace gpuwatch::cli {
namespace {

using model::GpuMetric;

TEST(StatusViewTest, TableShowsAttributionAndThrottleWords) {
  server::AgentState s;
  s.hostname = "n1";
  s.gpu_available = true;
  s.system.driver_version = "550.90.07";
  s.system.cuda_driver_version = "12.4";
  model::GpuStaticInfo g;
  g.index = 0;
  g.name = "NVIDIA H100 80GB HBM3";
  g.pci_bus_id = "00000000:18:00.0";
  s.devices.push_back(g);
  model::GpuSample smp;
  smp.Set(GpuMetric::kUtilGpuPct, 97);
  smp.Set(GpuMetric::kMemUsedMib, 61234);
  smp.Set(GpuMetric::kMemTotalMib, 81559);
  smp.Set(GpuMetric::kClockEventReasons, 0x4 | 0x40);
  s.gpu_samples.push_back(smp);
  model::ProcessAttribution p;
  p.pid = 4242;
  p.gpu_index = 0;
  p.user = "alice";
  p.container_id = "0123456789abcdef0123";
  p.job_id = "7781";
  p.visible_index = 1;
  p.used_memory_bytes = 1024ull * 1048576;
  p.command = "python";
  s.processes.push_back(p);
  auto out = RenderStatusTable(s);
  EXPECT_NE(out.find("sw_power_cap,hw_thermal"), std::string::npos) << out;
  EXPECT_NE(out.find("61234/81559"), std::string::npos);
  EXPECT_NE(out.find("alice"), std::string::npos);
  EXPECT_NE(out.find("0123456789ab "), std::string::npos);
  EXPECT_NE(out.find("7781"), std::string::npos);
  EXPECT_NE(out.find(" 1024 python"), std::string::npos) << out;
}

TEST(StatusViewTest, LostGpuAndNoGpu) {
  server::AgentState s;
  s.gpu_available = false;
  s.gpu_unavailable_reason = "cannot load NVML library";
  EXPECT_NE(RenderStatusTable(s).find("no GPU metrics: cannot load NVML library"),
            std::string::npos);
  s.gpu_available = true;
  model::GpuStaticInfo g;
  s.devices.push_back(g);
  model::GpuSample lost;
  lost.lost = true;
  s.gpu_samples.push_back(lost);
  EXPECT_NE(RenderStatusTable(s).find("GPU LOST"), std::string::npos);
}

}  // namespace
}  // namespace gpuwatch::cli
