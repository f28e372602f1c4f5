#include "store/chunkenc.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <utility>

#include "store/internal/coding.h"

namespace gpuwatch::store {
namespace {

using internal::BlockContext;
using internal::kHistory;

// Chunk header byte: the chunk encoding. On-disk: never renumber.
constexpr uint8_t kChunkEncodingBlocked = 1;
constexpr size_t kChecksumBytes = 4;

// Timestamp section modes. On-disk: never renumber.
constexpr uint8_t kTimestampsRegular = 0;  // every delta equals the previous block's last one
constexpr uint8_t kTimestampsCoded = 1;    // an integer block of the deltas

// Integer block header flags: bits 0-1 difference order, bits 2-4 linear predictor order.
constexpr uint8_t kFlagHasFirst = 1 << 5;  // no usable history: the first integer is stored
constexpr uint8_t kFlagAllZero = 1 << 6;   // every residual is zero: no residual bits follow
constexpr uint8_t kFlagReserved = 1 << 7;

constexpr int kMaxDiffOrder = 2;
constexpr int kMaxLpcOrder = 4;
constexpr int kMaxLpcShift = 30;
// A Rice quotient this large is escaped: the unary prefix never exceeds 24 bits, so one
// outlier in a partition of small residuals costs ~30 bits more than its length, not 2^k.
constexpr int kEscapeQuotient = 24;
constexpr int kMaxRiceK = 58;
constexpr int kZeroPartition = 63;    // partition parameter: every residual in it is zero
constexpr int kSparsePartition = 62;  // partition parameter: zero runs and nonzero residuals
constexpr int kPartitionParamBits = 6;
constexpr int kMinPartitionShift = 3;
constexpr int kDefaultPartitionShift = 6;
constexpr int kMinSearchPartitionShift = 4;
constexpr int kMaxSearchPartitionShift = 8;

// Decimal exponents whose power of ten is an exact double: with |m| < 2^53 the division
// m / 10^e is then correctly rounded, so the decoder reproduces the encoder's check exactly.
constexpr int kMaxDecimalScale = 18;
constexpr double kPow10[kMaxDecimalScale + 1] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,
                                                 1e7,  1e8,  1e9,  1e10, 1e11, 1e12, 1e13,
                                                 1e14, 1e15, 1e16, 1e17, 1e18};
constexpr double kTwo53 = 9007199254740992.0;

inline uint64_t ZigZag(uint64_t x) {
  return (x << 1) ^ static_cast<uint64_t>(static_cast<int64_t>(x) >> 63);
}
inline uint64_t UnZigZag(uint64_t z) { return (z >> 1) ^ (0 - (z & 1)); }
inline int BitLen(uint64_t x) { return 64 - std::countl_zero(x); }
inline uint64_t Mask(int n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }
inline uint64_t Bits(double v) { return std::bit_cast<uint64_t>(v); }
inline double FromBits(uint64_t b) { return std::bit_cast<double>(b); }

Status Corrupt(const char* what) { return Status::Corruption(std::string("chunk: ") + what); }

// ---------------------------------------------------------------------------------------------
// Byte and bit I/O. Bit streams are LSB-first: the first bit written is bit 0 of byte 0.

using internal::PutVarint;
void PutSignedVarint(std::string* out, uint64_t v) { PutVarint(out, ZigZag(v)); }
void PutFixed64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

class ByteReader {
 public:
  ByteReader(const uint8_t* p, const uint8_t* end) : p_(p), end_(end) {}
  bool Byte(uint8_t* v) {
    if (p_ == end_) return false;
    *v = *p_++;
    return true;
  }
  bool Varint(uint64_t* v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 64 && p_ < end_; shift += 7) {
      const uint8_t b = *p_++;
      if (shift == 63 && b > 1) return false;  // more than 64 bits
      r |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *v = r;
        return true;
      }
    }
    return false;
  }
  bool SignedVarint(uint64_t* v) {
    if (!Varint(v)) return false;
    *v = UnZigZag(*v);
    return true;
  }
  bool Fixed64(uint64_t* v) {
    if (end_ - p_ < 8) return false;
    uint64_t r = 0;
    for (int i = 0; i < 8; ++i) r |= static_cast<uint64_t>(p_[i]) << (8 * i);
    p_ += 8;
    *v = r;
    return true;
  }
  const uint8_t* pos() const { return p_; }
  const uint8_t* end() const { return end_; }
  void set_pos(const uint8_t* p) { p_ = p; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

class BitWriter {
 public:
  explicit BitWriter(std::string* out) : out_(out) {}
  // REQUIRES: n <= 32, v < 2^n.
  void Put(uint64_t v, int n) {
    acc_ |= v << n_;
    n_ += n;
    if (n_ >= 32) {
      const char b[4] = {static_cast<char>(acc_), static_cast<char>(acc_ >> 8),
                         static_cast<char>(acc_ >> 16), static_cast<char>(acc_ >> 24)};
      out_->append(b, 4);
      acc_ >>= 32;
      n_ -= 32;
    }
  }
  // REQUIRES: n <= 64, v < 2^n.
  void PutLong(uint64_t v, int n) {
    if (n > 32) {
      Put(v & 0xffffffffu, 32);
      v >>= 32;
      n -= 32;
    }
    Put(v, n);
  }
  // Pads the last byte with zero bits.
  void Flush() {
    while (n_ > 0) {
      out_->push_back(static_cast<char>(acc_));
      acc_ >>= 8;
      n_ -= 8;
    }
    acc_ = 0;
    n_ = 0;
  }

 private:
  std::string* out_;
  uint64_t acc_ = 0;
  int n_ = 0;
};

// Reads past the end yield zero bits (no out-of-bounds access); overrun() then says so, and
// every loop that reads is bounded by counts checked against the block size, so a corrupt
// stream ends as Corruption after a bounded amount of work.
class BitReader {
 public:
  BitReader(const uint8_t* p, const uint8_t* end) : p_(p), end_(end) {}

  // Afterwards at least 56 bits are available.
  void Refill() {
    if (end_ - p_ >= 8) {
      uint64_t w;
      std::memcpy(&w, p_, 8);
      if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);
      buf_ |= w << avail_;
      p_ += (63 - avail_) >> 3;
      avail_ |= 56;
    } else {
      RefillSlow();
    }
  }
  uint64_t buf() const { return buf_; }
  int avail() const { return avail_; }
  // REQUIRES: n <= avail(), n < 64.
  void Consume(int n) {
    buf_ >>= n;
    avail_ -= n;
  }
  // REQUIRES: n <= 56.
  uint64_t Read(int n) {
    Refill();
    const uint64_t v = buf_ & Mask(n);
    Consume(n);
    return v;
  }
  // REQUIRES: n <= 64.
  uint64_t ReadLong(int n) {
    if (n <= 56) return Read(n);
    const uint64_t lo = Read(32);
    return lo | (Read(n - 32) << 32);
  }
  bool overrun() const { return fabricated_ > avail_; }
  // The first byte after the bits consumed so far (the stream is padded to a byte).
  const uint8_t* end_of_stream() const {
    const int64_t unread_real_bits = static_cast<int64_t>(avail_) - fabricated_;
    return p_ - (unread_real_bits > 0 ? unread_real_bits / 8 : 0);
  }

 private:
  void RefillSlow() {
    while (avail_ <= 56) {
      if (p_ < end_) {
        buf_ |= static_cast<uint64_t>(*p_++) << avail_;
        avail_ += 8;
      } else {
        fabricated_ += 64 - avail_;
        avail_ = 64;
      }
    }
  }

  const uint8_t* p_;
  const uint8_t* end_;
  uint64_t buf_ = 0;
  int avail_ = 0;
  int64_t fabricated_ = 0;  // zero bits supplied past the end
};

