#include "server/listen_address.h"

#include <gtest/gtest.h>

namespace gpuwatch::server {
namespace {

TEST(ListenAddressTest, Forms) {
  auto a = ParseListenAddress("127.0.0.1:9470");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9470);
  auto v6 = ParseListenAddress("[::1]:80");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  auto any = ParseListenAddress(":9470");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->host, "0.0.0.0");
}

TEST(ListenAddressTest, ErrorsNameTheInput) {
  auto bad = ParseListenAddress("nonsense");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "bad listen address 'nonsense': expected host:port");
  EXPECT_FALSE(ParseListenAddress("host:99999").ok());
  EXPECT_FALSE(ParseListenAddress("::1:80").ok());
  EXPECT_FALSE(ParseListenAddress("[::1]80").ok());
}

}  // namespace
}  // namespace gpuwatch::server
