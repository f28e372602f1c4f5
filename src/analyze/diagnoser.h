// Diagnoser: the diagnosis engine. Trace records in, findings out (../shared/spec/findings.md).
// Live and replay feed it the same records — the agent its own records in trace form,
// `gpuwatch replay` a trace file — through one driving loop (drive.h), so a cause found offline
// is the cause found live.
//
// The engine only dispatches: each record goes into the shared Context (context.h), then to
// every rule (rule.h; the families in rules/rules.h). Finish() flushes the rules and returns the
// findings after two passes over all of them:
// - Deepest cause only (KeepDeepest): a finding that another finding explains — by the cause
//   catalog's "explained by" graph (model/cause.h), in scope, there when the symptom began
//   (model::kExplainSlackS either side) and not info — is dropped: a throttled straggler is the
//   throttle, a rank that died of a lost GPU is the lost GPU. The alert book inhibits by the same
//   graph (alerts.h).
// - Maintenance: a finding first seen inside a maintenance window of its node (of its GPU when
//   the window names one) is recorded as info, with the window in its evidence.
// Findings of one cause at one place are one finding (first_seen, last_seen extended);
// first_seen is when the evidence began (the first sample of a sustained run), not when the
// rule became sure.
//
// Bounded: every minute of records, jobs that ended (or went silent) long enough ago are
// forgotten by the Context and every rule (ContextOptions; live, not while one of the job's
// alerts still fires: SetKeepJob).
//
// Thread-safety: none; one owner.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "analyze/baseline.h"
#include "analyze/context.h"
#include "analyze/diagnoser_options.h"
#include "analyze/finding.h"
#include "analyze/rule.h"
#include "trace/trace_records.h"

namespace gpuwatch::analyze {

class Diagnoser {
 public:
  explicit Diagnoser(DiagnoserOptions options = {});
  Diagnoser(const Diagnoser&) = delete;
  Diagnoser& operator=(const Diagnoser&) = delete;

  // The template baselines step_regression also judges against, one per (template, shape);
  // replaces what was set before.
  void SetTemplateBaselines(const std::vector<TemplateStep>& baselines);
  // Holds a job back from being forgotten while `keep(job)` (live: an alert of it fires).
  void SetKeepJob(std::function<bool(const std::string& job)> keep) { keep_job_ = std::move(keep); }

  void Observe(const trace::TraceRecord& r);
  // Runs what waits for more records (NCCL logs of jobs still running, cross-node comparisons)
  // and returns every finding so far. `end_t`: the last record's time. May be called again after
  // more records (live: every tick).
  std::vector<Finding> Finish(double end_t);

  // Forgets the jobs the Context says may go (done every minute of records by Observe too).
  size_t ForgetEndedJobs();

  const Context& context() const { return ctx_; }
  // Entries of per-job state in the Context and every rule: flat as jobs come and go.
  size_t JobEntries() const;
  const std::vector<std::unique_ptr<Rule>>& rules() const { return rules_; }

 private:
  Context ctx_;
  std::vector<std::unique_ptr<Rule>> rules_;
  std::function<bool(const std::string&)> keep_job_;
  double next_forget_t_ = 0;
};

// Drops what a deeper cause explains (see the file comment).
std::vector<Finding> KeepDeepest(std::vector<Finding> all, const Context& ctx);

}  // namespace gpuwatch::analyze
