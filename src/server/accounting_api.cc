#include "server/accounting_api.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "accounting/report_format.h"
#include "common/strings.h"
#include "query/promql.h"

namespace gpuwatch::server {
namespace {

AccountingResponse Bad(const std::string& why) {
  return {400, nlohmann::json{{"error", why}}.dump(), "application/json"};
}

std::string Param(const std::vector<std::pair<std::string, std::string>>& params,
                  const char* name) {
  for (const auto& [k, v] : params)
    if (k == name) return v;
  return "";
}

// Unix seconds (fractions allowed) → ms; nullopt when not a time.
std::optional<int64_t> UnixMs(const std::string& s) {
  auto v = ParseDouble(s);
  if (!v || !std::isfinite(*v) || *v < 0 || *v > 9.2e12) return std::nullopt;
  return static_cast<int64_t>(std::llround(*v * 1000));
}

}  // namespace

AccountingResponse HandleAccounting(const accounting::Ledger& ledger,
                                    const std::vector<std::pair<std::string, std::string>>& params,
                                    const std::vector<std::string>& scope, int64_t now_ms) {
  accounting::ReportDoc doc;
  const std::string by = Param(params, "by");
  if (!by.empty()) {
    auto g = accounting::ParseGroupBy(by);
    if (!g) return Bad("by: \"" + by.substr(0, 32) + "\" is not user, project, template or job");
    doc.query.by = *g;
  }
  doc.query.until_ms = now_ms;
  if (const std::string until = Param(params, "until"); !until.empty()) {
    auto t = UnixMs(until);
    if (!t) return Bad("until: not a Unix time in seconds");
    doc.query.until_ms = *t;
  }
  const std::string since = Param(params, "since").empty() ? "30d" : Param(params, "since");
  // A plain number is a Unix time ("1764460800"); anything else a duration back from until.
  if (auto t = UnixMs(since)) {
    doc.query.since_ms = *t;
  } else if (auto d = query::ParseDurationMs(since); d.ok()) {
    doc.query.since_ms = doc.query.until_ms - *d;
  } else {
    return Bad("since: \"" + since.substr(0, 32) +
               "\" is neither a duration (30d, 12h) nor a Unix time in seconds");
  }
  if (doc.query.since_ms > doc.query.until_ms) return Bad("since is after until");
  const std::string format = Param(params, "format");
  if (!format.empty() && format != "json" && format != "csv") return Bad("format: json or csv");
  doc.query.projects = scope;
  doc.rows = ledger.Report(doc.query);
  for (accounting::QuotaStatus& q : ledger.Quotas(doc.query.until_ms)) {
    if (!scope.empty() && std::find(scope.begin(), scope.end(), q.quota.project) == scope.end())
      continue;
    doc.quotas.push_back(std::move(q));
  }
  if (format == "csv") return {200, accounting::ReportCsv(doc), "text/csv; charset=utf-8"};
  return {200, accounting::ReportJson(doc).dump(2) + "\n", "application/json"};
}

}  // namespace gpuwatch::server
