#include "store/chunkenc.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace gpuwatch::store {
namespace {

constexpr int64_t kT0 = 1704067200000;  // 2024-01-01T00:00:00Z
constexpr double kInf = std::numeric_limits<double>::infinity();
// Prometheus' stale marker: a NaN with a payload, which must survive bit for bit.
const double kStaleNaN = std::bit_cast<double>(uint64_t{0x7ff0000000000002});

uint64_t Bits(double v) { return std::bit_cast<uint64_t>(v); }

// Blocks of a chunk of n samples at the default block size.
uint32_t Blocks(size_t n) {
  return static_cast<uint32_t>((n + (size_t{1} << kDefaultBlockShift) - 1) >> kDefaultBlockShift);
}

std::string Encode(const std::vector<Sample>& samples, int block_shift = kDefaultBlockShift) {
  ChunkEncoder enc(block_shift);
  for (const Sample& s : samples) {
    Status st = enc.Append(s.t_ms, s.value);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return enc.Finish();
}

// Bit-exact comparison: EXPECT_EQ on doubles would call NaN != NaN and -0.0 == 0.0.
void ExpectSame(const std::vector<Sample>& want, const std::vector<Sample>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].t_ms, got[i].t_ms) << "sample " << i;
    ASSERT_EQ(Bits(want[i].value), Bits(got[i].value))
        << "sample " << i << ": want " << want[i].value << " got " << got[i].value;
  }
}

ChunkInfo RoundTrip(const std::vector<Sample>& samples, int block_shift = kDefaultBlockShift) {
  const std::string chunk = Encode(samples, block_shift);
  auto decoded = DecodeChunk(chunk);
  EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
  if (!decoded.ok()) return {};
  ExpectSame(samples, *decoded);
  auto info = InspectChunk(chunk);
  EXPECT_TRUE(info.ok());
  return info.ok() ? *info : ChunkInfo{};
}

std::vector<Sample> Regular(size_t n, double (*value)(size_t i)) {
  std::vector<Sample> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = {kT0 + 1000 * static_cast<int64_t>(i), value(i)};
  return out;
}

