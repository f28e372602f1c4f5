// Typed trace records: what TraceReader (trace_reader.h) delivers for each line of a trace
// (../shared/spec/trace-format.md, version 1). One struct per record type, one member per field
// of the spec, named as the spec's JSON key (units included: util_pct, mem_used_mib, power_w).
//
// Conventions:
// - Every field other than "t" and "type" is std::optional: absent and null both mean "not
//   measured" (the spec), so both read as nullopt. Nothing is defaulted to 0.
// - Metric values (gauges, rates and counters alike) are doubles, as JSON numbers are: a
//   counter reset is just a lower value (the consumer handles it). Indices, ranks, pids, step
//   numbers and codes are integers; the reader rejects a fraction or a negative value where
//   the spec's meaning forbids it.
// - Enumerated strings (job "state", event "kind", log "source", the "throttle" reasons) are
//   kept as written: a value the spec does not list is delivered (and counted by the reader),
//   so a newer writer's value never stops a replay.
// - Fields the spec does not list are not stored (the reader counts them), with one exception:
//   event "job", which the reference scenarios write on checkpoint events.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace gpuwatch::trace {

// The record types of the spec. The order is the order of TraceRecord::body's alternatives
// (kUnknown = std::monostate); in-memory only, never persisted.
enum class RecordType : uint8_t { kUnknown, kNode, kGpu, kHost, kProc, kJob, kStep, kEvent, kLog };
inline constexpr size_t kRecordTypeCount = 9;

// "node", "gpu", …; "unknown" for kUnknown.
std::string_view RecordTypeName(RecordType type);
// kUnknown for a name the spec does not define.
RecordType RecordTypeFromName(std::string_view name);

// ---- node ----

// One entry of a node record's "gpus".
struct TraceNodeGpu {
  std::optional<uint32_t> index;  // physical NVML index
  std::optional<std::string> uuid, name, pci_bus_id;
  std::optional<int64_t> numa_node;
  std::optional<std::string> cpu_affinity;  // "0-55,112-167"
  std::optional<double> memory_total_mib, power_limit_w;
  std::optional<double> max_sm_clock_mhz, max_mem_clock_mhz;
  std::optional<double> pcie_max_gen, pcie_max_width;
  std::optional<uint32_t> nvlink_count;
  std::optional<bool> mig_mode;

  bool operator==(const TraceNodeGpu&) const = default;
};

// One entry of a node record's "nics".
struct TraceNodeNic {
  std::optional<std::string> name;  // mlx5_0
  std::optional<std::string> type;  // "ib" | "eth"
  std::optional<std::string> pci_bus_id;
  std::optional<int64_t> numa_node;
  std::optional<double> link_gbps;

  bool operator==(const TraceNodeNic&) const = default;
};

struct TraceTopology {
  // gpu_links[i][j] in `nvidia-smi topo -m` notation: X, NV<n>, PIX, PXB, PHB, NODE, SYS.
  std::optional<std::vector<std::vector<std::string>>> gpu_links;

  bool operator==(const TraceTopology&) const = default;
};

struct TraceNode {
  std::optional<std::string> driver_version, cuda_version, nccl_version;
  std::optional<double> clock_offset_ms;
  std::optional<std::vector<TraceNodeGpu>> gpus;
  std::optional<TraceTopology> topology;
  std::optional<std::vector<TraceNodeNic>> nics;

  bool operator==(const TraceNode&) const = default;
};

// ---- gpu ----

// One sample of one GPU, or of one MIG instance (then `mig` is set and `gpu` is the parent).
struct TraceGpu {
  std::optional<uint32_t> gpu;     // physical index
  std::optional<std::string> mig;  // "<gpu-instance-id>/<compute-instance-id>"
  std::optional<double> util_pct, mem_util_pct;
  std::optional<double> sm_active, sm_occupancy, tensor_active, dram_active;  // ratios 0..1
  std::optional<double> mem_used_mib, temp_c, mem_temp_c, power_w;
  std::optional<double> energy_j;  // counter
  std::optional<double> sm_clock_mhz, mem_clock_mhz;
  // Active clock-event reasons: sw_power_cap, hw_slowdown, hw_thermal, sw_thermal,
  // hw_power_brake, sync_boost, idle, app_clocks. [] = none active; nullopt = not measured.
  std::optional<std::vector<std::string>> throttle;
  std::optional<double> fan_pct;
  std::optional<double> pcie_tx_mbs, pcie_rx_mbs, pcie_gen, pcie_width;
  std::optional<double> pcie_replay;  // counter
  std::optional<double> nvlink_tx_mbs, nvlink_rx_mbs, nvlink_active_links;
  std::optional<double> nvlink_crc_errors, nvlink_replay, nvlink_recovery;  // counters
  std::optional<double> ecc_sbe_volatile, ecc_dbe_volatile, retired_pages;  // counters
  std::optional<bool> remapped_rows_pending, remapped_rows_failure;

