#include "server/event_api.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "server/api.h"

namespace gpuwatch::server {
namespace {

using json = nlohmann::json;

constexpr int64_t kDefaultWindowMs = 24 * 3600 * 1000;

// XIDs that mean the GPU or its job is gone until someone acts (NVIDIA's XID catalog: fallen
// off the bus, double-bit ECC / row-remap failure, contained and uncontained ECC, GSP errors).
bool IsCriticalXid(uint64_t xid) {
  switch (xid) {
    case 48:
    case 63:
    case 64:
    case 74:
    case 79:
    case 92:
    case 94:
    case 95:
    case 119:
    case 120:
      return true;
    default:
      return false;
  }
}

ApiResponse Error(int status, const std::string& message) {
  json j = {{"status", "error"}, {"errorType", "bad_data"}, {"error", message}};
  return {status, DumpJson(j)};
}

}  // namespace

store::EventRecord ToEventRecord(const model::GpuEvent& e, const std::string& node) {
  store::EventRecord r;
  r.t_ms = std::max<int64_t>(0, e.time_ms);
  r.kind = std::string(model::GpuEventKindName(e.kind));
  switch (e.kind) {
    case model::GpuEventKind::kXid:
      r.severity = IsCriticalXid(e.code) ? "critical" : "warning";
      break;
    case model::GpuEventKind::kEccSingleBit:
      r.severity = "warning";
      break;
    case model::GpuEventKind::kEccDoubleBit:
    case model::GpuEventKind::kGpuLost:
      r.severity = "critical";
      break;
    case model::GpuEventKind::kGpuRecovered:
      r.severity = "info";
      break;
  }
  r.node = node.substr(0, store::kMaxEventIdBytes);
  r.gpu = e.uuid.substr(0, store::kMaxEventIdBytes);
  r.message = e.text.substr(0, store::kMaxEventMessageBytes);
  json f = {{"pci_bus_id", e.pci_bus_id}, {"source", e.source}};
  f["gpu"] = e.gpu_index == model::kUnknownGpu ? json(nullptr) : json(e.gpu_index);
  if (e.kind == model::GpuEventKind::kXid) f["xid"] = e.code;
  r.fields_json = DumpJson(f);
  return r;
}

ApiResponse HandleEventsQuery(const store::EventStore& events, const ApiRequest& request,
                              const std::string& hostname) {
  store::EventQuery q;
  q.end_ms = request.now_ms;
  bool has_start = false;
  for (const auto& [key, value] : request.params) {
    if (key == "start" || key == "end") {
      auto t = ParseApiTimestampMs(value);
      if (!t.ok()) return Error(400, "invalid parameter \"" + key + "\": " + t.status().message());
      (key == "start" ? q.start_ms : q.end_ms) = *t;
      has_start |= key == "start";
    } else if (key == "node") {
      q.node = value;
    } else if (key == "gpu" || key == "uuid") {
      q.gpu = value;
    } else if (key == "job") {
      q.job = value;
    } else if (key == "kind") {
      for (auto k : SplitAny(value, ",", true)) q.kinds.emplace_back(k);
    } else if (key == "exclude_kind") {
      for (auto k : SplitAny(value, ",", true)) q.exclude_kinds.emplace_back(k);
    } else if (key == "contains") {
      q.text_contains = value;
    } else if (key == "limit") {
      auto n = ParseInt<uint64_t>(value);
      if (!n || *n == 0 || *n > store::kMaxEventQueryLimit)
        return Error(400, "invalid parameter \"limit\": expected 1.." +
                              std::to_string(store::kMaxEventQueryLimit));
      q.limit = static_cast<size_t>(*n);
    } else {
      return Error(400, "unknown parameter \"" + key +
                            "\" (start, end, node, gpu, job, kind, exclude_kind, contains, limit)");
    }
  }
  if (!has_start) q.start_ms = std::max<int64_t>(0, q.end_ms - kDefaultWindowMs);
  if (q.start_ms > q.end_ms) return Error(400, "start is after end");
  q.newest_first = true;  // the limit keeps the newest
  auto found = events.Query(q);
  if (!found.ok()) return Error(400, found.status().message());
  json out = json::array();
  for (auto it = found->rbegin(); it != found->rend(); ++it) {
    const store::EventRecord& r = *it;
    json j = {{"time_ms", r.t_ms}, {"kind", r.kind}, {"severity", r.severity}, {"node", r.node},
              {"uuid", r.gpu},     {"job", r.job},   {"text", r.message}};
    if (!r.fields_json.empty()) {
      json f = json::parse(r.fields_json, nullptr, /*allow_exceptions=*/false);
      if (f.is_object())
        for (auto& [k, v] : f.items())
          if (!j.contains(k)) j[k] = v;
    }
    out.push_back(std::move(j));
  }
  return {200, DumpJson(json{{"hostname", hostname}, {"events", std::move(out)}})};
}

ApiResponse HandleEventsPost(store::EventStore* events, std::string_view body, int64_t now_ms,
                             const std::string& hostname) {
  json in = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (in.is_discarded()) return Error(400, "body is not JSON");
  if (in.is_object()) in = json::array({std::move(in)});
  if (!in.is_array()) return Error(400, "body must be a JSON array of events or one event");
  if (in.size() > kMaxPostedEvents)
    return Error(400, "too many events in one request: " + std::to_string(in.size()) +
                          " (at most " + std::to_string(kMaxPostedEvents) + ")");
  std::vector<store::EventRecord> records;
  records.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const json& e = in[i];
    const std::string where = "event " + std::to_string(i) + ": ";
    if (!e.is_object()) return Error(400, where + "not a JSON object");
    store::EventRecord r;
    r.t_ms = now_ms;
    r.node = hostname.substr(0, store::kMaxEventIdBytes);
    for (const auto& [key, v] : e.items()) {
      if (key == "time_ms") {
        if (!v.is_number_integer()) return Error(400, where + "\"time_ms\" must be an integer");
        r.t_ms = v.get<int64_t>();
      } else if (key == "time") {
        if (!v.is_number()) return Error(400, where + "\"time\" must be Unix seconds");
        const double secs = v.get<double>();
        if (!(secs >= 0 && secs < 9.2e9)) return Error(400, where + "\"time\" out of range");
        r.t_ms = static_cast<int64_t>(secs * 1000 + 0.5);
      } else if (key == "fields") {
        if (!v.is_object()) return Error(400, where + "\"fields\" must be an object");
        r.fields_json = DumpJson(v);
      } else if (key == "kind" || key == "severity" || key == "node" || key == "gpu" ||
                 key == "job" || key == "text") {
        if (!v.is_string()) return Error(400, where + "\"" + key + "\" must be a string");
        std::string s = v.get<std::string>();
        if (key == "kind")
          r.kind = std::move(s);
        else if (key == "severity")
          r.severity = std::move(s);
        else if (key == "node")
          r.node = std::move(s);
        else if (key == "gpu")
          r.gpu = std::move(s);
        else if (key == "job")
          r.job = std::move(s);
        else
          r.message = std::move(s);
      } else {
        return Error(400, where + "unknown key \"" + key +
                              "\" (time_ms, time, kind, severity, node, gpu, job, text, fields)");
      }
    }
    if (Status st = store::ValidateEvent(r); !st.ok()) return Error(400, where + st.message());
    records.push_back(std::move(r));
  }
  if (Status st = events->Append(records); !st.ok()) {
    const int code = st.code() == StatusCode::kInvalidArgument ? 400 : 500;
    return Error(code, st.message());
  }
  return {204, ""};
}

}  // namespace gpuwatch::server
