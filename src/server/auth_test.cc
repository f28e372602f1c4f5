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

TEST_F(AuthTest, AuthorizerByAccessLevel) {
  const std::string admin(64, 'a'), writer(32, 'w');
  auto auth = MakeAuthorizer({admin, writer, "/d/admin.token"});
  std::string who;
  // Reads are open.
  EXPECT_FALSE(auth(WithToken(""), http::Access::kRead, &who));
  // No token: 401 that says where the token is.
  auto r = auth(WithToken(""), http::Access::kAdmin, &who);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("/d/admin.token"), std::string::npos);
  // A wrong token of the right length, and one a character short.
  EXPECT_EQ(auth(WithToken(std::string(64, 'b')), http::Access::kWrite, &who)->status, 401);
  EXPECT_EQ(auth(WithToken(std::string(63, 'a')), http::Access::kWrite, &who)->status, 401);
  // The admin token does everything; its principal is "admin".
  EXPECT_FALSE(auth(WithToken(admin), http::Access::kAdmin, &who));
  EXPECT_EQ(who, "admin");
  // The write token writes data but cannot silence alerts.
  EXPECT_FALSE(auth(WithToken(writer), http::Access::kWrite, &who));
  EXPECT_EQ(who, "writer");
  r = auth(WithToken(writer), http::Access::kAdmin, &who);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
}

TEST_F(AuthTest, NoAdminTokenRefusesStateChanges) {
  auto auth = MakeAuthorizer({});
  std::string who;
  auto r = auth(WithToken("anything-at-all-1234"), http::Access::kWrite, &who);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(r->body.find("no admin token"), std::string::npos);
}

TEST(IsLoopbackHost, Addresses) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "::1", "localhost"})
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  for (const char* h : {"0.0.0.0", "::", "10.0.0.1", "192.168.1.5", "", "example.com"})
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
}

}  // namespace
}  // namespace gpuwatch::server
