#include "http/request_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace gpuwatch::http {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/http_requests/" + name,
                   std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Split {
  RequestHead head;
  std::string rest;
};

Split ParseFixture(const std::string& name) {
  const std::string raw = Fixture(name);
  EXPECT_FALSE(raw.empty()) << name;
  size_t scanned = 0;
  const size_t end = FindHeadEnd(raw, &scanned);
  EXPECT_GT(end, 0u) << name;
  ParseError err;
  auto head = ParseRequestHead(std::string_view(raw).substr(0, end), {}, &err);
  EXPECT_TRUE(head.has_value()) << name << ": " << err.message;
  return {head.value_or(RequestHead{}), raw.substr(end)};
}

std::optional<RequestHead> Parse(std::string_view head, ParseError* err,
                                 const HeadLimits& limits = {}) {
  return ParseRequestHead(head, limits, err);
}

// Real requests captured on the wire (tests/fixtures/http_requests/SOURCES.md).
TEST(RequestParser, CurlGetWithBracketsInTheQuery) {
  auto [h, rest] = ParseFixture("curl_7.88.1_get_query_range.http");
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.path, "/api/v1/query_range");
  EXPECT_EQ(h.query, "query=sum(rate(m[5m]))&start=1700000000&end=1700003600&step=15");
  EXPECT_EQ(h.headers.Value("host"), "127.0.0.1:18001");
  EXPECT_EQ(h.headers.Value("User-Agent"), "curl/7.88.1");
  EXPECT_FALSE(h.content_length.has_value());
  EXPECT_FALSE(h.chunked);
  EXPECT_TRUE(h.keep_alive);
  EXPECT_TRUE(rest.empty());
  ParseError err;
  auto params = ParseUrlEncoded(h.query, &err);
  ASSERT_TRUE(params);
  ASSERT_EQ(params->size(), 4u);
  EXPECT_EQ((*params)[0], (std::pair<std::string, std::string>{"query", "sum(rate(m[5m]))"}));
  EXPECT_EQ((*params)[3].second, "15");
}

TEST(RequestParser, CurlChunkedBodyDecodes) {
  auto [h, rest] = ParseFixture("curl_7.88.1_post_chunked.http");
  EXPECT_EQ(h.method, "POST");
  EXPECT_TRUE(h.chunked);
  EXPECT_FALSE(h.content_length.has_value());
  ChunkedDecoder dec(1 << 20);
  std::string body;
  EXPECT_EQ(dec.Feed(rest, &body), rest.size());
  EXPECT_EQ(dec.state(), ChunkedDecoder::State::kDone);
  EXPECT_EQ(body, R"([{"kind":"annotation","text":"x"}])");
}

TEST(RequestParser, CurlChunkedBodyDecodesOneByteAtATime) {
  auto [h, rest] = ParseFixture("curl_7.88.1_post_chunked.http");
  ChunkedDecoder dec(1 << 20);
  std::string body;
  for (char c : rest) {
    ASSERT_EQ(dec.state(), ChunkedDecoder::State::kMore);
    EXPECT_EQ(dec.Feed(std::string_view(&c, 1), &body), 1u);
  }
  EXPECT_EQ(dec.state(), ChunkedDecoder::State::kDone);
  EXPECT_EQ(body.size(), 34u);
}

TEST(RequestParser, CurlFormPost) {
  auto [h, rest] = ParseFixture("curl_7.88.1_post_form.http");
  EXPECT_EQ(h.content_length, 50u);
  EXPECT_EQ(h.headers.Value("Content-Type"), "application/x-www-form-urlencoded");
  ASSERT_EQ(rest.size(), 50u);
  ParseError err;
  auto form = ParseUrlEncoded(rest, &err);
  ASSERT_TRUE(form);
  ASSERT_EQ(form->size(), 2u);
  EXPECT_EQ((*form)[0].second, R"(up{job="gpuwatch"})");
  EXPECT_EQ((*form)[1].second, "1700000000");
}

