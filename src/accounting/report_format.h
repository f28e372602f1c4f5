// The accounting report's wire forms: the JSON of GET /api/v1/accounting (docs/api.md) and
// CSV, shared by the server and `gpuwatch report`, which also reads the JSON back to print a
// table. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "accounting/ledger.h"
#include "common/status.h"

namespace gpuwatch::accounting {

struct ReportDoc {
  ReportQuery query;
  std::vector<ReportRow> rows;
  std::vector<QuotaStatus> quotas;
};

nlohmann::json ReportJson(const ReportDoc& doc);
// The inverse, for a client of the API; InvalidArgument naming the field that is wrong.
Result<ReportDoc> ReportFromJson(const nlohmann::json& j);

// One header line, then one line per row (RFC 4180 quoting); hours with 6 decimals.
std::string ReportCsv(const ReportDoc& doc);

}  // namespace gpuwatch::accounting
