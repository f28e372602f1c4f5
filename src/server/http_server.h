// HttpServer: the agent's HTTP endpoint — /metrics (Prometheus text), /api/v1/gpus,
// /api/v1/processes, /api/v1/capabilities, /api/v1/events, /api/v1/host, /healthz, and with a
// store: remote-write (/api/v1/write) and the Prometheus query API (query_api.h).
// A thin layer over cpp-httplib; the bodies come from exposition.h, api.h and query_api.h.
// Thread-safety: Start/Stop from one thread; requests are served on httplib's pool.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "query/engine.h"
#include "server/agent.h"
#include "server/listen_address.h"
#include "store/event_store.h"
#include "store/store.h"

namespace httplib {
class Server;
}

namespace gpuwatch::server {

class HttpServer {
 public:
  // `store` may be null: no history, no /api/v1/write, no query API.
  // `events` may be null: /api/v1/events then serves the agent's recent events from memory.
  HttpServer(const Agent* agent, store::Store* store = nullptr,
             store::EventStore* events = nullptr);
  ~HttpServer();
  // Binds (port 0 picks a free one) and serves on a background thread.
  Status Start(const ListenAddress& addr);
  void Stop();
  int port() const { return port_; }

 private:
  const Agent* agent_;
  store::Store* store_;
  store::EventStore* events_;
  query::EngineOptions query_options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listening_done_{false};
  std::atomic<size_t> metrics_size_hint_{64 * 1024};
  int port_ = 0;
};

}  // namespace gpuwatch::server
