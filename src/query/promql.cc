#include "query/promql.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "common/strings.h"

namespace gpuwatch::query {

std::string_view ValueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kScalar:
      return "scalar";
    case ValueType::kVector:
      return "vector";
    case ValueType::kMatrix:
      return "matrix";
    case ValueType::kString:
      return "string";
  }
  return "?";
}

namespace {

std::string FormatNumber(double v);

// Prometheus's words for types in error messages.
std::string_view TypeWords(ValueType type) {
  switch (type) {
    case ValueType::kScalar:
      return "scalar";
    case ValueType::kVector:
      return "instant vector";
    case ValueType::kMatrix:
      return "range vector";
    case ValueType::kString:
      return "string";
  }
  return "?";
}

struct BinOpInfo {
  BinOp op;
  std::string_view text;
  int precedence;  // Prometheus's: or < and,unless < comparisons < + - < * / % < ^
};

constexpr BinOpInfo kBinOps[] = {
    {BinOp::kAdd, "+", 4},         {BinOp::kSub, "-", 4},   {BinOp::kMul, "*", 5},
    {BinOp::kDiv, "/", 5},         {BinOp::kMod, "%", 5},   {BinOp::kAtan2, "atan2", 5},
    {BinOp::kPow, "^", 6},         {BinOp::kEq, "==", 3},   {BinOp::kNe, "!=", 3},
    {BinOp::kGt, ">", 3},          {BinOp::kLt, "<", 3},    {BinOp::kGe, ">=", 3},
    {BinOp::kLe, "<=", 3},         {BinOp::kAnd, "and", 2}, {BinOp::kOr, "or", 1},
    {BinOp::kUnless, "unless", 2},
};
constexpr int kPowPrecedence = 6;

int Precedence(BinOp op) {
  for (const auto& i : kBinOps)
    if (i.op == op) return i.precedence;
  return 0;
}

struct AggInfo {
  AggOp op;
  std::string_view name;
  bool has_param;
};
constexpr AggInfo kAggs[] = {
    {AggOp::kSum, "sum", false},          {AggOp::kAvg, "avg", false},
    {AggOp::kMin, "min", false},          {AggOp::kMax, "max", false},
    {AggOp::kCount, "count", false},      {AggOp::kGroup, "group", false},
    {AggOp::kStddev, "stddev", false},    {AggOp::kStdvar, "stdvar", false},
    {AggOp::kQuantile, "quantile", true}, {AggOp::kTopk, "topk", true},
    {AggOp::kBottomk, "bottomk", true},   {AggOp::kCountValues, "count_values", true},
    {AggOp::kLimitk, "limitk", true},
};

constexpr ValueType S = ValueType::kScalar;
constexpr ValueType V = ValueType::kVector;
constexpr ValueType M = ValueType::kMatrix;
constexpr ValueType Str = ValueType::kString;

struct FuncInfo {
  Func func;
  std::string_view name;
  std::vector<ValueType> args;
  int min_args;  // trailing arguments beyond this are optional
  ValueType returns;
  bool variadic = false;  // the last argument's type repeats without limit
};

const std::vector<FuncInfo>& Funcs() {
  static const std::vector<FuncInfo> kFuncs = {
      {Func::kAbs, "abs", {V}, 1, V},
      {Func::kAbsent, "absent", {V}, 1, V},
      {Func::kAbsentOverTime, "absent_over_time", {M}, 1, V},
      {Func::kAcos, "acos", {V}, 1, V},
      {Func::kAcosh, "acosh", {V}, 1, V},
      {Func::kAsin, "asin", {V}, 1, V},
      {Func::kAsinh, "asinh", {V}, 1, V},
      {Func::kAtan, "atan", {V}, 1, V},
      {Func::kAtanh, "atanh", {V}, 1, V},
      {Func::kAvgOverTime, "avg_over_time", {M}, 1, V},
      {Func::kCeil, "ceil", {V}, 1, V},
      {Func::kChanges, "changes", {M}, 1, V},
      {Func::kClamp, "clamp", {V, S, S}, 3, V},
      {Func::kClampMax, "clamp_max", {V, S}, 2, V},
      {Func::kClampMin, "clamp_min", {V, S}, 2, V},
      {Func::kCos, "cos", {V}, 1, V},
      {Func::kCosh, "cosh", {V}, 1, V},
      {Func::kCountOverTime, "count_over_time", {M}, 1, V},
      {Func::kDayOfMonth, "day_of_month", {V}, 0, V},
      {Func::kDayOfWeek, "day_of_week", {V}, 0, V},
      {Func::kDayOfYear, "day_of_year", {V}, 0, V},
      {Func::kDaysInMonth, "days_in_month", {V}, 0, V},
      {Func::kDeg, "deg", {V}, 1, V},
      {Func::kDelta, "delta", {M}, 1, V},
      {Func::kDeriv, "deriv", {M}, 1, V},
      {Func::kExp, "exp", {V}, 1, V},
      {Func::kFirstOverTime, "first_over_time", {M}, 1, V},
      {Func::kFloor, "floor", {V}, 1, V},
      {Func::kHistogramFraction, "histogram_fraction", {S, S, V}, 3, V},
      {Func::kHistogramQuantile, "histogram_quantile", {S, V}, 2, V},
      {Func::kHour, "hour", {V}, 0, V},
      {Func::kIdelta, "idelta", {M}, 1, V},
      {Func::kIncrease, "increase", {M}, 1, V},
      {Func::kIrate, "irate", {M}, 1, V},
      {Func::kLabelJoin, "label_join", {V, Str, Str, Str}, 3, V, true},
      {Func::kLabelReplace, "label_replace", {V, Str, Str, Str, Str}, 5, V},
      {Func::kLastOverTime, "last_over_time", {M}, 1, V},
      {Func::kLn, "ln", {V}, 1, V},
      {Func::kLog10, "log10", {V}, 1, V},
      {Func::kLog2, "log2", {V}, 1, V},
      {Func::kMadOverTime, "mad_over_time", {M}, 1, V},
      {Func::kMaxOverTime, "max_over_time", {M}, 1, V},
      {Func::kMinOverTime, "min_over_time", {M}, 1, V},
      {Func::kMinute, "minute", {V}, 0, V},
      {Func::kMonth, "month", {V}, 0, V},
      {Func::kPi, "pi", {}, 0, S},
      {Func::kPredictLinear, "predict_linear", {M, S}, 2, V},
      {Func::kPresentOverTime, "present_over_time", {M}, 1, V},
      {Func::kQuantileOverTime, "quantile_over_time", {S, M}, 2, V},
      {Func::kRad, "rad", {V}, 1, V},
      {Func::kRate, "rate", {M}, 1, V},
      {Func::kResets, "resets", {M}, 1, V},
      {Func::kRound, "round", {V, S}, 1, V},
      {Func::kScalar, "scalar", {V}, 1, S},
      {Func::kSgn, "sgn", {V}, 1, V},
      {Func::kSin, "sin", {V}, 1, V},
      {Func::kSinh, "sinh", {V}, 1, V},
      {Func::kSort, "sort", {V}, 1, V},
      {Func::kSortByLabel, "sort_by_label", {V, Str}, 1, V, true},
      {Func::kSortByLabelDesc, "sort_by_label_desc", {V, Str}, 1, V, true},
      {Func::kSortDesc, "sort_desc", {V}, 1, V},
      {Func::kSqrt, "sqrt", {V}, 1, V},
      {Func::kStddevOverTime, "stddev_over_time", {M}, 1, V},
      {Func::kStdvarOverTime, "stdvar_over_time", {M}, 1, V},
      {Func::kSumOverTime, "sum_over_time", {M}, 1, V},
      {Func::kTan, "tan", {V}, 1, V},
      {Func::kTanh, "tanh", {V}, 1, V},
      {Func::kTime, "time", {}, 0, S},
      {Func::kTimestamp, "timestamp", {V}, 1, V},
      {Func::kVector, "vector", {S}, 1, V},
      {Func::kYear, "year", {V}, 0, V},
  };
  return kFuncs;
}

// PromQL functions outside the subset: named in the error so a user knows it is a choice,
// not a typo.
constexpr std::string_view kUnsupportedFuncs[] = {
    "double_exponential_smoothing",
    "histogram_avg",
    "histogram_count",
    "histogram_stddev",
    "histogram_stdvar",
    "histogram_sum",
    "holt_winters",
    "info",
    "limit_ratio",
    "ts_of_first_over_time",
    "ts_of_last_over_time",
    "ts_of_max_over_time",
    "ts_of_min_over_time",
};

bool IsIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool IsIdentChar(char c) { return IsIdentStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Keywords cannot start an operand; Prometheus's lexer treats them case-insensitively.
constexpr std::string_view kKeywords[] = {"and",         "or",     "unless",   "by",
                                          "without",     "on",     "ignoring", "group_left",
                                          "group_right", "offset", "bool"};

bool IsKeyword(std::string_view word) {
  for (auto k : kKeywords)
    if (EqualsIgnoreCase(word, k)) return true;
  return false;
}

// Appends the UTF-8 encoding of `cp`; false for a value that is not a Unicode scalar.
bool AppendUtf8(uint32_t cp, std::string* out) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  Parser(std::string_view s, const ParseOptions& o) : s_(s), opts_(o) {}

  Result<ExprPtr> Parse() {
    if (s_.size() > opts_.max_query_bytes)
      return Status::InvalidArgument("query is " + std::to_string(s_.size()) + " bytes (limit " +
                                     std::to_string(opts_.max_query_bytes) + ")");
    SkipSpace();
    if (pos_ >= s_.size()) return Error(pos_, "no expression found in input");
    auto e = ParseBinary(0);
    if (!e.ok()) return e.status();
    SkipSpace();
    if (pos_ < s_.size()) return Error(pos_, "unexpected " + Describe(pos_));
    return e;
  }

 private:
  // Line:column (1-based, bytes) like Prometheus's "1:7: parse error: …".
  Status Error(size_t at, const std::string& what,
               StatusCode code = StatusCode::kInvalidArgument) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Status(code,
                  std::to_string(line) + ":" + std::to_string(col) + ": parse error: " + what);
  }

