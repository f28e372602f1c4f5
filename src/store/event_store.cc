#include "store/event_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/log.h"
#include "common/strings.h"
#include "common/time_base.h"
#include "store/internal/coding.h"

namespace gpuwatch::store {
namespace {

// Batch encoding version (docs/format/events.md). On-disk: never renumber.
constexpr uint64_t kBatchVersion = 1;
// Severity codes. On-disk: never renumber.
constexpr uint8_t kSeverityNone = 0;
constexpr uint8_t kSeverityInfo = 1;
constexpr uint8_t kSeverityWarning = 2;
constexpr uint8_t kSeverityCritical = 3;
constexpr std::string_view kSeverityNames[] = {"", "info", "warning", "critical"};
// u32 length, u32 CRC, u8 type in front of each WAL record (docs/format/wal.md).
constexpr uint64_t kWalRecordHeaderBytes = 9;

std::optional<uint8_t> SeverityCode(std::string_view s) {
  for (uint8_t c = kSeverityNone; c <= kSeverityCritical; ++c)
    if (kSeverityNames[c] == s) return c;
  return std::nullopt;
}

bool ValidKind(std::string_view k) {
  if (k.empty() || k.size() > kMaxEventKindBytes) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// For error messages: untrusted text, shortened and made printable.
std::string Quote(std::string_view s) {
  constexpr size_t kShown = 64;
  std::string out = "\"" + PrintableText(s.substr(0, kShown)) + "\"";
  if (s.size() > kShown) out += "…";
  return out;
}

Status CheckSize(std::string_view field, std::string_view value, size_t max) {
  if (value.size() <= max) return Status::Ok();
  return Status::InvalidArgument("event " + std::string(field) + ": " +
                                 std::to_string(value.size()) + " bytes, more than " +
                                 std::to_string(max));
}

using internal::PutBytes;
using internal::PutVarint;
using internal::UnZigZag;
using internal::ZigZag;

// Bounds-checked reader over untrusted bytes; any failure leaves `error` set.
struct Reader {
  std::string_view d;
  size_t pos = 0;
  const char* error = nullptr;

  bool Fail(const char* why) {
    if (!error) error = why;
    return false;
  }
  bool Varint(uint64_t* v) {
    uint64_t out = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
      if (pos >= d.size()) return Fail("truncated varint");
      const auto b = static_cast<uint8_t>(d[pos++]);
      if (shift == 63 && b > 1) return Fail("varint overflows 64 bits");
      out |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *v = out;
        return true;
      }
    }
    return Fail("varint overflows 64 bits");
  }
  bool Bytes(std::string* s) {
    uint64_t n;
    if (!Varint(&n)) return false;
    if (n > d.size() - pos) return Fail("string runs past the end");
    s->assign(d.substr(pos, n));
    pos += n;
    return true;
  }
};

}  // namespace

Status ValidateEvent(const EventRecord& e) {
  if (e.t_ms < 0)
    return Status::InvalidArgument("event t_ms: " + std::to_string(e.t_ms) +
                                   " is before the Unix epoch");
  if (!ValidKind(e.kind))
    return Status::InvalidArgument("event kind " + Quote(e.kind) +
                                   ": must be 1 to 64 of [a-z0-9_]");
  if (!SeverityCode(e.severity))
    return Status::InvalidArgument("event severity " + Quote(e.severity) +
                                   ": must be \"info\", \"warning\", \"critical\" or empty");
  GW_RETURN_IF_ERROR(CheckSize("node", e.node, kMaxEventIdBytes));
  GW_RETURN_IF_ERROR(CheckSize("gpu", e.gpu, kMaxEventIdBytes));
  GW_RETURN_IF_ERROR(CheckSize("job", e.job, kMaxEventIdBytes));
  GW_RETURN_IF_ERROR(CheckSize("message", e.message, kMaxEventMessageBytes));
  GW_RETURN_IF_ERROR(CheckSize("fields_json", e.fields_json, kMaxEventFieldsBytes));
  if (!e.fields_json.empty()) {
    const std::string_view j = TrimWhitespace(e.fields_json);
    if (j.size() < 2 || j.front() != '{' || j.back() != '}')
      return Status::InvalidArgument("event fields_json " + Quote(e.fields_json) +
                                     ": must be empty or a JSON object");
  }
  return Status::Ok();
}

