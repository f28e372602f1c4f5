#include "http/server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>

#include "common/log.h"
#include "common/time_base.h"

namespace gpuwatch::http {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kListenKey = 0;
constexpr uint64_t kWakeKey = ~uint64_t{0};
// Bytes read per readiness event before other connections get their turn.
constexpr size_t kReadSliceBytes = 256 * 1024;
// After an error response the rest of a request body is read and thrown away for a moment, so
// the client sees the response instead of a reset (closing with unread data sends RST).
constexpr size_t kMaxDrainBytes = 4 << 20;
constexpr auto kDrainTime = 2s;
// libstdc++'s std::regex recurses per character; no route path is long, so long paths never
// reach a regex.
constexpr size_t kMaxRegexPathBytes = 4096;

std::string_view Reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 206:
      return "Partial Content";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string Serialize(const Response& r, bool head_only, bool close) {
  std::string s;
  s.reserve(256 + (head_only ? 0 : r.body.size()));
  s += "HTTP/1.1 ";
  s += std::to_string(r.status);
  s += ' ';
  s += Reason(r.status);
  s += "\r\n";
  const bool no_body = r.status == 204 || r.status == 304 || r.status < 200;
  if (!r.content_type.empty() && !no_body) s += "Content-Type: " + r.content_type + "\r\n";
  if (!no_body) s += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  for (const auto& [k, v] : r.headers) s += k + ": " + v + "\r\n";
  if (close) s += "Connection: close\r\n";
  s += "\r\n";
  if (!head_only && !no_body) s += r.body;
  return s;
}

std::string PeerAddress(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof(buf));
  } else if (ss.ss_family == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
      ::inet_ntop(AF_INET, a6.s6_addr + 12, buf, sizeof(buf));  // one client, one address
    } else {
      ::inet_ntop(AF_INET6, &a6, buf, sizeof(buf));
    }
  }
  return buf;
}

// A canned answer for connections refused at accept: best effort, never blocks.
void SendAndClose(int fd, std::string_view status_line, std::string_view message) {
  std::string s = "HTTP/1.1 ";
  s += status_line;
  s += "\r\nContent-Type: text/plain\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: ";
  s += std::to_string(message.size());
  s += "\r\n\r\n";
  s += message;
  [[maybe_unused]] ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(fd);
}

}  // namespace

std::string_view RefusalName(Refusal r) {
  switch (r) {
    case Refusal::kBadRequest:
      return "bad_request";
    case Refusal::kHeadTooLarge:
      return "head_too_large";
    case Refusal::kBodyTooLarge:
      return "body_too_large";
    case Refusal::kHeadTimeout:
      return "head_timeout";
    case Refusal::kBodyTimeout:
      return "body_timeout";
    case Refusal::kWriteTimeout:
      return "write_timeout";
    case Refusal::kTooManyConnections:
      return "too_many_connections";
    case Refusal::kTooManyPerSource:
      return "too_many_per_source";
    case Refusal::kQueueFull:
      return "queue_full";
    case Refusal::kTlsHandshake:
      return "tls_handshake";
    case Refusal::kBodyBudget:
      return "body_budget";
    case Refusal::kUnauthorized:
      return "unauthorized";
    case Refusal::kCount:
      break;
  }
  return "unknown";
}

bool Request::HasParam(std::string_view name) const {
  return std::any_of(params.begin(), params.end(), [&](const auto& p) { return p.first == name; });
}

std::string Request::Param(std::string_view name) const {
  for (const auto& [k, v] : params)
    if (k == name) return v;
  return "";
}

void Response::SetHeader(std::string name, std::string value) {
  for (auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, name)) {
      v = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::move(name), std::move(value));
}

struct Server::Conn {
  enum class Phase { kIdle, kHead, kBody, kRunning, kWriting, kDraining };
  ~Conn() {
    if (ssl != nullptr) SSL_free(ssl);
  }
  uint64_t id = 0;
  int fd = -1;
  SSL* ssl = nullptr;      // with TLS
  bool handshake = false;  // its TLS handshake is not done yet
  // A TLS read that must write first, or a write that must read first (a TLS 1.3 key update):
  // the other readiness resumes it.
  bool read_wants_write = false, write_wants_read = false;
  std::string source;
  Phase phase = Phase::kIdle;
  Clock::time_point deadline;
  std::string in;
  size_t scanned = 0;
  std::shared_ptr<Request> req;
  const RouteEntry* route = nullptr;
  std::optional<ChunkedDecoder> chunked;
  uint64_t body_left = 0;
  size_t body_reserved = 0;  // counted in body_bytes_ while this connection reads the body
  bool head_only = false;
  bool keep_alive = true;
  bool peer_eof = false;
  bool dead = false;
  std::string out;
  size_t out_off = 0;
  bool close_after = false;
  size_t drained = 0;
  uint32_t events = 0;
  bool registered = false;
  bool processing = false;  // inside Process: OnWritable must not re-enter it
  uint64_t served = 0;      // responses started on this connection
  std::shared_ptr<std::atomic<bool>> cancel;
};

