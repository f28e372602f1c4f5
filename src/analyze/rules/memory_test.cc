// memory_leak.
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

TEST(MemoryRuleTest, MemoryLeakGrowsAndNeverFallsBack) {
  auto run = [](bool leak, bool freed_at_checkpoint) {
    std::string trace = Node("n1", 100);
    // memory_total_mib for the node's GPUs.
    const std::string gpus = "\"gpus\":[{\"index\":0,";
    trace.replace(trace.find(gpus), gpus.size(), gpus + "\"memory_total_mib\":46068,");
    trace += R"({"t":100,"type":"job","node":"n1","job":"j1","state":"start","gpus":[0]})"
             "\n";
    double mem = 20000;
    for (int i = 0; i < 900; ++i) {
      const double t = 101 + i;
      // Warm-up ramp in the first minute, then a plateau; a leak adds 1 GiB every 30 s from
      // t = 400.
      if (i < 60) mem = 20000 + i * 100;
      if (leak && t >= 400 && i % 30 == 0) mem += 1024;
      if (freed_at_checkpoint && i % 120 == 0 && t > 400) mem = 26000;
      trace += Gpu(t, 0, "\"util_pct\":90,\"mem_used_mib\":" + std::to_string(mem));
    }
    return Diagnose(trace);
  };
  EXPECT_TRUE(run(false, false).empty());
  EXPECT_TRUE(run(true, true).empty());  // a cache that is emptied at checkpoints is no leak
  const std::vector<Finding> f = run(true, false);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kMemoryLeak);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_FALSE(f[0].gpu.has_value());
  EXPECT_GE(f[0].first_seen, 400);
  EXPECT_LE(f[0].first_seen, 400 + 120);
  EXPECT_NE(f[0].summary.find("runs out in"), std::string::npos);
}

// What healthy jobs do with memory (docs/research/failure-shapes.md §2): PyTorch's caching
// allocator emptied at a checkpoint (torch.cuda.empty_cache) is refilled by the next steps to
// where it was, and a cache warming up grows fast, then slower and slower. Neither is a leak.
TEST(MemoryRuleTest, ACacheRefilledToItsLevelOrFillingSlowerAndSlowerIsNoLeak) {
  auto trace_of = [](auto mem_at) {
    std::string trace = Node("n1", 100);
    const std::string gpus = "\"gpus\":[{\"index\":0,";
    trace.replace(trace.find(gpus), gpus.size(), gpus + "\"memory_total_mib\":81559,");
    trace += R"({"t":100,"type":"job","node":"n1","job":"j1","state":"start","gpus":[0]})"
             "\n";
    for (int i = 0; i < 900; ++i) {
      trace += Gpu(101 + i, 0, "\"util_pct\":90,\"mem_used_mib\":" + std::to_string(mem_at(i)));
    }
    return trace;
  };
  // Emptied to 40 GiB at 400 s, refilled in 2 GiB steps every 20 s back to its 60 GiB.
  EXPECT_TRUE(Diagnose(trace_of([](int i) {
                if (i < 300) return 61440.0;
                return std::min(61440.0, 40960.0 + 2048.0 * ((i - 300) / 20));
              })).empty());
  // Growing toward a plateau from 200 s: 30 → 50 GiB with a 90 s time constant (a cache fills
  // in minutes; one that takes longer than about a window to fill is seen as a leak).
  EXPECT_TRUE(Diagnose(trace_of([](int i) {
                return i < 200 ? 30720.0 : 30720.0 + 20480.0 * (1 - std::exp(-(i - 200) / 90.0));
              })).empty());
}

}  // namespace
}  // namespace gpuwatch::analyze
