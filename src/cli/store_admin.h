// `gpuwatch store stats|check|compact`: the store's admin commands, as functions that write
// their report to a stream and return the process exit code (main only parses flags).
// `stats` and `check` (without quarantining) open the store read-only, so they may run beside
// a live agent.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "cli/command.h"
#include "store/store.h"

namespace gpuwatch::cli {

// {"series", "samples", "bytes_on_disk", "bytes_per_sample", "tiers": {"raw", "1m", "1h"}, …}
nlohmann::json StoreStatsJson(const store::StoreStats& st);

int RunStoreStats(const std::string& data_dir, bool json, std::ostream& out, std::ostream& err);
// Exit code 1 when damage was found, 2 when the check itself could not run.
int RunStoreCheck(const std::string& data_dir, bool quarantine, std::ostream& out,
                  std::ostream& err);
int RunStoreCompact(const std::string& data_dir, const store::StoreOptions& options,
                    std::ostream& out, std::ostream& err);

// `gpuwatch store stats | check | compact`.
void RegisterStoreCommands(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
