#include "server/hub_ingest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "store/testing/scratch_dir.h"

namespace gpuwatch::server {
namespace {

namespace fs = std::filesystem;
constexpr char kSpool[] = "0123456789abcdef0123456789abcdef";
constexpr int64_t kNowMs = 1'764'460'900'000;

std::string NodeLine(const std::string& node, double t, const std::string& driver) {
  return R"({"t":)" + std::to_string(t) + R"(,"type":"node","node":")" + node +
         R"(","driver_version":")" + driver +
         R"(","cuda_version":"12.4","clock_offset_ms":0.4,"gpus":[{"index":0},{"index":1}]})";
}
std::string GpuLine(const std::string& node, double t) {
  return R"({"t":)" + std::to_string(t) + R"(,"type":"gpu","node":")" + node +
         R"(","gpu":0,"util_pct":97})";
}

class HubIngestTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = store::testing::FreshScratchDir("hub_ingest"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<HubIngest> Open() {
    HubIngestOptions o;
    o.data_dir = dir_;
    o.sync = false;
    auto h = HubIngest::Open(o);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return h.ok() ? std::move(h).value() : nullptr;
  }
  std::string dir_;
};

TEST_F(HubIngestTest, AnEntryIsTakenOnceAcrossRetriesAndHubRestarts) {
  auto hub = Open();
  const std::string body =
      NodeLine("gpu-a01", 1764460800, "550.90.07") + "\n" + GpuLine("gpu-a01", 1764460801) + "\n";
  auto r = hub->HandleRecords(body, "gpu-a01", kSpool, "1", kNowMs);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(hub->RecordedLines(), 2u);
  // The retry of a request whose reply was lost: taken nowhere again.
  r = hub->HandleRecords(body, "gpu-a01", kSpool, "1", kNowMs);
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("\"duplicate\":true"), std::string::npos) << r.body;
  EXPECT_EQ(hub->RecordedLines(), 2u);
  // The hub restarts: its log gives the stream position back.
  hub.reset();
  hub = Open();
  // What it knew of the node, and its recent records for the diagnosis (its node record
  // once), come back too.
  ASSERT_EQ(hub->Nodes().size(), 1u);
  EXPECT_EQ(hub->Nodes()[0].driver_version, "550.90.07");
  EXPECT_EQ(hub->Nodes()[0].gpus, 2u);
  EXPECT_EQ(hub->RecordedLines(), 2u);
  r = hub->HandleRecords(body, "gpu-a01", kSpool, "1", kNowMs);
  EXPECT_NE(r.body.find("\"duplicate\":true"), std::string::npos) << r.body;
  EXPECT_EQ(hub->RecordedLines(), 2u);
  r = hub->HandleRecords(GpuLine("gpu-a01", 1764460802), "gpu-a01", kSpool, "2", kNowMs);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(hub->RecordedLines(), 3u);
  // A new spool (the agent's data dir was wiped) is a new stream from 1.
  r = hub->HandleRecords(GpuLine("gpu-a01", 1764460803), "gpu-a01",
                         "fedcba9876543210fedcba9876543210", "1", kNowMs);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(hub->RecordedLines(), 4u);
  // Entries the agent's spool dropped are a gap, counted.
  r = hub->HandleRecords(GpuLine("gpu-a01", 1764460804), "gpu-a01",
                         "fedcba9876543210fedcba9876543210", "5", kNowMs);
  EXPECT_EQ(r.status, 200);
  auto nodes = hub->Nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].gap_entries, 3u);
  EXPECT_EQ(nodes[0].next_seq, 6u);
}

