#include "store/event_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "store/testing/scratch_dir.h"

namespace gpuwatch::store {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kT0 = 1764460800000;  // 2025-11-30T00:00:00Z
constexpr int64_t kDay = 24ll * 3600 * 1000;

EventRecord Ev(int64_t t_ms, std::string kind, std::string node = "", std::string gpu = "",
               std::string job = "", std::string message = "") {
  EventRecord e;
  e.t_ms = t_ms;
  e.kind = std::move(kind);
  e.node = std::move(node);
  e.gpu = std::move(gpu);
  e.job = std::move(job);
  e.message = std::move(message);
  return e;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::vector<int64_t> Times(const std::vector<EventRecord>& events) {
  std::vector<int64_t> out;
  for (const auto& e : events) out.push_back(e.t_ms);
  return out;
}

class EventStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshScratchDir("events"); }
  void TearDown() override { fs::remove_all(dir_); }

  EventStoreOptions Options() {
    EventStoreOptions o;
    o.wal.sync = SyncPolicy::kNever;  // the WAL's own tests cover fsync; keep these fast
    o.clock_ms = [this] { return now_ms_; };
    return o;
  }
  std::unique_ptr<EventStore> OpenStore(EventStoreOptions o) {
    auto s = EventStore::Open(dir_, std::move(o));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::unique_ptr<EventStore> OpenStore() { return OpenStore(Options()); }

  static std::vector<EventRecord> All(const EventStore& s, bool newest_first = false) {
    EventQuery q;
    q.start_ms = 0;
    q.end_ms = std::numeric_limits<int64_t>::max();
    q.limit = kMaxEventQueryLimit;
    q.newest_first = newest_first;
    auto r = s.Query(q);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::vector<EventRecord>{};
  }
  std::vector<std::string> Segments() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }
  uint64_t DiskBytes() const {
    uint64_t n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.file_size();
    return n;
  }

  std::string dir_;
  int64_t now_ms_ = kT0 + 3600 * 1000;
};

TEST_F(EventStoreTest, RoundTripKeepsEveryField) {
  EventRecord xid = Ev(kT0 + 5, "xid", "node-a", "GPU-1111", "job-7", "XID 79: fallen off the bus");
  xid.severity = "critical";
  xid.fields_json = R"({"xid":79,"pci_bus_id":"00000000:18:00.0"})";
  EventRecord log = Ev(kT0 + 6, "log", "node-a", "", "", std::string("bin\0ary\xff", 8));
  EventRecord note = Ev(kT0 + 7, "annotation", "", "", "", "");
  note.severity = "info";
  auto store = OpenStore();
  ASSERT_TRUE(store->Append({xid, log, note}).ok());
  EXPECT_EQ(All(*store), (std::vector<EventRecord>{xid, log, note}));
  const auto st = store->stats();
  EXPECT_EQ(st.events, 3u);
  EXPECT_EQ(st.oldest_ms, kT0 + 5);
  EXPECT_EQ(st.newest_ms, kT0 + 7);
  EXPECT_EQ(st.bytes, DiskBytes());
}

