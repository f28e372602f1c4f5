#include "store/labels.h"

#include <re2/re2.h>

#include <algorithm>
#include <cctype>

namespace gpuwatch::store {

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.size() > kMaxLabelNameBytes) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

Result<Labels> MakeLabels(std::vector<Label> labels) {
  labels.erase(
      std::remove_if(labels.begin(), labels.end(), [](const Label& l) { return l.value.empty(); }),
      labels.end());
  if (labels.size() > kMaxLabels)
    return Status::InvalidArgument("too many labels: " + std::to_string(labels.size()) +
                                   " (limit " + std::to_string(kMaxLabels) + ")");
  std::sort(labels.begin(), labels.end());
  for (size_t i = 0; i < labels.size(); ++i) {
    const auto& l = labels[i];
    if (!IsValidLabelName(l.name))
      return Status::InvalidArgument("invalid label name '" + l.name.substr(0, 64) + "'");
    if (l.value.size() > kMaxLabelValueBytes)
      return Status::InvalidArgument("value of label '" + l.name + "' is " +
                                     std::to_string(l.value.size()) + " bytes (limit " +
                                     std::to_string(kMaxLabelValueBytes) + ")");
    if (i > 0 && labels[i - 1].name == l.name)
      return Status::InvalidArgument("label '" + l.name + "' given twice");
  }
  return labels;
}

std::string_view LabelValue(const Labels& labels, std::string_view name) {
  for (const auto& l : labels)
    if (l.name == name) return l.value;
  return {};
}

std::string LabelsToString(const Labels& labels) {
  std::string out(LabelValue(labels, kMetricNameLabel));
  out += '{';
  bool first = true;
  for (const auto& l : labels) {
    if (l.name == kMetricNameLabel) continue;
    if (!first) out += ", ";
    first = false;
    out += l.name + "=\"" + l.value + "\"";
  }
  out += '}';
  return out;
}

Result<Matcher> Matcher::Make(MatchOp op, std::string name, std::string value) {
  if (!IsValidLabelName(name))
    return Status::InvalidArgument("invalid label name '" + name + "' in matcher");
  Matcher m;
  m.op_ = op;
  m.name_ = std::move(name);
  m.value_ = std::move(value);
  if (op == MatchOp::kRegex || op == MatchOp::kNotRegex) {
    RE2::Options opts;
    opts.set_log_errors(false);
    opts.set_max_mem(8 << 20);  // bounds the compiled program: a hostile regex cannot grow it
    auto re = std::make_shared<RE2>("^(?:" + m.value_ + ")$", opts);
    if (!re->ok()) return Status::InvalidArgument("bad regex '" + m.value_ + "': " + re->error());
    m.re_ = std::move(re);
  }
  m.matches_empty_ = m.Matches("");
  return m;
}

bool Matcher::Matches(std::string_view v) const {
  switch (op_) {
    case MatchOp::kEqual:
      return v == value_;
    case MatchOp::kNotEqual:
      return v != value_;
    case MatchOp::kRegex:
      return RE2::FullMatch(re2::StringPiece(v.data(), v.size()), *re_);
    case MatchOp::kNotRegex:
      return !RE2::FullMatch(re2::StringPiece(v.data(), v.size()), *re_);
  }
  return false;
}

std::string Matcher::ToString() const {
  static constexpr const char* kOps[] = {"=", "!=", "=~", "!~"};
  return name_ + kOps[static_cast<int>(op_)] + "\"" + value_ + "\"";
}

namespace {

class SelectorParser {
 public:
  explicit SelectorParser(std::string_view s) : s_(s) {}

  Result<std::vector<Matcher>> Parse() {
    std::vector<Matcher> out;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] != '{') {
      std::string name = Identifier(/*allow_colon=*/true);
      if (name.empty()) return Error("expected a metric name or '{'");
      auto m = Matcher::Make(MatchOp::kEqual, std::string(kMetricNameLabel), name);
      if (!m.ok()) return m.status();
      out.push_back(std::move(m).value());
      SkipSpace();
    }
    if (pos_ < s_.size() && s_[pos_] == '{') {
      ++pos_;
      SkipSpace();
      while (pos_ < s_.size() && s_[pos_] != '}') {
        std::string name = Identifier(/*allow_colon=*/false);
        if (name.empty()) return Error("expected a label name");
        SkipSpace();
        MatchOp op;
        if (Take("=~"))
          op = MatchOp::kRegex;
        else if (Take("!~"))
          op = MatchOp::kNotRegex;
        else if (Take("!="))
          op = MatchOp::kNotEqual;
        else if (Take("="))
          op = MatchOp::kEqual;
        else
          return Error("expected =, !=, =~ or !~ after '" + name + "'");
        SkipSpace();
        auto value = String();
        if (!value.ok()) return value.status();
        auto m = Matcher::Make(op, std::move(name), std::move(value).value());
        if (!m.ok()) return m.status();
        out.push_back(std::move(m).value());
        SkipSpace();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          SkipSpace();
        } else if (pos_ < s_.size() && s_[pos_] != '}') {
          return Error("expected ',' or '}'");
        }
      }
      if (pos_ >= s_.size()) return Error("unclosed '{'");
      ++pos_;
      SkipSpace();
    }
    if (pos_ != s_.size()) return Error("unexpected text");
    if (out.empty()) return Error("empty selector");
    return out;
  }

 private:
  Status Error(const std::string& what) const {
    return Status::InvalidArgument("selector: " + what + " at offset " + std::to_string(pos_));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Take(std::string_view t) {
    if (s_.substr(pos_, t.size()) != t) return false;
    pos_ += t.size();
    return true;
  }
  std::string Identifier(bool allow_colon) {
    size_t start = pos_;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      const bool ok = std::isalpha(static_cast<unsigned char>(c)) || c == '_' ||
                      (allow_colon && c == ':') ||
                      (pos_ > start && std::isdigit(static_cast<unsigned char>(c)));
      if (!ok) break;
      ++pos_;
    }
    return std::string(s_.substr(start, pos_ - start));
  }
  Result<std::string> String() {
    if (pos_ >= s_.size()) return Error("expected a quoted string");
    const char q = s_[pos_];
    if (q != '"' && q != '\'' && q != '`') return Error("expected a quoted string");
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != q) {
      char c = s_[pos_++];
      if (c == '\\' && q != '`') {
        if (pos_ >= s_.size()) break;
        const char e = s_[pos_++];
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case '\\':
          case '"':
          case '\'':
            out += e;
            break;
          default:
            // Kept as written: regex escapes such as \d or \. pass through to RE2.
            out += '\\';
            out += e;
        }
        continue;
      }
      out += c;
    }
    if (pos_ >= s_.size()) return Error("unterminated string");
    ++pos_;
    return out;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Result<std::vector<Matcher>> ParseSelector(std::string_view text) {
  return SelectorParser(text).Parse();
}

}  // namespace gpuwatch::store
