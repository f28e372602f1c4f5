// `gpuwatch explain FILE... [--json] [--node NAME]` (docs/format/explain.md): what the files say
// and the findings they support together. Exit 0 with no warning or critical finding, 1 with
// one, 2 when a file cannot be read.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "cli/command.h"

namespace gpuwatch::cli {

int RunExplain(const std::vector<std::string>& files, bool json, const std::string& node,
               std::ostream& out, std::ostream& err);

// `gpuwatch explain FILES...`.
void RegisterExplainCommand(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
