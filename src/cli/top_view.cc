#include "cli/top_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>
#include <set>

#include "common/strings.h"
#include "model/gpu.h"
#include "model/metric_catalog.h"

namespace gpuwatch::cli::top {

using model::GpuMetric;
using nlohmann::json;

namespace {

// dcgm-exporter's names for what is not a per-tick GPU field (docs/metrics.md).
constexpr std::string_view kLastXidMetric = "DCGM_FI_DEV_XID_ERRORS";
constexpr std::string_view kXidCountMetric = "gpuwatch_xid_errors_total";

std::optional<double> Number(const json& j) {
  if (!j.is_number()) return std::nullopt;
  const double v = j.get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::string Text(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? PrintableText(it->get<std::string>()) : "";
}

// The fields a GPU row shows, by the catalog's exposition names: the live API's "metrics"
// object and the query API's __name__ use the same ones.
struct RowField {
  GpuMetric id;
  std::optional<double> Gpu::*field;
};
constexpr RowField kRowFields[] = {
    {GpuMetric::kUtilGpuPct, &Gpu::util_pct},
    {GpuMetric::kGpmSmActive, &Gpu::sm_active_ratio},
    {GpuMetric::kMemUsedMib, &Gpu::mem_used_mib},
    {GpuMetric::kMemTotalMib, &Gpu::mem_total_mib},
    {GpuMetric::kTempC, &Gpu::temp_c},
    {GpuMetric::kPowerW, &Gpu::power_w},
    {GpuMetric::kPowerLimitW, &Gpu::power_limit_w},
    {GpuMetric::kSmClockMhz, &Gpu::sm_clock_mhz},
    {GpuMetric::kMemClockMhz, &Gpu::mem_clock_mhz},
    {GpuMetric::kEccSbeVolatile, &Gpu::ecc_sbe},
    {GpuMetric::kEccDbeVolatile, &Gpu::ecc_dbe},
};

// Sets the row's field named `name`; false when the name is not one a row shows.
bool SetField(Gpu* g, std::string_view name, double v) {
  if (name == model::Describe(GpuMetric::kClockEventReasons).name) {
    g->throttle_mask = v >= 0 && v < 1.8e19 ? static_cast<uint64_t>(v) : 0;
    return true;
  }
  if (name == kLastXidMetric) {
    if (v > 0) g->last_xid = v;  // 0: no XID yet
    return true;
  }
  if (name == kXidCountMetric) {
    g->xid_count += v > 0 ? static_cast<uint64_t>(v) : 0;
    return true;
  }
  for (const auto& f : kRowFields) {
    if (model::Describe(f.id).name == name) {
      g->*f.field = v;
      return true;
    }
  }
  return false;
}

std::vector<unsigned> GpuList(const json& a) {
  std::vector<unsigned> out;
  if (!a.is_array()) return out;
  for (const auto& g : a)
    if (g.is_number_unsigned()) out.push_back(g.get<unsigned>());
  return out;
}

const json& Field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// The Prometheus API's vector answer, or an error naming the query.
Result<const json*> VectorResult(const json& reply, std::string_view what) {
  if (!reply.is_object() || reply.value("status", "") != "success")
    return Status::Unavailable(fmt::format(
        "the query for {} failed: {}", what,
        reply.is_object() ? reply.value("error", reply.dump()) : std::string("no answer")));
  const json& data = Field(reply, "data");
  const json& result = Field(data, "result");
  if (Field(data, "resultType") != "vector" || !result.is_array())
    return Status::Corruption(fmt::format("the query for {} did not answer a vector", what));
  return &result;
}

std::optional<double> SampleValue(const json& s) {
  const json& v = Field(s, "value");
  if (!v.is_array() || v.size() != 2 || !v[1].is_string()) return std::nullopt;
  const std::string& t = v[1].get_ref<const std::string&>();
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || *end != '\0' || !std::isfinite(d)) return std::nullopt;
  return d;
}

}  // namespace

Snapshot ParseLive(const json& gpus, const json& processes, const json& jobs,
                   const json& findings) {
  Snapshot s;
  s.hostname = Text(gpus, "hostname");
  s.simulated = Field(gpus, "simulated").is_boolean() && gpus["simulated"].get<bool>();
  for (const auto& g : Field(gpus, "gpus").is_array() ? Field(gpus, "gpus") : json::array()) {
    Gpu row;
    row.index = Field(g, "index").is_number_unsigned() ? g["index"].get<unsigned>() : 0;
    row.name = Text(g, "name");
    row.uuid = Text(g, "uuid");
    row.lost = Field(g, "lost").is_boolean() && g["lost"].get<bool>();
    const json& m = Field(g, "metrics");
    if (m.is_object())
      for (const auto& [name, v] : m.items())
        if (auto d = Number(v)) SetField(&row, name, *d);
    const json& xids = Field(g, "xid_counts");
    if (xids.is_object())
      for (const auto& [code, count] : xids.items())
        if (count.is_number_unsigned()) row.xid_count += count.get<uint64_t>();
    if (auto x = Number(Field(g, "last_xid"))) row.last_xid = *x;
    if (auto t = Number(Field(g, "time_ms"))) s.time_ms = std::max(s.time_ms, int64_t(*t));
    s.gpus.push_back(std::move(row));
  }
  if (s.gpus.empty() && Field(gpus, "gpu_available").is_boolean() && !gpus["gpu_available"])
    s.note = "no GPU metrics: " + Text(gpus, "reason");
  for (const auto& p :
       Field(processes, "processes").is_array() ? processes["processes"] : json::array()) {
    Process row;
    row.gpu = Field(p, "gpu").is_number_unsigned() ? p["gpu"].get<unsigned>() : 0;
    row.pid = Field(p, "pid").is_number_integer() ? p["pid"].get<int64_t>() : 0;
    row.user = Text(p, "user");
    row.container = Text(p, "container_id").substr(0, 12);
    row.job = Text(p, "job_id");
    row.command = Text(p, "command");
    if (Field(p, "visible_index").is_number_integer()) row.visible_index = p["visible_index"];
    if (auto b = Number(Field(p, "used_memory_bytes"))) row.mem_mib = *b / 1048576.0;
    s.processes.push_back(std::move(row));
  }
  for (const auto& j : Field(jobs, "jobs").is_array() ? jobs["jobs"] : json::array()) {
    Job row;
    row.id = Text(j, "id");
    row.user = Text(j, "user");
    row.state = Text(j, "state");
    row.gpus = GpuList(Field(j, "gpus"));
    const json& w = Field(j, "window");
    row.iterations_per_s = Number(Field(w, "iterations_per_s"));
    row.samples_per_s = Number(Field(w, "samples_per_s"));
    row.step_p50_s = Number(Field(w, "step_p50_s"));
    row.step_p95_s = Number(Field(w, "step_p95_s"));
    row.data_wait_ratio = Number(Field(w, "data_wait_ratio"));
    row.comm_ratio = Number(Field(w, "comm_ratio"));
    s.jobs.push_back(std::move(row));
  }
  for (const auto& f :
       Field(findings, "findings").is_array() ? findings["findings"] : json::array()) {
    Finding row;
    row.severity = Text(f, "severity");
    row.cause = Text(f, "cause");
    row.summary = Text(f, "summary");
    row.job = Text(f, "job");
    if (Field(f, "gpu").is_number_unsigned()) row.gpu = f["gpu"].get<unsigned>();
    s.findings.push_back(std::move(row));
  }
  return s;
}

HistoryQueries MakeHistoryQueries(std::string_view hostname) {
  // The host name is a label value: quote it as PromQL does (backslash and double quote).
  std::string host;
  for (char c : hostname) {
    if (c == '\\' || c == '"') host += '\\';
    host += c;
  }
  std::string names;
  for (const auto& f : kRowFields) names += std::string(model::Describe(f.id).name) + "|";
  names += std::string(model::Describe(GpuMetric::kClockEventReasons).name) + "|" +
           std::string(kLastXidMetric) + "|" + std::string(kXidCountMetric);
  const std::string sel = fmt::format("Hostname=\"{}\"", host);
  return {
      .gpus = fmt::format("{{__name__=~\"{}\",{}}}", names, sel),
      // A job's pace is its slowest rank's; its throughput is every rank's together.
      .samples_per_s = fmt::format("sum by (job) (gpuwatch_job_samples_per_second{{{}}})", sel),
      .iterations_per_s =
          fmt::format("min by (job) (gpuwatch_job_iterations_per_second{{{}}})", sel),
      .step_seconds = fmt::format("max by (job, quantile) (gpuwatch_job_step_seconds{{{}}})", sel),
  };
}

Result<Snapshot> ParseHistory(std::string_view hostname, int64_t time_ms, const json& gpus,
                              const json& samples_per_s, const json& iterations_per_s,
                              const json& step_seconds) {
  Snapshot s;
  s.hostname = PrintableText(hostname);
  s.time_ms = time_ms;
  s.live = false;
  s.note = "processes and findings are not kept in history: they show live only";
  auto g = VectorResult(gpus, "GPU fields");
  if (!g.ok()) return g.status();
  std::map<unsigned, Gpu> rows;
  for (const auto& series : **g) {
    const json& m = Field(series, "metric");
    const std::string gpu = Text(m, "gpu");
    char* end = nullptr;
    const unsigned long idx = std::strtoul(gpu.c_str(), &end, 10);
    if (gpu.empty() || *end != '\0' || idx > 1024) continue;  // not a per-GPU series
    auto v = SampleValue(series);
    if (!v) continue;
    Gpu& row = rows[static_cast<unsigned>(idx)];
    row.index = static_cast<unsigned>(idx);
    if (row.uuid.empty()) row.uuid = Text(m, "UUID");
    if (row.name.empty()) row.name = Text(m, "model_name");
    if (row.name.empty()) row.name = Text(m, "modelName");
    SetField(&row, Text(m, "__name__"), *v);
  }
  for (auto& [idx, row] : rows) s.gpus.push_back(std::move(row));

  std::map<std::string, Job> jobs;
  auto per_job = [&](const json& reply, std::string_view what,
                     const std::function<void(Job*, const json&, double)>& put) -> Status {
    auto r = VectorResult(reply, what);
    if (!r.ok()) return r.status();
    for (const auto& series : **r) {
      const json& m = Field(series, "metric");
      const std::string id = Text(m, "job");
      auto v = SampleValue(series);
      if (id.empty() || !v) continue;
      Job& j = jobs[id];
      j.id = id;
      put(&j, m, *v);
    }
    return Status::Ok();
  };
  Status st = per_job(samples_per_s, "job throughput",
                      [](Job* j, const json&, double v) { j->samples_per_s = v; });
  if (st.ok())
    st = per_job(iterations_per_s, "job iterations",
                 [](Job* j, const json&, double v) { j->iterations_per_s = v; });
  if (st.ok())
    st = per_job(step_seconds, "job step time", [](Job* j, const json& m, double v) {
      const std::string q = Text(m, "quantile");
      if (q == "0.5") j->step_p50_s = v;
      if (q == "0.95") j->step_p95_s = v;
    });
  if (!st.ok()) return st;
  for (auto& [id, j] : jobs) s.jobs.push_back(std::move(j));
  return s;
}

std::string_view SortKeyName(SortKey k) {
  switch (k) {
    case SortKey::kIndex:
      return "index";
    case SortKey::kUtil:
      return "util";
    case SortKey::kMemory:
      return "memory";
    case SortKey::kTemp:
      return "temp";
    case SortKey::kPower:
      return "power";
  }
  return "index";
}

namespace {

// The values a filter key cycles through: "" (all), then each distinct value, sorted.
std::string NextValue(const std::string& cur, std::set<std::string> values) {
  values.erase("");
  if (values.empty()) return "";
  auto it = cur.empty() ? values.begin() : values.upper_bound(cur);
  return it == values.end() ? "" : *it;
}

}  // namespace

KeyEffect HandleKey(int key, const Snapshot& s, View* v) {
  constexpr int64_t kMinute = 60, kTenMinutes = 600;
  switch (key) {
    case 'q':
    case 'Q':
      return KeyEffect::kQuit;
    case 's':
      v->sort = static_cast<SortKey>((static_cast<int>(v->sort) + 1) % 5);
      return KeyEffect::kRedraw;
    case 'j': {
      std::set<std::string> ids;
      for (const auto& j : s.jobs) ids.insert(j.id);
      for (const auto& p : s.processes) ids.insert(p.job);
      v->job_filter = NextValue(v->job_filter, std::move(ids));
      v->scroll = 0;
      return KeyEffect::kRedraw;
    }
    case 'u': {
      std::set<std::string> users;
      for (const auto& j : s.jobs) users.insert(j.user);
      for (const auto& p : s.processes) users.insert(p.user);
      v->user_filter = NextValue(v->user_filter, std::move(users));
      v->scroll = 0;
      return KeyEffect::kRedraw;
    }
    case 'v':
      v->per_job = !v->per_job;
      v->scroll = 0;
      return KeyEffect::kRedraw;
    case kKeyLeft:
    case '<':
      v->history_offset_s += key == '<' ? kTenMinutes : kMinute;
      return KeyEffect::kRefetch;
    case kKeyRight:
    case '>': {
      const int64_t before = v->history_offset_s;
      v->history_offset_s = std::max<int64_t>(0, before - (key == '>' ? kTenMinutes : kMinute));
      return before == v->history_offset_s ? KeyEffect::kNone : KeyEffect::kRefetch;
    }
    case 'l':
    case kKeyEnd:
      if (v->history_offset_s == 0) return KeyEffect::kNone;
      v->history_offset_s = 0;
      return KeyEffect::kRefetch;
    case kKeyUp:
      v->scroll = std::max(0, v->scroll - 1);
      return KeyEffect::kRedraw;
    case kKeyDown:
      ++v->scroll;  // Layout clamps it to the body
      return KeyEffect::kRedraw;
    case kKeyPageUp:
      v->scroll = std::max(0, v->scroll - 10);
      return KeyEffect::kRedraw;
    case kKeyPageDown:
      v->scroll += 10;
      return KeyEffect::kRedraw;
    default:
      return KeyEffect::kNone;
  }
}

namespace {

std::string Fit(std::string s, size_t w) {
  if (s.size() > w) return w == 0 ? "" : s.substr(0, w - 1) + "~";
  return s;
}

std::string Pad(const std::string& s, size_t w, bool right) {
  const std::string f = Fit(s, w);
  const std::string pad(w - f.size(), ' ');
  return right ? pad + f : f + pad;
}

std::string Bar(std::optional<double> ratio, size_t w) {
  if (!ratio || w < 3) return std::string(w, ' ');
  const size_t inner = w - 2;
  const double r = std::clamp(*ratio, 0.0, 1.0);
  const size_t n = static_cast<size_t>(std::lround(r * static_cast<double>(inner)));
  return "[" + std::string(n, '#') + std::string(inner - n, '.') + "]";
}

std::string Opt(std::optional<double> v, const char* spec, const char* suffix = "") {
  return v ? fmt::format(fmt::runtime(spec), *v) + suffix : "-";
}

std::string ThrottleText(const Gpu& g) {
  if (!g.throttle_mask) return "-";
  std::string out;
  for (auto n : model::ClockEventReasonNames(*g.throttle_mask)) {
    if (n == "idle") continue;  // not a slowdown: the GPU has nothing to do
    if (!out.empty()) out += ',';
    out += n;
  }
  return out.empty() ? "none" : out;
}

Style GpuStyle(const Gpu& g) {
  if (g.lost || (g.ecc_dbe && *g.ecc_dbe > 0) || g.last_xid) return Style::kCrit;
  if (g.throttle_mask) {
    for (auto n : model::ClockEventReasonNames(*g.throttle_mask)) {
      // Hardware slowdowns cost the most (clocks halved or worse); software caps less.
      if (n.starts_with("hw_")) return Style::kCrit;
      if (n.starts_with("sw_")) return Style::kWarn;
    }
  }
  return Style::kNormal;
}

std::string ErrorsText(const Gpu& g) {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : " ") + s; };
  if (g.last_xid)
    add(g.xid_count > 1 ? fmt::format("xid {:.0f} ({} total)", *g.last_xid, g.xid_count)
                        : fmt::format("xid {:.0f}", *g.last_xid));
  if (g.ecc_dbe && *g.ecc_dbe > 0) add(fmt::format("dbe {:.0f}", *g.ecc_dbe));
  if (g.ecc_sbe && *g.ecc_sbe > 0) add(fmt::format("sbe {:.0f}", *g.ecc_sbe));
  return out.empty() ? "-" : out;
}

