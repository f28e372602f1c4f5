#include "model/cause.h"

#include <array>

namespace gpuwatch::model {
namespace {

using C = Cause;
using S = Scope;

// What explains what (findings.md, "Which cause, and where", and ../shared/scenarios/README.md,
// "Deepest cause only"):
// - a card cause on a GPU explains that GPU straggling; so does its process running on the
//   other socket (numa_mismatch: its input and launches cross the socket link);
// - any card or link cause, a straggler, and a stalled input, checkpoint or leaking memory on a
//   node of a job explain its slower steps ("slower steps after a fallback, a congested NIC or
//   a downgraded link are that link cause, not step_regression");
// - a lost GPU, an XID or a DBE on the node explains a rank dying there and the job hanging
//   ("a rank that dies because its GPU fell off the bus is gpu_lost"; "a job that hangs because
//   a GPU stopped responding is xid"); a dead rank explains its job hanging, straggling and
//   stalling (the others wait for it in their next collective); a NIC or NVLink that went down
//   explains the hang of the job that used it; a leak explains the job's rank dying of it;
// - a lost GPU explains everything else its card reported while it fell off the bus, and its
//   absence from the node's next description.
constexpr Explains kCardToStraggler[] = {{C::kStragglerGpu, S::kSameGpu},
                                         {C::kStepRegression, S::kJobNodes}};
constexpr Explains kCardFatal[] = {{C::kStragglerGpu, S::kSameGpu},
                                   {C::kStepRegression, S::kJobNodes},
                                   {C::kJobHang, S::kSameNode},
                                   {C::kRankExit, S::kSameNode}};
constexpr Explains kGpuLost[] = {
    {C::kStragglerGpu, S::kSameGpu},
    {C::kStepRegression, S::kJobNodes},
    {C::kJobHang, S::kSameNode},
    {C::kRankExit, S::kSameNode},
    {C::kThermalThrottle, S::kSameGpu},
    {C::kPowerThrottle, S::kSameGpu},
    {C::kClockSlowdown, S::kSameGpu},
    {C::kXid, S::kSameGpu},
    {C::kEccSbeGrowth, S::kSameGpu},
    {C::kPcieDowngrade, S::kSameGpu},
    {C::kPcieReplay, S::kSameGpu},
    {C::kNvlinkErrors, S::kSameGpu},
    // A GPU that fell off the bus is missing from the node's next description.
    {C::kTopologyChange, S::kSameNode}};
constexpr Explains kNvlinkErrors[] = {{C::kStragglerGpu, S::kSameGpu},
                                      {C::kStepRegression, S::kJobNodes},
                                      {C::kJobHang, S::kSameNode}};
constexpr Explains kLinkToRegression[] = {{C::kStepRegression, S::kJobNodes}};
constexpr Explains kNetErrors[] = {{C::kStepRegression, S::kJobNodes}, {C::kJobHang, S::kJobNodes}};
constexpr Explains kMemoryLeak[] = {
    {C::kStepRegression, S::kJobNodes}, {C::kRankExit, S::kSameJob}, {C::kJobHang, S::kSameJob}};
constexpr Explains kRankExit[] = {{C::kJobHang, S::kSameJob},
                                  {C::kStragglerGpu, S::kSameJob},
                                  {C::kStepRegression, S::kSameJob},
                                  {C::kDataStall, S::kSameJob},
                                  {C::kGpuIdleAllocated, S::kSameJob}};
// The stuck rank of a hung job sits idle on its GPU (NCCL's waiting ranks spin, it does not).
constexpr Explains kJobHang[] = {{C::kGpuIdleAllocated, S::kSameJob}};
constexpr std::span<const Explains> kNone{};

constexpr bool kTrend = true, kDirect = false;

// findings.md's order (a test checks it is the enum's).
constexpr CauseInfo kCatalog[] = {
    {C::kDataStall, "data_stall", Layer::kTask, CauseKind::kCondition, Place::kNodeJob, kTrend,
     kLinkToRegression,
     "steps wait on input data far more than the baseline (GPUs idle between steps)"},
    {C::kCheckpointStall, "checkpoint_stall", Layer::kTask, CauseKind::kCondition, Place::kNodeJob,
     kTrend, kLinkToRegression,
     "checkpoint writes block training for longer than the baseline / budget"},
    {C::kMemoryLeak, "memory_leak", Layer::kTask, CauseKind::kCondition, Place::kNodeJob, kTrend,
     kMemoryLeak,
     "GPU memory of a job grows steadily with steps and does not fall back after checkpoints"},
    {C::kJobHang, "job_hang", Layer::kTask, CauseKind::kCondition, Place::kNodeJob, kDirect,
     kJobHang,
     "a job's processes are alive but no step has finished for far longer than its step time"},
    {C::kRankExit, "rank_exit", Layer::kTask, CauseKind::kEvent, Place::kNodeJobRank, kDirect,
     kRankExit, "a rank's process exited or died while the job was running"},
    {C::kStepRegression, "step_regression", Layer::kTask, CauseKind::kCondition, Place::kNodeJob,
     kTrend, kNone, "steps are slower than the template's baseline and no deeper cause was found"},
    {C::kThermalThrottle, "thermal_throttle", Layer::kCard, CauseKind::kCondition, Place::kNodeGpu,
     kDirect, kCardToStraggler, "clocks reduced by a thermal limit (hw_thermal, sw_thermal)"},
    {C::kPowerThrottle, "power_throttle", Layer::kCard, CauseKind::kCondition, Place::kNodeGpu,
     kDirect, kCardToStraggler,
     "clocks reduced by a power limit or power brake (sw_power_cap, hw_power_brake)"},
    {C::kClockSlowdown, "clock_slowdown", Layer::kCard, CauseKind::kCondition, Place::kNodeGpu,
     kDirect, kCardToStraggler, "clocks reduced for another reason (hw_slowdown, others)"},
    {C::kStragglerGpu, "straggler_gpu", Layer::kCard, CauseKind::kCondition, Place::kNodeGpu,
     kTrend, kLinkToRegression,
     "one GPU is slower than its peers in the same job with no card-level reason visible"},
    {C::kEccSbeGrowth, "ecc_sbe_growth", Layer::kCard, CauseKind::kEvent, Place::kNodeGpu, kTrend,
     kNone, "correctable ECC errors keep growing"},
    {C::kEccDbe, "ecc_dbe", Layer::kCard, CauseKind::kEvent, Place::kNodeGpu, kDirect, kCardFatal,
     "an uncorrectable ECC error, or a row-remapping failure"},
    {C::kXid, "xid", Layer::kCard, CauseKind::kEvent, Place::kNodeGpu, kDirect, kCardFatal,
     "an XID error that is not covered by a more specific cause"},
    {C::kGpuLost, "gpu_lost", Layer::kCard, CauseKind::kEvent, Place::kNodeGpu, kDirect, kGpuLost,
     "the GPU stopped answering (fell off the bus, XID 79, NVML GPU_IS_LOST)"},
    {C::kNvlinkFallback, "nvlink_fallback", Layer::kLink, CauseKind::kCondition, Place::kNode,
     kDirect, kLinkToRegression,
     "communication between GPUs that have NVLink goes over PCIe, shared memory or the network"},
    {C::kNetFallback, "net_fallback", Layer::kLink, CauseKind::kCondition, Place::kNode, kDirect,
     kLinkToRegression, "inter-node communication uses TCP sockets although RDMA NICs are present"},
    {C::kNvlinkErrors, "nvlink_errors", Layer::kLink, CauseKind::kEvent, Place::kNodeGpu, kDirect,
     kNvlinkErrors, "NVLink CRC / replay / recovery counters keep growing, or links went down"},
    {C::kPcieDowngrade, "pcie_downgrade", Layer::kLink, CauseKind::kCondition, Place::kNodeGpu,
     kDirect, kCardToStraggler, "a GPU's PCIe link runs below its maximum generation or width"},
    {C::kPcieReplay, "pcie_replay", Layer::kLink, CauseKind::kEvent, Place::kNodeGpu, kDirect,
     kNone, "the PCIe replay counter keeps growing"},
    {C::kNetCongestion, "net_congestion", Layer::kLink, CauseKind::kCondition, Place::kNodeNic,
     kTrend, kLinkToRegression, "a NIC is saturated while GPUs wait in communication"},
    {C::kNetErrors, "net_errors", Layer::kLink, CauseKind::kEvent, Place::kNodeNic, kDirect,
     kNetErrors, "NIC errors or RDMA retransmissions keep growing, or a link went down"},
    {C::kNumaMismatch, "numa_mismatch", Layer::kLink, CauseKind::kCondition, Place::kNodeGpu,
     kDirect, kCardToStraggler,
     "a process feeding a GPU runs on CPUs of another NUMA node than the GPU's"},
    {C::kTopologyChange, "topology_change", Layer::kLink, CauseKind::kEvent, Place::kNode, kDirect,
     kNone, "the GPU/NIC topology differs from the archived snapshot"},
    {C::kClockSkew, "clock_skew", Layer::kLink, CauseKind::kEvent, Place::kNode, kDirect, kNone,
     "a node's clock is off from the others by more than the tolerance"},
    {C::kVersionMismatch, "version_mismatch", Layer::kLink, CauseKind::kEvent, Place::kNode,
     kDirect, kNone, "nodes of one job run different driver / CUDA / NCCL versions"},
    {C::kGpuIdleAllocated, "gpu_idle_allocated", Layer::kTask, CauseKind::kCondition,
     Place::kNodeJob, kTrend, kNone, "a job holds GPUs that stay idle for long"},
};
static_assert(std::size(kCatalog) == kCauseCount);

constexpr CauseInfo kUser = {C::kUserRule, "user", Layer::kUser, CauseKind::kCondition,
                             Place::kNode, false,  kNone,        "an operator's own alerting rule"};

}  // namespace

std::string_view LayerName(Layer l) {
  switch (l) {
    case Layer::kTask:
      return "task";
    case Layer::kCard:
      return "card";
    case Layer::kLink:
      return "link";
    case Layer::kUser:
      return "user";
  }
  return "task";
}

std::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kCritical:
      return "critical";
  }
  return "info";
}

