// `gpuwatch status` rendering: an nvidia-smi-like table with the attribution columns (user,
// container, job, visible index) and throttle reasons in words. Pure functions of the state,
// so layout is tested without a terminal.
#pragma once

#include <string>

#include "server/agent_state.h"

namespace gpuwatch::cli {

std::string RenderStatusTable(const server::AgentState& s);
std::string RenderCapabilities(const server::AgentState& s);

}  // namespace gpuwatch::cli
