// memory_leak: a GPU's memory, held by a job past its warm-up, that grows in every third of a
// window by a noticeable share of the card and never falls back. A fall (a checkpoint, a cache
// emptied) ends the run: what came before was not a leak.
#include <fmt/format.h>

#include <array>
#include <deque>
#include <map>

#include "analyze/rules/rules.h"

namespace gpuwatch::analyze {
namespace {

constexpr std::array kCauses = {Cause::kMemoryLeak};

class MemoryRule : public Rule {
 public:
  explicit MemoryRule(const MemoryOptions& o) : o_(o) {}
  std::string_view name() const override { return "memory"; }
  std::span<const Cause> causes() const override { return kCauses; }

  void Observe(const trace::TraceRecord& r, Context& ctx) override {
    if (const auto* j = r.as<trace::TraceJob>()) {
      // A new job on these GPUs: what their memory did before is another job's.
      if (j->state.value_or("") == "start" && j->gpus) {
        for (uint32_t g : *j->gpus) mem_.erase({r.node, g});
      }
    }
    const auto* g = r.as<trace::TraceGpu>();
    if (g && g->gpu && !g->mig && g->mem_used_mib) Check(r, *g->gpu, *g->mem_used_mib, ctx);
  }

 private:
  void Check(const trace::TraceRecord& r, uint32_t gpu, double mem_mib, Context& ctx);

  MemoryOptions o_;
  std::map<std::pair<std::string, uint32_t>, std::deque<std::pair<double, double>>> mem_;
};

void MemoryRule::Check(const trace::TraceRecord& r, uint32_t gpu, double mem_mib, Context& ctx) {
  const Context::Holder* job = ctx.HolderOf(r.node, gpu);
  if (!job || r.t - job->since < o_.warmup_s) return;
  const trace::TraceNodeGpu* info = ctx.NodeGpu(r.node, gpu);
  if (!info || !info->memory_total_mib || *info->memory_total_mib <= 0) return;
  const double total = *info->memory_total_mib;
  auto& samples = mem_[{r.node, gpu}];
  if (!samples.empty() && samples.back().second - mem_mib > o_.max_drop_share * total) {
    samples.clear();  // fell back
  }
  samples.push_back({r.t, mem_mib});
  while (!samples.empty() && samples.front().first < r.t - o_.window_s) samples.pop_front();
  const double span = samples.back().first - samples.front().first;
  if (span < o_.window_s * 0.9) return;
  // Growth in each third of the window, and enough of it overall.
  const double third = o_.window_s / 3;
  double prev_max = -1;
  for (int k = 0; k < 3; ++k) {
    const double from = samples.front().first + k * third, to = from + third;
    double mx = -1;
    for (const auto& [t, v] : samples) {
      if (t >= from && t < to) mx = std::max(mx, v);
    }
    if (mx < 0 || mx <= prev_max) return;
    prev_max = mx;
  }
  const double growth = samples.back().second - samples.front().second;
  if (growth < o_.min_growth_share * total) return;
  // The growth began with the first sample above where the window started (the plateau
  // before it, when the window reaches back that far).
  double start = samples.back().first;
  for (const auto& [t, v] : samples) {
    if (v > samples.front().second) {
      start = t;
      break;
    }
  }
  const double rate_mib_s = growth / span;
  Finding f = MakeFinding(Cause::kMemoryLeak, Severity::kWarning, r.node);
  f.job = job->job;
  f.first_seen = start;
  const double left_s = rate_mib_s > 0 ? (total - mem_mib) / rate_mib_s : 0;
  f.summary = fmt::format(
      "GPU memory of job {} grows {:.0f} MiB/min on GPU {} and never falls back; at this rate "
      "it runs out in {:.0f} min",
      job->job, rate_mib_s * 60, gpu, left_s / 60);
  f.evidence = {fmt::format("mem_used_mib {:.0f} → {:.0f} over {:.0f} s (of {:.0f})",
                            samples.front().second, mem_mib, span, total)};
  // Per step, the unit a leak is made in (a tensor kept each step).
  if (const TaskView* tv = ctx.Task(r.node, job->job); tv && tv->durations.size() >= 5) {
    const double step_s = tv->MedianStep();
    f.evidence.push_back(
        fmt::format("≈ {} MiB per step (median step {} s)", Num(rate_mib_s * step_s), Num(step_s)));
  }
  f.action =
      "Look for tensors kept across steps (losses kept with their graph, growing caches, "
      "lists of outputs); compare torch.cuda.memory_allocated between steps";
  ctx.Report(std::move(f), r.t);
}

}  // namespace

std::unique_ptr<Rule> MakeMemoryRule(const MemoryOptions& o) {
  return std::make_unique<MemoryRule>(o);
}

}  // namespace gpuwatch::analyze
