#include "cli/replay_cmd.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "analyze/diagnoser.h"
#include "cli/config_file.h"
#include "common/file_io.h"
#include "common/strings.h"
#include "eval/scoring.h"
#include "simulate/simulator.h"
#include "trace/trace_file.h"
#include "trace/trace_reader.h"

namespace gpuwatch::cli {

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxTruthBytes = 16 << 20;

std::string Ratio(const std::optional<double>& v) { return v ? fmt::format("{:.3f}", *v) : "-"; }
std::string Secs(const std::optional<double>& v) { return v ? fmt::format("{:.1f}", *v) : "-"; }
nlohmann::json OrNull(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// "x.jsonl", "x.jsonl.gz", "x.jsonl.zst" → "x"; "" for anything else.
std::string ScenarioName(const std::string& file) {
  for (const char* ext : {".jsonl", ".jsonl.gz", ".jsonl.zst"}) {
    const std::string e = ext;
    if (file.size() > e.size() && file.compare(file.size() - e.size(), e.size(), e) == 0) {
      return file.substr(0, file.size() - e.size());
    }
  }
  return "";
}

nlohmann::json TallyJson(const eval::Tally& t) {
  return {{"faults", t.faults},
          {"detected", t.detected},
          {"findings", t.findings},
          {"matched_findings", t.matched_findings},
          {"precision", OrNull(t.Precision())},
          {"recall", OrNull(t.Recall())},
          {"f1", OrNull(t.F1())},
          {"median_latency_s", OrNull(t.MedianLatency())},
          {"worst_latency_s", OrNull(t.WorstLatency())}};
}

}  // namespace

Result<ReplayResult> ReplayTrace(const std::string& path, double speed) {
  auto reader = trace::TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  analyze::Diagnoser diagnoser;
  trace::TraceRecord rec;
  ReplayResult out;
  bool first = true;
  const auto wall_start = std::chrono::steady_clock::now();
  while (true) {
    Result<bool> more = (*reader)->Next(&rec);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (first) {
      out.first_t = rec.t;
      first = false;
    }
    if (speed > 0) {
      // The virtual clock: record time t is due (t - first) / speed after the start.
      std::this_thread::sleep_until(
          wall_start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>((rec.t - out.first_t) / speed)));
    }
    out.last_t = std::max(out.last_t, rec.t);
    diagnoser.Observe(rec);
  }
  out.findings = diagnoser.Finish(out.last_t);
  const trace::TraceReadStats& st = (*reader)->Stats();
  out.stats = {{"records", st.records},
               {"ignored_records", st.count(trace::RecordType::kUnknown)},
               {"out_of_order_records", st.out_of_order}};
  out.notes = st.Report();
  return out;
}

int RunReplay(const std::string& path, bool json, double speed, std::ostream& out,
              std::ostream& err) {
  if (speed < 0 || !std::isfinite(speed)) {
    err << "gpuwatch: replay: --speed must be a positive number\n";
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Result<ReplayResult> r = ReplayTrace(path, speed);
  if (!r.ok()) {
    err << "gpuwatch: replay: " << r.status().message() << "\n";
    return 2;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const std::string& n : r->notes) err << "gpuwatch: " << path << ": " << n << "\n";
  if (json) {
    out << analyze::FindingsDocument(r->findings, r->stats).dump(1) << "\n";
    return 0;
  }
  const double span = r->last_t - r->first_t;
  out << fmt::format("{}: {} records over {:.0f} s replayed in {:.2f} s ({:.0f}x real time)\n",
                     path, r->stats["records"].get<uint64_t>(), span, secs,
                     secs > 0 ? span / secs : 0.0);
  if (r->findings.empty()) {
    out << "no findings\n";
    return 0;
  }
  std::vector<analyze::Finding> sorted = r->findings;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first_seen < b.first_seen; });
  for (const analyze::Finding& f : sorted) {
    out << fmt::format("{:<8} {:<17} {}{} at +{:.0f}s: {}\n", f.severity, f.cause, f.node,
                       f.gpu ? fmt::format(" GPU{}", *f.gpu) : "", f.first_seen - r->first_t,
                       f.summary);
    for (const std::string& e : f.evidence) out << "           - " << e << "\n";
    if (!f.action.empty()) out << "           → " << f.action << "\n";
  }
  return 0;
}

