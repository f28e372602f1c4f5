#include "server/user_rules.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "query/engine.h"
#include "query/promql.h"
#include "server/scrape_labels.h"

namespace gpuwatch::server {
namespace {

using nlohmann::json;

constexpr size_t kMaxRules = 256;
constexpr size_t kMaxPlacesPerRule = 10000;

// "90s", "2m", "1h", "500ms", "0".
std::optional<int64_t> ParseDuration(const std::string& s) {
  if (s == "0") return 0;
  static const std::pair<const char*, int64_t> kUnits[] = {
      {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
  for (const auto& [unit, ms] : kUnits) {
    const std::string_view u(unit);
    if (s.size() <= u.size() || s.compare(s.size() - u.size(), u.size(), u) != 0) continue;
    auto n = ParseInt<int64_t>(std::string_view(s).substr(0, s.size() - u.size()));
    if (!n || *n < 0 || *n > 365LL * 86400000 / ms) return std::nullopt;
    // "5ms" also ends in "s": the loop tries "ms" first.
    return *n * ms;
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<UserRule>> ParseUserRules(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return Status::InvalidArgument("not JSON");
  if (!j.is_object() || !j.contains("rules") || !j["rules"].is_array())
    return Status::InvalidArgument("expected {\"rules\": [...]}");
  if (j["rules"].size() > kMaxRules)
    return Status::InvalidArgument(fmt::format("at most {} rules", kMaxRules));
  std::vector<UserRule> out;
  std::map<std::string, int> names;
  for (size_t i = 0; i < j["rules"].size(); ++i) {
    const json& r = j["rules"][i];
    std::string where = fmt::format("rules[{}]", i);
    if (!r.is_object()) return Status::InvalidArgument(where + ": not an object");
    if (r.contains("name") && r["name"].is_string())
      where += " (" + r["name"].get<std::string>().substr(0, 64) + ")";
    auto bad = [&](const std::string& field, const std::string& why) {
      return Status::InvalidArgument(where + "." + field + ": " + why);
    };
    UserRule rule;
    for (const auto& [key, v] : r.items()) {
      auto str = [&]() -> Result<std::string> {
        if (!v.is_string()) return bad(key, "must be a string");
        return v.get<std::string>();
      };
      auto s = str();
      if (!s.ok()) return s.status();
      if (key == "name") {
        rule.name = *s;
      } else if (key == "expr") {
        rule.expr = *s;
      } else if (key == "for" || key == "clear_after") {
        auto ms = ParseDuration(*s);
        if (!ms) return bad(key, "'" + *s + "' is not a duration (90s, 2m, 1h)");
        (key == "for" ? rule.for_ms : rule.clear_after_ms) = *ms;
      } else if (key == "severity") {
        auto sev = model::SeverityFromName(*s);
        if (!sev) return bad(key, "'" + *s + "': info, warning or critical");
        rule.severity = *sev;
      } else if (key == "summary") {
        rule.summary = *s;
      } else if (key == "action") {
        rule.action = *s;
      } else {
        return bad(key, "unknown field (name, expr, for, clear_after, severity, summary, action)");
      }
    }
    if (rule.name.empty() || rule.name.size() > 64 ||
        rule.name.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != std::string::npos)
      return bad("name", "required, 1 to 64 of [A-Za-z0-9_]");
    if (names[rule.name]++ > 0) return bad("name", "'" + rule.name + "' is used twice");
    if (rule.expr.empty()) return bad("expr", "required");
    auto parsed = query::ParseExpr(rule.expr);
    if (!parsed.ok()) return bad("expr", parsed.status().message());
    if ((*parsed)->type != query::ValueType::kVector)
      return bad("expr", "must give an instant vector (one series per place)");
    if (rule.summary.empty()) rule.summary = rule.name + " holds ({{value}})";
    out.push_back(std::move(rule));
  }
  return out;
}

Result<std::vector<UserRule>> LoadUserRules(const std::string& path) {
  const FileReadResult f = ReadSmallFile(path, size_t{4} << 20);
  if (!f.ok)
    return Status::InvalidArgument("--rules " + path + ": " + std::string(std::strerror(f.err)));
  auto rules = ParseUserRules(f.data);
  if (!rules.ok())
    return Status::InvalidArgument("--rules " + path + ": " + rules.status().message());
  return rules;
}

std::string FillTemplate(std::string_view tmpl, const store::Labels& labels, double value) {
  std::string out;
  size_t i = 0;
  while (i < tmpl.size()) {
    const size_t open = tmpl.find("{{", i);
    if (open == std::string_view::npos) break;
    const size_t close = tmpl.find("}}", open + 2);
    if (close == std::string_view::npos) break;
    out.append(tmpl.substr(i, open - i));
    std::string_view key = tmpl.substr(open + 2, close - open - 2);
    while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
    while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
    if (key == "value") {
      out += fmt::format("{:.4g}", value);
    } else {
      out += store::LabelValue(labels, key);
    }
    i = close + 2;
  }
  out.append(tmpl.substr(i));
  return out;
}

UserRuleEvaluator::UserRuleEvaluator(std::vector<UserRule> rules, std::string default_node)
    : rules_(std::move(rules)), node_(std::move(default_node)), places_(rules_.size()) {}

std::map<std::string, int64_t> UserRuleEvaluator::Holds() const {
  std::map<std::string, int64_t> out;
  for (const UserRule& r : rules_) out["user:" + r.name] = r.clear_after_ms;
  return out;
}

std::vector<analyze::Finding> UserRuleEvaluator::Evaluate(const store::Querier& q, int64_t now_ms) {
  std::vector<analyze::Finding> out;
  last_error_.clear();
  for (size_t i = 0; i < rules_.size(); ++i) {
    const UserRule& rule = rules_[i];
    auto& places = places_[i];
    auto res = query::InstantQuery(q, query::EngineOptions{}, rule.expr, now_ms);
    if (!res.ok()) {
      // A failed query is no clearance: what fired stays as it was until the next answer.
      last_error_ = "rule " + rule.name + ": " + res.status().message();
      for (const auto& [key, p] : places) {
        if (p.fired) out.push_back(p.finding);
      }
      continue;
    }
    {
      for (const query::InstantSample& s : res->vector) {
        const store::Labels& labels = s.metric;
        const std::string key = store::LabelsToString(labels);
        auto it = places.find(key);
        if (it == places.end()) {
          if (places.size() >= kMaxPlacesPerRule) continue;
          it = places.emplace(key, Place{}).first;
          it->second.pending_since_ms = now_ms;
        }
        Place& p = it->second;
        p.last_true_ms = now_ms;
        analyze::Finding& f = p.finding;
        f.cause = model::Cause::kUserRule;
        f.rule = rule.name;
        f.severity = rule.severity;
        const std::string_view host = store::LabelValue(labels, "Hostname");
        f.node = host.empty() ? node_ : std::string(host);
        if (auto gpu = ParseInt<int>(store::LabelValue(labels, "gpu"))) f.gpu = *gpu;
        // `job="gpuwatch"` is the scrape job every stored agent series carries, not a
        // training job.
        if (auto job = store::LabelValue(labels, "job"); !job.empty() && job != kScrapeJobName)
          f.job = std::string(job);
        if (auto rank = ParseInt<int>(store::LabelValue(labels, "rank"))) f.rank = *rank;
        for (const char* nic : {"interface", "device"}) {
          if (auto v = store::LabelValue(labels, nic); !v.empty()) f.nic = std::string(v);
        }
        f.summary = FillTemplate(rule.summary, labels, s.value);
        f.evidence = {fmt::format("{} = {:.6g} for {}", rule.expr, s.value, key)};
        f.action = rule.action;
        if (now_ms - p.pending_since_ms >= rule.for_ms) p.fired = true;
      }
    }
    // Places that fired and are within their hysteresis are findings; the rest are forgotten
    // once they stop holding for clear_after.
    for (auto it = places.begin(); it != places.end();) {
      Place& p = it->second;
      // Pending, it must hold at every evaluation (`for` starts over when it does not); fired,
      // it clears only after clear_after without holding.
      if ((!p.fired && p.last_true_ms != now_ms) || now_ms - p.last_true_ms > rule.clear_after_ms) {
        it = places.erase(it);
        continue;
      }
      if (p.fired) {
        p.finding.first_seen = static_cast<double>(p.pending_since_ms) / 1000;
        p.finding.last_seen = static_cast<double>(p.last_true_ms) / 1000;
        out.push_back(p.finding);
      }
      ++it;
    }
  }
  return out;
}

}  // namespace gpuwatch::server
