#include "server/scope.h"

#include <re2/re2.h>

#include <algorithm>

namespace gpuwatch::server {
namespace {

// An exact-match alternation: one value is an equality matcher, several a regex of the quoted
// values (the matcher anchors it).
Result<store::Matcher> OneOf(const std::string& label, const std::set<std::string>& values) {
  if (values.size() == 1)
    return store::Matcher::Make(store::MatchOp::kEqual, label, *values.begin());
  std::string re;
  for (const std::string& v : values) re += (re.empty() ? "" : "|") + RE2::QuoteMeta(v);
  return store::Matcher::Make(store::MatchOp::kRegex, label, re);
}

}  // namespace

std::string ProjectList(const std::vector<std::string>& projects) {
  std::string out;
  for (const std::string& p : projects) out += (out.empty() ? "" : ",") + p;
  return out;
}

bool ProjectInScope(const std::vector<std::string>& scope, const std::string& project) {
  return std::find(scope.begin(), scope.end(), project) != scope.end();
}

std::set<std::string> JobsInScope(const std::vector<std::string>& scope,
                                  const std::vector<jobs::JobView>& live,
                                  const store::Querier* store) {
  std::set<std::string> jobs;
  for (const jobs::JobView& j : live)
    if (ProjectInScope(scope, j.project)) jobs.insert(j.id);
  if (store && !scope.empty()) {
    auto name = store::Matcher::Make(store::MatchOp::kEqual, "__name__", "gpuwatch_job_info");
    auto project = OneOf("project", std::set<std::string>(scope.begin(), scope.end()));
    if (name.ok() && project.ok()) {
      // A store that cannot answer narrows the scope to the live jobs; it never widens it.
      auto ended = store->LabelValues("job", {*name, *project});
      if (ended.ok()) jobs.insert(ended->begin(), ended->end());
    }
  }
  return jobs;
}

void KeepJobsInScope(nlohmann::json& doc, const char* key, const std::set<std::string>& jobs) {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_array()) return;
  nlohmann::json kept = nlohmann::json::array();
  for (auto& item : doc[key]) {
    const auto it = item.find("job");
    if (it != item.end() && it->is_string() && jobs.count(it->get<std::string>()))
      kept.push_back(std::move(item));
  }
  doc[key] = std::move(kept);
}

ScopedQuerier::ScopedQuerier(const store::Querier& base, const std::set<std::string>& jobs)
    : base_(base) {
  if (jobs.empty()) return;
  auto m = OneOf("job", jobs);
  // A job id that makes no valid matcher (an RE2 program over its memory bound, with many
  // thousands of jobs) leaves the scope empty: nothing is shown rather than too much.
  if (m.ok()) scope_ = std::move(m).value();
}

std::optional<std::vector<store::Matcher>> ScopedQuerier::With(
    const std::vector<store::Matcher>& m) const {
  if (!scope_) return std::nullopt;
  std::vector<store::Matcher> out = m;
  out.push_back(*scope_);
  return out;
}

Result<std::vector<store::SeriesSamples>> ScopedQuerier::SelectRaw(
    const std::vector<store::Matcher>& matchers, int64_t mint_ms, int64_t maxt_ms) const {
  auto m = With(matchers);
  if (!m) return std::vector<store::SeriesSamples>{};
  return base_.SelectRaw(*m, mint_ms, maxt_ms);
}

Result<std::vector<store::SeriesRollups>> ScopedQuerier::SelectRollups(
    store::Tier tier, const std::vector<store::Matcher>& matchers, int64_t mint_ms, int64_t maxt_ms,
    uint32_t parts) const {
  auto m = With(matchers);
  if (!m) return std::vector<store::SeriesRollups>{};
  return base_.SelectRollups(tier, *m, mint_ms, maxt_ms, parts);
}

Result<std::vector<store::Labels>> ScopedQuerier::Series(
    const std::vector<store::Matcher>& matchers, int64_t mint_ms, int64_t maxt_ms) const {
  auto m = With(matchers);
  if (!m) return std::vector<store::Labels>{};
  return base_.Series(*m, mint_ms, maxt_ms);
}

Result<std::vector<std::string>> ScopedQuerier::LabelNames(
    const std::vector<store::Matcher>& matchers) const {
  auto m = With(matchers);
  if (!m) return std::vector<std::string>{};
  return base_.LabelNames(*m);
}

Result<std::vector<std::string>> ScopedQuerier::LabelValues(
    const std::string& name, const std::vector<store::Matcher>& matchers) const {
  auto m = With(matchers);
  if (!m) return std::vector<std::string>{};
  return base_.LabelValues(name, *m);
}

}  // namespace gpuwatch::server