TEST(RequestParser, PythonAndPrometheusRemoteWriteHeads) {
  auto py = ParseFixture("python3.11_http_client_post.http");
  EXPECT_EQ(py.head.content_length, 5u);
  EXPECT_EQ(py.head.headers.Value("Content-Encoding"), "snappy");
  EXPECT_EQ(py.rest, std::string("\x00\x01"
                                 "abc",
                                 5));
  auto prom = ParseFixture("prometheus_2.42.0_remote_write_head.http");
  EXPECT_EQ(prom.head.path, "/api/v1/write");
  EXPECT_EQ(prom.head.content_length, 6943u);
  EXPECT_EQ(prom.head.headers.Value("X-Prometheus-Remote-Write-Version"), "0.1.0");
  EXPECT_EQ(prom.head.headers.Value("user-agent"), "Prometheus/2.42.0+ds");
  EXPECT_EQ(prom.head.headers.size(), 6u);
}

TEST(RequestParser, FindHeadEndAcrossReads) {
  const std::string req = "GET / HTTP/1.1\r\nHost: x\r\n\r\nNEXT";
  size_t scanned = 0;
  for (size_t n = 0; n < 26; ++n)
    EXPECT_EQ(FindHeadEnd(std::string_view(req).substr(0, n), &scanned), 0u) << n;
  EXPECT_EQ(FindHeadEnd(req, &scanned), 27u);
  scanned = 0;
  EXPECT_EQ(FindHeadEnd("GET / HTTP/1.1\nHost: x\n\n", &scanned), 24u);  // bare LF
}

TEST(RequestParser, HeaderCountLimitAtTheBoundaryAndOnePast) {
  HeadLimits limits;
  limits.max_headers = 3;
  std::string three = "GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\n\r\n";
  std::string four = "GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
  ParseError err;
  EXPECT_TRUE(Parse(three, &err, limits));
  EXPECT_FALSE(Parse(four, &err, limits));
  EXPECT_EQ(err.status, 431);
}

