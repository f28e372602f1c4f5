// AlertNotifier: tells people about the agent's alerts (analyze/alerts.h) — a webhook with
// gpuwatch's own JSON body (docs/format/alerts.md) and Prometheus Alertmanager's v2 API — from a
// thread of its own, so a slow or absent receiver never holds up collection or diagnosis.
//
// - Webhook: each batch of transitions (firing, updated, resolved) is one POST. A batch that
//   fails is retried with backoff (1 s doubling to 60 s); at most `max_queue` batches wait, the
//   oldest dropped first (counted).
// - Alertmanager: POST <url>/api/v2/alerts with every alert that fires and is not silenced,
//   whenever something changed and every `resend` otherwise, each with endsAt = now + 4 ×
//   resend (Alertmanager resolves an alert it stops hearing about then); a resolved alert is
//   sent once with its real endsAt. A failed post is simply covered by the next one.
// Only http:// URLs (the agent talks to receivers on its own network); errors name the URL.
// Thread-safety: Publish from any thread; Start/Stop from the owner's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "analyze/alerts.h"
#include "common/status.h"

namespace gpuwatch::server {

struct NotifierOptions {
  std::string webhook_url;       // "" none
  std::string alertmanager_url;  // "" none; the base URL, e.g. http://127.0.0.1:9093
  std::chrono::milliseconds resend{60000};
  std::chrono::milliseconds timeout{5000};
  size_t max_queue = 1000;
  std::string generator_url;  // where the alert came from: the agent's /api/v1/alerts
};

// The webhook's body for one batch (docs/format/alerts.md).
nlohmann::json WebhookBody(const std::vector<analyze::AlertNotification>& batch,
                           const std::string& source_node);
// Alertmanager v2's postableAlerts for these alerts at now_ms.
nlohmann::json AlertmanagerBody(const std::vector<analyze::Alert>& alerts, int64_t now_ms,
                                std::chrono::milliseconds resend, const std::string& generator_url);

class AlertNotifier {
 public:
  // Checks the URLs (http://host:port[/path]); errors name the one that is wrong.
  static Result<std::unique_ptr<AlertNotifier>> Create(NotifierOptions options,
                                                       std::string source_node);
  ~AlertNotifier();
  AlertNotifier(const AlertNotifier&) = delete;
  AlertNotifier& operator=(const AlertNotifier&) = delete;

  void Start();
  void Stop();  // sends nothing more; idempotent

  // From the diagnosis tick: the transitions it produced, and every alert receivers should now
  // believe fires (AlertBook::Notifiable).
  void Publish(std::vector<analyze::AlertNotification> changes, std::vector<analyze::Alert> firing);

  struct Counters {
    uint64_t webhook_sent = 0, webhook_failed = 0, webhook_dropped = 0;
    uint64_t alertmanager_sent = 0, alertmanager_failed = 0;
    std::string last_error;
  };
  Counters counters() const;

 private:
  AlertNotifier(NotifierOptions options, std::string source_node);
  void Run();
  Status Post(const std::string& base, const std::string& path, const std::string& body);

  NotifierOptions o_;
  std::string node_;
  std::string webhook_base_, webhook_path_, am_base_, am_path_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false, am_due_ = false;
  std::deque<std::vector<analyze::AlertNotification>> webhook_queue_;
  std::vector<analyze::Alert> firing_;
  std::vector<analyze::Alert> resolved_;  // to tell Alertmanager once
  Counters counters_;
  std::thread thread_;
};

}  // namespace gpuwatch::server
