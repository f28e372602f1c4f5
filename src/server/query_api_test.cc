#include "server/query_api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "query/testing/memory_querier.h"

namespace gpuwatch::server {
namespace {

constexpr int64_t kT0 = 1'700'000'000'000;  // 2023-11-14T22:13:20Z

store::Labels L(std::initializer_list<std::pair<const char*, const char*>> l) {
  std::vector<store::Label> v;
  for (const auto& [n, x] : l) v.push_back({n, x});
  return *store::MakeLabels(v);
}

class QueryApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<store::Sample> a, b;
    for (int i = 0; i < 40; ++i) {
      a.push_back({kT0 + i * 15'000, 1.5 + i});
      b.push_back({kT0 + i * 15'000, 100});
    }
    q_.Add(L({{"__name__", "util"}, {"gpu", "0"}}), a);
    q_.Add(L({{"__name__", "util"}, {"gpu", "1"}}), b);
    q_.Add(L({{"__name__", "temp"}, {"gpu", "0"}, {"model_name", "H100"}}), b);
  }

  ApiResponse Get(const std::string& path, std::multimap<std::string, std::string> params) {
    return HandleQueryApi(q_, opts_, ApiRequest{path, std::move(params), kT0 + 5 * 60'000});
  }

  // The error text of a 4xx reply, checking the Prometheus error shape.
  std::string ErrorText(const ApiResponse& r, int want_status, const char* want_type) {
    EXPECT_EQ(r.http_status, want_status) << r.body;
    auto j = nlohmann::json::parse(r.body);
    EXPECT_EQ(j["status"], "error");
    EXPECT_EQ(j["errorType"], want_type);
    return j["error"].get<std::string>();
  }

  query::testing::MemoryQuerier q_;
  query::EngineOptions opts_;
};

TEST_F(QueryApiTest, InstantVectorShape) {
  auto r = Get("/api/v1/query", {{"query", "util{gpu=\"0\"}"}, {"time", "1700000060"}});
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.body,
            "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[{\"metric\":"
            "{\"__name__\":\"util\",\"gpu\":\"0\"},\"value\":[1700000060,\"5.5\"]}]}}");
  // `time` defaults to now; fractional seconds are kept to the millisecond.
  r = Get("/api/v1/query", {{"query", "sum(util)"}, {"time", "1700000060.5"}});
  EXPECT_EQ(r.body,
            "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[{\"metric\":"
            "{},\"value\":[1700000060.500,\"105.5\"]}]}}");
  r = Get("/api/v1/query", {{"query", "count(util)"}});
  EXPECT_NE(r.body.find("[1700000300,\"2\"]"), std::string::npos) << r.body;
}

TEST_F(QueryApiTest, ScalarStringAndMatrixShapes) {
  auto r = Get("/api/v1/query", {{"query", "1/0"}, {"time", "1700000000"}});
  EXPECT_EQ(r.body,
            "{\"status\":\"success\",\"data\":{\"resultType\":\"scalar\",\"result\":"
            "[1700000000,\"+Inf\"]}}");
  r = Get("/api/v1/query", {{"query", "\"hi\""}, {"time", "1700000000"}});
  EXPECT_EQ(r.body,
            "{\"status\":\"success\",\"data\":{\"resultType\":\"string\",\"result\":"
            "[1700000000,\"hi\"]}}");
  r = Get("/api/v1/query", {{"query", "util{gpu=\"1\"}[30s]"}, {"time", "2023-11-14T22:14:00Z"}});
  EXPECT_EQ(r.body,
            "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\",\"result\":[{\"metric\":"
            "{\"__name__\":\"util\",\"gpu\":\"1\"},\"values\":[[1700000015,\"100\"],"
            "[1700000030,\"100\"]]}]}}");
}

TEST_F(QueryApiTest, RangeQueryShape) {
  auto r = Get("/api/v1/query_range", {{"query", "util * 2"},
                                       {"start", "1700000000"},
                                       {"end", "2023-11-14T23:14:30+01:00"},
                                       {"step", "15s"}});
  ASSERT_EQ(r.http_status, 200) << r.body;
  EXPECT_EQ(r.body,
            "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\",\"result\":["
            "{\"metric\":{\"gpu\":\"0\"},\"values\":[[1700000000,\"3\"],[1700000015,\"5\"],"
            "[1700000030,\"7\"],[1700000045,\"9\"],[1700000060,\"11\"]]},"
            "{\"metric\":{\"gpu\":\"1\"},\"values\":[[1700000000,\"200\"],[1700000015,\"200\"],"
            "[1700000030,\"200\"],[1700000045,\"200\"],[1700000060,\"200\"]]}]}}");
  // step as float seconds.
  r = Get("/api/v1/query_range",
          {{"query", "time()"}, {"start", "1700000000"}, {"end", "1700000001"}, {"step", "0.5"}});
  EXPECT_EQ(r.body,
            "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\",\"result\":[{\"metric\":"
            "{},\"values\":[[1700000000,\"1700000000\"],[1700000000.500,\"1700000000.5\"],"
            "[1700000001,\"1700000001\"]]}]}}");
}

TEST_F(QueryApiTest, LabelsValuesAndSeries) {
  auto r = Get("/api/v1/labels", {});
  EXPECT_EQ(r.body, "{\"status\":\"success\",\"data\":[\"__name__\",\"gpu\",\"model_name\"]}");
  r = Get("/api/v1/labels", {{"match[]", "util"}});
  EXPECT_EQ(r.body, "{\"status\":\"success\",\"data\":[\"__name__\",\"gpu\"]}");
  r = Get("/api/v1/label/gpu/values", {});
  EXPECT_EQ(r.body, "{\"status\":\"success\",\"data\":[\"0\",\"1\"]}");
  r = Get("/api/v1/label/__name__/values", {{"match[]", "{gpu=\"1\"}"}});
  EXPECT_EQ(r.body, "{\"status\":\"success\",\"data\":[\"util\"]}");
  r = Get("/api/v1/series", {{"match[]", "temp"}, {"match[]", "util{gpu=\"1\"}"}});
  EXPECT_EQ(r.body,
            "{\"status\":\"success\",\"data\":[{\"__name__\":\"temp\",\"gpu\":\"0\","
            "\"model_name\":\"H100\"},{\"__name__\":\"util\",\"gpu\":\"1\"}]}");
  r = Get("/api/v1/series", {{"match[]", "util"}, {"start", "1800000000"}});
  EXPECT_EQ(r.body, "{\"status\":\"success\",\"data\":[]}");
}

TEST_F(QueryApiTest, BadParametersAre400WithAReason) {
  const auto range = [&](const char* start, const char* end, const char* step,
                         const char* q = "util") {
    return Get("/api/v1/query_range",
               {{"query", q}, {"start", start}, {"end", end}, {"step", step}});
  };
  EXPECT_EQ(ErrorText(range("1700000000", "1700000060", "0"), 400, "bad_data"),
            "zero or negative query resolution step widths are not accepted. Try a positive "
            "integer");
  EXPECT_EQ(ErrorText(range("1700000000", "1700000060", "-15"), 400, "bad_data"),
            "zero or negative query resolution step widths are not accepted. Try a positive "
            "integer");
  EXPECT_EQ(ErrorText(range("1700000000", "1700000060", "fast"), 400, "bad_data"),
            "invalid parameter \"step\": cannot parse \"fast\" to a valid duration");
  EXPECT_EQ(ErrorText(range("1700000060", "1700000000", "15"), 400, "bad_data"),
            "end timestamp must not be before start time");
  EXPECT_EQ(ErrorText(range("1700000000", "1700086400", "1"), 400, "bad_data"),
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the "
            "query resolution (?step=XX)");
  EXPECT_EQ(ErrorText(range("0", "9000000000", "1000000"), 400, "bad_data"),
            "query time range of 9000000000s exceeds the limit of 10y");
  EXPECT_EQ(ErrorText(range("NaN", "1700000000", "15"), 400, "bad_data"),
            "invalid parameter \"start\": cannot parse \"NaN\" to a valid timestamp");
  EXPECT_EQ(ErrorText(range("1e300", "1e300", "15"), 400, "bad_data"),
            "invalid parameter \"start\": timestamp 1e300 is outside the supported range "
            "(1970-01-01 to 2262-04-11)");
  EXPECT_EQ(ErrorText(range("-5", "1700000000", "15"), 400, "bad_data"),
            "invalid parameter \"start\": timestamp -5 is outside the supported range "
            "(1970-01-01 to 2262-04-11)");
  EXPECT_EQ(ErrorText(range("1700000000", "yesterday", "15"), 400, "bad_data"),
            "invalid parameter \"end\": cannot parse \"yesterday\" to a valid timestamp");
  EXPECT_EQ(ErrorText(Get("/api/v1/query_range", {{"query", "util"}}), 400, "bad_data"),
            "invalid parameter \"start\": cannot parse \"\" to a valid timestamp");
  EXPECT_EQ(ErrorText(range("1700000000", "1700000060", "15", "sum(util"), 400, "bad_data"),
            "invalid parameter \"query\": 1:9: parse error: unexpected end of input in "
            "aggregation, expected \",\" or \")\"");
  EXPECT_EQ(ErrorText(range("1700000000", "1700000060", "15", "util[5m]"), 400, "bad_data"),
            "invalid expression type \"range vector\" for range query, must be Scalar or "
            "instant Vector");
  EXPECT_EQ(ErrorText(Get("/api/v1/query", {{"query", "nvidia_smi(util)"}}), 400, "bad_data"),
            "invalid parameter \"query\": 1:1: parse error: unknown function with name "
            "\"nvidia_smi\"");
  EXPECT_EQ(ErrorText(Get("/api/v1/query", {}), 400, "bad_data"),
            "invalid parameter \"query\": 1:1: parse error: no expression found in input");
  EXPECT_EQ(ErrorText(Get("/api/v1/query", {{"query", "util"}, {"time", "Inf"}}), 400, "bad_data"),
            "invalid parameter \"time\": cannot parse \"Inf\" to a valid timestamp");
  EXPECT_EQ(ErrorText(Get("/api/v1/series", {}), 400, "bad_data"), "no match[] parameter provided");
  EXPECT_EQ(ErrorText(Get("/api/v1/series", {{"match[]", "{gpu=~\".*\"}"}}), 400, "bad_data"),
            "invalid parameter \"match[]\": match[] must contain at least one non-empty matcher");
  EXPECT_EQ(ErrorText(Get("/api/v1/series", {{"match[]", "util{"}}), 400, "bad_data"),
            "invalid parameter \"match[]\": selector: unclosed '{' at offset 5");
  EXPECT_EQ(ErrorText(Get("/api/v1/label/1bad/values", {}), 400, "bad_data"),
            "invalid label name: \"1bad\"");
  EXPECT_EQ(ErrorText(Get("/api/v1/nope", {}), 404, "not_found"),
            "unknown API endpoint \"/api/v1/nope\"");
}

TEST_F(QueryApiTest, EvaluationLimitsAre422) {
  opts_.max_samples = 10;
  EXPECT_NE(ErrorText(Get("/api/v1/query", {{"query", "util[10m]"}}), 422, "execution")
                .find("too many samples"),
            std::string::npos);
  opts_ = {};
  opts_.max_series = 1;
  EXPECT_NE(ErrorText(Get("/api/v1/query", {{"query", "util"}}), 422, "execution")
                .find("too many series"),
            std::string::npos);
  opts_ = {};
  EXPECT_NE(ErrorText(Get("/api/v1/query", {{"query", "util + on() util"}}), 422, "execution")
                .find("many-to-many"),
            std::string::npos);
}

TEST(QueryApiFormat, ValuesLikePrometheus) {
  EXPECT_EQ(FormatSampleValue(1.5), "1.5");
  EXPECT_EQ(FormatSampleValue(100), "100");
  EXPECT_EQ(FormatSampleValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatSampleValue(1e20), "100000000000000000000");
  EXPECT_EQ(FormatSampleValue(1e21), "1e+21");
  EXPECT_EQ(FormatSampleValue(1e-7), "1e-07");
  EXPECT_EQ(FormatSampleValue(-0.000001), "-0.000001");
  EXPECT_EQ(FormatSampleValue(0), "0");
  EXPECT_EQ(FormatSampleValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatSampleValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatSampleValue(std::nan("")), "NaN");
}

TEST(QueryApiParams, TimestampsAndDurations) {
  EXPECT_EQ(*ParseApiTimestampMs("1700000000"), kT0);
  EXPECT_EQ(*ParseApiTimestampMs("1700000000.123"), kT0 + 123);
  EXPECT_EQ(*ParseApiTimestampMs("2023-11-14T22:13:20Z"), kT0);
  EXPECT_EQ(*ParseApiTimestampMs("2023-11-14T22:13:20.5Z"), kT0 + 500);
  EXPECT_EQ(*ParseApiTimestampMs("2023-11-14T23:13:20+01:00"), kT0);
  EXPECT_FALSE(ParseApiTimestampMs("2023-11-14 22:13:20").ok());
  EXPECT_FALSE(ParseApiTimestampMs("").ok());
  EXPECT_EQ(*ParseApiDurationMs("15"), 15'000);
  EXPECT_EQ(*ParseApiDurationMs("0.25"), 250);
  EXPECT_EQ(*ParseApiDurationMs("1m30s"), 90'000);
  EXPECT_FALSE(ParseApiDurationMs("1e300").ok());
  EXPECT_FALSE(ParseApiDurationMs("5x").ok());
}

TEST(QueryApiPaths, Routing) {
  EXPECT_TRUE(IsQueryApiPath("/api/v1/query"));
  EXPECT_TRUE(IsQueryApiPath("/api/v1/label/gpu/values"));
  EXPECT_FALSE(IsQueryApiPath("/api/v1/label//values"));
  EXPECT_FALSE(IsQueryApiPath("/api/v1/gpus"));
  EXPECT_FALSE(IsQueryApiPath("/api/v1/write"));
}

}  // namespace
}  // namespace gpuwatch::server
