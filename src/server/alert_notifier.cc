#include "server/alert_notifier.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>

#include "analyze/prometheus_rules.h"
#include "common/log.h"
#include "common/time_base.h"

namespace gpuwatch::server {
namespace {

using analyze::Alert;
using analyze::AlertNotification;
using nlohmann::json;

// "http://host:port/path" → ("http://host:port", "/path"). Errors name the URL.
Result<std::pair<std::string, std::string>> SplitUrl(const std::string& what,
                                                     const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0 || url.size() == scheme.size())
    return Status::InvalidArgument(
        fmt::format("{} '{}': only http://HOST:PORT[/PATH] URLs", what, url));
  const size_t slash = url.find('/', scheme.size());
  std::string base = slash == std::string::npos ? url : url.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : url.substr(slash);
  if (base.find_first_of(" \t\r\n") != std::string::npos)
    return Status::InvalidArgument(fmt::format("{} '{}': whitespace in the host", what, url));
  return std::make_pair(std::move(base), std::move(path));
}

}  // namespace

json WebhookBody(const std::vector<AlertNotification>& batch, const std::string& source_node) {
  json alerts = json::array();
  for (const AlertNotification& n : batch) {
    json a = analyze::AlertToJson(n.alert);
    a["notification"] = std::string(analyze::NotificationKindName(n.kind));
    alerts.push_back(std::move(a));
  }
  return {{"version", 1}, {"source", "gpuwatch"}, {"agent", source_node}, {"alerts", alerts}};
}

json AlertmanagerBody(const std::vector<Alert>& alerts, int64_t now_ms,
                      std::chrono::milliseconds resend, const std::string& generator_url) {
  json out = json::array();
  for (const Alert& a : alerts) {
    const analyze::Finding& f = a.finding;
    // A user rule's alerts carry the rule's own name.
    const bool user = f.cause == model::Cause::kUserRule;
    json labels = {{"alertname", user ? f.rule : analyze::AlertName(f.cause)},
                   {"cause", f.CauseText()},
                   {"severity", model::SeverityName(f.severity)},
                   {"layer", model::LayerName(f.layer())},
                   {"Hostname", f.node}};
    if (f.gpu) labels["gpu"] = std::to_string(*f.gpu);
    if (f.job) labels["job"] = *f.job;
    if (f.rank) labels["rank"] = std::to_string(*f.rank);
    if (f.nic) labels["nic"] = *f.nic;
    std::string evidence;
    for (const auto& e : f.evidence) evidence += (evidence.empty() ? "" : "; ") + e;
    json annotations = {{"summary", f.summary},
                        {"action", f.action},
                        {"runbook", "docs/runbook.md, cause `" + f.CauseText() + "`"}};
    if (!evidence.empty()) annotations["evidence"] = evidence;
    const int64_t ends = a.state == "resolved" ? a.ends_ms : now_ms + 4 * resend.count();
    json alert = {{"labels", labels},
                  {"annotations", annotations},
                  {"startsAt", analyze::Rfc3339Ms(a.starts_ms)},
                  {"endsAt", analyze::Rfc3339Ms(ends)}};
    if (!generator_url.empty()) alert["generatorURL"] = generator_url;
    out.push_back(std::move(alert));
  }
  return out;
}

Result<std::unique_ptr<AlertNotifier>> AlertNotifier::Create(NotifierOptions options,
                                                             std::string source_node) {
  std::unique_ptr<AlertNotifier> n(new AlertNotifier(std::move(options), std::move(source_node)));
  if (!n->o_.webhook_url.empty()) {
    auto u = SplitUrl("--alert-webhook", n->o_.webhook_url);
    if (!u.ok()) return u.status();
    n->webhook_base_ = u->first;
    n->webhook_path_ = u->second.empty() ? "/" : u->second;
  }
  if (!n->o_.alertmanager_url.empty()) {
    auto u = SplitUrl("--alertmanager", n->o_.alertmanager_url);
    if (!u.ok()) return u.status();
    n->am_base_ = u->first;
    std::string prefix = u->second;
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    n->am_path_ = prefix + "/api/v2/alerts";
  }
  return n;
}

AlertNotifier::AlertNotifier(NotifierOptions options, std::string source_node)
    : o_(std::move(options)), node_(std::move(source_node)) {}

AlertNotifier::~AlertNotifier() { Stop(); }

