#include "store/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "common/log.h"
#include "common/strings.h"
#include "common/time_base.h"
#include "store/internal/file_util.h"
#include "store/rollup.h"

namespace gpuwatch::store {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxRollupChunkPoints = 7200;
constexpr int64_t kDayMs = 86400 * 1000;
// Blocks that hold only rollups (raw retention dropped their raw chunks) are merged per 30
// days: a year of them is then a dozen files whose indexes are held in memory, not 365.
constexpr int64_t kRollupOnlySpanMs = 30 * kDayMs;
constexpr Tier kRollupTiers[] = {Tier::k1m, Tier::k1h};

using internal::Errno;

// An unambiguous key for a label set (names and values cannot contain NUL... values can, in
// theory, so the lengths are part of the key).
std::string Key(const Labels& labels) {
  std::string k;
  for (const auto& l : labels) {
    k += std::to_string(l.name.size());
    k += ':';
    k += l.name;
    k += std::to_string(l.value.size());
    k += ':';
    k += l.value;
  }
  return k;
}

bool Overlaps(int64_t a_min, int64_t a_max, int64_t b_min, int64_t b_max) {
  return a_max >= b_min && a_min <= b_max;
}

// Samples of one chunk within [mint, maxt], appended to `out`. A damaged chunk is skipped with
// a warning: the rest of the store still answers.
void DecodeInto(std::string_view bytes, int64_t mint, int64_t maxt, const std::string& where,
                std::vector<Sample>* out) {
  auto dec = ChunkDecoder::Open(bytes);
  if (!dec.ok()) {
    GW_LOG_WARN("store: skipping damaged chunk in {}: {}", where, dec.status().message());
    return;
  }
  int64_t t;
  double v;
  while (dec->Next(&t, &v)) {
    if (t > maxt) break;
    if (t >= mint) out->push_back({t, v});
  }
  if (!dec->status().ok())
    GW_LOG_WARN("store: damaged chunk in {}: {}", where, dec->status().message());
}

// Sorts by time and keeps one sample per timestamp (sources are disjoint except after a crash
// between writing a block and truncating the WAL, where they agree).
void SortUnique(std::vector<Sample>* s) {
  if (!std::is_sorted(s->begin(), s->end(),
                      [](const Sample& a, const Sample& b) { return a.t_ms < b.t_ms; }))
    std::stable_sort(s->begin(), s->end(),
                     [](const Sample& a, const Sample& b) { return a.t_ms < b.t_ms; });
  s->erase(std::unique(s->begin(), s->end(),
                       [](const Sample& a, const Sample& b) { return a.t_ms == b.t_ms; }),
           s->end());
}

// Rollup points of `tier` stored in one series' chunks of a block, within [mint, maxt]. The
// field chunks of a range (kNumRollupFields) are stored in field order, one group after another.
// The RollupParts bit a field belongs to.
uint32_t FieldPart(RollupField f) {
  switch (f) {
    case RollupField::kMin:
    case RollupField::kMax:
      return kRollupMinMax;
    case RollupField::kSum:
    case RollupField::kCount:
      return kRollupSumCount;
    case RollupField::kLast:
    case RollupField::kLastOffset:
      return kRollupLast;
    case RollupField::kFirst:
    case RollupField::kFirstOffset:
      return kRollupFirst;
  }
  return kRollupAll;
}

std::vector<RollupPoint> ReadRollups(const Block& block, uint32_t series, Tier tier, int64_t mint,
                                     int64_t maxt, uint32_t parts = kRollupAll) {
  std::vector<RollupPoint> out;
  const auto& chunks = block.chunks(series);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkMeta& m = chunks[i];
    if (m.kind != RollupChunkKind(tier, RollupField::kMin)) continue;
    if (i + kNumRollupFields > chunks.size() || !Overlaps(m.min_t_ms, m.max_t_ms, mint, maxt))
      continue;
    // Fields the caller does not need stay zero: fewer chunks read and decoded.
    std::vector<Sample> fields[kNumRollupFields];
    const std::vector<Sample>* times = nullptr;  // the first decoded field
    bool ok = true;
    for (int f = 0; f < kNumRollupFields && ok; ++f) {
      const ChunkMeta& fm = chunks[i + f];
      ok = fm.kind == RollupChunkKind(tier, static_cast<RollupField>(f));
      if (!ok) break;
      if (!(parts & FieldPart(static_cast<RollupField>(f)))) continue;
      auto bytes = block.ReadChunk(fm);
      if (!bytes.ok()) {
        ok = false;
        break;
      }
      auto decoded = DecodeChunk(*bytes);
      ok = decoded.ok() && (!times || decoded->size() == times->size());
      if (ok) {
        fields[f] = std::move(decoded).value();
        if (!times) times = &fields[f];
      }
    }
    ok = ok && times;
    for (auto& f : fields)
      if (ok && f.empty()) f.resize(times->size());
    if (!ok) {
      GW_LOG_WARN("store: skipping damaged {} rollups of {} in {}", TierName(tier),
                  LabelsToString(block.labels(series)), block.path());
      continue;
    }
    for (size_t k = 0; k < times->size(); ++k) {
      const int64_t t = (*times)[k].t_ms;
      if (t < mint || t > maxt) continue;
      RollupPoint p;
      p.t_ms = t;
      p.min = fields[0][k].value;
      p.max = fields[1][k].value;
      p.sum = fields[2][k].value;
      p.count = fields[3][k].value;
      p.last = fields[4][k].value;
      p.last_t_ms = t + static_cast<int64_t>(fields[5][k].value);
      p.first = fields[6][k].value;
      p.first_t_ms = t + static_cast<int64_t>(fields[7][k].value);
      out.push_back(p);
    }
  }
  return out;
}