// A node resending ten minutes of backlog appends to its own recorder; the window merges all
// nodes by time, each node's records in their order.
TEST_F(HubIngestTest, TheWindowMergesNodesInTimeOrder) {
  auto hub = Open();
  const double t0 = kNowMs / 1000 - 600;
  hub->HandleRecords(GpuLine("a", t0 + 1) + "\n" + GpuLine("a", t0 + 3), "a", kSpool, "1", kNowMs);
  hub->HandleRecords(GpuLine("b", t0 + 2) + "\n" + GpuLine("b", t0 + 4), "b", kSpool, "1", kNowMs);
  hub->HandleRecords(GpuLine("b", t0 + 5), "b", kSpool, "2", kNowMs);
  auto w = hub->Window(static_cast<int64_t>(t0 * 1000), static_cast<int64_t>((t0 + 10) * 1000));
  ASSERT_EQ(w.size(), 5u);
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_NE(w[i].find(std::to_string(t0 + 1 + static_cast<double>(i)).substr(0, 10)),
              std::string::npos)
        << i << ": " << w[i];
  EXPECT_EQ(hub->Window(static_cast<int64_t>((t0 + 4) * 1000), kNowMs).size(), 2u);
}

// The diagnosis keeps each node's place: a node whose first entry lands after the diagnosis
// read past its records' times (its agent pushed a moment after the others) still has them
// read, its node record first; and what was read is not read again. Node records come in any
// key order (here sorted, as `gpuwatch sim` writes them).
TEST_F(HubIngestTest, TheDiagnosisReadsANodeThatPushedLate) {
  auto hub = Open();
  const double t0 = kNowMs / 1000 - 600;
  const std::string a_node = nlohmann::json::parse(NodeLine("a", t0, "550.90.07")).dump();
  const std::string b_node = nlohmann::json::parse(NodeLine("b", t0, "535.104.05")).dump();
  ASSERT_EQ(
      hub->HandleRecords(a_node + "\n" + GpuLine("a", t0 + 4), "a", kSpool, "1", kNowMs).status,
      200);
  const int64_t t4 = static_cast<int64_t>((t0 + 4) * 1000);
  auto first = hub->DiagnosisWindow(t4);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0], a_node);
  // b's first entry, stamped before what was read already.
  ASSERT_EQ(
      hub->HandleRecords(b_node + "\n" + GpuLine("b", t0 + 3), "b", kSpool, "1", kNowMs).status,
      200);
  hub->HandleRecords(GpuLine("a", t0 + 8), "a", kSpool, "2", kNowMs);
  auto next = hub->DiagnosisWindow(static_cast<int64_t>((t0 + 8) * 1000));
  // a's node record in force, b's node record and record, a's new record; in time order.
  ASSERT_EQ(next.size(), 4u) << nlohmann::json(next).dump();
  EXPECT_EQ(next[0], a_node);
  EXPECT_EQ(next[1], b_node);
  EXPECT_NE(next[2].find(R"("node":"b")"), std::string::npos) << next[2];
  EXPECT_NE(next[3].find(R"("node":"a")"), std::string::npos) << next[3];
  // Nothing new: each node's node record in force alone (the diagnosis takes it as the same
  // node seen again).
  auto again = hub->DiagnosisWindow(static_cast<int64_t>((t0 + 8) * 1000) + 500);
  EXPECT_EQ(again, (std::vector<std::string>{a_node, b_node}));
  // The trace API's window is unchanged by it.
  EXPECT_EQ(
      hub->Window(static_cast<int64_t>(t0 * 1000), static_cast<int64_t>((t0 + 8) * 1000)).size(),
      5u);
}