std::string EncodeEventBatch(const std::vector<EventRecord>& events) {
  std::string out;
  PutVarint(&out, kBatchVersion);
  PutVarint(&out, events.size());
  std::string body;
  int64_t prev_t = 0;
  for (const EventRecord& e : events) {
    body.clear();
    // Both are >= 0 (validated), so the difference cannot overflow.
    PutVarint(&body, ZigZag(e.t_ms - prev_t));
    prev_t = e.t_ms;
    PutBytes(&body, e.kind);
    PutVarint(&body, SeverityCode(e.severity).value_or(kSeverityNone));
    PutBytes(&body, e.node);
    PutBytes(&body, e.gpu);
    PutBytes(&body, e.job);
    PutBytes(&body, e.message);
    PutBytes(&body, e.fields_json);
    PutBytes(&out, body);
  }
  return out;
}

Result<std::vector<EventRecord>> DecodeEventBatch(std::string_view payload) {
  Reader r{payload};
  auto corrupt = [&](const std::string& why) {
    return Status::Corruption("event batch: " + why + " at byte " + std::to_string(r.pos));
  };
  uint64_t version = 0, n = 0;
  if (!r.Varint(&version)) return corrupt(r.error);
  if (version != kBatchVersion) return corrupt("unknown version " + std::to_string(version));
  if (!r.Varint(&n)) return corrupt(r.error);
  // Every event takes at least one byte (its length): a larger count is a lie.
  if (n > payload.size() - r.pos) return corrupt("event count " + std::to_string(n) + " too large");
  std::vector<EventRecord> out;
  out.reserve(n);
  int64_t prev_t = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t len = 0;
    if (!r.Varint(&len)) return corrupt(r.error);
    if (len > payload.size() - r.pos) return corrupt("event runs past the end");
    // Fields a later writer appends to an event body are skipped: the body has its length.
    Reader b{payload.substr(r.pos, len)};
    const size_t body_start = r.pos;
    r.pos += len;
    EventRecord e;
    uint64_t dt = 0, severity = 0;
    bool ok = b.Varint(&dt) && b.Bytes(&e.kind) && b.Varint(&severity) && b.Bytes(&e.node) &&
              b.Bytes(&e.gpu) && b.Bytes(&e.job) && b.Bytes(&e.message) && b.Bytes(&e.fields_json);
    if (!ok) {
      r.pos = body_start + b.pos;
      return corrupt(std::string(b.error) + " in event " + std::to_string(i));
    }
    if (__builtin_add_overflow(prev_t, UnZigZag(dt), &e.t_ms))
      return corrupt("time overflows in event " + std::to_string(i));
    prev_t = e.t_ms;
    if (severity > kSeverityCritical)
      return corrupt("unknown severity " + std::to_string(severity) + " in event " +
                     std::to_string(i));
    e.severity = kSeverityNames[severity];
    if (Status st = ValidateEvent(e); !st.ok())
      return corrupt(st.message() + " in event " + std::to_string(i));
    out.push_back(std::move(e));
  }
  if (r.pos != payload.size()) return corrupt("trailing bytes");
  return out;
}

// ---- StringPool ----

uint32_t EventStore::StringPool::Ref(const std::string& s) {
  if (s.empty()) return 0;
  auto [it, inserted] = ids_.try_emplace(s, 0);
  if (inserted) {
    uint32_t id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
      names_[id] = &it->first;
    } else {
      id = static_cast<uint32_t>(names_.size());
      names_.push_back(&it->first);
      refs_.push_back(0);
    }
    it->second = id;
  }
  ++refs_[it->second];
  return it->second;
}

void EventStore::StringPool::Unref(uint32_t id) {
  if (id == 0 || --refs_[id] > 0) return;
  ids_.erase(*names_[id]);
  names_[id] = nullptr;
  free_.push_back(id);
}

