// The Prometheus query API, transport-agnostic: /api/v1/query, /api/v1/query_range,
// /api/v1/labels, /api/v1/label/<name>/values and /api/v1/series, answering with exactly
// Prometheus's JSON shapes and error types so Grafana and other Prometheus clients can use
// the agent as a data source. The HTTP layer decodes the query string and form body into
// `params` and sends `body` back as application/json with `http_status`.
//
// Errors: 400 "bad_data" for bad parameters and queries that do not parse, 422 "execution"
// for evaluation failures (limits included), 503 "unavailable" when the store is, 500
// "internal" otherwise, 404 for an unknown path. Thread-safe: no state of its own; the
// Querier is thread-safe by contract.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "query/engine.h"
#include "store/querier.h"

namespace gpuwatch::server {

struct ApiRequest {
  std::string path;                                // e.g. "/api/v1/query"
  std::multimap<std::string, std::string> params;  // decoded query string and form body
  int64_t now_ms = 0;                              // default for `time`
};

struct ApiResponse {
  int http_status = 200;
  std::string body;  // JSON
  // Why evaluation failed, when it did (a timeout, a cancellation, a limit): what the HTTP
  // layer counts refusals by, without reading the body.
  std::optional<StatusCode> error = std::nullopt;
};

// Whether HandleQueryApi serves `path` (so a router can send the rest elsewhere).
bool IsQueryApiPath(std::string_view path);

ApiResponse HandleQueryApi(const store::Querier& querier, const query::EngineOptions& options,
                           const ApiRequest& request);

// Parameter parsers, exposed for tests. Timestamps: Unix seconds (a float) or RFC 3339;
// durations: seconds (a float) or a Prometheus duration such as 1m30s.
Result<int64_t> ParseApiTimestampMs(std::string_view text);
Result<int64_t> ParseApiDurationMs(std::string_view text);
// Prometheus's rendering of a sample value: shortest round-trip, "+Inf", "-Inf", "NaN".
std::string FormatSampleValue(double v);
// The first value of a parameter, if given.
std::optional<std::string> ApiParam(const ApiRequest& r, const std::string& name);
// Prometheus's error body ({"status":"error","errorType":…,"error":…}), for the other JSON
// APIs that answer in the same shape (the panel endpoint).
ApiResponse ApiError(int http_status, std::string_view type, std::string_view message);

}  // namespace gpuwatch::server