// A restarted hub reads its nodes' recent past again: the newest entries of each node's log go
// back into its recorder (the diagnosis reads them, the node record first) and the job list
// (a running job keeps its ranks), bounded by the recorder's bytes: of 400 entries of ~9 KiB
// with a 64 KiB recorder, only the newest few are read back.
TEST_F(HubIngestTest, ARestartedHubReadsItsNodesRecentPastAgain) {
  HubIngestOptions o;
  o.data_dir = dir_;
  o.sync = false;
  o.node_recorder_bytes = 64 << 10;
  auto hub = std::move(HubIngest::Open(o)).value();
  const double t0 = kNowMs / 1000 - 600;
  const std::string pad(9000, 'x');
  for (int i = 0; i < 400; ++i) {
    std::string body = i == 0 ? NodeLine("a", t0, "550.90.07") + "\n" : "";
    const double t = t0 + 1 + i;
    body += R"({"t":)" + std::to_string(t) +
            R"(,"type":"step","node":"a","job":"j7","rank":1,"gpu":1,"step":)" + std::to_string(i) +
            R"(,"duration_s":1.0,"comm_s":0.2,"note":")" + pad + "\"}\n";
    ASSERT_EQ(hub->HandleRecords(body, "a", kSpool, std::to_string(i + 1), kNowMs).status, 200);
  }
  hub.reset();
  hub = std::move(HubIngest::Open(o)).value();
  // The job is listed again, its rank on its node and GPU.
  auto job = hub->jobs().Job("j7");
  ASSERT_TRUE(job.has_value());
  ASSERT_EQ(job->ranks.size(), 1u);
  EXPECT_EQ(job->ranks[0].node, "a");
  // The diagnosis reads the reloaded steps, the newest last, after the node record in force.
  auto window = hub->DiagnosisWindow(static_cast<int64_t>((t0 + 400) * 1000));
  ASSERT_GE(window.size(), 3u);
  EXPECT_NE(window[0].find(R"("type":"node")"), std::string::npos) << window[0].substr(0, 80);
  EXPECT_NE(window.back().find(R"("step":399)"), std::string::npos);
  // Bounded: a few entries' worth, not the log's 400.
  EXPECT_LE(window.size(), 1u + (64 << 10) / 9000 + 1);
  EXPECT_LE(hub->RecordedLines(), 1u + (64 << 10) / 9000 + 1);
  // The stream goes on from where it was: the next entry is taken, an old one is a duplicate.
  EXPECT_NE(
      hub->HandleRecords(GpuLine("a", t0 + 401), "a", kSpool, "400", kNowMs).body.find("duplicate"),
      std::string::npos);
  EXPECT_EQ(hub->HandleRecords(GpuLine("a", t0 + 401), "a", kSpool, "401", kNowMs).status, 200);
}

// The job list outlives the hub (fleet-jobs.json): a job that ended long before the logs' tails
// is still listed, and every step is counted once whether the hub saved just before it died,
// long before, or never could read its file.
TEST_F(HubIngestTest, TheJobListOutlivesARestartCountingEveryStepOnce) {
  HubIngestOptions o;
  o.data_dir = dir_;
  o.sync = false;
  o.node_recorder_bytes = 64 << 10;
  const double t0 = kNowMs / 1000 - 600;
  const std::string pad(9000, 'x');
  auto entry = [&](int i) {
    std::string body;
    if (i == 0)
      body = NodeLine("a", t0, "550.90.07") + "\n" + R"({"t":)" + std::to_string(t0) +
             R"(,"type":"job","node":"a","job":"j6","state":"start","user":"ann"})" + "\n" +
             R"({"t":)" + std::to_string(t0 + 0.5) +
             R"(,"type":"job","node":"a","job":"j6","state":"end","exit_code":0})" + "\n";
    return body + R"({"t":)" + std::to_string(t0 + 1 + i) +
           R"(,"type":"step","node":"a","job":"j7","rank":1,"gpu":1,"step":)" + std::to_string(i) +
           R"(,"duration_s":1.0,"comm_s":0.2,"note":")" + pad + "\"}\n";
  };
  auto push = [&](HubIngest& hub, int from, int to) {
    for (int i = from; i < to; ++i)
      ASSERT_EQ(hub.HandleRecords(entry(i), "a", kSpool, std::to_string(i + 1), kNowMs).status,
                200);
  };
  auto steps_of_j7 = [](HubIngest& hub) {
    auto j = hub.jobs().Job("j7");
    return j && j->ranks.size() == 1 ? j->ranks[0].steps_total : 0;
  };
  auto hub = std::move(HubIngest::Open(o)).value();
  push(*hub, 0, 200);
  ASSERT_TRUE(hub->SaveJobs().ok());
  push(*hub, 200, 300);  // then the hub is killed: 100 entries past the snapshot
  hub.reset();

  hub = std::move(HubIngest::Open(o)).value();
  EXPECT_EQ(steps_of_j7(*hub), 300u);
  auto j6 = hub->jobs().Job("j6");
  ASSERT_TRUE(j6.has_value());
  EXPECT_EQ(j6->state, "finished");
  EXPECT_EQ(j6->user, "ann");
  // The windows are refilled from the tail: the newest steps, not all 300.
  auto j7 = hub->jobs().Job("j7");
  EXPECT_GT(j7->window.steps, 0u);
  EXPECT_EQ(j7->ranks[0].last_step, 299u);
  push(*hub, 300, 310);
  EXPECT_EQ(steps_of_j7(*hub), 310u);

  // Saved when it stops: nothing is counted again on the next start.
  ASSERT_TRUE(hub->SaveJobs().ok());
  hub.reset();
  hub = std::move(HubIngest::Open(o)).value();
  EXPECT_EQ(steps_of_j7(*hub), 310u);

  // A damaged file: the hub starts, and the job list is what the logs' tails hold (j6, long
  // before them, is gone; j7 counts only the steps reloaded).
  hub.reset();
  {
    std::ofstream out(dir_ + "/fleet-jobs.json", std::ios::trunc);
    out << R"({"version":1,"positions":{"a":3},"jobs":[{"id":)";
  }
  hub = std::move(HubIngest::Open(o)).value();
  EXPECT_FALSE(hub->jobs().Job("j6").has_value());
  EXPECT_GT(steps_of_j7(*hub), 0u);
  EXPECT_LT(steps_of_j7(*hub), 20u);
}