int RunEval(const std::string& dir, bool json, std::ostream& out, std::ostream& err) {
  std::error_code ec;
  std::vector<std::pair<std::string, fs::path>> scenarios;  // name, trace
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string file = e.path().filename().string();
    const std::string name = ScenarioName(file);
    if (name.empty()) continue;
    if (!fs::exists(e.path().parent_path() / (name + ".truth.json"))) continue;
    scenarios.push_back({name, e.path()});
  }
  if (ec) {
    err << "gpuwatch: eval: " << dir << ": " << ec.message() << "\n";
    return 2;
  }
  if (scenarios.empty()) {
    err << "gpuwatch: eval: no NAME.jsonl[.gz|.zst] with a NAME.truth.json in " << dir << "\n";
    return 2;
  }
  std::sort(scenarios.begin(), scenarios.end());
  std::vector<eval::ScenarioScore> scores;
  nlohmann::json per_scenario = nlohmann::json::array();
  double replayed_s = 0, wall_s = 0;
  for (const auto& [name, path] : scenarios) {
    FileReadResult truth_file =
        ReadSmallFile((path.parent_path() / (name + ".truth.json")).string(), kMaxTruthBytes);
    if (!truth_file.ok) {
      err << "gpuwatch: eval: cannot read " << name << ".truth.json\n";
      return 2;
    }
    auto faults = eval::ParseTruth(truth_file.data);
    if (!faults.ok()) {
      err << "gpuwatch: eval: " << name << ".truth.json: " << faults.status().message() << "\n";
      return 2;
    }
    const auto t0 = std::chrono::steady_clock::now();
    Result<ReplayResult> r = ReplayTrace(path.string());
    if (!r.ok()) {
      err << "gpuwatch: eval: " << r.status().message() << "\n";
      return 2;
    }
    wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    replayed_s += r->last_t - r->first_t;
    // Through replay's own JSON, so eval judges exactly what `replay --json` prints.
    auto findings = eval::ParseFindings(analyze::FindingsDocument(r->findings, r->stats).dump());
    if (!findings.ok()) {
      err << "gpuwatch: eval: " << name
          << ": replay printed invalid findings JSON: " << findings.status().message() << "\n";
      return 2;
    }
    eval::ScenarioScore s = eval::ScoreScenario(name, *faults, *findings);
    size_t detected = 0, false_alarms = 0;
    for (const auto& l : s.latency_s) detected += l ? 1 : 0;
    for (size_t j = 0; j < s.findings.size(); ++j) {
      if (s.counted[j] && !s.matched_fault[j]) ++false_alarms;
    }
    nlohmann::json missed = nlohmann::json::array(), alarms = nlohmann::json::array();
    for (size_t i = 0; i < s.faults.size(); ++i) {
      if (!s.latency_s[i]) missed.push_back(s.faults[i].cause + "@" + s.faults[i].node);
    }
    for (size_t j = 0; j < s.findings.size(); ++j) {
      if (s.counted[j] && !s.matched_fault[j]) {
        alarms.push_back(s.findings[j].cause + "@" + s.findings[j].node +
                         (s.findings[j].gpu ? "/gpu" + std::to_string(*s.findings[j].gpu) : ""));
      }
    }
    per_scenario.push_back({{"name", name},
                            {"faults", s.faults.size()},
                            {"detected", detected},
                            {"false_alarms", false_alarms},
                            {"missed", missed},
                            {"false_alarm_findings", alarms}});
    scores.push_back(std::move(s));
  }
  const eval::Summary sum = eval::Summarize(scores);
  const double speed = wall_s > 0 ? replayed_s / wall_s : 0;
  if (json) {
    nlohmann::json causes = nlohmann::json::object();
    for (const auto& [cause, t] : sum.by_cause) causes[cause] = TallyJson(t);
    out << nlohmann::json{{"scenarios", per_scenario},
                          {"overall", TallyJson(sum.overall)},
                          {"by_cause", causes},
                          {"healthy_scenarios", sum.healthy_scenarios},
                          {"healthy_false_alarms", sum.healthy_false_alarms},
                          {"replay_speed_x", speed}}
               .dump(1)
        << "\n";
    return 0;
  }
  out << fmt::format("{:<28} {:>6} {:>8} {:>12}  {}\n", "SCENARIO", "FAULTS", "DETECTED",
                     "FALSE ALARMS", "MISSED / FALSE ALARM FINDINGS");
  for (const auto& s : per_scenario) {
    std::string detail;
    for (const auto& m : s["missed"]) detail += " missed:" + m.get<std::string>();
    for (const auto& a : s["false_alarm_findings"]) detail += " false:" + a.get<std::string>();
    out << fmt::format("{:<28} {:>6} {:>8} {:>12} {}\n", s["name"].get<std::string>(),
                       s["faults"].get<size_t>(), s["detected"].get<size_t>(),
                       s["false_alarms"].get<size_t>(), detail);
  }
  out << fmt::format("\n{:<20} {:>6} {:>8} {:>9} {:>6} {:>6} {:>6} {:>10} {:>9}\n", "CAUSE",
                     "FAULTS", "FINDINGS", "PRECISION", "RECALL", "F1", "", "MEDIAN LAT",
                     "WORST LAT");
  auto row = [&](const std::string& name, const eval::Tally& t) {
    out << fmt::format("{:<20} {:>6} {:>8} {:>9} {:>6} {:>6} {:>6} {:>10} {:>9}\n", name, t.faults,
                       t.findings, Ratio(t.Precision()), Ratio(t.Recall()), Ratio(t.F1()), "",
                       Secs(t.MedianLatency()), Secs(t.WorstLatency()));
  };
  for (const auto& [cause, t] : sum.by_cause) row(cause, t);
  row("overall", sum.overall);
  out << fmt::format(
      "\n{} scenarios ({} healthy, {} false alarms on them); replay {:.0f}x real "
      "time\n",
      sum.scenarios, sum.healthy_scenarios, sum.healthy_false_alarms, speed);
  return 0;
}