// An SSL made from the context holds a reference to it (SSL_new), so a context replaced by a
// reload is freed here while its connections go on with it.
struct Server::TlsContext {
  ~TlsContext() { SSL_CTX_free(ctx); }
  SSL_CTX* ctx = nullptr;
  int64_t not_after_s = 0;  // the certificate's
};

namespace {

// OpenSSL's last error as text ("" when none), the queue cleared.
std::string OpenSslError() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

// One read or write on a connection, plain or through its SSL.
enum class Io { kDone, kEof, kAgain, kError };
struct IoResult {
  Io io;
  size_t n = 0;
  bool want_write = false;  // kAgain: the SSL needs the socket writable (else readable)
};

IoResult TlsResult(SSL* ssl, int ret, size_t n) {
  if (ret == 1) return {Io::kDone, n};
  switch (SSL_get_error(ssl, ret)) {
    case SSL_ERROR_WANT_READ:
      return {Io::kAgain};
    case SSL_ERROR_WANT_WRITE:
      return {Io::kAgain, 0, true};
    case SSL_ERROR_ZERO_RETURN:  // close_notify, or (SSL_OP_IGNORE_UNEXPECTED_EOF) a bare EOF
      return {Io::kEof};
    default:
      ERR_clear_error();
      return {Io::kError};
  }
}

IoResult ReadSome(int fd, SSL* ssl, char* buf, size_t cap) {
  if (ssl != nullptr) {
    ERR_clear_error();
    size_t n = 0;
    const int ret = SSL_read_ex(ssl, buf, cap, &n);
    return TlsResult(ssl, ret, n);
  }
  for (;;) {
    const ssize_t n = ::recv(fd, buf, cap, 0);
    if (n > 0) return {Io::kDone, static_cast<size_t>(n)};
    if (n == 0) return {Io::kEof};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {Io::kAgain};
    return {Io::kError};
  }
}

IoResult WriteSome(int fd, SSL* ssl, const char* data, size_t len) {
  if (ssl != nullptr) {
    ERR_clear_error();
    size_t n = 0;
    const int ret = SSL_write_ex(ssl, data, len, &n);
    return TlsResult(ssl, ret, n);
  }
  for (;;) {
    const ssize_t n = ::send(fd, data, len, MSG_NOSIGNAL);
    if (n >= 0) return {Io::kDone, static_cast<size_t>(n)};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {Io::kAgain, 0, true};
    return {Io::kError};
  }
}

}  // namespace

Server::Server(ServerLimits limits) : limits_(std::move(limits)) {}

