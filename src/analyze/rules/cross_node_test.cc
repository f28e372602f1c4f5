// Cross-node rules: version_mismatch and clock_skew.
// Hand-made traces read through the real trace reader (analyze/testing/diagnose.h).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "analyze/testing/diagnose.h"

namespace gpuwatch::analyze {
namespace {

using testing::Diagnose;
using testing::Gpu;
using testing::Node;
using testing::Step;
using testing::StepOf;

TEST(CrossNodeRuleTest, TheNodeThatDiffersAcrossNodes) {
  std::string trace = Node("n1", 100, ",\"clock_offset_ms\":0.5") +
                      Node("n2", 100, ",\"clock_offset_ms\":-0.3") +
                      Node("n3", 100, ",\"clock_offset_ms\":900");
  // n3 later comes back on another driver.
  std::string n3 = Node("n3", 200);
  const std::string from = "550.90.07";
  n3.replace(n3.find(from), from.size(), "535.54.03");
  trace += n3;
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].cause, Cause::kClockSkew);
  EXPECT_EQ(f[0].node, "n3");
  EXPECT_EQ(f[1].cause, Cause::kVersionMismatch);
  EXPECT_EQ(f[1].node, "n3");
  EXPECT_DOUBLE_EQ(f[1].first_seen, 200);
}

}  // namespace
}  // namespace gpuwatch::analyze
