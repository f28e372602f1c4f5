// The change timeline (R21): what changed on a node — driver, CUDA, NVML, kernel, the GPU set,
// the agent's configuration and version, and the NCCL version a job runs — as events on the
// same axis as everything else, so a regression can be traced to what changed.
//
// The agent records NodeFacts in `<data-dir>/node-facts.json` (SaveNodeFacts). At start it
// loads the previous facts, diffs them against what it sees now (DiffNodeFacts) and stores the
// events; a missing or damaged file is a first start (no events) and is overwritten. NCCL
// versions come from jobs' NCCL_DEBUG=INFO banners (ParseNcclVersionLine) and are remembered
// per job template by NcclVersionTracker, persisted in its own file,
// `<data-dir>/nccl-versions.json` (SaveNcclVersions): it changes with every job, node facts only
// when the node does. Both formats: docs/format/node-facts.md.
//
// Event kinds are the trace format's (driver_change, config_change, topology_change); the
// "what" member of fields_json says which fact changed.
//
// Thread-safety: the free functions are pure or touch only the file they are given; a
// NcclVersionTracker is not thread-safe (its owner serializes calls).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "model/gpu.h"
#include "nccl/nccl_log.h"
#include "store/event_store.h"

namespace gpuwatch::server {

// What identifies one GPU; a change of any of it is an event.
struct GpuFacts {
  unsigned index = 0;         // NVML enumeration index
  std::string uuid;           // "" unknown
  std::string name;           // "" unknown
  std::string pci_bus_id;     // "" unknown
  std::string vbios_version;  // "" unknown
  bool mig_enabled = false;

  bool operator==(const GpuFacts&) const = default;
};

// What the agent knows about its node. An empty string is "unknown" (NVML did not start, a
// file could not be read): DiffNodeFacts never reports a change from or to unknown.
struct NodeFacts {
  std::string driver_version;  // "550.90.07"
  std::string cuda_version;    // the driver's CUDA version, "12.4"
  std::string nvml_version;    // "12.550.90.07"
  std::string kernel_release;  // uname -r
  std::string agent_version;   // gpuwatch's own version
  std::string config_hash;     // ConfigHash() of the effective configuration
  // The GPU set, by index. Meaningful only when gpus_known (the GPU source started): a node
  // whose NVML failed to load has not lost its GPUs.
  bool gpus_known = false;
  std::vector<GpuFacts> gpus;

  bool operator==(const NodeFacts&) const = default;
};

// 16 lower-case hex digits of Fnv1a64 (common/strings.h) of config_text. The caller passes the
// effective configuration as text (the config file's contents and the flags, in a fixed order).
std::string ConfigHash(std::string_view config_text);

GpuFacts GpuFactsFrom(const model::GpuStaticInfo& info);
// The facts from the GPU source (gpus_known = true) and what the caller knows besides.
NodeFacts NodeFactsFrom(const model::SystemInfo& system,
                        const std::vector<model::GpuStaticInfo>& gpus, std::string agent_version,
                        std::string_view config_text, std::string kernel_release);
// `current` with each unknown fact (and an unknown GPU set) taken from `previous`: what to save
// after a start that could not learn everything, so the next start still sees what changed.
NodeFacts FillUnknownFrom(const NodeFacts& previous, NodeFacts current);

// JSON text (docs/format/node-facts.md), and back. FromJson: Corruption naming `what` (a file
// name) on anything that is not a node-facts document of a version this build reads.
std::string NodeFactsToJson(const NodeFacts& facts);
Result<NodeFacts> NodeFactsFromJson(std::string_view text, const std::string& what);

// nullopt when `path` does not exist; Corruption (naming the file) when it is damaged — the
// caller then treats the start as a first start and overwrites it; IoError when unreadable.
Result<std::optional<NodeFacts>> LoadNodeFacts(const std::string& path);
// Crash-safe: writes path + ".tmp", fsyncs it, renames it over `path` and fsyncs the
// directory. A failed write leaves the previous file as it was.
Status SaveNodeFacts(const std::string& path, const NodeFacts& facts);

// One change, ready for the event store or a trace `event` record.
struct ChangeEvent {
  std::string kind;         // driver_change | config_change | topology_change | maintenance_start |
                            // maintenance_end
  std::string severity;     // info | warning
  std::string message;      // in plain words: "driver 550.54.15 -> 550.90.07"
  std::string fields_json;  // {"what":…, …}: "what" names the fact (driver, cuda, gpu_added, …)
  std::optional<unsigned> gpu_index;  // set when the change concerns one GPU
  std::string gpu_uuid;               // that GPU's UUID where known, else ""

