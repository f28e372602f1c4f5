// An HTTP/1.1 server with every resource bounded, for the agent's (and later the hub's) API.
//
// Why not cpp-httplib (which the clients still use): its server gives a slow client a worker
// thread for as long as it trickles bytes, checks the body limit only against Content-Length
// (a chunked body is buffered without end), has no limit on the number of header fields, binds
// with SO_REUSEPORT (a second agent silently shares the port), and cannot tell a handler that
// its client has gone. Each of those was a denial of service against the agent (issue 17).
//
// Shape: one I/O thread runs an epoll loop over non-blocking sockets. It reads and parses
// requests (request_parser.h) under deadlines for the head, the body and keep-alive idleness,
// and hands only *complete* requests to a fixed pool of workers through a bounded queue; a
// full queue is answered 503 with Retry-After. Responses are written back by the loop, so a
// client that reads slowly holds a buffer, never a thread. When a client closes its side while
// its request runs, or the server stops, the request's cancellation flag is set; long handlers
// (queries) poll it. Every refusal is counted by reason for /metrics.
//
// TLS (EnableTls): the same loop over the system's OpenSSL, non-blocking. A connection first
// completes its handshake (held to the head deadline: a client that stalls it is a slow head),
// then reads and writes through its SSL; a connection refused at accept is closed without a
// word (a plain-text 503 means nothing to a TLS client); a handshake that fails is counted
// (reason tls_handshake). TLS 1.2 at least, no renegotiation.
//
// Thread-safety: Route/SetAuthorizer/EnableTls before Start; Start/Stop from one thread;
// handlers run concurrently on the workers (and inline routes on the I/O thread) and must be
// thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "http/forwarded.h"
#include "http/request_parser.h"

namespace gpuwatch::http {

using namespace std::chrono_literals;

// What the server refused, by reason: the `reason` label of
// gpuwatch_http_refused_total (docs/limits.md).
enum class Refusal {
  kBadRequest,          // malformed request (400, 501, 505, 417)
  kHeadTooLarge,        // request head or header count over the limit (431)
  kBodyTooLarge,        // body over the route's limit, chunked or not (413)
  kHeadTimeout,         // the head did not arrive within header_timeout
  kBodyTimeout,         // the body did not arrive within body_timeout
  kWriteTimeout,        // the client did not read the response within write_timeout
  kTooManyConnections,  // max_connections open
  kTooManyPerSource,    // max_connections_per_source open from one address
  kQueueFull,           // every worker busy and max_queued requests waiting (503)
  kBodyBudget,          // all bodies being received together over max_buffered_body_bytes (503)
  kUnauthorized,        // the authorizer refused (401/403)
  kTlsHandshake,        // a TLS handshake failed (not TLS, no shared cipher, bad certificate)
  kCount,
};
std::string_view RefusalName(Refusal r);

struct ServerLimits {
  HeadLimits head;                                 // 256 KiB of head, 100 header fields
  size_t max_body_bytes = 1 << 20;                 // a route's default (RouteOptions can raise it)
  size_t max_buffered_body_bytes = 256 << 20;      // all bodies in memory, received or queued
  std::chrono::milliseconds header_timeout = 10s;  // first byte of a request → end of its head
  std::chrono::milliseconds body_timeout = 60s;    // end of head → end of body
  std::chrono::milliseconds idle_timeout = 60s;    // keep-alive wait for the next request
  std::chrono::milliseconds write_timeout = 60s;   // a response must drain within this
  size_t max_connections = 1024;
  size_t max_connections_per_source = 64;
  size_t workers = 8;
  size_t max_queued = 64;  // complete requests waiting for a worker
  int listen_backlog = 128;
};

// Who a route lets in; the authorizer decides what each level needs (server/auth.h). kPublic
// routes are never asked for a token (/healthz, the dashboard's static files, which hold no
// data).
enum class Access { kPublic, kRead, kWrite, kAdmin };

struct Request {
  std::string method;  // "HEAD" is served by GET routes
  std::string target;  // as sent
  std::string path;    // decoded, without the query
  Headers headers;
  // Query-string parameters, then form fields when the route parses forms; in order.
  std::vector<std::pair<std::string, std::string>> params;
  std::string body;
  std::vector<std::string> matches;  // the route pattern's groups; [0] is the whole path
  std::string remote_address;        // the client: the peer, or who a trusted proxy says it is
  std::string principal;             // who the authorizer said this is ("" for anonymous reads)
  // The projects the principal is confined to (server/scope.h); empty: not confined.
  std::vector<std::string> scope;
  std::shared_ptr<const std::atomic<bool>> cancelled;  // set when the client left or on Stop

