// Task rules on whether a job is alive and working.
//
// job_hang: the NCCL watchdog's timeout of a collective (dated by how long it ran), or no step
// for the hang policy's limit (model/hang_policy.h: 10× the median step, at
// least 60 s; 10 min inside a checkpoint) while the job's GPUs do no real work. Ranks waiting in
// an NCCL collective spin their GPU at full utilisation on little power, and the stuck rank's
// GPU sits idle (NVIDIA/nccl#968, #1550; docs/research/failure-shapes.md §5); a job evaluating
// or otherwise working between steps draws its stepping power, so it is judged by the in-phase
// limit instead. In a multi-node job the hang is listed on the node whose GPU sat idle while the
// others spun (the stuck rank's), when that shows.
//
// rank_exit: a rank's process that died while the job ran. Real launchers leave little time to
// see a lone rank missing: torchrun polls its workers every --monitor-interval (0.1 s today) and,
// on the first failure, sends SIGTERM to every other worker and reports "failed (exitcode: N)
// local_rank: L (pid: P)" and a ChildFailedError table naming the root cause (its
// torch/distributed/elastic/multiprocessing/api.py and errors/__init__.py); DeepSpeed kills its
// subprocesses within a second (docs/research/launchers.md). So the whole job usually vanishes
// from one round of process records. The evidence, any of:
// - the launcher's report of the failed worker (rank, or local rank, or pid);
// - a round of proc records where one or a few ranks are gone while most remain;
// - the job ending with a non-zero exit code, with one rank's own error lines ("[rank5]:
//   Traceback …", a CUDA error, an out-of-memory) before the others';
// - the kernel's OOM killer naming the rank's pid;
// - with one rank a node, the job's only process on a node gone while its ranks on the other
//   nodes run on, their GPUs spinning with no step ended (waiting for it in a collective).
// The finding is dated by the earliest of these for the rank (its own last lines, the kill, the
// round it was missing from, the launcher's line). Not a rank_exit: the teardown of a hung job
// (the NCCL watchdog's timeout, or no step for the hang limit, before the failure: that is the
// hang's), and a job its scheduler stopped (the launcher itself received SIGTERM/SIGINT).
//
// gpu_idle_allocated: a GPU a live job holds (its start record's GPUs, or a GPU its processes
// hold) at under 5 % utilisation for ten minutes: "the share of time a kernel ran" is 0 on an
// unused GPU whatever holds it (failure-shapes.md §4); a sample of 5 % or more ends the run.
#include <fmt/format.h>

#include <array>
#include <map>
#include <set>

#include "analyze/rules/rules.h"
#include "common/stats.h"
#include "logs/kernel_log.h"
#include "logs/launcher_log.h"
#include "logs/log_classify.h"

namespace gpuwatch::analyze {
namespace {

constexpr std::array kCauses = {Cause::kJobHang, Cause::kRankExit, Cause::kGpuIdleAllocated};

// How far back a rank's own error lines and its OOM kill date a failure the launcher reports.
constexpr double kFailureLookbackS = 60;
// A GPU working between steps draws at least this share of its power while stepping.
constexpr double kWorkingPowerShare = 0.6;
// Utilisation under which a sample counts as idle.
constexpr double kIdleUtilPct = 5;

// "[rank5]:" at the start of a line (PyTorch's per-rank prefix), or nullopt.
std::optional<uint32_t> RankPrefix(std::string_view line) {
  const size_t at = line.find("[rank");
  if (at == std::string_view::npos || at > 8) return std::nullopt;
  uint32_t rank = 0;
  size_t i = at + 5, digits = 0;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9' && digits < 6) {
    rank = rank * 10 + static_cast<uint32_t>(line[i] - '0');
    ++i, ++digits;
  }
  if (digits == 0 || i >= line.size() || line[i] != ']') return std::nullopt;
  return rank;
}

class TaskLivenessRule : public Rule {
 public:
  TaskLivenessRule(const TaskOptions& o, const model::HangPolicy& hang, const CardOptions& card)
      : o_(o), hang_(hang), busy_util_pct_(card.busy_util_pct) {}
  std::string_view name() const override { return "task_liveness"; }
  std::span<const Cause> causes() const override { return kCauses; }