TEST_F(EventStoreTest, FiltersAndLimits) {
  auto store = OpenStore();
  std::vector<EventRecord> batch;
  for (int i = 0; i < 100; ++i) {
    batch.push_back(Ev(kT0 + i * 1000, i % 10 == 0 ? "xid" : (i % 3 == 0 ? "log" : "ecc"),
                       "node-" + std::to_string(i % 2), "GPU-" + std::to_string(i % 4),
                       "job-" + std::to_string(i / 25), "line " + std::to_string(i)));
  }
  ASSERT_TRUE(store->Append(batch).ok());
  EventQuery q;
  q.start_ms = kT0;
  q.end_ms = kT0 + 99 * 1000;
  auto run = [&](const EventQuery& query) {
    auto r = store->Query(query);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::vector<EventRecord>{};
  };
  EXPECT_EQ(run(q).size(), 100u);
  EXPECT_EQ(run(q).front().t_ms, kT0 + 99 * 1000) << "newest first by default";

  EventQuery by_node = q;
  by_node.node = "node-1";
  for (const auto& e : run(by_node)) EXPECT_EQ(e.node, "node-1");
  EXPECT_EQ(run(by_node).size(), 50u);

  EventQuery by_gpu_job = q;
  by_gpu_job.gpu = "GPU-3";
  by_gpu_job.job = "job-1";  // i in 25..49, i % 4 == 3: 27, 31, …, 47
  EXPECT_EQ(Times(run(by_gpu_job)), (std::vector<int64_t>{kT0 + 47000, kT0 + 43000, kT0 + 39000,
                                                          kT0 + 35000, kT0 + 31000, kT0 + 27000}));

  EventQuery kinds = q;
  kinds.kinds = {"xid", "log", "xid", "never_seen"};
  size_t want = 0;
  for (const auto& e : batch) want += e.kind == "xid" || e.kind == "log";
  const auto got_kinds = run(kinds);
  EXPECT_EQ(got_kinds.size(), want);
  for (size_t i = 1; i < got_kinds.size(); ++i) EXPECT_GT(got_kinds[i - 1].t_ms, got_kinds[i].t_ms);

  EventQuery text = q;
  text.text_contains = "line 4";  // 4, 40..49
  EXPECT_EQ(run(text).size(), 11u);

  EventQuery window = q;  // inclusive at both ends
  window.start_ms = kT0 + 10000;
  window.end_ms = kT0 + 12000;
  window.newest_first = false;
  EXPECT_EQ(Times(run(window)), (std::vector<int64_t>{kT0 + 10000, kT0 + 11000, kT0 + 12000}));

  EventQuery limited = q;
  limited.limit = 3;
  EXPECT_EQ(Times(run(limited)), (std::vector<int64_t>{kT0 + 99000, kT0 + 98000, kT0 + 97000}));
  limited.newest_first = false;
  EXPECT_EQ(Times(run(limited)), (std::vector<int64_t>{kT0, kT0 + 1000, kT0 + 2000}));
  limited.kinds = {"xid"};
  EXPECT_EQ(Times(run(limited)), (std::vector<int64_t>{kT0, kT0 + 10000, kT0 + 20000}));

  EventQuery nothing = q;
  nothing.node = "node-9";
  EXPECT_TRUE(run(nothing).empty());
  nothing = q;
  nothing.kinds = {"never_seen"};
  EXPECT_TRUE(run(nothing).empty());
  nothing = q;
  nothing.node = "GPU-1";  // a value known in another dimension only
  EXPECT_TRUE(run(nothing).empty());
}

TEST_F(EventStoreTest, QueryValidation) {
  auto store = OpenStore();
  EventQuery q;
  q.start_ms = 10;
  q.end_ms = 9;
  auto r = store->Query(q);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("start_ms"), std::string::npos);
  q.end_ms = 10;
  q.limit = 0;
  EXPECT_EQ(store->Query(q).status().code(), StatusCode::kInvalidArgument);
  q.limit = kMaxEventQueryLimit + 1;
  r = store->Query(q);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("limit"), std::string::npos);
  q.limit = kMaxEventQueryLimit;
  q.kinds = {"Bad Kind"};
  EXPECT_EQ(store->Query(q).status().code(), StatusCode::kInvalidArgument);
  q.kinds.clear();
  EXPECT_TRUE(store->Query(q).ok());
}

