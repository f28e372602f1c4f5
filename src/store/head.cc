#include "store/head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>

#include "common/log.h"
#include "store/internal/coding.h"

namespace gpuwatch::store {
namespace {

// Calls apply(i) for i in [0, n), where sample i goes to series_at(i) (a MemSeries*). A batch
// is a tick of thousands of series, each sample to its own, and applying them one by one waited
// on a cache miss per series (perf on a replay, bench/fleet/RESULTS.md "Stop and restart": 41 %
// in the first touch of the series' lock). Fetching a series' lines 16 samples ahead, and its
// buffers 8 ahead (where they are is read from those lines, in cache by then), overlaps the
// misses: a replay ~1.5 times as fast.
template <typename SeriesAt, typename Apply>
void ForEachPrefetched(size_t n, SeriesAt series_at, Apply apply) {
  constexpr size_t kSelfAhead = 16, kBuffersAhead = 8;
  for (size_t i = 0; i < n; ++i) {
    if (i + kSelfAhead < n) series_at(i + kSelfAhead)->PrefetchSelf();
    if (i + kBuffersAhead < n) series_at(i + kBuffersAhead)->PrefetchBuffers();
    apply(i);
  }
}

// A batch's map from its series to what it keeps of each: open addressing in one array sized
// for the batch (at most half full: a batch names at most batch.size() series). A node map
// cost a malloc a series, and a hub's batches carry thousands.
template <typename T>
class BatchMap {
 public:
  explicit BatchMap(size_t n) {
    while ((size_t{1} << bits_) < 2 * n) ++bits_;
    slots_.resize(size_t{1} << bits_);
  }
  // The value for `key`, and whether this call added it.
  std::pair<T*, bool> TryEmplace(const void* key) {
    const size_t mask = slots_.size() - 1;
    const uint64_t k = reinterpret_cast<uintptr_t>(key);
    for (size_t i = (k * 0x9e3779b97f4a7c15ULL) >> (64 - bits_);; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.key == key) return {&s.value, false};
      if (s.key == nullptr) {
        s.key = key;
        return {&s.value, true};
      }
    }
  }

 private:
  struct Slot {
    const void* key = nullptr;
    T value{};
  };
  int bits_ = 4;
  std::vector<Slot> slots_;
};

using internal::Cursor;
using internal::PutDouble;
using internal::PutVarint;
using internal::UnZigZag;
using internal::ZigZag;

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

// The samples of a kCompactBatchRecord. Each is its series' logged ref; its timestamp as the
// difference from the record's previous sample (a batch is mostly one tick of every series:
// one byte); and its value as a zigzag varint shifted left once where it is an integer a double
// holds exactly (clocks, temperatures, utilization, bytes, counters: most GPU fields), else the
// tag 1 and the double's 8 bytes (every bit kept: NaN payloads such as Prometheus' stale
// marker, -0, infinities). A kBatchRecord spent ~17 bytes a sample, 8 of them the value's and
// ~6 the absolute timestamp's; its hub's WAL held two hours of the fleet at that size.
struct WalSampleCoder {
  int64_t prev_t_ms = 0;

