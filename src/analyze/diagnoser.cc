#include "analyze/diagnoser.h"

#include <fmt/format.h>

#include <cmath>

#include "analyze/impact.h"
#include "analyze/rules/rules.h"
#include "common/time_base.h"

namespace gpuwatch::analyze {

Diagnoser::Diagnoser(DiagnoserOptions options) : ctx_(options), rules_(MakeRules(ctx_.options())) {}

void Diagnoser::SetTemplateBaselines(const std::vector<TemplateStep>& baselines) {
  ctx_.SetTemplateBaselines(baselines);
}

void Diagnoser::Observe(const trace::TraceRecord& r) {
  ctx_.Observe(r);
  for (const auto& rule : rules_) rule->Observe(r, ctx_);
  if (r.t >= next_forget_t_) {
    if (next_forget_t_ > 0) ForgetEndedJobs();
    next_forget_t_ = r.t + 60;
  }
}

size_t Diagnoser::ForgetEndedJobs() {
  const std::vector<std::string> jobs = ctx_.Forgettable(keep_job_);
  for (const std::string& job : jobs) {
    for (const auto& rule : rules_) rule->ForgetJob(job);
    ctx_.ForgetJob(job);
  }
  return jobs.size();
}

size_t Diagnoser::JobEntries() const {
  size_t n = ctx_.JobCount() + ctx_.TaskCount();
  for (const auto& rule : rules_) n += rule->JobEntries();
  return n;
}

std::vector<Finding> Diagnoser::Finish(double end_t) {
  for (const auto& rule : rules_) rule->Flush(end_t, ctx_);
  ctx_.DropOldFindings();
  std::vector<Finding> out = KeepDeepest(ctx_.Findings(), ctx_);
  DescribeImpact(out, ctx_);
  // What begins inside a maintenance window of its node (or of its GPU) is what the work does
  // — a reset GPU, a stress test's throttles, a reloaded driver — and is recorded as info, not
  // raised. Judged after KeepDeepest, so that the causes still explain one another as they are.
  for (Finding& f : out) {
    const auto* windows = ctx_.MaintenanceOf(f.node);
    if (!windows || f.is_info()) continue;
    for (const Context::Maintenance& w : *windows) {
      if (w.gpu && (!f.gpu || static_cast<uint32_t>(*f.gpu) != *w.gpu)) continue;
      if (f.first_seen < w.start || f.first_seen > w.end) continue;
      f.severity = Severity::kInfo;
      f.evidence.push_back(
          fmt::format("first seen during the maintenance window from {}{}{}",
                      FormatUtc(static_cast<int64_t>(std::llround(w.start * 1000))),
                      w.gpu ? fmt::format(" of GPU {}", *w.gpu) : "",
                      w.message.empty() ? "" : ": " + w.message));
      break;
    }
  }
  return out;
}

std::vector<Finding> KeepDeepest(std::vector<Finding> all, const Context& ctx) {
  // Decide first, then move: every finding is read while deciding.
  std::vector<bool> keep(all.size(), true);
  for (size_t i = 0; i < all.size(); ++i) {
    const std::set<std::string> job_nodes =
        all[i].job ? ctx.NodesOf(*all[i].job) : std::set<std::string>{};
    for (size_t j = 0; j < all.size() && keep[i]; ++j) {
      if (j != i && Explains(all[j], all[i], job_nodes)) keep[i] = false;
    }
  }
  std::vector<Finding> out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (keep[i]) out.push_back(std::move(all[i]));
  }
  return out;
}

}  // namespace gpuwatch::analyze
