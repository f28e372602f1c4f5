// Task rules on whether a job is alive and working:
// - job_hang: no step for the hang policy's limit (model/hang_policy.h: 10× the median step, at
//   least 60 s; 10 min inside a checkpoint). In a multi-node job it is listed on the node whose
//   GPU sat idle while the others spun in their collective (the stuck rank's), when that shows.
// - rank_exit: a rank's process missing from a round of proc records while most of the job's
//   processes are still there (the first such round of a job only: what vanishes after is the
//   teardown).
// - gpu_idle_allocated: a GPU a job holds at 0 % for ten minutes.
#include <fmt/format.h>

#include <array>
#include <map>
#include <set>

#include "analyze/rules/rules.h"

namespace gpuwatch::analyze {
namespace {

constexpr std::array kCauses = {Cause::kJobHang, Cause::kRankExit, Cause::kGpuIdleAllocated};

class TaskLivenessRule : public Rule {
 public:
  TaskLivenessRule(const TaskOptions& o, const model::HangPolicy& hang, const CardOptions& card)
      : o_(o), hang_(hang), busy_util_pct_(card.busy_util_pct) {}
  std::string_view name() const override { return "task_liveness"; }
  std::span<const Cause> causes() const override { return kCauses; }

  void Observe(const trace::TraceRecord& r, Context& ctx) override {
    if (const auto* p = r.as<trace::TraceProc>()) OnProc(r, *p, ctx);
    if (const auto* g = r.as<trace::TraceGpu>()) IdleAllocated(r, *g, ctx);
    if (r.node.empty()) return;
    // Hangs are judged in seconds to minutes: once per second of the node's records is plenty.
    double& checked = hang_checked_[r.node];
    if (r.t >= checked + 1) {
      checked = r.t;
      CheckHangs(r.node, r.t, ctx);
    }
  }

  void Flush(double t, Context& ctx) override {
    // A hang seen on several nodes of a job is listed where the stuck rank is, when that shows.
    std::map<std::string, std::vector<std::string>> stuck_nodes;
    for (const auto& [key, h] : hangs_) {
      if (h.judged && h.stuck_here) stuck_nodes[key.second].push_back(key.first);
    }
    for (const auto& [key, h] : hangs_) {
      if (stuck_nodes.count(key.second) != 0 && !(h.judged && h.stuck_here)) {
        ctx.Retract(Cause::kJobHang, key.first, key.second);
      }
    }
  }

  void ForgetJob(const std::string& job) override {
    for (auto it = hangs_.begin(); it != hangs_.end();) {
      it = it->first.second == job ? hangs_.erase(it) : std::next(it);
    }
    for (auto& [node, pr] : proc_rounds_) {
      pr.current.erase(job);
      pr.previous.erase(job);
    }
    for (auto it = exited_jobs_.begin(); it != exited_jobs_.end();) {
      it = it->second == job ? exited_jobs_.erase(it) : std::next(it);
    }
  }

 private:
  struct HangState {  // per (node, job)
    // Whether, when the hang was judged, one of the job's GPUs here sat idle while the others
    // spun in their collectives (the stuck rank's node in a multi-node job).
    bool judged = false, stuck_here = false;
  };
  // rank_exit: proc records come in rounds (one per process, the same t); per node, the round
  // being read and, per job, the (gpu → pid) of the last complete round.
  struct ProcRounds {
    double t = -1;
    std::map<std::string, std::map<uint32_t, uint32_t>> current, previous;
  };

  void CheckHangs(const std::string& node, double t, Context& ctx);
  void OnProc(const trace::TraceRecord& r, const trace::TraceProc& p, Context& ctx);
  void CloseProcRound(const std::string& node, ProcRounds& pr, Context& ctx);
  void IdleAllocated(const trace::TraceRecord& r, const trace::TraceGpu& g, Context& ctx);

