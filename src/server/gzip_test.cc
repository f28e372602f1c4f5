#include "server/gzip.h"

#include <gtest/gtest.h>

namespace gpuwatch::server {
namespace {

TEST(GzipTest, RoundTrip) {
  std::string body;
  for (int i = 0; i < 5000; ++i)
    body += "DCGM_FI_DEV_GPU_UTIL{gpu=\"" + std::to_string(i % 8) + "\"} 97\n";
  auto z = GzipCompress(body);
  ASSERT_TRUE(z.ok());
  EXPECT_LT(z->size(), body.size() / 5);
  EXPECT_EQ(static_cast<unsigned char>((*z)[0]), 0x1f);  // gzip magic
  EXPECT_EQ(static_cast<unsigned char>((*z)[1]), 0x8b);
  auto back = GzipDecompress(*z);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, body);
  EXPECT_FALSE(GzipDecompress(z->substr(0, z->size() / 2)).ok());
}

TEST(GzipTest, AcceptEncoding) {
  EXPECT_TRUE(AcceptsGzip("gzip"));
  EXPECT_TRUE(AcceptsGzip("deflate, gzip, br"));
  EXPECT_TRUE(AcceptsGzip("GZIP;q=0.5"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("br"));
  EXPECT_FALSE(AcceptsGzip(""));
  EXPECT_FALSE(AcceptsGzip("x-gzip-not"));
}

}  // namespace
}  // namespace gpuwatch::server
