// gpuwatch: one binary — the agent and hub, the one-shot node commands, the job and trace tools,
// store and topology administration, accounting and generated docs. Each command file registers
// its commands (cli/command.h); this file parses the command line and runs the one given.
// Flags and the config file are parsed only in cli/; modules receive plain option structs.
#include <malloc.h>
#include <signal.h>

#include <CLI/CLI.hpp>

#include "cli/agent_cmd.h"
#include "cli/alerts_cmd.h"
#include "cli/baseline_cmd.h"
#include "cli/command.h"
#include "cli/doctor.h"
#include "cli/explain_cmd.h"
#include "cli/job_view.h"
#include "cli/linkbase_cmd.h"
#include "cli/record.h"
#include "cli/replay_cmd.h"
#include "cli/report_cmd.h"
#include "cli/slurm_cmd.h"
#include "cli/store_admin.h"
#include "cli/tools_cmd.h"
#include "cli/top_cmd.h"
#include "cli/topo_cmd.h"

#ifndef GPUWATCH_VERSION
#define GPUWATCH_VERSION "0.0.0"
#endif

namespace gpuwatch::cli {

int Main(int argc, char** argv) {
  CLI::App app{"gpuwatch — monitoring for multi-GPU training servers", "gpuwatch"};
  app.set_version_flag("--version", std::string("gpuwatch ") + GPUWATCH_VERSION);
  app.require_subcommand(1);

  // In the order `gpuwatch --help` lists them.
  Commands commands;
  for (auto* add : {&RegisterAgentCommands, &RegisterDoctorCommand, &RegisterStoreCommands,
                    &RegisterJobCommands, &RegisterTopCommand, &RegisterReportCommand,
                    &RegisterSlurmCommands, &RegisterRecordCommand, &RegisterReplayCommands,
                    &RegisterTopoCommands, &RegisterExplainCommand, &RegisterLinkbaseCommands,
                    &RegisterToolCommands, &RegisterAlertCommands, &RegisterBaselineCommands})
    add(&app, &commands);

  CLI11_PARSE(app, argc, argv);
  for (const Command& c : commands)
    if (c.app->parsed()) return c.run();
  return 1;
}

}  // namespace gpuwatch::cli

int main(int argc, char** argv) {
  // Queries build vectors of tens of MiB (a range query over every series of a node). glibc
  // would mmap each and unmap it after, paying page faults on every query; above the
  // default thresholds keep freed memory for reuse instead. And one arena for all threads:
  // with one per HTTP worker thread, each worker's first large query faults its own arena in
  // (the slow p99). Measured on a 6 h, 1280-series store (bench/store/RESULTS.md): avg over
  // every series at 60 s step p50/p99 113/180 -> 80/85 ms, one raw series 10 -> 2 ms, RSS
  // after queries 58 MiB. The agent's own threads allocate little: one arena costs nothing.
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  // Under a file-size limit (systemd's LimitFSIZE, ulimit -f) a write past it raises SIGXFSZ,
  // whose default action kills the process without a word. Ignored, the write fails with
  // EFBIG and the store reports it like a full disk (issue 17, D11).
  signal(SIGXFSZ, SIG_IGN);
  return gpuwatch::cli::Main(argc, argv);
}
