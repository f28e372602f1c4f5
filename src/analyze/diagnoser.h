// Diagnoser: trace records in, findings out (../shared/spec/findings.md). Live and replay feed
// it the same records — the agent its own records in trace form, `gpuwatch replay` a trace
// file — so a cause found offline is the cause found live.
//
// This first engine holds the causes that counters, events and logs show directly (issue 6
// needs them to evaluate anything; issue 7 adds baselines, trends and the task → card → link
// walk):
//   gpu_lost       an event gpu_lost, or XID 79
//   ecc_dbe        a volatile DBE count that rises, a row-remapping failure, XID 48/63/64/94/95
//   nvlink_errors  NVLink CRC/replay/recovery counters that keep rising, links that go down
//                  from the count the node record states, XID 74
//   xid            any other XID but 43/45 (a job's own fault and its teardown: consequences)
//   thermal_throttle (info) a busy GPU's temperature climbing steadily over 10 minutes at
//                  steady power: a cooling problem on its way to a throttle (R19)
//   thermal_throttle / power_throttle / clock_slowdown
//                  a clock-event reason held on a busy GPU (thermal and slowdown: a few
//                  consecutive samples; the power cap, which flickers on healthy GPUs at full
//                  load: most of a window with the SM clock well below its maximum)
//   pcie_downgrade a link trained below its maximum width, or generation while busy
//   pcie_replay, ecc_sbe_growth
//                  counters that rise repeatedly within a window
//   nvlink_fallback / net_fallback
//                  a job's NCCL log lines against the node's topology (src/nccl)
//   topology_change an event topology_change
//   version_mismatch the node whose driver, CUDA or NCCL version differs from the others'
//   clock_skew     the node whose clock offset differs from the others' by more than 100 ms,
//                  or whose steps of a multi-node job end apart from the others' by more (the
//                  ranks leave each collective together, so a skewed node's timestamps show)
//   data_stall     a job's share of step time waiting for input, well above its own baseline
//   memory_leak    a job's GPU memory that keeps growing after warm-up and never falls back
//   job_hang       no step for 10× the median step (≥ 60 s; 10 min inside a checkpoint); in a
//                  multi-node job, on the node whose GPU sat idle while the others spun
//   checkpoint_stall a checkpoint blocking 3× the job's earlier ones (or over 5 min)
//   straggler_gpu  the rank whose exposed comm is a robust outlier below the others' (they
//                  wait for it in communication; it never waits)
//   step_regression steps 25 % over the job's own post-warm-up median, held 2 min; or, when its
//                  template has a stored baseline on this shape, 25 % over that baseline's
//                  median and above its p99, held 2 min (a job slow from its first step)
//   (task rules judge each node of a job from its lowest rank there)
//   numa_mismatch  a GPU process on CPUs of another NUMA node than its GPU's
//   net_errors     NIC errors or RDMA retransmissions that keep rising, a NIC going down
//   gpu_idle_allocated a GPU a job holds at 0 % for 10 minutes
//   net_congestion a NIC near its link rate for half a minute while a job waits in comm
//   rank_exit      a rank's process missing from a round of proc records while most of the
//                  job's processes are still there (the first such round of a job only: what
//                  vanishes after is the teardown)
// Maintenance (Finish): a finding first seen inside a maintenance window of its node (events
// maintenance_start … maintenance_end; of one GPU when they name one) is recorded as info.
// Deepest cause only (Finish): a card cause (or numa_mismatch) on a GPU removes that GPU's
// straggler finding, whose evidence otherwise says how the GPU differs from its peers; any
// card, link or deeper task cause on a node of the job removes its step_regression; a lost
// GPU, an XID or a DBE on the node, or a rank_exit anywhere in the job, removes a job_hang.
// Findings of one cause at one place are one finding (first_seen, last_seen extended).
// first_seen is when the evidence began (the first sample of a sustained run), not when the
// rule became sure.
//
// Thread-safety: none; one owner.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "analyze/baseline.h"
#include "analyze/finding.h"
#include "trace/trace_records.h"