  void Put(std::string* out, uint64_t ref, int64_t t_ms, double v) {
    PutVarint(out, ref);
    // Timestamps are within [kMinSampleTimeMs, kMaxSampleTimeMs] (checked before), so the
    // difference cannot overflow.
    PutVarint(out, ZigZag(t_ms - prev_t_ms));
    prev_t_ms = t_ms;
    constexpr double kExact = 9'007'199'254'740'992.0;  // 2^53: every integer up to it exact
    if (v == std::trunc(v) && std::fabs(v) <= kExact && !(v == 0 && std::signbit(v))) {
      PutVarint(out, ZigZag(static_cast<int64_t>(v)) << 1);
    } else {
      PutVarint(out, 1);
      PutDouble(out, v);
    }
  }
  // A malformed sample clears c->ok.
  void Get(Cursor* c, uint64_t* ref, int64_t* t_ms, double* v) {
    *ref = c->Varint();
    // Unsigned: a damaged difference wraps instead of overflowing; the bounds check catches it.
    *t_ms = static_cast<int64_t>(static_cast<uint64_t>(prev_t_ms) +
                                 static_cast<uint64_t>(UnZigZag(c->Varint())));
    prev_t_ms = *t_ms;
    const uint64_t code = c->Varint();
    if (code == 1) {
      *v = c->Double();
    } else if (code & 1) {
      c->ok = false;
    } else {
      *v = static_cast<double>(UnZigZag(code >> 1));
    }
  }
};

bool EarlierSample(const Sample& a, const Sample& b) { return a.t_ms < b.t_ms; }

// Decodes the samples of `chunk` within [lo, hi] into `out`.
void DecodeRange(std::string_view chunk, int64_t lo, int64_t hi, std::vector<Sample>* out) {
  auto dec = ChunkDecoder::Open(chunk);
  if (!dec.ok()) return;
  int64_t t;
  double v;
  while (dec->Next(&t, &v)) {
    if (t > hi) break;
    if (t >= lo) out->push_back({t, v});
  }
}

// Appends the samples of a sorted vector within [lo, hi].
void CopyRange(const std::vector<Sample>& from, int64_t lo, int64_t hi, std::vector<Sample>* out) {
  auto it = std::lower_bound(from.begin(), from.end(), Sample{lo, 0}, EarlierSample);
  for (; it != from.end() && it->t_ms <= hi; ++it) out->push_back(*it);
}

// Sorts by time and keeps the first sample of each timestamp.
void SortUniqueSamples(std::vector<Sample>* s) {
  if (!std::is_sorted(s->begin(), s->end(), EarlierSample))
    std::stable_sort(s->begin(), s->end(), EarlierSample);
  s->erase(std::unique(s->begin(), s->end(),
                       [](const Sample& a, const Sample& b) { return a.t_ms == b.t_ms; }),
           s->end());
}

}  // namespace

Result<std::unique_ptr<Head>> Head::Open(const std::string& dir, HeadOptions options,
                                         WalReplayStats* replay_stats) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir + ": " + ec.message());
  std::unique_ptr<Head> head(new Head(options));
  auto wal = Wal::Open(
      dir + "/wal", options.wal,
      [&](uint8_t type, std::string_view payload) { head->Replay(type, payload); }, replay_stats);
  if (!wal.ok()) return wal.status();
  head->wal_ = std::move(wal).value();
  head->dir_ = dir;
  head->FinishReplay();
  if (head->replay_bad_records_ > 0)
    GW_LOG_WARN("store: {} WAL records with a valid CRC could not be decoded and were skipped",
                head->replay_bad_records_);
  if (head->replay_out_of_bounds_ > 0)
    GW_LOG_WARN("store: {} WAL samples with timestamps before 1970 or after 2262 were dropped",
                head->replay_out_of_bounds_);
  return head;
}

Result<std::unique_ptr<Head>> Head::OpenReadOnly(const std::string& dir, HeadOptions options,
                                                 uint64_t first_segment,
                                                 WalReplayStats* replay_stats) {
  std::unique_ptr<Head> head(new Head(options));
  head->dir_ = dir;
  std::error_code ec;
  if (std::filesystem::exists(dir + "/wal", ec)) {
    auto st = Wal::Check(
        dir + "/wal", [&](uint8_t type, std::string_view payload) { head->Replay(type, payload); },
        first_segment);
    if (!st.ok()) return st.status();
    if (replay_stats) *replay_stats = *st;
  }
  head->FinishReplay();
  return head;
}

void Head::FinishReplay() {
  // Refs are this process's: every series is logged again (with its current ref) before its
  // first sample in this process, since the numbering of an earlier process may differ.
  for (auto& s : series_) s->logged = false;
  replay_refs_.clear();
  replay_refs_.shrink_to_fit();
  replay_batch_.clear();
  replay_batch_.shrink_to_fit();
}

Head::~Head() = default;

