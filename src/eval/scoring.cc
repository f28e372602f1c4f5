#include "eval/scoring.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/cause.h"

namespace gpuwatch::eval {

namespace {

using nlohmann::json;

constexpr double kFastLatencyS = 15;
constexpr double kSlowLatencyS = 120;
constexpr size_t kMaxItems = 1'000'000;  // faults or findings in one file

Status Bad(const std::string& where, const std::string& what) {
  return Status::InvalidArgument(where + ": " + what);
}

// The keys a fault and a finding share, read the same way from both.
template <typename T>
Status ReadPlace(const json& o, const std::string& where, T* out) {
  auto str = [&](const char* key, std::string* dst, bool required) -> Status {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) {
      return required ? Bad(where + "." + key, "missing") : Status::Ok();
    }
    if (!it->is_string()) return Bad(where + "." + key, "not a string");
    *dst = it->template get<std::string>();
    return Status::Ok();
  };
  auto opt_str = [&](const char* key, std::optional<std::string>* dst) -> Status {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) return Status::Ok();
    if (it->is_number_integer()) {  // a job id written as a number
      *dst = std::to_string(it->template get<int64_t>());
      return Status::Ok();
    }
    if (!it->is_string()) return Bad(where + "." + key, "not a string");
    *dst = it->template get<std::string>();
    return Status::Ok();
  };
  auto opt_int = [&](const char* key, std::optional<int>* dst) -> Status {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) return Status::Ok();
    if (!it->is_number_integer()) return Bad(where + "." + key, "not an integer");
    const int64_t v = it->template get<int64_t>();
    if (v < 0 || v > 1'000'000) return Bad(where + "." + key, "out of range");
    *dst = static_cast<int>(v);
    return Status::Ok();
  };
  GW_RETURN_IF_ERROR(str("cause", &out->cause, true));
  GW_RETURN_IF_ERROR(str("node", &out->node, true));
  GW_RETURN_IF_ERROR(opt_int("gpu", &out->gpu));
  GW_RETURN_IF_ERROR(opt_int("rank", &out->rank));
  GW_RETURN_IF_ERROR(opt_str("job", &out->job));
  GW_RETURN_IF_ERROR(opt_str("nic", &out->nic));
  return Status::Ok();
}

Status ReadTime(const json& o, const char* key, const std::string& where, bool required,
                std::optional<double>* out) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    return required ? Bad(where + "." + key, "missing") : Status::Ok();
  }
  if (!it->is_number() || !std::isfinite(it->get<double>())) {
    return Bad(where + "." + key, "not a number");
  }
  *out = it->get<double>();
  return Status::Ok();
}

Result<const json*> ListOf(const json& doc, const char* key, const char* what) {
  if (doc.is_discarded()) return Status::InvalidArgument(std::string(what) + ": not valid JSON");
  if (!doc.is_object()) return Status::InvalidArgument(std::string(what) + ": not a JSON object");
  auto it = doc.find(key);
  if (it == doc.end() || !it->is_array()) {
    return Status::InvalidArgument(std::string(what) + ": no \"" + key + "\" array");
  }
  if (it->size() > kMaxItems) {
    return Status::InvalidArgument(std::string(what) + ": more than a million " + key);
  }
  return &*it;
}

bool Matches(const Fault& fault, const ScoredFinding& f) {
  if (f.cause != fault.cause || f.node != fault.node) return false;
  if (fault.gpu && f.gpu != fault.gpu) return false;
  if (fault.rank && f.rank != fault.rank) return false;
  if (fault.job && f.job != fault.job) return false;
  if (fault.nic && f.nic != fault.nic) return false;
  return f.first_seen_s >= fault.start_s &&
         f.first_seen_s <= fault.start_s + AllowedLatencySeconds(fault.cause);
}

}  // namespace

Result<std::vector<Fault>> ParseTruth(std::string_view text) {
  const json doc = json::parse(text.begin(), text.end(), nullptr, false);
  Result<const json*> list = ListOf(doc, "faults", "truth");
  if (!list.ok()) return list.status();
  std::vector<Fault> out;
  for (size_t i = 0; i < (*list)->size(); ++i) {
    const json& o = (**list)[i];
    const std::string where = "faults[" + std::to_string(i) + "]";
    if (!o.is_object()) return Bad(where, "not an object");
    Fault f;
    GW_RETURN_IF_ERROR(ReadPlace(o, where, &f));
    std::optional<double> start;
    GW_RETURN_IF_ERROR(ReadTime(o, "start", where, true, &start));
    f.start_s = *start;
    GW_RETURN_IF_ERROR(ReadTime(o, "end", where, false, &f.end_s));
    out.push_back(std::move(f));
  }
  return out;
}

