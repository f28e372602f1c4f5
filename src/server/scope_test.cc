// A token confined to projects (issue 19): the query layer adds the scope's job matcher to
// every selection, so no PromQL reaches another project's series or the node's.
#include "server/scope.h"

#include <gtest/gtest.h>

#include "query/testing/memory_querier.h"
#include "server/scrape_labels.h"

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

// The GPUs a job in scope held, while held (issue 19: "their GPUs while allocated"): node n1's
// GPU 0 from 3 s to 6 s and n2's GPU 1 throughout. n1's GPU 1 and n2's GPU 0 (in the nodes ×
// GPUs superset the query asks for) are never seen; nor are samples outside the holding, nor a
// rollup bucket that is not wholly inside it; nor a series that names a job (another's).
TEST(ScopedGpus, OnlyTheHeldGpusWhileHeld) {
  query::testing::MemoryQuerier q;
  std::vector<store::Sample> s;
  for (int64_t t = 1000; t <= 130'000; t += 1000) s.push_back({t, static_cast<double>(t)});
  // n1's as the agent's own store holds them with no --listen (no scrape labels); n2's as
  // stored with them (job="gpuwatch", what a hub holds from its agents).
  for (auto [node, gpu] : {std::pair{"n1", "0"}, {"n1", "1"}})
    q.Add(L({{"__name__", "DCGM_FI_DEV_GPU_UTIL"}, {"Hostname", node}, {"gpu", gpu}}), s);
  for (auto [node, gpu] : {std::pair{"n2", "0"}, {"n2", "1"}})
    q.Add(L({{"__name__", "DCGM_FI_DEV_GPU_UTIL"},
             {"Hostname", node},
             {"gpu", gpu},
             {"job", std::string(kScrapeJobName)}}),
          s);
  q.Add(L({{"__name__", "DCGM_FI_DEV_GPU_UTIL"},
           {"Hostname", "n1"},
           {"gpu", "0"},
           {"job", "theirs"}}),
        s);
  // Who else was on a held GPU: a process with no job, a user's attribution; never granted.
  q.Add(L({{"__name__", "gpuwatch_process_gpu_memory_bytes"},
           {"Hostname", "n2"},
           {"gpu", "1"},
           {"pid", "4242"},
           {"user", "mallory"}}),
        s);
  q.Add(L({{"__name__", "gpuwatch_gpu_attribution_info"},
           {"Hostname", "n2"},
           {"gpu", "1"},
           {"user", "mallory"}}),
        s);
  const std::vector<GpuGrant> grants = {
      {"n1", 0, 3000, 6000}, {"n2", 1, 0, INT64_MAX}, {"n1", 0, 5000, 5500}, {"n1", 0, 9000, 8000}};
  ScopedQuerier scoped(q, {}, grants);
  const auto all = *store::ParseSelector("DCGM_FI_DEV_GPU_UTIL");
  auto raw = scoped.SelectRaw(all, 0, 200'000);
  ASSERT_TRUE(raw.ok());
  ASSERT_EQ(raw->size(), 2u);
  EXPECT_EQ(store::LabelsToString((*raw)[0].labels),
            R"(DCGM_FI_DEV_GPU_UTIL{Hostname="n1", gpu="0"})");
  ASSERT_EQ((*raw)[0].samples.size(), 4u);  // 3, 4, 5, 6 s
  EXPECT_EQ((*raw)[0].samples.front().t_ms, 3000);
  EXPECT_EQ((*raw)[0].samples.back().t_ms, 6000);
  EXPECT_EQ(store::LabelValue((*raw)[1].labels, "Hostname"), "n2");
  EXPECT_EQ((*raw)[1].samples.size(), s.size());

  auto minutes = scoped.SelectRollups(store::Tier::k1m, all, 0, 200'000, store::kRollupAll);
  ASSERT_TRUE(minutes.ok());
  ASSERT_EQ(minutes->size(), 1u) << "n1's 3 s were no whole minute";
  EXPECT_EQ(store::LabelValue((*minutes)[0].labels, "Hostname"), "n2");

  auto series = scoped.Series(all, 7000, 9000);
  ASSERT_TRUE(series.ok());
  ASSERT_EQ(series->size(), 1u);
  EXPECT_EQ(store::LabelValue((*series)[0], "Hostname"), "n2");

  EXPECT_EQ(*scoped.LabelValues("gpu", {}), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(*scoped.LabelValues("Hostname", {}), (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(*scoped.LabelValues("job", {}), std::vector<std::string>{"gpuwatch"});
  EXPECT_TRUE(
      scoped.SelectRaw(*store::ParseSelector("gpuwatch_process_gpu_memory_bytes"), 0, 200'000)
          ->empty());
  EXPECT_TRUE(scoped.SelectRaw(*store::ParseSelector("gpuwatch_gpu_attribution_info"), 0, 200'000)
                  ->empty());
  EXPECT_EQ(*scoped.LabelValues("user", {}), std::vector<std::string>{});
  // No grant, no job: nothing.
  EXPECT_TRUE(ScopedQuerier(q, {}, {}).SelectRaw(all, 0, 200'000)->empty());
  // A training job named as the scrape job would select every node series: never in scope.
  EXPECT_TRUE(
      ScopedQuerier(q, {std::string(kScrapeJobName)}, {}).SelectRaw(all, 0, 200'000)->empty());
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
