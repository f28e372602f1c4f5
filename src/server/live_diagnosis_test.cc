// Live diagnosis reads the flight recorder tick by tick and must conclude what a replay of the
// same records concludes (issue 7: findings live and in replay alike).
#include "server/live_diagnosis.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cluster_sim/simulator.h"
#include "trace/flight_recorder.h"
#include "trace/trace_reader.h"

namespace gpuwatch::server {
namespace {

using nlohmann::json;

struct Sim {
  std::vector<std::pair<int64_t, std::string>> lines;  // (t_ms, line)
  std::string text;
};

Sim Simulated(const std::string& fault) {
  cluster_sim::SimOptions o;
  o.shape = "4xH100";
  o.duration_s = 600;
  o.seed = 3;
  auto spec = cluster_sim::ParseFaultSpec(fault);
  EXPECT_TRUE(spec.ok());
  o.faults = {*spec};
  auto out = cluster_sim::Simulate(o);
  EXPECT_TRUE(out.ok()) << out.status().message();
  Sim s;
  for (const std::string& l : out->trace_lines) {
    s.lines.push_back({std::llround(json::parse(l)["t"].get<double>() * 1000), l});
    s.text += l + "\n";
  }
  return s;
}

// The findings of a replay of the same lines, as the document's JSON.
json Replayed(const Sim& s) {
  auto reader = trace::TraceReader::OpenBuffer(s.text, "sim.jsonl");
  EXPECT_TRUE(reader.ok());
  analyze::Diagnoser d;
  trace::TraceRecord r;
  double end = 0;
  while (true) {
    auto more = (*reader)->Next(&r);
    if (!more.ok() || !*more) break;
    d.Observe(r);
    end = r.t;
  }
  return analyze::FindingsDocument(d.Finish(end), json::object())["findings"];
}

TEST(LiveDiagnosisTest, TickByTickConcludesWhatAReplayConcludes) {
  const Sim s = Simulated("thermal_throttle:gpu=3,onset=300,severity=0.8");
  trace::FlightRecorder recorder(
      trace::FlightRecorderOptions{size_t{256} << 20, std::chrono::hours(1)});
  LiveDiagnosis live([&](int64_t a, int64_t b) { return recorder.Window(a, b); });
  // The agent adds records as they happen and ticks every 5 s.
  size_t next = 0, read = 0;
  const int64_t t0 = s.lines.front().first, end = s.lines.back().first;
  for (int64_t now = t0; now <= end + LiveDiagnosis::kLagMs + 5000; now += 5000) {
    while (next < s.lines.size() && s.lines[next].first <= now) {
      recorder.Add(s.lines[next].first, s.lines[next].second);
      ++next;
    }
    read += live.Tick(now);
  }
  // Every record once, plus the node record Window repeats at each window's start.
  EXPECT_GE(read, s.lines.size());
  const json doc = live.Document();
  EXPECT_TRUE(doc["stats"]["live"].get<bool>());
  EXPECT_EQ(doc["stats"]["read_errors"], 0);
  ASSERT_FALSE(doc["findings"].empty());
  EXPECT_EQ(doc["findings"][0]["cause"], "thermal_throttle");
  EXPECT_EQ(doc["findings"][0]["gpu"], 3);
  EXPECT_EQ(doc["findings"], Replayed(s));
  // Filters: by node, by a job that has no finding.
  EXPECT_EQ(live.Document("", "sim-H100-00")["findings"].size(), doc["findings"].size());
  EXPECT_TRUE(live.Document("no-such-job")["findings"].empty());
}

TEST(LiveDiagnosisTest, RecordsWithinTheLagWaitForTheNextTick) {
  const Sim s = Simulated("ecc_dbe:gpu=1,onset=120");
  trace::FlightRecorder recorder;
  for (const auto& [t, l] : s.lines) recorder.Add(t, l);
  LiveDiagnosis live([&](int64_t a, int64_t b) { return recorder.Window(a, b); });
  const int64_t dbe_ms = s.lines.front().first + 120 * 1000;
  // Up to just before the DBE (plus the lag): nothing yet.
  live.Tick(dbe_ms - 1000 + LiveDiagnosis::kLagMs);
  EXPECT_TRUE(live.Document()["findings"].empty());
  EXPECT_EQ(live.Tick(dbe_ms - 1000 + LiveDiagnosis::kLagMs), 0u);  // same instant: no re-read
  live.Tick(dbe_ms + 1000 + LiveDiagnosis::kLagMs);
  const json f = live.Document()["findings"];
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0]["cause"], "ecc_dbe");
  EXPECT_EQ(f[0]["severity"], "critical");
}

}  // namespace
}  // namespace gpuwatch::server
