#include "server/fleet_jobs.h"

#include <algorithm>
#include <cmath>

#include "common/stats.h"

namespace gpuwatch::server {
namespace {

using nlohmann::json;

std::optional<double> Num(const json& r, const char* key) {
  auto it = r.find(key);
  if (it == r.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::string Str(const json& r, const char* key) {
  auto it = r.find(key);
  return it != r.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The q-quantile of sorted values (nearest rank).
double Quantile(const std::vector<double>& sorted, double q) {
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size()))) - 1;
  return sorted[std::min(i, sorted.size() - 1)];
}

// The step quantiles of `durations` (sorted here) and the shares of step time, into `w`.
void FillWindow(std::vector<double>* durations, double step_s, double data_s, double comm_s,
                double ckpt_s, bool has_data, bool has_comm, bool has_ckpt, jobs::WindowStats* w) {
  std::sort(durations->begin(), durations->end());
  w->step_p50_s = Quantile(*durations, 0.5);
  w->step_p95_s = Quantile(*durations, 0.95);
  w->step_p99_s = Quantile(*durations, 0.99);
  if (step_s > 0) {
    if (has_data) w->data_wait_ratio = data_s / step_s;
    if (has_comm) w->comm_ratio = comm_s / step_s;
    if (has_ckpt) w->checkpoint_ratio = ckpt_s / step_s;
  }
}

}  // namespace

void FleetJobs::Add(const std::string& node, const json& r, int64_t t_ms) {
  const std::string type = Str(r, "type");
  if (type != "job" && type != "step") return;
  const std::string id = Str(r, "job");
  if (id.empty() || id.size() > 256) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = jobs_.try_emplace(id);
  JobRec& j = it->second;
  j.last_seen_ms = std::max(j.last_seen_ms, t_ms);
  if (type == "job") {
    const std::string state = Str(r, "state");
    if (state == "start") {
      if (j.start_ms == 0 || t_ms < j.start_ms) j.start_ms = t_ms;
      j.started.insert(node);
      j.ended.erase(node);
      j.end_ms = 0;
      for (const char* k : {"template", "user", "project"}) {
        const std::string v = Str(r, k);
        if (v.empty()) continue;
        (k[0] == 't' ? j.template_name : k[0] == 'u' ? j.user : j.project) = v;
      }
      if (auto n = Num(r, "ranks"); n && *n > 0 && *n <= options_.max_ranks_per_job)
        j.world_size = static_cast<uint32_t>(*n);
      if (auto g = r.find("gpus"); g != r.end() && g->is_array()) {
        auto& gpus = j.gpus_by_node[node];
        for (const auto& x : *g)
          if (x.is_number_unsigned() && x.get<uint64_t>() < 1024) gpus.insert(x.get<unsigned>());
      }
    } else if (state == "end") {
      j.started.insert(node);  // an end whose start the hub never saw still ends the job there
      j.ended.insert(node);
      if (auto code = Num(r, "exit_code"); code && *code != 0) j.failed = true;
      if (!j.running()) j.end_ms = std::max(j.end_ms, t_ms);
    }
  } else {
    auto rank = Num(r, "rank");
    auto duration = Num(r, "duration_s");
    if (!rank || *rank < 0 || *rank >= options_.max_ranks_per_job || !duration) return;
    if (j.ranks.size() >= options_.max_ranks_per_job &&
        !j.ranks.count(static_cast<uint32_t>(*rank)))
      return;
    Rank& rk = j.ranks[static_cast<uint32_t>(*rank)];
    rk.node = node;
    if (auto g = Num(r, "gpu"); g && *g >= 0 && *g < 1024) rk.gpu = static_cast<unsigned>(*g);
    ++rk.steps_total;
    Step s{t_ms,
           static_cast<uint64_t>(std::max(0.0, Num(r, "step").value_or(0))),
           *duration,
           Num(r, "samples").value_or(0),
           Num(r, "data_wait_s"),
           Num(r, "comm_s"),
           Num(r, "checkpoint_s"),
           Num(r, "loss"),
           Num(r, "grad_norm")};
    rk.recent.push_back(s);
    while (rk.recent.size() > options_.max_steps_per_rank) rk.recent.pop_front();
    if (j.start_ms == 0) j.start_ms = t_ms;
    if (j.started.empty()) j.started.insert(node);  // steps before (or without) a start record
  }
  if (fresh) Evict();
}

void FleetJobs::Evict() {
  while (jobs_.size() > options_.max_jobs) {
    // Ended jobs first, oldest end first; then the running job silent longest.
    auto victim = jobs_.end();
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
      if (victim == jobs_.end()) {
        victim = it;
        continue;
      }
      const JobRec &a = it->second, &b = victim->second;
      const bool a_ended = !a.running(), b_ended = !b.running();
      if (a_ended != b_ended ? a_ended : a.last_seen_ms < b.last_seen_ms) victim = it;
    }
    jobs_.erase(victim);
  }
}

