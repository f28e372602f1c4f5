#include "analyze/diagnoser.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "analyze/baseline.h"
#include "common/time_base.h"
#include "nccl/nccl_analysis.h"
#include "nccl/nccl_log.h"

namespace gpuwatch::analyze {

namespace {

using trace::TraceGpu;

bool Has(const std::optional<std::vector<std::string>>& reasons, std::string_view r) {
  return reasons && std::find(reasons->begin(), reasons->end(), r) != reasons->end();
}

std::string Num(double v) { return fmt::format("{:g}", v); }

Finding Make(std::string cause, std::string severity, const std::string& node,
             std::optional<int> gpu) {
  Finding f;
  f.layer = std::string(LayerOf(cause));
  f.cause = std::move(cause);
  f.severity = std::move(severity);
  f.node = node;
  f.gpu = gpu;
  return f;
}

// XIDs whose cause findings.md names more precisely (79 gpu_lost; the ECC family ecc_dbe; 74
// nvlink_errors), and those that are consequences, not causes: 43 (the GPU stopped a faulting
// process: the job's own bug or its teardown) and 45 (channels cleaned up as a process dies).
std::string CauseOfXid(int64_t code) {
  switch (code) {
    case 79:
      return "gpu_lost";
    case 48:
    case 63:
    case 64:
    case 94:
    case 95:
      return "ecc_dbe";
    case 74:
      return "nvlink_errors";
    case 43:
    case 45:
      return "";
  }
  return "xid";
}

}  // namespace

Diagnoser::Diagnoser(DiagnoserOptions options) : o_(options) {}

void Diagnoser::Report(Finding f, double t) {
  auto key = std::make_tuple(f.cause, f.node, f.gpu.value_or(-1), f.nic.value_or(""),
                             f.job.value_or(""), f.rank.value_or(-1), f.severity == "info");
  auto it = findings_.find(key);
  if (it == findings_.end()) {
    if (f.last_seen < t) f.last_seen = t;
    if (f.first_seen == 0) f.first_seen = t;
    findings_.emplace(std::move(key), std::move(f));
    return;
  }
  Finding& have = it->second;
  have.last_seen = std::max(have.last_seen, t);
  have.first_seen = std::min(have.first_seen, f.first_seen == 0 ? t : f.first_seen);
  if (f.severity == "critical") have.severity = "critical";
}

const trace::TraceNodeGpu* Diagnoser::NodeGpu(const std::string& node, uint32_t gpu) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || !it->second.node || !it->second.node->gpus) return nullptr;
  for (const auto& g : *it->second.node->gpus) {
    if (g.index == gpu) return &g;
  }
  return nullptr;
}

void Diagnoser::SetTemplateBaselines(const std::vector<TemplateStep>& baselines) {
  templates_.clear();
  for (const TemplateStep& b : baselines) {
    if (b.median_s > 0) templates_[{b.template_name, b.shape}] = b;
  }
}

const TemplateStep* Diagnoser::TemplateOf(const std::string& node, const std::string& job) const {
  auto info = job_info_.find(job);
  if (templates_.empty() || info == job_info_.end()) return nullptr;
  auto n = nodes_.find(node);
  const trace::TraceNode* rec = n == nodes_.end() || !n->second.node ? nullptr : &*n->second.node;
  std::string model;
  size_t per_node = info->second.gpus_per_node;
  if (rec && rec->gpus && !rec->gpus->empty()) {
    model = rec->gpus->front().name.value_or("");
    if (per_node == 0) per_node = rec->gpus->size();
  }
  // Named as baseline learning names the run (LearnRuns): the template, else the job itself.
  const std::string name =
      info->second.template_name.empty() ? "job:" + job : info->second.template_name;
  auto it = templates_.find({name, ShapeName(info->second.nodes.size(), per_node, model)});
  if (it == templates_.end()) return nullptr;
  const std::string driver = rec ? rec->driver_version.value_or("") : "";
  if (!it->second.driver_version.empty() && !driver.empty() && it->second.driver_version != driver)
    return nullptr;  // learned on another driver: stale
  return &it->second;
}

void Diagnoser::Observe(const trace::TraceRecord& r) {
  if (const auto* n = r.as<trace::TraceNode>()) OnNode(r, *n);
  if (const auto* g = r.as<trace::TraceGpu>()) OnGpu(r, *g);
  if (const auto* e = r.as<trace::TraceEvent>()) OnEvent(r, *e);
  if (const auto* l = r.as<trace::TraceLog>()) OnLog(r, *l);
  if (const auto* j = r.as<trace::TraceJob>()) OnJob(r, *j);
  if (const auto* st = r.as<trace::TraceStep>()) {
    OnStep(r, *st);
    OnStepTask(r, *st);
    OnStepClock(r, *st);
  }
  if (const auto* p = r.as<trace::TraceProc>()) OnProc(r, *p);
  if (const auto* h = r.as<trace::TraceHost>()) OnHost(r, *h);
  if (!r.node.empty()) CheckHangs(r.node, r.t);
}

namespace {
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
// Median absolute deviation, scaled to a normal distribution's standard deviation.
double Mad(const std::vector<double>& v) {
  const double m = Median(v);
  std::vector<double> dev;
  for (double x : v) dev.push_back(std::fabs(x - m));
  return 1.4826 * Median(dev);
}
// The start of the newest run of increments with no gap over `max_gap` between them: a counter
// that rose once long before (healthy runs have an isolated increment) does not date a fault.
double RunStart(const std::deque<double>& times, double max_gap) {
  double start = times.back();
  for (size_t i = times.size() - 1; i > 0 && times[i] - times[i - 1] <= max_gap; --i) {
    start = times[i - 1];
  }
  return start;
}
}  // namespace

void Diagnoser::OnStep(const trace::TraceRecord& r, const trace::TraceStep& st) {
  if (!st.job || !st.duration_s || *st.duration_s <= 0 || !st.data_wait_s) return;
  StepState& s = steps_[{r.node, *st.job}];
  if (s.first_t < 0) s.first_t = r.t;
  if (r.t - s.first_t < o_.warmup_s) return;
  const double share = std::clamp(*st.data_wait_s / *st.duration_s, 0.0, 1.0);
  if (!s.baseline_share) {
    s.baseline.push_back(share);
    if (s.baseline.size() >= o_.baseline_steps) {
      s.baseline_share = Median(s.baseline);
      s.baseline.clear();
      s.baseline.shrink_to_fit();
    }
    return;
  }
  s.recent.push_back({r.t, share});
  while (!s.recent.empty() && s.recent.front().first < r.t - o_.stall_window_s) {
    s.recent.pop_front();
  }
  const double line = std::max(o_.stall_floor_share, o_.stall_baseline_factor * *s.baseline_share);
  std::vector<double> shares;
  for (const auto& [t, sh] : s.recent) shares.push_back(sh);
  const double rolling = Median(shares);
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
  Finding f = Make("data_stall", "warning", r.node, std::nullopt);
  f.job = *st.job;
  f.first_seen = s.first_above_step;
  f.summary = fmt::format("Job {} waits for input data {:.0f}% of each step (baseline {:.0f}%)",
                          *st.job, rolling * 100, *s.baseline_share * 100);
  f.evidence = {fmt::format("data_wait share median {:.2f} over the last {} s vs baseline {:.3f}",
                            rolling, Num(o_.stall_window_s), *s.baseline_share)};
  f.action =
      "Check the input pipeline: data loader workers, the file system or object store "
      "it reads from (iowait), and prefetching";
  Report(std::move(f), r.t);
}

