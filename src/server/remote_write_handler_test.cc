#include "server/remote_write_handler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "store/remote_write.h"

namespace gpuwatch::server {
namespace {

TEST(RemoteWriteHandlerTest, StoresAndReplies) {
  const std::string dir = ::testing::TempDir() + "/rw_handler_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  store::StoreOptions o;
  o.background = false;
  auto head = store::Store::Open(dir, o);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  store::RemoteSeries s;
  s.labels = {{"__name__", "DCGM_FI_DEV_GPU_UTIL"}, {"gpu", "0"}};
  s.samples = {{1000, 97}, {2000, 98}};
  auto r = HandleRemoteWrite(head->get(), store::EncodeRemoteWrite({s}), "snappy");
  EXPECT_EQ(r.status, 204) << r.body;
  EXPECT_EQ((*head)->Stats().samples, 2u);

  // The same request again: duplicates, still a success (a sender's retry).
  r = HandleRemoteWrite(head->get(), store::EncodeRemoteWrite({s}), "snappy");
  EXPECT_EQ(r.status, 204) << r.body;

  s.samples = {{500, 1}};
  r = HandleRemoteWrite(head->get(), store::EncodeRemoteWrite({s}), "snappy");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("1 out of order"), std::string::npos) << r.body;

  r = HandleRemoteWrite(head->get(), "garbage", "snappy");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("remote-write:"), std::string::npos) << r.body;
  r = HandleRemoteWrite(head->get(), store::EncodeRemoteWrite({s}), "gzip");
  EXPECT_EQ(r.status, 400);
  head->reset();
  std::filesystem::remove_all(dir);
}
// `to - from` series named junk{id="i"}, one sample each at t.
std::string JunkSeries(int from, int to, int64_t t) {
  std::vector<store::RemoteSeries> v;
  for (int i = from; i < to; ++i) {
    store::RemoteSeries s;
    s.labels = {{"__name__", "junk"}, {"id", std::to_string(i)}};
    s.samples = {{t, 1}};
    v.push_back(std::move(s));
  }
  return store::EncodeRemoteWrite(v);
}

class GateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/rw_gate_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    store::StoreOptions o;
    o.background = false;
    auto s = store::Store::Open(dir_, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  static std::string Series(int from, int to, int64_t t) { return JunkSeries(from, to, t); }
  std::string dir_;
  std::unique_ptr<store::Store> store_;
};

constexpr int64_t kWriteNowMs = 1'700'000'000'000;

// D1 (issue 17): a timestamp near INT64_MIN gets a 400 that names it, and the rest is stored.
TEST_F(GateTest, D1_TimestampNearInt64MinIsRefusedByName) {
  store::RemoteSeries s;
  s.labels = {{"__name__", "x"}};
  s.samples = {{INT64_MIN, 1}, {kWriteNowMs, 1}};
  RemoteWriteGate gate;
  const HttpReply r = gate.Handle(store_.get(), store::EncodeRemoteWrite({s}), "snappy", "a");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("1 samples stored, 1 with timestamps out of bounds"), std::string::npos)
      << r.body;
  EXPECT_TRUE(store_->Flush().ok());
}

