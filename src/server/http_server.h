// HttpServer: the agent's HTTP endpoint — /metrics (Prometheus text), /api/v1/gpus,
// /api/v1/processes, /api/v1/capabilities, /api/v1/events, /api/v1/host, /healthz, and with a
// store: remote-write (/api/v1/write) and the Prometheus query API (query_api.h).
// Routes over http::Server (src/http/server.h), which bounds every connection, head, body and
// worker; the bodies come from exposition.h, api.h and query_api.h. Limits: docs/limits.md.
// Thread-safety: Start/Stop from one thread; requests are served on the server's workers.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/status.h"
#include "http/server.h"
#include "query/engine.h"
#include "server/agent.h"
#include "server/auth.h"
#include "server/exposition.h"
#include "server/listen_address.h"
#include "server/remote_write_handler.h"
#include "server/scope.h"
#include "store/event_store.h"
#include "store/store.h"

namespace gpuwatch::server {

struct HttpOptions {
  http::ServerLimits limits;
  // Per-route body limits (the server's default, 1 MiB, serves the rest).
  size_t max_write_body_bytes = 32 << 20;  // a remote-write request, snappy-compressed
  // A query's deadline (Prometheus: --query.timeout, default 2 min; ours is shorter because a
  // node's agent shares its 2 cores with the job) and how many run at once.
  std::chrono::milliseconds query_timeout = std::chrono::seconds(30);
  size_t max_concurrent_queries = 4;
  query::EngineOptions query;
  AuthConfig auth;  // who may change state (server/auth.h)
  // Reverse proxies whose X-Forwarded-For names the client (http/forwarded.h).
  std::vector<http::AddressBlock> trusted_proxies;
  // Both set: serve HTTPS with this certificate chain and key (PEM).
  std::string tls_cert_file, tls_key_file;
  RemoteWriteOptions remote_write;
  // Pushes (remote-write, records) being handled at once beyond which the next is told 429
  // with Retry-After: a hub that falls behind sheds load instead of queueing every worker.
  size_t max_pending_pushes = 8;
  // Where the query API and panels read (--read-from: a Prometheus-API cluster,
  // server/prom_querier.h); null reads the embedded store. Outlives the server.
  const store::Querier* read_from = nullptr;
};

class HttpServer {
 public:
  // `store` may be null: no history, no /api/v1/write, no query API.
  // `events` may be null: /api/v1/events then serves the agent's recent events from memory.
  HttpServer(const Agent* agent, store::Store* store = nullptr, store::EventStore* events = nullptr,
             HttpOptions options = {});
  ~HttpServer();
  // Binds (port 0 picks a free one) and serves on a background thread.
  Status Start(const ListenAddress& addr);
  void Stop();
  int port() const { return server_.port(); }
  http::ServerStats Stats() const { return server_.Stats(); }
  RemoteWriteGate::Counts RemoteWriteCounts() const { return remote_write_.counts(); }

 private:
  void AddRoutes();
  void AddQueryRoutes();
  // The jobs a request confined to projects may see (server/scope.h).
  std::set<std::string> ScopeJobs(const http::Request& req) const;
  // The querier a scoped token's queries read through: its jobs' series and its GPUs'.
  void EmplaceScoped(const http::Request& req, std::optional<ScopedQuerier>* out) const;
  const Agent* agent_;
  store::Store* store_;
  store::EventStore* events_;
  HttpOptions options_;
  http::Server server_;
  std::atomic<size_t> metrics_size_hint_{64 * 1024};
  std::atomic<size_t> queries_running_{0};
  // Queries refused or stopped, by reason: concurrency, timeout, cancelled, limit.
  std::atomic<uint64_t> queries_refused_[4] = {};
  LimitCounters Counters() const;
  RemoteWriteGate remote_write_;
  std::atomic<size_t> pushes_pending_{0};
  std::atomic<uint64_t> pushes_shed_{0};
  // A push being handled; the slot is given back when it goes.
  class PushSlot {
   public:
    explicit PushSlot(std::atomic<size_t>& n) : n_(n) {}
    ~PushSlot() { n_.fetch_sub(1); }
    PushSlot(const PushSlot&) = delete;
    PushSlot& operator=(const PushSlot&) = delete;

   private:
    std::atomic<size_t>& n_;
  };
  // Takes a push slot, or answers 429 and returns none.
  std::optional<PushSlot> AdmitPush(http::Response& res);
  void AddHubRoutes();
  void AddTokenRoutes();
  // The storage reads go to: --read-from's querier, else the embedded store.
  const store::Querier& Reader() const {
    return options_.read_from ? *options_.read_from : *store_;
  }
};

}  // namespace gpuwatch::server
