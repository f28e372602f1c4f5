#include "analyze/alerts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/random.h"
#include "common/strings.h"
#include "common/time_base.h"

namespace gpuwatch::analyze {
namespace {

int64_t Ms(double unix_s) { return static_cast<int64_t>(std::llround(unix_s * 1000)); }

}  // namespace

bool IsEventCause(Cause cause) { return model::Describe(cause).kind == model::CauseKind::kEvent; }

std::string AlertFingerprint(const Finding& f) {
  // An info finding is the engine's own entry apart from a warning of the same cause and place
  // (a trend before the throttle): its own alert.
  return fmt::format("{}/{}/{}/{}/{}/{}{}", f.CauseText(), f.node,
                     f.gpu ? std::to_string(*f.gpu) : "", f.job.value_or(""),
                     f.rank ? std::to_string(*f.rank) : "", f.nic.value_or(""),
                     f.is_info() ? "/info" : "");
}

std::set<std::string> AlertBook::FiringJobs() const {
  std::set<std::string> out;
  for (const auto& [fp, a] : alerts_) {
    if (a.state == "firing" && a.finding.job) out.insert(*a.finding.job);
  }
  return out;
}

std::string_view NotificationKindName(AlertNotification::Kind k) {
  switch (k) {
    case AlertNotification::Kind::kFiring:
      return "firing";
    case AlertNotification::Kind::kUpdated:
      return "updated";
    case AlertNotification::Kind::kResolved:
      return "resolved";
  }
  return "firing";
}

int64_t AlertBook::HoldOf(const Finding& f) const {
  if (auto it = o_.hold_ms_by_cause.find(f.CauseText()); it != o_.hold_ms_by_cause.end()) {
    return it->second;
  }
  return IsEventCause(f.cause) ? o_.event_hold_ms : o_.resolve_after_ms;
}

bool AlertBook::Matches(const Silence& s, const Alert& a) const {
  const Finding& f = a.finding;
  if (!s.node.empty() && s.node != f.node) return false;
  if (s.gpu && (!f.gpu || *f.gpu != *s.gpu)) return false;
  if (!s.job.empty() && s.job != f.job.value_or("")) return false;
  if (!s.cause.empty() && s.cause != f.CauseText()) return false;
  return true;
}

std::string AlertBook::SuppressedBy(const Alert& a, int64_t now_ms) const {
  // findings.md: info is "record only".
  if (a.finding.is_info()) return "info (recorded, not notified)";
  // Maintenance first: it says more than a silence about why nobody is told.
  for (bool maintenance : {true, false}) {
    for (const auto& [id, s] : silences_) {
      if (s.maintenance != maintenance || now_ms < s.starts_ms || now_ms >= s.ends_ms) continue;
      if (Matches(s, a)) return fmt::format("{} {}", maintenance ? "maintenance" : "silence", id);
    }
  }
  // A deeper cause that fires explains this one (the engine's graph: analyze::Explains).
  for (const auto& [fp, src] : alerts_) {
    if (src.state == "firing" && &src != &a && Explains(src.finding, a.finding)) {
      return "inhibited by " + fp;
    }
  }
  return "";
}

std::vector<AlertNotification> AlertBook::Update(const std::vector<Finding>& findings,
                                                 int64_t now_ms) {
  std::vector<AlertNotification> out;
  std::map<std::string, bool> severity_rose;
  for (const Finding& f : findings) {
    const std::string fp = AlertFingerprint(f);
    const int64_t last_ms = Ms(f.last_seen);
    const int64_t hold = HoldOf(f);
    auto it = alerts_.find(fp);
    if (it == alerts_.end() || (it->second.state == "resolved" && last_ms > it->second.ends_ms)) {
      if (now_ms - last_ms > hold) continue;  // already over before we heard of it
      Alert a;
      a.fingerprint = fp;
      a.finding = f;
      a.state = "firing";
      // A new occurrence after a resolve starts at its return (the first sighting since), not
      // at the engine's first sight of the old one.
      a.starts_ms = it == alerts_.end() ? Ms(f.first_seen) : last_ms;
      a.updated_ms = last_ms;
      a.seen = 1;
      alerts_[fp] = std::move(a);
      continue;
    }
    Alert& a = it->second;
    if (a.state != "firing" || last_ms <= a.updated_ms) continue;
    if (f.severity > a.finding.severity) severity_rose[fp] = true;
    a.finding = f;
    a.updated_ms = last_ms;
    ++a.seen;
  }
  // Expired silences go.
  for (auto it = silences_.begin(); it != silences_.end();) {
    it = it->second.ends_ms <= now_ms ? silences_.erase(it) : std::next(it);
  }
  // Resolve what has not been seen for its hold.
  for (auto& [fp, a] : alerts_) {
    if (a.state != "firing") continue;
    if (now_ms - a.updated_ms <= HoldOf(a.finding)) continue;
    a.state = "resolved";
    a.ends_ms = now_ms;
    if (a.notified) out.push_back({AlertNotification::Kind::kResolved, a});
  }
  // Suppression, then what to tell: new firing alerts (or ones a silence no longer hides) and
  // severities that rose.
  for (auto& [fp, a] : alerts_) {
    if (a.state != "firing") continue;
    a.suppressed_by = SuppressedBy(a, now_ms);
    if (!a.suppressed_by.empty()) continue;
    if (!a.notified) {
      a.notified = true;
      out.push_back({AlertNotification::Kind::kFiring, a});
    } else if (severity_rose.count(fp) != 0) {
      out.push_back({AlertNotification::Kind::kUpdated, a});
    }
  }
  // Bounded: the oldest resolved alerts are forgotten first.
  while (alerts_.size() > o_.max_alerts) {
    auto oldest = alerts_.end();
    for (auto it = alerts_.begin(); it != alerts_.end(); ++it) {
      if (it->second.state == "resolved" &&
          (oldest == alerts_.end() || it->second.ends_ms < oldest->second.ends_ms))
        oldest = it;
    }
    if (oldest == alerts_.end()) break;
    alerts_.erase(oldest);
  }
  return out;
}

nlohmann::json AlertBook::State(int64_t now_ms) const {
  nlohmann::json alerts = nlohmann::json::array(), silences = nlohmann::json::array();
  for (const auto& [fp, a] : alerts_) {
    alerts.push_back({{"finding", FindingToJson(a.finding)},
                      {"state", a.state},
                      {"starts_ms", a.starts_ms},
                      {"updated_ms", a.updated_ms},
                      {"ends_ms", a.ends_ms},
                      {"seen", a.seen},
                      {"notified", a.notified}});
  }
  for (const auto& [id, sl] : silences_) {
    if (sl.ends_ms <= now_ms) continue;
    // The API's form, with its times in ms (exact) rather than RFC 3339.
    nlohmann::json j = SilenceToJson(sl);
    j.erase("starts_at");
    j.erase("ends_at");
    j["starts_ms"] = sl.starts_ms;
    j["ends_ms"] = sl.ends_ms;
    silences.push_back(std::move(j));
  }
  return {{"format", "gpuwatch-alert-state"},
          {"version", 1},
          {"alerts", alerts},
          {"silences", silences}};
}

Status AlertBook::Restore(const nlohmann::json& state, int64_t now_ms) {
  if (!state.is_object() || !state.contains("format") || state["format"] != "gpuwatch-alert-state")
    return Status::InvalidArgument("not a gpuwatch alert state (format)");
  if (!state.contains("version") || state["version"] != 1)
    return Status::InvalidArgument("alert state version: only 1 is known");
  auto ms = [](const nlohmann::json& j, const char* key, int64_t* out) -> Status {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 0)
      return Status::InvalidArgument(fmt::format("'{}' must be an integer >= 0", key));
    *out = j[key].get<int64_t>();
    return Status::Ok();
  };
  std::map<std::string, Alert> alerts;
  if (!state.contains("alerts") || !state["alerts"].is_array())
    return Status::InvalidArgument("'alerts' must be an array");
  size_t i = 0;
  for (const auto& j : state["alerts"]) {
    auto where = [&](const Status& st) {
      return Status::InvalidArgument(fmt::format("alert {}: {}", i, st.message()));
    };
    if (!j.is_object()) return where(Status::InvalidArgument("not an object"));
    Alert a;
    auto f = FindingFromJson(j.contains("finding") ? j["finding"] : nlohmann::json());
    if (!f.ok()) return where(f.status());
    a.finding = std::move(f).value();
    a.fingerprint = AlertFingerprint(a.finding);
    if (j.contains("state") && j["state"].is_string()) a.state = j["state"].get<std::string>();
    if (a.state != "firing" && a.state != "resolved")
      return where(Status::InvalidArgument("'state' must be firing or resolved"));
    for (auto [key, out] :
         {std::pair{"starts_ms", &a.starts_ms}, std::pair{"updated_ms", &a.updated_ms},
          std::pair{"ends_ms", &a.ends_ms}}) {
      if (Status st = ms(j, key, out); !st.ok()) return where(st);
    }
    if (!j.contains("seen") || !j["seen"].is_number_unsigned())
      return where(Status::InvalidArgument("'seen' must be an integer >= 0"));
    a.seen = j["seen"].get<uint64_t>();
    if (!j.contains("notified") || !j["notified"].is_boolean())
      return where(Status::InvalidArgument("'notified' must be true or false"));
    a.notified = j["notified"].get<bool>();
    alerts[a.fingerprint] = std::move(a);
    ++i;
  }
  std::map<std::string, Silence> silences;
  if (!state.contains("silences") || !state["silences"].is_array())
    return Status::InvalidArgument("'silences' must be an array");
  i = 0;
  for (const auto& j : state["silences"]) {
    auto where = [&](const std::string& what) {
      return Status::InvalidArgument(fmt::format("silence {}: {}", i, what));
    };
    if (!j.is_object()) return where("not an object");
    Silence sl;
    for (auto [key, out] :
         {std::pair{"id", &sl.id}, std::pair{"node", &sl.node}, std::pair{"job", &sl.job},
          std::pair{"cause", &sl.cause}, std::pair{"created_by", &sl.created_by},
          std::pair{"comment", &sl.comment}}) {
      if (!j.contains(key)) continue;
      if (!j[key].is_string()) return where(fmt::format("'{}' must be a string", key));
      *out = j[key].get<std::string>();
    }
    if (sl.id.empty()) return where("'id' is missing");
    if (Status st = ms(j, "starts_ms", &sl.starts_ms); !st.ok()) return where(st.message());
    if (Status st = ms(j, "ends_ms", &sl.ends_ms); !st.ok()) return where(st.message());
    if (j.contains("gpu")) {
      if (!j["gpu"].is_number_integer() || j["gpu"].get<int64_t>() < 0)
        return where("'gpu' must be an integer >= 0");
      sl.gpu = static_cast<int>(j["gpu"].get<int64_t>());
    }
    if (j.contains("maintenance")) {
      if (!j["maintenance"].is_boolean()) return where("'maintenance' must be true or false");
      sl.maintenance = j["maintenance"].get<bool>();
    }
    if (sl.node.empty() && sl.job.empty() && sl.cause.empty() && !sl.gpu)
      return where("it matches nothing (no node, gpu, job or cause)");
    if (sl.ends_ms <= sl.starts_ms) return where("it ends before it starts");
    if (sl.ends_ms > now_ms) silences[sl.id] = std::move(sl);
    ++i;
  }
  alerts_ = std::move(alerts);
  silences_ = std::move(silences);
  return Status::Ok();
}

