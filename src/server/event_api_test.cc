#include "server/event_api.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

namespace gpuwatch::server {
namespace {

constexpr int64_t kNowMs = 1'700'000'000'000;

class EventApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/event_api_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    store::EventStoreOptions o;
    o.clock_ms = [] { return kNowMs; };
    auto s = store::EventStore::Open(dir_, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    events_ = std::move(s).value();
  }
  void TearDown() override {
    events_.reset();
    std::filesystem::remove_all(dir_);
  }
  ApiResponse Get(std::multimap<std::string, std::string> params) {
    ApiRequest r;
    r.path = "/api/v1/events";
    r.params = std::move(params);
    r.now_ms = kNowMs;
    return HandleEventsQuery(*events_, r, "node-a");
  }
  std::string dir_;
  std::unique_ptr<store::EventStore> events_;
};

model::GpuEvent Xid(int64_t t_ms, unsigned gpu, uint64_t code) {
  model::GpuEvent e;
  e.time_ms = t_ms;
  e.kind = model::GpuEventKind::kXid;
  e.gpu_index = gpu;
  e.uuid = "GPU-" + std::to_string(gpu);
  e.pci_bus_id = "00000000:18:00.0";
  e.code = code;
  e.text = "XID " + std::to_string(code);
  return e;
}

TEST_F(EventApiTest, GpuEventsRoundTripWithFiltersOldestFirst) {
  model::GpuEvent lost = Xid(kNowMs - 1000, 2, 0);
  lost.kind = model::GpuEventKind::kGpuLost;
  lost.text = "GPU is lost";
  ASSERT_TRUE(events_
                  ->Append({ToEventRecord(Xid(kNowMs - 5000, 2, 79), "node-a"),
                            ToEventRecord(Xid(kNowMs - 4000, 1, 13), "node-a"),
                            ToEventRecord(lost, "node-a")})
                  .ok());
  auto r = Get({});
  ASSERT_EQ(r.http_status, 200) << r.body;
  auto j = nlohmann::json::parse(r.body);
  ASSERT_EQ(j["events"].size(), 3u);
  EXPECT_EQ(j["events"][0]["xid"], 79);
  EXPECT_EQ(j["events"][0]["severity"], "critical");
  EXPECT_EQ(j["events"][0]["gpu"], 2);
  EXPECT_EQ(j["events"][0]["uuid"], "GPU-2");
  EXPECT_EQ(j["events"][1]["severity"], "warning");  // XID 13: an application error
  EXPECT_EQ(j["events"][2]["kind"], "gpu_lost");

  j = nlohmann::json::parse(Get({{"kind", "xid"}, {"gpu", "GPU-1"}}).body);
  ASSERT_EQ(j["events"].size(), 1u);
  EXPECT_EQ(j["events"][0]["xid"], 13);
  j = nlohmann::json::parse(Get({{"limit", "1"}}).body);
  ASSERT_EQ(j["events"].size(), 1u);
  EXPECT_EQ(j["events"][0]["kind"], "gpu_lost");  // the limit keeps the newest
  j = nlohmann::json::parse(Get({{"start", "1699999990"}, {"end", "1699999995.5"}}).body);
  EXPECT_EQ(j["events"].size(), 1u);
  j = nlohmann::json::parse(Get({{"exclude_kind", "gpu_lost,ecc_dbe"}}).body);
  ASSERT_EQ(j["events"].size(), 2u);
  EXPECT_EQ(j["events"][1]["xid"], 13);
}

TEST_F(EventApiTest, BadParametersAre400WithAReason) {
  for (auto params : std::vector<std::multimap<std::string, std::string>>{
           {{"limit", "0"}},
           {{"limit", "1000000"}},
           {{"start", "yesterday"}},
           {{"start", "1700000000"}, {"end", "1600000000"}},
           {{"exclude_kind", "Log Lines"}},
           {{"colour", "red"}}}) {
    auto r = Get(params);
    EXPECT_EQ(r.http_status, 400) << params.begin()->first;
    EXPECT_NE(r.body.find("\"errorType\":\"bad_data\""), std::string::npos) << r.body;
  }
}

TEST_F(EventApiTest, PostedAnnotationsAndJobEventsAreStoredAllOrNothing) {
  auto r =
      HandleEventsPost(events_.get(),
                       R"([{"time": 1699999990, "kind": "annotation", "text": "driver 550 -> 560"},
                                {"time_ms": 1699999995000, "kind": "job_start", "job": "4711",
                                 "severity": "info", "fields": {"ranks": 16}}])",
                       kNowMs, "node-a");
  ASSERT_EQ(r.http_status, 204) << r.body;
  auto j = nlohmann::json::parse(Get({{"job", "4711"}}).body);
  ASSERT_EQ(j["events"].size(), 1u);
  EXPECT_EQ(j["events"][0]["kind"], "job_start");
  EXPECT_EQ(j["events"][0]["ranks"], 16);
  EXPECT_EQ(j["events"][0]["node"], "node-a");
  j = nlohmann::json::parse(Get({{"kind", "annotation"}}).body);
  ASSERT_EQ(j["events"].size(), 1u);
  EXPECT_EQ(j["events"][0]["time_ms"], 1699999990000);

  // One bad event rejects the request, naming it; nothing of it is stored.
  for (const char* bad :
       {"not json", "42", R"([{"kind": "BAD KIND"}])",
        R"([{"kind": "log"}, {"kind": "log", "time": "noon"}])",
        R"([{"kind": "log", "colour": "red"}])", R"([{"kind": "log", "fields": [1]}])"}) {
    r = HandleEventsPost(events_.get(), bad, kNowMs, "node-a");
    EXPECT_EQ(r.http_status, 400) << bad;
    EXPECT_NE(r.body.find("bad_data"), std::string::npos) << r.body;
  }
  EXPECT_EQ(nlohmann::json::parse(Get({{"kind", "log"}}).body)["events"].size(), 0u);
}

}  // namespace
}  // namespace gpuwatch::server
