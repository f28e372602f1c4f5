#include "accounting/ledger.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "common/log.h"
#include "common/strings.h"
#include "trace/trace_reader.h"

namespace gpuwatch::accounting {
namespace {

using json = nlohmann::json;

// WAL record types (docs/format/accounting.md). On-disk: never renumber.
constexpr uint8_t kJobEntryRecord = 1;
constexpr uint8_t kNodeRecord = 2;

constexpr int64_t kHourMs = 3600 * 1000;

int64_t HourOf(int64_t t_ms) { return t_ms - ((t_ms % kHourMs) + kHourMs) % kHourMs; }

// Overlap of [a0, a1) with [b0, b1), ms; 0 when none.
int64_t OverlapMs(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

json SegmentJson(const Segment& s) {
  json j = {{"node", s.node},
            {"gpus", s.gpus},
            {"models", s.models},
            {"start", s.start_ms},
            {"end", s.end_ms}};
  if (s.exit_code) j["exit"] = *s.exit_code;
  return j;
}

json EntryJson(const JobEntry& e) {
  json attempts = json::array();
  for (const Attempt& a : e.attempts) {
    json segs = json::array();
    for (const Segment& s : a.segments) segs.push_back(SegmentJson(s));
    attempts.push_back({{"queued", a.queued_ms}, {"start", a.start_ms}, {"segs", segs}});
  }
  json usage = json::array();
  for (const auto& [hour, u] : e.usage_by_hour)
    usage.push_back({hour, u.measured_gpu_s, u.idle_gpu_s, u.busywait_gpu_s});
  return {{"job", e.job},
          {"user", e.user},
          {"project", e.project},
          {"template", e.template_name},
          {"attempts", attempts},
          {"usage", usage},
          {"pending_queued", e.pending_queued_ms}};
}

// The inverse of EntryJson; nullopt when the payload is not one (counted as damage).
std::optional<JobEntry> EntryFromJson(const json& j) {
  try {
    JobEntry e;
    e.job = j.at("job").get<std::string>();
    e.user = j.at("user").get<std::string>();
    e.project = j.at("project").get<std::string>();
    e.template_name = j.at("template").get<std::string>();
    e.pending_queued_ms = j.value("pending_queued", int64_t{-1});
    for (const json& a : j.at("attempts")) {
      Attempt at;
      at.queued_ms = a.at("queued").get<int64_t>();
      at.start_ms = a.at("start").get<int64_t>();
      for (const json& s : a.at("segs")) {
        Segment seg;
        seg.node = s.at("node").get<std::string>();
        seg.gpus = s.at("gpus").get<std::vector<unsigned>>();
        seg.models = s.at("models").get<std::vector<std::string>>();
        seg.models.resize(seg.gpus.size());
        seg.start_ms = s.at("start").get<int64_t>();
        seg.end_ms = s.at("end").get<int64_t>();
        if (s.contains("exit")) seg.exit_code = s.at("exit").get<int64_t>();
        at.segments.push_back(std::move(seg));
      }
      e.attempts.push_back(std::move(at));
    }
    for (const json& u : j.at("usage"))
      e.usage_by_hour[u.at(0).get<int64_t>()] = {u.at(1).get<double>(), u.at(2).get<double>(),
                                                 u.at(3).get<double>()};
    if (e.job.empty()) return std::nullopt;
    return e;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string_view GroupByName(GroupBy g) {
  switch (g) {
    case GroupBy::kUser:
      return "user";
    case GroupBy::kProject:
      return "project";
    case GroupBy::kTemplate:
      return "template";
    case GroupBy::kJob:
      return "job";
  }
  return "project";
}

std::optional<GroupBy> ParseGroupBy(std::string_view s) {
  for (GroupBy g : {GroupBy::kUser, GroupBy::kProject, GroupBy::kTemplate, GroupBy::kJob})
    if (s == GroupByName(g)) return g;
  return std::nullopt;
}

bool Attempt::open() const {
  for (const Segment& s : segments)
    if (s.end_ms < 0) return true;
  return false;
}

int64_t Attempt::end_ms() const {
  if (open()) return -1;
  int64_t end = start_ms;
  for (const Segment& s : segments) end = std::max(end, s.end_ms);
  return end;
}

std::optional<int64_t> Attempt::exit_code() const {
  bool all_zero = !segments.empty();
  for (const Segment& s : segments) {
    if (s.exit_code && *s.exit_code != 0) return s.exit_code;
    all_zero &= s.exit_code.has_value();
  }
  if (all_zero) return 0;
  return std::nullopt;
}

Result<std::unique_ptr<Ledger>> Ledger::Open(LedgerOptions options) {
  std::unique_ptr<Ledger> l(new Ledger(std::move(options)));
  if (l->options_.dir.empty()) return l;
  store::WalOptions wo;
  wo.sync = l->options_.sync;
  wo.segment_bytes = 16ull << 20;
  store::WalReplayStats stats;
  auto wal = store::Wal::Open(
      l->options_.dir, wo,
      [&](uint8_t type, std::string_view payload) { l->ApplyWalRecord(type, payload); }, &stats);
  if (!wal.ok()) return wal.status();
  l->wal_ = std::move(*wal);
  l->stats_.wal_records_replayed = stats.records;
  for (const auto& d : stats.damage) {
    if (d.torn_tail) continue;
    ++l->stats_.wal_damage;
    GW_LOG_WARN("accounting: {} at {}: {} ({} bytes lost)", d.segment, d.offset, d.reason,
                d.bytes_lost);
  }
  for (const auto& s : stats.segment_stats) l->wal_bytes_ += s.bytes;
  // The GPUs that replayed open segments hold, for the idle tallies that follow.
  for (const auto& [id, e] : l->jobs_) {
    if (e.attempts.empty()) continue;
    for (const Segment& s : e.attempts.back().segments)
      if (s.end_ms < 0) l->HoldLocked(s.node, s, id);
    l->live_bytes_estimate_ += EntryJson(e).dump().size() + 9;
  }
  return l;
}

Ledger::~Ledger() = default;

void Ledger::ApplyWalRecord(uint8_t type, std::string_view payload) {
  json j = json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    ++stats_.wal_damage;
    return;
  }
  if (type == kJobEntryRecord) {
    auto e = EntryFromJson(j);
    if (!e) {
      ++stats_.wal_damage;
      return;
    }
    std::string id = e->job;
    jobs_[id] = std::move(*e);  // the last entry of a job is its state
  } else if (type == kNodeRecord) {
    try {
      NodeInfo& n = nodes_[j.at("node").get<std::string>()];
      for (const auto& [k, v] : j.at("models").items())
        n.models[static_cast<unsigned>(std::stoul(k))] = v.get<std::string>();
      for (const auto& [k, v] : j.at("power_limit_w").items())
        n.power_limit_w[static_cast<unsigned>(std::stoul(k))] = v.get<double>();
      n.last_seen_ms = std::max(n.last_seen_ms, j.value("last_seen", int64_t{0}));
    } catch (const std::exception&) {
      ++stats_.wal_damage;
    }
  }
  // Other types: written by a newer gpuwatch; skipped.
}

void Ledger::AddLines(std::string_view ndjson) {
  auto reader = trace::TraceReader::OpenBuffer(std::string(ndjson), "records.jsonl");
  if (!reader.ok()) return;
  (*reader)->SetSkipMalformed(true);
  trace::TraceRecord r;
  while (true) {
    auto next = (*reader)->Next(&r);
    if (!next.ok() || !*next) break;
    Add(r);
  }
}

void Ledger::Add(const trace::TraceRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.records;
  newest_ms_ = std::max(newest_ms_, r.t_ms);
  if (!r.node.empty()) {
    NodeInfo& n = nodes_[r.node];
    n.last_seen_ms = std::max(n.last_seen_ms, r.t_ms);
  }
  if (const auto* j = r.as<trace::TraceJob>()) {
    AddJobLocked(r, *j);
  } else if (const auto* g = r.as<trace::TraceGpu>()) {
    AddGpuLocked(r, *g);
  } else if (const auto* p = r.as<trace::TraceProc>()) {
    AddProcLocked(r, *p);
  } else if (const auto* n = r.as<trace::TraceNode>()) {
    AddNodeLocked(r, *n);
  }
}

JobEntry& Ledger::EntryLocked(const std::string& id) {
  auto it = jobs_.find(id);
  if (it != jobs_.end()) return it->second;
  if (jobs_.size() >= options_.max_jobs) {
    // The job that ended longest ago makes room; a ledger this full needs a shorter retention.
    auto oldest = jobs_.end();
    int64_t oldest_end = INT64_MAX;
    for (auto j = jobs_.begin(); j != jobs_.end(); ++j) {
      if (j->second.attempts.empty() || j->second.attempts.back().open()) continue;
      const int64_t end = j->second.attempts.back().end_ms();
      if (end < oldest_end) oldest_end = end, oldest = j;
    }
    if (oldest != jobs_.end()) {
      jobs_.erase(oldest);
      ++stats_.dropped_jobs;
    }
  }
  JobEntry& e = jobs_[id];
  e.job = id;
  return e;
}

Segment* Ledger::OpenSegmentLocked(JobEntry& e, const std::string& node) {
  if (e.attempts.empty()) return nullptr;
  for (Segment& s : e.attempts.back().segments)
    if (s.node == node && s.end_ms < 0) return &s;
  return nullptr;
}

void Ledger::HoldLocked(const std::string& node, const Segment& s, const std::string& job) {
  for (unsigned g : s.gpus) holders_[{node, g}] = job;
}

void Ledger::ReleaseLocked(const std::string& node, const Segment& s, const std::string& job) {
  for (unsigned g : s.gpus) {
    auto it = holders_.find({node, g});
    if (it != holders_.end() && it->second == job) holders_.erase(it);
  }
}

void Ledger::AddJobLocked(const trace::TraceRecord& r, const trace::TraceJob& j) {
  if (!j.job || j.job->empty() || !j.state) return;
  JobEntry& e = EntryLocked(*j.job);
  // Who and what: the first word wins, except that a later start fills what was missing.
  auto fill = [](std::string& field, const std::optional<std::string>& v) {
    if (field.empty() && v && !v->empty()) field = *v;
  };
  fill(e.user, j.user);
  fill(e.project, j.project);
  fill(e.template_name, j.template_name);
  const std::string& state = *j.state;
  if (state == "queued") {
    // A `queued` while it runs is its next attempt's (a requeue): it waits for that start.
    e.pending_queued_ms = r.t_ms;
  } else if (state == "start") {
    Segment* open = OpenSegmentLocked(e, r.node);
    if (!open) {
      if (e.attempts.empty() || !e.attempts.back().open()) {
        Attempt a;
        a.start_ms = r.t_ms;
        a.queued_ms = e.pending_queued_ms;
        e.pending_queued_ms = -1;
        e.attempts.push_back(std::move(a));
      }
      Attempt& a = e.attempts.back();
      a.segments.push_back({});
      open = &a.segments.back();
      open->node = r.node;
      open->start_ms = r.t_ms;
    }
    Attempt& a = e.attempts.back();
    if (j.submit_t) {
      const int64_t submit_ms = static_cast<int64_t>(std::llround(*j.submit_t * 1000));
      if (submit_ms <= a.start_ms) a.queued_ms = submit_ms;
    }
    if (j.gpus) {
      // A repeated start may name GPUs the first did not: they were held from its start.
      const NodeInfo& n = nodes_[r.node];
      for (uint32_t g : *j.gpus) {
        if (std::find(open->gpus.begin(), open->gpus.end(), g) != open->gpus.end()) continue;
        open->gpus.push_back(g);
        auto m = n.models.find(g);
        open->models.push_back(m == n.models.end() ? "" : m->second);
      }
    }
    HoldLocked(r.node, *open, e.job);
  } else if (state == "end") {
    if (Segment* open = OpenSegmentLocked(e, r.node)) {
      open->end_ms = std::max(r.t_ms, open->start_ms);
      if (j.exit_code) open->exit_code = *j.exit_code;
      ReleaseLocked(r.node, *open, e.job);
    } else if (!e.attempts.empty()) {
      // A second end for a segment that already ended: the SDK said its ranks exited, then
      // the scheduler's epilog released the allocation. The GPUs were held until the later.
      for (Segment& s : e.attempts.back().segments) {
        if (s.node != r.node) continue;
        s.end_ms = std::max(s.end_ms, r.t_ms);
        if (j.exit_code && (!s.exit_code || *s.exit_code == 0)) s.exit_code = *j.exit_code;
      }
    }
  } else {
    return;
  }
  PersistLocked(e);
}

void Ledger::AddProcLocked(const trace::TraceRecord& r, const trace::TraceProc& p) {
  if (!p.job || p.job->empty() || !p.gpu) return;
  auto it = jobs_.find(*p.job);
  if (it == jobs_.end()) return;
  Segment* open = OpenSegmentLocked(it->second, r.node);
  if (!open) return;
  if (std::find(open->gpus.begin(), open->gpus.end(), *p.gpu) != open->gpus.end()) return;
  // The start did not list this GPU: the job's process uses it, counted from the start (the
  // process tier sees a process only once it has opened the GPU).
  open->gpus.push_back(*p.gpu);
  const NodeInfo& n = nodes_[r.node];
  auto m = n.models.find(*p.gpu);
  open->models.push_back(m == n.models.end() ? "" : m->second);
  holders_[{r.node, *p.gpu}] = it->first;
  PersistLocked(it->second);
}

void Ledger::AddNodeLocked(const trace::TraceRecord& r, const trace::TraceNode& n) {
  if (!n.gpus) return;
  NodeInfo& info = nodes_[r.node];
  bool changed = false;
  for (const auto& g : *n.gpus) {
    if (!g.index) continue;
    if (g.name && info.models[*g.index] != *g.name) {
      info.models[*g.index] = *g.name;
      changed = true;
    }
    if (g.power_limit_w && info.power_limit_w[*g.index] != *g.power_limit_w) {
      info.power_limit_w[*g.index] = *g.power_limit_w;
      changed = true;
    }
  }
  if (changed) PersistNodeLocked(r.node, info);
}

void Ledger::AddGpuLocked(const trace::TraceRecord& r, const trace::TraceGpu& g) {
  if (!g.gpu || g.mig) return;  // a MIG instance's share is its parent's time
  const GpuKey key{r.node, *g.gpu};
  auto prev = last_sample_ms_.find(key);
  int64_t dt_ms = 0;
  if (prev != last_sample_ms_.end()) {
    dt_ms = std::min(r.t_ms - prev->second, options_.max_sample_gap_ms);
    prev->second = std::max(prev->second, r.t_ms);
  } else {
    last_sample_ms_[key] = r.t_ms;
  }
  auto holder = holders_.find(key);
  if (holder == holders_.end() || dt_ms <= 0 || !g.util_pct) return;
  auto job = jobs_.find(holder->second);
  if (job == jobs_.end()) return;
  const double dt_s = static_cast<double>(dt_ms) / 1000;
  Usage& u = job->second.usage_by_hour[HourOf(r.t_ms)];
  u.measured_gpu_s += dt_s;
  const double util = *g.util_pct;
  if (util < options_.idle_util_pct) {
    u.idle_gpu_s += dt_s;
  } else if (util >= options_.busy_util_pct) {
    // Busy-waiting: NVML's utilisation is the share of time *a* kernel ran, so one spinning
    // kernel reads 100 % (nvmlUtilization_t docs). A hung collective reads 100 % at 70-150 W
    // of 700 W (NVIDIA/nccl#968, #1550; NeMo#9291: "100W/700W (500-690W is normal)").
    // Memory quiet where measured; and the SMs, or else the power, quiet: at least one of
    // them must be measured, else the sample is not judged.
    bool mem_quiet = true;
    if (g.mem_util_pct)
      mem_quiet = *g.mem_util_pct <= options_.quiet_mem_util_pct;
    else if (g.dram_active)
      mem_quiet = *g.dram_active <= options_.quiet_mem_util_pct / 100;
    std::optional<bool> compute_quiet;
    if (g.sm_active) compute_quiet = *g.sm_active <= options_.quiet_sm_active;
    const NodeInfo& n = nodes_[r.node];
    auto limit = n.power_limit_w.find(*g.gpu);
    if (g.power_w && limit != n.power_limit_w.end() && limit->second > 0) {
      const bool power_quiet = *g.power_w <= options_.quiet_power_fraction * limit->second;
      compute_quiet = compute_quiet.value_or(true) && power_quiet;
    }
    if (mem_quiet && compute_quiet.value_or(false)) u.busywait_gpu_s += dt_s;
  }
  if (std::find(dirty_.begin(), dirty_.end(), job->first) == dirty_.end())
    dirty_.push_back(job->first);
}

void Ledger::PersistLocked(const JobEntry& e) {
  if (!wal_) return;
  const std::string payload = EntryJson(e).dump();
  if (Status s = wal_->Append(kJobEntryRecord, payload); !s.ok()) {
    GW_LOG_WARN("accounting: cannot log job {}: {}", e.job, s.message());
    return;
  }
  wal_bytes_ += payload.size() + 9;
}

void Ledger::PersistNodeLocked(const std::string& node, const NodeInfo& n) {
  if (!wal_) return;
  json models = json::object(), limits = json::object();
  for (const auto& [g, m] : n.models) models[std::to_string(g)] = m;
  for (const auto& [g, w] : n.power_limit_w) limits[std::to_string(g)] = w;
  const std::string payload = json{
      {"node", node},
      {"models", models},
      {"power_limit_w", limits},
      {"last_seen",
       n.last_seen_ms}}.dump();
  if (Status s = wal_->Append(kNodeRecord, payload); !s.ok()) {
    GW_LOG_WARN("accounting: cannot log node {}: {}", node, s.message());
    return;
  }
  wal_bytes_ += payload.size() + 9;
}

Status Ledger::Checkpoint(int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : dirty_) {
    auto it = jobs_.find(id);
    if (it != jobs_.end()) PersistLocked(it->second);
  }
  dirty_.clear();
  if (!wal_) return Status::Ok();
  // Nodes' last-seen times bound open segments after a restart: logged with each checkpoint.
  for (const auto& [name, n] : nodes_) PersistNodeLocked(name, n);
  if (Status s = wal_->Sync(); !s.ok()) return s;
  if (wal_bytes_ > 4 * live_bytes_estimate_ + (1u << 20)) return CompactLocked(now_ms);
  return Status::Ok();
}

Status Ledger::CompactLocked(int64_t now_ms) {
  // Retention: a job whose last attempt ended before it is forgotten (its GPUs are long free).
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const JobEntry& e = it->second;
    const bool old = !e.attempts.empty() && !e.attempts.back().open() &&
                     e.attempts.back().end_ms() < now_ms - options_.retention_ms;
    it = old ? jobs_.erase(it) : std::next(it);
  }
  // A new segment with everything live, then the old ones go. A crash in between replays the
  // old and the new: each job's last entry is the same state either way.
  auto first = wal_->Rotate();
  if (!first.ok()) return first.status();
  wal_bytes_ = 0;
  for (const auto& [id, e] : jobs_) PersistLocked(e);
  for (const auto& [name, n] : nodes_) PersistNodeLocked(name, n);
  live_bytes_estimate_ = wal_bytes_;
  if (Status s = wal_->Sync(); !s.ok()) return s;
  return wal_->TruncateBefore(wal_->current_segment());
}

double Ledger::PriceLocked(const std::string& model) const {
  const std::string lower = ToLower(model);
  double price = -1;
  size_t best = 0;
  for (const Price& p : options_.prices) {
    if (p.model == "*") {
      if (best == 0 && price < 0) price = p.usd_per_gpu_hour;
      continue;
    }
    if (!model.empty() && lower.find(ToLower(p.model)) != std::string::npos &&
        p.model.size() > best) {
      best = p.model.size();
      price = p.usd_per_gpu_hour;
    }
  }
  return price;
}

int64_t Ledger::EffectiveEndLocked(const Segment& s) const {
  if (s.end_ms >= 0) return s.end_ms;
  auto n = nodes_.find(s.node);
  return std::max(s.start_ms, n == nodes_.end() ? s.start_ms : n->second.last_seen_ms);
}

std::vector<ReportRow> Ledger::Report(const ReportQuery& q) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, ReportRow> rows;
  for (const auto& [id, e] : jobs_) {
    if (!q.projects.empty() &&
        std::find(q.projects.begin(), q.projects.end(), e.project) == q.projects.end())
      continue;
    std::string key;
    switch (q.by) {
      case GroupBy::kUser:
        key = e.user;
        break;
      case GroupBy::kProject:
        key = e.project;
        break;
      case GroupBy::kTemplate:
        key = e.template_name;
        break;
      case GroupBy::kJob:
        key = e.job;
        break;
    }
    if (key.empty()) key = "(unknown)";
    bool any = false;
    ReportRow add;
    for (size_t i = 0; i < e.attempts.size(); ++i) {
      const Attempt& a = e.attempts[i];
      int64_t end = a.start_ms;
      for (const Segment& s : a.segments) end = std::max(end, EffectiveEndLocked(s));
      const bool open = a.open();
      // An attempt counts when it overlaps the window (a running one reaches its nodes' last
      // records) or starts inside it.
      if (a.start_ms > q.until_ms || (end <= q.since_ms && a.start_ms < q.since_ms)) continue;
      any = true;
      ++add.attempts;
      if (i > 0) ++add.reruns;
      if (open) {
        ++add.running;
      } else if (end <= q.until_ms) {
        auto code = a.exit_code();
        if (!code)
          ++add.ended_unknown;
        else if (*code == 0)
          ++add.succeeded;
        else
          ++add.failed;
      }
      if (a.queued_ms >= 0 && a.start_ms >= q.since_ms && a.start_ms <= q.until_ms) {
        const double wait_s = static_cast<double>(a.start_ms - a.queued_ms) / 1000;
        ++add.queue_waits;
        add.queue_wait_s_sum += wait_s;
        add.queue_wait_s_max = std::max(add.queue_wait_s_max, wait_s);
      }
      for (const Segment& s : a.segments) {
        const double hours = static_cast<double>(OverlapMs(s.start_ms, EffectiveEndLocked(s),
                                                           q.since_ms, q.until_ms)) /
                             kHourMs;
        for (size_t g = 0; g < s.gpus.size(); ++g) {
          add.gpu_hours += hours;
          std::string model = g < s.models.size() ? s.models[g] : "";
          if (model.empty()) {
            auto n = nodes_.find(s.node);
            if (n != nodes_.end()) {
              auto m = n->second.models.find(s.gpus[g]);
              if (m != n->second.models.end()) model = m->second;
            }
          }
          const double price = PriceLocked(model);
          if (price < 0)
            add.unpriced_gpu_hours += hours;
          else
            add.cost_usd += hours * price;
        }
      }
    }
    if (!any) continue;
    // Usage tallies are hourly: an hour counts when it starts inside the window.
    for (auto it = e.usage_by_hour.lower_bound(HourOf(q.since_ms));
         it != e.usage_by_hour.end() && it->first <= q.until_ms; ++it) {
      add.measured_gpu_hours += it->second.measured_gpu_s / 3600;
      add.idle_gpu_hours += it->second.idle_gpu_s / 3600;
      add.busywait_gpu_hours += it->second.busywait_gpu_s / 3600;
    }
    ReportRow& row = rows[key];
    row.key = key;
    ++row.jobs;
    row.attempts += add.attempts;
    row.reruns += add.reruns;
    row.succeeded += add.succeeded;
    row.failed += add.failed;
    row.ended_unknown += add.ended_unknown;
    row.running += add.running;
    row.gpu_hours += add.gpu_hours;
    row.measured_gpu_hours += add.measured_gpu_hours;
    row.idle_gpu_hours += add.idle_gpu_hours;
    row.busywait_gpu_hours += add.busywait_gpu_hours;
    row.queue_waits += add.queue_waits;
    row.queue_wait_s_sum += add.queue_wait_s_sum;
    row.queue_wait_s_max = std::max(row.queue_wait_s_max, add.queue_wait_s_max);
    row.cost_usd += add.cost_usd;
    row.unpriced_gpu_hours += add.unpriced_gpu_hours;
    if (q.by == GroupBy::kJob) {
      row.user = e.user;
      row.project = e.project;
      row.template_name = e.template_name;
      const Attempt& last = e.attempts.back();
      row.start_ms = e.attempts.front().start_ms;
      row.end_ms = last.end_ms();
      auto code = last.exit_code();
      row.state = last.open() ? "running" : !code ? "ended" : *code == 0 ? "succeeded" : "failed";
    }
  }
  std::vector<ReportRow> out;
  out.reserve(rows.size());
  for (auto& [k, r] : rows) out.push_back(std::move(r));
  // Largest users of GPU time first; the key breaks ties so the order is stable.
  std::stable_sort(out.begin(), out.end(), [](const ReportRow& a, const ReportRow& b) {
    return a.gpu_hours > b.gpu_hours;
  });
  return out;
}

std::vector<QuotaStatus> Ledger::Quotas(int64_t now_ms) const {
  std::vector<QuotaStatus> out;
  for (const Quota& quota : options_.quotas) {
    ReportQuery q;
    q.by = GroupBy::kProject;
    q.projects = {quota.project};
    q.since_ms = now_ms - quota.period_ms;
    q.until_ms = now_ms;
    QuotaStatus s;
    s.quota = quota;
    for (const ReportRow& r : Report(q)) s.used_gpu_hours += r.gpu_hours;
    s.state = s.used_gpu_hours >= quota.gpu_hours                                  ? "exceeded"
              : s.used_gpu_hours >= options_.quota_warn_fraction * quota.gpu_hours ? "warning"
                                                                                   : "ok";
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<JobEntry> Ledger::Job(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Ledger::JobsOfProjects(const std::vector<std::string>& projects) const {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, e] : jobs_)
    if (std::find(projects.begin(), projects.end(), e.project) != projects.end()) out.push_back(id);
  return out;
}

std::vector<Segment> Ledger::SegmentsOf(const std::set<std::string>& jobs) const {
  std::vector<Segment> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : jobs) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    for (const Attempt& a : it->second.attempts)
      out.insert(out.end(), a.segments.begin(), a.segments.end());
  }
  return out;
}

