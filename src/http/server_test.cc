// The HTTP server against real loopback sockets. The regression tests carry the defect names
// of issue 17 (D3, D7, D8, D14) they guard against.
#include "http/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "http/testing/loopback.h"

namespace gpuwatch::http {
namespace {

using Clock = std::chrono::steady_clock;

int Connect(int port) { return testing::ConnectLoopback(port); }

bool SendAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads one response (head + Content-Length body), or until close/timeout. Bytes past it (a
// pipelined response) are kept in `carry` for the next call.
std::string ReadResponse(int fd, std::chrono::milliseconds timeout = std::chrono::seconds(10),
                         std::string* carry = nullptr, bool head_only = false) {
  std::string got;
  if (carry) got.swap(*carry);
  const auto until = Clock::now() + timeout;
  for (;;) {
    const size_t head_end = got.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      size_t len = 0;
      const size_t cl = got.find("Content-Length: ");
      if (cl != std::string::npos && cl < head_end && !head_only)
        len = std::stoul(got.substr(cl + 16));
      if (got.size() >= head_end + 4 + len) {
        if (carry) *carry = got.substr(head_end + 4 + len);
        return got.substr(0, head_end + 4 + len);
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return got;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return got;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
}

std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  EXPECT_GE(fd, 0);
  SendAll(fd, request);
  std::string r = ReadResponse(fd, std::chrono::seconds(10), nullptr, request.starts_with("HEAD"));
  ::close(fd);
  return r;
}

int StatusOf(const std::string& response) {
  return response.size() > 12 ? std::stoi(response.substr(9, 3)) : 0;
}

// True when the peer closed the connection within `timeout`.
bool ClosedWithin(int fd, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return true;
    }
  }
  return false;
}

class ServerTest : public ::testing::Test {
 protected:
  void StartWith(ServerLimits limits) {
    server_ = std::make_unique<Server>(limits);
    server_->Route("GET", "/healthz",
                   [](const Request&, Response& r) { r.Set("ok\n", "text/plain"); },
                   {.inline_handler = true});
    server_->Route("GET", "/hello", [](const Request& q, Response& r) {
      r.Set("hello " + q.Param("name"), "text/plain");
    });
    server_->Route("POST", "/echo",
                   [](const Request& q, Response& r) { r.Set(q.body, "application/octet-stream"); },
                   {.max_body_bytes = 1000});
    server_->Route("POST", "/form",
                   [](const Request& q, Response& r) { r.Set(q.Param("query"), "text/plain"); },
                   {.parse_form = true});
    server_->Route("GET", R"(/items/([a-z0-9]+))", [](const Request& q, Response& r) {
      r.Set("item " + q.matches.at(1), "text/plain");
    });
    server_->Route("GET", "/slow", [this](const Request& q, Response& r) {
      running_.fetch_add(1);
      const auto until = Clock::now() + std::chrono::seconds(20);
      while (!q.IsCancelled() && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (q.IsCancelled()) cancelled_.fetch_add(1);
      r.Set("done", "text/plain");
    });
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  uint64_t Refused(Refusal r) const { return server_->Stats().refused[static_cast<size_t>(r)]; }

  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::atomic<int> running_{0};
  std::atomic<int> cancelled_{0};
};

TEST_F(ServerTest, ServesRoutesParamsRegexAndKeepAlive) {
  StartWith({});
  const int fd = Connect(port_);
  SendAll(fd, "GET /hello?name=a%20b HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = ReadResponse(fd);
  EXPECT_EQ(StatusOf(r), 200);
  EXPECT_TRUE(r.ends_with("hello a b")) << r;
  // Same connection, two pipelined requests.
  SendAll(fd, "GET /items/abc HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string carry;
  r = ReadResponse(fd, std::chrono::seconds(10), &carry);
  EXPECT_TRUE(r.ends_with("item abc")) << r;
  r = ReadResponse(fd, std::chrono::seconds(10), &carry);
  EXPECT_TRUE(r.ends_with("ok\n")) << r;
  ::close(fd);
  EXPECT_EQ(StatusOf(Exchange(port_, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")), 404);
  const std::string r405 = Exchange(port_, "DELETE /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(StatusOf(r405), 405);
  EXPECT_NE(r405.find("Allow: GET"), std::string::npos);
  const std::string head = Exchange(port_, "HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(StatusOf(head), 200);
  EXPECT_NE(head.find("Content-Length: 6"), std::string::npos);
}

TEST_F(ServerTest, FormBodyParamsAndExpectContinue) {
  StartWith({});
  const std::string body = "query=up%7Bjob%3D%22gpuwatch%22%7D";
  std::string r = Exchange(port_,
                           "POST /form HTTP/1.1\r\nHost: x\r\nContent-Type: "
                           "application/x-www-form-urlencoded\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_TRUE(r.ends_with(R"(up{job="gpuwatch"})")) << r;
  const int fd = Connect(port_);
  SendAll(fd,
          "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
  r = ReadResponse(fd);
  EXPECT_TRUE(r.starts_with("HTTP/1.1 100 Continue\r\n\r\n")) << r;
  SendAll(fd, "abc");
  r = ReadResponse(fd);
  EXPECT_EQ(StatusOf(r), 200);
  EXPECT_TRUE(r.ends_with("abc"));
  ::close(fd);
}

TEST_F(ServerTest, D3_ChunkedBodyCannotPassTheBodyLimit) {
  StartWith({});
  const int fd = Connect(port_);
  SendAll(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  // 1000 bytes are allowed; the chunk that would pass them is refused before it is buffered.
  SendAll(fd, "3e8\r\n" + std::string(1000, 'a') + "\r\n");
  SendAll(fd, "100000\r\n");  // declares 1 MiB more
  const std::string r = ReadResponse(fd);
  EXPECT_EQ(StatusOf(r), 413) << r;
  EXPECT_NE(r.find("exceeds the limit of 1000"), std::string::npos);
  ::close(fd);
  EXPECT_EQ(Refused(Refusal::kBodyTooLarge), 1u);
  // At the limit exactly it goes through.
  const std::string ok = Exchange(
      port_, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n" +
                 std::string(1000, 'b') + "\r\n0\r\n\r\n");
  EXPECT_EQ(StatusOf(ok), 200);
}

TEST_F(ServerTest, D3_ContentLengthOverTheRouteLimitIsRefusedBeforeTheBody) {
  StartWith({});
  EXPECT_EQ(
      StatusOf(Exchange(port_, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" +
                                   std::string(1000, 'a'))),
      200);
  const int fd = Connect(port_);
  SendAll(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n");
  const std::string r = ReadResponse(fd);  // no body sent: the answer comes from the head
  EXPECT_EQ(StatusOf(r), 413) << r;
  ::close(fd);
}

TEST_F(ServerTest, D3_HeaderCountAndHeadSizeAreBounded) {
  ServerLimits limits;
  limits.head.max_headers = 10;
  limits.head.max_head_bytes = 4096;
  StartWith(limits);
  std::string many = "GET /hello HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 10; ++i) many += "X-" + std::to_string(i) + ": y\r\n";
  EXPECT_EQ(StatusOf(Exchange(port_, many + "\r\n")), 431);
  // A head that never ends is cut off at the limit, not buffered on.
  const int fd = Connect(port_);
  SendAll(fd, "GET /hello HTTP/1.1\r\nHost: x\r\nX-Long: " + std::string(8192, 'z'));
  EXPECT_EQ(StatusOf(ReadResponse(fd)), 431);
  ::close(fd);
  EXPECT_EQ(Refused(Refusal::kHeadTooLarge), 2u);
}

TEST_F(ServerTest, D7_SecondServerOnTheSamePortFails) {
  StartWith({});
  Server second;
  const Status st = second.Start("127.0.0.1", port_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("address in use"), std::string::npos) << st.message();
}

TEST_F(ServerTest, D8_SlowClientsDoNotMakeTheServerDeaf) {
  ServerLimits limits;
  limits.workers = 2;
  limits.header_timeout = std::chrono::milliseconds(600);
  StartWith(limits);
  std::vector<int> slow;
  for (int i = 0; i < 16; ++i) {
    slow.push_back(Connect(port_));
    SendAll(slow.back(), "GET /hello HTTP/1.1\r\n");
  }
  // While they trickle, others are served at once, on the workers and inline.
  for (int i = 0; i < 3; ++i) {
    for (int fd : slow) SendAll(fd, "X: y\r\n");
    EXPECT_EQ(StatusOf(Exchange(port_, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")), 200);
    EXPECT_EQ(StatusOf(Exchange(port_, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")), 200);
  }
  // And the head deadline closes every one of them, however often it sends a byte.
  for (int fd : slow) {
    EXPECT_TRUE(ClosedWithin(fd, std::chrono::seconds(3)));
    ::close(fd);
  }
  EXPECT_EQ(Refused(Refusal::kHeadTimeout), 16u);
}

TEST_F(ServerTest, ClientThatLeavesCancelsItsRequest) {
  StartWith({});
  const int fd = Connect(port_);
  SendAll(fd, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
  while (running_.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::close(fd);
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (cancelled_.load() == 0 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(cancelled_.load(), 1);
}

TEST_F(ServerTest, StopCancelsRunningRequestsPromptly) {
  StartWith({});
  const int fd = Connect(port_);
  SendAll(fd, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
  while (running_.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto t0 = Clock::now();
  server_->Stop();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(cancelled_.load(), 1);
  ::close(fd);
}

TEST_F(ServerTest, FullQueueIsAnswered503WithRetryAfter) {
  ServerLimits limits;
  limits.workers = 1;
  limits.max_queued = 1;
  StartWith(limits);
  std::vector<int> fds;
  for (int i = 0; i < 2; ++i) {
    fds.push_back(Connect(port_));
    SendAll(fds.back(), "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    if (i == 0)
      while (running_.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the second is queued
  const std::string r = Exchange(port_, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 503) << r;
  EXPECT_NE(r.find("Retry-After: 1"), std::string::npos);
  // Inline routes still answer.
  EXPECT_EQ(StatusOf(Exchange(port_, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")), 200);
  for (int fd : fds) ::close(fd);
}

TEST_F(ServerTest, ConnectionsPerSourceAreBounded) {
  ServerLimits limits;
  limits.max_connections_per_source = 4;
  StartWith(limits);
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) fds.push_back(Connect(port_));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string r = Exchange(port_, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 503) << r;
  EXPECT_EQ(Refused(Refusal::kTooManyPerSource), 1u);
  ::close(fds.back());
  fds.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(StatusOf(Exchange(port_, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")), 200);
  for (int fd : fds) ::close(fd);
}

// Behind a trusted reverse proxy the client is who X-Forwarded-For names (http/forwarded.h),
// for the handlers and the authorizer; the proxy's connections are not held to the
// per-source bound, since every client behind it shares its address.
TEST_F(ServerTest, ATrustedProxyNamesTheClient) {
  ServerLimits limits;
  limits.max_connections_per_source = 2;
  server_ = std::make_unique<Server>(limits);
  server_->SetTrustedProxies({*ParseAddressBlock("127.0.0.0/8")});
  server_->Route("GET", "/who",
                 [](const Request& q, Response& r) { r.Set(q.remote_address, "text/plain"); });
  ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
  port_ = server_->port();
  auto body = [](const std::string& r) { return r.substr(r.find("\r\n\r\n") + 4); };
  EXPECT_EQ(body(Exchange(port_, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n")), "127.0.0.1");
  EXPECT_EQ(body(Exchange(port_,
                          "GET /who HTTP/1.1\r\nHost: x\r\n"
                          "X-Forwarded-For: 203.0.113.9\r\n"
                          "X-Forwarded-For: 198.51.100.23\r\n\r\n")),
            "198.51.100.23");
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) fds.push_back(Connect(port_));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(StatusOf(Exchange(port_, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n")), 200);
  EXPECT_EQ(Refused(Refusal::kTooManyPerSource), 0u);
  for (int fd : fds) ::close(fd);
}

TEST_F(ServerTest, AuthorizerRefusesBeforeTheBodyIsRead) {
  server_ = std::make_unique<Server>();
  std::atomic<int> handled{0};
  server_->Route("POST", "/w",
                 [&](const Request&, Response& r) {
                   handled.fetch_add(1);
                   r.status = 204;
                 },
                 {.access = Access::kWrite, .max_body_bytes = 1 << 20});
  server_->SetAuthorizer([](Request& q, const RouteOptions& o) -> std::optional<Response> {
    if (o.access == Access::kRead) return std::nullopt;
    if (q.Header("Authorization") == "Bearer t") {
      q.principal = "admin";
      return std::nullopt;
    }
    Response r;
    r.status = 401;
    r.Set("token required\n", "text/plain");
    return r;
  });
  ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
  const int port = server_->port();
  const std::string denied =
      Exchange(port, "POST /w HTTP/1.1\r\nHost: x\r\nContent-Length: 500000\r\n\r\n");
  EXPECT_EQ(StatusOf(denied), 401) << denied;
  EXPECT_EQ(handled.load(), 0);
  EXPECT_EQ(StatusOf(Exchange(port,
                              "POST /w HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              "t\r\nContent-Length: 2\r\n\r\nhi")),
            204);
  EXPECT_EQ(handled.load(), 1);
}

TEST_F(ServerTest, BadRequestsGetTheirStatusAndReason) {
  StartWith({});
  const std::string r = Exchange(port_,
                                 "GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                                 "Transfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 400);
  EXPECT_NE(r.find("both Transfer-Encoding and Content-Length"), std::string::npos) << r;
  EXPECT_EQ(StatusOf(Exchange(port_, "GARBAGE\r\n\r\n")), 400);
}

}  // namespace
}  // namespace gpuwatch::http
