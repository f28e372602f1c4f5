#include "server/alert_keeper.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/file_io.h"
#include "common/log.h"
#include "common/time_base.h"

namespace gpuwatch::server {

AlertKeeper::AlertKeeper(analyze::AlertOptions options, std::string data_dir)
    : data_dir_(std::move(data_dir)), book_(std::move(options)) {}

Status AlertKeeper::Init(const NotifierOptions& notify, const std::string& source_node) {
  if (notify.webhook_url.empty() && notify.alertmanager_url.empty()) return Status::Ok();
  auto n = AlertNotifier::Create(notify, source_node);
  if (!n.ok()) return n.status();
  notifier_ = std::move(n).value();
  return Status::Ok();
}

void AlertKeeper::Restore() {
  if (data_dir_.empty()) return;
  const std::string path = data_dir_ + "/alerts.json";
  std::ifstream in(path);
  if (!in) return;  // none yet
  std::stringstream text;
  text << in.rdbuf();
  const auto state = nlohmann::json::parse(text.str(), nullptr, false);
  Status st = state.is_discarded() ? Status::InvalidArgument("not JSON") : Status::Ok();
  if (st.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    st = book_.Restore(state, WallClockMs());
  }
  if (st.ok()) {
    GW_LOG_INFO("alerts and silences restored from {}", path);
    return;
  }
  // Kept aside, never overwritten: what is in it was accepted once.
  const std::string aside = fmt::format("{}.damaged-{}", path, WallClockMs());
  std::rename(path.c_str(), aside.c_str());
  GW_LOG_ERROR("cannot restore alerts from {} ({}); kept it as {} and started without them", path,
               st.message(), aside);
}

void AlertKeeper::Start() {
  if (notifier_) notifier_->Start();
}

void AlertKeeper::Stop() {
  if (notifier_) notifier_->Stop();
}

std::set<std::string> AlertKeeper::FiringJobs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return book_.FiringJobs();
}

std::vector<analyze::Silence> AlertKeeper::Silences(int64_t now_ms) const {
  std::lock_guard<std::mutex> lock(mu_);
  return book_.Silences(now_ms);
}

std::map<std::pair<std::string, std::string>, int64_t> AlertKeeper::Update(
    const std::vector<analyze::Finding>& findings, int64_t now_ms) {
  std::vector<analyze::AlertNotification> changes;
  std::vector<analyze::Alert> firing;
  std::map<std::pair<std::string, std::string>, int64_t> counts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    changes = book_.Update(findings, now_ms);
    SaveLocked(now_ms, false);
    if (notifier_) firing = book_.Notifiable();
    for (const char* sev : {"info", "warning", "critical"}) {
      counts[{sev, "notified"}] = 0;
      counts[{sev, "suppressed"}] = 0;
    }
    for (const analyze::Alert& a : book_.Alerts()) {
      if (a.state != "firing") continue;
      ++counts[{std::string(model::SeverityName(a.finding.severity)),
                a.suppressed_by.empty() ? "notified" : "suppressed"}];
    }
  }
  for (const auto& c : changes) {
    GW_LOG_INFO("alert {} [{}] {}: {}", analyze::NotificationKindName(c.kind),
                model::SeverityName(c.alert.finding.severity), c.alert.fingerprint,
                c.alert.finding.summary);
  }
  if (notifier_) notifier_->Publish(std::move(changes), std::move(firing));
  return counts;
}

nlohmann::json AlertKeeper::Json(int64_t now_ms) const {
  nlohmann::json alerts = nlohmann::json::array(), silences = nlohmann::json::array();
  std::lock_guard<std::mutex> lock(mu_);
  for (const analyze::Alert& a : book_.Alerts()) alerts.push_back(analyze::AlertToJson(a));
  for (const analyze::Silence& s : book_.Silences(now_ms))
    silences.push_back(analyze::SilenceToJson(s));
  return {{"alerts", alerts}, {"silences", silences}};
}

Result<std::string> AlertKeeper::AddSilence(analyze::Silence s, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  auto id = book_.AddSilence(std::move(s), now_ms);
  if (id.ok()) {
    GW_LOG_INFO("silence {} added", *id);
    SaveLocked(now_ms, true);
  }
  return id;
}

Status AlertKeeper::ExpireSilence(const std::string& id, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  Status st = book_.ExpireSilence(id, now_ms);
  if (st.ok()) SaveLocked(now_ms, true);
  return st;
}

AlertNotifier::Counters AlertKeeper::NotifierCounters() const {
  return notifier_ ? notifier_->counters() : AlertNotifier::Counters{};
}

void AlertKeeper::SaveLocked(int64_t now_ms, bool now) {
  if (data_dir_.empty()) return;
  // What a restart must not lose: the lifecycle (state, notified, severity) and the silences.
  // Those are saved as they change; the rest (last seen, counts) at most once a minute.
  std::string signature;
  for (const analyze::Alert& a : book_.Alerts())
    signature += fmt::format("{}|{}|{}|{}\n", a.fingerprint, a.state, a.notified,
                             model::SeverityName(a.finding.severity));
  for (const analyze::Silence& sl : book_.Silences(now_ms))
    signature += fmt::format("{}|{}\n", sl.id, sl.ends_ms);
  if (!now && signature == saved_signature_ && now_ms - saved_ms_ < 60000) return;
  if (!now && signature == saved_signature_ && book_.Notifiable().empty()) return;
  if (Status st =
          WriteFileAtomically(data_dir_ + "/alerts.json", book_.State(now_ms).dump(1) + "\n");
      !st.ok()) {
    GW_LOG_ERROR("cannot keep the alert state: {}", st.message());
    return;
  }
  saved_signature_ = std::move(signature);
  saved_ms_ = now_ms;
}

}  // namespace gpuwatch::server
