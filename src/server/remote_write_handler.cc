#include "server/remote_write_handler.h"

#include <algorithm>

#include "common/log.h"
#include "common/strings.h"

namespace gpuwatch::server {

namespace {

std::optional<HttpReply> RefuseEncoding(std::string_view content_encoding) {
  if (!content_encoding.empty() && ToLower(content_encoding) != "snappy")
    return HttpReply{400, "remote-write: Content-Encoding must be snappy, not '" +
                              std::string(content_encoding) + "'\n"};
  return std::nullopt;
}

}  // namespace

HttpReply RemoteWriteGate::DecodeRefused(const Status& st) {
  if (st.code() == StatusCode::kResourceExhausted) {
    refused_too_large_.fetch_add(1, std::memory_order_relaxed);
    return {413, st.message() + "\n"};
  }
  return {400, st.message() + "\n"};
}

RemoteWriteGate::Slot::Slot(RemoteWriteGate* g) : g_(g) {
  // At most max_concurrent requests are decoded and stored at once: their decoded forms are
  // what bounds memory (the store serializes the appends themselves).
  std::unique_lock<std::mutex> slots(g_->slots_mu_);
  g_->slots_cv_.wait(slots, [&] { return g_->running_ < g_->options_.max_concurrent; });
  ++g_->running_;
}

RemoteWriteGate::Slot::~Slot() {
  {
    std::lock_guard<std::mutex> l(g_->slots_mu_);
    --g_->running_;
  }
  g_->slots_cv_.notify_one();
}

std::shared_ptr<RemoteWriteGate::Known> RemoteWriteGate::KnownFor(const std::string& sender,
                                                                  const store::Store* store) {
  std::lock_guard<std::mutex> lock(known_mu_);
  if (known_store_ != store) {
    known_.clear();
    known_entries_ = 0;
    known_store_ = store;
  }
  std::shared_ptr<Known>& k = known_[sender];
  if (!k) k = std::make_shared<Known>();
  return k;
}

HttpReply RemoteWriteGate::Handle(store::Store* store, std::string_view body,
                                  std::string_view content_encoding, const std::string& sender,
                                  const StoredFn& on_stored) {
  if (auto refused = RefuseEncoding(content_encoding)) return *refused;
  const Slot slot(this);
  const bool by_digest = !on_stored;
  std::shared_ptr<Known> known = by_digest ? KnownFor(sender, store) : nullptr;
  std::unique_lock<std::mutex> known_lock;
  if (known) known_lock = std::unique_lock<std::mutex>(known->mu);
  auto decoded = store::DecodeRemoteWrite(body, options_.decode, known ? &known->table : nullptr);
  if (known_lock) known_lock.unlock();
  if (!decoded.ok()) return DecodeRefused(decoded.status());
  std::vector<store::Head::Input> batch;
  batch.reserve(decoded->size());
  // The series not known yet, by their place in the batch: their refs are learnt after.
  std::vector<std::pair<size_t, store::LabelDigest>> learn;
  for (auto& s : *decoded) {
    store::Head::Input in;
    if (s.known) {
      in.ref = *s.known;
    } else {
      in.labels = std::move(s.labels);
      if (by_digest) learn.emplace_back(batch.size(), s.digest);
    }
    in.samples = std::move(s.samples);
    batch.push_back(std::move(in));
  }
  decoded->clear();

  store::AppendLimits limits;
  {
    // The global limit counts every series in the store's head, so a restart (which replays
    // them) does not reset it; the agent's own series count too (a few thousand). Who created
    // which series is not kept across a restart: the per-sender shares start again. Two
    // requests of one sender stored at once may both use what is left of its share: the bound
    // holds to within one request.
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t mine = created_by_sender_[sender];
    const uint64_t head_series = store->head_series();
    limits.max_new_series =
        std::min(options_.max_series_per_sender - std::min(mine, options_.max_series_per_sender),
                 options_.max_series - std::min(head_series, options_.max_series));
  }
  limits.want_refs = !learn.empty();
  auto r = store->Append(batch, limits);
  if (!r.ok()) {
    GW_LOG_ERROR("remote-write: store write failed: {}", r.status().ToString());
    return {500, "store write failed: " + r.status().message() + "\n"};
  }
  if (!learn.empty()) {
    // Into the table the refs came from (one forgotten since, with its store, goes with its
    // last user); all tables together stop learning at max_series entries.
    std::lock_guard<std::mutex> lock(known->mu);
    for (const auto& [at, digest] : learn) {
      const uint32_t ref = r->refs[at];
      if (ref == store::kNoSeriesRef || known_entries_.load() >= options_.max_series) continue;
      if (known->table.Insert(digest, ref)) known_entries_.fetch_add(1);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    created_by_sender_[sender] += r->new_series;
  }
  series_created_.fetch_add(r->new_series, std::memory_order_relaxed);
  refused_series_limit_.fetch_add(r->series_limited, std::memory_order_relaxed);
  refused_out_of_bounds_.fetch_add(r->out_of_bounds, std::memory_order_relaxed);
  if (r->rejected() > 0) {
    std::string why = fmt::format("{} samples stored", r->accepted);
    if (r->out_of_order) why += fmt::format(", {} out of order", r->out_of_order);
    if (r->conflicts)
      why += fmt::format(", {} with another value for a timestamp already stored", r->conflicts);
    if (r->invalid) why += fmt::format(", {} with invalid labels or too far ahead", r->invalid);
    if (r->out_of_bounds)
      why += fmt::format(", {} with timestamps out of bounds", r->out_of_bounds);
    if (r->series_limited)
      why += fmt::format(", {} of new series over the series limit ({} per sender, {} in all)",
                         r->series_limited, options_.max_series_per_sender, options_.max_series);
    return {400, why + ": " + r->first_error + "\n"};
  }
  if (on_stored) on_stored(batch);
  return {204, ""};
}

HttpReply RemoteWriteGate::Relay(std::string_view body, std::string_view content_encoding,
                                 const std::string& sender, int64_t now_ms, const SpoolFn& spool) {
  if (auto refused = RefuseEncoding(content_encoding)) return *refused;
  const Slot slot(this);
  std::shared_ptr<Known> known = KnownFor(sender, nullptr);
  // One request of a sender at a time, through to the spool: its table learns a request's
  // new series only once the request is on disk.
  std::lock_guard<std::mutex> lock(known->mu);
  auto decoded = store::DecodeRemoteWrite(body, options_.decode, &known->table);
  if (!decoded.ok()) return DecodeRefused(decoded.status());

  const int64_t latest_ms = now_ms + options_.max_future_ms;
  struct Refusals {
    uint64_t invalid = 0, out_of_bounds = 0, too_far_ahead = 0, series_limited = 0;
    std::string first_error;
    void Note(uint64_t* count, uint64_t n, const std::string& why) {
      if (n == 0) return;
      *count += n;
      if (first_error.empty()) first_error = why;
    }
    uint64_t total() const { return invalid + out_of_bounds + too_far_ahead + series_limited; }
  } refused;
  auto sample_ok = [&](const store::Sample& x) {
    return x.t_ms >= store::kMinSampleTimeMs && x.t_ms <= store::kMaxSampleTimeMs &&
           x.t_ms <= latest_ms;
  };
  // Series this request sends for the first time, by digest: counted against the bounds once
  // however often the request repeats them, and learnt once it is spooled.
  store::DigestTable fresh;
  std::vector<store::LabelDigest> learn;
  std::vector<uint8_t> series_ok(decoded->size(), 1);
  uint64_t accepted = 0;
  for (size_t i = 0; i < decoded->size(); ++i) {
    store::RemoteSeries& s = (*decoded)[i];
    if (!s.known && !fresh.Find(s.digest)) {
      auto made = store::MakeLabels(std::move(s.labels));
      if (!made.ok()) {
        series_ok[i] = 0;
        refused.Note(&refused.invalid, s.samples.size(), made.status().message());
        continue;
      }
      const uint64_t mine = known->table.size() + learn.size();
      if (mine >= options_.max_series_per_sender ||
          known_entries_.load() + learn.size() >= options_.max_series) {
        series_ok[i] = 0;
        refused.Note(&refused.series_limited, s.samples.size(),
                     "series " + store::LabelsToString(*made) + " is over the series limit");
        continue;
      }
      // (A series refused here is checked again where the request repeats it, and refused
      // again: `learn` only grows.)
      fresh.Insert(s.digest, 0);
      learn.push_back(s.digest);
    }
    for (const store::Sample& x : s.samples) {
      if (sample_ok(x)) {
        ++accepted;
      } else if (x.t_ms > latest_ms && x.t_ms <= store::kMaxSampleTimeMs) {
        refused.Note(
            &refused.too_far_ahead, 1,
            fmt::format("sample at t={} ms is more than {} s ahead of this machine's clock", x.t_ms,
                        options_.max_future_ms / 1000));
      } else {
        refused.Note(
            &refused.out_of_bounds, 1,
            fmt::format("sample at t={} ms is outside the timestamps the store takes", x.t_ms));
      }
    }
  }
  if (accepted > 0) {
    Status st;
    if (refused.total() == 0) {
      st = spool(body, accepted);
    } else {
      // Part of it was refused: the rest, re-encoded. Decoded again whole (known series were
      // not), in the same order, so series_ok still lines up.
      auto whole = store::DecodeRemoteWrite(body, options_.decode);
      if (!whole.ok()) return DecodeRefused(whole.status());
      std::vector<store::RemoteSeries> kept;
      for (size_t i = 0; i < whole->size(); ++i) {
        if (!series_ok[i]) continue;
        store::RemoteSeries& s = (*whole)[i];
        store::RemoteSeries k;
        k.labels = std::move(s.labels);
        for (const store::Sample& x : s.samples)
          if (sample_ok(x)) k.samples.push_back(x);
        if (!k.samples.empty()) kept.push_back(std::move(k));
      }
      st = spool(store::EncodeRemoteWrite(kept), accepted);
    }
    if (!st.ok()) {
      GW_LOG_ERROR("remote-write: relay spool write failed: {}", st.ToString());
      return {500, "relay spool write failed: " + st.message() + "\n"};
    }
    // A series whose samples were all refused (out of bounds) is learnt too: it is valid and
    // within the bounds, and counted against them.
    uint64_t created = 0;
    for (const auto& d : learn)
      if (known->table.Insert(d, 0)) ++created;
    known_entries_.fetch_add(created);
    series_created_.fetch_add(created, std::memory_order_relaxed);
  }
  refused_series_limit_.fetch_add(refused.series_limited, std::memory_order_relaxed);
  refused_out_of_bounds_.fetch_add(refused.out_of_bounds, std::memory_order_relaxed);
  if (refused.total() == 0) return {204, ""};
  std::string why = fmt::format("{} samples taken", accepted);
  if (refused.invalid) why += fmt::format(", {} with invalid labels", refused.invalid);
  if (refused.too_far_ahead) why += fmt::format(", {} too far ahead", refused.too_far_ahead);
  if (refused.out_of_bounds)
    why += fmt::format(", {} with timestamps out of bounds", refused.out_of_bounds);
  if (refused.series_limited)
    why += fmt::format(", {} of new series over the series limit ({} per sender, {} in all)",
                       refused.series_limited, options_.max_series_per_sender, options_.max_series);
  return {400, why + ": " + refused.first_error + "\n"};
}

HttpReply RemoteWriteGate::RefuseForwardBacklog(uint64_t held_bytes, const std::string& url) {
  refused_forward_backlog_.fetch_add(1, std::memory_order_relaxed);
  return {429,
          fmt::format("the hub's forward spool holds {} MiB that {} has not yet taken; retry "
                      "after the Retry-After seconds\n",
                      held_bytes >> 20, url),
          10};
}

RemoteWriteGate::Counts RemoteWriteGate::counts() const {
  return {series_created_.load(), refused_series_limit_.load(), refused_out_of_bounds_.load(),
          refused_too_large_.load(), refused_forward_backlog_.load()};
}

HttpReply HandleRemoteWrite(store::Store* store, std::string_view body,
                            std::string_view content_encoding) {
  RemoteWriteGate gate;
  return gate.Handle(store, body, content_encoding, "");
}

}  // namespace gpuwatch::server
