// `gpuwatch report` (issue 19, R24): GPU accounting from the command line.
// Contract: gpuwatch report --by user|project|template|job --since D [--csv|--json] [--hub URL]
// It asks the hub (--hub) or the local agent (--agent, default $GPUWATCH_AGENT or
// http://127.0.0.1:9470) for GET /api/v1/accounting, or reads a recorded trace (--trace FILE,
// priced with --price MODEL=USD), and prints a table, the API's JSON or CSV.
// Exit codes: 0 done; 2 the agent could not be asked, refused, or the input was wrong.
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "cli/command.h"

namespace gpuwatch::cli {

struct ReportCommand {
  std::string by = "project";
  std::string since = "30d";
  std::string until;  // Unix seconds; "" = now (or a trace's end)
  bool csv = false, json = false;
  std::string agent;                // set by main (the shared --agent default)
  std::string hub;                  // overrides agent
  std::string trace;                // offline: a recorded trace
  std::vector<std::string> prices;  // with --trace: MODEL=USD_PER_GPU_HOUR
};

// Registers `report` on `app`; its flags land in `c`.
CLI::App* AddReportCommand(CLI::App* app, ReportCommand* c);
int RunReport(const ReportCommand& c, std::ostream& out, std::ostream& err);

void RegisterReportCommand(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
