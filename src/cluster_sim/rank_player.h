// Rank scripts: the task-level half of a simulated node played live. Each rank of the simulated
// job becomes a script of what a real training process would tell the agent through the job
// SDK (sdk/cpp/gpuwatch.hpp) — its start, its NCCL lines, checkpoint marks, every finished step
// with its parts, its end — at the trace's times; PlayRank runs one script in a process of its
// own (`gpuwatch demo` forks one per rank), so the agent's pid attribution, liveness and
// rank_exit detection see real processes. A rank whose process vanishes in the trace (a dead
// rank) ends its process there without an `end`, as a crashed rank would.
//
// Thread-safety: RankScripts is a pure function; PlayRank blocks its calling thread for the
// length of the script.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpuwatch::cluster_sim {

struct RankAction {
  enum class Kind { kLog, kCheckpointBegin, kCheckpointEnd, kStep, kEnd, kExit };
  int64_t t_ms = 0;  // trace time
  Kind kind = Kind::kStep;
  std::string line = {};  // kLog
  // kStep: the step record's fields (NaN where absent); kEnd: the exit code in `code`.
  double duration_s = 0, samples = 0, data_wait_s = 0, comm_s = 0, checkpoint_s = 0, loss = 0;
  int64_t step = -1;
  int code = 0;
};

struct RankScript {
  std::string job, template_name, user, project;
  int rank = 0, world_size = 1, local_rank = 0;
  unsigned gpu = 0;
  uint32_t sim_pid = 0;             // the pid the simulator's proc records give this rank
  int64_t start_ms = 0;             // trace time of the job's start
  std::vector<RankAction> actions;  // by time
};

// The scripts of the ranks on `node` ("" = the first node record's), every job the node ran,
// by start and rank. Errors: an
// unreadable line.
Result<std::vector<RankScript>> RankScripts(const std::vector<std::string>& lines,
                                            const std::string& node);

// Plays `script` at wall time = trace time + offset_ms, speaking the job protocol to the agent
// at `address` (a socket path, "udp://…" or "tcp://…"). Returns when the script is over.
void PlayRank(const RankScript& script, int64_t offset_ms, const std::string& address);

}  // namespace gpuwatch::cluster_sim
