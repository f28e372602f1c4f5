// The diagnosis engine's shared context: what every rule may read about the nodes, GPUs and jobs
// seen so far (each node's latest description, each GPU's latest sample, each job's
// placement, liveness and step time), the template baselines, the maintenance windows, and the
// findings the rules report. The engine (diagnoser.h) lets the Context take in each record
// before any rule sees it.
//
// Bounded: what is keyed by a job is forgotten once the job has ended on every node and, live,
// its alerts have resolved (Forgettable / ForgetJob); a job that sends nothing for
// ContextOptions::stale_job_s has ended without saying so. What is keyed by a node or a GPU is
// bounded by the hardware.
//
// Thread-safety: none; one owner.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "analyze/baseline.h"
#include "analyze/diagnoser_options.h"
#include "analyze/finding.h"
#include "trace/trace_records.h"

namespace gpuwatch::analyze {

// Formats a number as findings' evidence does ("0.5", "1980").
std::string Num(double v);

// Drops a job's entries from a map keyed by (node, job) or (anything, job): what forgetting a
// job means for the Context's and every rule's per-job state.
template <typename Map>
void EraseJob(Map& m, const std::string& job) {
  std::erase_if(m, [&job](const auto& kv) { return kv.first.second == job; });
}

struct NodeView {
  std::optional<trace::TraceNode> node;  // the latest node record
  double first_t = -1;                   // the node's first record
};

// One job on one node.
struct TaskView {
  double start_t = -1;  // its start record here
  double first_step_t = -1;
  double last_step_t = -1;  // the latest step's end (or checkpoint's end)
  // The lowest rank seen on this node: its steps speak for the node (rank 0 lives on one node
  // only, and a job-wide slowdown is found on each node).
  uint32_t lead_rank = UINT32_MAX;
  std::deque<double> durations;  // the last 64 steps' durations, all ranks
  std::map<uint32_t, uint32_t> rank_gpu;
  double checkpoint_since = -1;       // inside a checkpoint_start … _end
  double last_checkpoint_start = -1;  // the latest checkpoint_start
  bool ended = false;
  double end_t = -1;
  double last_t = -1;       // the latest record of the job here (step, proc, log, event, job)
  double last_proc_t = -1;  // the latest proc record of one of its processes here
  int proc_rounds = 0;      // rounds of proc records (distinct times) that named it here
  double proc_every_s = 0;  // the time between its last two rounds

  // Whether its processes here were seen in rounds, and have missed several since: they are
  // gone, whatever a missing end record says. `now`: the latest record's time.
  bool ProcessesGone(double now) const;
  // Exposed-comm share of the lead rank's steps after warm-up: the baseline and the last
  // minute (rules/task_steps learns them; net_congestion reads them).
  std::optional<double> comm_base_share;
  std::deque<std::pair<double, double>> comm_share;  // (t, share)
  // The job's own step time after warm-up (rules/task_steps learns it): what a finding's cost
  // is measured against.
  std::optional<double> base_step_s;

  // The median of `durations`; 0 when there are none.
  double MedianStep() const;
};

struct JobView {
  std::string template_name;
  std::set<std::string> nodes;  // from its start records
  size_t gpus_per_node = 0;
  double start_t = -1;  // the earliest start record
};

class Context {
 public:
  explicit Context(const DiagnoserOptions& options);

  const DiagnoserOptions& options() const { return o_; }

  // Takes in one record (before the rules see it).
  void Observe(const trace::TraceRecord& r);
  double now() const { return now_; }

  // ---- nodes and GPUs ----
  const std::map<std::string, NodeView>& nodes() const { return nodes_; }
  const trace::TraceNode* Node(const std::string& node) const;
  const trace::TraceNodeGpu* NodeGpu(const std::string& node, uint32_t gpu) const;
  // The GPU whose node record gives this PCI bus id (any case, any domain width), or nullopt.
  std::optional<uint32_t> GpuByPciBusId(const std::string& node, std::string_view bus_id) const;
  // The latest sample of a GPU (including the record being observed), or nullptr.
  const trace::TraceGpu* LastGpu(const std::string& node, uint32_t gpu) const;
  // The GPUs of `node` with a sample, in index order.
  std::vector<uint32_t> GpusOf(const std::string& node) const;

