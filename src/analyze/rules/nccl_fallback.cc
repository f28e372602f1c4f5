// NCCL fallbacks: a job's NCCL_DEBUG=INFO lines (log records of source "nccl") against its
// node's topology (src/nccl): nvlink_fallback (GPUs with NVLink talking over SHM, PCIe or the
// network) and net_fallback (sockets between nodes with RDMA NICs present). A job's channels are
// set up once its rings and trees are connected: judged then, at a restart or the job's end, and
// at every flush for jobs still running. Findings name only the node (findings.md).
#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <map>

#include "analyze/rules/rules.h"
#include "nccl/nccl_analysis.h"
#include "nccl/nccl_log.h"

namespace gpuwatch::analyze {
namespace {

constexpr std::array kCauses = {Cause::kNvlinkFallback, Cause::kNetFallback};

class NcclFallbackRule : public Rule {
 public:
  explicit NcclFallbackRule(const NcclOptions& o) : o_(o) {}
  std::string_view name() const override { return "nccl_fallback"; }
  std::span<const Cause> causes() const override { return kCauses; }

  void Observe(const trace::TraceRecord& r, Context& ctx) override {
    if (const auto* l = r.as<trace::TraceLog>()) OnLog(r, *l, ctx);
    if (const auto* j = r.as<trace::TraceJob>()) OnJob(r, *j, ctx);
  }
  void Flush(double t, Context& ctx) override {
    for (auto& [key, nj] : jobs_) Analyze(key.first, nj, ctx);
  }
  size_t JobEntries() const override { return jobs_.size(); }
  void ForgetJob(const std::string& job) override { EraseJob(jobs_, job); }

 private:
  struct NcclJob {
    std::string text;
    std::vector<double> line_t;
    std::optional<double> start_t;
    bool analyzed_connected = false;
    // What the last analysis read: the same lines against the same topology give the same
    // findings, so a live flush every few seconds re-parses a log only when it grew.
    size_t analyzed_lines = 0;
    std::optional<nccl::TopoHint> analyzed_hint;
  };

  void OnLog(const trace::TraceRecord& r, const trace::TraceLog& l, Context& ctx);
  void OnJob(const trace::TraceRecord& r, const trace::TraceJob& j, Context& ctx);
  void Analyze(const std::string& node, NcclJob& nj, Context& ctx);

  NcclOptions o_;
  std::map<std::pair<std::string, std::string>, NcclJob> jobs_;  // (node, job)
};

void NcclFallbackRule::OnJob(const trace::TraceRecord& r, const trace::TraceJob& j, Context& ctx) {
  if (!j.job || !j.state) return;
  const auto key = std::make_pair(r.node, *j.job);
  if (*j.state == "start") {
    NcclJob& nj = jobs_[key];
    // A restart of the same job id: its logs are a new run.
    if (!nj.text.empty()) Analyze(r.node, nj, ctx);
    nj = NcclJob{};
    nj.start_t = r.t;
  } else if (*j.state == "end") {
    auto it = jobs_.find(key);
    if (it != jobs_.end()) {
      Analyze(r.node, it->second, ctx);
      jobs_.erase(it);
    }
  }
}

void NcclFallbackRule::OnLog(const trace::TraceRecord& r, const trace::TraceLog& l, Context& ctx) {
  if (!l.line || l.source.value_or("") != "nccl") return;
  NcclJob& nj = jobs_[{r.node, l.job.value_or("")}];
  if (nj.line_t.size() >= o_.max_lines_per_job) return;
  nj.text += *l.line;
  nj.text += '\n';
  nj.line_t.push_back(r.t);
  if (!nj.analyzed_connected && (l.line->find("Connected all rings") != std::string::npos ||
                                 l.line->find("Connected all trees") != std::string::npos)) {
    nj.analyzed_connected = true;
    Analyze(r.node, nj, ctx);
  }
}

void NcclFallbackRule::Analyze(const std::string& node, NcclJob& nj, Context& ctx) {
  if (nj.text.empty()) return;
  nccl::TopoHint hint;
  bool have_hint = false;
  if (const trace::TraceNode* n = ctx.Node(node)) {
    if (n->topology && n->topology->gpu_links) {
      hint.gpu_links = *n->topology->gpu_links;
      have_hint = true;
    }
    if (n->nics) {
      for (const auto& nic : *n->nics) {
        if (nic.name) hint.nics.push_back(*nic.name);
        if (nic.type.value_or("") == "ib" ||
            (nic.name && (nic.name->rfind("mlx", 0) == 0 || nic.name->rfind("ib", 0) == 0))) {
          hint.ib_present = true;
        }
      }
      have_hint = true;
    }
  }
  std::optional<nccl::TopoHint> used = have_hint ? std::optional(hint) : std::nullopt;
  if (nj.analyzed_lines == nj.line_t.size() && nj.analyzed_hint == used) return;
  nj.analyzed_lines = nj.line_t.size();
  nj.analyzed_hint = std::move(used);
  const nccl::NcclLogReport report = nccl::ParseNcclLog(nj.text);
  for (const nccl::Finding& nf : nccl::AnalyzeNccl(report, have_hint ? &hint : nullptr)) {
    // version_mismatch is judged across the nodes' records (rules/cross_node), where every
    // node's versions are known; one node's log sees only its own ranks.
    if (nf.cause == Cause::kVersionMismatch) continue;
    Finding f = MakeFinding(nf.cause, nf.severity, node);
    // The log lines the evidence quotes ("line 12: …") date the finding.
    double first = 0;
    for (const std::string& ev : nf.evidence) {
      size_t n = 0;
      if (std::sscanf(ev.c_str(), "line %zu:", &n) == 1 && n >= 1 && n <= nj.line_t.size()) {
        const double t = nj.line_t[n - 1];
        if (first == 0 || t < first) first = t;
      }
    }
    if (first == 0) first = nj.start_t.value_or(nj.line_t.front());
    f.first_seen = first;
    f.summary = nf.summary;
    f.evidence = nf.evidence;
    f.action = nf.action;
    ctx.Report(std::move(f), nj.line_t.back());
  }
}

}  // namespace

std::unique_ptr<Rule> MakeNcclFallbackRule(const NcclOptions& o) {
  return std::make_unique<NcclFallbackRule>(o);
}

}  // namespace gpuwatch::analyze
