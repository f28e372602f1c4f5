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
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/labels.h"

namespace gpuwatch::store {

struct RemoteSample {
  int64_t timestamp_ms = 0;
  double value = 0;
};

struct RemoteSeries {
  std::vector<Label> labels;  // as sent: not yet validated or sorted (MakeLabels does that)
  std::vector<RemoteSample> samples;
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

// Decodes the body of POST /api/v1/write (Content-Encoding: snappy).
Result<std::vector<RemoteSeries>> DecodeRemoteWrite(std::string_view snappy_body,
                                                    const RemoteWriteLimits& limits = {});
// The protobuf part alone (already decompressed).
Result<std::vector<RemoteSeries>> DecodeWriteRequest(std::string_view proto,
                                                     const RemoteWriteLimits& limits = {});

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

}  // namespace gpuwatch::store