std::optional<uint32_t> EventStore::StringPool::Find(const std::string& s) const {
  auto it = ids_.find(s);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string& EventStore::StringPool::Get(uint32_t id) const {
  static const std::string kEmpty;
  return id == 0 ? kEmpty : *names_[id];
}

// ---- EventStore ----

int64_t EventStore::Now() const {
  if (options_.clock_ms) return options_.clock_ms();
  return WallClockMs();
}

Result<std::unique_ptr<EventStore>> EventStore::Open(const std::string& dir,
                                                     EventStoreOptions options) {
  if (options.segment_span_ms < 0 || options.retention_ms < 0 || options.max_future_ms < 0)
    return Status::InvalidArgument(
        "event store: segment_span_ms, retention_ms and max_future_ms must be >= 0");
  std::unique_ptr<EventStore> bulk;
  if (!options.bulk_kinds.empty()) {
    EventStoreOptions b = options;
    b.bulk_kinds.clear();
    b.retention_bytes = options.bulk_retention_bytes;
    b.wal.quarantine_dir.clear();
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      return Status::IoError("mkdir " + dir + ": " + std::strerror(errno));
    auto opened = Open(dir + "/" + kBulkEventsDir, std::move(b));
    if (!opened.ok()) return opened.status();
    bulk = std::move(opened).value();
  }
  std::unique_ptr<EventStore> store(new EventStore(dir, std::move(options)));
  store->bulk_ = std::move(bulk);
  EventStore& s = *store;
  std::lock_guard<std::mutex> append_lock(s.append_mu_);
  std::unique_lock<std::shared_mutex> index_lock(s.index_mu_);

  // Index while replaying (one copy of the data in memory); which segment each event came
  // from is known only once the WAL has counted records per segment, so it is filled in after.
  std::vector<uint32_t> events_per_record;
  WalReplayStats st;
  auto wal = Wal::Open(
      s.dir_, s.options_.wal,
      [&](uint8_t type, std::string_view payload) {
        events_per_record.push_back(0);
        auto batch = type == kEventBatchRecord
                         ? DecodeEventBatch(payload)
                         : Result<std::vector<EventRecord>>(
                               Status::Corruption("unknown record type " + std::to_string(type)));
        if (!batch.ok()) {
          // A future format would make every record fail: say it a few times, then count.
          if (++s.undecodable_records_ <= 3)
            GW_LOG_WARN("event store {}: record {} skipped: {}", s.dir_,
                        events_per_record.size() - 1, batch.status().message());
          return;
        }
        for (const EventRecord& e : *batch) s.Index(e, 0, /*bulk=*/true);
        events_per_record.back() = static_cast<uint32_t>(batch->size());
      },
      &st);
  if (!wal.ok()) return wal.status();
  s.wal_ = std::move(*wal);
  s.SortIndex();

  size_t record = 0, entry = 0;
  for (const WalSegmentStats& ws : st.segment_stats) {
    Segment& seg = s.segments_[ws.number];
    seg.bytes = ws.bytes;
    s.total_bytes_ += ws.bytes;
    for (uint64_t i = 0; i < ws.records && record < events_per_record.size(); ++i, ++record) {
      for (uint32_t k = 0; k < events_per_record[record]; ++k, ++entry) {
        Entry& en = s.entries_[entry];
        en.segment = ws.number;
        ++seg.events;
        seg.newest_ms = std::max(seg.newest_ms.value_or(en.t_ms), en.t_ms);
      }
    }
  }
  if (s.undecodable_records_ > 3)
    GW_LOG_WARN("event store {}: {} records skipped in all", s.dir_, s.undecodable_records_);
  s.segments_.try_emplace(s.wal_->current_segment());
  s.damage_ = st.damage;
  for (const WalDamage& d : st.damage) {
    if (d.torn_tail) continue;
    GW_LOG_WARN("event store {}: {} damaged at offset {}: {} ({} bytes lost)", s.dir_, d.segment,
                d.offset, d.reason, d.bytes_lost);
  }
  index_lock.unlock();
  if (Status rs = s.EnforceRetentionLocked(s.Now()); !rs.ok())
    GW_LOG_WARN("event store {}: retention: {}", s.dir_, rs.ToString());
  return store;
}

Result<EventStoreCheck> EventStore::CheckOwn(const std::string& dir) {
  EventStoreCheck out;
  auto st = Wal::Check(dir, [&](uint8_t type, std::string_view payload) {
    auto batch = type == kEventBatchRecord
                     ? DecodeEventBatch(payload)
                     : Result<std::vector<EventRecord>>(Status::Corruption("unknown record type"));
    if (!batch.ok()) {
      ++out.undecodable_records;
      return;
    }
    for (const EventRecord& e : *batch) {
      ++out.events;
      out.oldest_ms = std::min(out.oldest_ms.value_or(e.t_ms), e.t_ms);
      out.newest_ms = std::max(out.newest_ms.value_or(e.t_ms), e.t_ms);
    }
  });
  if (!st.ok()) return st.status();
  out.wal = std::move(*st);
  for (const WalSegmentStats& s : out.wal.segment_stats) out.bytes += s.bytes;
  return out;
}

void EventStore::Index(const EventRecord& e, uint64_t segment, bool bulk) {
  Entry en;
  en.t_ms = e.t_ms;
  en.segment = segment;
  en.kind = pool_.Ref(e.kind);
  en.node = pool_.Ref(e.node);
  en.gpu = pool_.Ref(e.gpu);
  en.job = pool_.Ref(e.job);
  en.severity = SeverityCode(e.severity).value_or(kSeverityNone);
  en.message = e.message;
  en.fields_json = e.fields_json;
  const Key key{e.t_ms, first_seq_ + entries_.size()};
  // Events arrive nearly in time order: appending is the common case, a late event is
  // inserted in place (a vector move, rare).
  auto add = [&](std::vector<Key>& v) {
    if (bulk || v.empty() || v.back() < key)
      v.push_back(key);
    else
      v.insert(std::upper_bound(v.begin(), v.end(), key), key);
  };
  add(by_time_);
  add(by_kind_[en.kind]);
  if (en.node) add(by_node_[en.node]);
  if (en.gpu) add(by_gpu_[en.gpu]);
  if (en.job) add(by_job_[en.job]);
  entries_.push_back(std::move(en));
}

void EventStore::SortIndex() {
  std::sort(by_time_.begin(), by_time_.end());
  for (Postings* p : {&by_kind_, &by_node_, &by_gpu_, &by_job_})
    for (auto& [id, keys] : *p) std::sort(keys.begin(), keys.end());
}

Status EventStore::AppendOwn(const std::vector<EventRecord>& events) {
  if (events.empty()) return Status::Ok();
  int64_t batch_newest = 0;
  const int64_t now_ms = Now();
  for (size_t i = 0; i < events.size(); ++i) {
    Status st = ValidateEvent(events[i]);
    if (st.ok() && options_.max_future_ms > 0 && events[i].t_ms > now_ms &&
        events[i].t_ms - now_ms > options_.max_future_ms)
      st = Status::InvalidArgument("event t_ms: " + std::to_string(events[i].t_ms) +
                                   " is more than " + std::to_string(options_.max_future_ms) +
                                   " ms ahead of the clock (" + std::to_string(now_ms) + ")");
    if (!st.ok())
      return Status::InvalidArgument("event " + std::to_string(i) +
                                     " of the batch: " + st.message());
    batch_newest = std::max(batch_newest, events[i].t_ms);
  }
  const std::string payload = EncodeEventBatch(events);
  if (payload.size() > kMaxWalRecordBytes)
    return Status::InvalidArgument("event batch encodes to " + std::to_string(payload.size()) +
                                   " bytes, more than one log record holds (" +
                                   std::to_string(kMaxWalRecordBytes) + "): split it");

  std::lock_guard<std::mutex> append_lock(append_mu_);
  bool rotated = false;
  if (options_.segment_span_ms > 0) {
    // segments_ changes only under append_mu_, which is held: no index lock to read it.
    auto active = segments_.find(wal_->current_segment());
    if (active != segments_.end() && active->second.newest_ms &&
        batch_newest / options_.segment_span_ms >
            *active->second.newest_ms / options_.segment_span_ms) {
      auto next = wal_->Rotate();
      if (!next.ok()) return next.status();
      std::unique_lock<std::shared_mutex> index_lock(index_mu_);
      segments_.try_emplace(*next);
      rotated = true;
    }
  }
  GW_RETURN_IF_ERROR(wal_->Append(kEventBatchRecord, payload));
  {
    std::unique_lock<std::shared_mutex> index_lock(index_mu_);
    // The WAL may have started a new segment for this record (segment_bytes).
    const uint64_t number = wal_->current_segment();
    Segment& seg = segments_[number];
    seg.bytes += kWalRecordHeaderBytes + payload.size();
    total_bytes_ += kWalRecordHeaderBytes + payload.size();
    for (const EventRecord& e : events) {
      Index(e, number, /*bulk=*/false);
      ++seg.events;
      seg.newest_ms = std::max(seg.newest_ms.value_or(e.t_ms), e.t_ms);
    }
  }
  // The batch is stored; retention trouble is the next append's or the owner's to see.
  if (rotated || (options_.retention_bytes > 0 && total_bytes_ > options_.retention_bytes)) {
    if (Status st = EnforceRetentionLocked(Now()); !st.ok())
      GW_LOG_WARN("event store {}: retention: {}", dir_, st.ToString());
  }
  return Status::Ok();
}

Status EventStore::EnforceRetentionOwn(int64_t now_ms) {
  std::lock_guard<std::mutex> append_lock(append_mu_);
  return EnforceRetentionLocked(now_ms);
}

Status EventStore::EnforceRetentionLocked(int64_t now_ms) {
  const uint64_t active = wal_->current_segment();
  const bool by_age = options_.retention_ms > 0;
  const int64_t cutoff =
      by_age ? now_ms - options_.retention_ms : std::numeric_limits<int64_t>::min();
  // Whole segments, oldest first (TruncateBefore deletes a prefix). A segment without events
  // (its records damaged, or an empty rotation) goes only along with a later expired one, so
  // damage stays on disk for `store check` until retention would have removed it anyway.
  std::optional<uint64_t> drop_through;
  uint64_t kept_bytes = total_bytes_;
  uint64_t pending_bytes = 0;  // of event-less segments since the last expired one
  bool drop_active = false;
  for (const auto& [number, seg] : segments_) {
    if (by_age && seg.newest_ms && *seg.newest_ms < cutoff) {
      drop_through = number;
      kept_bytes -= pending_bytes + seg.bytes;
      pending_bytes = 0;
      if (number == active) drop_active = true;
      continue;
    }
    if (!seg.newest_ms && number != active) {
      pending_bytes += seg.bytes;
      continue;
    }
    break;
  }
  if (options_.retention_bytes > 0) {
    for (auto it = drop_through ? segments_.upper_bound(*drop_through) : segments_.begin();
         it != segments_.end() && it->first != active && kept_bytes > options_.retention_bytes;
         ++it) {
      drop_through = it->first;
      kept_bytes -= it->second.bytes;
    }
  }
  if (!drop_through) return Status::Ok();
  uint64_t first_kept = *drop_through + 1;
  if (drop_active) {
    // Everything is older than the retention: start a fresh segment to write to.
    auto next = wal_->Rotate();
    if (!next.ok()) return next.status();
    std::unique_lock<std::shared_mutex> index_lock(index_mu_);
    segments_.try_emplace(*next);
    first_kept = *next;
  }
  Status st = wal_->TruncateBefore(first_kept);
  if (!st.ok()) {
    // Some may be gone: forget exactly those, so memory matches the disk.
    auto on_disk = ListWalSegments(dir_);
    if (!on_disk.ok() || on_disk->empty()) return st;
    first_kept = std::min(first_kept, on_disk->front());
  }
  DropSegmentsBelow(first_kept);
  return st;
}

void EventStore::DropSegmentsBelow(uint64_t first_kept) {
  std::unique_lock<std::shared_mutex> index_lock(index_mu_);
  while (!segments_.empty() && segments_.begin()->first < first_kept) {
    total_bytes_ -= segments_.begin()->second.bytes;
    ++segments_dropped_;
    segments_.erase(segments_.begin());
  }
  // Entries are in arrival order, and arrival order is segment order.
  while (!entries_.empty() && entries_.front().segment < first_kept) {
    const Entry& e = entries_.front();
    for (uint32_t id : {e.kind, e.node, e.gpu, e.job}) pool_.Unref(id);
    entries_.pop_front();
    ++first_seq_;
  }
  auto gone = [&](const Key& k) { return k.seq < first_seq_; };
  std::erase_if(by_time_, gone);
  for (Postings* p : {&by_kind_, &by_node_, &by_gpu_, &by_job_}) {
    for (auto it = p->begin(); it != p->end();) {
      std::erase_if(it->second, gone);
      it = it->second.empty() ? p->erase(it) : std::next(it);
    }
  }
}

EventRecord EventStore::ToRecord(const Entry& e) const {
  return EventRecord{e.t_ms,
                     pool_.Get(e.kind),
                     std::string(kSeverityNames[e.severity]),
                     pool_.Get(e.node),
                     pool_.Get(e.gpu),
                     pool_.Get(e.job),
                     e.message,
                     e.fields_json};
}

Result<std::vector<EventRecord>> EventStore::QueryOwn(const EventQuery& q) const {
  if (q.start_ms > q.end_ms)
    return Status::InvalidArgument("event query: start_ms " + std::to_string(q.start_ms) +
                                   " is after end_ms " + std::to_string(q.end_ms));
  if (q.limit == 0 || q.limit > kMaxEventQueryLimit)
    return Status::InvalidArgument("event query: limit " + std::to_string(q.limit) +
                                   " is not in 1.." + std::to_string(kMaxEventQueryLimit));
  for (const auto* list : {&q.kinds, &q.exclude_kinds})
    for (const std::string& k : *list)
      if (!ValidKind(k))
        return Status::InvalidArgument("event query: kind " + Quote(k) +
                                       ": must be 1 to 64 of [a-z0-9_]");

  std::vector<EventRecord> out;
  std::shared_lock<std::shared_mutex> lock(index_mu_);
  const Key lo{q.start_ms, 0}, hi{q.end_ms, std::numeric_limits<uint64_t>::max()};
  using Range = std::pair<std::vector<Key>::const_iterator, std::vector<Key>::const_iterator>;
  auto in_range = [&](const std::vector<Key>& v) -> Range {
    return {std::lower_bound(v.begin(), v.end(), lo), std::upper_bound(v.begin(), v.end(), hi)};
  };

  // Walk the narrowest of the lists the filters select; check every filter on each event.
  Range best = in_range(by_time_);
  auto narrow = [&](const Postings& p, const std::string& value, uint32_t* id) {
    if (value.empty()) return true;
    auto found = pool_.Find(value);
    auto it = found ? p.find(*found) : p.end();
    if (it == p.end()) return false;  // no event has it
    *id = *found;
    Range r = in_range(it->second);
    if (r.second - r.first < best.second - best.first) best = r;
    return true;
  };
  uint32_t node = 0, gpu = 0, job = 0;
  if (!narrow(by_node_, q.node, &node) || !narrow(by_gpu_, q.gpu, &gpu) ||
      !narrow(by_job_, q.job, &job))
    return out;
  std::vector<uint32_t> kinds;
  std::vector<Key> kind_keys;  // the union of the kinds' postings, when that is narrowest
  if (!q.kinds.empty()) {
    std::vector<Range> ranges;
    ptrdiff_t n = 0;
    for (const std::string& k : q.kinds) {
      auto id = pool_.Find(k);
      auto it = id ? by_kind_.find(*id) : by_kind_.end();
      if (it == by_kind_.end() || std::count(kinds.begin(), kinds.end(), *id)) continue;
      kinds.push_back(*id);
      ranges.push_back(in_range(it->second));
      n += ranges.back().second - ranges.back().first;
    }
    if (kinds.empty()) return out;
    if (n < best.second - best.first) {
      kind_keys.reserve(n);
      for (const Range& r : ranges) kind_keys.insert(kind_keys.end(), r.first, r.second);
      std::sort(kind_keys.begin(), kind_keys.end());
      best = {kind_keys.cbegin(), kind_keys.cend()};
    }
  }

  std::vector<uint32_t> excluded;  // kinds no event has are left out
  for (const std::string& k : q.exclude_kinds)
    if (auto id = pool_.Find(k)) excluded.push_back(*id);

  auto take = [&](const Key& k) {
    const Entry& e = entries_[k.seq - first_seq_];
    if ((node && e.node != node) || (gpu && e.gpu != gpu) || (job && e.job != job)) return;
    if (!kinds.empty() && std::find(kinds.begin(), kinds.end(), e.kind) == kinds.end()) return;
    if (std::find(excluded.begin(), excluded.end(), e.kind) != excluded.end()) return;
    if (!q.text_contains.empty() && e.message.find(q.text_contains) == std::string::npos) return;
    out.push_back(ToRecord(e));
  };
  if (q.newest_first) {
    for (auto it = best.second; it != best.first && out.size() < q.limit;) take(*--it);
  } else {
    for (auto it = best.first; it != best.second && out.size() < q.limit; ++it) take(*it);
  }
  return out;
}

EventStoreStats EventStore::StatsOwn() const {
  std::shared_lock<std::shared_mutex> lock(index_mu_);
  EventStoreStats s;
  s.events = entries_.size();
  s.segments = segments_.size();
  s.bytes = total_bytes_;
  if (!by_time_.empty()) {
    s.oldest_ms = by_time_.front().t_ms;
    s.newest_ms = by_time_.back().t_ms;
  }
  s.undecodable_records = undecodable_records_;
  s.segments_dropped = segments_dropped_;
  s.damage = damage_;
  return s;
}

// ----- the bulk partition (EventStoreOptions::bulk_kinds) -----

bool EventStore::IsBulk(const std::string& kind) const {
  return bulk_ && std::find(options_.bulk_kinds.begin(), options_.bulk_kinds.end(), kind) !=
                      options_.bulk_kinds.end();
}

Status EventStore::Append(const std::vector<EventRecord>& events) {
  if (!bulk_) return AppendOwn(events);
  // Validated whole first, so a bad event stores nothing in either partition.
  for (const EventRecord& e : events) GW_RETURN_IF_ERROR(ValidateEvent(e));
  std::vector<EventRecord> own, bulk;
  for (const EventRecord& e : events) (IsBulk(e.kind) ? bulk : own).push_back(e);
  if (!bulk.empty()) GW_RETURN_IF_ERROR(bulk_->Append(bulk));
  return own.empty() ? Status::Ok() : AppendOwn(own);
}

Result<std::vector<EventRecord>> EventStore::Query(const EventQuery& q) const {
  auto own = QueryOwn(q);
  if (!bulk_ || !own.ok()) return own;
  // Every bulk kind excluded: the bulk partition holds nothing this query wants.
  const bool bulk_excluded =
      std::all_of(options_.bulk_kinds.begin(), options_.bulk_kinds.end(), [&](const auto& k) {
        return std::find(q.exclude_kinds.begin(), q.exclude_kinds.end(), k) !=
               q.exclude_kinds.end();
      });
  if (bulk_excluded) return own;
  auto bulk = bulk_->Query(q);
  if (!bulk.ok()) return bulk.status();
  std::vector<EventRecord> out = std::move(*own);
  out.insert(out.end(), std::make_move_iterator(bulk->begin()),
             std::make_move_iterator(bulk->end()));
  std::stable_sort(out.begin(), out.end(), [&](const EventRecord& a, const EventRecord& b) {
    return q.newest_first ? a.t_ms > b.t_ms : a.t_ms < b.t_ms;
  });
  if (out.size() > q.limit) out.resize(q.limit);
  return out;
}

Status EventStore::EnforceRetention(int64_t now_ms) {
  GW_RETURN_IF_ERROR(EnforceRetentionOwn(now_ms));
  return bulk_ ? bulk_->EnforceRetention(now_ms) : Status::Ok();
}

Status EventStore::Sync() {
  GW_RETURN_IF_ERROR(wal_->Sync());
  return bulk_ ? bulk_->Sync() : Status::Ok();
}

namespace {
template <typename S>
void AddPartition(S* into, const S& bulk) {
  into->events += bulk.events;
  into->bytes += bulk.bytes;
  into->undecodable_records += bulk.undecodable_records;
  if (bulk.oldest_ms)
    into->oldest_ms = std::min(into->oldest_ms.value_or(*bulk.oldest_ms), *bulk.oldest_ms);
  if (bulk.newest_ms)
    into->newest_ms = std::max(into->newest_ms.value_or(*bulk.newest_ms), *bulk.newest_ms);
}
}  // namespace

EventStoreStats EventStore::stats() const {
  EventStoreStats s = StatsOwn();
  if (!bulk_) return s;
  const EventStoreStats b = bulk_->stats();
  AddPartition(&s, b);
  s.segments += b.segments;
  s.segments_dropped += b.segments_dropped;
  for (WalDamage d : b.damage) {
    d.segment = std::string(kBulkEventsDir) + "/" + d.segment;
    s.damage.push_back(std::move(d));
  }
  return s;
}

EventStoreStats EventStore::BulkStats() const { return bulk_ ? bulk_->stats() : EventStoreStats{}; }

Result<EventStoreCheck> EventStore::Check(const std::string& dir) {
  auto out = CheckOwn(dir);
  const std::string bulk_dir = dir + "/" + kBulkEventsDir;
  struct stat sb {};
  if (!out.ok() || ::stat(bulk_dir.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) return out;
  auto b = CheckOwn(bulk_dir);
  if (!b.ok()) return b.status();
  AddPartition(&*out, *b);
  out->wal.segments += b->wal.segments;
  out->wal.records += b->wal.records;
  for (WalDamage d : b->wal.damage) {
    d.segment = std::string(kBulkEventsDir) + "/" + d.segment;
    out->wal.damage.push_back(std::move(d));
  }
  for (WalSegmentStats ss : b->wal.segment_stats) out->wal.segment_stats.push_back(ss);
  return out;
}

}  // namespace gpuwatch::store