TEST(RequestParser, HeadSizeLimitAtTheBoundaryAndOnePast) {
  std::string head = "GET /" + std::string(100, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n";
  HeadLimits limits;
  limits.max_head_bytes = head.size();
  ParseError err;
  EXPECT_TRUE(Parse(head, &err, limits));
  limits.max_head_bytes = head.size() - 1;
  EXPECT_FALSE(Parse(head, &err, limits));
  EXPECT_EQ(err.status, 431);
}

TEST(RequestParser, SixtyFourKiBQueryFitsTheDefaultHead) {
  // docs/promql.md promises queries of 64 KiB; percent-encoded they are larger still.
  const std::string q(64 * 1024, 'x');
  ParseError err;
  auto h = Parse("GET /api/v1/query?query=" + q + " HTTP/1.1\r\nHost: x\r\n\r\n", &err);
  ASSERT_TRUE(h) << err.message;
  EXPECT_EQ(h->query.size(), q.size() + 6);
}

TEST(RequestParser, SmugglingShapesAreRefused) {
  ParseError err;
  EXPECT_FALSE(
      Parse("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: "
            "chunked\r\n\r\n",
            &err));
  EXPECT_EQ(err.status, 400);
  EXPECT_FALSE(
      Parse("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", &err));
  EXPECT_EQ(err.status, 400);
  EXPECT_FALSE(
      Parse("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", &err));
  EXPECT_EQ(err.status, 501);
  EXPECT_FALSE(Parse("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", &err));
  EXPECT_FALSE(
      Parse("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", &err));
  EXPECT_FALSE(Parse("GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", &err));  // obs-fold
  EXPECT_FALSE(Parse("GET / HTTP/1.1\r\nHost : x\r\n\r\n", &err));  // space before colon
  EXPECT_FALSE(Parse("GET / HTTP/1.1\r\n\r\n", &err));              // no Host
  EXPECT_FALSE(Parse("GET / HTTP/2.0\r\nHost: x\r\n\r\n", &err));
  EXPECT_EQ(err.status, 505);
  EXPECT_FALSE(Parse("GET  / HTTP/1.1\r\nHost: x\r\n\r\n", &err));
  EXPECT_FALSE(Parse("GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", &err));
  EXPECT_FALSE(Parse("GET /%00 HTTP/1.1\r\nHost: x\r\n\r\n", &err));
  // Repeating one Content-Length value is allowed (RFC 9112 §6.3 item 5).
  auto same = Parse("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 7, 7\r\n\r\n", &err);
  ASSERT_TRUE(same);
  EXPECT_EQ(same->content_length, 7u);
}

TEST(RequestParser, ConnectionAndExpect) {
  ParseError err;
  auto h10 = Parse("GET / HTTP/1.0\r\n\r\n", &err);
  ASSERT_TRUE(h10);
  EXPECT_FALSE(h10->keep_alive);
  auto ka = Parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &err);
  ASSERT_TRUE(ka);
  EXPECT_TRUE(ka->keep_alive);
  auto close = Parse("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &err);
  ASSERT_TRUE(close);
  EXPECT_FALSE(close->keep_alive);
  auto expect = Parse(
      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n", &err);
  ASSERT_TRUE(expect);
  EXPECT_TRUE(expect->expect_continue);
  EXPECT_FALSE(Parse("POST / HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n", &err));
  EXPECT_EQ(err.status, 417);
}

TEST(RequestParser, AbsoluteFormTarget) {
  ParseError err;
  auto h = Parse("GET http://node1:9470/metrics?x=1 HTTP/1.1\r\nHost: node1\r\n\r\n", &err);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->path, "/metrics");
  EXPECT_EQ(h->query, "x=1");
}

TEST(ChunkedDecoder, BodyLimitAtTheBoundaryAndOnePast) {
  std::string body;
  ChunkedDecoder ok(10);
  ok.Feed("5\r\nhello\r\n5;ext=1\r\nworld\r\n0\r\nTrailer: x\r\n\r\n", &body);
  EXPECT_EQ(ok.state(), ChunkedDecoder::State::kDone);
  EXPECT_EQ(body, "helloworld");
  body.clear();
  ChunkedDecoder over(9);
  over.Feed("5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n", &body);
  EXPECT_EQ(over.state(), ChunkedDecoder::State::kError);
  EXPECT_EQ(over.error().status, 413);
  EXPECT_EQ(body, "hello");  // the chunk that would pass the limit was never buffered
}

TEST(ChunkedDecoder, HugeDeclaredChunkIsRefusedBeforeBuffering) {
  std::string body;
  ChunkedDecoder dec(64 << 20);
  dec.Feed("40000000\r\n", &body);  // 1 GiB declared
  EXPECT_EQ(dec.state(), ChunkedDecoder::State::kError);
  EXPECT_EQ(dec.error().status, 413);
  ChunkedDecoder overflow(64 << 20);
  overflow.Feed("fffffffffffffffff\r\n", &body);
  EXPECT_EQ(overflow.state(), ChunkedDecoder::State::kError);
}

TEST(ChunkedDecoder, MalformedFraming) {
  std::string body;
  const std::vector<std::string> bads = {"zz\r\n", "\r\n", "3\r\nabcd\r\n", std::string(5000, '1')};
  for (const std::string& bad : bads) {
    ChunkedDecoder dec(1 << 20);
    dec.Feed(bad, &body);
    EXPECT_EQ(dec.state(), ChunkedDecoder::State::kError) << bad;
  }
}

TEST(ChunkedDecoder, BytesAfterTheLastChunkAreLeftForTheNextRequest) {
  std::string body;
  ChunkedDecoder dec(100);
  const std::string in = "1\r\na\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
  const size_t used = dec.Feed(in, &body);
  EXPECT_EQ(dec.state(), ChunkedDecoder::State::kDone);
  EXPECT_EQ(in.substr(used), "GET / HTTP/1.1\r\n");
}

TEST(UrlEncoded, PlusAndPercent) {
  ParseError err;
  auto p = ParseUrlEncoded("a=x+y%2Bz&&b&c=%41", &err);
  ASSERT_TRUE(p);
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[0].second, "x y+z");
  EXPECT_EQ((*p)[1].first, "b");
  EXPECT_EQ((*p)[1].second, "");
  EXPECT_EQ((*p)[2].second, "A");
  EXPECT_FALSE(ParseUrlEncoded("a=%4", &err));
  EXPECT_FALSE(ParseUrlEncoded("a=%", &err));
}

}  // namespace
}  // namespace gpuwatch::http
