// Template rules: parsed with errors that name the rule and field; the first match names a job.
#include "jobs/template_rules.h"

#include <gtest/gtest.h>

namespace gpuwatch::jobs {
namespace {

TEST(TemplateRulesTest, FirstMatchNamesTheJob) {
  auto rules = ParseTemplateRules(R"({"templates": [
      {"name": "nlp-8gpu", "user": "alice", "project": "nlp", "gpus": 8},
      {"name": "big-multinode", "ranks": 64},
      {"name": "alice-other", "user": "alice"}]})");
  ASSERT_TRUE(rules.ok()) << rules.status().message();
  EXPECT_EQ(MatchTemplate(*rules, "alice", "nlp", 8, 8), "nlp-8gpu");
  EXPECT_EQ(MatchTemplate(*rules, "alice", "nlp", 4, 64), "big-multinode");
  EXPECT_EQ(MatchTemplate(*rules, "alice", "cv", std::nullopt, std::nullopt), "alice-other");
  EXPECT_EQ(MatchTemplate(*rules, "bob", "nlp", 8, std::nullopt), "");  // ranks unknown
}

TEST(TemplateRulesTest, BadFilesNameTheRuleAndField) {
  auto err = [](const char* text) { return ParseTemplateRules(text).status().message(); };
  EXPECT_EQ(err("[1]"), "expected {\"templates\": [...]}");
  EXPECT_EQ(err("{"), "not JSON");
  EXPECT_EQ(err(R"({"templates": [{"user": "a"}]})"),
            "templates[0].name: a string of 1 to 128 bytes");
  EXPECT_EQ(err(R"({"templates": [{"name": "x", "gpus": 0}]})"),
            "templates[0] (x).gpus: an integer 1..4096");
  EXPECT_EQ(err(R"({"templates": [{"name": "x"}]})"),
            "templates[0] (x): matches every job; give user, project, gpus or ranks");
  EXPECT_EQ(err(R"({"templates": [{"name": "x", "user": "a"}, {"name": "x", "ranks": 2}]})"),
            "templates[1] (x).name: used twice");
  EXPECT_EQ(err(R"({"templates": [{"name": "x", "nodes": 2}]})"),
            "templates[0] (x): unknown field 'nodes' (name, user, project, gpus, ranks)");
  EXPECT_EQ(LoadTemplateRules("/nonexistent/t.json").status().message(),
            "cannot read /nonexistent/t.json");
}

}  // namespace
}  // namespace gpuwatch::jobs
