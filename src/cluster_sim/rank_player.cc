#include "cluster_sim/rank_player.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "common/time_base.h"
#include "gpuwatch.hpp"  // the C++ job SDK (sdk/cpp): the simulated ranks speak as real ones
#include "trace/trace_reader.h"

namespace gpuwatch::cluster_sim {
namespace {

// A rank whose process is missing from the proc rounds this long before its job ends died.
constexpr int64_t kDeadBeforeEndMs = 10000;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct JobInfo {
  std::string template_name, user, project;
  int world_size = 1;
  int64_t start_ms = 0;
  std::optional<int64_t> end_ms;
  int exit_code = 0;
};

void SleepUntilWallMs(int64_t wall_ms) {
  const int64_t now = WallClockMs();
  if (wall_ms > now) std::this_thread::sleep_for(std::chrono::milliseconds(wall_ms - now));
}

}  // namespace

Result<std::vector<RankScript>> RankScripts(const std::vector<std::string>& lines,
                                            const std::string& node) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  auto reader = trace::TraceReader::OpenBuffer(std::move(text), "simulated.jsonl");
  if (!reader.ok()) return reader.status();
  std::map<std::string, JobInfo> jobs;
  std::map<std::pair<std::string, int>, RankScript> ranks;        // (job, rank)
  std::map<std::pair<std::string, unsigned>, uint32_t> pid_of;    // (job, gpu) → sim pid
  std::map<std::pair<std::string, uint32_t>, int64_t> last_seen;  // (job, sim pid) → last round
  std::map<std::string, std::vector<RankAction>> job_events;      // checkpoint marks per job
  std::string want = node;
  trace::TraceRecord r;
  while (true) {
    auto more = (*reader)->Next(&r);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (want.empty() && r.type() == trace::RecordType::kNode) want = r.node;
    if (r.node != want) continue;
    if (const auto* j = r.as<trace::TraceJob>(); j && j->job) {
      JobInfo& info = jobs[*j->job];
      if (j->state == "start") {
        info.template_name = j->template_name.value_or("");
        info.user = j->user.value_or("");
        info.project = j->project.value_or("");
        info.world_size = static_cast<int>(j->ranks.value_or(1));
        info.start_ms = r.t_ms;
      } else if (j->state == "end") {
        info.end_ms = r.t_ms;
        info.exit_code = static_cast<int>(j->exit_code.value_or(0));
      }
    } else if (const auto* s = r.as<trace::TraceStep>(); s && s->job && s->rank) {
      RankScript& rs = ranks[{*s->job, static_cast<int>(*s->rank)}];
      rs.rank = static_cast<int>(*s->rank);
      if (s->gpu) rs.gpu = *s->gpu;
      RankAction a;
      a.t_ms = r.t_ms;
      a.kind = RankAction::Kind::kStep;
      a.duration_s = s->duration_s.value_or(kNaN);
      a.samples = s->samples.value_or(kNaN);
      a.data_wait_s = s->data_wait_s.value_or(kNaN);
      a.comm_s = s->comm_s.value_or(kNaN);
      a.checkpoint_s = s->checkpoint_s.value_or(kNaN);
      a.loss = s->loss.value_or(kNaN);
      a.step = s->step ? static_cast<int64_t>(*s->step) : -1;
      rs.actions.push_back(a);
    } else if (const auto* l = r.as<trace::TraceLog>(); l && l->job && l->rank && l->line) {
      RankScript& rs = ranks[{*l->job, static_cast<int>(*l->rank)}];
      rs.rank = static_cast<int>(*l->rank);
      rs.actions.push_back({.t_ms = r.t_ms, .kind = RankAction::Kind::kLog, .line = *l->line});
    } else if (const auto* e = r.as<trace::TraceEvent>(); e && e->job && e->kind) {
      if (*e->kind == "checkpoint_start" || *e->kind == "checkpoint_end") {
        job_events[*e->job].push_back({.t_ms = r.t_ms,
                                       .kind = *e->kind == "checkpoint_start"
                                                   ? RankAction::Kind::kCheckpointBegin
                                                   : RankAction::Kind::kCheckpointEnd});
      }
    } else if (const auto* p = r.as<trace::TraceProc>(); p && p->job && p->pid && p->gpu) {
      pid_of[{*p->job, *p->gpu}] = *p->pid;
      last_seen[{*p->job, *p->pid}] = r.t_ms;
    }
  }