// A node's records directory removed while the hub was down: its log starts again at entry 1,
// below the position the saved job list holds, and those entries are new steps, counted.
TEST_F(HubIngestTest, ANodeWhoseLogIsGoneCountsItsNewEntries) {
  auto step = [](int i) {
    return R"({"t":)" + std::to_string(kNowMs / 1000 - 300 + i) +
           R"(,"type":"step","node":"a","job":"j7","rank":0,"gpu":0,"step":)" + std::to_string(i) +
           R"(,"duration_s":1.0})" + "\n";
  };
  auto steps_of_j7 = [](HubIngest& hub) {
    auto j = hub.jobs().Job("j7");
    return j && j->ranks.size() == 1 ? j->ranks[0].steps_total : 0;
  };
  auto hub = Open();
  for (int i = 0; i < 10; ++i)
    ASSERT_EQ(hub->HandleRecords(step(i), "a", kSpool, std::to_string(i + 1), kNowMs).status, 200);
  ASSERT_TRUE(hub->SaveJobs().ok());
  hub.reset();
  fs::remove_all(dir_ + "/records/a");
  hub = Open();
  EXPECT_EQ(steps_of_j7(*hub), 10u);
  EXPECT_EQ(hub->jobs().Position("a"), 0u);
  const std::string spool2 = "fedcba9876543210fedcba9876543210";
  for (int i = 10; i < 15; ++i)
    ASSERT_EQ(hub->HandleRecords(step(i), "a", spool2, std::to_string(i - 9), kNowMs).status, 200);
  EXPECT_EQ(steps_of_j7(*hub), 15u);
  hub.reset();  // killed before the next save
  hub = Open();
  EXPECT_EQ(steps_of_j7(*hub), 15u);
}

TEST_F(HubIngestTest, EveryRefusalSaysWhyAndKeepsNothing) {
  auto hub = Open();
  struct Case {
    std::string body, node, spool, seq, want;
  };
  const std::vector<Case> cases = {
      {GpuLine("a", 1), "../etc", kSpool, "1", "X-Gpuwatch-Node"},
      {GpuLine("a", 1), "a", "xyz", "1", "X-Gpuwatch-Spool"},
      {GpuLine("a", 1), "a", kSpool, "0", "X-Gpuwatch-Seq"},
      {GpuLine("a", 1), "a", kSpool, "-3", "X-Gpuwatch-Seq"},
      {GpuLine("a", 1) + "\n[1,2]", "a", kSpool, "1", "line 2: not a JSON object"},
      {R"({"type":"gpu"})", "a", kSpool, "1", "line 1: a trace record needs"},
      {R"({"t":-5,"type":"gpu"})", "a", kSpool, "1", "not a time"},
      // A wild clock two hours ahead would age every other node out of the recorder.
      {GpuLine("a", kNowMs / 1000 + 7200), "a", kSpool, "1", "ahead of the hub's clock"},
      // A node's write token cannot speak for another node.
      {GpuLine("b", 1), "a", kSpool, "1", "names node \"b\" but the entry comes from a"},
  };
  for (const auto& c : cases) {
    auto r = hub->HandleRecords(c.body, c.node, c.spool, c.seq, kNowMs);
    EXPECT_EQ(r.status, 400) << c.body;
    EXPECT_NE(r.body.find(c.want), std::string::npos) << r.body;
  }
  EXPECT_EQ(hub->RecordedLines(), 0u);
  EXPECT_TRUE(hub->Nodes().empty() || hub->Nodes()[0].records == 0);
}

