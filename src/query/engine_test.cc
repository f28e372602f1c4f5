#include "query/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <string>

#include "query/testing/memory_querier.h"

namespace gpuwatch::query {
namespace {

using store::Labels;
using store::Sample;
using store::Tier;
using testing::MemoryQuerier;

constexpr int64_t kT0 = 1'699'999'200'000;  // a whole hour, so buckets align with it
constexpr int64_t kMin = 60'000;

Labels L(std::initializer_list<std::pair<const char*, const char*>> l) {
  std::vector<store::Label> v;
  for (const auto& [n, x] : l) v.push_back({n, x});
  return *store::MakeLabels(v);
}

// Samples every `every_ms` from `from` (inclusive) to `to` (exclusive), value f(t seconds
// since kT0).
template <typename F>
std::vector<Sample> Gen(int64_t from, int64_t to, int64_t every_ms, F f) {
  std::vector<Sample> out;
  for (int64_t t = from; t < to; t += every_ms)
    out.push_back({t, f(static_cast<double>(t - kT0) / 1000)});
  return out;
}

// "name{a="b"} => v" per sample, sorted, for compact comparisons.
std::map<std::string, double> AsMap(const QueryResult& r) {
  std::map<std::string, double> out;
  for (const auto& s : r.vector) out[store::LabelsToString(s.metric)] = s.value;
  return out;
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two GPUs' utilization at 15 s, and an energy counter rising 1 unit/s with one reset.
    for (int gpu = 0; gpu < 2; ++gpu) {
      const std::string g = std::to_string(gpu);
      q_.Add(L({{"__name__", "util"}, {"gpu", g.c_str()}, {"host", "a"}}),
             Gen(kT0, kT0 + 60 * kMin, 15'000,
                 [gpu](double s) { return gpu ? 80.0 : 20.0 + s / 60; }));
    }
    q_.Add(L({{"__name__", "energy_total"}, {"gpu", "0"}, {"host", "a"}}),
           Gen(kT0, kT0 + 60 * kMin, 15'000, [](double s) { return s < 1800 ? s : s - 1800; }));
  }

  Result<QueryResult> Instant(const std::string& q, int64_t t) {
    return InstantQuery(q_, opts_, q, t);
  }
  std::map<std::string, double> InstantMap(const std::string& q, int64_t t) {
    auto r = Instant(q, t);
    EXPECT_TRUE(r.ok()) << q << ": " << r.status().message();
    if (!r.ok()) return {};
    return AsMap(*r);
  }

  MemoryQuerier q_;
  EngineOptions opts_;
};

TEST_F(EngineTest, InstantSelectorLooksBackFiveMinutes) {
  const int64_t last = kT0 + 60 * kMin - 15'000;
  EXPECT_EQ(InstantMap("util{gpu=\"1\"}", last + 4 * kMin),
            (std::map<std::string, double>{{"util{gpu=\"1\", host=\"a\"}", 80}}));
  // Exactly 5 minutes later the sample has left the (left-open) lookback window.
  EXPECT_TRUE(InstantMap("util{gpu=\"1\"}", last + 5 * kMin).empty());
  EXPECT_TRUE(InstantMap("util", kT0 - 1).empty());
  auto r = Instant("util{gpu=\"0\"}", kT0 + 61'000);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->vector.size(), 1u);
  EXPECT_EQ(r->vector[0].t_ms, kT0 + 60'000);
  EXPECT_DOUBLE_EQ(r->vector[0].value, 21);
  EXPECT_EQ(r->tiers, std::vector<Tier>{Tier::kRaw});
}

TEST_F(EngineTest, OffsetShiftsTheEvaluationTime) {
  EXPECT_EQ(InstantMap("util{gpu=\"0\"} offset 10m", kT0 + 20 * kMin),
            (std::map<std::string, double>{{"util{gpu=\"0\", host=\"a\"}", 30}}));
}

TEST_F(EngineTest, RateAndIncreaseExtrapolateLikePrometheus) {
  // Window (t-1m, t] holds 4 samples 15 s apart spanning 45 s; extrapolated to 60 s.
  EXPECT_EQ(InstantMap("rate(energy_total[1m])", kT0 + 2 * kMin),
            (std::map<std::string, double>{{"{gpu=\"0\", host=\"a\"}", 1}}));
  EXPECT_EQ(InstantMap("increase(energy_total[5m])", kT0 + 10 * kMin),
            (std::map<std::string, double>{{"{gpu=\"0\", host=\"a\"}", 300}}));
  // Across the reset at 30 min (1785 → 0) the increase still counts 1/s.
  EXPECT_EQ(InstantMap("increase(energy_total[5m])", kT0 + 32 * kMin),
            (std::map<std::string, double>{{"{gpu=\"0\", host=\"a\"}", 300 - 15.0 * 300 / 285}}));
  // delta does not know about resets.
  auto d = InstantMap("delta(energy_total[5m])", kT0 + 32 * kMin);
  EXPECT_LT(d.begin()->second, 0);
  EXPECT_EQ(InstantMap("resets(energy_total[5m])", kT0 + 32 * kMin).begin()->second, 1);
  EXPECT_EQ(InstantMap("irate(energy_total[1m])", kT0 + 10 * kMin).begin()->second, 1);
  EXPECT_EQ(InstantMap("idelta(energy_total[1m])", kT0 + 10 * kMin).begin()->second, 15);
  EXPECT_NEAR(InstantMap("deriv(util{gpu=\"0\"}[10m])", kT0 + 20 * kMin).begin()->second, 1.0 / 60,
              1e-12);
}

TEST_F(EngineTest, ExactExtrapolationWithResetAndZeroPoint) {
  MemoryQuerier q;
  q.Add(L({{"__name__", "c"}}), {{kT0 + 0, 0},
                                 {kT0 + 15'000, 10},
                                 {kT0 + 30'000, 20},
                                 {kT0 + 45'000, 5},
                                 {kT0 + 60'000, 15}});
  auto r = InstantQuery(q, opts_, "increase(c[1m])", kT0 + 60'000);
  ASSERT_TRUE(r.ok());
  // 15-10 + 20 (reset) = 25 over 45 s sampled, extrapolated 15 s to the window start.
  EXPECT_DOUBLE_EQ(r->vector.at(0).value, 25.0 * 60 / 45);
  // A counter starting near zero is extrapolated back only to its zero point.
  MemoryQuerier z;
  z.Add(L({{"__name__", "c"}}), {{kT0 + 40'000, 1}, {kT0 + 50'000, 11}, {kT0 + 60'000, 21}});
  r = InstantQuery(z, opts_, "increase(c[1m])", kT0 + 60'000);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->vector.at(0).value, 20.0 * (20 + 1) / 20);
  // Issue 18: the half-interval limit comes first, then the zero point (Prometheus 3,
  // prometheus/prometheus#13725). Samples at 30, 40, 50 s of 10, 20, 30 in (0, 60 s]: the start
  // is 30 s away (over 1.1 intervals), so half an interval, 5 s; the zero point (10 s back)
  // does not shorten that. Prometheus 2's order gave 10 s: 40 instead of 35.
  MemoryQuerier h;
  h.Add(L({{"__name__", "c"}}), {{kT0 + 30'000, 10}, {kT0 + 40'000, 20}, {kT0 + 50'000, 30}});
  r = InstantQuery(h, opts_, "increase(c[1m])", kT0 + 60'000);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->vector.at(0).value, 20.0 * (20 + 5 + 10) / 20);
}

// Issue 18's NaN and overflow class: each as Prometheus 3 answers it (promql/functions.go,
// aggregation.go, quantile.go).
TEST(EngineNumerics, NaNAndOverflowAnswerAsPrometheus) {
  constexpr double kMax = std::numeric_limits<double>::max();
  MemoryQuerier q;
  const auto one = [&](const char* name, const char* i, double v) {
    q.Add(L({{"__name__", name}, {"i", i}, {"__type__", "gauge"}}), {{kT0, v}});
  };
  one("n", "a", std::nan(""));
  one("n", "b", 1);
  one("n", "c", 2);
  one("big", "a", kMax);
  one("big", "b", kMax);
  one("same", "a", 0.1);
  one("same", "b", 0.1);
  one("same", "c", 0.1);
  q.Add(L({{"__name__", "bigt"}}), {{kT0, kMax}, {kT0 + 1000, kMax}, {kT0 + 2000, kMax}});
  q.Add(L({{"__name__", "samet"}}), {{kT0, 0.1}, {kT0 + 1000, 0.1}, {kT0 + 2000, 0.1}});
  EngineOptions o;
  const auto value = [&](const std::string& query) {
    auto r = InstantQuery(q, o, query, kT0 + 2000);
    EXPECT_TRUE(r.ok()) << query << ": " << r.status().message();
    if (!r.ok() || r->vector.size() != 1) return -12345.0;
    return r->vector[0].value;
  };
  // NaN ranks below every number in quantile (Go's sort.Float64s).
  EXPECT_EQ(value("quantile(0.5, n)"), 1);
  EXPECT_TRUE(std::isnan(value("quantile(0, n)")));
  EXPECT_EQ(value("quantile(1, n)"), 2);
  // A mean of finite values is finite: the sum overflows, the incremental mean does not.
  EXPECT_EQ(value("avg(big)"), kMax);
  EXPECT_DOUBLE_EQ(value("avg_over_time(bigt[5s])"), kMax);  // within 4 ulps: the incremental mean
  // Identical values have no spread.
  EXPECT_EQ(value("stddev(same)"), 0);
  EXPECT_EQ(value("stdvar(same)"), 0);
  EXPECT_EQ(value("stddev_over_time(samet[5s])"), 0);
  EXPECT_EQ(value("stdvar_over_time(samet[5s])"), 0);
  // Go's math.Max/Min: a NaN bound makes NaN; an infinity wins over NaN.
  EXPECT_TRUE(std::isnan(value("clamp(n{i=\"b\"}, NaN, 5)")));
  EXPECT_TRUE(std::isnan(value("clamp_min(n{i=\"b\"}, NaN)")));
  EXPECT_TRUE(std::isnan(value("clamp_max(n{i=\"b\"}, NaN)")));
  EXPECT_EQ(value("clamp_min(n{i=\"a\"}, Inf)"), std::numeric_limits<double>::infinity());
  // k is converted to an int64 first.
  auto r = InstantQuery(q, o, "topk(NaN, n)", kT0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "Scalar value NaN overflows int64");
  EXPECT_FALSE(InstantQuery(q, o, "bottomk(1e20, nothing)", kT0).ok());
  // topk and sort keep NaN last.
  r = InstantQuery(q, o, "topk(2, n)", kT0);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->vector.size(), 2u);
  for (const auto& x : r->vector) EXPECT_FALSE(std::isnan(x.value));
  // __type__ and __unit__ go with the name.
  r = InstantQuery(q, o, "abs(n{i=\"b\"})", kT0);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->vector.size(), 1u);
  EXPECT_EQ(store::LabelsToString(r->vector[0].metric), "{i=\"b\"}");
  r = InstantQuery(q, o, "n{i=\"b\"}", kT0);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(store::LabelsToString(r->vector[0].metric).find("__type__"), std::string::npos);
}

TEST_F(EngineTest, OverTimeFunctions) {
  const int64_t t = kT0 + 10 * kMin;  // util{gpu=0} in (5m, 10m]: 20+5.25 … 20+10, 20 samples
  const auto one = [&](const std::string& q) {
    auto m = InstantMap(q, t);
    EXPECT_EQ(m.size(), 1u) << q;
    return m.empty() ? NAN : m.begin()->second;
  };
  EXPECT_DOUBLE_EQ(one("count_over_time(util{gpu=\"0\"}[5m])"), 20);
  EXPECT_DOUBLE_EQ(one("min_over_time(util{gpu=\"0\"}[5m])"), 25.25);
  EXPECT_DOUBLE_EQ(one("max_over_time(util{gpu=\"0\"}[5m])"), 30);
  EXPECT_NEAR(one("avg_over_time(util{gpu=\"0\"}[5m])"), 27.625, 1e-12);
  EXPECT_NEAR(one("sum_over_time(util{gpu=\"0\"}[5m])"), 27.625 * 20, 1e-9);
  EXPECT_DOUBLE_EQ(one("last_over_time(util{gpu=\"0\"}[5m])"), 30);
  EXPECT_NEAR(one("quantile_over_time(0.5, util{gpu=\"0\"}[5m])"), 27.625, 1e-12);
  EXPECT_NEAR(one("stddev_over_time(util{gpu=\"0\"}[5m])"), 0.25 * std::sqrt((400.0 - 1) / 12),
              1e-9);
  EXPECT_NEAR(one("stdvar_over_time(util{gpu=\"0\"}[5m])"), 0.0625 * (400.0 - 1) / 12, 1e-9);
  EXPECT_DOUBLE_EQ(one("changes(util{gpu=\"0\"}[5m])"), 19);
  // last_over_time keeps the metric name; the others drop it.
  EXPECT_EQ(InstantMap("last_over_time(util{gpu=\"1\"}[5m])", t).begin()->first,
            "util{gpu=\"1\", host=\"a\"}");
  EXPECT_EQ(InstantMap("max_over_time(util{gpu=\"1\"}[5m])", t).begin()->first,
            "{gpu=\"1\", host=\"a\"}");
}

TEST_F(EngineTest, AggregationsByAndWithout) {
  const int64_t t = kT0 + 10 * kMin;
  EXPECT_EQ(InstantMap("sum(util)", t), (std::map<std::string, double>{{"{}", 110}}));
  EXPECT_EQ(InstantMap("sum by (gpu) (util)", t),
            (std::map<std::string, double>{{"{gpu=\"0\"}", 30}, {"{gpu=\"1\"}", 80}}));
  EXPECT_EQ(InstantMap("avg(util) without (gpu)", t),
            (std::map<std::string, double>{{"{host=\"a\"}", 55}}));
  EXPECT_EQ(InstantMap("max by (host) (util)", t),
            (std::map<std::string, double>{{"{host=\"a\"}", 80}}));
  EXPECT_EQ(InstantMap("min(util)", t), (std::map<std::string, double>{{"{}", 30}}));
  EXPECT_EQ(InstantMap("count(util)", t), (std::map<std::string, double>{{"{}", 2}}));
  EXPECT_EQ(InstantMap("group by (host) (util)", t),
            (std::map<std::string, double>{{"{host=\"a\"}", 1}}));
  EXPECT_EQ(InstantMap("stddev(util)", t), (std::map<std::string, double>{{"{}", 25}}));
  EXPECT_EQ(InstantMap("stdvar(util)", t), (std::map<std::string, double>{{"{}", 625}}));
  EXPECT_EQ(InstantMap("quantile(0.25, util)", t), (std::map<std::string, double>{{"{}", 42.5}}));
  EXPECT_EQ(InstantMap("topk(1, util)", t),
            (std::map<std::string, double>{{"util{gpu=\"1\", host=\"a\"}", 80}}));
  EXPECT_EQ(InstantMap("bottomk(1, util)", t),
            (std::map<std::string, double>{{"util{gpu=\"0\", host=\"a\"}", 30}}));
  EXPECT_TRUE(InstantMap("topk(0, util)", t).empty());
  EXPECT_EQ(InstantMap("count_values(\"v\", util)", t),
            (std::map<std::string, double>{{"{v=\"30\"}", 1}, {"{v=\"80\"}", 1}}));
  auto sorted = Instant("sort_desc(util)", t);
  ASSERT_TRUE(sorted.ok());
  ASSERT_EQ(sorted->vector.size(), 2u);
  EXPECT_EQ(sorted->vector[0].value, 80);
  sorted = Instant("sort(util)", t);
  ASSERT_TRUE(sorted.ok());
  EXPECT_EQ(sorted->vector[0].value, 30);
}

TEST_F(EngineTest, ArithmeticAndComparisons) {
  const int64_t t = kT0 + 10 * kMin;
  EXPECT_EQ(InstantMap("util * 2 - 1", t),
            (std::map<std::string, double>{{"{gpu=\"0\", host=\"a\"}", 59},
                                           {"{gpu=\"1\", host=\"a\"}", 159}}));
  EXPECT_EQ(InstantMap("util > 50", t),
            (std::map<std::string, double>{{"util{gpu=\"1\", host=\"a\"}", 80}}));
  EXPECT_EQ(InstantMap("50 < util", t),
            (std::map<std::string, double>{{"util{gpu=\"1\", host=\"a\"}", 80}}));
  EXPECT_EQ(InstantMap("util > bool 50", t),
            (std::map<std::string, double>{{"{gpu=\"0\", host=\"a\"}", 0},
                                           {"{gpu=\"1\", host=\"a\"}", 1}}));
  EXPECT_EQ(InstantMap("-util{gpu=\"1\"} % 7 ^ 2", t),
            (std::map<std::string, double>{{"{gpu=\"1\", host=\"a\"}", std::fmod(-80, 49)}}));
  auto s = Instant("2 ^ 3 ^ 2 + time() * 0", t);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->type, ValueType::kScalar);
  EXPECT_EQ(s->scalar, 512);
  s = Instant("1 / 0 == bool Inf", t);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->scalar, 1);
}

TEST_F(EngineTest, VectorMatching) {
  const int64_t t = kT0 + 10 * kMin;
  // One-to-one on all labels but the name.
  EXPECT_EQ(InstantMap("energy_total / util", t),
            (std::map<std::string, double>{{"{gpu=\"0\", host=\"a\"}", 600.0 / 30}}));
  EXPECT_EQ(InstantMap("energy_total / on(gpu) util", t),
            (std::map<std::string, double>{{"{gpu=\"0\"}", 20}}));
  EXPECT_EQ(InstantMap("util{gpu=\"1\"} / ignoring(gpu) sum by (host) (util)", t),
            (std::map<std::string, double>{{"{host=\"a\"}", 80.0 / 110}}));
  EXPECT_EQ(InstantMap("util{gpu=\"0\"} >= ignoring(kind) energy_total", t),
            (std::map<std::string, double>{}));
  EXPECT_EQ(InstantMap("energy_total >= ignoring(kind) util", t),
            (std::map<std::string, double>{{"energy_total{gpu=\"0\", host=\"a\"}", 600}}));
  EXPECT_EQ(InstantMap("util and util > 50", t),
            (std::map<std::string, double>{{"util{gpu=\"1\", host=\"a\"}", 80}}));
  EXPECT_EQ(InstantMap("util unless on(gpu) energy_total", t),
            (std::map<std::string, double>{{"util{gpu=\"1\", host=\"a\"}", 80}}));
  EXPECT_EQ(InstantMap("energy_total or on(gpu) util", t),
            (std::map<std::string, double>{{"energy_total{gpu=\"0\", host=\"a\"}", 600},
                                           {"util{gpu=\"1\", host=\"a\"}", 80}}));
  // Many-to-one without group_left is an error naming both series.
  auto r = Instant("util * on(host) sum by (host) (util)", t);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("many-to-one matching must be explicit"), std::string::npos);
  r = Instant("sum by (host) (util) * on(host) util", t);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("many-to-many matching not allowed"), std::string::npos);
}

// The dcgm-exporter dashboards' join: every GPU series times an info series of its node,
// copying the info's labels (issue 18: 25 of 27 refused dashboard queries).
TEST(EngineMatching, GroupLeftAndGroupRightAsPrometheus) {
  MemoryQuerier q;
  for (const char* gpu : {"0", "1"})
    q.Add(L({{"__name__", "util"}, {"gpu", gpu}, {"instance", "n1"}}),
          {{kT0, gpu[0] == '0' ? 10.0 : 20.0}});
  q.Add(L({{"__name__", "node_info"}, {"instance", "n1"}, {"model", "H100"}, {"rack", "r7"}}),
        {{kT0, 1}});
  q.Add(L({{"__name__", "node_info"}, {"instance", "n2"}, {"model", "A100"}, {"rack", "r8"}}),
        {{kT0, 1}});
  EngineOptions o;
  const auto map = [&](const std::string& query) {
    auto r = InstantQuery(q, o, query, kT0);
    EXPECT_TRUE(r.ok()) << query << ": " << r.status().message();
    return r.ok() ? AsMap(*r) : std::map<std::string, double>{};
  };
  // Many-to-one: the many side's labels (name dropped by *), plus `model` from the one side.
  EXPECT_EQ(map("util * on(instance) group_left(model) node_info"),
            (std::map<std::string, double>{{"{gpu=\"0\", instance=\"n1\", model=\"H100\"}", 10},
                                           {"{gpu=\"1\", instance=\"n1\", model=\"H100\"}", 20}}));
  // One-to-many: the same from the other side; the operands keep their order.
  EXPECT_EQ(map("node_info * on(instance) group_right(rack) util"),
            (std::map<std::string, double>{{"{gpu=\"0\", instance=\"n1\", rack=\"r7\"}", 10},
                                           {"{gpu=\"1\", instance=\"n1\", rack=\"r7\"}", 20}}));
  EXPECT_EQ(map("node_info - on(instance) group_right util"),
            (std::map<std::string, double>{{"{gpu=\"0\", instance=\"n1\"}", -9},
                                           {"{gpu=\"1\", instance=\"n1\"}", -19}}));
  // A comparison filter keeps the left value and the many side's name.
  EXPECT_EQ(map("util > on(instance) group_left node_info * 15"),
            (std::map<std::string, double>{{"util{gpu=\"1\", instance=\"n1\"}", 20}}));
  // A label absent on the one side is absent in the result.
  EXPECT_EQ(map("util * on(instance) group_left(nothere) node_info"),
            (std::map<std::string, double>{{"{gpu=\"0\", instance=\"n1\"}", 10},
                                           {"{gpu=\"1\", instance=\"n1\"}", 20}}));
  // Two "one" series for a match: many-to-many.
  auto r =
      InstantQuery(q, o, "util * ignoring(instance, model, rack, gpu) group_left node_info", kT0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("on the right hand-side"), std::string::npos)
      << r.status().message();
  // Results that collide: the grouping labels must keep them apart.
  r = InstantQuery(q, o, "sum without (gpu) (util) + on(instance) group_left util", kT0);
  ASSERT_FALSE(r.ok());
  // Many-to-one without group_left fails even when the comparison filters every match away
  // (Prometheus's operators.test).
  r = InstantQuery(q, o, "util > on(instance) node_info * 100", kT0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("many-to-one matching must be explicit"), std::string::npos);
}

TEST_F(EngineTest, SameLabelsetAfterDroppingNameIsAnError) {
  MemoryQuerier q;
  q.Add(L({{"__name__", "a"}, {"gpu", "0"}}), {{kT0, 1}});
  q.Add(L({{"__name__", "b"}, {"gpu", "0"}}), {{kT0, 2}});
  auto r = InstantQuery(q, opts_, "abs({gpu=\"0\"})", kT0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("vector cannot contain metrics with the same labelset"),
            std::string::npos);
  r = RangeQuery(q, opts_, "abs({gpu=\"0\"})", kT0, kT0 + kMin, 15'000);
  ASSERT_FALSE(r.ok());
}

TEST_F(EngineTest, ScalarAndVectorFunctions) {
  const int64_t t = kT0 + 10 * kMin + 7'000;
  EXPECT_EQ(InstantMap("vector(1.5)", t), (std::map<std::string, double>{{"{}", 1.5}}));
  EXPECT_EQ(InstantMap("vector(scalar(util{gpu=\"1\"}))", t),
            (std::map<std::string, double>{{"{}", 80}}));
  auto s = Instant("scalar(util)", t);  // two elements → NaN
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(std::isnan(s->scalar));
  EXPECT_EQ(
      InstantMap("timestamp(util{gpu=\"1\"})", t),
      (std::map<std::string, double>{{"{gpu=\"1\", host=\"a\"}", (kT0 + 10 * kMin) / 1000.0}}));
  s = Instant("time()", t);
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->scalar, t / 1000.0);
  EXPECT_EQ(InstantMap("clamp(util, 40, 60)", t),
            (std::map<std::string, double>{{"{gpu=\"0\", host=\"a\"}", 40},
                                           {"{gpu=\"1\", host=\"a\"}", 60}}));
  EXPECT_TRUE(InstantMap("clamp(util, 60, 40)", t).empty());
  EXPECT_EQ(InstantMap("clamp_min(util{gpu=\"0\"}, 35)", t).begin()->second, 35);
  EXPECT_EQ(InstantMap("clamp_max(util{gpu=\"1\"}, 35)", t).begin()->second, 35);
  EXPECT_EQ(InstantMap("round(util{gpu=\"0\"} + 0.4)", t).begin()->second, 30);
  EXPECT_EQ(InstantMap("round(util{gpu=\"0\"} + 2.6, 5)", t).begin()->second, 35);
  EXPECT_EQ(InstantMap("ceil(util{gpu=\"0\"} + 0.1)", t).begin()->second, 31);
  EXPECT_EQ(InstantMap("floor(util{gpu=\"0\"} + 0.9)", t).begin()->second, 30);
  EXPECT_EQ(InstantMap("abs(-util{gpu=\"0\"})", t).begin()->second, 30);
  EXPECT_EQ(InstantMap("sqrt(util{gpu=\"0\"} - 14)", t).begin()->second, 4);
  EXPECT_EQ(InstantMap("absent(util)", t), (std::map<std::string, double>{}));
  EXPECT_EQ(InstantMap("absent(nope{job=\"x\", gpu=~\"1\", a=\"1\", a=\"2\"})", t),
            (std::map<std::string, double>{{"{job=\"x\"}", 1}}));
  EXPECT_EQ(InstantMap("absent(sum(nope))", t), (std::map<std::string, double>{{"{}", 1}}));
  EXPECT_EQ(InstantMap("absent_over_time(nope{job=\"x\"}[5m])", t),
            (std::map<std::string, double>{{"{job=\"x\"}", 1}}));
  EXPECT_EQ(
      InstantMap("label_replace(util{gpu=\"1\"}, \"dev\", \"nvidia$1\", \"gpu\", \"(.*)\")", t),
      (std::map<std::string, double>{{"util{dev=\"nvidia1\", gpu=\"1\", host=\"a\"}", 80}}));
  EXPECT_EQ(InstantMap("label_replace(util{gpu=\"1\"}, \"host\", \"\", \"gpu\", \".*\")", t),
            (std::map<std::string, double>{{"util{gpu=\"1\"}", 80}}));
  EXPECT_EQ(
      InstantMap("label_replace(util{gpu=\"1\"}, \"x\", \"${g}y\", \"host\", \"(?P<g>a)\")", t),
      (std::map<std::string, double>{{"util{gpu=\"1\", host=\"a\", x=\"ay\"}", 80}}));
}

TEST_F(EngineTest, InstantQueryResultTypes) {
  auto r = Instant("util{gpu=\"1\"}[1m]", kT0 + 10 * kMin);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, ValueType::kMatrix);
  ASSERT_EQ(r->matrix.size(), 1u);
  EXPECT_EQ(r->matrix[0].points.size(), 4u);
  r = Instant("\"hello\"", kT0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, ValueType::kString);
  EXPECT_EQ(r->string, "hello");
}

TEST_F(EngineTest, RangeQuerySteps) {
  auto r = RangeQuery(q_, opts_, "sum by (gpu) (util)", kT0 + 10 * kMin, kT0 + 12 * kMin, 30'000);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->type, ValueType::kMatrix);
  ASSERT_EQ(r->matrix.size(), 2u);
  EXPECT_EQ(store::LabelsToString(r->matrix[0].metric), "{gpu=\"0\"}");
  ASSERT_EQ(r->matrix[0].points.size(), 5u);
  EXPECT_EQ(r->matrix[0].points[4].t_ms, kT0 + 12 * kMin);
  EXPECT_DOUBLE_EQ(r->matrix[0].points[4].value, 32);
  // Scalars become one series without labels.
  r = RangeQuery(q_, opts_, "time()", kT0, kT0 + 2 * kMin, kMin);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->matrix.size(), 1u);
  EXPECT_TRUE(r->matrix[0].metric.empty());
  EXPECT_EQ(r->matrix[0].points.size(), 3u);
  // A series appears only at the steps where it has a value.
  r = RangeQuery(q_, opts_, "util > 30.5", kT0 + 10 * kMin, kT0 + 11 * kMin, 15'000);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->matrix.size(), 2u);
  EXPECT_EQ(r->matrix[0].points.size(), 2u);  // 30.75 and 31 at the last two steps
  EXPECT_EQ(r->matrix[1].points.size(), 5u);
}

TEST_F(EngineTest, RangeQueryReadsEachSelectorOnce) {
  const int before = q_.selects();
  auto r = RangeQuery(q_, opts_, "rate(energy_total[5m]) / on(gpu, host) util or util * 0",
                      kT0 + 10 * kMin, kT0 + 50 * kMin, 15'000);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(q_.selects() - before, 3);
  EXPECT_EQ(r->matrix.size(), 2u);
}

TEST_F(EngineTest, RangeQueryRejectsBadParameters) {
  const auto err = [&](int64_t start, int64_t end, int64_t step) {
    auto r = RangeQuery(q_, opts_, "util", start, end, step);
    return r.ok() ? std::string("(ok)") : r.status().message();
  };
  EXPECT_EQ(err(kT0, kT0 + kMin, 0),
            "zero or negative query resolution step widths are not accepted. Try a positive "
            "integer");
  EXPECT_EQ(err(kT0 + 1, kT0, 1'000), "end timestamp must not be before start time");
  EXPECT_EQ(err(kT0, kT0 + 11'001 * 1'000, 1'000),
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the "
            "query resolution (?step=XX)");
  EXPECT_EQ(err(kT0, kT0 + 11'000 * 1'000, 1'000), "(ok)");
  EXPECT_EQ(err(0, int64_t{11} * 365 * 24 * 3600 * 1000, int64_t{24} * 3600 * 1000),
            "query time range of 11y exceeds the limit of 10y");
  EXPECT_EQ(err(-1, kT0, kMin), "start is outside the supported range (1970-01-01 to 2262-04-11)");
  auto r = RangeQuery(q_, opts_, "util[5m]", kT0, kT0, 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "invalid expression type \"range vector\" for range query, must be Scalar or "
            "instant Vector");
}

TEST_F(EngineTest, LimitsOnSamplesAndSeries) {
  EngineOptions small = opts_;
  small.max_samples = 100;
  auto r = RangeQuery(q_, small, "util", kT0, kT0 + 60 * kMin, kMin);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("too many samples"), std::string::npos);
  small = opts_;
  small.max_series = 2;
  r = InstantQuery(q_, small, "util + on(gpu) energy_total", kT0 + 10 * kMin);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "query selects too many series: 3 (limit 2); add label matchers to narrow the "
            "selectors");
}

// D4 (issue 17): the sample limit counts what is loaded once; a wide window rescanned at every
// step is work only max_work sees. The same query passes under a limit one sample larger.
TEST_F(EngineTest, D4_WorkLimitCountsEveryStepsWindow) {
  EngineOptions o = opts_;
  auto full = RangeQuery(q_, o, "sum(rate(util[1h]))", kT0, kT0 + 60 * kMin, kMin);
  ASSERT_TRUE(full.ok()) << full.status().message();
  // Find the work this query does by bisection on the limit, then check the boundary.
  int64_t lo = 0, hi = 1'000'000;
  while (lo + 1 < hi) {
    o.max_work = (lo + hi) / 2;
    (RangeQuery(q_, o, "sum(rate(util[1h]))", kT0, kT0 + 60 * kMin, kMin).ok() ? hi : lo) =
        o.max_work;
  }
  ASSERT_LT(hi, 1'000'000);
  o.max_work = hi;
  EXPECT_TRUE(RangeQuery(q_, o, "sum(rate(util[1h]))", kT0, kT0 + 60 * kMin, kMin).ok());
  o.max_work = hi - 1;
  auto over = RangeQuery(q_, o, "sum(rate(util[1h]))", kT0, kT0 + 60 * kMin, kMin);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  // The work grows with the steps: the same window at a quarter of the steps is cheaper.
  o.max_work = hi;
  EXPECT_TRUE(RangeQuery(q_, o, "sum(rate(util[1h]))", kT0, kT0 + 60 * kMin, 4 * kMin).ok());
  EXPECT_LE(hi, 61 * 2 * 242);  // at most steps × series × (window samples + 1)
}

TEST_F(EngineTest, D4_DeadlineAndCancellationStopTheQuery) {
  EngineOptions o = opts_;
  o.deadline = std::chrono::steady_clock::now() - std::chrono::milliseconds(1);
  auto r = RangeQuery(q_, o, "rate(util[5m])", kT0, kT0 + 60 * kMin, kMin);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  r = InstantQuery(q_, o, "util", kT0 + 10 * kMin);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  std::atomic<bool> cancelled{true};
  o = opts_;
  o.cancelled = &cancelled;
  r = RangeQuery(q_, o, "rate(util[5m])", kT0, kT0 + 60 * kMin, kMin);
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  cancelled = false;
  o.deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  EXPECT_TRUE(RangeQuery(q_, o, "rate(util[5m])", kT0, kT0 + 60 * kMin, kMin).ok());
}

// --- rollup tiers ---------------------------------------------------------------------------

class TierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 6 hours at 10 s, offset 5 s so no sample sits on a minute boundary: raw windows
    // (t - r, t] and whole-bucket windows [t - r, t) then hold the same samples.
    q_.Add(L({{"__name__", "temp"}, {"gpu", "0"}}),
           Gen(kT0 + 5'000, kT0 + 360 * kMin, 10'000,
               [](double s) { return 50 + 10 * std::sin(s / 300) + std::fmod(s, 70) / 7; }));
    // A counter growing 2/s that resets every 47 minutes (inside a bucket).
    q_.Add(L({{"__name__", "bytes_total"}, {"gpu", "0"}}),
           Gen(kT0 + 5'000, kT0 + 360 * kMin, 10'000,
               [](double s) { return 2 * std::fmod(s, 47 * 60); }));
  }

  QueryResult Range(const std::string& q, std::optional<Tier> tier, int64_t step,
                    int64_t start = kT0 + 60 * kMin, int64_t end = kT0 + 300 * kMin) {
    EngineOptions o;
    o.force_tier = tier;
    auto r = RangeQuery(q_, o, q, start, end, step);
    EXPECT_TRUE(r.ok()) << q << ": " << r.status().message();
    return r.ok() ? std::move(r).value() : QueryResult{};
  }

  void ExpectSame(const QueryResult& a, const QueryResult& b, double tolerance) {
    ASSERT_EQ(a.matrix.size(), b.matrix.size());
    for (size_t i = 0; i < a.matrix.size(); ++i) {
      EXPECT_EQ(a.matrix[i].metric, b.matrix[i].metric);
      ASSERT_EQ(a.matrix[i].points.size(), b.matrix[i].points.size());
      for (size_t j = 0; j < a.matrix[i].points.size(); ++j) {
        EXPECT_EQ(a.matrix[i].points[j].t_ms, b.matrix[i].points[j].t_ms);
        EXPECT_NEAR(a.matrix[i].points[j].value, b.matrix[i].points[j].value, tolerance)
            << "at step " << j;
      }
    }
  }

  MemoryQuerier q_;
};

TEST_F(TierTest, OneMinuteTierAgreesWithRawWhenBucketsAlign) {
  for (const char* q :
       {"avg_over_time(temp[5m])", "max_over_time(temp[5m])", "min_over_time(temp[5m])",
        "sum_over_time(temp[5m])", "count_over_time(temp[5m])", "max(avg_over_time(temp[5m]))",
        "last_over_time(temp[5m])"}) {
    SCOPED_TRACE(q);
    const auto raw = Range(q, Tier::kRaw, 5 * kMin);
    const auto rolled = Range(q, Tier::k1m, 5 * kMin);
    ASSERT_EQ(raw.matrix.size(), 1u);
    EXPECT_EQ(raw.matrix[0].points.size(), 49u);
    ExpectSame(raw, rolled, 1e-9);
  }
}

// A sample on every bucket start (1 s data, as the agent writes): an instant selector at a
// bucket-aligned step is exact on the 1m and 1h tiers (the bucket's first sample is the one at
// t), so dashboards read the same numbers from rollups as from raw.
TEST(TierExactness, InstantSelectorAtBucketStartsMatchesRaw) {
  MemoryQuerier q;
  const char* gpus[] = {"0", "1", "2"};
  for (int g = 0; g < 3; ++g)
    q.Add(L({{"__name__", "util"}, {"gpu", gpus[g]}}),
          Gen(kT0, kT0 + 240 * kMin, 1'000,
              [g](double s) { return std::floor(50 + 40 * std::sin(s / 97 + g)); }));
  for (const char* query : {"util", "avg(util)", "max by (gpu) (util)"}) {
    SCOPED_TRACE(query);
    for (Tier tier : {Tier::k1m, Tier::k1h}) {
      const int64_t step = tier == Tier::k1m ? kMin : 60 * kMin;
      EngineOptions raw_o, tier_o;
      raw_o.force_tier = Tier::kRaw;
      tier_o.force_tier = tier;
      auto raw = RangeQuery(q, raw_o, query, kT0 + 60 * kMin, kT0 + 239 * kMin, step);
      auto rolled = RangeQuery(q, tier_o, query, kT0 + 60 * kMin, kT0 + 239 * kMin, step);
      ASSERT_TRUE(raw.ok() && rolled.ok());
      ASSERT_EQ(raw->matrix.size(), rolled->matrix.size());
      for (size_t i = 0; i < raw->matrix.size(); ++i) {
        ASSERT_EQ(raw->matrix[i].points.size(), rolled->matrix[i].points.size());
        for (size_t j = 0; j < raw->matrix[i].points.size(); ++j)
          EXPECT_EQ(raw->matrix[i].points[j].value, rolled->matrix[i].points[j].value) << j;
      }
    }
  }
}

TEST_F(TierTest, RateFromBucketsMatchesRawAndSeesResetsInsideBuckets) {
  // The counter is linear between resets, so extrapolation gives the same rate either way;
  // steps whose window holds a reset differ only by what happened inside the reset bucket.
  const auto raw = Range("rate(bytes_total[10m])", Tier::kRaw, 5 * kMin);
  const auto rolled = Range("rate(bytes_total[10m])", Tier::k1m, 5 * kMin);
  ASSERT_EQ(raw.matrix.size(), 1u);
  ASSERT_EQ(rolled.matrix.size(), 1u);
  ASSERT_EQ(raw.matrix[0].points.size(), rolled.matrix[0].points.size());
  for (size_t j = 0; j < raw.matrix[0].points.size(); ++j) {
    EXPECT_NEAR(raw.matrix[0].points[j].value, 2, 0.25) << j;
    EXPECT_NEAR(rolled.matrix[0].points[j].value, 2, 0.25) << j;
  }
  const auto raw_inc = Range("increase(bytes_total[30m])", Tier::kRaw, 30 * kMin);
  const auto rolled_inc = Range("increase(bytes_total[30m])", Tier::k1m, 30 * kMin);
  ExpectSame(raw_inc, rolled_inc, 3600 * 0.1);
}

// Issue 18: rollup buckets [b, b + w) cannot answer Prometheus's (t - range, t] windows or "the
// newest sample at or before t" when a window edge falls inside a bucket, so every step size
// reads raw while raw holds the range; rollups serve only what raw retention has dropped.
TEST_F(TierTest, RawWhereverItHoldsTheRange) {
  for (int64_t step : {int64_t{15'000}, 5 * kMin, 60 * kMin}) {
    SCOPED_TRACE(step);
    EXPECT_EQ(
        Range("avg_over_time(temp[5m])", std::nullopt, step, kT0 + 180 * kMin, kT0 + 300 * kMin)
            .tiers,
        std::vector<Tier>{Tier::kRaw});
    EXPECT_EQ(Range("temp", std::nullopt, step, kT0 + 180 * kMin, kT0 + 300 * kMin).tiers,
              std::vector<Tier>{Tier::kRaw});
  }
  EXPECT_EQ(
      Range("max_over_time(temp[3h])", std::nullopt, 60 * kMin, kT0 + 180 * kMin, kT0 + 300 * kMin)
          .tiers,
      std::vector<Tier>{Tier::kRaw});
}

// promqltest's data sits on minute boundaries ("load 15s"/"load 1m" from 0). Prometheus's
// window (t - 2m, t] at t = 4m holds the samples at 2m15s .. 4m (8 of them); the 1m buckets
// inside [t - 2m, t) held 2m .. 3m45s instead, and the instant selector at a step that is no
// bucket start took a bucket's first sample.
TEST(TierExactness, WindowsAreOpenOnTheLeftAndClosedOnTheRightAtEveryStep) {
  MemoryQuerier q;
  q.Add(L({{"__name__", "m"}}), Gen(kT0, kT0 + 10 * kMin, 15'000, [](double s) { return s; }));
  EngineOptions o;
  auto r = RangeQuery(q, o, "count_over_time(m[2m])", kT0 + 2 * kMin, kT0 + 9 * kMin, kMin);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tiers, std::vector<Tier>{Tier::kRaw});
  ASSERT_EQ(r->matrix.size(), 1u);
  ASSERT_EQ(r->matrix[0].points.size(), 8u);
  for (const auto& p : r->matrix[0].points) EXPECT_EQ(p.value, 8) << p.t_ms;
  r = RangeQuery(q, o, "sum_over_time(m[2m])", kT0 + 4 * kMin, kT0 + 4 * kMin, kMin);
  ASSERT_TRUE(r.ok());
  // Seconds 135, 150, ..., 240.
  EXPECT_EQ(r->matrix[0].points[0].value, (135 + 240) * 8 / 2);
  // A step off the bucket starts (90 s): the newest sample at or before t.
  r = RangeQuery(q, o, "m", kT0 + 90'000, kT0 + 270'000, 90'000);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->matrix[0].points.size(), 3u);
  EXPECT_EQ(r->matrix[0].points[0].value, 90);
  EXPECT_EQ(r->matrix[0].points[1].value, 180);
  EXPECT_EQ(r->matrix[0].points[2].value, 270);
}

TEST_F(TierTest, FallsBackToACoarserTierWhenRawIsTrimmed) {
  q_.Retain(Tier::kRaw, kT0 + 200 * kMin);
  // Step 15 s allows only raw, but raw no longer reaches back: 1m answers.
  const auto r =
      Range("avg_over_time(temp[5m])", std::nullopt, 30'000, kT0 + 100 * kMin, kT0 + 110 * kMin);
  EXPECT_EQ(r.tiers, std::vector<Tier>{Tier::k1m});
  ASSERT_EQ(r.matrix.size(), 1u);
  EXPECT_EQ(r.matrix[0].points.size(), 21u);
  // An instant query as well.
  EngineOptions o;
  auto i = InstantQuery(q_, o, "temp", kT0 + 100 * kMin);
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(i->tiers, std::vector<Tier>{Tier::k1m});
  EXPECT_EQ(i->vector.size(), 1u);
  // When 1m is trimmed too, 1h.
  q_.Retain(Tier::k1m, kT0 + 200 * kMin);
  i = InstantQuery(q_, o, "max_over_time(temp[3h])", kT0 + 190 * kMin);
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(i->tiers, std::vector<Tier>{Tier::k1h});
  EXPECT_EQ(i->vector.size(), 1u);
  // Queries within raw's reach stay on raw.
  i = InstantQuery(q_, o, "temp", kT0 + 300 * kMin);
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(i->tiers, std::vector<Tier>{Tier::kRaw});
}

TEST_F(TierTest, YoungStoreReadsRaw) {
  // Nothing reaches a week back; every tier starts with the data, raw included.
  const auto r = Range("avg_over_time(temp[5m])", std::nullopt, 5 * kMin, kT0 - 7 * 24 * 60 * kMin,
                       kT0 + 60 * kMin);
  EXPECT_EQ(r.tiers, std::vector<Tier>{Tier::kRaw});
}

}  // namespace
}  // namespace gpuwatch::query

namespace gpuwatch::query {
namespace {

// Issue 18's missing functions, each against a value worked out from Prometheus's definition
// (promql/functions.go, quantile.go).
TEST(EngineFunctions, TheStandardFunctionsAnswerAsPrometheus) {
  MemoryQuerier q;
  q.Add(L({{"__name__", "lat_bucket"}, {"job", "a"}, {"le", "0.1"}}), {{kT0, 1}});
  q.Add(L({{"__name__", "lat_bucket"}, {"job", "a"}, {"le", "0.2"}}), {{kT0, 2}});
  q.Add(L({{"__name__", "lat_bucket"}, {"job", "a"}, {"le", "+Inf"}}), {{kT0, 3}});
  q.Add(L({{"__name__", "lat_bucket"}, {"job", "a"}, {"le", "bad"}}), {{kT0, 99}});
  q.Add(L({{"__name__", "lin"}}), Gen(kT0, kT0 + 61'000, 15'000, [](double s) { return 2 * s; }));
  q.Add(L({{"__name__", "mad"}}),
        {{kT0 + 1000, 1}, {kT0 + 2000, 2}, {kT0 + 3000, 3}, {kT0 + 4000, 4}, {kT0 + 5000, 100}});
  q.Add(L({{"__name__", "when"}}), {{kT0, 1709214300}});  // 2024-02-29T13:45:00Z, a Thursday
  for (const char* inst : {"n10", "n9", "n1"})
    q.Add(L({{"__name__", "up"}, {"instance", inst}, {"a", "1"}, {"b", "2"}}), {{kT0, 1}});
  EngineOptions o;
  const auto at = [&](const std::string& query, int64_t t) {
    auto r = InstantQuery(q, o, query, t);
    EXPECT_TRUE(r.ok()) << query << ": " << r.status().message();
    return r.ok() ? *r : QueryResult{};
  };
  const auto value = [&](const std::string& query, int64_t t = kT0) {
    auto r = at(query, t);
    if (r.vector.size() != 1) {
      ADD_FAILURE() << query << ": " << r.vector.size() << " samples";
      return -12345.0;
    }
    return r.vector[0].value;
  };
  // Classic buckets: rank 1.5 of 3 falls halfway into (0.1, 0.2]; past the last finite
  // bucket the answer is its bound; a bad `le` is left out.
  EXPECT_DOUBLE_EQ(value("histogram_quantile(0.5, lat_bucket)"), 0.15);
  EXPECT_DOUBLE_EQ(value("histogram_quantile(0.99, lat_bucket)"), 0.2);
  EXPECT_DOUBLE_EQ(value("histogram_quantile(0.1, lat_bucket)"), 0.03);
  EXPECT_EQ(store::LabelsToString(at("histogram_quantile(0.5, lat_bucket)", kT0).vector[0].metric),
            "{job=\"a\"}");
  // The share between two bounds: (0, 0.15] holds 1 + half of (0.1, 0.2]'s one, of 3.
  EXPECT_DOUBLE_EQ(value("histogram_fraction(0, 0.15, lat_bucket)"), 1.5 / 3);
  EXPECT_DOUBLE_EQ(value("histogram_fraction(0, 1, lat_bucket)"), 2.0 / 3);
  EXPECT_EQ(value("histogram_fraction(0.2, 0.1, lat_bucket)"), 0);
  // y = 2 t: the slope, and the line 60 s past the evaluation time.
  EXPECT_DOUBLE_EQ(value("deriv(lin[1m])", kT0 + 60'000), 2);
  EXPECT_DOUBLE_EQ(value("predict_linear(lin[1m], 60)", kT0 + 60'000), 240);
  // Anchored at the step's time even with an offset: the line of (0, 60 s] read at 120 s.
  EXPECT_DOUBLE_EQ(value("predict_linear(lin[1m] offset 1m, 0)", kT0 + 120'000), 240);
  EXPECT_EQ(value("present_over_time(lin[1m])", kT0 + 60'000), 1);
  EXPECT_EQ(value("first_over_time(lin[1m])", kT0 + 60'000), 30);  // (0, 60 s]: 15 s first
  EXPECT_EQ(value("mad_over_time(mad[1m])", kT0 + 5000), 1);
  // Dates of the sample value, in UTC.
  EXPECT_EQ(value("day_of_month(when)"), 29);
  EXPECT_EQ(value("day_of_week(when)"), 4);
  EXPECT_EQ(value("day_of_year(when)"), 60);
  EXPECT_EQ(value("days_in_month(when)"), 29);
  EXPECT_EQ(value("hour(when)"), 13);
  EXPECT_EQ(value("minute(when)"), 45);
  EXPECT_EQ(value("month(when)"), 2);
  EXPECT_EQ(value("year(when)"), 2024);
  EXPECT_EQ(value("hour()", 1709214300'000), 13) << "no argument: the evaluation time";
  // Trigonometry and atan2 (precedence of *).
  EXPECT_DOUBLE_EQ(value("deg(vector(pi()))"), 180);
  EXPECT_DOUBLE_EQ(value("vector(1) atan2 vector(1)"), std::numbers::pi / 4);
  EXPECT_DOUBLE_EQ(value("vector(1) atan2 vector(1) * 2"), std::numbers::pi / 2);  // left to right
  // label_join keeps the name; sort_by_label orders naturally.
  auto r = at(R"(label_join(up{instance="n1"}, "ab", "-", "a", "b"))", kT0);
  ASSERT_EQ(r.vector.size(), 1u);
  EXPECT_EQ(store::LabelsToString(r.vector[0].metric),
            "up{a=\"1\", ab=\"1-2\", b=\"2\", instance=\"n1\"}");
  r = at(R"(sort_by_label(up, "instance"))", kT0);
  ASSERT_EQ(r.vector.size(), 3u);
  EXPECT_EQ(store::LabelValue(r.vector[0].metric, "instance"), "n1");
  EXPECT_EQ(store::LabelValue(r.vector[1].metric, "instance"), "n9");
  EXPECT_EQ(store::LabelValue(r.vector[2].metric, "instance"), "n10");
  r = at(R"(sort_by_label_desc(up, "instance"))", kT0);
  EXPECT_EQ(store::LabelValue(r.vector[0].metric, "instance"), "n10");
  // Equal as numbers, "01" and "1" still have an order (a strict weak order for the sort).
  EXPECT_EQ(
      at(R"(sort_by_label(label_replace(up, "instance", "n01", "instance", "n1") or up, "instance"))",
         kT0)
          .vector.size(),
      4u);
  // limitk: k series of each group as they come (by labels), names kept.
  r = at("limitk(2, up)", kT0);
  ASSERT_EQ(r.vector.size(), 2u);
  EXPECT_EQ(store::LabelValue(r.vector[0].metric, "__name__"), "up");
  EXPECT_EQ(at("limitk(5, up)", kT0).vector.size(), 3u);
  EXPECT_EQ(at("limitk by (instance) (1, up)", kT0).vector.size(), 3u);
  EXPECT_FALSE(InstantQuery(q, o, "limitk(NaN, up)", kT0).ok());
}

}  // namespace
}  // namespace gpuwatch::query

namespace gpuwatch::query {
namespace {

// The @ modifier: the selector's time is fixed, whatever the step; offset moves back from it.
TEST(EngineAt, SelectorsAtAFixedTimeStartOrEnd) {
  MemoryQuerier q;
  q.Add(L({{"__name__", "m"}}), Gen(kT0, kT0 + 10 * kMin, 15'000, [](double s) { return s; }));
  EngineOptions o;
  const double at_s = static_cast<double>(kT0) / 1000 + 120;  // value 120 there
  auto r = RangeQuery(q, o, "m @ " + std::to_string(at_s), kT0 + 5 * kMin, kT0 + 8 * kMin, kMin);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->matrix.size(), 1u);
  ASSERT_EQ(r->matrix[0].points.size(), 4u);
  for (const auto& p : r->matrix[0].points) EXPECT_EQ(p.value, 120) << p.t_ms;
  EXPECT_EQ(r->matrix[0].points[0].t_ms, kT0 + 5 * kMin) << "the steps' own times";
  r = RangeQuery(q, o, "m @ start()", kT0 + 5 * kMin, kT0 + 8 * kMin, kMin);
  ASSERT_TRUE(r.ok());
  for (const auto& p : r->matrix[0].points) EXPECT_EQ(p.value, 300);
  r = RangeQuery(q, o, "m @ end() offset 1m", kT0 + 5 * kMin, kT0 + 8 * kMin, kMin);
  ASSERT_TRUE(r.ok());
  for (const auto& p : r->matrix[0].points) EXPECT_EQ(p.value, 420);
  // A range selector under a function, and an instant query (start = end = its time).
  r = RangeQuery(q, o, "count_over_time(m[1m] @ end())", kT0 + 2 * kMin, kT0 + 3 * kMin, kMin);
  ASSERT_TRUE(r.ok());
  for (const auto& p : r->matrix[0].points) EXPECT_EQ(p.value, 4);
  auto i = InstantQuery(q, o, "m @ " + std::to_string(at_s), kT0 + 9 * kMin);
  ASSERT_TRUE(i.ok());
  ASSERT_EQ(i->vector.size(), 1u);
  EXPECT_EQ(i->vector[0].value, 120);
  i = InstantQuery(q, o, "m @ start()", kT0 + 9 * kMin);
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(i->vector[0].value, 540);
  // Before the data: nothing.
  i = InstantQuery(q, o, "m @ 100", kT0 + 9 * kMin);
  ASSERT_TRUE(i.ok());
  EXPECT_TRUE(i->vector.empty());
}

}  // namespace
}  // namespace gpuwatch::query

namespace gpuwatch::query {
namespace {

// Subqueries: the inner expression at every multiple of the resolution in (t - range, t].
TEST(EngineSubquery, InnerStepsAlignedToTheResolution) {
  MemoryQuerier q;
  q.Add(L({{"__name__", "m"}}), Gen(kT0, kT0 + 20 * kMin, 15'000, [](double s) { return s; }));
  EngineOptions o;
  const auto value = [&](const std::string& query, int64_t t) {
    auto r = InstantQuery(q, o, query, t);
    EXPECT_TRUE(r.ok()) << query << ": " << r.status().message();
    if (!r.ok() || r->vector.size() != 1) return -12345.0;
    return r->vector[0].value;
  };
  const int64_t t = kT0 + 10 * kMin;
  // Steps 8m30s, 9m, 9m30s, 10m: m there is 510 … 600.
  EXPECT_EQ(value("max_over_time(m[2m:30s])", t), 600);
  EXPECT_EQ(value("min_over_time(m[2m:30s])", t), 510);
  EXPECT_EQ(value("count_over_time(m[2m:30s])", t), 4);
  // An outer step off the grid: steps 8m30s … 10m again for t = 10m10s.
  EXPECT_EQ(value("count_over_time(m[2m:30s])", t + 10'000), 4);
  EXPECT_EQ(value("max_over_time(m[2m:30s])", t + 10'000), 600);
  // Without a resolution: the default 1m. Nested, and with offset.
  EXPECT_EQ(value("count_over_time(m[5m:])", t), 5);
  EXPECT_DOUBLE_EQ(value("max_over_time(rate(m[1m])[5m:1m])", t), 1);
  EXPECT_EQ(value("max_over_time(m[2m:30s] offset 1m)", t), 540);
  EXPECT_EQ(value("max_over_time(m[2m:30s] @ 300)", t), -12345.0) << "before the data";
  // A subquery alone, in an instant query, is a range vector.
  auto r = InstantQuery(q, o, "rate(m[1m])[5m:1m]", t);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->matrix.size(), 1u);
  ASSERT_EQ(r->matrix[0].points.size(), 5u);
  EXPECT_EQ(r->matrix[0].points.back().t_ms, t);
  for (const auto& p : r->matrix[0].points) EXPECT_DOUBLE_EQ(p.value, 1);
  // Over a range query, the grid points are the raw samples: the same as the raw window.
  auto sub = RangeQuery(q, o, "sum_over_time(m[1m:15s])", kT0 + 2 * kMin, kT0 + 19 * kMin, kMin);
  auto raw = RangeQuery(q, o, "sum_over_time(m[1m])", kT0 + 2 * kMin, kT0 + 19 * kMin, kMin);
  ASSERT_TRUE(sub.ok() && raw.ok());
  ASSERT_EQ(sub->matrix.size(), 1u);
  ASSERT_EQ(sub->matrix[0].points.size(), raw->matrix[0].points.size());
  for (size_t i = 0; i < raw->matrix[0].points.size(); ++i)
    EXPECT_EQ(sub->matrix[0].points[i].value, raw->matrix[0].points[i].value) << i;
  // A range query may not return a range vector.
  EXPECT_FALSE(RangeQuery(q, o, "m[5m:1m]", kT0, kT0 + kMin, 15'000).ok());
  // A resolution that would hold billions of inner steps is refused before any is evaluated.
  r = InstantQuery(q, o, "absent_over_time(nothing[10y:1ms])", t);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("steps per window (limit 11000)"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace gpuwatch::query
