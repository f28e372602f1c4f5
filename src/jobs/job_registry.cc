#include "jobs/job_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "collect/attribution.h"

namespace gpuwatch::jobs {
namespace {

std::optional<std::string> ReadProcFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Field 3 of /proc/PID/stat, after the last ')' (comm may hold spaces and parentheses).
char StatState(std::string_view stat) {
  size_t close = stat.rfind(')');
  if (close == std::string_view::npos || close + 2 >= stat.size()) return '?';
  return stat[close + 2];
}

double Quantile(std::vector<double>& sorted, double q) {
  // Nearest rank: the smallest value with at least q of the samples at or below it.
  size_t n = sorted.size();
  size_t idx = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
  if (idx > 0) --idx;
  return sorted[std::min(idx, n - 1)];
}

double Median(const std::deque<double>& d) {
  std::vector<double> v(d.begin(), d.end());
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

ProcProbe ProcfsProbe(std::string root_dir) {
  if (!root_dir.empty() && root_dir.back() == '/') root_dir.pop_back();
  return [root = std::move(root_dir)](uint32_t pid) -> std::optional<ProcInfo> {
    const std::string dir = root + "/proc/" + std::to_string(pid);
    auto stat = ReadProcFile(dir + "/stat");
    if (!stat) return std::nullopt;
    auto status = ReadProcFile(dir + "/status");
    if (!status) return std::nullopt;
    ProcInfo info;
    info.state = StatState(*stat);
    info.start_time = collect::ParseStatStartTime(*stat).value_or(0);
    auto ids = collect::ParseStatusIds(*status);
    if (!ids.uid) return std::nullopt;
    info.uid = *ids.uid;
    info.nspid = std::move(ids.nspid);
    return info;
  };
}

JobRegistry::JobRegistry(JobRegistryOptions options, ProcProbe probe)
    : options_(std::move(options)), probe_(std::move(probe)) {}

bool JobRegistry::PushOutput(size_t bytes) {
  if (pending_count_ >= options_.max_pending ||
      pending_bytes_ + bytes > options_.max_pending_bytes) {
    counters_.outputs_dropped++;
    return false;
  }
  pending_count_++;
  pending_bytes_ += bytes;
  return true;
}

JobRegistry::JobRec* JobRegistry::FindRecent(const std::string& id) {
  for (auto& j : recent_)
    if (j.id == id) return &j;
  return nullptr;
}

void JobRegistry::Shrink(JobRec& job) {
  for (auto& [rn, r] : job.ranks) {
    if (!r.recent.empty()) r.final_median_s = Median(r.recent);
    r.recent = {};
    r.window = Window{};
  }
}

void JobRegistry::Emit(JobEvent e) {
  if (PushOutput()) pending_.events.push_back(std::move(e));
}

size_t JobRegistry::RankCount() const {
  size_t n = 0;
  for (const auto& [id, j] : running_) n += j.ranks.size();
  return n;
}

JobRegistry::JobRec* JobRegistry::FindOrCreate(const std::string& id, int64_t now_ms,
                                               std::optional<RejectReason>* err) {
  auto it = running_.find(id);
  if (it != running_.end()) {
    it->second.sdk = true;
    return &it->second;
  }
  if (running_.size() >= options_.max_jobs) {
    *err = RejectReason::kLimit;
    return nullptr;
  }
  JobRec job;
  // A job that ended and reports again is a new run of it: drop the old record.
  for (auto r = recent_.begin(); r != recent_.end(); ++r) {
    if (r->id == id) {
      recent_.erase(r);
      break;
    }
  }
  job.id = id;
  job.start_ms = now_ms;
  auto [ins, _] = running_.emplace(id, std::move(job));
  return &ins->second;
}

std::optional<RejectReason> JobRegistry::Accept(const model::JobMessage& m, const Sender& sender,
                                                int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  auto reject = [&](RejectReason r) -> std::optional<RejectReason> {
    counters_.rejected[static_cast<size_t>(r)]++;
    return r;
  };
  const int64_t t_ms = m.t_s ? static_cast<int64_t>(std::llround(*m.t_s * 1000)) : now_ms;

  // Who the rank's process is. Over the Unix socket the kernel says; a client may name another
  // process (a launcher reporting for its child) only of its own uid.
  std::optional<uint32_t> pid = sender.pid;
  bool verified = sender.verified();
  bool claim = m.pid && (!sender.pid || *m.pid != *sender.pid);
  if (claim && verified) {
    // A client in a container knows itself by its namespace's pid; the kernel told us the
    // host's. The same process, named from inside.
    auto self = probe_ ? probe_(*sender.pid) : std::nullopt;
    if (self && !self->nspid.empty() && self->nspid.back() == *m.pid) claim = false;
  }
  if (claim) {
    if (verified && sender.uid && *sender.uid != 0) {
      auto info = probe_ ? probe_(*m.pid) : std::nullopt;
      if (!info || info->uid != *sender.uid) return reject(RejectReason::kPidNotOwned);
    }
    pid = m.pid;
  }

  if (m.type == model::JobMessageType::kQueued || m.type == model::JobMessageType::kAllocation ||
      m.type == model::JobMessageType::kRelease)
    return AcceptSchedulerMessage(m, sender, t_ms);

  std::optional<RejectReason> err;
  const bool is_new_job = !running_.count(m.job);
  auto owned_by_other = [&](const JobRec& j) {
    if (!j.owner_uid) return false;
    if (!verified) return true;  // nobody can prove over UDP/TCP that the job is theirs
    return sender.uid && *sender.uid != 0 && *sender.uid != *j.owner_uid;
  };
  if (is_new_job) {
    // A job that ended: its end, its last log lines and annotations still belong to that run;
    // only a start or a step begins a new one.
    JobRec* old = FindRecent(m.job);
    if (old && owned_by_other(*old)) return reject(RejectReason::kPidNotOwned);
    if (m.type == model::JobMessageType::kEnd) {
      counters_.accepted++;  // nothing (left) to end
      return std::nullopt;
    }
    if (old &&
        (m.type == model::JobMessageType::kLog || m.type == model::JobMessageType::kAnnotation)) {
      if (m.type == model::JobMessageType::kLog) {
        if (PushOutput(m.text.size()))
          pending_.logs.push_back({t_ms, m.job, m.rank, m.stream, m.text});
      } else {
        Emit({t_ms, "annotation", "info", m.job, m.rank, m.text, ""});
      }
      counters_.accepted++;
      return std::nullopt;
    }
  } else if (owned_by_other(running_.at(m.job))) {
    return reject(RejectReason::kPidNotOwned);
  }
  const std::optional<uint32_t> starter = verified ? sender.uid : std::nullopt;
  if (is_new_job) {
    size_t mine = 0;
    for (const auto& [id, j] : running_)
      if (j.started_by_protocol && j.starter_uid == starter) ++mine;
    if (mine >= options_.max_jobs_per_uid) return reject(RejectReason::kQuota);
  }
  JobRec* job = FindOrCreate(m.job, t_ms, &err);
  if (!job) return reject(*err);
  if (is_new_job) {
    job->started_by_protocol = true;
    job->starter_uid = starter;
  }
  if (!job->owner_uid && verified && job->ranks.empty()) job->owner_uid = sender.uid;
  auto rit = job->ranks.find(m.rank);
  if (rit == job->ranks.end()) {
    if (RankCount() >= options_.max_ranks) {
      if (job->ranks.empty() && is_new_job) running_.erase(m.job);
      return reject(RejectReason::kLimit);
    }
    Rank r;
    r.rank = m.rank;
    r.pid = pid;
    r.uid = sender.uid;
    r.pid_verified = verified;
    r.start_ms = t_ms;
    r.last_activity_ms = now_ms;
    r.window.start_ms = now_ms;
    rit = job->ranks.emplace(m.rank, std::move(r)).first;
  }
  Rank& rank = rit->second;
  if (is_new_job) {
    Emit({t_ms, "job_start", "info", m.job, m.rank,
          fmt::format("job {} started (first report from rank {})", m.job, m.rank),
          fmt::format("{{\"rank\":{}}}", m.rank)});
  }

  switch (m.type) {
    case model::JobMessageType::kStart: {
      const bool restart = rank.pid && pid && *rank.pid != *pid;
      if (restart || rank.state != Rank::State::kRunning) {
        // A new process for this rank: its step count starts over.
        rank.last_step.reset();
        rank.recent.clear();
        rank.state = Rank::State::kRunning;
        rank.exit_code.reset();
        rank.hung = false;
        rank.start_ms = t_ms;
        rank.pid_start_time.reset();
        Emit({t_ms, "rank_start", "info", m.job, m.rank,
              fmt::format("rank {} of job {} restarted (pid {})", m.rank, m.job,
                          pid ? std::to_string(*pid) : "unknown"),
              ""});
      }
      rank.pid = pid;
      rank.pid_verified = verified;
      rank.uid = sender.uid;
      if (m.local_rank) rank.local_rank = m.local_rank;
      if (!m.template_name.empty()) job->template_name = m.template_name;
      // Who owns the job, and under which project: the scheduler's word (its allocation); root's
      // (a launcher speaks for its job as the scheduler does); else the owner is the user of the
      // job's processes, from their credentials (the next process tick), and the project stays
      // unset. A user's own `user` and `project` are claims, never ownership: taken, a project
      // claim would put the job in another project's scope and bill it there.
      if (auto a = allocations_.find(m.job); a != allocations_.end()) {
        job->user = a->second.user;
        if (!a->second.project.empty()) job->project = a->second.project;
      } else if (sender.verified() && sender.uid && *sender.uid == 0) {
        if (!m.user.empty()) job->user = m.user;
        if (!m.project.empty()) job->project = m.project;
      } else if (!m.project.empty()) {
        job->claimed_project = m.project;
      }
      if (m.world_size) job->world_size = m.world_size;
      // A start repeated every 30 s by the SDK says the process lives, not that it progresses:
      // only a new process (restart) resets the hang clock.
      if (restart) rank.last_activity_ms = now_ms;
      for (const auto& path : m.log_files) {
        // Reading files on a client's word needs its uid: the tailer checks the file's owner.
        if (!verified) continue;
        if (PushOutput()) pending_.log_files.push_back({m.job, m.rank, path, sender.uid});
      }
      break;
    }
    case model::JobMessageType::kStep: {
      const auto& s = m.step;
      if (rank.last_step && s.step <= *rank.last_step)
        return reject(s.step == *rank.last_step ? RejectReason::kDuplicate
                                                : RejectReason::kOutOfOrder);
      if (rank.state != Rank::State::kRunning) rank.state = Rank::State::kRunning;
      rank.last_step = s.step;
      rank.steps_total++;
      rank.last_step_ms = t_ms;
      rank.last_activity_ms = now_ms;
      job->last_step_ms = std::max(job->last_step_ms, t_ms);
      if (rank.phase == "data" || rank.phase == "comm") rank.phase.clear();
      rank.recent.push_back(s.duration_s);
      if (rank.recent.size() > options_.median_steps) rank.recent.pop_front();
      Window& w = rank.window;
      w.steps++;
      w.duration_s += s.duration_s;
      if (s.samples) w.samples += *s.samples;
      if (s.data_wait_s) w.data_s += *s.data_wait_s, w.any_data = true;
      if (s.comm_s) w.comm_s += *s.comm_s, w.any_comm = true;
      if (s.checkpoint_s) w.checkpoint_s += *s.checkpoint_s, w.any_checkpoint = true;
      if (s.loss) w.loss = s.loss;
      if (s.grad_norm) w.grad_norm = s.grad_norm;
      // Reservoir sampling keeps the quantiles unbiased at any step rate in bounded memory.
      w.seen++;
      if (w.reservoir.size() < options_.reservoir) {
        w.reservoir.push_back(s.duration_s);
      } else {
        uint64_t j = std::uniform_int_distribution<uint64_t>(0, w.seen - 1)(rng_);
        if (j < w.reservoir.size()) w.reservoir[j] = s.duration_s;
      }
      for (const auto& [name, value] : s.scalars) {
        if (rank.scalars.size() < kMaxScalars || rank.scalars.count(name))
          rank.scalars[name] = value;
      }
      const double min_gap_ms =
          options_.raw_steps_max_hz > 0 ? 1000 / options_.raw_steps_max_hz : 0;
      // Limited by arrival time: a client's own `t` could be spaced to slip any limit.
      if (rank.last_raw_ms == 0 || static_cast<double>(now_ms - rank.last_raw_ms) >= min_gap_ms) {
        rank.last_raw_ms = now_ms;
        if (PushOutput()) {
          StepOutput out{t_ms, m.job, m.rank, std::nullopt, s};
          if (rank.gpus.size() == 1) out.gpu = *rank.gpus.begin();
          pending_.steps.push_back(std::move(out));
        }
      }
      if (rank.hung) {
        rank.hung = false;
        bool any = false;
        for (const auto& [_, r] : job->ranks) any |= r.hung;
        if (!any && job->hung) {
          job->hung = false;
          job->state = "running";
          Emit({t_ms, "job_resumed", "info", m.job, m.rank,
                fmt::format("job {} steps again (rank {} step {})", m.job, m.rank, s.step), ""});
        }
      }
      break;
    }
    case model::JobMessageType::kPhase:
      rank.last_activity_ms = now_ms;
      if (m.begin) {
        rank.phase = m.name;
        rank.phase_since_ms = now_ms;
      } else if (rank.phase == m.name) {
        rank.phase.clear();
      }
      if (m.name != "data" && m.name != "comm")
        Emit({t_ms, "phase", "info", m.job, m.rank,
              fmt::format("rank {} {} {}", m.rank, m.begin ? "begins" : "ends", m.name),
              // The parser admits only [A-Za-z0-9_.-] in phase names: nothing to escape.
              fmt::format("{{\"name\":\"{}\",\"state\":\"{}\"}}", m.name,
                          m.begin ? "begin" : "end")});
      break;
    case model::JobMessageType::kCheckpoint:
      rank.last_activity_ms = now_ms;
      if (m.begin) {
        rank.phase = "checkpoint";
        rank.phase_since_ms = now_ms;
      } else if (rank.phase == "checkpoint") {
        rank.phase.clear();
      }
      Emit({t_ms, m.begin ? "checkpoint_start" : "checkpoint_end", "info", m.job, m.rank,
            fmt::format("rank {} checkpoint {}", m.rank, m.begin ? "begins" : "ends"), ""});
      break;
    case model::JobMessageType::kEnd:
      if (rank.state == Rank::State::kRunning) EndRank(*job, rank, t_ms, m.exit_code, false);
      MaybeEndJob(*job, t_ms);
      break;
    case model::JobMessageType::kAnnotation:
      Emit({t_ms, "annotation", "info", m.job, m.rank, m.text, ""});
      break;
    case model::JobMessageType::kLog:
      if (PushOutput(m.text.size()))
        pending_.logs.push_back({t_ms, m.job, m.rank, m.stream, m.text});
      break;
    case model::JobMessageType::kQueued:  // the scheduler's: AcceptSchedulerMessage, above
    case model::JobMessageType::kAllocation:
    case model::JobMessageType::kRelease:
      break;
  }
  counters_.accepted++;
  return std::nullopt;
}

void JobRegistry::CountRejected(const RejectCounts& counts) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < counts.size(); ++i) counters_.rejected[i] += counts[i];
}

void JobRegistry::EndRank(JobRec& job, Rank& r, int64_t t_ms, std::optional<int> code, bool died) {
  r.state = died ? Rank::State::kDied : Rank::State::kEnded;
  r.exit_code = code;
  r.hung = false;
  std::string pid = r.pid ? std::to_string(*r.pid) : "unknown";
  std::string what = died   ? "died (its process vanished without an end report)"
                     : code ? fmt::format("exited with code {}", *code)
                            : std::string("ended");
  const bool bad = died || (code && *code != 0);
  Emit({t_ms, "rank_exit", bad ? "critical" : "info", job.id, r.rank,
        fmt::format("rank {} of job {} (pid {}) {}", r.rank, job.id, pid, what),
        fmt::format("{{\"rank\":{},\"pid\":{},\"exit_code\":{},\"died\":{}}}", r.rank,
                    r.pid ? std::to_string(*r.pid) : "null", code ? std::to_string(*code) : "null",
                    died ? "true" : "false")});
}

void JobRegistry::MaybeEndJob(JobRec& job, int64_t t_ms) {
  if (job.ranks.empty()) return;
  bool failed = false;
  for (const auto& [_, r] : job.ranks) {
    if (r.state == Rank::State::kRunning) return;
    failed |= r.state == Rank::State::kDied || (r.exit_code && *r.exit_code != 0);
  }
  job.state = failed ? "failed" : "finished";
  job.end_ms = t_ms;
  job.hung = false;
  Emit({t_ms, "job_end", failed ? "critical" : "info", job.id, std::nullopt,
        fmt::format("job {} {} ({} ranks)", job.id, failed ? "failed" : "finished",
                    job.ranks.size()),
        fmt::format("{{\"state\":\"{}\"}}", job.state)});
  Retire(job.id, t_ms);
}

void JobRegistry::Retire(const std::string& id, int64_t now_ms) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  // The steps since the last window close are the job's last statistics: a job shorter than
  // a window would otherwise end with none.
  bool steps_pending = false;
  for (const auto& [rn, r] : it->second.ranks) steps_pending |= r.window.steps > 0;
  if (steps_pending) CloseJobWindow(it->second, now_ms, /*final=*/true);
  // The tailers of an ended job must stop even when the output queue is full.
  pending_count_++;
  pending_.ended_jobs.push_back(id);
  Shrink(it->second);
  recent_.push_front(std::move(it->second));
  running_.erase(it);
  while (recent_.size() > options_.max_recent_jobs) recent_.pop_back();
}