// A realistic mix: idle, busy with noise, a counter, power with 3 decimals.
std::vector<Sample> Mixed(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, 9);
  std::vector<Sample> out;
  int64_t t = kT0;
  for (size_t i = 0; i < n; ++i) {
    double v;
    switch ((i / 700) % 4) {
      case 0:
        v = 0;
        break;
      case 1:
        v = std::round(600 + noise(rng));
        break;
      case 2: {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.3f", 612.5 + noise(rng));
        v = std::strtod(buf, nullptr);
        break;
      }
      default:
        v = noise(rng);
        break;
    }
    out.push_back({t, v});
    t += 1000 + static_cast<int64_t>(rng() % 3);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST(ChunkEncTest, EmptyChunk) {
  ChunkEncoder enc;
  EXPECT_TRUE(enc.empty());
  const std::string chunk = enc.Finish();
  auto decoded = DecodeChunk(chunk);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(decoded->empty());
}

TEST(ChunkEncTest, SingleSample) {
  const double values[] = {0.0,          -0.0,   1.0,     -1.5, kInf,    -kInf, kStaleNaN,
                           std::nan(""), 1e-310, 1.7e308, 0.1,  612.125, 4e15};
  for (double v : values) {
    for (int64_t t : {int64_t{0}, kT0, int64_t{-5}, std::numeric_limits<int64_t>::min(),
                      std::numeric_limits<int64_t>::max()}) {
      SCOPED_TRACE(testing::Message() << "t=" << t << " v=" << v);
      const ChunkInfo info = RoundTrip({{t, v}});
      EXPECT_EQ(info.num_samples, 1u);
      EXPECT_EQ(info.num_blocks, 1u);
    }
  }
}

TEST(ChunkEncTest, ExtremeTimestamps) {
  const int64_t lo = std::numeric_limits<int64_t>::min();
  const int64_t hi = std::numeric_limits<int64_t>::max();
  RoundTrip({{lo, 1}, {lo + 1, 2}, {-1, 3}, {0, 4}, {hi - 1, 5}, {hi, 6}});
  RoundTrip({{lo, 1}, {hi, 2}});
  std::vector<Sample> s;
  for (int i = 0; i < 3000; ++i) s.push_back({lo + i * int64_t{3074457345618258}, i * 1.0});
  RoundTrip(s, 6);
}

TEST(ChunkEncTest, MixedSeriesEveryBlockSize) {
  const std::vector<Sample> s = Mixed(5000, 1);
  for (int shift = kMinBlockShift; shift <= kMaxBlockShift; ++shift) {
    SCOPED_TRACE(shift);
    RoundTrip(s, shift);
  }
}

TEST(ChunkEncTest, MaxSize) {
  ChunkEncoder enc;
  std::vector<Sample> want;
  for (size_t i = 0; i < kMaxChunkSamples; ++i) {
    want.push_back({kT0 + static_cast<int64_t>(i) * 1000, static_cast<double>(i % 101)});
    ASSERT_TRUE(enc.Append(want.back().t_ms, want.back().value).ok());
  }
  Status full = enc.Append(kT0 + 1000 * static_cast<int64_t>(kMaxChunkSamples), 1);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(enc.num_samples(), kMaxChunkSamples);
  auto decoded = DecodeChunk(enc.Finish());
  ASSERT_TRUE(decoded.ok());
  ExpectSame(want, *decoded);
}

TEST(ChunkEncTest, OutOfOrderAppendRejected) {
  ChunkEncoder enc;
  ASSERT_TRUE(enc.Append(kT0, 1).ok());
  EXPECT_EQ(enc.Append(kT0, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(enc.Append(kT0 - 1, 2).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(enc.Append(kT0 + 1, 3).ok());
  EXPECT_EQ(enc.num_samples(), 2u);
  EXPECT_EQ(enc.first_t_ms(), kT0);
  EXPECT_EQ(enc.last_t_ms(), kT0 + 1);
  auto decoded = DecodeChunk(enc.Finish());
  ASSERT_TRUE(decoded.ok());
  ExpectSame({{kT0, 1}, {kT0 + 1, 3}}, *decoded);
  EXPECT_TRUE(enc.empty());  // Finish resets: a new chunk may start anywhere
  EXPECT_TRUE(enc.Append(kT0 - 100, 1).ok());
}

TEST(ChunkEncTest, SnapshotLeavesEncoderOpen) {
  const std::vector<Sample> s = Mixed(3000, 2);
  ChunkEncoder enc(8);
  for (size_t i = 0; i < s.size(); ++i) {
    ASSERT_TRUE(enc.Append(s[i].t_ms, s[i].value).ok());
    if (i == 0 || i == 255 || i == 256 || i == 1000) {
      auto part = DecodeChunk(enc.Snapshot());
      ASSERT_TRUE(part.ok()) << part.status().ToString();
      ExpectSame(std::vector<Sample>(s.begin(), s.begin() + i + 1), *part);
    }
  }
  auto all = DecodeChunk(enc.Finish());
  ASSERT_TRUE(all.ok());
  ExpectSame(s, *all);
}

TEST(ChunkEncTest, DecoderIteratesLikeDecodeChunk) {
  const std::vector<Sample> s = Mixed(2500, 3);
  const std::string chunk = Encode(s);
  auto dec = ChunkDecoder::Open(chunk);
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(dec->num_samples(), s.size());
  std::vector<Sample> got;
  Sample x;
  while (dec->Next(&x.t_ms, &x.value)) got.push_back(x);
  EXPECT_TRUE(dec->status().ok());
  EXPECT_FALSE(dec->Next(&x.t_ms, &x.value));  // stays at the end
  ExpectSame(s, got);
  EXPECT_EQ(dec->info().num_blocks, Blocks(s.size()));
}

// A property test: random series built from segments of every kind, special values and
// irregular timestamps included, must come back bit for bit at every block size.
TEST(ChunkEncTest, RandomizedRoundTrip) {
  std::mt19937_64 rng(20240101);
  const double specials[] = {0.0,
                             -0.0,
                             kInf,
                             -kInf,
                             kStaleNaN,
                             std::nan(""),
                             -std::nan(""),
                             std::bit_cast<double>(uint64_t{0x7ff8dead0000beef}),
                             std::numeric_limits<double>::denorm_min(),
                             -std::numeric_limits<double>::denorm_min(),
                             std::numeric_limits<double>::min(),
                             std::numeric_limits<double>::max(),
                             -std::numeric_limits<double>::max(),
                             std::numeric_limits<double>::epsilon(),
                             9007199254740992.0,
                             -9007199254740992.0,
                             9007199254740993.0,
                             9223372036854775808.0,
                             -9223372036854775808.0,
                             1e300,
                             1e-300,
                             0.1,
                             0.30000000000000004};
  for (int iter = 0; iter < 300; ++iter) {
    SCOPED_TRACE(iter);
    const size_t n = 1 + rng() % (iter % 10 == 0 ? kMaxChunkSamples : 3000);
    std::vector<Sample> s;
    int64_t t = static_cast<int64_t>(rng()) >> (rng() % 64);
    double level = 0;
    int kind = 0;
    size_t left = 0;
    for (size_t i = 0; i < n; ++i) {
      if (left == 0) {
        kind = static_cast<int>(rng() % 8);
        left = 1 + rng() % 600;
        level = static_cast<double>(static_cast<int64_t>(rng() % 200000) - 100000);
      }
      --left;
      double v;
      switch (kind) {
        case 0:  // constant
          v = level;
          break;
        case 1:  // integer random walk
          level += static_cast<double>(static_cast<int64_t>(rng() % 21) - 10);
          v = level;
          break;
        case 2: {  // fixed decimals
          const int digits = 1 + static_cast<int>(rng() % 6);
          char buf[64];
          std::snprintf(buf, sizeof buf, "%.*f", digits,
                        level + static_cast<double>(rng() % 100000) / 997.0);
          v = std::strtod(buf, nullptr);
          break;
        }
        case 3:  // arbitrary doubles
          v = std::bit_cast<double>(rng());
          break;
        case 4:  // specials
          v = specials[rng() % std::size(specials)];
          break;
        case 5:  // integers with rare stale markers
          v = rng() % 50 == 0 ? kStaleNaN : level + static_cast<double>(rng() % 3);
          break;
        case 6:  // a counter
          level += static_cast<double>(rng() % 1000000);
          v = level;
          break;
        default:  // smooth floats
          v = std::sin(static_cast<double>(i) / 50.0) * 1e3;
          break;
      }
      s.push_back({t, v});
      // Mostly 1 s with ms jitter; sometimes a gap of any size up to 2^44 ms.
      const uint64_t gap = rng() % 50 == 0 ? 1 + (rng() >> (20 + rng() % 44)) : 1000 + rng() % 4;
      const uint64_t room =
          static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - static_cast<uint64_t>(t);
      if (room < gap) break;  // the top of int64
      t = static_cast<int64_t>(static_cast<uint64_t>(t) + gap);
    }
    RoundTrip(s, kMinBlockShift + static_cast<int>(rng() % (kMaxBlockShift - kMinBlockShift + 1)));
  }
}

// ---------------------------------------------------------------------------------------------
// The encoding each kind of series gets

TEST(ChunkEncTest, ConstantSeriesPicksConstant) {
  const ChunkInfo info = RoundTrip(Regular(7200, [](size_t) { return 700.0; }));
  EXPECT_EQ(info.num_blocks, Blocks(7200));
  EXPECT_EQ(info.value_blocks[static_cast<int>(ValueEncoding::kConstant)], 1u);
  EXPECT_EQ(info.value_blocks[static_cast<int>(ValueEncoding::kRepeat)], Blocks(7200) - 1);
  EXPECT_EQ(info.regular_timestamp_blocks, Blocks(7200) - 1);
  const std::string chunk = Encode(Regular(7200, [](size_t) { return 700.0; }));
  EXPECT_LT(chunk.size(), 32 + 2 * Blocks(7200));  // two bytes per block: ~0.06 bits/sample
}

TEST(ChunkEncTest, IntegerSeriesPicksInteger) {
  // Utilization-like: integers in 0..100.
  const ChunkInfo info =
      RoundTrip(Regular(4096, [](size_t i) { return static_cast<double>((i * 7919) % 13 + 85); }));
  EXPECT_EQ(info.value_blocks[static_cast<int>(ValueEncoding::kInteger)], Blocks(4096));
}

TEST(ChunkEncTest, LinearCounterCostsNothingPerSample) {
  const std::vector<Sample> s = Regular(7200, [](size_t i) { return 5e12 + 612345.0 * i; });
  const ChunkInfo info = RoundTrip(s);
  EXPECT_EQ(info.value_blocks[static_cast<int>(ValueEncoding::kInteger)], Blocks(7200));
  // A few bytes of predictor per block, nothing per sample.
  EXPECT_LT(Encode(s).size(), 32 + 8 * Blocks(7200));
}

TEST(ChunkEncTest, ThreeDecimalsPickDecimal) {
  std::mt19937_64 rng(7);
  std::vector<Sample> s;
  for (int i = 0; i < 4096; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", 600 + static_cast<double>(rng() % 20000) / 997.0);
    s.push_back({kT0 + i * 1000, std::strtod(buf, nullptr)});
  }
  const ChunkInfo info = RoundTrip(s);
  EXPECT_EQ(info.value_blocks[static_cast<int>(ValueEncoding::kDecimal)], Blocks(4096));
  // ~15 bits of noise per sample: far below Gorilla's ~40 bits for such values.
  EXPECT_LT(Encode(s).size(), 4096u * 17 / 8);
}

TEST(ChunkEncTest, ArbitraryDoublesPickXor) {
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<Sample> s;
  for (int i = 0; i < 2048; ++i) s.push_back({kT0 + i * 1000, u(rng)});
  const ChunkInfo info = RoundTrip(s);
  EXPECT_EQ(info.value_blocks[static_cast<int>(ValueEncoding::kXor)], Blocks(2048));
}

TEST(ChunkEncTest, StaleMarkersAreExceptionsInIntegerBlocks) {
  std::vector<Sample> s = Regular(1024, [](size_t i) { return static_cast<double>(40 + i % 5); });
  s[10].value = kStaleNaN;
  s[500].value = -0.0;
  s[1023].value = kInf;
  const ChunkInfo info = RoundTrip(s, 10);
  EXPECT_EQ(info.value_blocks[static_cast<int>(ValueEncoding::kInteger)], 1u);
  EXPECT_EQ(info.exceptions, 3u);
}

TEST(ChunkEncTest, TimestampCosts) {
  auto ts_bits = [](const std::vector<Sample>& s) {
    const std::string chunk = Encode(s);
    auto info = InspectChunk(chunk);
    EXPECT_TRUE(info.ok());
    return 8.0 * static_cast<double>(info->timestamp_bytes) / static_cast<double>(s.size());
  };
  std::mt19937_64 rng(9);
  std::vector<Sample> regular, jitter, missed;
  for (int i = 0; i < 7200; ++i) {
    regular.push_back({kT0 + 1000 * i, 1});
    jitter.push_back({kT0 + 1000 * i + static_cast<int64_t>(rng() % 2), 1});
    if (rng() % 100 != 0) missed.push_back({kT0 + 1000 * i, 1});
  }
  EXPECT_LT(ts_bits(regular), 0.05);
  EXPECT_LT(ts_bits(jitter), 2.5);  // Gorilla's delta-of-delta: ~6 bits
  EXPECT_LT(ts_bits(missed), 0.6);  // 1% of scrapes missed
}

// ---------------------------------------------------------------------------------------------
// Corrupt input: an error or valid data, never a crash (run under ASan/UBSan in CI).

std::vector<std::string> CorpusChunks() {
  std::vector<std::string> out;
  out.push_back(Encode(Regular(1500, [](size_t) { return 3.0; }), 8));
  out.push_back(Encode(Regular(1300, [](size_t i) { return static_cast<double>(i % 17); }), 8));
  out.push_back(Encode(Mixed(1600, 4), 8));
  std::vector<Sample> x;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100; ++i) x.push_back({kT0 + i * 997, std::bit_cast<double>(rng())});
  out.push_back(Encode(x, 6));
  out.push_back(Encode({{kT0, kStaleNaN}}));
  return out;
}

// Valid data means: strictly increasing timestamps, and it re-encodes to the same samples.
void CheckDecodesOrFails(std::string_view bytes) {
  auto decoded = DecodeChunk(bytes, {.verify_checksum = false});
  if (!decoded.ok()) {
    EXPECT_EQ(decoded.status().code(), StatusCode::kCorruption) << decoded.status().ToString();
    return;
  }
  for (size_t i = 1; i < decoded->size(); ++i) {
    ASSERT_LT((*decoded)[i - 1].t_ms, (*decoded)[i].t_ms);
  }
  auto again = DecodeChunk(Encode(*decoded));
  ASSERT_TRUE(again.ok());
  ExpectSame(*decoded, *again);
}

TEST(ChunkEncTest, EveryFlippedByteIsCaughtByTheChecksum) {
  for (const std::string& chunk : CorpusChunks()) {
    for (size_t i = 0; i < chunk.size(); ++i) {
      for (int mask : {0x01, 0x80, 0xff}) {
        std::string bad = chunk;
        bad[i] = static_cast<char>(bad[i] ^ mask);
        auto decoded = DecodeChunk(bad);
        ASSERT_FALSE(decoded.ok()) << "byte " << i;
        EXPECT_EQ(decoded.status().code(), StatusCode::kCorruption);
      }
    }
  }
}

TEST(ChunkEncTest, FlippedBytesWithoutChecksumNeverCrash) {
  for (const std::string& chunk : CorpusChunks()) {
    for (size_t i = 0; i < chunk.size(); ++i) {
      for (int mask : {0x01, 0xff}) {
        std::string bad = chunk;
        bad[i] = static_cast<char>(bad[i] ^ mask);
        CheckDecodesOrFails(bad);
      }
    }
  }
}

TEST(ChunkEncTest, TruncationAtEveryLength) {
  for (const std::string& chunk : CorpusChunks()) {
    for (size_t len = 0; len < chunk.size(); ++len) {
      // Copied so that ASan sees a read past the truncated end.
      const std::string cut = chunk.substr(0, len);
      auto decoded = DecodeChunk(cut);
      ASSERT_FALSE(decoded.ok()) << "length " << len;
      EXPECT_EQ(decoded.status().code(), StatusCode::kCorruption);
      CheckDecodesOrFails(cut);
    }
  }
}

TEST(ChunkEncTest, RandomBytesNeverCrash) {
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s(rng() % 200, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    // A plausible header, so the block decoders see the garbage.
    if (s.size() > 3) {
      s[0] = 1;
      s[1] = static_cast<char>(kMinBlockShift + rng() % 4);
      s[2] = static_cast<char>(rng() % 120);
    }
    CheckDecodesOrFails(s);
  }
}

TEST(ChunkEncTest, BadHeaders) {
  std::string chunk = Encode(Regular(10, [](size_t i) { return 1.0 * i; }));
  auto corrupt = [](std::string s) {
    return DecodeChunk(s, {.verify_checksum = false}).status().code();
  };
  std::string s = chunk;
  s[0] = 2;  // unknown chunk encoding
  EXPECT_EQ(corrupt(s), StatusCode::kCorruption);
  s = chunk;
  s[1] = kMaxBlockShift + 1;
  EXPECT_EQ(corrupt(s), StatusCode::kCorruption);
  // A wrong sample count may still parse (a perfectly predicted block decodes to any length):
  // only the checksum catches it.
  for (char count : {9, 11}) {
    s = chunk;
    s[2] = count;
    EXPECT_EQ(DecodeChunk(s).status().code(), StatusCode::kCorruption);
    CheckDecodesOrFails(s);
  }
  EXPECT_EQ(corrupt(std::string("\x01\x0a\xff\xff\xff\x7f\0\0\0\0", 10)),
            StatusCode::kCorruption);  // more than kMaxChunkSamples
  EXPECT_EQ(InspectChunk("").status().code(), StatusCode::kCorruption);
}

// ---------------------------------------------------------------------------------------------
// Checked-in chunks (tests/fixtures/chunks, also the fuzz seeds) must keep decoding to the same
// samples: the format is on disk. GPUWATCH_WRITE_CHUNK_FIXTURES=1 rewrites them.

struct Fixture {
  const char* name;
  std::vector<Sample> samples;
  int block_shift;
};

std::vector<Fixture> Fixtures() {
  std::vector<Fixture> out;
  out.push_back({"constant.chunk", Regular(300, [](size_t) { return 700.0; }), 6});
  out.push_back({"integer.chunk",
                 Regular(300, [](size_t i) { return static_cast<double>(60 + (i * 37) % 7); }), 6});
  out.push_back(
      {"counter.chunk", Regular(200, [](size_t i) { return 1e12 + 612000.0 * i + i % 3; }), 6});
  std::vector<Sample> dec;
  for (int i = 0; i < 200; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", 600 + ((i * 7919) % 1000) / 97.0);
    dec.push_back({kT0 + 1000 * i + (i * 13) % 3, std::strtod(buf, nullptr)});
  }
  out.push_back({"decimal_jitter.chunk", dec, 6});
  std::vector<Sample> x;
  for (int i = 0; i < 100; ++i) x.push_back({kT0 + 15000 * i, std::sin(i * 0.1) * 1e-3});
  out.push_back({"xor.chunk", x, 5});
  std::vector<Sample> sp = Regular(150, [](size_t i) { return static_cast<double>(i % 4); });
  sp[3].value = kStaleNaN;
  sp[70].value = -0.0;
  sp[149].value = -kInf;
  out.push_back({"exceptions.chunk", sp, 6});
  out.push_back({"mixed.chunk", Mixed(400, 6), 5});
  out.push_back({"single.chunk", {{kT0, 42.5}}, 10});
  return out;
}

TEST(ChunkEncTest, CheckedInChunksStillDecode) {
  const char* src = std::getenv("GPUWATCH_SOURCE_DIR");
  const std::string dir = std::string(src ? src : GPUWATCH_SOURCE_DIR) + "/tests/fixtures/chunks/";
  const bool write = std::getenv("GPUWATCH_WRITE_CHUNK_FIXTURES") != nullptr;
  for (const Fixture& f : Fixtures()) {
    SCOPED_TRACE(f.name);
    if (write) {
      std::ofstream(dir + f.name, std::ios::binary) << Encode(f.samples, f.block_shift);
    }
    std::ifstream in(dir + f.name, std::ios::binary);
    ASSERT_TRUE(in.good()) << dir + f.name;
    std::stringstream ss;
    ss << in.rdbuf();
    auto decoded = DecodeChunk(ss.str());
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ExpectSame(f.samples, *decoded);
  }
}

}  // namespace
}  // namespace gpuwatch::store
