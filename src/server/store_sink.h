// What the agent keeps of its own collection in the store (R20): every per-GPU scalar of the
// metric catalog, GPU up/down and XID counts, link rates, and the host basics, as store inputs with the
// same names and labels as /metrics. Built from the state once per hardware tick. Pure
// function; thread-safe.
#pragma once

#include <vector>

#include "server/agent_state.h"
#include "store/head.h"

namespace gpuwatch::server {

// Samples of the newest GPU tick (stamped with its time) and of the newest host tick, if that
// tick is newer than `host_after_ms` (so a 5 s host tier is stored once, not five times).
std::vector<store::Head::Input> SeriesForStore(const AgentState& s, int64_t host_after_ms);

}  // namespace gpuwatch::server