Status WriteRollups(BlockWriter* w, Tier tier, const std::vector<RollupPoint>& points) {
  for (size_t start = 0; start < points.size(); start += kMaxRollupChunkPoints) {
    const size_t end = std::min(points.size(), start + kMaxRollupChunkPoints);
    for (int f = 0; f < kNumRollupFields; ++f) {
      ChunkEncoder enc;
      for (size_t k = start; k < end; ++k) {
        const RollupPoint& p = points[k];
        double v = 0;
        switch (static_cast<RollupField>(f)) {
          case RollupField::kMin:
            v = p.min;
            break;
          case RollupField::kMax:
            v = p.max;
            break;
          case RollupField::kSum:
            v = p.sum;
            break;
          case RollupField::kCount:
            v = p.count;
            break;
          case RollupField::kLast:
            v = p.last;
            break;
          case RollupField::kLastOffset:
            v = static_cast<double>(p.last_t_ms - p.t_ms);
            break;
          case RollupField::kFirst:
            v = p.first;
            break;
          case RollupField::kFirstOffset:
            v = static_cast<double>(p.first_t_ms - p.t_ms);
            break;
        }
        GW_RETURN_IF_ERROR(enc.Append(p.t_ms, v));
      }
      ChunkMeta m;
      m.kind = RollupChunkKind(tier, static_cast<RollupField>(f));
      m.min_t_ms = points[start].t_ms;
      m.max_t_ms = points[end - 1].t_ms;
      m.num_samples = static_cast<uint32_t>(end - start);
      GW_RETURN_IF_ERROR(w->AddChunk(m, enc.Finish()));
    }
  }
  return Status::Ok();
}

Status MoveToQuarantine(const std::string& dir, const std::string& path,
                        const std::string& reason) {
  const std::string qdir = dir + "/quarantine";
  if (::mkdir(qdir.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir " + qdir);
  const std::string name = fs::path(path).filename().string();
  std::string target = qdir + "/" + name;
  for (int i = 1; fs::exists(target); ++i) target = qdir + "/" + name + "." + std::to_string(i);
  if (::rename(path.c_str(), target.c_str()) != 0) return Errno("rename " + path);
  std::ofstream(target + ".why") << reason << "\n";
  return Status::Ok();
}

// Salvages the unreadable block at `path` (seq `seq`) into block `out_seq` (issue 17, D13) and
// says what it kept, as a suffix of the quarantine note. A compaction's output whose inputs
// all survive (a crash before they were deleted) has nothing to salvage: they hold its data.
// When only some survive, their time ranges are left out of the salvage, so nothing is
// counted twice.
std::string SalvageUnreadable(const std::string& blocks_dir, const std::string& path, uint64_t seq,
                              const std::vector<const Block*>& readable, uint64_t out_seq,
                              std::string* written) {
  std::vector<std::pair<int64_t, int64_t>> exclude;
  if (const auto meta = ReadBlockMetaRecord(path); meta && !meta->replaces.empty()) {
    size_t surviving = 0;
    for (uint64_t r : meta->replaces)
      for (const Block* b : readable)
        if (b->meta().seq == r) {
          ++surviving;
          exclude.emplace_back(b->meta().min_t_ms, b->meta().max_t_ms);
        }
    if (surviving == meta->replaces.size())
      return "; the blocks it replaced are all still here and serve its data";
  }
  auto salvage = SalvageBlock(path, seq, blocks_dir, out_seq, written, exclude);
  if (!salvage.ok()) return "; nothing salvaged: " + salvage.status().message();
  return fmt::format(
      "; salvaged {} series, {} chunks ({} raw samples){}; {} chunks lost, {} bytes skipped{}{}",
      salvage->series, salvage->chunks, salvage->samples,
      written->empty() ? "" : " into blocks/" + BlockFileName(out_seq), salvage->chunks_lost,
      salvage->bytes_skipped,
      exclude.empty() ? ""
                      : " (left out: the time of " + std::to_string(exclude.size()) +
                            " replaced block(s) still here)",
      salvage->first_damage.empty() ? "" : " (first damage at " + salvage->first_damage + ")");
}

// Takes the store's write lock; fails if another process holds it.
Result<int> LockDir(const std::string& dir) {
  const std::string path = dir + "/LOCK";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open " + path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK)
      return Status::Unavailable("another gpuwatch process has the store in " + dir + " open (" +
                                 path + " is locked)");
    errno = err;
    return Errno("flock " + path);
  }
  return fd;
}

// One series of a block being merged: where its raw chunks are and its merged rollups.
struct MergeEntry {
  Labels labels;
  std::vector<std::pair<const Block*, ChunkMeta>> raw;
  std::vector<RollupPoint> rollups[kNumTiers];
};

// Writes `inputs` merged into block `seq`, keeping chunk kinds `keep` accepts and (always)
// only raw chunks whose CRC checks. Returns no path when nothing is left to write.
Result<std::optional<std::string>> WriteMerged(const std::string& blocks_dir, uint64_t seq,
                                               const std::vector<const Block*>& inputs,
                                               const std::function<bool(uint8_t)>& keep,
                                               std::vector<std::string>* skipped) {
  std::vector<MergeEntry> entries;
  std::unordered_map<std::string, size_t> by_key;
  BlockMeta meta;
  meta.seq = seq;
  for (const Block* b : inputs) {
    meta.replaces.push_back(b->meta().seq);
    meta.wal_covers_before = std::max(meta.wal_covers_before, b->meta().wal_covers_before);
    for (uint32_t i = 0; i < b->num_series(); ++i) {
      auto [it, fresh] = by_key.try_emplace(Key(b->labels(i)), entries.size());
      if (fresh) entries.push_back({b->labels(i), {}, {}});
      MergeEntry& e = entries[it->second];
      for (const ChunkMeta& m : b->chunks(i))
        if (m.kind == kRawChunkKind && keep(m.kind)) e.raw.emplace_back(b, m);
      for (Tier t : kRollupTiers) {
        if (!keep(RollupChunkKind(t, RollupField::kMin))) continue;
        auto pts = ReadRollups(*b, i, t, INT64_MIN, INT64_MAX);
        MergeRollups(&e.rollups[static_cast<int>(t)], pts);
      }
    }
  }
  auto writer = BlockWriter::Create(blocks_dir, meta);
  if (!writer.ok()) return writer.status();
  bool any = false;
  for (auto& e : entries) {
    std::stable_sort(e.raw.begin(), e.raw.end(), [](const auto& a, const auto& b) {
      return a.second.min_t_ms < b.second.min_t_ms;
    });
    std::vector<std::pair<ChunkMeta, std::string>> good;
    for (const auto& [b, m] : e.raw) {
      auto bytes = b->ReadChunk(m);
      Status st = bytes.status();
      if (st.ok()) st = ChunkDecoder::Open(*bytes).status();
      if (!st.ok()) {
        if (skipped)
          skipped->push_back(b->path() + ": " + LabelsToString(e.labels) + ": " + st.message());
        continue;
      }
      good.emplace_back(m, std::move(bytes).value());
    }
    const bool has_rollups = !e.rollups[1].empty() || !e.rollups[2].empty();
    if (good.empty() && !has_rollups) continue;
    any = true;
    GW_RETURN_IF_ERROR((*writer)->BeginSeries(e.labels));
    for (auto& [m, bytes] : good) GW_RETURN_IF_ERROR((*writer)->AddChunk(m, bytes));
    for (Tier t : kRollupTiers)
      GW_RETURN_IF_ERROR(WriteRollups(writer->get(), t, e.rollups[static_cast<int>(t)]));
  }
  if (!any) return std::optional<std::string>();
  auto path = (*writer)->Finish();
  if (!path.ok()) return path.status();
  return std::optional<std::string>(*path);
}

}  // namespace

