// `gpuwatch doctor` (issue 7): a one-shot health check of this node, as a checklist of what is
// wrong and what to do — driver and NVML, every GPU answering, ECC and row-remap state, clock
// reasons and temperatures, PCIe links and NVLinks, the topology against the agent's archive,
// the NUMA placement of the processes on the GPUs, and the host clock's sync.
//
// DoctorChecks is pure (the agent's state after one round of ticks, plus the archived topology
// when there is one) so every check is unit-tested on hand-made state; RunDoctor does the I/O:
// one synchronous round of the agent's tiers, read-only on the archive (it never writes one).
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "collect/gpu_source.h"
#include "server/agent_state.h"
#include "topo/snapshot.h"

namespace gpuwatch::cli {

struct DoctorCheck {
  std::string name;    // nvml, gpus, ecc, clocks, temperature, pcie, nvlink, topology, numa, time
  std::string status;  // ok | warn | fail | skip
  std::vector<std::string> details;  // what was seen, one line each
  std::string action;                // what to do (warn / fail)
};

struct DoctorArchive {
  std::string where;                         // the archive's directory, "" without --data-dir
  std::optional<int> version;                // the newest archived version
  std::optional<topo::NodeSnapshot> latest;  // its snapshot
  std::string problem;                       // why it could not be read ("" when fine)
};

std::vector<DoctorCheck> DoctorChecks(const server::AgentState& s, const DoctorArchive& archive);

// Exit codes: 0 every check ok (or skipped), 1 a check warned or failed, 2 doctor could not run.
// `gpu`: the GPU source (NVML, or a test's); `data_dir`: the agent's, for its topology archive
// ("" skips that check).
int RunDoctor(std::unique_ptr<collect::GpuSource> gpu, const std::string& root_dir,
              const std::string& data_dir, bool json, std::ostream& out, std::ostream& err);

// `gpuwatch doctor`.
void RegisterDoctorCommand(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
