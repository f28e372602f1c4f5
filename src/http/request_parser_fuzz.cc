// libFuzzer target for the HTTP request parser: a request head, then the rest as a chunked
// body. No input may crash it; every refusal carries an HTTP error status and a message; what
// it accepts keeps its own limits (header count, decoded body size).
//
// CTest runs it through tests/fuzz_driver.cc over tests/fixtures/http_requests.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "http/request_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::http;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t scanned = 0;
  const size_t end = FindHeadEnd(in, &scanned);
  if (end > in.size()) std::abort();
  HeadLimits limits;
  limits.max_headers = 16;
  ParseError err;
  if (end > 0) {
    auto head = ParseRequestHead(in.substr(0, end), limits, &err);
    if (!head) {
      if (err.status < 400 || err.status > 599 || err.message.empty()) std::abort();
    } else {
      if (head->headers.size() > limits.max_headers) std::abort();
      if (head->chunked && head->content_length) std::abort();
      if (!head->path.empty() && head->path[0] != '/' && head->path != "*") std::abort();
      ParseUrlEncoded(head->query, &err);
    }
  }
  // The remainder (or everything) as a chunked body, whole and in two pieces.
  const std::string_view body = in.substr(end);
  constexpr size_t kLimit = 1024;
  ChunkedDecoder whole(kLimit);
  std::string out;
  const size_t used = whole.Feed(body, &out);
  if (used > body.size() || out.size() > kLimit) std::abort();
  if (whole.state() == ChunkedDecoder::State::kError &&
      (whole.error().status < 400 || whole.error().message.empty()))
    std::abort();
  ChunkedDecoder split(kLimit);
  std::string out2;
  const size_t half = body.size() / 2;
  size_t used2 = split.Feed(body.substr(0, half), &out2);
  if (split.state() == ChunkedDecoder::State::kMore) used2 += split.Feed(body.substr(used2), &out2);
  // Fed in two pieces, the decoder must reach the same state with the same bytes.
  if (split.state() != whole.state() || out2 != out) std::abort();
  if (whole.state() == ChunkedDecoder::State::kDone && used2 != used) std::abort();
  return 0;
}
