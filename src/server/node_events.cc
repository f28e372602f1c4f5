#include "server/node_events.h"

#include <fmt/format.h>

#include <cstdlib>

namespace gpuwatch::server {

NodeEventGate::Verdict NodeEventGate::Admit(model::GpuEvent* e) {
  if (e->kind == model::GpuEventKind::kXid) {
    auto& last = last_xid_by_source_[{e->gpu_index, e->code}];
    for (const auto& [source, t] : last) {
      if (source != e->source && std::abs(t - e->time_ms) <= kXidDedupMs) {
        ++xid_duplicates_;
        return Verdict::kDuplicate;
      }
    }
    last[e->source] = e->time_ms;
    if (last_xid_by_source_.size() > kMaxXidKeys)
      last_xid_by_source_.erase(last_xid_by_source_.begin());
  }
  Storm& storm = storms_[{e->gpu_index, static_cast<int>(e->kind), e->code}];
  if (storm.last_kept_ms != 0 && e->time_ms - storm.last_kept_ms < kStormWindowMs) {
    ++storm.folded;
    return Verdict::kFolded;
  }
  if (storm.folded > 0) {
    e->text += fmt::format(" ({} more like it in the {} ms before)", storm.folded,
                           e->time_ms - storm.last_kept_ms);
    storm.folded = 0;
  }
  storm.last_kept_ms = e->time_ms;
  return Verdict::kKept;
}

}  // namespace gpuwatch::server
