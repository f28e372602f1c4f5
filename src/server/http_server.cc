#include "server/http_server.h"

#include <malloc.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>

#include "common/log.h"
#include "common/time_base.h"
#include "server/accounting_api.h"
#include "server/api.h"
#include "server/dashboard_assets.h"
#include "server/event_api.h"
#include "server/exposition.h"
#include "server/gzip.h"
#include "server/http_cache.h"
#include "server/hub_ingest.h"
#include "server/panel_api.h"
#include "server/query_api.h"
#include "server/remote_write_handler.h"
#include "server/scope.h"
#include "store/remote_write.h"
#include "topo/archive.h"
#include "topo/topo_text.h"

namespace gpuwatch::server {
namespace {
using http::Access;
using http::Request;
using http::Response;
using http::RouteOptions;

constexpr size_t kSmallBodyBytes = 64 * 1024;  // silences, snapshots: a few fields

void Refuse403(const Request& req, Response& res, const std::string& why) {
  res.status = 403;
  res.Set(DumpJson({{"error", req.principal + " is confined to projects (" +
                                  ProjectList(req.scope) + "): " + why}}),
          "application/json");
}

}  // namespace

void HttpServer::EmplaceScoped(const Request& req, std::optional<ScopedQuerier>* out) const {
  std::set<std::string> jobs = ScopeJobs(req);
  // The GPUs those jobs held, while they held them (the accounting ledger's segments).
  std::vector<GpuGrant> grants;
  if (const accounting::Ledger* l = agent_->ledger()) grants = GpuGrantsOf(*l, jobs);
  out->emplace(Reader(), jobs, grants);
}

std::set<std::string> HttpServer::ScopeJobs(const Request& req) const {
  // The store the queries read: --read-from's cluster on a hub that reads one.
  std::set<std::string> jobs =
      JobsInScope(req.scope, agent_->JobList(), store_ || options_.read_from ? &Reader() : nullptr);
  // The ledger's too: ended jobs it still keeps, under the scheduler's project where one came.
  if (!req.scope.empty())
    if (const accounting::Ledger* l = agent_->ledger())
      for (std::string& id : l->JobsOfProjects(req.scope)) jobs.insert(std::move(id));
  return jobs;
}

HttpServer::HttpServer(const Agent* agent, store::Store* store, store::EventStore* events,
                       HttpOptions options)
    : agent_(agent),
      store_(store),
      events_(events),
      options_(std::move(options)),
      server_(options_.limits),
      remote_write_(options_.remote_write) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::AddRoutes() {
  auto& srv = server_;
  const Agent* agent = agent_;
  // Only /metrics is compressed, with gzip level 1, when the client accepts it: scrapes are
  // ~400 KB and frequent; everything else is small or already compressed.
  srv.Route("GET", "/metrics", [agent, this](const Request& req, Response& res) {
    // Reserve the last size: one allocation instead of a dozen regrowths of a ~400 KB
    // body.
    std::string body;
    body.reserve(metrics_size_hint_.load(std::memory_order_relaxed));
    agent->WithState([&](const AgentState& s) {
      RenderPrometheus(s, &body);
      return 0;
    });
    RenderLimitCounters(agent->WithState([](const AgentState& s) { return s.hostname; }),
                        Counters(), &body);
    metrics_size_hint_.store(body.size() + body.size() / 8, std::memory_order_relaxed);
    if (AcceptsGzip(req.Header("Accept-Encoding"))) {
      if (auto z = GzipCompress(body); z.ok()) {
        res.SetHeader("Content-Encoding", "gzip");
        body = std::move(z).value();
      }
    }
    res.Set(std::move(body), "text/plain; version=0.0.4; charset=utf-8");
  });
  auto json_route = [&srv, agent](const char* path, nlohmann::json (*fn)(const AgentState&)) {
    srv.Route("GET", path, [agent, fn](const Request&, Response& res) {
      auto j = agent->WithState([fn](const AgentState& s) { return fn(s); });
      res.Set(DumpJson(j, 2), "application/json");
    });
  };
  json_route("/api/v1/gpus", &GpusJson);
  json_route("/api/v1/processes", &ProcessesJson);
  json_route("/api/v1/capabilities", &CapabilitiesJson);
  if (events_) {
    srv.Route("GET", "/api/v1/events",
              [this, agent](const Request& req, Response& res) {
                // A confined token reads the events of one of its jobs: its log lines, annotations
                // and lifecycle. The node's own events (XIDs, throttling) concern every job on it.
                if (!req.scope.empty() && !ScopeJobs(req).count(req.Param("job")))
                  return Refuse403(req, res,
                                   "the events API needs job= naming one of its projects' jobs");
                ApiRequest api;
                for (const auto& [k, v] : req.params) api.params.emplace(k, v);
                api.now_ms = WallClockMs();
                const std::string host =
                    agent->WithState([](const AgentState& s) { return s.hostname; });
                const ApiResponse r = HandleEventsQuery(*events_, api, host);
                res.status = r.http_status;
                res.Set(r.body, "application/json");
              },
              {.allow_scoped = true});
    srv.Route("POST", "/api/v1/events",
              [this, agent](const Request& req, Response& res) {
                const int64_t now_ms = WallClockMs();
                const std::string host =
                    agent->WithState([](const AgentState& s) { return s.hostname; });
                const ApiResponse r = HandleEventsPost(events_, req.body, now_ms, host);
                res.status = r.http_status;
                if (!r.body.empty()) res.Set(r.body, "application/json");
              },
              {.access = Access::kWrite, .allow_scoped = true});
  } else {
    json_route("/api/v1/events", &EventsJson);
  }
  json_route("/api/v1/host", &HostJson);
  // The flight recorder's window in trace form (`gpuwatch record` polls this). start/end in Unix
  // seconds; default the last 15 minutes.
  srv.Route("GET", "/api/v1/trace", [agent](const Request& req, Response& res) {
    const int64_t now_ms = WallClockMs();
    auto param_ms = [&](const char* name, int64_t def) -> std::optional<int64_t> {
      if (!req.HasParam(name)) return def;
      const std::string v = req.Param(name);
      char* end = nullptr;
      double secs = std::strtod(v.c_str(), &end);
      // Beyond ±3000 years the ms would not fit an int64.
      if (v.empty() || *end != '\0' || !std::isfinite(secs) || std::fabs(secs) > 1e11)
        return std::nullopt;
      return static_cast<int64_t>(secs * 1000);
    };
    auto start = param_ms("start", now_ms - 15 * 60 * 1000);
    auto end = param_ms("end", now_ms);
    if (!start || !end) {
      res.status = 400;
      res.Set(R"({"error":"start and end are Unix seconds"})", "application/json");
      return;
    }
    std::string body;
    for (const auto& line : agent->TraceWindow(*start, *end)) {
      body += line;
      body += '\n';
    }
    res.Set(std::move(body), "application/x-ndjson");
  });
  // The diagnosis engine's findings on this node (findings.md form); job= and node= filter.
  srv.Route("GET", "/api/v1/findings",
            [this, agent](const Request& req, Response& res) {
              nlohmann::json doc = agent->Findings(req.Param("job"), req.Param("node"));
              if (!req.scope.empty()) KeepJobsInScope(doc, "findings", ScopeJobs(req));
              res.Set(doc.dump(), "application/json");
            },
            {.allow_scoped = true});
  // Alerts and silences (docs/format/alerts.md).
  srv.Route("GET", "/api/v1/alerts",
            [this, agent](const Request& req, Response& res) {
              nlohmann::json doc = agent->AlertsJson();
              if (!req.scope.empty()) {
                const std::set<std::string> jobs = ScopeJobs(req);
                KeepJobsInScope(doc, "alerts", jobs);
                KeepJobsInScope(doc, "silences", jobs);
              }
              res.Set(DumpJson(doc, 2), "application/json");
            },
            {.allow_scoped = true});
  srv.Route("POST", "/api/v1/silences",
            [agent](const Request& req, Response& res) {
              nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
              if (body.is_discarded()) {
                res.status = 400;
                res.Set(R"({"error":"the body is not JSON"})", "application/json");
                return;
              }
              auto s = analyze::SilenceFromJson(body, WallClockMs());
              // The author is who authenticated, never what the client wrote (issue 17, D2).
              if (s.ok()) s->created_by = req.principal;
              Result<std::string> id =
                  s.ok() ? agent->AddSilence(*s) : Result<std::string>(s.status());
              if (!id.ok()) {
                res.status = id.status().code() == StatusCode::kResourceExhausted ? 429 : 400;
                res.Set(DumpJson({{"error", id.status().message()}}), "application/json");
                return;
              }
              res.status = 201;
              res.Set(DumpJson({{"id", *id}}), "application/json");
            },
            {.access = Access::kAdmin, .max_body_bytes = kSmallBodyBytes});
  srv.Route("DELETE", R"(/api/v1/silences/([A-Za-z0-9_-]+))",
            [agent](const Request& req, Response& res) {
              Status st = agent->ExpireSilence(req.matches[1]);
              if (!st.ok()) {
                res.status = 404;
                res.Set(DumpJson({{"error", st.message()}}), "application/json");
                return;
              }
              res.Set(R"({"expired":true})", "application/json");
            },
            {.access = Access::kAdmin});
  AddTokenRoutes();
  srv.Route("GET", "/api/v1/snapshots", [agent](const Request&, Response& res) {
    nlohmann::json j = {{"snapshots", nlohmann::json::array()}};
    if (auto* s = agent->snapshots()) {
      for (const auto& i : s->List())
        j["snapshots"].push_back({{"id", i.id},
                                  {"reason", i.reason},
                                  {"job", i.job},
                                  {"node", i.node},
                                  {"t_ms", i.t_ms},
                                  {"from_ms", i.from_ms},
                                  {"records", i.records},
                                  {"job_log_lines", i.job_log_lines},
                                  {"state", i.state},
                                  {"error", i.error},
                                  {"trace", "/api/v1/snapshots/" + i.id + "/trace.jsonl.gz"},
                                  {"job_log", "/api/v1/snapshots/" + i.id + "/job.log"}});
    }
    res.Set(DumpJson(j, 2), "application/json");
  });
  srv.Route("POST", "/api/v1/snapshots",
            [agent](const Request& req, Response& res) {
              auto* s = agent->snapshots();
              if (!s) {
                res.status = 404;
                res.Set(R"({"error":"no --data-dir: snapshots are off"})", "application/json");
                return;
              }
              std::string job = req.Param("job");
              auto r = s->Take("manual", job.substr(0, 256), WallClockMs(), /*manual=*/true);
              if (!r.ok()) {
                res.status = r.status().code() == StatusCode::kResourceExhausted ? 429 : 500;
                res.Set(DumpJson({{"error", r.status().message()}}), "application/json");
                return;
              }
              res.status = 202;
              res.Set(DumpJson({{"id", r->id}, {"records", r->records}}), "application/json");
            },
            {.access = Access::kAdmin, .max_body_bytes = kSmallBodyBytes, .parse_form = true});
  srv.Route(
      "GET", R"(/api/v1/snapshots/([^/]+)/([a-z.]+))", [agent](const Request& req, Response& res) {
        auto* s = agent->snapshots();
        auto path = s ? s->FilePath(req.matches[1], req.matches[2])
                      : Result<std::string>(Status::NotFound("snapshots are off"));
        if (!path.ok()) {
          res.status = 404;
          res.Set(DumpJson({{"error", path.status().message()}}), "application/json");
          return;
        }
        std::FILE* f = std::fopen(path->c_str(), "rb");
        if (!f) {
          res.status = 404;
          return;
        }
        std::string body;
        char buf[1 << 16];
        for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) body.append(buf, n);
        std::fclose(f);
        res.Set(std::move(body), req.matches[2] == "trace.jsonl.gz" ? "application/gzip"
                                                                    : "text/plain; charset=utf-8");
      });
  // R8: the node's topology as of the last check, and the archive of its versions.
  srv.Route("GET", "/api/v1/topology", [agent](const Request&, Response& res) {
    auto j = agent->WithState([](const AgentState& s) -> std::optional<nlohmann::json> {
      if (!s.topology) return std::nullopt;
      nlohmann::json changes = nlohmann::json::array();
      for (const auto& c : s.topology_changes) {
        changes.push_back({{"kind", c.kind},
                           {"subject", c.subject},
                           {"before", c.before},
                           {"after", c.after},
                           {"summary", c.summary}});
      }
      return nlohmann::json{{"version", s.topology_version},
                            {"baselines_stale_before_ms", s.baselines_stale_before_ms},
                            {"last_changes", changes},
                            {"matrix_text", topo::RenderTopoMatrix(s.topology->matrix)},
                            {"snapshot", nlohmann::json::parse(topo::SnapshotToJson(*s.topology))}};
    });
    if (!j) {
      res.status = 503;
      res.Set(R"({"error":"the first topology check has not run yet"})", "application/json");
      return;
    }
    res.Set(DumpJson(*j, 2), "application/json");
  });
  srv.Route("GET", "/api/v1/topology/versions", [agent](const Request&, Response& res) {
    nlohmann::json j = {{"versions", nlohmann::json::array()}};
    if (!agent->data_dir().empty()) {
      auto list = topo::TopologyArchive(agent->data_dir() + "/topology").List();
      if (!list.ok()) {
        res.status = 500;
        res.Set(DumpJson({{"error", list.status().message()}}), "application/json");
        return;
      }
      for (const auto& v : *list) {
        j["versions"].push_back(
            {{"version", v.version},
             {"written_ms", v.taken_at_ms},
             {"url", "/api/v1/topology/versions/" + std::to_string(v.version)}});
      }
    }
    res.Set(DumpJson(j, 2), "application/json");
  });
  srv.Route("GET", R"(/api/v1/topology/versions/([0-9]{1,9}))",
            [agent](const Request& req, Response& res) {
              auto snap = agent->data_dir().empty()
                              ? Result<topo::NodeSnapshot>(Status::NotFound("no --data-dir"))
                              : topo::TopologyArchive(agent->data_dir() + "/topology")
                                    .Load(std::stoi(req.matches[1]));
              if (!snap.ok()) {
                res.status = snap.status().code() == StatusCode::kNotFound ? 404 : 500;
                res.Set(DumpJson({{"error", snap.status().message()}}), "application/json");
                return;
              }
              res.Set(topo::SnapshotToJson(*snap), "application/json");
            });
  srv.Route(
      "GET", "/api/v1/jobs",
      [this, agent](const Request& req, Response& res) {
        std::vector<jobs::JobView> jobs = agent->JobList();
        if (!req.scope.empty())
          std::erase_if(
              jobs, [&](const jobs::JobView& j) { return !ProjectInScope(req.scope, j.project); });
        res.Set(
            DumpJson(JobsJson(jobs, agent->job_socket_path(),
                              [agent](const std::string& job) { return agent->JobBaseline(job); }),
                     2),
            "application/json");
      },
      {.allow_scoped = true});
  srv.Route(
      "GET", R"(/api/v1/jobs/(.+))",
      [agent](const Request& req, Response& res) {
        auto job = agent->JobById(req.matches[1]);
        if (!req.scope.empty() && (!job || !ProjectInScope(req.scope, job->project)))
          return Refuse403(req, res, "job " + req.matches[1] + " is not one of its projects' jobs");
        if (!job) {
          res.status = 404;
          res.Set(R"({"error":"no such job"})", "application/json");
          return;
        }
        res.Set(DumpJson(JobJson(*job, true, agent->JobBaseline(job->id)), 2), "application/json");
      },
      {.allow_scoped = true});
  srv.Route("GET", "/api/v1/accounting",
            [agent](const Request& req, Response& res) {
              if (!agent->ledger()) {
                res.status = 503;
                res.Set(R"({"error":"no accounting ledger"})", "application/json");
                return;
              }
              const AccountingResponse r =
                  HandleAccounting(*agent->ledger(), req.params, req.scope, WallClockMs());
              res.status = r.http_status;
              res.Set(r.body, r.content_type);
            },
            {.allow_scoped = true});
  if (store_) AddQueryRoutes();
  if (agent->hub()) AddHubRoutes();
  // Inline: answered by the I/O thread, so it reports a live process even when every worker is
  // busy.
  srv.Route("GET", "/healthz", [](const Request&, Response& res) { res.Set("ok\n", "text/plain"); },
            {.access = Access::kPublic, .inline_handler = true});
  // The dashboard, from the binary (server/dashboard_assets.h). Its files are compressed
  // once, at the first request that accepts gzip: the script is ~117 KB, ~52 KB gzipped.
  // "no-cache" with an ETag: the browser asks again on every load (a new binary serves a new
  // page at once) and gets a bodiless 304 while the file is unchanged, so a second tab does not
  // download the script again.
  for (const DashboardAsset& a : DashboardAssets()) {
    const std::string etag = AssetEtag(a.body);
    srv.Route("GET", std::string(a.path),
              [a, etag](const Request& req, Response& res) {
                static std::mutex mu;
                static std::map<std::string_view, std::string> gzipped;
                res.SetHeader("Cache-Control", "no-cache");
                res.SetHeader("Vary", "Accept-Encoding");
                res.SetHeader("ETag", etag);
                if (EtagMatches(req.Header("If-None-Match"), etag)) {
                  res.status = 304;
                  return;
                }
                if (AcceptsGzip(req.Header("Accept-Encoding"))) {
                  std::lock_guard<std::mutex> lock(mu);
                  auto it = gzipped.find(a.path);
                  if (it == gzipped.end()) {
                    auto z = GzipCompress(a.body);
                    if (z.ok()) it = gzipped.emplace(a.path, std::move(z).value()).first;
                  }
                  if (it != gzipped.end()) {
                    res.SetHeader("Content-Encoding", "gzip");
                    res.Set(it->second, std::string(a.content_type));
                    return;
                  }
                }
                res.Set(std::string(a.body), std::string(a.content_type));
              },
              {.access = Access::kPublic});
  }
}