TEST_F(EventStoreTest, InvalidRecordsRejectedNamingTheField) {
  struct Case {
    std::string field;
    EventRecord e;
  };
  const EventRecord ok = Ev(kT0, "xid", "n", "GPU-1", "j", "m");
  std::vector<Case> cases;
  auto add = [&](std::string field, auto mutate) {
    EventRecord e = ok;
    mutate(e);
    cases.push_back({std::move(field), std::move(e)});
  };
  add("t_ms", [](EventRecord& e) { e.t_ms = -1; });
  add("t_ms", [&](EventRecord& e) { e.t_ms = now_ms_ + kDay + 1; });  // a clock set wrong
  add("kind", [](EventRecord& e) { e.kind = "XID"; });
  add("kind", [](EventRecord& e) { e.kind = ""; });
  add("kind", [](EventRecord& e) { e.kind = std::string(65, 'a'); });
  add("kind", [](EventRecord& e) { e.kind = "job-start"; });
  add("severity", [](EventRecord& e) { e.severity = "fatal"; });
  add("node", [](EventRecord& e) { e.node = std::string(kMaxEventIdBytes + 1, 'n'); });
  add("gpu", [](EventRecord& e) { e.gpu = std::string(kMaxEventIdBytes + 1, 'g'); });
  add("job", [](EventRecord& e) { e.job = std::string(kMaxEventIdBytes + 1, 'j'); });
  add("message", [](EventRecord& e) { e.message = std::string(kMaxEventMessageBytes + 1, 'm'); });
  add("fields_json", [](EventRecord& e) { e.fields_json = "[1,2]"; });
  add("fields_json", [](EventRecord& e) { e.fields_json = "{"; });
  add("fields_json", [](EventRecord& e) {
    e.fields_json = "{\"a\":\"" + std::string(kMaxEventFieldsBytes, 'x') + "\"}";
  });

  auto store = OpenStore();
  for (const Case& c : cases) {
    Status st = store->Append({ok, c.e});
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(st.message().find("event " + c.field), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("event 1 of the batch"), std::string::npos) << st.message();
    EXPECT_LT(st.message().size(), 300u) << "long values are shortened in errors";
  }
  EXPECT_TRUE(All(*store).empty()) << "a batch with a bad event stores nothing";
  EXPECT_EQ(store->stats().bytes, 0u);

  EventRecord edge = ok;  // the limits themselves are fine
  edge.kind = std::string(64, 'z');
  edge.node = std::string(kMaxEventIdBytes, 'n');
  edge.message = std::string(kMaxEventMessageBytes, 'm');
  edge.fields_json = " {} ";
  edge.severity = "warning";
  edge.t_ms = now_ms_ + kDay;
  EXPECT_TRUE(store->Append({edge}).ok());

  std::vector<EventRecord> huge(300, edge);  // ~20 MB: more than one WAL record holds
  Status st = store->Append(huge);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("split"), std::string::npos) << st.message();
  EXPECT_EQ(All(*store).size(), 1u);
}

TEST_F(EventStoreTest, ReplayAfterReopen) {
  std::vector<EventRecord> want;
  {
    auto store = OpenStore();
    for (int b = 0; b < 20; ++b) {
      std::vector<EventRecord> batch;
      for (int i = 0; i < 5; ++i)
        batch.push_back(Ev(kT0 + b * 100 + i, b % 2 ? "job_start" : "job_end", "node",
                           "GPU-" + std::to_string(i), "job-" + std::to_string(b)));
      ASSERT_TRUE(store->Append(batch).ok());
      want.insert(want.end(), batch.begin(), batch.end());
    }
  }
  auto store = OpenStore();
  EXPECT_EQ(All(*store), want);
  EXPECT_TRUE(store->stats().damage.empty());
  EventQuery q;
  q.start_ms = kT0;
  q.end_ms = kT0 + 10000;
  q.job = "job-3";
  auto r = store->Query(q);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 5u);
  ASSERT_TRUE(store->Append({Ev(kT0 + 5000, "annotation")}).ok());
  store.reset();
  store = OpenStore();
  EXPECT_EQ(All(*store).size(), want.size() + 1);
}

TEST_F(EventStoreTest, OutOfOrderEventsAreInsertedInTimeOrder) {
  auto store = OpenStore();
  ASSERT_TRUE(store->Append({Ev(kT0 + 50, "xid", "n1"), Ev(kT0 + 10, "xid", "n1")}).ok());
  ASSERT_TRUE(store->Append({Ev(kT0 + 30, "xid", "n1"), Ev(kT0 + 60, "ecc", "n2")}).ok());
  ASSERT_TRUE(store->Append({Ev(kT0 + 30, "log", "n1"), Ev(kT0 + 20, "xid", "n1")}).ok());
  const std::vector<int64_t> want = {kT0 + 10, kT0 + 20, kT0 + 30, kT0 + 30, kT0 + 50, kT0 + 60};
  EXPECT_EQ(Times(All(*store)), want);
  const auto all = All(*store);
  EXPECT_EQ(all[2].kind, "xid") << "equal times keep arrival order";
  EXPECT_EQ(all[3].kind, "log");
  EventQuery q;
  q.start_ms = kT0;
  q.end_ms = kT0 + 100;
  q.node = "n1";
  q.kinds = {"xid"};
  q.newest_first = false;
  auto r = store->Query(q);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Times(*r), (std::vector<int64_t>{kT0 + 10, kT0 + 20, kT0 + 30, kT0 + 50}));
  store.reset();
  store = OpenStore();
  EXPECT_EQ(All(*store), all) << "replay sorts the same way";
}