namespace {

// What tells a changed file from the one loaded: its identity (a symlink swap or a rename
// makes a new inode), size and mtime, through symlinks. "-" when it cannot be read now.
std::string FileStamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "-";
  return fmt::format("{}:{}:{}:{}.{}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                     st.st_mtim.tv_nsec);
}

// The certificate's notAfter as Unix seconds (0 when it cannot be read).
int64_t NotAfterSeconds(SSL_CTX* ctx) {
  X509* cert = SSL_CTX_get0_certificate(ctx);
  if (cert == nullptr) return 0;
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

// Served anyway (refusing to start would take the fleet's ingest down with it), but said.
void WarnIfExpired(const std::string& cert_file, int64_t not_after_s) {
  if (not_after_s > 0 && not_after_s < static_cast<int64_t>(::time(nullptr)))
    GW_LOG_WARN("TLS: the certificate {} expired at {}; clients that verify it will refuse",
                cert_file, FormatUtc(not_after_s * 1000));
}

}  // namespace

Result<std::unique_ptr<Server::TlsContext>> Server::LoadTls(const std::string& cert_chain_file,
                                                            const std::string& key_file) {
  auto t = std::make_unique<TlsContext>();
  ERR_clear_error();
  t->ctx = SSL_CTX_new(TLS_server_method());
  if (t->ctx == nullptr) return Status::Internal("TLS: cannot make a context: " + OpenSslError());
  SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
  // No renegotiation (a client-driven CPU cost, and a read that would need to write); a client
  // that closes without close_notify is an ordinary end of stream, as on plain TCP.
  SSL_CTX_set_options(t->ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF |
                                  SSL_OP_CIPHER_SERVER_PREFERENCE);
  // A write retried after WANT_WRITE passes the rest of the same buffer, from a new offset.
  SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(t->ctx, cert_chain_file.c_str()) != 1)
    return Status::InvalidArgument("TLS certificate " + cert_chain_file + ": " + OpenSslError());
  if (SSL_CTX_use_PrivateKey_file(t->ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return Status::InvalidArgument("TLS key " + key_file + ": " + OpenSslError());
  if (SSL_CTX_check_private_key(t->ctx) != 1) {
    return Status::InvalidArgument("TLS key " + key_file + " does not match the certificate " +
                                   cert_chain_file + ": " + OpenSslError());
  }
  t->not_after_s = NotAfterSeconds(t->ctx);
  return t;
}

Status Server::EnableTls(const std::string& cert_chain_file, const std::string& key_file) {
  // OpenSSL writes to the socket with write(), not send(MSG_NOSIGNAL): a client that resets
  // the connection mid-response would raise SIGPIPE, which kills a process that has not ignored
  // it (the agent and the hub do; any other user of the server is covered here).
  ::signal(SIGPIPE, SIG_IGN);
  // Stamped before the load: a change while loading is loaded again later.
  std::string stamp = FileStamp(cert_chain_file) + " " + FileStamp(key_file);
  auto t = LoadTls(cert_chain_file, key_file);
  if (!t.ok()) return t.status();
  tls_ = std::move(t).value();
  tls_not_after_s_ = tls_->not_after_s;
  WarnIfExpired(cert_chain_file, tls_->not_after_s);
  tls_enabled_ = true;
  tls_cert_file_ = cert_chain_file;
  tls_key_file_ = key_file;
  tls_stamp_ = std::move(stamp);
  return Status::Ok();
}

void Server::MaybeReloadTls() {
  const auto now = Clock::now();
  if (!tls_ || now < tls_next_look_) return;
  tls_next_look_ = now + std::chrono::seconds(1);
  std::string stamp = FileStamp(tls_cert_file_) + " " + FileStamp(tls_key_file_);
  if (stamp == tls_stamp_) return;
  tls_stamp_ = std::move(stamp);
  auto t = LoadTls(tls_cert_file_, tls_key_file_);
  if (!t.ok()) {
    tls_reload_failures_.fetch_add(1);
    GW_LOG_WARN(
        "TLS: the certificate or key changed but cannot be used ({}); still serving the "
        "previous certificate",
        t.status().message());
    return;
  }
  tls_ = std::move(t).value();
  tls_not_after_s_ = tls_->not_after_s;
  tls_reloads_.fetch_add(1);
  WarnIfExpired(tls_cert_file_, tls_->not_after_s);
  GW_LOG_INFO("TLS: loaded the changed certificate {} ({}); new connections get it", tls_cert_file_,
              tls_->not_after_s > 0 ? "valid until " + FormatUtc(tls_->not_after_s * 1000)
                                    : "its expiry unreadable");
}

Server::~Server() {
  Stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Server::Route(std::string method, std::string pattern, Handler handler, RouteOptions options) {
  RouteEntry e;
  e.method = std::move(method);
  if (pattern.find_first_of("([\\") != std::string::npos) {
    e.regex.emplace(pattern, std::regex::ECMAScript | std::regex::optimize);
  }
  e.literal = std::move(pattern);
  e.handler = std::move(handler);
  e.options = options;
  routes_.push_back(std::move(e));
}

Status Server::Start(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
      rc != 0)
    return Status::InvalidArgument("cannot resolve listen host '" + host +
                                   "': " + ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    // SO_REUSEADDR lets a restarted agent bind while old connections sit in TIME_WAIT; on Linux
    // it does not let two listeners share a port. SO_REUSEPORT would, so it is never set.
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) {
      const int v6only = 0;  // "::" serves IPv4 clients too
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
    }
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, limits_.listen_backlog) != 0) {
      last_error = errno == EADDRINUSE ? "address in use (another process listens there)"
                                       : std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fd_ = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0)
    return Status::IoError("cannot listen on " + host + ":" + service + ": " + last_error);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
    port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(ss).sin6_port
                                           : reinterpret_cast<sockaddr_in&>(ss).sin_port);

  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0)
    return Status::IoError(std::string("epoll: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenKey;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = kWakeKey;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);

  stopping_ = false;
  loop_ = std::thread([this] { Loop(); });
  for (size_t i = 0; i < std::max<size_t>(1, limits_.workers); ++i)
    workers_.emplace_back([this] { Worker(); });
  return Status::Ok();
}

void Server::Stop() {
  if (!loop_.joinable()) return;
  stopping_ = true;
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  loop_.join();
  for (auto& w : workers_) w.join();
  workers_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
  done_.clear();
}

ServerStats Server::Stats() const {
  ServerStats s;
  for (size_t i = 0; i < s.refused.size(); ++i) s.refused[i] = refused_[i].load();
  s.requests = requests_.load();
  s.connections_open = open_.load();
  s.body_bytes_buffered = body_bytes_.load();
  s.tls_not_after_s = tls_not_after_s_.load();
  s.tls_reloads = tls_reloads_.load();
  s.tls_reload_failures = tls_reload_failures_.load();
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.requests_queued = queue_.size();
  }
  return s;
}