bool StoreCheckReport::damaged() const {
  // A torn tail of the newest segment is a write that was never acknowledged (a crash, or a
  // live writer mid-record): the next open cuts it off and nothing is lost.
  return !block_damage.empty() || std::any_of(wal_damage.begin(), wal_damage.end(),
                                              [](const WalDamage& d) { return !d.torn_tail; });
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& dir, StoreOptions options,
                                           StoreOpenReport* report) {
  StoreOpenReport local;
  StoreOpenReport& rep = report ? *report : local;
  std::unique_ptr<Store> s(new Store(dir, options));
  s->blocks_dir_ = dir + "/blocks";
  if (!options.read_only) {
    std::error_code ec;
    fs::create_directories(s->blocks_dir_, ec);
    if (ec) return Status::IoError("cannot create " + s->blocks_dir_ + ": " + ec.message());
    auto fd = LockDir(dir);
    if (!fd.ok()) return fd.status();
    s->lock_fd_ = *fd;
  } else if (!fs::is_directory(dir)) {
    return Status::NotFound(dir + " is not a directory");
  }
  GW_RETURN_IF_ERROR(s->LoadBlocks(&rep));

  uint64_t covered = 0;
  for (const auto& b : s->blocks_) covered = std::max(covered, b->meta().wal_covers_before);
  HeadOptions ho = options.head;
  ho.pool = s->labels_pool_;  // the head's series and the blocks' share their label sets
  // A damaged newest WAL segment is copied beside the quarantined blocks before it is repaired.
  if (ho.wal.quarantine_dir.empty()) ho.wal.quarantine_dir = dir + "/quarantine";
  ho.wal.first_segment = std::max<uint64_t>(ho.wal.first_segment, covered);
  if (options.read_only) {
    auto head = Head::OpenReadOnly(dir, ho, covered, &rep.wal);
    if (!head.ok()) return head.status();
    s->head_ = std::move(head).value();
  } else {
    // Segments a block covers were flushed; a crash kept them from being deleted.
    if (auto segs = ListWalSegments(dir + "/wal"); segs.ok()) {
      for (uint64_t n : *segs) {
        if (n >= covered) break;
        char name[32];
        std::snprintf(name, sizeof(name), "%08llu.wal", static_cast<unsigned long long>(n));
        if (::unlink((dir + "/wal/" + name).c_str()) == 0)
          rep.removed.push_back(std::string("wal/") + name + " (already in a block)");
      }
    }
    auto head = Head::Open(dir, ho, &rep.wal);
    if (!head.ok()) return head.status();
    s->head_ = std::move(head).value();
  }
  s->SeedHead();
  rep.blocks = s->blocks_.size();
  if (options.background && !options.read_only)
    s->bg_ = std::thread([p = s.get()] { p->BackgroundLoop(); });
  return s;
}

