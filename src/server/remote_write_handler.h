// POST /api/v1/write: the Prometheus remote-write 1.0 receiver, transport-agnostic (the HTTP
// layer passes the body and headers in and sends the reply out).
//
// Replies as Prometheus's own receiver does: 204 when everything was stored; 400 with the
// reason for a body that does not decode or samples that were rejected (out of order, out of
// bounds, bad labels, over a series limit — the rest of the request is stored; senders do not
// retry a 400); 413 for a body that would inflate past the limit; 500 when the store could not
// write (disk full: senders retry).
//
// Limits (docs/limits.md): the decoded request is bounded before it is inflated or allocated
// (RemoteWriteLimits), and new series are bounded per sender and for all remote writers
// together, so junk cardinality can neither exhaust memory nor push the real history out
// through the disk budget (issue 17, D2/D3/D6). Existing series are never refused.
// Thread-safe: at most max_concurrent requests are decoded and stored at once (the store
// serializes the appends themselves), so concurrent large requests cannot add up their decoded
// forms in memory beyond that.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/remote_write.h"
#include "store/store.h"

namespace gpuwatch::server {

struct HttpReply {
  int status = 200;
  std::string body;
  int retry_after_s = 0;  // sent as Retry-After when > 0
};

struct RemoteWriteOptions {
  // Prometheus sends at most 2,000 samples a request by default (queue_config
  // max_samples_per_send), vmagent 10,000 rows (and VictoriaMetrics takes 32 MB requests):
  // these leave a wide margin, and keep one request's decoded form under ~40 MiB. A body that
  // says it inflates past 32 MiB is refused before anything is inflated.
  store::RemoteWriteLimits decode{.max_uncompressed_bytes = 32u << 20,
                                  .max_series = 100'000,
                                  .max_samples = 1'000'000,
                                  .max_labels = 500'000};
  uint64_t max_series_per_sender = 200'000;
  // Series in the store's head, all senders and the agent's own together: new series from
  // remote-write are refused beyond it. Counted from the head, so a restart does not reset it.
  uint64_t max_series = 1'000'000;
  // Requests decoded and stored at once (each holds its decoded form: ~40 MiB at most); the
  // store serializes the appends themselves; one sender's requests decode one at a time (its
  // digest table's lock). Two: with the generator's requests rendered ahead (run 5 of
  // bench/fleet/RESULTS.md) two took 871 k samples/s at 700 nodes against one's 622 k on the
  // 2-core machine. (Run 2 found two worse while decoding was mostly malloc on gpuwatch's one
  // malloc arena, cli/main.cc; a request now allocates a few vectors, not one per series.)
  size_t max_concurrent = 2;
  // A relaying hub (Relay) refuses samples this far ahead of its clock, as the embedded store
  // does (store::StoreOptions::max_future_ms).
  int64_t max_future_ms = 3600 * 1000;
};

// Counts the series each sender created, and what is refused.
class RemoteWriteGate {
 public:
  explicit RemoteWriteGate(RemoteWriteOptions options = {}) : options_(options) {}
  // `on_stored`, when set, gets the request's series once all of it was stored (204): a hub
  // forwards them to its --remote-write destination.
  using StoredFn = std::function<void(const std::vector<store::Head::Input>&)>;
  HttpReply Handle(store::Store* store, std::string_view body, std::string_view content_encoding,
                   const std::string& sender, const StoredFn& on_stored = nullptr);

  // A relaying hub (`--remote-write` with `--read-from`: its queries read the cluster its
  // series go to) keeps no series of its own. A request is decoded and checked as Handle
  // checks it: labels, timestamps (the store's bounds, at most max_future_ms past `now_ms`),
  // and the series bounds, per sender and in all (series counted by digest as each sender was
  // seen sending them since the hub started). What passes goes to `spool` as received,
  // compressed, or re-encoded when part of it was refused; `spool` returns once it is on disk
  // (the forwarder's spool), and only then is the answer 204 (a failure is a 500, which
  // senders retry). Retries and resends are passed on as they come: the destination keeps one
  // sample a series and timestamp (VictoriaMetrics with -dedup.minScrapeInterval, which
  // docs/deploy.md requires; Prometheus and Mimir take an identical sample again as a no-op).
  using SpoolFn = std::function<Status(std::string_view snappy_request, uint64_t samples)>;
  // The answer (429, Retry-After) while the forward spool holds `held_bytes`, more than half
  // its bound, that the destination `url` has not yet taken: agents keep their data in their
  // own spools meanwhile, and the forward spool is never filled to its bound, where it would
  // drop its oldest entries. Counted.
  HttpReply RefuseForwardBacklog(uint64_t held_bytes, const std::string& url);
  HttpReply Relay(std::string_view body, std::string_view content_encoding,
                  const std::string& sender, int64_t now_ms, const SpoolFn& spool);

  const RemoteWriteOptions& options() const { return options_; }
  struct Counts {
    uint64_t series_created = 0;
    uint64_t samples_refused_series_limit = 0;
    uint64_t samples_refused_out_of_bounds = 0;
    uint64_t requests_refused_too_large = 0;
    uint64_t requests_refused_forward_backlog = 0;
  };
  // Lock-free: /metrics must not wait for a request being stored.
  Counts counts() const;

 private:
  // Holds one of max_concurrent places while a request is decoded and stored or relayed.
  class Slot {
   public:
    explicit Slot(RemoteWriteGate* g);
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    RemoteWriteGate* g_;
  };
  struct Known;
  // The sender's digest table, made on first use; all tables are forgotten when `store`
  // differs from the last caller's (a relaying hub passes null).
  std::shared_ptr<Known> KnownFor(const std::string& sender, const store::Store* store);
  // 413 for a request over the decode limits (counted), else 400, with the decoder's reason.
  HttpReply DecodeRefused(const Status& st);

  RemoteWriteOptions options_;
  std::mutex slots_mu_;
  std::condition_variable slots_cv_;
  size_t running_ = 0;  // requests being decoded or stored (guarded by slots_mu_)
  std::mutex mu_;       // guards created_by_sender_
  std::map<std::string, uint64_t> created_by_sender_;
  // Each sender's series by the digest of their label bytes (store/remote_write.h): what a
  // sender repeats is stored by ref, without decoding, sorting or looking up its labels. At
  // most max_series entries in all (a full table only stops learning); forgotten when the
  // store changes. Not with a forwarder, which needs the labels.
  // A sender's table has a lock of its own, so that requests of different senders decode at
  // once (max_concurrent); shared, so that a table forgotten meanwhile outlives its users.
  struct Known {
    std::mutex mu;
    store::DigestTable table;  // guarded by mu
  };
  std::mutex known_mu_;  // guards the two below
  const store::Store* known_store_ = nullptr;
  std::map<std::string, std::shared_ptr<Known>> known_;
  std::atomic<uint64_t> known_entries_{0};
  std::atomic<uint64_t> series_created_{0}, refused_series_limit_{0}, refused_out_of_bounds_{0},
      refused_too_large_{0}, refused_forward_backlog_{0};
};

// One request with default options and no per-sender accounting (tests, tools).
HttpReply HandleRemoteWrite(store::Store* store, std::string_view body,
                            std::string_view content_encoding);

}  // namespace gpuwatch::server