void Head::NoteUnflushed(int64_t min_t_ms, int64_t max_t_ms) {
  std::lock_guard<std::mutex> lock(range_mu_);
  if (!has_unflushed_) {
    has_unflushed_ = true;
    unflushed_min_t_ms_ = min_t_ms;
    unflushed_max_t_ms_ = max_t_ms;
    return;
  }
  unflushed_min_t_ms_ = std::min(unflushed_min_t_ms_, min_t_ms);
  unflushed_max_t_ms_ = std::max(unflushed_max_t_ms_, max_t_ms);
}

bool Head::UnflushedRange(int64_t* min_t_ms, int64_t* max_t_ms) const {
  std::lock_guard<std::mutex> lock(range_mu_);
  *min_t_ms = unflushed_min_t_ms_;
  *max_t_ms = unflushed_max_t_ms_;
  return has_unflushed_;
}

uint64_t Head::wal_bytes() const {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/wal", ec))
    if (e.is_regular_file(ec)) n += e.file_size(ec);
  return n;
}

void Head::Seal(MemSeries& s) {
  SealedChunk c;
  c.min_t_ms = s.open.first_t_ms();
  c.max_t_ms = s.open.last_t_ms();
  c.num_samples = static_cast<uint32_t>(s.open.num_samples());
  c.bytes = std::make_shared<const std::string>(s.open.Finish());
  s.sealed.push_back(std::move(c));
}

Result<HeadFlush> Head::CutForFlush() {
  if (!wal_) return Status::Unavailable("the store is open read-only");
  HeadFlush flush;
  std::lock_guard<std::mutex> lock(append_mu_);
  auto first_kept = wal_->Rotate();
  if (!first_kept.ok()) return first_kept.status();
  flush.wal_first_kept = *first_kept;
  std::vector<MemSeries*> all;
  {
    std::lock_guard<std::mutex> sl(series_mu_);
    for (auto& s : series_) all.push_back(s.get());
  }
  for (SeriesRef ref = 0; ref < all.size(); ++ref) {
    MemSeries& s = *all[ref];
    // The new segment must define every series it refers to: the old ones will be deleted.
    s.logged = false;
    std::lock_guard<std::mutex> sl(s.mu);
    if (!s.open.empty()) Seal(s);
    if (s.sealed.empty() && s.ooo.empty()) continue;
    HeadFlushSeries fs;
    fs.series_ref = ref;
    fs.labels = index_.LabelsOf(ref);
    for (const auto& c : s.sealed) {
      fs.chunks.push_back({c.min_t_ms, c.max_t_ms, c.num_samples, c.bytes});
      flush.samples += c.num_samples;
    }
    fs.sealed_chunks = fs.chunks.size();
    // The out-of-order samples go to the block as chunks of their own (a block's chunks of one
    // series may overlap in time; readers merge by timestamp). A previous cut whose block was
    // never installed (a failed flush) is taken again.
    s.ooo_flushing.insert(s.ooo_flushing.end(), s.ooo.begin(), s.ooo.end());
    s.ooo.clear();
    SortUniqueSamples(&s.ooo_flushing);
    for (size_t i = 0; i < s.ooo_flushing.size(); i += options_.chunk_max_samples) {
      ChunkEncoder enc;
      const size_t n = std::min(options_.chunk_max_samples, s.ooo_flushing.size() - i);
      for (size_t k = i; k < i + n; ++k)
        enc.Append(s.ooo_flushing[k].t_ms, s.ooo_flushing[k].value).IgnoreError();  // sorted
      fs.chunks.push_back({enc.first_t_ms(), enc.last_t_ms(), static_cast<uint32_t>(n),
                           std::make_shared<const std::string>(enc.Finish())});
      flush.samples += n;
    }
    flush.series.push_back(std::move(fs));
  }
  std::lock_guard<std::mutex> rl(range_mu_);
  has_unflushed_ = false;
  return flush;
}

void Head::DropFlushed(const HeadFlush& flush) {
  for (const auto& fs : flush.series) {
    MemSeries* s;
    {
      std::lock_guard<std::mutex> lock(series_mu_);
      s = series_[fs.series_ref].get();
    }
    std::lock_guard<std::mutex> sl(s->mu);
    const size_t n = std::min(fs.sealed_chunks, s->sealed.size());
    for (size_t i = 0; i < n; ++i) s->samples -= s->sealed[i].num_samples;
    s->sealed.erase(s->sealed.begin(), s->sealed.begin() + static_cast<std::ptrdiff_t>(n));
    if (fs.chunks.size() > fs.sealed_chunks) {
      s->samples -= s->ooo_flushing.size();
      s->ooo_flushing.clear();
    }
  }
}

