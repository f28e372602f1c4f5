// `gpuwatch replay TRACE [--json]` and `gpuwatch eval DIR [--json]` (issue 6): a trace through
// the diagnosis, as fast as the CPU allows, and the findings of every example scenario scored
// against its truth (../shared/spec/findings.md). replay --json prints exactly the findings
// document on stdout and nothing else (what the reader counted goes to stderr).
#pragma once

#include <ostream>
#include <string>

#include "analyze/baseline.h"
#include "analyze/finding.h"
#include "cli/command.h"
#include "common/status.h"

namespace gpuwatch::cli {

struct ReplayResult {
  std::vector<analyze::Finding> findings;
  nlohmann::json stats;            // {"records": N, "ignored_records": M, …}
  std::vector<std::string> notes;  // the reader's report (unknown fields, out of order, …)
  double first_t = 0, last_t = 0;  // the trace's span
};

// Reads the whole trace through the diagnoser. An error names the file and line. speed > 0
// paces the records at `speed` times real time (the trace's own clock); 0 runs as fast as the
// CPU allows.
// `templates`: stored template baselines step_regression also judges against (replay
// --baselines).
Result<ReplayResult> ReplayTrace(const std::string& path, double speed = 0,
                                 const std::vector<analyze::TemplateStep>& templates = {});

// Exit codes: 0 the trace was read (findings or not), 2 it could not be. `serve` ("" none): a
// listen address where the findings stay open in the API after the replay, until SIGINT or
// SIGTERM. `baselines_dir` ("" none): a baseline store (gpuwatch baseline, <data-dir>/baselines)
// whose newest baseline per template and shape the job's steps are judged against too.
int RunReplay(const std::string& path, bool json, double speed, std::ostream& out,
              std::ostream& err, const std::string& serve = "",
              const std::string& baselines_dir = "");
// Serves `doc` at /api/v1/findings (job= and node= filter) on `listen` until SIGINT/SIGTERM.
Status ServeFindings(const std::string& listen, const nlohmann::json& doc, const std::string& what,
                     std::ostream& err);
// The findings of a findings.md document as text, oldest first; times relative to origin_t
// ("+12s"), or as UTC date-times when origin_t is 0.
std::string RenderFindingsText(const nlohmann::json& doc, double origin_t);
// `gpuwatch diagnose [TARGET]`: the agent's live findings, all or those of one job or node.
// Exit codes: 0 no findings, 1 findings, 2 the agent could not be asked.
int RunDiagnose(const std::string& agent_url, const std::string& target, bool json,
                std::ostream& out, std::ostream& err);
// Exit codes: 0 every scenario replayed and scored, 2 a trace or truth file failed.
int RunEval(const std::string& dir, bool json, std::ostream& out, std::ostream& err);

// `gpuwatch sim`: writes <out>.jsonl.gz and <out>.truth.json. Exit 0, or 2 on bad options.
struct SimCommand {
  std::string shape = "8xH100";
  int nodes = 1;
  std::string duration = "15m";
  uint64_t seed = 1;
  std::vector<std::string> faults;  // "thermal_throttle:gpu=3,onset=480"
  std::string out;
};
int RunSim(const SimCommand& c, std::ostream& out, std::ostream& err);

// `gpuwatch replay`, `diagnose`, `eval` and `sim`.
void RegisterReplayCommands(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
