// Cross-node rules: what one node can only be judged against the others.
// - version_mismatch: among the nodes of one job (findings.md: "nodes of one job run different
//   driver / CUDA / NCCL versions"), the node whose driver, CUDA or NCCL version differs from
//   the largest group's (on a tie, the group of the job's rank 0 node, the node it is launched
//   from). A job's nodes are the context's (its job, step, proc and log records). A hub hears
//   unrelated nodes, and a fleet mid-upgrade runs two drivers on purpose: nodes that share no
//   job are not compared. Only a recording that names no job at all compares all its nodes.
// - clock_skew: the node whose clock offset (clock_offset_ms, from its time source) exceeds the
//   tolerance and stands apart from the median of all nodes (a shared offset, e.g. one upstream
//   server, is not one node's fault); or whose steps of a multi-node job end apart from the
//   others' by more than the tolerance (the ranks of a synchronous job leave each collective
//   together, so the same step ends at the same instant on every node; a skewed node's
//   timestamps show).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

#include "analyze/rules/rules.h"
#include "common/stats.h"

namespace gpuwatch::analyze {
namespace {

constexpr std::array kCauses = {Cause::kVersionMismatch, Cause::kClockSkew};

class CrossNodeRule : public Rule {
 public:
  explicit CrossNodeRule(const CrossNodeOptions& o) : o_(o) {}
  std::string_view name() const override { return "cross_node"; }
  std::span<const Cause> causes() const override { return kCauses; }

  void Observe(const trace::TraceRecord& r, Context& ctx) override {
    if (const auto* n = r.as<trace::TraceNode>()) OnNode(r, *n);
    if (const auto* st = r.as<trace::TraceStep>()) OnStep(r, *st, ctx);
    saw_job_ = saw_job_ || !ctx.tasks().empty();
  }
  void Flush(double t, Context& ctx) override {
    for (auto& [job, sc] : step_clock_) FlushStepClock(job, true, ctx);
    Versions(ctx);
    Offsets(ctx);
  }
  size_t JobEntries() const override { return step_clock_.size() + skew_runs_.size(); }
  void ForgetJob(const std::string& job) override {
    step_clock_.erase(job);
    EraseJob(skew_runs_, job);
  }

 private:
  struct NodeState {
    std::map<std::string, std::pair<std::string, double>> versions;  // field -> value, since
    std::optional<double> clock_offset_ms;
    double clock_offset_t = 0;
  };
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

  void OnNode(const trace::TraceRecord& r, const trace::TraceNode& n);
  void OnStep(const trace::TraceRecord& r, const trace::TraceStep& st, Context& ctx);
  void FlushStepClock(const std::string& job, bool all, Context& ctx);
  void Versions(Context& ctx);
  // One job's nodes (or all, in a recording without jobs): the nodes apart from the largest
  // group, once per (field, node) across jobs.
  void CompareVersions(const std::vector<std::string>& nodes, const std::string& rank0_node,
                       std::set<std::pair<std::string, std::string>>* reported, Context& ctx);
  void Offsets(Context& ctx);