// ----- I/O thread -----

void Server::Loop() {
  epoll_event evs[64];
  auto last_sweep = Clock::now();
  bool tls_pending = false;  // an SSL held bytes after the last round: look again at once
  while (!stopping_) {
    const int n = ::epoll_wait(epoll_fd_, evs, 64, tls_pending ? 0 : 100);
    if (n < 0 && errno != EINTR) {
      GW_LOG_ERROR("HTTP: epoll_wait: {}", std::strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t key = evs[i].data.u64;
      if (key == kListenKey) {
        Accept();
        continue;
      }
      if (key == kWakeKey) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &v, sizeof(v));
        DrainDone();
        continue;
      }
      auto it = conns_.find(key);
      if (it == conns_.end() || it->second->dead) continue;
      Conn& c = *it->second;
      if (c.handshake) {
        Handshake(c);
        continue;
      }
      if (c.read_wants_write && (evs[i].events & EPOLLOUT)) {
        SetInterest(c, EPOLLIN | EPOLLRDHUP);  // back to reading; OnReadable may change it
        OnReadable(c);
        continue;
      }
      if (c.write_wants_read && (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
        SetInterest(c, EPOLLOUT);
        OnWritable(c);
        continue;
      }
      if (evs[i].events & EPOLLOUT) OnWritable(c);
      if (!c.dead && (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) OnReadable(c);
    }
    tls_pending = tls_ && ReadTlsPending();
    if (Clock::now() - last_sweep >= 100ms) {
      Sweep();
      // Also here, not only at accept: clients that keep their connections (Prometheus, the
      // agents) would otherwise leave a renewed certificate unloaded and its expiry stale.
      MaybeReloadTls();
      last_sweep = Clock::now();
    }
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (!it->second->dead) {
        ++it;
        continue;
      }
      Conn& c = *it->second;
      ::close(c.fd);
      if (c.body_reserved) body_bytes_.fetch_sub(c.body_reserved);
      if (c.cancel) c.cancel->store(true);
      if (auto ps = per_source_.find(c.source); ps != per_source_.end() && --ps->second == 0)
        per_source_.erase(ps);
      open_.fetch_sub(1);
      it = conns_.erase(it);
    }
  }
  // Stopping: running requests are told, every connection is closed.
  for (auto& [id, c] : conns_) {
    if (c->cancel) c->cancel->store(true);
    if (c->body_reserved) body_bytes_.fetch_sub(c->body_reserved);
    ::close(c->fd);
  }
  conns_.clear();
  per_source_.clear();
  open_ = 0;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
  ::close(listen_fd_);
  listen_fd_ = -1;
}

void Server::Accept() {
  MaybeReloadTls();
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const int fd =
        ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE)
        GW_LOG_WARN("HTTP: cannot accept: {} (raise the open-files limit)", std::strerror(errno));
      return;  // EAGAIN, or an error the next readiness event retries
    }
    const std::string source = PeerAddress(ss);
    // Refused before any handshake: a TLS client gets no answer it could read.
    auto refuse = [&](std::string_view message) {
      if (tls_)
        ::close(fd);
      else
        SendAndClose(fd, "503 Service Unavailable", message);
    };
    if (conns_.size() >= limits_.max_connections) {
      Count(Refusal::kTooManyConnections);
      refuse("too many connections\n");
      continue;
    }
    size_t& from_source = per_source_[source];
    if (from_source >= limits_.max_connections_per_source &&
        !InAnyBlock(trusted_proxies_, source)) {
      Count(Refusal::kTooManyPerSource);
      refuse("too many connections from " + source + "\n");
      continue;
    }
    SSL* ssl = nullptr;
    if (tls_) {
      ERR_clear_error();
      ssl = SSL_new(tls_->ctx);
      if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
        GW_LOG_WARN("HTTP: cannot start TLS on a connection: {}", OpenSslError());
        if (ssl != nullptr) SSL_free(ssl);
        ::close(fd);
        if (from_source == 0) per_source_.erase(source);
        continue;
      }
      SSL_set_accept_state(ssl);
    }
    ++from_source;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->fd = fd;
    c->ssl = ssl;
    c->handshake = ssl != nullptr;
    c->source = source;
    // A connection that sends nothing is held to the head deadline, like one that trickles.
    c->deadline = Clock::now() + limits_.header_timeout;
    Conn& ref = *c;
    conns_.emplace(c->id, std::move(c));
    open_.fetch_add(1);
    SetInterest(ref, EPOLLIN | EPOLLRDHUP);
  }
}

