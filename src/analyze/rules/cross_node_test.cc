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

// A node record of `node` on another driver than Node()'s.
std::string OnDriver(const std::string& node, double t, const std::string& driver) {
  std::string n = Node(node, t);
  const std::string from = "550.90.07";
  n.replace(n.find(from), from.size(), driver);
  return n;
}

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

// Two nodes on two drivers, and nothing yet says which is the job's own (no majority, no
// rank 0 seen): no node is named until a third one breaks the tie. Naming one of the two by
// the versions' sort order named the wrong node half the time, depending on which node's
// records reached a hub first.
TEST(CrossNodeRuleTest, ATieNamesNoNode) {
  std::vector<Finding> f =
      Diagnose(OnDriver("n1", 100, "550.90.07") + OnDriver("n2", 100, "535.54.03"));
  EXPECT_TRUE(f.empty()) << f[0].summary;
  f = Diagnose(OnDriver("n1", 100, "550.90.07") + OnDriver("n2", 100, "535.54.03") +
               OnDriver("n3", 400, "550.90.07"));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kVersionMismatch);
  EXPECT_EQ(f[0].node, "n2");
}

// findings.md: version_mismatch is "nodes of one job run different driver / CUDA / NCCL
// versions". A hub hears every node, and a fleet mid-upgrade runs two drivers on purpose: nodes
// that share no job are not compared. A job's nodes are those its job start records come from
// (trace-format.md: "A multi-node job sends start from every node it runs on").
TEST(CrossNodeRuleTest, OnlyTheNodesOfOneJobAreCompared) {
  auto start = [](const std::string& node, double t, const std::string& job) {
    return "{\"t\":" + std::to_string(t) + ",\"type\":\"job\",\"node\":\"" + node +
           "\",\"job\":\"" + job + "\",\"state\":\"start\"}\n";
  };
  // Job a on n1 and n2 (550), job b on n3 (535) and n4 (535): upgraded apart, each job whole.
  const std::string fleet = OnDriver("n1", 100, "550.90.07") + OnDriver("n2", 100, "550.90.07") +
                            OnDriver("n3", 100, "535.54.03") + OnDriver("n4", 100, "535.54.03") +
                            start("n1", 110, "a") + start("n2", 110, "a") + start("n3", 110, "b") +
                            start("n4", 110, "b");
  std::vector<Finding> f = Diagnose(fleet);
  EXPECT_TRUE(f.empty()) << f[0].summary;
  // Job c spans n1, n2 and n3: n3 is the one of its nodes apart, named once.
  f = Diagnose(fleet + start("n1", 120, "c") + start("n2", 120, "c") + start("n3", 120, "c"));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kVersionMismatch);
  EXPECT_EQ(f[0].node, "n3");
  // A recording that names no job (node records only) compares all its nodes as one.
  f = Diagnose(OnDriver("n1", 100, "550.90.07") + OnDriver("n2", 100, "550.90.07") +
               OnDriver("n3", 100, "550.90.07") + OnDriver("n4", 100, "535.54.03"));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].node, "n4");
}

}  // namespace
}  // namespace gpuwatch::analyze