// Rice code of z with parameter k: the quotient z >> k in unary (that many zeros, then a
// one), then the k low bits. Escape: 24 zeros, 6 bits of (bit length - 1), the bits below
// the top one.
inline void PutRice(BitWriter* bw, uint64_t z, int k) {
  const uint64_t q = z >> k;
  if (q < kEscapeQuotient) {
    const int n = static_cast<int>(q) + 1 + k;
    if (n <= 32) {
      bw->Put((uint64_t{1} << q) | ((z & Mask(k)) << (q + 1)), n);
    } else {
      bw->Put(uint64_t{1} << q, static_cast<int>(q) + 1);
      bw->PutLong(z & Mask(k), k);
    }
  } else {
    const int len = BitLen(z);
    bw->Put(0, kEscapeQuotient);
    bw->Put(len - 1, 6);
    bw->PutLong(z & Mask(len - 1), len - 1);
  }
}

inline uint64_t RiceBits(uint64_t z, int k) {
  const uint64_t q = z >> k;
  return q < kEscapeQuotient ? q + 1 + k : kEscapeQuotient + 6 + BitLen(z) - 1;
}

uint64_t GetRiceSlow(BitReader* br, int k) {
  br->Refill();
  const uint64_t b = br->buf();
  const int tz = b ? std::countr_zero(b) : 64;
  if (tz >= kEscapeQuotient) {
    br->Consume(kEscapeQuotient);
    const int len = static_cast<int>(br->Read(6)) + 1;
    return (uint64_t{1} << (len - 1)) | br->ReadLong(len - 1);
  }
  br->Consume(tz + 1);
  return (static_cast<uint64_t>(tz) << k) | br->ReadLong(k);
}

inline uint64_t GetRice(BitReader* br, int k) {
  br->Refill();
  const uint64_t b = br->buf();
  const int tz = b ? std::countr_zero(b) : 64;
  if (tz < kEscapeQuotient && tz + 1 + k < br->avail()) {
    br->Consume(tz + 1 + k);
    return (static_cast<uint64_t>(tz) << k) | ((b >> (tz + 1)) & Mask(k));
  }
  return GetRiceSlow(br, k);
}

// ---------------------------------------------------------------------------------------------
// Integer blocks: x[i] predicted from the previous integers. With y the d-th difference of x
// (d in 0..2), pred(y[i]) = bias + (sum_j c[j] * (y[i-1-j] - bias)) >> shift, and the zigzag
// residuals y[i] - pred are coded per partition: Rice, all-zero, or sparse (zero runs and the
// nonzero residuals). All arithmetic wraps modulo 2^64, so any int64 sequence round-trips; a
// prediction only has to be good, not exact.

struct Predictor {
  int d = 0;
  int p = 0;
  int shift = 0;
  int64_t c[kMaxLpcOrder] = {};
  uint64_t bias = 0;
};

// at points to y[i]; at[-1], at[-2], ... are the values before it.
template <int P>
inline uint64_t Predict(const Predictor& pr, const uint64_t* at) {
  uint64_t acc = 0;
  for (int j = 0; j < P; ++j) acc += static_cast<uint64_t>(pr.c[j]) * (at[-1 - j] - pr.bias);
  return pr.bias + static_cast<uint64_t>(static_cast<int64_t>(acc) >> pr.shift);
}

inline uint64_t PredictAny(const Predictor& pr, const uint64_t* at) {
  switch (pr.p) {
    case 0:
      return pr.bias;
    case 1:
      return Predict<1>(pr, at);
    case 2:
      return Predict<2>(pr, at);
    case 3:
      return Predict<3>(pr, at);
    default:
      return Predict<4>(pr, at);
  }
}