Result<std::string> AlertBook::AddSilence(Silence s, int64_t now_ms) {
  if (s.node.empty() && s.job.empty() && s.cause.empty() && !s.gpu)
    return Status::InvalidArgument("a silence needs a node, gpu, job or cause to match");
  if (!s.cause.empty() && !ParseCauseText(s.cause))
    return Status::InvalidArgument("unknown cause '" + s.cause +
                                   "' (findings.md's vocabulary, or user:RULE)");
  if (s.gpu && *s.gpu < 0) return Status::InvalidArgument("gpu must be >= 0");
  if (s.starts_ms == 0) s.starts_ms = now_ms;
  if (s.ends_ms <= s.starts_ms || s.ends_ms <= now_ms)
    return Status::InvalidArgument("a silence must end after it starts, and in the future");
  if (silences_.size() >= o_.max_silences)
    return Status::ResourceExhausted(fmt::format("{} silences already", silences_.size()));
  // Random, not sequential: an id is what DELETE takes, so it must not be guessable from one's
  // own (issue 17, D2). "s" or "m" still tells a silence from a maintenance window.
  auto rnd = RandomHex(8);
  if (!rnd.ok()) return rnd.status();
  s.id = (s.maintenance ? "m" : "s") + *rnd;
  if (silences_.count(s.id)) return Status::Internal("silence id collision; retry");
  const std::string id = s.id;
  silences_[id] = std::move(s);
  return id;
}

