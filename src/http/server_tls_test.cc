// The HTTP server over TLS (Server::EnableTls) against real loopback sockets and a real OpenSSL
// client: requests on one kept-alive connection, a body and a response large enough to take
// many TLS records and partial reads and writes, plain HTTP to the TLS port refused and counted,
// certificate files that do not load named in the error, and a renewed certificate served to new
// connections without a restart.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "http/server.h"
#include "http/testing/loopback.h"

namespace gpuwatch::http {
namespace {

namespace fs = std::filesystem;

// A self-signed P-256 certificate for 127.0.0.1 and its key, written as PEM files.
struct TestCert {
  std::string dir, cert, key;
};

TestCert MakeCert(const std::string& name, long valid_s = 3600) {
  TestCert c;
  c.dir =
      (fs::temp_directory_path() / ("gw_tls_" + name + "_" + std::to_string(::getpid()))).string();
  fs::create_directories(c.dir);
  c.cert = c.dir + "/cert.pem";
  c.key = c.dir + "/key.pem";
  EVP_PKEY* pkey = EVP_EC_gen("P-256");
  X509* x = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), valid_s);
  X509_set_pubkey(x, pkey);
  X509_NAME* subject = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(x, subject);
  X509_EXTENSION* san = X509V3_EXT_conf_nid(nullptr, nullptr, NID_subject_alt_name,
                                            const_cast<char*>("IP:127.0.0.1"));
  X509_add_ext(x, san, -1);
  X509_EXTENSION_free(san);
  X509_sign(x, pkey, EVP_sha256());
  FILE* f = std::fopen(c.cert.c_str(), "w");
  PEM_write_X509(f, x);
  std::fclose(f);
  f = std::fopen(c.key.c_str(), "w");
  PEM_write_PrivateKey(f, pkey, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(x);
  EVP_PKEY_free(pkey);
  return c;
}

// A blocking TLS client on one connection, trusting only `ca_file`.
class TlsClient {
 public:
  TlsClient(int port, const std::string& ca_file) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(ctx_, ca_file.c_str(), nullptr);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    fd_ = testing::ConnectLoopback(port, 10);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), "127.0.0.1");
    connected_ = SSL_connect(ssl_) == 1;
    if (!connected_) ERR_print_errors_fp(stderr);
  }
  ~TlsClient() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  bool Send(std::string_view s) {
    size_t n = 0;
    return SSL_write_ex(ssl_, s.data(), s.size(), &n) == 1 && n == s.size();
  }
  // One response: head and Content-Length body; "" on a closed or failed connection.
  std::string Response() {
    for (;;) {
      const size_t head_end = in_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t len = 0;
        const size_t cl = in_.find("Content-Length: ");
        if (cl != std::string::npos && cl < head_end) len = std::stoul(in_.substr(cl + 16));
        if (in_.size() >= head_end + 4 + len) {
          std::string r = in_.substr(0, head_end + 4 + len);
          in_.erase(0, r.size());
          return r;
        }
      }
      char buf[16384];
      size_t n = 0;
      if (SSL_read_ex(ssl_, buf, sizeof(buf), &n) != 1) return "";
      in_.append(buf, n);
    }
  }

 private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool connected_ = false;
  std::string in_;
};

class ServerTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cert_ = MakeCert(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    server_.Stop();
    fs::remove_all(cert_.dir);
  }
  void Start() {
    ASSERT_TRUE(server_.EnableTls(cert_.cert, cert_.key).ok());
    server_.Route(
        "GET", "/hello",
        [](const Request& q, Response& r) { r.Set("hello " + q.Param("who"), "text/plain"); },
        {.access = Access::kPublic});
    server_.Route("POST", "/size",
                  [](const Request& q, Response& r) {
                    r.Set(std::to_string(q.body.size()) + " " + q.body.substr(q.body.size() - 4),
                          "text/plain");
                  },
                  {.access = Access::kPublic, .max_body_bytes = 8 << 20});
    server_.Route("GET", "/big",
                  [](const Request&, Response& r) {
                    std::string body(6 << 20, 'x');
                    for (size_t i = 0; i < body.size(); i += 4096)
                      body[i] = static_cast<char>('a' + i % 26);
                    r.Set(std::move(body), "application/octet-stream");
                  },
                  {.access = Access::kPublic});
    ASSERT_TRUE(server_.Start("127.0.0.1", 0).ok());
  }
  TestCert cert_;
  Server server_;
};