  TaskOptions o_;
  model::HangPolicy hang_;
  double busy_util_pct_;
  std::map<std::string, double> hang_checked_;  // per node
  std::map<std::pair<std::string, std::string>, HangState> hangs_;
  std::map<std::string, ProcRounds> proc_rounds_;
  std::set<std::pair<std::string, std::string>> exited_jobs_;      // a rank_exit already reported
  std::map<std::pair<std::string, uint32_t>, double> idle_since_;  // allocated GPUs at 0 %
};

void TaskLivenessRule::CheckHangs(const std::string& node, double t, Context& ctx) {
  auto& tasks = ctx.tasks();
  for (auto it = tasks.lower_bound({node, ""}); it != tasks.end() && it->first.first == node;
       ++it) {
    const auto& [key, ts] = *it;
    if (ts.ended || ts.last_step_t < 0 || ts.durations.size() < 5) continue;
    const double median = ts.MedianStep();
    const double limit = model::HangLimitS(hang_, median, ts.checkpoint_since >= 0);
    if (t - ts.last_step_t < limit) continue;
    // Which node holds the stuck rank: the live ranks spin in their collective (busy GPUs),
    // the stuck one does not. Judged once, when the hang is first seen (the job's GPUs go idle
    // one by one later, when it is torn down).
    HangState& h = hangs_[key];
    if (!h.judged) {
      int idle = 0, spinning = 0;
      for (uint32_t gpu : ctx.GpusOf(node)) {
        const Context::Holder* holder = ctx.HolderOf(node, gpu);
        const trace::TraceGpu* g = ctx.LastGpu(node, gpu);
        if (!holder || holder->job != key.second || !g || !g->util_pct) continue;
        idle += *g->util_pct < 5 ? 1 : 0;
        spinning += *g->util_pct >= busy_util_pct_ ? 1 : 0;
      }
      h.judged = true;
      h.stuck_here = idle > 0 && spinning > 0;
    }
    Finding f = MakeFinding(Cause::kJobHang, Severity::kCritical, node);
    f.job = key.second;
    f.first_seen = ts.last_step_t;
    f.summary = fmt::format("Job {} has finished no step for {:.0f} s (its steps take {} s)",
                            key.second, t - ts.last_step_t, Num(median));
    f.evidence = {fmt::format("last step ended at {}; no step since", Num(ts.last_step_t))};
    f.action =
        "Dump the ranks' stacks (py-spy dump); look for a rank stuck outside the "
        "collective or an NCCL timeout in the logs";
    ctx.Report(std::move(f), t);
  }
}

void TaskLivenessRule::CloseProcRound(const std::string& node, ProcRounds& pr, Context& ctx) {
  for (const auto& [job, before] : pr.previous) {
    if (exited_jobs_.count({node, job}) != 0) continue;
    const TaskView* task = ctx.Task(node, job);
    if (task && task->ended) continue;
    auto now_it = pr.current.find(job);
    if (now_it == pr.current.end()) continue;  // the whole job left: it ended, no rank exit
    const auto& now = now_it->second;
    std::vector<uint32_t> missing;
    for (const auto& [gpu, pid] : before) {
      auto it = now.find(gpu);
      if (it == now.end() || it->second != pid) missing.push_back(gpu);
    }
    // One or a few ranks gone while most remain: an exit. Most gone at once: the teardown.
    if (missing.empty() || missing.size() * 2 > before.size()) continue;
    exited_jobs_.insert({node, job});
    for (uint32_t gpu : missing) {
      std::optional<int> rank;
      if (task) {
        for (const auto& [rk, g] : task->rank_gpu) {
          if (g == gpu) rank = static_cast<int>(rk);
        }
      }
      Finding f = MakeFinding(Cause::kRankExit, Severity::kCritical, node);
      f.job = job;
      f.rank = rank;
      f.first_seen = pr.t;
      f.summary = fmt::format("Rank {} of job {} (GPU {}, pid {}) exited while the job ran",
                              rank ? std::to_string(*rank) : "?", job, gpu, before.at(gpu));
      f.evidence = {fmt::format("pid {} on GPU {} absent from the processes at {}", before.at(gpu),
                                gpu, Num(pr.t))};
      f.action =
          "Read the rank's last log lines (OOM, exception, signal); the other ranks will "
          "hang in their next collective until the timeout";
      ctx.Report(std::move(f), pr.t);
    }
  }
  pr.previous = std::move(pr.current);
  pr.current.clear();
}

void TaskLivenessRule::OnProc(const trace::TraceRecord& r, const trace::TraceProc& p,
                              Context& ctx) {
  if (!p.gpu || !p.pid || !p.job) return;
  ProcRounds& pr = proc_rounds_[r.node];
  if (pr.t >= 0 && r.t > pr.t + 0.5) CloseProcRound(r.node, pr, ctx);
  pr.t = r.t;
  pr.current[*p.job][*p.gpu] = *p.pid;
}

void TaskLivenessRule::IdleAllocated(const trace::TraceRecord& r, const trace::TraceGpu& g,
                                     Context& ctx) {
  if (!g.gpu || g.mig) return;
  const auto key = std::make_pair(r.node, *g.gpu);
  const Context::Holder* held = ctx.HolderOf(r.node, *g.gpu);
  if (!held || !g.util_pct || *g.util_pct >= 1) {
    idle_since_.erase(key);
    return;
  }
  auto [it, fresh] = idle_since_.emplace(key, r.t);
  if (fresh || r.t - it->second < o_.idle_allocated_s) return;
  Finding f = MakeFinding(Cause::kGpuIdleAllocated, Severity::kWarning, r.node);
  f.job = held->job;
  f.first_seen = it->second + o_.idle_allocated_s;
  f.summary = fmt::format("Job {} holds GPU {}, idle for {:.0f} min", held->job, *g.gpu,
                          (r.t - it->second) / 60);
  f.evidence = {fmt::format("util_pct 0 on GPU {} since {}", *g.gpu, Num(it->second))};
  f.action = "Ask the job's owner to release the GPUs, or end the job";
  ctx.Report(std::move(f), r.t);
}

}  // namespace

std::unique_ptr<Rule> MakeTaskLivenessRule(const TaskOptions& o, const model::HangPolicy& hang,
                                           const CardOptions& card) {
  return std::make_unique<TaskLivenessRule>(o, hang, card);
}

}  // namespace gpuwatch::analyze
