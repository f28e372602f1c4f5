// Tokens (issue 17, D2): made once with mode 0600, refused when others can read them, and
// checked by the authorizer before a request's body is read.
#include "server/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace gpuwatch::server {
namespace {

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gw_auth_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

http::Request WithToken(const std::string& token) {
  http::Request r;
  r.method = "POST";
  r.path = "/api/v1/silences";
  if (!token.empty()) r.headers.Add("Authorization", "Bearer " + token);
  return r;
}

TEST_F(AuthTest, AdminTokenIsMadeOnceWithMode0600) {
  const std::string path = dir_ / kAdminTokenFile;
  auto a = LoadOrCreateAdminToken(path);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->size(), 64u);
  struct stat sb {};
  ASSERT_EQ(::stat(path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  auto b = LoadOrCreateAdminToken(path);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);  // the second start reads the first start's token
  auto other = LoadOrCreateAdminToken(dir_ / "other.token");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*a, *other);
}

TEST_F(AuthTest, TokenFileReadableByOthersIsRefused) {
  const std::string path = dir_ / "w.token";
  std::ofstream(path) << "0123456789abcdef0123\n";
  ::chmod(path.c_str(), 0644);
  auto t = ReadTokenFile(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("chmod 600"), std::string::npos) << t.status().message();
  ::chmod(path.c_str(), 0600);
  t = ReadTokenFile(path);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(*t, "0123456789abcdef0123");
  std::ofstream(path) << "short\n";
  EXPECT_FALSE(ReadTokenFile(path).ok());
}

// The authorizer under test, with a request it can set principal and scope on.
struct Asked {
  std::optional<http::Response> refusal;
  std::string principal;
  std::vector<std::string> scope;
};
Asked Ask(const http::Authorizer& auth, const std::string& token, http::Access access,
          const std::string& from = "10.0.0.7", bool allow_scoped = false) {
  http::Request r = WithToken(token);
  r.remote_address = from;
  Asked a;
  http::RouteOptions route;
  route.access = access;
  route.allow_scoped = allow_scoped;
  a.refusal = auth(r, route);
  a.principal = r.principal;
  a.scope = r.scope;
  return a;
}

AuthConfig ReadsNeedTokens(std::shared_ptr<TokensFile> tokens) {
  AuthConfig c;
  c.tokens = std::move(tokens);
  c.reads_need_token = true;
  return c;
}

TEST_F(AuthTest, AuthorizerByAccessLevel) {
  const std::string admin(64, 'a'), writer(32, 'f');
  AuthConfig c;
  c.admin_token = admin;
  c.write_token = writer;
  c.admin_token_path = "/d/admin.token";
  auto auth = MakeAuthorizer(c);
  // Reads are open (loopback, no tokens file), and so are public routes.
  EXPECT_FALSE(Ask(auth, "", http::Access::kRead).refusal);
  EXPECT_FALSE(Ask(auth, "", http::Access::kPublic).refusal);
  // No token: 401 that says where the token is.
  auto r = Ask(auth, "", http::Access::kAdmin).refusal;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("/d/admin.token"), std::string::npos);
  // A wrong token of the right length, and one a character short.
  EXPECT_EQ(Ask(auth, std::string(64, 'b'), http::Access::kWrite).refusal->status, 401);
  EXPECT_EQ(Ask(auth, std::string(63, 'a'), http::Access::kWrite).refusal->status, 401);
  // The admin token does everything; its principal is "admin".
  auto a = Ask(auth, admin, http::Access::kAdmin);
  EXPECT_FALSE(a.refusal);
  EXPECT_EQ(a.principal, "admin");
  // The write token writes data but cannot silence alerts.
  a = Ask(auth, writer, http::Access::kWrite);
  EXPECT_FALSE(a.refusal);
  EXPECT_EQ(a.principal, "writer");
  r = Ask(auth, writer, http::Access::kAdmin).refusal;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
}