Status Store::LoadBlocks(StoreOpenReport* rep) {
  DIR* d = ::opendir(blocks_dir_.c_str());
  if (!d) {
    if (errno == ENOENT && options_.read_only) return Status::Ok();
    return Errno("opendir " + blocks_dir_);
  }
  std::vector<std::pair<uint64_t, std::string>> files;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.ends_with(".gwb.tmp")) {
      // An unfinished write: the data is still in the WAL (or in the blocks it would replace).
      if (!options_.read_only && ::unlink((blocks_dir_ + "/" + name).c_str()) == 0)
        rep->removed.push_back("blocks/" + name + " (unfinished write)");
      continue;
    }
    if (!name.ends_with(".gwb") || name.size() != 12) continue;
    if (auto seq = ParseInt<uint64_t>(std::string_view(name).substr(0, 8)))
      files.emplace_back(*seq, name);
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  uint64_t max_seq = 0;
  std::vector<std::shared_ptr<const Block>> opened;
  std::set<uint64_t> replaced;
  struct Unreadable {
    uint64_t seq;
    std::string name, reason;
  };
  std::vector<Unreadable> unreadable;
  for (const auto& [seq, name] : files) {
    max_seq = std::max(max_seq, seq);
    const std::string path = blocks_dir_ + "/" + name;
    auto b = Block::Open(path, labels_pool_);
    if (!b.ok()) {
      unreadable.push_back({seq, name, b.status().message()});
      continue;
    }
    for (uint64_t r : (*b)->meta().replaces) replaced.insert(r);
    opened.push_back(std::move(b).value());
  }
  for (auto& b : opened) {
    max_seq = std::max({max_seq, b->meta().seq,
                        b->meta().replaces.empty() ? uint64_t{0}
                                                   : *std::max_element(b->meta().replaces.begin(),
                                                                       b->meta().replaces.end())});
    if (replaced.count(b->meta().seq)) {
      // Compaction or retention wrote its replacement but crashed before deleting it.
      if (!options_.read_only && ::unlink(b->path().c_str()) == 0)
        rep->removed.push_back("blocks/" + BlockFileName(b->meta().seq) + " (superseded)");
      continue;
    }
    blocks_.push_back(b);
  }
  next_seq_ = max_seq + 1;
  for (const auto& u : unreadable) {
    const std::string path = blocks_dir_ + "/" + u.name;
    if (replaced.count(u.seq)) {
      // Its data is in the block that replaced it; only the deletion was left undone.
      if (!options_.read_only && ::unlink(path.c_str()) == 0)
        rep->removed.push_back("blocks/" + u.name + " (superseded, unreadable)");
      continue;
    }
    std::string written;
    std::string why = u.reason;
    if (!options_.read_only) {
      std::vector<const Block*> readable;
      for (const auto& b : blocks_) readable.push_back(b.get());
      why += SalvageUnreadable(blocks_dir_, path, u.seq, readable, next_seq_, &written);
      if (!written.empty()) {
        ++next_seq_;
        if (auto b = Block::Open(written, labels_pool_); b.ok())
          blocks_.push_back(std::move(b).value());
        else
          why += "; the salvaged block does not open: " + b.status().message();
      }
      MoveToQuarantine(dir_, path, why).IgnoreError();
    }
    GW_LOG_ERROR("store: blocks/{}: {}", u.name, why);
    rep->quarantined.push_back("blocks/" + u.name + ": " + why);
  }
  return Status::Ok();
}

void Store::SeedHead() {
  // The newest raw sample of every series in the blocks, so that out-of-order rejection
  // survives a restart after the head was flushed.
  struct Newest {
    const Block* block;
    uint32_t series;
    ChunkMeta chunk;  // a copy: Block::chunks decodes them anew each call
  };
  std::unordered_map<std::string, Newest> newest;
  for (const auto& b : blocks_)
    for (uint32_t i = 0; i < b->num_series(); ++i)
      for (const ChunkMeta& m : b->chunks(i)) {
        if (m.kind != kRawChunkKind) continue;
        auto [it, fresh] = newest.try_emplace(Key(b->labels(i)), Newest{b.get(), i, m});
        if (!fresh && m.max_t_ms > it->second.chunk.max_t_ms) it->second = {b.get(), i, m};
      }
  for (const auto& [key, n] : newest) {
    auto bytes = n.block->ReadChunk(n.chunk);
    if (!bytes.ok()) continue;
    auto samples = DecodeChunk(*bytes);
    if (!samples.ok() || samples->empty()) {
      head_->SeedLast(n.block->labels(n.series), n.chunk.max_t_ms,
                      std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    head_->SeedLast(n.block->labels(n.series), samples->back().t_ms, samples->back().value);
  }
}

Store::~Store() { Close().IgnoreError(); }

Status Store::Close() {
  {
    std::lock_guard<std::mutex> lock(bg_mu_);
    if (closed_) return Status::Ok();
    closed_ = true;
    stopping_ = true;
  }
  bg_cv_.notify_all();
  if (bg_.joinable()) bg_.join();
  Status st;
  if (!options_.read_only && head_) {
    std::lock_guard<std::mutex> lock(maintenance_mu_);
    st = FlushLocked();
    if (!st.ok())
      GW_LOG_ERROR("store: flush on close failed, the WAL keeps the data: {}", st.message());
  }
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
  return st;
}

void Store::SetEventSink(StoreEventFn fn) {
  std::lock_guard<std::mutex> lock(event_mu_);
  event_fn_ = std::move(fn);
}

void Store::Report(const std::string& kind, const std::string& severity,
                   const std::string& message) {
  StoreEventFn fn;
  {
    std::lock_guard<std::mutex> lock(event_mu_);
    if (kind == "store_error" && message == last_error_) return;  // once until it changes
    if (kind == "store_error") last_error_ = message;
    fn = event_fn_;
  }
  GW_LOG_ERROR("store: {}", message);
  if (fn) fn(kind, severity, message);
}

Result<AppendResult> Store::Append(const std::vector<Head::Input>& batch,
                                   const AppendLimits& limits) {
  // A sample far in the future would become "now" for retention and expire everything else,
  // and would make every later real sample out of order: refuse it at the door.
  std::vector<Head::Input> kept;
  uint64_t future = 0;
  std::string future_error;
  if (options_.max_future_ms > 0) {
    const int64_t limit_ms =
        (options_.clock_ms ? options_.clock_ms() : WallClockMs()) + options_.max_future_ms;
    for (size_t i = 0; i < batch.size() && future == 0; ++i)
      for (const Sample& x : batch[i].samples)
        if (x.t_ms > limit_ms) ++future;
    if (future > 0) {
      future = 0;
      kept.reserve(batch.size());
      for (const auto& in : batch) {
        Head::Input k{in.labels, {}, in.ref};
        for (const Sample& x : in.samples) {
          if (x.t_ms <= limit_ms) {
            k.samples.push_back(x);
          } else if (future++ == 0) {
            future_error =
                fmt::format("sample at t={} ms is more than {} s ahead of this machine's clock",
                            x.t_ms, options_.max_future_ms / 1000);
          }
        }
        kept.push_back(std::move(k));
      }
    }
  }
  auto r = head_->Append(future > 0 ? kept : batch, limits);
  if (r.ok() && future > 0) {
    r->invalid += future;
    if (r->first_error.empty()) r->first_error = future_error;
  }
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kIoError) {
      write_errors_.fetch_add(1, std::memory_order_relaxed);
      Report("store_error", "critical", "write failed: " + r.status().message());
    }
    return r;
  }
  int64_t lo, hi;
  if (options_.background && head_->UnflushedRange(&lo, &hi) && hi - lo >= options_.block_span_ms)
    bg_cv_.notify_all();
  return r;
}

