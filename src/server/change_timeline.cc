#include "server/change_timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "common/file_io.h"
#include "common/strings.h"

namespace gpuwatch::server {
namespace {

using json = nlohmann::json;
using sv = std::string_view;

// On-disk: the "format" member of both documents. A reader refuses a format it does not know.
constexpr int kNodeFactsFormat = 1;
constexpr int kNcclVersionsFormat = 1;
// Both files are a few KiB (1024 templates and jobs: well under 1 MiB); anything this large is
// not one of them.
constexpr size_t kMaxFileBytes = 16u << 20;

std::string Dump(const json& j) {
  // Strings from the driver or a job's log need not be UTF-8: replace, never throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The file's text; nullopt when it does not exist.
Result<std::optional<std::string>> ReadStateFile(const std::string& path) {
  FileReadResult r = ReadSmallFile(path, kMaxFileBytes + 1);
  if (!r.ok) {
    if (r.err == ENOENT) return std::optional<std::string>();
    return ErrnoStatus("read " + path, r.err);
  }
  if (r.data.size() > kMaxFileBytes) {
    return Status::Corruption(path + ": larger than " + std::to_string(kMaxFileBytes) + " bytes");
  }
  return std::optional<std::string>(std::move(r.data));
}

// What is wrong with a document (thrown while reading it, caught in CatchingCorruption).
struct Damaged {
  std::string what;
};

// Parses a JSON object whose "format" is `format`; throws json::exception or Damaged.
json ParseDocument(sv text, int format) {
  json j = json::parse(text);
  if (!j.is_object()) throw Damaged("not a JSON object");
  const auto f = j.find("format");
  if (f == j.end() || !f->is_number_integer()) throw Damaged("no \"format\" member");
  if (f->get<int64_t>() != format) {
    throw Damaged("format " + f->dump() + " (this build reads format " + std::to_string(format) +
                  ")");
  }
  return j;
}

// An optional string member: "" when absent.
std::string OptString(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (!it->is_string()) throw Damaged(std::string("\"") + key + "\" is not a string");
  return it->get<std::string>();
}

template <typename Fn>
auto CatchingCorruption(const std::string& what, Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const json::exception& e) {
    return Status::Corruption(what + ": " + e.what());
  } catch (const Damaged& d) {
    return Status::Corruption(what + ": " + d.what);
  }
}

// ---- the diff ----

ChangeEvent Event(std::string kind, std::string severity, std::string message, const json& f) {
  ChangeEvent e;
  e.kind = std::move(kind);
  e.severity = std::move(severity);
  e.message = std::move(message);
  e.fields_json = Dump(f);
  return e;
}

// A scalar fact that is known on both sides and differs.
bool Changed(const std::string& a, const std::string& b) {
  return !a.empty() && !b.empty() && a != b;
}

void DiffScalar(const std::string& from, const std::string& to, const char* kind, const char* what,
                const std::string& message, std::vector<ChangeEvent>* out) {
  if (!Changed(from, to)) return;
  out->push_back(Event(kind, "info", message, {{"what", what}, {"from", from}, {"to", to}}));
}

// "NVIDIA H100 80GB HBM3 GPU-1c6f… at 00000000:18:00.0", leaving out what is unknown.
std::string Describe(const GpuFacts& g) {
  std::string s = g.name;
  if (!g.uuid.empty()) s += (s.empty() ? "" : " ") + g.uuid;
  if (!g.pci_bus_id.empty()) s += (s.empty() ? "at " : " at ") + g.pci_bus_id;
  return s.empty() ? "unidentified GPU" : s;
}

std::string Where(const GpuFacts& g) {
  std::string s = "GPU " + std::to_string(g.index);
  if (!g.pci_bus_id.empty()) s += " at " + g.pci_bus_id;
  return s;
}

// Per-GPU events sort by index, then in this order.
enum GpuChangeOrder { kRemoved, kReplaced, kAdded, kMoved, kMig, kVbios };

struct GpuChange {
  unsigned index;
  GpuChangeOrder order;
  ChangeEvent event;
};

ChangeEvent GpuEvent(const char* kind, const char* severity, std::string message, json f,
                     const GpuFacts& g) {
  f["gpu"] = g.index;
  if (!g.uuid.empty()) f["uuid"] = g.uuid;
  ChangeEvent e = Event(kind, severity, std::move(message), f);
  e.gpu_index = g.index;
  e.gpu_uuid = g.uuid;
  return e;
}

json Identity(const GpuFacts& g) { return {{"name", g.name}, {"pci_bus_id", g.pci_bus_id}}; }

// The same card (or one whose UUID is unknown on a side) before and after.
void DiffSameGpu(const GpuFacts& b, const GpuFacts& a, std::vector<GpuChange>* out) {
  if (b.index != a.index || Changed(b.pci_bus_id, a.pci_bus_id)) {
    json f = {{"what", "gpu_moved"},
              {"from_index", b.index},
              {"to_index", a.index},
              {"from", b.pci_bus_id},
              {"to", a.pci_bus_id}};
    std::string what = a.name;
    if (!a.uuid.empty()) what += (what.empty() ? "" : " ") + a.uuid;
    if (what.empty()) what = "the card";
    out->push_back({a.index, kMoved,
                    GpuEvent("topology_change", "warning",
                             "GPU " + std::to_string(a.index) + " moved: " + what + " was " +
                                 Where(b) + ", is " + Where(a),
                             f, a)});
  }
  if (b.mig_enabled != a.mig_enabled) {
    const char* from = b.mig_enabled ? "enabled" : "disabled";
    const char* to = a.mig_enabled ? "enabled" : "disabled";
    out->push_back({a.index, kMig,
                    GpuEvent("topology_change", "warning",
                             "GPU " + std::to_string(a.index) + " MIG mode " + to,
                             {{"what", "mig"}, {"from", from}, {"to", to}}, a)});
  }
  if (Changed(b.vbios_version, a.vbios_version)) {
    out->push_back(
        {a.index, kVbios,
         GpuEvent("driver_change", "info",
                  "GPU " + std::to_string(a.index) + " VBIOS " + b.vbios_version + " -> " +
                      a.vbios_version,
                  {{"what", "vbios"}, {"from", b.vbios_version}, {"to", a.vbios_version}}, a)});
  }
}

void DiffGpus(const std::vector<GpuFacts>& before, const std::vector<GpuFacts>& after,
              std::vector<ChangeEvent>* out) {
  if (before.size() != after.size()) {
    out->push_back(
        Event("topology_change", "warning",
              "GPU count " + std::to_string(before.size()) + " -> " + std::to_string(after.size()),
              {{"what", "gpu_count"}, {"from", before.size()}, {"to", after.size()}}));
  }
  std::vector<int> match(before.size(), -1);  // before[i] pairs with after[match[i]]
  std::vector<bool> taken(after.size(), false);
  // Pass 0: the same UUID (the same card, wherever it is now); 1: the same PCI address; 2: the
  // same index. Passes 1 and 2 pair a card that left with one that came: a swap.
  auto key = [](const GpuFacts& g, int pass) -> std::string {
    if (pass == 0) return g.uuid;
    if (pass == 1) return g.pci_bus_id;
    return "#" + std::to_string(g.index);
  };
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i = 0; i < before.size(); ++i) {
      if (match[i] >= 0) continue;
      const std::string k = key(before[i], pass);
      if (k.empty()) continue;
      for (size_t j = 0; j < after.size(); ++j) {
        if (!taken[j] && key(after[j], pass) == k) {
          match[i] = static_cast<int>(j);
          taken[j] = true;
          break;
        }
      }
    }
  }
  std::vector<GpuChange> changes;
  for (size_t i = 0; i < before.size(); ++i) {
    const GpuFacts& b = before[i];
    if (match[i] < 0) {
      json f = Identity(b);
      f["what"] = "gpu_removed";
      changes.push_back(
          {b.index, kRemoved,
           GpuEvent("topology_change", "warning",
                    "GPU " + std::to_string(b.index) + " removed: " + Describe(b), f, b)});
      continue;
    }
    const GpuFacts& a = after[static_cast<size_t>(match[i])];
    if (Changed(b.uuid, a.uuid)) {
      json f = Identity(a);
      f["what"] = "gpu_replaced";
      f["from"] = b.uuid;
      f["to"] = a.uuid;
      changes.push_back({a.index, kReplaced,
                         GpuEvent("topology_change", "warning",
                                  "GPU " + std::to_string(a.index) + " replaced: " + Describe(b) +
                                      " -> " + Describe(a),
                                  f, a)});
    } else {
      DiffSameGpu(b, a, &changes);
    }
  }
  for (size_t j = 0; j < after.size(); ++j) {
    if (taken[j]) continue;
    const GpuFacts& a = after[j];
    json f = Identity(a);
    f["what"] = "gpu_added";
    changes.push_back(
        {a.index, kAdded,
         GpuEvent("topology_change", "warning",
                  "GPU " + std::to_string(a.index) + " added: " + Describe(a), f, a)});
  }
  std::stable_sort(changes.begin(), changes.end(), [](const GpuChange& x, const GpuChange& y) {
    return std::tie(x.index, x.order) < std::tie(y.index, y.order);
  });
  for (auto& c : changes) out->push_back(std::move(c.event));
}

