// AgentState: the latest of everything the agent collected on this node — what /metrics,
// the JSON API and `gpuwatch status` render. Written by the agent's collector threads under
// Agent's mutex; readers get it through Agent::WithState. Plain data.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jobs/job_registry.h"
#include "model/gpu.h"
#include "model/host.h"
#include "model/process.h"
#include "server/link_rates.h"
#include "topo/snapshot.h"

namespace gpuwatch::server {

struct AgentState {
  std::string hostname;
  std::string version;
  bool simulated = false;  // gpuwatch demo: nothing here is a real GPU
  bool hub = false;  // `gpuwatch hub`: the API answers for the fleet (its dashboard lists nodes)
  std::string model_label = "model_name";  // label name for the GPU model (model_name | modelName)
  // False when no NVML/GPU: the agent still serves host metrics (reason says why).
  bool gpu_available = false;
  std::string gpu_unavailable_reason;
  model::SystemInfo system;
  std::vector<model::GpuStaticInfo> devices;
  std::vector<model::GpuCapabilities> caps;
  std::vector<model::GpuSample> gpu_samples;  // latest per GPU; time_ms 0 until sampled
  std::optional<model::HostSample> host;
  std::vector<model::ProcessAttribution> processes;
  // XIDs are counted per (GPU index, XID code): never a last-value gauge that hides repeats.
  std::map<std::pair<unsigned, uint64_t>, uint64_t> xid_counts;
  std::map<unsigned, uint64_t> last_xid;
  std::deque<model::GpuEvent> recent_events;  // newest last, bounded
  // Jobs as of the last job-tier window (R5): what /metrics shows of them.
  std::vector<jobs::JobView> jobs;
  jobs::RegistryCounters job_counters;
  // Limits hit that have no metric of their own, by the limit's name in docs/limits.md
  // (gpuwatch_limit_hits_total{limit}): log files refused, snapshots evicted, job TCP
  // connections refused or closed idle, event segments dropped by retention.
  std::map<std::string, uint64_t> limit_hits;
  // The topology (R8) as of the last check; null before the first. topology_version is the
  // archive version it equals (0 without a data dir). Baselines learned before
  // baselines_stale_before_ms describe another topology and are stale (R13).
  std::shared_ptr<const topo::NodeSnapshot> topology;
  int topology_version = 0;
  int64_t baselines_stale_before_ms = 0;
  std::vector<topo::TopologyChange> topology_changes;  // of the last change seen by this agent
  // Link rates and utilisation (R10, R12) between the last two host ticks (NICs, IB ports) and
  // the last two hardware ticks (NVLink per link and per far end, PCIe).
  std::vector<LinkRate> host_link_rates, gpu_link_rates;
  std::map<std::string, double> tick_seconds;  // tier -> duration of its last tick
  std::map<std::string, uint64_t> tick_counts;
  std::map<std::string, double> tier_cpu_seconds;  // tier -> CPU its ticks used since start
  // Alerts as of the last diagnosis tick: firing ones by (severity, notified or suppressed), and
  // what the notifier did with them (receiver -> result -> count).
  std::map<std::pair<std::string, std::string>, int64_t> alerts_firing;
  std::map<std::pair<std::string, std::string>, uint64_t> alert_notifications;
};

}  // namespace gpuwatch::server
