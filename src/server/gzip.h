// gzip (RFC 1952) compression of a response body with zlib, and the Accept-Encoding test.
//
// The agent compresses only /metrics, with gzip level 1: Brotli at quality 11 (what
// cpp-httplib 0.11 picked whenever "br" was accepted) cost over a second of CPU per 400 KB
// scrape. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuwatch::server {

// Level 1 (fastest): a scrape body compresses ~10x at level 1 already; the agent's CPU budget
// matters more than the last few percent of bytes.
Result<std::string> GzipCompress(std::string_view data, int level = 1);
// For tests and tools: inflates a gzip stream.
Result<std::string> GzipDecompress(std::string_view data);
// True when an Accept-Encoding header value accepts gzip (a "gzip" token without q=0).
bool AcceptsGzip(std::string_view accept_encoding);

}  // namespace gpuwatch::server