void Store::BackgroundLoop() {
  auto next_maintenance = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::unique_lock<std::mutex> lock(bg_mu_);
  while (!stopping_) {
    bg_cv_.wait_for(lock, std::chrono::seconds(1));
    if (stopping_) break;
    lock.unlock();
    int64_t lo, hi;
    const int64_t now_ms = options_.clock_ms ? options_.clock_ms() : WallClockMs();
    if (head_->UnflushedRange(&lo, &hi) && hi - lo >= options_.block_span_ms &&
        (last_span_flush_ms_ == 0 ||
         now_ms - last_span_flush_ms_ >= options_.min_flush_interval_ms)) {
      last_span_flush_ms_ = now_ms;
      Status st = Flush();
      if (!st.ok()) std::this_thread::sleep_for(std::chrono::seconds(5));  // e.g. disk full
    }
    if (options_.head.wal.sync == SyncPolicy::kInterval) head_->Sync().IgnoreError();
    if (std::chrono::steady_clock::now() >= next_maintenance) {
      next_maintenance = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      EnforceRetention().IgnoreError();
      Compact(/*closed_days_only=*/true).IgnoreError();
    }
    lock.lock();
  }
}

Status Store::Flush() {
  if (options_.read_only) return Status::Unavailable("the store is open read-only");
  std::lock_guard<std::mutex> lock(maintenance_mu_);
  return FlushLocked();
}

namespace {
void ReleaseFreedMemory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}
}  // namespace

Status Store::FlushLocked() {
  auto cut = head_->CutForFlush();
  if (!cut.ok()) {
    flush_errors_.fetch_add(1, std::memory_order_relaxed);
    Report("store_error", "critical", "flush failed: " + cut.status().message());
    return cut.status();
  }
  if (!cut->series.empty()) {
    const uint64_t seq = next_seq_++;
    auto fail = [&](const Status& st) {
      flush_errors_.fetch_add(1, std::memory_order_relaxed);
      Report(
          "store_error", "critical",
          "flush to " + BlockFileName(seq) + " failed, the data stays in the WAL: " + st.message());
      return st;
    };
    BlockMeta meta;
    meta.seq = seq;
    meta.wal_covers_before = cut->wal_first_kept;
    auto writer = BlockWriter::Create(blocks_dir_, meta);
    if (!writer.ok()) return fail(writer.status());
    std::vector<Sample> samples;
    std::vector<RollupPoint> rollups;
    for (const auto& fs : cut->series) {
      if (Status st = (*writer)->BeginSeries(fs.labels); !st.ok()) return fail(st);
      samples.clear();
      for (const auto& c : fs.chunks) {
        ChunkMeta m;
        m.kind = kRawChunkKind;
        m.min_t_ms = c.min_t_ms;
        m.max_t_ms = c.max_t_ms;
        m.num_samples = c.num_samples;
        if (Status st = (*writer)->AddChunk(m, *c.bytes); !st.ok()) return fail(st);
        auto decoded = DecodeChunk(*c.bytes);
        if (decoded.ok()) samples.insert(samples.end(), decoded->begin(), decoded->end());
      }
      // Out-of-order samples come as chunks of their own after the in-order ones.
      if (fs.chunks.size() > fs.sealed_chunks) SortUnique(&samples);
      for (Tier t : kRollupTiers) {
        rollups.clear();
        AppendRollups(samples, TierWidthMs(t), &rollups);
        if (Status st = WriteRollups(writer->get(), t, rollups); !st.ok()) return fail(st);
      }
    }
    auto path = (*writer)->Finish();
    if (!path.ok()) return fail(path.status());
    auto block = Block::Open(*path, labels_pool_);
    if (!block.ok()) return fail(block.status());
    std::unique_lock<std::shared_mutex> bl(blocks_mu_);
    blocks_.push_back(std::move(block).value());
    head_->DropFlushed(*cut);
    bl.unlock();
    std::vector<HeadFlushSeries>().swap(cut->series);
    // The flushed chunks were freed all over the heap, between live series' buffers: glibc
    // keeps such pages (only the heap's top is trimmed), so a hub's RSS stayed at its peak
    // after every flush (2.5x the head's steady size, bench/fleet/RESULTS.md "Memory over
    // time"). Hand them back; once per flush, a walk over the heap.
    ReleaseFreedMemory();
  }
  if (Status st = head_->TruncateWal(cut->wal_first_kept); !st.ok()) {
    Report("store_error", "warning", "WAL truncation failed: " + st.message());
    return st;
  }
  {
    std::lock_guard<std::mutex> lock(event_mu_);
    last_error_.clear();
  }
  return Status::Ok();
}

Status Store::ReplaceBlocks(const BlockList& inputs,
                            const std::function<bool(uint8_t kind)>& keep) {
  std::vector<const Block*> raw_inputs;
  for (const auto& b : inputs) raw_inputs.push_back(b.get());
  std::vector<std::string> skipped;
  auto path = WriteMerged(blocks_dir_, next_seq_++, raw_inputs, keep, &skipped);
  if (!path.ok()) {
    Report("store_error", "warning", "rewriting blocks failed: " + path.status().message());
    return path.status();
  }
  for (const auto& s : skipped) Report("store_damage", "warning", "dropped damaged chunk: " + s);
  std::shared_ptr<const Block> replacement;
  if (path->has_value()) {
    auto b = Block::Open(**path, labels_pool_);
    if (!b.ok()) return b.status();
    replacement = std::move(b).value();
  }
  {
    std::unique_lock<std::shared_mutex> lock(blocks_mu_);
    std::erase_if(blocks_, [&](const auto& b) {
      return std::find(inputs.begin(), inputs.end(), b) != inputs.end();
    });
    if (replacement) {
      blocks_.push_back(replacement);
      std::sort(blocks_.begin(), blocks_.end(),
                [](const auto& a, const auto& b) { return a->meta().seq < b->meta().seq; });
    }
  }
  // Open readers keep their descriptors; the files go now. A crash before this point leaves
  // them for the next open, which deletes them because the replacement names them.
  for (const auto& b : inputs) ::unlink(b->path().c_str());
  return Status::Ok();
}

