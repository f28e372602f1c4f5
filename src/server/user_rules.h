// User rules (issue 7, R14): alerting conditions an operator writes in a file
// (docs/format/user-rules.md), evaluated by the agent every diagnosis tick with its own PromQL
// engine over its own store, and fed into the same alert book as the built-in diagnosis.
//
// A rule is a PromQL expression whose every result series is a place where the condition holds
// (`DCGM_FI_DEV_GPU_TEMP > 83`; baseline-relative: `x > 1.2 * avg_over_time(x[1d] offset 1d)`;
// the windows are the expression's own), `for` (how long it must hold before it fires),
// `clear_after` (how long it must stop holding before it clears: hysteresis), a severity, and
// a summary template over the series' labels and value. A firing place becomes a finding of
// cause "user:<name>", layer "user", on the node / GPU / job / rank its labels name (Hostname,
// gpu, job, rank; interface or device as the nic).
//
// Thread-safety: UserRuleEvaluator is used by one thread (the agent's tier thread).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "analyze/finding.h"
#include "common/status.h"
#include "store/querier.h"

namespace gpuwatch::server {

struct UserRule {
  std::string name;  // [A-Za-z0-9_]{1,64}
  std::string expr;  // PromQL, checked when loaded
  int64_t for_ms = 0;
  int64_t clear_after_ms = 60000;
  model::Severity severity = model::Severity::kWarning;
  std::string summary;  // "{{label}}" and "{{value}}" are filled in
  std::string action;
};

// The rules file's JSON. Errors name the rule (by index and name) and the field.
Result<std::vector<UserRule>> ParseUserRules(std::string_view json_text);
// Reads and parses a rules file; errors name the file.
Result<std::vector<UserRule>> LoadUserRules(const std::string& path);

class UserRuleEvaluator {
 public:
  UserRuleEvaluator(std::vector<UserRule> rules, std::string default_node);

  // Evaluates every rule at now_ms; returns a finding for every place that fires now or is
  // within its clear_after of firing. A rule whose query fails keeps its places as they were
  // (a store hiccup is no clearance) and records the error.
  std::vector<analyze::Finding> Evaluate(const store::Querier& q, int64_t now_ms);
  // The hysteresis of each rule's cause, for the alert book (cause → hold ms).
  std::map<std::string, int64_t> Holds() const;
  // "" when the last evaluation of every rule succeeded.
  const std::string& last_error() const { return last_error_; }
  const std::vector<UserRule>& rules() const { return rules_; }

 private:
  struct Place {
    int64_t pending_since_ms = 0, last_true_ms = 0;
    bool fired = false;
    analyze::Finding finding;
  };
  std::vector<UserRule> rules_;
  std::string node_;
  std::vector<std::map<std::string, Place>> places_;  // per rule, by label set
  std::string last_error_;
};

// "GPU {{gpu}} at {{value}}" with the labels and value filled in; unknown labels become "".
std::string FillTemplate(std::string_view tmpl, const store::Labels& labels, double value);

}  // namespace gpuwatch::server