std::optional<HttpServer::PushSlot> HttpServer::AdmitPush(Response& res) {
  if (pushes_pending_.fetch_add(1) < options_.max_pending_pushes)
    return std::optional<PushSlot>(std::in_place, pushes_pending_);
  pushes_pending_.fetch_sub(1);
  pushes_shed_.fetch_add(1);
  res.status = 429;
  // Spread the retries: senders that were refused together do not all come back at once.
  res.SetHeader("Retry-After", std::to_string(1 + pushes_shed_.load() % 5));
  res.Set("too many pushes at once; retry after the Retry-After seconds\n", "text/plain");
  return std::nullopt;
}

// The tokens file, managed by admin tokens (server/tokens.h): listed by id, never by token; a
// new token is shown once, in the reply that made it.
void HttpServer::AddTokenRoutes() {
  auto& srv = server_;
  std::shared_ptr<TokensFile> tokens = options_.auth.tokens;
  auto no_file = [](Response& res) {
    res.status = 404;
    res.Set(DumpJson({{"error",
                       "no tokens file: start with --tokens FILE to manage read, write and "
                       "admin tokens"}}),
            "application/json");
  };
  auto error = [](Response& res, int status, const std::string& why) {
    res.status = status;
    res.Set(DumpJson({{"error", why}}), "application/json");
  };
  srv.Route(
      "GET", "/api/v1/tokens",
      [tokens, no_file](const Request&, Response& res) {
        if (!tokens) return no_file(res);
        nlohmann::json list = nlohmann::json::array();
        const int64_t now_ms = WallClockMs();
        for (const TokenEntry& e : tokens->Current()->entries)
          list.push_back(TokenEntryJson(e, now_ms));
        res.Set(DumpJson({{"file", tokens->path()}, {"tokens", list}}, 2), "application/json");
      },
      {.access = Access::kAdmin});
  srv.Route(
      "POST", "/api/v1/tokens",
      [tokens, no_file, error](const Request& req, Response& res) {
        if (!tokens) return no_file(res);
        const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
        if (!body.is_object())
          return error(res, 400, R"(the body must be a JSON object: {"role": "read", ...})");
        const auto role_it = body.find("role");
        const std::optional<Role> role = role_it != body.end() && role_it->is_string()
                                             ? ParseRole(role_it->get_ref<const std::string&>())
                                             : std::nullopt;
        if (!role) return error(res, 400, "\"role\" must be read, write or admin");
        std::vector<std::string> projects;
        if (auto p = body.find("projects"); p != body.end()) {
          if (!p->is_array()) return error(res, 400, "\"projects\" must be a list of names");
          for (const auto& name : *p) {
            if (!name.is_string()) return error(res, 400, "\"projects\" must be a list of names");
            projects.push_back(name.get<std::string>());
          }
        }
        std::optional<int64_t> expires_ms;
        if (auto e = body.find("expires"); e != body.end() && !e->is_null()) {
          // A number goes through the same parser as a string: its range is checked there.
          auto t = e->is_string()   ? ParseApiTimestampMs(e->get<std::string>())
                   : e->is_number() ? ParseApiTimestampMs(e->dump())
                                    : Result<int64_t>(Status::InvalidArgument("not a time"));
          if (!t.ok())
            return error(res, 400,
                         "\"expires\": " + t.status().message() + " (RFC 3339 or Unix seconds)");
          if (*t <= WallClockMs()) return error(res, 400, "\"expires\" is in the past");
          expires_ms = *t;
        }
        auto added = tokens->Add(*role, projects, expires_ms, req.principal);
        if (!added.ok())
          return error(res, added.status().code() == StatusCode::kInvalidArgument ? 400 : 500,
                       added.status().message());
        std::string scope;
        for (const std::string& p : projects) scope += (scope.empty() ? " for " : ",") + p;
        GW_LOG_INFO("tokens: {} added {} token {}{}", req.principal, RoleName(*role),
                    TokenId(added->token), scope);
        nlohmann::json j = TokenEntryJson(*added, WallClockMs());
        j["token"] = added->token;  // shown this once
        res.status = 201;
        res.SetHeader("Cache-Control", "no-store");
        res.Set(DumpJson(j, 2), "application/json");
      },
      {.access = Access::kAdmin, .max_body_bytes = kSmallBodyBytes});
  srv.Route("DELETE", R"(/api/v1/tokens/([0-9a-f]{16}))",
            [tokens, no_file, error](const Request& req, Response& res) {
              if (!tokens) return no_file(res);
              auto revoked = tokens->Revoke(req.matches[1]);
              if (!revoked.ok())
                return error(res, revoked.status().code() == StatusCode::kNotFound ? 404 : 500,
                             revoked.status().message());
              GW_LOG_INFO("tokens: {} revoked {} token {}", req.principal, RoleName(revoked->role),
                          req.matches[1]);
              res.Set(DumpJson({{"revoked", TokenEntryJson(*revoked, WallClockMs())}}),
                      "application/json");
            },
            {.access = Access::kAdmin});
}