TEST_F(EventStoreTest, SegmentsRotateByEventDay) {
  now_ms_ = kT0 + 3 * kDay;
  auto store = OpenStore();
  ASSERT_TRUE(store->Append({Ev(kT0 + 1000, "log")}).ok());
  ASSERT_TRUE(store->Append({Ev(kT0 + kDay - 1, "log")}).ok());
  EXPECT_EQ(Segments().size(), 1u);
  ASSERT_TRUE(store->Append({Ev(kT0 + kDay, "log")}).ok());
  EXPECT_EQ(Segments().size(), 2u) << "a new UTC day starts a segment";
  ASSERT_TRUE(store->Append({Ev(kT0 + 5, "log")}).ok());
  EXPECT_EQ(Segments().size(), 2u) << "a late event joins the current segment";
  ASSERT_TRUE(store->Append({Ev(kT0 + 3 * kDay, "log")}).ok());
  EXPECT_EQ(Segments(), (std::vector<std::string>{"00000001.wal", "00000002.wal", "00000003.wal"}));
  EXPECT_EQ(store->stats().segments, 3u);
}

TEST_F(EventStoreTest, RetentionByAgeDropsWholeSegments) {
  EventStoreOptions o = Options();
  o.segment_span_ms = 1000;
  o.retention_ms = 5000;
  now_ms_ = kT0;
  {
    auto store = OpenStore(o);
    for (int s = 0; s < 10; ++s) {
      now_ms_ = kT0 + s * 1000 + 999;
      ASSERT_TRUE(store
                      ->Append({Ev(kT0 + s * 1000, "log", "n", "", "job-" + std::to_string(s)),
                                Ev(kT0 + s * 1000 + 999, "log")})
                      .ok());
    }
    // Appends that start a segment also apply retention: the newest-first 5 s are kept.
    EXPECT_EQ(All(*store).front().t_ms, kT0 + 4000);
    now_ms_ = kT0 + 12000;
    ASSERT_TRUE(store->EnforceRetention(now_ms_).ok());
    // Kept: segments whose newest event is >= now - 5 s = kT0 + 7000: seconds 7, 8, 9 (and 6,
    // whose newest event is kT0 + 6999, goes).
    EXPECT_EQ(All(*store).front().t_ms, kT0 + 7000);
    EXPECT_EQ(store->stats().events, 6u);
    EXPECT_EQ(store->stats().bytes, DiskBytes());
    EXPECT_EQ(Segments().size(), 3u);
    EventQuery q;
    q.start_ms = 0;
    q.end_ms = kT0 + kDay;
    q.job = "job-2";  // gone with its segment
    EXPECT_TRUE(store->Query(q)->empty());
  }
  now_ms_ = kT0 + 14500;  // on Open too: second 7 and 8 expire
  auto store = OpenStore(o);
  EXPECT_EQ(Times(All(*store)), (std::vector<int64_t>{kT0 + 9000, kT0 + 9999}));
  EXPECT_EQ(store->stats().segments_dropped, 2u);
}

TEST_F(EventStoreTest, RetentionDropsEvenTheCurrentSegmentThenKeepsWriting) {
  EventStoreOptions o = Options();
  o.retention_ms = 1000;
  auto store = OpenStore(o);
  ASSERT_TRUE(store->Append({Ev(now_ms_, "log")}).ok());
  ASSERT_TRUE(store->EnforceRetention(now_ms_ + 5000).ok());
  EXPECT_TRUE(All(*store).empty());
  EXPECT_EQ(Segments(), (std::vector<std::string>{"00000002.wal"}));
  EXPECT_EQ(store->stats().bytes, 0u);
  ASSERT_TRUE(store->Append({Ev(now_ms_ + 5000, "log")}).ok());
  store.reset();
  EXPECT_EQ(Times(All(*OpenStore(o))), (std::vector<int64_t>{now_ms_ + 5000}));
}

