#include "cli/job_view.h"

#include <fmt/format.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <vector>

#include "cli/agent_flags.h"
#include "common/strings.h"
#include "server/auth.h"
#include "server/http_client_tls.h"

namespace gpuwatch::cli {
namespace {

using nlohmann::json;

std::string Num(const json& v, const char* fmtstr, double scale = 1) {
  if (!v.is_number()) return "-";
  return fmt::format(fmt::runtime(fmtstr), v.get<double>() * scale);
}

std::string Ms(const json& v) { return v.is_number() ? Num(v, "{:.1f}", 1000) : "-"; }
std::string Pct(const json& v) { return v.is_number() ? Num(v, "{:.1f}", 100) : "-"; }

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "-";
  std::string s = it->get<std::string>();
  if (s.empty()) return "-";
  // Job ids and users come from clients: never print control characters to a terminal.
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

std::string Gpus(const json& a) {
  if (!a.is_array() || a.empty()) return "-";
  std::string out;
  for (const auto& g : a) {
    if (!out.empty()) out += ',';
    out += g.dump();
  }
  return out;
}

struct Table {
  std::vector<std::vector<std::string>> rows;
  std::string Render() const {
    std::vector<size_t> w;
    for (const auto& r : rows)
      for (size_t i = 0; i < r.size(); ++i) {
        if (w.size() <= i) w.push_back(0);
        w[i] = std::max(w[i], r[i].size());
      }
    std::string out;
    for (const auto& r : rows) {
      for (size_t i = 0; i < r.size(); ++i) {
        out += r[i];
        if (i + 1 < r.size()) out += std::string(w[i] - r[i].size() + 2, ' ');
      }
      out += '\n';
    }
    return out;
  }
};

}  // namespace

std::string RenderJobsTable(const json& reply) {
  const json& jobs = reply.value("jobs", json::array());
  if (!jobs.is_array() || jobs.empty())
    return fmt::format("no jobs (jobs report to {})\n", reply.value("socket", std::string("-")));
  Table t;
  t.rows.push_back({"JOB", "STATE", "SOURCE", "USER", "TEMPLATE", "RANKS", "GPUS", "IT/S",
                    "SAMPLES/S", "STEP_P50_MS", "STEP_P95_MS", "DATA%", "COMM%", "GPU_H"});
  for (const auto& j : jobs) {
    const json& w = j.value("window", json::object());
    t.rows.push_back({Str(j, "id"), Str(j, "state"), Str(j, "source"), Str(j, "user"),
                      Str(j, "template"), Num(j.value("ranks_reporting", json()), "{:.0f}"),
                      Gpus(j.value("gpus", json())),
                      Num(w.value("iterations_per_s", json()), "{:.2f}"),
                      Num(w.value("samples_per_s", json()), "{:.1f}"),
                      Ms(w.value("step_p50_s", json())), Ms(w.value("step_p95_s", json())),
                      Pct(w.value("data_wait_ratio", json())), Pct(w.value("comm_ratio", json())),
                      Num(j.value("gpu_seconds", json()), "{:.2f}", 1.0 / 3600)});
  }
  return t.Render();
}

std::string RenderJobTable(const json& j) {
  std::string out = fmt::format(
      "job {}  state {}  source {}  user {}  template {}  project {}  world size {}\n",
      Str(j, "id"), Str(j, "state"), Str(j, "source"), Str(j, "user"), Str(j, "template"),
      Str(j, "project"), Num(j.value("world_size", json()), "{:.0f}"));
  const json& w = j.value("window", json::object());
  out += fmt::format(
      "  {} it/s, {} samples/s, step p50/p95/p99 {}/{}/{} ms, data {}%, comm {}%, "
      "checkpoint {}%, GPUs {}, GPU time {} h\n",
      Num(w.value("iterations_per_s", json()), "{:.2f}"),
      Num(w.value("samples_per_s", json()), "{:.1f}"), Ms(w.value("step_p50_s", json())),
      Ms(w.value("step_p95_s", json())), Ms(w.value("step_p99_s", json())),
      Pct(w.value("data_wait_ratio", json())), Pct(w.value("comm_ratio", json())),
      Pct(w.value("checkpoint_ratio", json())), Gpus(j.value("gpus", json())),
      Num(j.value("gpu_seconds", json()), "{:.2f}", 1.0 / 3600));
  const json& ranks = j.value("ranks", json::array());
  if (!ranks.is_array() || ranks.empty()) {
    out += "  (no ranks report through the job protocol; pids " +
           (j.contains("pids") ? j["pids"].dump() : std::string("[]")) + ")\n";
    return out;
  }
  Table t;
  t.rows.push_back({"RANK", "PID", "STATE", "HUNG", "GPUS", "STEPS", "LAST_STEP", "IT/S", "P50_MS",
                    "P95_MS", "P99_MS", "DATA%", "COMM%", "CKPT%", "LOSS", "PHASE"});
  for (const auto& r : ranks) {
    const json& rw = r.value("window", json::object());
    std::string state = Str(r, "state");
    if (r.value("exit_code", json()).is_number())
      state += fmt::format("({})", r["exit_code"].get<int>());
    t.rows.push_back(
        {Num(r.value("rank", json()), "{:.0f}"), Num(r.value("pid", json()), "{:.0f}"), state,
         r.value("hung", false) ? "yes" : "no", Gpus(r.value("gpus", json())),
         Num(r.value("steps_total", json()), "{:.0f}"), Num(r.value("last_step", json()), "{:.0f}"),
         Num(rw.value("iterations_per_s", json()), "{:.2f}"), Ms(rw.value("step_p50_s", json())),
         Ms(rw.value("step_p95_s", json())), Ms(rw.value("step_p99_s", json())),
         Pct(rw.value("data_wait_ratio", json())), Pct(rw.value("comm_ratio", json())),
         Pct(rw.value("checkpoint_ratio", json())), Num(rw.value("loss", json()), "{:.4g}"),
         Str(r, "phase")});
  }
  return out + t.Render();
}

std::string EncodePathSegment(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~')
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

std::string DefaultAgentUrl() {
  const char* env = std::getenv("GPUWATCH_AGENT");
  return env && *env ? env : "http://127.0.0.1:9470";
}

namespace {
// The host of "http://host:port/..." ("[::1]" without brackets).
std::string UrlHost(std::string_view url) {
  if (const size_t scheme = url.find("://"); scheme != std::string_view::npos)
    url.remove_prefix(scheme + 3);
  if (url.starts_with("[")) return std::string(url.substr(1, url.find(']') - 1));
  return std::string(url.substr(0, url.find_first_of(":/")));
}

// The CLI's client of an agent or hub: an https:// URL is verified against the system's CAs,
// or the bundle $GPUWATCH_CA_FILE names (a private CA, as `--hub-ca-file` is for agents).
void ConfigureClient(httplib::Client& c, const std::string& url) {
  c.set_connection_timeout(3);
  c.set_read_timeout(30);
  const char* ca = std::getenv("GPUWATCH_CA_FILE");
  server::VerifyServer(c, url, ca != nullptr ? ca : "");
}

std::string ErrorOf(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_string())
    return j["error"].get<std::string>();
  return body.substr(0, 200);
}
}  // namespace

Result<std::string> AgentGet(const std::string& agent_url, const std::string& path) {
  httplib::Client c(agent_url);
  ConfigureClient(c, agent_url);
  // Reads need a token where the agent listens beyond loopback or has a tokens file: the one
  // in $GPUWATCH_TOKEN_FILE, else (for an agent on this machine only: a token is never sent to
  // another host unasked) the local admin token, tried after a 401.
  httplib::Headers headers;
  const char* env = std::getenv("GPUWATCH_TOKEN_FILE");
  if (env && *env) {
    auto token = server::ReadTokenFile(env);
    if (!token.ok()) return token.status();
    headers.emplace("Authorization", "Bearer " + *token);
  }
  auto res = c.Get(path, headers);
  if (res && res->status == 401 && headers.empty() && server::IsLoopbackHost(UrlHost(agent_url))) {
    auto token = FindAgentToken("");
    if (token.ok() && !token->empty()) {
      headers.emplace("Authorization", "Bearer " + *token);
      res = c.Get(path, headers);
    }
  }
  if (!res)
    return Status::Unavailable("no agent answers at " + agent_url + " (" +
                               httplib::to_string(res.error()) +
                               "); start one with `gpuwatch up` or pass --agent URL");
  if (res->status == 404) return Status::NotFound(path + ": not found at " + agent_url);
  if (res->status == 401 || res->status == 403)
    return Status::PermissionDenied(fmt::format(
        "{}{}: HTTP {}: {}; set GPUWATCH_TOKEN_FILE to a file (mode 0600) holding a read token",
        agent_url, path, res->status, ErrorOf(res->body)));
  if (res->status != 200)
    return Status::Unavailable(fmt::format("{}{}: HTTP {}", agent_url, path, res->status));
  return std::move(res->body);
}

Result<json> AgentGetJson(const std::string& agent_url, const std::string& path) {
  auto body = AgentGet(agent_url, path);
  if (!body.ok()) return body.status();
  json j = json::parse(*body, nullptr, false);
  if (j.is_discarded()) return Status::Corruption(agent_url + path + ": reply is not JSON");
  return j;
}

Result<std::string> FindAgentToken(const std::string& token_file) {
  if (!token_file.empty()) return server::ReadTokenFile(token_file);
  if (const char* env = std::getenv("GPUWATCH_TOKEN_FILE"); env && *env)
    return server::ReadTokenFile(env);
  // Where `gpuwatch up` keeps its data dir by default (cli/agent_flags.h).
  std::vector<std::string> dirs = {"/var/lib/gpuwatch"};
  if (std::string user = UserStateDir(); !user.empty()) dirs.push_back(std::move(user));
  for (const auto& d : dirs) {
    const std::string path = d + "/" + server::kAdminTokenFile;
    if (::access(path.c_str(), R_OK) != 0) continue;
    if (auto t = server::ReadTokenFile(path); t.ok()) return t;
  }
  return std::string();
}

namespace {
Result<httplib::Headers> AuthHeaders(const std::string& token_file) {
  auto token = FindAgentToken(token_file);
  if (!token.ok()) return token.status();
  httplib::Headers h;
  if (!token->empty()) h.emplace("Authorization", "Bearer " + *token);
  return h;
}
}  // namespace

Result<json> AgentSendJson(const std::string& agent_url, const std::string& method,
                           const std::string& path, const std::string& body,
                           const std::string& token_file) {
  auto headers = AuthHeaders(token_file);
  if (!headers.ok()) return headers.status();
  httplib::Client c(agent_url);
  ConfigureClient(c, agent_url);
  auto res = method == "DELETE" ? c.Delete(path, *headers)
                                : c.Post(path, *headers, body, "application/json");
  if (!res)
    return Status::Unavailable("no agent answers at " + agent_url + " (" +
                               httplib::to_string(res.error()) +
                               "); start one with `gpuwatch up` or pass --agent URL");
  if (res->status / 100 != 2)
    return Status::InvalidArgument(
        fmt::format("{} {}: HTTP {}: {}", method, path, res->status, ErrorOf(res->body)));
  json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded()) return Status::Corruption(agent_url + path + ": reply is not JSON");
  return j;
}