TEST_F(HubIngestTest, TheNodeBoundRefusesNewNodesWith429) {
  HubIngestOptions o;
  o.max_nodes = 2;
  auto hub = std::move(HubIngest::Open(o)).value();
  EXPECT_EQ(hub->HandleRecords(GpuLine("a", 1), "a", kSpool, "1", kNowMs).status, 200);
  EXPECT_EQ(hub->HandleRecords(GpuLine("b", 1), "b", kSpool, "1", kNowMs).status, 200);
  auto r = hub->HandleRecords(GpuLine("c", 1), "c", kSpool, "1", kNowMs);
  EXPECT_EQ(r.status, 429);
  EXPECT_NE(r.body.find("at most 2 nodes"), std::string::npos);
  EXPECT_EQ(hub->HandleRecords(GpuLine("a", 2), "a", kSpool, "2", kNowMs).status, 200);
}

TEST_F(HubIngestTest, DiagnosisWaitsForTheSlowestLiveNode) {
  HubIngestOptions o;
  o.stale_after_ms = 60'000;
  auto hub = std::move(HubIngest::Open(o)).value();
  EXPECT_EQ(hub->DiagnosisTimeMs(kNowMs), -1);
  hub->HandleRecords(GpuLine("a", 1764460890), "a", kSpool, "1", kNowMs);
  // b is catching up after an outage: its newest record is 5 minutes old.
  hub->HandleRecords(GpuLine("b", 1764460600), "b", kSpool, "1", kNowMs);
  EXPECT_EQ(hub->DiagnosisTimeMs(kNowMs), 1764460600'000);
  // A node silent for longer than stale_after_ms no longer holds the others back.
  EXPECT_EQ(hub->DiagnosisTimeMs(kNowMs + 61'000), -1);
}

TEST_F(HubIngestTest, NodeHealthComesFromCardFindingsAndSilence) {
  auto hub = Open();
  hub->HandleRecords(NodeLine("a", 1764460800, "550.90.07"), "a", kSpool, "1", kNowMs);
  hub->HandleRecords(NodeLine("b", 1764460800, "550.90.07"), "b", kSpool, "1", kNowMs);
  hub->HandleRecords(NodeLine("c", 1764460800, "535.129.03"), "c", kSpool, "1", kNowMs - 600'000);
  std::vector<analyze::Finding> findings;
  auto dbe = analyze::MakeFinding(model::Cause::kEccDbe, model::Severity::kCritical, "a", 3);
  dbe.summary = "uncorrectable ECC errors";
  findings.push_back(dbe);
  // A job's own trouble says nothing of the node.
  findings.push_back(
      analyze::MakeFinding(model::Cause::kDataStall, model::Severity::kWarning, "b"));
  auto doc = hub->NodesJson(findings, kNowMs);
  ASSERT_EQ(doc["nodes"].size(), 3u);
  EXPECT_EQ(doc["nodes"][0]["health"], "drain_recommended");
  EXPECT_NE(doc["nodes"][0]["reason"].get<std::string>().find("ecc_dbe on GPU 3"),
            std::string::npos);
  EXPECT_EQ(doc["nodes"][0]["gpus"], 2);
  EXPECT_EQ(doc["nodes"][0]["driver_version"], "550.90.07");
  EXPECT_EQ(doc["nodes"][1]["health"], "healthy");
  EXPECT_EQ(doc["nodes"][2]["health"], "degraded");
  EXPECT_NE(doc["nodes"][2]["reason"].get<std::string>().find("no data from the node for 600 s"),
            std::string::npos);
}

}  // namespace
}  // namespace gpuwatch::server
