// Series identity: a metric name plus a sorted label set, and the matchers that select them.
//
// A series is its label set with the metric name as the label `__name__` (Prometheus's model,
// so PromQL selectors and remote-write map onto it directly). Matchers follow Prometheus's
// semantics: a label a series lacks has the empty value, and regular expressions are fully
// anchored. Regexes are RE2 (linear time: a query's regex cannot stall the agent). Value types;
// a Matcher is immutable and thread-safe to share.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace re2 {
class RE2;
}

namespace gpuwatch::store {

inline constexpr std::string_view kMetricNameLabel = "__name__";

struct Label {
  std::string name;
  std::string value;
  auto operator<=>(const Label&) const = default;
};
// Sorted by name, names unique, no empty values (an empty value means "absent").
using Labels = std::vector<Label>;

// Limits that keep one bad client from exhausting memory.
inline constexpr size_t kMaxLabels = 64;
inline constexpr size_t kMaxLabelNameBytes = 256;
inline constexpr size_t kMaxLabelValueBytes = 4096;

// Sorts, drops empty values, validates names ([a-zA-Z_][a-zA-Z0-9_]*), rejects duplicate
// names and oversize sets, with a message naming the offending label.
Result<Labels> MakeLabels(std::vector<Label> labels);
bool IsValidLabelName(std::string_view name);
std::string_view LabelValue(const Labels& labels, std::string_view name);  // "" when absent
// `name{a="x", b="y"}` for messages and logs.
std::string LabelsToString(const Labels& labels);

enum class MatchOp { kEqual, kNotEqual, kRegex, kNotRegex };

class Matcher {
 public:
  // InvalidArgument for a bad label name or a regex RE2 rejects.
  static Result<Matcher> Make(MatchOp op, std::string name, std::string value);

  bool Matches(std::string_view value) const;
  bool MatchesEmpty() const { return matches_empty_; }
  MatchOp op() const { return op_; }
  const std::string& name() const { return name_; }
  const std::string& value() const { return value_; }
  std::string ToString() const;

 private:
  Matcher() = default;
  MatchOp op_ = MatchOp::kEqual;
  std::string name_, value_;
  std::shared_ptr<const re2::RE2> re_;
  bool matches_empty_ = false;
};

// Parses a PromQL vector selector: `name`, `name{l="v", l!="v", l=~"re", l!~"re"}` or
// `{__name__="name", …}`, with "…", '…' or `…` strings and Go escapes in the quoted forms.
// Errors name the byte offset.
Result<std::vector<Matcher>> ParseSelector(std::string_view text);

}  // namespace gpuwatch::store
