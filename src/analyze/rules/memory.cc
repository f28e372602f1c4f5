// memory_leak: a GPU's memory, held by a job past its warm-up, that grows in every third of a
// window by a noticeable share of the card, never falls back, and does not slow down.
// What healthy jobs do instead (docs/research/failure-shapes.md §2): PyTorch's caching allocator
// reserves memory in steps as larger shapes arrive and then plateaus — fast at first, slower and
// slower; an evaluation phase steps it up once; a checkpoint may empty the cache
// (torch.cuda.empty_cache) and the next steps refill it to where it was. So:
// - a fall ends the run (what came before was not a leak), and the memory must then climb past
//   its level before the fall by the growth threshold: a refill is not a leak;
// - since the growth began (two thirds of a window at least), every third of it must grow by a
//   like amount and the last keep at least half the pace of the first: a leak grows with every
//   step at the same rate until the job runs out of memory, a cache fills and stops. (A cache
//   that takes longer than a few minutes to fill looks like a leak over a window this short.)
//   A steady growth that has filled the card to 95 % is judged on a third of a window: the
//   job is about to run out, and will not grow for two thirds more.
#include <fmt/format.h>

#include <array>
#include <deque>
#include <map>

#include "analyze/rules/rules.h"

namespace gpuwatch::analyze {
namespace {

constexpr std::array kCauses = {Cause::kMemoryLeak};
// A card this full is about to run out: the job's next allocations fail with a CUDA OOM.
constexpr double kFullShare = 0.95;

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

  struct GpuMem {
    std::deque<std::pair<double, double>> samples;  // (t, mem_used_mib) in the window
    double refill_level = 0;                        // the highest level before the last fall
  };
  MemoryOptions o_;
  std::map<std::pair<std::string, uint32_t>, GpuMem> mem_;
};

void MemoryRule::Check(const trace::TraceRecord& r, uint32_t gpu, double mem_mib, Context& ctx) {
  const Context::Holder* job = ctx.HolderOf(r.node, gpu);
  if (!job || r.t - job->since < o_.warmup_s) return;
  const trace::TraceNodeGpu* info = ctx.NodeGpu(r.node, gpu);
  if (!info || !info->memory_total_mib || *info->memory_total_mib <= 0) return;
  const double total = *info->memory_total_mib;
  GpuMem& m = mem_[{r.node, gpu}];
  auto& samples = m.samples;
  if (!samples.empty() && samples.back().second - mem_mib > o_.max_drop_share * total) {
    for (const auto& [t, v] : samples) m.refill_level = std::max(m.refill_level, v);
    samples.clear();  // fell back
  }
  samples.push_back({r.t, mem_mib});
  while (!samples.empty() && samples.front().first < r.t - o_.window_s) samples.pop_front();
  // Whether the window looks like a leak; the growth's start when it does.
  auto judge = [&]() -> std::optional<double> {
    const double span = samples.back().first - samples.front().first;
    if (span < o_.window_s * 0.9) return std::nullopt;
    // Growth in each third of the window, and enough of it overall.
    const double third = o_.window_s / 3;
    double prev_max = -1;
    for (int k = 0; k < 3; ++k) {
      const double from = samples.front().first + k * third, to = from + third;
      double mx = -1;
      for (const auto& [t, v] : samples) {
        if (t >= from && t < to) mx = std::max(mx, v);
      }
      if (mx < 0 || mx <= prev_max) return std::nullopt;
      prev_max = mx;
    }
    const double growth = samples.back().second - samples.front().second;
    if (growth < o_.min_growth_share * total) return std::nullopt;
    // Past the level before the last fall (a refilled cache only returns there).
    if (mem_mib < m.refill_level + o_.min_growth_share * total) return std::nullopt;
    // The growth began with the first sample above where the window started (the plateau
    // before it, when the window reaches back that far).
    double start = samples.back().first;
    for (const auto& [t, v] : samples) {
      if (v > samples.front().second) {
        start = t;
        break;
      }
    }
    // Steady since it began, over two thirds of a window at least: every third of the growth
    // grows by a like amount, and its last third keeps at least half its first third's pace (a
    // cache filling slower and slower does not).
    // A leak that has already filled the card (it is about to run out) is judged on a third.
    const double grew_s = samples.back().first - start;
    const bool full = mem_mib >= kFullShare * total;
    if (grew_s < (full ? third : 2 * third)) return std::nullopt;
    auto level_at = [&](double at) {
      double v = samples.front().second;
      for (const auto& [t, x] : samples) {
        if (t > at) break;
        v = x;
      }
      return v;
    };
    const double part = grew_s / 3;
    const double l0 = level_at(start - 1e-9), l1 = level_at(start + part),
                 l2 = level_at(start + 2 * part);
    const double g1 = l1 - l0, g2 = l2 - l1, g3 = samples.back().second - l2;
    const double most = std::max({g1, g2, g3}), least = std::min({g1, g2, g3});
    if (least <= 0 || least < 0.25 * most || g3 < 0.5 * g1) return std::nullopt;
    return start;
  };
  const std::optional<double> start = judge();
  if (!start) return;
  const double span = samples.back().first - samples.front().first;
  const double growth = samples.back().second - samples.front().second;
  const double rate_mib_s = growth / span;
  Finding f = MakeFinding(Cause::kMemoryLeak, Severity::kWarning, r.node);
  f.job = job->job;
  f.first_seen = *start;
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
