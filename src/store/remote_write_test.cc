#include "store/remote_write.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace gpuwatch::store {
namespace {

std::vector<RemoteSeries> Sample() {
  RemoteSeries a;
  a.labels = {{"__name__", "DCGM_FI_DEV_GPU_UTIL"}, {"gpu", "0"}, {"Hostname", "n1"}};
  a.samples = {{1704067200000, 97}, {1704067201000, 96.5}, {-5, -0.0}};
  RemoteSeries b;
  b.labels = {{"__name__", "weird"}};
  b.samples = {{1, std::numeric_limits<double>::quiet_NaN()},
               {2, std::numeric_limits<double>::infinity()}};
  return {a, b};
}

TEST(RemoteWriteTest, RoundTrip) {
  auto got = DecodeRemoteWrite(EncodeRemoteWrite(Sample()));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].labels[2].value, "n1");
  ASSERT_EQ((*got)[0].samples.size(), 3u);
  EXPECT_EQ((*got)[0].samples[1].value, 96.5);
  EXPECT_EQ((*got)[0].samples[2].timestamp_ms, -5)
      << "int64 timestamps are two's complement varints";
  EXPECT_TRUE(std::signbit((*got)[0].samples[2].value));
  EXPECT_TRUE(std::isnan((*got)[1].samples[0].value));
  EXPECT_TRUE(std::isinf((*got)[1].samples[1].value));
}

TEST(RemoteWriteTest, UnknownFieldsAreSkipped) {
  std::string proto = EncodeWriteRequest(Sample());
  // Field 3 (metadata) as a LEN, field 15 as a varint, field 14 as fixed32: all skipped.
  proto += std::string("\x1a\x02\x08\x01", 4) + std::string("\x78\x05", 2) +
           std::string("\x75\x01\x02\x03\x04", 5);
  auto got = DecodeWriteRequest(proto);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->size(), 2u);
}

TEST(RemoteWriteTest, BadInputNamesTheProblem) {
  auto not_snappy = DecodeRemoteWrite("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff");
  ASSERT_FALSE(not_snappy.ok());
  EXPECT_NE(not_snappy.status().message().find("not snappy"), std::string::npos);

  const std::string proto = EncodeWriteRequest(Sample());
  for (size_t cut = 1; cut < proto.size(); ++cut) {
    auto r = DecodeWriteRequest(proto.substr(0, cut));
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
  auto group = DecodeWriteRequest(std::string("\x0b", 1));  // field 1, start group
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("wire type 3"), std::string::npos);

  RemoteWriteLimits tight;
  tight.max_series = 1;
  auto many = DecodeRemoteWrite(EncodeRemoteWrite(Sample()), tight);
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("more than 1 series"), std::string::npos);
  tight = {};
  tight.max_uncompressed_bytes = 10;
  EXPECT_FALSE(DecodeRemoteWrite(EncodeRemoteWrite(Sample()), tight).ok());
}

}  // namespace
}  // namespace gpuwatch::store
