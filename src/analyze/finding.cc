#include "analyze/finding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

namespace gpuwatch::analyze {

std::string Finding::CauseText() const {
  return cause == Cause::kUserRule ? "user:" + rule : std::string(model::CauseName(cause));
}

Finding MakeFinding(Cause cause, Severity severity, const std::string& node,
                    std::optional<int> gpu) {
  Finding f;
  f.cause = cause;
  f.severity = severity;
  f.node = node;
  f.gpu = gpu;
  return f;
}

std::optional<CauseRef> ParseCauseText(std::string_view text) {
  if (text.rfind("user:", 0) == 0 && text.size() > 5) {
    return CauseRef{Cause::kUserRule, std::string(text.substr(5))};
  }
  if (auto c = model::CauseFromName(text)) return CauseRef{*c, ""};
  return std::nullopt;
}

namespace {

double Round(double v, double unit) { return std::round(v / unit) * unit; }

nlohmann::json ImpactToJson(const Impact& i) {
  nlohmann::json j = {{"job", i.job}};
  if (i.reference_step_s > 0 && i.step_s > 0) {
    j["step_s"] = Round(i.step_s, 1e-4);
    j["reference_step_s"] = Round(i.reference_step_s, 1e-4);
    j["reference"] = i.reference;
    j["slowdown_pct"] = Round(i.SlowdownShare() * 100, 0.1);
  }
  if (i.slowest_rank) j["slowest_rank"] = *i.slowest_rank;
  if (i.slowest_gpu) j["slowest_gpu"] = *i.slowest_gpu;
  if (i.explained_share) j["explained_pct"] = Round(*i.explained_share * 100, 1);
  return j;
}

Result<Impact> ImpactFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Status::InvalidArgument("finding field 'impact' must be an object");
  Impact i;
  if (j.contains("job") && j["job"].is_string()) i.job = j["job"].get<std::string>();
  for (auto [key, out] :
       {std::pair{"step_s", &i.step_s}, std::pair{"reference_step_s", &i.reference_step_s}}) {
    if (j.contains(key) && j[key].is_number()) *out = j[key].get<double>();
  }
  if (j.contains("reference") && j["reference"].is_string()) {
    i.reference = j["reference"].get<std::string>();
  }
  for (auto [key, out] :
       {std::pair{"slowest_rank", &i.slowest_rank}, std::pair{"slowest_gpu", &i.slowest_gpu}}) {
    if (j.contains(key) && j[key].is_number_integer()) *out = j[key].get<int>();
  }
  if (j.contains("explained_pct") && j["explained_pct"].is_number()) {
    i.explained_share = j["explained_pct"].get<double>() / 100;
  }
  return i;
}

}  // namespace

nlohmann::json FindingToJson(const Finding& f) {
  nlohmann::json j;
  j["cause"] = f.CauseText();
  j["layer"] = model::LayerName(f.layer());
  j["severity"] = model::SeverityName(f.severity);
  j["node"] = f.node;
  if (f.gpu) j["gpu"] = *f.gpu;
  if (f.peer_gpu) j["peer_gpu"] = *f.peer_gpu;
  if (f.nic) j["nic"] = *f.nic;
  if (f.job) j["job"] = *f.job;
  if (f.rank) j["rank"] = *f.rank;
  if (f.code) j["code"] = *f.code;
  j["first_seen"] = f.first_seen;
  j["last_seen"] = f.last_seen;
  j["summary"] = f.summary;
  j["evidence"] = f.evidence;
  j["action"] = f.action;
  if (f.impact) j["impact"] = ImpactToJson(*f.impact);
  if (!f.ruled_out.empty()) {
    nlohmann::json r = nlohmann::json::array();
    for (Cause c : f.ruled_out) r.push_back(model::CauseName(c));
    j["ruled_out"] = std::move(r);
  }
  return j;
}

