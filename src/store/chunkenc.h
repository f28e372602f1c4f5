// Chunk encodings of the embedded time-series store: one chunk holds up to kMaxChunkSamples
// (int64 timestamp in ms, double value) samples of one series, compressed for GPU telemetry.
//
// A chunk is a sequence of blocks of 2^block_shift samples (the last one shorter). Each block
// picks its own timestamp and value coding from the data when it is full: a constant, an
// integer or fixed-decimal series (utilization, temperatures, clocks, MiB, counters, power in
// W with 3 decimals) coded as residuals of a predictor chosen per block (difference order 0-2
// plus an optional fitted linear predictor) with Rice codes, or Gorilla XOR for any other
// double. Predictor history carries across blocks, so the head encodes a block as soon as it
// fills and only ever buffers one block of raw samples per series. Every value, NaN payloads,
// -0.0 and infinities included, round-trips bit-exactly. Byte layout: docs/format/chunk.md.
//
// Thread-safety: ChunkEncoder and ChunkDecoder are not thread-safe; distinct instances are
// independent. The free functions are pure.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::store {

struct Sample {
  int64_t t_ms = 0;
  double value = 0;
};

// The most samples one chunk may hold: bounds the decoder's allocations. The store cuts chunks
// at 2 h, i.e. 7200 samples at 1 s.
inline constexpr size_t kMaxChunkSamples = 16384;

inline constexpr int kMinBlockShift = 4;
inline constexpr int kMaxBlockShift = 14;
// 512 samples: as small as compression allows (bench/store/RESULTS.md: 512 and 1024 compress
// the same, 256 costs 0.8% more), since the head buffers one block of raw samples, 16 bytes
// each, per open series.
inline constexpr int kDefaultBlockShift = 9;

// How one block's values are stored. On-disk: never renumber.
enum class ValueEncoding : uint8_t {
  kRepeat = 0,    // every value bit-identical to the previous block's last value
  kConstant = 1,  // every value bit-identical to one stored double
  kInteger = 2,   // integers: predictor residuals, Rice-coded
  kDecimal = 3,   // m / 10^e, the integers m coded as for kInteger
  kXor = 4,       // Gorilla XOR of consecutive bit patterns
};
inline constexpr int kNumValueEncodings = 5;
std::string_view ValueEncodingName(ValueEncoding encoding);

// What a chunk is made of; for the benchmark, tests and debugging tools.
struct ChunkInfo {
  size_t num_samples = 0;
  size_t num_blocks = 0;
  std::array<uint32_t, kNumValueEncodings> value_blocks{};  // indexed by ValueEncoding
  // kInteger/kDecimal value blocks by the difference order of their predictor, and how many
  // of those also fit a linear predictor.
  std::array<uint32_t, 3> int_diff_order_blocks{};
  uint32_t int_lpc_blocks = 0;
  uint32_t regular_timestamp_blocks = 0;  // blocks whose timestamps took one byte
  uint32_t exceptions = 0;                // samples stored raw inside integer/decimal blocks
  size_t header_bytes = 0;                // chunk header and checksum
  size_t timestamp_bytes = 0;
  size_t value_bytes = 0;
};

namespace internal {
inline constexpr int kHistory = 6;
// Cross-block state that the encoder and the decoder advance identically, so that predictors
// continue over block boundaries instead of restarting.
struct BlockContext {
  bool first_block = true;
  int64_t last_t_ms = 0;
  std::array<uint64_t, kHistory> t_deltas{};  // last timestamp deltas, oldest first
  std::array<double, kHistory> values{};      // last values, oldest first
  std::array<uint64_t, kHistory> ints{};      // last integers of an integer/decimal block
  int int_scale = -1;                         // their decimal exponent; -1: none
};
}  // namespace internal

class ChunkEncoder {
 public:
  // REQUIRES: kMinBlockShift <= block_shift <= kMaxBlockShift.
  explicit ChunkEncoder(int block_shift = kDefaultBlockShift);

  // REQUIRES: t_ms greater than the previous sample's: InvalidArgument otherwise.
  // ResourceExhausted once the chunk holds kMaxChunkSamples.
  Status Append(int64_t t_ms, double value);

  // The finished chunk; the encoder is empty again afterwards.
  std::string Finish();
  // A finished chunk of everything appended so far, leaving the encoder open (to query the
  // head). Costs a copy of the encoded bytes and encoding the buffered block.
  std::string Snapshot() const;

  // Asks the CPU to fetch where the next Append writes (a hint; no effect on the result). A
  // caller appending to many encoders in turn calls it a few appends ahead.
  void PrefetchAppend() const {
    __builtin_prefetch(t_ms_.data() + t_ms_.size(), 1);
    __builtin_prefetch(values_.data() + values_.size(), 1);
  }

  size_t num_samples() const { return num_samples_; }
  bool empty() const { return num_samples_ == 0; }
  // Bytes of the blocks encoded so far; the buffered block (under 2^block_shift samples) and
  // the ~8 bytes of header and checksum that Finish adds are not counted.
  size_t encoded_bytes() const { return blocks_.size(); }
  // REQUIRES: !empty().
  int64_t first_t_ms() const { return first_t_ms_; }
  int64_t last_t_ms() const { return last_t_ms_; }

 private:
  std::string Assemble(const std::string& blocks, size_t num_samples) const;

  int block_shift_;
  size_t num_samples_ = 0;
  int64_t first_t_ms_ = 0;
  int64_t last_t_ms_ = 0;
  internal::BlockContext ctx_;
  std::string blocks_;  // encoded full blocks
  std::vector<int64_t> t_ms_;
  std::vector<double> values_;
};

struct DecodeOptions {
  // Off only to exercise the parser itself (fuzzing, corruption tests): a wrong checksum is
  // Corruption before any block is read.
  bool verify_checksum = true;
};

// Iterates over the samples of one chunk, decoding a block at a time. The chunk's bytes must
// outlive the decoder. Corrupt input ends the iteration with a Corruption status, never with
// an out-of-bounds read.
class ChunkDecoder {
 public:
  // Checks the header and the checksum.
  static Result<ChunkDecoder> Open(std::string_view chunk, DecodeOptions options = {});

  // False at the end or on an error; status() tells which.
  bool Next(int64_t* t_ms, double* value) {
    if (pos_ == count_ && !DecodeBlock()) return false;
    *t_ms = t_ms_[pos_];
    *value = values_[pos_];
    ++pos_;
    return true;
  }
  const Status& status() const { return status_; }
  size_t num_samples() const { return info_.num_samples; }
  // Of the blocks decoded so far (all of them once Next returned false with an OK status).
  const ChunkInfo& info() const { return info_; }

 private:
  ChunkDecoder() = default;
  bool DecodeBlock();

  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;  // of the blocks: the checksum follows
  int block_shift_ = kDefaultBlockShift;
  size_t remaining_ = 0;  // samples not yet decoded into the block buffers
  size_t pos_ = 0;
  size_t count_ = 0;
  internal::BlockContext ctx_;
  std::vector<int64_t> t_ms_;
  std::vector<double> values_;
  std::vector<uint64_t> scratch_;
  ChunkInfo info_;
  Status status_;
};

Result<std::vector<Sample>> DecodeChunk(std::string_view chunk, DecodeOptions options = {});
// Decodes the whole chunk and returns what it is made of.
Result<ChunkInfo> InspectChunk(std::string_view chunk, DecodeOptions options = {});

}  // namespace gpuwatch::store