TEST_F(EventStoreTest, RetentionByBytesKeepsTheNewest) {
  EventStoreOptions o = Options();
  o.wal.segment_bytes = 1024;
  o.retention_bytes = 4096;
  auto store = OpenStore(o);
  for (int i = 0; i < 200; ++i)
    ASSERT_TRUE(
        store->Append({Ev(kT0 + i, "log", "n", "", "", std::string(100, 'a' + i % 26))}).ok());
  const auto st = store->stats();
  EXPECT_LE(st.bytes, o.retention_bytes + o.wal.segment_bytes);
  EXPECT_LE(st.bytes, o.retention_bytes) << "appends over the budget apply retention";
  EXPECT_GT(st.bytes, o.retention_bytes - o.wal.segment_bytes);
  EXPECT_EQ(st.bytes, DiskBytes());
  EXPECT_GT(st.segments_dropped, 0u);
  const auto all = All(*store);
  EXPECT_EQ(all.back().t_ms, kT0 + 199);
  EXPECT_GT(all.front().t_ms, kT0 + 100);
  EXPECT_EQ(all.size(), st.events);
  // Every event from the oldest kept one on is there: whole segments go.
  EXPECT_EQ(static_cast<int64_t>(all.size()), kT0 + 200 - all.front().t_ms);

  store.reset();
  o.retention_bytes = 2048;  // a smaller budget applies on Open
  store = OpenStore(o);
  EXPECT_LE(store->stats().bytes, 2048u);
  EXPECT_EQ(All(*store).back().t_ms, kT0 + 199);
}

TEST_F(EventStoreTest, TornTailIsCutOffAndWritingContinues) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store->Append({Ev(kT0, "xid", "n")}).ok());
    ASSERT_TRUE(store->Append({Ev(kT0 + 1, "xid", "n")}).ok());
  }
  const std::string seg = dir_ + "/00000001.wal";
  const std::string bytes = ReadFile(seg);
  // Cut the second record at every length: the first event always survives.
  const size_t first_end = bytes.size() / 2;  // two records of the same size
  for (size_t len = first_end; len < bytes.size(); ++len) {
    {
      std::ofstream out(seg, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(len));
    }
    auto check = EventStore::Check(dir_);
    ASSERT_TRUE(check.ok());
    EXPECT_EQ(check->events, 1u);
    auto store = OpenStore();
    ASSERT_EQ(Times(All(*store)), (std::vector<int64_t>{kT0})) << "len " << len;
    if (len > first_end) {
      ASSERT_EQ(store->stats().damage.size(), 1u);
      EXPECT_TRUE(store->stats().damage[0].torn_tail);
    }
    EXPECT_EQ(fs::file_size(seg), first_end);
  }
  auto store = OpenStore();
  ASSERT_TRUE(store->Append({Ev(kT0 + 2, "xid", "n")}).ok());
  store.reset();
  EXPECT_EQ(Times(All(*OpenStore())), (std::vector<int64_t>{kT0, kT0 + 2}));
}

// D10 (issue 17): replay resumes at the next intact record, so a flipped byte costs one record.
TEST_F(EventStoreTest, FlippedByteInOldSegmentLosesOnlyThatRecord) {
  EventStoreOptions o = Options();
  o.wal.segment_bytes = 512;
  {
    auto store = OpenStore(o);
    for (int i = 0; i < 60; ++i)
      ASSERT_TRUE(
          store->Append({Ev(kT0 + i, "log", "n", "", "", "event " + std::to_string(i))}).ok());
    ASSERT_GE(Segments().size(), 4u);
  }
  const std::string seg2 = dir_ + "/00000002.wal";
  std::string bytes = ReadFile(seg2);
  const size_t flip = bytes.size() - 50;  // in one of the last records
  bytes[flip] ^= 0x20;
  std::ofstream(seg2, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());

  auto check = EventStore::Check(dir_);
  ASSERT_TRUE(check.ok());
  ASSERT_EQ(check->wal.damage.size(), 1u);
  EXPECT_EQ(check->wal.damage[0].segment, "00000002.wal");
  EXPECT_FALSE(check->wal.damage[0].torn_tail);
  EXPECT_LE(check->wal.damage[0].offset, flip);
  EXPECT_LT(check->wal.damage[0].offset + check->wal.damage[0].bytes_lost, bytes.size());
  EXPECT_NE(check->wal.damage[0].reason.find("replay resumed at the next intact record"),
            std::string::npos);
  EXPECT_EQ(check->bytes, DiskBytes());
  EXPECT_EQ(ReadFile(seg2), bytes) << "Check changes nothing";

  auto store = OpenStore(o);
  const auto all = All(*store);
  EXPECT_EQ(all.size(), 59u);
  EXPECT_EQ(all.size(), check->events);
  EXPECT_EQ(all.front().t_ms, kT0) << "the segment before is whole";
  EXPECT_EQ(all.back().t_ms, kT0 + 59) << "the segments after are whole";
  ASSERT_EQ(store->stats().damage.size(), 1u);
  EXPECT_EQ(store->stats().damage[0].segment, "00000002.wal");
  EXPECT_EQ(ReadFile(seg2), bytes) << "old damage is left for store check";
  EXPECT_TRUE(store->Append({Ev(kT0 + 60, "log")}).ok());
}

