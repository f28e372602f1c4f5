// The panel endpoint (issue 18): buckets aligned to the step, min/max/last per bucket (so a
// one-sample spike survives any zoom), the tier that fits, and 400s naming the parameter.
#include "server/panel_api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "query/testing/memory_querier.h"

namespace gpuwatch::server {
namespace {

using nlohmann::json;

constexpr int64_t kT0 = 1'700'000'400'000;  // ms, a whole hour

store::Labels L(std::initializer_list<store::Label> l) { return *store::MakeLabels(l); }

class PanelApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 3 hours of one sample per second for two GPUs; GPU 1 spikes to 100 for one second.
    for (int g = 0; g < 2; ++g) {
      std::vector<store::Sample> s;
      for (int64_t t = kT0; t < kT0 + 3 * 3600'000; t += 1000)
        s.push_back({t, g == 1 && t == kT0 + 5000'000 ? 100.0 : 10.0 + g});
      q_.Add(L({{"__name__", "util"}, {"gpu", g ? "1" : "0"}}), std::move(s));
    }
  }
  std::pair<int, json> Get(std::multimap<std::string, std::string> params) {
    ApiRequest r;
    r.path = std::string(kPanelApiPath);
    r.params = std::move(params);
    const ApiResponse a = HandlePanelApi(q_, r);
    return {a.http_status, json::parse(a.body)};
  }
  static std::string Secs(int64_t ms) { return std::to_string(ms / 1000); }
  query::testing::MemoryQuerier q_;
};

TEST_F(PanelApiTest, BucketsAlignedToTheStepKeepEverySpike) {
  // 3 h at 180 px: a 60 s step, the 1m tier.
  auto [status, j] = Get({{"match", "util"},
                          {"start", Secs(kT0)},
                          {"end", Secs(kT0 + 3 * 3600'000 - 1000)},
                          {"width", "180"}});
  ASSERT_EQ(status, 200) << j.dump();
  const json& d = j["data"];
  EXPECT_EQ(d["step"], 60);
  EXPECT_EQ(d["tier"], "1m");
  ASSERT_EQ(d["times"].size(), 180u);
  EXPECT_EQ(d["times"][0], kT0 / 1000);
  EXPECT_EQ(d["times"][1], kT0 / 1000 + 60);
  ASSERT_EQ(d["series"].size(), 2u);
  const json& g1 = d["series"][1];
  EXPECT_EQ(g1["metric"]["gpu"], "1");
  // The spike at +5000 s lies in bucket 83 (4980 s .. 5040 s): its max, not its last.
  EXPECT_EQ(g1["max"][83], 100);
  EXPECT_EQ(g1["min"][83], 11);
  EXPECT_EQ(g1["last"][83], 11);
  EXPECT_EQ(g1["max"][82], 11);
  // 10 min at 600 px: a 1 s step, raw.
  auto [s2, raw] = Get({{"match", "util{gpu=\"1\"}"},
                        {"start", Secs(kT0 + 4800'000)},
                        {"end", Secs(kT0 + 5400'000)},
                        {"width", "600"}});
  ASSERT_EQ(s2, 200);
  EXPECT_EQ(raw["data"]["tier"], "raw");
  EXPECT_EQ(raw["data"]["step"], 1);
  EXPECT_EQ(raw["data"]["series"][0]["max"][200], 100);
  // 2 h at 2 px: a 3600 s step, the 1h tier's buckets fit; aligned down to multiples of it.
  auto [s3, coarse] = Get({{"match", "util{gpu=\"1\"}"},
                           {"start", Secs(kT0 + 3600'000)},
                           {"end", Secs(kT0 + 3 * 3600'000 - 1000)},
                           {"width", "2"}});
  ASSERT_EQ(s3, 200);
  EXPECT_EQ(coarse["data"]["tier"], "1h");
  EXPECT_EQ(coarse["data"]["step"], 3600);
  const int64_t first = coarse["data"]["times"][0];
  EXPECT_EQ(first % 3600, 0);
  // 3 h at 2 px: 5400 s, rounded up to whole hours of the tier read.
  auto [s4, wide] = Get({{"match", "util{gpu=\"1\"}"},
                         {"start", Secs(kT0)},
                         {"end", Secs(kT0 + 3 * 3600'000)},
                         {"width", "2"}});
  ASSERT_EQ(s4, 200);
  EXPECT_EQ(wide["data"]["step"], 7200);
  EXPECT_EQ(wide["data"]["series"][0]["max"][0], 100) << "the spike, in a 2 h bucket";
  EXPECT_LE(first * 1000, kT0 + 3600'000);
}

TEST_F(PanelApiTest, EmptyBucketsAreNull) {
  auto [status, j] = Get({{"match", "util{gpu=\"0\"}"},
                          {"start", Secs(kT0 + 3 * 3600'000 - 60'000)},
                          {"end", Secs(kT0 + 3 * 3600'000 + 60'000)},
                          {"width", "120"}});
  ASSERT_EQ(status, 200) << j.dump();
  const json& s = j["data"]["series"][0];
  EXPECT_FALSE(s["last"][0].is_null());
  EXPECT_TRUE(s["last"][119].is_null());
  EXPECT_TRUE(s["min"][119].is_null());
}

TEST_F(PanelApiTest, BadParametersAreNamed) {
  const auto error = [&](std::multimap<std::string, std::string> p) {
    auto [status, j] = Get(std::move(p));
    EXPECT_EQ(status, 400) << j.dump();
    return j.value("error", "");
  };
  EXPECT_NE(error({{"start", "1"}, {"end", "2"}, {"width", "10"}}).find("\"match\""),
            std::string::npos);
  EXPECT_NE(
      error({{"match", "util{"}, {"start", "1"}, {"end", "2"}, {"width", "10"}}).find("\"match\""),
      std::string::npos);
  EXPECT_NE(
      error({{"match", "util"}, {"start", "x"}, {"end", "2"}, {"width", "10"}}).find("\"start\""),
      std::string::npos);
  EXPECT_NE(error({{"match", "util"}, {"start", "3"}, {"end", "2"}, {"width", "10"}})
                .find("before start"),
            std::string::npos);
  EXPECT_NE(
      error({{"match", "util"}, {"start", "1"}, {"end", "2"}, {"width", "0"}}).find("\"width\""),
      std::string::npos);
  EXPECT_NE(error({{"match", "util"}, {"start", "1"}, {"end", "2"}, {"width", "10001"}})
                .find("\"width\""),
            std::string::npos);
  auto [status, j] = Get({{"match", "util"},
                          {"start", Secs(kT0)},
                          {"end", Secs(kT0 + 60'000)},
                          {"width", "10"},
                          {"max_series", "1"}});
  EXPECT_EQ(status, 422);
  EXPECT_NE(j.value("error", "").find("selects 2 series"), std::string::npos);
  auto [s2, j2] = Get({{"match", "util"},
                       {"start", "0"},
                       {"end", Secs(kT0)},
                       {"width", "10000"},
                       {"max_series", "100000"}});
  EXPECT_EQ(s2, 200) << "2 × 10000 cells";
  (void)j2;
}

}  // namespace
}  // namespace gpuwatch::server