void Diagnoser::OnStepTask(const trace::TraceRecord& r, const trace::TraceStep& st) {
  if (!st.job || !st.duration_s) return;
  TaskState& ts = tasks_[{r.node, *st.job}];
  if (ts.first_step_t < 0) ts.first_step_t = r.t;
  ts.last_step_t = std::max(ts.last_step_t, r.t);
  if (st.rank) ts.lead_rank = std::min(ts.lead_rank, *st.rank);
  const bool lead = st.rank.value_or(ts.lead_rank) == ts.lead_rank;
  ts.durations.push_back(*st.duration_s);
  if (ts.durations.size() > 64) ts.durations.pop_front();
  if (st.rank && st.gpu) ts.rank_gpu[*st.rank] = *st.gpu;

  // checkpoint_stall: this checkpoint against the job's earlier ones (or a hard budget).
  if (st.checkpoint_s && *st.checkpoint_s > 0 && lead) {
    const double c = *st.checkpoint_s;
    bool stalled = false;
    std::string why;
    if (!ts.checkpoints_s.empty()) {
      const double base = Median(ts.checkpoints_s);
      stalled = c > o_.checkpoint_factor * base && c > base + o_.checkpoint_min_extra_s;
      why = fmt::format("checkpoint blocked {} s vs a median of {} s before", Num(c), Num(base));
    } else if (c > o_.checkpoint_budget_s) {
      stalled = true;
      why = fmt::format("checkpoint blocked {} s, over the {} s budget", Num(c),
                        Num(o_.checkpoint_budget_s));
    }
    if (stalled) {
      Finding f = Make("checkpoint_stall", "warning", r.node, std::nullopt);
      f.job = *st.job;
      // When the write began: the checkpoint_start event within this step, else the step's
      // end less the blocked time (a checkpoint written at the end of its step).
      f.first_seen =
          ts.last_checkpoint_start >= r.t - *st.duration_s - 1 ? ts.last_checkpoint_start : r.t - c;
      f.summary = fmt::format("Job {} was blocked {} s by a checkpoint write", *st.job, Num(c));
      f.evidence = {why};
      f.action = "Check the checkpoint target's write bandwidth; write asynchronously or shard";
      Report(std::move(f), r.t);
    } else {
      ts.checkpoints_s.push_back(c);
    }
  }

  // Stragglers: synchronous ranks wait in communication for the slowest one, so the slow
  // GPU's rank shows the least exposed comm and the others the most.
  if (st.rank && st.comm_s) {
    auto& q = ts.comm[*st.rank];
    q.push_back({r.t, *st.comm_s});
    while (!q.empty() && q.front().first < r.t - o_.straggler_window_s) q.pop_front();
  }
  if (lead && ts.comm.size() >= 3) {
    std::vector<std::pair<double, uint32_t>> medians;
    for (const auto& [rank, q] : ts.comm) {
      if (q.size() < 5) continue;
      std::vector<double> v;
      for (const auto& [t, c] : q) v.push_back(c);
      medians.push_back({Median(v), rank});
    }
    if (medians.size() >= 3) {
      std::sort(medians.begin(), medians.end());
      std::vector<double> others;
      for (size_t i = 1; i < medians.size(); ++i) others.push_back(medians[i].first);
      const double rest = Median(others);
      // The straggler's comm is an outlier below the others': by a share of the step that
      // costs time, well outside the others' spread (robust: median absolute deviation).
      std::vector<double> d(ts.durations.begin(), ts.durations.end());
      const double gap = rest - medians[0].first;
      const bool straggle = rest > 0.02 && medians[0].first < o_.straggler_comm_share * rest &&
                            gap >= o_.straggler_step_share * Median(d) &&
                            gap > o_.straggler_mad_factor * Mad(others);
      if (!straggle) {
        ts.straggle_since = -1;
      } else {
        if (ts.straggle_since < 0) ts.straggle_since = r.t;
        const uint32_t rank = medians[0].second;
        if (r.t - ts.straggle_since >= o_.straggler_window_s / 2 && ts.rank_gpu.count(rank)) {
          const int gpu = static_cast<int>(ts.rank_gpu[rank]);
          Finding f = Make("straggler_gpu", "warning", r.node, gpu);
          f.job = *st.job;
          f.first_seen = ts.straggle_since;
          f.summary = fmt::format(
              "GPU {} (rank {}) is the straggler of job {}: the other ranks wait {} s per step "
              "for it in communication, it waits {} s",
              gpu, rank, *st.job, Num(rest), Num(medians[0].first));
          f.evidence = {fmt::format("median comm_s {} on rank {} vs {} on the others",
                                    Num(medians[0].first), rank, Num(rest))};
          std::vector<uint32_t> peers;
          for (const auto& [other_rank, other_gpu] : ts.rank_gpu) {
            if (other_rank != rank) peers.push_back(other_gpu);
          }
          f.evidence.push_back(CompareWithPeers(r.node, ts.rank_gpu[rank], peers));
          f.action =
              "Compare the GPU's clocks, temperature, power and PCIe link with its peers; "
              "move the job off it if it persists";
          Report(std::move(f), r.t);
        }
      }
    }
  }

  // step_regression: slower steps than the job's own post-warm-up median (a deeper cause, if
  // one is found, replaces it in Deepest()).
  if (!lead || r.t - ts.first_step_t < o_.warmup_s) return;
  if (st.comm_s && *st.duration_s > 0) {
    const double share = *st.comm_s / *st.duration_s;
    if (!ts.comm_base_share) {
      ts.comm_base.push_back(share);
      if (ts.comm_base.size() >= o_.baseline_steps / 2) ts.comm_base_share = Median(ts.comm_base);
    }
    ts.comm_share.push_back({r.t, share});
    while (!ts.comm_share.empty() && ts.comm_share.front().first < r.t - 60) {
      ts.comm_share.pop_front();
    }
  }
  // The work of a step: a checkpoint's blocking is judged by checkpoint_stall, not here (one
  // long checkpoint would otherwise be a minute of "slow steps").
  const double work_s = std::max(0.0, *st.duration_s - st.checkpoint_s.value_or(0));
  ts.recent_steps.push_back({r.t, work_s});
  // The last minute, and at least the last 5 steps (slow jobs step less than once in 12 s).
  while (ts.recent_steps.size() > 5 && ts.recent_steps.front().first < r.t - 60) {
    ts.recent_steps.pop_front();
  }
  std::vector<double> v;
  for (const auto& [t, d] : ts.recent_steps) v.push_back(d);
  const double now = Median(v);
  // Slow against `limit` since when: a median of a handful of steps is one step's noise, so a
  // window of several is judged; the regression began with the trailing run of slow steps (the
  // window's median crossed the line only once half of it was slow).
  auto slow_since = [&](double limit, double& since) {
    if (v.size() < 5 || now < limit) {
      since = -1;
      return false;
    }
    if (since < 0) {
      since = ts.recent_steps.back().first;
      for (auto it = ts.recent_steps.rbegin(); it != ts.recent_steps.rend(); ++it) {
        if (it->second < limit) break;
        since = it->first - it->second;  // that step's start
      }
    }
    return r.t - since >= o_.regression_hold_s;
  };
  auto report = [&](double since, std::string summary, std::string evidence) {
    Finding f = Make("step_regression", "warning", r.node, std::nullopt);
    f.job = *st.job;
    f.first_seen = since;
    f.summary = std::move(summary);
    f.evidence = {std::move(evidence)};
    f.action =
        "Compare with the template's baseline run (gpuwatch baseline compare) and what "
        "changed since: data, code, versions, node";
    Report(std::move(f), r.t);
  };
  // Against the template's stored baseline: over its median by the factor and above its p99,
  // so a template whose steps vary widely is not judged by its median alone.
  if (const TemplateStep* tb = TemplateOf(r.node, *st.job)) {
    const double limit = std::max(o_.regression_factor * tb->median_s, tb->p99_s);
    if (slow_since(limit, ts.template_slow_since)) {
      report(ts.template_slow_since,
             fmt::format("Job {} steps take {} s, {:.0f}% over template {}'s baseline {} s",
                         *st.job, Num(now), (now / tb->median_s - 1) * 100, tb->template_name,
                         Num(tb->median_s)),
             fmt::format("median step {} s over the last minute vs {} s (p99 {} s) in baseline "
                         "v{} of {} on {}",
                         Num(now), Num(tb->median_s), Num(tb->p99_s), tb->version,
                         tb->template_name, tb->shape));
    }
  }
  if (!ts.base_step_s) {
    ts.base_steps.push_back(work_s);
    if (ts.base_steps.size() >= o_.baseline_steps / 2) {
      ts.base_step_s = Median(ts.base_steps);
      ts.base_steps.clear();
    }
    return;
  }
  if (slow_since(o_.regression_factor * *ts.base_step_s, ts.slow_since)) {
    report(ts.slow_since,
           fmt::format("Job {} steps take {} s, {:.0f}% over its own {} s", *st.job, Num(now),
                       (now / *ts.base_step_s - 1) * 100, Num(*ts.base_step_s)),
           fmt::format("median step {} s over the last minute vs {} s after warm-up", Num(now),
                       Num(*ts.base_step_s)));
  }
}