std::optional<double> MemRatio(const Gpu& g) {
  if (!g.mem_used_mib || !g.mem_total_mib || *g.mem_total_mib <= 0) return std::nullopt;
  return *g.mem_used_mib / *g.mem_total_mib;
}

// One GPU table column: a header, a width, when it is dropped (higher drops first), and its
// cell. Bars are dropped first, then the name, clocks, throttle.
struct Column {
  std::string_view header;
  size_t width;
  int drop_order;  // 0: never dropped
  bool right;
  std::function<std::string(const Gpu&, size_t)> cell;
};

std::vector<Column> GpuColumns(bool bars) {
  std::vector<Column> c = {
      {"GPU", 3, 0, true, [](const Gpu& g, size_t) { return std::to_string(g.index); }},
      {"NAME", 22, 6, false, [](const Gpu& g, size_t) { return g.name; }},
      {"UTIL", 10, 9, false,
       [](const Gpu& g, size_t w) {
         return Bar(g.util_pct ? std::optional(*g.util_pct / 100) : std::nullopt, w);
       }},
      {"", 4, 0, true, [](const Gpu& g, size_t) { return Opt(g.util_pct, "{:.0f}", "%"); }},
      {"SM", 10, 9, false, [](const Gpu& g, size_t w) { return Bar(g.sm_active_ratio, w); }},
      {"", 4, 3, true,
       [](const Gpu& g, size_t) {
         return g.sm_active_ratio ? fmt::format("{:.0f}%", *g.sm_active_ratio * 100) : "-";
       }},
      {"MEMORY GiB", 11, 0, true,
       [](const Gpu& g, size_t) {
         if (!g.mem_used_mib || !g.mem_total_mib) return std::string("-");
         return fmt::format("{:.1f}/{:.0f}", *g.mem_used_mib / 1024, *g.mem_total_mib / 1024);
       }},
      {"", 8, 8, false, [](const Gpu& g, size_t w) { return Bar(MemRatio(g), w); }},
      {"TEMP", 4, 0, true, [](const Gpu& g, size_t) { return Opt(g.temp_c, "{:.0f}", "C"); }},
      {"POWER W", 8, 2, true,
       [](const Gpu& g, size_t) {
         if (!g.power_w) return std::string("-");
         return g.power_limit_w ? fmt::format("{:.0f}/{:.0f}", *g.power_w, *g.power_limit_w)
                                : fmt::format("{:.0f}", *g.power_w);
       }},
      {"SM/MEM MHz", 10, 5, true,
       [](const Gpu& g, size_t) {
         return fmt::format("{}/{}", Opt(g.sm_clock_mhz, "{:.0f}"), Opt(g.mem_clock_mhz, "{:.0f}"));
       }},
      {"THROTTLE", 14, 4, false, [](const Gpu& g, size_t) { return ThrottleText(g); }},
      {"ERRORS", 10, 1, false, [](const Gpu& g, size_t) { return ErrorsText(g); }},
  };
  if (!bars)
    std::erase_if(c, [](const Column& col) { return col.drop_order == 9 || col.drop_order == 8; });
  return c;
}

