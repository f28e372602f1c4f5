#include "model/cause.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace gpuwatch::model {
namespace {

TEST(CauseCatalogTest, IndexedByTheEnumWithUniqueNames) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < CauseCatalog().size(); ++i) {
    const CauseInfo& c = CauseCatalog()[i];
    EXPECT_EQ(static_cast<size_t>(c.cause), i) << c.name;
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
    EXPECT_EQ(CauseFromName(c.name), c.cause);
    EXPECT_EQ(CauseName(c.cause), c.name);
    EXPECT_FALSE(c.meaning.empty()) << c.name;
  }
  EXPECT_EQ(CauseCatalog().size(), kCauseCount);
  EXPECT_EQ(CauseFromName("user"), std::nullopt);
  EXPECT_EQ(CauseFromName("bogus"), std::nullopt);
  EXPECT_EQ(Describe(Cause::kUserRule).layer, Layer::kUser);
}

// findings.md, "Which cause, and where": the keys each cause names.
TEST(CauseCatalogTest, PlacesAreFindingsMds) {
  for (const CauseInfo& c : CauseCatalog()) {
    if (c.layer == Layer::kTask) {
      EXPECT_TRUE(c.place == Place::kNodeJob || c.place == Place::kNodeJobRank) << c.name;
    } else if (c.layer == Layer::kCard) {
      EXPECT_EQ(c.place, Place::kNodeGpu) << c.name;
    }
  }
  EXPECT_EQ(Describe(Cause::kRankExit).place, Place::kNodeJobRank);
  for (Cause c : {Cause::kNvlinkFallback, Cause::kNetFallback, Cause::kTopologyChange,
                  Cause::kClockSkew, Cause::kVersionMismatch}) {
    EXPECT_EQ(Describe(c).place, Place::kNode) << CauseName(c);
  }
  for (Cause c : {Cause::kNetCongestion, Cause::kNetErrors}) {
    EXPECT_EQ(Describe(c).place, Place::kNodeNic) << CauseName(c);
  }
}

// findings.md, Evaluation: the causes that need a baseline or a trend, listed there by name.
TEST(CauseCatalogTest, LatencyClassIsFindingsMds) {
  std::set<std::string_view> slow;
  for (const CauseInfo& c : CauseCatalog()) {
    if (c.needs_baseline_or_trend) slow.insert(c.name);
  }
  EXPECT_EQ(slow, (std::set<std::string_view>{"data_stall", "checkpoint_stall", "memory_leak",
                                              "step_regression", "straggler_gpu", "ecc_sbe_growth",
                                              "net_congestion", "gpu_idle_allocated"}));
}

TEST(CauseCatalogTest, TheExplainedByGraphHasNoSelfEdgeNorTwoWayEdge) {
  for (const CauseInfo& c : CauseCatalog()) {
    for (const Explains& e : c.explains) {
      EXPECT_NE(e.symptom, c.cause) << c.name;
      for (const Explains& back : Describe(e.symptom).explains) {
        EXPECT_NE(back.symptom, c.cause) << c.name << " <-> " << CauseName(e.symptom);
      }
    }
  }
}

// findings.md, "Deepest cause only" and the scenarios README's conventions, edge by edge.
TEST(CauseCatalogTest, TheGraphSaysFindingsMdsDeepestCauses) {
  PlaceMatch gpu{.same_gpu = true, .same_node = true};
  PlaceMatch node{.same_node = true};
  PlaceMatch job{.same_job = true};
  // "a GPU that is slow because it is thermally throttled is thermal_throttle, not straggler"
  EXPECT_TRUE(CauseExplains(Cause::kThermalThrottle, Cause::kStragglerGpu, gpu));
  EXPECT_FALSE(CauseExplains(Cause::kThermalThrottle, Cause::kStragglerGpu, node));
  // "a rank that dies because its GPU fell off the bus is gpu_lost, not also rank_exit"
  EXPECT_TRUE(CauseExplains(Cause::kGpuLost, Cause::kRankExit, node));
  // "a rank that dies because its GPU had a DBE is ecc_dbe"; "after an XID is xid"
  EXPECT_TRUE(CauseExplains(Cause::kEccDbe, Cause::kRankExit, node));
  EXPECT_TRUE(CauseExplains(Cause::kXid, Cause::kRankExit, node));
  // "a job that hangs because a GPU stopped responding is xid"
  EXPECT_TRUE(CauseExplains(Cause::kXid, Cause::kJobHang, node));
  // "slower steps after a fallback, a congested NIC or a downgraded link are that link cause"
  for (Cause c : {Cause::kNvlinkFallback, Cause::kNetFallback, Cause::kNetCongestion,
                  Cause::kPcieDowngrade}) {
    EXPECT_TRUE(CauseExplains(c, Cause::kStepRegression, node)) << CauseName(c);
  }
  // "a job that is slow because its input pipeline starves it is data_stall"
  EXPECT_TRUE(CauseExplains(Cause::kDataStall, Cause::kStepRegression, job));
  // A dead rank: the others wait for it.
  EXPECT_TRUE(CauseExplains(Cause::kRankExit, Cause::kJobHang, job));
  EXPECT_FALSE(CauseExplains(Cause::kRankExit, Cause::kJobHang, node));
  // Nothing explains a lost GPU, and a user rule explains nothing.
  for (const CauseInfo& c : CauseCatalog()) {
    EXPECT_FALSE(CauseExplains(c.cause, Cause::kGpuLost, gpu)) << c.name;
    EXPECT_FALSE(CauseExplains(Cause::kUserRule, c.cause, gpu)) << c.name;
  }
}

TEST(CauseCatalogTest, SeverityNamesRoundTrip) {
  for (Severity s : {Severity::kInfo, Severity::kWarning, Severity::kCritical}) {
    EXPECT_EQ(SeverityFromName(SeverityName(s)), s);
  }
  EXPECT_EQ(SeverityFromName("page"), std::nullopt);
  EXPECT_LT(Severity::kInfo, Severity::kWarning);
  EXPECT_LT(Severity::kWarning, Severity::kCritical);
}

// The catalog is findings.md's table: same causes, same order, same layers.
TEST(CauseCatalogTest, EqualsTheSharedSpec) {
  const std::string path = std::string(GPUWATCH_SOURCE_DIR) + "/../shared/spec/findings.md";
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << path << " is absent (it lives beside the checkout)";
  std::string line;
  std::vector<std::pair<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    // "| `data_stall` | task | steps wait on input data … |"
    if (line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    const size_t bar = line.find('|', end);
    const size_t bar2 = line.find('|', bar + 1);
    std::string layer = line.substr(bar + 1, bar2 - bar - 1);
    layer.erase(0, layer.find_first_not_of(' '));
    layer.erase(layer.find_last_not_of(' ') + 1);
    rows.push_back({line.substr(3, end - 3), layer});
  }
  ASSERT_EQ(rows.size(), CauseCatalog().size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].first, CauseCatalog()[i].name);
    EXPECT_EQ(rows[i].second, LayerName(CauseCatalog()[i].layer)) << rows[i].first;
  }
}

}  // namespace
}  // namespace gpuwatch::model