// D6 (issue 17): new series are bounded per sender and in all; the first one over the limit is
// refused with the reason, existing series keep being accepted, and another sender has its own.
TEST_F(GateTest, D6_SeriesLimitsPerSenderAndInAll) {
  RemoteWriteOptions o;
  o.max_series_per_sender = 3;
  o.max_series = 5;
  RemoteWriteGate gate(o);
  EXPECT_EQ(gate.Handle(store_.get(), Series(0, 3, kWriteNowMs), "snappy", "a").status, 204);
  HttpReply r = gate.Handle(store_.get(), Series(3, 4, kWriteNowMs), "snappy", "a");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("over the series limit (3 per sender, 5 in all)"), std::string::npos)
      << r.body;
  // Its existing series are still taken.
  EXPECT_EQ(gate.Handle(store_.get(), Series(0, 3, kWriteNowMs + 1000), "snappy", "a").status, 204);
  // Sender b may create 2 more (5 in all), not 3.
  r = gate.Handle(store_.get(), Series(10, 13, kWriteNowMs), "snappy", "b");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("2 samples stored"), std::string::npos) << r.body;
  EXPECT_EQ(gate.counts().series_created, 5u);
  EXPECT_EQ(gate.counts().samples_refused_series_limit, 2u);
  auto values = store_->LabelValues("id", {});
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(values->size(), 5u);  // no phantom series from the refused ones
  // A restart (a new gate over the same store) does not reset the limit in all: it counts the
  // head's series.
  RemoteWriteGate after_restart(o);
  r = after_restart.Handle(store_.get(), Series(20, 21, kWriteNowMs), "snappy", "c");
  EXPECT_EQ(r.status, 400) << r.body;
}

// A sender's repeated series go in by the ref the gate learnt from its first request
// (store/remote_write.h, LabelDigest): each sample still lands in its own series, also when
// another store (here: created in the other order) takes the same bytes, and a forwarder
// still gets every series' labels.
TEST_F(GateTest, RepeatedSeriesGoInByRefIntoTheirOwnSeries) {
  auto body = [](std::vector<int> ids, int64_t t) {
    std::vector<store::RemoteSeries> v;
    for (int i : ids) {
      store::RemoteSeries s;
      s.labels = {{"__name__", "m"}, {"id", std::to_string(i)}};
      s.samples = {{t, static_cast<double>(i)}};
      v.push_back(std::move(s));
    }
    return store::EncodeRemoteWrite(v);
  };
  auto check = [](store::Store* st, int n) {
    auto got = st->SelectRaw(*store::ParseSelector("m"), 0, INT64_MAX);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(got->size(), 3u);
    for (const auto& s : *got) {
      ASSERT_EQ(s.samples.size(), static_cast<size_t>(n)) << store::LabelsToString(s.labels);
      for (const auto& x : s.samples)
        EXPECT_EQ(std::to_string(static_cast<int>(x.value)),
                  std::string(store::LabelValue(s.labels, "id")));
    }
  };
  RemoteWriteGate gate;
  for (int k = 0; k < 3; ++k)
    ASSERT_EQ(
        gate.Handle(store_.get(), body({0, 1, 2}, kWriteNowMs + k * 1000), "snappy", "a").status,
        204);
  check(store_.get(), 3);
  // Sender b's same bytes: its own table (learnt on its first request).
  ASSERT_EQ(gate.Handle(store_.get(), body({2, 0, 1}, kWriteNowMs + 5000), "snappy", "b").status,
            204);
  check(store_.get(), 4);

  const std::string other_dir = dir_ + "-other";
  std::filesystem::remove_all(other_dir);
  store::StoreOptions o;
  o.background = false;
  auto other = store::Store::Open(other_dir, o);
  ASSERT_TRUE(other.ok());
  ASSERT_EQ(gate.Handle(other->get(), body({2, 1, 0}, kWriteNowMs), "snappy", "a").status, 204);
  ASSERT_EQ(gate.Handle(other->get(), body({0, 1, 2}, kWriteNowMs + 1000), "snappy", "a").status,
            204);
  check(other->get(), 2);

  std::vector<std::string> forwarded;
  auto forward = [&](const std::vector<store::Head::Input>& batch) {
    for (const auto& in : batch)
      forwarded.push_back(store::LabelsToString(*store::MakeLabels(in.labels)));
  };
  ASSERT_EQ(gate.Handle(other->get(), body({0}, kWriteNowMs + 2000), "snappy", "a", forward).status,
            204);
  EXPECT_EQ(forwarded, std::vector<std::string>{"m{id=\"0\"}"});
  other->reset();
  std::filesystem::remove_all(other_dir);
}