// Per-thread buffers: the head holds one encoder per series, so they must not each own these.
struct Scratch {
  std::vector<uint64_t> x;  // kHistory history entries, then the block's integers
  std::vector<uint64_t> y[kMaxDiffOrder + 1];
  std::vector<uint64_t> z;  // zigzag residuals
  std::vector<uint64_t> ints;
  std::vector<uint32_t> exceptions;
  std::string int_bytes;
  std::string xor_bytes;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Sum over i in [from, n) of the bit length of zigzag(y[i] - pred(i)): a cheap stand-in for
// the Rice cost when comparing predictors.
template <int P>
uint64_t ResidualProxy(const Predictor& pr, const uint64_t* y, size_t from, size_t n) {
  uint64_t bits = 0;
  for (size_t i = from; i < n; ++i) bits += BitLen(ZigZag(y[i] - Predict<P>(pr, y + i)));
  return bits;
}

uint64_t ResidualProxyAny(const Predictor& pr, const uint64_t* y, size_t from, size_t n) {
  switch (pr.p) {
    case 0:
      return ResidualProxy<0>(pr, y, from, n);
    case 1:
      return ResidualProxy<1>(pr, y, from, n);
    case 2:
      return ResidualProxy<2>(pr, y, from, n);
    case 3:
      return ResidualProxy<3>(pr, y, from, n);
    default:
      return ResidualProxy<4>(pr, y, from, n);
  }
}

// Fits pred = mean + sum a[j] (y[i-1-j] - mean) by the autocorrelation method (Levinson-
// Durbin) and quantizes the coefficients. False when the data carry no usable correlation.
bool FitLinearPredictor(const uint64_t* y, size_t from, size_t n, int order, double mean,
                        Predictor* pr) {
  const size_t m = n - from;
  if (m < static_cast<size_t>(4 * order + 8)) return false;
  double r[kMaxLpcOrder + 1] = {};
  for (size_t i = from; i < n; ++i) {
    const double yi = static_cast<double>(static_cast<int64_t>(y[i])) - mean;
    for (int l = 0; l <= order && i >= from + l; ++l) {
      r[l] += yi * (static_cast<double>(static_cast<int64_t>(y[i - l])) - mean);
    }
  }
  if (!(r[0] > 0) || !std::isfinite(r[0])) return false;
  double a[kMaxLpcOrder + 1] = {};
  double err = r[0];
  for (int i = 1; i <= order; ++i) {
    double acc = r[i];
    for (int j = 1; j < i; ++j) acc -= a[j] * r[i - j];
    const double k = acc / err;
    double prev[kMaxLpcOrder + 1];
    std::copy(a, a + kMaxLpcOrder + 1, prev);
    a[i] = k;
    for (int j = 1; j < i; ++j) a[j] = prev[j] - k * prev[i - j];
    err *= 1 - k * k;
    if (!(err > 0)) return false;
  }
  double amax = 0;
  for (int j = 1; j <= order; ++j) amax = std::max(amax, std::fabs(a[j]));
  if (!(amax > 1e-4) || amax > 64) return false;
  // 12 significant bits for the largest coefficient.
  pr->shift = std::clamp(11 - std::ilogb(amax), 0, 14);
  pr->p = order;
  for (int j = 0; j < order; ++j) pr->c[j] = std::llround(std::ldexp(a[j + 1], pr->shift));
  return true;
}

uint64_t RiceCost(const uint64_t* z, size_t len, int k) {
  uint64_t c = 0;
  for (size_t i = 0; i < len; ++i) c += RiceBits(z[i], k);
  return c;
}

inline int GammaBits(uint64_t v) { return 2 * BitLen(v) - 1; }

// Elias gamma code of v >= 1, v < 2^16: (bit length - 1) zeros, a one, the bits below the top.
inline void PutGamma(BitWriter* bw, uint64_t v) {
  const int len = BitLen(v);
  bw->Put((uint64_t{1} << (len - 1)) | ((v & Mask(len - 1)) << len), 2 * len - 1);
}

// False on a code longer than any value below 2^16 has.
inline bool GetGamma(BitReader* br, uint64_t* v) {
  br->Refill();
  const uint64_t b = br->buf();
  const int tz = b ? std::countr_zero(b) : 64;
  if (tz > 15) return false;
  br->Consume(tz + 1);
  *v = (uint64_t{1} << tz) | br->Read(tz);
  return true;
}

struct PartitionCode {
  int param = kZeroPartition;  // Rice k, kZeroPartition or kSparsePartition
  int sparse_k = 0;            // Rice k of a sparse partition's values
  uint64_t bits = 0;
};

// The cheapest code for one partition of zigzag residuals.
PartitionCode ChoosePartitionCode(const uint64_t* z, size_t len) {
  PartitionCode pc;
  double sum = 0;
  size_t nonzero = 0;
  for (size_t i = 0; i < len; ++i) {
    sum += static_cast<double>(z[i]);
    nonzero += z[i] != 0;
  }
  if (nonzero == 0) {
    pc.bits = kPartitionParamBits;
    return pc;
  }
  // Rice cost is near-unimodal in k: walk from the mean's guess. One outlier inflates the
  // mean, so the walk downwards matters (a missed scrape among regular timestamps).
  const double mean = sum / static_cast<double>(len);
  int k = mean < 2 ? 0 : std::min(kMaxRiceK, std::ilogb(mean));
  uint64_t cost = RiceCost(z, len, k);
  const int guess = k;
  while (k > 0) {
    const uint64_t c = RiceCost(z, len, k - 1);
    if (c >= cost) break;
    cost = c;
    --k;
  }
  while (k == guess && k < kMaxRiceK) {
    const uint64_t c = RiceCost(z, len, k + 1);
    if (c >= cost) break;
    cost = c;
    ++k;
  }
  pc.param = k;
  pc.bits = kPartitionParamBits + cost;
  // Sparse: only the nonzero residuals, each after the length of the zero run before it.
  if (4 * nonzero <= len) {
    const double nz_mean = (sum - static_cast<double>(nonzero)) / static_cast<double>(nonzero);
    const int sk_guess = nz_mean < 2 ? 0 : std::min(kMaxRiceK, std::ilogb(nz_mean));
    for (int sk = std::max(0, sk_guess - 1); sk <= std::min(kMaxRiceK, sk_guess + 1); ++sk) {
      uint64_t c = kPartitionParamBits + GammaBits(nonzero) + kPartitionParamBits;
      size_t run = 0;
      for (size_t i = 0; i < len; ++i) {
        if (z[i] == 0) {
          ++run;
          continue;
        }
        c += GammaBits(run + 1) + RiceBits(z[i] - 1, sk);
        run = 0;
      }
      if (c < pc.bits) {
        pc.param = kSparsePartition;
        pc.sparse_k = sk;
        pc.bits = c;
      }
    }
  }
  return pc;
}

void PutPartition(BitWriter* bw, const uint64_t* z, size_t len, const PartitionCode& pc) {
  bw->Put(pc.param, kPartitionParamBits);
  if (pc.param == kZeroPartition) return;
  if (pc.param == kSparsePartition) {
    size_t nonzero = 0;
    for (size_t i = 0; i < len; ++i) nonzero += z[i] != 0;
    PutGamma(bw, nonzero);
    bw->Put(pc.sparse_k, kPartitionParamBits);
    size_t run = 0;
    for (size_t i = 0; i < len; ++i) {
      if (z[i] == 0) {
        ++run;
        continue;
      }
      PutGamma(bw, run + 1);
      PutRice(bw, z[i] - 1, pc.sparse_k);
      run = 0;
    }
    return;
  }
  for (size_t i = 0; i < len; ++i) PutRice(bw, z[i], pc.param);
}

Status GetPartition(BitReader* br, uint64_t* z, size_t len) {
  const int param = static_cast<int>(br->Read(kPartitionParamBits));
  if (param == kZeroPartition) {
    std::fill(z, z + len, 0);
  } else if (param == kSparsePartition) {
    std::fill(z, z + len, 0);
    uint64_t nonzero;
    if (!GetGamma(br, &nonzero) || nonzero > len) return Corrupt("bad sparse partition");
    const int k = static_cast<int>(br->Read(kPartitionParamBits));
    if (k > kMaxRiceK) return Corrupt("bad Rice parameter");
    size_t pos = 0;
    for (uint64_t j = 0; j < nonzero; ++j) {
      uint64_t run;
      if (!GetGamma(br, &run) || run - 1 >= len - pos) return Corrupt("bad sparse partition");
      pos += run - 1;
      z[pos++] = GetRice(br, k) + 1;
    }
  } else if (param <= kMaxRiceK) {
    for (size_t i = 0; i < len; ++i) z[i] = GetRice(br, param);
  } else {
    return Corrupt("bad Rice parameter");
  }
  if (br->overrun()) return Corrupt("truncated residuals");
  return Status::Ok();
}

// x: n >= 1 integers. hist: the kHistory integers before x[0], or null when there are none
// (then x[0] is stored and the history is taken as x[0] repeated).
void EncodeInts(const uint64_t* x, size_t n, const uint64_t* hist, Scratch* s, std::string* out) {
  const bool has_first = hist == nullptr;
  const size_t from = has_first ? 1 : 0;
  s->x.resize(kHistory + n);
  uint64_t* X = s->x.data() + kHistory;
  for (int j = 0; j < kHistory; ++j) X[j - kHistory] = has_first ? x[0] : hist[j];
  std::copy(x, x + n, X);

  // y[d][i] for i in [from - kMaxLpcOrder, n), addressed through Y[d] = base + kMaxLpcOrder.
  uint64_t* Y[kMaxDiffOrder + 1];
  for (int d = 0; d <= kMaxDiffOrder; ++d) {
    s->y[d].resize(n + kMaxLpcOrder);
    Y[d] = s->y[d].data() + kMaxLpcOrder;
  }
  const ptrdiff_t lo = static_cast<ptrdiff_t>(from) - kMaxLpcOrder;
  for (ptrdiff_t i = lo; i < static_cast<ptrdiff_t>(n); ++i) {
    Y[0][i] = X[i];
    Y[1][i] = X[i] - X[i - 1];
    Y[2][i] = X[i] - 2 * X[i - 1] + X[i - 2];
  }

  Predictor best;
  bool all_zero = n == from;
  uint64_t best_proxy = ~uint64_t{0};
  double means[kMaxDiffOrder + 1] = {};
  for (int d = 0; d <= kMaxDiffOrder && !all_zero; ++d) {
    const uint64_t* y = Y[d];
    // Boyer-Moore majority vote: the bias of sparse series (steps, rare increments) is their
    // common value, not their mean.
    uint64_t cand = y[from];
    size_t votes = 0;
    double sum = 0;
    for (size_t i = from; i < n; ++i) {
      if (votes == 0) cand = y[i];
      votes += y[i] == cand ? 1 : size_t{0} - 1;
      sum += static_cast<double>(static_cast<int64_t>(y[i]));
    }
    size_t count = 0;
    for (size_t i = from; i < n; ++i) count += y[i] == cand;
    Predictor pr;
    pr.d = d;
    const double mean = sum / static_cast<double>(n - from);
    means[d] = mean;
    if (count == n - from) {
      pr.bias = cand;
      best = pr;
      all_zero = true;
      break;
    }
    pr.bias = 2 * count > n - from ? cand
                                   : static_cast<uint64_t>(static_cast<int64_t>(
                                         std::llround(std::clamp(mean, -9.2e18, 9.2e18))));
    const uint64_t proxy = ResidualProxy<0>(pr, y, from, n);
    if (proxy < best_proxy) {
      best_proxy = proxy;
      best = pr;
    }
  }

  if (!all_zero && best_proxy > 2 * (n - from)) {
    // Noisy data: a linear predictor on the chosen difference usually wins a bit or two.
    // Orders 3-4 and fitting other difference orders as well gain < 0.3% on the reference
    // dataset for 25-40% of the encode speed (bench/store/RESULTS.md).
    const int d = best.d;
    for (int order = 1; order <= 2; ++order) {
      Predictor pr;
      pr.d = d;
      pr.bias = static_cast<uint64_t>(
          static_cast<int64_t>(std::llround(std::clamp(means[d], -9.2e18, 9.2e18))));
      if (!FitLinearPredictor(Y[d], from, n, order, means[d], &pr)) continue;
      const uint64_t proxy = ResidualProxyAny(pr, Y[d], from, n);
      // The coefficients cost a few bytes of header.
      if (proxy + 8 * (2 + 3 * order) < best_proxy) {
        best_proxy = proxy;
        best = pr;
      }
    }
  }

  const size_t m = n - from;
  s->z.resize(m);
  if (!all_zero) {
    const uint64_t* y = Y[best.d];
    uint64_t any = 0;
    for (size_t i = from; i < n; ++i) {
      const uint64_t z = ZigZag(y[i] - PredictAny(best, y + i));
      s->z[i - from] = z;
      any |= z;
    }
    all_zero = any == 0;
  }

  uint8_t flags = static_cast<uint8_t>(best.d | (best.p << 2));
  if (has_first) flags |= kFlagHasFirst;
  if (all_zero) flags |= kFlagAllZero;
  out->push_back(static_cast<char>(flags));
  if (best.p > 0) {
    out->push_back(static_cast<char>(best.shift));
    for (int j = 0; j < best.p; ++j) PutSignedVarint(out, static_cast<uint64_t>(best.c[j]));
  }
  PutSignedVarint(out, best.bias);
  if (has_first) PutSignedVarint(out, x[0]);
  if (all_zero) return;

  // Partition size by data (as FLAC does): small partitions follow bursts, large ones cost less
  // side information. The cost is near-unimodal in the size: walk from the default.
  auto partitioned_bits = [&](int shift) {
    uint64_t bits = 0;
    const size_t part = size_t{1} << shift;
    for (size_t a = 0; a < m; a += part) {
      bits += ChoosePartitionCode(&s->z[a], std::min(part, m - a)).bits;
    }
    return bits;
  };
  int part_shift = kDefaultPartitionShift;
  uint64_t bits = partitioned_bits(part_shift);
  for (int step : {-1, 1}) {
    while (part_shift + step >= kMinSearchPartitionShift &&
           part_shift + step <= kMaxSearchPartitionShift) {
      const uint64_t b = partitioned_bits(part_shift + step);
      if (b >= bits) break;
      bits = b;
      part_shift += step;
    }
    if (part_shift != kDefaultPartitionShift) break;
  }
  out->push_back(static_cast<char>(part_shift));
  BitWriter bw(out);
  const size_t part = size_t{1} << part_shift;
  for (size_t a = 0; a < m; a += part) {
    const size_t len = std::min(part, m - a);
    PutPartition(&bw, &s->z[a], len, ChoosePartitionCode(&s->z[a], len));
  }
  bw.Flush();
}

template <int D, int P>
void Reconstruct(const Predictor& pr, const uint64_t* z, size_t m, uint64_t* y, uint64_t* x) {
  uint64_t x1 = x[-1];
  uint64_t x2 = x[-2];
  for (size_t i = 0; i < m; ++i) {
    const uint64_t yi = Predict<P>(pr, y + i) + UnZigZag(z[i]);
    y[i] = yi;
    uint64_t xi;
    if constexpr (D == 0) {
      xi = yi;
    } else if constexpr (D == 1) {
      xi = x1 + yi;
    } else {
      xi = 2 * x1 - x2 + yi;
    }
    x[i] = xi;
    x2 = x1;
    x1 = xi;
  }
}

template <int D>
void ReconstructP(const Predictor& pr, const uint64_t* z, size_t m, uint64_t* y, uint64_t* x) {
  switch (pr.p) {
    case 0:
      return Reconstruct<D, 0>(pr, z, m, y, x);
    case 1:
      return Reconstruct<D, 1>(pr, z, m, y, x);
    case 2:
      return Reconstruct<D, 2>(pr, z, m, y, x);
    case 3:
      return Reconstruct<D, 3>(pr, z, m, y, x);
    default:
      return Reconstruct<D, 4>(pr, z, m, y, x);
  }
}

// Decodes n integers into x; the inverse of EncodeInts. s needs no particular contents.
Status DecodeInts(ByteReader* in, size_t n, const uint64_t* hist, Scratch* s, uint64_t* x,
                  Predictor* used) {
  uint8_t flags;
  if (!in->Byte(&flags)) return Corrupt("truncated integer block");
  Predictor pr;
  pr.d = flags & 3;
  pr.p = (flags >> 2) & 7;
  const bool has_first = flags & kFlagHasFirst;
  const bool all_zero = flags & kFlagAllZero;
  if (pr.d > kMaxDiffOrder || pr.p > kMaxLpcOrder || (flags & kFlagReserved)) {
    return Corrupt("bad integer block flags");
  }
  if (has_first != (hist == nullptr)) return Corrupt("integer block history mismatch");
  if (pr.p > 0) {
    uint8_t shift;
    if (!in->Byte(&shift) || shift > kMaxLpcShift) return Corrupt("bad predictor shift");
    pr.shift = shift;
    for (int j = 0; j < pr.p; ++j) {
      uint64_t c;
      if (!in->SignedVarint(&c)) return Corrupt("truncated predictor");
      pr.c[j] = static_cast<int64_t>(c);
    }
  }
  uint64_t first = 0;
  if (!in->SignedVarint(&pr.bias)) return Corrupt("truncated integer block");
  if (has_first && !in->SignedVarint(&first)) return Corrupt("truncated integer block");
  *used = pr;

  const size_t from = has_first ? 1 : 0;
  const size_t m = n - from;
  s->z.resize(m);
  if (all_zero) {
    std::fill(s->z.begin(), s->z.end(), 0);
  } else {
    uint8_t part_shift;
    if (!in->Byte(&part_shift) || part_shift < kMinPartitionShift || part_shift > kMaxBlockShift) {
      return Corrupt("bad partition size");
    }
    BitReader br(in->pos(), in->end());
    const size_t part = size_t{1} << part_shift;
    uint64_t* z = s->z.data();
    for (size_t a = 0; a < m; a += part) {
      GW_RETURN_IF_ERROR(GetPartition(&br, z + a, std::min(part, m - a)));
    }
    if (br.overrun()) return Corrupt("truncated residuals");
    in->set_pos(br.end_of_stream());
  }

  // History of x, then the y history the predictor reads, as in EncodeInts.
  s->x.resize(kHistory + n);
  uint64_t* X = s->x.data() + kHistory;
  for (int j = 0; j < kHistory; ++j) X[j - kHistory] = has_first ? first : hist[j];
  if (has_first) X[0] = first;
  s->y[0].resize(n + kMaxLpcOrder);
  uint64_t* y = s->y[0].data() + kMaxLpcOrder;
  for (ptrdiff_t i = static_cast<ptrdiff_t>(from) - kMaxLpcOrder; i < static_cast<ptrdiff_t>(from);
       ++i) {
    y[i] = pr.d == 0 ? X[i] : pr.d == 1 ? X[i] - X[i - 1] : X[i] - 2 * X[i - 1] + X[i - 2];
  }
  switch (pr.d) {
    case 0:
      ReconstructP<0>(pr, s->z.data(), m, y + from, X + from);
      break;
    case 1:
      ReconstructP<1>(pr, s->z.data(), m, y + from, X + from);
      break;
    default:
      ReconstructP<2>(pr, s->z.data(), m, y + from, X + from);
      break;
  }
  std::copy(X, X + n, x);
  return Status::Ok();
}

// Shifts the last values of seq (n of them) into hist, oldest first.
template <typename T>
void PushHistory(std::array<T, kHistory>* hist, const T* seq, size_t n) {
  if (n >= kHistory) {
    std::copy(seq + n - kHistory, seq + n, hist->begin());
    return;
  }
  std::copy(hist->begin() + n, hist->end(), hist->begin());
  std::copy(seq, seq + n, hist->end() - n);
}

// ---------------------------------------------------------------------------------------------
// Values.

// m with m / 10^scale == v bit for bit (m == v for scale 0), |m| <= 2^53.
inline bool ToScaled(double v, int scale, int64_t* m) {
  if (scale == 0) {
    if (!(v >= -kTwo53 && v <= kTwo53)) return false;
    const int64_t r = static_cast<int64_t>(v);
    if (Bits(static_cast<double>(r)) != Bits(v)) return false;  // fractions and -0.0
    *m = r;
    return true;
  }
  const double s = v * kPow10[scale];
  if (!(s > -kTwo53 && s < kTwo53)) return false;
  const int64_t r = std::llrint(s);
  if (Bits(static_cast<double>(r) / kPow10[scale]) != Bits(v)) return false;
  *m = r;
  return true;
}

// The integer history of a block coded at `scale`: the previous block's integers when it was
// coded at the same scale, else its last values converted exactly; false when impossible.
bool IntHistory(const BlockContext& ctx, int scale, uint64_t* hist) {
  if (ctx.first_block) return false;
  if (ctx.int_scale == scale) {
    std::copy(ctx.ints.begin(), ctx.ints.end(), hist);
    return true;
  }
  for (int j = 0; j < kHistory; ++j) {
    int64_t m;
    if (!ToScaled(ctx.values[j], scale, &m)) return false;
    hist[j] = static_cast<uint64_t>(m);
  }
  return true;
}

// The smallest decimal scale that fits every value but at most max_exceptions of them.
bool FindScale(const double* v, size_t n, size_t max_exceptions, int* scale) {
  int e = 0;
  size_t misfits = 0;
  int64_t m;
  for (size_t i = 0; i < n; ++i) {
    if (ToScaled(v[i], e, &m)) continue;
    int e2 = e + 1;
    while (e2 <= kMaxDecimalScale && !ToScaled(v[i], e2, &m)) ++e2;
    if (e2 > kMaxDecimalScale) {
      if (++misfits > max_exceptions) return false;
    } else {
      e = e2;
    }
  }
  *scale = e;
  return true;
}

void EncodeXor(const double* v, size_t n, const BlockContext& ctx, std::string* out) {
  BitWriter bw(out);
  size_t i = 0;
  uint64_t prev;
  if (ctx.first_block) {
    prev = Bits(v[0]);
    bw.PutLong(prev, 64);
    i = 1;
  } else {
    prev = Bits(ctx.values[kHistory - 1]);
  }
  int lead = -1;  // the current window of meaningful bits; none yet
  int trail = 0;
  for (; i < n; ++i) {
    const uint64_t cur = Bits(v[i]);
    const uint64_t x = cur ^ prev;
    prev = cur;
    if (x == 0) {
      bw.Put(0, 1);
      continue;
    }
    const int lz = std::countl_zero(x);
    const int tz = std::countr_zero(x);
    if (lead >= 0 && lz >= lead && tz >= trail) {
      bw.Put(0b01, 2);  // '1' then '0': inside the window
      bw.PutLong(x >> trail, 64 - lead - trail);
    } else {
      const int sig = 64 - lz - tz;
      bw.Put(0b11, 2);
      bw.Put(static_cast<uint64_t>(lz) | (static_cast<uint64_t>(sig - 1) << 6), 12);
      bw.PutLong(x >> tz, sig);
      lead = lz;
      trail = tz;
    }
  }
  bw.Flush();
}

Status DecodeXor(ByteReader* in, size_t n, const BlockContext& ctx, double* v) {
  BitReader br(in->pos(), in->end());
  size_t i = 0;
  uint64_t prev;
  if (ctx.first_block) {
    prev = br.ReadLong(64);
    v[0] = FromBits(prev);
    i = 1;
  } else {
    prev = Bits(ctx.values[kHistory - 1]);
  }
  int lead = -1;
  int trail = 0;
  for (; i < n; ++i) {
    br.Refill();
    const uint64_t b = br.buf();
    if (!(b & 1)) {
      br.Consume(1);
    } else if (!(b & 2)) {
      br.Consume(2);
      if (lead < 0) return Corrupt("XOR window before any");
      prev ^= br.ReadLong(64 - lead - trail) << trail;
    } else {
      br.Consume(2);
      const int lz = static_cast<int>(br.Read(6));
      const int sig = static_cast<int>(br.Read(6)) + 1;
      if (lz + sig > 64) return Corrupt("bad XOR window");
      lead = lz;
      trail = 64 - lz - sig;
      prev ^= br.ReadLong(sig) << trail;
    }
    v[i] = FromBits(prev);
    if (br.overrun()) return Corrupt("truncated XOR block");
  }
  if (br.overrun()) return Corrupt("truncated XOR block");
  in->set_pos(br.end_of_stream());
  return Status::Ok();
}

void EncodeValues(const double* v, size_t n, BlockContext* ctx, Scratch* s, std::string* out) {
  const uint64_t first = Bits(v[0]);
  bool constant = true;
  for (size_t i = 1; i < n && constant; ++i) constant = Bits(v[i]) == first;
  if (constant) {
    if (!ctx->first_block && Bits(ctx->values[kHistory - 1]) == first) {
      out->push_back(static_cast<char>(ValueEncoding::kRepeat));
    } else {
      out->push_back(static_cast<char>(ValueEncoding::kConstant));
      PutFixed64(out, first);
    }
    PushHistory(&ctx->values, v, n);
    ctx->int_scale = -1;
    return;
  }

  // Integers or fixed decimals, a few misfits (NaN stale markers, a stray fraction) stored raw.
  const size_t max_exceptions = n / 16;
  int scale = 0;
  bool use_ints = FindScale(v, n, max_exceptions, &scale);
  uint64_t hist_buf[kHistory];
  const bool have_hist = use_ints && IntHistory(*ctx, scale, hist_buf);
  if (use_ints) {
    s->ints.resize(n);
    s->exceptions.clear();
    size_t first_fit = 0;
    int64_t m = 0;
    while (first_fit < n && !ToScaled(v[first_fit], scale, &m)) ++first_fit;
    // A misfit's placeholder repeats the previous integer, which predicts well.
    uint64_t prev = have_hist ? hist_buf[kHistory - 1] : static_cast<uint64_t>(m);
    for (size_t i = 0; i < n; ++i) {
      if (ToScaled(v[i], scale, &m)) {
        prev = static_cast<uint64_t>(m);
      } else {
        s->exceptions.push_back(static_cast<uint32_t>(i));
      }
      s->ints[i] = prev;
    }
    use_ints = first_fit < n && s->exceptions.size() <= max_exceptions;
  }

  std::string& ib = s->int_bytes;
  ib.clear();
  if (use_ints) {
    ib.push_back(static_cast<char>(scale == 0 ? ValueEncoding::kInteger : ValueEncoding::kDecimal));
    if (scale > 0) ib.push_back(static_cast<char>(scale));
    EncodeInts(s->ints.data(), n, have_hist ? hist_buf : nullptr, s, &ib);
    PutVarint(&ib, s->exceptions.size());
    uint32_t last = 0;
    for (size_t j = 0; j < s->exceptions.size(); ++j) {
      const uint32_t pos = s->exceptions[j];
      PutVarint(&ib, j == 0 ? pos : pos - last - 1);
      PutFixed64(&ib, Bits(v[pos]));
      last = pos;
    }
  }
  // XOR only wins on noisy doubles with long decimal expansions; skip it for cheap integers.
  if (!use_ints || ib.size() * 8 > 24 * n) {
    std::string& xb = s->xor_bytes;
    xb.clear();
    xb.push_back(static_cast<char>(ValueEncoding::kXor));
    EncodeXor(v, n, *ctx, &xb);
    if (!use_ints || xb.size() < ib.size()) {
      out->append(xb);
      PushHistory(&ctx->values, v, n);
      ctx->int_scale = -1;
      return;
    }
  }
  out->append(ib);
  // As the decoder will see it: the history (or the first integer repeated), then the block.
  for (int j = 0; j < kHistory; ++j) ctx->ints[j] = have_hist ? hist_buf[j] : s->ints[0];
  PushHistory(&ctx->ints, s->ints.data(), n);
  ctx->int_scale = scale;
  PushHistory(&ctx->values, v, n);
}

Status DecodeValues(ByteReader* in, size_t n, BlockContext* ctx, Scratch* s, double* v,
                    ChunkInfo* info) {
  uint8_t kind;
  if (!in->Byte(&kind)) return Corrupt("truncated value section");
  if (kind >= kNumValueEncodings) return Corrupt("unknown value encoding");
  ++info->value_blocks[kind];
  switch (static_cast<ValueEncoding>(kind)) {
    case ValueEncoding::kRepeat:
      if (ctx->first_block) return Corrupt("repeat in the first block");
      std::fill(v, v + n, ctx->values[kHistory - 1]);
      ctx->int_scale = -1;
      break;
    case ValueEncoding::kConstant: {
      uint64_t b;
      if (!in->Fixed64(&b)) return Corrupt("truncated constant");
      std::fill(v, v + n, FromBits(b));
      ctx->int_scale = -1;
      break;
    }
    case ValueEncoding::kInteger:
    case ValueEncoding::kDecimal: {
      int scale = 0;
      if (kind == static_cast<uint8_t>(ValueEncoding::kDecimal)) {
        uint8_t e;
        if (!in->Byte(&e) || e < 1 || e > kMaxDecimalScale) return Corrupt("bad decimal scale");
        scale = e;
      }
      uint64_t hist_buf[kHistory];
      const bool have_hist = IntHistory(*ctx, scale, hist_buf);
      s->ints.resize(n);
      Predictor pr;
      GW_RETURN_IF_ERROR(DecodeInts(in, n, have_hist ? hist_buf : nullptr, s, s->ints.data(), &pr));
      ++info->int_diff_order_blocks[pr.d];
      if (pr.p > 0) ++info->int_lpc_blocks;
      const uint64_t* ints = s->ints.data();
      if (scale == 0) {
        for (size_t i = 0; i < n; ++i) v[i] = static_cast<double>(static_cast<int64_t>(ints[i]));
      } else {
        const double div = kPow10[scale];
        for (size_t i = 0; i < n; ++i)
          v[i] = static_cast<double>(static_cast<int64_t>(ints[i])) / div;
      }
      uint64_t count;
      if (!in->Varint(&count) || count > n) return Corrupt("bad exception count");
      uint64_t pos = 0;
      for (uint64_t j = 0; j < count; ++j) {
        uint64_t gap, bits;
        if (!in->Varint(&gap) || !in->Fixed64(&bits)) return Corrupt("truncated exceptions");
        pos = j == 0 ? gap : pos + 1 + gap;
        if (gap >= n || pos >= n) return Corrupt("exception out of range");
        v[pos] = FromBits(bits);
      }
      info->exceptions += static_cast<uint32_t>(count);
      for (int j = 0; j < kHistory; ++j) ctx->ints[j] = have_hist ? hist_buf[j] : ints[0];
      PushHistory(&ctx->ints, ints, n);
      ctx->int_scale = scale;
      break;
    }
    case ValueEncoding::kXor:
      GW_RETURN_IF_ERROR(DecodeXor(in, n, *ctx, v));
      ctx->int_scale = -1;
      break;
  }
  PushHistory(&ctx->values, v, n);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Timestamps: the deltas to the previous sample (the first sample's "delta" is its timestamp)
// as an integer block, or one byte when every delta repeats the previous block's last one.

void EncodeTimestamps(const int64_t* t, size_t n, BlockContext* ctx, Scratch* s, std::string* out) {
  s->ints.resize(n);
  uint64_t prev = ctx->first_block ? 0 : static_cast<uint64_t>(ctx->last_t_ms);
  bool regular = !ctx->first_block;
  const uint64_t last_delta = ctx->t_deltas[kHistory - 1];
  for (size_t i = 0; i < n; ++i) {
    const uint64_t delta = static_cast<uint64_t>(t[i]) - prev;
    s->ints[i] = delta;
    regular &= delta == last_delta;
    prev = static_cast<uint64_t>(t[i]);
  }
  if (regular) {
    out->push_back(static_cast<char>(kTimestampsRegular));
  } else {
    out->push_back(static_cast<char>(kTimestampsCoded));
    EncodeInts(s->ints.data(), n, ctx->first_block ? nullptr : ctx->t_deltas.data(), s, out);
  }
  if (ctx->first_block) ctx->t_deltas.fill(s->ints[0]);
  PushHistory(&ctx->t_deltas, s->ints.data(), n);
  ctx->last_t_ms = t[n - 1];
}

Status DecodeTimestamps(ByteReader* in, size_t n, BlockContext* ctx, Scratch* s, int64_t* t,
                        ChunkInfo* info) {
  uint8_t mode;
  if (!in->Byte(&mode)) return Corrupt("truncated timestamps");
  s->ints.resize(n);
  uint64_t* deltas = s->ints.data();
  if (mode == kTimestampsRegular) {
    if (ctx->first_block) return Corrupt("regular timestamps in the first block");
    std::fill(deltas, deltas + n, ctx->t_deltas[kHistory - 1]);
    ++info->regular_timestamp_blocks;
  } else if (mode == kTimestampsCoded) {
    Predictor pr;
    GW_RETURN_IF_ERROR(
        DecodeInts(in, n, ctx->first_block ? nullptr : ctx->t_deltas.data(), s, deltas, &pr));
  } else {
    return Corrupt("unknown timestamp mode");
  }
  uint64_t prev = ctx->first_block ? 0 : static_cast<uint64_t>(ctx->last_t_ms);
  for (size_t i = 0; i < n; ++i) {
    const int64_t ti = static_cast<int64_t>(prev + deltas[i]);
    if (!(ctx->first_block && i == 0) && ti <= static_cast<int64_t>(prev)) {
      return Corrupt("timestamps not increasing");
    }
    t[i] = ti;
    prev = static_cast<uint64_t>(ti);
  }
  if (ctx->first_block) ctx->t_deltas.fill(deltas[0]);
  PushHistory(&ctx->t_deltas, deltas, n);
  ctx->last_t_ms = t[n - 1];
  return Status::Ok();
}

void EncodeBlock(const int64_t* t, const double* v, size_t n, BlockContext* ctx, std::string* out) {
  Scratch& s = ThreadScratch();
  EncodeTimestamps(t, n, ctx, &s, out);
  EncodeValues(v, n, ctx, &s, out);
  ctx->first_block = false;
}

}  // namespace

std::string_view ValueEncodingName(ValueEncoding encoding) {
  switch (encoding) {
    case ValueEncoding::kRepeat:
      return "repeat";
    case ValueEncoding::kConstant:
      return "constant";
    case ValueEncoding::kInteger:
      return "integer";
    case ValueEncoding::kDecimal:
      return "decimal";
    case ValueEncoding::kXor:
      return "xor";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------------

ChunkEncoder::ChunkEncoder(int block_shift)
    : block_shift_(std::clamp(block_shift, kMinBlockShift, kMaxBlockShift)) {}

Status ChunkEncoder::Append(int64_t t_ms, double value) {
  if (num_samples_ >= kMaxChunkSamples) return Status::ResourceExhausted("chunk is full");
  if (num_samples_ > 0 && t_ms <= last_t_ms_) {
    return Status::InvalidArgument("chunk: timestamp " + std::to_string(t_ms) + " not after " +
                                   std::to_string(last_t_ms_));
  }
  // No reserve for a whole block: with a million series of one sample each, 8 KiB reserved per
  // open chunk was 9 GB (issue 17, D6). The buffers grow by doubling and keep their capacity
  // from block to block.
  if (num_samples_ == 0) first_t_ms_ = t_ms;
  last_t_ms_ = t_ms;
  t_ms_.push_back(t_ms);
  values_.push_back(value);
  ++num_samples_;
  if (t_ms_.size() == size_t{1} << block_shift_) {
    EncodeBlock(t_ms_.data(), values_.data(), t_ms_.size(), &ctx_, &blocks_);
    t_ms_.clear();
    values_.clear();
  }
  return Status::Ok();
}

std::string ChunkEncoder::Assemble(const std::string& blocks, size_t num_samples) const {
  std::string out;
  out.reserve(blocks.size() + 16);
  out.push_back(static_cast<char>(kChunkEncodingBlocked));
  out.push_back(static_cast<char>(block_shift_));
  PutVarint(&out, num_samples);
  out.append(blocks);
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size())));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(crc >> (8 * i)));
  return out;
}

