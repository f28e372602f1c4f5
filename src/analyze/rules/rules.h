// The rule families of the diagnosis engine, one file each under analyze/rules/ with its tests
// beside it. MakeRules builds the engine's set; the catalog test checks that every cause of
// findings.md is reported by one of them.
//
// Thread-safety: as analyze/rule.h.
#pragma once

#include <memory>
#include <vector>

#include "analyze/diagnoser_options.h"
#include "analyze/rule.h"

namespace gpuwatch::analyze {

// card.cc: clock-event reasons (thermal_throttle, power_throttle, clock_slowdown), PCIe
// (pcie_downgrade, pcie_replay), ECC (ecc_dbe, ecc_sbe_growth), NVLink (nvlink_errors), XIDs
// and lost GPUs (xid, gpu_lost) from events and kernel log lines.
std::unique_ptr<Rule> MakeCardRule(const CardOptions& o);
// thermal_trend.cc: an info thermal_throttle for a GPU warming steadily at steady load (R19).
std::unique_ptr<Rule> MakeThermalTrendRule(const TrendOptions& o);
// memory.cc: memory_leak.
std::unique_ptr<Rule> MakeMemoryRule(const MemoryOptions& o);
// task_steps.cc: data_stall, checkpoint_stall, straggler_gpu, step_regression.
std::unique_ptr<Rule> MakeTaskStepsRule(const TaskOptions& o);
// task_liveness.cc: job_hang, rank_exit, gpu_idle_allocated.
std::unique_ptr<Rule> MakeTaskLivenessRule(const TaskOptions& o, const model::HangPolicy& hang,
                                           const CardOptions& card);
// host_nic.cc: net_errors, net_congestion, numa_mismatch.
std::unique_ptr<Rule> MakeHostNicRule(const HostNicOptions& o);
// cross_node.cc: version_mismatch, clock_skew.
std::unique_ptr<Rule> MakeCrossNodeRule(const CrossNodeOptions& o);
// nccl_fallback.cc: nvlink_fallback, net_fallback.
std::unique_ptr<Rule> MakeNcclFallbackRule(const NcclOptions& o);
// topology.cc: topology_change.
std::unique_ptr<Rule> MakeTopologyRule();

std::vector<std::unique_ptr<Rule>> MakeRules(const DiagnoserOptions& o);

}  // namespace gpuwatch::analyze
