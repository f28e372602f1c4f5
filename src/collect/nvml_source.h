// NvmlSource: the GpuSource backed by NVML (real driver or the project's mock).
//
// Each field is probed on first use; NOT_SUPPORTED / NO_PERMISSION / a missing symbol marks it
// unsupported in the GPU's capability list and it is never asked again (R2). GPU_IS_LOST marks
// the GPU lost (the sample says so; the agent turns the transition into an event), and it is
// re-probed every
// `lost_retry_interval`; the other GPUs keep being served. Threading: Sample/Processes from
// one collector thread, WaitEvents from one event thread, Capabilities/Devices from any.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collect/gpu_source.h"
#include "collect/nvml_library.h"

namespace gpuwatch::collect {

struct NvmlSourceOptions {
  std::string library_path = kDefaultNvmlLibrary;
  std::chrono::milliseconds lost_retry_interval{30000};
};

// True for the R535 drivers whose _v3 process query overruns a v2-sized array.
bool DriverHasBrokenProcessV3(std::string_view driver_version);

class NvmlSource final : public GpuSource {
 public:
  explicit NvmlSource(NvmlSourceOptions options);
  ~NvmlSource() override;

  std::string_view Name() const override { return "nvml"; }
  Status Init() override;
  const model::SystemInfo& System() const override { return system_; }
  const std::vector<model::GpuStaticInfo>& Devices() const override { return devices_; }
  model::GpuCapabilities Capabilities(size_t index) const override;
  Status Sample(size_t index, int64_t time_ms, model::GpuSample* out) override;
  Status Processes(size_t index, std::vector<model::GpuProcess>* out) override;
  Status WaitEvents(int timeout_ms, int64_t now_ms, std::vector<model::GpuEvent>* out) override;
  Status ProbeTopology(topo::NodeSnapshot* out) override;

 private:
  struct Device;

  void ProbeStatic(Device& d);
  void ReadStaticValues(Device& d);  // REQUIRES: caps_mu_ held, or Init()
  void DiscoverNvLinks(Device& d);
  void SetupGpm(Device& d);
  void SetupMig(Device& d);
  void SampleNvLinks(Device& d, model::GpuSample* out);
  void SampleFieldValues(Device& d, model::GpuSample* out);
  void SampleGpm(Device& d, model::GpuSample* out);
  void SampleMig(Device& d, model::GpuSample* out);
  void MarkLost(Device& d, int64_t time_ms, nvmlReturn_t rc);

  NvmlSourceOptions options_;
  std::unique_ptr<NvmlLibrary> lib_;
  bool initialized_ = false;
  model::SystemInfo system_;
  std::vector<model::GpuStaticInfo> devices_;
  std::vector<std::unique_ptr<Device>> state_;
  nvmlEventSet_t event_set_ = nullptr;
  bool v3_process_layout_broken_ = false;

  mutable std::mutex caps_mu_;  // guards Device::caps
};

}  // namespace gpuwatch::collect