  // ---- jobs ----
  // The job holding a GPU (from the job's start record, or a process of it on the GPU) and since
  // when; nullptr when none, or when the holding job's processes have all left the node.
  struct Holder {
    std::string job;
    double since = 0;
  };
  const Holder* HolderOf(const std::string& node, uint32_t gpu) const;
  const TaskView* Task(const std::string& node, const std::string& job) const;
  TaskView* MutableTask(const std::string& node, const std::string& job);
  const std::map<std::pair<std::string, std::string>, TaskView>& tasks() const { return tasks_; }
  const JobView* Job(const std::string& job) const;
  // The nodes `job` runs on (start records and its own records).
  std::set<std::string> NodesOf(const std::string& job) const;
  // Each rank's median exposed comm over the straggler window, across the job's nodes
  // (rules/task_steps learns it): who the others wait for (the least comm). nullptr: not known.
  const std::map<uint32_t, double>* RankComm(const std::string& job) const;
  void SetRankComm(const std::string& job, std::map<uint32_t, double> comm_s);

  // ---- template baselines (step_regression, impact) ----
  void SetTemplateBaselines(const std::vector<TemplateStep>& baselines);
  // The current template baseline that fits `job` as seen on `node`, or nullptr.
  const TemplateStep* TemplateOf(const std::string& node, const std::string& job) const;

  // ---- findings ----
  // Adds the finding, or extends the one of its cause at its place (first_seen the earliest,
  // last_seen the latest, severity the highest). `t` is when the rule saw it; first_seen 0
  // means t.
  void Report(Finding f, double t);
  // Removes the findings of `cause` for `job` on `node` (a rule that learned better).
  void Retract(Cause cause, const std::string& node, const std::string& job);
  std::vector<Finding> Findings() const;
  // Findings whose last_seen is older than ContextOptions::drop_findings_after_s are dropped.
  void DropOldFindings();

  // ---- maintenance windows (events maintenance_start … maintenance_end) ----
  struct Maintenance {
    double start = 0, end = 0;  // end: infinity while open
    std::optional<uint32_t> gpu;
    std::string message;
  };
  const std::vector<Maintenance>* MaintenanceOf(const std::string& node) const;

  // ---- forgetting ----
  // Jobs that ended on every node at least forget_after_s ago, or sent nothing for
  // stale_job_s; `keep(job)` may hold one back (live: an alert of the job still fires).
  std::vector<std::string> Forgettable(const std::function<bool(const std::string&)>& keep) const;
  void ForgetJob(const std::string& job);
  size_t JobCount() const { return jobs_.size(); }
  size_t TaskCount() const { return tasks_.size(); }
  // The nodes of a forgotten job that findings still name (KeepDeepest needs them); bounded by
  // the findings kept.
  const std::set<std::string>* ForgottenJobNodes(const std::string& job) const;

 private:
  void OnNode(const trace::TraceRecord& r, const trace::TraceNode& n);
  void OnJob(const trace::TraceRecord& r, const trace::TraceJob& j);
  void OnStep(const trace::TraceRecord& r, const trace::TraceStep& st);
  void OnEvent(const trace::TraceRecord& r, const trace::TraceEvent& e);
  void OnProc(const trace::TraceRecord& r, const trace::TraceProc& p);
  // The job's task on the node (made when new), its last_t moved to `t` (not for an empty id).
  TaskView& TouchTask(const std::string& node, const std::string& job, double t);

  DiagnoserOptions o_;
  double now_ = 0;
  std::map<std::string, NodeView> nodes_;
  std::map<std::pair<std::string, uint32_t>, trace::TraceGpu> last_gpu_;
  std::map<std::pair<std::string, uint32_t>, Holder> holders_;
  std::map<std::pair<std::string, std::string>, TaskView> tasks_;
  std::map<std::string, JobView> jobs_;
  std::map<std::string, std::map<uint32_t, double>> rank_comm_;            // by job
  std::map<std::pair<std::string, std::string>, TemplateStep> templates_;  // (template, shape)
  std::map<std::string, std::vector<Maintenance>> maintenance_;            // per node
  // (cause, rule, node, gpu, nic, job, rank, info): an info finding (a trend, a finding inside
  // a maintenance window) is kept apart from a warning of the same cause at the same place,
  // whose first_seen is when its own evidence crossed its line (findings.md).
  using FindingKey =
      std::tuple<Cause, std::string, std::string, int, std::string, std::string, int, bool>;
  std::map<FindingKey, Finding> findings_;
  std::map<std::string, std::set<std::string>> forgotten_job_nodes_;
};

}  // namespace gpuwatch::analyze