void JobRegistry::Tick(int64_t now_ms, const std::vector<model::ProcessAttribution>& procs) {
  std::lock_guard<std::mutex> lock(mu_);
  const double dt_s = last_tick_ms_ > 0 ? static_cast<double>(now_ms - last_tick_ms_) / 1000 : 0;
  last_tick_ms_ = now_ms;

  // pid → (job, rank) of every running rank.
  std::map<uint32_t, std::pair<JobRec*, Rank*>> by_pid;
  // What this tick shows replaces what the last one showed, for the ranks and jobs it shows:
  // a rank or job whose processes are gone keeps the GPUs it last used (its record says so).
  std::map<Rank*, std::set<unsigned>> rank_gpus;
  std::map<JobRec*, std::pair<std::set<uint32_t>, std::set<unsigned>>> job_procs;
  for (auto& [id, job] : running_) {
    for (auto& [rn, r] : job.ranks)
      if (r.pid && r.state == Rank::State::kRunning) by_pid[*r.pid] = {&job, &r};
  }
  std::set<uint32_t> recent_rank_pids;
  std::set<std::string> recent_sdk_ids;
  for (const auto& j : recent_) {
    if (!j.sdk) continue;
    recent_sdk_ids.insert(j.id);
    for (const auto& [rn, r] : j.ranks)
      if (r.pid) recent_rank_pids.insert(*r.pid);
  }
  std::set<std::string> seen_process_jobs;
  for (const auto& p : procs) {
    auto it = by_pid.find(p.pid);
    // A UDP/TCP client names its pid as it sees it: inside a container that is the
    // namespace's pid.
    if (it == by_pid.end() && p.container_pid) {
      auto c = by_pid.find(*p.container_pid);
      if (c != by_pid.end() && !c->second.second->pid_verified) it = c;
    }
    if (it != by_pid.end()) {
      Rank& r = *it->second.second;
      rank_gpus[&r].insert(p.gpu_index);
      r.container = p.container_id;
      r.user = p.user;
      // The owner from the process's credentials, where neither the scheduler nor root said.
      if (it->second.first->user.empty()) it->second.first->user = p.user;
      job_procs[it->second.first].second.insert(p.gpu_index);
      it->second.first->gpu_seconds += dt_s;
      continue;
    }
    // Not a rank: a helper process of a reporting job, or a job that never used the SDK.
    std::string id = p.job_id;
    if (id.empty())
      id = p.container_id.empty() ? "pid-" + std::to_string(p.pid)
                                  : "container-" + p.container_id.substr(0, 12);
    auto jit = running_.find(id);
    // A process of a reporting job that already ended (a rank still releasing its GPU after
    // its end message) is that job's tail, not a new job that would overwrite its record.
    if (jit == running_.end() && (recent_rank_pids.count(p.pid) || recent_sdk_ids.count(id)))
      continue;
    if (jit == running_.end()) {
      if (running_.size() >= options_.max_jobs) continue;
      JobRec job;
      job.id = id;
      job.sdk = false;
      job.start_ms = now_ms;
      job.user = p.user;
      for (auto r = recent_.begin(); r != recent_.end(); ++r) {
        if (r->id == id) {
          recent_.erase(r);
          break;
        }
      }
      jit = running_.emplace(id, std::move(job)).first;
    }
    JobRec& job = jit->second;
    job_procs[&job].first.insert(p.pid);
    job_procs[&job].second.insert(p.gpu_index);
    if (job.container.empty()) job.container = p.container_id;
    if (job.user.empty()) job.user = p.user;
    job.gpu_seconds += dt_s;
    job.last_seen_ms = now_ms;
    if (!job.sdk) seen_process_jobs.insert(id);
  }

  for (auto& [r, gpus] : rank_gpus) r->gpus = std::move(gpus);
  for (auto& [j, pg] : job_procs) {
    j->pids = std::move(pg.first);
    j->gpus = std::move(pg.second);
  }

  // Liveness of every reporting rank. Jobs end (and leave running_) only after the loop.
  std::vector<std::string> gone, changed;
  for (auto& [id, job] : running_) {
    if (!job.sdk) {
      if (!seen_process_jobs.count(id)) gone.push_back(id);
      continue;
    }
    for (auto& [rn, r] : job.ranks) {
      // A pid named over UDP/TCP may be a container's own numbering: /proc here cannot judge
      // it, so such a rank ends by its end message (and is watched by the hang rule).
      if (r.state != Rank::State::kRunning || !r.pid || !r.pid_verified) continue;
      auto info = probe_ ? probe_(*r.pid) : std::nullopt;
      // A recycled pid (another start time) or a zombie is as dead as a missing one.
      if (info && r.pid_start_time && info->start_time != *r.pid_start_time) info.reset();
      if (info && info->state == 'Z') info.reset();
      if (!info) {
        EndRank(job, r, now_ms, std::nullopt, true);
        if (changed.empty() || changed.back() != id) changed.push_back(id);
        continue;
      }
      if (!r.pid_start_time) r.pid_start_time = info->start_time;
      r.stopped = info->state == 'T' || info->state == 't';
    }
  }
  for (const auto& id : changed) {
    auto it = running_.find(id);
    if (it != running_.end()) MaybeEndJob(it->second, now_ms);
  }
  for (const auto& id : gone) {
    auto it = running_.find(id);
    if (it == running_.end()) continue;
    JobRec& job = it->second;
    job.state = "gone";
    job.end_ms = now_ms;
    Emit({now_ms, "job_end", "info", id, std::nullopt,
          fmt::format("job {}: its GPU processes are gone", id), "{\"state\":\"gone\"}"});
    Retire(id, now_ms);
  }
  for (auto& [id, job] : running_)
    if (job.sdk) CheckHang(job, now_ms);
}