TEST_F(AuthTest, NoAdminTokenRefusesStateChanges) {
  auto auth = MakeAuthorizer({});
  auto r = Ask(auth, "anything-at-all-1234", http::Access::kWrite).refusal;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(r->body.find("no admin token"), std::string::npos);
}

// Issue 19: roles and scopes from the tokens file; reads need a token once one is configured.
TEST_F(AuthTest, TokensFileRolesAndScopes) {
  const std::string reader(32, '1'), writer(32, '2'), admin(32, '3'), scoped(32, '4'),
      expired(32, '5'), scoped_admin(32, '6');
  const std::string path = dir_ / "tokens";
  std::ofstream(path) << "# who may do what\n"
                      << reader << " read\n"
                      << writer << " write\n"
                      << admin << " admin\n"
                      << scoped << " read nlp,vision\n"
                      << expired << " read expires=2020-01-01T00:00:00Z\n"
                      << scoped_admin << " admin nlp\n";
  ::chmod(path.c_str(), 0600);
  auto tokens = TokensFile::Open(path);
  ASSERT_TRUE(tokens.ok()) << tokens.status().message();
  auto auth = MakeAuthorizer(ReadsNeedTokens(*tokens));
  using http::Access;
  // A read needs a token now, and the 401 says where they are.
  auto r = Ask(auth, "", Access::kRead).refusal;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find(path), std::string::npos) << r->body;
  EXPECT_FALSE(Ask(auth, "", Access::kPublic).refusal);  // /healthz
  // read: reads only.
  auto a = Ask(auth, reader, Access::kRead);
  EXPECT_FALSE(a.refusal);
  EXPECT_EQ(a.principal, "read@tokens:2");
  EXPECT_TRUE(a.scope.empty());
  EXPECT_EQ(Ask(auth, reader, Access::kWrite).refusal->status, 403);
  EXPECT_EQ(Ask(auth, reader, Access::kAdmin).refusal->status, 403);
  // write: what agents use; it cannot read.
  EXPECT_FALSE(Ask(auth, writer, Access::kWrite).refusal);
  EXPECT_EQ(Ask(auth, writer, Access::kRead).refusal->status, 403);
  EXPECT_EQ(Ask(auth, writer, Access::kAdmin).refusal->status, 403);
  // admin: everything.
  for (Access x : {Access::kRead, Access::kWrite, Access::kAdmin})
    EXPECT_FALSE(Ask(auth, admin, x).refusal);
  // A scoped token carries its projects to the routes that narrow what they show to them...
  a = Ask(auth, scoped, Access::kRead, "10.0.0.7", /*allow_scoped=*/true);
  EXPECT_FALSE(a.refusal);
  EXPECT_EQ(a.scope, (std::vector<std::string>{"nlp", "vision"}));
  // ...and is refused every other route, before its handler runs.
  r = Ask(auth, scoped, Access::kRead).refusal;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(r->body.find("shows the whole node"), std::string::npos) << r->body;
  // A scoped admin may not act on the whole node.
  r = Ask(auth, scoped_admin, Access::kAdmin).refusal;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(r->body.find("confined to projects nlp"), std::string::npos) << r->body;
  // An expired token is 401 and says so, naming its line, never the token.
  r = Ask(auth, expired, Access::kRead).refusal;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("line 6"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("expired at 2020-01-01T00:00:00Z"), std::string::npos) << r->body;
  for (const std::string& t : {reader, writer, admin, scoped, expired, scoped_admin})
    for (Access x : {Access::kRead, Access::kWrite, Access::kAdmin}) {
      if (auto refusal = Ask(auth, t, x).refusal) {
        EXPECT_EQ(refusal->body.find(t), std::string::npos) << "a refusal shows the token";
      }
    }
}