namespace gpuwatch::analyze {

struct DiagnoserOptions {
  double busy_util_pct = 30;             // a GPU this busy is working, so a throttle costs time
  int consecutive_samples = 3;           // thermal, slowdown, PCIe width: samples in a row
  double power_window_s = 30;            // the power cap must hold most of this window …
  double power_share = 0.8;              // … this share of its busy samples …
  double power_clock_ratio = 0.9;        // … with the SM clock below this share of its maximum
  double power_peer_clock_ratio = 0.97;  // … or below this share of its busy peers' median
  double counter_window_s = 300;         // rising counters: increments within this window …
  int counter_increments = 3;            // … at least this many
  // A fault's run of increments: no gap longer than this between them.
  double MaxIncrementGap() const { return counter_window_s / counter_increments; }
  double clock_skew_tolerance_ms = 100;
  // data_stall: after warm-up, a job's baseline share of step time spent waiting for data is
  // learned from its first steps; a stall is a rolling median share above both the floor and
  // a multiple of the baseline, held for a while.
  double warmup_s = 120;            // of a job's steps, not judged and not learned from
  size_t baseline_steps = 200;      // step records (all ranks) the baseline is learned from
  double stall_window_s = 60;       // rolling window of step records
  double stall_floor_share = 0.15;  // never a stall below this share of step time
  double stall_baseline_factor = 4;
  double stall_hold_s = 30;
  // memory_leak: a GPU's memory that keeps growing after the job's warm-up, in every
  // sub-window of the window, by a noticeable share of the card, without falling back.
  double leak_window_s = 180;
  double leak_min_growth_share = 0.02;  // of the card's memory over the window
  double leak_max_drop_share = 0.01;    // a fall of this share ends a run (freed, not leaked)
  // job_hang: no step for this many median step times (and at least hang_min_s), outside a
  // checkpoint (checkpoint_hang_s inside one).
  double hang_factor = 10;
  double hang_min_s = 60;
  double checkpoint_hang_s = 600;
  // checkpoint_stall: a checkpoint blocking this many times its predecessors' median (and at
  // least checkpoint_min_extra_s longer), or longer than checkpoint_budget_s with no history.
  double checkpoint_factor = 3;
  double checkpoint_min_extra_s = 20;
  double checkpoint_budget_s = 300;
  // straggler_gpu: over straggler_window_s, one rank's median exposed comm is below this share
  // of the others' median, lower by at least straggler_step_share of the median step and by
  // more than straggler_mad_factor × the others' spread (they wait for it; it never waits).
  double straggler_window_s = 60;
  double straggler_comm_share = 0.8;
  double straggler_step_share = 0.08;
  double straggler_mad_factor = 4;
  // step_regression: steps this much slower than the job's post-warm-up median, held.
  double regression_factor = 1.25;
  double regression_hold_s = 120;
  // Temperature trend (R19: thermal degradation is gradual): over trend_window_s, a busy GPU
  // whose temperature climbs steadily — least-squares slope at least trend_slope_c_per_min
  // with R² at least trend_min_r2 — while its power does not (the median power of the window's
  // last third within trend_power_rise_share of its first third's: cooling, not load) is an
  // info finding of thermal_throttle, before any clock falls. Samples are thinned to one per
  // trend_sample_s.
  double trend_window_s = 600;
  double trend_sample_s = 5;
  double trend_slope_c_per_min = 0.3;
  double trend_min_r2 = 0.7;
  double trend_power_rise_share = 0.05;
  double idle_allocated_s = 600;
  // net_congestion: a NIC carrying this share of its link rate over most of the window while a
  // job's exposed-comm share is this many times its baseline (or above comm_share_floor).
  double nic_saturation = 0.85;
  double nic_window_s = 30;
  double comm_factor = 2;
  double comm_share_floor = 0.3;  // gpu_idle_allocated: idle this long while a job holds it
  size_t max_nccl_lines_per_job = 50000;
};

class Diagnoser {
 public:
  explicit Diagnoser(DiagnoserOptions options = {});

  // The template baselines step_regression also judges against, one per (template, shape);
  // replaces what was set before.
  void SetTemplateBaselines(const std::vector<TemplateStep>& baselines);

  void Observe(const trace::TraceRecord& r);
  // Runs what waits for more records (NCCL logs of jobs still running, cross-node
  // comparisons) and returns every finding so far. `end_t`: the last record's time.
  std::vector<Finding> Finish(double end_t);