// A record the WAL accepts (CRC right) whose body is not an event batch: skipped, counted.
TEST_F(EventStoreTest, UndecodableRecordsAreSkippedAndCounted) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store->Append({Ev(kT0, "xid")}).ok());
  }
  {
    auto wal = Wal::Open(dir_, {}, nullptr, nullptr);
    ASSERT_TRUE(wal.ok());
    ASSERT_TRUE((*wal)->Append(kEventBatchRecord, "\x01\x05garbage").ok());
    ASSERT_TRUE(
        (*wal)->Append(kEventBatchRecord, std::string("\x02\x00", 2)).ok());  // a future version
    ASSERT_TRUE((*wal)->Append(99, EncodeEventBatch({Ev(kT0 + 1, "xid")})).ok());
  }
  auto store = OpenStore();
  ASSERT_TRUE(store->Append({Ev(kT0 + 2, "xid")}).ok());
  EXPECT_EQ(Times(All(*store)), (std::vector<int64_t>{kT0, kT0 + 2}));
  EXPECT_EQ(store->stats().undecodable_records, 3u);
  auto check = EventStore::Check(dir_);
  ASSERT_TRUE(check.ok());
  EXPECT_EQ(check->undecodable_records, 3u);
  EXPECT_EQ(check->events, 2u);
  EXPECT_EQ(check->wal.records, 5u);
  EXPECT_EQ(check->oldest_ms, kT0);
  EXPECT_EQ(check->newest_ms, kT0 + 2);
}