  bool HasParam(std::string_view name) const;
  std::string Param(std::string_view name) const;  // the first value, or ""
  std::string Header(std::string_view name) const { return headers.Value(name); }
  bool IsCancelled() const { return cancelled && cancelled->load(std::memory_order_relaxed); }
};

struct Response {
  int status = 200;
  std::string body;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  void Set(std::string b, std::string type) {
    body = std::move(b);
    content_type = std::move(type);
  }
  void SetHeader(std::string name, std::string value);
};

using Handler = std::function<void(const Request&, Response&)>;

struct RouteOptions {
  Access access = Access::kRead;
  size_t max_body_bytes = 0;  // 0: ServerLimits::max_body_bytes
  bool parse_form = false;    // application/x-www-form-urlencoded bodies add to params
  // Runs on the I/O thread: for cheap answers that must work when every worker is busy
  // (/healthz). Must not block.
  bool inline_handler = false;
  // A request the authorizer confined to projects (Request::scope) may reach this route: its
  // handler narrows what it shows to them, or it only takes data in. Everything else is refused
  // such a request, so a route added later shows nothing to a confined token by default.
  bool allow_scoped = false;
};

// Called with the request's head (no body yet) before the body is read, on the I/O thread.
// Returns nullopt to let it through, having set the request's `principal` and `scope`; or the
// response that refuses it (401/403/429).
using Authorizer = std::function<std::optional<Response>(Request&, const RouteOptions&)>;

struct ServerStats {
  std::array<uint64_t, static_cast<size_t>(Refusal::kCount)> refused{};
  // The certificate served now: its notAfter (Unix seconds; 0 without TLS), and how many times
  // changed files were loaded or refused (EnableTls).
  int64_t tls_not_after_s = 0;
  uint64_t tls_reloads = 0, tls_reload_failures = 0;
  uint64_t requests = 0;
  uint64_t connections_open = 0;
  uint64_t requests_queued = 0;
  uint64_t body_bytes_buffered = 0;
};

class Server {
 public:
  explicit Server(ServerLimits limits = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // `pattern` is matched against the whole decoded path: literally, or as an ECMAScript regex
  // when it contains one of "([\\". GET routes also answer HEAD.
  void Route(std::string method, std::string pattern, Handler handler, RouteOptions options = {});
  void SetAuthorizer(Authorizer authorizer) { authorizer_ = std::move(authorizer); }
  // Reverse proxies whose X-Forwarded-For names the client (http/forwarded.h): a request from
  // one gets that client as its remote_address, and their connections are not held to
  // max_connections_per_source (every client behind them shares their address).
  void SetTrustedProxies(std::vector<AddressBlock> proxies) {
    trusted_proxies_ = std::move(proxies);
  }

  // Serves HTTPS: the certificate chain (PEM, the server's certificate first) and its private
  // key (PEM, unencrypted). An error names the file and what OpenSSL said of it.
  //
  // The two files are watched: when either changes (its inode, size or mtime: a renewal by
  // certbot or cert-manager, a Kubernetes secret's symlink swap), the next connection accepted
  // at least a second after the last look loads them again, and new connections get the new
  // certificate; open ones keep theirs. A pair that does not load (the key not yet written
  // beside the new certificate) is logged and the previous one kept until the files change
  // again. No restart and no signal: a hub's agents would otherwise queue behind it.
  Status EnableTls(const std::string& cert_chain_file, const std::string& key_file);
  bool tls() const { return tls_enabled_; }

  // Binds host:port (port 0 picks a free one) exclusively: no SO_REUSEPORT, so a second server
  // on the same address fails with "address in use". Then serves on background threads.
  Status Start(const std::string& host, int port);
  // Stops accepting, cancels running requests, drops queued ones, waits for the workers.
  void Stop();
  int port() const { return port_; }
  ServerStats Stats() const;

 private:
  struct RouteEntry {
    std::string method;
    std::string literal;
    std::optional<std::regex> regex;
    Handler handler;
    RouteOptions options;
  };
  struct Conn;
  struct TlsContext;
  struct Job {
    uint64_t conn_id;
    std::shared_ptr<Request> request;
    const RouteEntry* route;
    size_t body_bytes;
  };
  struct Done {
    uint64_t conn_id;
    Response response;
    size_t body_bytes;
  };

  void Loop();
  void Worker();
  void Accept();
  // Loads the certificate and key again if either file changed (EnableTls). Loop thread only.
  void MaybeReloadTls();
  static Result<std::unique_ptr<TlsContext>> LoadTls(const std::string& cert_chain_file,
                                                     const std::string& key_file);
  void OnReadable(Conn& c);
  void OnWritable(Conn& c);
  void Handshake(Conn& c);
  // Reads the connections whose SSL holds decrypted bytes the socket no longer signals; whether
  // some still hold more.
  bool ReadTlsPending();
  void Process(Conn& c);
  bool StartRequest(Conn& c, size_t head_end);
  bool ReadBody(Conn& c);
  void Dispatch(Conn& c);
  void Finish(Conn& c, Response r, bool close);
  void Refuse(Conn& c, Refusal why, int status, std::string message);
  void Close(uint64_t id);
  void SetInterest(Conn& c, uint32_t events);
  void DrainDone();
  void Sweep();
  void Count(Refusal r) {
    refused_[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  }
  const RouteEntry* Match(const Request& r, bool* path_known, std::string* allow) const;
  void RunHandler(const RouteEntry& route, const Request& req, Response& res) const;

  ServerLimits limits_;
  std::vector<RouteEntry> routes_;
  Authorizer authorizer_;
  std::vector<AddressBlock> trusted_proxies_;
  std::unique_ptr<TlsContext> tls_;  // the loop thread's, once Start has run
  bool tls_enabled_ = false;
  std::string tls_cert_file_, tls_key_file_;
  std::string tls_stamp_;  // the files' identity, size and mtime when last loaded or tried
  std::chrono::steady_clock::time_point tls_next_look_{};
  std::atomic<int64_t> tls_not_after_s_{0};
  std::atomic<uint64_t> tls_reloads_{0}, tls_reload_failures_{0};
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: completions and stop
  int port_ = 0;
  std::thread loop_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stopping_{false};

  // I/O-thread state.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::unordered_map<std::string, size_t> per_source_;
  uint64_t next_id_ = 1;

  // Shared with the workers.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::vector<Done> done_;
  std::atomic<size_t> body_bytes_{0};

  std::array<std::atomic<uint64_t>, static_cast<size_t>(Refusal::kCount)> refused_{};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> open_{0};
};

}  // namespace gpuwatch::http
