#include "query/promql.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace gpuwatch::query {
namespace {

std::string Parsed(const std::string& q) {
  auto e = ParseExpr(q);
  if (!e.ok()) return "ERROR " + e.status().message();
  return ExprToString(**e);
}

std::string ErrorOf(const std::string& q) {
  auto e = ParseExpr(q);
  return e.ok() ? "(parsed)" : e.status().message();
}

TEST(PromqlParse, NumbersAndLiterals) {
  EXPECT_EQ(Parsed("1"), "1");
  EXPECT_EQ(Parsed("1.5e3"), "1500");
  EXPECT_EQ(Parsed(".5"), "0.5");
  EXPECT_EQ(Parsed("0x1F"), "31");
  EXPECT_EQ(Parsed("Inf"), "Inf");
  EXPECT_EQ(Parsed("-inf"), "-Inf");
  EXPECT_EQ(Parsed("NaN"), "NaN");
  EXPECT_EQ(Parsed("\"a\\tb\""), "\"a\tb\"");
  EXPECT_EQ(Parsed("'it\\'s'"), "\"it's\"");
  EXPECT_EQ(Parsed("`raw\\d`"), "\"raw\\\\d\"");
  EXPECT_EQ(Parsed("\"\\u00e9\\x41\\101\""),
            "\"\xc3\xa9"
            "AA\"");
}

TEST(PromqlParse, Selectors) {
  EXPECT_EQ(Parsed("up"), "up");
  EXPECT_EQ(Parsed("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\", UUID!~\"GPU-1.*\",}"),
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\", UUID!~\"GPU-1.*\"}");
  EXPECT_EQ(Parsed("{__name__=~\"DCGM_.*\"}"), "{__name__=~\"DCGM_.*\"}");
  EXPECT_EQ(Parsed("job:up:sum"), "job:up:sum");
  EXPECT_EQ(Parsed("foo[5m]"), "foo[5m]");
  EXPECT_EQ(Parsed("foo[1h30m] offset 1d"), "foo[1h30m] offset 1d");
  EXPECT_EQ(Parsed("foo offset -5m"), "foo offset -5m");
  EXPECT_EQ(Parsed("foo[90s]"), "foo[1m30s]");
}

TEST(PromqlParse, PrecedenceAsPrometheus) {
  EXPECT_EQ(Parsed("1 + 2 * 3"), "(1 + (2 * 3))");
  EXPECT_EQ(Parsed("1 - 2 - 3"), "((1 - 2) - 3)");
  EXPECT_EQ(Parsed("2 ^ 3 ^ 2"), "(2 ^ (3 ^ 2))");
  EXPECT_EQ(Parsed("-2 ^ 2"), "-((2 ^ 2))");
  EXPECT_EQ(Parsed("-a * b"), "(-(a) * b)");
  EXPECT_EQ(Parsed("a or b and c unless d"), "(a or ((b and c) unless d))");
  EXPECT_EQ(Parsed("a > b + 1 and c"), "((a > (b + 1)) and c)");
  EXPECT_EQ(Parsed("(1 + 2) * 3"), "((1 + 2) * 3)");
  EXPECT_EQ(Parsed("a % 3 / 2"), "((a % 3) / 2)");
  EXPECT_EQ(Parsed("1 == bool 2"), "(1 == bool 2)");
  EXPECT_EQ(Parsed("a / on(gpu, UUID) b"), "(a / on(gpu, UUID) b)");
  EXPECT_EQ(Parsed("a == bool ignoring(kind) b"), "(a == bool ignoring(kind) b)");
}

TEST(PromqlParse, AggregationsGroupingEitherSide) {
  EXPECT_EQ(Parsed("sum by (gpu) (x)"), "sum by (gpu) (x)");
  EXPECT_EQ(Parsed("sum(x) by (gpu, host)"), "sum by (gpu, host) (x)");
  EXPECT_EQ(Parsed("SUM without(instance)(x)"), "sum without (instance) (x)");
  EXPECT_EQ(Parsed("topk(3, x)"), "topk (3, x)");
  EXPECT_EQ(Parsed("quantile(0.9, x) without (a)"), "quantile without (a) (0.9, x)");
  EXPECT_EQ(Parsed("count_values(\"v\", x)"), "count_values (\"v\", x)");
  EXPECT_EQ(Parsed("sum by () (x)"), "sum (x)");
}

TEST(PromqlParse, FunctionsAreTypeChecked) {
  EXPECT_EQ(Parsed("rate(x[5m])"), "rate(x[5m])");
  EXPECT_EQ(Parsed("quantile_over_time(0.5, x[5m])"), "quantile_over_time(0.5, x[5m])");
  EXPECT_EQ(Parsed("round(x)"), "round(x)");
  EXPECT_EQ(Parsed("round(x, 5)"), "round(x, 5)");
  EXPECT_EQ(Parsed("time()"), "time()");
  EXPECT_EQ(ErrorOf("rate(x)"),
            "1:6: parse error: expected type range vector in call to function \"rate\", got "
            "instant vector");
  EXPECT_EQ(ErrorOf("abs(x[5m])"),
            "1:5: parse error: expected type instant vector in call to function \"abs\", got "
            "range vector");
  EXPECT_EQ(ErrorOf("rate(x[5m], 1)"),
            "1:1: parse error: expected 1 argument(s) in call to \"rate\", got 2");
  EXPECT_EQ(ErrorOf("round()"),
            "1:1: parse error: expected 1 or 2 argument(s) in call to \"round\", got 0");
  EXPECT_EQ(ErrorOf("foo_bar(x)"), "1:1: parse error: unknown function with name \"foo_bar\"");
  auto e = ParseExpr("histogram_avg(x)");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotSupported);
  // Variadic: label_join's sources, sort_by_label's labels.
  EXPECT_TRUE(ParseExpr(R"(label_join(x, "d", ",", "a", "b", "c"))").ok());
  EXPECT_EQ(ErrorOf(R"(label_join(x, "d"))"),
            "1:1: parse error: expected at least 3 argument(s) in call to \"label_join\", got 2");
  EXPECT_EQ(ErrorOf(R"(label_join(x, "1d", ",", "a"))"),
            "1:15: parse error: invalid destination label name in label_join(): 1d");
  EXPECT_TRUE(ParseExpr(R"(sort_by_label(x, "a", "b"))").ok());
  EXPECT_TRUE(ParseExpr("hour()").ok());
  EXPECT_TRUE(ParseExpr("a atan2 b * 2").ok());
}

