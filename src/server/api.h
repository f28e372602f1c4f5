// Transport-agnostic JSON views of the agent state for /api/v1/*. Pure functions.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "analyze/baseline.h"
#include "server/agent_state.h"

namespace gpuwatch::server {

nlohmann::json GpusJson(const AgentState& s);
nlohmann::json ProcessesJson(const AgentState& s);
nlohmann::json CapabilitiesJson(const AgentState& s);
nlohmann::json EventsJson(const AgentState& s);
nlohmann::json EventJson(const model::GpuEvent& e);
nlohmann::json HostJson(const AgentState& s);
// The template baseline a job is judged against (LiveDiagnosis::JobBaseline), or nullopt.
using BaselineOf = std::function<std::optional<analyze::TemplateStep>(const std::string& job)>;
// GET /api/v1/jobs: {"jobs":[…]} running jobs then recent ones, each with its window statistics
// (ranks left out); GET /api/v1/jobs/<id>: one job with every rank. "baseline": the template's
// step median and p99 the diagnosis compares the job with, or null.
nlohmann::json JobsJson(const std::vector<jobs::JobView>& jobs, const std::string& socket_path,
                        const BaselineOf& baseline_of = nullptr);
nlohmann::json JobJson(const jobs::JobView& job, bool with_ranks,
                       const std::optional<analyze::TemplateStep>& baseline = std::nullopt);

// Serializes with invalid UTF-8 replaced by U+FFFD instead of throwing: strings a monitored
// process controls (comm, environment) end up in these documents.
std::string DumpJson(const nlohmann::json& j, int indent = -1);

}  // namespace gpuwatch::server