void AlertNotifier::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void AlertNotifier::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AlertNotifier::Publish(std::vector<AlertNotification> changes, std::vector<Alert> firing) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!webhook_base_.empty() && !changes.empty()) {
      if (webhook_queue_.size() >= o_.max_queue) {
        counters_.webhook_dropped += webhook_queue_.front().size();
        webhook_queue_.pop_front();
      }
      webhook_queue_.push_back(changes);
    }
    if (!am_base_.empty()) {
      for (const AlertNotification& c : changes) {
        if (c.kind == AlertNotification::Kind::kResolved) resolved_.push_back(c.alert);
      }
      if (!changes.empty()) am_due_ = true;
      firing_ = std::move(firing);
    }
  }
  if (!changes.empty()) cv_.notify_all();
}

AlertNotifier::Counters AlertNotifier::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

Status AlertNotifier::Post(const std::string& base, const std::string& path,
                           const std::string& body) {
  httplib::Client c(base);
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(o_.timeout).count();
  c.set_connection_timeout(std::max<int64_t>(1, secs));
  c.set_read_timeout(std::max<int64_t>(1, secs));
  c.set_write_timeout(std::max<int64_t>(1, secs));
  auto res = c.Post(path, body, "application/json");
  if (!res)
    return Status::Unavailable(
        fmt::format("POST {}{}: {}", base, path, httplib::to_string(res.error())));
  if (res->status < 200 || res->status >= 300)
    return Status::Unavailable(
        fmt::format("POST {}{}: HTTP {}: {}", base, path, res->status, res->body.substr(0, 200)));
  return Status::Ok();
}

void AlertNotifier::Run() {
  using Clock = std::chrono::steady_clock;
  auto next_am = Clock::now();
  auto webhook_retry_at = Clock::now();
  std::chrono::milliseconds backoff{1000};
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const auto now = Clock::now();
    // Webhook: the oldest batch first, retried with backoff.
    if (!webhook_queue_.empty() && now >= webhook_retry_at) {
      // Out of the queue while it is posted, so Publish's overflow never drops the batch in
      // flight; back at the front if the post fails.
      std::vector<AlertNotification> batch = std::move(webhook_queue_.front());
      webhook_queue_.pop_front();
      const std::string body = WebhookBody(batch, node_).dump();
      lock.unlock();
      Status st = Post(webhook_base_, webhook_path_, body);
      lock.lock();
      if (st.ok()) {
        ++counters_.webhook_sent;
        backoff = std::chrono::milliseconds(1000);
      } else {
        if (webhook_queue_.size() >= o_.max_queue) {
          counters_.webhook_dropped += batch.size();  // the oldest goes first: this one
        } else {
          webhook_queue_.push_front(std::move(batch));
        }
        ++counters_.webhook_failed;
        counters_.last_error = st.message();
        GW_LOG_WARN("alert webhook: {} (retry in {} s)", st.message(), backoff.count() / 1000);
        webhook_retry_at = Clock::now() + backoff;
        backoff = std::min(backoff * 2, std::chrono::milliseconds(60000));
      }
      continue;
    }
    // Alertmanager: on change, and every `resend`.
    if (!am_base_.empty() && (am_due_ || now >= next_am)) {
      std::vector<Alert> alerts = firing_;
      std::vector<Alert> resolved = std::move(resolved_);
      resolved_.clear();
      for (const Alert& r : resolved) alerts.push_back(r);
      am_due_ = false;
      next_am = now + o_.resend;
      if (!alerts.empty()) {
        const std::string body =
            AlertmanagerBody(alerts, WallClockMs(), o_.resend, o_.generator_url).dump();
        lock.unlock();
        Status st = Post(am_base_, am_path_, body);
        lock.lock();
        if (st.ok()) {
          ++counters_.alertmanager_sent;
        } else {
          // The resolved ones are told only once: keep them for the next post.
          resolved_.insert(resolved_.begin(), resolved.begin(), resolved.end());
          ++counters_.alertmanager_failed;
          counters_.last_error = st.message();
          GW_LOG_WARN("alertmanager: {}", st.message());
        }
      }
      continue;
    }
    auto wake = now + std::chrono::hours(1);
    if (!am_base_.empty()) wake = std::min(wake, next_am);
    if (!webhook_queue_.empty()) wake = std::min(wake, webhook_retry_at);
    cv_.wait_until(lock, wake, [&] {
      return stopping_ || am_due_ || (!webhook_queue_.empty() && Clock::now() >= webhook_retry_at);
    });
  }
}

}  // namespace gpuwatch::server