std::string ChunkEncoder::Finish() {
  if (!t_ms_.empty()) EncodeBlock(t_ms_.data(), values_.data(), t_ms_.size(), &ctx_, &blocks_);
  std::string out = Assemble(blocks_, num_samples_);
  *this = ChunkEncoder(block_shift_);
  return out;
}

std::string ChunkEncoder::Snapshot() const {
  if (t_ms_.empty()) return Assemble(blocks_, num_samples_);
  std::string blocks = blocks_;
  internal::BlockContext ctx = ctx_;
  EncodeBlock(t_ms_.data(), values_.data(), t_ms_.size(), &ctx, &blocks);
  return Assemble(blocks, num_samples_);
}

// ---------------------------------------------------------------------------------------------

Result<ChunkDecoder> ChunkDecoder::Open(std::string_view chunk, DecodeOptions options) {
  const auto* data = reinterpret_cast<const uint8_t*>(chunk.data());
  if (chunk.size() < 3 + kChecksumBytes) return Corrupt("too short");
  const size_t body = chunk.size() - kChecksumBytes;
  if (options.verify_checksum) {
    uint32_t stored = 0;
    for (int i = 0; i < 4; ++i) stored |= static_cast<uint32_t>(data[body + i]) << (8 * i);
    const uint32_t actual = static_cast<uint32_t>(crc32(0, data, static_cast<uInt>(body)));
    if (stored != actual) return Corrupt("checksum mismatch");
  }
  ByteReader in(data, data + body);
  uint8_t encoding, block_shift;
  uint64_t num_samples;
  if (!in.Byte(&encoding) || encoding != kChunkEncodingBlocked) {
    return Corrupt("unknown chunk encoding");
  }
  if (!in.Byte(&block_shift) || block_shift < kMinBlockShift || block_shift > kMaxBlockShift) {
    return Corrupt("bad block size");
  }
  if (!in.Varint(&num_samples) || num_samples > kMaxChunkSamples) {
    return Corrupt("bad sample count");
  }
  ChunkDecoder dec;
  dec.p_ = in.pos();
  dec.end_ = data + body;
  dec.block_shift_ = block_shift;
  dec.remaining_ = num_samples;
  dec.info_.num_samples = num_samples;
  dec.info_.header_bytes = static_cast<size_t>(in.pos() - data) + kChecksumBytes;
  return dec;
}

