// The simulator played live: SimulatedGpuSource (the card half, through the GpuSource seam) and
// the rank scripts (the task half, through the job SDK).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cluster_sim/rank_player.h"
#include "cluster_sim/sim_gpu_source.h"
#include "cluster_sim/simulator.h"
#include "common/time_base.h"

namespace gpuwatch::cluster_sim {
namespace {

using model::GpuMetric;

constexpr double kStart = 1764460800;  // the simulator's default start, Unix seconds

SimOutput Sim(const std::string& fault, uint64_t seed = 1) {
  SimOptions o;
  o.duration_s = 300;
  o.seed = seed;
  if (!fault.empty()) {
    auto spec = ParseFaultSpec(fault);
    EXPECT_TRUE(spec.ok()) << spec.status().message();
    o.faults.push_back(*spec);
  }
  auto out = Simulate(o);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return *out;
}

// The trace's gpu record of `gpu` at or before t (Unix seconds).
nlohmann::json GpuRecordAt(const SimOutput& sim, unsigned gpu, double t) {
  nlohmann::json best;
  for (const std::string& line : sim.trace_lines) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "gpu" && j["gpu"] == gpu && j["t"].get<double>() <= t) best = j;
  }
  return best;
}

TEST(SimulatedGpuSourceTest, SamplesAreTheTracesRecordsInNvmlUnitsAndSaySimulated) {
  const SimOutput sim = Sim("thermal_throttle:gpu=3,onset=100");
  auto src = SimulatedGpuSource::Create(sim.trace_lines, "", 0, {});
  ASSERT_TRUE(src.ok()) << src.status().message();
  SimulatedGpuSource& s = **src;
  ASSERT_TRUE(s.Init().ok());
  ASSERT_EQ(s.Devices().size(), 8u);
  EXPECT_EQ(s.System().driver_version, "SIMULATED");
  for (const auto& d : s.Devices()) EXPECT_NE(d.name.find("[SIMULATED]"), std::string::npos);

  const double t = kStart + 220;  // throttled by then; the job ends at 240
  for (unsigned gpu : {0u, 3u}) {
    const nlohmann::json rec = GpuRecordAt(sim, gpu, t);
    ASSERT_FALSE(rec.is_null());
    model::GpuSample out;
    ASSERT_TRUE(s.Sample(gpu, static_cast<int64_t>(t * 1000), &out).ok());
    EXPECT_EQ(out.time_ms, static_cast<int64_t>(t * 1000));
    EXPECT_DOUBLE_EQ(*out.Get(GpuMetric::kUtilGpuPct), rec["util_pct"].get<double>());
    EXPECT_DOUBLE_EQ(*out.Get(GpuMetric::kTempC), rec["temp_c"].get<double>());
    EXPECT_DOUBLE_EQ(*out.Get(GpuMetric::kSmClockMhz), rec["sm_clock_mhz"].get<double>());
    EXPECT_DOUBLE_EQ(*out.Get(GpuMetric::kEnergyMj), rec["energy_j"].get<double>() * 1000);
    EXPECT_TRUE(out.Get(GpuMetric::kMemTotalMib).has_value());  // from the node record
    const bool thermal = std::find(rec["throttle"].begin(), rec["throttle"].end(), "sw_thermal") !=
                         rec["throttle"].end();
    EXPECT_EQ((static_cast<uint64_t>(*out.Get(GpuMetric::kClockEventReasons)) & 0x20) != 0,
              thermal);
  }
  // The throttled GPU runs slower than a healthy one by then.
  model::GpuSample hot, cool;
  ASSERT_TRUE(s.Sample(3, static_cast<int64_t>(t * 1000), &hot).ok());
  ASSERT_TRUE(s.Sample(0, static_cast<int64_t>(t * 1000), &cool).ok());
  EXPECT_LT(*hot.Get(GpuMetric::kSmClockMhz), *cool.Get(GpuMetric::kSmClockMhz));
  EXPECT_EQ(s.Capabilities(0).metrics[model::Idx(GpuMetric::kTempC)].support,
            model::Support::kSupported);
  EXPECT_FALSE(s.Sample(8, 0, &hot).ok());
}

TEST(SimulatedGpuSourceTest, ALostGpuIsLostFromItsLastRecordAndItsXidIsDueOnTime) {
  const SimOutput sim = Sim("gpu_lost:gpu=2,onset=120");
  const int64_t offset_ms = 5000;  // wall = trace + 5 s
  auto src = SimulatedGpuSource::Create(sim.trace_lines, "", offset_ms, {});
  ASSERT_TRUE(src.ok()) << src.status().message();
  SimulatedGpuSource& s = **src;
  const int64_t onset_wall = static_cast<int64_t>((kStart + 120) * 1000) + offset_ms;
  model::GpuSample out;
  EXPECT_TRUE(s.Sample(2, onset_wall - 10000, &out).ok());
  EXPECT_FALSE(out.lost);
  Status st = s.Sample(2, onset_wall + 10000, &out);
  EXPECT_EQ(st.code(), StatusCode::kGpuLost);
  EXPECT_TRUE(out.lost);
  EXPECT_TRUE(s.Sample(1, onset_wall + 10000, &out).ok());  // the others go on

  std::vector<model::GpuEvent> events;
  ASSERT_TRUE(s.WaitEvents(0, onset_wall - 2000, &events).ok());
  EXPECT_TRUE(events.empty());
  ASSERT_TRUE(s.WaitEvents(0, onset_wall + 1000, &events).ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].gpu_index, 2u);
  EXPECT_EQ(events[0].code, 79u);
  EXPECT_GE(events[0].time_ms, onset_wall - 1000);
  events.clear();
  ASSERT_TRUE(s.WaitEvents(0, onset_wall + 60000, &events).ok());
  EXPECT_TRUE(events.empty());  // delivered once
}