jobs::JobView FleetJobs::View(const std::string& id, const JobRec& j) const {
  jobs::JobView v;
  v.id = id;
  v.source = "hub";
  v.template_name = j.template_name;
  v.user = j.user;
  v.project = j.project;
  v.state = j.running() ? "running" : j.failed ? "failed" : "finished";
  v.start_ms = j.start_ms;
  v.end_ms = j.running() ? 0 : j.end_ms;
  v.world_size = j.world_size;
  for (const auto& [node, gpus] : j.gpus_by_node)
    v.nodes[node] = std::vector<unsigned>(gpus.begin(), gpus.end());
  int64_t newest_ms = 0;
  for (const auto& [n, rk] : j.ranks)
    if (!rk.recent.empty()) newest_ms = std::max(newest_ms, rk.recent.back().t_ms);
  v.last_step_ms = newest_ms;
  const int64_t from_ms = newest_ms - options_.window_ms;
  const double window_s = static_cast<double>(options_.window_ms) / 1000;
  std::vector<double> all_durations;
  double job_samples = 0;
  std::optional<double> slowest_ips;
  double sum_d = 0, sum_data = 0, sum_comm = 0, sum_ckpt = 0;
  bool has_data = false, has_comm = false, has_ckpt = false;
  for (const auto& [n, rk] : j.ranks) {
    jobs::RankView r;
    r.rank = n;
    r.node = rk.node;
    r.state = j.running() ? "running" : "ended";
    if (rk.gpu) {
      r.gpus = {*rk.gpu};
      if (!v.nodes.count(rk.node) || std::find(v.nodes[rk.node].begin(), v.nodes[rk.node].end(),
                                               *rk.gpu) == v.nodes[rk.node].end())
        v.nodes[rk.node].push_back(*rk.gpu);
    }
    r.steps_total = rk.steps_total;
    std::vector<double> durations, all;
    for (const Step& s : rk.recent) all.push_back(s.duration_s);
    if (!rk.recent.empty()) {
      r.last_step = rk.recent.back().step;
      r.last_step_ms = rk.recent.back().t_ms;
      r.median_step_s = Median(all);
    }
    jobs::WindowStats& w = r.window;
    w.end_ms = newest_ms;
    w.window_s = window_s;
    double samples = 0, d = 0, data = 0, comm = 0, ckpt = 0;
    for (const Step& s : rk.recent) {
      if (s.t_ms <= from_ms) continue;
      durations.push_back(s.duration_s);
      samples += s.samples;
      d += s.duration_s;
      if (s.data_wait_s) data += *s.data_wait_s, has_data = true;
      if (s.comm_s) comm += *s.comm_s, has_comm = true;
      if (s.checkpoint_s) ckpt += *s.checkpoint_s, has_ckpt = true;
      if (s.loss) w.loss = s.loss;
      if (s.grad_norm) w.grad_norm = s.grad_norm;
    }
    w.steps = durations.size();
    if (!durations.empty()) {
      FillWindow(&durations, d, data, comm, ckpt, has_data, has_comm, has_ckpt, &w);
      w.iterations_per_s = static_cast<double>(durations.size()) / window_s;
      w.samples_per_s = samples / window_s;
      all_durations.insert(all_durations.end(), durations.begin(), durations.end());
      job_samples += samples;
      slowest_ips = slowest_ips ? std::min(*slowest_ips, w.iterations_per_s) : w.iterations_per_s;
      sum_d += d, sum_data += data, sum_comm += comm, sum_ckpt += ckpt;
    }
    v.ranks.push_back(std::move(r));
  }
  for (auto& [node, gpus] : v.nodes) std::sort(gpus.begin(), gpus.end());
  jobs::WindowStats& w = v.window;
  w.end_ms = newest_ms;
  w.window_s = window_s;
  w.steps = all_durations.size();
  if (!all_durations.empty()) {
    // The slowest rank sets a synchronous job's pace; its samples are everyone's together.
    FillWindow(&all_durations, sum_d, sum_data, sum_comm, sum_ckpt, has_data, has_comm, has_ckpt,
               &w);
    w.iterations_per_s = slowest_ips.value_or(0);
    w.samples_per_s = job_samples / window_s;
  }
  return v;
}

std::vector<jobs::JobView> FleetJobs::Jobs() const {
  std::vector<jobs::JobView> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, j] : jobs_) out.push_back(View(id, j));
  }
  std::sort(out.begin(), out.end(), [](const jobs::JobView& a, const jobs::JobView& b) {
    const bool ar = a.state == "running", br = b.state == "running";
    if (ar != br) return ar;
    return a.start_ms > b.start_ms;
  });
  return out;
}

std::optional<jobs::JobView> FleetJobs::Job(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  return View(id, it->second);
}

}  // namespace gpuwatch::server