void Diagnoser::CheckHangs(const std::string& node, double t) {
  for (auto& [key, ts] : tasks_) {
    if (key.first != node || ts.ended || ts.last_step_t < 0 || ts.durations.size() < 5) continue;
    std::vector<double> d(ts.durations.begin(), ts.durations.end());
    const double limit = ts.checkpoint_since >= 0
                             ? o_.checkpoint_hang_s
                             : std::max(o_.hang_min_s, o_.hang_factor * Median(d));
    if (t - ts.last_step_t < limit) continue;
    // Which node holds the stuck rank: the live ranks spin in their collective (busy GPUs),
    // the stuck one does not. Judged once, when the hang is first seen (the job's GPUs go idle
    // one by one later, when it is torn down).
    int idle = 0, spinning = 0;
    if (!ts.hang_judged) {
      for (const auto& [place, held] : gpu_job_) {
        if (place.first != node || held.first != key.second) continue;
        auto g = gpus_.find(place);
        if (g == gpus_.end() || !g->second.prev || !g->second.prev->util_pct) continue;
        const double util = *g->second.prev->util_pct;
        idle += util < 5 ? 1 : 0;
        spinning += util >= o_.busy_util_pct ? 1 : 0;
      }
      ts.hang_judged = true;
      ts.hang_stuck_here = idle > 0 && spinning > 0;
    }
    Finding f = Make("job_hang", "critical", node, std::nullopt);
    f.job = key.second;
    f.first_seen = ts.last_step_t;
    f.summary = fmt::format("Job {} has finished no step for {:.0f} s (its steps take {} s)",
                            key.second, t - ts.last_step_t, Num(Median(d)));
    f.evidence = {fmt::format("last step ended at {}; no step since", Num(ts.last_step_t))};
    f.action =
        "Dump the ranks' stacks (py-spy dump); look for a rank stuck outside the "
        "collective or an NCCL timeout in the logs";
    Report(std::move(f), t);
  }
}

void Diagnoser::CloseProcRound(const std::string& node, ProcRounds& pr) {
  for (const auto& [job, before] : pr.previous) {
    if (exited_jobs_.count({node, job}) != 0) continue;
    auto task = tasks_.find({node, job});
    if (task != tasks_.end() && task->second.ended) continue;
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
      if (task != tasks_.end()) {
        for (const auto& [rk, g] : task->second.rank_gpu) {
          if (g == gpu) rank = static_cast<int>(rk);
        }
      }
      Finding f = Make("rank_exit", "critical", node, std::nullopt);
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
      Report(std::move(f), pr.t);
    }
  }
  pr.previous = std::move(pr.current);
  pr.current.clear();
}

void Diagnoser::OnProc(const trace::TraceRecord& r, const trace::TraceProc& p) {
  if (p.gpu && p.pid && p.job) {
    ProcRounds& pr = proc_rounds_[r.node];
    if (pr.t >= 0 && r.t > pr.t + 0.5) CloseProcRound(r.node, pr);
    pr.t = r.t;
    pr.current[*p.job][*p.gpu] = *p.pid;
  }
  if (!p.gpu || !p.cpu_numa_nodes || p.cpu_numa_nodes->empty()) return;
  const trace::TraceNodeGpu* info = NodeGpu(r.node, *p.gpu);
  if (!info || !info->numa_node) return;
  const auto& nodes = *p.cpu_numa_nodes;
  if (std::find(nodes.begin(), nodes.end(), static_cast<uint32_t>(*info->numa_node)) !=
      nodes.end()) {
    return;
  }
  Finding f = Make("numa_mismatch", "warning", r.node, static_cast<int>(*p.gpu));
  f.summary = fmt::format(
      "The process feeding GPU {} (pid {}) runs on NUMA node(s) {} while "
      "the GPU hangs off node {}",
      *p.gpu, p.pid.value_or(0), fmt::join(nodes, ","), *info->numa_node);
  f.evidence = {fmt::format("cpu_numa_nodes [{}] vs GPU numa_node {}", fmt::join(nodes, ","),
                            *info->numa_node)};
  f.action =
      "Bind each rank to its GPU's NUMA node (numactl --cpunodebind, or the launcher's "
      "binding options)";
  Report(std::move(f), r.t);
}

bool Diagnoser::CommWaitUp(const std::string& node, std::string* evidence) const {
  for (const auto& [key, ts] : tasks_) {
    if (key.first != node || ts.ended || ts.comm_share.size() < 5) continue;
    std::vector<double> v;
    for (const auto& [t, sh] : ts.comm_share) v.push_back(sh);
    const double now = Median(v);
    const double base = ts.comm_base_share.value_or(now);
    if (now >= o_.comm_share_floor ||
        (ts.comm_base_share && now >= o_.comm_factor * base && now - base >= 0.05)) {
      *evidence =
          fmt::format("job {} spends {:.0f}% of each step in exposed comm (baseline {:.0f}%)",
                      key.second, now * 100, base * 100);
      return true;
    }
  }
  return false;
}

void Diagnoser::OnHost(const trace::TraceRecord& r, const trace::TraceHost& h) {
  if (!h.nics) return;
  for (const auto& [name, nic] : *h.nics) {
    auto key = std::make_pair(r.node, name);
    auto& prev = nic_counters_[key];
    auto& times = nic_increments_[key];
    bool rose = false;
    for (auto [field, value] :
         {std::pair{"errors", nic.errors}, std::pair{"retransmits", nic.retransmits}}) {
      if (!value) continue;
      auto it = prev.find(field);
      if (it != prev.end() && *value > it->second) rose = true;
      prev[field] = *value;
    }
    if (rose) {
      times.push_back(r.t);
      while (!times.empty() && times.front() < r.t - o_.counter_window_s) times.pop_front();
    }
    const bool was_up = nic_up_.count(key) ? nic_up_[key] : true;
    const bool down = nic.link_up && !*nic.link_up && was_up && nic_up_.count(key);
    if (nic.link_up) nic_up_[key] = *nic.link_up;
    if (down || (rose && static_cast<int>(times.size()) >= o_.counter_increments)) {
      Finding f = Make("net_errors", "warning", r.node, std::nullopt);
      f.nic = name;
      f.first_seen = down ? r.t : RunStart(times, o_.MaxIncrementGap());
      f.summary = down ? fmt::format("NIC {} went down", name)
                       : fmt::format("NIC {} errors or RDMA retransmissions keep rising", name);
      f.evidence = {down ? "link_up false"
                         : fmt::format("errors/retransmits rose {} times in {} s", times.size(),
                                       Num(o_.counter_window_s))};
      f.action =
          "Check the cable, transceiver and switch port (ibstat, ethtool -S, the switch "
          "counters)";
      Report(std::move(f), r.t);
    }
    // net_congestion: near the link rate for most of the window, while a job waits in comm.
    std::optional<double> link_gbps;
    auto node_it = nodes_.find(r.node);
    if (node_it != nodes_.end() && node_it->second.node && node_it->second.node->nics) {
      for (const auto& n : *node_it->second.node->nics) {
        if (n.name == name) link_gbps = n.link_gbps;
      }
    }
    if (link_gbps && *link_gbps > 0 && (nic.tx_mbs || nic.rx_mbs)) {
      const double gbps = std::max(nic.tx_mbs.value_or(0), nic.rx_mbs.value_or(0)) * 8 / 1000;
      auto& load = nic_load_[key];
      load.push_back({r.t, gbps >= o_.nic_saturation * *link_gbps});
      while (!load.empty() && load.front().first < r.t - o_.nic_window_s) load.pop_front();
      size_t hot = 0;
      for (const auto& [lt, h2] : load) hot += h2 ? 1 : 0;
      std::string why;
      if (load.size() >= 3 && load.back().first - load.front().first >= o_.nic_window_s * 0.6 &&
          hot * 5 >= load.size() * 4 && CommWaitUp(r.node, &why)) {
        double first = r.t;
        for (const auto& [lt, h2] : load) {
          if (h2) {
            first = lt;
            break;
          }
        }
        Finding f = Make("net_congestion", "warning", r.node, std::nullopt);
        f.nic = name;
        f.first_seen = first;
        f.summary =
            fmt::format("NIC {} runs at {:.0f} of its {} Gb/s while a job waits in communication",
                        name, gbps, Num(*link_gbps));
        f.evidence = {fmt::format("{} of {} host samples at >= {:.0f}% of the link rate", hot,
                                  load.size(), o_.nic_saturation * 100),
                      why};
        f.action =
            "Check the fabric's congestion counters and the other jobs on this NIC and "
            "switch; spread the ranks or rebalance the traffic";
        Report(std::move(f), r.t);
      }
    }
  }
}

