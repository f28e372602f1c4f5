// Prometheus text exposition (format 0.0.4) of an AgentState. Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/agent_state.h"
#include "server/hub_push.h"

namespace gpuwatch::server {

// Escapes a label value per the exposition format (\\, \", \n).
std::string EscapeLabelValue(std::string_view v);
void RenderPrometheus(const AgentState& state, std::string* out);

// What the HTTP server, the query API and remote-write refused (docs/limits.md): counters the
// agent state does not hold, appended to /metrics by the HTTP layer.
struct LimitCounters {
  uint64_t http_requests = 0;
  uint64_t http_connections = 0;
  std::vector<std::pair<std::string_view, uint64_t>> http_refused;  // by reason
  // The certificate served (http::Server::EnableTls): its expiry, absent when unknown.
  bool tls = false;
  std::optional<int64_t> tls_not_after_s;
  uint64_t tls_reloads = 0, tls_reload_failures = 0;
  std::vector<std::pair<std::string_view, uint64_t>> queries_refused;  // by reason
  uint64_t remote_write_series = 0;
  uint64_t remote_write_refused_series_limit = 0;
  uint64_t remote_write_refused_out_of_bounds = 0;
  uint64_t remote_write_refused_too_large = 0;
  uint64_t remote_write_refused_forward_backlog = 0;
  // The store's health; absent without a store.
  bool has_store = false;
  uint64_t store_blocks = 0, store_block_bytes = 0, store_wal_bytes = 0, store_head_series = 0;
  uint64_t store_write_errors = 0, store_flush_errors = 0;
  // Pushes a hub told to come back later (429), remote-write and records together.
  uint64_t pushes_shed = 0;
  // The push to a hub (server/hub_push.h); absent without --hub.
  std::optional<HubPusher::Counters> push;
  // A hub's forward to --remote-write (the same sender, its own spool); absent without it.
  std::optional<HubPusher::Counters> forward;
  bool has_events = false;
  uint64_t events_bytes = 0, events_bulk_bytes = 0;
};
void RenderLimitCounters(std::string_view hostname, const LimitCounters& c, std::string* out);

}  // namespace gpuwatch::server