void Server::Handshake(Conn& c) {
  ERR_clear_error();
  const int ret = SSL_do_handshake(c.ssl);
  if (ret == 1) {
    c.handshake = false;
    SetInterest(c, EPOLLIN | EPOLLRDHUP);
    OnReadable(c);  // the request may have come with the handshake's last flight
    return;
  }
  const IoResult r = TlsResult(c.ssl, ret, 0);
  if (r.io == Io::kAgain) {
    SetInterest(c, r.want_write ? EPOLLOUT : EPOLLIN | EPOLLRDHUP);
    return;
  }
  // Not TLS (plain HTTP to an HTTPS port), no shared protocol or cipher, or the client gave up.
  if (r.io == Io::kError) Count(Refusal::kTlsHandshake);
  Close(c.id);
}

// The loop waits on sockets, but an SSL may already hold decrypted bytes of a request the socket
// will never signal again (read in one record with what came before, or left when a read slice
// ended). Connections waiting to read get them read now.
bool Server::ReadTlsPending() {
  auto waiting = [](const Conn& c) {
    return !c.dead && c.ssl && !c.handshake && (c.events & EPOLLIN) &&
           c.phase != Conn::Phase::kRunning && c.phase != Conn::Phase::kWriting &&
           SSL_pending(c.ssl) > 0;
  };
  std::vector<uint64_t> ids;
  for (const auto& [id, c] : conns_)
    if (waiting(*c)) ids.push_back(id);
  bool more = false;
  for (uint64_t id : ids) {
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->dead) continue;
    OnReadable(*it->second);
    more |= waiting(*it->second);  // a read slice ended with more held: look again at once
  }
  return more;
}

void Server::SetInterest(Conn& c, uint32_t events) {
  if (c.registered && c.events == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = c.id;
  ::epoll_ctl(epoll_fd_, c.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &ev);
  c.registered = true;
  c.events = events;
}

void Server::Close(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second->dead) return;
  it->second->dead = true;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second->fd, nullptr);
}

void Server::OnReadable(Conn& c) {
  if (c.phase == Conn::Phase::kRunning) {
    // Only EPOLLRDHUP is watched while a request runs: the client closed (or half-closed) its
    // side. Tell the handler; the response is still written if the socket takes it.
    c.peer_eof = true;
    if (c.cancel) c.cancel->store(true);
    SetInterest(c, 0 | EPOLLET);
    return;
  }
  c.read_wants_write = false;  // set again below when this read must wait for writability
  char buf[64 * 1024];
  size_t got = 0;
  while (got < kReadSliceBytes) {
    const IoResult r = ReadSome(c.fd, c.ssl, buf, sizeof(buf));
    if (r.io == Io::kDone) {
      const size_t n = r.n;
      got += n;
      if (c.phase == Conn::Phase::kDraining) {
        c.drained += n;
        if (c.drained > kMaxDrainBytes) return Close(c.id);
      } else {
        c.in.append(buf, n);
        // Past a head that cannot be complete, stop reading: Process refuses it.
        if ((c.phase == Conn::Phase::kIdle || c.phase == Conn::Phase::kHead) &&
            c.in.size() > limits_.head.max_head_bytes)
          break;
        if (c.phase == Conn::Phase::kBody) break;  // consume before reading more
      }
      continue;
    }
    if (r.io == Io::kEof) {
      c.peer_eof = true;
      break;
    }
    if (r.io == Io::kAgain) {
      if (r.want_write) {  // TLS: wait for writability, then read again
        c.read_wants_write = true;
        SetInterest(c, EPOLLOUT);
        return;
      }
      break;
    }
    return Close(c.id);  // reset by peer, or a TLS record that does not decrypt
  }
  if (c.phase == Conn::Phase::kDraining) {
    if (c.peer_eof) Close(c.id);
    return;
  }
  Process(c);
  if (c.dead) return;
  if (c.peer_eof && (c.phase == Conn::Phase::kIdle || c.phase == Conn::Phase::kHead ||
                     c.phase == Conn::Phase::kBody)) {
    // The client is gone before a whole request arrived, or between requests.
    Close(c.id);
  } else if (c.peer_eof && c.phase == Conn::Phase::kRunning) {
    if (c.cancel) c.cancel->store(true);
  }
}

