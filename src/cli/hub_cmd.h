// `gpuwatch hub` (issue 19): the fleet's hub. The same binary and server as the agent, run with
// no collection of its own: agents push their series (remote-write) and their record streams
// (POST /api/v1/records) to it; it keeps them in its embedded store, runs the diagnosis over all
// nodes at once, and answers the same API and dashboard as an agent, for the whole fleet, plus
// /api/v1/nodes.
// Contract: gpuwatch hub --listen ADDR --data-dir DIR [--tokens FILE]
#pragma once

#include <CLI/CLI.hpp>

#include "cli/agent_flags.h"

namespace gpuwatch::cli {

// Registers the `hub` command and its flags on `app`; the flags land in `flags` (is_hub set,
// no job socket, no kernel log).
CLI::App* AddHubCommand(CLI::App* app, AgentFlags* flags);

}  // namespace gpuwatch::cli
