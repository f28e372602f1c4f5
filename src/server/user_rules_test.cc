// User rules: the file's validation, and the evaluator's for-duration and hysteresis over a
// store (an in-memory querier).
#include "server/user_rules.h"

#include <gtest/gtest.h>

#include "query/testing/memory_querier.h"

namespace gpuwatch::server {
namespace {

constexpr int64_t kT0 = 1'764'460'800'000;

TEST(UserRulesTest, TheFileIsValidatedNamingRuleAndField) {
  auto ok = ParseUserRules(R"js({"rules": [
      {"name": "GpuHot", "expr": "DCGM_FI_DEV_GPU_TEMP > 83", "for": "2m", "clear_after": "30s",
       "severity": "critical", "summary": "GPU {{gpu}} at {{value}} C", "action": "Check fans"},
      {"name": "SlowerThanYesterday",
       "expr": "gpuwatch_job_step_duration_seconds > 1.2 * avg_over_time(gpuwatch_job_step_duration_seconds[1h] offset 1d)"}
  ]})js");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].for_ms, 120000);
  EXPECT_EQ((*ok)[0].clear_after_ms, 30000);
  EXPECT_EQ((*ok)[0].severity, model::Severity::kCritical);
  EXPECT_EQ((*ok)[1].for_ms, 0);
  EXPECT_EQ((*ok)[1].clear_after_ms, 60000);
  EXPECT_EQ((*ok)[1].summary, "SlowerThanYesterday holds ({{value}})");

  const std::pair<const char*, const char*> bad[] = {
      {R"({"rules": [{"expr": "up"}]})", "rules[0].name: required"},
      {R"({"rules": [{"name": "a", "expr": "up", "for": "soon"}]})",
       "rules[0] (a).for: 'soon' is not a duration"},
      {R"({"rules": [{"name": "a", "expr": "up", "colour": "red"}]})",
       "rules[0] (a).colour: unknown field"},
      {R"({"rules": [{"name": "a", "expr": "up"}, {"name": "b", "expr": "rate(up[5m]"}]})",
       "rules[1] (b).expr:"},
      {R"({"rules": [{"name": "a", "expr": "up"}, {"name": "a", "expr": "up"}]})",
       "rules[1] (a).name: 'a' is used twice"},
      {R"({"rules": [{"name": "a", "expr": "1 + 1"}]})", "must give an instant vector"},
      {R"({"rules": [{"name": "a", "expr": "up", "severity": "page"}]})",
       "'page': info, warning or critical"},
      {R"({"rules": [{"name": "a b", "expr": "up"}]})", "1 to 64 of [A-Za-z0-9_]"},
      {R"([1, 2])", "expected {\"rules\": [...]}"},
      {"{nope", "not JSON"},
  };
  for (const auto& [text, want] : bad) {
    auto r = ParseUserRules(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos)
        << text << " → " << r.status().message();
  }
  EXPECT_NE(
      LoadUserRules("/nonexistent/rules.json").status().message().find("/nonexistent/rules.json"),
      std::string::npos);
}

TEST(UserRulesTest, ARuleFiresAfterItsForAndClearsAfterItsHysteresis) {
  query::testing::MemoryQuerier q;
  std::vector<store::Sample> hot, cool;
  for (int64_t s = 0; s <= 400; s += 10) {
    // GPU 0 is hot from 100 s to 200 s; GPU 1 never.
    hot.push_back({kT0 + s * 1000, s >= 100 && s < 200 ? 90.0 : 70.0});
    cool.push_back({kT0 + s * 1000, 70.0});
  }
  q.Add({{"__name__", "DCGM_FI_DEV_GPU_TEMP"}, {"Hostname", "n1"}, {"gpu", "0"}}, hot);
  q.Add({{"__name__", "DCGM_FI_DEV_GPU_TEMP"}, {"Hostname", "n1"}, {"gpu", "1"}}, cool);
  auto rules = ParseUserRules(R"({"rules": [{"name": "GpuHot",
      "expr": "DCGM_FI_DEV_GPU_TEMP > 83", "for": "30s", "clear_after": "20s",
      "summary": "GPU {{gpu}} on {{ Hostname }} at {{value}} C"}]})");
  ASSERT_TRUE(rules.ok()) << rules.status().message();
  UserRuleEvaluator ev(*rules, "default-node");
  EXPECT_EQ(ev.Holds().at("user:GpuHot"), 20000);
  auto at = [&](int64_t s) { return ev.Evaluate(q, kT0 + s * 1000); };
  EXPECT_TRUE(at(90).empty());
  EXPECT_TRUE(at(100).empty());  // pending
  EXPECT_TRUE(at(120).empty());  // 20 s of 30
  auto f = at(130);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].CauseText(), "user:GpuHot");
  EXPECT_EQ(f[0].layer(), model::Layer::kUser);
  EXPECT_EQ(f[0].node, "n1");
  EXPECT_EQ(f[0].gpu, 0);
  EXPECT_EQ(f[0].summary, "GPU 0 on n1 at 90 C");
  EXPECT_DOUBLE_EQ(f[0].first_seen, (kT0 + 100000) / 1000.0);
  EXPECT_DOUBLE_EQ(f[0].last_seen, (kT0 + 130000) / 1000.0);
  EXPECT_EQ(ev.last_error(), "");
  // Evaluated every 10 s, as the agent does every 5 s, until it stops holding at 200 s: kept
  // through its 20 s of hysteresis after the last time it held (190 s), then gone.
  for (int64_t t = 140; t <= 190; t += 10) ASSERT_EQ(at(t).size(), 1u) << t;
  auto held = at(205);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_DOUBLE_EQ(held[0].last_seen, (kT0 + 190000) / 1000.0);
  EXPECT_EQ(at(210).size(), 1u);
  EXPECT_TRUE(at(211).empty());
}