  // The token at `at`, quoted, for "unexpected …" messages.
  std::string Describe(size_t at) const {
    if (at >= s_.size()) return "end of input";
    size_t end = at;
    if (IsIdentChar(s_[at])) {
      while (end < s_.size() && IsIdentChar(s_[end]) && end - at < 32) ++end;
    } else {
      end = at + 1;
      if (end < s_.size() && (s_[end] == '=' || s_[end] == '~') &&
          (s_[at] == '=' || s_[at] == '!' || s_[at] == '<' || s_[at] == '>'))
        ++end;
    }
    std::string tok(s_.substr(at, end - at));
    for (char& c : tok)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    return "\"" + tok + "\"";
  }

  void SkipSpace() {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (c == '#') {  // a comment runs to the end of the line
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  bool Peek(char c) {
    SkipSpace();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool TakeChar(char c) {
    if (!Peek(c)) return false;
    ++pos_;
    return true;
  }
  Status Expect(char c, std::string_view context) {
    if (TakeChar(c)) return Status::Ok();
    return Error(pos_, "unexpected " + Describe(pos_) + " " + std::string(context) +
                           ", expected \"" + std::string(1, c) + "\"");
  }

  // The identifier at the cursor without consuming it ("" when none).
  std::string_view PeekWord() {
    SkipSpace();
    size_t end = pos_;
    if (end < s_.size() && IsIdentStart(s_[end])) {
      while (end < s_.size() && IsIdentChar(s_[end])) ++end;
    }
    return s_.substr(pos_, end - pos_);
  }
  bool TakeWord(std::string_view keyword) {
    if (!EqualsIgnoreCase(PeekWord(), keyword)) return false;
    pos_ += keyword.size();
    return true;
  }

  // Recursion guard: parentheses and unary operators nest without building binary nodes.
  struct DepthGuard {
    explicit DepthGuard(int* d) : d_(d) { ++*d_; }
    ~DepthGuard() { --*d_; }
    int* d_;
  };
  Status CheckDepth(size_t at) const {
    if (depth_ > opts_.max_depth)
      return Error(at,
                   "expression nested too deeply (limit " + std::to_string(opts_.max_depth) + ")");
    return Status::Ok();
  }
  Status SetHeight(Expr* e, size_t at) const {
    int h = 0;
    for (const Expr* c : {e->lhs.get(), e->rhs.get(), e->param.get()})
      if (c) h = std::max(h, c->height);
    for (const auto& a : e->args) h = std::max(h, a->height);
    e->height = h + 1;
    if (e->height > opts_.max_depth)
      return Error(at,
                   "expression nested too deeply (limit " + std::to_string(opts_.max_depth) + ")");
    return Status::Ok();
  }

  // The binary operator at the cursor, if any (not consumed); `len` is its text length.
  bool PeekBinOp(BinOp* op, size_t* len) {
    SkipSpace();
    if (pos_ >= s_.size()) return false;
    const std::string_view rest = s_.substr(pos_);
    if (IsIdentStart(rest[0])) {
      const std::string_view w = PeekWord();
      for (BinOp o : {BinOp::kAnd, BinOp::kOr, BinOp::kUnless, BinOp::kAtan2}) {
        if (EqualsIgnoreCase(w, BinOpName(o))) {
          *op = o;
          *len = w.size();
          return true;
        }
      }
      return false;
    }
    // Two-character operators first so ">=" is not read as ">".
    for (const auto& i : kBinOps) {
      if (i.text.size() == 2 && !IsIdentStart(i.text[0]) && rest.substr(0, 2) == i.text) {
        *op = i.op;
        *len = 2;
        return true;
      }
    }
    for (const auto& i : kBinOps) {
      if (i.text.size() == 1 && rest[0] == i.text[0]) {
        *op = i.op;
        *len = 1;
        return true;
      }
    }
    return false;
  }

  Result<ExprPtr> ParseBinary(int min_precedence) {
    DepthGuard guard(&depth_);
    GW_RETURN_IF_ERROR(CheckDepth(pos_));
    auto lhs_r = ParseUnary();
    if (!lhs_r.ok()) return lhs_r.status();
    ExprPtr lhs = std::move(lhs_r).value();
    while (true) {
      BinOp op;
      size_t len;
      if (!PeekBinOp(&op, &len)) break;
      const int prec = Precedence(op);
      if (prec < min_precedence) break;
      const size_t op_pos = pos_;
      pos_ += len;
      auto node = std::make_unique<Expr>();
      node->kind = Expr::Kind::kBinary;
      node->bin_op = op;
      node->pos = op_pos;
      if (TakeWord("bool")) {
        if (!IsComparison(op))
          return Error(op_pos, "bool modifier can only be used on comparison operators");
        node->return_bool = true;
      }
      const std::string_view matching_word = PeekWord();
      if (EqualsIgnoreCase(matching_word, "on") || EqualsIgnoreCase(matching_word, "ignoring")) {
        node->has_matching = true;
        node->matching_on = EqualsIgnoreCase(matching_word, "on");
        pos_ += matching_word.size();
        auto labels = ParseLabelList("vector matching");
        if (!labels.ok()) return labels.status();
        node->matching_labels = std::move(labels).value();
        SkipSpace();
        const size_t group_pos = pos_;
        const bool left = TakeWord("group_left");
        if (left || TakeWord("group_right")) {
          if (IsSetOperator(op))
            return Error(group_pos, "no grouping allowed for \"" + std::string(BinOpName(op)) +
                                        "\" operation");
          node->card = left ? Expr::Card::kManyToOne : Expr::Card::kOneToMany;
          SkipSpace();
          // The label list is optional: `group_left` alone copies nothing.
          if (pos_ < s_.size() && s_[pos_] == '(') {
            auto include = ParseLabelList("grouping opts");
            if (!include.ok()) return include.status();
            node->include_labels = std::move(include).value();
          }
          if (node->matching_on)
            for (const auto& l : node->include_labels)
              if (std::find(node->matching_labels.begin(), node->matching_labels.end(), l) !=
                  node->matching_labels.end())
                return Error(group_pos, "label \"" + l +
                                            "\" must not occur in ON and GROUP "
                                            "clause at once");
        }
      }
      SkipSpace();
      if (const std::string_view w = PeekWord();
          (w == "fill" || w == "fill_left" || w == "fill_right") &&
          s_.substr(pos_ + w.size()).starts_with("("))
        return Error(pos_,
                     "the " + std::string(w) +
                         "() binary operator modifier (experimental in Prometheus) is not "
                         "supported",
                     StatusCode::kNotSupported);
      // ^ is right-associative; the others are left-associative.
      auto rhs = ParseBinary(op == BinOp::kPow ? prec : prec + 1);
      if (!rhs.ok()) return rhs.status();
      node->lhs = std::move(lhs);
      node->rhs = std::move(rhs).value();
      GW_RETURN_IF_ERROR(CheckBinary(node.get()));
      GW_RETURN_IF_ERROR(SetHeight(node.get(), op_pos));
      lhs = std::move(node);
    }
    return lhs;
  }

  Status CheckBinary(Expr* e) {
    const ValueType l = e->lhs->type, r = e->rhs->type;
    const auto ok_type = [](ValueType t) { return t == S || t == V; };
    if (!ok_type(l) || !ok_type(r))
      return Error(e->pos, "binary expression must contain only scalar and instant vector types");
    if (IsSetOperator(e->bin_op) && (l != V || r != V))
      return Error(e->pos, "set operator \"" + std::string(BinOpName(e->bin_op)) +
                               "\" not allowed in binary scalar expression");
    if (l == S && r == S && IsComparison(e->bin_op) && !e->return_bool)
      return Error(e->pos, "comparisons between scalars must use BOOL modifier");
    if (e->has_matching && (l != V || r != V))
      return Error(e->pos, "vector matching only allowed between instant vectors");
    e->type = (l == S && r == S) ? S : V;
    return Status::Ok();
  }

  Result<ExprPtr> ParseUnary() {
    DepthGuard guard(&depth_);
    GW_RETURN_IF_ERROR(CheckDepth(pos_));
    SkipSpace();
    const size_t at = pos_;
    if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) {
      const bool minus = s_[pos_] == '-';
      ++pos_;
      // Binds like * (Prometheus): -a*b is (-a)*b but -a^b is -(a^b).
      auto operand = ParseBinary(kPowPrecedence);
      if (!operand.ok()) return operand.status();
      ExprPtr e = std::move(operand).value();
      if (e->type != S && e->type != V)
        return Error(at,
                     "unary expression only allowed on expressions of type scalar or "
                     "instant vector, got \"" +
                         std::string(TypeWords(e->type)) + "\"");
      if (!minus) return e;
      if (e->kind == Expr::Kind::kNumber) {
        e->number = -e->number;
        e->pos = at;
        return e;
      }
      auto node = std::make_unique<Expr>();
      node->kind = Expr::Kind::kUnaryMinus;
      node->type = e->type;
      node->pos = at;
      node->lhs = std::move(e);
      GW_RETURN_IF_ERROR(SetHeight(node.get(), at));
      return node;
    }
    auto primary = ParsePrimary();
    if (!primary.ok()) return primary.status();
    return ParsePostfix(std::move(primary).value());
  }

  Result<ExprPtr> ParsePrimary() {
    SkipSpace();
    const size_t at = pos_;
    if (pos_ >= s_.size()) return Error(pos_, "unexpected end of input");
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      DepthGuard guard(&depth_);
      GW_RETURN_IF_ERROR(CheckDepth(at));
      auto inner = ParseBinary(0);
      if (!inner.ok()) return inner.status();
      GW_RETURN_IF_ERROR(Expect(')', "in parenthesized expression"));
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && pos_ + 1 < s_.size() &&
         std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))))
      return ParseNumber();
    if (c == '"' || c == '\'' || c == '`') {
      auto str = ParseString();
      if (!str.ok()) return str.status();
      auto e = std::make_unique<Expr>();
      e->kind = Expr::Kind::kString;
      e->type = Str;
      e->pos = at;
      e->str = std::move(str).value();
      return e;
    }
    if (c == '{') return ParseSelector(at, "");
    if (!IsIdentStart(c)) return Error(at, "unexpected " + Describe(at));

    const std::string word(PeekWord());
    if (EqualsIgnoreCase(word, "inf") || EqualsIgnoreCase(word, "nan")) {
      pos_ += word.size();
      auto e = std::make_unique<Expr>();
      e->pos = at;
      e->number = EqualsIgnoreCase(word, "inf") ? std::numeric_limits<double>::infinity()
                                                : std::numeric_limits<double>::quiet_NaN();
      return e;
    }
    for (const auto& a : kAggs) {
      if (EqualsIgnoreCase(word, a.name)) {
        pos_ += word.size();
        return ParseAggregation(at, a);
      }
    }
    if (IsKeyword(word)) return Error(at, "unexpected " + Describe(at));
    pos_ += word.size();
    if (Peek('(')) return ParseCall(at, word);
    return ParseSelector(at, word);
  }

  Result<ExprPtr> ParseNumber() {
    const size_t at = pos_;
    size_t end = pos_;
    double v;
    if (s_.substr(pos_, 2) == "0x" || s_.substr(pos_, 2) == "0X") {
      end += 2;
      while (end < s_.size() && HexValue(s_[end]) >= 0) ++end;
      if (end == pos_ + 2 || end - pos_ > 18) return Error(at, "bad number");
      v = static_cast<double>(
          std::strtoull(std::string(s_.substr(pos_ + 2, end - pos_ - 2)).c_str(), nullptr, 16));
    } else {
      while (end < s_.size() && std::isdigit(static_cast<unsigned char>(s_[end]))) ++end;
      if (end < s_.size() && s_[end] == '.') {
        ++end;
        while (end < s_.size() && std::isdigit(static_cast<unsigned char>(s_[end]))) ++end;
      }
      if (end < s_.size() && (s_[end] == 'e' || s_[end] == 'E')) {
        size_t e = end + 1;
        if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
        if (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) {
          while (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) ++e;
          end = e;
        }
      }
      if (end - pos_ > 400) return Error(at, "number too long");
      // from_chars: locale-independent, unlike strtod.
      const auto r = std::from_chars(s_.data() + pos_, s_.data() + end, v);
      if (r.ec == std::errc::result_out_of_range)  // 1e999 is +Inf, 1e-999 is 0, as in Go
        v = std::strtod(std::string(s_.substr(pos_, end - pos_)).c_str(), nullptr);
      else if (r.ec != std::errc())
        return Error(at, "bad number");
    }
    if (end < s_.size() && IsIdentChar(s_[end])) {
      // "5m" where a value belongs: durations are only valid in [] and after offset.
      size_t w = end;
      while (w < s_.size() && IsIdentChar(s_[w])) ++w;
      return Error(at, "unexpected " + Describe(at) +
                           " (durations are only allowed in a range [..] or after offset)");
    }
    pos_ = end;
    auto e = std::make_unique<Expr>();
    e->pos = at;
    e->number = v;
    return e;
  }

  // "…", '…' (Go escapes) or `…` (raw).
  Result<std::string> ParseString() {
    const size_t at = pos_;
    const char q = s_[pos_++];
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != q) {
      const char c = s_[pos_++];
      if (q == '`' || c != '\\') {
        if (c == '\n' && q != '`') return Error(at, "unterminated quoted string");
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case '\\':
        case '"':
        case '\'':
          out += e;
          break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int i = 0; i < n; ++i) {
            if (pos_ >= s_.size() || HexValue(s_[pos_]) < 0)
              return Error(pos_, "bad \\" + std::string(1, e) + " escape in string");
            cp = cp * 16 + static_cast<uint32_t>(HexValue(s_[pos_++]));
          }
          if (e == 'x') {
            out += static_cast<char>(cp);
          } else if (!AppendUtf8(cp, &out)) {
            return Error(pos_, "escape is not a valid Unicode code point");
          }
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2; ++i) {
              if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '7')
                return Error(pos_, "bad octal escape in string");
              v = v * 8 + static_cast<uint32_t>(s_[pos_++] - '0');
            }
            if (v > 255) return Error(pos_, "octal escape value > 255");
            out += static_cast<char>(v);
          } else {
            // Kept as written, like store::ParseSelector: regex escapes such as \d or \.
            // reach RE2 unchanged.
            out += '\\';
            out += e;
          }
      }
    }
    if (pos_ >= s_.size()) return Error(at, "unterminated quoted string");
    ++pos_;
    return out;
  }

  // `name`, `name{…}` or `{…}`; `name` has been consumed.
  Result<ExprPtr> ParseSelector(size_t at, const std::string& name) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kVectorSelector;
    e->type = V;
    e->pos = at;
    if (!name.empty()) {
      auto m =
          store::Matcher::Make(store::MatchOp::kEqual, std::string(store::kMetricNameLabel), name);
      if (!m.ok()) return Error(at, m.status().message());
      e->matchers.push_back(std::move(m).value());
    }
    if (TakeChar('{')) {
      while (!Peek('}')) {
        SkipSpace();
        const size_t label_pos = pos_;
        size_t end = pos_;
        while (end < s_.size() && IsIdentChar(s_[end]) && s_[end] != ':') ++end;
        std::string label(s_.substr(pos_, end - pos_));
        if (label.empty() || !store::IsValidLabelName(label))
          return Error(label_pos, "unexpected " + Describe(label_pos) +
                                      " in label matching, expected label name");
        pos_ = end;
        SkipSpace();
        store::MatchOp op;
        const std::string_view rest = s_.substr(pos_);
        if (rest.substr(0, 2) == "=~") {
          op = store::MatchOp::kRegex;
          pos_ += 2;
        } else if (rest.substr(0, 2) == "!~") {
          op = store::MatchOp::kNotRegex;
          pos_ += 2;
        } else if (rest.substr(0, 2) == "!=") {
          op = store::MatchOp::kNotEqual;
          pos_ += 2;
        } else if (rest.substr(0, 1) == "=") {
          op = store::MatchOp::kEqual;
          pos_ += 1;
        } else {
          return Error(pos_, "unexpected " + Describe(pos_) +
                                 " in label matching, expected one of \"=\", \"!=\", \"=~\", "
                                 "\"!~\"");
        }
        SkipSpace();
        if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\'' && s_[pos_] != '`'))
          return Error(pos_,
                       "unexpected " + Describe(pos_) + " in label matching, expected string");
        auto value = ParseString();
        if (!value.ok()) return value.status();
        if (label == store::kMetricNameLabel && !name.empty())
          return Error(label_pos, "metric name must not be set twice: \"" + name + "\" or \"" +
                                      value.value() + "\"");
        auto m = store::Matcher::Make(op, label, std::move(value).value());
        if (!m.ok()) return Error(label_pos, m.status().message());
        e->matchers.push_back(std::move(m).value());
        if (e->matchers.size() > 64) return Error(label_pos, "too many label matchers (limit 64)");
        if (!TakeChar(',') && !Peek('}'))
          return Error(
              pos_, "unexpected " + Describe(pos_) + " in label matching, expected \",\" or \"}\"");
      }
      ++pos_;  // '}'
    }
    const bool any_non_empty =
        std::any_of(e->matchers.begin(), e->matchers.end(),
                    [](const store::Matcher& m) { return !m.MatchesEmpty(); });
    if (!any_non_empty)
      return Error(at, "vector selector must contain at least one non-empty matcher");
    return e;
  }

  // A duration in a range or after offset: Prometheus's units (5m, 1h30m), or a plain number
  // of seconds (`[10]`, `offset 1.5`; standard since Prometheus 3.0).
  Result<int64_t> ParseDurationOrSeconds(size_t dur_pos, bool allow_zero) {
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.'))
      ++pos_;
    const std::string_view text = s_.substr(dur_pos, pos_ - dur_pos);
    if (pos_ < s_.size() && s_[pos_] == '(')  // (5m + 1m), step(), range()
      return Error(dur_pos, "duration expressions (experimental in Prometheus) are not supported",
                   StatusCode::kNotSupported);
    const bool numeric = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
    });
    if (!numeric) {
      if (allow_zero && text == "0") return int64_t{0};
      auto d = ParseDurationMs(text, opts_.max_duration_ms);
      if (!d.ok()) return Error(dur_pos, d.status().message());
      return *d;
    }
    double secs = 0;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), secs);
    if (r.ec != std::errc() || r.ptr != text.data() + text.size())
      return Error(dur_pos, "bad duration \"" + std::string(text) + "\"");
    if (!(secs * 1000 <= static_cast<double>(opts_.max_duration_ms)))
      return Error(dur_pos, "bad duration \"" + std::string(text) + "\": longer than the limit");
    const auto ms = static_cast<int64_t>(std::llround(secs * 1000));
    if (ms <= 0 && !allow_zero) return Error(dur_pos, "duration must be greater than 0");
    return ms;
  }

  static bool TakesModifiers(const Expr& e) {
    return e.kind == Expr::Kind::kVectorSelector || e.kind == Expr::Kind::kMatrixSelector ||
           e.kind == Expr::Kind::kSubquery;
  }

  // `@ <unix seconds>`, `@ start()`, `@ end()`.
  Status ParseAt(Expr* e, size_t at) {
    if (!TakesModifiers(*e))
      return Error(at,
                   "@ modifier must be preceded by an instant vector selector or range vector "
                   "selector or a subquery");
    if (e->at != Expr::At::kNone) return Error(at, "@ <timestamp> may not be set multiple times");
    ++pos_;
    SkipSpace();
    const std::string_view w = PeekWord();
    if (w == "start" || w == "end") {
      pos_ += w.size();
      GW_RETURN_IF_ERROR(Expect('(', "in @ modifier"));
      GW_RETURN_IF_ERROR(Expect(')', "in @ modifier"));
      e->at = w == "start" ? Expr::At::kStart : Expr::At::kEnd;
      return Status::Ok();
    }
    const size_t num_pos = pos_;
    bool negative = false;
    if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) {
      negative = s_[pos_] == '-';
      ++pos_;
      SkipSpace();
    }
    const std::string_view word = PeekWord();
    if (EqualsIgnoreCase(word, "inf") || EqualsIgnoreCase(word, "nan"))
      return Error(num_pos, "timestamp out of bounds for @ modifier: " +
                                std::string(EqualsIgnoreCase(word, "nan") ? "NaN"
                                            : negative                    ? "-Inf"
                                                                          : "Inf"));
    double secs = 0;
    // A duration counts from the epoch (`@ 1m40s` is `@ 100`), as Prometheus reads it.
    size_t end = pos_;
    while (end < s_.size() && std::isalnum(static_cast<unsigned char>(s_[end]))) ++end;
    const std::string_view token = s_.substr(pos_, end - pos_);
    if (!token.empty() && std::isdigit(static_cast<unsigned char>(token[0])) &&
        !std::all_of(token.begin(), token.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) &&
        token.find_first_of("eExX") == std::string_view::npos) {
      auto d = ParseDurationMs(token, std::numeric_limits<int64_t>::max());
      if (!d.ok()) return Error(pos_, d.status().message());
      pos_ = end;
      secs = static_cast<double>(*d) / 1000;
    } else {
      auto n = ParseNumber();
      if (!n.ok()) return Error(num_pos, "unexpected " + Describe(num_pos) + " in @ modifier");
      secs = (*n)->number;
    }
    if (negative) secs = -secs;
    // Prometheus's timestamp.FromFloatSeconds, within int64 milliseconds.
    if (!std::isfinite(secs) || std::fabs(secs) > 9.2e15)
      return Error(num_pos, "timestamp out of bounds for @ modifier: " + FormatNumber(secs));
    e->at = Expr::At::kTime;
    e->at_ms = static_cast<int64_t>(std::llround(secs * 1000));
    return Status::Ok();
  }

  // Range `[5m]`, subquery `[30m:1m]`, `offset 5m` and `@ t` after an expression.
  Result<ExprPtr> ParsePostfix(ExprPtr e) {
    while (true) {
      SkipSpace();
      const size_t at = pos_;
      if (pos_ < s_.size() && s_[pos_] == '[') {
        ++pos_;
        SkipSpace();
        auto range = ParseDurationOrSeconds(pos_, /*allow_zero=*/false);
        if (!range.ok()) return range.status();
        SkipSpace();
        if (pos_ < s_.size() && std::string_view("+-*/%^").find(s_[pos_]) != std::string_view::npos)
          return Error(pos_, "duration expressions (experimental in Prometheus) are not supported",
                       StatusCode::kNotSupported);
        if (TakeChar(':')) {
          // A subquery: any instant vector expression, evaluated every step over the range.
          if (e->type != V)
            return Error(at, "subquery is only allowed on instant vector, got " +
                                 std::string(TypeWords(e->type)) + " instead");
          SkipSpace();
          int64_t step = 0;
          if (!Peek(']')) {
            auto st = ParseDurationOrSeconds(pos_, /*allow_zero=*/false);
            if (!st.ok()) return st.status();
            step = *st;
          }
          GW_RETURN_IF_ERROR(Expect(']', "in subquery"));
          auto sq = std::make_unique<Expr>();
          sq->kind = Expr::Kind::kSubquery;
          sq->type = M;
          sq->pos = at;
          sq->range_ms = *range;
          sq->step_ms = step;
          sq->lhs = std::move(e);
          GW_RETURN_IF_ERROR(SetHeight(sq.get(), at));
          e = std::move(sq);
          continue;
        }
        if (e->kind != Expr::Kind::kVectorSelector)
          return Error(at, "ranges only allowed for vector selectors");
        if (e->offset_ms != 0) return Error(at, "no offset modifiers allowed before range");
        if (e->at != Expr::At::kNone) return Error(at, "no @ modifiers allowed before range");
        GW_RETURN_IF_ERROR(Expect(']', "in range"));
        e->kind = Expr::Kind::kMatrixSelector;
        e->type = M;
        e->range_ms = *range;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '@') {
        GW_RETURN_IF_ERROR(ParseAt(e.get(), at));
        continue;
      }
      if (const std::string_view w = PeekWord(); w == "anchored" || w == "smoothed")
        return Error(at,
                     "the " + std::string(w) +
                         " range selector modifier (experimental in Prometheus) is not supported",
                     StatusCode::kNotSupported);
      if (EqualsIgnoreCase(PeekWord(), "offset")) {
        if (!TakesModifiers(*e) || e->offset_ms != 0)
          return Error(at,
                       "offset modifier must be preceded by an instant vector selector or "
                       "range vector selector or a subquery");
        pos_ += 6;
        SkipSpace();
        const bool negative = pos_ < s_.size() && s_[pos_] == '-';
        if (negative) {
          ++pos_;
          SkipSpace();
        }
        auto off = ParseDurationOrSeconds(pos_, /*allow_zero=*/true);
        if (!off.ok()) return off.status();
        e->offset_ms = negative ? -*off : *off;
        continue;
      }
      return e;
    }
  }

  // `(a, b, …)` of label names, trailing comma allowed.
  Result<std::vector<std::string>> ParseLabelList(std::string_view context) {
    GW_RETURN_IF_ERROR(Expect('(', "in grouping opts"));
    std::vector<std::string> out;
    while (!Peek(')')) {
      SkipSpace();
      const size_t at = pos_;
      size_t end = pos_;
      while (end < s_.size() && IsIdentChar(s_[end]) && s_[end] != ':') ++end;
      std::string name(s_.substr(pos_, end - pos_));
      if (!store::IsValidLabelName(name))
        return Error(
            at, "unexpected " + Describe(at) + " in " + std::string(context) + ", expected label");
      pos_ = end;
      out.push_back(std::move(name));
      if (out.size() > store::kMaxLabels)
        return Error(at, "too many labels in " + std::string(context));
      if (!TakeChar(',') && !Peek(')'))
        return Error(pos_, "unexpected " + Describe(pos_) + " in " + std::string(context) +
                               ", expected \",\" or \")\"");
    }
    ++pos_;
    return out;
  }

  Result<ExprPtr> ParseAggregation(size_t at, const AggInfo& info) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kAggregate;
    e->type = V;
    e->pos = at;
    e->agg_op = info.op;
    bool have_grouping = false;
    const auto grouping = [&]() -> Status {
      const std::string_view word = PeekWord();
      if (EqualsIgnoreCase(word, "by") || EqualsIgnoreCase(word, "without")) {
        e->without = EqualsIgnoreCase(word, "without");
        pos_ += word.size();
        auto labels = ParseLabelList("grouping opts");
        if (!labels.ok()) return labels.status();
        e->grouping = std::move(labels).value();
        have_grouping = true;
      }
      return Status::Ok();
    };
    GW_RETURN_IF_ERROR(grouping());
    GW_RETURN_IF_ERROR(Expect('(', "in aggregation"));
    std::vector<ExprPtr> args;
    while (!Peek(')')) {
      auto a = ParseBinary(0);
      if (!a.ok()) return a.status();
      args.push_back(std::move(a).value());
      if (!TakeChar(',') && !Peek(')'))
        return Error(pos_,
                     "unexpected " + Describe(pos_) + " in aggregation, expected \",\" or \")\"");
      if (args.size() > 8) break;  // the count check below names the number
    }
    GW_RETURN_IF_ERROR(Expect(')', "in aggregation"));
    const size_t want = info.has_param ? 2 : 1;
    if (args.empty()) return Error(at, "no arguments for aggregate expression provided");
    if (args.size() != want)
      return Error(at, "wrong number of arguments for aggregate expression provided, expected " +
                           std::to_string(want) + ", got " + std::to_string(args.size()));
    if (!have_grouping) GW_RETURN_IF_ERROR(grouping());
    if (info.has_param) {
      e->param = std::move(args[0]);
      const ValueType want_param = info.op == AggOp::kCountValues ? Str : S;
      if (e->param->type != want_param)
        return Error(e->param->pos, "expected type " + std::string(TypeWords(want_param)) +
                                        " in aggregation parameter, got " +
                                        std::string(TypeWords(e->param->type)));
      if (info.op == AggOp::kCountValues && !store::IsValidLabelName(e->param->str))
        return Error(e->param->pos, "invalid label name \"" + e->param->str + "\"");
    }
    e->lhs = std::move(args.back());
    if (e->lhs->type != V)
      return Error(e->lhs->pos, "expected type instant vector in aggregation expression, got " +
                                    std::string(TypeWords(e->lhs->type)));
    GW_RETURN_IF_ERROR(SetHeight(e.get(), at));
    return e;
  }

  Result<ExprPtr> ParseCall(size_t at, const std::string& name) {
    const FuncInfo* info = nullptr;
    for (const auto& f : Funcs())
      if (f.name == name) info = &f;
    if (!info) {
      for (auto u : kUnsupportedFuncs)
        if (u == name)
          return Error(at,
                       "function \"" + name +
                           "\" is not supported by gpuwatch (see "
                           "docs/promql.md)",
                       StatusCode::kNotSupported);
      return Error(at, "unknown function with name \"" + name + "\"");
    }
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kCall;
    e->func = info->func;
    e->type = info->returns;
    e->pos = at;
    GW_RETURN_IF_ERROR(Expect('(', "in function call"));
    while (!Peek(')')) {
      auto a = ParseBinary(0);
      if (!a.ok()) return a.status();
      e->args.push_back(std::move(a).value());
      if (e->args.size() > 8) break;  // the count check below names the number
      if (!TakeChar(',') && !Peek(')'))
        return Error(pos_,
                     "unexpected " + Describe(pos_) + " in function call, expected \",\" or \")\"");
    }
    GW_RETURN_IF_ERROR(Expect(')', "in function call"));
    const size_t n = e->args.size();
    if (n < static_cast<size_t>(info->min_args) || (!info->variadic && n > info->args.size())) {
      const std::string want =
          info->variadic ? "at least " + std::to_string(info->min_args)
          : info->min_args == static_cast<int>(info->args.size())
              ? std::to_string(info->min_args)
              : std::to_string(info->min_args) + " or " + std::to_string(info->args.size());
      return Error(at, "expected " + want + " argument(s) in call to \"" + name + "\", got " +
                           std::to_string(n));
    }
    for (size_t i = 0; i < n; ++i) {
      const ValueType want = info->args[std::min(i, info->args.size() - 1)];
      if (e->args[i]->type != want)
        return Error(e->args[i]->pos, "expected type " + std::string(TypeWords(want)) +
                                          " in call to function \"" + name + "\", got " +
                                          std::string(TypeWords(e->args[i]->type)));
    }
    if (info->func == Func::kLabelJoin) {
      if (!store::IsValidLabelName(e->args[1]->str))
        return Error(e->args[1]->pos,
                     "invalid destination label name in label_join(): " + e->args[1]->str);
      for (size_t i = 3; i < n; ++i)
        if (!store::IsValidLabelName(e->args[i]->str))
          return Error(e->args[i]->pos,
                       "invalid source label name in label_join(): " + e->args[i]->str);
    }
    if (info->func == Func::kLabelReplace) {
      if (!store::IsValidLabelName(e->args[1]->str))
        return Error(e->args[1]->pos, "invalid destination label name in label_replace(): \"" +
                                          e->args[1]->str + "\"");
    }
    GW_RETURN_IF_ERROR(SetHeight(e.get(), at));
    return e;
  }

  std::string_view s_;
  const ParseOptions& opts_;
  size_t pos_ = 0;
  int depth_ = 0;
};

