// SimulatedGpuSource: one node of a simulated trace (simulator.h) played live through the
// collectors' GpuSource seam, so the real agent — tiers, store, flight recorder, live
// diagnosis, API — runs on the simulator's physics (`gpuwatch demo`, issue 6).
//
// Trace time t plays at wall time t + offset: Sample(i, now) answers the GPU's newest record at
// or before now − offset, converted back to the units the NVML source reports (energy in mJ,
// PCIe in bytes/s, NVLink as byte counters integrated from the trace's MB/s, throttle reasons as
// NVML's clock-event mask). A GPU whose records stop while the node's go on is lost from its
// last record on (the simulator writes nothing more for a GPU that fell off the bus, as the
// driver answers nothing), and stays lost. XID events come out of WaitEvents when their time is
// due. Processes (at the wall clock's time, Processes taking none) come from the trace's proc
// rounds, with the simulator's pids mapped to real ones (the rank
// processes that play the job, rank_player.h) so the agent's /proc attribution finds them; a
// proc record whose pid has no mapping is left out.
//
// Every name the source reports says SIMULATED: the GPU names end in " [SIMULATED]" and the
// driver version is "SIMULATED".
//
// Thread-safety: everything is immutable after Create except WaitEvents' cursor, which only
// WaitEvents touches; so Sample/Processes on one thread and WaitEvents on another, as the
// GpuSource contract asks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collect/gpu_source.h"
#include "common/status.h"
#include "model/gpu.h"

namespace gpuwatch::cluster_sim {

class SimulatedGpuSource : public collect::GpuSource {
 public:
  // `lines`: a trace from Simulate(); `node`: which node to play ("" = the first node record).
  // `offset_ms`: wall time minus trace time. `pids`: simulator pid → real pid. Errors: an
  // unreadable line (names it), no such node, a node without GPUs.
  static Result<std::unique_ptr<SimulatedGpuSource>> Create(const std::vector<std::string>& lines,
                                                            const std::string& node,
                                                            int64_t offset_ms,
                                                            std::map<uint32_t, uint32_t> pids);

  std::string_view Name() const override { return "simulator"; }
  Status Init() override { return Status::Ok(); }
  const model::SystemInfo& System() const override { return system_; }
  const std::vector<model::GpuStaticInfo>& Devices() const override { return devices_; }
  model::GpuCapabilities Capabilities(size_t index) const override;
  Status Sample(size_t index, int64_t time_ms, model::GpuSample* out) override;
  Status Processes(size_t index, std::vector<model::GpuProcess>* out) override;
  Status WaitEvents(int timeout_ms, int64_t now_ms, std::vector<model::GpuEvent>* out) override;

  // The node's name in the trace, and the wall time its last record plays at.
  const std::string& node() const { return node_; }
  int64_t end_wall_ms() const { return end_ms_ + offset_ms_; }

  struct Frame {  // one gpu record, in model units
    int64_t t_ms = 0;
    model::GpuSample sample;
  };
  struct ProcRound {  // the proc records of one instant
    int64_t t_ms = 0;
    std::vector<std::pair<unsigned, model::GpuProcess>> procs;  // (gpu, process)
  };

 private:
  SimulatedGpuSource() = default;

  std::string node_;
  int64_t offset_ms_ = 0;
  int64_t end_ms_ = 0;  // the node's last record, trace time
  model::SystemInfo system_;
  std::vector<model::GpuStaticInfo> devices_;
  std::vector<model::GpuCapabilities> caps_;
  std::vector<std::vector<Frame>> frames_;  // per GPU, by time
  std::vector<ProcRound> procs_;            // by time
  std::vector<model::GpuEvent> events_;     // by time, wall ms
  size_t next_event_ = 0;
};

}  // namespace gpuwatch::cluster_sim
