// AlertBook: findings become alerts with a lifecycle (issue 7, R14/R18/R19) — one alert per
// cause and place, fired, updated, resolved, silenced, held back by a maintenance window or
// inhibited by a deeper alert on the same place — and the transitions worth telling someone
// (the notifiers in server/ send them to a webhook and to Alertmanager).
//
// - Identity and de-duplication: an alert is (cause, node, gpu, job, rank, nic), the diagnosis
//   engine's own key. The same finding seen again updates the alert (last seen, summary,
//   evidence, count); it never makes a second alert.
// - Levels: info, warning, critical, as findings.md defines them. Info is recorded, never
//   notified, and is its own alert (fingerprint suffix /info) apart from a warning of the same
//   cause and place. A severity that rises while the alert fires is an `updated`
//   notification; nothing else about an update is.
// - Firing and resolving: hardware errors and events (gpu_lost, ecc_dbe, xid, the counter
//   causes, rank_exit, topology and version changes, clock skew) fire at once, since the engine
//   reports them when it sees them, and stay firing for `event_hold_ms` after they were last
//   seen. Conditions (throttles, stalls, leaks, congestion, stragglers, fallbacks, a hang)
//   resolve when the engine has not seen them for `resolve_after_ms`: the hysteresis that stops
//   a condition at its edge from flapping.
// - Silences (by node, GPU, job and/or cause, with an expiry) and maintenance windows (the same,
//   marked maintenance) keep an alert from being notified; it is still tracked and listed, and
//   notified as firing if it still fires when the silence ends.
// - Inhibition: a firing alert inhibits the alerts it explains by the cause catalog's graph
//   (model/cause.h; analyze::Explains, the engine's "deepest cause" test): a lost GPU inhibits
//   the other card alerts of that GPU (its throttles, XIDs and counters say nothing more); a
//   rank that exited inhibits its job's hang, straggler, regression and stall alerts.
//
// Thread-safety: none; the owner serialises (the agent holds it under its diagnosis tick's lock).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "analyze/finding.h"
#include "common/status.h"

namespace gpuwatch::analyze {

struct AlertOptions {
  int64_t resolve_after_ms = 120000;  // a condition not seen for this long has cleared
  int64_t event_hold_ms = 3600000;    // an event alert fires this long after it was last seen
  size_t max_alerts = 10000;          // resolved alerts are forgotten first beyond this
  size_t max_silences = 1000;
  // A cause's own hold, instead of the two above (user rules' clear_after).
  std::map<std::string, int64_t> hold_ms_by_cause;
};

struct Alert {
  std::string fingerprint;  // cause/node/gpu/job/rank/nic
  Finding finding;          // the latest
  std::string state;        // firing | resolved
  // Why it is not notified while firing: "silence <id>", "maintenance <id>", "inhibited by
  // <fingerprint>"; "" when it is.
  std::string suppressed_by;
  int64_t starts_ms = 0;   // first seen
  int64_t updated_ms = 0;  // last seen
  int64_t ends_ms = 0;     // when it resolved; 0 while firing
  uint64_t seen = 0;       // updates folded into this alert
  bool notified = false;   // a firing notification went out (so a resolve will too)
};

struct Silence {
  std::string id;  // assigned by AddSilence
  // Matchers; empty / nullopt match anything. At least one must be set.
  std::string node, job, cause;
  std::optional<int> gpu;
  int64_t starts_ms = 0, ends_ms = 0;
  bool maintenance = false;
  std::string created_by, comment;
};

struct AlertNotification {
  enum class Kind { kFiring, kUpdated, kResolved };
  Kind kind = Kind::kFiring;
  Alert alert;
};
std::string_view NotificationKindName(AlertNotification::Kind k);

class AlertBook {
 public:
  explicit AlertBook(AlertOptions options = {}) : o_(options) {}

  // Folds in the engine's current findings at now_ms; returns what to notify, in order.
  std::vector<AlertNotification> Update(const std::vector<Finding>& findings, int64_t now_ms);

  // Validates and adds a silence; returns its id. Errors: no matcher, an unknown cause, an end
  // not after the start or in the past, too many silences.
  Result<std::string> AddSilence(Silence s, int64_t now_ms);
  // Ends a silence now. NotFound when there is no such active silence.
  Status ExpireSilence(const std::string& id, int64_t now_ms);

  std::vector<Alert> Alerts() const;  // firing first, then resolved; newest first within
  std::vector<Silence> Silences(int64_t now_ms) const;  // active and pending, by end
  // Firing and notified: what an Alertmanager must keep hearing about.
  std::vector<Alert> Notifiable() const;
  // The jobs named by a firing alert (the engine keeps their state until these resolve).
  std::set<std::string> FiringJobs() const;

  // The book as the agent keeps it on disk (docs/format/alerts.md, "State"): every alert with
  // its lifecycle (times in ms, whether it was notified) and every silence not over by now_ms,
  // so that a restart neither forgets a silence nor notifies a firing alert a second time.
  nlohmann::json State(int64_t now_ms) const;
  // Replaces the book's alerts and silences with a saved State. Silences over by now_ms are
  // dropped; alerts are taken as they were (the next Update resolves what went quiet while the
  // agent was down). Errors name what is wrong; on an error the book is left as it was.
  Status Restore(const nlohmann::json& state, int64_t now_ms);

 private:
  bool Matches(const Silence& s, const Alert& a) const;
  int64_t HoldOf(const Finding& f) const;
  std::string SuppressedBy(const Alert& a, int64_t now_ms) const;

  AlertOptions o_;
  std::map<std::string, Alert> alerts_;
  std::map<std::string, Silence> silences_;
};

// JSON forms (docs/format/alerts.md): an alert is its finding (findings.md) plus fingerprint,
// status, suppressed_by, starts_at / last_seen_at / ends_at (RFC 3339, UTC) and seen.
nlohmann::json AlertToJson(const Alert& a);
nlohmann::json SilenceToJson(const Silence& s);
// A silence as the API takes it: {"node", "gpu", "job", "cause", "starts_at" (Unix s, default
// now), "ends_at" (Unix s) or "duration_s", "maintenance", "comment", "created_by"}. Errors name
// the field.
Result<Silence> SilenceFromJson(const nlohmann::json& j, int64_t now_ms);
std::string Rfc3339Ms(int64_t ms);

// True for causes the engine reports as events (held, not resolved by hysteresis).
bool IsEventCause(Cause cause);
std::string AlertFingerprint(const Finding& f);

}  // namespace gpuwatch::analyze
