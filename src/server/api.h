// Transport-agnostic JSON views of the agent state for /api/v1/*. Pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "server/agent_state.h"

namespace gpuwatch::server {

nlohmann::json GpusJson(const AgentState& s);
nlohmann::json ProcessesJson(const AgentState& s);
nlohmann::json CapabilitiesJson(const AgentState& s);
nlohmann::json EventsJson(const AgentState& s);
nlohmann::json EventJson(const model::GpuEvent& e);
nlohmann::json HostJson(const AgentState& s);

}  // namespace gpuwatch::server