// Issue 18: every stored agent series carries the scrape's job="gpuwatch"; that is no training
// job, while a job series' own job label still names its job.
TEST(UserRulesTest, TheScrapeJobLabelIsNoTrainingJob) {
  query::testing::MemoryQuerier q;
  q.Add({{"__name__", "DCGM_FI_DEV_GPU_TEMP"},
         {"Hostname", "n1"},
         {"gpu", "0"},
         {"instance", "n1:9470"},
         {"job", "gpuwatch"}},
        {{kT0, 90.0}});
  q.Add({{"__name__", "gpuwatch_job_data_wait_ratio"},
         {"Hostname", "n1"},
         {"instance", "n1:9470"},
         {"job", "train-7"}},
        {{kT0, 0.9}});
  auto rules = ParseUserRules(R"({"rules": [{"name": "Hot", "expr": "DCGM_FI_DEV_GPU_TEMP > 83"},
      {"name": "Starved", "expr": "gpuwatch_job_data_wait_ratio > 0.5"}]})");
  ASSERT_TRUE(rules.ok()) << rules.status().message();
  UserRuleEvaluator ev(*rules, "n1");
  auto f = ev.Evaluate(q, kT0);
  ASSERT_EQ(f.size(), 2u);
  for (const auto& one : f) {
    if (one.rule == "Hot")
      EXPECT_FALSE(one.job.has_value()) << *one.job;
    else
      EXPECT_EQ(one.job.value_or(""), "train-7");
  }
}

TEST(UserRulesTest, AFlickeringConditionStartsItsForOver) {
  query::testing::MemoryQuerier q;
  std::vector<store::Sample> v;
  // Hot at 0-20 s, cool at 30 s, hot again from 40 s.
  for (int64_t s = 0; s <= 200; s += 10) v.push_back({kT0 + s * 1000, s == 30 ? 70.0 : 90.0});
  q.Add({{"__name__", "DCGM_FI_DEV_GPU_TEMP"}, {"gpu", "0"}}, v);
  auto rules = ParseUserRules(
      R"({"rules": [{"name": "Hot", "expr": "DCGM_FI_DEV_GPU_TEMP > 83", "for": "40s"}]})");
  ASSERT_TRUE(rules.ok());
  UserRuleEvaluator ev(*rules, "n0");
  for (int64_t s = 0; s <= 70; s += 10) {
    EXPECT_TRUE(ev.Evaluate(q, kT0 + s * 1000).empty()) << s;  // 40 s would be 40 without the dip
  }
  auto f = ev.Evaluate(q, kT0 + 80000);  // 40 s since it came back at 40 s
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].node, "n0");  // no Hostname label: this agent's node
  EXPECT_DOUBLE_EQ(f[0].first_seen, (kT0 + 40000) / 1000.0);
}

TEST(UserRulesTest, TemplatesFillLabelsAndValue) {
  const store::Labels l = {{"gpu", "3"}, {"job", "j"}};
  EXPECT_EQ(FillTemplate("GPU {{gpu}} job {{job}} {{value}} {{none}}!", l, 0.5),
            "GPU 3 job j 0.5 !");
  EXPECT_EQ(FillTemplate("no braces", l, 1), "no braces");
  EXPECT_EQ(FillTemplate("open {{gpu", l, 1), "open {{gpu");
}

}  // namespace
}  // namespace gpuwatch::server