void JobRegistry::CheckHang(JobRec& job, int64_t now_ms) {
  bool any_hung = false;
  std::string why;
  for (auto& [rn, r] : job.ranks) {
    if (r.state != Rank::State::kRunning) continue;
    if (r.recent.size() < 3) continue;  // no step time to judge by yet
    const double median_s = Median(r.recent);
    const bool in_phase = !r.phase.empty() && r.phase != "data" && r.phase != "comm";
    const auto limit_ms =
        static_cast<int64_t>(model::HangLimitS(options_.hang, median_s, in_phase) * 1000);
    const int64_t idle_ms = now_ms - r.last_activity_ms;
    r.hung = idle_ms > limit_ms;
    if (r.hung && !any_hung) {
      why = fmt::format(
          "rank {} has not finished a step for {:.0f} s ({} × its median step of "
          "{:.3g} s; last step {}){}",
          r.rank, idle_ms / 1000.0, options_.hang.factor, median_s,
          r.last_step ? std::to_string(*r.last_step) : "none",
          r.stopped ? "; its process is stopped (SIGSTOP)" : "");
    }
    any_hung |= r.hung;
  }
  if (any_hung && !job.hung) {
    job.hung = true;
    job.state = "hung";
    Emit({now_ms, "job_hung", "critical", job.id, std::nullopt,
          fmt::format("job {} looks hung: {}", job.id, why), ""});
  } else if (!any_hung && job.hung) {
    // Cleared other than by a step (a hung rank died, restarted or left its phase).
    job.hung = false;
    job.state = "running";
    Emit({now_ms, "job_resumed", "info", job.id, std::nullopt,
          fmt::format("job {} is no longer hung", job.id), ""});
  }
}