  bool operator==(const ChangeEvent&) const = default;
};

// Every change from `before` to `after`, in a fixed order: driver, CUDA, NVML (only when the
// driver did not change: a new driver brings a new NVML), kernel; then the GPU set (the count,
// then per GPU by index: removed, replaced, added, moved, MIG mode, VBIOS); then the
// configuration and the agent's version. GPUs are matched by UUID first, so a card that left the
// middle of the enumeration is one removal, not a cascade of replacements; an unmatched card is
// paired with the one that left the same PCI address, or else the same index ("replaced": a
// swapped card).
std::vector<ChangeEvent> DiffNodeFacts(const NodeFacts& before, const NodeFacts& after);

// The event as the event store keeps it. `node`: this host; the gpu index goes into the fields.
store::EventRecord ToEventRecord(const ChangeEvent& e, int64_t t_ms, const std::string& node,
                                 const std::string& job = "");

// One line's NCCL version banner: the NCCL module recognises it (nccl/nccl_log.h), for the
// whole-log analysis and for the live per-line tracker below alike.
using nccl::ParseNcclVersionLine;

// Remembers the NCCL version of the last job of each template (bounded: least recently seen
// templates are forgotten first) and the versions each recent job's ranks reported (bounded the
// same way), to report
//   - a template whose new job runs another NCCL than its previous job (what=nccl, info), and
//   - a job whose ranks report different versions (what=nccl_mismatch, warning; R12).
// One tracker sees one node's ranks; versions across the nodes of a job are compared where the
// events of all nodes meet. Not thread-safe.
class NcclVersionTracker {
 public:
  static constexpr size_t kDefaultMaxTemplates = 1024;
  static constexpr size_t kDefaultMaxJobs = 1024;

  explicit NcclVersionTracker(size_t max_templates = kDefaultMaxTemplates,
                              size_t max_jobs = kDefaultMaxJobs);

  // One rank of `job` (of `template_name`) reported `version`. An event when the job is new and
  // its template's previous job ran another version, or when the job's ranks now disagree (once
  // per newly seen version in the job); nothing the first time a template is seen, or when the
  // version is the same. An empty version is ignored; an empty template skips the template
  // comparison, an empty job the per-job count (each call is then a job of its own).
  std::optional<ChangeEvent> Observe(const std::string& template_name, const std::string& job,
                                     const std::string& version);
  // The job ended: its per-job counts are no longer needed.
  void ForgetJob(const std::string& job);

  std::optional<std::string> TemplateVersion(const std::string& template_name) const;
  // version -> ranks that reported it; empty for a job not (or no longer) tracked.
  std::map<std::string, size_t> JobVersions(const std::string& job) const;
  size_t templates() const { return templates_.size(); }
  size_t jobs() const { return jobs_.size(); }

  // docs/format/node-facts.md. FromJson: Corruption naming `what`; keeps the most recent
  // entries when the document holds more than the bounds.
  std::string ToJson() const;
  static Result<NcclVersionTracker> FromJson(std::string_view text, const std::string& what,
                                             size_t max_templates = kDefaultMaxTemplates,
                                             size_t max_jobs = kDefaultMaxJobs);

 private:
  struct TemplateEntry {
    std::string version;
    std::string job;  // the job that set it
    uint64_t used = 0;
  };
  struct JobEntry {
    std::string template_name;
    std::map<std::string, size_t> versions;
    uint64_t used = 0;
  };
  void TouchTemplate(const std::string& name, TemplateEntry& e);
  void TouchJob(const std::string& job, JobEntry& e);
  void Bound();

  size_t max_templates_, max_jobs_;
  uint64_t clock_ = 0;  // LRU order: a larger `used` is more recent
  std::map<std::string, TemplateEntry> templates_;
  std::map<uint64_t, std::string> template_lru_;
  std::map<std::string, JobEntry> jobs_;
  std::map<uint64_t, std::string> job_lru_;
};

// The tracker in its own file, crash-safe like SaveNodeFacts; Load: nullopt when missing,
// Corruption (naming the file) when damaged.
Status SaveNcclVersions(const std::string& path, const NcclVersionTracker& tracker);
Result<std::optional<NcclVersionTracker>> LoadNcclVersions(const std::string& path);

}  // namespace gpuwatch::server