  void Observe(const trace::TraceRecord& r, Context& ctx) override {
    if (const auto* p = r.as<trace::TraceProc>()) OnProc(r, *p, ctx);
    if (const auto* g = r.as<trace::TraceGpu>()) OnGpu(r, *g, ctx);
    if (const auto* l = r.as<trace::TraceLog>()) OnLog(r, *l, ctx);
    if (const auto* j = r.as<trace::TraceJob>()) OnJob(r, *j, ctx);
    if (r.node.empty()) return;
    // Hangs are judged in seconds to minutes: once per second of the node's records is plenty.
    double& checked = hang_checked_[r.node];
    if (r.t >= checked + 1) {
      checked = r.t;
      CheckHangs(r.node, r.t, ctx);
      CheckProcRounds(r.node, r.t, ctx);
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

  size_t JobEntries() const override {
    size_t n = hangs_.size() + deaths_.size() + exited_.size() + lone_exits_.size() +
               lone_noted_.size() + lone_reported_.size();
    for (const auto& [node, pr] : proc_rounds_) n += pr.current.size() + pr.previous.size();
    return n;
  }
  void ForgetJob(const std::string& job) override {
    EraseJob(hangs_, job);
    EraseJob(deaths_, job);
    for (auto& [node, pr] : proc_rounds_) {
      pr.current.erase(job);
      pr.previous.erase(job);
    }
    for (auto it = exited_.begin(); it != exited_.end();) {
      it = it->second == job ? exited_.erase(it) : std::next(it);
    }
    std::erase_if(lone_exits_, [&job](const LoneExit& e) { return e.job == job; });
    for (auto* noted : {&lone_noted_, &lone_reported_})
      std::erase_if(*noted, [&job](const auto& nj) { return nj.second == job; });
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
    double interval = -1;        // between the last two rounds: when the next one is due
    bool overdue_noted = false;  // the next round is overdue, and its lone exits are noted
    std::map<std::string, std::map<uint32_t, uint32_t>> current, previous;
  };
  // A job that left a node entirely (its one process there gone) while it runs on other nodes:
  // a rank's exit once the node's rounds stay without it and another node's later round still
  // holds the job's processes (not the job's end, when every node's processes go at once).
  struct LoneExit {
    std::string node, job;
    uint32_t pid = 0, gpu = 0;
    double t = 0;            // the round it was first missing from
    double confirm_t = 0;    // judged at the node's records from then on
    bool elsewhere = false;  // a later round of another node holds the job
    double step_s = 1;       // the job's median step
  };
  // GPU samples older than this (a node gone silent) say nothing of what its GPUs do now.
  static constexpr double kFreshGpuS = 15;
  // What the job's records say about its ranks dying (per node, job).
  struct Deaths {
    logs::LauncherLogParser launcher;
    size_t lines = 0;
    size_t failures_seen = 0;                // launcher failures judged so far
    std::map<uint32_t, double> error_lines;  // rank → its first error line's time
    std::map<uint32_t, double> pid_gone;     // pid → the round it was first missing from
    std::map<uint32_t, uint32_t> pid_gpu;    // pid → GPU, from proc records
    double watchdog_t = -1;                  // the first NCCL watchdog timeout
    size_t timeouts_seen = 0;
  };
  struct GpuPower {                                // per (node, GPU)
    std::deque<std::pair<double, double>> recent;  // (t, power_w) over the last minute
    double stepping_w = 0;                         // running median-ish while the job steps
    int stepping_n = 0;
  };

  void CheckHangs(const std::string& node, double t, Context& ctx);
  // Whether the job's GPUs on `node` work (draw their stepping power) though no step ends.
  bool WorkingWithoutSteps(const std::string& node, const std::string& job,
                           const Context& ctx) const;
  void OnProc(const trace::TraceRecord& r, const trace::TraceProc& p, Context& ctx);
  void CloseProcRound(const std::string& node, ProcRounds& pr, Context& ctx);
  // At any record of `node`: closes a process round that is overdue (its processes gone, so
  // no record of it comes), and judges the node's lone exits.
  void CheckProcRounds(const std::string& node, double t, Context& ctx);
  // Notes a possible lone exit: `held` (gpu → pid), the job's processes on `node` in its last
  // round, none of them in the round due at `t`.
  void NoteLoneExit(const std::string& node, const std::string& job,
                    const std::map<uint32_t, uint32_t>& held, double t, double interval,
                    const Context& ctx);
  // The GPU's latest sample, if it is at most kFreshGpuS older than `t`.
  const trace::TraceGpu* FreshGpu(const std::string& node, uint32_t gpu, double t,
                                  const Context& ctx) const;
  void OnGpu(const trace::TraceRecord& r, const trace::TraceGpu& g, Context& ctx);
  void OnLog(const trace::TraceRecord& r, const trace::TraceLog& l, Context& ctx);
  void OnJob(const trace::TraceRecord& r, const trace::TraceJob& j, Context& ctx);
  // Judges the launcher's newly reported failures of `job` on `node`.
  void JudgeFailures(const std::string& node, const std::string& job, double t, Context& ctx);
  void WatchdogHang(const trace::TraceRecord& r, const std::string& job,
                    const logs::WatchdogTimeout& w, Context& ctx);
  // Reports the rank's exit unless the job was hung or stopped by its scheduler.
  void ReportExit(const std::string& node, const std::string& job, std::optional<uint32_t> rank,
                  double first_seen, double t, std::vector<std::string> evidence, Context& ctx);
  std::optional<uint32_t> RankOfPid(const std::string& node, const std::string& job, uint32_t pid,
                                    const Context& ctx) const;
  std::optional<uint32_t> RankOfLocal(const std::string& node, const std::string& job,
                                      int local_rank, const Context& ctx) const;
  bool WasHung(const std::string& node, const std::string& job, double t, const Context& ctx) const;

  TaskOptions o_;
  model::HangPolicy hang_;
  double busy_util_pct_;
  std::map<std::string, double> hang_checked_;  // per node
  std::map<std::pair<std::string, std::string>, HangState> hangs_;
  std::map<std::pair<std::string, std::string>, Deaths> deaths_;
  std::map<std::string, ProcRounds> proc_rounds_;
  std::vector<LoneExit> lone_exits_;
  // (node, job) noted as a lone exit once: an exit is judged once, not again when the stale
  // rounds it left are read later; and those reported, retracted if the job then ends well.
  std::set<std::pair<std::string, std::string>> lone_noted_, lone_reported_;
  std::map<std::pair<std::string, uint32_t>, double> gpu_seen_t_;  // (node, GPU) → last sample
  // (node, job) whose rank exit was judged: the first death only (what follows is the teardown).
  std::set<std::pair<std::string, std::string>> exited_;
  std::map<std::pair<std::string, uint32_t>, double> idle_since_;  // allocated GPUs idle
  std::map<std::pair<std::string, uint32_t>, GpuPower> power_;
  std::map<std::pair<std::string, uint32_t>, double> oom_kills_;  // (node, pid) → when killed
};

void TaskLivenessRule::OnGpu(const trace::TraceRecord& r, const trace::TraceGpu& g, Context& ctx) {
  if (!g.gpu || g.mig) return;
  const auto key = std::make_pair(r.node, *g.gpu);
  gpu_seen_t_[key] = r.t;
  const Context::Holder* held = ctx.HolderOf(r.node, *g.gpu);
  // Power while stepping, and over the last minute: a hang against a job at work.
  if (g.power_w) {
    GpuPower& p = power_[key];
    p.recent.push_back({r.t, *g.power_w});
    while (!p.recent.empty() && p.recent.front().first < r.t - 60) p.recent.pop_front();
    const TaskView* tv = held ? ctx.Task(r.node, held->job) : nullptr;
    if (tv && tv->last_step_t >= 0 && r.t - tv->last_step_t < 5 && g.util_pct &&
        *g.util_pct >= busy_util_pct_) {
      // A running mean of the busy samples: stable enough over minutes of steps.
      p.stepping_w += (*g.power_w - p.stepping_w) / (++p.stepping_n);
      if (p.stepping_n > 600) p.stepping_n = 600;
    }
  }
  // gpu_idle_allocated: the GPU's idle run is kept whoever holds it, so that a job seen to
  // hold it only from its first process record is judged from its start.
  if (!g.util_pct || *g.util_pct >= kIdleUtilPct) {
    idle_since_.erase(key);
    return;
  }
  auto [it, fresh] = idle_since_.emplace(key, r.t);
  if (fresh || !held) return;
  const TaskView* tv = ctx.Task(r.node, held->job);
  const double job_from = tv && tv->start_t >= 0 ? tv->start_t : held->since;
  const double since = std::max(it->second, job_from);
  if (r.t - since < o_.idle_allocated_s) return;
  Finding f = MakeFinding(Cause::kGpuIdleAllocated, Severity::kWarning, r.node);
  f.job = held->job;
  f.first_seen = since + o_.idle_allocated_s;
  f.summary = fmt::format("Job {} holds GPU {}, idle for {:.0f} min", held->job, *g.gpu,
                          (r.t - since) / 60);
  f.evidence = {
      fmt::format("util_pct under {} on GPU {} since {}", Num(kIdleUtilPct), *g.gpu, Num(since))};
  if (g.mem_used_mib) {
    f.evidence.push_back(fmt::format("{} MiB of its memory held", Num(*g.mem_used_mib)));
  }
  f.action = "Ask the job's owner to release the GPUs, or end the job";
  ctx.Report(std::move(f), r.t);
}

bool TaskLivenessRule::WorkingWithoutSteps(const std::string& node, const std::string& job,
                                           const Context& ctx) const {
  std::vector<double> now, stepping;
  for (uint32_t gpu : ctx.GpusOf(node)) {
    const Context::Holder* h = ctx.HolderOf(node, gpu);
    auto p = power_.find({node, gpu});
    if (!h || h->job != job || p == power_.end() || p->second.stepping_n < 10 ||
        p->second.recent.empty()) {
      continue;
    }
    now.push_back(MedianOfValues(p->second.recent));
    stepping.push_back(p->second.stepping_w);
  }
  if (now.empty()) return false;
  return Median(now) >= kWorkingPowerShare * Median(stepping);
}

void TaskLivenessRule::CheckHangs(const std::string& node, double t, Context& ctx) {
  auto& tasks = ctx.tasks();
  for (auto it = tasks.lower_bound({node, ""}); it != tasks.end() && it->first.first == node;
       ++it) {
    const auto& [key, ts] = *it;
    if (ts.ended || ts.last_step_t < 0 || ts.durations.size() < 5) continue;
    const double median = ts.MedianStep();
    // The in-phase limit is never the shorter: a job within the plain one is not hung, and the
    // power scan of WorkingWithoutSteps is left for the jobs that went quiet.
    if (t - ts.last_step_t < model::HangLimitS(hang_, median, false)) continue;
    const bool in_phase = ts.checkpoint_since >= 0 || WorkingWithoutSteps(node, key.second, ctx);
    if (t - ts.last_step_t < model::HangLimitS(hang_, median, in_phase)) continue;
    // Which node holds the stuck rank: the live ranks spin in their collective (busy GPUs),
    // the stuck one does not. Judged once, when the hang is first seen (the job's GPUs go idle
    // one by one later, when it is torn down).
    // The spinning GPUs may be on other nodes: with one rank a node (1-GPU nodes, or one rank
    // a node by design) the stuck node has no spinning peer of its own.
    HangState& h = hangs_[key];
    if (!h.judged) {
      int idle_here = 0, spinning = 0;
      for (const std::string& n : ctx.NodesOf(key.second)) {
        for (uint32_t gpu : ctx.GpusOf(n)) {
          const Context::Holder* holder = ctx.HolderOf(n, gpu);
          const trace::TraceGpu* g = FreshGpu(n, gpu, t, ctx);
          if (!holder || holder->job != key.second || !g || !g->util_pct) continue;
          if (n == node) idle_here += *g->util_pct < kIdleUtilPct ? 1 : 0;
          spinning += *g->util_pct >= busy_util_pct_ ? 1 : 0;
        }
      }
      h.judged = true;
      h.stuck_here = idle_here > 0 && spinning > 0;
    }
    Finding f = MakeFinding(Cause::kJobHang, Severity::kCritical, node);
    f.job = key.second;
    f.first_seen = ts.last_step_t;
    f.summary = fmt::format("Job {} has finished no step for {:.0f} s (its steps take {} s)",
                            key.second, t - ts.last_step_t, Num(median));
    f.evidence = {fmt::format("last step ended at {}; no step since", Num(ts.last_step_t))};
    if (h.stuck_here) {
      f.evidence.push_back(
          "one of its GPUs here sits idle while the job's others spin in their collective: the "
          "stuck rank is on this node");
    }
    f.action =
        "Dump the ranks' stacks (py-spy dump); look for a rank stuck outside the "
        "collective or an NCCL timeout in the logs";
    ctx.Report(std::move(f), t);
  }
}

bool TaskLivenessRule::WasHung(const std::string& node, const std::string& job, double t,
                               const Context& ctx) const {
  auto d = deaths_.find({node, job});
  if (d != deaths_.end() && d->second.watchdog_t >= 0 && d->second.watchdog_t <= t) return true;
  // Any node of the job without a step for the hang limit before `t`.
  for (const std::string& n : ctx.NodesOf(job)) {
    const TaskView* tv = ctx.Task(n, job);
    if (!tv || tv->last_step_t < 0 || tv->durations.size() < 5) continue;
    const double limit = model::HangLimitS(hang_, tv->MedianStep(), false);
    if (t - tv->last_step_t >= limit) return true;
  }
  return false;
}

// The rank the step records put on `gpu` of this node (the last, should several share it).
std::optional<uint32_t> RankOnGpu(const TaskView* task, uint32_t gpu) {
  std::optional<uint32_t> rank;
  if (task) {
    for (const auto& [rk, g] : task->rank_gpu)
      if (g == gpu) rank = rk;
  }
  return rank;
}

std::optional<uint32_t> TaskLivenessRule::RankOfPid(const std::string& node, const std::string& job,
                                                    uint32_t pid, const Context& ctx) const {
  auto d = deaths_.find({node, job});
  const TaskView* tv = ctx.Task(node, job);
  if (d == deaths_.end() || !tv) return std::nullopt;
  auto g = d->second.pid_gpu.find(pid);
  if (g == d->second.pid_gpu.end()) return std::nullopt;
  for (const auto& [rank, gpu] : tv->rank_gpu) {
    if (gpu == g->second) return rank;
  }
  return std::nullopt;
}

std::optional<uint32_t> TaskLivenessRule::RankOfLocal(const std::string& node,
                                                      const std::string& job, int local_rank,
                                                      const Context& ctx) const {
  // Launchers number a node's workers 0..n-1 in global-rank order (torchrun: rank = group rank
  // × local world size + local rank).
  const TaskView* tv = ctx.Task(node, job);
  if (!tv || local_rank < 0 || static_cast<size_t>(local_rank) >= tv->rank_gpu.size()) {
    return std::nullopt;
  }
  auto it = tv->rank_gpu.begin();
  std::advance(it, local_rank);
  return it->first;
}

void TaskLivenessRule::ReportExit(const std::string& node, const std::string& job,
                                  std::optional<uint32_t> rank, double first_seen, double t,
                                  std::vector<std::string> evidence, Context& ctx) {
  if (!exited_.insert({node, job}).second) return;
  // The teardown of a hung job, or a job its scheduler stopped, is not a rank's death.
  if (WasHung(node, job, first_seen, ctx)) return;
  auto d = deaths_.find({node, job});
  if (d != deaths_.end() && d->second.launcher.report().launcher_signalled) return;
  std::optional<int> gpu;
  if (const TaskView* tv = ctx.Task(node, job); tv && rank) {
    if (auto it = tv->rank_gpu.find(*rank); it != tv->rank_gpu.end()) gpu = it->second;
  }
  Finding f = MakeFinding(Cause::kRankExit, Severity::kCritical, node);
  f.job = job;
  if (rank) f.rank = static_cast<int>(*rank);
  f.first_seen = first_seen;
  f.summary =
      fmt::format("Rank {} of job {}{} died while the job ran", rank ? std::to_string(*rank) : "?",
                  job, gpu ? fmt::format(" (GPU {})", *gpu) : "");
  f.evidence = std::move(evidence);
  f.action =
      "Read the rank's last log lines (its exception, an out-of-memory, the signal); the other "
      "ranks were torn down after it";
  ctx.Report(std::move(f), t);
}

void TaskLivenessRule::JudgeFailures(const std::string& node, const std::string& job, double t,
                                     Context& ctx) {
  Deaths& d = deaths_[{node, job}];
  const logs::LauncherReport& rep = d.launcher.report();
  if (rep.failures.size() == d.failures_seen) return;
  d.failures_seen = rep.failures.size();
  // The root cause the launcher names (it lists it first), else its first failure.
  const logs::LauncherFailure& f = rep.failures.front();
  if (f.exitcode && *f.exitcode == 0) return;
  std::optional<uint32_t> rank;
  if (f.rank && *f.rank >= 0) rank = static_cast<uint32_t>(*f.rank);
  if (!rank && f.pid) rank = RankOfPid(node, job, static_cast<uint32_t>(*f.pid), ctx);
  if (!rank && f.local_rank) rank = RankOfLocal(node, job, *f.local_rank, ctx);
  double first = t;
  std::vector<std::string> evidence;
  evidence.push_back(fmt::format("the launcher reports rank {}{} failed{}{}",
                                 rank ? std::to_string(*rank) : "?",
                                 f.local_rank ? fmt::format(" (local rank {})", *f.local_rank) : "",
                                 f.exitcode ? fmt::format(" with exit code {}", *f.exitcode) : "",
                                 f.signal ? fmt::format(" ({})", *f.signal) : ""));
  if (rank) {
    if (auto e = d.error_lines.find(*rank);
        e != d.error_lines.end() && e->second >= t - kFailureLookbackS) {
      first = std::min(first, e->second);
      evidence.push_back(fmt::format("its own error lines from {}", Num(e->second)));
    }
  }
  if (f.pid) {
    const auto pid = static_cast<uint32_t>(*f.pid);
    if (auto k = oom_kills_.find({node, pid});
        k != oom_kills_.end() && k->second >= t - kFailureLookbackS) {
      first = std::min(first, k->second);
      evidence.push_back(
          fmt::format("the kernel's OOM killer killed pid {} at {}", pid, Num(k->second)));
    }
    if (auto g = d.pid_gone.find(pid);
        g != d.pid_gone.end() && g->second >= t - kFailureLookbackS) {
      first = std::min(first, g->second);
    }
  }
  ReportExit(node, job, rank, first, t, std::move(evidence), ctx);
}

void TaskLivenessRule::OnLog(const trace::TraceRecord& r, const trace::TraceLog& l, Context& ctx) {
  if (!l.line) return;
  const std::string source = l.source.value_or("");
  if (source == "kernel") {
    const logs::KernelLine k = logs::ParseKernelLine(*l.line);
    if (k.kind == logs::KernelLine::Kind::kOomKill && k.pid) {
      if (oom_kills_.size() >= 1024) {  // bounded: only recent kills date a failure
        for (auto it = oom_kills_.begin(); it != oom_kills_.end();) {
          it = it->second < r.t - kFailureLookbackS ? oom_kills_.erase(it) : std::next(it);
        }
      }
      if (oom_kills_.size() < 65536) oom_kills_.emplace(std::make_pair(r.node, *k.pid), r.t);
    }
    return;
  }
  if (source != "job" || !l.job) return;
  Deaths& d = deaths_[{r.node, *l.job}];
  if (d.lines++ > 1000000) return;  // bounded: a job that logs without end
  // A rank's own error lines: the record's rank, or PyTorch's "[rankN]:" prefix.
  std::optional<uint32_t> rank = l.rank;
  if (!rank) rank = RankPrefix(*l.line);
  if (rank && d.error_lines.count(*rank) == 0) {
    const logs::LogLineClass c = logs::ClassifyLogLine(*l.line);
    if (c.severity >= logs::LogLineClass::Severity::kError) d.error_lines[*rank] = r.t;
  }
  d.launcher.Feed(*l.line, d.lines);
  const auto& timeouts = d.launcher.report().watchdog_timeouts;
  if (d.watchdog_t < 0 && !timeouts.empty()) d.watchdog_t = r.t;
  if (timeouts.size() > d.timeouts_seen) {
    d.timeouts_seen = timeouts.size();
    WatchdogHang(r, *l.job, timeouts.back(), ctx);
  }
  JudgeFailures(r.node, *l.job, r.t, ctx);
}

void TaskLivenessRule::WatchdogHang(const trace::TraceRecord& r, const std::string& job,
                                    const logs::WatchdogTimeout& w, Context& ctx) {
  // ProcessGroupNCCL's watchdog: "WorkNCCL(SeqNum=N, OpType=…, Timeout(ms)=600000) ran for
  // 600123 milliseconds before timing out" (pytorch/pytorch#118369; docs/research/
  // launchers.md). The collective it names began `ran_for` before the line, right after the
  // last step the job finished: the hang's start, even for a job that reports no steps.
  if (!w.ran_for_ms || *w.ran_for_ms <= 0) return;
  const double since = r.t - static_cast<double>(*w.ran_for_ms) / 1000;
  const TaskView* tv = ctx.Task(r.node, job);
  // A job whose steps went on after that moment is not hung there (an old line re-logged).
  if (tv && tv->last_step_t > since + 1) return;
  Finding f = MakeFinding(Cause::kJobHang, Severity::kCritical, r.node);
  f.job = job;
  f.first_seen = tv && tv->last_step_t >= 0 && tv->last_step_t <= since ? tv->last_step_t : since;
  f.summary = fmt::format("Job {} hung: rank {}'s {} collective ran {:.0f} s and timed out", job,
                          w.rank ? std::to_string(*w.rank) : "?", w.op.value_or("NCCL"),
                          static_cast<double>(*w.ran_for_ms) / 1000);
  f.evidence = {fmt::format("NCCL watchdog: {} seq {} ran for {} ms (timeout {} ms)",
                            w.op.value_or("?"), w.seq ? std::to_string(*w.seq) : "?", *w.ran_for_ms,
                            w.timeout_ms ? std::to_string(*w.timeout_ms) : "?")};
  f.action =
      "Find the rank that never entered the collective (the one without a watchdog line); "
      "dump its stack (py-spy dump) before the job is torn down";
  ctx.Report(std::move(f), r.t);
}

void TaskLivenessRule::OnJob(const trace::TraceRecord& r, const trace::TraceJob& j, Context& ctx) {
  if (!j.job || j.state.value_or("") != "end" || !j.exit_code) return;
  if (*j.exit_code == 0) {
    // A job that ended well lost no rank: a lone exit judged before its end was its nodes
    // finishing one by one (a rank still busy on the last one).
    for (auto it = lone_reported_.begin(); it != lone_reported_.end();) {
      if (it->second != *j.job) {
        ++it;
        continue;
      }
      ctx.Retract(Cause::kRankExit, it->first, it->second);
      it = lone_reported_.erase(it);
    }
    return;
  }
  // A failed job whose launcher named no rank: the rank whose own error lines came first.
  auto it = deaths_.find({r.node, *j.job});
  if (it == deaths_.end() || it->second.failures_seen > 0 || it->second.error_lines.empty()) {
    return;
  }
  const auto& errors = it->second.error_lines;
  auto first = std::min_element(errors.begin(), errors.end(),
                                [](const auto& a, const auto& b) { return a.second < b.second; });
  if (first->second < r.t - 300) return;  // old lines, not this death
  ReportExit(
      r.node, *j.job, first->first, first->second, r.t,
      {fmt::format("the job ended with exit code {}", *j.exit_code),
       fmt::format("rank {} logged its error first, at {}", first->first, Num(first->second))},
      ctx);
}

void TaskLivenessRule::CloseProcRound(const std::string& node, ProcRounds& pr, Context& ctx) {
  for (const auto& [job, before] : pr.previous) {
    const TaskView* task = ctx.Task(node, job);
    if (task && task->ended) continue;
    auto now_it = pr.current.find(job);
    std::vector<uint32_t> missing;
    for (const auto& [gpu, pid] : before) {
      const bool gone = now_it == pr.current.end() || now_it->second.count(gpu) == 0 ||
                        now_it->second.at(gpu) != pid;
      if (!gone) continue;
      missing.push_back(gpu);
      Deaths& d = deaths_[{node, job}];
      if (d.pid_gone.size() < 65536) d.pid_gone.emplace(pid, pr.t);
    }
    if (now_it == pr.current.end()) {
      // The whole job left the node: its end says how, unless it was a lone exit.
      NoteLoneExit(node, job, before, pr.t, pr.interval, ctx);
      continue;
    }
    // One or a few ranks gone while most remain: an exit. Most gone at once: the teardown.
    if (missing.empty() || missing.size() * 2 > before.size()) continue;
    for (uint32_t gpu : missing) {
      ReportExit(node, job, RankOnGpu(task, gpu), pr.t, pr.t,
                 {fmt::format("pid {} on GPU {} absent from the processes at {} while most of "
                              "the job's remain",
                              before.at(gpu), gpu, Num(pr.t))},
                 ctx);
    }
  }
  pr.previous = std::move(pr.current);
  pr.current.clear();
}

const trace::TraceGpu* TaskLivenessRule::FreshGpu(const std::string& node, uint32_t gpu, double t,
                                                  const Context& ctx) const {
  auto seen = gpu_seen_t_.find({node, gpu});
  if (seen == gpu_seen_t_.end() || seen->second < t - kFreshGpuS) return nullptr;
  return ctx.LastGpu(node, gpu);
}

void TaskLivenessRule::NoteLoneExit(const std::string& node, const std::string& job,
                                    const std::map<uint32_t, uint32_t>& held, double t,
                                    double interval, const Context& ctx) {
  // One process (one rank a node: 1-GPU nodes, or one process driving all of a node's GPUs) of
  // a job that runs on other nodes too, and reports steps there: the other nodes' later rounds
  // and steps tell its exit from the job's end.
  std::set<uint32_t> pids;
  for (const auto& [gpu, pid] : held) pids.insert(pid);
  if (pids.size() != 1 || lone_exits_.size() >= 1024) return;
  const TaskView* task = ctx.Task(node, job);
  if (task && task->ended) return;
  double median = task && task->durations.size() >= 5 ? task->MedianStep() : -1;
  bool steps_elsewhere = false;
  for (const std::string& n : ctx.NodesOf(job)) {
    const TaskView* tv = n == node ? nullptr : ctx.Task(n, job);
    if (!tv || tv->last_step_t < 0) continue;
    steps_elsewhere = true;
    if (median < 0 && tv->durations.size() >= 5) median = tv->MedianStep();
  }
  if (!steps_elsewhere) return;
  if (exited_.count({node, job}) || !lone_noted_.insert({node, job}).second) return;
  // The others' last step ends at most one step after the exit (the one in flight); a job at
  // work ends one at least every step. Judged when a step past that would have ended, with a
  // round to spare, and two rounds on (a round only late comes by then).
  const double step_s = std::max(median, 1.0);
  const double due_s = std::max(interval, 1.0);
  const double confirm_t = std::max(t + 2 * due_s + 0.5, t + 2.5 * step_s + 1 + due_s);
  lone_exits_.push_back(
      {node, job, *pids.begin(), held.begin()->first, t, confirm_t, false, step_s});
}

void TaskLivenessRule::CheckProcRounds(const std::string& node, double t, Context& ctx) {
  auto it = proc_rounds_.find(node);
  if (it == proc_rounds_.end()) return;
  ProcRounds& pr = it->second;
  // The next round is overdue: no process of any job is left on the node to send a record.
  // The rounds are left as they are (a round only late is read as usual when it comes).
  if (pr.t >= 0 && pr.interval > 0 && !pr.overdue_noted && t > pr.t + 1.5 * pr.interval + 0.5) {
    pr.overdue_noted = true;
    for (const auto& [job, held] : pr.current) {
      // Dated at the round that did not come: the launcher's report of these pids reads it.
      Deaths& d = deaths_[{node, job}];
      for (const auto& [gpu, pid] : held)
        if (d.pid_gone.size() < 65536) d.pid_gone.emplace(pid, pr.t + pr.interval);
      NoteLoneExit(node, job, held, pr.t + pr.interval, pr.interval, ctx);
    }
  }
  for (auto e = lone_exits_.begin(); e != lone_exits_.end();) {
    // Another node's, or not yet due; one whose node went silent is dropped after 10 minutes.
    if (e->node != node || t < e->confirm_t) {
      e = t > e->confirm_t + 600 ? lone_exits_.erase(e) : std::next(e);
      continue;
    }
    const LoneExit x = *e;
    e = lone_exits_.erase(e);
    const TaskView* task = ctx.Task(node, x.job);
    if (!x.elsewhere || (task && task->ended)) continue;
    // The others wait for it: their GPUs spin in the collective it never joins (busy, while no
    // step of theirs ends), which a job finishing node by node (rank 0 writing the final
    // checkpoint after the others left) does not show.
    int spinning = 0;
    bool stepped = false;
    for (const std::string& n : ctx.NodesOf(x.job)) {
      if (n == node) continue;
      if (const TaskView* tv = ctx.Task(n, x.job); tv && tv->last_step_t > x.t + 1.5 * x.step_s + 1)
        stepped = true;
      for (uint32_t gpu : ctx.GpusOf(n)) {
        const Context::Holder* holder = ctx.HolderOf(n, gpu);
        const trace::TraceGpu* g = FreshGpu(n, gpu, t, ctx);
        if (!holder || holder->job != x.job || !g || !g->util_pct || *g->util_pct < busy_util_pct_)
          continue;
        // Spinning in a collective is busy on little power; a GPU drawing its stepping power
        // works (a final evaluation or export on the last node), it does not wait. The latest
        // sample, not the minute's median, which still holds the steps before the exit.
        auto p = power_.find({n, gpu});
        const bool working = g->power_w && p != power_.end() && p->second.stepping_n >= 10 &&
                             *g->power_w >= kWorkingPowerShare * p->second.stepping_w;
        if (!working) ++spinning;
      }
    }
    if (spinning == 0 || stepped) continue;
    std::optional<uint32_t> rank = RankOfPid(node, x.job, x.pid, ctx);
    if (!rank) rank = RankOnGpu(task, x.gpu);
    ReportExit(node, x.job, rank, x.t, t,
               {fmt::format("pid {} on GPU {}, the job's only process on this node, absent from "
                            "the processes from {} on",
                            x.pid, x.gpu, Num(x.t)),
                fmt::format("the job's processes on its other nodes ran on after it, {} of "
                            "their GPUs spinning with no step finished: waiting for it",
                            spinning)},
               ctx);
    lone_reported_.insert({node, x.job});
  }
}

void TaskLivenessRule::OnProc(const trace::TraceRecord& r, const trace::TraceProc& p,
                              Context& ctx) {
  if (!p.gpu || !p.pid || !p.job) return;
  for (LoneExit& e : lone_exits_) {
    if (e.job != *p.job) continue;
    if (e.node != r.node && r.t > e.t + 0.5) e.elsewhere = true;
    // Back on its node (its round was only late): no exit.
    if (e.node == r.node && e.pid == *p.pid) e.confirm_t = -1;
  }
  std::erase_if(lone_exits_, [](const LoneExit& e) { return e.confirm_t < 0; });
  ProcRounds& pr = proc_rounds_[r.node];
  if (pr.t >= 0 && r.t > pr.t + 0.5) {
    pr.interval = r.t - pr.t;
    pr.overdue_noted = false;
    CloseProcRound(r.node, pr, ctx);
  }
  pr.t = r.t;
  pr.current[*p.job][*p.gpu] = *p.pid;
  Deaths& d = deaths_[{r.node, *p.job}];
  if (d.pid_gpu.size() < 65536) d.pid_gpu[*p.pid] = *p.gpu;
  // Seen again: the round it was missing from was only late, and a later exit of the job here
  // is judged afresh.
  d.pid_gone.erase(*p.pid);
  lone_noted_.erase({r.node, *p.job});
}

}  // namespace

std::unique_ptr<Rule> MakeTaskLivenessRule(const TaskOptions& o, const model::HangPolicy& hang,
                                           const CardOptions& card) {
  return std::make_unique<TaskLivenessRule>(o, hang, card);
}

}  // namespace gpuwatch::analyze
