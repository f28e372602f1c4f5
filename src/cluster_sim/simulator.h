// The cluster simulator (`gpuwatch sim`, issue 6): a training job on simulated nodes, with the
// physics coupled the way real jobs are, emitted as a trace (../shared/spec/trace-format.md)
// plus the truth file of the faults it planted (findings.md, Evaluation).
//
// The model, per step of a synchronous data-parallel job (every rank of every node):
//   rank r is ready after data_wait(node) + compute(r), compute = base × (max clock / clock)
//   step = max over ranks of ready + comm + checkpoint (every checkpoint_every_s)
//   rank r's exposed comm = comm + (slowest ready - r's ready)
// so the slowest rank sets every rank's pace and the others wait for it in communication; all
// ranks leave the collective together (one step end on every node). GPU utilisation is the
// compute share of the step; power follows utilisation; temperature lags power (first order,
// 60 s); a GPU that crosses its slowdown temperature throttles (sw_thermal) and its clock falls
// with the excess, which stretches compute. Stopped steps (a hang, a dead rank) leave the live
// ranks spinning in their NCCL kernels: busy, on little power. Noise: per-sample jitter, step
// jitter, one-sample power-cap flickers at full load, static NIC error counts with at most one
// isolated increment, and a slow warm-up of steps and memory.
//
// Faults: one per cause of findings.md (`KnownFaults()`), each with an onset and a severity in
// [0, 1]. The truth's start follows ../shared/scenarios/README.md: the first record that shows
// the fault (a throttle: the first throttled sample on a busy GPU; a counter fault: the first
// increment; a restart fault — fallbacks, NUMA binding, an idle held GPU — the restarted
// job's start; job_hang: the end of the last step; gpu_idle_allocated: ten minutes into the
// idleness). Job-wide faults (net_fallback, step_regression, checkpoint_stall) are listed once
// per node; a skewed node (clock_skew) writes its records with its own clock's timestamps.
//
// Thread-safety: pure function of its options (seeded, deterministic).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/cause.h"

namespace gpuwatch::cluster_sim {

struct FaultSpec {
  std::string cause;     // findings.md vocabulary, or "healthy"
  int node = 0;          // index of the node
  int gpu = 0;           // for card and GPU-link causes
  double onset_s = 480;  // seconds after the trace starts
  double severity = 1;   // 0..1
  // How the fault shows (Variants()): "" is the classic shape, the one the detectors were first
  // written against; the others are the shapes real machines, drivers and launchers give it
  // (docs/research/). For "healthy", a confounder: something normal that looks suspicious.
  std::string variant = {};
};

// The variants of each cause (and the healthy confounders), with what each plays.
struct Variant {
  std::string_view cause;  // a cause's name, or "healthy"
  std::string_view name;
  std::string_view plays;
};
std::span<const Variant> Variants();

struct SimOptions {
  std::string shape = "8xH100";  // <N>x<MODEL>: H100, A100, L40S, 4090
  int nodes = 1;
  double duration_s = 900;
  uint64_t seed = 1;
  double start_unix_s = 1764460800;  // 2025-11-30T00:00:00Z
  std::vector<FaultSpec> faults;
};

struct SimOutput {
  std::vector<std::string> trace_lines;  // JSON lines in time order
  std::string truth_json;                // {"faults": [...]}
};

// How the simulator plants each cause of the catalog (model/cause.h): every cause has an entry,
// and a test checks it.
enum class Planting : uint8_t {
  kWhileRunning,  // on one node while the job runs
  kRestart,       // comes with a restart of the job: the truth's start is the new run's start
  kBetweenNodes,  // needs two nodes or more
  kNone,          // not planted (`why` says why)
};
struct Planter {
  model::Cause cause;
  Planting how;
  // `gpuwatch demo` can play it: its evidence is the simulated GPUs' and ranks', not the real
  // host's NICs or topology, and it needs no restart or second node.
  bool in_demo;
  std::string_view why;  // kNone only
};
std::span<const Planter> Planters();
// "healthy" and the name of every cause that has a planter.
const std::vector<std::string>& KnownFaults();
// "thermal_throttle:gpu=3,onset=480,severity=0.8,node=0" → FaultSpec; errors name the part.
Result<FaultSpec> ParseFaultSpec(const std::string& text);

Result<SimOutput> Simulate(const SimOptions& options);

}  // namespace gpuwatch::cluster_sim
