// NodeEventGate: which of a node's GPU events are kept (issue 19: node-event handling as a part
// of its own). NVML's event set and the kernel log report the same XID: one seen from the other
// source within 10 s of it is a duplicate, counted once. An event that repeats many times a
// second (XID 13 storms are common) is kept once a second per GPU, kind and code, the kept one
// saying how many were folded into it since the last kept.
// Pure state; not thread-safe (the agent calls it under its mutex).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "model/gpu.h"

namespace gpuwatch::server {

class NodeEventGate {
 public:
  static constexpr int64_t kXidDedupMs = 10000;
  static constexpr int64_t kStormWindowMs = 1000;
  static constexpr size_t kMaxXidKeys = 4096;  // (GPU, code) pairs remembered for dedup

  enum class Verdict {
    kDuplicate,  // the other source's report of an XID already counted: drop it
    kFolded,     // counted, not kept: within its storm window
    kKept,       // keep it (its text may now say how many were folded into it)
  };
  Verdict Admit(model::GpuEvent* e);
  uint64_t xid_duplicates() const { return xid_duplicates_; }

 private:
  struct Storm {
    int64_t last_kept_ms = 0;
    uint64_t folded = 0;
  };
  // (GPU, code) -> source -> time of the last XID from that source.
  std::map<std::pair<unsigned, uint64_t>, std::map<std::string, int64_t>> last_xid_by_source_;
  uint64_t xid_duplicates_ = 0;
  std::map<std::tuple<unsigned, int, uint64_t>, Storm> storms_;
};

}  // namespace gpuwatch::server