void Head::SeedLast(const Labels& labels, int64_t t_ms, double value) {
  std::lock_guard<std::mutex> lock(append_mu_);
  MemSeries& s = SeriesFor(index_.GetOrCreate(labels));
  std::lock_guard<std::mutex> sl(s.mu);
  if (s.has_last && s.last_t_ms >= t_ms) return;
  s.has_last = true;
  s.last_t_ms = t_ms;
  s.last_value = value;
  s.recent[s.recent_next] = {t_ms, value};
  s.recent_next = (s.recent_next + 1) % MemSeries::kRecent;
}

Head::MemSeries& Head::SeriesFor(SeriesRef ref) {
  // series_ changes only under append_mu_, which the caller holds, so reading it here needs no
  // series_mu_ (a lock a series on every append); growing it takes series_mu_ against the
  // readers that do not hold append_mu_.
  if (ref < series_.size()) return *series_[ref];
  std::lock_guard<std::mutex> lock(series_mu_);
  while (series_.size() <= ref)
    series_.push_back(std::make_unique<MemSeries>(options_.block_shift));
  return *series_[ref];
}

std::vector<Sample> Head::MemSeries::Held(int64_t lo, int64_t hi) const {
  std::vector<Sample> out;
  for (const auto& c : sealed)
    if (c.max_t_ms >= lo && c.min_t_ms <= hi) DecodeRange(*c.bytes, lo, hi, &out);
  if (!open.empty() && open.last_t_ms() >= lo && open.first_t_ms() <= hi)
    DecodeRange(open.Snapshot(), lo, hi, &out);
  if (!ooo.empty() || !ooo_flushing.empty()) {
    CopyRange(ooo, lo, hi, &out);
    CopyRange(ooo_flushing, lo, hi, &out);
    SortUniqueSamples(&out);
  }
  return out;
}

void Head::ApplyOutOfOrder(MemSeries& s, int64_t t_ms, double v) {
  auto it = std::lower_bound(s.ooo.begin(), s.ooo.end(), Sample{t_ms, 0}, EarlierSample);
  if (it != s.ooo.end() && it->t_ms == t_ms) return;
  s.ooo.insert(it, Sample{t_ms, v});
  ++s.samples;
}

void Head::MemSeries::PrefetchSelf() const {
  // The lines an apply reads first: the lock, the open chunk's fields, the newest sample.
  __builtin_prefetch(&mu, 1);
  __builtin_prefetch(&open, 1);
  __builtin_prefetch(&has_last, 1);
}

void Head::MemSeries::PrefetchBuffers() const {
  open.PrefetchAppend();
  __builtin_prefetch(&recent[recent_next], 1);
}

bool Head::MemSeries::IsRecentDuplicate(int64_t t_ms, double v) const {
  for (const auto& x : recent)
    if (x.t_ms == t_ms && SameBits(x.value, v) && samples > 0) return true;
  return false;
}

void Head::ApplySample(MemSeries& s, int64_t t_ms, double v) {
  if (!s.open.empty() && (t_ms - s.open.first_t_ms() >= options_.chunk_span_ms ||
                          s.open.num_samples() >= options_.chunk_max_samples))
    Seal(s);
  // Cannot fail: the caller checked t_ms > last and the chunk is below its size limit.
  s.open.Append(t_ms, v).IgnoreError();
  s.has_last = true;
  s.last_t_ms = t_ms;
  s.last_value = v;
  s.recent[s.recent_next] = {t_ms, v};
  s.recent_next = (s.recent_next + 1) % MemSeries::kRecent;
  ++s.samples;
}

