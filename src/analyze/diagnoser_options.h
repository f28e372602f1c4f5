// The diagnosis engine's settings, one struct per rule family (analyze/rules/), carried in the
// agent's options and `gpuwatch replay`'s. The defaults are the product's; tests change them.
// Each threshold says what real behaviour it stands for.
// Value types; thread-safe.
#pragma once

#include <cstddef>

#include "model/hang_policy.h"

namespace gpuwatch::analyze {

// rules/card: throttles, PCIe, ECC, NVLink, XIDs.
struct CardOptions {
  double busy_util_pct = 30;             // a GPU this busy is working, so a throttle costs time
  int consecutive_samples = 3;           // thermal, slowdown, PCIe width: samples in a row
  double power_window_s = 30;            // the power cap must hold most of this window …
  double power_share = 0.8;              // … this share of its busy samples …
  double power_clock_ratio = 0.9;        // … with the SM clock below this share of its maximum
  double power_peer_clock_ratio = 0.97;  // … or below this share of its busy peers' median
  double counter_window_s = 300;         // rising counters: increments within this window …
  int counter_increments = 3;            // … at least this many
  // A fault's run of increments: no gap longer than this between them.
  double MaxIncrementGap() const { return counter_window_s / counter_increments; }
};

// rules/thermal_trend (R19: thermal degradation is gradual): over window_s, a busy GPU whose
// temperature climbs steadily — least-squares slope at least slope_c_per_min with R² at least
// min_r2 — while its power does not (the median power of the window's last third within
// power_rise_share of its first third's: cooling, not load) is an info finding of
// thermal_throttle, before any clock falls. Samples are thinned to one per sample_s.
struct TrendOptions {
  double busy_util_pct = 30;
  double window_s = 600;
  double sample_s = 5;
  double slope_c_per_min = 0.3;
  double min_r2 = 0.7;
  double power_rise_share = 0.05;
};

// rules/memory: a GPU's memory that keeps growing after the job's warm-up, in every sub-window
// of the window, by a noticeable share of the card, without falling back.
struct MemoryOptions {
  double warmup_s = 120;
  double window_s = 180;
  double min_growth_share = 0.02;  // of the card's memory over the window
  double max_drop_share = 0.01;    // a fall of this share ends a run (freed, not leaked)
};

// rules/task_steps and rules/task_liveness: the task line against the job's own history.
struct TaskOptions {
  double warmup_s = 120;        // of a job's steps, not judged and not learned from
  size_t baseline_steps = 200;  // step records (all ranks) a baseline is learned from …
  // … or those of the first baseline_window_s after warm-up when they are at least
  // baseline_min_steps (a job stepping every few seconds; rules/learned_median.h).
  double baseline_window_s = 180;
  size_t baseline_min_steps = 10;
  // data_stall: a rolling median share of step time waiting for input above both the floor and
  // a multiple of the baseline, held for a while.
  double stall_window_s = 60;
  double stall_floor_share = 0.15;
  double stall_baseline_factor = 4;
  double stall_hold_s = 30;
  // checkpoint_stall: a checkpoint blocking this many times its predecessors' median (and at
  // least checkpoint_min_extra_s longer), or longer than checkpoint_budget_s with no history.
  double checkpoint_factor = 3;
  double checkpoint_min_extra_s = 20;
  double checkpoint_budget_s = 300;
  // straggler_gpu: over straggler_window_s, one rank's median exposed comm is below this share
  // of the others' median, lower by at least straggler_step_share of the median step and by
  // more than straggler_mad_factor × the others' spread (they wait for it; it never waits).
  double straggler_window_s = 60;
  double straggler_comm_share = 0.8;
  double straggler_step_share = 0.08;
  double straggler_mad_factor = 4;
  // step_regression: steps this much slower than the job's post-warm-up median, held.
  double regression_factor = 1.25;
  double regression_hold_s = 120;
  // gpu_idle_allocated: idle this long while a job holds it.
  double idle_allocated_s = 600;
};

// rules/host_nic: NIC errors and congestion.
struct HostNicOptions {
  double counter_window_s = 300;
  int counter_increments = 3;
  double MaxIncrementGap() const { return counter_window_s / counter_increments; }
  // net_congestion: a NIC carrying this share of its link rate over most of the window while a
  // job's exposed-comm share is this many times its baseline (or above comm_share_floor).
  double nic_saturation = 0.85;
  double nic_window_s = 30;
  double comm_factor = 2;
  double comm_share_floor = 0.3;
};

// rules/cross_node.
struct CrossNodeOptions {
  double clock_skew_tolerance_ms = 100;
};

// rules/nccl_fallback.
struct NcclOptions {
  size_t max_lines_per_job = 50000;
};

// The shared context (analyze/context.h): how long what is keyed by a job lives.
struct ContextOptions {
  // A job is forgotten this long after it ended on every node (and, live, once its alerts have
  // resolved); a job that sends nothing for stale_job_s has ended without saying so.
  double forget_after_s = 600;
  double stale_job_s = 3600;
  // Findings not seen for this long are dropped from the engine's list (the alert book has
  // them); replay keeps every finding (0: never dropped).
  double drop_findings_after_s = 0;
};

struct DiagnoserOptions {
  CardOptions card;
  TrendOptions trend;
  MemoryOptions memory;
  TaskOptions task;
  model::HangPolicy hang;  // the one hang rule (model/hang_policy.h)
  HostNicOptions host_nic;
  CrossNodeOptions cross_node;
  NcclOptions nccl;
  ContextOptions context;
};

}  // namespace gpuwatch::analyze
