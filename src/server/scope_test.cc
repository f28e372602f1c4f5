// A token confined to projects (issue 19): the query layer adds the scope's job matcher to
// every selection, so no PromQL reaches another project's series or the node's.
#include "server/scope.h"

#include <gtest/gtest.h>

#include "query/testing/memory_querier.h"

namespace gpuwatch::server {
namespace {

store::Labels L(std::vector<store::Label> l) { return store::MakeLabels(std::move(l)).value(); }

class ScopeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<store::Sample> s = {{1000, 1}, {2000, 2}};
    q_.Add(L({{"__name__", "gpuwatch_job_info"}, {"job", "a1"}, {"project", "nlp"}}), s);
    q_.Add(L({{"__name__", "gpuwatch_job_info"}, {"job", "b1"}, {"project", "vision"}}), s);
    q_.Add(L({{"__name__", "gpuwatch_job_info"}, {"job", "c.1"}, {"project", "nlp"}}), s);
    q_.Add(L({{"__name__", "gpuwatch_job_steps_total"}, {"job", "a1"}, {"rank", "0"}}), s);
    q_.Add(L({{"__name__", "gpuwatch_job_steps_total"}, {"job", "b1"}, {"rank", "0"}}), s);
    q_.Add(L({{"__name__", "gpuwatch_job_steps_total"}, {"job", "cx1"}, {"rank", "0"}}), s);
    q_.Add(L({{"__name__", "DCGM_FI_DEV_GPU_UTIL"}, {"gpu", "0"}, {"job", "gpuwatch"}}), s);
  }
  std::vector<std::string> Jobs(const store::Querier& q) {
    auto m = store::ParseSelector("gpuwatch_job_steps_total");
    auto r = q.SelectRaw(*m, 0, 5000);
    std::vector<std::string> out;
    for (const auto& s : *r) out.emplace_back(store::LabelValue(s.labels, "job"));
    return out;
  }
  query::testing::MemoryQuerier q_;
};

TEST_F(ScopeTest, JobsInScopeComeFromTheRegistryAndTheStore) {
  jobs::JobView live;
  live.id = "live7";
  live.project = "nlp";
  jobs::JobView other;
  other.id = "other";
  other.project = "vision";
  EXPECT_EQ(JobsInScope({"nlp"}, {live, other}, &q_),
            (std::set<std::string>{"a1", "c.1", "live7"}));
  EXPECT_EQ(JobsInScope({"nlp"}, {live, other}, nullptr), (std::set<std::string>{"live7"}));
  EXPECT_EQ(JobsInScope({"audio"}, {live, other}, &q_), (std::set<std::string>{}));
}

TEST_F(ScopeTest, SelectionsSeeOnlyTheJobsInScope) {
  ScopedQuerier scoped(q_, {"a1", "c.1"});
  // "c.1" is quoted in the regex: "cx1" does not slip through the '.'.
  EXPECT_EQ(Jobs(scoped), (std::vector<std::string>{"a1"}));
  // A selector naming another job, or none, finds nothing beyond the scope.
  auto other = store::ParseSelector(R"({job="b1"})");
  EXPECT_TRUE(scoped.SelectRaw(*other, 0, 5000)->empty());
  auto gpu = store::ParseSelector("DCGM_FI_DEV_GPU_UTIL");
  EXPECT_TRUE(scoped.SelectRaw(*gpu, 0, 5000)->empty());
  EXPECT_TRUE(scoped.SelectRollups(store::Tier::k1m, *gpu, 0, 5000, store::kRollupAll)->empty());
  auto values = scoped.LabelValues("job", {});
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(*values, (std::vector<std::string>{"a1", "c.1"}));
  auto names = scoped.LabelNames({});
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(std::count(names->begin(), names->end(), "gpu"), 0);
  EXPECT_EQ(scoped.Series(*gpu, 0, 5000)->size(), 0u);
  // One job is an equality matcher; no job selects nothing at all.
  EXPECT_EQ(Jobs(ScopedQuerier(q_, {"b1"})), (std::vector<std::string>{"b1"}));
  ScopedQuerier none(q_, {});
  EXPECT_TRUE(Jobs(none).empty());
  EXPECT_TRUE(none.LabelNames({})->empty());
}

TEST(KeepJobsInScope, KeepsEntriesOfTheJobsOnly) {
  nlohmann::json doc = {{"findings",
                         {{{"job", "a1"}, {"cause", "x"}},
                          {{"cause", "node_level"}},
                          {{"job", "b1"}},
                          {{"job", 7}}}}};
  KeepJobsInScope(doc, "findings", {"a1"});
  ASSERT_EQ(doc["findings"].size(), 1u);
  EXPECT_EQ(doc["findings"][0]["cause"], "x");
  nlohmann::json no_key = {{"other", 1}};
  KeepJobsInScope(no_key, "findings", {"a1"});
  EXPECT_EQ(no_key, (nlohmann::json{{"other", 1}}));
}

}  // namespace
}  // namespace gpuwatch::server
