#include "analyze/impact.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace gpuwatch::analyze {
namespace {

// Causes that slow one GPU by holding its clock down: their share of the job's slowdown is
// the GPU's lost clock times the compute share of a step.
bool SlowsTheClock(Cause c) {
  return c == Cause::kThermalThrottle || c == Cause::kPowerThrottle || c == Cause::kClockSlowdown;
}

// The job running on the finding's node (and GPU, for a card cause) while the finding held.
std::optional<std::pair<std::string, const TaskView*>> JobOf(const Finding& f, const Context& ctx) {
  if (f.gpu) {
    if (const Context::Holder* h = ctx.HolderOf(f.node, static_cast<uint32_t>(*f.gpu))) {
      if (const TaskView* tv = ctx.Task(f.node, h->job)) return std::make_pair(h->job, tv);
    }
  }
  const auto& tasks = ctx.tasks();
  for (auto it = tasks.lower_bound({f.node, ""}); it != tasks.end() && it->first.first == f.node;
       ++it) {
    const TaskView& tv = it->second;
    if (tv.ended || tv.last_step_t < 0) continue;
    // Stepping while the finding held.
    if (tv.last_step_t >= f.first_seen && tv.first_step_t <= f.last_seen) {
      if (f.gpu) {
        bool on_gpu = false;
        for (const auto& [rank, gpu] : tv.rank_gpu) on_gpu |= static_cast<int>(gpu) == *f.gpu;
        if (!on_gpu) continue;
      }
      return std::make_pair(it->first.second, &tv);
    }
  }
  return std::nullopt;
}

void CardOrLinkImpact(Finding& f, const Context& ctx) {
  auto job = JobOf(f, ctx);
  if (!job) return;
  const TaskView& tv = *job->second;
  Impact im;
  im.job = job->first;
  im.step_s = tv.MedianStep();
  if (const TemplateStep* tb = ctx.TemplateOf(f.node, job->first)) {
    im.reference_step_s = tb->median_s;
    im.reference = fmt::format("baseline v{} of {}", tb->version, tb->template_name);
  } else if (tv.base_step_s) {
    im.reference_step_s = *tv.base_step_s;
    im.reference = "its own steps after warm-up";
  }
  // The rank the others wait for, on any node of the job; its GPU where it runs on this node.
  if (const auto* comm = ctx.RankComm(job->first); comm && !comm->empty()) {
    auto slowest = std::min_element(comm->begin(), comm->end(), [](const auto& a, const auto& b) {
      return a.second < b.second;
    });
    im.slowest_rank = static_cast<int>(slowest->first);
    if (auto g = tv.rank_gpu.find(slowest->first); g != tv.rank_gpu.end()) {
      im.slowest_gpu = static_cast<int>(g->second);
    }
  }
  const double slowdown = im.SlowdownShare();
  // The GPU's clock against its maximum, for a cause that holds the clock down.
  if (SlowsTheClock(f.cause) && f.gpu && slowdown > 0.02) {
    const trace::TraceGpu* g = ctx.LastGpu(f.node, static_cast<uint32_t>(*f.gpu));
    const trace::TraceNodeGpu* info = ctx.NodeGpu(f.node, static_cast<uint32_t>(*f.gpu));
    if (g && g->sm_clock_mhz && *g->sm_clock_mhz > 0 && info && info->max_sm_clock_mhz) {
      const double clock_loss = *info->max_sm_clock_mhz / *g->sm_clock_mhz - 1;
      const double comm = tv.comm_base_share.value_or(0);
      im.explained_share = std::clamp(clock_loss * (1 - comm) / slowdown, 0.0, 1.0);
    }
  }
  std::string words;
  if (im.reference_step_s > 0 && im.step_s > 0) {
    words = slowdown >= 0.02
                ? fmt::format("job {} is {:.0f}% slower than {} ({:.3g} s a step against {:.3g} s)",
                              im.job, slowdown * 100, im.reference, im.step_s, im.reference_step_s)
                : fmt::format("job {} steps at its usual pace ({:.3g} s against {:.3g} s, {})",
                              im.job, im.step_s, im.reference_step_s, im.reference);
  } else {
    words = fmt::format("job {} runs on it ({:.3g} s a step; no reference yet)", im.job, im.step_s);
  }
  if (im.slowest_rank && slowdown >= 0.02) {
    words += fmt::format("; rank {}{} is the slowest (the others wait for it)", *im.slowest_rank,
                         im.slowest_gpu ? fmt::format(" on GPU {}", *im.slowest_gpu) : "");
  }
  if (im.explained_share) {
    words += fmt::format("; this cause explains about {:.0f}% of the slowdown",
                         *im.explained_share * 100);
  }
  // In the summary, the chain from the cause to the job it costs, in words and numbers.
  f.summary += "; " + words;
  f.impact = std::move(im);
}

}  // namespace

void DescribeImpact(std::vector<Finding>& findings, const Context& ctx) {
  for (Finding& f : findings) {
    const model::Layer layer = f.layer();
    if (layer == model::Layer::kCard || layer == model::Layer::kLink) {
      CardOrLinkImpact(f, ctx);
      continue;
    }
    if (layer != model::Layer::kTask) continue;
    // The deeper causes the catalog says could explain it: none of them held (a finding one of
    // them explains was dropped by the deepest-cause pass).
    f.ruled_out.clear();
    for (const model::CauseInfo& c : model::CauseCatalog()) {
      for (const model::Explains& e : c.explains) {
        if (e.symptom == f.cause) {
          f.ruled_out.push_back(c.cause);
          break;
        }
      }
    }
  }
}

}  // namespace gpuwatch::analyze