TEST(PromqlParse, ErrorsNamePositionAndReason) {
  EXPECT_EQ(ErrorOf(""), "1:1: parse error: no expression found in input");
  EXPECT_EQ(ErrorOf("sum(x"),
            "1:6: parse error: unexpected end of input in aggregation, expected \",\" or \")\"");
  EXPECT_EQ(ErrorOf("x{a=\"b\""),
            "1:8: parse error: unexpected end of input in label matching, expected \",\" or \"}\"");
  EXPECT_EQ(ErrorOf("x +\n  )"), "2:3: parse error: unexpected \")\"");
  EXPECT_EQ(ErrorOf("x[5x]"),
            "1:3: parse error: bad duration \"5x\": expected a unit (ms, s, m, h, d, w, y)");
  EXPECT_EQ(ErrorOf("x[0s]"), "1:3: parse error: bad duration \"0s\": must be greater than 0");
  EXPECT_EQ(
      ErrorOf("x[5m1h]"),
      "1:3: parse error: bad duration \"5m1h\": units must be given largest first, each once");
  EXPECT_EQ(ErrorOf("x[11y]"),
            "1:3: parse error: bad duration \"11y\": longer than the limit of 10y");
  EXPECT_EQ(ErrorOf("{}"),
            "1:1: parse error: vector selector must contain at least one non-empty matcher");
  EXPECT_EQ(ErrorOf("{a=~\".*\"}"),
            "1:1: parse error: vector selector must contain at least one non-empty matcher");
  EXPECT_EQ(ErrorOf("foo{__name__=\"bar\"}"),
            "1:5: parse error: metric name must not be set twice: \"foo\" or \"bar\"");
  EXPECT_EQ(ErrorOf("1 > 2"),
            "1:3: parse error: comparisons between scalars must use BOOL modifier");
  EXPECT_EQ(ErrorOf("1 and x"),
            "1:3: parse error: set operator \"and\" not allowed in binary scalar expression");
  EXPECT_EQ(ErrorOf("x + bool y"),
            "1:3: parse error: bool modifier can only be used on comparison operators");
  EXPECT_EQ(
      ErrorOf("x[5m] + 1"),
      "1:7: parse error: binary expression must contain only scalar and instant vector types");
  EXPECT_EQ(ErrorOf("1 + on(a) x"),
            "1:3: parse error: vector matching only allowed between instant vectors");
  EXPECT_EQ(
      ErrorOf("sum(x[5m])"),
      "1:5: parse error: expected type instant vector in aggregation expression, got range vector");
  EXPECT_EQ(ErrorOf("topk(x)"),
            "1:1: parse error: wrong number of arguments for aggregate expression provided, "
            "expected 2, got 1");
  EXPECT_EQ(ErrorOf("x =~ \"a\""), "1:3: parse error: unexpected \"=~\"");
  EXPECT_EQ(ErrorOf("x{a=~\"(\"}"), "1:3: parse error: bad regex '(': missing ): ^(?:()$");
  EXPECT_EQ(ErrorOf("rate(x[5m]) offset 1m"),
            "1:13: parse error: offset modifier must be preceded by an instant vector selector or "
            "range vector selector or a subquery");
  EXPECT_EQ(ErrorOf("5m"),
            "1:1: parse error: unexpected \"5m\" (durations are only allowed in a range [..] or "
            "after offset)");
  EXPECT_EQ(ErrorOf("\"abc"), "1:1: parse error: unterminated quoted string");
  EXPECT_EQ(ErrorOf("-x[5m]"),
            "1:1: parse error: unary expression only allowed on expressions of type scalar or "
            "instant vector, got \"range vector\"");
}

