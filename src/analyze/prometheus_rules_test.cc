// The Prometheus export of the built-in rules: every cause of findings.md is either a rule or
// named as the engine's alone, once; every rule reaches the file with its labels. promtool
// judges the file itself (tests/rules_export_test.sh).
#include "analyze/prometheus_rules.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>

#include "analyze/finding.h"
#include "model/metric_catalog.h"

namespace gpuwatch::analyze {
namespace {

TEST(PrometheusRulesTest, EveryCauseIsARuleOrTheEnginesAloneExactlyOnce) {
  std::map<std::string, int> seen;
  for (const auto& r : PrometheusRules()) {
    ++seen[std::string(model::CauseName(r.cause))];
    EXPECT_NE(r.cause, Cause::kUserRule);
    EXPECT_FALSE(r.expr.empty()) << r.cause;
    EXPECT_FALSE(r.summary.empty()) << r.cause;
  }
  for (const auto& e : EngineOnlyCauses()) {
    ++seen[std::string(model::CauseName(e.cause))];
    EXPECT_FALSE(e.why.empty()) << e.cause;
  }
  for (const model::CauseInfo& c : model::CauseCatalog()) {
    EXPECT_EQ(seen[std::string(c.name)], 1) << c.name;
    seen.erase(std::string(c.name));
  }
  EXPECT_TRUE(seen.empty()) << "not a findings.md cause: " << seen.begin()->first;
}

TEST(PrometheusRulesTest, TheFileHoldsEveryRuleInItsLayersGroup) {
  const std::string yaml = PrometheusRulesYaml();
  size_t alerts = 0;
  for (size_t at = yaml.find("- alert: "); at != std::string::npos;
       at = yaml.find("- alert: ", at + 1)) {
    ++alerts;
  }
  EXPECT_EQ(alerts, PrometheusRules().size());
  EXPECT_NE(yaml.find("  - name: gpuwatch-card\n"), std::string::npos);
  EXPECT_NE(yaml.find("  - name: gpuwatch-task\n"), std::string::npos);
  EXPECT_NE(yaml.find("  - name: gpuwatch-link\n"), std::string::npos);
  // The thermal rule: its name, its labels, its expression quoted for YAML.
  EXPECT_NE(
      yaml.find("      - alert: GpuwatchThermalThrottle\n"
                "        expr: \"max by (Hostname, gpu, UUID) "
                "(gpuwatch_clock_event_reason_active{reason=~\\\"sw_thermal|hw_thermal\\\"})"),
      std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("          severity: critical\n          cause: gpu_lost\n"
                      "          layer: card\n"),
            std::string::npos);
  for (const auto& e : EngineOnlyCauses())
    EXPECT_NE(yaml.find("#   " + std::string(model::CauseName(e.cause)) + ": "), std::string::npos)
        << e.cause;
}

TEST(PrometheusRulesTest, EveryMetricARuleReadsIsServedAtMetrics) {
  std::set<std::string> served;
  for (const auto& d : model::GpuMetricCatalog()) served.insert(std::string(d.name));
  for (const auto& d : model::OtherMetricCatalog()) {
    // Store-only series (raw steps) are never on /metrics, where Prometheus scrapes.
    if (!d.help.starts_with("Store only")) served.insert(std::string(d.name));
  }
  const std::regex name(R"((DCGM_FI_[A-Z_]+|gpuwatch_[a-z_]+))");
  for (const auto& r : PrometheusRules()) {
    const std::string expr(r.expr);
    for (auto it = std::sregex_iterator(expr.begin(), expr.end(), name);
         it != std::sregex_iterator(); ++it) {
      const std::string n = it->str();
      if (n.ends_with("_")) {
        // The stem of a __name__ regex (DCGM_FI_DEV_NVLINK_(CRC_FLIT|…)): something served
        // must start with it.
        auto next = served.lower_bound(n);
        EXPECT_TRUE(next != served.end() && next->starts_with(n)) << r.cause << " reads " << n;
        continue;
      }
      EXPECT_TRUE(served.count(n))
          << r.cause << " reads " << n << ", which /metrics does not serve";
    }
  }
}

}  // namespace
}  // namespace gpuwatch::analyze