TEST_F(AuthTest, TheTokensFileIsReReadWhenItChanges) {
  const std::string old_token(32, 'a'), new_token(32, 'b');
  const std::string path = dir_ / "tokens";
  std::ofstream(path) << old_token << " read\n";
  ::chmod(path.c_str(), 0600);
  auto tokens = TokensFile::Open(path, std::chrono::milliseconds(0));
  ASSERT_TRUE(tokens.ok()) << tokens.status().message();
  auto auth = MakeAuthorizer(ReadsNeedTokens(*tokens));
  EXPECT_FALSE(Ask(auth, old_token, http::Access::kRead).refusal);
  // Revoked, another added: no restart.
  std::ofstream(path) << new_token << " read   # replaces the old one\n";
  EXPECT_EQ(Ask(auth, old_token, http::Access::kRead).refusal->status, 401);
  EXPECT_FALSE(Ask(auth, new_token, http::Access::kRead).refusal);
  // A file that no longer parses keeps the tokens read before.
  std::ofstream(path) << new_token << " reader\n";
  EXPECT_FALSE(Ask(auth, new_token, http::Access::kRead).refusal);
}

TEST_F(AuthTest, WrongTokensFromOneAddressAreRateLimited) {
  const std::string admin(64, 'a');
  AuthConfig c;
  c.admin_token = admin;
  c.reads_need_token = true;
  c.failures.max_failures = 5;
  c.failures.block = std::chrono::seconds(30);
  auto auth = MakeAuthorizer(c);
  const std::string wrong(64, 'b');
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(Ask(auth, wrong, http::Access::kRead, "10.1.1.1").refusal->status, 401) << i;
  // Blocked now, whatever it sends: even the right token, so guessing learns nothing.
  auto r = Ask(auth, admin, http::Access::kRead, "10.1.1.1").refusal;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  bool retry_after = false;
  for (const auto& [k, v] : r->headers)
    if (k == "Retry-After") retry_after = std::stoi(v) >= 1 && std::stoi(v) <= 30;
  EXPECT_TRUE(retry_after);
  // Another address is not.
  EXPECT_FALSE(Ask(auth, admin, http::Access::kRead, "10.1.1.2").refusal);
}

TEST(AuthFailureLimiter, WindowsBlocksAndBoundedMemory) {
  using Clock = AuthFailureLimiter::Clock;
  AuthFailureLimits limits;
  limits.max_failures = 3;
  limits.window = std::chrono::seconds(10);
  limits.block = std::chrono::seconds(20);
  limits.max_sources = 100;
  AuthFailureLimiter l(limits);
  const Clock::time_point t0 = Clock::now();
  // Two failures, then the window passes: the count starts again.
  l.RecordFailure("a", t0);
  l.RecordFailure("a", t0 + std::chrono::seconds(1));
  l.RecordFailure("a", t0 + std::chrono::seconds(11));
  EXPECT_EQ(l.BlockedSeconds("a", t0 + std::chrono::seconds(11)), 0);
  l.RecordFailure("a", t0 + std::chrono::seconds(12));
  l.RecordFailure("a", t0 + std::chrono::seconds(13));
  EXPECT_EQ(l.BlockedSeconds("a", t0 + std::chrono::seconds(13)), 20);
  EXPECT_EQ(l.BlockedSeconds("a", t0 + std::chrono::milliseconds(32500)), 1);
  EXPECT_EQ(l.BlockedSeconds("a", t0 + std::chrono::seconds(33)), 0);
  // A scan from ten thousand addresses keeps at most max_sources of them.
  for (int i = 0; i < 10000; ++i)
    l.RecordFailure("10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256),
                    t0 + std::chrono::milliseconds(i));
  EXPECT_LE(l.sources(), 100u);
}

TEST(IsLoopbackHost, Addresses) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "::1", "localhost"})
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  for (const char* h : {"0.0.0.0", "::", "10.0.0.1", "192.168.1.5", "", "example.com"})
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
}

}  // namespace
}  // namespace gpuwatch::server
