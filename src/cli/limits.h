// Every resource limit of the agent by name (docs/limits.md): its default, where it is set and
// the metric that counts what it refused. Dedicated flags set the common ones (--query-timeout,
// --max-series, …); `--limit NAME=VALUE` (repeatable) sets any of them. The table is the one
// place a limit is named, and `gpuwatch docs limits` renders docs/limits.md's table from it, so
// the documented defaults are the code's.
// Thread-safety: pure functions over the targets given.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "jobs/job_listener.h"
#include "server/agent.h"
#include "server/http_server.h"
#include "store/event_store.h"

namespace gpuwatch::cli {

// What `--limit` writes into; a null target skips the limits that live there.
struct LimitTargets {
  server::HttpOptions* http = nullptr;
  server::AgentOptions* agent = nullptr;
  jobs::JobListenerOptions* listener = nullptr;
  store::EventStoreOptions* events = nullptr;
};

// Applies "name=value" specs; values take units by kind (a count: 1000; bytes: 64MiB; a
// duration: 30s). An unknown name or a bad value is InvalidArgument naming it.
Status ApplyLimits(const std::vector<std::string>& specs, const LimitTargets& targets);

// Sets the limit whose dedicated flag is `flag` ("--query-timeout") from its text, with the
// same units and bounds as --limit. A bad value is InvalidArgument "bad --flag 'value': …".
Status ApplyLimitFlag(std::string_view flag, const std::string& value, const LimitTargets& targets);

// docs/limits.md's table: every limit with its default, flag and refusal metric.
std::string RenderLimitsTable();

}  // namespace gpuwatch::cli
