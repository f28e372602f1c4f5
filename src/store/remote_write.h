// Prometheus remote-write 1.0 decoding: a snappy-compressed (block format) protobuf
// WriteRequest → time series with labels and samples. Hand-written protobuf reading (the
// message is three nested types), so no protoc at build time; snappy from Debian.
//
// Untrusted input from the network: every length is checked against what remains, nesting is
// bounded by the schema, the uncompressed size and the number of series/labels/samples are
// capped, and any violation is an InvalidArgument naming what was wrong (the HTTP layer turns
// it into a 400). Unknown fields are skipped (forward compatibility), groups are rejected.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/chunkenc.h"
#include "store/labels.h"
#include "store/sample_list.h"

namespace gpuwatch::store {

// A remote-write sample is the store's own (t_ms, value), so a decoded series' samples move
// into the store's input as they are.
using RemoteSample = Sample;

// 128 bits over a series' label fields exactly as they were sent (their protobuf encoding:
// tags, lengths and bytes, in order). A sender repeats a series with the same bytes every time
// (remote-write 1.0 sends every label set with every request), so a receiver that keeps
// digest → series can skip decoding, sorting and looking up labels it has seen — what most of
// a hub's CPU went to (bench/fleet/RESULTS.md). Two 64-bit lanes, seeded apart: an accidental
// match of both across the series of one sender is not a practical concern; a sender crafting
// one could only write into a series it already writes to (receivers keep digests per sender).
struct LabelDigest {
  uint64_t lo = 0, hi = 0;
  bool operator==(const LabelDigest&) const = default;
};

struct RemoteSeries {
  std::vector<Label> labels;  // as sent: not yet validated or sorted (MakeLabels does that)
  SampleList samples;
  LabelDigest digest;
  // What the receiver's DigestTable held: it knows this series as this ref, and `labels` is
  // left empty.
  std::optional<uint32_t> known;
};

// Digest → a receiver's series ref: open addressing with linear probing in one array (at most
// half full), so a lookup is one cache line, and a request's lookups are prefetched while the
// rest of it is read. A node-based hash map cost three dependent cache misses a series, a
// quarter of a hub's CPU (bench/fleet/RESULTS.md, run 4). 24 bytes a slot.
// Thread-safety: none; the owner locks.
class DigestTable {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;  // never stored as a ref
  std::optional<uint32_t> Find(const LabelDigest& d) const;
  // Brings the digest's slot towards the cache; Find follows.
  void Prefetch(const LabelDigest& d) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[d.lo & (slots_.size() - 1)]);
  }
  // False when the digest was there already (its ref is kept) or ref is kNone.
  bool Insert(const LabelDigest& d, uint32_t ref);
  size_t size() const { return size_; }
  void Clear();

 private:
  struct Slot {
    LabelDigest digest;
    uint32_t ref = kNone;
  };
  void Grow();
  std::vector<Slot> slots_;  // a power of two long, or empty
  size_t size_ = 0;
};

// Exceeding one is ResourceExhausted (the HTTP layer's 413); checked before the memory is
// allocated: the inflated size from snappy's header, the rest while decoding. The decoded form
// costs about 64 bytes per label, so the label count bounds it (a 3 MB body once inflated to
// 33 M empty labels and 2.3 GB; issue 17, D3).
struct RemoteWriteLimits {
  size_t max_uncompressed_bytes = 64u << 20;
  size_t max_series = 1u << 20;
  size_t max_samples = 16u << 20;
  size_t max_labels = 16u << 20;  // all series' labels together
};

// Decodes the body of POST /api/v1/write (Content-Encoding: snappy). A series whose digest
// `known` holds gets `known` set and its labels are not decoded.
Result<std::vector<RemoteSeries>> DecodeRemoteWrite(std::string_view snappy_body,
                                                    const RemoteWriteLimits& limits = {},
                                                    const DigestTable* known = nullptr);
// The protobuf part alone (already decompressed).
Result<std::vector<RemoteSeries>> DecodeWriteRequest(std::string_view proto,
                                                     const RemoteWriteLimits& limits = {},
                                                     const DigestTable* known = nullptr);

// Encoding, for clients, tests and the store benchmark (feeding other systems the same bytes).
std::string EncodeWriteRequest(const std::vector<RemoteSeries>& series);
std::string EncodeRemoteWrite(const std::vector<RemoteSeries>& series);  // + snappy
// Snappy (block format) of an encoded WriteRequest: concatenated WriteRequests are one
// WriteRequest with their series appended (protobuf merges repeated fields), so a sender may
// join several encoded requests and compress them once.
std::string SnappyCompress(std::string_view proto);
// Inflates snappy (block format) data, checking the inflated size against `max_bytes` before
// anything is allocated (ResourceExhausted); InvalidArgument for data that is not snappy.
// `what` starts the messages ("remote-write").
Result<std::string> SnappyUncompress(std::string_view body, size_t max_bytes,
                                     std::string_view what);

// The length a snappy block says it inflates to (its header alone; nothing is inflated);
// InvalidArgument when the header is not a snappy length.
Result<uint32_t> SnappyInflatedLength(std::string_view block);
// Joins snappy blocks without inflating them: one header with the sum of their lengths, then
// each block's elements in turn. Valid because a snappy element is a literal or a copy from up
// to 2^32-1 bytes back in what was already produced (google/snappy format_description.txt),
// and a block's copies reach back only into its own output, which stays in place behind the
// blocks before it; decoders check offsets against everything produced so far (snappy's
// SnappyArrayWriter, Go's snappy.Decode). With concatenable payloads (encoded WriteRequests)
// the joined block inflates to their concatenation: a sender joins spooled requests into one
// without inflating and compressing them again. InvalidArgument for a block whose header does
// not parse or a sum past 2^32-1; the elements themselves are not checked (a receiver does).
Result<std::string> SnappyJoin(const std::vector<std::string_view>& blocks);

}  // namespace gpuwatch::store