std::string FormatDurationMs(int64_t ms) {
  if (ms == 0) return "0s";
  std::string out;
  if (ms < 0) {
    out = "-";
    ms = -ms;
  }
  static constexpr std::pair<int64_t, const char*> kUnits[] = {
      {int64_t{365} * 24 * 3600 * 1000, "y"},
      {int64_t{7} * 24 * 3600 * 1000, "w"},
      {int64_t{24} * 3600 * 1000, "d"},
      {int64_t{3600} * 1000, "h"},
      {60 * 1000, "m"},
      {1000, "s"},
      {1, "ms"}};
  for (const auto& [unit, name] : kUnits) {
    if (ms >= unit) {
      out += std::to_string(ms / unit) + name;
      ms %= unit;
    }
  }
  return out;
}

std::string FormatNumber(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest that round-trips
  return std::string(buf, r.ptr);
}

std::string QuoteString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

void AppendModifiers(const Expr& e, std::string* out);

void AppendMatchers(const Expr& e, std::string* out) {
  std::string name;
  std::vector<std::string> rest;
  for (const auto& m : e.matchers) {
    if (m.name() == store::kMetricNameLabel && m.op() == store::MatchOp::kEqual && name.empty()) {
      name = m.value();
      continue;
    }
    static constexpr const char* kOps[] = {"=", "!=", "=~", "!~"};
    rest.push_back(m.name() + kOps[static_cast<int>(m.op())] + QuoteString(m.value()));
  }
  *out += name;
  if (!rest.empty() || name.empty()) {
    *out += '{';
    for (size_t i = 0; i < rest.size(); ++i) *out += (i ? ", " : "") + rest[i];
    *out += '}';
  }
  if (e.kind == Expr::Kind::kMatrixSelector) *out += "[" + FormatDurationMs(e.range_ms) + "]";
  AppendModifiers(e, out);
}

