// Scenario scoring (`gpuwatch eval`, issue 6): the Evaluation rules of ../shared/spec/findings.md.
//
// A scenario is a truth file (the planted faults) and the findings replay printed for its
// trace. Only findings of severity warning or critical count. A finding matches a fault when the
// cause and node are equal, gpu/job/rank/nic are equal where the fault names them, and
// first_seen lies in [start, start + allowed latency] — 15 s for causes seen directly in
// counters, events or logs, 120 s for those that need a baseline or a trend. A fault no finding
// matches is a miss; a counted finding that matches no fault is a false alarm (every counted
// finding of a healthy run is one).
//
// Precision is matched findings over counted findings, recall detected faults over faults, F1
// their harmonic mean; per cause, findings count under their own cause and faults under theirs.
// Latency is, per detected fault, the earliest matching first_seen minus start.
//
// Thread-safety: value types and pure functions.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::eval {

struct Fault {
  std::string cause, node;
  std::optional<int> gpu, rank;
  std::optional<std::string> job, nic;
  double start_s = 0;
  std::optional<double> end_s;
};

struct ScoredFinding {
  std::string cause, severity, node;
  std::optional<int> gpu, rank;
  std::optional<std::string> job, nic;
  double first_seen_s = 0;
  std::optional<double> last_seen_s;
};

// `{"faults": [...]}`; errors name the file-relative JSON path ("faults[2].start: not a number").
Result<std::vector<Fault>> ParseTruth(std::string_view text);
// replay --json output, `{"findings": [...], "stats": {...}}`.
Result<std::vector<ScoredFinding>> ParseFindings(std::string_view text);

// 120 for the causes findings.md lists as needing a baseline or a trend, else 15.
double AllowedLatencySeconds(std::string_view cause);
bool Counts(const ScoredFinding& f);  // severity warning or critical

struct ScenarioScore {
  std::string name;
  // Per fault (truth order): the detection latency, or nullopt for a miss.
  std::vector<std::optional<double>> latency_s;
  // Per finding (input order): whether it counts, and the fault it matched (first matching
  // fault in truth order), or nullopt (a false alarm when it counts).
  std::vector<bool> counted;
  std::vector<std::optional<size_t>> matched_fault;
  std::vector<Fault> faults;
  std::vector<ScoredFinding> findings;
};

ScenarioScore ScoreScenario(std::string name, std::vector<Fault> faults,
                            std::vector<ScoredFinding> findings);

struct Tally {
  size_t faults = 0, detected = 0;            // recall = detected / faults
  size_t findings = 0, matched_findings = 0;  // precision = matched / findings
  std::vector<double> latencies_s;

  std::optional<double> Precision() const;  // nullopt with no findings
  std::optional<double> Recall() const;     // nullopt with no faults
  std::optional<double> F1() const;         // nullopt when either is
  std::optional<double> MedianLatency() const;
  std::optional<double> WorstLatency() const;
};

struct Summary {
  Tally overall;
  std::map<std::string, Tally> by_cause;
  size_t scenarios = 0, healthy_scenarios = 0, healthy_false_alarms = 0;
};

Summary Summarize(const std::vector<ScenarioScore>& scores);

}  // namespace gpuwatch::eval
