// `gpuwatch slurm prolog|epilog` (issue 19): registers a Slurm job's allocation with the node's
// agent and releases it, from slurmd's Prolog and Epilog (deploy/slurm/). The scheduler is the
// authority on who owns a job, its account (project) and its GPUs; this tells the agent so,
// over the job socket as root (the agent refuses these messages from anyone else).
//
// A failing prolog drains the node and requeues the job held (slurm prolog_epilog docs,
// "Failure Handling"), so this never fails: every problem is one line on stderr (slurmd's log)
// and the exit code is 0; the whole run is bounded by --timeout.
//
// From slurmd's environment (prolog_epilog docs): SLURM_JOB_ID, SLURM_JOB_USER,
// SLURM_JOB_ACCOUNT, SLURM_JOB_GPUS ("0,1": /dev/nvidiaN minor numbers, which the agent maps
// to NVML indices) and, in the epilog, SLURM_JOB_EXIT_CODE2 ("<exit>:<signal>") or
// SLURM_JOB_EXIT_CODE (a wait() status), else scontrol's ExitCode. The submit time, for the queue
// wait, and the job's name come from `scontrol show job` when --scontrol is not "" (time-boxed; the
// docs advise against calling Slurm commands from a prolog on busy clusters: --scontrol "" skips
// it).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "cli/command.h"
#include "common/status.h"

namespace gpuwatch::cli {

struct SlurmCommand {
  std::string socket;  // the agent's job socket (default jobs::kDefaultJobSocket)
  std::string scontrol = "scontrol";
  double timeout_s = 5;
};

// What `scontrol show job` says that the environment does not.
struct ScontrolJob {
  std::optional<double> submit_s, start_s;  // Unix seconds (the text is local time)
  std::string name;
  // ExitCode=<exit>:<signal>, as an exit status (128 + signal when a signal ended it). Read in
  // the epilog when slurmd gives no SLURM_JOB_EXIT_CODE[2] (the prolog_epilog docs list those
  // for EpilogSlurmctld; a node's Epilog may not have them).
  std::optional<int> exit_code;
};
ScontrolJob ParseScontrolShowJob(const std::string& text);

using EnvFn = std::function<std::optional<std::string>(const char*)>;
// The job-protocol line (docs/job-protocol.md) for a prolog ("allocation") or an epilog
// ("release"); InvalidArgument naming the variable that is missing or malformed.
Result<std::string> SlurmMessage(bool prolog, const EnvFn& env, const ScontrolJob& sc,
                                 double now_s);

CLI::App* AddSlurmCommand(CLI::App* app, SlurmCommand* c, CLI::App** prolog, CLI::App** epilog);
// Always 0.
int RunSlurm(const SlurmCommand& c, bool prolog, std::ostream& err);

// `gpuwatch slurm prolog | epilog`.
void RegisterSlurmCommands(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
