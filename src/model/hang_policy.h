// When a job that still has live processes is hung: the one rule the job registry (the job
// tier's gpuwatch_job_hung, and the exported Prometheus rule over it), the diagnosis engine's
// job_hang and the `--job-hang-*` flags share.
//
// A job is hung after no step for `factor` × its median step time, and at least `min_s`; while a
// rank is inside a phase that has no step time to compare with (a checkpoint, an evaluation) the
// limit is at least `in_phase_s`. The defaults follow what a stuck collective costs before
// PyTorch's ProcessGroupNCCL watchdog kills the job (10 min by default since PyTorch 2.2,
// pytorch/pytorch#110947): a hang is worth telling long before that.
//
// Value type and a pure function; thread-safe.
#pragma once

namespace gpuwatch::model {

struct HangPolicy {
  double factor = 10;
  double min_s = 60;
  double in_phase_s = 600;
};

// Seconds without a step after which the job is hung.
inline double HangLimitS(const HangPolicy& p, double median_step_s, bool in_phase) {
  double limit = p.factor * median_step_s;
  if (limit < p.min_s) limit = p.min_s;
  if (in_phase && limit < p.in_phase_s) limit = p.in_phase_s;
  return limit;
}

}  // namespace gpuwatch::model