std::string Plural(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

// ---- facts ----

std::string ConfigHash(std::string_view config_text) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(Fnv1a64(config_text)));
  return buf;
}

GpuFacts GpuFactsFrom(const model::GpuStaticInfo& info) {
  GpuFacts g;
  g.index = info.index;
  g.uuid = info.uuid;
  g.name = info.name;
  g.pci_bus_id = info.pci_bus_id;
  g.vbios_version = info.vbios_version;
  g.mig_enabled = info.mig_enabled;
  return g;
}

NodeFacts NodeFactsFrom(const model::SystemInfo& system,
                        const std::vector<model::GpuStaticInfo>& gpus, std::string agent_version,
                        std::string_view config_text, std::string kernel_release) {
  NodeFacts f;
  f.driver_version = system.driver_version;
  f.cuda_version = system.cuda_driver_version;
  f.nvml_version = system.nvml_version;
  f.kernel_release = std::move(kernel_release);
  f.agent_version = std::move(agent_version);
  f.config_hash = ConfigHash(config_text);
  f.gpus_known = true;
  for (const auto& g : gpus) f.gpus.push_back(GpuFactsFrom(g));
  std::sort(f.gpus.begin(), f.gpus.end(),
            [](const GpuFacts& a, const GpuFacts& b) { return a.index < b.index; });
  return f;
}