// Senders decode at once (write.max_concurrency), each through its own table: four senders,
// each its own series, 20 requests each; every sample lands in its own series, once. (Under
// the sanitizers in CI, this is where a race would show.)
TEST_F(GateTest, SendersDecodeAtOnceEachIntoItsOwnSeries) {
  RemoteWriteOptions o;
  o.max_concurrent = 4;
  RemoteWriteGate gate(o);
  constexpr int kSenders = 4, kRequests = 20, kSeries = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int w = 0; w < kSenders; ++w)
    threads.emplace_back([&, w] {
      for (int k = 0; k < kRequests; ++k) {
        std::vector<store::RemoteSeries> v;
        for (int i = 0; i < kSeries; ++i) {
          store::RemoteSeries s;
          s.labels = {{"__name__", "m"}, {"w", std::to_string(w)}, {"i", std::to_string(i)}};
          s.samples = {{kWriteNowMs + k * 1000, static_cast<double>(w * 1000 + i)}};
          v.push_back(std::move(s));
        }
        const std::string sender = "s" + std::to_string(w);
        if (gate.Handle(store_.get(), store::EncodeRemoteWrite(v), "snappy", sender).status != 204)
          failed.fetch_add(1);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  auto got = store_->SelectRaw(*store::ParseSelector("m"), 0, INT64_MAX);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), static_cast<size_t>(kSenders * kSeries));
  for (const auto& s : *got) {
    ASSERT_EQ(s.samples.size(), static_cast<size_t>(kRequests)) << store::LabelsToString(s.labels);
    const double want = std::stoi(std::string(store::LabelValue(s.labels, "w"))) * 1000 +
                        std::stoi(std::string(store::LabelValue(s.labels, "i")));
    for (const auto& x : s.samples) EXPECT_EQ(x.value, want) << store::LabelsToString(s.labels);
  }
  EXPECT_EQ(gate.counts().series_created, static_cast<uint64_t>(kSenders * kSeries));
}

// D3 (issue 17): a 3 MB body that inflates to 64 MiB of empty labels is refused with 413 before
// it is decoded into gigabytes.
TEST_F(GateTest, D3_DecompressionBombIsRefused413) {
  store::RemoteSeries s;
  s.labels.assign(60, {"", ""});
  s.samples = {{kWriteNowMs, 1}};
  std::vector<store::RemoteSeries> many(40'000, s);
  const std::string body = store::EncodeRemoteWrite(many);
  RemoteWriteOptions o;
  o.decode.max_labels = 1'000'000;
  RemoteWriteGate gate(o);
  const HttpReply r = gate.Handle(store_.get(), body, "snappy", "a");
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_NE(r.body.find("labels in one request"), std::string::npos) << r.body;
  EXPECT_EQ(gate.counts().requests_refused_too_large, 1u);
}

// A relaying hub (--remote-write with --read-from) keeps nothing: what passes the checks goes to
// the spool as received; part refused, the rest goes re-encoded with a 400 that says why; the
// series bounds count what each sender was seen to send; a spool that fails is a 500 and
// learns nothing.
class RelayTest : public ::testing::Test {
 protected:
  HttpReply Relay(RemoteWriteGate& gate, const std::string& body, const std::string& sender,
                  Status fail = Status::Ok()) {
    return gate.Relay(body, "snappy", sender, kWriteNowMs,
                      [&](std::string_view b, uint64_t samples) {
                        if (!fail.ok()) return fail;
                        spooled_.emplace_back(b);
                        samples_ += samples;
                        return Status::Ok();
                      });
  }
  std::vector<std::string> spooled_;
  uint64_t samples_ = 0;
};

TEST_F(RelayTest, WhatPassesIsSpooledAsReceived) {
  RemoteWriteGate gate;
  const std::string body = JunkSeries(0, 3, kWriteNowMs);
  HttpReply r = Relay(gate, body, "a");
  EXPECT_EQ(r.status, 204) << r.body;
  ASSERT_EQ(spooled_.size(), 1u);
  EXPECT_EQ(spooled_[0], body) << "spooled as received, not re-encoded";
  EXPECT_EQ(samples_, 3u);
  EXPECT_EQ(gate.counts().series_created, 3u);
  // Known series (by digest) again, and a retry: passed on as they come.
  EXPECT_EQ(Relay(gate, body, "a").status, 204);
  EXPECT_EQ(spooled_.size(), 2u);
  EXPECT_EQ(gate.counts().series_created, 3u);

  // A sample too far ahead and one out of bounds: the rest goes, re-encoded; 400 says why.
  store::RemoteSeries s;
  s.labels = {{"__name__", "junk"}, {"id", "0"}};
  s.samples = {{kWriteNowMs + 1000, 1}, {kWriteNowMs + 7200 * 1000, 2}, {-5, 3}};
  store::RemoteSeries bad;
  bad.labels = {{"__name__", "junk"}, {"0bad", "x"}};
  bad.samples = {{kWriteNowMs, 1}};
  r = Relay(gate, store::EncodeRemoteWrite({s, bad}), "a");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("1 samples taken, 1 with invalid labels, 1 too far ahead, 1 with "
                        "timestamps out of bounds"),
            std::string::npos)
      << r.body;
  ASSERT_EQ(spooled_.size(), 3u);
  auto kept = store::DecodeRemoteWrite(spooled_[2]);
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(kept->size(), 1u);
  ASSERT_EQ((*kept)[0].samples.size(), 1u);
  EXPECT_EQ((*kept)[0].samples[0].t_ms, kWriteNowMs + 1000);
  EXPECT_EQ(samples_, 7u);

  // Nothing that passes: nothing is spooled.
  r = Relay(gate, store::EncodeRemoteWrite({bad}), "a");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(spooled_.size(), 3u);
  EXPECT_EQ(Relay(gate, "garbage", "a").status, 400);
  EXPECT_EQ(gate.Relay(body, "gzip", "a", kWriteNowMs, nullptr).status, 400);
}

