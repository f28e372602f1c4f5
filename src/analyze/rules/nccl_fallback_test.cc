// NCCL fallbacks from a job's NCCL lines against its node's topology.
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

TEST(NcclFallbackRuleTest, NvlinkFallbackFromTheJobsNcclLog) {
  std::string trace = Node("n1", 100);
  trace += R"({"t":110,"type":"job","node":"n1","job":"j1","state":"start","ranks":2,"gpus":[0,1]})"
           "\n";
  trace +=
      R"({"t":112,"type":"log","node":"n1","job":"j1","rank":0,"source":"nccl","line":"n1:100:100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct"})"
      "\n";
  trace +=
      R"({"t":112.5,"type":"log","node":"n1","job":"j1","rank":1,"source":"nccl","line":"n1:101:101 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct"})"
      "\n";
  trace +=
      R"({"t":113,"type":"log","node":"n1","job":"j1","rank":0,"source":"nccl","line":"n1:100:100 [0] NCCL INFO Connected all rings"})"
      "\n";
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kNvlinkFallback);
  EXPECT_EQ(f[0].node, "n1");
  EXPECT_FALSE(f[0].gpu.has_value());
  EXPECT_DOUBLE_EQ(f[0].first_seen, 112);
}

}  // namespace
}  // namespace gpuwatch::analyze
