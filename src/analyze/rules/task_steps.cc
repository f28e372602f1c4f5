// Task rules over a job's steps, judged on each node from its lowest rank there (rank 0 lives on
// one node only; a job-wide slowdown is found on each node):
// - data_stall: the share of step time waiting for input, well above the job's own post-warm-up
//   baseline and a floor, held;
// - checkpoint_stall: a checkpoint blocking several times the job's earlier ones (or over a
//   budget with no history);
// - straggler_gpu: the rank whose exposed comm is a robust outlier below the others' (the ranks
//   of a synchronous job wait for the slowest in their collective; it never waits). Judged
//   across the job's nodes, not per node: on a hub a multi-node job is one job, and a node may
//   hold one rank or two. The ranks are compared over the same steps (by step number, not wall
//   clock: nodes' records arrive late and their clocks may be off);
// - step_regression: steps 25 % over the job's own post-warm-up median, held 2 min; or, when its
//   template has a stored baseline on this shape, over that baseline's median and its p99.
// They also learn the lead rank's exposed-comm share (TaskView::comm_*), which net_congestion
// reads.
#include <fmt/format.h>

#include <array>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "analyze/rules/learned_median.h"
#include "analyze/rules/rules.h"
#include "common/stats.h"

namespace gpuwatch::analyze {
namespace {

using trace::TraceGpu;

constexpr std::array kCauses = {Cause::kDataStall, Cause::kCheckpointStall, Cause::kStragglerGpu,
                                Cause::kStepRegression};

// A GPU of the job: node and index.
using NodeGpu = std::pair<std::string, uint32_t>;

// How `gpu` on `node` differs from `peers` (the job's other GPUs, on any of its nodes) in its
// last card sample (clock, temperature, power, PCIe width, clock-event reasons): the
// straggler's explanation in words.
std::string CompareWithPeers(const Context& ctx, const std::string& node, uint32_t gpu,
                             const std::vector<NodeGpu>& peers) {
  const TraceGpu* me = ctx.LastGpu(node, gpu);
  if (!me) return fmt::format("no card sample of GPU {} to compare with its peers", gpu);
  // The peers' median of one field, when they report it.
  auto peer_median = [&](auto field) -> std::optional<double> {
    std::vector<double> v;
    for (const auto& [peer_node, p] : peers) {
      if (const TraceGpu* g = ctx.LastGpu(peer_node, p); g && (g->*field))
        v.push_back(*(g->*field));
    }
    if (v.empty()) return std::nullopt;
    return Median(v);
  };
  std::vector<std::string> differs;
  const auto clock = peer_median(&TraceGpu::sm_clock_mhz);
  if (me->sm_clock_mhz && clock && *me->sm_clock_mhz < 0.97 * *clock)
    differs.push_back(fmt::format("SM clock {} vs {} MHz", Num(*me->sm_clock_mhz), Num(*clock)));
  const auto temp = peer_median(&TraceGpu::temp_c);
  if (me->temp_c && temp && *me->temp_c > *temp + 5)
    differs.push_back(fmt::format("{} vs {} °C", Num(*me->temp_c), Num(*temp)));
  const auto power = peer_median(&TraceGpu::power_w);
  if (me->power_w && power && *me->power_w < 0.9 * *power)
    differs.push_back(fmt::format("{} vs {} W", Num(*me->power_w), Num(*power)));
  const auto width = peer_median(&TraceGpu::pcie_width);
  if (me->pcie_width && width && *me->pcie_width < *width)
    differs.push_back(fmt::format("PCIe x{} vs x{}", Num(*me->pcie_width), Num(*width)));
  if (me->throttle && !me->throttle->empty())
    differs.push_back(fmt::format("clock-event reasons {}", fmt::join(*me->throttle, ",")));
  if (differs.empty())
    return fmt::format(
        "GPU {}'s clock, temperature, power and PCIe link match its peers': look at its "
        "process (CPU, NUMA placement, input) and its memory errors",
        gpu);
  return fmt::format("GPU {} vs its peers' median: {}", gpu, fmt::join(differs, ", "));
}

class TaskStepsRule : public Rule {
 public:
  explicit TaskStepsRule(const TaskOptions& o) : o_(o) {}
  std::string_view name() const override { return "task_steps"; }
  std::span<const Cause> causes() const override { return kCauses; }