// The hub's routes: agents' record streams in, the node list out (server/hub_ingest.h).
void HttpServer::AddHubRoutes() {
  auto& srv = server_;
  HubIngest* hub = agent_->hub();
  srv.Route("POST", "/api/v1/records",
            [this, hub](const Request& req, Response& res) {
              const auto slot = AdmitPush(res);
              if (!slot) return;
              const std::string type = req.Header("Content-Type");
              if (!type.empty() && !type.starts_with("application/x-ndjson") &&
                  !type.starts_with("application/jsonl") && !type.starts_with("text/plain")) {
                res.status = 415;
                res.Set(
                    "records are trace-format JSON lines (Content-Type: "
                    "application/x-ndjson)\n",
                    "text/plain");
                return;
              }
              // Agents send their spool's entries snappy-compressed, as remote-write does.
              const std::string encoding = req.Header("Content-Encoding");
              std::string inflated;
              if (encoding == "snappy") {
                auto body =
                    store::SnappyUncompress(req.body, 4 * options_.max_write_body_bytes, "records");
                if (!body.ok()) {
                  res.status = body.status().code() == StatusCode::kResourceExhausted ? 413 : 400;
                  res.Set(body.status().message() + "\n", "text/plain");
                  return;
                }
                inflated = std::move(body).value();
              } else if (!encoding.empty() && encoding != "identity") {
                res.status = 415;
                res.Set("records come as they are or with Content-Encoding: snappy\n",
                        "text/plain");
                return;
              }
              const HttpReply r = hub->HandleRecords(
                  encoding == "snappy" ? inflated : req.body, req.Header("X-Gpuwatch-Node"),
                  req.Header("X-Gpuwatch-Spool"), req.Header("X-Gpuwatch-Seq"), WallClockMs());
              res.status = r.status;
              res.Set(r.body, r.status == 200 ? "application/json" : "text/plain");
            },
            {.access = Access::kWrite, .max_body_bytes = options_.max_write_body_bytes});
  srv.Route("GET", "/api/v1/nodes", [this, hub](const Request&, Response& res) {
    res.Set(DumpJson(hub->NodesJson(agent_->FindingList(), WallClockMs()), 2), "application/json");
  });
}