Status AlertBook::ExpireSilence(const std::string& id, int64_t now_ms) {
  auto it = silences_.find(id);
  if (it == silences_.end() || it->second.ends_ms <= now_ms)
    return Status::NotFound("no active silence '" + id + "'");
  silences_.erase(it);
  return Status::Ok();
}

std::vector<Alert> AlertBook::Alerts() const {
  std::vector<Alert> out;
  for (const auto& [fp, a] : alerts_) out.push_back(a);
  std::sort(out.begin(), out.end(), [](const Alert& a, const Alert& b) {
    if (a.state != b.state) return a.state == "firing";
    return a.starts_ms > b.starts_ms;
  });
  return out;
}

std::vector<Silence> AlertBook::Silences(int64_t now_ms) const {
  std::vector<Silence> out;
  for (const auto& [id, s] : silences_) {
    if (s.ends_ms > now_ms) out.push_back(s);
  }
  std::sort(out.begin(), out.end(),
            [](const Silence& a, const Silence& b) { return a.ends_ms < b.ends_ms; });
  return out;
}

std::vector<Alert> AlertBook::Notifiable() const {
  std::vector<Alert> out;
  for (const auto& [fp, a] : alerts_) {
    if (a.state == "firing" && a.notified && a.suppressed_by.empty()) out.push_back(a);
  }
  return out;
}

