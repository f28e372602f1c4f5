// Job templates from rules (issue 7, R13): a template is a named class of job — the SDK's
// `template` when the job says it, else the first of the operator's rules that the job's labels
// match (user, project, the GPUs it holds on this node, its ranks). The job's start record in the
// trace, its baselines and the diagnosis then all know the job by that template.
//
//   {"templates": [{"name": "nlp-8gpu", "user": "alice", "project": "nlp", "gpus": 8},
//                  {"name": "multinode-64", "ranks": 64}]}
//
// A rule with no matcher would name every job and is refused. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::jobs {

struct TemplateRule {
  std::string name;
  std::string user, project;      // "" matches any
  std::optional<uint32_t> gpus;   // GPUs the job holds on this node
  std::optional<uint32_t> ranks;  // its world size
};

inline constexpr size_t kMaxTemplateRules = 1024;

// Errors name the rule and the field: "templates[1] (nlp).gpus: an integer 1..4096".
Result<std::vector<TemplateRule>> ParseTemplateRules(std::string_view json_text);
Result<std::vector<TemplateRule>> LoadTemplateRules(const std::string& path);

// The first rule the labels match, or "" (an unknown gpus/ranks never matches a rule that asks).
std::string MatchTemplate(const std::vector<TemplateRule>& rules, const std::string& user,
                          const std::string& project, std::optional<uint32_t> gpus,
                          std::optional<uint32_t> ranks);

}  // namespace gpuwatch::jobs