void Head::Replay(uint8_t type, std::string_view payload) {
  if (type != kBatchRecord && type != kCompactBatchRecord) {
    ++replay_bad_records_;
    return;
  }
  Cursor c{payload};
  const uint64_t new_series = c.Varint();
  for (uint64_t i = 0; c.ok && i < new_series; ++i) {
    const uint64_t logged_ref = c.Varint();
    const uint64_t nlabels = c.Varint();
    if (!c.ok || nlabels > kMaxLabels) break;
    std::vector<Label> labels(nlabels);
    for (auto& l : labels) {
      l.name = std::string(c.Bytes());
      l.value = std::string(c.Bytes());
    }
    auto made = MakeLabels(std::move(labels));
    if (!c.ok || !made.ok() || logged_ref > (1u << 30)) {
      c.ok = false;
      break;
    }
    const SeriesRef ref = index_.GetOrCreate(*made);
    if (replay_refs_.size() <= logged_ref) replay_refs_.resize(logged_ref + 1, ~SeriesRef{0});
    replay_refs_[logged_ref] = ref;
    SeriesFor(ref).logged = true;
  }
  const uint64_t n = c.Varint();
  // The record is decoded whole first (up to a damaged sample: those before it are applied, as
  // they were appended), then applied with its series fetched ahead (ForEachPrefetched).
  std::vector<ReplayedSample>& batch = replay_batch_;
  batch.clear();
  WalSampleCoder coder;
  for (uint64_t i = 0; c.ok && i < n; ++i) {
    uint64_t logged_ref = 0;
    int64_t t = 0;
    double v = 0;
    if (type == kCompactBatchRecord) {
      coder.Get(&c, &logged_ref, &t, &v);
    } else {
      logged_ref = c.Varint();
      t = UnZigZag(c.Varint());
      v = c.Double();
    }
    if (!c.ok || logged_ref >= replay_refs_.size() || replay_refs_[logged_ref] == ~SeriesRef{0}) {
      c.ok = false;
      break;
    }
    // A store written before timestamps were bounded may hold a sample near INT64_MIN, which
    // would stop every flush (issue 17, D1): such samples are dropped on replay.
    if (t < kMinSampleTimeMs || t > kMaxSampleTimeMs) {
      ++replay_out_of_bounds_;
      continue;
    }
    batch.push_back({&SeriesFor(replay_refs_[logged_ref]), t, v});
  }
  ForEachPrefetched(
      batch.size(), [&](size_t i) { return batch[i].series; },
      [&](size_t i) {
        MemSeries& s = *batch[i].series;
        const int64_t t = batch[i].t_ms;
        const double v = batch[i].value;
        std::lock_guard<std::mutex> lock(s.mu);
        if (!s.has_last || t > s.last_t_ms) {
          ApplySample(s, t, v);
          NoteUnflushed(t, t);
        } else if (t < s.last_t_ms && s.Held(t, t).empty()) {
          // Only accepted samples are logged: an older one was taken out of order (the window
          // was checked then). One the head already holds is a segment replayed twice.
          ApplyOutOfOrder(s, t, v);
          NoteUnflushed(t, t);
        }
      });
  if (!c.ok) ++replay_bad_records_;
}

