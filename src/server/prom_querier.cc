#include "server/prom_querier.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/time_base.h"
#include "server/http_client_tls.h"
#include "store/head.h"
#include "store/rollup.h"

namespace gpuwatch::server {
namespace {

using nlohmann::json;

std::string Quote(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '\\' || c == '"')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + "\"";
}

// Seconds with millisecond precision, as the API takes times.
std::string Seconds(int64_t ms) {
  return fmt::format("{}{}.{:03d}", ms < 0 ? "-" : "", std::abs(ms) / 1000, std::abs(ms) % 1000);
}

store::Labels LabelsOf(const json& metric) {
  store::Labels l;
  for (auto it = metric.begin(); it != metric.end(); ++it)
    if (it.value().is_string()) l.push_back({it.key(), it.value().get<std::string>()});
  std::sort(l.begin(), l.end());
  return l;
}

Result<std::vector<std::string>> Strings(const json& data, const std::string& what) {
  if (!data.is_array()) return Status::InvalidArgument(what + ": the answer is not a list");
  std::vector<std::string> out;
  for (const auto& v : data)
    if (v.is_string()) out.push_back(v.get<std::string>());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string SelectorText(const std::vector<store::Matcher>& matchers) {
  static constexpr const char* kOps[] = {"=", "!=", "=~", "!~"};
  std::string s = "{";
  for (size_t i = 0; i < matchers.size(); ++i) {
    if (i) s += ",";
    s += matchers[i].name() + kOps[static_cast<int>(matchers[i].op())] + Quote(matchers[i].value());
  }
  if (matchers.empty()) s += "__name__=~\".+\"";
  return s + "}";
}

PromApiQuerier::PromApiQuerier(PromApiOptions options) : options_(std::move(options)) {
  std::string url = options_.url;
  while (url.ends_with("/")) url.pop_back();
  const size_t scheme = url.find("://");
  const size_t path_at = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  base_ = url.substr(0, path_at);
  prefix_ = path_at == std::string::npos ? "" : url.substr(path_at);
}

Result<std::string> PromApiQuerier::Get(
    const std::string& path, const std::vector<std::pair<std::string, std::string>>& params) const {
  httplib::Client c(base_);
  c.set_tcp_nodelay(true);
  const auto secs = static_cast<time_t>(options_.timeout.count());
  c.set_connection_timeout(secs);
  c.set_read_timeout(secs);
  VerifyServer(c, base_, options_.ca_file);
  httplib::Params p;
  for (const auto& [k, v] : params) p.emplace(k, v);
  httplib::Headers h;
  if (!options_.token.empty()) h.emplace("Authorization", "Bearer " + options_.token);
  // Form POST: selectors and regexes can be long; every one of these systems takes it.
  auto res = c.Post(prefix_ + path, h, p);
  const std::string where = base_ + prefix_ + path;
  if (!res) return Status::Unavailable(where + ": " + httplib::to_string(res.error()));
  if (res->body.size() > options_.max_response_bytes)
    return Status::ResourceExhausted(where + ": the answer is over " +
                                     std::to_string(options_.max_response_bytes) + " bytes");
  json doc = json::parse(res->body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return Status::Unavailable(fmt::format("{}: HTTP {}, not the query API's JSON: {}", where,
                                           res->status, res->body.substr(0, 200)));
  if (doc.value("status", "") != "success") {
    std::string why = fmt::format("{}: HTTP {}: {}", where, res->status,
                                  doc.value("error", res->body.substr(0, 200)));
    // The cluster's own verdict on a bad query is the client's error; the rest is its trouble.
    return res->status == 400 || res->status == 422 ? Status::InvalidArgument(std::move(why))
                                                    : Status::Unavailable(std::move(why));
  }
  return doc["data"].dump();
}

Result<std::vector<store::SeriesSamples>> PromApiQuerier::SelectRaw(
    const std::vector<store::Matcher>& matchers, int64_t mint_ms, int64_t maxt_ms) const {
  if (mint_ms > maxt_ms) return std::vector<store::SeriesSamples>{};
  const std::string q = fmt::format("{}[{}ms]", SelectorText(matchers), maxt_ms - mint_ms + 1);
  auto data = Get("/api/v1/query", {{"query", q}, {"time", Seconds(maxt_ms)}});
  if (!data.ok()) return data.status();
  json d = json::parse(*data, nullptr, false);
  if (!d.is_object() || d.value("resultType", "") != "matrix" || !d["result"].is_array())
    return Status::Unavailable(base_ + ": a range selector did not answer a matrix");
  std::vector<store::SeriesSamples> out;
  for (const auto& r : d["result"]) {
    store::SeriesSamples ss;
    ss.labels = LabelsOf(r.value("metric", json::object()));
    for (const auto& v : r.value("values", json::array())) {
      if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_string()) continue;
      const int64_t t = std::llround(v[0].get<double>() * 1000);
      if (t < mint_ms || t > maxt_ms) continue;
      const std::string& text = v[1].get_ref<const std::string&>();
      double value;
      if (text == "NaN")
        value = std::nan("");
      else if (text == "+Inf" || text == "Inf")
        value = INFINITY;
      else if (text == "-Inf")
        value = -INFINITY;
      else
        value = std::strtod(text.c_str(), nullptr);
      ss.samples.push_back({t, value});
    }
    std::sort(ss.samples.begin(), ss.samples.end(),
              [](const store::Sample& a, const store::Sample& b) { return a.t_ms < b.t_ms; });
    ss.samples.erase(std::unique(ss.samples.begin(), ss.samples.end(),
                                 [](const store::Sample& a, const store::Sample& b) {
                                   return a.t_ms == b.t_ms;
                                 }),
                     ss.samples.end());
    if (!ss.samples.empty()) out.push_back(std::move(ss));
  }
  return out;
}

Result<std::vector<store::SeriesRollups>> PromApiQuerier::SelectRollups(
    store::Tier tier, const std::vector<store::Matcher>& matchers, int64_t mint_ms, int64_t maxt_ms,
    uint32_t) const {
  if (tier == store::Tier::kRaw)
    return Status::InvalidArgument("SelectRollups needs the 1m or 1h tier");
  const int64_t width = store::TierWidthMs(tier);
  const int64_t first = store::BucketStart(mint_ms, width) == mint_ms
                            ? mint_ms
                            : store::BucketStart(mint_ms, width) + width;
  const int64_t last = store::BucketStart(maxt_ms, width) + width - 1;
  auto raw = SelectRaw(matchers, first, last);
  if (!raw.ok()) return raw.status();
  std::vector<store::SeriesRollups> out;
  for (const auto& s : *raw) {
    store::SeriesRollups r;
    r.labels = s.labels;
    store::AppendRollups(s.samples, width, &r.points);
    if (!r.points.empty()) out.push_back(std::move(r));
  }
  return out;
}

store::TierCoverage PromApiQuerier::Coverage(store::Tier tier) const {
  // The cluster's own retention is not known here: raw "covers" all time, so the engine reads
  // raw samples (exact answers) and the cluster downsamples as it is configured to.
  if (tier != store::Tier::kRaw) return {};
  return {store::kMinSampleTimeMs + 1, store::kMaxSampleTimeMs};
}

Result<std::vector<store::Labels>> PromApiQuerier::Series(
    const std::vector<store::Matcher>& matchers, int64_t mint_ms, int64_t maxt_ms) const {
  // "All time" is the query API's default (its extreme timestamps), which VictoriaMetrics
  // answers with nothing: the epoch and, past a day ahead, no end (the cluster's now).
  std::vector<std::pair<std::string, std::string>> params = {
      {"match[]", SelectorText(matchers)}, {"start", Seconds(std::max<int64_t>(mint_ms, 0))}};
  if (maxt_ms < WallClockMs() + 86'400'000) params.push_back({"end", Seconds(maxt_ms)});
  auto data = Get("/api/v1/series", params);
  if (!data.ok()) return data.status();
  json d = json::parse(*data, nullptr, false);
  if (!d.is_array()) return Status::Unavailable(base_ + "/api/v1/series: not a list");
  std::vector<store::Labels> out;
  for (const auto& m : d) out.push_back(LabelsOf(m));
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::vector<std::string>> PromApiQuerier::LabelNames(
    const std::vector<store::Matcher>& matchers) const {
  std::vector<std::pair<std::string, std::string>> params;
  if (!matchers.empty()) params.push_back({"match[]", SelectorText(matchers)});
  auto data = Get("/api/v1/labels", params);
  if (!data.ok()) return data.status();
  return Strings(json::parse(*data, nullptr, false), base_ + "/api/v1/labels");
}

Result<std::vector<std::string>> PromApiQuerier::LabelValues(
    const std::string& name, const std::vector<store::Matcher>& matchers) const {
  std::vector<std::pair<std::string, std::string>> params;
  if (!matchers.empty()) params.push_back({"match[]", SelectorText(matchers)});
  auto data = Get("/api/v1/label/" + name + "/values", params);
  if (!data.ok()) return data.status();
  return Strings(json::parse(*data, nullptr, false), base_ + "/api/v1/label/" + name);
}

}  // namespace gpuwatch::server
