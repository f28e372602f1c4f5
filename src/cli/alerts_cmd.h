// `gpuwatch alerts` and `gpuwatch silence add|list|expire` (issue 7): the running agent's alerts
// and silences (docs/format/alerts.md) from the command line. Exit codes: alerts 0 none firing,
// 1 some firing; silence 0 done; 2 the agent could not be asked or refused (its reason printed).
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "cli/command.h"

namespace gpuwatch::cli {

struct SilenceCommand {
  std::string agent;
  std::string node, job, cause;
  std::optional<int> gpu;
  std::string duration = "2h";
  std::string comment, created_by;
  std::string token_file;  // --token-file (cli/job_view.h FindAgentToken)
  bool maintenance = false;
  std::string id;  // expire
  bool json = false;
};

int RunAlerts(const std::string& agent, bool json, std::ostream& out, std::ostream& err);
int RunSilenceAdd(const SilenceCommand& c, std::ostream& out, std::ostream& err);
int RunSilenceList(const SilenceCommand& c, std::ostream& out, std::ostream& err);
int RunSilenceExpire(const SilenceCommand& c, std::ostream& out, std::ostream& err);

// `gpuwatch alerts`, `gpuwatch silence add | list | expire` and `gpuwatch rules export`.
void RegisterAlertCommands(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
