#include "server/scope.h"

#include <re2/re2.h>

#include <algorithm>

#include "server/scrape_labels.h"

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

std::vector<GpuGrant> GpuGrantsOf(const accounting::Ledger& ledger,
                                  const std::set<std::string>& jobs) {
  std::vector<GpuGrant> out;
  for (const accounting::Segment& seg : ledger.SegmentsOf(jobs))
    for (unsigned g : seg.gpus)
      out.push_back({seg.node, g, seg.start_ms, seg.end_ms < 0 ? INT64_MAX : seg.end_ms});
  return out;
}

namespace {

using Intervals = std::vector<std::pair<int64_t, int64_t>>;

bool Inside(const Intervals& iv, int64_t from_ms, int64_t to_ms) {
  for (const auto& [a, b] : iv)
    if (a <= from_ms && to_ms <= b) return true;
  return false;
}

bool Overlaps(const Intervals& iv, int64_t from_ms, int64_t to_ms) {
  for (const auto& [a, b] : iv)
    if (a <= to_ms && from_ms <= b) return true;
  return false;
}

template <typename T>
void SortByLabels(std::vector<T>& v) {
  std::sort(v.begin(), v.end(), [](const T& a, const T& b) { return a.labels < b.labels; });
}

std::vector<std::string> Union(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}

}  // namespace