  bool operator==(const TraceGpu&) const = default;
};

// ---- host ----

// One value of a host record's "nics" map.
struct TraceHostNic {
  std::optional<double> tx_mbs, rx_mbs;
  std::optional<bool> link_up;
  std::optional<double> errors, retransmits;  // counters

  bool operator==(const TraceHostNic&) const = default;
};

struct TraceHost {
  std::optional<double> cpu_pct, iowait_pct, mem_used_mib, mem_total_mib, load1;
  std::optional<std::map<std::string, TraceHostNic>> nics;  // keyed by NIC name

  bool operator==(const TraceHost&) const = default;
};

// ---- proc ----

struct TraceProc {
  std::optional<uint32_t> pid;  // host pid
  std::optional<uint32_t> gpu;  // physical index
  std::optional<double> mem_used_mib;
  std::optional<std::string> user, container, job;
  std::optional<std::vector<uint32_t>> cpu_numa_nodes;
  std::optional<uint32_t> visible_index;  // the index the process sees

  bool operator==(const TraceProc&) const = default;
};

// ---- job ----

struct TraceJob {
  std::optional<std::string> job;
  std::optional<std::string> state;  // queued | start | end
  // start/queued:
  std::optional<std::string> template_name;  // the spec's "template" (a C++ keyword)
  std::optional<std::string> user, project;
  std::optional<uint32_t> ranks;
  std::optional<std::vector<uint32_t>> gpus;  // physical indices on this node
  // start, not in the spec (readers ignore unknown fields): when the scheduler says the job
  // was submitted, Unix seconds. A queue of days cannot be a `queued` record in time order.
  std::optional<double> submit_t;
  // end:
  std::optional<int64_t> exit_code;

  bool operator==(const TraceJob&) const = default;
};

// ---- step ----

struct TraceStep {  // t is the step's end
  std::optional<std::string> job;
  std::optional<uint32_t> rank;
  std::optional<uint32_t> gpu;
  std::optional<uint64_t> step;
  std::optional<double> duration_s, samples;
  std::optional<double> data_wait_s, comm_s, checkpoint_s;  // parts of duration_s
  std::optional<double> loss, grad_norm;

  bool operator==(const TraceStep&) const = default;
};

// ---- event ----

struct TraceEvent {
  std::optional<uint32_t> gpu;  // present when the event concerns one GPU
  // xid, ecc, gpu_lost, driver_change, config_change, topology_change, maintenance_start,
  // maintenance_end, checkpoint_start, checkpoint_end, annotation
  std::optional<std::string> kind;
  std::optional<int64_t> code;  // e.g. the XID number
  std::optional<std::string> message;
  std::optional<std::string> job;  // not in the spec; the reference scenarios write it

  bool operator==(const TraceEvent&) const = default;
};

// ---- log ----

struct TraceLog {
  std::optional<std::string> job;
  std::optional<uint32_t> rank;
  std::optional<std::string> source;  // nccl | job | kernel | nccl-tests
  std::optional<std::string> line;    // the raw line, without its terminator

  bool operator==(const TraceLog&) const = default;
};

// ---- one record ----

struct TraceRecord {
  double t = 0;       // Unix seconds, as written
  int64_t t_ms = 0;   // llround(t * 1000): the writer's ms read back exactly
  std::string node;   // "" when absent
  uint64_t line = 0;  // 1-based line number in the trace, for messages
  // For kUnknown: the type name as written (the record's other fields are not read).
  std::string unknown_type;
  std::variant<std::monostate, TraceNode, TraceGpu, TraceHost, TraceProc, TraceJob, TraceStep,
               TraceEvent, TraceLog>
      body;

  RecordType type() const { return static_cast<RecordType>(body.index()); }
  // The body as T, or nullptr when the record is another type.
  template <typename T>
  const T* as() const {
    return std::get_if<T>(&body);
  }

  // Field by field (t exactly): for tests that compare record streams.
  bool operator==(const TraceRecord&) const = default;
};

}  // namespace gpuwatch::trace
