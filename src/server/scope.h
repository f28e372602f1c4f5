// What a token confined to projects may see (issue 19, access control; docs/limits.md,
// "Tokens"). The authorizer (server/auth.h) puts the token's projects on the request; the
// routes enforce them here, from what the agent knows, never from what the client claims:
//   - a job is in scope when its project, as the scheduler or the job's start record gave it
//     (the job registry, or the stored gpuwatch_job_info series for jobs that have ended), is
//     one of the token's projects;
//   - the query API reads through ScopedQuerier, which adds a `job` matcher naming the jobs in
//     scope to every selection, so no PromQL the client writes can reach another project's
//     series, or series of no job (the node's GPUs, host, the agent's own);
//   - the jobs, findings and alerts lists keep the jobs in scope only; one job's page, its
//     events and log lines are 403 for a job out of scope;
//   - what belongs to the whole node (/metrics, GPUs, processes, host, topology, the flight
//     recorder, snapshots) is 403.
//   - the GPUs its jobs held, while they held them: the node's GPU series (no `job` label) of
//     those GPUs, their samples kept to the times the accounting ledger says the job held the
//     GPU (from the scheduler's allocation or the job's start to its end), rollup buckets only
//     when wholly inside one (a bucket's aggregate may hold another job's time).
// Thread-safety: ScopedQuerier is as safe as the querier it wraps.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "accounting/ledger.h"
#include "jobs/job_registry.h"
#include "store/querier.h"

namespace gpuwatch::server {

// "a,b": a scope in messages.
std::string ProjectList(const std::vector<std::string>& projects);

bool ProjectInScope(const std::vector<std::string>& scope, const std::string& project);

// The ids of the jobs whose project is in `scope`: those the registry holds (`live`) and those
// `store` has a gpuwatch_job_info series for (null: none). REQUIRES: scope not empty.
std::set<std::string> JobsInScope(const std::vector<std::string>& scope,
                                  const std::vector<jobs::JobView>& live,
                                  const store::Querier* store);

// `doc[key]` (an array of objects) keeps the entries whose "job" is in `jobs`.
void KeepJobsInScope(nlohmann::json& doc, const char* key, const std::set<std::string>& jobs);

// One GPU a job in scope held, and when: [from_ms, to_ms] (to_ms INT64_MAX while held).
struct GpuGrant {
  std::string node;
  unsigned gpu = 0;
  int64_t from_ms = 0, to_ms = INT64_MAX;
};
// The GPUs `jobs` held, from the ledger's segments (accounting/ledger.h).
std::vector<GpuGrant> GpuGrantsOf(const accounting::Ledger& ledger,
                                  const std::set<std::string>& jobs);

// A querier that sees only the series whose `job` label is one of `jobs`, and the GPU series
// of `grants` within their times.
class ScopedQuerier final : public store::Querier {
 public:
  ScopedQuerier(const store::Querier& base, const std::set<std::string>& jobs,
                const std::vector<GpuGrant>& grants = {});

  Result<std::vector<store::SeriesSamples>> SelectRaw(const std::vector<store::Matcher>& matchers,
                                                      int64_t mint_ms,
                                                      int64_t maxt_ms) const override;
  Result<std::vector<store::SeriesRollups>> SelectRollups(
      store::Tier tier, const std::vector<store::Matcher>& matchers, int64_t mint_ms,
      int64_t maxt_ms, uint32_t parts) const override;
  store::TierCoverage Coverage(store::Tier tier) const override { return base_.Coverage(tier); }
  Result<std::vector<store::Labels>> Series(const std::vector<store::Matcher>& matchers,
                                            int64_t mint_ms, int64_t maxt_ms) const override;
  Result<std::vector<std::string>> LabelNames(
      const std::vector<store::Matcher>& matchers) const override;
  Result<std::vector<std::string>> LabelValues(
      const std::string& name, const std::vector<store::Matcher>& matchers) const override;

 private:
  // `matchers` and the scope's; nullopt when the scope holds no job (nothing is selected).
  std::optional<std::vector<store::Matcher>> With(const std::vector<store::Matcher>& m) const;
  // The grants' part of a selection: `m` with the grants' nodes, GPUs and no job, over the
  // part of [mint, maxt] they cover; nullopt when none does. `node`: only that node's GPUs.
  std::optional<std::vector<store::Matcher>> WithGrants(const std::vector<store::Matcher>& m,
                                                        const std::string* node = nullptr) const;
  // A label query (`ask`) over the scope's jobs and, node by node, its granted GPUs; merged.
  using AskFn = std::function<Result<std::vector<std::string>>(const std::vector<store::Matcher>&)>;
  Result<std::vector<std::string>> Strings(const std::vector<store::Matcher>& matchers,
                                           const AskFn& ask) const;
  // The held intervals of the series' GPU (by its Hostname and gpu labels); null for none.
  const std::vector<std::pair<int64_t, int64_t>>* HeldBy(const store::Labels& labels) const;
  const store::Querier& base_;
  std::optional<store::Matcher> scope_;  // job=~"^(a|b)$"; absent: no job in scope
  // (node, gpu) → sorted, merged [from, to] intervals.
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<int64_t, int64_t>>> held_;
  int64_t held_from_ms_ = INT64_MAX, held_to_ms_ = INT64_MIN;
};

}  // namespace gpuwatch::server