ScopedQuerier::ScopedQuerier(const store::Querier& base, const std::set<std::string>& jobs,
                             const std::vector<GpuGrant>& grants)
    : base_(base) {
  for (const GpuGrant& g : grants) {
    if (g.from_ms > g.to_ms) continue;
    held_[{g.node, std::to_string(g.gpu)}].emplace_back(g.from_ms, g.to_ms);
    held_from_ms_ = std::min(held_from_ms_, g.from_ms);
    held_to_ms_ = std::max(held_to_ms_, g.to_ms);
  }
  for (auto& [key, iv] : held_) {
    std::sort(iv.begin(), iv.end());
    Intervals merged;
    for (const auto& x : iv) {
      if (!merged.empty() && x.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, x.second);
      else
        merged.push_back(x);
    }
    iv = std::move(merged);
  }
  // A training job named as the scrape job (kScrapeJobName) would select every node series.
  std::set<std::string> own = jobs;
  own.erase(std::string(kScrapeJobName));
  if (own.empty()) return;
  auto m = OneOf("job", own);
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

std::optional<std::vector<store::Matcher>> ScopedQuerier::WithGrants(
    const std::vector<store::Matcher>& m, const std::string* node) const {
  std::set<std::string> nodes, gpus;
  for (const auto& [key, iv] : held_) {
    if (node && key.first != *node) continue;
    nodes.insert(key.first);
    gpus.insert(key.second);
  }
  if (nodes.empty()) return std::nullopt;
  // A superset of the (node, gpu) pairs when several nodes hold different GPUs: each series
  // found is checked against its own pair (HeldBy).
  auto n = OneOf("Hostname", nodes);
  auto g = OneOf("gpu", gpus);
  // A node's series: no `job`, or the scrape job's the stored series carry (scrape_labels.h);
  // a training job's series on that GPU are not the grant's.
  auto no_job =
      store::Matcher::Make(store::MatchOp::kRegex, "job", "|" + std::string(kScrapeJobName));
  // The GPU's own series, not a process's or a user's on it: those name who else used the GPU
  // (a process with no job, another user's attribution) and are only seen through a job.
  auto no_pid = store::Matcher::Make(store::MatchOp::kEqual, "pid", "");
  auto no_user = store::Matcher::Make(store::MatchOp::kEqual, "user", "");
  if (!n.ok() || !g.ok() || !no_job.ok() || !no_pid.ok() || !no_user.ok()) return std::nullopt;
  std::vector<store::Matcher> out = m;
  for (auto* x : {&n, &g, &no_job, &no_pid, &no_user}) out.push_back(std::move(*x).value());
  return out;
}

const Intervals* ScopedQuerier::HeldBy(const store::Labels& labels) const {
  auto it = held_.find({std::string(store::LabelValue(labels, "Hostname")),
                        std::string(store::LabelValue(labels, "gpu"))});
  return it == held_.end() ? nullptr : &it->second;
}

Result<std::vector<store::SeriesSamples>> ScopedQuerier::SelectRaw(
    const std::vector<store::Matcher>& matchers, int64_t mint_ms, int64_t maxt_ms) const {
  std::vector<store::SeriesSamples> out;
  if (auto m = With(matchers)) {
    auto r = base_.SelectRaw(*m, mint_ms, maxt_ms);
    if (!r.ok()) return r.status();
    out = std::move(r).value();
  }
  const int64_t lo = std::max(mint_ms, held_from_ms_), hi = std::min(maxt_ms, held_to_ms_);
  auto g = WithGrants(matchers);
  if (!g || lo > hi) return out;
  auto r = base_.SelectRaw(*g, lo, hi);
  if (!r.ok()) return r.status();
  for (store::SeriesSamples& s : *r) {
    const Intervals* iv = HeldBy(s.labels);
    if (!iv) continue;
    std::erase_if(s.samples, [&](const store::Sample& x) { return !Inside(*iv, x.t_ms, x.t_ms); });
    if (!s.samples.empty()) out.push_back(std::move(s));
  }
  SortByLabels(out);
  return out;
}

Result<std::vector<store::SeriesRollups>> ScopedQuerier::SelectRollups(
    store::Tier tier, const std::vector<store::Matcher>& matchers, int64_t mint_ms, int64_t maxt_ms,
    uint32_t parts) const {
  std::vector<store::SeriesRollups> out;
  if (auto m = With(matchers)) {
    auto r = base_.SelectRollups(tier, *m, mint_ms, maxt_ms, parts);
    if (!r.ok()) return r.status();
    out = std::move(r).value();
  }
  const int64_t width = store::TierWidthMs(tier);
  const int64_t lo = std::max(mint_ms, held_from_ms_ - width), hi = std::min(maxt_ms, held_to_ms_);
  auto g = WithGrants(matchers);
  if (!g || lo > hi) return out;
  auto r = base_.SelectRollups(tier, *g, lo, hi, parts);
  if (!r.ok()) return r.status();
  for (store::SeriesRollups& s : *r) {
    const Intervals* iv = HeldBy(s.labels);
    if (!iv) continue;
    // A bucket only when all of it lies in one holding: its aggregate may hold another
    // job's time otherwise.
    std::erase_if(s.points, [&](const store::RollupPoint& p) {
      return !Inside(*iv, p.t_ms, p.t_ms + std::max<int64_t>(width, 1) - 1);
    });
    if (!s.points.empty()) out.push_back(std::move(s));
  }
  SortByLabels(out);
  return out;
}

Result<std::vector<store::Labels>> ScopedQuerier::Series(
    const std::vector<store::Matcher>& matchers, int64_t mint_ms, int64_t maxt_ms) const {
  std::vector<store::Labels> out;
  if (auto m = With(matchers)) {
    auto r = base_.Series(*m, mint_ms, maxt_ms);
    if (!r.ok()) return r.status();
    out = std::move(r).value();
  }
  const int64_t lo = std::max(mint_ms, held_from_ms_), hi = std::min(maxt_ms, held_to_ms_);
  auto g = WithGrants(matchers);
  if (!g || lo > hi) return out;
  auto r = base_.Series(*g, lo, hi);
  if (!r.ok()) return r.status();
  for (store::Labels& l : *r) {
    const Intervals* iv = HeldBy(l);
    if (iv && Overlaps(*iv, lo, hi)) out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::vector<std::string>> ScopedQuerier::Strings(const std::vector<store::Matcher>& matchers,
                                                        const AskFn& ask) const {
  std::vector<std::string> out;
  if (auto m = With(matchers)) {
    auto r = ask(*m);
    if (!r.ok()) return r.status();
    out = std::move(r).value();
  }
  // Per node (its GPUs are exactly the ones held there), never the nodes × GPUs superset.
  std::set<std::string> nodes;
  for (const auto& [key, iv] : held_) nodes.insert(key.first);
  for (const std::string& node : nodes) {
    auto g = WithGrants(matchers, &node);
    if (!g) continue;
    auto r = ask(*g);
    if (!r.ok()) return r.status();
    out = Union(std::move(out), *r);
  }
  return out;
}

Result<std::vector<std::string>> ScopedQuerier::LabelNames(
    const std::vector<store::Matcher>& matchers) const {
  return Strings(matchers, [this](const auto& m) { return base_.LabelNames(m); });
}

Result<std::vector<std::string>> ScopedQuerier::LabelValues(
    const std::string& name, const std::vector<store::Matcher>& matchers) const {
  return Strings(matchers, [&](const auto& m) { return base_.LabelValues(name, m); });
}

}  // namespace gpuwatch::server
