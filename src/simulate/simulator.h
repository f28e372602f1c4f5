// The cluster simulator (`gpuwatch sim`, issue 6): a training job on simulated nodes, with the
// physics coupled the way real jobs are, emitted as a trace (../shared/spec/trace-format.md)
// plus the truth file of the faults it planted (findings.md, Evaluation).
//
// The model, per step of a synchronous data-parallel job:
//   duration = data_wait + compute × (max clock / clock of the slowest GPU) + exposed comm
//              + checkpoint (every checkpoint_every_s)
// so one slow GPU sets every rank's pace; GPU utilisation is the compute share of the step;
// power follows utilisation; temperature lags power (first order, 60 s); a GPU that crosses
// its slowdown temperature throttles (sw_thermal) and its clock falls with the excess, which
// stretches compute. Noise: per-sample jitter, step jitter, one-sample power-cap flickers at
// full load (healthy GPUs do that), and a slow warm-up of steps and memory.
//
// Faults (one per cause the simulator knows; `KnownFaults()`): each has an onset and a
// severity in [0, 1]; the truth's start is the first record that shows it, as the scenario
// README defines (a throttle: the first throttled sample on a busy GPU; a counter fault: the
// first increment; a fault that needs a restart: the job's start record).
//
// Thread-safety: pure function of its options (seeded, deterministic).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpuwatch::simulate {

struct FaultSpec {
  std::string cause;     // findings.md vocabulary
  int node = 0;          // index of the node
  int gpu = 0;           // for card and GPU-link causes
  double onset_s = 480;  // seconds after the trace starts
  double severity = 1;   // 0..1
};

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

// The causes the simulator can plant.
const std::vector<std::string>& KnownFaults();
// "thermal_throttle:gpu=3,onset=480,severity=0.8,node=0" → FaultSpec; errors name the part.
Result<FaultSpec> ParseFaultSpec(const std::string& text);

Result<SimOutput> Simulate(const SimOptions& options);

}  // namespace gpuwatch::simulate
