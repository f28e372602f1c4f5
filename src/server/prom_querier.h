// PromApiQuerier: the second implementation of the one storage read interface (store::Querier),
// over the Prometheus HTTP query API of a time-series cluster — VictoriaMetrics, Mimir, Thanos
// query or Prometheus (issue 19, scale-out). `gpuwatch hub --read-from URL` answers its query
// API, panels and dashboard through it instead of its embedded store, with the same engine.
//
// Raw samples come from an instant query of a range selector ({…}[Nms] at maxt), which every
// one of those systems answers with the stored samples themselves; the window is widened by
// 1 ms so that [mint, maxt] is whole under both Prometheus 2's closed and 3's left-open range
// semantics. Rollups are computed from raw samples (store/rollup.h), and Coverage reports
// only a raw tier, so the engine always reads raw: the remote system does its own
// downsampling, and the answers are exact. Series, label names and values use
// /api/v1/series, /api/v1/labels and /api/v1/label/NAME/values.
//
// Errors (the cluster down, a refusal, a body that is not the API's JSON) are Unavailable or
// InvalidArgument naming the URL and what it said; they reach the client as the query API's
// error, never as an empty answer. Thread-safe: one HTTP client per call.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "store/querier.h"

namespace gpuwatch::server {

struct PromApiOptions {
  std::string url;    // http://vm:8428 (a path prefix is kept: http://mimir/prometheus)
  std::string token;  // bearer token, "" for none
  // https:// only: the CA bundle the cluster's certificate must chain to; "" is the system's.
  std::string ca_file;
  std::chrono::seconds timeout{30};
  size_t max_response_bytes = size_t{512} << 20;
};

class PromApiQuerier final : public store::Querier {
 public:
  explicit PromApiQuerier(PromApiOptions options);

  Result<std::vector<store::SeriesSamples>> SelectRaw(const std::vector<store::Matcher>& matchers,
                                                      int64_t mint_ms,
                                                      int64_t maxt_ms) const override;
  Result<std::vector<store::SeriesRollups>> SelectRollups(
      store::Tier tier, const std::vector<store::Matcher>& matchers, int64_t mint_ms,
      int64_t maxt_ms, uint32_t parts = store::kRollupAll) const override;
  store::TierCoverage Coverage(store::Tier tier) const override;
  Result<std::vector<store::Labels>> Series(const std::vector<store::Matcher>& matchers,
                                            int64_t mint_ms, int64_t maxt_ms) const override;
  Result<std::vector<std::string>> LabelNames(
      const std::vector<store::Matcher>& matchers) const override;
  Result<std::vector<std::string>> LabelValues(
      const std::string& name, const std::vector<store::Matcher>& matchers) const override;

 private:
  // GET base + path with the query parameters; the "data" of a success.
  Result<std::string> Get(const std::string& path,
                          const std::vector<std::pair<std::string, std::string>>& params) const;
  PromApiOptions options_;
  std::string base_, prefix_;  // scheme://host:port and the path prefix
};

// `{a="b",c=~"d"}` for the matchers (every one quoted as PromQL reads it).
std::string SelectorText(const std::vector<store::Matcher>& matchers);

}  // namespace gpuwatch::server