// The columns that fit `width`, the last one widened to take what is left.
std::vector<Column> FitColumns(std::vector<Column> cols, size_t width) {
  auto total = [&] {
    size_t t = 0;
    for (const auto& c : cols) t += c.width + 1;
    return t;
  };
  while (total() > width + 1) {
    auto worst = std::max_element(cols.begin(), cols.end(), [](const Column& a, const Column& b) {
      return a.drop_order <= b.drop_order;  // the last of the highest order goes first
    });
    if (worst == cols.end() || worst->drop_order == 0) break;
    cols.erase(worst);
  }
  if (!cols.empty() && total() <= width + 1) cols.back().width += width + 1 - total();
  return cols;
}

std::string Row(const std::vector<Column>& cols, const std::function<std::string(const Column&)>& f,
                size_t width) {
  std::string out;
  for (size_t i = 0; i < cols.size(); ++i) {
    if (i) out += ' ';
    out += Pad(f(cols[i]), cols[i].width, cols[i].right);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return Fit(out, width);
}

std::string Clock(int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:02}:{:02}:{:02} UTC", tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::string Ago(int64_t s) {
  if (s < 3600) return fmt::format("{}m ago", s / 60);
  return fmt::format("{}h{:02}m ago", s / 3600, s / 60 % 60);
}

