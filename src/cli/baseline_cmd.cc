#include "cli/baseline_cmd.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "analyze/baseline.h"
#include "cli/config_file.h"
#include "cli/job_view.h"
#include "common/strings.h"
#include "common/time_base.h"

namespace gpuwatch::cli {
namespace {

using analyze::Baseline;
using nlohmann::json;

constexpr size_t kMinSteps = 10;  // fewer steps after warm-up are no baseline

int Error(std::ostream& err, const std::string& what, const Status& st) {
  err << "gpuwatch: baseline " << what << ": " << st.message() << "\n";
  return 2;
}

Result<analyze::RunOptions> Options(const BaselineCommand& c, bool whole) {
  analyze::RunOptions o;
  auto warmup = ParseDurationMs(c.warmup);
  if (!warmup.ok()) return Status::InvalidArgument("--warmup: " + warmup.status().message());
  o.warmup_s = static_cast<double>(*warmup) / 1000;
  if (!whole) {
    auto window = ParseDurationMs(c.window);
    if (!window.ok() || *window <= 0)
      return Status::InvalidArgument("--window '" + c.window + "': a duration such as 10m");
    o.window_s = static_cast<double>(*window) / 1000;
  }
  o.job = c.job;
  return o;
}

Result<std::vector<Baseline>> Learn(const std::string& path, const analyze::RunOptions& o) {
  auto reader = trace::TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  return analyze::LearnRuns(reader->get(), o);
}

std::string Dir(const BaselineCommand& c) { return c.data_dir + "/baselines"; }

bool IsFile(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A run to compare: baseline:TEMPLATE[@VERSION] from the store, else TRACE or TRACE:JOB (the
// whole run after warm-up).
Result<Baseline> ResolveRun(const BaselineCommand& c, const std::string& spec) {
  if (spec.rfind("baseline:", 0) == 0) {
    if (c.data_dir.empty())
      return Status::InvalidArgument("'" + spec + "' needs --data-dir (where baselines live)");
    std::string name = spec.substr(9);
    int version = 0;
    if (const size_t at = name.rfind('@'); at != std::string::npos) {
      auto v = ParseInt<int>(name.substr(at + 1));
      if (!v || *v < 1) return Status::InvalidArgument("'" + spec + "': @VERSION is a number >= 1");
      version = *v;
      name.resize(at);
    }
    return analyze::BaselineStore(Dir(c)).Get(name, c.shape, version);
  }
  std::string path = spec, job;
  if (!IsFile(spec)) {
    const size_t colon = spec.rfind(':');
    if (colon == std::string::npos || !IsFile(spec.substr(0, colon)))
      return Status::NotFound("'" + spec +
                              "' is neither a trace file, TRACE:JOB nor baseline:NAME");
    path = spec.substr(0, colon);
    job = spec.substr(colon + 1);
  }
  BaselineCommand whole = c;
  whole.job = job;
  auto o = Options(whole, /*whole=*/true);
  if (!o.ok()) return o.status();
  auto runs = Learn(path, *o);
  if (!runs.ok()) return runs.status();
  if (runs->empty())
    return Status::NotFound(path + (job.empty() ? "" : " job " + job) +
                            ": no job ran past its warm-up");
  if (runs->size() > 1) {
    std::string jobs;
    for (const auto& r : *runs) jobs += (jobs.empty() ? "" : ", ") + r.job;
    return Status::InvalidArgument(path + " holds several jobs (" + jobs + "); name one as " +
                                   path + ":JOB");
  }
  return (*runs)[0];
}

std::string Num(double v) {
  const double a = std::fabs(v);
  if (a != 0 && (a < 0.01 || a >= 1e6)) return fmt::format("{:.3g}", v);
  return fmt::format("{:.3f}", v);
}

}  // namespace

int RunBaselineLearn(const BaselineCommand& c, std::ostream& out, std::ostream& err) {
  if (c.data_dir.empty())
    return Error(err, "learn", Status::InvalidArgument("--data-dir is required"));
  auto o = Options(c, /*whole=*/false);
  if (!o.ok()) return Error(err, "learn", o.status());
  auto runs = Learn(c.trace, *o);
  if (!runs.ok()) return Error(err, "learn", runs.status());
  analyze::BaselineStore store(Dir(c));
  int learned = 0;
  for (Baseline& b : *runs) {
    const auto step = b.metrics.find("step_s");
    const size_t steps = step == b.metrics.end() ? 0 : step->second.n;
    if (steps < kMinSteps) {
      out << fmt::format("skipped job {}: {} step(s) after its warm-up, {} needed\n", b.job, steps,
                         kMinSteps);
      continue;
    }
    auto v = store.Add(b);
    if (!v.ok()) return Error(err, "learn", v.status());
    ++learned;
    out << fmt::format(
        "learned {} on {} from job {}: version {} ({} steps, median {} s, p95 {} s; {} → {})\n",
        b.template_name, b.shape, b.job, *v, steps, Num(step->second.median), Num(step->second.p95),
        FormatUtc(b.window_from_ms), FormatUtc(b.window_to_ms));
  }
  if (learned == 0) {
    out << "nothing learned: no job ran long enough past its warm-up\n";
    return 1;
  }
  return 0;
}

int RunBaselineList(const BaselineCommand& c, std::ostream& out, std::ostream& err) {
  if (c.data_dir.empty())
    return Error(err, "list", Status::InvalidArgument("--data-dir is required"));
  std::vector<std::string> skipped;
  auto all = analyze::BaselineStore(Dir(c)).List(&skipped);
  if (!all.ok()) return Error(err, "list", all.status());
  for (const auto& s : skipped) err << "gpuwatch: baseline list: skipped " << s << "\n";
  // Stale against a running agent: learned before its topology last changed, or on another
  // driver.
  std::optional<int64_t> stale_before;
  std::string driver;
  if (!c.agent.empty()) {
    auto topo = AgentGetJson(c.agent, "/api/v1/topology");
    if (!topo.ok()) return Error(err, "list", topo.status());
    const json& t = *topo;
    stale_before = t.contains("baselines_stale_before_ms") &&
                           t["baselines_stale_before_ms"].is_number_integer()
                       ? t["baselines_stale_before_ms"].get<int64_t>()
                       : 0;
    auto gpus = AgentGetJson(c.agent, "/api/v1/gpus");
    if (gpus.ok() && gpus->contains("driver_version") && (*gpus)["driver_version"].is_string())
      driver = (*gpus)["driver_version"].get<std::string>();
  }
  auto stale_why = [&](const Baseline& b) -> std::string {
    if (stale_before && *stale_before > 0 && b.learned_at_ms < *stale_before)
      return "topology changed since";
    if (!driver.empty() && !b.driver_version.empty() && driver != b.driver_version)
      return "driver " + b.driver_version + " → " + driver;
    return "";
  };
  if (c.json) {
    json j = json::array();
    for (const Baseline& b : *all) {
      json e = {{"template", b.template_name},
                {"shape", b.shape},
                {"version", b.version},
                {"job", b.job},
                {"learned_at_ms", b.learned_at_ms},
                {"driver_version", b.driver_version}};
      if (auto it = b.metrics.find("step_s"); it != b.metrics.end()) {
        e["steps"] = it->second.n;
        e["step_median_s"] = it->second.median;
      }
      if (!c.agent.empty()) e["stale"] = stale_why(b);
      j.push_back(std::move(e));
    }
    out << json{{"baselines", j}}.dump(2) << "\n";
    return 0;
  }
  if (all->empty()) {
    out << "no baselines under " << Dir(c) << "\n";
    return 0;
  }
  out << fmt::format("{:<24} {:<30} {:>3}  {:<20} {:>6} {:>10}  {}\n", "TEMPLATE", "SHAPE", "V",
                     "LEARNED", "STEPS", "STEP P50", c.agent.empty() ? "DRIVER" : "STALE");
  for (const Baseline& b : *all) {
    const auto step = b.metrics.find("step_s");
    out << fmt::format("{:<24} {:<30} {:>3}  {:<20} {:>6} {:>10}  {}\n", b.template_name, b.shape,
                       b.version, FormatUtc(b.learned_at_ms),
                       step == b.metrics.end() ? 0 : step->second.n,
                       step == b.metrics.end() ? "-" : Num(step->second.median) + " s",
                       c.agent.empty() ? b.driver_version : stale_why(b));
  }
  return 0;
}

int RunBaselineShow(const BaselineCommand& c, std::ostream& out, std::ostream& err) {
  if (c.data_dir.empty())
    return Error(err, "show", Status::InvalidArgument("--data-dir is required"));
  auto b = analyze::BaselineStore(Dir(c)).Get(c.template_name, c.shape, c.version);
  if (!b.ok()) return Error(err, "show", b.status());
  out << analyze::BaselineToJson(*b).dump(1) << "\n";
  return 0;
}

int RunBaselineImport(const BaselineCommand& c, std::ostream& out, std::ostream& err) {
  if (c.data_dir.empty())
    return Error(err, "import", Status::InvalidArgument("--data-dir is required"));
  const FileReadResult f = ReadSmallFile(c.file, size_t{16} << 20);
  if (!f.ok) return Error(err, "import", Status::IoError(c.file + ": " + std::strerror(f.err)));
  json j = json::parse(f.data, nullptr, false);
  if (j.is_discarded()) return Error(err, "import", Status::InvalidArgument(c.file + ": not JSON"));
  auto b = analyze::BaselineFromJson(j);
  if (!b.ok())
    return Error(err, "import", Status::InvalidArgument(c.file + ": " + b.status().message()));
  auto v = analyze::BaselineStore(Dir(c)).Add(*b);
  if (!v.ok()) return Error(err, "import", v.status());
  out << fmt::format("imported {} on {} as version {}\n", b->template_name, b->shape, *v);
  return 0;
}

int RunBaselineCompare(const BaselineCommand& c, std::ostream& out, std::ostream& err) {
  auto a = ResolveRun(c, c.run_a);
  if (!a.ok()) return Error(err, "compare", a.status());
  auto b = ResolveRun(c, c.run_b);
  if (!b.ok()) return Error(err, "compare", b.status());
  const auto shifts = analyze::CompareBaselines(*a, *b);
  bool any = false;
  for (const auto& s : shifts) any = any || s.significant;
  if (c.json) {
    json rows = json::array();
    for (const auto& s : shifts) {
      rows.push_back({{"metric", s.metric},
                      {"n_a", s.n_a},
                      {"n_b", s.n_b},
                      {"median_a", s.median_a},
                      {"median_b", s.median_b},
                      {"shift", s.shift},
                      {"shift_pct", s.shift_pct},
                      {"p_value", s.p_value},
                      {"significant", s.significant}});
    }
    out << json{{"a", {{"template", a->template_name}, {"shape", a->shape}, {"job", a->job}}},
                {"b", {{"template", b->template_name}, {"shape", b->shape}, {"job", b->job}}},
                {"metrics", rows}}
               .dump(2)
        << "\n";
    return any ? 1 : 0;
  }
  out << fmt::format("A: {} on {} (job {})\nB: {} on {} (job {})\n", a->template_name, a->shape,
                     a->job, b->template_name, b->shape, b->job);
  if (a->shape != b->shape) out << "note: the two ran on different shapes\n";
  out << fmt::format("{:<24} {:>12} {:>12} {:>9} {:>9}  {}\n", "METRIC", "A (median)", "B (median)",
                     "SHIFT", "p", "");
  for (const auto& s : shifts) {
    const std::string pct =
        s.median_a == 0 ? "n/a" : fmt::format("{:.1f}%", s.shift_pct);  // from zero: no percent
    out << fmt::format("{:<24} {:>12} {:>12} {:>9} {:>9}  {}\n", s.metric, Num(s.median_a),
                       Num(s.median_b), pct, fmt::format("{:.2g}", s.p_value),
                       s.significant ? (s.shift > 0 ? "higher" : "lower") : "");
  }
  out << (any ? "Significant shifts: p < 0.01 (Mann-Whitney U) and more than 2 %.\n"
              : "No significant shift (p < 0.01 and more than 2 %).\n");
  return any ? 1 : 0;
}

void RegisterBaselineCommands(CLI::App* app, Commands* out) {
  auto bl = std::make_shared<BaselineCommand>();
  auto* baseline = app->add_subcommand(
      "baseline", "Per-template baselines (R13): learn from a trace, list, show, import, compare");
  baseline->require_subcommand(1);
  auto add_data_dir = [bl](CLI::App* c) {
    c->add_option("--data-dir", bl->data_dir, "The data dir; baselines live in DIR/baselines");
  };
  auto* learn = baseline->add_subcommand(
      "learn", "Learn each job's baseline from its first stable window after warm-up");
  learn->add_option("TRACE", bl->trace, "Trace file (.jsonl, .gz, .zst)")->required();
  add_data_dir(learn);
  learn->add_option("--job", bl->job, "Only this job");
  learn->add_option("--warmup", bl->warmup, "Left out after the first step (default 2m)");
  learn->add_option("--window", bl->window, "How long a window to learn from (default 10m)");
  auto* list = baseline->add_subcommand("list", "The stored baselines");
  add_data_dir(list);
  list->add_option("--agent", bl->agent,
                   "Mark baselines stale against this agent's topology and driver");
  list->add_flag("--json", bl->json, "Print JSON");
  auto* show = baseline->add_subcommand("show", "One baseline as JSON (its export form)");
  show->add_option("TEMPLATE", bl->template_name, "Job template")->required();
  add_data_dir(show);
  show->add_option("--shape", bl->shape, "Node shape, when the template has several");
  show->add_option("--version", bl->version, "Version (default the newest)");
  auto* import = baseline->add_subcommand("import", "Add a baseline JSON as a new version");
  import->add_option("FILE", bl->file, "Baseline JSON (from `baseline show`)")->required();
  add_data_dir(import);
  auto* compare = baseline->add_subcommand(
      "compare",
      "Per-metric shift between two runs with a significance test (exit 1 when one shifted)");
  compare->add_option("RUN_A", bl->run_a, "TRACE, TRACE:JOB or baseline:TEMPLATE[@VERSION]")
      ->required();
  compare->add_option("RUN_B", bl->run_b, "TRACE, TRACE:JOB or baseline:TEMPLATE[@VERSION]")
      ->required();
  add_data_dir(compare);
  compare->add_option("--shape", bl->shape, "Shape of a baseline: run");
  compare->add_option("--warmup", bl->warmup, "Left out after each run's first step (default 2m)");
  compare->add_flag("--json", bl->json, "Print JSON");
  out->push_back({learn, [bl] { return RunBaselineLearn(*bl, std::cout, std::cerr); }});
  out->push_back({list, [bl] { return RunBaselineList(*bl, std::cout, std::cerr); }});
  out->push_back({show, [bl] { return RunBaselineShow(*bl, std::cout, std::cerr); }});
  out->push_back({import, [bl] { return RunBaselineImport(*bl, std::cout, std::cerr); }});
  out->push_back({compare, [bl] { return RunBaselineCompare(*bl, std::cout, std::cerr); }});
}

}  // namespace gpuwatch::cli
