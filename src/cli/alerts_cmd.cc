#include "cli/alerts_cmd.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "analyze/prometheus_rules.h"
#include "cli/config_file.h"
#include "cli/job_view.h"
#include "common/file_io.h"

namespace gpuwatch::cli {
namespace {

using nlohmann::json;

int Error(std::ostream& err, const std::string& what, const Status& st) {
  err << "gpuwatch: " << what << ": " << st.message() << "\n";
  return 2;
}

std::string Str(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// "GPU 3", "job 41 rank 2", "mlx5_0": the place of an alert or a silence's matchers.
std::string Place(const json& j) {
  std::string out = Str(j, "node");
  if (j.contains("gpu") && j["gpu"].is_number_integer())
    out += fmt::format(" GPU {}", j["gpu"].get<int>());
  if (!Str(j, "job").empty()) out += " job " + Str(j, "job");
  if (j.contains("rank") && j["rank"].is_number_integer())
    out += fmt::format(" rank {}", j["rank"].get<int>());
  if (!Str(j, "nic").empty()) out += " " + Str(j, "nic");
  return out;
}

}  // namespace

int RunAlerts(const std::string& agent, bool json_out, std::ostream& out, std::ostream& err) {
  auto doc = AgentGetJson(agent, "/api/v1/alerts");
  if (!doc.ok()) return Error(err, "alerts", doc.status());
  if (!doc->contains("alerts") || !(*doc)["alerts"].is_array())
    return Error(err, "alerts", Status::Corruption(agent + "/api/v1/alerts: no \"alerts\" array"));
  int firing = 0;
  for (const json& a : (*doc)["alerts"]) firing += Str(a, "status") == "firing";
  if (json_out) {
    out << doc->dump(2) << "\n";
    return firing > 0 ? 1 : 0;
  }
  if ((*doc)["alerts"].empty()) {
    out << "no alerts\n";
    return 0;
  }
  for (const json& a : (*doc)["alerts"]) {
    const std::string status = Str(a, "status");
    const std::string why = Str(a, "suppressed_by");
    out << fmt::format("{:<9} {:<9} {:<20} {:<28} since {}{}\n", status, Str(a, "severity"),
                       Str(a, "cause"), Place(a), Str(a, "starts_at"),
                       status == "resolved" ? " until " + Str(a, "ends_at")
                       : why.empty()        ? ""
                                            : " (" + why + ")");
    out << "          " << Str(a, "summary") << "\n";
  }
  return firing > 0 ? 1 : 0;
}

int RunSilenceAdd(const SilenceCommand& c, std::ostream& out, std::ostream& err) {
  auto ms = ParseDurationMs(c.duration);
  if (!ms.ok() || *ms <= 0)
    return Error(err, "silence add",
                 Status::InvalidArgument("--for '" + c.duration + "': a duration such as 2h"));
  json body = {{"duration_s", static_cast<double>(*ms) / 1000}, {"maintenance", c.maintenance}};
  if (!c.node.empty()) body["node"] = c.node;
  if (!c.job.empty()) body["job"] = c.job;
  if (!c.cause.empty()) body["cause"] = c.cause;
  if (c.gpu) body["gpu"] = *c.gpu;
  // The agent records who authenticated (the token's principal) as created_by; who typed the
  // command is the user's word, so it goes into the comment.
  std::string by = c.created_by;
  if (by.empty()) {
    const char* user = std::getenv("USER");
    by = user && *user ? user : std::to_string(getuid());
  }
  body["comment"] = c.comment.empty() ? "by " + by : c.comment + " (by " + by + ")";
  auto r = AgentSendJson(c.agent, "POST", "/api/v1/silences", body.dump(), c.token_file);
  if (!r.ok()) return Error(err, "silence add", r.status());
  out << Str(*r, "id") << "\n";
  return 0;
}

int RunSilenceList(const SilenceCommand& c, std::ostream& out, std::ostream& err) {
  auto doc = AgentGetJson(c.agent, "/api/v1/alerts");
  if (!doc.ok()) return Error(err, "silence list", doc.status());
  const json silences = doc->contains("silences") && (*doc)["silences"].is_array()
                            ? (*doc)["silences"]
                            : json::array();
  if (c.json) {
    out << json{{"silences", silences}}.dump(2) << "\n";
    return 0;
  }
  if (silences.empty()) {
    out << "no silences\n";
    return 0;
  }
  for (const json& s : silences) {
    out << fmt::format("{:<6} {:<11} {:<36} until {}  {}{}\n", Str(s, "id"),
                       s.value("maintenance", false) ? "maintenance" : "silence",
                       Place(s) + (Str(s, "cause").empty() ? "" : " " + Str(s, "cause")),
                       Str(s, "ends_at"), Str(s, "comment"),
                       Str(s, "created_by").empty() ? "" : " (" + Str(s, "created_by") + ")");
  }
  return 0;
}

int RunSilenceExpire(const SilenceCommand& c, std::ostream& out, std::ostream& err) {
  auto r = AgentSendJson(c.agent, "DELETE", "/api/v1/silences/" + c.id, "", c.token_file);
  if (!r.ok()) return Error(err, "silence expire", r.status());
  out << "expired " << c.id << "\n";
  return 0;
}

void RegisterAlertCommands(CLI::App* app, Commands* out) {
  struct AlertsFlags {
    std::string agent = DefaultAgentUrl();
    bool json = false;
  };
  auto a = std::make_shared<AlertsFlags>();
  auto* alerts = app->add_subcommand(
      "alerts", "The agent's alerts: firing, silenced, resolved (exit 1 while any fires)");
  alerts->add_option("--agent", a->agent, "The agent's URL");
  alerts->add_flag("--json", a->json, "Print the API's JSON");
  out->push_back({alerts, [a] { return RunAlerts(a->agent, a->json, std::cout, std::cerr); }});

  auto sil = std::make_shared<SilenceCommand>();
  auto* silence = app->add_subcommand(
      "silence", "Silences and maintenance windows on the agent's alerts: add, list, expire");
  silence->require_subcommand(1);
  auto* add = silence->add_subcommand(
      "add", "Silence alerts matching --node/--gpu/--job/--cause for --for; prints the id");
  add->add_option("--node", sil->node, "Match this node");
  add->add_option("--gpu", sil->gpu, "Match this GPU index");
  add->add_option("--job", sil->job, "Match this job");
  add->add_option("--cause", sil->cause, "Match this cause (findings.md, or user:RULE)");
  add->add_option("--for", sil->duration, "How long (default 2h)");
  add->add_option("--comment", sil->comment, "Why");
  add->add_option("--created-by", sil->created_by,
                  "Who, added to the comment (default $USER); the agent records the token "
                  "that authenticated as created_by");
  add->add_flag("--maintenance", sil->maintenance, "A maintenance window, not a silence");
  auto* list = silence->add_subcommand("list", "Active and pending silences");
  list->add_flag("--json", sil->json, "Print JSON");
  auto* expire = silence->add_subcommand("expire", "End a silence now");
  expire->add_option("ID", sil->id, "The silence's id")->required();
  for (auto* c : {add, list, expire}) c->add_option("--agent", sil->agent, "The agent's URL");
  for (auto* c : {add, expire})
    c->add_option("--token-file", sil->token_file,
                  "The agent's admin token (default $GPUWATCH_TOKEN_FILE, else admin.token in "
                  "the default data dir)");
  auto with_agent = [sil](int (*run)(const SilenceCommand&, std::ostream&, std::ostream&)) {
    return [sil, run] {
      if (sil->agent.empty()) sil->agent = DefaultAgentUrl();
      return run(*sil, std::cout, std::cerr);
    };
  };
  out->push_back({add, with_agent(&RunSilenceAdd)});
  out->push_back({list, with_agent(&RunSilenceList)});
  out->push_back({expire, with_agent(&RunSilenceExpire)});

  auto rules_out = std::make_shared<std::string>();
  auto* rules = app->add_subcommand("rules", "gpuwatch's built-in alerting rules");
  rules->require_subcommand(1);
  auto* rules_export = rules->add_subcommand(
      "export",
      "Write the built-in rules as Prometheus alerting rules (YAML; checked with `promtool check "
      "rules`) for teams that alert from Prometheus");
  rules_export->add_option("--out", *rules_out, "Write to this file (default: stdout)");
  out->push_back({rules_export, [rules_out] {
                    const std::string yaml = analyze::PrometheusRulesYaml();
                    if (rules_out->empty()) {
                      std::cout << yaml;
                      return 0;
                    }
                    if (Status st = WriteFileAtomically(*rules_out, yaml); !st.ok())
                      return Fail(st);
                    return 0;
                  }});
}

}  // namespace gpuwatch::cli
