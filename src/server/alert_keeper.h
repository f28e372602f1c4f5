// AlertKeeper: the alert book of an agent or a hub (analyze/alerts.h) with what keeps it: its
// state across restarts in <data-dir>/alerts.json (docs/format/alerts.md; a damaged file is
// kept aside, never overwritten) and the notifier that tells a webhook and Alertmanager. One of
// the parts an agent and a hub share (issue 19): findings in, alerts, silences and
// notifications out.
// Thread-safety: every method may be called from any thread (one mutex around the book; the
// notifier posts on a thread of its own).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "analyze/alerts.h"
#include "common/status.h"
#include "server/alert_notifier.h"

namespace gpuwatch::server {

class AlertKeeper {
 public:
  // data_dir "": nothing is kept across restarts.
  AlertKeeper(analyze::AlertOptions options, std::string data_dir);
  // The notifier, when `notify` names a webhook or Alertmanager; an error names what is wrong.
  Status Init(const NotifierOptions& notify, const std::string& source_node);
  // Reads <data-dir>/alerts.json when there is one.
  void Restore();
  void Start();  // the notifier's thread
  void Stop();   // idempotent

  // The jobs with an alert firing (the diagnosis keeps an ended job's state while it fires).
  std::set<std::string> FiringJobs() const;
  // The silences and maintenance windows not yet over at now_ms.
  std::vector<analyze::Silence> Silences(int64_t now_ms) const;
  // Folds one diagnosis tick's findings in: the transitions are logged, the state saved as it
  // changes, and the notifier told. Returns the firing alerts per (severity, "notified" or
  // "suppressed"), every severity present.
  std::map<std::pair<std::string, std::string>, int64_t> Update(
      const std::vector<analyze::Finding>& findings, int64_t now_ms);
  // {"alerts": [...], "silences": [...]} (docs/format/alerts.md).
  nlohmann::json Json(int64_t now_ms) const;
  // A silence or maintenance window; its id. Saved at once.
  Result<std::string> AddSilence(analyze::Silence s, int64_t now_ms);
  Status ExpireSilence(const std::string& id, int64_t now_ms);
  bool notifies() const { return notifier_ != nullptr; }
  // All zero without a notifier.
  AlertNotifier::Counters NotifierCounters() const;

 private:
  // `now`: save even when nothing lifecycle-related changed (a silence added).
  void SaveLocked(int64_t now_ms, bool now);

  const std::string data_dir_;
  std::unique_ptr<AlertNotifier> notifier_;
  mutable std::mutex mu_;
  analyze::AlertBook book_;      // guarded by mu_
  std::string saved_signature_;  // guarded by mu_: what was last saved
  int64_t saved_ms_ = 0;         // guarded by mu_
};

}  // namespace gpuwatch::server