void HttpServer::AddQueryRoutes() {
  auto& srv = server_;
  // A hub with --remote-write passes on what it stored; one that also reads from there
  // (--read-from) relays instead: its queries read the cluster its series go to, so it keeps
  // none of its own (RemoteWriteGate::Relay).
  HubPusher* f = agent_->is_hub() ? agent_->forwarder() : nullptr;
  RemoteWriteGate::StoredFn forward;
  if (f && !options_.read_from)
    forward = [f](const std::vector<store::Head::Input>& batch) { f->AddSeries(batch); };
  srv.Route(
      "POST", "/api/v1/write",
      [this, forward, relay = options_.read_from ? f : nullptr](const Request& req, Response& res) {
        const auto slot = AdmitPush(res);
        if (!slot) return;
        // Series are counted per sender: the token's principal, the address it came from, and
        // the node an agent names (X-Gpuwatch-Node): agents behind one address with one token
        // each keep their own budget, so one node's label explosion does not stop another's
        // new series. (A writer that names many nodes is still held by max_series in all.)
        std::string sender = req.principal + "@" + req.remote_address;
        if (const std::string node = req.Header("X-Gpuwatch-Node"); ValidNodeName(node))
          sender += "#" + node;
        HttpReply r;
        if (relay) {
          // While the destination is behind, agents keep their data in their own
          // spools: the forward spool is never filled to its bound, where it would
          // drop its oldest entries (docs/limits.md).
          if (const uint64_t held = relay->samples_spool_bytes();
              held > relay->options().spool.max_bytes / 2)
            r = remote_write_.RefuseForwardBacklog(held, relay->options().url);
          else
            r = remote_write_.Relay(req.body, req.Header("Content-Encoding"), sender, WallClockMs(),
                                    [relay](std::string_view body, uint64_t samples) {
                                      return relay->SpoolSamples(body, samples);
                                    });
        } else {
          r = remote_write_.Handle(store_, req.body, req.Header("Content-Encoding"), sender,
                                   forward);
        }
        res.status = r.status;
        if (!r.body.empty()) res.Set(r.body, "text/plain");
        if (r.retry_after_s > 0) res.SetHeader("Retry-After", std::to_string(r.retry_after_s));
        // A large request's peak (the decoded batch) is returned to the OS now, not held as
        // RSS until the heap top happens to be free (issue 17, D3).
        if (req.body.size() > (1u << 20)) malloc_trim(0);
      },
      {.access = Access::kWrite,
       .max_body_bytes = options_.max_write_body_bytes,
       .allow_scoped = true});
  // The Prometheus query API (GET and form POST, as Grafana sends both).
  auto query = [this](const Request& req, Response& res) {
    // At most max_concurrent_queries evaluate at once; the rest are told to come back, so
    // queries can never take every worker from /metrics and the write path.
    if (queries_running_.fetch_add(1) >= options_.max_concurrent_queries) {
      queries_running_.fetch_sub(1);
      queries_refused_[0].fetch_add(1);
      res.status = 503;
      res.SetHeader("Retry-After", "1");
      res.Set(
          R"({"status":"error","errorType":"unavailable","error":"too many concurrent queries; retry"})",
          "application/json");
      return;
    }
    struct Release {
      std::atomic<size_t>& n;
      ~Release() { n.fetch_sub(1); }
    } release{queries_running_};
    ApiRequest api;
    api.path = req.path;
    for (const auto& [k, v] : req.params) api.params.emplace(k, v);
    api.now_ms = WallClockMs();
    query::EngineOptions o = options_.query;
    o.deadline = std::chrono::steady_clock::now() + options_.query_timeout;
    o.cancelled = req.cancelled.get();
    // A confined token's PromQL reads through a querier that only selects its jobs' series.
    std::optional<ScopedQuerier> scoped;
    if (!req.scope.empty()) EmplaceScoped(req, &scoped);
    const ApiResponse r =
        HandleQueryApi(scoped ? static_cast<const store::Querier&>(*scoped) : Reader(), o, api);
    if (r.error == StatusCode::kDeadlineExceeded)
      queries_refused_[1].fetch_add(1);
    else if (r.error == StatusCode::kCancelled)
      queries_refused_[2].fetch_add(1);
    else if (r.error == StatusCode::kResourceExhausted)
      queries_refused_[3].fetch_add(1);
    res.status = r.http_status;
    res.Set(r.body, "application/json");
  };
  for (const char* path : {"/api/v1/query", "/api/v1/query_range", "/api/v1/labels",
                           "/api/v1/series", R"(/api/v1/label/([^/]+)/values)"}) {
    srv.Route("GET", path, query, {.allow_scoped = true});
    srv.Route("POST", path, query, {.parse_form = true, .allow_scoped = true});
  }
  // The dashboard's charts, downsampled here (server/panel_api.h).
  srv.Route("GET", std::string(kPanelApiPath),
            [this](const Request& req, Response& res) {
              ApiRequest api;
              api.path = req.path;
              for (const auto& [k, v] : req.params) api.params.emplace(k, v);
              api.now_ms = WallClockMs();
              std::optional<ScopedQuerier> scoped;
              if (!req.scope.empty()) EmplaceScoped(req, &scoped);
              const ApiResponse r = HandlePanelApi(
                  scoped ? static_cast<const store::Querier&>(*scoped) : Reader(), api);
              res.status = r.http_status;
              res.Set(r.body, "application/json");
            },
            {.allow_scoped = true});
}

