#include "cli/replay_cmd.h"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "analyze/diagnoser.h"
#include "analyze/drive.h"
#include "cli/config_file.h"
#include "cli/job_view.h"
#include "cluster_sim/simulator.h"
#include "common/file_io.h"
#include "common/strings.h"
#include "common/time_base.h"
#include "eval/scoring.h"
#include "http/server.h"
#include "server/listen_address.h"
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

// `doc` (a findings document) with only the findings `keep` accepts.
template <typename Keep>
nlohmann::json KeepFindings(const nlohmann::json& doc, Keep keep) {
  nlohmann::json out = doc;
  out["findings"] = nlohmann::json::array();
  for (const auto& f : doc["findings"]) {
    if (keep(f)) out["findings"].push_back(f);
  }
  return out;
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

Result<ReplayResult> ReplayTrace(const std::string& path, double speed,
                                 const std::vector<analyze::TemplateStep>& templates) {
  auto reader = trace::TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  analyze::Diagnoser diagnoser;
  diagnoser.SetTemplateBaselines(templates);
  ReplayResult out;
  const auto wall_start = std::chrono::steady_clock::now();
  double origin_t = -1;
  auto pace = [&](const trace::TraceRecord& rec) {
    if (origin_t < 0) origin_t = rec.t;
    if (speed <= 0) return;
    // The virtual clock: record time t is due (t - first) / speed after the start.
    std::this_thread::sleep_until(wall_start +
                                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>((rec.t - origin_t) / speed)));
  };
  auto driven = analyze::Drive(**reader, diagnoser, analyze::ReadErrorPolicy::kStop, pace);
  if (!driven.ok()) return driven.status();
  out.first_t = driven->first_t;
  out.last_t = driven->last_t;
  out.findings = diagnoser.Finish(out.last_t);
  const trace::TraceReadStats& st = (*reader)->Stats();
  out.stats = {{"records", st.records},
               {"ignored_records", st.count(trace::RecordType::kUnknown)},
               {"out_of_order_records", st.out_of_order}};
  out.notes = st.Report();
  return out;
}

std::string RenderFindingsText(const nlohmann::json& doc, double origin_t) {
  std::vector<nlohmann::json> sorted;
  if (doc.contains("findings") && doc["findings"].is_array()) {
    for (const auto& f : doc["findings"]) sorted.push_back(f);
  }
  if (sorted.empty()) return "no findings\n";
  auto num = [](const nlohmann::json& f, const char* k) {
    return f.contains(k) && f[k].is_number() ? f[k].get<double>() : 0.0;
  };
  auto str = [](const nlohmann::json& f, const char* k) {
    return f.contains(k) && f[k].is_string() ? f[k].get<std::string>() : std::string();
  };
  std::stable_sort(sorted.begin(), sorted.end(), [&](const auto& a, const auto& b) {
    return num(a, "first_seen") < num(b, "first_seen");
  });
  std::string out;
  for (const auto& f : sorted) {
    std::string place = str(f, "node");
    if (f.contains("gpu") && f["gpu"].is_number()) place += fmt::format(" GPU{}", num(f, "gpu"));
    if (!str(f, "job").empty()) place += " job " + str(f, "job");
    if (!str(f, "nic").empty()) place += " NIC " + str(f, "nic");
    const double at = num(f, "first_seen");
    out += fmt::format("{:<8} {:<17} {} at {}: {}\n", str(f, "severity"), str(f, "cause"), place,
                       origin_t > 0 ? fmt::format("+{:.0f}s", at - origin_t)
                                    : FormatUtc(static_cast<int64_t>(at * 1000)),
                       str(f, "summary"));
    if (f.contains("evidence") && f["evidence"].is_array()) {
      for (const auto& e : f["evidence"]) {
        if (e.is_string()) out += "           - " + e.get<std::string>() + "\n";
      }
    }
    if (f.contains("ruled_out") && f["ruled_out"].is_array() && !f["ruled_out"].empty()) {
      std::vector<std::string> causes;
      for (const auto& c : f["ruled_out"]) {
        if (c.is_string()) causes.push_back(c.get<std::string>());
      }
      out += fmt::format("           ruled out: {}\n", fmt::join(causes, ", "));
    }
    if (!str(f, "action").empty()) out += "           → " + str(f, "action") + "\n";
  }
  return out;
}