Result<std::vector<ScoredFinding>> ParseFindings(std::string_view text) {
  const json doc = json::parse(text.begin(), text.end(), nullptr, false);
  Result<const json*> list = ListOf(doc, "findings", "findings");
  if (!list.ok()) return list.status();
  std::vector<ScoredFinding> out;
  for (size_t i = 0; i < (*list)->size(); ++i) {
    const json& o = (**list)[i];
    const std::string where = "findings[" + std::to_string(i) + "]";
    if (!o.is_object()) return Bad(where, "not an object");
    ScoredFinding f;
    GW_RETURN_IF_ERROR(ReadPlace(o, where, &f));
    auto sev = o.find("severity");
    if (sev == o.end() || !sev->is_string()) return Bad(where + ".severity", "missing");
    f.severity = sev->get<std::string>();
    if (f.severity != "info" && f.severity != "warning" && f.severity != "critical") {
      return Bad(where + ".severity", "not info, warning or critical");
    }
    std::optional<double> first;
    GW_RETURN_IF_ERROR(ReadTime(o, "first_seen", where, true, &first));
    f.first_seen_s = *first;
    GW_RETURN_IF_ERROR(ReadTime(o, "last_seen", where, false, &f.last_seen_s));
    out.push_back(std::move(f));
  }
  return out;
}

double AllowedLatencySeconds(std::string_view cause) {
  // findings.md, Evaluation: the causes that need a baseline or a trend (the catalog says
  // which). A cause the catalog does not know is judged as a direct one.
  const std::optional<model::Cause> c = model::CauseFromName(cause);
  return c && model::Describe(*c).needs_baseline_or_trend ? kSlowLatencyS : kFastLatencyS;
}

bool Counts(const ScoredFinding& f) { return f.severity == "warning" || f.severity == "critical"; }

ScenarioScore ScoreScenario(std::string name, std::vector<Fault> faults,
                            std::vector<ScoredFinding> findings) {
  ScenarioScore s;
  s.name = std::move(name);
  s.latency_s.assign(faults.size(), std::nullopt);
  s.counted.assign(findings.size(), false);
  s.matched_fault.assign(findings.size(), std::nullopt);
  for (size_t j = 0; j < findings.size(); ++j) {
    if (!Counts(findings[j])) continue;
    s.counted[j] = true;
    for (size_t i = 0; i < faults.size(); ++i) {
      if (!Matches(faults[i], findings[j])) continue;
      if (!s.matched_fault[j]) s.matched_fault[j] = i;
      const double latency = findings[j].first_seen_s - faults[i].start_s;
      if (!s.latency_s[i] || latency < *s.latency_s[i]) s.latency_s[i] = latency;
    }
  }
  s.faults = std::move(faults);
  s.findings = std::move(findings);
  return s;
}

std::optional<double> Tally::Precision() const {
  if (findings == 0) return std::nullopt;
  return static_cast<double>(matched_findings) / static_cast<double>(findings);
}
std::optional<double> Tally::Recall() const {
  if (faults == 0) return std::nullopt;
  return static_cast<double>(detected) / static_cast<double>(faults);
}
std::optional<double> Tally::F1() const {
  auto p = Precision(), r = Recall();
  if (!p || !r) return std::nullopt;
  if (*p + *r == 0) return 0.0;
  return 2 * *p * *r / (*p + *r);
}
std::optional<double> Tally::MedianLatency() const {
  if (latencies_s.empty()) return std::nullopt;
  std::vector<double> v = latencies_s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
std::optional<double> Tally::WorstLatency() const {
  if (latencies_s.empty()) return std::nullopt;
  return *std::max_element(latencies_s.begin(), latencies_s.end());
}

Summary Summarize(const std::vector<ScenarioScore>& scores) {
  Summary out;
  for (const ScenarioScore& s : scores) {
    ++out.scenarios;
    if (s.faults.empty()) ++out.healthy_scenarios;
    for (size_t i = 0; i < s.faults.size(); ++i) {
      for (Tally* t : {&out.overall, &out.by_cause[s.faults[i].cause]}) {
        ++t->faults;
        if (s.latency_s[i]) {
          ++t->detected;
          t->latencies_s.push_back(*s.latency_s[i]);
        }
      }
    }
    for (size_t j = 0; j < s.findings.size(); ++j) {
      if (!s.counted[j]) continue;
      if (s.faults.empty()) ++out.healthy_false_alarms;
      for (Tally* t : {&out.overall, &out.by_cause[s.findings[j].cause]}) {
        ++t->findings;
        if (s.matched_fault[j]) ++t->matched_findings;
      }
    }
  }
  return out;
}

}  // namespace gpuwatch::eval
