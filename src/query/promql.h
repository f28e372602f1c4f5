// PromQL parser: query text → a type-checked syntax tree, for the subset docs/promql.md lists.
//
// The text arrives over HTTP from anyone who can reach the agent, so the parser bounds what a
// query may cost before any data is read: the text size, the depth of the tree (the evaluator
// and the destructor recurse over it) and durations (so time arithmetic cannot overflow).
// Errors are InvalidArgument (NotSupported for known PromQL the subset leaves out) and start
// with the position, as Prometheus's do: `1:7: parse error: unexpected "]"`.
//
// Types are checked here, as Prometheus does, so the evaluator never meets a range vector
// where it needs an instant vector. Thread-safety: ParseExpr is a pure function; an Expr is
// immutable after parsing and safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/labels.h"

namespace gpuwatch::query {

enum class ValueType { kScalar, kVector, kMatrix, kString };
// "scalar", "vector", "matrix", "string": the API's resultType spelling.
std::string_view ValueTypeName(ValueType type);

enum class BinOp {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMod,
  kPow,
  kAtan2,  // atan2(lhs, rhs), written `a atan2 b`
  kEq,
  kNe,
  kGt,
  kLt,
  kGe,
  kLe,
  kAnd,
  kOr,
  kUnless,
};
std::string_view BinOpName(BinOp op);  // "+", "==", "and", …
bool IsComparison(BinOp op);
bool IsSetOperator(BinOp op);

enum class AggOp {
  kSum,
  kAvg,
  kMin,
  kMax,
  kCount,
  kGroup,
  kStddev,
  kStdvar,
  kQuantile,
  kTopk,
  kBottomk,
  kLimitk,  // the first k series of each group, in input (label) order
  kCountValues,
};
std::string_view AggOpName(AggOp op);

// The functions the subset knows; each has a fixed signature checked by the parser.
enum class Func {
  kAbs,
  kAbsent,
  kAbsentOverTime,
  kAcos,
  kAcosh,
  kAsin,
  kAsinh,
  kAtan,
  kAtanh,
  kAvgOverTime,
  kCeil,
  kChanges,
  kClamp,
  kClampMax,
  kClampMin,
  kCos,
  kCosh,
  kCountOverTime,
  kDayOfMonth,
  kDayOfWeek,
  kDayOfYear,
  kDaysInMonth,
  kDeg,
  kDelta,
  kDeriv,
  kExp,
  kFirstOverTime,
  kFloor,
  kHistogramFraction,
  kHistogramQuantile,
  kHour,
  kIdelta,
  kIncrease,
  kIrate,
  kLabelJoin,
  kLabelReplace,
  kLastOverTime,
  kLn,
  kLog10,
  kLog2,
  kMadOverTime,
  kMaxOverTime,
  kMinOverTime,
  kMinute,
  kMonth,
  kPi,
  kPredictLinear,
  kPresentOverTime,
  kQuantileOverTime,
  kRad,
  kRate,
  kResets,
  kRound,
  kScalar,
  kSgn,
  kSin,
  kSinh,
  kSort,
  kSortByLabel,
  kSortByLabelDesc,
  kSortDesc,
  kSqrt,
  kStddevOverTime,
  kStdvarOverTime,
  kSumOverTime,
  kTan,
  kTanh,
  kTime,
  kTimestamp,
  kVector,
  kYear,
};
std::string_view FuncName(Func f);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// One node. A tagged struct rather than a class hierarchy: the evaluator switches on `kind`
// and every field is plain data.
struct Expr {
  enum class Kind {
    kNumber,          // number
    kString,          // str
    kVectorSelector,  // matchers, offset_ms
    kMatrixSelector,  // matchers, offset_ms, range_ms
    kUnaryMinus,      // lhs
    kBinary,          // bin_op, lhs, rhs, return_bool, matching
    kCall,            // func, args
    kAggregate,       // agg_op, without, grouping, param (or null), lhs = the aggregated vector
    kSubquery,        // lhs[range_ms:step_ms] offset_ms @ at: lhs evaluated every step_ms
  };
  Kind kind = Kind::kNumber;
  ValueType type = ValueType::kScalar;  // what evaluating the node yields
  size_t pos = 0;                       // byte offset of the node in the query text
  int height = 1;                       // of the subtree; bounded by ParseOptions::max_depth

  double number = 0;
  std::string str;

  std::vector<store::Matcher> matchers;
  int64_t offset_ms = 0;
  int64_t range_ms = 0;
  int64_t step_ms = 0;  // a subquery's resolution; 0: EngineOptions::default_subquery_step
  // The @ modifier: the selector is evaluated at a fixed time (at_ms), or at the query's
  // start or end, whatever the step; offset applies from there.
  enum class At { kNone, kTime, kStart, kEnd };
  At at = At::kNone;
  int64_t at_ms = 0;

  BinOp bin_op = BinOp::kAdd;
  bool return_bool = false;
  bool has_matching = false;  // on(...) or ignoring(...) was written
  bool matching_on = false;   // on(...) rather than ignoring(...)
  std::vector<std::string> matching_labels;
  // group_left (many-to-one: many series on the left per match) or group_right (one-to-many),
  // with the labels copied from the "one" side into the result (`include_labels`).
  enum class Card { kOneToOne, kManyToOne, kOneToMany };
  Card card = Card::kOneToOne;
  std::vector<std::string> include_labels;

  Func func = Func::kAbs;
  std::vector<ExprPtr> args;

  AggOp agg_op = AggOp::kSum;
  bool without = false;
  std::vector<std::string> grouping;
  ExprPtr param;

  ExprPtr lhs, rhs;
};

struct ParseOptions {
  size_t max_query_bytes = 64 * 1024;
  int max_depth = 256;  // of the syntax tree, counting parentheses
  // Range and offset durations beyond this are rejected (10 years).
  int64_t max_duration_ms = int64_t{10} * 365 * 24 * 3600 * 1000;
};

Result<ExprPtr> ParseExpr(std::string_view query, const ParseOptions& options = {});

// Prometheus's duration syntax: units y w d h m s ms, largest first, each at most once,
// combined like 1h30m; y = 365d. Rejects an empty or zero duration and values above
// `max_ms`.
Result<int64_t> ParseDurationMs(std::string_view text,
                                int64_t max_ms = int64_t{10} * 365 * 24 * 3600 * 1000);

// The tree back as PromQL text (normalized spacing and parentheses); for messages and tests.
std::string ExprToString(const Expr& e);

}  // namespace gpuwatch::query