int RunReplay(const std::string& path, bool json, double speed, std::ostream& out,
              std::ostream& err, const std::string& serve, const std::string& baselines_dir) {
  if (speed < 0 || !std::isfinite(speed)) {
    err << "gpuwatch: replay: --speed must be a positive number\n";
    return 2;
  }
  std::vector<analyze::TemplateStep> templates;
  if (!baselines_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(baselines_dir, ec)) {
      err << "gpuwatch: replay: --baselines " << baselines_dir << ": not a directory\n";
      return 2;
    }
    std::vector<std::string> skipped;
    auto all = analyze::BaselineStore(baselines_dir).List(&skipped);
    if (!all.ok()) {
      err << "gpuwatch: replay: --baselines: " << all.status().message() << "\n";
      return 2;
    }
    for (const std::string& s : skipped) err << "gpuwatch: replay: skipped baseline " << s << "\n";
    templates = analyze::CurrentTemplateSteps(*all, 0);
    err << "gpuwatch: replay: " << templates.size() << " template baseline(s) from "
        << baselines_dir << "\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  Result<ReplayResult> r = ReplayTrace(path, speed, templates);
  if (!r.ok()) {
    err << "gpuwatch: replay: " << r.status().message() << "\n";
    return 2;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const std::string& n : r->notes) err << "gpuwatch: " << path << ": " << n << "\n";
  nlohmann::json stats = r->stats;
  stats["trace"] = path;
  const nlohmann::json doc = analyze::FindingsDocument(r->findings, stats);
  if (json) {
    out << doc.dump(1) << "\n";
  } else {
    const double span = r->last_t - r->first_t;
    out << fmt::format("{}: {} records over {:.0f} s replayed in {:.2f} s ({:.0f}x real time)\n",
                       path, r->stats["records"].get<uint64_t>(), span, secs,
                       secs > 0 ? span / secs : 0.0);
    out << RenderFindingsText(doc, r->first_t);
  }
  out.flush();
  if (serve.empty()) return 0;
  Status st = ServeFindings(serve, doc, "replay of " + path, err);
  if (!st.ok()) {
    err << "gpuwatch: replay: --serve: " << st.message() << "\n";
    return 2;
  }
  return 0;
}

Status ServeFindings(const std::string& listen, const nlohmann::json& doc, const std::string& what,
                     std::ostream& err) {
  auto addr = server::ParseListenAddress(listen);
  if (!addr.ok()) return addr.status();
  // Stop signals are waited for here, not delivered: block them before the server's threads
  // start so that every thread inherits the mask.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  http::Server srv;
  const std::string body = doc.dump();
  srv.Route("GET", "/api/v1/findings", [&](const http::Request& req, http::Response& res) {
    const std::string job = req.Param("job");
    const std::string node = req.Param("node");
    if (job.empty() && node.empty()) {
      res.Set(body, "application/json");
      return;
    }
    const nlohmann::json filtered = KeepFindings(doc, [&](const nlohmann::json& f) {
      return (job.empty() || f.value("job", "") == job) &&
             (node.empty() || f.value("node", "") == node);
    });
    res.Set(filtered.dump(), "application/json");
  });
  srv.Route("GET", "/healthz",
            [](const http::Request&, http::Response& res) { res.Set("ok\n", "text/plain"); },
            {.inline_handler = true});
  srv.Route("GET", "/", [&](const http::Request&, http::Response& res) {
    res.Set("gpuwatch " + what + "\n/api/v1/findings\n/healthz\n", "text/plain");
  });
  if (Status st = srv.Start(addr->host, addr->port); !st.ok()) return st;
  err << "gpuwatch: serving the " << what << " on http://" << listen
      << "/api/v1/findings until SIGINT or SIGTERM\n";
  int sig = 0;
  sigwait(&stop, &sig);
  srv.Stop();
  return Status::Ok();
}

int RunDiagnose(const std::string& agent_url, const std::string& target, bool json,
                std::ostream& out, std::ostream& err) {
  Result<nlohmann::json> doc = AgentGetJson(agent_url, "/api/v1/findings");
  if (!doc.ok()) {
    err << "gpuwatch: diagnose: " << doc.status().message() << "\n";
    return 2;
  }
  if (!doc->contains("findings") || !(*doc)["findings"].is_array()) {
    err << "gpuwatch: diagnose: the agent's /api/v1/findings has no findings array\n";
    return 2;
  }
  // TARGET is a job or a node: a finding about either is kept.
  const nlohmann::json kept = KeepFindings(*doc, [&](const nlohmann::json& f) {
    return target.empty() || f.value("job", "") == target || f.value("node", "") == target;
  });
  if (json) {
    out << kept.dump(1) << "\n";
  } else {
    out << RenderFindingsText(kept, 0);
  }
  return kept["findings"].empty() ? 0 : 1;
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
  cluster_sim::SimOptions o;
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
    auto spec = cluster_sim::ParseFaultSpec(f);
    if (!spec.ok()) {
      err << "gpuwatch: sim: " << spec.status().message() << "\n";
      return 2;
    }
    // A plain "healthy" plants nothing; a healthy variant is a confounder.
    if (spec->cause != "healthy" || !spec->variant.empty()) o.faults.push_back(*spec);
  }
  auto sim = cluster_sim::Simulate(o);
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

