// `gpuwatch up | agent | hub | demo | status`: the commands that run the agent (cli/agent_cmd.cc).
#pragma once

#include "cli/command.h"

namespace gpuwatch::cli {

void RegisterAgentCommands(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