// Which GPUs, processes, jobs and findings the filters keep.
struct Filtered {
  std::vector<const Gpu*> gpus;
  std::vector<const Process*> processes;
  std::vector<const Job*> jobs;
  std::vector<const Finding*> findings;
};

Filtered Apply(const Snapshot& s, const View& v) {
  Filtered f;
  const bool any = !v.job_filter.empty() || !v.user_filter.empty();
  auto job_ok = [&](const std::string& job, const std::string& user) {
    return (v.job_filter.empty() || job == v.job_filter) &&
           (v.user_filter.empty() || user == v.user_filter);
  };
  std::set<unsigned> gpus;
  for (const auto& j : s.jobs)
    if (job_ok(j.id, j.user)) {
      f.jobs.push_back(&j);
      gpus.insert(j.gpus.begin(), j.gpus.end());
    }
  for (const auto& p : s.processes)
    if (job_ok(p.job, p.user)) {
      f.processes.push_back(&p);
      gpus.insert(p.gpu);
    }
  for (const auto& g : s.gpus)
    if (!any || gpus.count(g.index)) f.gpus.push_back(&g);
  for (const auto& fi : s.findings)
    if (!any ||
        (!fi.job.empty() && (v.job_filter.empty() || fi.job == v.job_filter) &&
         std::any_of(f.jobs.begin(), f.jobs.end(),
                     [&](const Job* j) { return j->id == fi.job; })) ||
        (fi.gpu && gpus.count(*fi.gpu)))
      f.findings.push_back(&fi);
  auto key = [&](const Gpu* g) -> double {
    auto neg = [](std::optional<double> x) { return x ? -*x : 1e300; };  // missing sorts last
    switch (v.sort) {
      case SortKey::kIndex:
        return g->index;
      case SortKey::kUtil:
        return neg(g->util_pct);
      case SortKey::kMemory:
        return neg(g->mem_used_mib);
      case SortKey::kTemp:
        return neg(g->temp_c);
      case SortKey::kPower:
        return neg(g->power_w);
    }
    return g->index;
  };
  std::stable_sort(f.gpus.begin(), f.gpus.end(),
                   [&](const Gpu* a, const Gpu* b) { return key(a) < key(b); });
  return f;
}

