#include "server/auto_baselines.h"

#include <fmt/format.h>

#include <cmath>

#include "common/log.h"
#include "trace/trace_reader.h"

namespace gpuwatch::server {

std::vector<std::string> AutoBaselines::Tick(int64_t now_ms, const std::vector<jobs::JobView>& jobs,
                                             const WindowFn& window, int64_t stale_before_ms) {
  std::vector<std::string> out;
  // Forget jobs the registry no longer lists: tried_ stays as small as the job list.
  std::set<std::string> listed;
  for (const jobs::JobView& j : jobs) listed.insert(j.id);
  std::erase_if(tried_, [&](const std::string& id) { return listed.count(id) == 0; });
  const auto due_ms = static_cast<int64_t>(std::llround((o_.warmup_s + o_.window_s) * 1000));
  for (const jobs::JobView& j : jobs) {
    if (j.template_name.empty() || j.state != "running" || tried_.count(j.id) != 0) continue;
    // The first step comes a little after the start: a minute's margin for it.
    if (now_ms - j.start_ms < due_ms + 60000) continue;
    tried_.insert(j.id);
    std::string text;
    for (const std::string& l : window(j.start_ms - 1000, now_ms)) text += l + "\n";
    auto reader = trace::TraceReader::OpenBuffer(std::move(text), "flight-recorder");
    if (!reader.ok()) continue;
    analyze::RunOptions o = o_;
    o.job = j.id;
    auto runs = analyze::LearnRuns(reader->get(), o);
    if (!runs.ok()) {
      GW_LOG_WARN("baseline of job {}: {}", j.id, runs.status().message());
      continue;
    }
    for (analyze::Baseline& b : *runs) {
      auto step = b.metrics.find("step_s");
      if (step == b.metrics.end() || step->second.n < 10) continue;
      // Keep what is current: a baseline learned since the topology last changed.
      bool current = false;
      auto all = store_.List();
      if (all.ok()) {
        for (const analyze::Baseline& have : *all) {
          current = current || (have.template_name == b.template_name && have.shape == b.shape &&
                                have.learned_at_ms >= stale_before_ms);
        }
      }
      if (current) continue;
      b.source = "agent (job " + j.id + ")";
      auto v = store_.Add(b);
      if (!v.ok()) {
        GW_LOG_WARN("baseline of job {}: {}", j.id, v.status().message());
        continue;
      }
      out.push_back(
          fmt::format("learned baseline {} on {} from job {}: version {} ({} steps, "
                      "median {:.3f} s)",
                      b.template_name, b.shape, j.id, *v, step->second.n, step->second.median));
    }
  }
  return out;
}

}  // namespace gpuwatch::server