TEST(SimulatedGpuSourceTest, ProcessesAreTheRanksRealPidsWhileTheyRun) {
  const SimOutput sim = Sim("");
  auto scripts = RankScripts(sim.trace_lines, "");
  ASSERT_TRUE(scripts.ok()) << scripts.status().message();
  std::map<uint32_t, uint32_t> pids;
  for (const RankScript& r : *scripts) {
    pids[r.sim_pid] = 40000 + r.rank;
    // The job's checkpoint (at 170 s) is marked once, by the node's first rank.
    const bool marks = std::any_of(r.actions.begin(), r.actions.end(), [](const auto& a) {
      return a.kind == RankAction::Kind::kCheckpointBegin;
    });
    EXPECT_EQ(marks, r.local_rank == 0) << "rank " << r.rank;
  }
  // Now is 150 s into the trace: the job runs.
  const int64_t offset_ms = WallClockMs() - static_cast<int64_t>((kStart + 150) * 1000);
  auto src = SimulatedGpuSource::Create(sim.trace_lines, "", offset_ms, pids);
  ASSERT_TRUE(src.ok()) << src.status().message();
  for (const RankScript& r : *scripts) {
    std::vector<model::GpuProcess> procs;
    ASSERT_TRUE((*src)->Processes(r.gpu, &procs).ok());
    ASSERT_EQ(procs.size(), 1u) << "GPU " << r.gpu;
    EXPECT_EQ(procs[0].pid, 40000u + r.rank);
    EXPECT_TRUE(procs[0].used_memory_bytes.has_value());
  }
}

TEST(RankScriptsTest, EveryRankStepsAndEndsAndADeadRankExitsWithoutEnd) {
  const SimOutput sim = Sim("rank_exit:gpu=5,onset=150", 2);
  auto scripts = RankScripts(sim.trace_lines, "");
  ASSERT_TRUE(scripts.ok()) << scripts.status().message();
  ASSERT_EQ(scripts->size(), 8u);
  std::set<unsigned> gpus;
  for (const RankScript& r : *scripts) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    EXPECT_EQ(r.job, "sim-2");
    EXPECT_EQ(r.template_name, "sim-llm-fsdp");
    EXPECT_EQ(r.world_size, 8);
    EXPECT_EQ(r.local_rank, r.rank);
    EXPECT_NE(r.sim_pid, 0u);
    gpus.insert(r.gpu);
    ASSERT_FALSE(r.actions.empty());
    EXPECT_TRUE(std::is_sorted(r.actions.begin(), r.actions.end(),
                               [](const auto& a, const auto& b) { return a.t_ms < b.t_ms; }));
    const auto steps = std::count_if(r.actions.begin(), r.actions.end(), [](const auto& a) {
      return a.kind == RankAction::Kind::kStep;
    });
    EXPECT_GT(steps, 10);
    const bool marks = std::any_of(r.actions.begin(), r.actions.end(), [](const auto& a) {
      return a.kind == RankAction::Kind::kCheckpointBegin;
    });
    if (marks) {
      EXPECT_EQ(r.local_rank, 0);  // the job's checkpoints, marked once per node
    }
    const RankAction& last = r.actions.back();
    if (r.gpu == 5) {
      EXPECT_EQ(last.kind, RankAction::Kind::kExit);
      EXPECT_LT(last.t_ms, static_cast<int64_t>((kStart + 160) * 1000));
      EXPECT_GE(last.t_ms, static_cast<int64_t>((kStart + 145) * 1000));
    } else {
      EXPECT_EQ(last.kind, RankAction::Kind::kEnd);
      EXPECT_NE(last.code, 0);  // the launcher tore the job down
    }
  }
  EXPECT_EQ(gpus.size(), 8u);
}

TEST(RankScriptsTest, UnknownNodeHasNoRanksAndBadTraceIsAnError) {
  const SimOutput sim = Sim("");
  auto none = RankScripts(sim.trace_lines, "no-such-node");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(RankScripts({"{\"t\": 1, \"type\": \"gpu\", \"gpu\": -1}"}, "").ok());
  EXPECT_FALSE(SimulatedGpuSource::Create(sim.trace_lines, "no-such-node", 0, {}).ok());
}

}  // namespace
}  // namespace gpuwatch::cluster_sim