 private:
  struct GpuState {
    std::optional<trace::TraceGpu> prev;
    double prev_t = 0;
    // Start and length of the current run of samples with the reason held.
    double thermal_start = 0, slowdown_start = 0, brake_start = 0, width_start = 0, gen_start = 0;
    int thermal_run = 0, slowdown_run = 0, brake_run = 0, width_run = 0, gen_run = 0;
    std::deque<std::pair<double, bool>> power;             // (t, capped and slow) of busy samples
    std::map<std::string, std::deque<double>> increments;  // counter -> times it rose
    // Temperature trend: (t, temp_c, power_w, util_pct), one per trend_sample_s.
    struct TempSample {
      double t, temp_c, power_w, util_pct;
    };
    std::deque<TempSample> temps;
    double temp_slope = 0;  // °C/min of the last full window, for the peers' comparison
    bool temp_slope_known = false;
    double trend_since = -1;
  };
  struct NodeState {
    std::optional<trace::TraceNode> node;  // latest node record
    double first_t = -1;
    std::map<std::string, std::pair<std::string, double>> versions;  // field -> value, since
    std::optional<double> clock_offset_ms;
    double clock_offset_t = 0;
  };
  struct StepState {  // per (node, job)
    double first_t = -1;
    std::vector<double> baseline;                  // shares learned after warm-up
    std::optional<double> baseline_share;          // their median, once learned
    std::deque<std::pair<double, double>> recent;  // (t, share) within the rolling window
    double above_since = -1;                       // rolling median above the line since
    double first_above_step = -1;                  // first step of that run above the line
  };
  struct TaskState {  // per (node, job): liveness, checkpoints, stragglers, regressions
    double first_step_t = -1;
    double last_step_t = -1;
    // The lowest rank seen on this node: its steps speak for the node (rank 0 lives on one
    // node only, and a job-wide slowdown is found on each node).
    uint32_t lead_rank = UINT32_MAX;
    // job_hang: whether, when the hang was judged, one of the job's GPUs here sat idle while
    // the others spun in their collectives (the stuck rank's node in a multi-node job).
    bool hang_judged = false, hang_stuck_here = false;
    double last_checkpoint_start = -1;
    std::deque<double> durations;  // the last steps' durations, for the hang threshold
    bool ended = false;
    double checkpoint_since = -1;       // inside a checkpoint_start … _end
    std::vector<double> checkpoints_s;  // blocking time of each checkpoint so far
    // Per rank: its GPU and its recent exposed-comm times (t, comm_s).
    std::map<uint32_t, uint32_t> rank_gpu;
    std::map<uint32_t, std::deque<std::pair<double, double>>> comm;
    double straggle_since = -1;
    std::optional<double> base_step_s;  // median step after warm-up
    std::vector<double> base_steps;
    std::deque<std::pair<double, double>> recent_steps;  // (t, duration) in the window
    double slow_since = -1;
    double template_slow_since = -1;  // the same, against the template's baseline
    // Exposed-comm share of rank 0's steps: the baseline after warm-up and the last minute.
    std::vector<double> comm_base;
    std::optional<double> comm_base_share;
    std::deque<std::pair<double, double>> comm_share;
  };
  struct MemState {                                 // per (node, gpu)
    std::deque<std::pair<double, double>> samples;  // (t, mem_used_mib)
  };
  struct NcclJob {
    std::string text;
    std::vector<double> line_t;
    std::optional<double> start_t;
    bool analyzed_connected = false;
  };

