// HTTP/1.1 request parsing for the agent's server (RFC 9112): the request head (request line
// and header fields), the chunked transfer coding, and the query/form encoding
// (application/x-www-form-urlencoded).
//
// Untrusted input from the network. Every function bounds what it accepts by the limits it is
// given *before* it allocates for it, and answers a bad request with the HTTP status a server
// should send (400, 413, 414, 431, 501) and a message that names what was wrong. Request
// smuggling defences follow RFC 9112 §6.1/§6.3: Transfer-Encoding other than "chunked", both
// Transfer-Encoding and Content-Length, or conflicting Content-Lengths are refused.
// Pure functions and a small state machine; no I/O; thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/strings.h"

namespace gpuwatch::http {

// Header fields in arrival order; names compare case-insensitively.
class Headers {
 public:
  void Add(std::string name, std::string value) {
    fields_.emplace_back(std::move(name), std::move(value));
  }
  // The first field with this name, or nullopt.
  std::optional<std::string_view> Get(std::string_view name) const;
  std::string Value(std::string_view name) const { return std::string(Get(name).value_or("")); }
  size_t Count(std::string_view name) const;
  void Remove(std::string_view name);
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  size_t size() const { return fields_.size(); }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

using gpuwatch::EqualsIgnoreCase;  // common/strings.h

// A request the parser refused: the status to answer with and why.
struct ParseError {
  int status = 400;
  std::string message;
};

struct HeadLimits {
  size_t max_head_bytes = 256 * 1024;  // request line + all header fields
  size_t max_headers = 100;
};

struct RequestHead {
  std::string method;
  std::string target;     // as sent: path + "?" + query
  std::string path;       // percent-decoded path, without the query
  std::string query;      // raw query string (still encoded)
  int minor_version = 1;  // HTTP/1.x
  Headers headers;
  // Framing, from the headers.
  bool chunked = false;
  std::optional<uint64_t> content_length;
  bool keep_alive = true;  // HTTP/1.1 default unless "Connection: close"; 1.0 opt-in
  bool expect_continue = false;
};

// Where the head ends in `buf`: the offset just past the blank line, 0 when more bytes are
// needed. `scanned` carries the search position between calls so each byte is looked at once.
size_t FindHeadEnd(std::string_view buf, size_t* scanned);

// Parses a complete head (buf[0, FindHeadEnd)). Obsolete line folding is refused (RFC 9112 §5.2
// allows that), as are control characters in field values.
std::optional<RequestHead> ParseRequestHead(std::string_view head, const HeadLimits& limits,
                                            ParseError* error);

// Decodes the chunked transfer coding incrementally (RFC 9112 §7.1). Chunk extensions are
// skipped, trailer fields are read and discarded. The decoded body may not exceed
// `max_body_bytes`: the decoder fails with 413 at the first chunk that would pass it, before
// buffering that chunk.
class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(size_t max_body_bytes) : max_body_bytes_(max_body_bytes) {}
  enum class State { kMore, kDone, kError };
  // Consumes as much of `in` as it can, appending decoded data to `out`; returns how many
  // bytes of `in` it used. After kDone, the bytes not consumed belong to the next request.
  size_t Feed(std::string_view in, std::string* out);
  State state() const { return state_; }
  const ParseError& error() const { return error_; }

 private:
  enum class Step { kSize, kData, kDataEnd, kTrailer };
  size_t Fail(int status, std::string message, size_t used);
  size_t max_body_bytes_;
  size_t body_bytes_ = 0;
  Step step_ = Step::kSize;
  State state_ = State::kMore;
  std::string line_;        // the line being collected (size line or trailer field)
  uint64_t remaining_ = 0;  // bytes left in the current chunk
  size_t trailer_bytes_ = 0;
  ParseError error_;
};

// "a=1&b=x%20y" → {{"a","1"},{"b","x y"}}; '+' is a space. Fails on bad %-escapes.
std::optional<std::vector<std::pair<std::string, std::string>>> ParseUrlEncoded(std::string_view s,
                                                                                ParseError* error);
// Percent-decoding (no '+' rule: that belongs to forms only).
std::optional<std::string> PercentDecode(std::string_view s, bool plus_is_space);

}  // namespace gpuwatch::http