NodeFacts FillUnknownFrom(const NodeFacts& previous, NodeFacts current) {
  auto fill = [](std::string& cur, const std::string& prev) {
    if (cur.empty()) cur = prev;
  };
  fill(current.driver_version, previous.driver_version);
  fill(current.cuda_version, previous.cuda_version);
  fill(current.nvml_version, previous.nvml_version);
  fill(current.kernel_release, previous.kernel_release);
  fill(current.agent_version, previous.agent_version);
  fill(current.config_hash, previous.config_hash);
  if (!current.gpus_known && previous.gpus_known) {
    current.gpus_known = true;
    current.gpus = previous.gpus;
  }
  return current;
}

std::string NodeFactsToJson(const NodeFacts& facts) {
  json j = {{"format", kNodeFactsFormat},
            {"driver_version", facts.driver_version},
            {"cuda_version", facts.cuda_version},
            {"nvml_version", facts.nvml_version},
            {"kernel_release", facts.kernel_release},
            {"agent_version", facts.agent_version},
            {"config_hash", facts.config_hash}};
  if (facts.gpus_known) {
    json gpus = json::array();
    for (const auto& g : facts.gpus) {
      gpus.push_back({{"index", g.index},
                      {"uuid", g.uuid},
                      {"name", g.name},
                      {"pci_bus_id", g.pci_bus_id},
                      {"vbios_version", g.vbios_version},
                      {"mig_enabled", g.mig_enabled}});
    }
    j["gpus"] = std::move(gpus);
  }
  return Dump(j) + "\n";
}