std::string JobLine(const Job& j) {
  return fmt::format(
      "{} it/s  {} samples/s  step p50/p95 {}/{} ms  data {}  comm {}",
      Opt(j.iterations_per_s, "{:.2f}"), Opt(j.samples_per_s, "{:.1f}"),
      Opt(j.step_p50_s ? std::optional(*j.step_p50_s * 1000) : std::nullopt, "{:.0f}"),
      Opt(j.step_p95_s ? std::optional(*j.step_p95_s * 1000) : std::nullopt, "{:.0f}"),
      Opt(j.data_wait_ratio ? std::optional(*j.data_wait_ratio * 100) : std::nullopt, "{:.0f}",
          "%"),
      Opt(j.comm_ratio ? std::optional(*j.comm_ratio * 100) : std::nullopt, "{:.0f}", "%"));
}

std::string ProcessRow(const Process& p, size_t width) {
  return Fit(
      fmt::format("{:>3} {:>8} {:<12} {:<12} {:<16} {:>3} {:>8} {}", p.gpu, p.pid,
                  Fit(p.user.empty() ? "?" : p.user, 12), p.container.empty() ? "-" : p.container,
                  Fit(p.job.empty() ? "-" : p.job, 16),
                  p.visible_index ? std::to_string(*p.visible_index) : "?",
                  p.mem_mib ? fmt::format("{:.0f}", *p.mem_mib) : "-", p.command),
      width);
}

