// NodeCollector: this node's hardware, read into samples and trace records — the GPU source,
// the host collector, process attribution, and the link rates between two ticks. It is what
// the agent's collection tiers read (a hub has none), apart from what the agent does with a
// tick: keeping the latest state for the API, storing series, routing records to the flight
// recorder and the hub, and judging events (NodeEventGate). It keeps only what a tick needs of
// the one before: the previous samples (rates in the trace records), each GPU's lost state (a
// loss is one event at the transition), and when the last node record went out.
//
// Thread-safety: SampleGpus, SampleHost, Attribute and RequestNodeRecord from one thread (the
// tier thread); WaitEvents from one other (the event thread), which the GpuSource contract
// allows. Init before either.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collect/attribution.h"
#include "collect/gpu_source.h"
#include "collect/host_collector.h"
#include "common/status.h"
#include "model/gpu.h"
#include "model/host.h"
#include "server/link_rates.h"
#include "topo/snapshot.h"

namespace gpuwatch::server {

// One trace record (trace-format.md) with the time the flight recorder files it under.
struct TimedRecord {
  int64_t t_ms = 0;
  std::string line;
};

struct NodeCollectorOptions {
  std::string hostname;        // the trace records' node
  std::string root_dir = "/";  // procfs/sysfs root (tests use fixture trees)
  std::string job_env_var = "SLURM_JOB_ID";
  // A node record (the limits a sample knows, the wiring) goes out first and at this interval.
  int64_t node_record_interval_ms = 10 * 60 * 1000;
};

// What one hardware tick read.
struct GpuTick {
  std::vector<model::GpuSample> samples;  // by device position; time_ms 0: not sampled
  std::vector<model::GpuCapabilities> caps;
  // A GPU that stopped (or started again) answering: one event at the transition.
  std::vector<model::GpuEvent> events;
  std::vector<TimedRecord> records;  // a node record when due, then gpu and mig records
  std::vector<LinkRate> link_rates;  // NVLink per link and per far end, PCIe
  double read_seconds = 0;           // reading the source
};

// What one host tick read.
struct HostTick {
  Status status;  // not ok: nothing else is set
  model::HostSample sample;
  TimedRecord record;
  std::vector<LinkRate> link_rates;    // NICs, IB ports
  std::vector<VanishedLink> vanished;  // a NIC or port gone since the last tick
  double read_seconds = 0;
};

class NodeCollector {
 public:
  // `gpu` may be null (no GPU backend at all).
  NodeCollector(NodeCollectorOptions options, std::unique_ptr<collect::GpuSource> gpu);

  // Initializes the GPU source. Not ok (the reason) leaves gpu_ready() false: the node is then
  // collected without GPUs (host and jobs), never refused.
  Status Init();
  bool gpu_ready() const { return gpu_ready_; }
  bool has_gpu_source() const { return gpu_ != nullptr; }  // false: Init's reason is that
  // The GPU source once ready; null before, or without one.
  collect::GpuSource* gpu() const { return gpu_ready_ ? gpu_.get() : nullptr; }
  // The devices; empty unless gpu_ready().
  const std::vector<model::GpuStaticInfo>& devices() const;
  // The device NVML knows by this PCI bus id (any case, as the kernel log writes it), or by
  // this /dev/nvidiaN minor number (how Slurm numbers GPUs); null when none.
  const model::GpuStaticInfo* DeviceByBusId(std::string_view pci_bus_id) const;
  const model::GpuStaticInfo* DeviceByMinor(unsigned minor) const;

  // Reads every GPU at now_ms. `topology` (null before the first check) gives the node record
  // its wiring and the link rates their far ends. REQUIRES: gpu_ready().
  GpuTick SampleGpus(int64_t now_ms, const topo::NodeSnapshot* topology);
  // The next SampleGpus writes a node record (the topology changed, say).
  void RequestNodeRecord() { node_record_ms_ = 0; }
  // Reads the host (CPU, memory, NICs, time sync) at now_ms.
  HostTick SampleHost(int64_t now_ms);
  // The processes on the GPUs, each with its container, user and scheduler job.
  // REQUIRES: gpu_ready().
  std::vector<model::ProcessAttribution> Attribute();
  // Blocks up to timeout_ms for XID/ECC events. Nothing without a ready GPU source.
  std::vector<model::GpuEvent> WaitEvents(int timeout_ms, int64_t now_ms);

 private:
  NodeCollectorOptions options_;
  std::unique_ptr<collect::GpuSource> gpu_;
  bool gpu_ready_ = false;
  collect::HostCollector host_;
  collect::Attributor attributor_;
  LinkRateTracker link_rates_;
  std::vector<bool> gpu_lost_;  // per GPU, as of the last hardware tick
  std::vector<model::GpuSample> prev_gpu_samples_;
  std::optional<model::HostSample> prev_host_;
  int64_t node_record_ms_ = 0;  // the last node record; 0: the next tick writes one
};

}  // namespace gpuwatch::server