  CrossNodeOptions o_;
  std::map<std::string, NodeState> nodes_;
  std::map<std::string, StepClock> step_clock_;
  std::map<std::pair<std::string, std::string>, SkewRun> skew_runs_;
  bool saw_job_ = false;  // a job was named, even if forgotten since: compare within jobs
};

void CrossNodeRule::OnNode(const trace::TraceRecord& r, const trace::TraceNode& n) {
  NodeState& ns = nodes_[r.node];
  auto version = [&](const char* field, const std::optional<std::string>& v) {
    if (!v || v->empty()) return;
    auto it = ns.versions.find(field);
    if (it == ns.versions.end() || it->second.first != *v) ns.versions[field] = {*v, r.t};
  };
  version("driver", n.driver_version);
  version("CUDA", n.cuda_version);
  version("NCCL", n.nccl_version);
  if (n.clock_offset_ms) {
    ns.clock_offset_ms = n.clock_offset_ms;
    ns.clock_offset_t = r.t;
  }
}

void CrossNodeRule::Versions(Context& ctx) {
  std::set<std::pair<std::string, std::string>> reported;
  if (!saw_job_) {
    std::vector<std::string> all;
    for (const auto& [name, ns] : nodes_) all.push_back(name);
    CompareVersions(all, "", &reported, ctx);
    return;
  }
  std::map<std::string, std::vector<std::string>> job_nodes;  // the context's, one pass
  for (const auto& [key, tv] : ctx.tasks())
    if (!key.second.empty()) job_nodes[key.second].push_back(key.first);
  for (const auto& [job, nodes] : job_nodes) {
    if (nodes.size() < 2) continue;
    auto sc = step_clock_.find(job);
    CompareVersions(nodes, sc == step_clock_.end() ? std::string() : sc->second.rank0_node,
                    &reported, ctx);
  }
}

void CrossNodeRule::CompareVersions(const std::vector<std::string>& nodes,
                                    const std::string& rank0_node,
                                    std::set<std::pair<std::string, std::string>>* reported,
                                    Context& ctx) {
  if (nodes.size() < 2) return;
  for (const char* field : {"driver", "CUDA", "NCCL"}) {
    std::map<std::string, std::vector<std::string>> groups;
    for (const std::string& name : nodes) {
      auto n = nodes_.find(name);
      if (n == nodes_.end()) continue;
      auto it = n->second.versions.find(field);
      if (it != n->second.versions.end()) groups[it->second.first].push_back(name);
    }
    if (groups.size() < 2) continue;
    auto has_rank0 = [&](const std::vector<std::string>& members) {
      return !rank0_node.empty() &&
             std::find(members.begin(), members.end(), rank0_node) != members.end();
    };
    // The job's version is the largest group's, or among the largest, the one rank 0 runs
    // on. Without either there is none: naming a node then would name the wrong one half the
    // time (whichever node a hub happened to hear from first).
    const std::vector<std::string>* major = nullptr;
    std::string major_value;
    bool tie = false;
    for (const auto& [v, members] : groups) {
      if (!major || members.size() > major->size()) {
        major = &members;
        major_value = v;
        tie = false;
      } else if (members.size() == major->size()) {
        if (has_rank0(members) && !has_rank0(*major)) {
          major = &members;
          major_value = v;
          tie = false;
        } else if (has_rank0(members) == has_rank0(*major)) {
          tie = true;
        }
      }
    }
    if (tie) continue;
    for (const auto& [v, members] : groups) {
      if (&members == major) continue;
      for (const std::string& name : members) {
        if (!reported->insert({field, name}).second) continue;
        const auto& since = nodes_[name].versions[field];
        Finding f = MakeFinding(Cause::kVersionMismatch, Severity::kWarning, name);
        f.first_seen = since.second;
        f.summary = fmt::format("{} runs {} {} while {} other node(s) run {}", name, field, v,
                                major->size(), major_value);
        f.evidence = {fmt::format("{} {} on {}; {} on {}", field, v, name, major_value,
                                  fmt::join(*major, ", "))};
        f.action = "Run every node of a job on the same driver, CUDA and NCCL";
        ctx.Report(std::move(f), since.second);
      }
    }
  }
}

void CrossNodeRule::Offsets(Context& ctx) {
  std::vector<std::pair<std::string, double>> offsets;
  for (const auto& [name, ns] : nodes_) {
    if (ns.clock_offset_ms) offsets.push_back({name, *ns.clock_offset_ms});
  }
  if (offsets.size() < 2) return;
  std::vector<double> all;
  for (const auto& [name, off] : offsets) all.push_back(off);
  const double median = Median(all);
  for (const auto& [name, off] : offsets) {
    if (std::fabs(off) <= o_.clock_skew_tolerance_ms ||
        std::fabs(off - median) <= o_.clock_skew_tolerance_ms) {
      continue;
    }
    Finding f = MakeFinding(Cause::kClockSkew, Severity::kWarning, name);
    f.first_seen = nodes_[name].clock_offset_t;
    f.summary = fmt::format("{}'s clock is {} ms off its time source; the nodes' median is {} ms",
                            name, Num(off), Num(median));
    f.evidence = {fmt::format("clock_offset_ms {} on {}", Num(off), name)};
    f.action = "Check chrony/ntpd on the node (chronyc tracking); fix its time source";
    ctx.Report(std::move(f), f.first_seen);
  }
}

void CrossNodeRule::OnStep(const trace::TraceRecord& r, const trace::TraceStep& st, Context& ctx) {
  if (!st.job || !st.step || r.node.empty()) return;
  StepClock& sc = step_clock_[*st.job];
  if (st.rank && *st.rank == 0) sc.rank0_node = r.node;
  sc.ends[*st.step].emplace(r.node, r.t);  // the first rank of the node to report it
  // Steps are compared once every node had time to report them; a skewed node's records
  // arrive shifted by its offset, so keep a margin of steps.
  if (sc.ends.size() > 64) FlushStepClock(*st.job, false, ctx);
}

void CrossNodeRule::FlushStepClock(const std::string& job, bool all, Context& ctx) {
  StepClock& sc = step_clock_[job];
  while (!sc.ends.empty() && (all || sc.ends.size() > 32)) {
    const std::map<std::string, double> ends = std::move(sc.ends.begin()->second);
    sc.ends.erase(sc.ends.begin());
    if (ends.size() < 2) continue;
    std::vector<double> ts;
    for (const auto& [node, t] : ends) ts.push_back(t);
    // Three nodes or more: against the median of all. Two: against rank 0's node.
    std::optional<double> ref;
    if (ends.size() >= 3) {
      ref = Median(ts);
    } else if (ends.count(sc.rank0_node) != 0) {
      ref = ends.at(sc.rank0_node);
    }
    if (!ref) continue;
    for (const auto& [node, t] : ends) {
      SkewRun& run = skew_runs_[{node, job}];
      const double offset_ms = (t - *ref) * 1000;
      const bool first = !run.compared;
      run.compared = true;
      if (std::fabs(offset_ms) <= o_.clock_skew_tolerance_ms) {
        run = SkewRun{.compared = true};
        continue;
      }
      if (run.length++ == 0) {
        run.start_t = t;
        run.from_first = first;
      }
      run.offset_ms += (offset_ms - run.offset_ms) / run.length;  // running mean
      if (run.length < 5) continue;
      // Apart from its first compared step on: its clock was off before the job began, so
      // the node's first record already carried it.
      double since = run.start_t;
      auto ns = ctx.nodes().find(node);
      if (run.from_first && ns != ctx.nodes().end() && ns->second.first_t >= 0) {
        since = std::min(since, ns->second.first_t);
      }
      Finding f = MakeFinding(Cause::kClockSkew, Severity::kWarning, node);
      f.first_seen = since;
      f.summary = fmt::format(
          "{}'s clock is {:.0f} ms off the other nodes: job {}'s steps end there {:.0f} ms {} "
          "than on the others",
          node, std::fabs(run.offset_ms), job, std::fabs(run.offset_ms),
          run.offset_ms > 0 ? "later" : "earlier");
      f.evidence = {fmt::format("{} consecutive steps of job {} apart by {:.0f} ms on average",
                                run.length, job, run.offset_ms)};
      f.action = "Check chrony/ntpd on the node (chronyc tracking); fix its time source";
      ctx.Report(std::move(f), t);
    }
  }
}

}  // namespace

std::unique_ptr<Rule> MakeCrossNodeRule(const CrossNodeOptions& o) {
  return std::make_unique<CrossNodeRule>(o);
}

}  // namespace gpuwatch::analyze