  void OnNode(const trace::TraceRecord& r, const trace::TraceNode& n);
  void OnGpu(const trace::TraceRecord& r, const trace::TraceGpu& g);
  void OnEvent(const trace::TraceRecord& r, const trace::TraceEvent& e);
  void OnLog(const trace::TraceRecord& r, const trace::TraceLog& l);
  void OnJob(const trace::TraceRecord& r, const trace::TraceJob& j);
  void OnStep(const trace::TraceRecord& r, const trace::TraceStep& st);
  // How `gpu` differs from `peers` in its last card sample (clock, temperature, power, PCIe
  // width, clock-event reasons): the straggler's explanation in words.
  std::string CompareWithPeers(const std::string& node, uint32_t gpu,
                               const std::vector<uint32_t>& peers) const;
  void CheckTemperatureTrend(const trace::TraceRecord& r, const trace::TraceGpu& g, GpuState& s);
  void CheckMemory(const trace::TraceRecord& r, uint32_t gpu, double mem_mib);
  void OnStepTask(const trace::TraceRecord& r, const trace::TraceStep& st);
  void OnProc(const trace::TraceRecord& r, const trace::TraceProc& p);
  void OnHost(const trace::TraceRecord& r, const trace::TraceHost& h);
  void CheckHangs(const std::string& node, double t);
  // Drops what a deeper cause explains (findings.md: task → card → link, deepest only).
  std::vector<Finding> Deepest(std::vector<Finding> all) const;
  void AnalyzeNccl(const std::string& node, const std::string& job, NcclJob& nj);
  void CrossNode();
  // clock_skew from the steps: the ranks of a synchronous job leave each collective together,
  // so the same step ends at the same instant on every node; a node whose step ends sit apart
  // from the others' by more than the tolerance writes with a skewed clock.
  void OnStepClock(const trace::TraceRecord& r, const trace::TraceStep& st);
  void FlushStepClock(const std::string& job, bool all);
  struct StepClock {                                         // per job
    std::map<uint64_t, std::map<std::string, double>> ends;  // step -> node -> first end seen
    std::string rank0_node;  // the reference when only two nodes disagree
  };
  struct SkewRun {            // per (node, job)
    double start_t = -1;      // the node's time of the first step of the current run apart
    bool from_first = false;  // the run began with the node's first compared step
    bool compared = false;    // a step of this node was compared already
    int length = 0;
    double offset_ms = 0;
  };
  std::map<std::string, StepClock> step_clock_;
  std::map<std::pair<std::string, std::string>, SkewRun> skew_runs_;
  // Adds or extends the finding of f.cause at f's place.
  void Report(Finding f, double t);
  const trace::TraceNodeGpu* NodeGpu(const std::string& node, uint32_t gpu) const;

  DiagnoserOptions o_;
  std::map<std::string, NodeState> nodes_;
  std::map<std::pair<std::string, uint32_t>, GpuState> gpus_;
  std::map<std::pair<std::string, std::string>, NcclJob> nccl_;
  std::map<std::pair<std::string, std::string>, StepState> steps_;
  std::map<std::pair<std::string, uint32_t>, MemState> mem_;
  std::map<std::pair<std::string, std::string>, TaskState> tasks_;
  struct JobInfo {  // what names a job's template baseline
    std::string template_name;
    std::set<std::string> nodes;
    size_t gpus_per_node = 0;
  };
  std::map<std::string, JobInfo> job_info_;
  struct Maintenance {          // from a maintenance_start event to its maintenance_end
    double start = 0, end = 0;  // end: infinity while open
    std::optional<uint32_t> gpu;
    std::string message;
  };
  std::map<std::string, std::vector<Maintenance>> maintenance_;            // per node
  std::map<std::pair<std::string, std::string>, TemplateStep> templates_;  // (template, shape)
  // The template baseline that fits `job` as seen on `node`, or nullptr.
  const TemplateStep* TemplateOf(const std::string& node, const std::string& job) const;
  std::map<std::pair<std::string, uint32_t>, double> idle_since_;  // allocated GPUs at 0 %
  // rank_exit: proc records come in rounds (one per process, the same t); per node, the round
  // being read and, per job, the (gpu → pid) of the last complete round.
  struct ProcRounds {
    double t = -1;
    std::map<std::string, std::map<uint32_t, uint32_t>> current, previous;
  };
  std::map<std::string, ProcRounds> proc_rounds_;
  std::set<std::pair<std::string, std::string>> exited_jobs_;  // a rank_exit already reported
  void CloseProcRound(const std::string& node, ProcRounds& pr);
  std::map<std::pair<std::string, std::string>, std::map<std::string, double>> nic_counters_;
  std::map<std::pair<std::string, std::string>, std::deque<double>> nic_increments_;
  std::map<std::pair<std::string, std::string>, bool> nic_up_;
  // net_congestion: per (node, NIC), host samples (t, saturated) within the window.
  std::map<std::pair<std::string, std::string>, std::deque<std::pair<double, bool>>> nic_load_;
  // Whether a job on `node` waits in communication well beyond its own baseline now.
  bool CommWaitUp(const std::string& node, std::string* evidence) const;
  // The job holding each GPU (from job start records) and when it started.
  std::map<std::pair<std::string, uint32_t>, std::pair<std::string, double>> gpu_job_;
  // (cause, node, gpu, nic, job, rank, info): an info finding (a trend, a finding inside a
  // maintenance window) is kept apart from a warning of the same cause at the same place, whose
  // first_seen is when its own evidence crossed its line (findings.md).
  std::map<std::tuple<std::string, std::string, int, std::string, std::string, int, bool>, Finding>
      findings_;
};

}  // namespace gpuwatch::analyze
