#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "common/log.h"
#include "common/time_base.h"
#include "server/api.h"
#include "server/event_api.h"
#include "server/exposition.h"
#include "server/gzip.h"
#include "server/query_api.h"
#include "server/remote_write_handler.h"
#include "topo/archive.h"
#include "topo/topo_text.h"

namespace gpuwatch::server {
namespace {
// Set by the pre-routing handler from Accept-Encoding; a client-sent value is removed first.
constexpr char kGzipAccepted[] = "X-Gpuwatch-Gzip-Accepted";
}  // namespace

HttpServer::HttpServer(const Agent* agent, store::Store* store, store::EventStore* events)
    : agent_(agent), store_(store), events_(events), server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start(const ListenAddress& addr) {
  auto& srv = *server_;
  // Replies go out as two writes (header, body): without TCP_NODELAY, Nagle holds the second
  // until the client's delayed ACK, 40 ms per small reply on a kept-alive connection.
  srv.set_tcp_nodelay(true);
  const Agent* agent = agent_;
  // httplib 0.11 compresses any text response itself, choosing Brotli at quality 11 whenever
  // "br" appears in Accept-Encoding (over a second of CPU per scrape). So the header is taken
  // off every request before routing; /metrics compresses with gzip level 1 itself when the
  // client accepted gzip, and everything else goes out uncompressed. The request object is
  // not const in httplib (only the handler's view of it is), so the const_cast is defined.
  srv.set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    auto& r = const_cast<httplib::Request&>(req);
    const bool gzip = AcceptsGzip(r.get_header_value("Accept-Encoding"));
    r.headers.erase("Accept-Encoding");
    r.headers.erase(kGzipAccepted);
    if (gzip) r.headers.emplace(kGzipAccepted, "1");
    return httplib::Server::HandlerResponse::Unhandled;
  });
  srv.Get("/metrics", [agent, this](const httplib::Request& req, httplib::Response& res) {
    // Reserve the last size: one allocation instead of a dozen regrowths of a ~400 KB body.
    std::string body;
    body.reserve(metrics_size_hint_.load(std::memory_order_relaxed));
    agent->WithState([&](const AgentState& s) {
      RenderPrometheus(s, &body);
      return 0;
    });
    metrics_size_hint_.store(body.size() + body.size() / 8, std::memory_order_relaxed);
    if (req.get_header_value(kGzipAccepted) == "1") {
      if (auto z = GzipCompress(body); z.ok()) {
        res.set_header("Content-Encoding", "gzip");
        body = std::move(z).value();
      }
    }
    res.set_content(std::move(body), "text/plain; version=0.0.4; charset=utf-8");
  });
  auto json_route = [&srv, agent](const char* path, nlohmann::json (*fn)(const AgentState&)) {
    srv.Get(path, [agent, fn](const httplib::Request&, httplib::Response& res) {
      auto j = agent->WithState([fn](const AgentState& s) { return fn(s); });
      res.set_content(DumpJson(j, 2), "application/json");
    });
  };
  json_route("/api/v1/gpus", &GpusJson);
  json_route("/api/v1/processes", &ProcessesJson);
  json_route("/api/v1/capabilities", &CapabilitiesJson);
  if (events_) {
    srv.Get("/api/v1/events", [this, agent](const httplib::Request& req, httplib::Response& res) {
      ApiRequest api;
      for (const auto& [k, v] : req.params) api.params.emplace(k, v);
      api.now_ms = WallClockMs();
      const std::string host = agent->WithState([](const AgentState& s) { return s.hostname; });
      const ApiResponse r = HandleEventsQuery(*events_, api, host);
      res.status = r.http_status;
      res.set_content(r.body, "application/json");
    });
    srv.Post("/api/v1/events", [this, agent](const httplib::Request& req, httplib::Response& res) {
      const int64_t now_ms = WallClockMs();
      const std::string host = agent->WithState([](const AgentState& s) { return s.hostname; });
      const ApiResponse r = HandleEventsPost(events_, req.body, now_ms, host);
      res.status = r.http_status;
      if (!r.body.empty()) res.set_content(r.body, "application/json");
    });
  } else {
    json_route("/api/v1/events", &EventsJson);
  }
  json_route("/api/v1/host", &HostJson);
  // The flight recorder's window in trace form (`gpuwatch record` polls this). start/end in Unix
  // seconds; default the last 15 minutes.
  srv.Get("/api/v1/trace", [agent](const httplib::Request& req, httplib::Response& res) {
    const int64_t now_ms = WallClockMs();
    auto param_ms = [&](const char* name, int64_t def) -> std::optional<int64_t> {
      if (!req.has_param(name)) return def;
      const std::string v = req.get_param_value(name);
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
      res.set_content(R"({"error":"start and end are Unix seconds"})", "application/json");
      return;
    }
    std::string body;
    for (const auto& line : agent->TraceWindow(*start, *end)) {
      body += line;
      body += '\n';
    }
    res.set_content(std::move(body), "application/x-ndjson");
  });
  // The diagnosis engine's findings on this node (findings.md form); job= and node= filter.
  srv.Get("/api/v1/findings", [agent](const httplib::Request& req, httplib::Response& res) {
    res.set_content(agent
                        ->Findings(req.has_param("job") ? req.get_param_value("job") : "",
                                   req.has_param("node") ? req.get_param_value("node") : "")
                        .dump(),
                    "application/json");
  });
  // Alerts and silences (docs/format/alerts.md).
  srv.Get("/api/v1/alerts", [agent](const httplib::Request&, httplib::Response& res) {
    res.set_content(DumpJson(agent->AlertsJson(), 2), "application/json");
  });
  srv.Post("/api/v1/silences", [agent](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded()) {
      res.status = 400;
      res.set_content(R"({"error":"the body is not JSON"})", "application/json");
      return;
    }
    auto s = analyze::SilenceFromJson(body, WallClockMs());
    Result<std::string> id = s.ok() ? agent->AddSilence(*s) : Result<std::string>(s.status());
    if (!id.ok()) {
      res.status = id.status().code() == StatusCode::kResourceExhausted ? 429 : 400;
      res.set_content(DumpJson({{"error", id.status().message()}}), "application/json");
      return;
    }
    res.status = 201;
    res.set_content(DumpJson({{"id", *id}}), "application/json");
  });
  srv.Delete(R"(/api/v1/silences/([A-Za-z0-9]+))",
             [agent](const httplib::Request& req, httplib::Response& res) {
               Status st = agent->ExpireSilence(req.matches[1].str());
               if (!st.ok()) {
                 res.status = 404;
                 res.set_content(DumpJson({{"error", st.message()}}), "application/json");
                 return;
               }
               res.set_content(R"({"expired":true})", "application/json");
             });
  srv.Get("/api/v1/snapshots", [agent](const httplib::Request&, httplib::Response& res) {
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
    res.set_content(DumpJson(j, 2), "application/json");
  });
  srv.Post("/api/v1/snapshots", [agent](const httplib::Request& req, httplib::Response& res) {
    auto* s = agent->snapshots();
    if (!s) {
      res.status = 404;
      res.set_content(R"({"error":"no --data-dir: snapshots are off"})", "application/json");
      return;
    }
    std::string job = req.has_param("job") ? req.get_param_value("job") : "";
    auto r = s->Take("manual", job.substr(0, 256), WallClockMs(), /*manual=*/true);
    if (!r.ok()) {
      res.status = r.status().code() == StatusCode::kResourceExhausted ? 429 : 500;
      res.set_content(DumpJson({{"error", r.status().message()}}), "application/json");
      return;
    }
    res.status = 202;
    res.set_content(DumpJson({{"id", r->id}, {"records", r->records}}), "application/json");
  });
  srv.Get(R"(/api/v1/snapshots/([^/]+)/([a-z.]+))",
          [agent](const httplib::Request& req, httplib::Response& res) {
            auto* s = agent->snapshots();
            auto path = s ? s->FilePath(req.matches[1].str(), req.matches[2].str())
                          : Result<std::string>(Status::NotFound("snapshots are off"));
            if (!path.ok()) {
              res.status = 404;
              res.set_content(DumpJson({{"error", path.status().message()}}), "application/json");
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
            res.set_content(std::move(body), req.matches[2].str() == "trace.jsonl.gz"
                                                 ? "application/gzip"
                                                 : "text/plain; charset=utf-8");
          });
  // R8: the node's topology as of the last check, and the archive of its versions.
  srv.Get("/api/v1/topology", [agent](const httplib::Request&, httplib::Response& res) {
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
      res.set_content(R"({"error":"the first topology check has not run yet"})",
                      "application/json");
      return;
    }
    res.set_content(DumpJson(*j, 2), "application/json");
  });
  srv.Get("/api/v1/topology/versions", [agent](const httplib::Request&, httplib::Response& res) {
    nlohmann::json j = {{"versions", nlohmann::json::array()}};
    if (!agent->data_dir().empty()) {
      auto list = topo::TopologyArchive(agent->data_dir() + "/topology").List();
      if (!list.ok()) {
        res.status = 500;
        res.set_content(DumpJson({{"error", list.status().message()}}), "application/json");
        return;
      }
      for (const auto& v : *list) {
        j["versions"].push_back(
            {{"version", v.version},
             {"written_ms", v.taken_at_ms},
             {"url", "/api/v1/topology/versions/" + std::to_string(v.version)}});
      }
    }
    res.set_content(DumpJson(j, 2), "application/json");
  });
  srv.Get(R"(/api/v1/topology/versions/([0-9]{1,9}))",
          [agent](const httplib::Request& req, httplib::Response& res) {
            auto snap = agent->data_dir().empty()
                            ? Result<topo::NodeSnapshot>(Status::NotFound("no --data-dir"))
                            : topo::TopologyArchive(agent->data_dir() + "/topology")
                                  .Load(std::stoi(req.matches[1].str()));
            if (!snap.ok()) {
              res.status = snap.status().code() == StatusCode::kNotFound ? 404 : 500;
              res.set_content(DumpJson({{"error", snap.status().message()}}), "application/json");
              return;
            }
            res.set_content(topo::SnapshotToJson(*snap), "application/json");
          });
  srv.Get("/api/v1/jobs", [agent](const httplib::Request&, httplib::Response& res) {
    res.set_content(DumpJson(JobsJson(agent->jobs().Jobs(), agent->job_socket_path()), 2),
                    "application/json");
  });
  srv.Get(R"(/api/v1/jobs/(.+))", [agent](const httplib::Request& req, httplib::Response& res) {
    auto job = agent->jobs().Job(req.matches[1].str());
    if (!job) {
      res.status = 404;
      res.set_content(R"({"error":"no such job"})", "application/json");
      return;
    }
    res.set_content(DumpJson(JobJson(*job, true), 2), "application/json");
  });
  if (store_) {
    // Bodies are bounded by the decoder's limits; httplib reads the body before the handler.
    srv.set_payload_max_length(64u << 20);
    srv.Post("/api/v1/write", [this](const httplib::Request& req, httplib::Response& res) {
      const HttpReply r =
          HandleRemoteWrite(store_, req.body, req.get_header_value("Content-Encoding"));
      res.status = r.status;
      if (!r.body.empty()) res.set_content(r.body, "text/plain");
    });
    // The Prometheus query API (GET and form POST, as Grafana sends both).
    auto query = [this](const httplib::Request& req, httplib::Response& res) {
      ApiRequest api;
      api.path = req.path;
      for (const auto& [k, v] : req.params) api.params.emplace(k, v);
      api.now_ms = WallClockMs();
      const ApiResponse r = HandleQueryApi(*store_, query_options_, api);
      res.status = r.http_status;
      res.set_content(r.body, "application/json");
    };
    for (const char* path : {"/api/v1/query", "/api/v1/query_range", "/api/v1/labels",
                             "/api/v1/series", R"(/api/v1/label/([^/]+)/values)"}) {
      srv.Get(path, query);
      srv.Post(path, query);
    }
  }
  srv.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  srv.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(
        "gpuwatch agent\n/metrics\n/api/v1/gpus\n/api/v1/processes\n/api/v1/capabilities\n"
        "/api/v1/events\n/api/v1/findings\n/api/v1/host\n/api/v1/write\n/api/v1/query\n/api/v1/"
        "query_range\n"
        "/api/v1/labels\n/api/v1/label/NAME/values\n/api/v1/series\n/healthz\n",
        "text/plain");
  });
  // Unknown paths get a plain "not found"; a handler's own 404 keeps the body that says why.
  srv.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty())
      res.set_content("not found: " + req.path + "\n", "text/plain");
  });
  // A handler must never take the daemon down: a thrown exception becomes a 500.
  srv.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        GW_LOG_ERROR("HTTP {} {}: {}", req.method, req.path, what);
        res.status = 500;
        res.set_content("internal error: " + what + "\n", "text/plain");
      });

  if (addr.port == 0) {
    port_ = srv.bind_to_any_port(addr.host);
    if (port_ < 0) return Status::IoError("cannot bind " + addr.host + " to any port");
  } else {
    if (!srv.bind_to_port(addr.host, addr.port))
      return Status::IoError("cannot listen on " + addr.host + ":" + std::to_string(addr.port) +
                             " (in use, or no permission)");
    port_ = addr.port;
  }
  listening_done_ = false;
  thread_ = std::thread([this] {
    if (!server_->listen_after_bind()) GW_LOG_ERROR("HTTP server stopped serving: listen failed");
    listening_done_ = true;
  });
  return Status::Ok();
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  // cpp-httplib 0.11's stop() is a no-op until the listen loop has started; a stop signal that
  // arrives right after Start() would otherwise leave join() waiting forever.
  while (!listening_done_) {
    server_->stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  thread_.join();
}

}  // namespace gpuwatch::server