std::vector<Line> Body(const Snapshot& s, const View& v, size_t width, bool bars) {
  std::vector<Line> out;
  const Filtered f = Apply(s, v);
  const auto cols = FitColumns(GpuColumns(bars), width);
  const std::string gpu_header = Row(
      cols, [](const Column& c) { return std::string(c.header); }, width);
  auto gpu_row = [&](const Gpu& g) {
    if (g.lost)
      return Line{
          Fit(fmt::format("{:>3} {} LOST: not answering NVML  {}", g.index, g.name, ErrorsText(g)),
              width),
          Style::kCrit};
    return Line{Row(
                    cols, [&](const Column& c) { return c.cell(g, c.width); }, width),
                GpuStyle(g)};
  };
  const std::string proc_header =
      Fit(fmt::format("{:>3} {:>8} {:<12} {:<12} {:<16} {:>3} {:>8} {}", "GPU", "PID", "USER",
                      "CONTAINER", "JOB", "IDX", "MEM MiB", "COMMAND"),
          width);
  if (v.per_job) {
    std::set<unsigned> shown;
    for (const Job* j : f.jobs) {
      out.push_back(
          {Fit(fmt::format("JOB {}  user {}  {}  {}", j->id, j->user.empty() ? "?" : j->user,
                           j->state.empty() ? "-" : j->state, JobLine(*j)),
               width),
           Style::kTitle});
      out.push_back({gpu_header, Style::kHeader});
      std::set<unsigned> mine(j->gpus.begin(), j->gpus.end());
      for (const Process* p : f.processes)
        if (p->job == j->id) mine.insert(p->gpu);
      for (const Gpu* g : f.gpus)
        if (mine.count(g->index)) {
          out.push_back(gpu_row(*g));
          shown.insert(g->index);
        }
      for (const Process* p : f.processes)
        if (p->job == j->id) out.push_back({"  " + ProcessRow(*p, width - 2), Style::kNormal});
    }
    std::vector<const Gpu*> rest;
    for (const Gpu* g : f.gpus)
      if (!shown.count(g->index)) rest.push_back(g);
    if (!rest.empty()) {
      out.push_back({f.jobs.empty() ? "NO JOBS" : "GPUS OF NO JOB", Style::kTitle});
      out.push_back({gpu_header, Style::kHeader});
      for (const Gpu* g : rest) out.push_back(gpu_row(*g));
    }
  } else {
    out.push_back({gpu_header, Style::kHeader});
    for (const Gpu* g : f.gpus) out.push_back(gpu_row(*g));
    if (f.gpus.empty())
      out.push_back({s.gpus.empty() ? "  no GPUs" : "  no GPU matches the filter"});
    out.push_back({""});
    out.push_back({"PROCESSES", Style::kTitle});
    if (!s.live) {
      out.push_back({"  live only", Style::kDim});
    } else if (f.processes.empty()) {
      out.push_back({"  none", Style::kDim});
    } else {
      out.push_back({proc_header, Style::kHeader});
      for (const Process* p : f.processes) out.push_back({ProcessRow(*p, width)});
    }
    out.push_back({""});
    out.push_back({"JOBS", Style::kTitle});
    if (f.jobs.empty()) out.push_back({"  none", Style::kDim});
    for (const Job* j : f.jobs)
      out.push_back({Fit(fmt::format("  {:<20} {:<10} {}", Fit(j->id, 20),
                                     Fit(j->user.empty() ? "-" : j->user, 10), JobLine(*j)),
                         width)});
  }
  out.push_back({""});
  out.push_back({"FINDINGS", Style::kTitle});
  if (!s.live) {
    out.push_back({"  live only", Style::kDim});
  } else if (f.findings.empty()) {
    out.push_back({"  none", Style::kDim});
  }
  for (const Finding* fi : f.findings) {
    std::string where;
    if (fi->gpu) where += fmt::format(" gpu {}", *fi->gpu);
    if (!fi->job.empty()) where += " job " + fi->job;
    out.push_back(
        {Fit(fmt::format("  [{}] {}{}: {}", fi->severity, fi->cause, where, fi->summary), width),
         fi->severity == "critical"  ? Style::kCrit
         : fi->severity == "warning" ? Style::kWarn
                                     : Style::kNormal});
  }
  if (!s.note.empty()) out.push_back({Fit("  " + s.note, width), Style::kDim});
  return out;
}

