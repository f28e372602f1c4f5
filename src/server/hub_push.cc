#include "server/hub_push.h"

#include <fmt/format.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "common/time_base.h"
#include "server/http_client_tls.h"
#include "store/remote_write.h"

namespace gpuwatch::server {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds of a Retry-After header (delta-seconds form; an HTTP date or nonsense gets `dflt`),
// at most 60.
int RetryAfterSeconds(const httplib::Result& res, int dflt) {
  const std::string v = res->get_header_value("Retry-After");
  int s = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return dflt;
    s = std::min(s * 10 + (c - '0'), 3600);
  }
  return v.empty() ? dflt : std::clamp(s, 1, 60);
}

}  // namespace

Result<std::unique_ptr<HubPusher>> HubPusher::Open(HubPushOptions options) {
  if (options.url.empty()) return Status::InvalidArgument("--hub needs a URL");
  if (Status st = CheckClientUrl(options.url, options.ca_file); !st.ok()) return st;
  std::unique_ptr<HubPusher> p(new HubPusher(options));
  const size_t path_at = options.url.find('/', options.url.find("://") + 3);
  p->base_url_ = options.url.substr(0, path_at);
  if (path_at != std::string::npos && path_at + 1 < options.url.size()) {
    if (options.records)
      return Status::InvalidArgument("--hub " + options.url +
                                     ": give the hub's address only (http://HOST:PORT)");
    p->write_path_ = options.url.substr(path_at);
  }
  auto s = Spool::Open(options.spool_dir + "/samples", options.spool);
  if (!s.ok()) return s.status();
  p->samples_ = std::move(s).value();
  if (options.records) {
    auto r = Spool::Open(options.spool_dir + "/records", options.spool);
    if (!r.ok()) return r.status();
    p->records_ = std::move(r).value();
  }
  const uint64_t backlog = p->counters().backlog_entries;
  if (backlog > 0)
    GW_LOG_INFO("{}: {} entries not yet sent to {} are in the spool; they go first", options.label,
                backlog, options.url);
  return p;
}

HubPusher::HubPusher(HubPushOptions options) : options_(std::move(options)) {}

HubPusher::~HubPusher() { Stop(); }

void HubPusher::AddSeries(const std::vector<store::Head::Input>& inputs) {
  std::vector<store::RemoteSeries> rs;
  rs.reserve(inputs.size());
  uint64_t n = 0;
  for (const auto& in : inputs) {
    store::RemoteSeries s;
    s.labels = in.labels;
    for (const auto& x : in.samples) s.samples.push_back({x.t_ms, x.value});
    n += s.samples.size();
    rs.push_back(std::move(s));
  }
  std::string proto = store::EncodeWriteRequest(rs);
  std::lock_guard<std::mutex> lock(buf_mu_);
  series_buf_ += proto;
  series_in_buf_ += n;
}

void HubPusher::AddRecord(std::string line) {
  if (!records_) return;
  std::lock_guard<std::mutex> lock(buf_mu_);
  records_buf_ += line;
  records_buf_ += '\n';
  ++records_in_buf_;
}