Status Store::Compact(bool closed_days_only) {
  if (options_.read_only) return Status::Unavailable("the store is open read-only");
  std::lock_guard<std::mutex> lock(maintenance_mu_);
  if (!closed_days_only) GW_RETURN_IF_ERROR(FlushLocked());
  BlockList blocks = Snapshot();
  if (blocks.empty()) return Status::Ok();
  int64_t newest = 0;
  for (const auto& b : blocks) newest = std::max(newest, b->meta().max_t_ms);
  const int64_t newest_day = BucketStart(newest, kDayMs);
  // Key: (has raw data, window start); raw-bearing blocks merge per UTC day, rollup-only ones
  // per 30 days.
  std::map<std::pair<bool, int64_t>, BlockList> groups;
  for (const auto& b : blocks) {
    const bool raw = b->tier_stats(Tier::kRaw).chunks > 0;
    groups[{raw, BucketStart(b->meta().min_t_ms, raw ? kDayMs : kRollupOnlySpanMs)}].push_back(b);
  }
  for (auto& [key, list] : groups) {
    if (list.size() < 2) continue;
    if (closed_days_only && key.first && key.second >= newest_day) continue;
    GW_RETURN_IF_ERROR(ReplaceBlocks(list, [](uint8_t) { return true; }));
  }
  return Status::Ok();
}

int64_t Store::NewestSampleMs() const {
  int64_t newest = 0;
  for (const auto& b : Snapshot()) newest = std::max(newest, b->meta().max_t_ms);
  int64_t lo, hi;
  if (head_->UnflushedRange(&lo, &hi)) newest = std::max(newest, hi);
  return newest;
}

Status Store::EnforceRetention() {
  if (options_.read_only) return Status::Unavailable("the store is open read-only");
  std::lock_guard<std::mutex> lock(maintenance_mu_);
  const int64_t now = NewestSampleMs();
  const int64_t retention[kNumTiers] = {options_.raw_retention_ms, options_.rollup_1m_retention_ms,
                                        options_.rollup_1h_retention_ms};
  auto drop_tier = [&](const std::shared_ptr<const Block>& b, Tier tier) {
    return ReplaceBlocks({b}, [tier](uint8_t kind) { return ChunkKindTier(kind) != tier; });
  };
  for (int t = 0; t < kNumTiers; ++t) {
    for (const auto& b : Snapshot()) {
      const TierStats& ts = b->tier_stats(static_cast<Tier>(t));
      if (ts.chunks > 0 && ts.max_t_ms < now - retention[t])
        GW_RETURN_IF_ERROR(drop_tier(b, static_cast<Tier>(t)));
    }
  }
  // The disk budget: the oldest raw data first, then the oldest 1m, then 1h rollups.
  for (int guard = 0; guard < 100000; ++guard) {
    const BlockList blocks = Snapshot();
    uint64_t total = head_->wal_bytes();
    for (const auto& b : blocks) total += b->file_bytes();
    if (total <= options_.disk_budget_bytes) break;
    std::shared_ptr<const Block> victim;
    Tier victim_tier = Tier::kRaw;
    for (int t = 0; t < kNumTiers && !victim; ++t)
      for (const auto& b : blocks) {
        const TierStats& ts = b->tier_stats(static_cast<Tier>(t));
        if (ts.chunks == 0) continue;
        if (!victim || ts.min_t_ms < victim->tier_stats(static_cast<Tier>(t)).min_t_ms) {
          victim = b;
          victim_tier = static_cast<Tier>(t);
        }
      }
    if (!victim) break;  // only the WAL is left: it is flushed into blocks, then trimmed
    Report("store_budget", "warning",
           fmt::format("disk budget {} bytes exceeded ({} bytes): dropping {} data of {} ({}..{})",
                       options_.disk_budget_bytes, total, TierName(victim_tier),
                       BlockFileName(victim->meta().seq), victim->tier_stats(victim_tier).min_t_ms,
                       victim->tier_stats(victim_tier).max_t_ms));
    GW_RETURN_IF_ERROR(drop_tier(victim, victim_tier));
  }
  return Status::Ok();
}

Store::BlockList Store::Snapshot() const {
  std::shared_lock<std::shared_mutex> lock(blocks_mu_);
  return blocks_;
}

uint64_t Store::head_series() const { return head_->index().size(); }

StoreHealth Store::Health() const {
  StoreHealth h;
  {
    std::shared_lock<std::shared_mutex> lock(blocks_mu_);
    for (const auto& b : blocks_) {
      ++h.blocks;
      h.block_bytes += b->file_bytes();
    }
  }
  h.wal_bytes = head_->wal_bytes();
  h.head_series = head_series();
  h.write_errors = write_errors_.load(std::memory_order_relaxed);
  h.flush_errors = flush_errors_.load(std::memory_order_relaxed);
  return h;
}

