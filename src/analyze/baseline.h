// Job templates and baselines (issue 7, R13): what "normal" is for a kind of job on a kind of
// node, learned from a run's first stable window after warm-up, stored as versioned JSON files
// (exportable, importable), and compared run against run with a significance test.
//
// - A run is one job of a trace (../shared/spec/trace-format.md). Its template is the job's
//   `template` (the SDK's), else "job:<id>"; its shape is "<nodes>x<GPUs per node>x<model>".
// - Samples per run, after `warmup_s` from the job's first step, for `window_s` (learning) or
//   to the end (comparing): step_s (the step without its checkpoint blocking, from each node's
//   lowest rank), checkpoint_s (checkpoints only), data_wait_share, comm_share, samples_per_s;
//   per 10-s bucket over the job's GPUs: gpu_util_pct (mean), gpu_util_min_pct (the least busy
//   GPU), sm_active, temp_c, sm_clock_mhz, power_w, nvlink_mbs, pcie_mbs; per GPU: mem_peak_mib
//   and mem_growth_mib_per_step. Bucketing the card samples keeps a comparison's p-value from
//   counting one slow second ten times.
// - A summary keeps n, mean, median, p95, p99, min, max and up to kMaxSample values (evenly
//   thinned), so a stored baseline can itself be compared.
// - Compare: per metric, the medians, the shift, and a two-sided Mann–Whitney U test (normal
//   approximation with tie correction; no distribution assumed). A shift is reported as
//   significant when p < 0.01 and the medians differ by more than 2 %.
// - Store: <dir>/<template>/<shape>/v<N>.json, N from 1; learning or importing adds a version,
//   never rewrites one (files are written atomically). A baseline records the driver and the
//   time it was learned: one learned before the node's topology last changed
//   (`baselines_stale_before_ms` of /api/v1/topology) or on another driver is stale.
// Pure functions over records and files; no shared state.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trace/trace_reader.h"

namespace gpuwatch::analyze {

inline constexpr size_t kMaxSample = 2000;

struct MetricSummary {
  size_t n = 0;
  double mean = 0, median = 0, p95 = 0, p99 = 0, min = 0, max = 0;
  std::vector<double> sample;  // up to kMaxSample values, evenly thinned, in arrival order
};
MetricSummary Summarize(std::vector<double> values);

struct Baseline {
  std::string template_name, shape, job;
  int version = 0;            // assigned by the store
  std::string source;         // the trace it was learned from, or "import"
  int64_t learned_at_ms = 0;  // when the window ended (trace time)
  int64_t window_from_ms = 0, window_to_ms = 0;
  std::string driver_version;
  std::map<std::string, MetricSummary> metrics;
};

nlohmann::json BaselineToJson(const Baseline& b);
// Errors name the field that is wrong.
Result<Baseline> BaselineFromJson(const nlohmann::json& j);

struct RunOptions {
  double warmup_s = 120;
  double window_s = 0;  // 0: to the end of the run
  std::string job;      // "" every job of the trace
};

// The runs of a trace (one per job), their samples summarised. Errors: the trace's.
Result<std::vector<Baseline>> LearnRuns(trace::TraceReader* reader, const RunOptions& options);

struct MetricShift {
  std::string metric;
  size_t n_a = 0, n_b = 0;
  double median_a = 0, median_b = 0;
  double shift = 0;      // median_b - median_a
  double shift_pct = 0;  // shift / |median_a| × 100; 0 when median_a is 0
  double p_value = 1;
  bool significant = false;
};
// Two-sided Mann–Whitney U p-value of two samples (1 when either has fewer than 3 values).
double MannWhitneyP(const std::vector<double>& a, const std::vector<double>& b);
// Every metric the two have in common, in name order.
std::vector<MetricShift> CompareBaselines(const Baseline& a, const Baseline& b);

// The versioned store under `dir`.
class BaselineStore {
 public:
  explicit BaselineStore(std::string dir) : dir_(std::move(dir)) {}
  // Writes `b` as the next version of its template and shape; returns the version.
  Result<int> Add(Baseline b) const;
  // Every stored baseline, by template, shape, version. Unreadable files are skipped and named
  // in `skipped`.
  Result<std::vector<Baseline>> List(std::vector<std::string>* skipped = nullptr) const;
  // One version (0 = the newest) of a template, on `shape` ("" = the only shape it has).
  Result<Baseline> Get(const std::string& template_name, const std::string& shape,
                       int version) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// A template's stored baseline as step_regression reads it: a job that is
// slow from its first step has no good steps of its own to be compared with, but its template
// has. Used only on the template's shape and, when both are known, the node's driver (another
// driver makes the baseline stale, R13).
struct TemplateStep {
  std::string template_name, shape;
  int version = 0;
  std::string driver_version;  // "" fits any
  double median_s = 0, p99_s = 0;
};

// The newest baseline of each template and shape learned at or after `stale_before_ms` (older
// ones describe another topology) that has step times.
std::vector<TemplateStep> CurrentTemplateSteps(const std::vector<Baseline>& all,
                                               int64_t stale_before_ms);

// A run's shape: "<nodes>x<GPUs per node>x<model>" (the model "GPU" when unknown).
std::string ShapeName(size_t nodes, size_t gpus_per_node, const std::string& model);

// A template or shape as a directory name: [A-Za-z0-9._-] kept, anything else as %XX.
std::string PathSafe(const std::string& s);

}  // namespace gpuwatch::analyze