  void Observe(const trace::TraceRecord& r, Context& ctx) override {
    const auto* st = r.as<trace::TraceStep>();
    if (!st || !st->job) return;
    DataStall(r, *st, ctx);
    Steps(r, *st, ctx);
  }

  size_t JobEntries() const override { return stall_.size() + steps_.size() + job_ranks_.size(); }
  void ForgetJob(const std::string& job) override {
    EraseJob(stall_, job);
    EraseJob(steps_, job);
    job_ranks_.erase(job);
  }

 private:
  struct StallState {  // per (node, job)
    double first_t = -1;
    std::optional<LearnedMedian> baseline;         // the share learned after warm-up
    std::deque<std::pair<double, double>> recent;  // (t, share) within the rolling window
    double above_since = -1;                       // rolling median above the line since
    double first_above_step = -1;                  // first step of that run above the line
  };
  struct StepState {                                     // per (node, job)
    std::vector<double> checkpoints_s;                   // blocking time of each checkpoint so far
    std::optional<LearnedMedian> base_step;              // median step after warm-up
    std::optional<LearnedMedian> comm_base;              // the lead rank's exposed-comm share
    std::deque<std::pair<double, double>> recent_steps;  // (t, duration) in the window
    double slow_since = -1;
    double template_slow_since = -1;  // the same, against the template's baseline
  };
  // One job's ranks across its nodes, for straggler_gpu.
  // Nothing here compares the times of two nodes' records: their clocks may be off, and a node
  // resending its backlog is minutes behind. Times are only compared within one rank.
  struct RankSteps {
    std::string node;
    uint64_t count = 0;  // steps seen: the step number where a record gives none
    // (step, t, seconds) of its recent steps: within the window of its own latest step, and
    // the last kMaxSteps at most.
    std::deque<std::tuple<uint64_t, double, double>> comm, data;
  };
  static constexpr size_t kMaxSteps = 64;
  struct JobRanks {
    std::map<uint32_t, RankSteps> ranks;
    size_t since_judged = 0;     // step records since the last judgement
    double straggle_since = -1;  // the straggler's own time when its current run began
    uint32_t straggler = 0;      // that run's rank
  };
  // Both keyed by (node, job); the same node string and job id the Context keys tasks by.
  template <typename T>
  using PerTask = std::map<std::pair<std::string, std::string>, T>;

  void DataStall(const trace::TraceRecord& r, const trace::TraceStep& st, Context& ctx);
  void Steps(const trace::TraceRecord& r, const trace::TraceStep& st, Context& ctx);
  void Straggler(const trace::TraceRecord& r, const trace::TraceStep& st, const TaskView& ts,
                 Context& ctx);

