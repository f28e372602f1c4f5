#include "jobs/job_protocol.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

namespace gpuwatch::jobs {
namespace {

using nlohmann::json;

// Deepest nesting a valid message has: the message object, then `scalars` or `log_files`.
constexpr int kMaxDepth = 3;

struct Reject {
  RejectReason reason;
  std::string detail;
};

// nlohmann's parser is iterative, but a deep value is destroyed recursively: a 64 KB line of
// '[' must never reach it. Brackets inside strings do not count.
bool NestingWithin(std::string_view s, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

bool Printable(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

class Fields {
 public:
  explicit Fields(const json& j) : j_(j) {}

  const json* Find(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  // An integer field in [lo, hi]; nullopt when absent. A float, even 3.0, is a type error:
  // step numbers and pids are counts.
  std::optional<int64_t> Int(const char* key, int64_t lo, int64_t hi) {
    const json* v = Find(key);
    if (!v) return std::nullopt;
    int64_t x = 0;
    if (v->is_number_unsigned()) {
      uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Fail(key);
      x = static_cast<int64_t>(u);
    } else if (v->is_number_integer()) {
      x = v->get<int64_t>();
    } else {
      return Fail(key, "is not an integer");
    }
    if (x < lo || x > hi) return Fail(key, "is out of range");
    return x;
  }

  std::optional<uint64_t> Uint64(const char* key) {
    const json* v = Find(key);
    if (!v) return std::nullopt;
    if (!v->is_number_unsigned()) {
      if (v->is_number_integer()) return FailU(key, "is negative");
      return FailU(key, "is not an integer");
    }
    return v->get<uint64_t>();
  }

  // A finite number in [lo, hi]; nullopt when absent.
  std::optional<double> Num(const char* key, double lo, double hi) {
    const json* v = Find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) return FailD(key, "is not a number");
    double x = v->get<double>();
    if (!std::isfinite(x)) return FailD(key, "is not finite");
    if (x < lo || x > hi) return FailD(key, "is out of range");
    return x;
  }

  // A string of 1..max_bytes printable bytes; "" when absent.
  std::string Str(const char* key, size_t max_bytes, bool printable = true) {
    const json* v = Find(key);
    if (!v) return {};
    if (!v->is_string()) {
      Fail(key, "is not a string");
      return {};
    }
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > max_bytes) {
      Fail(key, "is longer than " + std::to_string(max_bytes) + " bytes");
      return {};
    }
    if (printable && !Printable(s)) {
      Fail(key, "holds control characters");
      return {};
    }
    return s;
  }

  void Require(bool present, const char* key) {
    if (!present && !error) error = Reject{RejectReason::kBadField, std::string(key) + " missing"};
  }

  std::nullopt_t Fail(const char* key, std::string what = "is invalid") {
    if (!error) error = Reject{RejectReason::kBadField, std::string(key) + " " + what};
    return std::nullopt;
  }
  std::optional<uint64_t> FailU(const char* key, std::string what) {
    Fail(key, std::move(what));
    return std::nullopt;
  }
  std::optional<double> FailD(const char* key, std::string what) {
    Fail(key, std::move(what));
    return std::nullopt;
  }

  std::optional<Reject> error;

 private:
  const json& j_;
};

bool ValidScalarName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool ValidPhaseName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

LineResult Rejected(RejectReason reason, std::string detail) {
  LineResult r;
  r.reason = reason;
  r.detail = std::move(detail);
  return r;
}

// begin/end of `state`; sets an error otherwise.
bool ParseState(Fields& f, bool* begin) {
  std::string state = f.Str("state", 16);
  if (state == "begin") {
    *begin = true;
  } else if (state == "end") {
    *begin = false;
  } else {
    f.Fail("state", "is not begin or end");
    return false;
  }
  return true;
}

void ParseStart(Fields& f, model::JobMessage& m) {
  m.template_name = f.Str("template", 128);
  m.user = f.Str("user", 128);
  m.project = f.Str("project", 128);
  if (auto v = f.Int("world_size", 1, kMaxRank + 1)) m.world_size = static_cast<uint32_t>(*v);
  if (auto v = f.Int("local_rank", 0, kMaxRank)) m.local_rank = static_cast<uint32_t>(*v);
  // Linux's pid_max is at most 2^22.
  if (auto v = f.Int("pid", 1, 4194304)) m.pid = static_cast<uint32_t>(*v);
  if (const json* files = f.Find("log_files")) {
    if (!files->is_array()) {
      f.Fail("log_files", "is not an array");
      return;
    }
    if (files->size() > kMaxLogFiles) {
      f.Fail("log_files", "has more than 16 paths");
      return;
    }
    for (const auto& p : *files) {
      if (!p.is_string()) {
        f.Fail("log_files", "holds a non-string");
        return;
      }
      const auto& s = p.get_ref<const std::string&>();
      if (s.empty() || s[0] != '/' || s.size() > 4096 || !Printable(s)) {
        f.Fail("log_files", "holds a path that is not absolute and printable");
        return;
      }
      m.log_files.push_back(s);
    }
  }
}

void ParseStep(Fields& f, model::JobMessage& m) {
  auto& s = m.step;
  auto step = f.Uint64("step");
  f.Require(step.has_value(), "step");
  if (step) s.step = *step;
  auto duration = f.Num("duration_s", 0, 86400);
  f.Require(duration.has_value(), "duration_s");
  if (f.error) return;
  if (*duration <= 0) {
    f.Fail("duration_s", "is not above 0");
    return;
  }
  s.duration_s = *duration;
  s.samples = f.Num("samples", 0, 1e15);
  // Timers of the parts and of the whole step disagree by a little; more is a client bug.
  const double part_max = s.duration_s * 1.01 + 1e-6;
  s.data_wait_s = f.Num("data_wait_s", 0, part_max);
  s.comm_s = f.Num("comm_s", 0, part_max);
  s.checkpoint_s = f.Num("checkpoint_s", 0, part_max);
  s.loss = f.Num("loss", -1e300, 1e300);
  s.grad_norm = f.Num("grad_norm", -1e300, 1e300);
  if (const json* sc = f.Find("scalars")) {
    if (!sc->is_object()) {
      f.Fail("scalars", "is not an object");
      return;
    }
    if (sc->size() > kMaxScalars) {
      f.Fail("scalars", "has more than 32 entries");
      return;
    }
    for (auto it = sc->begin(); it != sc->end(); ++it) {
      if (!ValidScalarName(it.key())) {
        f.Fail("scalars", "has a name that is not [A-Za-z_][A-Za-z0-9_]{0,63}");
        return;
      }
      if (!it->is_number() || !std::isfinite(it->get<double>())) {
        f.Fail("scalars", "has a value that is not a finite number");
        return;
      }
      s.scalars.emplace_back(it.key(), it->get<double>());
    }
  }
}

}  // namespace

std::string_view RejectReasonName(RejectReason r) {
  switch (r) {
    case RejectReason::kOversized:
      return "oversized";
    case RejectReason::kMalformed:
      return "malformed";
    case RejectReason::kBadVersion:
      return "bad_version";
    case RejectReason::kUnknownType:
      return "unknown_type";
    case RejectReason::kBadField:
      return "bad_field";
    case RejectReason::kBadTime:
      return "bad_time";
    case RejectReason::kPidNotOwned:
      return "pid_not_owned";
    case RejectReason::kDuplicate:
      return "duplicate";
    case RejectReason::kOutOfOrder:
      return "out_of_order";
    case RejectReason::kLimit:
      return "limit";
    case RejectReason::kQuota:
      return "quota";
    case RejectReason::kNotPermitted:
      return "not_permitted";
    case RejectReason::kCount:
      break;
  }
  return "unknown";
}

LineResult ParseJobLine(std::string_view line, double now_s) {
  if (line.size() > kMaxDatagramBytes)
    return Rejected(RejectReason::kOversized, "line of " + std::to_string(line.size()) + " bytes");
  if (!NestingWithin(line, kMaxDepth))
    return Rejected(RejectReason::kMalformed, "nested deeper than 3 levels");
  // Non-throwing parse; invalid UTF-8 in a string is a parse error here too.
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Rejected(RejectReason::kMalformed, "not a JSON object");

  Fields f(j);
  if (auto v = f.Find("v")) {
    if (!v->is_number_integer() || v->get<int64_t>() != 1)
      return Rejected(RejectReason::kBadVersion, "v is not 1");
  }
  const json* type = f.Find("type");
  if (!type || !type->is_string()) return Rejected(RejectReason::kUnknownType, "type missing");
  const auto& t = type->get_ref<const std::string&>();
  LineResult r;
  model::JobMessage& m = r.message;
  if (t == "start") {
    m.type = model::JobMessageType::kStart;
  } else if (t == "step") {
    m.type = model::JobMessageType::kStep;
  } else if (t == "phase") {
    m.type = model::JobMessageType::kPhase;
  } else if (t == "checkpoint") {
    m.type = model::JobMessageType::kCheckpoint;
  } else if (t == "end") {
    m.type = model::JobMessageType::kEnd;
  } else if (t == "annotation") {
    m.type = model::JobMessageType::kAnnotation;
  } else if (t == "log") {
    m.type = model::JobMessageType::kLog;
  } else if (t == "queued") {
    m.type = model::JobMessageType::kQueued;
  } else if (t == "allocation") {
    m.type = model::JobMessageType::kAllocation;
  } else if (t == "release") {
    m.type = model::JobMessageType::kRelease;
  } else {
    return Rejected(RejectReason::kUnknownType, "type \"" + t.substr(0, 32) + "\" unknown");
  }

  m.job = f.Str("job", kMaxJobIdBytes);
  if (!f.error && m.job.empty()) f.Fail("job", "missing or empty");
  if (auto v = f.Int("rank", 0, kMaxRank)) m.rank = static_cast<uint32_t>(*v);
  if (auto ts = f.Num("t", -1e12, 1e12)) {
    if (*ts < now_s - kMaxPastS || *ts > now_s + kMaxFutureS)
      return Rejected(RejectReason::kBadTime, "t is more than 1 h old or 5 min ahead");
    m.t_s = *ts;
  }
  if (f.error) return Rejected(f.error->reason, f.error->detail);

  switch (m.type) {
    case model::JobMessageType::kStart:
      ParseStart(f, m);
      break;
    case model::JobMessageType::kStep:
      ParseStep(f, m);
      break;
    case model::JobMessageType::kPhase: {
      m.name = f.Str("name", 64);
      if (!f.error && !ValidPhaseName(m.name)) f.Fail("name", "is not 1-64 of [A-Za-z0-9_.-]");
      if (!f.error) ParseState(f, &m.begin);
      break;
    }
    case model::JobMessageType::kCheckpoint:
      m.name = "checkpoint";
      ParseState(f, &m.begin);
      break;
    case model::JobMessageType::kQueued:
      m.template_name = f.Str("template", 128);
      m.user = f.Str("user", 128);
      m.project = f.Str("project", 128);
      break;
    case model::JobMessageType::kAllocation: {
      m.template_name = f.Str("template", 128);
      m.user = f.Str("user", 128);
      m.project = f.Str("project", 128);
      if (!f.error && m.user.empty()) f.Fail("user", "missing: an allocation names its owner");
      if (f.error) break;
      if (const json* devs = f.Find("devices")) {
        if (!devs->is_array() || devs->size() > 64) {
          f.Fail("devices", "is not an array of at most 64 device minor numbers");
          break;
        }
        for (const json& d : *devs) {
          if (!d.is_number_unsigned() || d.get<uint64_t>() > 255) {
            f.Fail("devices", "holds something that is not a minor number 0-255");
            break;
          }
          m.devices.push_back(static_cast<uint32_t>(d.get<uint64_t>()));
        }
      }
      // A queue can last weeks; the submit time is not held to t's hour.
      if (auto s = f.Num("submit_t", 0, 1e12)) {
        if (*s > (m.t_s ? *m.t_s : now_s)) f.Fail("submit_t", "is after t (the start)");
        m.submit_t_s = s;
      }
      break;
    }
    case model::JobMessageType::kRelease:
    case model::JobMessageType::kEnd:
      if (auto v =
              f.Int("exit_code", std::numeric_limits<int>::min(), std::numeric_limits<int>::max()))
        m.exit_code = static_cast<int>(*v);
      break;
    case model::JobMessageType::kAnnotation:
      m.text = f.Str("text", kMaxAnnotationBytes, /*printable=*/false);
      if (!f.error && m.text.empty()) f.Fail("text", "missing or empty");
      break;
    case model::JobMessageType::kLog: {
      // A log line may hold tabs or escape sequences; it is stored as text, not a label.
      const json* line_field = f.Find("line");
      if (!line_field) {
        f.Fail("line", "missing");
        break;
      }
      m.text = f.Str("line", kMaxLogLineBytes, /*printable=*/false);
      m.stream = f.Str("stream", 16);
      if (!f.error && !m.stream.empty() && m.stream != "stdout" && m.stream != "stderr")
        f.Fail("stream", "is not stdout or stderr");
      break;
    }
  }
  if (f.error) return Rejected(f.error->reason, f.error->detail);
  if (!m.t_s) m.t_s = now_s;
  r.ok = true;
  return r;
}

DatagramResult ParseJobDatagram(std::string_view payload, double now_s, bool stream) {
  DatagramResult out;
  if (!stream && payload.size() > kMaxDatagramBytes) {
    out.rejected[static_cast<size_t>(RejectReason::kOversized)]++;
    out.first_detail = "datagram of " + std::to_string(payload.size()) + " bytes";
    return out;
  }
  while (!payload.empty()) {
    size_t nl = payload.find('\n');
    std::string_view line = payload.substr(0, nl);
    payload.remove_prefix(nl == std::string_view::npos ? payload.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    bool blank = true;
    for (char c : line)
      if (c != ' ' && c != '\t') blank = false;
    if (blank) continue;
    LineResult r = ParseJobLine(line, now_s);
    if (r.ok) {
      out.messages.push_back(std::move(r.message));
    } else {
      out.rejected[static_cast<size_t>(r.reason)]++;
      if (out.first_detail.empty()) out.first_detail = std::move(r.detail);
    }
  }
  return out;
}

}  // namespace gpuwatch::jobs
