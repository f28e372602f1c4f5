#include "server/node_events.h"

#include <gtest/gtest.h>

namespace gpuwatch::server {
namespace {

using Verdict = NodeEventGate::Verdict;

model::GpuEvent Xid(int64_t t_ms, uint64_t code, const char* source, unsigned gpu = 0) {
  model::GpuEvent e;
  e.time_ms = t_ms;
  e.kind = model::GpuEventKind::kXid;
  e.gpu_index = gpu;
  e.code = code;
  e.source = source;
  e.text = "Xid " + std::to_string(code);
  return e;
}

// NVML and the kernel log report one XID 79: the second report within 10 s is a duplicate;
// one 10 s later is a new error. Another GPU's, or another code's, is its own.
TEST(NodeEventGateTest, OneXidFromTwoSourcesIsOneError) {
  NodeEventGate g;
  auto a = Xid(1000, 79, "nvml");
  auto b = Xid(1400, 79, "kmsg");
  auto c = Xid(1500, 79, "kmsg", 1);
  auto d = Xid(1600, 48, "kmsg");
  EXPECT_EQ(g.Admit(&a), Verdict::kKept);
  EXPECT_EQ(g.Admit(&b), Verdict::kDuplicate);
  EXPECT_EQ(g.Admit(&c), Verdict::kKept);
  EXPECT_EQ(g.Admit(&d), Verdict::kKept);
  auto later = Xid(1000 + NodeEventGate::kXidDedupMs + 1, 79, "kmsg");
  EXPECT_EQ(g.Admit(&later), Verdict::kKept);
  EXPECT_EQ(g.xid_duplicates(), 1u);
}

// An XID 13 storm from one source: kept once a second, the next kept one says how many were
// folded into it and over how long.
TEST(NodeEventGateTest, AStormIsKeptOnceASecondWithItsCount) {
  NodeEventGate g;
  auto first = Xid(10'000, 13, "nvml");
  EXPECT_EQ(g.Admit(&first), Verdict::kKept);
  EXPECT_EQ(first.text, "Xid 13");
  for (int i = 1; i <= 9; ++i) {
    auto e = Xid(10'000 + i * 100, 13, "nvml");
    EXPECT_EQ(g.Admit(&e), Verdict::kFolded) << i;
  }
  auto next = Xid(11'000, 13, "nvml");
  EXPECT_EQ(g.Admit(&next), Verdict::kKept);
  EXPECT_EQ(next.text, "Xid 13 (9 more like it in the 1000 ms before)");
  auto quiet = Xid(12'500, 13, "nvml");
  EXPECT_EQ(g.Admit(&quiet), Verdict::kKept);
  EXPECT_EQ(quiet.text, "Xid 13");
  EXPECT_EQ(g.xid_duplicates(), 0u);
}

}  // namespace
}  // namespace gpuwatch::server
