// The task-level series (R5): the job registry's window statistics as metric points, the one
// list from which both /metrics and the store's series are made, and the raw steps as store
// series. Names and labels are in the metric catalog (docs/metrics.md). Pure functions;
// thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "jobs/job_registry.h"
#include "store/head.h"

namespace gpuwatch::server {

struct JobMetricPoint {
  std::string_view name;             // a catalog name (static storage)
  std::vector<store::Label> labels;  // without __name__
  double value = 0;
};

// Per rank of every running job: iterations/s, samples/s, step time quantiles, data/comm/
// checkpoint shares, loss, grad norm, steps, up; per job: info, hung, GPU time; and the
// protocol's own counters. Only what was measured: a share never reported is absent, not 0.
std::vector<JobMetricPoint> JobMetricPoints(const std::string& hostname,
                                            const std::vector<jobs::JobView>& jobs,
                                            const jobs::RegistryCounters& counters);

// The points as store inputs stamped `t_ms`.
std::vector<store::Head::Input> JobSeriesForStore(const std::vector<JobMetricPoint>& points,
                                                  int64_t t_ms);

// Each raw step as samples at its end time: gpuwatch_job_step_duration_seconds, …_number and
// the parts the step reported.
std::vector<store::Head::Input> RawStepSeries(const std::string& hostname,
                                              const std::vector<jobs::StepOutput>& steps);

}  // namespace gpuwatch::server
