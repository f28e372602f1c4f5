#include "server/accounting_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/testing/test_files.h"

namespace gpuwatch::server {
namespace {

using Params = std::vector<std::pair<std::string, std::string>>;
constexpr int64_t kEndMs = 1764460800000 + 9000 * 1000;  // scripted.jsonl's t0 + 9000 s

std::unique_ptr<accounting::Ledger> Scripted() {
  accounting::LedgerOptions o;
  o.prices = {{"H100", 2.0}, {"A100", 1.0}};
  o.quotas = {{"nlp", 5, 86400000}, {"vision", 7, 86400000}};
  auto l = accounting::Ledger::Open(o);
  EXPECT_TRUE(l.ok());
  (*l)->AddLines(gpuwatch::testing::ReadFileOrEmpty(
      gpuwatch::testing::FixtureDir("accounting/scripted.jsonl")));
  return std::move(l).value();
}

TEST(AccountingApiTest, ReportsByTheKeyAskedOverTheWindow) {
  auto l = Scripted();
  auto r = HandleAccounting(*l, {{"by", "user"}, {"since", "1d"}}, {}, kEndMs);
  ASSERT_EQ(r.http_status, 200) << r.body;
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["by"], "user");
  EXPECT_EQ(j["until_ms"], kEndMs);
  EXPECT_EQ(j["since_ms"], kEndMs - 86400000);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["key"], "bob");  // the most GPU-hours first
  EXPECT_DOUBLE_EQ(j["rows"][0]["gpu_hours"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(j["rows"][0]["success_rate"].get<double>(), 0.5);
  EXPECT_EQ(j["quotas"].size(), 2u);
  // A plain number is a Unix time, not a duration.
  r = HandleAccounting(*l, {{"since", "1764468000"}, {"until", "1764469800"}}, {}, 0);
  ASSERT_EQ(r.http_status, 200) << r.body;
  j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["since_ms"], 1764468000000);
  EXPECT_EQ(j["by"], "project");
}

TEST(AccountingApiTest, AScopedTokenSeesItsProjectsOnly) {
  auto l = Scripted();
  auto r = HandleAccounting(*l, {{"by", "user"}}, {"vision"}, kEndMs);
  ASSERT_EQ(r.http_status, 200);
  auto j = nlohmann::json::parse(r.body);
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["key"], "bob");
  ASSERT_EQ(j["quotas"].size(), 1u);
  EXPECT_EQ(j["quotas"][0]["project"], "vision");
  EXPECT_EQ(j["quotas"][0]["state"], "exceeded");
}

TEST(AccountingApiTest, CsvAndRefusals) {
  auto l = Scripted();
  auto r = HandleAccounting(*l, {{"format", "csv"}}, {}, kEndMs);
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.content_type, "text/csv; charset=utf-8");
  EXPECT_EQ(r.body.rfind("project,jobs,", 0), 0u) << r.body;
  for (const Params& bad : std::vector<Params>{{{"by", "team"}},
                                               {{"since", "yesterday"}},
                                               {{"until", "-5"}},
                                               {{"since", "1764469800"}, {"until", "1764460800"}},
                                               {{"format", "xml"}}}) {
    r = HandleAccounting(*l, bad, {}, kEndMs);
    EXPECT_EQ(r.http_status, 400) << bad[0].first;
    EXPECT_NE(r.body.find("error"), std::string::npos);
  }
}

}  // namespace
}  // namespace gpuwatch::server