TEST(PromqlParse, UnsupportedFeaturesSaySo) {
  for (const char* q : {"histogram_avg(rate(x[5m]))", "limit_ratio(0.5, x)",
                        // Prometheus 3's experimental syntax.
                        "rate(x[5m+1m])", "x offset (1h)", "x[step()]", "x[5m] anchored",
                        "rate(x[5m] smoothed)", "a + fill(0) b", "a * on(g) fill_left(1) b"}) {
    auto e = ParseExpr(q);
    ASSERT_FALSE(e.ok()) << q;
    EXPECT_EQ(e.status().code(), StatusCode::kNotSupported) << q;
    EXPECT_NE(e.status().message().find("not supported"), std::string::npos) << q;
  }
}

// Prometheus 3: a number is a duration in seconds where a duration belongs.
TEST(PromqlParse, NumbersAsDurations) {
  EXPECT_EQ(Parsed("x[10]"), "x[10s]");
  EXPECT_EQ(Parsed("x[1.5]"), "x[1s500ms]");
  EXPECT_EQ(Parsed("x offset 90"), "x offset 1m30s");
  EXPECT_EQ(ErrorOf("x[0]"), "1:3: parse error: duration must be greater than 0");
}

TEST(PromqlParse, AtModifier) {
  EXPECT_EQ(Parsed("x @ 100"), "x @ 100.000");
  EXPECT_EQ(Parsed("x[5m] @ 1.5 offset 1m"), "x[5m] offset 1m @ 1.500");
  EXPECT_EQ(Parsed("x offset 1m @ -100"), "x offset 1m @ -100.000");
  EXPECT_EQ(Parsed("rate(x[5m] @ start())"), "rate(x[5m] @ start())");
  EXPECT_EQ(Parsed("x @ end()"), "x @ end()");
  EXPECT_EQ(Parsed("x @ 1m40s"), "x @ 100.000") << "a duration counts from the epoch";
  EXPECT_EQ(Parsed("x @ 1e3"), "x @ 1000.000");
  EXPECT_EQ(ErrorOf("x @ 1 @ 2"), "1:7: parse error: @ <timestamp> may not be set multiple times");
  EXPECT_EQ(ErrorOf("x @ 1 [5m]"), "1:7: parse error: no @ modifiers allowed before range");
  EXPECT_EQ(ErrorOf("sum(x) @ 1"),
            "1:8: parse error: @ modifier must be preceded by an instant vector selector or range "
            "vector selector or a subquery");
  EXPECT_EQ(ErrorOf("x @ Inf"), "1:5: parse error: timestamp out of bounds for @ modifier: Inf");
}