namespace {

// Slurm's JobIDRaw, or an array task (JobID "123_4"): what `sacct -j` takes.
bool SlurmJobId(std::string_view id) {
  if (id.empty() || id.size() > 32 || !std::isdigit(static_cast<unsigned char>(id.front())) ||
      !std::isdigit(static_cast<unsigned char>(id.back())))
    return false;
  int underscores = 0;
  for (char c : id) {
    if (c == '_') {
      ++underscores;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return underscores <= 1;
}

}  // namespace

std::vector<std::string> Ledger::JobsWithoutQueueWait(size_t max,
                                                      const std::set<std::string>& skip) const {
  std::vector<std::pair<int64_t, std::string>> found;  // (latest such start, job)
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : jobs_) {
      if (!SlurmJobId(id) || skip.count(id)) continue;
      int64_t latest = -1;
      for (const Attempt& a : e.attempts)
        if (a.queued_ms < 0) latest = std::max(latest, a.start_ms);
      if (latest >= 0) found.emplace_back(latest, id);
    }
  }
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<std::string> out;
  for (size_t i = 0; i < found.size() && i < max; ++i) out.push_back(std::move(found[i].second));
  return out;
}

bool Ledger::SetSubmitTime(const std::string& job, int64_t submit_ms, int64_t start_ms) {
  constexpr int64_t kMaxGapMs = 3600'000;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return false;
  Attempt* best = nullptr;
  for (Attempt& a : it->second.attempts) {
    if (a.queued_ms >= 0 || std::llabs(a.start_ms - start_ms) > kMaxGapMs) continue;
    if (!best || std::llabs(a.start_ms - start_ms) < std::llabs(best->start_ms - start_ms))
      best = &a;
  }
  if (!best || submit_ms > best->start_ms) return false;
  best->queued_ms = submit_ms;
  PersistLocked(it->second);
  return true;
}

LedgerStats Ledger::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  LedgerStats s = stats_;
  s.jobs = jobs_.size();
  return s;
}

int64_t Ledger::newest_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return newest_ms_;
}

}  // namespace gpuwatch::accounting
