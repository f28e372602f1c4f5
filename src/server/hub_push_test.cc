#include "server/hub_push.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "http/server.h"
#include "store/remote_write.h"

namespace gpuwatch::server {
namespace {

// A remote-write destination on loopback that keeps every body it is sent and answers with
// `status` (204 unless a test sets another).
class Receiver {
 public:
  Receiver() {
    server_.Route("POST", "/api/v1/write",
                  [this](const http::Request& req, http::Response& res) {
                    std::lock_guard<std::mutex> lock(mu_);
                    bodies_.push_back(req.body);
                    encodings_.push_back(req.Header("Content-Encoding"));
                    res.status = status_;
                    if (status_ == 503) res.SetHeader("Retry-After", "1");
                  },
                  {.access = http::Access::kWrite, .max_body_bytes = 64u << 20});
    EXPECT_TRUE(server_.Start("127.0.0.1", 0).ok());
  }
  ~Receiver() { server_.Stop(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }
  void set_status(int s) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = s;
  }
  std::vector<std::string> bodies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }
  std::vector<std::string> encodings() const {
    std::lock_guard<std::mutex> lock(mu_);
    return encodings_;
  }

 private:
  http::Server server_;
  mutable std::mutex mu_;
  std::vector<std::string> bodies_, encodings_;
  int status_ = 204;
};

class HubPushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hub_push_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::unique_ptr<HubPusher> Open(const Receiver& r, size_t max_inflated = size_t{16} << 20) {
    HubPushOptions o;
    o.url = r.url() + "/api/v1/write";
    o.records = false;
    o.spool_dir = dir_;
    o.spool.sync = false;
    o.max_requests_per_second = 1000;
    o.max_request_inflated_bytes = max_inflated;
    auto p = HubPusher::Open(o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }
  // One tick of `n` series named tick_series{i}, each with one sample at t.
  static std::vector<store::Head::Input> Tick(int n, int64_t t) {
    std::vector<store::Head::Input> v;
    for (int i = 0; i < n; ++i) {
      store::Head::Input in;
      in.labels = {{"__name__", "tick_series"}, {"i", std::to_string(i)}};
      in.samples.push_back({t, static_cast<double>(i)});
      v.push_back(std::move(in));
    }
    return v;
  }
  // (series label i, t) of every sample the bodies hold, in order.
  static std::vector<std::pair<std::string, int64_t>> Samples(
      const std::vector<std::string>& bodies) {
    std::vector<std::pair<std::string, int64_t>> out;
    for (const auto& b : bodies) {
      auto d = store::DecodeRemoteWrite(b);
      EXPECT_TRUE(d.ok()) << d.status().ToString();
      if (!d.ok()) continue;
      for (const auto& s : *d)
        for (const auto& x : s.samples) out.emplace_back(s.labels[1].value, x.t_ms);
    }
    return out;
  }
  std::string dir_;
};

// Entries spooled a second apart go out joined into one request without being inflated again
// (store::SnappyJoin), and the request holds every sample once, oldest first.
TEST_F(HubPushTest, JoinsSpooledEntriesIntoOneRequest) {
  Receiver r;
  auto p = Open(r);
  ASSERT_TRUE(p);
  for (int64_t t = 1000; t <= 3000; t += 1000) {
    p->AddSeries(Tick(4, t));
    ASSERT_TRUE(p->Flush().ok());
  }
  p->SendPending();
  const auto bodies = r.bodies();
  ASSERT_EQ(bodies.size(), 1u);
  EXPECT_EQ(r.encodings()[0], "snappy");
  const auto got = Samples(bodies);
  ASSERT_EQ(got.size(), 12u);
  EXPECT_EQ(got.front(), (std::pair<std::string, int64_t>{"0", 1000}));
  EXPECT_EQ(got.back(), (std::pair<std::string, int64_t>{"3", 3000}));
  EXPECT_EQ(p->counters().entries_sent, 3u);
  EXPECT_EQ(p->counters().backlog_entries, 0u);
}

// A request stops joining at max_request_inflated_bytes (receivers bound what one inflates
// to); each entry goes once.
TEST_F(HubPushTest, SplitsAtTheInflatedBound) {
  Receiver r;
  auto p = Open(r, /*max_inflated=*/1);  // every entry is over it: one entry a request
  ASSERT_TRUE(p);
  for (int64_t t = 1000; t <= 3000; t += 1000) {
    p->AddSeries(Tick(2, t));
    ASSERT_TRUE(p->Flush().ok());
  }
  p->SendPending();
  EXPECT_EQ(r.bodies().size(), 3u);
  EXPECT_EQ(Samples(r.bodies()).size(), 6u);
}

// A relaying hub's requests go into the spool as received and out joined with the rest; a
// destination that answers 503 keeps them, and they go once it takes them.
TEST_F(HubPushTest, RelayedRequestsGoAsReceivedAfterARetry) {
  Receiver r;
  auto p = Open(r);
  ASSERT_TRUE(p);
  std::vector<store::RemoteSeries> rs(1);
  rs[0].labels = {{"__name__", "tick_series"}, {"i", "relayed"}};
  rs[0].samples = {{500, 1}};
  ASSERT_TRUE(p->SpoolSamples(store::EncodeRemoteWrite(rs), 1).ok());
  p->AddSeries(Tick(1, 1000));
  ASSERT_TRUE(p->Flush().ok());
  EXPECT_GT(p->samples_spool_bytes(), 0u);
  r.set_status(503);
  p->SendPending();
  EXPECT_EQ(p->counters().backlog_entries, 2u) << "kept while the destination is down";
  r.set_status(204);
  sleep(1);  // the 503's Retry-After
  p->SendPending();
  const auto bodies = r.bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(Samples({bodies[1]}),
            (std::vector<std::pair<std::string, int64_t>>{{"relayed", 500}, {"0", 1000}}));
  EXPECT_EQ(p->counters().samples_spooled, 2u);
  EXPECT_EQ(p->counters().backlog_entries, 0u);
}

// An entry whose snappy header does not parse is skipped, named in the log, and the rest go.
TEST_F(HubPushTest, ADamagedEntryIsSkipped) {
  Receiver r;
  auto p = Open(r);
  ASSERT_TRUE(p);
  ASSERT_TRUE(p->SpoolSamples(std::string("\xff\xff\xff\xff\xff\xff", 6), 0).ok());
  p->AddSeries(Tick(1, 1000));
  ASSERT_TRUE(p->Flush().ok());
  p->SendPending();
  EXPECT_EQ(Samples(r.bodies()).size(), 1u);
  EXPECT_EQ(p->counters().backlog_entries, 0u);
}

}  // namespace
}  // namespace gpuwatch::server