TEST(PromqlParse, Subqueries) {
  EXPECT_EQ(Parsed("rate(x[5m])[30m:1m]"), "rate(x[5m])[30m:1m]");
  EXPECT_EQ(Parsed("x[10m:]"), "x[10m:]");
  EXPECT_EQ(Parsed("(a + b)[5m:1m] offset 1m @ 100"), "(a + b)[5m:1m] offset 1m @ 100.000");
  EXPECT_EQ(Parsed("max_over_time(x offset 5m[10m:30s])"), "max_over_time(x offset 5m[10m:30s])");
  EXPECT_EQ(Parsed("max_over_time(x[1h:5m])[2h:10m]"), "max_over_time(x[1h:5m])[2h:10m]")
      << "nested";
  EXPECT_EQ(ErrorOf("1[5m:1m]"),
            "1:2: parse error: subquery is only allowed on instant vector, got scalar instead");
  EXPECT_EQ(ErrorOf("x[5m][10m:1m]"),
            "1:6: parse error: subquery is only allowed on instant vector, got range vector "
            "instead");
  EXPECT_EQ(ErrorOf("x offset 5m[10m]"),
            "1:12: parse error: no offset modifiers allowed before range");
}

TEST(PromqlParse, GroupModifiers) {
  auto e = ParseExpr("a * on(g) group_left(x, y) b");
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ((*e)->card, Expr::Card::kManyToOne);
  EXPECT_EQ((*e)->include_labels, (std::vector<std::string>{"x", "y"}));
  e = ParseExpr("a / ignoring(g) group_right b");
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ((*e)->card, Expr::Card::kOneToMany);
  EXPECT_TRUE((*e)->include_labels.empty());
  EXPECT_EQ(ErrorOf("a and on(g) group_left b"),
            "1:13: parse error: no grouping allowed for \"and\" operation");
  EXPECT_EQ(ErrorOf("a + on(g) group_left(g) b"),
            "1:11: parse error: label \"g\" must not occur in ON and GROUP clause at once");
}

TEST(PromqlParse, BoundsDepthAndSize) {
  std::string deep(300, '(');
  deep += "1" + std::string(300, ')');
  EXPECT_NE(ErrorOf(deep).find("nested too deeply (limit 256)"), std::string::npos);
  std::string chain = "1";
  for (int i = 0; i < 300; ++i) chain += "+1";
  EXPECT_NE(ErrorOf(chain).find("nested too deeply"), std::string::npos);
  std::string minus(300, '-');
  EXPECT_NE(ErrorOf(minus + "x").find("nested too deeply"), std::string::npos);
  std::string shallow = "1";
  for (int i = 0; i < 200; ++i) shallow += "+1";
  EXPECT_EQ(ErrorOf(shallow), "(parsed)");
  EXPECT_EQ(ErrorOf(std::string(70'000, ' ') + "1"), "query is 70001 bytes (limit 65536)");
}

TEST(PromqlParse, Comments) { EXPECT_EQ(Parsed("sum(x) # total\n + 1"), "(sum (x) + 1)"); }

TEST(PromqlDuration, PrometheusSyntax) {
  EXPECT_EQ(*ParseDurationMs("5m"), 300'000);
  EXPECT_EQ(*ParseDurationMs("1h30m"), 5'400'000);
  EXPECT_EQ(*ParseDurationMs("1y2w3d4h5m6s7ms"),
            ((((int64_t{365} + 14 + 3) * 24 + 4) * 60 + 5) * 60 + 6) * 1000 + 7);
  EXPECT_EQ(*ParseDurationMs("250ms"), 250);
  EXPECT_FALSE(ParseDurationMs("").ok());
  EXPECT_FALSE(ParseDurationMs("5").ok());
  EXPECT_FALSE(ParseDurationMs("1.5h").ok());
  EXPECT_FALSE(ParseDurationMs("5mm").ok());
  EXPECT_FALSE(ParseDurationMs("99999999999999999999y").ok());
}

}  // namespace
}  // namespace gpuwatch::query
