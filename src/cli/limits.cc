#include "cli/limits.h"

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <string_view>

#include "cli/config_file.h"
#include "common/strings.h"
#include "common/time_base.h"

namespace gpuwatch::cli {
namespace {

enum class Kind { kCount, kBytes, kDuration };

// One limit: where it lives (a getter/setter over its target), how it is set and what counts
// its refusals. The value is an int64 of the kind's unit (a count, bytes, milliseconds).
struct Limit {
  std::string_view name;
  Kind kind;
  std::string_view what;
  std::string_view flag;    // a dedicated flag, or "" (only --limit)
  std::string_view metric;  // what counts the refusals
  std::function<int64_t*(const LimitTargets&, int64_t* scratch)> get;
  std::function<void(const LimitTargets&, int64_t)> set;
  // Values accepted, in the kind's unit: a count up to 10^8, a size up to 1 TiB, any positive
  // duration, unless the limit narrows them (Bounded).
  int64_t min_value = 1;
  int64_t max_value = 0;  // 0: the kind's default
};

Limit Bounded(Limit l, int64_t min_value, int64_t max_value) {
  l.min_value = min_value;
  l.max_value = max_value;
  return l;
}

// Accessors for the usual field types: T& field(target).
template <typename Target, typename T>
Limit Field(std::string_view name, Kind kind, std::string_view what, std::string_view flag,
            std::string_view metric, Target* LimitTargets::*target, T& (*field)(Target&)) {
  Limit l{name, kind, what, flag, metric, nullptr, nullptr};
  l.get = [target, field](const LimitTargets& t, int64_t* scratch) -> int64_t* {
    if (!(t.*target)) return nullptr;
    if constexpr (std::is_same_v<T, std::chrono::milliseconds>)
      *scratch = field(*(t.*target)).count();
    else
      *scratch = static_cast<int64_t>(field(*(t.*target)));
    return scratch;
  };
  l.set = [target, field](const LimitTargets& t, int64_t v) {
    if (!(t.*target)) return;
    if constexpr (std::is_same_v<T, std::chrono::milliseconds>)
      field(*(t.*target)) = std::chrono::milliseconds(v);
    else
      field(*(t.*target)) = static_cast<T>(v);
  };
  return l;
}

using server::AgentOptions;
using server::HttpOptions;
using HttpT = server::HttpOptions;
constexpr auto kHttp = &LimitTargets::http;
constexpr auto kAgent = &LimitTargets::agent;
constexpr auto kListener = &LimitTargets::listener;
constexpr auto kEvents = &LimitTargets::events;

const std::vector<Limit>& Table() {
  static const std::vector<Limit> table = [] {
    std::vector<Limit> t;
    // HTTP (src/http/server.h).
    t.push_back(Field(
        "http.max_head_bytes", Kind::kBytes, "request line and header fields of one request", "",
        "gpuwatch_http_refused_total{reason=\"head_too_large\"} (431)", kHttp,
        +[](HttpT& o) -> size_t& { return o.limits.head.max_head_bytes; }));
    t.push_back(Field(
        "http.max_headers", Kind::kCount, "header fields of one request", "",
        "gpuwatch_http_refused_total{reason=\"head_too_large\"} (431)", kHttp,
        +[](HttpT& o) -> size_t& { return o.limits.head.max_headers; }));
    t.push_back(Field(
        "http.max_body_bytes", Kind::kBytes,
        "a request body, chunked or not, on routes without their own limit (events, query forms)",
        "", "gpuwatch_http_refused_total{reason=\"body_too_large\"} (413)", kHttp,
        +[](HttpT& o) -> size_t& { return o.limits.max_body_bytes; }));
    t.push_back(Field(
        "http.max_buffered_body_bytes", Kind::kBytes,
        "all request bodies in memory at once, being received or queued", "",
        "gpuwatch_http_refused_total{reason=\"body_budget\"} (503)", kHttp,
        +[](HttpT& o) -> size_t& { return o.limits.max_buffered_body_bytes; }));
    t.push_back(Field(
        "http.header_timeout", Kind::kDuration,
        "from a connection's (or request's) first byte to the end of its head",
        "--http-header-timeout", "gpuwatch_http_refused_total{reason=\"head_timeout\"}", kHttp,
        +[](HttpT& o) -> std::chrono::milliseconds& { return o.limits.header_timeout; }));
    t.push_back(Field(
        "http.body_timeout", Kind::kDuration, "from the end of the head to the end of the body",
        "--http-body-timeout", "gpuwatch_http_refused_total{reason=\"body_timeout\"} (408)", kHttp,
        +[](HttpT& o) -> std::chrono::milliseconds& { return o.limits.body_timeout; }));
    t.push_back(Field(
        "http.idle_timeout", Kind::kDuration, "a kept-alive connection without a request is closed",
        "--http-idle-timeout", "(a normal close)", kHttp,
        +[](HttpT& o) -> std::chrono::milliseconds& { return o.limits.idle_timeout; }));
    t.push_back(Field(
        "http.write_timeout", Kind::kDuration, "a response must drain to the client", "",
        "gpuwatch_http_refused_total{reason=\"write_timeout\"}", kHttp,
        +[](HttpT& o) -> std::chrono::milliseconds& { return o.limits.write_timeout; }));
    t.push_back(Field(
        "http.max_connections", Kind::kCount, "open connections", "--http-max-connections",
        "gpuwatch_http_refused_total{reason=\"too_many_connections\"} (503)", kHttp,
        +[](HttpT& o) -> size_t& { return o.limits.max_connections; }));
    t.push_back(Field(
        "http.max_connections_per_source", Kind::kCount, "open connections from one address",
        "--http-max-connections-per-source",
        "gpuwatch_http_refused_total{reason=\"too_many_per_source\"} (503)", kHttp,
        +[](HttpT& o) -> size_t& { return o.limits.max_connections_per_source; }));
    t.push_back(Field(
        "http.workers", Kind::kCount, "threads that run handlers", "--http-workers",
        "(see http.max_queued)", kHttp, +[](HttpT& o) -> size_t& { return o.limits.workers; }));
    t.push_back(Field(
        "http.max_queued", Kind::kCount, "whole requests waiting for a worker", "",
        "gpuwatch_http_refused_total{reason=\"queue_full\"} (503, Retry-After)", kHttp,
        +[](HttpT& o) -> size_t& { return o.limits.max_queued; }));
    t.push_back(Field(
        "http.listen_backlog", Kind::kCount, "connections the kernel queues before accept", "",
        "(the kernel's: ss -lt Recv-Q)", kHttp,
        +[](HttpT& o) -> int& { return o.limits.listen_backlog; }));
    // Remote-write (server/remote_write_handler.h, store/remote_write.h).
    t.push_back(Bounded(
        Field(
            "write.max_body_bytes", Kind::kBytes, "a remote-write body as sent (snappy)",
            "--write-max-body", "gpuwatch_http_refused_total{reason=\"body_too_large\"} (413)",
            kHttp, +[](HttpT& o) -> size_t& { return o.max_write_body_bytes; }),
        1 << 10, 1 << 30));
    t.push_back(Field(
        "write.max_uncompressed_bytes", Kind::kBytes,
        "a remote-write body inflated (read from snappy's header, before inflating)", "",
        "gpuwatch_remote_write_refused_requests_total{reason=\"too_large\"} (413)", kHttp,
        +[](HttpT& o) -> size_t& { return o.remote_write.decode.max_uncompressed_bytes; }));
    t.push_back(Field(
        "write.max_series_per_request", Kind::kCount, "series in one request", "",
        "gpuwatch_remote_write_refused_requests_total{reason=\"too_large\"} (413)", kHttp,
        +[](HttpT& o) -> size_t& { return o.remote_write.decode.max_series; }));
    t.push_back(Field(
        "write.max_samples_per_request", Kind::kCount, "samples in one request", "",
        "gpuwatch_remote_write_refused_requests_total{reason=\"too_large\"} (413)", kHttp,
        +[](HttpT& o) -> size_t& { return o.remote_write.decode.max_samples; }));
    t.push_back(Field(
        "write.max_labels_per_request", Kind::kCount,
        "labels of all series in one request (their decoded form is ~64 bytes each)", "",
        "gpuwatch_remote_write_refused_requests_total{reason=\"too_large\"} (413)", kHttp,
        +[](HttpT& o) -> size_t& { return o.remote_write.decode.max_labels; }));
    t.push_back(Field(
        "write.max_series", Kind::kCount,
        "series in the store's head (the agent's own included) beyond which remote-write may "
        "create none",
        "--max-series",
        "gpuwatch_remote_write_refused_samples_total{reason=\"series_limit\"} (400)", kHttp,
        +[](HttpT& o) -> uint64_t& { return o.remote_write.max_series; }));
    t.push_back(Field(
        "write.max_series_per_sender", Kind::kCount,
        "new series one sender (token, address, and the node an agent names) may create",
        "--max-series-per-sender",
        "gpuwatch_remote_write_refused_samples_total{reason=\"series_limit\"} (400)", kHttp,
        +[](HttpT& o) -> uint64_t& { return o.remote_write.max_series_per_sender; }));
    t.push_back(
        Bounded(Field(
                    "write.max_concurrency", Kind::kCount,
                    "remote-write requests decoded at once (one sender's one at a time; the store "
                    "appends one at a time)",
                    "", "further requests wait their turn", kHttp,
                    +[](HttpT& o) -> size_t& { return o.remote_write.max_concurrent; }),
                1, 64));
    // Queries (query/engine.h).
    t.push_back(Field(
        "query.timeout", Kind::kDuration, "one query's evaluation", "--query-timeout",
        "gpuwatch_queries_refused_total{reason=\"timeout\"} (503)", kHttp,
        +[](HttpT& o) -> std::chrono::milliseconds& { return o.query_timeout; }));
    t.push_back(Field(
        "query.max_concurrency", Kind::kCount, "queries evaluated at once",
        "--query-max-concurrency",
        "gpuwatch_queries_refused_total{reason=\"concurrency\"} (503, Retry-After)", kHttp,
        +[](HttpT& o) -> size_t& { return o.max_concurrent_queries; }));
    t.push_back(Field(
        "query.max_samples", Kind::kCount,
        "samples one query loads (Prometheus's --query.max-samples)", "",
        "gpuwatch_queries_refused_total{reason=\"limit\"} (422)", kHttp,
        +[](HttpT& o) -> int64_t& { return o.query.max_samples; }));
    t.push_back(Field(
        "query.max_series", Kind::kCount, "series the selectors of one query select", "",
        "gpuwatch_queries_refused_total{reason=\"limit\"} (422)", kHttp,
        +[](HttpT& o) -> int64_t& { return o.query.max_series; }));
    t.push_back(Field(
        "query.max_work", Kind::kCount,
        "samples visited over every step (a wide window rescanned per step)", "",
        "gpuwatch_queries_refused_total{reason=\"limit\"} (422)", kHttp,
        +[](HttpT& o) -> int64_t& { return o.query.max_work; }));
    // The job protocol (jobs/job_registry.h, jobs/job_listener.h, server/job_logs.h).
    t.push_back(Field(
        "jobs.max_jobs", Kind::kCount, "running jobs", "",
        "gpuwatch_job_messages_rejected_total{reason=\"limit\"}", kAgent,
        +[](AgentOptions& o) -> size_t& { return o.jobs.max_jobs; }));
    t.push_back(Field(
        "jobs.max_jobs_per_uid", Kind::kCount,
        "running jobs one uid starts (uncredentialed senders share one share)", "",
        "gpuwatch_job_messages_rejected_total{reason=\"quota\"}", kAgent,
        +[](AgentOptions& o) -> size_t& { return o.jobs.max_jobs_per_uid; }));
    t.push_back(Field(
        "jobs.max_ranks", Kind::kCount, "ranks over all running jobs", "",
        "gpuwatch_job_messages_rejected_total{reason=\"limit\"}", kAgent,
        +[](AgentOptions& o) -> size_t& { return o.jobs.max_ranks; }));
    t.push_back(Field(
        "jobs.max_log_files", Kind::kCount, "declared log files followed at once", "",
        "gpuwatch_limit_hits_total{limit=\"jobs.max_log_files\"}", kAgent,
        +[](AgentOptions& o) -> size_t& { return o.job_log_policy.max_files; }));
    t.push_back(Field(
        "jobs.max_log_files_per_uid", Kind::kCount, "… declared by one uid", "",
        "gpuwatch_limit_hits_total{limit=\"jobs.max_log_files\"}", kAgent,
        +[](AgentOptions& o) -> size_t& { return o.job_log_policy.max_files_per_uid; }));
    t.push_back(Field(
        "jobs.tcp_max_connections", Kind::kCount, "job-protocol TCP connections (--job-tcp)", "",
        "gpuwatch_limit_hits_total{limit=\"jobs.tcp_max_connections\"}", kListener,
        +[](jobs::JobListenerOptions& o) -> size_t& { return o.max_tcp_connections; }));
    t.push_back(Field(
        "jobs.tcp_idle_timeout", Kind::kDuration,
        "a silent job TCP connection is closed (and one idle 5 s gives way to a newcomer)", "",
        "gpuwatch_limit_hits_total{limit=\"jobs.tcp_idle_timeout\"}", kListener,
        +[](jobs::JobListenerOptions& o) -> int64_t& { return o.tcp_idle_timeout_ms; }));
    t.push_back(Field(
        "snapshots.max", Kind::kCount,
        "failure snapshots kept; past it the owner with the most loses its oldest", "",
        "gpuwatch_limit_hits_total{limit=\"snapshots.max\"}", kAgent,
        +[](AgentOptions& o) -> size_t& { return o.max_snapshots; }));
    // Events (store/event_store.h).
    t.push_back(Field(
        "events.retention_bytes", Kind::kBytes, "hardware and job events on disk (and in memory)",
        "", "gpuwatch_limit_hits_total{limit=\"events.retention\"}", kEvents,
        +[](store::EventStoreOptions& o) -> uint64_t& { return o.retention_bytes; }));
    t.push_back(Field(
        "events.bulk_retention_bytes", Kind::kBytes,
        "job log lines and annotations, apart, so they never evict the above", "",
        "gpuwatch_limit_hits_total{limit=\"events.retention\"}", kEvents,
        +[](store::EventStoreOptions& o) -> uint64_t& { return o.bulk_retention_bytes; }));
    return t;
  }();
  return table;
}

std::string FormatValue(Kind k, int64_t v);

Result<int64_t> ParseValue(const Limit& l, std::string_view v) {
  int64_t max_value = l.max_value;
  if (max_value == 0) {
    switch (l.kind) {
      case Kind::kCount:
        max_value = 100'000'000;
        break;
      case Kind::kBytes:
        max_value = int64_t{1} << 40;
        break;
      case Kind::kDuration:
        max_value = INT64_MAX;
        break;
    }
  }
  const std::string range = max_value == INT64_MAX ? ""
                                                   : ", from " + FormatValue(l.kind, l.min_value) +
                                                         " to " + FormatValue(l.kind, max_value);
  std::optional<int64_t> parsed;
  std::string_view expected;
  switch (l.kind) {
    case Kind::kCount:
      parsed = ParseInt<int64_t>(v);
      expected = "a whole number";
      break;
    case Kind::kBytes:
      if (auto b = ParseByteSize(v); b.ok() && *b <= static_cast<uint64_t>(INT64_MAX))
        parsed = static_cast<int64_t>(*b);
      expected = "a size such as 64MiB";
      break;
    case Kind::kDuration:
      if (auto ms = ParseDurationMs(v); ms.ok()) parsed = *ms;
      expected = "a positive duration such as 30s";
      break;
  }
  if (!parsed || *parsed < l.min_value || *parsed > max_value)
    return Status::InvalidArgument(std::string(expected) + range);
  return *parsed;
}

std::string FormatValue(Kind k, int64_t v) {
  switch (k) {
    case Kind::kCount:
      return std::to_string(v);
    case Kind::kBytes:
      if (v % (1 << 30) == 0) return std::to_string(v >> 30) + "GiB";
      if (v % (1 << 20) == 0) return std::to_string(v >> 20) + "MiB";
      if (v % (1 << 10) == 0) return std::to_string(v >> 10) + "KiB";
      return std::to_string(v);
    case Kind::kDuration:
      if (v % 60'000 == 0) return std::to_string(v / 60'000) + "m";
      if (v % 1000 == 0) return std::to_string(v / 1000) + "s";
      return std::to_string(v) + "ms";
  }
  return "?";
}

}  // namespace

Status ApplyLimits(const std::vector<std::string>& specs, const LimitTargets& targets) {
  for (const std::string& spec : specs) {
    for (std::string_view one : SplitAny(spec, ",")) {
      one = TrimWhitespace(one);
      const size_t eq = one.find('=');
      if (eq == std::string_view::npos)
        return Status::InvalidArgument("bad --limit '" + std::string(one) + "': NAME=VALUE");
      const std::string_view name = TrimWhitespace(one.substr(0, eq));
      const Limit* found = nullptr;
      for (const Limit& l : Table())
        if (l.name == name) found = &l;
      if (!found) {
        std::string names;
        for (const Limit& l : Table()) names += (names.empty() ? "" : ", ") + std::string(l.name);
        return Status::InvalidArgument("unknown --limit '" + std::string(name) + "' (" + names +
                                       ")");
      }
      auto v = ParseValue(*found, TrimWhitespace(one.substr(eq + 1)));
      if (!v.ok())
        return Status::InvalidArgument("bad --limit " + std::string(name) + ": " +
                                       v.status().message());
      found->set(targets, *v);
    }
  }
  return Status::Ok();
}

Status ApplyLimitFlag(std::string_view flag, const std::string& value,
                      const LimitTargets& targets) {
  for (const Limit& l : Table()) {
    if (l.flag != flag) continue;
    auto v = ParseValue(l, TrimWhitespace(value));
    if (!v.ok())
      return Status::InvalidArgument("bad " + std::string(flag) + " '" + value +
                                     "': " + v.status().message());
    l.set(targets, *v);
    return Status::Ok();
  }
  return Status::Internal("no limit has the flag " + std::string(flag));
}

std::string RenderLimitsTable() {
  server::HttpOptions http;
  server::AgentOptions agent;
  jobs::JobListenerOptions listener;
  store::EventStoreOptions events;
  // The agent's own choices where they differ from the library's.
  events.bulk_kinds = {"log", "annotation"};
  const LimitTargets t{&http, &agent, &listener, &events};
  std::string out =
      "| limit | default | what it bounds | set with | what counts its refusals |\n"
      "|---|---|---|---|---|\n";
  for (const Limit& l : Table()) {
    int64_t scratch = 0;
    const int64_t* v = l.get(t, &scratch);
    const std::string flag = l.flag.empty() ? fmt::format("`--limit {}=`", l.name)
                                            : fmt::format("`{}`, `--limit {}=`", l.flag, l.name);
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", l.name, v ? FormatValue(l.kind, *v) : "-",
                       l.what, flag, l.metric);
  }
  return out;
}

}  // namespace gpuwatch::cli