void Server::OnWritable(Conn& c) {
  c.write_wants_read = false;  // set again below when this write must wait for readability
  while (c.out_off < c.out.size()) {
    const IoResult r = WriteSome(c.fd, c.ssl, c.out.data() + c.out_off, c.out.size() - c.out_off);
    if (r.io == Io::kDone && r.n > 0) {
      c.out_off += r.n;
      continue;
    }
    if (r.io == Io::kAgain) {
      c.write_wants_read = !r.want_write;  // TLS: wait for readability, then write again
      SetInterest(c, r.want_write ? EPOLLOUT : EPOLLIN | EPOLLRDHUP);
      return;
    }
    return Close(c.id);
  }
  c.out.clear();
  c.out_off = 0;
  if (c.phase == Conn::Phase::kBody) {  // a "100 Continue" went out; back to the body
    SetInterest(c, EPOLLIN | EPOLLRDHUP);
    return;
  }
  if (c.phase != Conn::Phase::kWriting) return;
  if (c.close_after || c.peer_eof || stopping_) {
    if (!c.in.empty() || c.body_left > 0 || c.chunked) {
      // Unread request bytes: drain briefly so the client reads the answer, not a reset.
      if (c.ssl != nullptr) {
        ERR_clear_error();
        SSL_shutdown(c.ssl);  // close_notify, best effort: the socket is shut next
        ERR_clear_error();
      }
      ::shutdown(c.fd, SHUT_WR);
      c.phase = Conn::Phase::kDraining;
      c.deadline = Clock::now() + kDrainTime;
      c.in.clear();
      c.chunked.reset();
      c.body_left = 0;
      SetInterest(c, EPOLLIN | EPOLLRDHUP);
      return;
    }
    if (c.ssl != nullptr) {  // close_notify: the client sees the end, not a truncation
      ERR_clear_error();
      SSL_shutdown(c.ssl);
      ERR_clear_error();
    }
    return Close(c.id);
  }
  c.phase = Conn::Phase::kIdle;
  c.deadline = Clock::now() + limits_.idle_timeout;
  SetInterest(c, EPOLLIN | EPOLLRDHUP);
  // A pipelined request was already read. Inside Process the loop picks it up; calling Process
  // here too would recurse once per pipelined request.
  if (!c.in.empty() && !c.processing) Process(c);
}

void Server::Process(Conn& c) {
  c.processing = true;
  struct Reset {
    Conn& c;
    ~Reset() { c.processing = false; }
  } reset{c};
  while (!c.dead) {
    switch (c.phase) {
      case Conn::Phase::kIdle:
      case Conn::Phase::kHead: {
        // Empty lines before a request line are ignored (RFC 9112 §2.2).
        size_t skip = 0;
        while (skip < c.in.size() && (c.in[skip] == '\r' || c.in[skip] == '\n')) ++skip;
        if (skip > 0 && c.scanned == 0) c.in.erase(0, skip);
        if (c.in.empty()) return;
        if (c.phase == Conn::Phase::kIdle) {
          c.phase = Conn::Phase::kHead;
          c.deadline = Clock::now() + limits_.header_timeout;
        }
        const size_t end = FindHeadEnd(c.in, &c.scanned);
        if (end == 0) {
          if (c.in.size() > limits_.head.max_head_bytes)
            Refuse(
                c, Refusal::kHeadTooLarge, 431,
                "request head exceeds " + std::to_string(limits_.head.max_head_bytes) + " bytes");
          return;
        }
        if (!StartRequest(c, end)) return;
        break;
      }
      case Conn::Phase::kBody:
        if (!ReadBody(c)) return;
        Dispatch(c);
        break;
      default:
        return;
    }
  }
}

