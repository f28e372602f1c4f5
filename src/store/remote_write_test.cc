#include "store/remote_write.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace gpuwatch::store {
namespace {

std::vector<RemoteSeries> SomeSeries() {
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
  auto got = DecodeRemoteWrite(EncodeRemoteWrite(SomeSeries()));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].labels[2].value, "n1");
  ASSERT_EQ((*got)[0].samples.size(), 3u);
  EXPECT_EQ((*got)[0].samples[1].value, 96.5);
  EXPECT_EQ((*got)[0].samples[2].t_ms, -5) << "int64 timestamps are two's complement varints";
  EXPECT_TRUE(std::signbit((*got)[0].samples[2].value));
  EXPECT_TRUE(std::isnan((*got)[1].samples[0].value));
  EXPECT_TRUE(std::isinf((*got)[1].samples[1].value));
}

// The digest is of the label fields as sent: the same series sent again has the same one,
// another series (or the same labels in another order: other bytes) another; samples do not
// enter it. A series the receiver says it knows is not decoded (labels left empty).
TEST(RemoteWriteTest, DigestRecognisesARepeatedSeriesWithoutDecodingIt) {
  auto first = DecodeRemoteWrite(EncodeRemoteWrite(SomeSeries()));
  ASSERT_TRUE(first.ok());
  auto later = SomeSeries();
  later[0].samples = {{1704067260000, 12}};
  auto again = DecodeRemoteWrite(EncodeRemoteWrite(later));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*first)[0].digest, (*again)[0].digest);
  EXPECT_EQ((*first)[1].digest, (*again)[1].digest);
  EXPECT_FALSE((*first)[0].digest == (*first)[1].digest);
  auto reordered = SomeSeries();
  std::swap(reordered[0].labels[0], reordered[0].labels[1]);
  EXPECT_FALSE((*DecodeRemoteWrite(EncodeRemoteWrite(reordered)))[0].digest == (*first)[0].digest);
  // One label's value moved into its neighbour's: the same concatenated bytes, other fields.
  RemoteSeries x, y;
  x.labels = {{"a", "bc"}, {"d", "e"}};
  y.labels = {{"a", "b"}, {"cd", "e"}};
  EXPECT_FALSE((*DecodeWriteRequest(EncodeWriteRequest({x})))[0].digest ==
               (*DecodeWriteRequest(EncodeWriteRequest({y})))[0].digest);

  DigestTable known;
  EXPECT_TRUE(known.Insert((*first)[0].digest, 7));
  auto got = DecodeRemoteWrite(EncodeRemoteWrite(later), {}, &known);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].known, std::optional<uint32_t>(7));
  EXPECT_TRUE((*got)[0].labels.empty());
  ASSERT_EQ((*got)[0].samples.size(), 1u);
  EXPECT_EQ((*got)[0].samples[0].value, 12);
  EXPECT_FALSE((*got)[1].known);
  EXPECT_EQ((*got)[1].labels.size(), 1u);
}

// A sender may interleave a series' label fields with its samples (protobuf allows any field
// order): the digest is of the label fields' bytes alone, so it is the one of the usual order.
TEST(RemoteWriteTest, DigestIgnoresWhereTheSamplesSit) {
  RemoteSeries one;
  one.labels = {{"__name__", "up"}, {"job", "x"}};
  one.samples = {{1000, 1}};
  const std::string usual = EncodeWriteRequest({one});
  // Re-encode the one TimeSeries as label, sample, label.
  const std::string ts = usual.substr(2);  // 0x0a, one length byte (the message is short)
  ASSERT_EQ(static_cast<size_t>(usual[1]), ts.size());
  const size_t l1 = 2 + static_cast<size_t>(ts[1]);
  const size_t l2 = l1 + 2 + static_cast<size_t>(ts[l1 + 1]);
  const std::string moved = ts.substr(0, l1) + ts.substr(l2) + ts.substr(l1, l2 - l1);
  const std::string interleaved = std::string(1, '\x0a') + static_cast<char>(moved.size()) + moved;
  auto a = DecodeWriteRequest(usual);
  auto b = DecodeWriteRequest(interleaved);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ((*b)[0].labels.size(), 2u);
  EXPECT_EQ((*b)[0].labels[1].name, "job");
  ASSERT_EQ((*b)[0].samples.size(), 1u);
  EXPECT_EQ((*a)[0].digest, (*b)[0].digest);
}

