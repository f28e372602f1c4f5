// Running a short external command and reading what it prints (the Slurm prolog's scontrol,
// the accounting's sacct): bounded in time and in output, never through a shell.
//
// The child gets the caller's environment with `env` set over it (built as a new array, not
// with setenv: the agent is multithreaded and setenv is not thread-safe), stdin and stderr on
// /dev/null, and stdout on a pipe. Past `timeout` it is killed (SIGKILL) and reaped.
// Thread-safety: may be called from any thread.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpuwatch {

struct CommandOutput {
  std::string out;    // stdout, at most max_bytes (the rest is read and dropped)
  int exit_code = 0;  // 128 + signal when a signal ended it
  bool timed_out = false;
};

// argv[0] is looked up in PATH when it has no '/'. An error only when the command could not be
// started (NotFound when there is no such program); a command that failed or ran out of time
// is a CommandOutput that says so.
Result<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                 const std::vector<std::pair<std::string, std::string>>& env,
                                 std::chrono::milliseconds timeout, size_t max_bytes = 1 << 20);

// Whether `program` names an executable file, by itself or found in PATH.
bool ProgramExists(const std::string& program);

}  // namespace gpuwatch