// Disk full (a file-size limit): the failing append stores nothing, the store keeps serving
// what it had, and everything acknowledged is there after reopening.
TEST_F(EventStoreTest, DiskFullFailsCleanly) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of being killed
    auto store = EventStore::Open(dir_, Options());
    if (!store.ok()) _exit(10);
    rlimit lim{4096, 4096};
    setrlimit(RLIMIT_FSIZE, &lim);
    uint64_t acked = 0;
    Status last;
    for (int i = 0; i < 1000; ++i) {
      last = (*store)->Append({Ev(kT0 + i, "log", "n", "", "", std::string(100, 'x'))});
      if (!last.ok()) break;
      ++acked;
    }
    if (last.code() != StatusCode::kIoError) _exit(11);
    if (All(**store).size() != acked) _exit(12);
    if ((*store)->stats().events != acked) _exit(13);
    if ((*store)->Append({Ev(kT0, "log", "", "", "", std::string(200, 'y'))}).ok()) _exit(14);
    if (write(fds[1], &acked, sizeof(acked)) != sizeof(acked)) _exit(15);
    _exit(0);
  }
  close(fds[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  uint64_t acked = 0;
  ASSERT_EQ(read(fds[0], &acked, sizeof(acked)), static_cast<ssize_t>(sizeof(acked)));
  close(fds[0]);
  EXPECT_GT(acked, 0u);
  auto store = OpenStore();
  EXPECT_EQ(All(*store).size(), acked);
  EXPECT_TRUE(store->stats().damage.empty()) << "no partial record was left behind";
}

TEST_F(EventStoreTest, QueriesRunWhileAppending) {
  auto store = OpenStore();
  std::atomic<bool> done{false};
  std::thread reader([&] {
    size_t last = 0;
    while (!done) {
      const size_t n = All(*store).size();
      EXPECT_GE(n, last);
      EXPECT_EQ(n % 4, 0u) << "a batch is indexed whole";
      last = n;
    }
  });
  for (int b = 0; b < 200; ++b) {
    std::vector<EventRecord> batch;
    for (int i = 0; i < 4; ++i) batch.push_back(Ev(kT0 + b * 4 + i, "log", "n"));
    ASSERT_TRUE(store->Append(batch).ok());
  }
  done = true;
  reader.join();
  EXPECT_EQ(All(*store).size(), 800u);
}

// The byte layout of docs/format/events.md, pinned.
TEST(EventBatchTest, EncodingMatchesTheFormatDoc) {
  EventRecord a = Ev(1000, "xid", "n1", "G", "", "hi");
  a.severity = "critical";
  a.fields_json = "{}";
  EventRecord b = Ev(999, "log");
  const std::string want(
      "\x01\x02"                          // version 1, 2 events
      "\x13"                              // event 1: 19 bytes
      "\xd0\x0f"                          //   zigzag(1000 - 0) = 2000
      "\x03xid"                           //   kind
      "\x03"                              //   severity: critical
      "\x02n1\x01G\x00\x02hi"             //   node, gpu, job, message
      "\x02{}"                            //   fields_json
      "\x0b"                              // event 2: 11 bytes
      "\x01"                              //   zigzag(999 - 1000) = 1
      "\x03log\x00\x00\x00\x00\x00\x00",  // kind, severity none, empty strings
      2 + 1 + 19 + 1 + 11);
  EXPECT_EQ(EncodeEventBatch({a, b}), want);
  auto back = DecodeEventBatch(want);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, (std::vector<EventRecord>{a, b}));
}