Status HubPusher::Flush() {
  std::string series, records;
  uint64_t n_series, n_records;
  {
    std::lock_guard<std::mutex> lock(buf_mu_);
    series.swap(series_buf_);
    records.swap(records_buf_);
    n_series = std::exchange(series_in_buf_, 0);
    n_records = std::exchange(records_in_buf_, 0);
  }
  // Entries are kept snappy-compressed: a second of a node's series repeats every label set
  // (~430 KB as protobuf, ~10x less compressed), and the spool's bound is in bytes.
  Status first = Status::Ok();
  if (!series.empty()) {
    auto st = samples_->Append(store::SnappyCompress(series));
    if (!st.ok()) first = st.status();
  }
  if (!records.empty() && records_) {
    auto st = records_->Append(store::SnappyCompress(records));
    if (!st.ok() && first.ok()) first = st.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  counters_.samples_spooled += n_series;
  counters_.records_spooled += n_records;
  return first;
}

httplib::Client& HubPusher::Client() {
  if (client_) return *client_;
  client_ = std::make_unique<httplib::Client>(base_url_);
  httplib::Client& c = *client_;
  c.set_keep_alive(true);
  c.set_tcp_nodelay(true);  // headers and body go in two writes: no 40 ms delayed-ACK stall
  const auto secs = static_cast<time_t>(options_.timeout.count());
  c.set_connection_timeout(secs);
  c.set_read_timeout(secs);
  c.set_write_timeout(secs);
  VerifyServer(c, base_url_, options_.ca_file);
  return c;
}

HubPusher::Outcome HubPusher::Post(const std::string& path, const std::string& body,
                                   const std::string& type,
                                   const std::vector<std::pair<std::string, std::string>>& extra) {
  httplib::Client& c = Client();
  httplib::Headers headers;
  for (const auto& [k, v] : extra) headers.emplace(k, v);
  if (!options_.token.empty()) headers.emplace("Authorization", "Bearer " + options_.token);
  auto res = c.Post(path, headers, body, type);
  std::lock_guard<std::mutex> lock(mu_);
  auto backoff = [&](int seconds, const std::string& why) {
    ++counters_.requests_failed;
    wait_until_ = Clock::now() + std::chrono::seconds(seconds);
    if (failures_in_row_++ % 30 == 0)
      GW_LOG_WARN("{}: {} {}{}: {}; retrying in {} s", options_.label, "POST", base_url_, path, why,
                  seconds);
    return Outcome::kRetryLater;
  };
  if (!res) {
    const int s = std::min(30, 1 << std::min(failures_in_row_, 5));
    return backoff(s, httplib::to_string(res.error()));
  }
  const int status = res->status;
  const std::string reason = res->body.substr(0, 300);
  if (status >= 200 && status < 300) {
    ++counters_.requests_sent;
    counters_.last_success_ms = WallClockMs();
    if (failures_in_row_ > 0 || !auth_error_.empty())
      GW_LOG_INFO("{}: {} takes the data again", options_.label, base_url_);
    failures_in_row_ = 0;
    auth_error_.clear();
    return Outcome::kSent;
  }
  if (status == 401 || status == 403) {
    const std::string why =
        fmt::format("{} answers {} to this agent's token: {}", base_url_, status, reason);
    if (auth_error_ != why) GW_LOG_ERROR("{}: {}", options_.label, why);
    auth_error_ = why;
    ++counters_.requests_failed;
    wait_until_ = Clock::now() + std::chrono::seconds(60);
    return Outcome::kRetryLater;
  }
  if (status == 429 || status == 503)
    return backoff(RetryAfterSeconds(res, 5), fmt::format("HTTP {}: {}", status, reason));
  if (status == 400 || status == 409 || status == 413 || status == 415) {
    ++counters_.requests_failed;
    GW_LOG_ERROR("{}: {}{} refused an entry with HTTP {} (not retried): {}", options_.label,
                 base_url_, path, status, reason);
    return Outcome::kDropped;
  }
  return backoff(std::min(30, 1 << std::min(failures_in_row_, 5)),
                 fmt::format("HTTP {}: {}", status, reason));
}

Status HubPusher::SpoolSamples(std::string_view snappy_request, uint64_t samples) {
  auto st = samples_->Append(snappy_request);
  if (!st.ok()) return st.status();
  std::lock_guard<std::mutex> lock(mu_);
  counters_.samples_spooled += samples;
  return Status::Ok();
}

uint64_t HubPusher::samples_spool_bytes() const { return samples_->Stats().bytes; }

bool HubPusher::SendSamples() {
  const uint64_t from = samples_->Position(kDestination);
  // Entries read before and not sent yet come first (a request stops at the inflated bound,
  // short of what Read returned), so each entry is read and CRC-checked once: a relaying hub
  // read its entries up to four times, and the CRCs were a tenth of its CPU.
  std::erase_if(read_ahead_, [from](const SpoolEntry& e) { return e.seq < from; });
  size_t held = 0;
  for (const auto& e : read_ahead_) held += e.payload.size();
  if (held < options_.max_request_bytes) {
    auto more = samples_->Read(read_ahead_.empty() ? from : read_ahead_.back().seq + 1,
                               options_.max_request_bytes - held);
    if (!more.ok()) {
      GW_LOG_ERROR("{}: {}", options_.label, more.status().message());
      return false;
    }
    for (auto& e : *more) read_ahead_.push_back(std::move(e));
  }
  if (read_ahead_.empty()) return false;
  const std::vector<SpoolEntry>* entries = &read_ahead_;
  // Joined as spooled, without inflating them (store::SnappyJoin): inflating and compressing
  // every entry again was the sender's whole cost, and a relaying hub sends every node's.
  std::vector<std::string_view> blocks;
  uint64_t inflated = 0;
  size_t taken = 0;
  for (const auto& e : *entries) {
    auto n = store::SnappyInflatedLength(e.payload);
    if (!n.ok()) {
      GW_LOG_ERROR("{}: samples entry {} is damaged and skipped: {}", options_.label, e.seq,
                   n.status().message());
      ++taken;
      continue;
    }
    if (!blocks.empty() && inflated + *n > options_.max_request_inflated_bytes) break;
    blocks.push_back(e.payload);
    inflated += *n;
    ++taken;
  }
  Outcome o = Outcome::kDropped;
  if (!blocks.empty()) {
    auto body = store::SnappyJoin(blocks);
    if (body.ok()) {
      // To a hub, the node it comes from: the hub bounds the series of each node apart
      // (docs/limits.md, The hub), so agents that share a token and an address (a NAT, a
      // proxy it does not trust, a test on loopback) do not share one budget.
      std::vector<std::pair<std::string, std::string>> headers = {
          {"Content-Encoding", "snappy"}, {"X-Prometheus-Remote-Write-Version", "0.1.0"}};
      if (options_.records && !options_.node.empty())
        headers.emplace_back("X-Gpuwatch-Node", options_.node);
      o = Post(write_path_, *body, "application/x-protobuf", headers);
    } else {
      GW_LOG_ERROR("{}: samples entries {}..{} are skipped: {}", options_.label,
                   entries->front().seq, (*entries)[taken - 1].seq, body.status().message());
    }
  }
  if (o == Outcome::kRetryLater) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    (o == Outcome::kSent ? counters_.entries_sent : counters_.entries_dropped) += taken;
  }
  if (Status st = samples_->Ack(kDestination, (*entries)[taken - 1].seq + 1); !st.ok())
    GW_LOG_WARN("{}: {}", options_.label, st.message());
  read_ahead_.erase(read_ahead_.begin(), read_ahead_.begin() + static_cast<ptrdiff_t>(taken));
  return true;
}