bool Server::StartRequest(Conn& c, size_t head_end) {
  ParseError err;
  auto head = ParseRequestHead(std::string_view(c.in).substr(0, head_end), limits_.head, &err);
  c.in.erase(0, head_end);
  c.scanned = 0;
  if (!head) {
    Refuse(c, err.status == 431 ? Refusal::kHeadTooLarge : Refusal::kBadRequest, err.status,
           err.message);
    return false;
  }
  auto req = std::make_shared<Request>();
  req->method = std::move(head->method);
  req->target = std::move(head->target);
  req->path = std::move(head->path);
  req->headers = std::move(head->headers);
  req->remote_address = c.source;
  if (!trusted_proxies_.empty()) {
    // Every X-Forwarded-For field, in order, is one list (RFC 9110 5.3).
    std::string forwarded;
    for (const auto& [name, value] : req->headers.fields()) {
      if (!EqualsIgnoreCase(name, "X-Forwarded-For")) continue;
      if (!forwarded.empty()) forwarded += ',';
      forwarded += value;
    }
    req->remote_address = ForwardedClient(c.source, forwarded, trusted_proxies_);
  }
  c.cancel = std::make_shared<std::atomic<bool>>(false);
  req->cancelled = c.cancel;
  c.head_only = req->method == "HEAD";
  c.keep_alive = head->keep_alive;
  c.body_left = head->content_length.value_or(0);
  if (head->chunked) c.chunked.emplace(0);  // replaced below once the limit is known
  const bool has_body = head->chunked || c.body_left > 0;
  if (!head->query.empty()) {
    auto params = ParseUrlEncoded(head->query, &err);
    if (!params) {
      Refuse(c, Refusal::kBadRequest, 400, err.message);
      return false;
    }
    req->params = std::move(*params);
  }
  bool path_known = false;
  std::string allow;
  const RouteEntry* route = Match(*req, &path_known, &allow);
  if (!route) {
    Response r;
    if (path_known) {
      r.status = 405;
      r.SetHeader("Allow", allow);
      r.Set(req->method + " is not allowed on " + req->path + " (allowed: " + allow + ")\n",
            "text/plain");
    } else {
      r.status = 404;
      r.Set("not found: " + req->path + "\n", "text/plain");
    }
    Finish(c, std::move(r), has_body);
    return !c.dead && c.phase == Conn::Phase::kIdle;
  }
  // Auth before the body: an unauthenticated client cannot make the server buffer anything.
  if (authorizer_) {
    if (auto deny = authorizer_(*req, route->options)) {
      Count(Refusal::kUnauthorized);
      Finish(c, std::move(*deny), true);
      return false;
    }
  }
  const size_t limit =
      route->options.max_body_bytes ? route->options.max_body_bytes : limits_.max_body_bytes;
  if (head->content_length && *head->content_length > limit) {
    Refuse(c, Refusal::kBodyTooLarge, 413,
           "request body of " + std::to_string(*head->content_length) +
               " bytes exceeds the limit of " + std::to_string(limit) + " for " + req->path);
    return false;
  }
  if (head->chunked) c.chunked.emplace(limit);
  c.req = std::move(req);
  c.route = route;
  c.phase = Conn::Phase::kBody;
  c.deadline = Clock::now() + limits_.body_timeout;
  if (head->expect_continue && has_body) {
    c.out = "HTTP/1.1 100 Continue\r\n\r\n";
    c.out_off = 0;
    OnWritable(c);
  }
  return !c.dead;
}

bool Server::ReadBody(Conn& c) {
  size_t added = 0;
  if (c.chunked) {
    const size_t before = c.req->body.size();
    const size_t used = c.chunked->Feed(c.in, &c.req->body);
    c.in.erase(0, used);
    added = c.req->body.size() - before;
  } else {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(c.body_left, c.in.size()));
    c.req->body.append(c.in, 0, n);
    c.in.erase(0, n);
    c.body_left -= n;
    added = n;
  }
  if (added > 0) {
    const size_t total = body_bytes_.fetch_add(added) + added;
    c.body_reserved += added;
    if (total > limits_.max_buffered_body_bytes) {
      Refuse(c, Refusal::kBodyBudget, 503,
             "the server is receiving too many request bodies at once; retry");
      return false;
    }
  }
  if (c.chunked) {
    if (c.chunked->state() == ChunkedDecoder::State::kError) {
      const ParseError& e = c.chunked->error();
      Refuse(c, e.status == 413 ? Refusal::kBodyTooLarge : Refusal::kBadRequest, e.status,
             e.message);
      return false;
    }
    if (c.chunked->state() != ChunkedDecoder::State::kDone) return false;
    c.chunked.reset();
    return true;
  }
  return c.body_left == 0;
}

void Server::Dispatch(Conn& c) {
  std::shared_ptr<Request> req = std::move(c.req);
  const RouteEntry* route = c.route;
  if (route->options.parse_form && !req->body.empty() &&
      req->headers.Value("Content-Type").starts_with("application/x-www-form-urlencoded")) {
    ParseError err;
    auto form = ParseUrlEncoded(req->body, &err);
    if (!form) {
      c.req = std::move(req);
      Refuse(c, Refusal::kBadRequest, 400, err.message);
      return;
    }
    for (auto& p : *form) req->params.push_back(std::move(p));
  }
  requests_.fetch_add(1, std::memory_order_relaxed);
  if (route->options.inline_handler) {
    Response r;
    RunHandler(*route, *req, r);
    Finish(c, std::move(r), false);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() < limits_.max_queued) {
      queue_.push_back(Job{c.id, std::move(req), route, c.body_reserved});
      c.body_reserved = 0;  // the job owns those bytes now
      c.phase = Conn::Phase::kRunning;
      SetInterest(c, EPOLLRDHUP);
      cv_.notify_one();
      return;
    }
  }
  Refuse(c, Refusal::kQueueFull, 503, "every worker is busy; retry");
}