Result<AppendResult> Head::Append(const std::vector<Input>& batch, const AppendLimits& limits) {
  AppendResult result;
  // Label sets are checked and sorted before the lock: appends are serialized, and on a hub
  // taking many agents at once this work is theirs to do in parallel.
  std::vector<Result<Labels>> made;
  made.reserve(batch.size());
  for (const auto& in : batch)
    made.push_back(in.ref == kNoSeriesRef ? MakeLabels(in.labels) : Result<Labels>(Labels{}));
  std::lock_guard<std::mutex> lock(append_mu_);
  if (limits.want_refs) result.refs.assign(batch.size(), kNoSeriesRef);
  if (!wal_) return Status::Unavailable("the store is open read-only");
  struct Pending {
    MemSeries* series;
    int64_t t_ms;
    double value;
    bool out_of_order = false;
  };
  // Samples older than their series' newest, within the out-of-order window: judged after the
  // in-order ones are applied, against everything the head then holds.
  struct Candidate {
    MemSeries* series;
    SeriesRef ref;
    int64_t t_ms;
    double value;
    const Labels* labels;
  };
  std::vector<Candidate> candidates;
  std::deque<Labels> candidate_labels;  // stable addresses for Candidate::labels
  const int64_t window = options_.out_of_order_window_ms;
  // One WAL record's worth: split at half the record limit so a record never exceeds it (a
  // series definition or a sample is far smaller than the other half).
  constexpr size_t kSplitBytes = kMaxWalRecordBytes / 2;
  std::vector<Pending> pending;
  std::vector<MemSeries*> newly_logged;
  std::string series_part, samples_part;
  WalSampleCoder sample_coder;  // samples_part's
  uint64_t new_series = 0, n_samples = 0;
  // Refs created since the last record written: the ones a failed write takes back. Appends
  // are serialized by append_mu_, so they are the newest refs of the index.
  SeriesRef first_unlogged_ref = static_cast<SeriesRef>(index_.size());
  uint64_t created = 0;           // series this batch created in the index (the limit's count)
  uint64_t created_unlogged = 0;  // … of which not yet in a record written
  // Each series' newest sample as this batch goes on (the head's, then the batch's accepted
  // ones). A hash map: remote-write batches carry thousands of series.
  struct Newest {
    bool has = false;
    int64_t t_ms = 0;
    double value = 0;
  };
  BatchMap<Newest> newest(batch.size());

  auto write_record = [&]() -> Status {
    if (n_samples == 0 && new_series == 0) return Status::Ok();
    std::string record;
    PutVarint(&record, new_series);
    record += series_part;
    PutVarint(&record, n_samples);
    record += samples_part;
    if (Status st = wal_->Append(kCompactBatchRecord, record); !st.ok()) {
      // Nothing of this record is applied; its new series leave no trace in the index.
      index_.RemoveFrom(first_unlogged_ref);
      std::lock_guard<std::mutex> sl(series_mu_);
      if (series_.size() > first_unlogged_ref) series_.resize(first_unlogged_ref);
      return st;
    }
    for (MemSeries* m : newly_logged) m->logged = true;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    // Every write to a series' chunk is under append_mu_ (held), so its buffers' places are
    // read for the prefetch without its lock.
    ForEachPrefetched(
        pending.size(), [&](size_t i) { return pending[i].series; },
        [&](size_t i) {
          const Pending& p = pending[i];
          std::lock_guard<std::mutex> sl(p.series->mu);
          if (p.out_of_order)
            ApplyOutOfOrder(*p.series, p.t_ms, p.value);
          else
            ApplySample(*p.series, p.t_ms, p.value);
          lo = std::min(lo, p.t_ms);
          hi = std::max(hi, p.t_ms);
        });
    if (!pending.empty()) NoteUnflushed(lo, hi);
    result.accepted += n_samples;
    // Series created in the index, not series (re)defined in this WAL segment: a series is
    // logged again after every flush and restart, and is not new then.
    result.new_series += created_unlogged;
    created_unlogged = 0;
    pending.clear();
    newly_logged.clear();
    series_part.clear();
    samples_part.clear();
    sample_coder = {};
    new_series = n_samples = 0;
    first_unlogged_ref = static_cast<SeriesRef>(index_.size());
    return Status::Ok();
  };

  for (size_t bi = 0; bi < batch.size(); ++bi) {
    const Input& in = batch[bi];
    const Result<Labels>& made_labels = made[bi];
    if (!made_labels.ok()) {
      result.invalid += in.samples.size();
      if (result.first_error.empty()) result.first_error = made_labels.status().message();
      continue;
    }
    // An input by ref: its labels come from the index, only where they are written or named
    // (a series definition, an error, an out-of-order candidate).
    Labels by_ref;
    const Labels* labels = &*made_labels;
    if (in.ref != kNoSeriesRef) {
      if (in.ref >= index_.size()) {
        result.invalid += in.samples.size();
        if (result.first_error.empty())
          result.first_error = "series ref " + std::to_string(in.ref) + " is not this store's";
        continue;
      }
      labels = &by_ref;
    }
    auto need_labels = [&] {
      if (labels == &by_ref && by_ref.empty()) by_ref = index_.LabelsOf(in.ref);
    };
    bool is_new = false;
    SeriesRef ref;
    if (in.ref != kNoSeriesRef) {
      ref = in.ref;
    } else if (auto found = index_.Find(*labels)) {
      ref = *found;
    } else {
      if (created >= limits.max_new_series) {
        result.series_limited += in.samples.size();
        if (result.first_error.empty())
          result.first_error = "series limit reached: " + LabelsToString(*labels) +
                               " is a new series and this sender may create no more";
        continue;
      }
      ref = index_.GetOrCreate(*labels, &is_new);
      if (is_new) {
        ++created;
        ++created_unlogged;
      }
    }
    if (limits.want_refs) result.refs[bi] = ref;
    MemSeries& s = SeriesFor(ref);
    auto [last_p, first_in_batch] = newest.TryEmplace(&s);
    Newest& last = *last_p;
    // A series' newest sample is written only under append_mu_ (ApplySample, SeedLast), which
    // this holds: read without s.mu.
    if (first_in_batch) last = {s.has_last, s.last_t_ms, s.last_value};
    // Defined in the record the first time the batch names it: a later mention in the same
    // record finds it defined, and one after a record was written finds it logged. (A linear
    // search of newly_logged here made a 100,000-series batch quadratic.)
    if (first_in_batch && !s.logged) {
      need_labels();
      newly_logged.push_back(&s);
      ++new_series;
      PutVarint(&series_part, ref);
      PutVarint(&series_part, labels->size());
      for (const auto& l : *labels) {
        PutVarint(&series_part, l.name.size());
        series_part += l.name;
        PutVarint(&series_part, l.value.size());
        series_part += l.value;
      }
    }
    for (const auto& x : in.samples) {
      if (x.t_ms < kMinSampleTimeMs || x.t_ms > kMaxSampleTimeMs) {
        ++result.out_of_bounds;
        need_labels();
        if (result.first_error.empty())
          result.first_error = "sample timestamp " + std::to_string(x.t_ms) + " ms for " +
                               LabelsToString(*labels) +
                               " is out of bounds (1970-01-01 to 2262-04-11)";
        continue;
      }
      if (last.has && x.t_ms == last.t_ms && SameBits(x.value, last.value)) {
        ++result.duplicates;
        continue;
      }
      if (last.has && x.t_ms < last.t_ms) {
        std::lock_guard<std::mutex> sl(s.mu);
        if (s.IsRecentDuplicate(x.t_ms, x.value)) {
          ++result.duplicates;
          continue;
        }
      }
      if (last.has && x.t_ms <= last.t_ms && window > 0 && last.t_ms - x.t_ms <= window) {
        need_labels();
        if (candidates.empty() || candidates.back().series != &s)
          candidate_labels.push_back(*labels);
        candidates.push_back({&s, ref, x.t_ms, x.value, &candidate_labels.back()});
        continue;
      }
      if (last.has && x.t_ms <= last.t_ms) {
        ++result.out_of_order;
        need_labels();
        if (result.first_error.empty())
          result.first_error = "out of order sample for " + LabelsToString(*labels) +
                               ": t=" + std::to_string(x.t_ms) + " ms is not after " +
                               std::to_string(last.t_ms) + " ms";
        continue;
      }
      last = {true, x.t_ms, x.value};
      pending.push_back({&s, x.t_ms, x.value});
      sample_coder.Put(&samples_part, ref, x.t_ms, x.value);
      ++n_samples;
      if (series_part.size() + samples_part.size() >= kSplitBytes)
        GW_RETURN_IF_ERROR(write_record());
    }
    if (series_part.size() + samples_part.size() >= kSplitBytes) GW_RETURN_IF_ERROR(write_record());
  }
  GW_RETURN_IF_ERROR(write_record());
  if (candidates.empty()) return result;

  // Out-of-order samples, per series in time order: one look at what the series holds over
  // the candidates' span (its chunks decoded once), then each is a duplicate, a conflict or new.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     return a.series != b.series ? a.series < b.series : a.t_ms < b.t_ms;
                   });
  for (size_t begin = 0; begin < candidates.size();) {
    size_t end = begin;
    while (end < candidates.size() && candidates[end].series == candidates[begin].series) ++end;
    MemSeries& s = *candidates[begin].series;
    std::vector<Sample> held;
    {
      std::lock_guard<std::mutex> sl(s.mu);
      held = s.Held(candidates[begin].t_ms, candidates[end - 1].t_ms);
    }
    std::optional<Sample> taken;  // the previous candidate accepted, for repeats in the batch
    for (size_t i = begin; i < end; ++i) {
      const Candidate& c = candidates[i];
      std::optional<double> have;
      auto it = std::lower_bound(held.begin(), held.end(), Sample{c.t_ms, 0}, EarlierSample);
      if (it != held.end() && it->t_ms == c.t_ms) have = it->value;
      if (!have && taken && taken->t_ms == c.t_ms) have = taken->value;
      if (have) {
        if (SameBits(*have, c.value)) {
          ++result.duplicates;
          continue;
        }
        ++result.conflicts;
        if (result.first_error.empty())
          result.first_error = "sample for " + LabelsToString(*c.labels) +
                               " at t=" + std::to_string(c.t_ms) +
                               " ms has another value than the one already stored";
        continue;
      }
      taken = Sample{c.t_ms, c.value};
      pending.push_back({&s, c.t_ms, c.value, true});
      sample_coder.Put(&samples_part, c.ref, c.t_ms, c.value);
      ++n_samples;
      ++result.accepted_out_of_order;
      if (samples_part.size() >= kSplitBytes) GW_RETURN_IF_ERROR(write_record());
    }
    begin = end;
  }
  GW_RETURN_IF_ERROR(write_record());
  return result;
}

