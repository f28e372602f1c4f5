// The simulator's physics, and healthy runs without fault signatures (property tests over
// seeds), checked through the real trace reader and diagnoser.
#include "cluster_sim/simulator.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "analyze/diagnoser.h"
#include "eval/scoring.h"
#include "trace/trace_reader.h"

namespace gpuwatch::cluster_sim {
namespace {

using nlohmann::json;

SimOutput SimulateOk(SimOptions o) {
  auto r = Simulate(o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : SimOutput{};
}

std::vector<analyze::Finding> Diagnose(const SimOutput& s) {
  std::string text;
  for (const auto& l : s.trace_lines) text += l + "\n";
  auto reader = trace::TraceReader::OpenBuffer(text, "sim.jsonl");
  EXPECT_TRUE(reader.ok());
  analyze::Diagnoser d;
  trace::TraceRecord r;
  double end = 0;
  while (true) {
    auto more = (*reader)->Next(&r);
    EXPECT_TRUE(more.ok()) << more.status().message();
    if (!more.ok() || !*more) break;
    d.Observe(r);
    end = r.t;
  }
  EXPECT_EQ((*reader)->Stats().out_of_order, 0u);
  return d.Finish(end);
}

// The trace's records, parsed once (the tests also run under ASan, where parsing dominates).
std::vector<json> Records(const SimOutput& s) {
  std::vector<json> out;
  out.reserve(s.trace_lines.size());
  for (const auto& l : s.trace_lines) out.push_back(json::parse(l));
  return out;
}

// Mean of a field over GPU (or step, host) records in [from, to) seconds after the start.
double Mean(const std::vector<json>& recs, const std::string& type, const std::string& field,
            double from, double to, int gpu = -1) {
  double sum = 0, n = 0;
  const double t0 = recs.empty() ? 0 : recs.front()["t"].get<double>();
  for (const json& j : recs) {
    const double t = j["t"].get<double>() - t0;
    if (j["type"] != type || t < from || t >= to || !j.contains(field)) continue;
    if (gpu >= 0 && j.value("gpu", -1) != gpu) continue;
    sum += j[field].get<double>();
    ++n;
  }
  return n > 0 ? sum / n : 0;
}

TEST(SimulatorTest, HealthyRunsHaveNoFaultSignatures) {
  for (const char* shape : {"8xH100", "8xA100", "4xL40S", "8x4090"}) {
    for (uint64_t seed : {1, 2}) {
      SimOptions o;
      o.shape = shape;
      o.seed = seed;
      o.duration_s = 600;
      const SimOutput s = SimulateOk(o);
      EXPECT_EQ(json::parse(s.truth_json)["faults"].size(), 0u);
      for (const auto& f : Diagnose(s)) {
        ADD_FAILURE() << shape << " seed " << seed << ": " << f.cause << " " << f.summary;
      }
    }
  }
}

TEST(SimulatorTest, ThermalFaultSlowsTheGpuAndEveryStep) {
  SimOptions o;
  o.seed = 7;
  o.faults = {{"thermal_throttle", 0, 3, 400, 0.8}};
  const SimOutput s = SimulateOk(o);
  const std::vector<json> recs = Records(s);
  const double clock_before = Mean(recs, "gpu", "sm_clock_mhz", 200, 390, 3);
  const double clock_after = Mean(recs, "gpu", "sm_clock_mhz", 600, 800, 3);
  const double peer_after = Mean(recs, "gpu", "sm_clock_mhz", 600, 800, 2);
  EXPECT_LT(clock_after, clock_before * 0.95);
  EXPECT_GT(peer_after, clock_after);
  // Synchronous ranks: the slowest GPU sets every step's pace.
  EXPECT_GT(Mean(recs, "step", "duration_s", 600, 800),
            Mean(recs, "step", "duration_s", 200, 390) * 1.03);
  EXPECT_GT(Mean(recs, "gpu", "temp_c", 600, 800, 3), 85);
  const json truth = json::parse(s.truth_json)["faults"];
  ASSERT_EQ(truth.size(), 1u);
  EXPECT_EQ(truth[0]["gpu"], 3);
  EXPECT_GT(truth[0]["start"].get<double>(), o.start_unix_s + 400);  // the first throttled sample
}

TEST(SimulatorTest, DataStallIdlesEveryGpuTogether) {
  SimOptions o;
  o.seed = 11;
  o.faults = {{"data_stall", 0, 0, 400, 1}};
  o.duration_s = 600;
  const std::vector<json> recs = Records(SimulateOk(o));
  for (int gpu : {0, 5}) {
    EXPECT_LT(Mean(recs, "gpu", "util_pct", 450, 520, gpu),
              0.7 * Mean(recs, "gpu", "util_pct", 200, 390, gpu))
        << gpu;
  }
  EXPECT_GT(Mean(recs, "host", "iowait_pct", 450, 520), 10);
}

// Planted as `o.faults` says, named in the truth as that cause, and found there in time with no
// false alarm; a healthy run (a confounder) has no fault and no finding.
void ExpectDiagnosedWherePlanted(const std::string& what, const SimOptions& o) {
  const std::string cause = o.faults.front().cause;
  const SimOutput s = SimulateOk(o);
  auto truth = eval::ParseTruth(s.truth_json);
  ASSERT_TRUE(truth.ok()) << truth.status().message();
  if (cause == "healthy") {
    EXPECT_TRUE(truth->empty()) << what;
  } else {
    ASSERT_FALSE(truth->empty()) << what;
  }
  for (const eval::Fault& f : *truth) EXPECT_EQ(f.cause, cause);
  auto findings = eval::ParseFindings(analyze::FindingsDocument(Diagnose(s), json{}).dump());
  ASSERT_TRUE(findings.ok()) << findings.status().message();
  const eval::ScenarioScore score = eval::ScoreScenario(cause, *truth, *findings);
  for (size_t i = 0; i < score.faults.size(); ++i) {
    EXPECT_TRUE(score.latency_s[i].has_value())
        << what << " planted on " << score.faults[i].node << " at " << score.faults[i].start_s
        << " but not diagnosed there in time";
  }
  for (size_t i = 0; i < score.findings.size(); ++i) {
    EXPECT_TRUE(!score.counted[i] || score.matched_fault[i].has_value())
        << what << ": false alarm " << score.findings[i].cause << " on " << score.findings[i].node
        << " at " << score.findings[i].first_seen_s;
  }
}

// Every plantable cause, scored exactly as `gpuwatch eval` scores (findings.md): the planted
// fault is found at its place within the allowed latency, and nothing else is reported.
TEST(SimulatorTest, EveryFaultIsPlantedAndDiagnosed) {
  for (const std::string& cause : KnownFaults()) {
    if (cause == "healthy") continue;
    SimOptions o;
    o.seed = 5;
    o.shape = "4xH100";  // NVLink and two NUMA nodes, at half the records of 8 GPUs
    const bool between_nodes = cause == "version_mismatch" || cause == "clock_skew" ||
                               cause == "net_fallback" || cause == "net_congestion";
    o.nodes = between_nodes ? 3 : 1;
    o.duration_s = cause == "gpu_idle_allocated" ? 1080 : 600;
    o.faults = {{cause, between_nodes ? 1 : 0, 2, 300, 0.7}};
    ExpectDiagnosedWherePlanted(cause, o);
  }
}

// Where a fault sits on one node of a multi-node job, it is planted and found there alone: an
// NVLink fallback on one node (the others' NCCL uses P2P), and a hang or a rank's exit with one
// rank a node (the stuck or dead rank has no peer on its own node to be compared with).
TEST(SimulatorTest, AFaultOnOneNodeOfAJobIsFoundThereAlone) {
  for (const auto& [cause, shape] :
       {std::pair<std::string, std::string>{"nvlink_fallback", "4xH100"},
        {"job_hang", "1xH100"},
        {"rank_exit", "1xH100"}}) {
    SimOptions o;
    o.seed = 11;
    o.shape = shape;
    o.nodes = 3;
    o.duration_s = 720;
    o.faults = {{cause, 1, 0, 240, 0.7}};
    ExpectDiagnosedWherePlanted(cause + " on " + shape, o);
  }
  // What the shape cannot have is refused, not planted unseen.
  SimOptions o;
  o.shape = "4xL40S";
  o.faults = {{"nvlink_errors", 0, 0, 300, 0.5}};
  auto r = Simulate(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no NVLink"), std::string::npos) << r.status().message();
  o.shape = "1xH100";
  o.faults = {{"nvlink_fallback", 0, 0, 300, 0.5}};
  EXPECT_FALSE(Simulate(o).ok());
}

// Every real shape of a fault (Variants()) is planted, named in the truth as its cause, and
// diagnosed as that cause alone; every confounder of a healthy run gives no finding at all.
TEST(SimulatorTest, EveryVariantIsPlantedAndDiagnosedAndEveryConfounderIsQuiet) {
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(std::string(v.cause) + ":" + std::string(v.name));
    SimOptions o;
    o.seed = 7;
    o.shape = "4xH100";
    const std::string cause(v.cause);
    const bool long_run = cause == "gpu_idle_allocated" || cause == "job_hang" || cause == "xid";
    o.duration_s = long_run ? 1500 : 900;
    o.faults = {{cause, 0, 2, 420, 0.7, std::string(v.name)}};
    ExpectDiagnosedWherePlanted(cause + ":" + std::string(v.name), o);
  }
  EXPECT_FALSE(ParseFaultSpec("rank_exit:variant=bogus").ok());
  auto f = ParseFaultSpec("rank_exit:gpu=1,variant=oom_kill");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->variant, "oom_kill");
}

TEST(SimulatorTest, SameSeedSameTraceAndBadOptions) {
  SimOptions o;
  o.seed = 3;
  o.duration_s = 300;
  EXPECT_EQ(SimulateOk(o).trace_lines, SimulateOk(o).trace_lines);
  o.shape = "8xV100";
  EXPECT_FALSE(Simulate(o).ok());
  EXPECT_FALSE(ParseFaultSpec("melting").ok());
  EXPECT_FALSE(ParseFaultSpec("thermal_throttle:gpu").ok());
  EXPECT_FALSE(ParseFaultSpec("thermal_throttle:colour=3").ok());
  auto f = ParseFaultSpec("pcie_replay:gpu=5,onset=300,severity=0.5");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->gpu, 5);
  EXPECT_EQ(f->onset_s, 300);
}

}  // namespace
}  // namespace gpuwatch::cluster_sim