// The table keeps every digest through its growth; digests that share a slot (equal `lo`) are
// told apart by `hi`; a digest already there keeps its first ref; kNone is never a ref.
TEST(DigestTableTest, FindsWhatWasInsertedThroughGrowth) {
  DigestTable t;
  EXPECT_FALSE(t.Find({1, 2}));
  for (uint32_t i = 0; i < 10'000; ++i) ASSERT_TRUE(t.Insert({i * 0x9e3779b97f4a7c15ULL, i}, i));
  for (uint64_t hi = 0; hi < 100; ++hi) ASSERT_TRUE(t.Insert({42, hi}, 20'000 + hi));
  EXPECT_EQ(t.size(), 10'100u);
  for (uint32_t i = 0; i < 10'000; ++i)
    ASSERT_EQ(t.Find({i * 0x9e3779b97f4a7c15ULL, i}), std::optional<uint32_t>(i));
  for (uint64_t hi = 0; hi < 100; ++hi)
    ASSERT_EQ(t.Find({42, hi}), std::optional<uint32_t>(20'000 + hi));
  EXPECT_FALSE(t.Find({42, 100}));
  EXPECT_FALSE(t.Insert({42, 0}, 5));
  EXPECT_EQ(t.Find({42, 0}), std::optional<uint32_t>(20'000));
  EXPECT_FALSE(t.Insert({7, 7}, DigestTable::kNone));
  EXPECT_FALSE(t.Find({7, 7}));
  t.Clear();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.Find({42, 0}));
}

// A body larger than the buffer each thread keeps (1 MiB) decodes the same.
TEST(RemoteWriteTest, ABodyOverTheKeptBufferDecodes) {
  std::vector<RemoteSeries> many;
  for (int i = 0; i < 20'000; ++i) {
    RemoteSeries s;
    s.labels = {{"__name__", "m"}, {"i", std::to_string(i)}, {"pad", std::string(60, 'x')}};
    s.samples = {{1000 + i, static_cast<double>(i)}};
    many.push_back(std::move(s));
  }
  const std::string body = EncodeRemoteWrite(many);
  ASSERT_GT(EncodeWriteRequest(many).size(), 1u << 20);
  auto got = DecodeRemoteWrite(body);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), many.size());
  EXPECT_EQ((*got)[19'999].labels[1].value, "19999");
  // Then a small one again, through the kept buffer.
  auto small = DecodeRemoteWrite(EncodeRemoteWrite(SomeSeries()));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->size(), SomeSeries().size());
}

TEST(RemoteWriteTest, UnknownFieldsAreSkipped) {
  std::string proto = EncodeWriteRequest(SomeSeries());
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

  const std::string proto = EncodeWriteRequest(SomeSeries());
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
  auto many = DecodeRemoteWrite(EncodeRemoteWrite(SomeSeries()), tight);
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("more than 1 series"), std::string::npos);
  tight = {};
  tight.max_uncompressed_bytes = 10;
  EXPECT_FALSE(DecodeRemoteWrite(EncodeRemoteWrite(SomeSeries()), tight).ok());
}

// Joined without inflating, the blocks inflate to the concatenation of what each held: with
// copies reaching far back (a repetitive block over snappy's 64 KiB fragments), an empty block,
// and a second block whose copies refer to its own bytes, now behind the first block's output.
TEST(SnappyJoinTest, InflatesToTheConcatenation) {
  std::string repetitive;
  for (int i = 0; repetitive.size() < 200'000; ++i)
    repetitive += "DCGM_FI_DEV_GPU_UTIL{gpu=\"" + std::to_string(i % 8) + "\"} ";
  const std::string proto = EncodeWriteRequest(SomeSeries());
  const std::vector<std::string> parts = {repetitive, "", proto, "abcabcabcabcabc", proto};
  std::vector<std::string> blocks;
  std::string expected;
  for (const auto& p : parts) {
    blocks.push_back(SnappyCompress(p));
    expected += p;
  }
  auto joined = SnappyJoin({blocks.begin(), blocks.end()});
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  auto length = SnappyInflatedLength(*joined);
  ASSERT_TRUE(length.ok());
  EXPECT_EQ(*length, expected.size());
  auto inflated = SnappyUncompress(*joined, expected.size(), "joined");
  ASSERT_TRUE(inflated.ok()) << inflated.status().ToString();
  EXPECT_TRUE(*inflated == expected);

  // Two encoded requests joined this way decode as one request with both requests' series.
  const std::string one = EncodeRemoteWrite(SomeSeries());
  auto two = SnappyJoin({one, one});
  ASSERT_TRUE(two.ok());
  auto decoded = DecodeRemoteWrite(*two);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->size(), 4u);

  auto one_block = SnappyJoin({one});
  ASSERT_TRUE(one_block.ok());
  EXPECT_EQ(*one_block, one);
}

TEST(SnappyJoinTest, RefusesWhatIsNoSnappyLength) {
  // An empty block, a header that never ends, and a length past 2^32-1.
  for (std::string bad :
       {std::string(), std::string("\x80\x80", 2), std::string("\xff\xff\xff\xff\x7f", 5)}) {
    auto r = SnappyJoin({SnappyCompress("x"), bad});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("block 1"), std::string::npos) << r.status().message();
  }
  const std::string big("\xff\xff\xff\xff\x0f", 5);  // 2^32-1, the largest length
  auto sum = SnappyJoin({big, SnappyCompress("x")});
  ASSERT_FALSE(sum.ok());
  EXPECT_NE(sum.status().message().find("2^32-1"), std::string::npos);
}

}  // namespace
}  // namespace gpuwatch::store
