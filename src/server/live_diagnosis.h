// LiveDiagnosis: the diagnosis engine on the agent's own records (issue 7: findings live and
// in replay alike). The agent renders every record in trace form into its flight recorder; this
// reads what arrived since the last tick, through the same TraceReader and Diagnoser as
// `gpuwatch replay`, so a cause found offline on a recorded trace is the cause found live.
//
// Each Tick reads the recorder's window (cursor, now - lag]: the lag lets sources that add a
// little late (the job socket, log tailers) land before the window passes them. The findings
// are recomputed after each tick (Diagnoser::Finish keeps its state and may be called again)
// and kept as the findings.md document that /api/v1/findings serves.
//
// Thread-safety: Tick from one thread (the agent's tier thread); Document from any.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analyze/diagnoser.h"

namespace gpuwatch::server {

// The engine's settings live: findings not seen for an hour leave the engine's list (the alert
// book holds them, and an event alert is held that long); ended jobs are forgotten once their
// alerts resolve. Replay keeps every finding.
analyze::DiagnoserOptions LiveDiagnosisOptions();

class LiveDiagnosis {
 public:
  // The recorder's lines with from_ms <= t <= to_ms, node records first (FlightRecorder::Window).
  using WindowFn = std::function<std::vector<std::string>(int64_t from_ms, int64_t to_ms)>;
  static constexpr int64_t kLagMs = 5000;

  explicit LiveDiagnosis(WindowFn window,
                         analyze::DiagnoserOptions options = LiveDiagnosisOptions());

  // The stored template baselines step_regression also judges against (Tick's thread).
  void SetTemplateBaselines(const std::vector<analyze::TemplateStep>& t) {
    diagnoser_.SetTemplateBaselines(t);
  }
  // Holds a job's state while `keep(job)` (an alert of it still fires).
  void SetKeepJob(std::function<bool(const std::string&)> keep) {
    diagnoser_.SetKeepJob(std::move(keep));
  }
  const analyze::Diagnoser& diagnoser() const { return diagnoser_; }
  // Reads the records up to now_ms - kLagMs and re-runs the rules. Returns how many records
  // were read.
  size_t Tick(int64_t now_ms);
  // {"findings": [...], "stats": {...}} (findings.md); `job` / `node` keep only those ("" all).
  nlohmann::json Document(const std::string& job = "", const std::string& node = "") const;
  // The current findings (what the alert book folds in after each tick).
  std::vector<analyze::Finding> Findings() const {
    std::lock_guard<std::mutex> lock(mu_);
    return findings_;
  }
  // The stored template baseline the job's steps are judged against (the same shape and, when
  // known, driver), as of the last tick; nullopt when it has none.
  std::optional<analyze::TemplateStep> JobBaseline(const std::string& job) const;

 private:
  WindowFn window_;
  analyze::Diagnoser diagnoser_;  // Tick's thread only
  int64_t cursor_ms_ = -1;        // records up to here were read
  uint64_t records_ = 0, errors_ = 0;
  std::string last_error_;
  mutable std::mutex mu_;  // guards findings_ and stats_
  std::vector<analyze::Finding> findings_;
  nlohmann::json stats_ = nlohmann::json::object();
  std::map<std::string, analyze::TemplateStep> job_baselines_;
};

}  // namespace gpuwatch::server