void Diagnoser::CheckMemory(const trace::TraceRecord& r, uint32_t gpu, double mem_mib) {
  auto job = gpu_job_.find({r.node, gpu});
  if (job == gpu_job_.end() || r.t - job->second.second < o_.warmup_s) return;
  const trace::TraceNodeGpu* info = NodeGpu(r.node, gpu);
  if (!info || !info->memory_total_mib || *info->memory_total_mib <= 0) return;
  const double total = *info->memory_total_mib;
  MemState& m = mem_[{r.node, gpu}];
  if (!m.samples.empty() && m.samples.back().second - mem_mib > o_.leak_max_drop_share * total) {
    // Fell back (a checkpoint, a cache emptied): what came before was not a leak.
    m.samples.clear();
  }
  m.samples.push_back({r.t, mem_mib});
  while (!m.samples.empty() && m.samples.front().first < r.t - o_.leak_window_s) {
    m.samples.pop_front();
  }
  const double span = m.samples.back().first - m.samples.front().first;
  if (span < o_.leak_window_s * 0.9) return;
  // Growth in each third of the window, and enough of it overall.
  const double third = o_.leak_window_s / 3;
  double prev_max = -1;
  for (int k = 0; k < 3; ++k) {
    const double from = m.samples.front().first + k * third, to = from + third;
    double mx = -1;
    for (const auto& [t, v] : m.samples) {
      if (t >= from && t < to) mx = std::max(mx, v);
    }
    if (mx < 0 || mx <= prev_max) return;
    prev_max = mx;
  }
  const double growth = m.samples.back().second - m.samples.front().second;
  if (growth < o_.leak_min_growth_share * total) return;
  // The growth began with the first sample above where the window started (the plateau
  // before it, when the window reaches back that far).
  double start = m.samples.back().first;
  for (const auto& [t, v] : m.samples) {
    if (v > m.samples.front().second) {
      start = t;
      break;
    }
  }
  const double rate_mib_s = growth / span;
  Finding f = Make("memory_leak", "warning", r.node, std::nullopt);
  f.job = job->second.first;
  f.first_seen = start;
  const double left_s = rate_mib_s > 0 ? (total - mem_mib) / rate_mib_s : 0;
  f.summary = fmt::format(
      "GPU memory of job {} grows {:.0f} MiB/min on GPU {} and never falls back; at this rate "
      "it runs out in {:.0f} min",
      job->second.first, rate_mib_s * 60, gpu, left_s / 60);
  f.evidence = {fmt::format("mem_used_mib {:.0f} → {:.0f} over {:.0f} s (of {:.0f})",
                            m.samples.front().second, mem_mib, span, total)};
  // Per step, the unit a leak is made in (a tensor kept each step).
  if (auto ts = tasks_.find({r.node, job->second.first});
      ts != tasks_.end() && ts->second.durations.size() >= 5) {
    const double step_s =
        Median(std::vector<double>(ts->second.durations.begin(), ts->second.durations.end()));
    f.evidence.push_back(
        fmt::format("≈ {} MiB per step (median step {} s)", Num(rate_mib_s * step_s), Num(step_s)));
  }
  f.action =
      "Look for tensors kept across steps (losses kept with their graph, growing caches, "
      "lists of outputs); compare torch.cuda.memory_allocated between steps";
  Report(std::move(f), r.t);
}

void Diagnoser::OnNode(const trace::TraceRecord& r, const trace::TraceNode& n) {
  NodeState& ns = nodes_[r.node];
  if (ns.first_t < 0) ns.first_t = r.t;
  ns.node = n;
  auto version = [&](const char* field, const std::optional<std::string>& v) {
    if (!v || v->empty()) return;
    auto it = ns.versions.find(field);
    if (it == ns.versions.end() || it->second.first != *v) ns.versions[field] = {*v, r.t};
  };
  version("driver", n.driver_version);
  version("CUDA", n.cuda_version);
  version("NCCL", n.nccl_version);
  if (n.clock_offset_ms) {
    ns.clock_offset_ms = n.clock_offset_ms;
    ns.clock_offset_t = r.t;
  }
}

