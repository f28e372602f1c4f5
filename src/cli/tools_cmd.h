// `gpuwatch docs metrics | limits` (generated documentation) and `gpuwatch token new` (a line
// for a --tokens file).
#pragma once

#include "cli/command.h"

namespace gpuwatch::cli {

void RegisterToolCommands(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