Result<NodeFacts> NodeFactsFromJson(std::string_view text, const std::string& what) {
  return CatchingCorruption(what, [&]() -> Result<NodeFacts> {
    const json j = ParseDocument(text, kNodeFactsFormat);
    NodeFacts f;
    f.driver_version = OptString(j, "driver_version");
    f.cuda_version = OptString(j, "cuda_version");
    f.nvml_version = OptString(j, "nvml_version");
    f.kernel_release = OptString(j, "kernel_release");
    f.agent_version = OptString(j, "agent_version");
    f.config_hash = OptString(j, "config_hash");
    const auto gpus = j.find("gpus");
    if (gpus != j.end() && !gpus->is_null()) {
      if (!gpus->is_array()) throw Damaged("\"gpus\" is not an array");
      f.gpus_known = true;
      std::set<unsigned> seen;
      for (const json& g : *gpus) {
        if (!g.is_object()) throw Damaged("a GPU is not a JSON object");
        const auto index = g.find("index");
        if (index == g.end() || !index->is_number_unsigned() ||
            index->get<uint64_t>() > std::numeric_limits<unsigned>::max()) {
          throw Damaged("a GPU has no \"index\"");
        }
        GpuFacts gf;
        gf.index = index->get<unsigned>();
        if (!seen.insert(gf.index).second) {
          throw Damaged("GPU " + std::to_string(gf.index) + " is listed twice");
        }
        gf.uuid = OptString(g, "uuid");
        gf.name = OptString(g, "name");
        gf.pci_bus_id = OptString(g, "pci_bus_id");
        gf.vbios_version = OptString(g, "vbios_version");
        const auto mig = g.find("mig_enabled");
        if (mig != g.end()) {
          if (!mig->is_boolean()) throw Damaged("\"mig_enabled\" is not a boolean");
          gf.mig_enabled = mig->get<bool>();
        }
        f.gpus.push_back(std::move(gf));
      }
      std::sort(f.gpus.begin(), f.gpus.end(),
                [](const GpuFacts& a, const GpuFacts& b) { return a.index < b.index; });
    }
    return f;
  });
}

Result<std::optional<NodeFacts>> LoadNodeFacts(const std::string& path) {
  auto text = ReadStateFile(path);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return std::optional<NodeFacts>();
  auto facts = NodeFactsFromJson(**text, path);
  if (!facts.ok()) return facts.status();
  return std::optional<NodeFacts>(std::move(facts).value());
}

Status SaveNodeFacts(const std::string& path, const NodeFacts& facts) {
  return WriteFileAtomically(path, NodeFactsToJson(facts));
}

// ---- the diff ----

std::vector<ChangeEvent> DiffNodeFacts(const NodeFacts& before, const NodeFacts& after) {
  std::vector<ChangeEvent> out;
  const bool driver_changed = Changed(before.driver_version, after.driver_version);
  DiffScalar(before.driver_version, after.driver_version, "driver_change", "driver",
             "driver " + before.driver_version + " -> " + after.driver_version, &out);
  DiffScalar(before.cuda_version, after.cuda_version, "driver_change", "cuda",
             "CUDA " + before.cuda_version + " -> " + after.cuda_version +
                 " (the CUDA version the driver supports)",
             &out);
  if (!driver_changed) {
    DiffScalar(before.nvml_version, after.nvml_version, "driver_change", "nvml",
               "NVML " + before.nvml_version + " -> " + after.nvml_version, &out);
  }
  DiffScalar(before.kernel_release, after.kernel_release, "driver_change", "kernel",
             "kernel " + before.kernel_release + " -> " + after.kernel_release, &out);
  if (before.gpus_known && after.gpus_known) DiffGpus(before.gpus, after.gpus, &out);
  DiffScalar(before.config_hash, after.config_hash, "config_change", "config",
             "configuration changed (hash " + before.config_hash + " -> " + after.config_hash + ")",
             &out);
  DiffScalar(before.agent_version, after.agent_version, "config_change", "agent",
             "gpuwatch " + before.agent_version + " -> " + after.agent_version, &out);
  return out;
}

