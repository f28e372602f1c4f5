#include "server/fleet_jobs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

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
  std::lock_guard<std::mutex> lock(mu_);
  AddLocked(node, r, t_ms, /*count=*/true);
}

void FleetJobs::AddEntry(const std::string& node, uint64_t log_seq,
                         const std::vector<TimedRecord>& records) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [r, t_ms] : records) AddLocked(node, r, t_ms, /*count=*/true);
  // Entries come in the log's order (HubIngest holds its lock across the append and this).
  positions_[node] = log_seq;
  ++changes_;
}

void FleetJobs::Replay(const std::string& node, uint64_t log_seq,
                       const std::vector<TimedRecord>& records) {
  std::unique_lock<std::mutex> lock(mu_);
  auto pos = positions_.find(node);
  if (pos == positions_.end() || log_seq > pos->second) {
    lock.unlock();
    AddEntry(node, log_seq, records);
    return;
  }
  for (const auto& [r, t_ms] : records) AddLocked(node, r, t_ms, /*count=*/false);
}

uint64_t FleetJobs::Position(const std::string& node) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = positions_.find(node);
  return it == positions_.end() ? 0 : it->second;
}

void FleetJobs::ClampPosition(const std::string& node, uint64_t max_seq) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = positions_.find(node);
  if (it == positions_.end() || it->second <= max_seq) return;
  if (max_seq == 0)
    positions_.erase(it);
  else
    it->second = max_seq;
  ++changes_;
}

std::vector<std::string> FleetJobs::PositionedNodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [node, seq] : positions_) out.push_back(node);
  return out;
}

uint64_t FleetJobs::Changes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return changes_;
}