std::string Diagnoser::CompareWithPeers(const std::string& node, uint32_t gpu,
                                        const std::vector<uint32_t>& peers) const {
  auto last = [&](uint32_t g) -> const TraceGpu* {
    auto it = gpus_.find({node, g});
    return it == gpus_.end() || !it->second.prev ? nullptr : &*it->second.prev;
  };
  const TraceGpu* me = last(gpu);
  if (!me) return fmt::format("no card sample of GPU {} to compare with its peers", gpu);
  // The peers' median of one field, when they report it.
  auto peer_median = [&](auto field) -> std::optional<double> {
    std::vector<double> v;
    for (uint32_t p : peers) {
      if (const TraceGpu* g = last(p); g && (g->*field)) v.push_back(*(g->*field));
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

void Diagnoser::CheckTemperatureTrend(const trace::TraceRecord& r, const TraceGpu& g, GpuState& s) {
  if (!g.temp_c || !g.power_w || !g.util_pct) return;
  if (!s.temps.empty() && r.t - s.temps.back().t < o_.trend_sample_s) return;
  s.temps.push_back({r.t, *g.temp_c, *g.power_w, *g.util_pct});
  while (s.temps.front().t < r.t - o_.trend_window_s) s.temps.pop_front();
  const double span = s.temps.back().t - s.temps.front().t;
  if (span < 0.9 * o_.trend_window_s || s.temps.size() < 20) {
    s.temp_slope_known = false;
    s.trend_since = -1;
    return;
  }
  // Least squares of temp_c on t (minutes) over samples [from, to): slope and R².
  auto fit = [&](size_t from, size_t to) {
    const auto n = static_cast<double>(to - from);
    double mx = 0, my = 0;
    for (size_t i = from; i < to; ++i) {
      mx += (s.temps[i].t - s.temps[0].t) / 60;
      my += s.temps[i].temp_c;
    }
    mx /= n;
    my /= n;
    double sxx = 0, sxy = 0, syy = 0;
    for (size_t i = from; i < to; ++i) {
      const double dx = (s.temps[i].t - s.temps[0].t) / 60 - mx, dy = s.temps[i].temp_c - my;
      sxx += dx * dx;
      sxy += dx * dy;
      syy += dy * dy;
    }
    return std::make_pair(sxx > 0 ? sxy / sxx : 0.0,
                          sxx > 0 && syy > 0 ? sxy * sxy / (sxx * syy) : 0.0);
  };
  const auto [slope, r2] = fit(0, s.temps.size());
  // A GPU settling to a new load warms fast, then slower and slower; a failing cooler warms on
  // at the same pace or faster. The window's second half must keep most of the pace.
  const double late_slope = fit(s.temps.size() / 2, s.temps.size()).first;
  s.temp_slope = slope;
  s.temp_slope_known = true;
  // Steady load: busy throughout, and the power of the last third not above the first's.
  const size_t third = s.temps.size() / 3;
  std::vector<double> p_first, p_last;
  double min_util = s.temps.front().util_pct;
  for (size_t i = 0; i < s.temps.size(); ++i) {
    min_util = std::min(min_util, s.temps[i].util_pct);
    if (i < third) p_first.push_back(s.temps[i].power_w);
    if (i >= s.temps.size() - third) p_last.push_back(s.temps[i].power_w);
  }
  const double power_first = Median(p_first), power_last = Median(p_last);
  const bool steady =
      min_util >= o_.busy_util_pct && power_last <= power_first * (1 + o_.trend_power_rise_share);
  if (!steady || slope < o_.trend_slope_c_per_min || r2 < o_.trend_min_r2 ||
      late_slope < 0.5 * slope) {
    s.trend_since = -1;
    return;
  }
  if (s.trend_since < 0) s.trend_since = s.temps.front().t;
  const int gpu = static_cast<int>(*g.gpu);
  // The node's other GPUs: if they warm as well, the cause is shared (inlet air, the chassis).
  std::vector<double> peers;
  for (const auto& [key, other] : gpus_) {
    if (key.first == r.node && key.second != *g.gpu && other.temp_slope_known)
      peers.push_back(other.temp_slope);
  }
  const double rise = slope * span / 60;
  Finding f = Make("thermal_throttle", "info", r.node, gpu);
  f.first_seen = s.trend_since;
  f.summary = fmt::format(
      "GPU {} is warming steadily at steady load: +{} °C in the last {} min ({} °C/min), now {} "
      "°C; it will throttle if this goes on",
      gpu, Num(rise), Num(span / 60), Num(slope), Num(*g.temp_c));
  f.evidence = {
      fmt::format("temp_c slope {} °C/min over {} s (R² {})", Num(slope), Num(span), Num(r2)),
      fmt::format("power_w {} → {} (steady), util_pct ≥ {}", Num(power_first), Num(power_last),
                  Num(min_util))};
  if (!peers.empty()) {
    const double peer = Median(peers);
    f.evidence.push_back(fmt::format(
        "the node's other GPUs: median slope {} °C/min{}", Num(peer),
        peer >= o_.trend_slope_c_per_min ? " (they warm too: inlet air or chassis cooling)" : ""));
  }
  f.action =
      "Check this GPU's cooling (fans, airflow, heatsink, inlet temperature) before it "
      "throttles; compare with its template's temperature range (gpuwatch baseline show)";
  Report(std::move(f), r.t);
}

void Diagnoser::OnGpu(const trace::TraceRecord& r, const TraceGpu& g) {
  if (!g.gpu || g.mig) return;
  const uint32_t index = *g.gpu;
  const int gpu = static_cast<int>(index);
  GpuState& s = gpus_[{r.node, index}];
  const trace::TraceNodeGpu* info = NodeGpu(r.node, index);
  const bool busy = g.util_pct && *g.util_pct >= o_.busy_util_pct;
  const double t = r.t;
  CheckTemperatureTrend(r, g, s);

  // Runs of a reason held on a busy GPU: `start` is the run's first sample.
  auto run = [&](bool held, int* len, double* start) {
    if (!held) {
      *len = 0;
      return false;
    }
    if (*len == 0) *start = t;
    ++*len;
    return *len >= o_.consecutive_samples;
  };
  const bool thermal = busy && (Has(g.throttle, "hw_thermal") || Has(g.throttle, "sw_thermal"));
  if (run(thermal, &s.thermal_run, &s.thermal_start)) {
    Finding f = Make("thermal_throttle", "warning", r.node, gpu);
    f.first_seen = s.thermal_start;
    f.summary =
        fmt::format("GPU {} is thermally throttled: {} at {} °C, SM clock {} MHz", gpu,
                    Has(g.throttle, "hw_thermal") ? "hw_thermal" : "sw_thermal",
                    g.temp_c ? Num(*g.temp_c) : "?", g.sm_clock_mhz ? Num(*g.sm_clock_mhz) : "?");
    f.evidence = {fmt::format("throttle reasons held for {} samples on a busy GPU", s.thermal_run)};
    if (info && info->max_sm_clock_mhz && g.sm_clock_mhz) {
      f.evidence.push_back(fmt::format("sm_clock_mhz {} vs max {}", Num(*g.sm_clock_mhz),
                                       Num(*info->max_sm_clock_mhz)));
    }
    f.action = "Check the GPU's airflow, fans and inlet temperature; drain the node if it persists";
    Report(std::move(f), t);
  }
  if (run(busy && Has(g.throttle, "hw_slowdown"), &s.slowdown_run, &s.slowdown_start)) {
    Finding f = Make("clock_slowdown", "warning", r.node, gpu);
    f.first_seen = s.slowdown_start;
    f.summary = fmt::format("GPU {} clocks are held down by hw_slowdown", gpu);
    f.evidence = {fmt::format("hw_slowdown held for {} samples", s.slowdown_run)};
    f.action = "Check power delivery and the board (hw_slowdown: external or power-brake signal)";
    Report(std::move(f), t);
  }
  if (run(busy && Has(g.throttle, "hw_power_brake"), &s.brake_run, &s.brake_start)) {
    Finding f = Make("power_throttle", "warning", r.node, gpu);
    f.first_seen = s.brake_start;
    f.summary = fmt::format("GPU {} is held by the hardware power brake", gpu);
    f.evidence = {fmt::format("hw_power_brake held for {} samples", s.brake_run)};
    f.action = "Check the PSUs and the power budget of the node";
    Report(std::move(f), t);
  }
  // The software power cap: at full load GPUs touch it all the time for a sample or two, and
  // some hold it through heavy kernels at full speed. It costs speed when it is held over most
  // of a window while the clock stays below its maximum by a clear margin, or below its peers'
  // (the same job on the other GPUs of the node runs faster).
  if (busy) {
    std::vector<double> peers;
    for (const auto& [key, other] : gpus_) {
      if (key.first == r.node && key.second != index && other.prev && other.prev->sm_clock_mhz &&
          other.prev->util_pct && *other.prev->util_pct >= o_.busy_util_pct) {
        peers.push_back(*other.prev->sm_clock_mhz);
      }
    }
    std::optional<double> peer_clock;
    if (!peers.empty()) {
      std::sort(peers.begin(), peers.end());
      peer_clock = peers[peers.size() / 2];
    }
    const bool slow = g.sm_clock_mhz &&
                      ((info && info->max_sm_clock_mhz &&
                        *g.sm_clock_mhz < o_.power_clock_ratio * *info->max_sm_clock_mhz) ||
                       (peer_clock && *g.sm_clock_mhz < o_.power_peer_clock_ratio * *peer_clock));
    s.power.push_back({t, Has(g.throttle, "sw_power_cap") && slow});
    while (!s.power.empty() && s.power.front().first < t - o_.power_window_s) s.power.pop_front();
    size_t capped = 0;
    for (const auto& [pt, c] : s.power) capped += c ? 1 : 0;
    const double span = s.power.back().first - s.power.front().first;
    if (span >= o_.power_window_s * 0.8 &&
        static_cast<double>(capped) >= o_.power_share * static_cast<double>(s.power.size())) {
      double first = t;
      for (const auto& [pt, c] : s.power) {
        if (c) {
          first = pt;
          break;
        }
      }
      Finding f = Make("power_throttle", "warning", r.node, gpu);
      f.first_seen = first;
      f.summary = fmt::format("GPU {} runs at its power cap with the SM clock at {} MHz", gpu,
                              g.sm_clock_mhz ? Num(*g.sm_clock_mhz) : "?");
      f.evidence = {fmt::format("sw_power_cap in {} of {} busy samples over {} s", capped,
                                s.power.size(), Num(span))};
      if (peer_clock) f.evidence.push_back("peers' median SM clock " + Num(*peer_clock) + " MHz");
      if (g.power_w) f.evidence.push_back("power_w " + Num(*g.power_w));
      f.action =
          "Check the power limit set on the GPU (nvidia-smi -q -d POWER) and the node's power "
          "budget";
      Report(std::move(f), t);
    }
  }
  // (Idle samples are skipped, not a reset: a checkpoint step idles the GPU for seconds.)

  // PCIe: width below the maximum is a link that trained narrow; a lower generation only
  // matters while busy (GPUs lower it when idle by design).
  const bool narrow =
      g.pcie_width && info && info->pcie_max_width && *g.pcie_width < *info->pcie_max_width;
  if (run(narrow, &s.width_run, &s.width_start)) {
    Finding f = Make("pcie_downgrade", "warning", r.node, gpu);
    f.first_seen = s.width_start;
    f.summary = fmt::format("GPU {} PCIe link runs at x{} of x{}", gpu, Num(*g.pcie_width),
                            Num(*info->pcie_max_width));
    f.evidence = {fmt::format("pcie_width {} vs pcie_max_width {}", Num(*g.pcie_width),
                              Num(*info->pcie_max_width))};
    f.action = "Reseat the GPU or its riser; check the slot and the PCIe switch (lspci -vv LnkSta)";
    Report(std::move(f), t);
  }
  const bool slow_gen =
      busy && g.pcie_gen && info && info->pcie_max_gen && *g.pcie_gen < *info->pcie_max_gen;
  if (run(slow_gen, &s.gen_run, &s.gen_start)) {
    Finding f = Make("pcie_downgrade", "warning", r.node, gpu);
    f.first_seen = s.gen_start;
    f.summary = fmt::format("GPU {} PCIe link runs at gen{} of gen{} while busy", gpu,
                            Num(*g.pcie_gen), Num(*info->pcie_max_gen));
    f.evidence = {fmt::format("pcie_gen {} vs pcie_max_gen {} at util {}%", Num(*g.pcie_gen),
                              Num(*info->pcie_max_gen), Num(*g.util_pct))};
    f.action = "Check the slot's and the switch's link training; reseat the GPU";
    Report(std::move(f), t);
  }

  // Counters: a rise (a lower value is a reset, not a rise).
  auto rose = [&](const char* name, std::optional<double> TraceGpu::*field) {
    if (!s.prev || !(g.*field) || !((*s.prev).*field)) return false;
    if (*(g.*field) <= *((*s.prev).*field)) return false;
    auto& times = s.increments[name];
    times.push_back(t);
    while (!times.empty() && times.front() < t - o_.counter_window_s) times.pop_front();
    return true;
  };
  if (rose("ecc_dbe", &TraceGpu::ecc_dbe_volatile) ||
      (g.remapped_rows_failure.value_or(false) && s.prev &&
       !s.prev->remapped_rows_failure.value_or(false))) {
    Finding f = Make("ecc_dbe", "critical", r.node, gpu);
    f.summary = fmt::format("GPU {} had an uncorrectable memory error", gpu);
    f.evidence = {g.ecc_dbe_volatile ? "ecc_dbe_volatile " + Num(*g.ecc_dbe_volatile)
                                     : "remapped_rows_failure true"};
    f.action = "Drain the node; reset the GPU; replace it if row remapping failed";
    Report(std::move(f), t);
  }
  auto repeated = [&](const char* name, std::optional<double> TraceGpu::*field, const char* cause,
                      const char* what, const char* action) {
    if (!rose(name, field)) return;
    const auto& times = s.increments[name];
    if (static_cast<int>(times.size()) < o_.counter_increments) return;
    Finding f = Make(cause, "warning", r.node, gpu);
    f.first_seen = RunStart(times, o_.MaxIncrementGap());
    f.summary = fmt::format("GPU {} {} keep rising ({} now)", gpu, what, Num(*(g.*field)));
    f.evidence = {
        fmt::format("{} rose {} times in {} s", name, times.size(), Num(o_.counter_window_s))};
    f.action = action;
    Report(std::move(f), t);
  };
  repeated("pcie_replay", &TraceGpu::pcie_replay, "pcie_replay", "PCIe replays",
           "Check the riser, slot and PCIe switch of the GPU; reseat it");
  repeated("ecc_sbe", &TraceGpu::ecc_sbe_volatile, "ecc_sbe_growth", "correctable ECC errors",
           "Watch for row remapping; plan to replace the GPU if the growth continues");
  for (auto [name, field] : {std::pair{"nvlink_crc", &TraceGpu::nvlink_crc_errors},
                             std::pair{"nvlink_replay", &TraceGpu::nvlink_replay},
                             std::pair{"nvlink_recovery", &TraceGpu::nvlink_recovery}}) {
    repeated(name, field, "nvlink_errors", "NVLink error counters",
             "Check the NVLink bridge or baseboard; run nvidia-smi nvlink -e; drain if links drop");
  }
  if (g.nvlink_active_links && info && info->nvlink_count &&
      *g.nvlink_active_links < static_cast<double>(*info->nvlink_count)) {
    Finding f = Make("nvlink_errors", "warning", r.node, gpu);
    f.summary = fmt::format("GPU {} has {} of its {} NVLinks active", gpu,
                            Num(*g.nvlink_active_links), *info->nvlink_count);
    f.evidence = {fmt::format("nvlink_active_links {} vs nvlink_count {}",
                              Num(*g.nvlink_active_links), *info->nvlink_count)};
    f.action = "Check the NVLink bridge or baseboard; drain the node";
    Report(std::move(f), t);
  }
  if (g.mem_used_mib) CheckMemory(r, index, *g.mem_used_mib);
  // gpu_idle_allocated: a job holds the GPU and it does nothing.
  auto held = gpu_job_.find({r.node, index});
  if (held != gpu_job_.end() && g.util_pct && *g.util_pct < 1) {
    auto [it, fresh] = idle_since_.emplace(std::make_pair(r.node, index), t);
    if (!fresh && t - it->second >= o_.idle_allocated_s) {
      Finding f = Make("gpu_idle_allocated", "warning", r.node, std::nullopt);
      f.job = held->second.first;
      f.first_seen = it->second + o_.idle_allocated_s;
      f.summary = fmt::format("Job {} holds GPU {}, idle for {:.0f} min", held->second.first, gpu,
                              (t - it->second) / 60);
      f.evidence = {fmt::format("util_pct 0 on GPU {} since {}", gpu, Num(it->second))};
      f.action = "Ask the job's owner to release the GPUs, or end the job";
      Report(std::move(f), t);
    }
  } else {
    idle_since_.erase({r.node, index});
  }
  s.prev = g;
  s.prev_t = t;
}

void Diagnoser::OnEvent(const trace::TraceRecord& r, const trace::TraceEvent& e) {
  if (!e.kind) return;
  const std::optional<int> gpu =
      e.gpu ? std::optional<int>(static_cast<int>(*e.gpu)) : std::nullopt;
  const std::string message = e.message.value_or("");
  if (*e.kind == "maintenance_start") {
    std::vector<Maintenance>& ws = maintenance_[r.node];
    if (ws.size() >= 1000) ws.erase(ws.begin());  // bounded; the oldest windows go first
    ws.push_back({r.t, std::numeric_limits<double>::infinity(), e.gpu, message});
    return;
  }
  if (*e.kind == "maintenance_end") {
    // Ends the open windows of that GPU (of the whole node when the end names no GPU).
    for (Maintenance& w : maintenance_[r.node]) {
      if (std::isinf(w.end) && (!e.gpu || w.gpu == e.gpu)) w.end = r.t;
    }
    return;
  }
  if (*e.kind == "gpu_lost" || (*e.kind == "xid" && e.code && *e.code == 79)) {
    Finding f = Make("gpu_lost", "critical", r.node, gpu);
    f.summary = gpu ? fmt::format("GPU {} stopped answering (fell off the bus)", *gpu)
                    : "A GPU stopped answering";
    f.evidence = {
        fmt::format("{}{}: {}", *e.kind, e.code ? " " + std::to_string(*e.code) : "", message)};
    f.action = "Drain the node; reset or reseat the GPU; check its power and PCIe link";
    Report(std::move(f), r.t);
    return;
  }
  if (*e.kind == "xid" && e.code) {
    const std::string cause = CauseOfXid(*e.code);
    if (cause.empty()) return;
    Finding f = Make(cause, cause == "xid" ? "warning" : "critical", r.node, gpu);
    if (cause == "xid") f.code = *e.code;
    f.summary =
        fmt::format("XID {} on GPU {}: {}", *e.code, gpu ? std::to_string(*gpu) : "?", message);
    f.evidence = {fmt::format("xid {}: {}", *e.code, message)};
    f.action = "Look up the XID in NVIDIA's XID catalog; drain the node if it repeats";
    Report(std::move(f), r.t);
    return;
  }
  if (*e.kind == "ecc" && gpu) {
    // An ECC event names the error type in its message; an uncorrectable one is a DBE.
    std::string lower = message;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (lower.find("double") != std::string::npos || lower.find("uncorrect") != std::string::npos ||
        lower.find("dbe") != std::string::npos) {
      Finding f = Make("ecc_dbe", "critical", r.node, gpu);
      f.summary = fmt::format("GPU {} had an uncorrectable memory error", *gpu);
      f.evidence = {"ecc event: " + message};
      f.action = "Drain the node; reset the GPU; replace it if row remapping failed";
      Report(std::move(f), r.t);
    }
    return;
  }
  if ((*e.kind == "checkpoint_start" || *e.kind == "checkpoint_end") && e.job) {
    TaskState& ts = tasks_[{r.node, *e.job}];
    ts.checkpoint_since = *e.kind == "checkpoint_start" ? r.t : -1;
    if (*e.kind == "checkpoint_start") ts.last_checkpoint_start = r.t;
    // The job was busy until the write ended: its next step ends a moment later, and no hang
    // is judged from before that.
    if (*e.kind == "checkpoint_end" && ts.last_step_t >= 0) {
      ts.last_step_t = std::max(ts.last_step_t, r.t);
    }
    return;
  }
  if (*e.kind == "topology_change") {
    Finding f = Make("topology_change", "warning", r.node, std::nullopt);
    f.summary = "The node's topology changed: " + message;
    f.evidence = {"topology_change: " + message};
    f.action = "Compare with the archived topology (gpuwatch topo diff); reseat what was lost";
    Report(std::move(f), r.t);
  }
}

void Diagnoser::OnJob(const trace::TraceRecord& r, const trace::TraceJob& j) {
  if (!j.job || !j.state) return;
  auto key = std::make_pair(r.node, *j.job);
  if (*j.state == "start") {
    JobInfo& info = job_info_[*j.job];
    if (j.template_name && !j.template_name->empty()) info.template_name = *j.template_name;
    info.nodes.insert(r.node);
    if (j.gpus) info.gpus_per_node = std::max(info.gpus_per_node, j.gpus->size());
    if (j.gpus) {
      for (uint32_t g : *j.gpus) {
        gpu_job_[{r.node, g}] = {*j.job, r.t};
        mem_.erase({r.node, g});
      }
    }
    NcclJob& nj = nccl_[key];
    // A restart of the same job id: its logs are a new run.
    if (!nj.text.empty()) AnalyzeNccl(r.node, *j.job, nj);
    nj = NcclJob{};
    nj.start_t = r.t;
  } else if (*j.state == "end") {
    tasks_[key].ended = true;
    for (auto it = gpu_job_.begin(); it != gpu_job_.end();) {
      it = it->first.first == r.node && it->second.first == *j.job ? gpu_job_.erase(it)
                                                                   : std::next(it);
    }
    auto it = nccl_.find(key);
    if (it != nccl_.end()) {
      AnalyzeNccl(r.node, *j.job, it->second);
      nccl_.erase(it);
    }
  }
}

void Diagnoser::OnLog(const trace::TraceRecord& r, const trace::TraceLog& l) {
  if (!l.line || l.source.value_or("") != "nccl") return;
  NcclJob& nj = nccl_[{r.node, l.job.value_or("")}];
  if (nj.line_t.size() >= o_.max_nccl_lines_per_job) return;
  nj.text += *l.line;
  nj.text += '\n';
  nj.line_t.push_back(r.t);
  // The channels are set up once the rings and trees are connected: judge then, and again at
  // the job's end.
  if (!nj.analyzed_connected && (l.line->find("Connected all rings") != std::string::npos ||
                                 l.line->find("Connected all trees") != std::string::npos)) {
    nj.analyzed_connected = true;
    AnalyzeNccl(r.node, l.job.value_or(""), nj);
  }
}

void Diagnoser::AnalyzeNccl(const std::string& node, const std::string& job, NcclJob& nj) {
  if (nj.text.empty()) return;
  const nccl::NcclLogReport report = nccl::ParseNcclLog(nj.text);
  nccl::TopoHint hint;
  bool have_hint = false;
  auto it = nodes_.find(node);
  if (it != nodes_.end() && it->second.node) {
    const trace::TraceNode& n = *it->second.node;
    if (n.topology && n.topology->gpu_links) {
      hint.gpu_links = *n.topology->gpu_links;
      have_hint = true;
    }
    if (n.nics) {
      for (const auto& nic : *n.nics) {
        if (nic.name) hint.nics.push_back(*nic.name);
        if (nic.type.value_or("") == "ib" ||
            (nic.name && (nic.name->rfind("mlx", 0) == 0 || nic.name->rfind("ib", 0) == 0))) {
          hint.ib_present = true;
        }
      }
      have_hint = true;
    }
  }
  for (const nccl::Finding& nf : nccl::AnalyzeNccl(report, have_hint ? &hint : nullptr)) {
    // version_mismatch is judged across the nodes' records (CrossNode), where every node's
    // versions are known; one node's log sees only its own ranks.
    if (nf.cause == "version_mismatch") continue;
    Finding f = Make(nf.cause, nf.severity, node, std::nullopt);
    if (!job.empty()) f.job = job;
    // The log lines the evidence quotes ("line 12: …") date the finding.
    double first = 0;
    for (const std::string& ev : nf.evidence) {
      size_t n = 0;
      if (std::sscanf(ev.c_str(), "line %zu:", &n) == 1 && n >= 1 && n <= nj.line_t.size()) {
        const double t = nj.line_t[n - 1];
        if (first == 0 || t < first) first = t;
      }
    }
    if (first == 0) first = nj.start_t.value_or(nj.line_t.front());
    f.first_seen = first;
    f.summary = nf.summary;
    f.evidence = nf.evidence;
    f.action = nf.action;
    f.job.reset();  // findings.md: link fallbacks name only the node
    Report(std::move(f), nj.line_t.back());
  }
}

void Diagnoser::CrossNode() {
  if (nodes_.size() < 2) return;
  // version_mismatch: per field, the nodes outside the largest group of equal values.
  for (const char* field : {"driver", "CUDA", "NCCL"}) {
    std::map<std::string, std::vector<std::string>> groups;
    for (const auto& [name, ns] : nodes_) {
      auto it = ns.versions.find(field);
      if (it != ns.versions.end()) groups[it->second.first].push_back(name);
    }
    if (groups.size() < 2) continue;
    // The largest group is the reference; on a tie, the group of rank 0's node (the node a
    // job is launched from), as the NCCL log analysis decides it.
    std::set<std::string> rank0_nodes;
    for (const auto& [job, sc] : step_clock_) {
      if (!sc.rank0_node.empty()) rank0_nodes.insert(sc.rank0_node);
    }
    auto has_rank0 = [&](const std::vector<std::string>& members) {
      for (const std::string& m : members) {
        if (rank0_nodes.count(m) != 0) return true;
      }
      return false;
    };
    const std::vector<std::string>* major = nullptr;
    std::string major_value;
    for (const auto& [v, members] : groups) {
      if (!major || members.size() > major->size() ||
          (members.size() == major->size() && has_rank0(members) && !has_rank0(*major))) {
        major = &members;
        major_value = v;
      }
    }
    for (const auto& [v, members] : groups) {
      if (&members == major) continue;
      for (const std::string& name : members) {
        const auto& since = nodes_[name].versions[field];
        Finding f = Make("version_mismatch", "warning", name, std::nullopt);
        f.first_seen = since.second;
        f.summary = fmt::format("{} runs {} {} while {} other node(s) run {}", name, field, v,
                                major->size(), major_value);
        f.evidence = {fmt::format("{} {} on {}; {} on {}", field, v, name, major_value,
                                  fmt::join(*major, ", "))};
        f.action = "Run every node of a job on the same driver, CUDA and NCCL";
        Report(std::move(f), since.second);
      }
    }
  }
  // clock_skew: clock_offset_ms is each node's offset from its own time source, so a node is
  // off when its offset exceeds the tolerance and it also stands apart from the median of all
  // nodes (a shared offset, e.g. one upstream server, is not one node's fault).
  std::vector<std::pair<std::string, double>> offsets;
  for (const auto& [name, ns] : nodes_) {
    if (ns.clock_offset_ms) offsets.push_back({name, *ns.clock_offset_ms});
  }
  if (offsets.size() < 2) return;
  std::vector<double> all;
  for (const auto& [name, off] : offsets) all.push_back(off);
  const double median = Median(all);
  for (const auto& [name, off] : offsets) {
    if (std::fabs(off) <= o_.clock_skew_tolerance_ms ||
        std::fabs(off - median) <= o_.clock_skew_tolerance_ms) {
      continue;
    }
    Finding f = Make("clock_skew", "warning", name, std::nullopt);
    f.first_seen = nodes_[name].clock_offset_t;
    f.summary = fmt::format("{}'s clock is {} ms off its time source; the nodes' median is {} ms",
                            name, Num(off), Num(median));
    f.evidence = {fmt::format("clock_offset_ms {} on {}", Num(off), name)};
    f.action = "Check chrony/ntpd on the node (chronyc tracking); fix its time source";
    Report(std::move(f), f.first_seen);
  }
}

void Diagnoser::OnStepClock(const trace::TraceRecord& r, const trace::TraceStep& st) {
  if (!st.job || !st.step || r.node.empty()) return;
  StepClock& sc = step_clock_[*st.job];
  if (st.rank && *st.rank == 0) sc.rank0_node = r.node;
  sc.ends[*st.step].emplace(r.node, r.t);  // the first rank of the node to report it
  // Steps are compared once every node had time to report them; a skewed node's records
  // arrive shifted by its offset, so keep a margin of steps.
  if (sc.ends.size() > 64) FlushStepClock(*st.job, false);
}

void Diagnoser::FlushStepClock(const std::string& job, bool all) {
  StepClock& sc = step_clock_[job];
  while (!sc.ends.empty() && (all || sc.ends.size() > 32)) {
    const std::map<std::string, double> ends = std::move(sc.ends.begin()->second);
    sc.ends.erase(sc.ends.begin());
    if (ends.size() < 2) continue;
    std::vector<double> ts;
    for (const auto& [node, t] : ends) ts.push_back(t);
    // Three nodes or more: against the median of all. Two: against rank 0's node.
    std::optional<double> ref;
    if (ends.size() >= 3) {
      ref = Median(ts);
    } else if (ends.count(sc.rank0_node) != 0) {
      ref = ends.at(sc.rank0_node);
    }
    if (!ref) continue;
    for (const auto& [node, t] : ends) {
      SkewRun& run = skew_runs_[{node, job}];
      const double offset_ms = (t - *ref) * 1000;
      const bool first = !run.compared;
      run.compared = true;
      if (std::fabs(offset_ms) <= o_.clock_skew_tolerance_ms) {
        run = SkewRun{.compared = true};
        continue;
      }
      if (run.length++ == 0) {
        run.start_t = t;
        run.from_first = first;
      }
      run.offset_ms += (offset_ms - run.offset_ms) / run.length;  // running mean
      if (run.length < 5) continue;
      // Apart from its first compared step on: its clock was off before the job began, so
      // the node's first record already carried it.
      double since = run.start_t;
      auto ns = nodes_.find(node);
      if (run.from_first && ns != nodes_.end() && ns->second.first_t >= 0) {
        since = std::min(since, ns->second.first_t);
      }
      Finding f = Make("clock_skew", "warning", node, std::nullopt);
      f.first_seen = since;
      f.summary = fmt::format(
          "{}'s clock is {:.0f} ms off the other nodes: job {}'s steps end there {:.0f} ms {} "
          "than on the others",
          node, std::fabs(run.offset_ms), job, std::fabs(run.offset_ms),
          run.offset_ms > 0 ? "later" : "earlier");
      f.evidence = {fmt::format("{} consecutive steps of job {} apart by {:.0f} ms on average",
                                run.length, job, run.offset_ms)};
      f.action = "Check chrony/ntpd on the node (chronyc tracking); fix its time source";
      Report(std::move(f), t);
    }
  }
}

std::vector<Finding> Diagnoser::Finish(double end_t) {
  for (auto& [job, sc] : step_clock_) FlushStepClock(job, true);
  for (auto& [key, nj] : nccl_) AnalyzeNccl(key.first, key.second, nj);
  CrossNode();
  std::vector<Finding> out;
  for (auto& [key, f] : findings_) {
    Finding copy = f;
    if (copy.last_seen < copy.first_seen) copy.last_seen = copy.first_seen;
    (void)end_t;
    out.push_back(std::move(copy));
  }
  out = Deepest(std::move(out));
  // What begins inside a maintenance window of its node (or of its GPU) is what the work does
  // — a reset GPU, a stress test's throttles, a reloaded driver — and is recorded as info, not
  // raised. Judged after Deepest, so that the causes still explain one another as they are.
  for (Finding& f : out) {
    auto it = maintenance_.find(f.node);
    if (it == maintenance_.end() || f.severity == "info") continue;
    for (const Maintenance& w : it->second) {
      if (w.gpu && (!f.gpu || static_cast<uint32_t>(*f.gpu) != *w.gpu)) continue;
      if (f.first_seen < w.start || f.first_seen > w.end) continue;
      f.severity = "info";
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

std::vector<Finding> Diagnoser::Deepest(std::vector<Finding> all) const {
  // Card and link causes on a node explain a slow or stuck job there (findings.md: "slower
  // steps after a fallback, a congested NIC or a downgraded link are that link cause"; "a job
  // that hangs because a GPU stopped responding is xid"); a card cause on a GPU explains that
  // GPU straggling.
  auto has = [&](const std::string& node, std::optional<int> gpu,
                 std::initializer_list<std::string_view> causes) {
    for (const Finding& f : all) {
      // An info finding (a trend, something inside a maintenance window) explains nothing.
      if (f.node != node || f.severity == "info") continue;
      if (gpu && f.gpu != gpu) continue;
      for (std::string_view c : causes) {
        if (f.cause == c) return true;
      }
    }
    return false;
  };
  // What explains a straggling GPU: a card cause on it, or its process placed on the wrong
  // NUMA node (its input and launches cross the socket link).
  const std::initializer_list<std::string_view> kCard = {
      "thermal_throttle", "power_throttle", "clock_slowdown", "ecc_dbe",      "xid",
      "gpu_lost",         "pcie_downgrade", "nvlink_errors",  "numa_mismatch"};
  const std::initializer_list<std::string_view> kBelow = {
      "thermal_throttle", "power_throttle", "clock_slowdown", "ecc_dbe",         "xid",
      "gpu_lost",         "pcie_downgrade", "nvlink_errors",  "nvlink_fallback", "net_fallback",
      "net_congestion",   "net_errors",     "straggler_gpu",  "data_stall",      "checkpoint_stall",
      "memory_leak",      "numa_mismatch"};
  // A job's symptoms on one node can have their cause on another node of the same job: the
  // ranks are synchronous, so a congested NIC or a dead rank there stalls every node.
  auto has_in_job = [&](const std::optional<std::string>& job,
                        std::initializer_list<std::string_view> causes) {
    if (!job) return false;
    for (const auto& [key, ts] : tasks_) {
      if (key.second == *job && has(key.first, std::nullopt, causes)) return true;
    }
    return false;
  };
  // A hang seen on several nodes of a job is listed where the stuck rank is, when that shows.
  auto stuck_elsewhere = [&](const Finding& f) {
    if (!f.job) return false;
    auto here = tasks_.find({f.node, *f.job});
    if (here != tasks_.end() && here->second.hang_stuck_here) return false;
    for (const Finding& g : all) {
      if (g.cause != "job_hang" || g.job != f.job || g.node == f.node) continue;
      auto there = tasks_.find({g.node, *f.job});
      if (there != tasks_.end() && there->second.hang_stuck_here) return true;
    }
    return false;
  };
  // Decide first, then move: has() reads every finding.
  std::vector<bool> keep(all.size(), true);
  for (size_t i = 0; i < all.size(); ++i) {
    const Finding& f = all[i];
    if ((f.cause == "straggler_gpu" && has(f.node, f.gpu, kCard)) ||
        (f.cause == "step_regression" &&
         (has(f.node, std::nullopt, kBelow) || has_in_job(f.job, kBelow))) ||
        (f.cause == "job_hang" &&
         (has(f.node, std::nullopt, {"gpu_lost", "xid", "ecc_dbe", "rank_exit"}) ||
          has_in_job(f.job, {"rank_exit"}) || stuck_elsewhere(f))) ||
        (f.cause == "rank_exit" && has(f.node, std::nullopt, {"gpu_lost", "xid", "ecc_dbe"}))) {
      keep[i] = false;
    }
  }
  std::vector<Finding> out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (keep[i]) out.push_back(std::move(all[i]));
  }
  return out;
}

}  // namespace gpuwatch::analyze
