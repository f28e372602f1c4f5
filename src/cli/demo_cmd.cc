#include "cli/demo_cmd.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "cli/config_file.h"
#include "cluster_sim/rank_player.h"
#include "cluster_sim/simulator.h"
#include "common/time_base.h"

namespace gpuwatch::cli {
namespace {

// The agent starts serving within this long; the simulated trace begins then.
constexpr int64_t kLeadMs = 2000;

}  // namespace

const std::vector<std::string>& DemoFaults() {
  // The simulator's planters say which causes the demo can play (cluster_sim::Planter::in_demo).
  static const std::vector<std::string> kFaults = [] {
    std::vector<std::string> out = {"healthy"};
    for (const cluster_sim::Planter& p : cluster_sim::Planters()) {
      if (p.in_demo) out.emplace_back(model::CauseName(p.cause));
    }
    return out;
  }();
  return kFaults;
}

Result<std::unique_ptr<Demo>> Demo::Start(const DemoCommand& c) {
  auto spec = cluster_sim::ParseFaultSpec(c.fault);
  if (!spec.ok()) return spec.status();
  const auto& allowed = DemoFaults();
  if (std::find(allowed.begin(), allowed.end(), spec->cause) == allowed.end()) {
    std::string list;
    for (const auto& f : allowed) list += (list.empty() ? "" : ", ") + f;
    return Status::InvalidArgument("the demo cannot plant '" + spec->cause +
                                   "' (it needs a second node, a restart or a real host); "
                                   "one of: " +
                                   list);
  }
  if (c.fault.find("onset=") == std::string::npos) {
    auto after = ParseDurationMs(c.fault_after);
    if (!after.ok()) return Status::InvalidArgument("--fault-after: " + after.status().message());
    spec->onset_s = static_cast<double>(*after) / 1000;
  }
  auto duration = ParseDurationMs(c.duration);
  if (!duration.ok()) return Status::InvalidArgument("--duration: " + duration.status().message());

  std::unique_ptr<Demo> d(new Demo());
  d->start_ms_ = (WallClockMs() + kLeadMs) / 1000 * 1000;
  cluster_sim::SimOptions o;
  o.shape = c.shape;
  o.seed = c.seed;
  o.duration_s = static_cast<double>(*duration) / 1000;
  o.start_unix_s = static_cast<double>(d->start_ms_) / 1000;
  if (spec->cause != "healthy") o.faults.push_back(*spec);
  auto sim = cluster_sim::Simulate(o);
  if (!sim.ok()) return sim.status();
  auto scripts = cluster_sim::RankScripts(sim->trace_lines, "");
  if (!scripts.ok()) return scripts.status();

  char dir[] = "/tmp/gpuwatch-demo-XXXXXX";
  if (mkdtemp(dir) == nullptr)
    return Status::IoError(std::string("cannot make a work directory in /tmp: ") +
                           std::strerror(errno));
  d->work_dir_ = dir;
  d->job_socket_ = d->work_dir_ + "/job.sock";
  d->data_dir_ = d->work_dir_ + "/data";
  d->shape_ = c.shape;
  if (c.hostname.empty()) return Status::InvalidArgument("--hostname: empty");
  d->hostname_ = c.hostname;
  d->cause_ = spec->cause;
  d->place_ = spec->cause == "healthy" ? "" : fmt::format("GPU {}", spec->gpu);
  d->fault_ms_ = d->start_ms_ + static_cast<int64_t>(std::llround(spec->onset_s * 1000));
  d->end_ms_ = d->start_ms_ + *duration;

  // One process per rank, forked before the agent has any thread. Each dies with the demo.
  std::map<uint32_t, uint32_t> pids;
  std::string node;
  for (const cluster_sim::RankScript& s : *scripts) {
    if (d->job_.empty()) d->job_ = s.job;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return Status::IoError(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) std::_Exit(0);
      prctl(PR_SET_NAME, fmt::format("sim-rank-{}", s.rank).c_str());
      cluster_sim::PlayRank(s, 0, d->job_socket_);
      std::_Exit(0);
    }
    d->ranks_.push_back(pid);
    if (s.sim_pid != 0) pids[s.sim_pid] = static_cast<uint32_t>(pid);
  }
  auto source = cluster_sim::SimulatedGpuSource::Create(sim->trace_lines, "", 0, std::move(pids));
  if (!source.ok()) return source.status();
  d->source_ = std::move(source).value();
  return d;
}

Demo::~Demo() {
  for (pid_t pid : ranks_) {
    if (pid > 0) kill(pid, SIGTERM);
  }
  for (pid_t pid : ranks_) {
    if (pid > 0) waitpid(pid, nullptr, 0);
  }
  if (!work_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(work_dir_, ec);
  }
}

bool Demo::Tick(const server::Agent& agent, int http_port, std::ostream& out) {
  // Reap the ranks that ended: a zombie still has a /proc entry, and the agent must see a dead
  // rank gone.
  for (pid_t& pid : ranks_) {
    if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == pid) pid = -1;
  }
  const int64_t now = WallClockMs();
  auto at = [&](int64_t ms) { return fmt::format("t+{}s", (ms - start_ms_) / 1000); };
  if (!bannered_) {
    bannered_ = true;
    out << fmt::format(
        "SIMULATED — gpuwatch demo: a simulated {} node ({}) running training job {}.\n"
        "  Nothing here is a real GPU: node, GPU names and driver say SIMULATED.\n"
        "  API:        http://127.0.0.1:{}/api/v1/findings   (also /metrics, /api/v1/jobs)\n"
        "  Findings:   gpuwatch diagnose --agent http://127.0.0.1:{}\n"
        "  Fault:      {}{} at {} ({}); the simulation ends at {}. Ctrl-C stops it.\n",
        shape_, hostname_, job_, http_port, http_port, cause_,
        place_.empty() ? "" : " on " + place_, at(fault_ms_), FormatUtc(fault_ms_, "%H:%M:%S UTC"),
        at(end_ms_));
    out.flush();
  }
  if (!injected_ && cause_ != "healthy" && now >= fault_ms_) {
    injected_ = true;
    out << fmt::format("SIMULATED {}: fault {} injected{}\n", at(now), cause_,
                       place_.empty() ? "" : " on " + place_);
    out.flush();
  }
  const nlohmann::json doc = agent.Findings();
  for (const nlohmann::json& f : doc.value("findings", nlohmann::json::array())) {
    const std::string key = f.value("cause", "") + "/" + f.value("node", "") + "/" +
                            (f.contains("gpu") ? f["gpu"].dump() : "") + "/" + f.value("job", "");
    if (!shown_.insert(key).second) continue;
    out << fmt::format("SIMULATED {}: finding [{}] {}: {}\n", at(now), f.value("severity", ""),
                       f.value("cause", ""), f.value("summary", ""));
    out.flush();
  }
  if (now >= end_ms_) {
    out << fmt::format("SIMULATED {}: the simulation is over ({} finding(s)).\n", at(now),
                       shown_.size());
    return false;
  }
  return true;
}

}  // namespace gpuwatch::cli