void AppendModifiers(const Expr& e, std::string* out) {
  if (e.offset_ms != 0) *out += " offset " + FormatDurationMs(e.offset_ms);
  if (e.at == Expr::At::kStart) *out += " @ start()";
  if (e.at == Expr::At::kEnd) *out += " @ end()";
  if (e.at == Expr::At::kTime) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " @ %.3f", static_cast<double>(e.at_ms) / 1000);
    *out += buf;
  }
}

std::string JoinLabels(const std::vector<std::string>& v) {
  std::string out = "(";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out + ")";
}

}  // namespace

std::string_view BinOpName(BinOp op) {
  for (const auto& i : kBinOps)
    if (i.op == op) return i.text;
  return "?";
}

bool IsComparison(BinOp op) {
  return op == BinOp::kEq || op == BinOp::kNe || op == BinOp::kGt || op == BinOp::kLt ||
         op == BinOp::kGe || op == BinOp::kLe;
}

bool IsSetOperator(BinOp op) {
  return op == BinOp::kAnd || op == BinOp::kOr || op == BinOp::kUnless;
}

std::string_view AggOpName(AggOp op) {
  for (const auto& a : kAggs)
    if (a.op == op) return a.name;
  return "?";
}

std::string_view FuncName(Func f) {
  for (const auto& i : Funcs())
    if (i.func == f) return i.name;
  return "?";
}