int RunSim(const SimCommand& c, std::ostream& out, std::ostream& err) {
  simulate::SimOptions o;
  o.shape = c.shape;
  o.nodes = c.nodes;
  o.seed = c.seed;
  auto ms = ParseDurationMs(c.duration);
  if (!ms.ok()) {
    err << "gpuwatch: sim: " << ms.status().message() << "\n";
    return 2;
  }
  o.duration_s = static_cast<double>(*ms) / 1000;
  for (const std::string& f : c.faults) {
    auto spec = simulate::ParseFaultSpec(f);
    if (!spec.ok()) {
      err << "gpuwatch: sim: " << spec.status().message() << "\n";
      return 2;
    }
    if (spec->cause != "healthy") o.faults.push_back(*spec);
  }
  auto sim = simulate::Simulate(o);
  if (!sim.ok()) {
    err << "gpuwatch: sim: " << sim.status().message() << "\n";
    return 2;
  }
  const std::string trace_path = c.out + ".jsonl.gz";
  if (Status st = trace::WriteTraceFile(trace_path, sim->trace_lines); !st.ok()) {
    err << "gpuwatch: sim: " << st.message() << "\n";
    return 2;
  }
  if (Status st = WriteFileAtomically(c.out + ".truth.json", sim->truth_json); !st.ok()) {
    err << "gpuwatch: sim: " << st.message() << "\n";
    return 2;
  }
  out << fmt::format("SIMULATED: {} records → {} and {}.truth.json\n", sim->trace_lines.size(),
                     trace_path, c.out);
  return 0;
}

}  // namespace gpuwatch::cli