void FleetJobs::AddLocked(const std::string& node, const json& r, int64_t t_ms, bool count) {
  const std::string type = Str(r, "type");
  if (type != "job" && type != "step") return;
  const std::string id = Str(r, "job");
  if (id.empty() || id.size() > 256) return;
  // A replayed entry the snapshot counts: its job records are in the snapshot's state already
  // (replaying a start would reopen a node's end), and only steps refill the recent windows,
  // of jobs the snapshot kept (not those forgotten over max_jobs).
  if (!count && (type == "job" || !jobs_.count(id))) return;
  ++changes_;
  auto [it, fresh] = jobs_.try_emplace(id);
  JobRec& j = it->second;
  j.last_seen_ms = std::max(j.last_seen_ms, t_ms);
  if (type == "job") {
    const std::string state = Str(r, "state");
    if (state == "start") {
      // A start while no node runs it is a rerun under the same id: its outcome is its own.
      if (!j.running()) j.failed = false;
      if (j.start_ms == 0 || t_ms < j.start_ms) j.start_ms = t_ms;
      j.started.insert(node);
      j.ended.erase(node);
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
      // The latest end of any node, whatever order the nodes' ends arrive in (shown once no
      // node runs it).
      j.end_ms = std::max(j.end_ms, t_ms);
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
    if (count) ++rk.steps_total;
    const auto step_no = static_cast<uint64_t>(std::max(0.0, Num(r, "step").value_or(0)));
    if (t_ms >= rk.last_step_ms) {
      rk.last_step = step_no;
      rk.last_step_ms = t_ms;
    }
    Step s{t_ms,
           step_no,
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
  for (const auto& [n, rk] : j.ranks) newest_ms = std::max(newest_ms, rk.last_step_ms);
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
    r.last_step = rk.last_step;
    r.last_step_ms = rk.last_step_ms;
    if (!rk.recent.empty()) r.median_step_s = Median(all);
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

json FleetJobs::Snapshot(uint64_t* changes) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (changes) *changes = changes_;
  json jobs = json::array();
  for (const auto& [id, j] : jobs_) {
    json ranks = json::array();
    for (const auto& [n, rk] : j.ranks) {
      json r = {{"rank", n},
                {"node", rk.node},
                {"steps_total", rk.steps_total},
                {"last_step_ms", rk.last_step_ms}};
      if (rk.gpu) r["gpu"] = *rk.gpu;
      if (rk.last_step) r["last_step"] = *rk.last_step;
      ranks.push_back(std::move(r));
    }
    json gpus = json::object();
    for (const auto& [node, g] : j.gpus_by_node) gpus[node] = g;
    json o = {{"id", id},
              {"template", j.template_name},
              {"user", j.user},
              {"project", j.project},
              {"start_ms", j.start_ms},
              {"end_ms", j.end_ms},
              {"last_seen_ms", j.last_seen_ms},
              {"gpus_by_node", std::move(gpus)},
              {"started", j.started},
              {"ended", j.ended},
              {"failed", j.failed},
              {"ranks", std::move(ranks)}};
    if (j.world_size) o["world_size"] = *j.world_size;
    jobs.push_back(std::move(o));
  }
  return {{"version", 1}, {"positions", positions_}, {"jobs", std::move(jobs)}};
}

Status FleetJobs::Restore(const json& snap) {
  // Read whole into new maps first: a damaged snapshot changes nothing. Any type error is
  // named by where it is; nlohmann's own message says which type it found.
  std::map<std::string, JobRec> jobs;
  std::map<std::string, uint64_t> positions;
  std::string where = "the snapshot";
  // nlohmann converts -4 to 2^64-4 when asked for an unsigned number: counts are checked.
  auto count = [&where](const json& v, const char* what, uint64_t max = UINT64_MAX) -> uint64_t {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > max)
      throw std::invalid_argument(
          fmt::format("{}: {} is {}, not a count up to {}", where, what, v.dump(), max));
    return v.get<uint64_t>();
  };
  auto ms = [&where](const json& v, const char* what) -> int64_t {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX))
      throw std::invalid_argument(
          fmt::format("{}: {} is {}, not a time in milliseconds", where, what, v.dump()));
    return v.get<int64_t>();
  };
  try {
    if (!snap.is_object() || snap.value("version", 0) != 1)
      return Status::InvalidArgument("not a job list snapshot of version 1");
    where = "\"positions\"";
    if (!snap.at("positions").is_object())
      return Status::InvalidArgument("\"positions\" is not an object of node: sequence number");
    for (const auto& [node, seq] : snap.at("positions").items())
      positions[node] = count(seq, node.c_str());
    size_t i = 0;
    for (const json& o : snap.at("jobs")) {
      where = fmt::format("job {}", i++);
      const std::string id = o.at("id").get<std::string>();
      if (id.empty() || id.size() > 256) return Status::InvalidArgument(where + ": a bad id");
      where = "job " + id;
      JobRec& j = jobs[id];
      j.template_name = o.at("template").get<std::string>();
      j.user = o.at("user").get<std::string>();
      j.project = o.at("project").get<std::string>();
      j.start_ms = ms(o.at("start_ms"), "start_ms");
      j.end_ms = ms(o.at("end_ms"), "end_ms");
      j.last_seen_ms = ms(o.at("last_seen_ms"), "last_seen_ms");
      if (o.contains("world_size"))
        j.world_size =
            static_cast<uint32_t>(count(o["world_size"], "world_size", options_.max_ranks_per_job));
      for (const auto& [node, g] : o.at("gpus_by_node").items()) {
        if (!g.is_array()) throw std::invalid_argument(where + ": gpus_by_node holds no list");
        for (const json& x : g)
          j.gpus_by_node[node].insert(static_cast<unsigned>(count(x, "a GPU", 1023)));
      }
      j.started = o.at("started").get<std::set<std::string>>();
      j.ended = o.at("ended").get<std::set<std::string>>();
      j.failed = o.at("failed").get<bool>();
      for (const json& r : o.at("ranks")) {
        const uint64_t n = count(r.at("rank"), "a rank");
        if (n >= options_.max_ranks_per_job)
          return Status::InvalidArgument(fmt::format("{}: rank {} is out of range", where, n));
        Rank& rk = j.ranks[static_cast<uint32_t>(n)];
        rk.node = r.at("node").get<std::string>();
        if (r.contains("gpu")) rk.gpu = static_cast<unsigned>(count(r["gpu"], "a GPU", 1023));
        rk.steps_total = count(r.at("steps_total"), "steps_total");
        if (r.contains("last_step")) rk.last_step = count(r["last_step"], "last_step");
        rk.last_step_ms = ms(r.at("last_step_ms"), "last_step_ms");
      }
    }
  } catch (const json::exception& e) {
    return Status::InvalidArgument(fmt::format("{}: {}", where, e.what()));
  } catch (const std::invalid_argument& e) {
    return Status::InvalidArgument(e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  jobs_ = std::move(jobs);
  positions_ = std::move(positions);
  ++changes_;
  Evict();
  return Status::Ok();
}

}  // namespace gpuwatch::server
