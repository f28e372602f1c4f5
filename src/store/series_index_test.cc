#include "store/series_index.h"

#include <gtest/gtest.h>

namespace gpuwatch::store {
namespace {

Labels L(std::vector<Label> l) {
  auto r = MakeLabels(std::move(l));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return *r;
}

std::vector<Matcher> Sel(std::string_view s) {
  auto r = ParseSelector(s);
  EXPECT_TRUE(r.ok()) << s << ": " << r.status().ToString();
  return r.ok() ? *r : std::vector<Matcher>{};
}

class SeriesIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 2 nodes x 2 GPUs x {util, temp}; node b GPU 1 has no "job" label.
    for (std::string node : {"a", "b"})
      for (std::string gpu : {"0", "1"})
        for (std::string metric : {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"}) {
          std::vector<Label> l = {{"__name__", metric}, {"Hostname", node}, {"gpu", gpu}};
          if (!(node == "b" && gpu == "1")) l.push_back({"job", "train-" + node});
          idx_.GetOrCreate(L(l));
        }
  }
  SeriesIndex idx_;
};

// Without the lookup by whole label set (a block's index), Find and GetOrCreate answer the
// same through the postings: a subset or superset of a series' labels is not that series.
TEST_F(SeriesIndexTest, AnswersTheSameWithoutTheKeyLookup) {
  std::vector<Labels> all;
  for (SeriesRef r = 0; r < idx_.size(); ++r) all.push_back(idx_.LabelsOf(r));
  idx_.DropKeyLookup();
  for (SeriesRef r = 0; r < all.size(); ++r) {
    EXPECT_EQ(idx_.Find(all[r]), std::optional<SeriesRef>(r));
    EXPECT_EQ(idx_.LabelsAt(r), all[r]);
    bool created = true;
    EXPECT_EQ(idx_.GetOrCreate(all[r], &created), r);
    EXPECT_FALSE(created);
  }
  // Node b GPU 1 has no job: with one, or without its gpu, it is no series here.
  EXPECT_FALSE(idx_.Find(L({{"__name__", "DCGM_FI_DEV_GPU_UTIL"},
                            {"Hostname", "b"},
                            {"gpu", "1"},
                            {"job", "train-b"}})));
  EXPECT_FALSE(idx_.Find(L({{"__name__", "DCGM_FI_DEV_GPU_UTIL"}, {"Hostname", "b"}})));
  EXPECT_FALSE(idx_.Find(L({{"__name__", "nope"}})));
  bool created = false;
  const SeriesRef fresh = idx_.GetOrCreate(L({{"__name__", "new"}}), &created);
  EXPECT_TRUE(created);
  EXPECT_EQ(fresh, all.size());
  EXPECT_EQ(idx_.Find(L({{"__name__", "new"}})), std::optional<SeriesRef>(fresh));
  EXPECT_EQ(idx_.Select(Sel("{Hostname=\"b\"}")).size(), 4u);
}

TEST_F(SeriesIndexTest, InternsOnce) {
  EXPECT_EQ(idx_.size(), 8u);
  bool created = true;
  auto ref = idx_.GetOrCreate(L({{"gpu", "0"},
                                 {"__name__", "DCGM_FI_DEV_GPU_UTIL"},
                                 {"Hostname", "a"},
                                 {"job", "train-a"}}),
                              &created);
  EXPECT_FALSE(created) << "label order must not matter";
  EXPECT_EQ(ref, 0u);
  EXPECT_EQ(LabelValue(idx_.LabelsOf(ref), "job"), "train-a");
}

TEST_F(SeriesIndexTest, SelectSemantics) {
  EXPECT_EQ(idx_.Select(Sel("DCGM_FI_DEV_GPU_UTIL")).size(), 4u);
  EXPECT_EQ(idx_.Select(Sel("DCGM_FI_DEV_GPU_UTIL{Hostname=\"a\"}")).size(), 2u);
  EXPECT_EQ(idx_.Select(Sel("DCGM_FI_DEV_GPU_UTIL{Hostname=~\"a|b\", gpu!=\"0\"}")).size(), 2u);
  EXPECT_EQ(idx_.Select(Sel("{__name__=~\"DCGM_.*_TEMP\"}")).size(), 4u);
  // A label the series lacks has the empty value.
  EXPECT_EQ(idx_.Select(Sel("DCGM_FI_DEV_GPU_UTIL{job=\"\"}")).size(), 1u);
  EXPECT_EQ(idx_.Select(Sel("DCGM_FI_DEV_GPU_UTIL{job!=\"train-a\"}")).size(),
            2u);  // train-b and absent
  EXPECT_EQ(idx_.Select(Sel("DCGM_FI_DEV_GPU_UTIL{job!~\"train-.*\"}")).size(), 1u);
  EXPECT_EQ(idx_.Select(Sel("DCGM_FI_DEV_GPU_UTIL{job=~\".+\"}")).size(), 3u);
  // Regexes are anchored: "a" does not match "train-a".
  EXPECT_EQ(idx_.Select(Sel("DCGM_FI_DEV_GPU_UTIL{job=~\"a\"}")).size(), 0u);
  EXPECT_TRUE(idx_.Select(Sel("nope")).empty());
}

TEST_F(SeriesIndexTest, LabelNamesAndValues) {
  auto names = idx_.LabelNames();
  EXPECT_EQ(names, (std::vector<std::string>{"Hostname", "__name__", "gpu", "job"}));
  EXPECT_EQ(idx_.LabelValues("job", {}), (std::vector<std::string>{"train-a", "train-b"}));
  EXPECT_EQ(idx_.LabelValues("gpu", Sel("DCGM_FI_DEV_GPU_UTIL{job=\"\"}")),
            (std::vector<std::string>{"1"}));
}

TEST(LabelsTest, Validation) {
  EXPECT_FALSE(MakeLabels({{"1bad", "x"}}).ok());
  EXPECT_FALSE(MakeLabels({{"a", "x"}, {"a", "y"}}).ok());
  auto dropped = MakeLabels({{"a", ""}, {"b", "1"}});
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(dropped->size(), 1u) << "an empty value means absent";
  std::vector<Label> many;
  for (int i = 0; i < 100; ++i) many.push_back({"l" + std::to_string(i), "v"});
  auto too_many = MakeLabels(many);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("too many labels"), std::string::npos);
}

TEST(SelectorTest, ParsesAndRejects) {
  auto m = ParseSelector("up{a='x', b=~`\\d+`, c!=\"q\\\"uote\"}");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 4u);
  EXPECT_EQ((*m)[2].value(), "\\d+");
  EXPECT_TRUE((*m)[2].Matches("42"));
  EXPECT_EQ((*m)[3].value(), "q\"uote");
  for (const char* bad :
       {"", "{", "up{a=}", "up{a=\"x\"", "up{a~\"x\"}", "up{a=~\"(\"}", "up}", "up{1a=\"x\"}"}) {
    auto r = ParseSelector(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  auto err = ParseSelector("up{a=\"x\" b=\"y\"}");
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.status().message(), "selector: expected ',' or '}' at offset 9");
}

}  // namespace
}  // namespace gpuwatch::store