void Server::Finish(Conn& c, Response r, bool close) {
  if (r.status == 503 || r.status == 429) {
    bool has = false;
    for (const auto& h : r.headers) has = has || EqualsIgnoreCase(h.first, "Retry-After");
    if (!has) r.SetHeader("Retry-After", "1");
  }
  c.close_after = close || !c.keep_alive || c.peer_eof || stopping_;
  ++c.served;
  c.out += Serialize(r, c.head_only, c.close_after);
  c.phase = Conn::Phase::kWriting;
  c.deadline = Clock::now() + limits_.write_timeout;
  c.req.reset();
  c.route = nullptr;
  if (c.body_reserved) {
    body_bytes_.fetch_sub(c.body_reserved);
    c.body_reserved = 0;
  }
  OnWritable(c);
}

void Server::Refuse(Conn& c, Refusal why, int status, std::string message) {
  Count(why);
  Response r;
  r.status = status;
  r.Set(std::move(message) + "\n", "text/plain");
  Finish(c, std::move(r), true);
}

void Server::DrainDone() {
  std::vector<Done> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(done_);
  }
  for (auto& d : done) {
    body_bytes_.fetch_sub(d.body_bytes);
    auto it = conns_.find(d.conn_id);
    if (it == conns_.end() || it->second->dead) continue;
    Conn& c = *it->second;
    Finish(c, std::move(d.response), false);
  }
}

void Server::Sweep() {
  const auto now = Clock::now();
  for (auto& [id, cp] : conns_) {
    Conn& c = *cp;
    if (c.dead || c.phase == Conn::Phase::kRunning || now < c.deadline) continue;
    switch (c.phase) {
      case Conn::Phase::kHead:
        Count(Refusal::kHeadTimeout);
        Close(c.id);
        break;
      case Conn::Phase::kIdle:
        // A fresh connection that never sent a byte is a slow head too; a kept-alive one
        // that went quiet after its requests is just idle.
        if (c.served == 0) Count(Refusal::kHeadTimeout);
        Close(c.id);
        break;
      case Conn::Phase::kBody:
        Refuse(c, Refusal::kBodyTimeout, 408, "the request body did not arrive in time");
        break;
      case Conn::Phase::kWriting:
        Count(Refusal::kWriteTimeout);
        Close(c.id);
        break;
      default:
        Close(c.id);
        break;
    }
  }
}

// ----- workers -----

void Server::Worker() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    Response r;
    RunHandler(*job.route, *job.request, r);
    job.request.reset();
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_.push_back(Done{job.conn_id, std::move(r), job.body_bytes});
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
}

void Server::RunHandler(const RouteEntry& route, const Request& req, Response& res) const {
  try {
    route.handler(req, res);
  } catch (const std::exception& e) {
    // A handler must never take the daemon down: a thrown exception becomes a 500.
    GW_LOG_ERROR("HTTP {} {}: {}", req.method, req.path, e.what());
    res = Response{};
    res.status = 500;
    res.Set(std::string("internal error: ") + e.what() + "\n", "text/plain");
  } catch (...) {
    res = Response{};
    res.status = 500;
    res.Set("internal error\n", "text/plain");
  }
}

const Server::RouteEntry* Server::Match(const Request& r, bool* path_known,
                                        std::string* allow) const {
  auto& req = const_cast<Request&>(r);
  for (const auto& route : routes_) {
    bool hit = false;
    if (route.regex) {
      std::smatch m;
      if (req.path.size() <= kMaxRegexPathBytes && std::regex_match(req.path, m, *route.regex)) {
        hit = true;
        if (route.method == req.method || (route.method == "GET" && req.method == "HEAD")) {
          req.matches.clear();
          for (const auto& g : m) req.matches.push_back(g.str());
        }
      }
    } else {
      hit = route.literal == req.path;
      if (hit) req.matches = {req.path};
    }
    if (!hit) continue;
    if (route.method == req.method || (route.method == "GET" && req.method == "HEAD"))
      return &route;
    *path_known = true;
    if (allow->find(route.method) == std::string::npos) {
      if (!allow->empty()) *allow += ", ";
      *allow += route.method;
    }
  }
  return nullptr;
}

}  // namespace gpuwatch::http