Status HttpServer::Start(const ListenAddress& addr) {
  AddRoutes();
  server_.SetAuthorizer(MakeAuthorizer(options_.auth));
  server_.SetTrustedProxies(options_.trusted_proxies);
  if (!options_.tls_cert_file.empty())
    GW_RETURN_IF_ERROR(server_.EnableTls(options_.tls_cert_file, options_.tls_key_file));
  return server_.Start(addr.host, addr.port);
}

void HttpServer::Stop() { server_.Stop(); }

LimitCounters HttpServer::Counters() const {
  LimitCounters c;
  const http::ServerStats st = server_.Stats();
  c.http_requests = st.requests;
  c.http_connections = st.connections_open;
  if (server_.tls()) {
    c.tls = true;
    // Unknown (a notAfter OpenSSL could not read) is left out, not 0: 0 would fire every
    // expiry alert.
    if (st.tls_not_after_s > 0) c.tls_not_after_s = st.tls_not_after_s;
    c.tls_reloads = st.tls_reloads;
    c.tls_reload_failures = st.tls_reload_failures;
  }
  for (size_t i = 0; i < st.refused.size(); ++i)
    c.http_refused.emplace_back(http::RefusalName(static_cast<http::Refusal>(i)), st.refused[i]);
  static constexpr std::string_view kQueryReasons[] = {"concurrency", "timeout", "cancelled",
                                                       "limit"};
  for (size_t i = 0; i < 4; ++i)
    c.queries_refused.emplace_back(kQueryReasons[i], queries_refused_[i].load());
  const RemoteWriteGate::Counts rw = remote_write_.counts();
  c.remote_write_series = rw.series_created;
  c.remote_write_refused_series_limit = rw.samples_refused_series_limit;
  c.remote_write_refused_out_of_bounds = rw.samples_refused_out_of_bounds;
  c.remote_write_refused_too_large = rw.requests_refused_too_large;
  c.pushes_shed = pushes_shed_.load();
  c.remote_write_refused_forward_backlog = rw.requests_refused_forward_backlog;
  if (const HubPusher* p = agent_->pusher()) c.push = p->counters();
  if (const HubPusher* f = agent_->forwarder()) c.forward = f->counters();
  if (store_) {
    const store::StoreHealth h = store_->Health();
    c.has_store = true;
    c.store_blocks = h.blocks;
    c.store_block_bytes = h.block_bytes;
    c.store_wal_bytes = h.wal_bytes;
    c.store_head_series = h.head_series;
    c.store_write_errors = h.write_errors;
    c.store_flush_errors = h.flush_errors;
  }
  if (events_) {
    c.has_events = true;
    c.events_bytes = events_->stats().bytes;
    c.events_bulk_bytes = events_->BulkStats().bytes;
  }
  return c;
}

}  // namespace gpuwatch::server