store::EventRecord ToEventRecord(const ChangeEvent& e, int64_t t_ms, const std::string& node,
                                 const std::string& job) {
  store::EventRecord r;
  r.t_ms = std::max<int64_t>(0, t_ms);
  r.kind = e.kind;
  r.severity = e.severity;
  r.node = node.substr(0, store::kMaxEventIdBytes);
  r.gpu = e.gpu_uuid.substr(0, store::kMaxEventIdBytes);
  r.job = job.substr(0, store::kMaxEventIdBytes);
  r.message = e.message.substr(0, store::kMaxEventMessageBytes);
  r.fields_json = e.fields_json.size() <= store::kMaxEventFieldsBytes ? e.fields_json : "";
  return r;
}

// ---- NCCL ----

NcclVersionTracker::NcclVersionTracker(size_t max_templates, size_t max_jobs)
    : max_templates_(std::max<size_t>(1, max_templates)),
      max_jobs_(std::max<size_t>(1, max_jobs)) {}

void NcclVersionTracker::TouchTemplate(const std::string& name, TemplateEntry& e) {
  if (e.used != 0) template_lru_.erase(e.used);
  e.used = ++clock_;
  template_lru_.emplace(e.used, name);
}

void NcclVersionTracker::TouchJob(const std::string& job, JobEntry& e) {
  if (e.used != 0) job_lru_.erase(e.used);
  e.used = ++clock_;
  job_lru_.emplace(e.used, job);
}

void NcclVersionTracker::Bound() {
  while (templates_.size() > max_templates_) {
    templates_.erase(template_lru_.begin()->second);
    template_lru_.erase(template_lru_.begin());
  }
  while (jobs_.size() > max_jobs_) {
    jobs_.erase(job_lru_.begin()->second);
    job_lru_.erase(job_lru_.begin());
  }
}

std::optional<ChangeEvent> NcclVersionTracker::Observe(const std::string& template_name,
                                                       const std::string& job,
                                                       const std::string& version) {
  if (version.empty()) return std::nullopt;
  const std::string job_words = job.empty() ? "a job" : "job " + job;
  if (!job.empty()) {
    auto it = jobs_.find(job);
    if (it != jobs_.end()) {
      // A further rank of a job already seen: only the job's own consistency is in question.
      JobEntry& je = it->second;
      TouchJob(job, je);
      if (je.template_name.empty()) je.template_name = template_name;
      if (je.versions[version]++ != 0) return std::nullopt;
      std::string list;
      json counts = json::object();
      for (const auto& [v, n] : je.versions) {
        list += (list.empty() ? "" : ", ") + v + " on " + Plural(n, "rank", "ranks");
        counts[v] = n;
      }
      const std::string of = je.template_name.empty() ? "" : " (template " + je.template_name + ")";
      return Event("driver_change", "warning",
                   "ranks of " + job_words + of + " run different NCCL versions: " + list,
                   {{"what", "nccl_mismatch"},
                    {"job", job},
                    {"template", je.template_name},
                    {"versions", counts}});
    }
    JobEntry& je = jobs_[job];
    je.template_name = template_name;
    je.versions[version] = 1;
    TouchJob(job, je);
  }
  std::optional<ChangeEvent> out;
  if (!template_name.empty()) {
    auto [it, inserted] = templates_.try_emplace(template_name);
    TemplateEntry& te = it->second;
    if (!inserted && te.version != version) {
      out = Event("driver_change", "info",
                  job_words + " (template " + template_name + ") runs NCCL " + version +
                      ", the previous job of this template ran " + te.version,
                  {{"what", "nccl"},
                   {"from", te.version},
                   {"to", version},
                   {"job", job},
                   {"template", template_name},
                   {"previous_job", te.job}});
    }
    te.version = version;
    te.job = job;
    TouchTemplate(template_name, te);
  }
  Bound();
  return out;
}