Result<Finding> FindingFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Status::InvalidArgument("a finding is a JSON object");
  Finding f;
  auto bad = [](const char* key, const char* want) {
    return Status::InvalidArgument(fmt::format("finding field '{}' must be {}", key, want));
  };
  std::string cause, severity;
  for (auto [key, out] :
       {std::pair{"cause", &cause}, std::pair{"severity", &severity}, std::pair{"node", &f.node},
        std::pair{"summary", &f.summary}, std::pair{"action", &f.action}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_string()) return bad(key, "a string");
    *out = j[key].get<std::string>();
  }
  auto ref = ParseCauseText(cause);
  if (!ref) return bad("cause", "a cause of findings.md or user:<rule>");
  f.cause = ref->cause;
  f.rule = std::move(ref->rule);
  auto sev = model::SeverityFromName(severity);
  if (!sev) return bad("severity", "info, warning or critical");
  f.severity = *sev;
  for (auto [key, out] :
       {std::pair{"gpu", &f.gpu}, std::pair{"peer_gpu", &f.peer_gpu}, std::pair{"rank", &f.rank}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0 || j[key].get<int64_t>() > 1 << 30)
      return bad(key, "an integer >= 0");
    *out = static_cast<int>(j[key].get<int64_t>());
  }
  for (auto [key, out] : {std::pair{"job", &f.job}, std::pair{"nic", &f.nic}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_string()) return bad(key, "a string");
    *out = j[key].get<std::string>();
  }
  if (j.contains("code")) {
    if (!j["code"].is_number_integer()) return bad("code", "an integer");
    f.code = j["code"].get<int64_t>();
  }
  for (auto [key, out] :
       {std::pair{"first_seen", &f.first_seen}, std::pair{"last_seen", &f.last_seen}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number() || !std::isfinite(j[key].get<double>())) return bad(key, "a number");
    *out = j[key].get<double>();
  }
  if (j.contains("evidence")) {
    if (!j["evidence"].is_array()) return bad("evidence", "an array of strings");
    for (const auto& e : j["evidence"]) {
      if (!e.is_string()) return bad("evidence", "an array of strings");
      f.evidence.push_back(e.get<std::string>());
    }
  }
  if (j.contains("impact")) {
    auto impact = ImpactFromJson(j["impact"]);
    if (!impact.ok()) return impact.status();
    f.impact = std::move(*impact);
  }
  if (j.contains("ruled_out")) {
    if (!j["ruled_out"].is_array()) return bad("ruled_out", "an array of causes");
    for (const auto& e : j["ruled_out"]) {
      auto c = e.is_string() ? model::CauseFromName(e.get<std::string>()) : std::nullopt;
      if (!c) return bad("ruled_out", "an array of causes");
      f.ruled_out.push_back(*c);
    }
  }
  return f;
}

bool Explains(const Finding& cause, const Finding& symptom,
              const std::set<std::string>& symptom_job_nodes) {
  if (cause.is_info() || &cause == &symptom) return false;
  model::PlaceMatch where;
  where.same_node = cause.node == symptom.node;
  where.same_gpu = cause.gpu && cause.gpu == symptom.gpu;
  where.same_job = cause.job && cause.job == symptom.job;
  where.cause_on_symptom_job_node = symptom_job_nodes.count(cause.node) != 0;
  if (!model::CauseExplains(cause.cause, symptom.cause, where)) return false;
  // The symptom began while the cause was there (either's evidence may lead the other's).
  return symptom.first_seen >= cause.first_seen - model::kExplainSlackS &&
         symptom.first_seen <= std::max(cause.last_seen, cause.first_seen) + model::kExplainSlackS;
}

nlohmann::json FindingsDocument(std::vector<Finding> findings, const nlohmann::json& stats) {
  std::sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    const std::string_view ca = model::CauseName(a.cause), cb = model::CauseName(b.cause);
    return std::tie(a.first_seen, ca, a.node, a.gpu) < std::tie(b.first_seen, cb, b.node, b.gpu);
  });
  nlohmann::json list = nlohmann::json::array();
  for (const Finding& f : findings) list.push_back(FindingToJson(f));
  return {{"findings", list}, {"stats", stats}};
}

}  // namespace gpuwatch::analyze