std::optional<Severity> SeverityFromName(std::string_view name) {
  for (Severity s : {Severity::kInfo, Severity::kWarning, Severity::kCritical}) {
    if (SeverityName(s) == name) return s;
  }
  return std::nullopt;
}

std::span<const CauseInfo> CauseCatalog() { return kCatalog; }

const CauseInfo& Describe(Cause c) {
  const size_t i = static_cast<size_t>(c);
  return i < kCauseCount ? kCatalog[i] : kUser;
}

std::string_view CauseName(Cause c) { return Describe(c).name; }

std::optional<Cause> CauseFromName(std::string_view name) {
  for (const CauseInfo& c : kCatalog) {
    if (c.name == name) return c.cause;
  }
  return std::nullopt;
}

bool CauseExplains(Cause cause, Cause symptom, const PlaceMatch& where) {
  for (const Explains& e : Describe(cause).explains) {
    if (e.symptom != symptom) continue;
    switch (e.scope) {
      case Scope::kSameGpu:
        return where.same_node && where.same_gpu;
      case Scope::kSameNode:
        return where.same_node;
      case Scope::kJobNodes:
        return where.same_node || where.same_job || where.cause_on_symptom_job_node;
      case Scope::kSameJob:
        return where.same_job;
    }
  }
  return false;
}

std::ostream& operator<<(std::ostream& os, Cause c) { return os << CauseName(c); }
std::ostream& operator<<(std::ostream& os, Severity s) { return os << SeverityName(s); }

}  // namespace gpuwatch::model