Status AgentAnnotate(const std::string& agent_url, const std::string& text, const std::string& job,
                     const std::string& token_file) {
  if (text.empty()) return Status::InvalidArgument("annotate: empty text");
  auto headers = AuthHeaders(token_file);
  if (!headers.ok()) return headers.status();
  json e = {{"kind", "annotation"}, {"severity", "info"}, {"text", text}};
  if (!job.empty()) e["job"] = job;
  httplib::Client c(agent_url);
  ConfigureClient(c, agent_url);
  auto res = c.Post("/api/v1/events", *headers,
                    json::array({e}).dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
  if (!res)
    return Status::Unavailable("no agent answers at " + agent_url + " (" +
                               httplib::to_string(res.error()) + ")");
  if (res->status == 404)
    return Status::Unavailable("the agent at " + agent_url +
                               " keeps no events (start it with --data-dir)");
  if (res->status / 100 != 2)
    return Status::InvalidArgument(
        fmt::format("agent refused the annotation: HTTP {} {}", res->status, res->body));
  return Status::Ok();
}

void RegisterJobCommands(CLI::App* app, Commands* out) {
  struct Flags {
    std::string agent = DefaultAgentUrl(), job, text, annotate_job, token_file;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  auto* jobs = app->add_subcommand(
      "jobs", "Running and recent jobs on this node: throughput, step time, data/comm shares");
  jobs->add_option("--agent", f->agent,
                   "The agent's URL (default $GPUWATCH_AGENT or http://127.0.0.1:9470)");
  jobs->add_flag("--json", f->json, "Print the agent's JSON");
  auto* job = app->add_subcommand("job", "One job: its ranks, their steps, GPUs and state");
  job->add_option("id", f->job, "Job id")->required();
  job->add_option("--agent", f->agent, "The agent's URL");
  job->add_flag("--json", f->json, "Print the agent's JSON");
  auto show = [f](bool all) {
    auto j =
        AgentGetJson(f->agent, all ? "/api/v1/jobs" : "/api/v1/jobs/" + EncodePathSegment(f->job));
    if (!j.ok()) return Fail(j.status());
    if (f->json)
      std::cout << j->dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    else
      std::cout << (all ? RenderJobsTable(*j) : RenderJobTable(*j));
    return 0;
  };
  out->push_back({jobs, [show] { return show(true); }});
  out->push_back({job, [show] { return show(false); }});

  auto* annotate = app->add_subcommand(
      "annotate", "Put a note on the time line (R21), e.g. gpuwatch annotate \"switched to TP=4\"");
  annotate->add_option("text", f->text, "What changed")->required();
  annotate->add_option("--job", f->annotate_job, "The job it concerns");
  annotate->add_option("--agent", f->agent, "The agent's URL");
  annotate->add_option("--token-file", f->token_file,
                       "A token of the agent (default $GPUWATCH_TOKEN_FILE, else admin.token "
                       "in the default data dir)");
  out->push_back(
      {annotate, [f] {
         if (Status st = AgentAnnotate(f->agent, f->text, f->annotate_job, f->token_file); !st.ok())
           return Fail(st);
         return 0;
       }});
}

}  // namespace gpuwatch::cli
