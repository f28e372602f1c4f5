// `gpuwatch jobs`, `gpuwatch job ID` and `gpuwatch annotate`: the agent's job API
// (/api/v1/jobs) rendered as tables, and annotations posted to /api/v1/events. The renderers
// are pure functions of the API's JSON (tested without an agent); AgentClient is the one place
// the CLI talks HTTP to a running agent.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "common/status.h"

namespace gpuwatch::cli {

// One row per job: state, source, user, template, ranks, GPUs, throughput, step p50/p95,
// data and comm shares, GPU hours.
std::string RenderJobsTable(const nlohmann::json& jobs_reply);
// The job's header and one row per rank.
std::string RenderJobTable(const nlohmann::json& job_reply);

// Percent-encodes a path segment (job ids may hold '/', spaces, anything printable).
std::string EncodePathSegment(const std::string& s);

// The agent's HTTP endpoint: "http://127.0.0.1:9470" (the default; GPUWATCH_AGENT overrides).
std::string DefaultAgentUrl();
// GET `path`: the body. Unavailable when no agent answers, NotFound on 404.
Result<std::string> AgentGet(const std::string& agent_url, const std::string& path);
// GET `path`; the body parsed as JSON. Unavailable when no agent answers, NotFound on 404.
Result<nlohmann::json> AgentGetJson(const std::string& agent_url, const std::string& path);
// POST (with a JSON body) or DELETE; the reply's JSON. A refusal carries the agent's "error".
// The token for routes that change the agent's state (server/auth.h): `token_file` when given,
// else $GPUWATCH_TOKEN_FILE, else the first readable admin.token of the default data dirs
// (/var/lib/gpuwatch, $XDG_STATE_HOME/gpuwatch or ~/.local/state/gpuwatch). Empty when none
// is found: the agent's 401 then says where its token is. A named file that cannot be read is
// an error.
Result<std::string> FindAgentToken(const std::string& token_file);

Result<nlohmann::json> AgentSendJson(const std::string& agent_url, const std::string& method,
                                     const std::string& path, const std::string& body,
                                     const std::string& token_file);
// POST one annotation event (kind "annotation"), optionally about one job.
Status AgentAnnotate(const std::string& agent_url, const std::string& text, const std::string& job,
                     const std::string& token_file);

// `gpuwatch jobs`, `gpuwatch job ID` and `gpuwatch annotate TEXT`.
void RegisterJobCommands(CLI::App* app, Commands* out);

}  // namespace gpuwatch::cli