bool ChunkDecoder::DecodeBlock() {
  if (!status_.ok()) return false;
  if (remaining_ == 0) {
    if (p_ != end_) status_ = Corrupt("trailing bytes");
    pos_ = count_ = 0;
    return false;
  }
  const size_t n = std::min(remaining_, size_t{1} << block_shift_);
  t_ms_.resize(n);
  values_.resize(n);
  Scratch& s = ThreadScratch();
  ByteReader in(p_, end_);
  Status st = DecodeTimestamps(&in, n, &ctx_, &s, t_ms_.data(), &info_);
  const uint8_t* values_start = in.pos();
  if (st.ok()) st = DecodeValues(&in, n, &ctx_, &s, values_.data(), &info_);
  if (!st.ok()) {
    status_ = std::move(st);
    pos_ = count_ = 0;
    return false;
  }
  info_.timestamp_bytes += static_cast<size_t>(values_start - p_);
  info_.value_bytes += static_cast<size_t>(in.pos() - values_start);
  ++info_.num_blocks;
  ctx_.first_block = false;
  p_ = in.pos();
  remaining_ -= n;
  pos_ = 0;
  count_ = n;
  return true;
}

Result<std::vector<Sample>> DecodeChunk(std::string_view chunk, DecodeOptions options) {
  Result<ChunkDecoder> dec = ChunkDecoder::Open(chunk, options);
  if (!dec.ok()) return dec.status();
  std::vector<Sample> out;
  out.reserve(dec->num_samples());
  Sample s;
  while (dec->Next(&s.t_ms, &s.value)) out.push_back(s);
  if (!dec->status().ok()) return dec->status();
  return out;
}

Result<ChunkInfo> InspectChunk(std::string_view chunk, DecodeOptions options) {
  Result<ChunkDecoder> dec = ChunkDecoder::Open(chunk, options);
  if (!dec.ok()) return dec.status();
  int64_t t;
  double v;
  while (dec->Next(&t, &v)) {
  }
  if (!dec->status().ok()) return dec->status();
  return dec->info();
}

}  // namespace gpuwatch::store
