// Prometheus text exposition (format 0.0.4) of an AgentState. Pure function; thread-safe.
#pragma once

#include <string>

#include "server/agent_state.h"

namespace gpuwatch::server {

// Escapes a label value per the exposition format (\\, \", \n).
std::string EscapeLabelValue(std::string_view v);
void RenderPrometheus(const AgentState& state, std::string* out);

}  // namespace gpuwatch::server