Result<ExprPtr> ParseExpr(std::string_view query, const ParseOptions& options) {
  return Parser(query, options).Parse();
}

Result<int64_t> ParseDurationMs(std::string_view text, int64_t max_ms) {
  static constexpr std::pair<std::string_view, int64_t> kUnits[] = {
      {"y", int64_t{365} * 24 * 3600 * 1000},
      {"w", int64_t{7} * 24 * 3600 * 1000},
      {"d", int64_t{24} * 3600 * 1000},
      {"h", int64_t{3600} * 1000},
      {"ms", 1},  // before "m" so "5ms" is not read as 5m + "s"
      {"m", 60 * 1000},
      {"s", 1000}};
  // Canonical order of the units, largest first; each may appear once.
  static constexpr std::string_view kOrder[] = {"y", "w", "d", "h", "m", "s", "ms"};
  const auto bad = [&](const std::string& why) {
    std::string shown(text.substr(0, 32));
    return Status::InvalidArgument("bad duration \"" + shown + "\": " + why);
  };
  if (text.empty()) return bad("empty");
  int64_t total = 0;
  size_t i = 0;
  int next_unit = 0;  // index into kOrder of the smallest unit still allowed
  while (i < text.size()) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return bad("expected a number");
    int64_t n = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      n = n * 10 + (text[i] - '0');
      if (n > max_ms) return bad("too large");
      ++i;
    }
    std::string_view unit;
    int64_t unit_ms = 0;
    for (const auto& [u, ms] : kUnits) {
      if (text.substr(i, u.size()) == u) {
        unit = u;
        unit_ms = ms;
        break;
      }
    }
    if (unit.empty()) return bad("expected a unit (ms, s, m, h, d, w, y)");
    i += unit.size();
    int idx = 0;
    while (kOrder[idx] != unit) ++idx;
    if (idx < next_unit) return bad("units must be given largest first, each once");
    next_unit = idx + 1;
    if (n > max_ms / unit_ms || total > max_ms - n * unit_ms)
      return bad("longer than the limit of " + FormatDurationMs(max_ms));
    total += n * unit_ms;
  }
  if (total == 0) return bad("must be greater than 0");
  return total;
}

