// The cause catalog is complete where it is used: every cause of findings.md has a rule that can
// report it, a planter in the simulator (or an explicit none), and a Prometheus twin (or an
// explicit "engine only"); and each of those tables names only catalog causes.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "analyze/diagnoser.h"
#include "analyze/prometheus_rules.h"
#include "analyze/rules/rules.h"
#include "cluster_sim/simulator.h"
#include "model/cause.h"

namespace gpuwatch::analyze {
namespace {

TEST(CatalogTest, EveryCauseHasARule) {
  Diagnoser d;
  std::map<Cause, std::vector<std::string>> by;
  for (const auto& rule : d.rules()) {
    for (Cause c : rule->causes()) by[c].emplace_back(rule->name());
  }
  for (const model::CauseInfo& c : model::CauseCatalog()) {
    EXPECT_FALSE(by[c.cause].empty()) << c.name << " has no rule";
  }
  EXPECT_EQ(by.count(Cause::kUserRule), 0u) << "user rules live in server/user_rules";
}

TEST(CatalogTest, EveryCauseHasAPlanterOrAnExplicitNone) {
  std::map<Cause, int> seen;
  for (const cluster_sim::Planter& p : cluster_sim::Planters()) {
    ++seen[p.cause];
    if (p.how == cluster_sim::Planting::kNone) {
      EXPECT_FALSE(p.why.empty()) << model::CauseName(p.cause) << ": say why it is not planted";
    }
  }
  for (const model::CauseInfo& c : model::CauseCatalog()) {
    EXPECT_EQ(seen[c.cause], 1) << c.name;
  }
  EXPECT_EQ(seen.size(), model::CauseCatalog().size());
  // The simulator's fault names and the demo's list come from the planters.
  for (const std::string& name : cluster_sim::KnownFaults()) {
    EXPECT_TRUE(name == "healthy" || model::CauseFromName(name)) << name;
  }
}

TEST(CatalogTest, EveryCauseHasAPromqlTwinOrAnExplicitNone) {
  for (const model::CauseInfo& c : model::CauseCatalog()) {
    int twins = PrometheusRuleOf(c.cause) != nullptr ? 1 : 0;
    for (const EngineOnlyCause& e : EngineOnlyCauses()) twins += e.cause == c.cause ? 1 : 0;
    EXPECT_EQ(twins, 1) << c.name;
  }
}

}  // namespace
}  // namespace gpuwatch::analyze
