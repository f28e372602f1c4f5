#include "server/job_metrics.h"

#include <map>

namespace gpuwatch::server {
namespace {

store::Label Name(std::string_view name) {
  return {std::string(store::kMetricNameLabel), std::string(name)};
}

}  // namespace

std::vector<JobMetricPoint> JobMetricPoints(const std::string& hostname,
                                            const std::vector<jobs::JobView>& jobs,
                                            const jobs::RegistryCounters& counters) {
  std::vector<JobMetricPoint> out;
  for (const auto& j : jobs) {
    if (j.state != "running" && j.state != "hung") continue;  // ended jobs leave /metrics
    const std::vector<store::Label> job_labels = {{"Hostname", hostname}, {"job", j.id}};
    std::vector<store::Label> info = job_labels;
    auto add_label = [&](const char* n, const std::string& v) {
      if (!v.empty()) info.push_back({n, v});
    };
    add_label("template", j.template_name);
    add_label("user", j.user);
    add_label("project", j.project);
    add_label("source", j.source);
    out.push_back({"gpuwatch_job_info", std::move(info), 1});
    out.push_back({"gpuwatch_job_hung", job_labels, j.state == "hung" ? 1.0 : 0.0});
    out.push_back({"gpuwatch_job_gpu_seconds_total", job_labels, j.gpu_seconds});
    for (const auto& r : j.ranks) {
      std::vector<store::Label> l = job_labels;
      l.push_back({"rank", std::to_string(r.rank)});
      out.push_back(
          {"gpuwatch_job_rank_up", l, r.state == "running" || r.state == "stopped" ? 1.0 : 0.0});
      out.push_back({"gpuwatch_job_steps_total", l, static_cast<double>(r.steps_total)});
      const auto& w = r.window;
      if (w.end_ms == 0) continue;  // no window closed yet
      out.push_back({"gpuwatch_job_iterations_per_second", l, w.iterations_per_s});
      out.push_back({"gpuwatch_job_samples_per_second", l, w.samples_per_s});
      const std::pair<const char*, const std::optional<double>*> q[] = {
          {"0.5", &w.step_p50_s}, {"0.95", &w.step_p95_s}, {"0.99", &w.step_p99_s}};
      for (const auto& [quantile, v] : q) {
        if (!*v) continue;
        auto lq = l;
        lq.push_back({"quantile", quantile});
        out.push_back({"gpuwatch_job_step_seconds", std::move(lq), **v});
      }
      const std::pair<std::string_view, const std::optional<double>*> opt[] = {
          {"gpuwatch_job_data_wait_ratio", &w.data_wait_ratio},
          {"gpuwatch_job_comm_ratio", &w.comm_ratio},
          {"gpuwatch_job_checkpoint_ratio", &w.checkpoint_ratio},
          {"gpuwatch_job_loss", &w.loss},
          {"gpuwatch_job_grad_norm", &w.grad_norm}};
      for (const auto& [name, v] : opt)
        if (*v) out.push_back({name, l, **v});
    }
  }
  const std::vector<store::Label> host = {{"Hostname", hostname}};
  out.push_back({"gpuwatch_job_messages_total", host, static_cast<double>(counters.accepted)});
  for (size_t i = 0; i < jobs::kRejectReasons; ++i) {
    auto l = host;
    l.push_back(
        {"reason", std::string(jobs::RejectReasonName(static_cast<jobs::RejectReason>(i)))});
    out.push_back({"gpuwatch_job_messages_rejected_total", std::move(l),
                   static_cast<double>(counters.rejected[i])});
  }
  return out;
}

std::vector<store::Head::Input> JobSeriesForStore(const std::vector<JobMetricPoint>& points,
                                                  int64_t t_ms) {
  std::vector<store::Head::Input> out;
  out.reserve(points.size());
  for (const auto& p : points) {
    store::Head::Input in;
    in.labels = p.labels;
    in.labels.push_back(Name(p.name));
    in.samples.push_back({t_ms, p.value});
    out.push_back(std::move(in));
  }
  return out;
}

std::vector<store::Head::Input> RawStepSeries(const std::string& hostname,
                                              const std::vector<jobs::StepOutput>& steps) {
  // One input per (series), samples in time order: a burst of steps is one append per series.
  std::map<std::pair<std::string_view, std::pair<std::string, uint32_t>>, store::Head::Input> by;
  auto add = [&](std::string_view name, const jobs::StepOutput& s, double v) {
    auto& in = by[{name, {s.job, s.rank}}];
    if (in.labels.empty())
      in.labels = {
          Name(name), {"Hostname", hostname}, {"job", s.job}, {"rank", std::to_string(s.rank)}};
    in.samples.push_back({s.t_ms, v});
  };
  for (const auto& s : steps) {
    add("gpuwatch_job_step_duration_seconds", s, s.step.duration_s);
    add("gpuwatch_job_step_number", s, static_cast<double>(s.step.step));
    if (s.step.samples) add("gpuwatch_job_step_samples", s, *s.step.samples);
    if (s.step.data_wait_s) add("gpuwatch_job_step_data_wait_seconds", s, *s.step.data_wait_s);
    if (s.step.comm_s) add("gpuwatch_job_step_comm_seconds", s, *s.step.comm_s);
    if (s.step.checkpoint_s) add("gpuwatch_job_step_checkpoint_seconds", s, *s.step.checkpoint_s);
    if (s.step.loss) add("gpuwatch_job_step_loss", s, *s.step.loss);
    if (s.step.grad_norm) add("gpuwatch_job_step_grad_norm", s, *s.step.grad_norm);
  }
  std::vector<store::Head::Input> out;
  for (auto& [_, in] : by) out.push_back(std::move(in));
  return out;
}

}  // namespace gpuwatch::server