StoreStats Store::Stats() const {
  StoreStats st;
  std::shared_lock<std::shared_mutex> lock(blocks_mu_);
  std::unordered_set<std::string> keys;
  for (const auto& b : blocks_) {
    ++st.blocks;
    st.block_bytes += b->file_bytes();
    for (uint32_t i = 0; i < b->num_series(); ++i) keys.insert(Key(b->labels(i)));
    for (int t = 0; t < kNumTiers; ++t) {
      const TierStats& ts = b->tier_stats(static_cast<Tier>(t));
      StoreTierStats& out = st.tiers[t];
      if (ts.chunks == 0) continue;
      out.min_t_ms = out.blocks == 0 ? ts.min_t_ms : std::min(out.min_t_ms, ts.min_t_ms);
      out.max_t_ms = out.blocks == 0 ? ts.max_t_ms : std::max(out.max_t_ms, ts.max_t_ms);
      ++out.blocks;
      out.samples += ts.samples;
      out.chunk_bytes += ts.chunk_bytes;
    }
  }
  const SeriesIndex& hi = head_->index();
  std::vector<Matcher> all;
  all.push_back(*Matcher::Make(MatchOp::kRegex, std::string(kMetricNameLabel), ".+"));
  for (SeriesRef r : hi.Select(all)) keys.insert(Key(hi.LabelsOf(r)));
  st.series = keys.size();
  st.head_series = hi.size();
  st.head_samples = head_->num_samples();
  st.samples = st.tiers[0].samples + st.head_samples;
  st.wal_bytes = head_->wal_bytes();
  st.bytes_on_disk = st.block_bytes + st.wal_bytes;
  return st;
}

Result<std::vector<SeriesSamples>> Store::SelectRaw(const std::vector<Matcher>& matchers,
                                                    int64_t mint_ms, int64_t maxt_ms) const {
  if (mint_ms > maxt_ms) return Status::InvalidArgument("start is after end");
  std::vector<SeriesSamples> out;
  std::unordered_map<std::string, size_t> by_key;
  auto entry = [&](const Labels& labels) -> SeriesSamples& {
    auto [it, fresh] = by_key.try_emplace(Key(labels), out.size());
    if (fresh) out.push_back({labels, {}});
    return out[it->second];
  };
  std::shared_lock<std::shared_mutex> lock(blocks_mu_);
  for (const auto& b : blocks_) {
    const TierStats& ts = b->tier_stats(Tier::kRaw);
    if (ts.chunks == 0 || !Overlaps(ts.min_t_ms, ts.max_t_ms, mint_ms, maxt_ms)) continue;
    for (SeriesRef i : b->Select(matchers)) {
      SeriesSamples* ss = nullptr;
      for (const ChunkMeta& m : b->chunks(i)) {
        if (m.kind != kRawChunkKind || !Overlaps(m.min_t_ms, m.max_t_ms, mint_ms, maxt_ms))
          continue;
        auto bytes = b->ReadChunk(m);
        if (!bytes.ok()) {
          GW_LOG_WARN("store: {}", bytes.status().message());
          continue;
        }
        if (!ss) ss = &entry(b->labels(i));
        DecodeInto(*bytes, mint_ms, maxt_ms, b->path(), &ss->samples);
      }
    }
  }
  for (auto& hs : head_->Query(matchers, mint_ms, maxt_ms)) {
    auto& ss = entry(hs.labels);
    ss.samples.insert(ss.samples.end(), hs.samples.begin(), hs.samples.end());
  }
  lock.unlock();
  for (auto& ss : out) SortUnique(&ss.samples);
  std::erase_if(out, [](const SeriesSamples& s) { return s.samples.empty(); });
  return out;
}

Result<std::vector<SeriesRollups>> Store::SelectRollups(Tier tier,
                                                        const std::vector<Matcher>& matchers,
                                                        int64_t mint_ms, int64_t maxt_ms,
                                                        uint32_t parts) const {
  if (tier == Tier::kRaw) return Status::InvalidArgument("SelectRollups needs the 1m or 1h tier");
  if (mint_ms > maxt_ms) return Status::InvalidArgument("start is after end");
  const int64_t width = TierWidthMs(tier);
  std::vector<SeriesRollups> out;
  std::unordered_map<std::string, size_t> by_key;
  auto entry = [&](const Labels& labels) -> SeriesRollups& {
    auto [it, fresh] = by_key.try_emplace(Key(labels), out.size());
    if (fresh) out.push_back({labels, {}});
    return out[it->second];
  };
  std::shared_lock<std::shared_mutex> lock(blocks_mu_);
  for (const auto& b : blocks_) {
    const TierStats& ts = b->tier_stats(tier);
    if (ts.chunks == 0 || !Overlaps(ts.min_t_ms, ts.max_t_ms, mint_ms, maxt_ms)) continue;
    for (SeriesRef i : b->Select(matchers)) {
      auto pts = ReadRollups(*b, i, tier, mint_ms, maxt_ms, parts);
      if (!pts.empty()) MergeRollups(&entry(b->labels(i)).points, pts);
    }
  }
  // The head's samples are rolled up on the fly: buckets starting within [mint, maxt].
  const int64_t first_bucket =
      BucketStart(mint_ms, width) == mint_ms ? mint_ms : BucketStart(mint_ms, width) + width;
  const int64_t raw_end = BucketStart(maxt_ms, width) + width - 1;
  if (first_bucket <= raw_end) {
    for (auto& hs : head_->Query(matchers, first_bucket, raw_end)) {
      std::vector<RollupPoint> pts;
      AppendRollups(hs.samples, width, &pts);
      MergeRollups(&entry(hs.labels).points, pts);
    }
  }
  lock.unlock();
  std::erase_if(out, [](const SeriesRollups& s) { return s.points.empty(); });
  return out;
}

TierCoverage Store::Coverage(Tier tier) const {
  TierCoverage c;
  bool any = false;
  auto add = [&](int64_t lo, int64_t hi) {
    c.min_t_ms = any ? std::min(c.min_t_ms, lo) : lo;
    c.max_t_ms = any ? std::max(c.max_t_ms, hi) : hi;
    any = true;
  };
  for (const auto& b : Snapshot()) {
    const TierStats& ts = b->tier_stats(tier);
    if (ts.chunks > 0) add(ts.min_t_ms, ts.max_t_ms);
  }
  int64_t lo, hi;
  if (head_->UnflushedRange(&lo, &hi)) add(lo, hi);
  return c;
}

