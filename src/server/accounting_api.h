// GET /api/v1/accounting (docs/api.md): the ledger's report, transport-agnostic. Parameters:
//   by=user|project|template|job (default project), since=DURATION before `until` ("30d") or a
//   Unix time in seconds (default 30d), until=Unix seconds (default now), format=json|csv.
// A token scoped to projects gets its projects' jobs and quotas only (never the client's word:
// the scope comes from the authorizer). Thread-safe (the ledger is).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "accounting/ledger.h"

namespace gpuwatch::server {

struct AccountingResponse {
  int http_status = 200;
  std::string body;
  std::string content_type = "application/json";
};

AccountingResponse HandleAccounting(const accounting::Ledger& ledger,
                                    const std::vector<std::pair<std::string, std::string>>& params,
                                    const std::vector<std::string>& scope, int64_t now_ms);

}  // namespace gpuwatch::server
