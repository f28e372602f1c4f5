// `gpuwatch record --duration D --out FILE`: the agent's records for the next D, in the trace
// format (../shared/spec/trace-format.md), from its flight recorder (/api/v1/trace). The file is
// written as FILE.tmp and renamed when complete; `.gz` compresses.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "cli/command.h"

namespace gpuwatch::cli {

struct RecordOptions {
  std::string agent_url;
  std::string out;
  int64_t duration_ms = 0;
  int64_t poll_ms = 30000;  // must stay well under the recorder's 15-minute window
  int64_t lag_ms = 5000;    // records may arrive this late (steps carry their own end time)
};

// Exit code: 0 written; 1 the agent was unreachable at the end (what was fetched is kept);
// 2 bad arguments or the file could not be written. SIGINT/SIGTERM end the recording early.
int RunRecord(const RecordOptions& o, std::ostream& out, std::ostream& err);

// `gpuwatch record --duration D --out FILE`.
void RegisterRecordCommand(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