std::vector<SeriesSamples> Head::Query(const std::vector<Matcher>& matchers, int64_t mint_ms,
                                       int64_t maxt_ms) const {
  std::vector<SeriesSamples> out;
  for (SeriesRef ref : index_.Select(matchers)) {
    const MemSeries* s;
    {
      std::lock_guard<std::mutex> lock(series_mu_);
      if (ref >= series_.size()) continue;
      s = series_[ref].get();
    }
    SeriesSamples ss;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      ss.samples = s->Held(mint_ms, maxt_ms);
    }
    if (ss.samples.empty()) continue;
    ss.labels = index_.LabelsOf(ref);
    out.push_back(std::move(ss));
  }
  return out;
}

std::vector<Labels> Head::SeriesInRange(const std::vector<Matcher>& matchers, int64_t mint_ms,
                                        int64_t maxt_ms) const {
  std::vector<Labels> out;
  for (SeriesRef ref : index_.Select(matchers)) {
    const MemSeries* s;
    {
      std::lock_guard<std::mutex> lock(series_mu_);
      if (ref >= series_.size()) continue;
      s = series_[ref].get();
    }
    bool hit = false;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      for (const auto& c : s->sealed) hit |= c.max_t_ms >= mint_ms && c.min_t_ms <= maxt_ms;
      if (!s->open.empty())
        hit |= s->open.last_t_ms() >= mint_ms && s->open.first_t_ms() <= maxt_ms;
      for (const auto* v : {&s->ooo, &s->ooo_flushing})
        if (!v->empty()) hit |= v->back().t_ms >= mint_ms && v->front().t_ms <= maxt_ms;
    }
    if (hit) out.push_back(index_.LabelsOf(ref));
  }
  return out;
}

uint64_t Head::num_samples() const {
  std::lock_guard<std::mutex> lock(series_mu_);
  uint64_t n = 0;
  for (const auto& s : series_) {
    std::lock_guard<std::mutex> sl(s->mu);
    n += s->samples;
  }
  return n;
}

uint64_t Head::chunk_bytes() const {
  std::lock_guard<std::mutex> lock(series_mu_);
  uint64_t n = 0;
  for (const auto& s : series_) {
    std::lock_guard<std::mutex> sl(s->mu);
    for (const auto& c : s->sealed) n += c.bytes->size();
    n += s->open.encoded_bytes();
    n += (s->ooo.size() + s->ooo_flushing.size()) * sizeof(Sample);
  }
  return n;
}

}  // namespace gpuwatch::store
