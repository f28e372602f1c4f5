#include "cli/alerts_cmd.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli/config_file.h"
#include "cli/job_view.h"

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

}  // namespace gpuwatch::cli