void JobRegistry::CloseWindow(int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, job] : running_) CloseJobWindow(job, now_ms, /*final=*/false);
}

void JobRegistry::CloseJobWindow(JobRec& job, int64_t now_ms, bool final) {
  {
    WindowStats js;
    js.end_ms = now_ms;
    bool first = true;
    for (auto& [rn, r] : job.ranks) {
      Window& w = r.window;
      WindowStats s;
      s.end_ms = now_ms;
      s.window_s = std::max(0.001, static_cast<double>(now_ms - w.start_ms) / 1000);
      s.steps = w.steps;
      s.iterations_per_s = static_cast<double>(w.steps) / s.window_s;
      s.samples_per_s = w.samples / s.window_s;
      if (!w.reservoir.empty()) {
        std::sort(w.reservoir.begin(), w.reservoir.end());
        s.step_p50_s = Quantile(w.reservoir, 0.50);
        s.step_p95_s = Quantile(w.reservoir, 0.95);
        s.step_p99_s = Quantile(w.reservoir, 0.99);
      }
      if (w.duration_s > 0) {
        if (w.any_data) s.data_wait_ratio = std::min(1.0, w.data_s / w.duration_s);
        if (w.any_comm) s.comm_ratio = std::min(1.0, w.comm_s / w.duration_s);
        if (w.any_checkpoint) s.checkpoint_ratio = std::min(1.0, w.checkpoint_s / w.duration_s);
      }
      s.loss = w.loss;
      s.grad_norm = w.grad_norm;
      if (r.state == Rank::State::kRunning || final) {
        // The job runs at its slowest rank; samples add up over ranks.
        js.window_s = s.window_s;
        js.steps = first ? s.steps : std::min(js.steps, s.steps);
        js.iterations_per_s =
            first ? s.iterations_per_s : std::min(js.iterations_per_s, s.iterations_per_s);
        js.samples_per_s += s.samples_per_s;
        auto worst = [](std::optional<double>& a, const std::optional<double>& b) {
          if (b && (!a || *b > *a)) a = b;
        };
        worst(js.step_p50_s, s.step_p50_s);
        worst(js.step_p95_s, s.step_p95_s);
        worst(js.step_p99_s, s.step_p99_s);
        worst(js.data_wait_ratio, s.data_wait_ratio);
        worst(js.comm_ratio, s.comm_ratio);
        worst(js.checkpoint_ratio, s.checkpoint_ratio);
        if (r.rank == 0 || !js.loss) {
          if (s.loss) js.loss = s.loss;
          if (s.grad_norm) js.grad_norm = s.grad_norm;
        }
        first = false;
      }
      r.stats = s;
      w = Window{};
      w.start_ms = now_ms;
    }
    job.stats = js;
  }
}