TEST(EventBatchTest, DecoderRejectsDamageAndSkipsAppendedFields) {
  EventRecord e = Ev(kT0, "ecc", "node", "GPU-1", "job", "double-bit error");
  e.severity = "warning";
  const std::string good = EncodeEventBatch({e, e});
  for (size_t len = 0; len < good.size(); ++len)
    EXPECT_FALSE(DecodeEventBatch(good.substr(0, len)).ok()) << "truncated to " << len;
  EXPECT_FALSE(DecodeEventBatch(good + "x").ok()) << "trailing bytes";
  EXPECT_EQ(DecodeEventBatch(std::string("\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 11))
                .status()
                .code(),
            StatusCode::kCorruption)
      << "a varint past 64 bits";
  EXPECT_FALSE(
      DecodeEventBatch(std::string("\x01\x01\x09\x00\x01X\x00\x00\x00\x00\x00\x00", 12)).ok())
      << "an invalid kind decodes to an error, not an event";
  EXPECT_FALSE(
      DecodeEventBatch(std::string("\x01\x01\x09\x00\x01x\x04\x00\x00\x00\x00\x00", 12)).ok())
      << "unknown severity 4";
  EXPECT_TRUE(DecodeEventBatch(std::string("\x01\x00", 2)).ok()) << "an empty batch";
  // A later writer's extra field at the end of an event body is skipped.
  const std::string one = EncodeEventBatch({e});
  std::string extended = one.substr(0, 2);
  extended += static_cast<char>(one[2] + 3);
  extended += one.substr(3) + "\x07\x01z";
  auto decoded = DecodeEventBatch(extended);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, std::vector<EventRecord>{e});
}

// The fuzz seeds in tests/fixtures/events are real batches (GPUWATCH_WRITE_FIXTURES=1 rewrites
// them from here).
TEST(EventBatchTest, FuzzSeedsDecode) {
  EventRecord xid = Ev(kT0, "xid", "node-a", "GPU-5e8b1c6e-aaaa-bbbb-cccc-0123456789ab", "",
                       "XID 79: GPU has fallen off the bus");
  xid.severity = "critical";
  xid.fields_json = R"({"xid":79,"pci_bus_id":"00000000:18:00.0"})";
  EventRecord start = Ev(kT0 + 10, "job_start", "node-a", "", "slurm-4242", "job started");
  start.severity = "info";
  EventRecord log = Ev(kT0 + 5, "log", "node-b", "", "slurm-4242", "NCCL WARN timeout");
  const std::vector<std::pair<std::string, std::vector<EventRecord>>> seeds = {
      {"xid.bin", {xid}},
      {"job_and_log.bin", {start, log, Ev(kT0 + 11, "annotation")}},
      {"empty.bin", {}},
  };
  const std::string dir = std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/events/";
  const bool write = std::getenv("GPUWATCH_WRITE_FIXTURES") != nullptr;
  for (const auto& [name, events] : seeds) {
    const std::string bytes = EncodeEventBatch(events);
    if (write) std::ofstream(dir + name, std::ios::binary).write(bytes.data(), bytes.size());
    EXPECT_EQ(ReadFile(dir + name), bytes) << name;
    auto decoded = DecodeEventBatch(ReadFile(dir + name));
    ASSERT_TRUE(decoded.ok()) << name;
    EXPECT_EQ(*decoded, events) << name;
  }
}

// D2 (issue 17): 18 posts of 15 MB of annotations erased the node's XID history through the
// shared byte budget. Bulk kinds live in their own partition with their own budget.
TEST_F(EventStoreTest, D2_BulkKindsNeverEvictHardwareEvents) {
  EventStoreOptions o = Options();
  o.wal.segment_bytes = 4096;
  o.bulk_kinds = {"log", "annotation"};
  o.bulk_retention_bytes = 16 * 1024;
  {
    auto store = OpenStore(o);
    ASSERT_TRUE(store->Append({Ev(kT0, "xid", "n", "0", "", "REAL")}).ok());
    for (int i = 0; i < 200; ++i)
      ASSERT_TRUE(store
                      ->Append({Ev(kT0 + 1 + i, "annotation", "n", "", "", std::string(500, 'J')),
                                Ev(kT0 + 1 + i, "log", "n", "", "", "line")})
                      .ok());
    ASSERT_TRUE(store->EnforceRetention(kT0 + 1000).ok());
    EventQuery q;
    q.start_ms = kT0;
    q.end_ms = kT0 + 1000;
    q.kinds = {"xid"};
    auto xid = store->Query(q);
    ASSERT_TRUE(xid.ok());
    ASSERT_EQ(xid->size(), 1u);
    EXPECT_EQ((*xid)[0].message, "REAL");
    // The bulk partition kept its budget (plus the segment being written) and dropped its
    // oldest; queries merge both partitions in time order.
    EXPECT_LE(store->BulkStats().bytes, 16u * 1024 + 4096);
    EXPECT_GT(store->stats().segments_dropped, 0u);
    q.kinds = {};
    q.limit = 3;
    auto newest = store->Query(q);
    ASSERT_TRUE(newest.ok());
    ASSERT_EQ(newest->size(), 3u);
    EXPECT_EQ((*newest)[0].t_ms, kT0 + 200);
    // Excluding a kind leaves it out of the limit: the newest three that are not log lines.
    q.exclude_kinds = {"log"};
    auto no_logs = store->Query(q);
    ASSERT_TRUE(no_logs.ok());
    ASSERT_EQ(no_logs->size(), 3u);
    for (const auto& e : *no_logs) EXPECT_EQ(e.kind, "annotation");
    // Every bulk kind excluded: only the hardware event, from the own partition.
    q.exclude_kinds = {"annotation", "log"};
    auto hw = store->Query(q);
    ASSERT_TRUE(hw.ok());
    ASSERT_EQ(hw->size(), 1u);
    EXPECT_EQ((*hw)[0].kind, "xid");
    // A kind no event has excludes nothing; an invalid one is refused, naming it.
    q.exclude_kinds = {"no_such_kind"};
    EXPECT_EQ(store->Query(q)->size(), 3u);
    q.exclude_kinds = {"Bad Kind"};
    auto bad = store->Query(q);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("Bad Kind"), std::string::npos);
  }
  // Reopened, and as store check reads it, both partitions are there.
  auto check = EventStore::Check(dir_);
  ASSERT_TRUE(check.ok());
  auto store = OpenStore(o);
  EXPECT_EQ(check->events, store->stats().events);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/bulk"));
}

}  // namespace
}  // namespace gpuwatch::store