  std::vector<RankScript> out;
  std::map<std::string, int> local_count;
  for (auto& [key, rs] : ranks) {
    const auto& [job, rank] = key;
    auto info = jobs.find(job);
    if (info == jobs.end()) continue;  // steps of a job that never started here
    rs.job = job;
    rs.template_name = info->second.template_name;
    rs.user = info->second.user;
    rs.project = info->second.project;
    rs.world_size = std::max(info->second.world_size, rank + 1);
    rs.local_rank = local_count[job]++;
    rs.start_ms = info->second.start_ms;
    if (auto pid = pid_of.find({job, rs.gpu}); pid != pid_of.end()) rs.sim_pid = pid->second;
    // Checkpoints are the job's: the node's first rank marks them.
    if (rs.local_rank == 0) {
      for (const RankAction& a : job_events[job]) rs.actions.push_back(a);
    }
    std::stable_sort(rs.actions.begin(), rs.actions.end(),
                     [](const RankAction& a, const RankAction& b) { return a.t_ms < b.t_ms; });
    const std::optional<int64_t> end = info->second.end_ms;
    auto seen = last_seen.find({job, rs.sim_pid});
    if (end && seen != last_seen.end() && seen->second < *end - kDeadBeforeEndMs) {
      // The process left the proc rounds long before the job ended: it died, between its last
      // round and the next. Nothing after that is its.
      const int64_t death = seen->second + 1000;
      std::erase_if(rs.actions, [&](const RankAction& a) { return a.t_ms > death; });
      rs.actions.push_back({.t_ms = death, .kind = RankAction::Kind::kExit});
    } else if (end) {
      rs.actions.push_back(
          {.t_ms = *end, .kind = RankAction::Kind::kEnd, .code = info->second.exit_code});
    }
    out.push_back(std::move(rs));
  }
  std::stable_sort(out.begin(), out.end(), [](const RankScript& a, const RankScript& b) {
    return a.start_ms != b.start_ms ? a.start_ms < b.start_ms : a.rank < b.rank;
  });
  return out;
}

void PlayRank(const RankScript& script, int64_t offset_ms, const std::string& address) {
  SleepUntilWallMs(script.start_ms + offset_ms);
  ::gpuwatch::Options options;
  options.job = script.job;
  options.template_name = script.template_name;
  options.user = script.user;
  options.project = script.project;
  options.rank = script.rank;
  options.world_size = script.world_size;
  options.local_rank = script.local_rank;
  options.address = address;
  ::gpuwatch::Client client(options);
  std::optional<::gpuwatch::PhaseScope> checkpoint;
  for (const RankAction& a : script.actions) {
    SleepUntilWallMs(a.t_ms + offset_ms);
    switch (a.kind) {
      case RankAction::Kind::kLog:
        client.log_line(a.line);
        break;
      case RankAction::Kind::kCheckpointBegin:
        checkpoint.emplace(client.phase("checkpoint"));
        client.flush();  // the mark is news now, not at the next step
        break;
      case RankAction::Kind::kCheckpointEnd:
        checkpoint.reset();
        client.flush();
        break;
      case RankAction::Kind::kStep: {
        ::gpuwatch::StepReport report;
        report.duration_s = a.duration_s;
        report.samples = a.samples;
        report.step = a.step;
        report.data_wait_s = a.data_wait_s;
        report.comm_s = a.comm_s;
        report.checkpoint_s = a.checkpoint_s;
        report.loss = a.loss;
        client.step_done(report);
        break;
      }
      case RankAction::Kind::kEnd:
        checkpoint.reset();
        client.end(a.code);
        return;
      case RankAction::Kind::kExit:
        // A crashed rank says nothing more: no `end`, no flush of what it held.
        std::_Exit(134);
    }
  }
}

}  // namespace gpuwatch::cluster_sim
