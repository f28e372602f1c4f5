#include "analyze/context.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "common/stats.h"
#include "common/strings.h"

namespace gpuwatch::analyze {

std::string Num(double v) { return fmt::format("{:g}", v); }

bool TaskView::ProcessesGone(double now) const {
  // Process rounds come every 5–10 s (the agent's --process-interval): three missed rounds, and
  // at least a minute, is no process left.
  return proc_rounds >= 2 && now - last_proc_t > std::max(60.0, 3 * proc_every_s);
}

double TaskView::MedianStep() const {
  if (durations.empty()) return 0;
  return Median(std::vector<double>(durations.begin(), durations.end()));
}

Context::Context(const DiagnoserOptions& options) : o_(options) {}

void Context::Observe(const trace::TraceRecord& r) {
  now_ = std::max(now_, r.t);
  if (const auto* n = r.as<trace::TraceNode>()) OnNode(r, *n);
  if (const auto* g = r.as<trace::TraceGpu>(); g && g->gpu && !g->mig) {
    last_gpu_[{r.node, *g->gpu}] = *g;
  }
  if (const auto* j = r.as<trace::TraceJob>()) OnJob(r, *j);
  if (const auto* st = r.as<trace::TraceStep>()) OnStep(r, *st);
  if (const auto* e = r.as<trace::TraceEvent>()) OnEvent(r, *e);
  if (const auto* p = r.as<trace::TraceProc>()) OnProc(r, *p);
  if (const auto* l = r.as<trace::TraceLog>(); l && l->job && !l->job->empty()) {
    TouchTask(r.node, *l->job, r.t);
  }
}

TaskView& Context::TouchTask(const std::string& node, const std::string& job, double t) {
  TaskView& tv = tasks_[{node, job}];
  if (!job.empty()) tv.last_t = std::max(tv.last_t, t);
  return tv;
}

void Context::OnNode(const trace::TraceRecord& r, const trace::TraceNode& n) {
  NodeView& nv = nodes_[r.node];
  if (nv.first_t < 0) nv.first_t = r.t;
  nv.node = n;
}

void Context::OnJob(const trace::TraceRecord& r, const trace::TraceJob& j) {
  if (!j.job || !j.state) return;
  TaskView& tv = TouchTask(r.node, *j.job, r.t);
  if (*j.state == "start") {
    JobView& info = jobs_[*j.job];
    if (j.template_name && !j.template_name->empty()) info.template_name = *j.template_name;
    info.nodes.insert(r.node);
    if (info.start_t < 0 || r.t < info.start_t) info.start_t = r.t;
    if (j.gpus) {
      info.gpus_per_node = std::max(info.gpus_per_node, j.gpus->size());
      for (uint32_t g : *j.gpus) holders_[{r.node, g}] = {*j.job, r.t};
    }
    // A restart under the same id: a new run here.
    tv.start_t = r.t;
    tv.last_proc_t = -1;
    tv.proc_rounds = 0;
    tv.ended = false;
    tv.end_t = -1;
  } else if (*j.state == "end") {
    tv.ended = true;
    tv.end_t = r.t;
    for (auto it = holders_.begin(); it != holders_.end();) {
      it = it->first.first == r.node && it->second.job == *j.job ? holders_.erase(it)
                                                                 : std::next(it);
    }
  }
}

void Context::OnStep(const trace::TraceRecord& r, const trace::TraceStep& st) {
  if (!st.job || !st.duration_s) return;
  TaskView& tv = TouchTask(r.node, *st.job, r.t);
  if (tv.first_step_t < 0) tv.first_step_t = r.t;
  tv.last_step_t = std::max(tv.last_step_t, r.t);
  if (st.rank) tv.lead_rank = std::min(tv.lead_rank, *st.rank);
  tv.durations.push_back(*st.duration_s);
  if (tv.durations.size() > 64) tv.durations.pop_front();
  if (st.rank && st.gpu) tv.rank_gpu[*st.rank] = *st.gpu;
}

void Context::OnEvent(const trace::TraceRecord& r, const trace::TraceEvent& e) {
  if (!e.kind) return;
  const std::string message = e.message.value_or("");
  if (*e.kind == "maintenance_start") {
    std::vector<Maintenance>& ws = maintenance_[r.node];
    if (ws.size() >= 1000) ws.erase(ws.begin());  // bounded; the oldest windows go first
    ws.push_back({r.t, std::numeric_limits<double>::infinity(), e.gpu, message});
  } else if (*e.kind == "maintenance_end") {
    // Ends the open windows of that GPU (of the whole node when the end names no GPU).
    for (Maintenance& w : maintenance_[r.node]) {
      if (std::isinf(w.end) && (!e.gpu || w.gpu == e.gpu)) w.end = r.t;
    }
  } else if ((*e.kind == "checkpoint_start" || *e.kind == "checkpoint_end") && e.job) {
    TaskView& tv = TouchTask(r.node, *e.job, r.t);
    tv.checkpoint_since = *e.kind == "checkpoint_start" ? r.t : -1;
    if (*e.kind == "checkpoint_start") tv.last_checkpoint_start = r.t;
    // The job was busy until the write ended: its next step ends a moment later, and no hang
    // is judged from before that.
    if (*e.kind == "checkpoint_end" && tv.last_step_t >= 0) {
      tv.last_step_t = std::max(tv.last_step_t, r.t);
    }
  }
}

void Context::OnProc(const trace::TraceRecord& r, const trace::TraceProc& p) {
  if (!p.job) return;
  TaskView& tv = TouchTask(r.node, *p.job, r.t);
  if (r.t > tv.last_proc_t + 0.5) {  // a new round
    if (tv.last_proc_t >= 0) tv.proc_every_s = r.t - tv.last_proc_t;
    ++tv.proc_rounds;
    tv.last_proc_t = r.t;
  }
  if (tv.ended || !p.gpu) return;
  // A GPU a job's process holds is the job's, whether or not its start record listed it (a
  // scheduler that names no GPUs, a rank on a GPU it was not given).
  auto [it, fresh] = holders_.emplace(std::make_pair(r.node, *p.gpu), Holder{*p.job, r.t});
  if (!fresh && it->second.job != *p.job) {
    const TaskView* other = Task(r.node, it->second.job);
    if (!other || other->ended || other->ProcessesGone(now_)) {
      it->second = Holder{*p.job, r.t};
    }
  }
}

const trace::TraceNode* Context::Node(const std::string& node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() || !it->second.node ? nullptr : &*it->second.node;
}

const trace::TraceNodeGpu* Context::NodeGpu(const std::string& node, uint32_t gpu) const {
  const trace::TraceNode* n = Node(node);
  if (!n || !n->gpus) return nullptr;
  for (const auto& g : *n->gpus) {
    if (g.index == gpu) return &g;
  }
  return nullptr;
}

namespace {
// "00000000:3B:00.0", "0000:3b:00.0", "3b:00.0" → (domain, bus, device): the parts a driver's
// and NVML's spellings share (the function is the GPU's 0 either way).
std::optional<std::tuple<uint32_t, uint32_t, uint32_t>> BusParts(std::string_view id) {
  const std::string lower = ToLower(id);
  std::vector<std::string_view> parts = SplitAny(lower, ":");
  if (parts.size() < 2 || parts.size() > 3) return std::nullopt;
  std::string_view dev = parts.back();
  if (const size_t dot = dev.find('.'); dot != std::string_view::npos) dev = dev.substr(0, dot);
  auto domain = parts.size() == 3 ? ParseInt<uint32_t>(parts[0], 16) : std::optional<uint32_t>(0);
  auto bus = ParseInt<uint32_t>(parts[parts.size() - 2], 16);
  auto device = ParseInt<uint32_t>(dev, 16);
  if (!domain || !bus || !device) return std::nullopt;
  return std::make_tuple(*domain, *bus, *device);
}
}  // namespace

std::optional<uint32_t> Context::GpuByPciBusId(const std::string& node,
                                               std::string_view bus_id) const {
  const trace::TraceNode* n = Node(node);
  auto want = BusParts(bus_id);
  if (!n || !n->gpus || !want) return std::nullopt;
  for (const auto& g : *n->gpus) {
    if (g.index && g.pci_bus_id && BusParts(*g.pci_bus_id) == want) return *g.index;
  }
  return std::nullopt;
}

const trace::TraceGpu* Context::LastGpu(const std::string& node, uint32_t gpu) const {
  auto it = last_gpu_.find({node, gpu});
  return it == last_gpu_.end() ? nullptr : &it->second;
}

std::vector<uint32_t> Context::GpusOf(const std::string& node) const {
  std::vector<uint32_t> out;
  for (auto it = last_gpu_.lower_bound({node, 0}); it != last_gpu_.end() && it->first.first == node;
       ++it) {
    out.push_back(it->first.second);
  }
  return out;
}

const Context::Holder* Context::HolderOf(const std::string& node, uint32_t gpu) const {
  auto it = holders_.find({node, gpu});
  if (it == holders_.end()) return nullptr;
  // A job whose processes were seen here and have all gone holds nothing any more, whatever its
  // missing end record says.
  const TaskView* tv = Task(node, it->second.job);
  if (tv && tv->ProcessesGone(now_)) return nullptr;
  return &it->second;
}

const TaskView* Context::Task(const std::string& node, const std::string& job) const {
  auto it = tasks_.find({node, job});
  return it == tasks_.end() ? nullptr : &it->second;
}

TaskView* Context::MutableTask(const std::string& node, const std::string& job) {
  return &tasks_[{node, job}];
}

const JobView* Context::Job(const std::string& job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? nullptr : &it->second;
}

std::set<std::string> Context::NodesOf(const std::string& job) const {
  std::set<std::string> out;
  if (const JobView* j = Job(job)) out = j->nodes;
  if (const auto* gone = ForgottenJobNodes(job)) out.insert(gone->begin(), gone->end());
  for (const auto& [key, tv] : tasks_) {
    if (key.second == job) out.insert(key.first);
  }
  return out;
}

const std::map<uint32_t, double>* Context::RankComm(const std::string& job) const {
  auto it = rank_comm_.find(job);
  return it == rank_comm_.end() ? nullptr : &it->second;
}

void Context::SetRankComm(const std::string& job, std::map<uint32_t, double> comm_s) {
  rank_comm_[job] = std::move(comm_s);
}

void Context::SetTemplateBaselines(const std::vector<TemplateStep>& baselines) {
  templates_.clear();
  for (const TemplateStep& b : baselines) {
    if (b.median_s > 0) templates_[{b.template_name, b.shape}] = b;
  }
}

const TemplateStep* Context::TemplateOf(const std::string& node, const std::string& job) const {
  auto info = jobs_.find(job);
  if (templates_.empty() || info == jobs_.end()) return nullptr;
  const trace::TraceNode* rec = Node(node);
  std::string model;
  size_t per_node = info->second.gpus_per_node;
  if (rec && rec->gpus && !rec->gpus->empty()) {
    model = rec->gpus->front().name.value_or("");
    if (per_node == 0) per_node = rec->gpus->size();
  }
  // Named as baseline learning names the run (LearnRuns): the template, else the job itself.
  const std::string name =
      info->second.template_name.empty() ? "job:" + job : info->second.template_name;
  auto it = templates_.find({name, ShapeName(info->second.nodes.size(), per_node, model)});
  if (it == templates_.end()) return nullptr;
  const std::string driver = rec ? rec->driver_version.value_or("") : "";
  if (!it->second.driver_version.empty() && !driver.empty() && it->second.driver_version != driver)
    return nullptr;  // learned on another driver: stale
  return &it->second;
}

void Context::Report(Finding f, double t) {
  FindingKey key{f.cause,
                 f.rule,
                 f.node,
                 f.gpu.value_or(-1),
                 f.nic.value_or(""),
                 f.job.value_or(""),
                 f.rank.value_or(-1),
                 f.is_info()};
  auto it = findings_.find(key);
  if (it == findings_.end()) {
    if (f.last_seen < t) f.last_seen = t;
    if (f.first_seen == 0) f.first_seen = t;
    findings_.emplace(std::move(key), std::move(f));
    return;
  }
  Finding& have = it->second;
  have.last_seen = std::max(have.last_seen, t);
  have.first_seen = std::min(have.first_seen, f.first_seen == 0 ? t : f.first_seen);
  have.severity = std::max(have.severity, f.severity);
  // The rule's latest word on what it costs and what it ruled out.
  if (f.impact) have.impact = std::move(f.impact);
  if (!f.ruled_out.empty()) have.ruled_out = std::move(f.ruled_out);
}

void Context::Retract(Cause cause, const std::string& node, const std::string& job) {
  for (auto it = findings_.begin(); it != findings_.end();) {
    const Finding& f = it->second;
    it = f.cause == cause && f.node == node && f.job == job ? findings_.erase(it) : std::next(it);
  }
}

std::vector<Finding> Context::Findings() const {
  std::vector<Finding> out;
  out.reserve(findings_.size());
  for (const auto& [key, f] : findings_) {
    Finding copy = f;
    if (copy.last_seen < copy.first_seen) copy.last_seen = copy.first_seen;
    out.push_back(std::move(copy));
  }
  // A stable order for callers that list them: by cause name, then place.
  std::sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    const std::string ca = a.CauseText(), cb = b.CauseText();
    return std::tie(ca, a.node, a.gpu, a.nic, a.job, a.rank, a.severity) <
           std::tie(cb, b.node, b.gpu, b.nic, b.job, b.rank, b.severity);
  });
  return out;
}

