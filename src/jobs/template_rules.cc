#include "jobs/template_rules.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace gpuwatch::jobs {

Result<std::vector<TemplateRule>> ParseTemplateRules(std::string_view json_text) {
  const auto doc = nlohmann::json::parse(json_text, nullptr, false);
  if (doc.is_discarded()) return Status::InvalidArgument("not JSON");
  if (!doc.is_object() || !doc.contains("templates") || !doc["templates"].is_array())
    return Status::InvalidArgument("expected {\"templates\": [...]}");
  if (doc["templates"].size() > kMaxTemplateRules)
    return Status::InvalidArgument(fmt::format("at most {} templates", kMaxTemplateRules));
  std::vector<TemplateRule> out;
  std::set<std::string> names;
  size_t i = 0;
  for (const auto& j : doc["templates"]) {
    TemplateRule r;
    const std::string where = fmt::format("templates[{}]", i++);
    if (!j.is_object()) return Status::InvalidArgument(where + ": an object");
    if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty() ||
        j["name"].get<std::string>().size() > 128)
      return Status::InvalidArgument(where + ".name: a string of 1 to 128 bytes");
    r.name = j["name"].get<std::string>();
    const std::string at = fmt::format("{} ({})", where, r.name);
    if (!names.insert(r.name).second) return Status::InvalidArgument(at + ".name: used twice");
    for (const auto& [key, v] : j.items()) {
      if (key == "name") continue;
      if (key == "user" || key == "project") {
        if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > 256)
          return Status::InvalidArgument(at + "." + key + ": a string of 1 to 256 bytes");
        (key == "user" ? r.user : r.project) = v.get<std::string>();
      } else if (key == "gpus" || key == "ranks") {
        const int64_t max = key == "gpus" ? 4096 : 1 << 24;
        if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > max)
          return Status::InvalidArgument(fmt::format("{}.{}: an integer 1..{}", at, key, max));
        (key == "gpus" ? r.gpus : r.ranks) = static_cast<uint32_t>(v.get<int64_t>());
      } else {
        return Status::InvalidArgument(at + ": unknown field '" + key +
                                       "' (name, user, project, gpus, ranks)");
      }
    }
    if (r.user.empty() && r.project.empty() && !r.gpus && !r.ranks)
      return Status::InvalidArgument(at + ": matches every job; give user, project, gpus or ranks");
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<TemplateRule>> LoadTemplateRules(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  auto rules = ParseTemplateRules(text.str());
  if (!rules.ok()) return Status::InvalidArgument(path + ": " + rules.status().message());
  return rules;
}

std::string MatchTemplate(const std::vector<TemplateRule>& rules, const std::string& user,
                          const std::string& project, std::optional<uint32_t> gpus,
                          std::optional<uint32_t> ranks) {
  for (const TemplateRule& r : rules) {
    if (!r.user.empty() && r.user != user) continue;
    if (!r.project.empty() && r.project != project) continue;
    if (r.gpus && r.gpus != gpus) continue;
    if (r.ranks && r.ranks != ranks) continue;
    return r.name;
  }
  return "";
}

}  // namespace gpuwatch::jobs
