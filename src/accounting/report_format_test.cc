#include "accounting/report_format.h"

#include <gtest/gtest.h>

namespace gpuwatch::accounting {
namespace {

ReportDoc Sample(GroupBy by) {
  ReportDoc d;
  d.query.by = by;
  d.query.since_ms = 1000;
  d.query.until_ms = 2000;
  ReportRow r;
  r.key = by == GroupBy::kJob ? "12345" : "nlp, \"core\"";
  r.jobs = 2;
  r.attempts = 3;
  r.reruns = 1;
  r.succeeded = 1;
  r.failed = 1;
  r.running = 1;
  r.gpu_hours = 4.5;
  r.measured_gpu_hours = 2;
  r.idle_gpu_hours = 0.25;
  r.busywait_gpu_hours = 0.75;
  r.queue_waits = 2;
  r.queue_wait_s_sum = 1500;
  r.queue_wait_s_max = 900;
  r.cost_usd = 9;
  r.user = "alice";
  r.project = "nlp";
  r.template_name = "llama";
  r.state = "running";
  r.start_ms = 1100;
  d.rows.push_back(r);
  d.quotas.push_back({{"nlp", 5, 86400000}, 4.5, "warning"});
  return d;
}

TEST(ReportFormatTest, JsonCarriesRatesAndRoundTrips) {
  const ReportDoc d = Sample(GroupBy::kJob);
  const nlohmann::json j = ReportJson(d);
  EXPECT_EQ(j["by"], "job");
  EXPECT_DOUBLE_EQ(j["rows"][0]["success_rate"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["rows"][0]["rerun_rate"].get<double>(), 1.0 / 3);
  EXPECT_DOUBLE_EQ(j["rows"][0]["idle_share"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["rows"][0]["queue_wait_s_mean"].get<double>(), 750);
  EXPECT_EQ(j["rows"][0]["state"], "running");
  EXPECT_EQ(j["quotas"][0]["period_s"], 86400);
  auto back = ReportFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ReportJson(*back), j);
}

TEST(ReportFormatTest, FromJsonNamesWhatIsWrong) {
  nlohmann::json j = ReportJson(Sample(GroupBy::kUser));
  j["rows"][0].erase("gpu_hours");
  auto r = ReportFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gpu_hours"), std::string::npos) << r.status().message();
  j = ReportJson(Sample(GroupBy::kUser));
  j["by"] = "team";
  EXPECT_FALSE(ReportFromJson(j).ok());
}

TEST(ReportFormatTest, CsvQuotesAndFormats) {
  EXPECT_EQ(ReportCsv(Sample(GroupBy::kProject)),
            "project,jobs,attempts,reruns,succeeded,failed,running,gpu_hours,idle_gpu_hours,"
            "busywait_gpu_hours,measured_gpu_hours,queue_wait_s_mean,queue_wait_s_max,cost_usd,"
            "unpriced_gpu_hours\n"
            "\"nlp, \"\"core\"\"\",2,3,1,1,1,1,4.500000,0.250000,0.750000,2.000000,750.0,900.0,"
            "9.00,0.000000\n");
  const std::string by_job = ReportCsv(Sample(GroupBy::kJob));
  EXPECT_NE(by_job.find("job,user,project,template,state,start_ms,end_ms,jobs"), std::string::npos);
  EXPECT_NE(by_job.find("12345,alice,nlp,llama,running,1100,-1,2,"), std::string::npos);
}

}  // namespace
}  // namespace gpuwatch::accounting
