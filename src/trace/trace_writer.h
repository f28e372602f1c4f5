// Trace-record rendering (docs: /work/shared/spec/trace-format.md, version 1): pure functions
// that turn the model's values into one trace record each, as one JSON line.
//
// Contract of every function here:
// - The result is one JSON object on one line, WITHOUT a trailing newline (the file writer and
//   the flight recorder add the separator). Embedded newlines in strings are escaped, so a
//   record never spans two lines.
// - Keys come in the spec's order: "t" first, "type" second, "node" third. The flight recorder
//   relies on that prefix to recognise node records.
// - "t" is Unix seconds written from integer ms as "<s>.<mmm>" with trailing zeros trimmed
//   (1764460801900 -> 1764460801.9): never binary-fraction noise.
// - Absent means not measured: a field the model does not hold, or holds as invalid/empty, is
//   left out (never written as 0 or null). A NaN or infinite double is left out as well.
// - Units are the spec's: MiB, W, MHz, MB/s (10^6 bytes per second), J, ratios 0..1.
//   Counters are written cumulative, as read.
// - Strings are written as valid UTF-8: each invalid byte becomes U+FFFD. Nothing throws.
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/gpu.h"
#include "model/host.h"
#include "model/job.h"
#include "model/process.h"

namespace gpuwatch::trace {

// The "t" value of a record: "1764460801.9" for 1764460801900.
std::string FormatTraceTime(int64_t t_ms);

// ---- node ----

// What a node record says about one GPU beyond model::GpuStaticInfo (matched on index).
struct NodeGpuExtra {
  unsigned index = 0;
  std::optional<int> numa_node;
  std::string cpu_affinity;  // "0-55,112-167"; "" = unknown
  std::optional<double> memory_total_mib, power_limit_w;
  std::optional<double> max_sm_clock_mhz, max_mem_clock_mhz;
  std::optional<double> pcie_max_gen, pcie_max_width;
};
// The limits a sample carries (kMemTotalMib, kPowerLimitW, kMaxSmClockMhz, kMaxMemClockMhz,
// kPcieMaxGen, kPcieMaxWidth) as a NodeGpuExtra; numa_node and cpu_affinity stay unknown.
NodeGpuExtra NodeGpuExtraFromSample(unsigned index, const model::GpuSample& sample);

struct NodeNic {
  std::string name;        // mlx5_0, enp86s0f0np0
  std::string type;        // "ib" | "eth"; "" = unknown
  std::string pci_bus_id;  // "" = unknown
  std::optional<int> numa_node;
  std::optional<double> link_gbps;
};

struct NodeExtras {
  std::optional<std::string> nccl_version;
  std::optional<double> clock_offset_ms;  // measured offset from NTP/PTP, when known
  std::vector<NodeGpuExtra> gpus;         // any order; a GPU without an entry gets none
  // topology.gpu_links[i][j] in `nvidia-smi topo -m` notation (X, NV18, PIX, …); written
  // only when given.
  std::optional<std::vector<std::vector<std::string>>> gpu_links;
  std::vector<NodeNic> nics;  // written when non-empty
};

// {"t":..,"type":"node","node":..,"driver_version":..,"cuda_version":..,"nccl_version":..,
//  "clock_offset_ms":..,"gpus":[..],"topology":{"gpu_links":..},"nics":[..]}
// An empty SystemInfo string is unknown and left out. nvlink_count and mig_mode come from
// GpuStaticInfo, whose plain fields are always known (0 links and false are facts there).
std::string NodeRecord(int64_t t_ms, std::string_view node, const model::SystemInfo& system,
                       const std::vector<model::GpuStaticInfo>& gpus,
                       const NodeExtras& extras = {});

// ---- gpu ----

// One "gpu" record from the valid fields of `sample`, at sample.time_ms. The model's units
// are converted: energy mJ -> J, PCIe B/s -> MB/s. NVLink traffic is a byte counter in the
// model and a rate in the trace: nvlink_tx_mbs/nvlink_rx_mbs need `prev`, the same GPU's
// previous sample, and are left out without it, across a counter reset, or when time did not
// advance. nvlink_crc_errors is the sum of the flit and data CRC counters and retired_pages
// the sum of the SBE and DBE retirements (each: of those that are valid). throttle lists the
// active reasons that the spec names (NVML's display_clocks has no trace name and is dropped).
std::string GpuRecord(std::string_view node, unsigned gpu, const model::GpuSample& sample,
                      const model::GpuSample* prev = nullptr);

// One "gpu" record per MIG instance of `sample` ({"gpu":parent,"mig":"<gi>/<ci>",
// "mem_used_mib","sm_active"}), at sample.time_ms.
std::vector<std::string> MigRecords(std::string_view node, unsigned gpu,
                                    const model::GpuSample& sample);

// ---- host ----

// One "host" record at sample.time_ms. mem_* in MiB. nics{} holds every NicSample (keyed by
// interface name) and every IbPortSample (keyed by device, "<device>/<port>" for a port other
// than 1): tx_mbs/rx_mbs are rates against `prev` (left out without it or across a reset),
// errors the counters' sum (Ethernet rx+tx errors; InfiniBand symbol + receive errors),
// retransmits (InfiniBand only: local_ack_timeout_err + packet_seq_err, the sender-side
// retransmission triggers), link_up (operstate; for IB state == ACTIVE).
std::string HostRecord(std::string_view node, const model::HostSample& sample,
                       const model::HostSample* prev = nullptr);

// ---- proc ----

// One "proc" record: pid (host pid), gpu (physical index), mem_used_mib, user, container
// (the 12-hex short id, as docker ps and the spec's example show it), job, cpu_numa_nodes,
// visible_index. The spec has no field for the command name; it is not written.
std::string ProcRecord(int64_t t_ms, std::string_view node, const model::ProcessAttribution& p,
                       const std::optional<std::vector<unsigned>>& cpu_numa_nodes = std::nullopt);

// ---- job ----

enum class JobState { kQueued, kStart, kEnd };
std::string_view JobStateName(JobState s);  // queued | start | end

struct JobLifecycle {
  std::string job;
  JobState state = JobState::kStart;
  std::string template_name, user, project;  // "" = unknown
  std::optional<uint32_t> ranks;
  std::optional<std::vector<unsigned>> gpus;  // physical indices on this node
  std::optional<int> exit_code;
  std::optional<int64_t> submit_ms;  // start: the scheduler's submit time (`submit_t`)
};
std::string JobRecord(int64_t t_ms, std::string_view node, const JobLifecycle& job);

// ---- step ----

// t_ms is the step's end. StepReport::scalars (custom scalars) have no trace field and are
// not written.
std::string StepRecord(int64_t t_ms, std::string_view node, std::string_view job, uint32_t rank,
                       std::optional<unsigned> gpu, const model::StepReport& step);

// ---- event ----

// The spec's event kinds. Callers map their own events (model::GpuEventKind, job checkpoints)
// onto these.
enum class EventKind {
  kXid,
  kEcc,
  kGpuLost,
  kDriverChange,
  kConfigChange,
  kTopologyChange,
  kMaintenanceStart,
  kMaintenanceEnd,
  kCheckpointStart,
  kCheckpointEnd,
  kAnnotation,
};
std::string_view EventKindName(EventKind k);

// `gpu` when the event concerns one GPU; `code` e.g. the XID number; an empty message is left
// out. `job` (left out when empty) is not in the spec's event example but is written by the
// reference scenarios on checkpoint events; readers ignore unknown fields.
std::string EventRecordLine(int64_t t_ms, std::string_view node, std::optional<unsigned> gpu,
                            EventKind kind, std::optional<uint64_t> code, std::string_view message,
                            std::string_view job = {});

// ---- log ----

enum class LogSource { kNccl, kJob, kKernel, kNcclTests };
std::string_view LogSourceName(LogSource s);  // nccl | job | kernel | nccl-tests

// `line` without its line terminator; an empty job (kernel lines) is left out.
std::string LogRecord(int64_t t_ms, std::string_view node, std::string_view job,
                      std::optional<uint32_t> rank, LogSource source, std::string_view line);

}  // namespace gpuwatch::trace