void NcclVersionTracker::ForgetJob(const std::string& job) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  job_lru_.erase(it->second.used);
  jobs_.erase(it);
}

std::optional<std::string> NcclVersionTracker::TemplateVersion(
    const std::string& template_name) const {
  auto it = templates_.find(template_name);
  if (it == templates_.end()) return std::nullopt;
  return it->second.version;
}

std::map<std::string, size_t> NcclVersionTracker::JobVersions(const std::string& job) const {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return {};
  return it->second.versions;
}

std::string NcclVersionTracker::ToJson() const {
  json templates = json::array();
  for (const auto& [used, name] : template_lru_) {  // least recently seen first
    const TemplateEntry& e = templates_.at(name);
    templates.push_back({{"template", name}, {"nccl", e.version}, {"job", e.job}});
  }
  json jobs = json::array();
  for (const auto& [used, name] : job_lru_) {
    const JobEntry& e = jobs_.at(name);
    json versions = json::object();
    for (const auto& [v, n] : e.versions) versions[v] = n;
    jobs.push_back({{"job", name}, {"template", e.template_name}, {"versions", versions}});
  }
  return Dump({{"format", kNcclVersionsFormat}, {"templates", templates}, {"jobs", jobs}}) + "\n";
}

Result<NcclVersionTracker> NcclVersionTracker::FromJson(std::string_view text,
                                                        const std::string& what,
                                                        size_t max_templates, size_t max_jobs) {
  return CatchingCorruption(what, [&]() -> Result<NcclVersionTracker> {
    const json j = ParseDocument(text, kNcclVersionsFormat);
    NcclVersionTracker t(max_templates, max_jobs);
    auto array = [&](const char* key) -> const json& {
      static const json kEmpty = json::array();
      const auto it = j.find(key);
      if (it == j.end()) return kEmpty;
      if (!it->is_array()) throw Damaged(std::string("\"") + key + "\" is not an array");
      return *it;
    };
    // Oldest first: replaying in order rebuilds the LRU order, and the bound keeps the newest.
    for (const json& e : array("templates")) {
      if (!e.is_object()) throw Damaged("a template entry is not a JSON object");
      const std::string name = OptString(e, "template");
      const std::string version = OptString(e, "nccl");
      if (name.empty() || version.empty()) {
        throw Damaged("a template entry without \"template\" or \"nccl\"");
      }
      TemplateEntry& te = t.templates_[name];
      te.version = version;
      te.job = OptString(e, "job");
      t.TouchTemplate(name, te);
    }
    for (const json& e : array("jobs")) {
      if (!e.is_object()) throw Damaged("a job entry is not a JSON object");
      const std::string name = OptString(e, "job");
      if (name.empty()) throw Damaged("a job entry without \"job\"");
      JobEntry& je = t.jobs_[name];
      je.template_name = OptString(e, "template");
      const auto versions = e.find("versions");
      if (versions == e.end() || !versions->is_object()) {
        throw Damaged("job " + name + " has no \"versions\" object");
      }
      for (const auto& [v, n] : versions->items()) {
        if (v.empty() || !n.is_number_unsigned() || n.get<size_t>() == 0) {
          throw Damaged("job " + name + " has a bad version count");
        }
        je.versions[v] = n.get<size_t>();
      }
      t.TouchJob(name, je);
    }
    t.Bound();
    return t;
  });
}

Status SaveNcclVersions(const std::string& path, const NcclVersionTracker& tracker) {
  return WriteFileAtomically(path, tracker.ToJson());
}

Result<std::optional<NcclVersionTracker>> LoadNcclVersions(const std::string& path) {
  auto text = ReadStateFile(path);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return std::optional<NcclVersionTracker>();
  auto tracker = NcclVersionTracker::FromJson(**text, path);
  if (!tracker.ok()) return tracker.status();
  return std::optional<NcclVersionTracker>(std::move(tracker).value());
}

}  // namespace gpuwatch::server
