// GpuSource: the vendor seam of the card-level line.
//
// NVML (nvml_source.h) implements it; so can any future vendor backend or a test double. The
// agent never switches on vendor type. Contract: Init() once; then Devices() is stable until
// the next Init(); Sample/Processes may be called from one collector thread while WaitEvents
// runs on another (implementations must allow exactly that concurrency). A lost GPU is
// reported in its sample (`lost`, with a GpuLost status naming why), never as a crash; the
// agent turns the transition into one gpu_lost event.
#pragma once

#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/gpu.h"
#include "topo/snapshot.h"

namespace gpuwatch::collect {

class GpuSource {
 public:
  virtual ~GpuSource() = default;

  virtual std::string_view Name() const = 0;
  // Unavailable: no library / no driver / no GPU; the agent then runs host collection only.
  virtual Status Init() = 0;
  virtual const model::SystemInfo& System() const = 0;
  virtual const std::vector<model::GpuStaticInfo>& Devices() const = 0;
  // Capabilities of device `index`, refined as fields are first read (R2).
  virtual model::GpuCapabilities Capabilities(size_t index) const = 0;

  // Fills every supported dynamic field of device `index`. A GpuLost status leaves
  // out->lost set; other per-field failures only clear that field's validity bit.
  virtual Status Sample(size_t index, int64_t time_ms, model::GpuSample* out) = 0;
  virtual Status Processes(size_t index, std::vector<model::GpuProcess>* out) = 0;
  // Blocks up to timeout_ms for XID/ECC events; appends what arrived.
  virtual Status WaitEvents(int timeout_ms, int64_t now_ms, std::vector<model::GpuEvent>* out) = 0;
  // R8: the vendor's half of a topology snapshot — each GPU's identity, PCIe link and NVLinks,
  // and the PCIe path and P2P support of every pair — appended to out->gpus, gpu_pci_paths and
  // p2p_read (out->warnings says what could not be read). Called from the collector thread.
  // A source without topology answers NotSupported and the snapshot has sysfs facts only.
  virtual Status ProbeTopology(topo::NodeSnapshot* out) {
    (void)out;
    return Status::NotSupported(std::string(Name()) + " has no topology probe");
  }
};

}  // namespace gpuwatch::collect
