// How cli/main.cc knows the commands: each command file registers its commands on the app,
// binding their flags into state it owns, and says how each runs once parsed. main parses the
// command line and runs the first registration whose command was parsed, so a parent comes
// after its subcommands (`topo` alone is the live matrix; `topo list` is not).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collect/gpu_source.h"
#include "common/status.h"

namespace gpuwatch::cli {

struct Command {
  CLI::App* app;  // selected when parsed
  std::function<int()> run;
};
using Commands = std::vector<Command>;

// Prints "gpuwatch: MESSAGE" on stderr and returns 2, the exit code of an error.
int Fail(const Status& st);
// The log level by name: debug, info, warning (or warn), error.
Status SetLevel(const std::string& level);
// This node's GPUs through NVML, dlopened from `nvml_lib`.
std::unique_ptr<collect::GpuSource> MakeGpuSource(const std::string& nvml_lib);

}  // namespace gpuwatch::cli
