// `gpuwatch demo` (issue 6): a simulated 8-GPU node running a training job, watched by the
// real agent, with a fault injected after a few minutes — the whole product on a laptop.
//
// The simulator (cluster_sim/) writes the node's trace; SimulatedGpuSource plays its card half
// through the agent's GPU seam, and one forked process per rank plays its task half through the
// job SDK, so attribution, liveness, the store, live diagnosis and the API all run as on a real
// node. Everything it shows is labelled SIMULATED: the node name, the GPU names, the driver
// version and every line it prints.
//
// StartDemo runs before any thread exists (it forks the ranks); the caller then serves the agent
// on demo->source and calls Tick each second.
#pragma once

#include <sys/types.h>

#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "cluster_sim/sim_gpu_source.h"
#include "common/status.h"
#include "server/agent.h"

namespace gpuwatch::cli {

struct DemoCommand {
  std::string fault = "thermal_throttle";  // cause[:gpu=G,severity=S,onset=SECONDS]
  std::string fault_after = "3m";          // unless the fault names its onset
  std::string shape = "8xH100";
  std::string duration = "30m";
  uint64_t seed = 1;
  std::string hostname = "SIMULATED-node";  // several demos pushing to one hub need their own
  std::string hub;                          // URL: push to a hub as `up --hub` does; "" is off
  std::string hub_token_file;               // its write token (a hub's own: <data-dir>/admin.token)
};

// The causes the demo can plant: those of one node that need no restart, no second node and no
// host the simulator cannot stand in for.
const std::vector<std::string>& DemoFaults();

class Demo {
 public:
  // Simulates, forks the rank processes and builds the GPU source. Errors name the bad option.
  static Result<std::unique_ptr<Demo>> Start(const DemoCommand& c);
  ~Demo();  // stops and reaps the rank processes, removes the work directory
  Demo(const Demo&) = delete;
  Demo& operator=(const Demo&) = delete;

  // The agent's GPU source (once) and what the agent must be told.
  std::unique_ptr<cluster_sim::SimulatedGpuSource> TakeSource() { return std::move(source_); }
  const std::string& job_socket() const { return job_socket_; }
  const std::string& data_dir() const { return data_dir_; }
  const std::string& hostname() const { return hostname_; }

  // Each second while the agent runs: reaps exited ranks, prints the banner (first call), the
  // fault's injection and every new finding. False when the simulation is over.
  bool Tick(const server::Agent& agent, int http_port, std::ostream& out);

 private:
  Demo() = default;

  std::unique_ptr<cluster_sim::SimulatedGpuSource> source_;
  std::string work_dir_, job_socket_, data_dir_, hostname_ = "SIMULATED-node";
  std::vector<pid_t> ranks_;
  std::string shape_, cause_, place_, job_;
  int64_t start_ms_ = 0, fault_ms_ = 0, end_ms_ = 0;
  bool bannered_ = false, injected_ = false;
  std::set<std::string> shown_;  // findings printed, by cause/place/first_seen
};

}  // namespace gpuwatch::cli