bool HubPusher::SendRecords() {
  if (!records_) return false;
  const uint64_t from = records_->Position(kDestination);
  auto entries = records_->Read(from, 1);
  if (!entries.ok()) {
    GW_LOG_ERROR("{}: {}", options_.label, entries.status().message());
    return false;
  }
  if (entries->empty()) return false;
  const SpoolEntry& e = entries->front();
  // Sent compressed as spooled (the hub takes Content-Encoding: snappy).
  const Outcome o = Post("/api/v1/records", e.payload, "application/x-ndjson",
                         {{"Content-Encoding", "snappy"},
                          {"X-Gpuwatch-Node", options_.node},
                          {"X-Gpuwatch-Spool", records_->id()},
                          {"X-Gpuwatch-Seq", std::to_string(e.seq)}});
  if (o == Outcome::kRetryLater) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++(o == Outcome::kSent ? counters_.entries_sent : counters_.entries_dropped);
  }
  if (Status st = records_->Ack(kDestination, e.seq + 1); !st.ok())
    GW_LOG_WARN("{}: {}", options_.label, st.message());
  return true;
}

void HubPusher::SendPending() {
  // Requests are spaced to max_requests_per_second; samples and records take turns, so a long
  // backlog of one does not hold the other back.
  const auto spacing =
      std::chrono::microseconds(1'000'000 / std::max(1, options_.max_requests_per_second));
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Clock::now() < wait_until_) return;
    }
    const auto t0 = Clock::now();
    const bool a = SendSamples();
    bool waiting;
    {
      std::lock_guard<std::mutex> lock(mu_);
      waiting = Clock::now() < wait_until_;
    }
    const bool b = !waiting && SendRecords();
    if (!a && !b) return;
    std::unique_lock<std::mutex> lock(stop_mu_);
    if (stop_cv_.wait_until(lock, t0 + spacing * (a + b), [this] { return stopping_; })) return;
  }
}

HubPusher::Counters HubPusher::counters() const {
  Counters c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = counters_;
    c.auth_refused = !auth_error_.empty();
  }
  const SpoolStats samples = samples_->Stats();
  c.backlog_entries = samples.next_seq - samples_->Position(kDestination);
  c.spool_bytes = samples.bytes;
  if (records_) {
    const SpoolStats records = records_->Stats();
    c.backlog_entries += records.next_seq - records_->Position(kDestination);
    c.spool_bytes += records.bytes;
  }
  return c;
}

std::string HubPusher::auth_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return auth_error_;
}

void HubPusher::Start() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void HubPusher::Run() {
  while (true) {
    if (Status st = Flush(); !st.ok())
      GW_LOG_ERROR("{}: cannot spool: {}", options_.label, st.message());
    SendPending();
    std::unique_lock<std::mutex> lock(stop_mu_);
    if (stop_cv_.wait_for(lock, options_.interval, [this] { return stopping_; })) return;
  }
}

void HubPusher::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // What was collected since the last interval is kept for the next start.
  if (Status st = Flush(); !st.ok())
    GW_LOG_ERROR("{}: cannot spool: {}", options_.label, st.message());
}

}  // namespace gpuwatch::server