std::string Rfc3339Ms(int64_t ms) {
  return FormatUtc(ms, "%Y-%m-%dT%H:%M:%S") + fmt::format(".{:03d}Z", ((ms % 1000) + 1000) % 1000);
}

nlohmann::json AlertToJson(const Alert& a) {
  nlohmann::json j = FindingToJson(a.finding);
  j["fingerprint"] = a.fingerprint;
  j["status"] = a.state;
  j["suppressed_by"] = a.suppressed_by;
  j["starts_at"] = Rfc3339Ms(a.starts_ms);
  j["last_seen_at"] = Rfc3339Ms(a.updated_ms);
  if (a.ends_ms != 0) j["ends_at"] = Rfc3339Ms(a.ends_ms);
  j["seen"] = a.seen;
  return j;
}

nlohmann::json SilenceToJson(const Silence& s) {
  nlohmann::json j = {{"id", s.id},
                      {"maintenance", s.maintenance},
                      {"starts_at", Rfc3339Ms(s.starts_ms)},
                      {"ends_at", Rfc3339Ms(s.ends_ms)}};
  if (!s.node.empty()) j["node"] = s.node;
  if (s.gpu) j["gpu"] = *s.gpu;
  if (!s.job.empty()) j["job"] = s.job;
  if (!s.cause.empty()) j["cause"] = s.cause;
  if (!s.created_by.empty()) j["created_by"] = s.created_by;
  if (!s.comment.empty()) j["comment"] = s.comment;
  return j;
}

Result<Silence> SilenceFromJson(const nlohmann::json& j, int64_t now_ms) {
  if (!j.is_object()) return Status::InvalidArgument("a silence is a JSON object");
  Silence s;
  for (const auto& [key, v] : j.items()) {
    auto bad = [&, k = key](const char* want) {
      return Status::InvalidArgument(fmt::format("silence field '{}' must be {}", k, want));
    };
    auto str = [&](std::string* out, size_t max) -> Status {
      if (!v.is_string() || v.get<std::string>().size() > max)
        return bad(fmt::format("a string of at most {} bytes", max).c_str());
      *out = v.get<std::string>();
      return Status::Ok();
    };
    auto seconds = [&](int64_t* out_ms) -> Status {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 ||
          v.get<double>() > 1e11)
        return bad("a number of seconds");
      *out_ms = static_cast<int64_t>(std::llround(v.get<double>() * 1000));
      return Status::Ok();
    };
    Status st;
    if (key == "node") {
      st = str(&s.node, 256);
    } else if (key == "job") {
      st = str(&s.job, 256);
    } else if (key == "cause") {
      st = str(&s.cause, 64);
    } else if (key == "comment") {
      st = str(&s.comment, 4096);
    } else if (key == "created_by") {
      st = str(&s.created_by, 256);
    } else if (key == "gpu") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 4096)
        return bad("a GPU index (an integer >= 0)");
      s.gpu = static_cast<int>(v.get<int64_t>());
    } else if (key == "maintenance") {
      if (!v.is_boolean()) return bad("true or false");
      s.maintenance = v.get<bool>();
    } else if (key == "starts_at") {
      st = seconds(&s.starts_ms);
    } else if (key == "ends_at") {
      st = seconds(&s.ends_ms);
    } else if (key == "duration_s") {
      int64_t d = 0;
      st = seconds(&d);
      if (st.ok() && d <= 0) return bad("a number of seconds > 0");
      if (st.ok()) s.ends_ms = -d;  // resolved against the start below
    } else {
      return Status::InvalidArgument("unknown silence field '" + key + "'");
    }
    if (!st.ok()) return st;
  }
  if (s.starts_ms == 0) s.starts_ms = now_ms;
  if (s.ends_ms < 0) s.ends_ms = s.starts_ms - s.ends_ms;
  if (s.ends_ms == 0) return Status::InvalidArgument("a silence needs ends_at or duration_s");
  return s;
}

}  // namespace gpuwatch::analyze
