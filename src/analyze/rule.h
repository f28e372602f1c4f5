// A diagnosis rule (analyze/rules/): one family of causes, its state with it. The engine
// (diagnoser.h) hands every record to every rule after the shared Context has taken it in, and
// flushes the rules when findings are asked for; the rules report findings into the Context.
// (As Prometheus's rules/rule.go: a rule encapsulates its evaluation; the engine only
// dispatches.)
//
// Thread-safety: none; the engine's owner serialises.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "analyze/context.h"
#include "model/cause.h"
#include "trace/trace_records.h"

namespace gpuwatch::analyze {

class Rule {
 public:
  virtual ~Rule() = default;
  virtual std::string_view name() const = 0;
  // The causes this rule can report (the catalog test checks that every cause has a rule).
  virtual std::span<const model::Cause> causes() const = 0;
  // Takes in one record. The Context has already taken it in (its views include it).
  virtual void Observe(const trace::TraceRecord& r, Context& ctx) = 0;
  // Judges what waits for more records or for time (a job's NCCL log, the nodes compared with
  // one another, a hang) as of `t`, the latest record's time. May be called many times (live,
  // every tick); it must be idempotent.
  virtual void Flush(double t, Context& ctx) {}
  // The Context forgets `job` (ended, its alerts resolved): drop what is keyed by it.
  virtual void ForgetJob(const std::string& job) {}
  // How many entries of per-job state the rule holds now (what ForgetJob drops): for the test
  // and the benchmark that prove it bounded as jobs come and go.
  virtual size_t JobEntries() const { return 0; }
};

}  // namespace gpuwatch::analyze
