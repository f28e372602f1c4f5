#include "server/remote_write_handler.h"

#include <algorithm>

#include "common/log.h"
#include "common/strings.h"

namespace gpuwatch::server {

HttpReply RemoteWriteGate::Handle(store::Store* store, std::string_view body,
                                  std::string_view content_encoding, const std::string& sender,
                                  const StoredFn& on_stored) {
  if (!content_encoding.empty() && ToLower(content_encoding) != "snappy")
    return {400, "remote-write: Content-Encoding must be snappy, not '" +
                     std::string(content_encoding) + "'\n"};
  // At most max_concurrent requests are decoded and stored at once: their decoded forms are
  // what bounds memory (the store serializes the appends themselves).
  std::unique_lock<std::mutex> slots(slots_mu_);
  slots_cv_.wait(slots, [&] { return running_ < options_.max_concurrent; });
  ++running_;
  slots.unlock();
  struct Release {
    RemoteWriteGate* g;
    ~Release() {
      {
        std::lock_guard<std::mutex> l(g->slots_mu_);
        --g->running_;
      }
      g->slots_cv_.notify_one();
    }
  } release{this};
  const bool by_digest = !on_stored;
  std::shared_ptr<Known> known;
  if (by_digest) {
    std::lock_guard<std::mutex> lock(known_mu_);
    if (known_store_ != store) {
      known_.clear();
      known_entries_ = 0;
      known_store_ = store;
    }
    std::shared_ptr<Known>& k = known_[sender];
    if (!k) k = std::make_shared<Known>();
    known = k;
  }
  std::unique_lock<std::mutex> known_lock;
  if (known) known_lock = std::unique_lock<std::mutex>(known->mu);
  auto decoded = store::DecodeRemoteWrite(body, options_.decode, known ? &known->table : nullptr);
  if (known_lock) known_lock.unlock();
  if (!decoded.ok()) {
    if (decoded.status().code() == StatusCode::kResourceExhausted) {
      refused_too_large_.fetch_add(1, std::memory_order_relaxed);
      return {413, decoded.status().message() + "\n"};
    }
    return {400, decoded.status().message() + "\n"};
  }
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

RemoteWriteGate::Counts RemoteWriteGate::counts() const {
  return {series_created_.load(), refused_series_limit_.load(), refused_out_of_bounds_.load(),
          refused_too_large_.load()};
}

HttpReply HandleRemoteWrite(store::Store* store, std::string_view body,
                            std::string_view content_encoding) {
  RemoteWriteGate gate;
  return gate.Handle(store, body, content_encoding, "");
}

}  // namespace gpuwatch::server
