#include "cli/report_cmd.h"

#include <fmt/format.h>

#include <ctime>
#include <iostream>
#include <memory>

#include "accounting/report_format.h"
#include "cli/config_file.h"
#include "cli/job_view.h"
#include "common/strings.h"
#include "trace/trace_reader.h"

namespace gpuwatch::cli {
namespace {

using nlohmann::json;

int Error(std::ostream& err, const Status& st) {
  err << "gpuwatch report: " << st.message() << "\n";
  return 2;
}

std::string Utc(int64_t ms) {
  const time_t s = static_cast<time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

// "45s", "12m05s", "3h20m", "2d04h".
std::string Wait(double s) {
  const auto t = static_cast<int64_t>(s + 0.5);
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  if (t < 86400) return fmt::format("{}h{:02}m", t / 3600, t % 3600 / 60);
  return fmt::format("{}d{:02}h", t / 86400, t % 86400 / 3600);
}

std::string Pct(double num, double den) {
  return den > 0 ? fmt::format("{:.0f}%", 100 * num / den) : "-";
}

void PrintTable(const accounting::ReportDoc& d, std::ostream& out) {
  out << fmt::format("GPU accounting by {}, {} to {} UTC\n", GroupByName(d.query.by),
                     Utc(d.query.since_ms), Utc(d.query.until_ms));
  if (d.rows.empty()) {
    out << "no jobs held GPUs in that time\n";
  } else {
    std::string key_header = ToLower(std::string(GroupByName(d.query.by)));
    for (char& c : key_header) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    size_t w = key_header.size();
    for (const auto& r : d.rows) w = std::max(w, std::min<size_t>(r.key.size(), 40));
    out << fmt::format(
        "{:<{}}  {:>5} {:>5} {:>6} {:>5} {:>6} {:>7} {:>9} {:>6} {:>9} {:>9} {:>10}\n", key_header,
        w, "JOBS", "RUNS", "RERUN", "OK", "FAILED", "RUNNING", "GPU-H", "IDLE", "BUSYWAIT", "QUEUE",
        "COST");
    double total_h = 0, total_cost = 0, unpriced = 0;
    for (const auto& r : d.rows) {
      const std::string key = r.key.size() > 40 ? r.key.substr(0, 39) + "~" : r.key;
      out << fmt::format(
          "{:<{}}  {:>5} {:>5} {:>6} {:>5} {:>6} {:>7} {:>9.2f} {:>6} {:>9} {:>9} {:>10}\n", key, w,
          r.jobs, r.attempts, Pct(static_cast<double>(r.reruns), static_cast<double>(r.attempts)),
          r.succeeded, r.failed, r.running, r.gpu_hours,
          Pct(r.idle_gpu_hours, r.measured_gpu_hours),
          Pct(r.busywait_gpu_hours, r.measured_gpu_hours),
          r.queue_waits ? Wait(r.queue_wait_s_sum / static_cast<double>(r.queue_waits)) : "-",
          r.gpu_hours > 0 && r.unpriced_gpu_hours >= r.gpu_hours
              ? std::string("-")
              : fmt::format("${:.2f}", r.cost_usd));
      total_h += r.gpu_hours;
      total_cost += r.cost_usd;
      unpriced += r.unpriced_gpu_hours;
    }
    out << fmt::format("total {:.2f} GPU-hours, ${:.2f}", total_h, total_cost);
    if (unpriced > 0) out << fmt::format(" ({:.2f} GPU-hours of unpriced models)", unpriced);
    out << "\n";
    out << "IDLE and BUSYWAIT are shares of the measured GPU time: utilisation under 5 %, or up "
           "while the SMs, power and memory traffic are quiet (a kernel spinning on a peer)\n";
  }
  for (const auto& q : d.quotas)
    out << fmt::format("quota {}: {:.1f} of {:.0f} GPU-hours over {:.0f} days ({})\n",
                       q.quota.project, q.used_gpu_hours, q.quota.gpu_hours,
                       static_cast<double>(q.quota.period_ms) / 86400000, q.state);
}

Result<accounting::ReportDoc> FromTrace(const ReportCommand& c) {
  accounting::LedgerOptions o;
  for (const std::string& p : c.prices) {
    const size_t eq = p.rfind('=');
    auto usd = eq == std::string::npos ? std::nullopt : ParseDouble(p.substr(eq + 1));
    if (!usd || *usd < 0 || eq == 0)
      return Status::InvalidArgument("--price '" + p + "': MODEL=USD_PER_GPU_HOUR, e.g. H100=2.49");
    o.prices.push_back({p.substr(0, eq), *usd});
  }
  auto ledger = accounting::Ledger::Open(o);
  if (!ledger.ok()) return ledger.status();
  auto reader = trace::TraceReader::Open(c.trace);
  if (!reader.ok()) return reader.status();
  trace::TraceRecord r;
  while (true) {
    auto next = (*reader)->Next(&r);
    if (!next.ok()) return next.status();
    if (!*next) break;
    (*ledger)->Add(r);
  }
  accounting::ReportDoc d;
  auto by = accounting::ParseGroupBy(c.by);
  if (!by) return Status::InvalidArgument("--by: user, project, template or job");
  d.query.by = *by;
  d.query.until_ms = (*ledger)->newest_ms();
  if (!c.until.empty()) {
    auto u = ParseDouble(c.until);
    if (!u) return Status::InvalidArgument("--until: Unix seconds");
    d.query.until_ms = static_cast<int64_t>(std::llround(*u * 1000));
  }
  // A plain number is a Unix time; anything else a duration back from the end.
  if (auto s = ParseDouble(c.since)) {
    d.query.since_ms = static_cast<int64_t>(std::llround(*s * 1000));
  } else if (auto since = ParseRetentionMs(c.since); since.ok()) {
    d.query.since_ms = d.query.until_ms - *since;
  } else if (auto short_since = ParseDurationMs(c.since); short_since.ok()) {
    d.query.since_ms = d.query.until_ms - *short_since;
  } else {
    return Status::InvalidArgument("--since '" + c.since +
                                   "': a duration (30d, 12h) or Unix seconds");
  }
  d.rows = (*ledger)->Report(d.query);
  return d;
}

}  // namespace

CLI::App* AddReportCommand(CLI::App* app, ReportCommand* c) {
  auto* cmd = app->add_subcommand(
      "report",
      "GPU accounting: GPU-hours, idle and busy-waiting time, queue waits, outcomes, cost");
  cmd->add_option("--by", c->by, "user, project, template or job (default project)")
      ->check(CLI::IsMember({"user", "project", "template", "job"}));
  cmd->add_option("--since", c->since,
                  "How far back: a duration (30d, 12h) or Unix seconds (default 30d)");
  cmd->add_option("--until", c->until, "The end, Unix seconds (default now, or the trace's end)");
  auto* csv = cmd->add_flag("--csv", c->csv, "Print CSV");
  cmd->add_flag("--json", c->json, "Print the API's JSON")->excludes(csv);
  cmd->add_option("--agent", c->agent, "The agent's URL");
  cmd->add_option("--hub", c->hub, "Ask the hub (the whole fleet) instead of the local agent");
  auto* trace = cmd->add_option("--trace", c->trace, "Account a recorded trace instead")
                    ->check(CLI::ExistingFile);
  cmd->add_option("--price", c->prices,
                  "With --trace: price per GPU-hour of models whose name contains MODEL "
                  "(MODEL=USD, repeatable; * for the rest)")
      ->needs(trace);
  return cmd;
}

int RunReport(const ReportCommand& c, std::ostream& out, std::ostream& err) {
  accounting::ReportDoc doc;
  if (!c.trace.empty()) {
    auto d = FromTrace(c);
    if (!d.ok()) return Error(err, d.status());
    doc = std::move(*d);
  } else {
    const std::string url = c.hub.empty() ? c.agent : c.hub;
    std::string path = "/api/v1/accounting?by=" + c.by + "&since=" + EncodePathSegment(c.since);
    if (!c.until.empty()) path += "&until=" + EncodePathSegment(c.until);
    if (c.csv) {
      auto body = AgentGet(url, path + "&format=csv");
      if (!body.ok()) return Error(err, body.status());
      out << *body;
      return 0;
    }
    auto j = AgentGetJson(url, path);
    if (!j.ok()) return Error(err, j.status());
    if (c.json) {
      out << j->dump(2) << "\n";
      return 0;
    }
    auto d = accounting::ReportFromJson(*j);
    if (!d.ok()) return Error(err, Status::Corruption(url + path + ": " + d.status().message()));
    doc = std::move(*d);
  }
  if (c.json)
    out << accounting::ReportJson(doc).dump(2) << "\n";
  else if (c.csv)
    out << accounting::ReportCsv(doc);
  else
    PrintTable(doc, out);
  return 0;
}

void RegisterReportCommand(CLI::App* app, Commands* out) {
  auto c = std::make_shared<ReportCommand>();
  auto* report = AddReportCommand(app, c.get());
  out->push_back({report, [c] {
                    if (c->agent.empty()) c->agent = DefaultAgentUrl();
                    return RunReport(*c, std::cout, std::cerr);
                  }});
}

}  // namespace gpuwatch::cli
