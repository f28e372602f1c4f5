// Events in and out of the event store: the agent's GPU events as store records, and
// GET /api/v1/events served from the store with filters — transport-agnostic, like
// query_api.h. Thread-safe (no state; the EventStore is thread-safe).
//
// Parameters (all optional): start, end (Unix seconds or RFC 3339; default the last 24 h up to
// now), node, gpu (UUID), job, kind (repeatable or comma-separated), contains (a substring of
// the text), limit (default 1000, at most 100000; the newest are kept). Events come back oldest
// first, each as {"time_ms", "kind", "severity", "node", "uuid", "job", "text", …} plus the
// record's extra fields (gpu index, pci_bus_id, xid, source for GPU events).
#pragma once

#include <string>
#include <string_view>

#include "model/gpu.h"
#include "server/query_api.h"
#include "store/event_store.h"

namespace gpuwatch::server {

store::EventRecord ToEventRecord(const model::GpuEvent& e, const std::string& node);

ApiResponse HandleEventsQuery(const store::EventStore& events, const ApiRequest& request,
                              const std::string& hostname);

// POST /api/v1/events: annotations, job lifecycle, alerts and log lines from other programs (a
// job's launcher, the alert manager, an operator). The body is a JSON array (or one object) of
// {"time_ms" or "time" (Unix seconds), "kind", "severity", "node", "gpu", "job", "text",
// "fields": {…}}; "time" defaults to now and "node" to this host. All or nothing: 204 when
// every event was stored, 400 naming the first bad event and field, 500 when the store could
// not write. At most kMaxPostedEvents per request.
inline constexpr size_t kMaxPostedEvents = 10000;
ApiResponse HandleEventsPost(store::EventStore* events, std::string_view body, int64_t now_ms,
                             const std::string& hostname);

}  // namespace gpuwatch::server