  TaskOptions o_;
  PerTask<StallState> stall_;
  PerTask<StepState> steps_;
  std::map<std::string, JobRanks> job_ranks_;  // by job
};

void TaskStepsRule::DataStall(const trace::TraceRecord& r, const trace::TraceStep& st,
                              Context& ctx) {
  if (!st.duration_s || *st.duration_s <= 0 || !st.data_wait_s) return;
  StallState& s = stall_[{r.node, *st.job}];
  if (s.first_t < 0) s.first_t = r.t;
  if (r.t - s.first_t < o_.warmup_s) return;
  const double share = std::clamp(*st.data_wait_s / *st.duration_s, 0.0, 1.0);
  if (!s.baseline)
    s.baseline.emplace(o_.baseline_steps, o_.baseline_window_s, o_.baseline_min_steps * 2);
  if (!s.baseline->value()) {
    s.baseline->Add(r.t, share);
    return;
  }
  const double base_share = *s.baseline->value();
  s.recent.push_back({r.t, share});
  while (!s.recent.empty() && s.recent.front().first < r.t - o_.stall_window_s) {
    s.recent.pop_front();
  }
  const double line = std::max(o_.stall_floor_share, o_.stall_baseline_factor * base_share);
  const double rolling = MedianOfValues(s.recent);
  if (rolling < line) {
    s.above_since = -1;
    return;
  }
  if (s.above_since < 0) {
    s.above_since = r.t;
    // The run began with the first step of the window above the line.
    s.first_above_step = r.t;
    for (const auto& [t, sh] : s.recent) {
      if (sh >= line) {
        s.first_above_step = t;
        break;
      }
    }
  }
  if (r.t - s.above_since < o_.stall_hold_s) return;
  Finding f = MakeFinding(Cause::kDataStall, Severity::kWarning, r.node);
  f.job = *st.job;
  f.first_seen = s.first_above_step;
  f.summary = fmt::format("Job {} waits for input data {:.0f}% of each step (baseline {:.0f}%)",
                          *st.job, rolling * 100, base_share * 100);
  f.evidence = {fmt::format("data_wait share median {:.2f} over the last {} s vs baseline {:.3f}",
                            rolling, Num(o_.stall_window_s), base_share)};
  f.action =
      "Check the input pipeline: data loader workers, the file system or object store "
      "it reads from (iowait), and prefetching";
  ctx.Report(std::move(f), r.t);
}

void TaskStepsRule::Steps(const trace::TraceRecord& r, const trace::TraceStep& st, Context& ctx) {
  if (!st.duration_s) return;
  TaskView& ts = *ctx.MutableTask(r.node, *st.job);
  StepState& ss = steps_[{r.node, *st.job}];
  const bool lead = st.rank.value_or(ts.lead_rank) == ts.lead_rank;

  // checkpoint_stall: this checkpoint against the job's earlier ones (or a hard budget).
  if (st.checkpoint_s && *st.checkpoint_s > 0 && lead) {
    const double c = *st.checkpoint_s;
    bool stalled = false;
    std::string why;
    if (!ss.checkpoints_s.empty()) {
      const double base = Median(ss.checkpoints_s);
      stalled = c > o_.checkpoint_factor * base && c > base + o_.checkpoint_min_extra_s;
      why = fmt::format("checkpoint blocked {} s vs a median of {} s before", Num(c), Num(base));
    } else if (c > o_.checkpoint_budget_s) {
      stalled = true;
      why = fmt::format("checkpoint blocked {} s, over the {} s budget", Num(c),
                        Num(o_.checkpoint_budget_s));
    }
    if (stalled) {
      Finding f = MakeFinding(Cause::kCheckpointStall, Severity::kWarning, r.node);
      f.job = *st.job;
      // When the write began: the checkpoint_start event within this step, else the step's
      // end less the blocked time (a checkpoint written at the end of its step).
      f.first_seen =
          ts.last_checkpoint_start >= r.t - *st.duration_s - 1 ? ts.last_checkpoint_start : r.t - c;
      f.summary = fmt::format("Job {} was blocked {} s by a checkpoint write", *st.job, Num(c));
      f.evidence = {why};
      f.action = "Check the checkpoint target's write bandwidth; write asynchronously or shard";
      ctx.Report(std::move(f), r.t);
    } else {
      ss.checkpoints_s.push_back(c);
    }
  }

  Straggler(r, st, ts, ctx);

  // step_regression: slower steps than the job's own post-warm-up median (a deeper cause, if
  // one is found, replaces it).
  if (!lead || r.t - ts.first_step_t < o_.warmup_s) return;
  if (st.comm_s && *st.duration_s > 0) {
    const double share = *st.comm_s / *st.duration_s;
    if (!ss.comm_base) {
      ss.comm_base.emplace(o_.baseline_steps / 2, o_.baseline_window_s, o_.baseline_min_steps);
    }
    if (ss.comm_base->Add(r.t, share)) ts.comm_base_share = ss.comm_base->value();
    ts.comm_share.push_back({r.t, share});
    while (!ts.comm_share.empty() && ts.comm_share.front().first < r.t - 60) {
      ts.comm_share.pop_front();
    }
  }
  // The work of a step: a checkpoint's blocking is judged by checkpoint_stall, not here (one
  // long checkpoint would otherwise be a minute of "slow steps").
  const double work_s = std::max(0.0, *st.duration_s - st.checkpoint_s.value_or(0));
  ss.recent_steps.push_back({r.t, work_s});
  // The last minute, and at least the last 5 steps (slow jobs step less than once in 12 s).
  while (ss.recent_steps.size() > 5 && ss.recent_steps.front().first < r.t - 60) {
    ss.recent_steps.pop_front();
  }
  const double now = MedianOfValues(ss.recent_steps);
  // Slow against `limit` since when: a median of a handful of steps is one step's noise, so a
  // window of several is judged; the regression began with the trailing run of slow steps (the
  // window's median crossed the line only once half of it was slow).
  auto slow_since = [&](double limit, double& since) {
    if (ss.recent_steps.size() < 5 || now < limit) {
      since = -1;
      return false;
    }
    if (since < 0) {
      since = ss.recent_steps.back().first;
      for (auto it = ss.recent_steps.rbegin(); it != ss.recent_steps.rend(); ++it) {
        if (it->second < limit) break;
        since = it->first - it->second;  // that step's start
      }
    }
    return r.t - since >= o_.regression_hold_s;
  };
  auto report = [&](double since, std::string summary, std::string evidence) {
    Finding f = MakeFinding(Cause::kStepRegression, Severity::kWarning, r.node);
    f.job = *st.job;
    f.first_seen = since;
    f.summary = std::move(summary);
    f.evidence = {std::move(evidence)};
    f.action =
        "Compare with the template's baseline run (gpuwatch baseline compare) and what "
        "changed since: data, code, versions, node";
    ctx.Report(std::move(f), r.t);
  };
  // Against the template's stored baseline: over its median by the factor and above its p99,
  // so a template whose steps vary widely is not judged by its median alone.
  if (const TemplateStep* tb = ctx.TemplateOf(r.node, *st.job)) {
    const double limit = std::max(o_.regression_factor * tb->median_s, tb->p99_s);
    if (slow_since(limit, ss.template_slow_since)) {
      report(ss.template_slow_since,
             fmt::format("Job {} steps take {} s, {:.0f}% over template {}'s baseline {} s",
                         *st.job, Num(now), (now / tb->median_s - 1) * 100, tb->template_name,
                         Num(tb->median_s)),
             fmt::format("median step {} s over the last minute vs {} s (p99 {} s) in baseline "
                         "v{} of {} on {}",
                         Num(now), Num(tb->median_s), Num(tb->p99_s), tb->version,
                         tb->template_name, tb->shape));
    }
  }
  if (!ss.base_step) {
    ss.base_step.emplace(o_.baseline_steps / 2, o_.baseline_window_s, o_.baseline_min_steps);
  }
  if (!ss.base_step->value()) {
    if (ss.base_step->Add(r.t, work_s)) ts.base_step_s = ss.base_step->value();
    return;
  }
  const double base_step_s = *ss.base_step->value();
  if (slow_since(o_.regression_factor * base_step_s, ss.slow_since)) {
    report(ss.slow_since,
           fmt::format("Job {} steps take {} s, {:.0f}% over its own {} s", *st.job, Num(now),
                       (now / base_step_s - 1) * 100, Num(base_step_s)),
           fmt::format("median step {} s over the last minute vs {} s after warm-up", Num(now),
                       Num(base_step_s)));
  }
}

// Stragglers: synchronous ranks wait in communication for the slowest one, so the slow GPU's
// rank shows the least exposed comm and the others the most. All the job's ranks are compared,
// on whichever node each runs, over the steps every rank has reported: a node whose records
// arrive later or whose clock is off is still compared step for step.
void TaskStepsRule::Straggler(const trace::TraceRecord& r, const trace::TraceStep& st,
                              const TaskView& ts, Context& ctx) {
  if (!st.rank) return;
  JobRanks& jr = job_ranks_[*st.job];
  RankSteps& me = jr.ranks[*st.rank];
  if (me.node != r.node) {  // a rank that moved (a restart elsewhere) starts over
    me = RankSteps{};
    me.node = r.node;
  }
  const uint64_t step = st.step.value_or(me.count);
  ++me.count;
  auto window = [&](auto& q, double v) {
    // The same step again (a resend) is not a new one; a lower one is a rank restarted from a
    // checkpoint, counting again: what it did before is not the same steps as the others' now.
    if (!q.empty() && std::get<0>(q.back()) == step) return;
    if (!q.empty() && std::get<0>(q.back()) > step) q.clear();
    q.emplace_back(step, r.t, v);
    while (q.size() > kMaxSteps || std::get<1>(q.front()) < r.t - o_.straggler_window_s)
      q.pop_front();
  };
  if (st.comm_s) window(me.comm, *st.comm_s);
  if (st.data_wait_s) window(me.data, *st.data_wait_s);
  // Judged about once a step of the whole job (once as many step records as it has ranks came
  // in), on whichever rank's record that is: a lead rank that exited must not stop it, and the
  // cost is a few medians a record whatever the job's size.
  if (++jr.since_judged < jr.ranks.size()) return;
  jr.since_judged = 0;

  // A rank whose newest step is more than the kept steps behind the newest of any rank has
  // stopped reporting (it ended or exited) or is far behind in arriving: it leaves the
  // comparison until it catches up.
  uint64_t newest = 0;
  for (const auto& [rank, rs] : jr.ranks)
    if (!rs.comm.empty()) newest = std::max(newest, std::get<0>(rs.comm.back()));
  // The steps every rank with comm times holds: [lo, hi].
  uint64_t lo = 0, hi = UINT64_MAX;
  size_t compared = 0;
  for (auto it = jr.ranks.begin(); it != jr.ranks.end();) {
    const auto& q = it->second.comm;
    if (!q.empty() && std::get<0>(q.back()) + kMaxSteps < newest) {
      it = jr.ranks.erase(it);
      continue;
    }
    if (!q.empty()) {
      lo = std::max(lo, std::get<0>(q.front()));
      hi = std::min(hi, std::get<0>(q.back()));
      ++compared;
    }
    ++it;
  }
  if (compared < 3 || lo > hi) {
    ctx.SetRankComm(*st.job, {});
    return;
  }
  auto median_in_range = [&](const std::deque<std::tuple<uint64_t, double, double>>& q, size_t* n) {
    std::vector<double> v;
    for (const auto& [s, t, x] : q)
      if (s >= lo && s <= hi) v.push_back(x);
    if (n) *n = v.size();
    return v.empty() ? 0.0 : Median(std::move(v));
  };
  std::vector<std::pair<double, uint32_t>> medians;
  for (const auto& [rank, rs] : jr.ranks) {
    size_t n = 0;
    const double m = median_in_range(rs.comm, &n);
    if (n >= 5) medians.push_back({m, rank});
  }
  if (medians.size() < 3) {
    ctx.SetRankComm(*st.job, {});
    return;
  }
  // A card finding's cost names the rank the others wait for (impact.cc), wherever it runs.
  std::map<uint32_t, double> rank_comm;
  for (const auto& [c, rank] : medians) rank_comm[rank] = c;
  ctx.SetRankComm(*st.job, std::move(rank_comm));
  std::set<std::string> nodes;
  for (const auto& [c, rank] : medians) nodes.insert(jr.ranks.at(rank).node);
  std::sort(medians.begin(), medians.end());
  std::vector<double> others;
  for (size_t i = 1; i < medians.size(); ++i) others.push_back(medians[i].first);
  const double rest = Median(others);
  const uint32_t slow_rank = medians[0].second;
  const RankSteps& slow = jr.ranks.at(slow_rank);
  // The straggler's comm is an outlier below the others': by a share of the step that costs
  // time, well outside the others' spread (robust: median absolute deviation).
  const double gap = rest - medians[0].first;
  // A rank late because it waits longer for its own input is starved by its data loader (one
  // rank's shard on a slow disk), not slowed by its GPU: the others wait for it just the same,
  // so its own data wait is what tells them apart.
  std::vector<double> others_data;
  for (const auto& [rank, rs] : jr.ranks) {
    size_t n = 0;
    const double m = median_in_range(rs.data, &n);
    if (rank != slow_rank && n > 0) others_data.push_back(m);
  }
  const double own_data = median_in_range(slow.data, nullptr);
  const bool input_bound = !others_data.empty() && own_data - Median(others_data) >= 0.5 * gap;
  const bool straggle = rest > 0.02 && medians[0].first < o_.straggler_comm_share * rest &&
                        gap >= o_.straggler_step_share * ts.MedianStep() &&
                        gap > o_.straggler_mad_factor * Mad(others) && !input_bound;
  if (!straggle) {
    jr.straggle_since = -1;
    return;
  }
  // The hold is measured in the straggler's own time (its node's clock), and so is first_seen:
  // the finding is placed on its node.
  const double slow_now = std::get<1>(slow.comm.back());
  if (jr.straggle_since < 0 || jr.straggler != slow_rank) {
    jr.straggle_since = slow_now;
    jr.straggler = slow_rank;
  }
  if (slow_now - jr.straggle_since < o_.straggler_window_s / 2) return;
  const TaskView* slow_task = ctx.Task(slow.node, *st.job);
  if (!slow_task || !slow_task->rank_gpu.count(slow_rank)) return;
  const uint32_t gpu = slow_task->rank_gpu.at(slow_rank);
  Finding f =
      MakeFinding(Cause::kStragglerGpu, Severity::kWarning, slow.node, static_cast<int>(gpu));
  f.job = *st.job;
  f.first_seen = jr.straggle_since;
  f.summary = fmt::format(
      "GPU {} (rank {}) is the straggler of job {}: the other ranks wait {} s per step for it "
      "in communication, it waits {} s",
      gpu, slow_rank, *st.job, Num(rest), Num(medians[0].first));
  f.evidence = {
      fmt::format("median comm_s {} on rank {} vs {} on the others ({} ranks on {} "
                  "node{}, steps {}-{})",
                  Num(medians[0].first), slow_rank, Num(rest), medians.size(), nodes.size(),
                  nodes.size() == 1 ? "" : "s", lo, hi)};
  std::vector<NodeGpu> peers;
  for (const auto& [rank, rs] : jr.ranks) {
    const TaskView* tv = ctx.Task(rs.node, *st.job);
    if (rank == slow_rank || !tv) continue;
    if (auto g = tv->rank_gpu.find(rank); g != tv->rank_gpu.end())
      peers.push_back({rs.node, g->second});
  }
  f.evidence.push_back(CompareWithPeers(ctx, slow.node, gpu, peers));
  f.action =
      "Compare the GPU's clocks, temperature, power and PCIe link with its peers; move the job "
      "off it if it persists";
  ctx.Report(std::move(f), r.t);
}

}  // namespace

std::unique_ptr<Rule> MakeTaskStepsRule(const TaskOptions& o) {
  return std::make_unique<TaskStepsRule>(o);
}

}  // namespace gpuwatch::analyze
