#include "server/live_diagnosis.h"

#include <algorithm>
#include <utility>

#include "analyze/drive.h"
#include "trace/trace_reader.h"

namespace gpuwatch::server {

analyze::DiagnoserOptions LiveDiagnosisOptions() {
  analyze::DiagnoserOptions o;
  o.context.drop_findings_after_s = 3600;
  return o;
}

LiveDiagnosis::LiveDiagnosis(WindowFn window, analyze::DiagnoserOptions options)
    : window_(std::move(window)), diagnoser_(std::move(options)) {}

size_t LiveDiagnosis::Tick(int64_t now_ms) {
  const int64_t to_ms = now_ms - kLagMs;
  if (to_ms <= cursor_ms_) return 0;
  // The first tick reads everything the recorder holds.
  const int64_t from_ms = cursor_ms_ < 0 ? 0 : cursor_ms_ + 1;
  std::string text;
  for (const std::string& line : window_(from_ms, to_ms)) {
    text += line;
    text += '\n';
  }
  cursor_ms_ = to_ms;
  size_t read = 0;
  double last_t = 0;
  auto reader = trace::TraceReader::OpenBuffer(text, "flight-recorder");
  if (!reader.ok()) {
    ++errors_;
    last_error_ = reader.status().message();
  } else {
    // The agent writes these lines itself, so a bad one is a bug: it is counted and skipped,
    // and the rest of the window is read (analyze::ReadErrorPolicy::kSkipRecord). Window
    // repeats the node records in force at its start; the diagnoser takes them as the same
    // node seen again.
    auto driven = analyze::Drive(**reader, diagnoser_, analyze::ReadErrorPolicy::kSkipRecord);
    if (!driven.ok()) {
      ++errors_;
      last_error_ = driven.status().message();
    } else {
      read = driven->records;
      last_t = driven->last_t;
      if (driven->skipped > 0) {
        errors_ += driven->skipped;
        last_error_ = driven->first_skipped_error;
      }
    }
  }
  records_ += read;
  std::vector<analyze::Finding> findings = diagnoser_.Finish(last_t);
  nlohmann::json stats = {{"live", true},
                          {"records", records_},
                          {"analysed_until", static_cast<double>(to_ms) / 1000},
                          {"read_errors", errors_}};
  if (!last_error_.empty()) stats["last_read_error"] = last_error_;
  // The template baseline each job on each node is judged against, for the API.
  std::map<std::string, analyze::TemplateStep> baselines;
  for (const auto& [key, task] : diagnoser_.context().tasks()) {
    const auto& [node, job] = key;
    if (baselines.count(job)) continue;
    if (const analyze::TemplateStep* t = diagnoser_.context().TemplateOf(node, job))
      baselines.emplace(job, *t);
  }
  std::lock_guard<std::mutex> lock(mu_);
  findings_ = std::move(findings);
  stats_ = std::move(stats);
  job_baselines_ = std::move(baselines);
  return read;
}

std::optional<analyze::TemplateStep> LiveDiagnosis::JobBaseline(const std::string& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = job_baselines_.find(job);
  if (it == job_baselines_.end()) return std::nullopt;
  return it->second;
}

nlohmann::json LiveDiagnosis::Document(const std::string& job, const std::string& node) const {
  std::vector<analyze::Finding> keep;
  nlohmann::json stats;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const analyze::Finding& f : findings_) {
      if (!job.empty() && f.job != job) continue;
      if (!node.empty() && f.node != node) continue;
      keep.push_back(f);
    }
    stats = stats_;
  }
  return analyze::FindingsDocument(std::move(keep), stats);
}

}  // namespace gpuwatch::server