TEST_F(ServerTlsTest, RequestsOnOneKeptAliveConnection) {
  Start();
  ASSERT_TRUE(server_.tls());
  TlsClient c(server_.port(), cert_.cert);
  ASSERT_TRUE(c.connected());
  for (const std::string who : {"a", "b", "c"}) {
    ASSERT_TRUE(c.Send("GET /hello?who=" + who + " HTTP/1.1\r\nHost: x\r\n\r\n"));
    const std::string r = c.Response();
    EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK")) << r;
    EXPECT_TRUE(r.ends_with("hello " + who)) << r;
  }
  // Two requests in one write (pipelined, read in one TLS record): both answered in order.
  ASSERT_TRUE(
      c.Send("GET /hello?who=d HTTP/1.1\r\nHost: x\r\n\r\n"
             "GET /hello?who=e HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(c.Response().ends_with("hello d"));
  EXPECT_TRUE(c.Response().ends_with("hello e"));
}

TEST_F(ServerTlsTest, LargeBodiesAndResponsesCrossManyRecords) {
  Start();
  TlsClient c(server_.port(), cert_.cert);
  ASSERT_TRUE(c.connected());
  std::string body(5 << 20, 'b');
  body.replace(body.size() - 4, 4, "tail");
  ASSERT_TRUE(c.Send("POST /size HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body));
  EXPECT_TRUE(c.Response().ends_with(std::to_string(5 << 20) + " tail"));
  // A 6 MiB response, read by a client that waits before reading: the server's writes stop
  // part way (WANT_WRITE) and resume.
  ASSERT_TRUE(c.Send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string r = c.Response();
  ASSERT_TRUE(r.starts_with("HTTP/1.1 200 OK")) << r.substr(0, 200);
  const std::string got = r.substr(r.find("\r\n\r\n") + 4);
  ASSERT_EQ(got.size(), size_t{6} << 20);
  EXPECT_EQ(got[4096 * 7], static_cast<char>('a' + (4096 * 7) % 26));
}

TEST_F(ServerTlsTest, PlainHttpAndUntrustedClientsGetNoAnswer) {
  Start();
  const int fd = testing::ConnectLoopback(server_.port(), 10);
  ASSERT_GE(fd, 0);
  const std::string req = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  char buf[512];
  ssize_t n;
  std::string got;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(got.find("HTTP/1.1"), std::string::npos) << got;  // no plain-text answer
  for (int i = 0;
       i < 100 && server_.Stats().refused[static_cast<size_t>(Refusal::kTlsHandshake)] == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server_.Stats().refused[static_cast<size_t>(Refusal::kTlsHandshake)], 1u);
  EXPECT_EQ(RefusalName(Refusal::kTlsHandshake), "tls_handshake");
  // A client that does not trust the certificate stops at the handshake.
  const TestCert other = MakeCert("other");
  TlsClient untrusting(server_.port(), other.cert);
  EXPECT_FALSE(untrusting.connected());
  fs::remove_all(other.dir);
}

TEST_F(ServerTlsTest, FilesThatDoNotLoadAreNamed) {
  Server s;
  Status st = s.EnableTls(cert_.dir + "/missing.pem", cert_.key);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("missing.pem"), std::string::npos) << st.message();
  st = s.EnableTls(cert_.cert, cert_.dir + "/missing.key");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("missing.key"), std::string::npos) << st.message();
  // A key of another certificate.
  const TestCert other = MakeCert("mismatch");
  st = s.EnableTls(cert_.cert, other.key);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("key values mismatch"), std::string::npos) << st.message();
  fs::remove_all(other.dir);
  EXPECT_FALSE(s.tls());
}

// A renewal renames new files over the old (certbot swaps a symlink, cert-manager a secret's;
// either is a new inode): the next connection gets the new certificate, one already open goes
// on with the old, and a pair that does not match is refused while the last good one serves.
TEST_F(ServerTlsTest, ARenewedCertificateIsServedWithoutARestart) {
  Start();
  const int64_t now_s = ::time(nullptr);
  EXPECT_NEAR(server_.Stats().tls_not_after_s, now_s + 3600, 10);
  const TestCert renewed = MakeCert("renewed", 86400);
  const std::string old_ca = cert_.dir + "/old.pem", new_ca = renewed.dir + "/ca.pem";
  fs::copy_file(cert_.cert, old_ca);
  fs::copy_file(renewed.cert, new_ca);
  TlsClient before(server_.port(), old_ca);
  ASSERT_TRUE(before.connected());

  fs::rename(renewed.cert, cert_.cert);
  fs::rename(renewed.key, cert_.key);
  // The files are looked at again at most once a second, when a connection comes.
  bool renewed_served = false;
  for (int i = 0; i < 40 && !renewed_served; ++i) {
    TlsClient c(server_.port(), new_ca);
    renewed_served = c.connected();
    if (!renewed_served) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(renewed_served);
  ServerStats st = server_.Stats();
  EXPECT_EQ(st.tls_reloads, 1u);
  EXPECT_EQ(st.tls_reload_failures, 0u);
  EXPECT_NEAR(st.tls_not_after_s, now_s + 86400, 10);
  {
    TlsClient c(server_.port(), new_ca);
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.Send("GET /hello?who=renewed HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_NE(c.Response().find("hello renewed"), std::string::npos);
  }
  // The connection opened before the renewal still works, on its old certificate.
  ASSERT_TRUE(before.Send("GET /hello?who=before HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(before.Response().find("hello before"), std::string::npos);

  // Half a renewal: a new certificate beside the old key. Refused; the last good pair serves.
  const TestCert half = MakeCert("half");
  fs::rename(half.cert, cert_.cert);
  for (int i = 0; i < 40 && server_.Stats().tls_reload_failures == 0; ++i) {
    TlsClient c(server_.port(), new_ca);
    EXPECT_TRUE(c.connected());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  st = server_.Stats();
  EXPECT_EQ(st.tls_reload_failures, 1u);
  EXPECT_EQ(st.tls_reloads, 1u);
  EXPECT_NEAR(st.tls_not_after_s, now_s + 86400, 10);
  TlsClient after(server_.port(), new_ca);
  EXPECT_TRUE(after.connected());
  fs::remove_all(renewed.dir);
  fs::remove_all(half.dir);
}

}  // namespace
}  // namespace gpuwatch::http