void RegisterReplayCommands(CLI::App* app, Commands* out) {
  struct Flags {
    std::string path, baselines, listen = "127.0.0.1:9471";
    bool json = false, serve = false;
    double speed = 0;
  };
  auto r = std::make_shared<Flags>();
  auto* replay = app->add_subcommand(
      "replay",
      "Run a trace (../shared/spec/trace-format.md; .jsonl, .gz, .zst) through the diagnosis as "
      "fast as the CPU allows and print the findings");
  replay->add_option("trace", r->path, "The trace")->required();
  replay->add_option("--speed", r->speed,
                     "Pace the records at N times real time (default: as fast as possible)");
  replay->add_flag("--json", r->json,
                   "Print exactly the findings document of findings.md on stdout");
  // The issue's contract: `replay TRACE [--json] [--speed N] [--serve]`; where to serve is
  // --listen.
  replay->add_flag("--serve", r->serve,
                   "Then keep the findings open at http://LISTEN/api/v1/findings until "
                   "SIGINT or SIGTERM");
  replay->add_option("--listen", r->listen, "Where --serve listens")->capture_default_str();
  replay->add_option("--baselines", r->baselines,
                     "A baseline store (e.g. DATA_DIR/baselines): jobs are also judged "
                     "against their template's newest baseline");
  out->push_back({replay, [r] {
                    return RunReplay(r->path, r->json, r->speed, std::cout, std::cerr,
                                     r->serve ? r->listen : "", r->baselines);
                  }});

  struct DiagnoseFlags {
    std::string target, agent = DefaultAgentUrl();
    bool json = false;
  };
  auto d = std::make_shared<DiagnoseFlags>();
  auto* diagnose = app->add_subcommand(
      "diagnose",
      "The running agent's current findings (task -> card -> link, deepest cause), all or those "
      "of one job or node; exit 0 none, 1 findings, 2 error");
  diagnose->add_option("target", d->target, "A job id or a node name");
  diagnose->add_flag("--json", d->json, "The findings document of findings.md");
  diagnose->add_option("--agent", d->agent, "The agent's URL")->capture_default_str();
  out->push_back(
      {diagnose, [d] { return RunDiagnose(d->agent, d->target, d->json, std::cout, std::cerr); }});

  struct EvalFlags {
    std::string dir;
    bool json = false;
  };
  auto e = std::make_shared<EvalFlags>();
  auto* eval = app->add_subcommand(
      "eval",
      "Replay every NAME.jsonl[.gz|.zst] in DIR that has a NAME.truth.json and score the findings "
      "(precision, recall, F1, detection latency per cause and overall)");
  eval->add_option("dir", e->dir, "The scenario directory")->required();
  eval->add_flag("--json", e->json, "Print JSON");
  out->push_back({eval, [e] { return RunEval(e->dir, e->json, std::cout, std::cerr); }});

  auto sim = std::make_shared<SimCommand>();
  auto* sim_cmd = app->add_subcommand(
      "sim",
      "Simulate a training job on GPU nodes, with faults, as a trace plus its truth file "
      "(SIMULATED data)");
  sim_cmd->add_option("--shape", sim->shape,
                      "<N>x<MODEL>: H100, A100, L40S, 4090 (default 8xH100)");
  sim_cmd->add_option("--nodes", sim->nodes, "Nodes (default 1)");
  sim_cmd->add_option("--duration", sim->duration, "Length (default 15m)");
  sim_cmd->add_option("--seed", sim->seed, "Seed: the same seed gives the same trace");
  sim_cmd->add_option("--fault", sim->faults,
                      "cause[:gpu=G,node=N,onset=SECONDS,severity=0..1], repeatable");
  sim_cmd->add_option("--out", sim->out, "Output prefix: PREFIX.jsonl.gz, PREFIX.truth.json")
      ->required();
  out->push_back({sim_cmd, [sim] { return RunSim(*sim, std::cout, std::cerr); }});
}

}  // namespace gpuwatch::cli
