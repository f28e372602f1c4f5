// `gpuwatch top [--agent URL] [--once|--plain]`: the full-screen terminal view of a node
// (ncursesw), fed by the agent's API; what it shows is cli/top_view.h.
#pragma once

#include <string>

#include "cli/command.h"
#include "cli/top_view.h"

namespace gpuwatch::cli {

struct TopCommand {
  std::string agent_url;
  bool once = false;   // print one table and exit
  bool plain = false;  // print a table every refresh, no terminal control
  double interval_s = 1.0;
  std::string job, user;  // initial filters
};

// Runs the view until q (or SIGINT/SIGTERM); the exit status. Falls back to --plain, saying
// so, when stdout is not a terminal or the terminal cannot be driven (TERM unset or dumb).
int RunTop(const TopCommand& c);

// One snapshot from the agent: live, or `offset_s` seconds back through its query API.
Result<top::Snapshot> FetchTopSnapshot(const std::string& agent_url, int64_t offset_s);

// `gpuwatch top`.
void RegisterTopCommand(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