std::string Title(const Snapshot& s, const View& v) {
  std::string t = fmt::format("gpuwatch top - {} - {} GPU(s) - ",
                              s.hostname.empty() ? "?" : s.hostname, s.gpus.size());
  if (s.live || v.history_offset_s == 0)
    t += "live " + (s.time_ms ? Clock(s.time_ms) : std::string("(no sample yet)"));
  else
    t += fmt::format("history {} ({})", Clock(s.time_ms), Ago(v.history_offset_s));
  if (s.simulated) t += " - SIMULATED";
  t += fmt::format(" - sort {}", SortKeyName(v.sort));
  if (!v.job_filter.empty()) t += " - job " + v.job_filter;
  if (!v.user_filter.empty()) t += " - user " + v.user_filter;
  if (v.per_job) t += " - per job";
  return t;
}

}  // namespace

std::vector<Line> Layout(const Snapshot& s, const View& v, int width, int height) {
  constexpr int kMinWidth = 40, kMinHeight = 8;
  if (width < kMinWidth || height < kMinHeight)
    return {{Fit(fmt::format("terminal {}x{} is too small for gpuwatch top (needs {}x{}); "
                             "`gpuwatch top --plain` prints tables",
                             width, height, kMinWidth, kMinHeight),
                 static_cast<size_t>(std::max(width, 1))),
             Style::kWarn}};
  const size_t w = static_cast<size_t>(width);
  std::vector<Line> out;
  out.push_back({Fit(Title(s, v), w), Style::kTitle});
  std::vector<Line> body = Body(s, v, w, true);
  const size_t avail = static_cast<size_t>(height - 2);  // the title and the key help
  const size_t max_scroll = body.size() > avail ? body.size() - avail : 0;
  const size_t first = std::min(static_cast<size_t>(std::max(v.scroll, 0)), max_scroll);
  for (size_t i = first; i < body.size() && i < first + avail; ++i) out.push_back(body[i]);
  if (body.size() > first + avail)
    out.back() = {
        Fit(fmt::format("... {} more line(s): down / PgDn", body.size() - first - avail + 1), w),
        Style::kDim};
  while (out.size() < static_cast<size_t>(height - 1)) out.push_back({""});
  out.push_back({Fit("q quit  s sort  j job  u user  v per-job  <-/-> 1 min  </> 10 min  l live  "
                     "up/down scroll",
                     w),
                 Style::kHeader});
  return out;
}

std::string PlainText(const Snapshot& s, const View& v, int width) {
  const size_t w = static_cast<size_t>(std::max(width, 40));
  std::string out = Fit(Title(s, v), w) + "\n";
  for (const auto& l : Body(s, v, w, false)) out += l.text + "\n";
  return out;
}

}  // namespace gpuwatch::cli::top
