// HubPusher: the agent's side of `gpuwatch up --hub URL` (issue 19). The agent keeps serving
// locally; what it collects also goes to the hub, through two spools (server/spool.h) under
// <data-dir>/spool/:
//   samples/  one entry a second: the series of that second's ticks as an encoded remote-write
//             WriteRequest (the labels the local store gives them), sent to POST /api/v1/write,
//             several entries joined into one request (protobuf merges repeated fields)
//   records/  one entry a second: that second's trace records (the flight recorder's lines),
//             sent to POST /api/v1/records, one entry a request with its sequence number
// The send position of each moves only when the hub answered 2xx. After an outage, or the
// agent's restart, it resends from there: oldest first, the original timestamps, at most
// max_requests_per_second (so a backlog does not flood a hub that just came back).
//
// The hub's answers:
//   2xx                  sent (a "duplicate" reply too: the hub had it)
//   429, 503             wait Retry-After (at most 60 s), then resend
//   5xx, no connection   wait 1, 2, 4 ... 30 s, then resend
//   400, 409, 413, 415   the entry can never be taken: logged with the hub's reason, counted
//                        in dropped, and passed (not retried)
//   401, 403             the token is refused: nothing is dropped, a retry every 60 s, and the
//                        agent raises an alert (auth_error()) rather than looping
//
// Thread-safety: Add* from the collecting threads, one sender thread of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/spool.h"
#include "store/head.h"

namespace httplib {
class Client;
}

namespace gpuwatch::server {

struct HubPushOptions {
  // http://hub:9470 (scheme, host, port). With records off (a remote-write destination such
  // as VictoriaMetrics), the URL's path is where the samples go (default /api/v1/write).
  std::string url;
  bool records = true;             // send the records stream too (a hub); off: samples only
  std::string label = "hub push";  // how its log lines start
  std::string token;               // sent as a bearer token; "" sends none
  // https:// URLs: the CA bundle (PEM) the destination's certificate must chain to; "" uses
  // the system's. The certificate and its host name are always verified.
  std::string ca_file;
  std::string spool_dir;
  std::string node;
  std::chrono::milliseconds interval{1000};
  SpoolOptions spool;
  int max_requests_per_second = 20;
  // A request joins spooled sample entries up to this many bytes as spooled (compressed), and
  // up to max_request_inflated_bytes once inflated (at least one entry): receivers bound what
  // a request inflates to (VictoriaMetrics -maxInsertRequestSize, 32 MB by default; this
  // project's hub, 32 MiB).
  size_t max_request_bytes = size_t{4} << 20;
  size_t max_request_inflated_bytes = size_t{16} << 20;
  std::chrono::seconds timeout{10};
};

class HubPusher {
 public:
  static constexpr char kDestination[] = "hub";

  // Opens the spools (an error names the file). REQUIRES: options.url and spool_dir set.
  static Result<std::unique_ptr<HubPusher>> Open(HubPushOptions options);
  ~HubPusher();

  // Buffers one tick's series (labels as stored) / one record; they reach the spool within
  // `interval`.
  void AddSeries(const std::vector<store::Head::Input>& inputs);
  void AddRecord(std::string line);
  // A relaying hub's (--remote-write with --read-from, server/remote_write_handler.h) received
  // request, as received (snappy-compressed, validated), into the samples spool now: when it
  // returns OK the request is on disk (per the spool's sync), and the hub may answer 204.
  Status SpoolSamples(std::string_view snappy_request, uint64_t samples);
  // Bytes the samples spool holds (unsent, bar the part of a segment already sent).
  uint64_t samples_spool_bytes() const;
  // Moves what is buffered into the spools now (the sender does it each interval; Stop too).
  Status Flush();

  void Start();
  void Stop();  // flushes the buffers to the spools; idempotent

  struct Counters {
    uint64_t requests_sent = 0, requests_failed = 0;
    uint64_t entries_sent = 0, entries_dropped = 0;  // dropped: refused with a 4xx that says so
    uint64_t samples_spooled = 0, records_spooled = 0;
    uint64_t backlog_entries = 0;  // both spools, not yet sent
    uint64_t spool_bytes = 0;      // both spools, on disk
    int64_t last_success_ms = 0;
    bool auth_refused = false;  // the hub answers 401/403 (auth_error() says why)
  };
  Counters counters() const;
  // Why the hub refuses this agent's token (401/403), "" while it does not.
  std::string auth_error() const;
  const HubPushOptions& options() const { return options_; }

  // One pass of the sender (tests): sends what the rate allows; returns when nothing is left or
  // the hub did not take a request.
  void SendPending();

 private:
  explicit HubPusher(HubPushOptions options);  // in the .cc: httplib::Client is incomplete here
  std::string base_url_;                       // scheme://host:port
  std::string write_path_ = "/api/v1/write";
  enum class Outcome { kSent, kRetryLater, kDropped };
  Outcome Post(const std::string& path, const std::string& body, const std::string& type,
               const std::vector<std::pair<std::string, std::string>>& headers);
  bool SendSamples();  // one request; false when nothing was sent
  bool SendRecords();
  void Run();

  // The sender thread's connection, kept alive between requests (an https hub would otherwise
  // cost a TLS handshake every second). Made at the first request.
  httplib::Client& Client();
  std::unique_ptr<httplib::Client> client_;

  const HubPushOptions options_;
  std::unique_ptr<Spool> samples_, records_;
  // Samples entries read from the spool and not yet sent (the sender thread's alone).
  std::vector<SpoolEntry> read_ahead_;
  std::mutex buf_mu_;
  std::string series_buf_;  // encoded WriteRequest bytes (concatenable)
  std::string records_buf_;
  uint64_t series_in_buf_ = 0, records_in_buf_ = 0;

  mutable std::mutex mu_;  // counters, auth_error_, wait_until_
  Counters counters_;
  std::string auth_error_;
  std::chrono::steady_clock::time_point wait_until_{};
  int failures_in_row_ = 0;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace gpuwatch::server
