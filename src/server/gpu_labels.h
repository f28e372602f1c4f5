// The labels every per-GPU series carries, as dcgm-exporter names them: one list for /metrics
// (exposition.cc) and for the store (store_sink.cc), so a query over the past and a scrape of
// the present select the same series.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "server/agent_state.h"

namespace gpuwatch::server {

// gpu, UUID, pci_bus_id, device ("nvidia<minor>"), the model label (--model-label), Hostname,
// DCGM_FI_DRIVER_VERSION; values unescaped.
std::vector<std::pair<std::string, std::string>> GpuLabelSet(const AgentState& s,
                                                             const model::GpuStaticInfo& g);

}  // namespace gpuwatch::server