Result<std::vector<Labels>> Store::Series(const std::vector<Matcher>& matchers, int64_t mint_ms,
                                          int64_t maxt_ms) const {
  if (mint_ms > maxt_ms) return Status::InvalidArgument("start is after end");
  std::map<std::string, Labels> found;
  std::shared_lock<std::shared_mutex> lock(blocks_mu_);
  for (const auto& b : blocks_) {
    if (!Overlaps(b->meta().min_t_ms, b->meta().max_t_ms, mint_ms, maxt_ms)) continue;
    for (SeriesRef i : b->Select(matchers))
      for (const ChunkMeta& m : b->chunks(i))
        if (Overlaps(m.min_t_ms, m.max_t_ms, mint_ms, maxt_ms)) {
          found.emplace(Key(b->labels(i)), b->labels(i));
          break;
        }
  }
  for (auto& l : head_->SeriesInRange(matchers, mint_ms, maxt_ms)) found.emplace(Key(l), l);
  std::vector<Labels> out;
  for (auto& [k, l] : found) out.push_back(std::move(l));
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::vector<std::string>> Store::LabelNames(const std::vector<Matcher>& matchers) const {
  std::set<std::string> names;
  auto add_from = [&](const SeriesIndex& idx) {
    if (matchers.empty()) {
      for (auto& n : idx.LabelNames()) names.insert(std::move(n));
      return;
    }
    for (SeriesRef r : idx.Select(matchers))
      for (const auto& l : idx.LabelsOf(r)) names.insert(l.name);
  };
  std::shared_lock<std::shared_mutex> lock(blocks_mu_);
  for (const auto& b : blocks_) add_from(b->index());
  add_from(head_->index());
  return std::vector<std::string>(names.begin(), names.end());
}

Result<std::vector<std::string>> Store::LabelValues(const std::string& name,
                                                    const std::vector<Matcher>& matchers) const {
  std::set<std::string> values;
  std::shared_lock<std::shared_mutex> lock(blocks_mu_);
  for (const auto& b : blocks_)
    for (auto& v : b->index().LabelValues(name, matchers)) values.insert(std::move(v));
  for (auto& v : head_->index().LabelValues(name, matchers)) values.insert(std::move(v));
  return std::vector<std::string>(values.begin(), values.end());
}

Result<StoreCheckReport> Store::Check(const std::string& dir, bool quarantine) {
  if (!fs::is_directory(dir)) return Status::NotFound(dir + " is not a directory");
  StoreCheckReport rep;
  int lock_fd = -1;
  if (quarantine) {
    auto fd = LockDir(dir);
    if (!fd.ok()) return fd.status();
    lock_fd = *fd;
  }
  const std::string blocks_dir = dir + "/blocks";
  std::vector<std::string> names;
  if (DIR* d = ::opendir(blocks_dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.ends_with(".gwb")) names.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  uint64_t max_seq = 0;
  for (const auto& n : names)
    if (auto seq = ParseInt<uint64_t>(std::string_view(n).substr(0, 8)))
      max_seq = std::max(max_seq, *seq);
  for (const auto& name : names) {
    const std::string path = blocks_dir + "/" + name;
    ++rep.blocks;
    auto damage = CheckBlock(path, &rep.chunks);
    if (damage.empty()) continue;
    rep.block_damage.insert(rep.block_damage.end(), damage.begin(), damage.end());
    if (!quarantine) continue;
    // Keep what is intact: a replacement block of the good chunks, then move the file aside.
    if (auto b = Block::Open(path); b.ok()) {
      max_seq = std::max(max_seq + 1, (*b)->meta().seq + 1);
      std::vector<const Block*> in = {b->get()};
      auto written = WriteMerged(
          blocks_dir, max_seq, in, [](uint8_t) { return true; }, nullptr);
      if (!written.ok()) return written.status();
    } else if (auto seq = ParseInt<uint64_t>(std::string_view(name).substr(0, 8))) {
      // No index: rebuild from the series records, as opening the store would, unless a
      // readable block replaced it (opening deletes it then: its data is there).
      std::vector<std::unique_ptr<Block>> others;
      std::vector<const Block*> readable;
      bool superseded = false;
      for (const auto& other : names) {
        if (other == name) continue;
        if (auto ob = Block::Open(blocks_dir + "/" + other); ob.ok()) {
          const auto& r = (*ob)->meta().replaces;
          superseded = superseded || std::find(r.begin(), r.end(), *seq) != r.end();
          readable.push_back(ob->get());
          others.push_back(std::move(ob).value());
        }
      }
      if (!superseded) {
        std::string written;
        const std::string what =
            SalvageUnreadable(blocks_dir, path, *seq, readable, max_seq + 1, &written);
        damage.back().reason += what;
        if (!written.empty()) ++max_seq;
      }
    }
    std::string why;
    for (const auto& d : damage) why += d.where + ": " + d.reason + "\n";
    GW_RETURN_IF_ERROR(MoveToQuarantine(dir, path, why));
    rep.quarantined.push_back("blocks/" + name);
  }
  if (fs::is_directory(dir + "/wal")) {
    auto wal = Wal::Check(dir + "/wal");
    if (!wal.ok()) return wal.status();
    rep.wal_segments = wal->segments;
    rep.wal_records = wal->records;
    rep.wal_damage = wal->damage;
    if (quarantine) {
      for (const auto& d : wal->damage) {
        if (d.torn_tail) continue;  // the next open cuts it off; nothing else is lost
        const std::string qdir = dir + "/quarantine";
        ::mkdir(qdir.c_str(), 0755);
        std::error_code ec;
        fs::copy_file(dir + "/wal/" + d.segment, qdir + "/" + d.segment,
                      fs::copy_options::overwrite_existing, ec);
        std::ofstream(qdir + "/" + d.segment + ".why")
            << "offset " << d.offset << ": " << d.reason << " (" << d.bytes_lost
            << " bytes after it are not replayed)\n";
        rep.quarantined.push_back("wal/" + d.segment + " (copied; intact records still replay)");
      }
    }
  }
  if (lock_fd >= 0) ::close(lock_fd);
  return rep;
}

}  // namespace gpuwatch::store