void Context::DropOldFindings() {
  const double keep_s = o_.context.drop_findings_after_s;
  if (keep_s <= 0) return;
  for (auto it = findings_.begin(); it != findings_.end();) {
    it = it->second.last_seen < now_ - keep_s ? findings_.erase(it) : std::next(it);
  }
  std::set<std::string> named;
  for (const auto& [key, f] : findings_) {
    if (f.job) named.insert(*f.job);
  }
  for (auto it = forgotten_job_nodes_.begin(); it != forgotten_job_nodes_.end();) {
    it = named.count(it->first) == 0 ? forgotten_job_nodes_.erase(it) : std::next(it);
  }
}

const std::set<std::string>* Context::ForgottenJobNodes(const std::string& job) const {
  auto it = forgotten_job_nodes_.find(job);
  return it == forgotten_job_nodes_.end() ? nullptr : &it->second;
}

const std::vector<Context::Maintenance>* Context::MaintenanceOf(const std::string& node) const {
  auto it = maintenance_.find(node);
  return it == maintenance_.end() ? nullptr : &it->second;
}

std::vector<std::string> Context::Forgettable(
    const std::function<bool(const std::string&)>& keep) const {
  // Per job: whether every node has ended it, the latest end, and the latest record.
  struct State {
    bool all_ended = true;
    double end_t = -1, last_t = -1;
  };
  std::map<std::string, State> by_job;
  for (const auto& [key, tv] : tasks_) {
    State& s = by_job[key.second];
    s.all_ended = s.all_ended && tv.ended;
    s.end_t = std::max(s.end_t, tv.end_t);
    s.last_t = std::max(s.last_t, std::max(tv.last_t, tv.last_step_t));
  }
  for (const auto& [job, jv] : jobs_) {
    State& s = by_job[job];  // a start record and nothing else yet: not ended
    if (s.last_t < 0) s.all_ended = false;
    s.last_t = std::max(s.last_t, jv.start_t);
  }
  std::vector<std::string> out;
  for (const auto& [job, s] : by_job) {
    const bool ended = s.all_ended && s.end_t >= 0 && now_ - s.end_t >= o_.context.forget_after_s;
    const bool stale = s.last_t >= 0 && now_ - s.last_t >= o_.context.stale_job_s;
    if ((ended || stale) && !(keep && keep(job))) out.push_back(job);
  }
  return out;
}

void Context::ForgetJob(const std::string& job) {
  for (const auto& [key, f] : findings_) {
    if (f.job == job) {
      std::set<std::string> nodes = NodesOf(job);
      forgotten_job_nodes_[job].insert(nodes.begin(), nodes.end());
      break;
    }
  }
  jobs_.erase(job);
  rank_comm_.erase(job);
  EraseJob(tasks_, job);
  for (auto it = holders_.begin(); it != holders_.end();) {
    it = it->second.job == job ? holders_.erase(it) : std::next(it);
  }
}

}  // namespace gpuwatch::analyze