std::optional<RejectReason> JobRegistry::AcceptSchedulerMessage(const model::JobMessage& m,
                                                                const Sender& sender,
                                                                int64_t t_ms) {
  auto reject = [&](RejectReason r) -> std::optional<RejectReason> {
    counters_.rejected[static_cast<size_t>(r)]++;
    return r;
  };
  nlohmann::json fields = nlohmann::json::object();
  if (!m.template_name.empty()) fields["template"] = m.template_name;
  if (!m.user.empty()) fields["user"] = m.user;
  if (!m.project.empty()) fields["project"] = m.project;
  if (m.type == model::JobMessageType::kQueued) {
    Emit({t_ms, "job_queued", "info", m.job, std::nullopt, fmt::format("job {} queued", m.job),
          fields.dump()});
    counters_.accepted++;
    return std::nullopt;
  }
  // Only root speaks for the scheduler: a user's claim to own a job, or to have been given
  // GPUs, is worth nothing (the kernel names the sender over the Unix socket).
  if (!sender.verified() || !sender.uid || *sender.uid != 0)
    return reject(RejectReason::kNotPermitted);
  if (m.type == model::JobMessageType::kAllocation) {
    if (!allocations_.count(m.job) && allocations_.size() >= options_.max_jobs)
      return reject(RejectReason::kLimit);
    allocations_[m.job] = {m.user, m.project};
    if (auto it = running_.find(m.job); it != running_.end()) {
      it->second.user = m.user;
      if (!m.project.empty()) it->second.project = m.project;
    }
    fields["devices"] = m.devices;
    if (m.submit_t_s)
      fields["submit_ms"] = static_cast<int64_t>(std::llround(*m.submit_t_s * 1000));
    Emit({t_ms, "job_allocated", "info", m.job, std::nullopt,
          fmt::format("job {} of {} allocated {} GPU(s) by the scheduler", m.job, m.user,
                      m.devices.size()),
          fields.dump()});
  } else {
    allocations_.erase(m.job);
    if (m.exit_code) fields["exit_code"] = *m.exit_code;
    Emit({t_ms, "job_released", "info", m.job, std::nullopt,
          fmt::format("job {}: the scheduler released its GPUs", m.job), fields.dump()});
  }
  counters_.accepted++;
  return std::nullopt;
}

