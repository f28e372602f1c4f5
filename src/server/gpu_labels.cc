#include "server/gpu_labels.h"

namespace gpuwatch::server {

std::vector<std::pair<std::string, std::string>> GpuLabelSet(const AgentState& s,
                                                             const model::GpuStaticInfo& g) {
  // dcgm-exporter's `device` is the /dev/nvidiaN node: the minor number, not the NVML index.
  const unsigned dev = g.minor_number.value_or(g.index);
  return {{"gpu", std::to_string(g.index)},
          {"UUID", g.uuid},
          {"pci_bus_id", g.pci_bus_id},
          {"device", "nvidia" + std::to_string(dev)},
          {s.model_label, g.name},
          {"Hostname", s.hostname},
          {"DCGM_FI_DRIVER_VERSION", s.system.driver_version}};
}

}  // namespace gpuwatch::server