std::string ExprToString(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kNumber:
      return FormatNumber(e.number);
    case Expr::Kind::kString:
      return QuoteString(e.str);
    case Expr::Kind::kVectorSelector:
    case Expr::Kind::kMatrixSelector: {
      std::string out;
      AppendMatchers(e, &out);
      return out;
    }
    case Expr::Kind::kUnaryMinus:
      return "-(" + ExprToString(*e.lhs) + ")";
    case Expr::Kind::kBinary: {
      std::string op(BinOpName(e.bin_op));
      if (e.return_bool) op += " bool";
      if (e.has_matching)
        op += std::string(e.matching_on ? " on" : " ignoring") + JoinLabels(e.matching_labels);
      if (e.card != Expr::Card::kOneToOne)
        op += std::string(e.card == Expr::Card::kManyToOne ? " group_left" : " group_right") +
              JoinLabels(e.include_labels);
      return "(" + ExprToString(*e.lhs) + " " + op + " " + ExprToString(*e.rhs) + ")";
    }
    case Expr::Kind::kCall: {
      std::string out(FuncName(e.func));
      out += '(';
      for (size_t i = 0; i < e.args.size(); ++i) out += (i ? ", " : "") + ExprToString(*e.args[i]);
      return out + ")";
    }
    case Expr::Kind::kSubquery: {
      std::string out = ExprToString(*e.lhs) + "[" + FormatDurationMs(e.range_ms) + ":" +
                        (e.step_ms ? FormatDurationMs(e.step_ms) : "") + "]";
      AppendModifiers(e, &out);
      return out;
    }
    case Expr::Kind::kAggregate: {
      std::string out(AggOpName(e.agg_op));
      if (e.without || !e.grouping.empty())
        out += std::string(e.without ? " without " : " by ") + JoinLabels(e.grouping);
      out += " (";
      if (e.param) out += ExprToString(*e.param) + ", ";
      return out + ExprToString(*e.lhs) + ")";
    }
  }
  return "?";
}

}  // namespace gpuwatch::query
