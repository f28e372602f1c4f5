// `gpuwatch baseline learn|list|show|import|compare` (issue 7, R13): per-template baselines in
// <data-dir>/baselines (analyze/baseline.h). Exit codes: 0 done, 1 nothing to do (learn found
// no run long enough; compare found a significant shift), 2 an error, named.
#pragma once

#include <ostream>
#include <string>

#include "cli/command.h"

namespace gpuwatch::cli {

struct BaselineCommand {
  std::string data_dir;  // baselines live in <data_dir>/baselines
  std::string trace;     // learn: the trace to learn from
  std::string job;       // learn: only this job
  std::string warmup = "2m", window = "10m";
  std::string template_name, shape;  // show
  int version = 0;                   // show: 0 = newest
  std::string file;                  // import
  std::string run_a, run_b;          // compare: a trace (FILE or FILE:JOB) or baseline:TEMPLATE[@N]
  std::string agent;                 // list: mark stale against this agent's topology and driver
  bool json = false;
};

int RunBaselineLearn(const BaselineCommand& c, std::ostream& out, std::ostream& err);
int RunBaselineList(const BaselineCommand& c, std::ostream& out, std::ostream& err);
int RunBaselineShow(const BaselineCommand& c, std::ostream& out, std::ostream& err);
int RunBaselineImport(const BaselineCommand& c, std::ostream& out, std::ostream& err);
int RunBaselineCompare(const BaselineCommand& c, std::ostream& out, std::ostream& err);

// `gpuwatch baseline learn | list | show | import | compare`.
void RegisterBaselineCommands(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