TEST_F(RelayTest, SeriesBoundsPerSenderAndInAll) {
  RemoteWriteOptions o;
  o.max_series_per_sender = 3;
  o.max_series = 5;
  RemoteWriteGate gate(o);
  EXPECT_EQ(Relay(gate, JunkSeries(0, 3, kWriteNowMs), "a").status, 204);
  HttpReply r = Relay(gate, JunkSeries(3, 4, kWriteNowMs), "a");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("over the series limit (3 per sender, 5 in all)"), std::string::npos)
      << r.body;
  EXPECT_EQ(Relay(gate, JunkSeries(0, 3, kWriteNowMs + 1000), "a").status, 204);
  // b may add two more (five in all); the same new series twice in one request counts once.
  std::string twice = JunkSeries(10, 13, kWriteNowMs);
  auto joined = store::SnappyJoin({twice, twice});
  ASSERT_TRUE(joined.ok());
  r = Relay(gate, *joined, "b");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("4 samples taken"), std::string::npos) << r.body;
  EXPECT_EQ(gate.counts().series_created, 5u);
  EXPECT_EQ(gate.counts().samples_refused_series_limit, 3u);
}

TEST_F(RelayTest, ASpoolThatFailsIsA500AndLearnsNothing) {
  RemoteWriteOptions o;
  o.max_series_per_sender = 3;
  RemoteWriteGate gate(o);
  const std::string body = JunkSeries(0, 3, kWriteNowMs);
  HttpReply r = Relay(gate, body, "a", Status::IoError("disk full"));
  EXPECT_EQ(r.status, 500);
  EXPECT_NE(r.body.find("disk full"), std::string::npos) << r.body;
  EXPECT_EQ(gate.counts().series_created, 0u);
  // The retry is taken whole: the failed attempt used none of the sender's share.
  EXPECT_EQ(Relay(gate, body, "a").status, 204);
  EXPECT_EQ(gate.counts().series_created, 3u);
}

}  // namespace
}  // namespace gpuwatch::server