JobOutputs JobRegistry::TakeOutputs() {
  std::lock_guard<std::mutex> lock(mu_);
  JobOutputs out = std::move(pending_);
  pending_ = JobOutputs{};
  pending_count_ = 0;
  pending_bytes_ = 0;
  return out;
}

JobView JobRegistry::View(const JobRec& j) const {
  JobView v;
  if (j.started_by_protocol)
    v.starter = j.starter_uid ? "uid:" + std::to_string(*j.starter_uid) : "uid:none";
  v.id = j.id;
  v.source = j.sdk ? "sdk" : "process";
  v.template_name = j.template_name;
  v.user = j.user;
  v.project = j.project;
  v.claimed_project = j.claimed_project;
  v.state = j.state;
  v.start_ms = j.start_ms;
  v.end_ms = j.end_ms;
  v.last_step_ms = j.last_step_ms;
  v.world_size = j.world_size;
  v.container = j.container;
  v.gpu_seconds = j.gpu_seconds;
  v.window = j.stats;
  std::set<unsigned> gpus = j.gpus;
  std::set<uint32_t> pids = j.pids;
  for (const auto& [rn, r] : j.ranks) {
    RankView rv;
    rv.rank = r.rank;
    rv.pid = r.pid;
    rv.pid_verified = r.pid_verified;
    rv.local_rank = r.local_rank;
    switch (r.state) {
      case Rank::State::kRunning:
        rv.state = r.stopped ? "stopped" : "running";
        break;
      case Rank::State::kEnded:
        rv.state = "ended";
        break;
      case Rank::State::kDied:
        rv.state = "died";
        break;
    }
    rv.exit_code = r.exit_code;
    rv.hung = r.hung;
    rv.gpus.assign(r.gpus.begin(), r.gpus.end());
    gpus.insert(r.gpus.begin(), r.gpus.end());
    if (r.pid) pids.insert(*r.pid);
    rv.container = r.container;
    rv.user = r.user;
    if (v.container.empty()) v.container = r.container;
    if (v.user.empty()) v.user = r.user;
    rv.steps_total = r.steps_total;
    rv.last_step = r.last_step;
    rv.last_step_ms = r.last_step_ms;
    rv.median_step_s = r.recent.empty() ? r.final_median_s : std::optional(Median(r.recent));
    rv.phase = r.phase;
    rv.window = r.stats;
    rv.scalars = r.scalars;
    v.ranks.push_back(std::move(rv));
  }
  v.gpus.assign(gpus.begin(), gpus.end());
  v.pids.assign(pids.begin(), pids.end());
  // No template from the job itself: the operator's rules name its class (R13).
  if (v.template_name.empty() && !options_.template_rules.empty()) {
    v.template_name = MatchTemplate(
        options_.template_rules, v.user, v.project.empty() ? v.claimed_project : v.project,
        v.gpus.empty() ? std::nullopt : std::optional(static_cast<uint32_t>(v.gpus.size())),
        v.world_size);
  }
  return v;
}

std::vector<JobView> JobRegistry::Jobs() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<JobView> out;
  for (const auto& [id, j] : running_) out.push_back(View(j));
  std::sort(out.begin(), out.end(),
            [](const JobView& a, const JobView& b) { return a.start_ms > b.start_ms; });
  for (const auto& j : recent_) out.push_back(View(j));
  return out;
}

std::optional<JobView> JobRegistry::Job(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(id);
  if (it != running_.end()) return View(it->second);
  for (const auto& j : recent_)
    if (j.id == id) return View(j);
  return std::nullopt;
}

RegistryCounters JobRegistry::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace gpuwatch::jobs
