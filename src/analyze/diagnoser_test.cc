// The diagnoser on short hand-made traces, each read through the real trace reader.
#include "analyze/diagnoser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "trace/trace_reader.h"

namespace gpuwatch::analyze {
namespace {

std::vector<Finding> Diagnose(const std::string& jsonl,
                              const std::vector<TemplateStep>& templates = {}) {
  auto reader = trace::TraceReader::OpenBuffer(jsonl, "test.jsonl");
  EXPECT_TRUE(reader.ok()) << reader.status().message();
  if (!reader.ok()) return {};
  Diagnoser d;
  d.SetTemplateBaselines(templates);
  trace::TraceRecord r;
  double end = 0;
  while (true) {
    Result<bool> more = (*reader)->Next(&r);
    EXPECT_TRUE(more.ok()) << more.status().message();
    if (!more.ok() || !*more) break;
    d.Observe(r);
    end = r.t;
  }
  return d.Finish(end);
}

std::string Node(const std::string& node, double t, const std::string& extra = "") {
  return "{\"t\":" + std::to_string(t) + ",\"type\":\"node\",\"node\":\"" + node +
         "\",\"driver_version\":\"550.90.07\",\"gpus\":[{\"index\":0,\"max_sm_clock_mhz\":1980,"
         "\"pcie_max_gen\":5,\"pcie_max_width\":16,\"nvlink_count\":18},{\"index\":1,"
         "\"max_sm_clock_mhz\":1980,\"pcie_max_gen\":5,\"pcie_max_width\":16,\"nvlink_count\":18}],"
         "\"topology\":{\"gpu_links\":[[\"X\",\"NV18\"],[\"NV18\",\"X\"]]}" +
         extra + "}\n";
}

std::string Gpu(double t, int gpu, const std::string& fields) {
  return "{\"t\":" + std::to_string(t) +
         ",\"type\":\"gpu\",\"node\":\"n1\",\"gpu\":" + std::to_string(gpu) + "," + fields + "}\n";
}

TEST(DiagnoserTest, HealthyTraceHasNoFindings) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 120; ++i) {
    // Power-cap flickers at full load: a sample in ten, at full clock.
    const bool flick = i % 10 == 0;
    for (int g = 0; g < 2; ++g) {
      trace += Gpu(101 + i, g,
                   std::string("\"util_pct\":97,\"sm_clock_mhz\":1980,\"pcie_gen\":5,"
                               "\"pcie_width\":16,\"nvlink_active_links\":18,\"pcie_replay\":3,"
                               "\"throttle\":") +
                       (flick ? "[\"sw_power_cap\"]" : "[]"));
    }
  }
  EXPECT_TRUE(Diagnose(trace).empty());
}

TEST(DiagnoserTest, ThermalThrottleFromItsFirstSample) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 30; ++i) {
    const bool hot = i >= 10;
    trace += Gpu(101 + i, 1,
                 std::string("\"util_pct\":95,\"temp_c\":") + (hot ? "88" : "70") +
                     ",\"sm_clock_mhz\":" + (hot ? "1400" : "1980") +
                     ",\"throttle\":" + (hot ? "[\"sw_thermal\"]" : "[]"));
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kThermalThrottle);
  EXPECT_EQ(f[0].layer(), model::Layer::kCard);
  EXPECT_EQ(f[0].gpu, 1);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 111);
  EXPECT_DOUBLE_EQ(f[0].last_seen, 130);
  EXPECT_NE(f[0].summary.find("88"), std::string::npos);
}

TEST(DiagnoserTest, TemperatureTrendAtSteadyLoadIsAnInfoFinding) {
  // 20 minutes at full, steady load, one sample a second. GPU 1 warms 0.5 °C a minute from
  // minute 5 (a failing fan); GPU 0 stays at 68 °C with a little noise.
  auto trace_of = [](auto temp_of, auto power_of) {
    std::string trace = Node("n1", 100);
    for (int i = 0; i < 1200; ++i) {
      const double t = 101 + i;
      for (int g = 0; g < 2; ++g) {
        trace += Gpu(t, g,
                     "\"util_pct\":97,\"sm_clock_mhz\":1980,\"temp_c\":" +
                         std::to_string(g == 1 ? temp_of(i) : 68 + (i % 7) * 0.3) +
                         ",\"power_w\":" + std::to_string(power_of(i)) + ",\"throttle\":[]");
      }
    }
    return trace;
  };
  auto steady_power = [](int i) { return 650.0 + (i % 5); };
  std::vector<Finding> f = Diagnose(trace_of(
      [](int i) { return 66 + (i % 7) * 0.3 + std::max(0, i - 300) / 120.0; }, steady_power));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kThermalThrottle);
  EXPECT_EQ(f[0].severity, Severity::kInfo);
  EXPECT_EQ(f[0].gpu, 1);
  EXPECT_NE(f[0].summary.find("warming steadily"), std::string::npos) << f[0].summary;
  EXPECT_EQ(f[0].evidence[0].rfind("temp_c slope 0.", 0), 0u) << f[0].evidence[0];
  // A GPU settling to its load (fast, then slower: 40 → 70 °C with a 3-minute time constant)
  // is not a trend, nor is a rise that follows rising power.
  EXPECT_TRUE(Diagnose(trace_of([](int i) { return 70 - 30 * std::exp(-i / 180.0); }, steady_power))
                  .empty());
  EXPECT_TRUE(Diagnose(trace_of([](int i) { return 60 + i / 120.0; },
                                [](int i) { return 500.0 + i * 0.15; }))
                  .empty());
}

TEST(DiagnoserTest, WhatBeginsInAMaintenanceWindowIsInfo) {
  auto event = [](double t, const std::string& rest) {
    return "{\"t\":" + std::to_string(t) + ",\"type\":\"event\",\"node\":\"n1\"," + rest + "}\n";
  };
  std::string trace = Node("n1", 100);
  trace += event(150, R"("gpu":0,"kind":"maintenance_start","message":"reseat GPU 0")");
  trace += event(160, R"("gpu":0,"kind":"gpu_lost","message":"reset for the reseat")");
  trace += event(170, R"("gpu":1,"kind":"xid","code":31,"message":"fault on the other GPU")");
  trace += event(200, R"("gpu":0,"kind":"maintenance_end")");
  trace += event(300, R"("gpu":0,"kind":"xid","code":31,"message":"after the window")");
  std::vector<Finding> f = Diagnose(trace);
  std::map<std::pair<Cause, int>, Severity> severity;
  for (const Finding& x : f) severity[{x.cause, x.gpu.value_or(-1)}] = x.severity;
  EXPECT_EQ(severity[std::make_pair(Cause::kGpuLost, 0)], Severity::kInfo);
  // Not the GPU in maintenance, and after the window:
  EXPECT_EQ(severity[std::make_pair(Cause::kXid, 1)], Severity::kWarning);
  EXPECT_EQ(severity[std::make_pair(Cause::kXid, 0)], Severity::kWarning);
  for (const Finding& x : f) {
    if (x.cause != Cause::kGpuLost) continue;
    EXPECT_NE(x.evidence.back().find("maintenance window from 1970-01-01T00:02:30Z of GPU 0: "
                                     "reseat GPU 0"),
              std::string::npos)
        << x.evidence.back();
  }
  // A whole-node window still open at the end covers every GPU.
  trace = Node("n1", 100) + event(150, R"("kind":"maintenance_start")") +
          event(170, R"("gpu":1,"kind":"xid","code":31,"message":"x")");
  f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kInfo);
}

TEST(DiagnoserTest, XidFamiliesMapToTheirCauses) {
  std::string trace = Node("n1", 100);
  trace +=
      R"({"t":101,"type":"event","node":"n1","gpu":0,"kind":"xid","code":79,"message":"fallen off the bus"})"
      "\n";
  trace +=
      R"({"t":102,"type":"event","node":"n1","gpu":1,"kind":"xid","code":31,"message":"mmu fault"})"
      "\n";
  trace +=
      R"({"t":103,"type":"event","node":"n1","gpu":1,"kind":"xid","code":45,"message":"preemptive cleanup"})"
      "\n";
  trace +=
      R"({"t":104,"type":"event","node":"n1","gpu":1,"kind":"xid","code":31,"message":"again"})"
      "\n";
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].cause, Cause::kGpuLost);
  EXPECT_EQ(f[0].severity, Severity::kCritical);
  EXPECT_EQ(f[0].gpu, 0);
  EXPECT_EQ(f[1].cause, Cause::kXid);
  EXPECT_EQ(f[1].code, 31);
  EXPECT_DOUBLE_EQ(f[1].first_seen, 102);
  EXPECT_DOUBLE_EQ(f[1].last_seen, 104);  // one finding, extended
}

TEST(DiagnoserTest, PowerAndSlowdownThrottlesEccAndTopologyEachFromTheirOwnEvidence) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 60; ++i) {
    const double t = 101 + i;
    // GPU 0 holds the power cap from t=121 with its clock well under its maximum (1980 MHz);
    // GPU 1 touches the cap one sample in five at full clock (healthy at full load).
    const bool capped = i >= 20;
    trace += Gpu(t, 0,
                 std::string("\"util_pct\":99,\"sm_clock_mhz\":") + (capped ? "1600" : "1980") +
                     ",\"throttle\":" + (capped ? "[\"sw_power_cap\"]" : "[]") +
                     // DBEs rise once at t=140; SBEs every 10 s from t=111.
                     ",\"ecc_dbe_volatile\":" + (i >= 39 ? "1" : "0") +
                     ",\"ecc_sbe_volatile\":" + std::to_string(i >= 10 ? (i - 10) / 10 + 1 : 0));
    // GPU 1: hw_slowdown from t=131 for 3 samples and more; the power brake at t=151-153.
    std::string reasons = i % 5 == 0 ? "\"sw_power_cap\"" : "";
    if (i >= 30) reasons += std::string(reasons.empty() ? "" : ",") + "\"hw_slowdown\"";
    if (i >= 50 && i < 53) reasons += ",\"hw_power_brake\"";
    trace += Gpu(t, 1, "\"util_pct\":99,\"sm_clock_mhz\":1980,\"throttle\":[" + reasons + "]");
  }
  trace +=
      R"({"t":150,"type":"event","node":"n1","gpu":1,"kind":"topology_change","message":"GPU1 NVLink 18 -> 17 links"})"
      "\n";
  std::map<std::string, Finding> by;
  for (const Finding& f : Diagnose(trace))
    by[f.CauseText() + "/" + std::to_string(f.gpu.value_or(-1))] = f;
  ASSERT_TRUE(by.count("power_throttle/0")) << by.size();
  EXPECT_DOUBLE_EQ(by["power_throttle/0"].first_seen, 121);
  ASSERT_TRUE(by.count("ecc_dbe/0"));
  EXPECT_EQ(by["ecc_dbe/0"].severity, Severity::kCritical);
  EXPECT_DOUBLE_EQ(by["ecc_dbe/0"].first_seen, 140);
  ASSERT_TRUE(by.count("ecc_sbe_growth/0"));
  ASSERT_TRUE(by.count("clock_slowdown/1"));
  EXPECT_DOUBLE_EQ(by["clock_slowdown/1"].first_seen, 131);
  ASSERT_TRUE(by.count("power_throttle/1"));  // the brake, not the flickering cap
  EXPECT_DOUBLE_EQ(by["power_throttle/1"].first_seen, 151);
  EXPECT_NE(by["power_throttle/1"].summary.find("power brake"), std::string::npos);
  ASSERT_TRUE(by.count("topology_change/-1"));  // the node's, whichever GPU the event names
  EXPECT_EQ(by.size(), 6u);
}

TEST(DiagnoserTest, CountersThatKeepRisingAndOneThatReset) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 10; ++i) {
    // GPU 0: replays rise at 105, 106, 107. GPU 1: a reset (driver reload), then static.
    const int replays = i < 5 ? 0 : i - 4;
    trace += Gpu(101 + i, 0, "\"util_pct\":50,\"pcie_replay\":" + std::to_string(replays));
    trace +=
        Gpu(101 + i, 1, std::string("\"util_pct\":50,\"pcie_replay\":") + (i < 3 ? "900" : "2"));
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kPcieReplay);
  EXPECT_EQ(f[0].gpu, 0);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 106);
}

TEST(DiagnoserTest, NarrowPcieLinkAndLostNvlink) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 5; ++i) {
    trace += Gpu(101 + i, 0, "\"util_pct\":10,\"pcie_gen\":5,\"pcie_width\":8");
    trace += Gpu(101 + i, 1,
                 "\"util_pct\":10,\"pcie_gen\":1,\"pcie_width\":16,\"nvlink_active_links\":17");
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].cause, Cause::kNvlinkErrors);  // at once: the first sample with a link missing
  EXPECT_EQ(f[0].gpu, 1);
  EXPECT_EQ(f[1].cause, Cause::kPcieDowngrade);  // gen 1 on an idle GPU is not one
  EXPECT_EQ(f[1].gpu, 0);
  EXPECT_DOUBLE_EQ(f[1].first_seen, 101);
}

TEST(DiagnoserTest, NvlinkFallbackFromTheJobsNcclLog) {
  std::string trace = Node("n1", 100);
  trace += R"({"t":110,"type":"job","node":"n1","job":"j1","state":"start","ranks":2,"gpus":[0,1]})"
           "\n";
  trace +=
      R"({"t":112,"type":"log","node":"n1","job":"j1","rank":0,"source":"nccl","line":"n1:100:100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct"})"
      "\n";
  trace +=
      R"({"t":112.5,"type":"log","node":"n1","job":"j1","rank":1,"source":"nccl","line":"n1:101:101 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct"})"
      "\n";
  trace +=
      R"({"t":113,"type":"log","node":"n1","job":"j1","rank":0,"source":"nccl","line":"n1:100:100 [0] NCCL INFO Connected all rings"})"
      "\n";
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kNvlinkFallback);
  EXPECT_EQ(f[0].node, "n1");
  EXPECT_FALSE(f[0].gpu.has_value());
  EXPECT_DOUBLE_EQ(f[0].first_seen, 112);
}

TEST(DiagnoserTest, TheNodeThatDiffersAcrossNodes) {
  std::string trace = Node("n1", 100, ",\"clock_offset_ms\":0.5") +
                      Node("n2", 100, ",\"clock_offset_ms\":-0.3") +
                      Node("n3", 100, ",\"clock_offset_ms\":900");
  // n3 later comes back on another driver.
  std::string n3 = Node("n3", 200);
  const std::string from = "550.90.07";
  n3.replace(n3.find(from), from.size(), "535.54.03");
  trace += n3;
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].cause, Cause::kClockSkew);
  EXPECT_EQ(f[0].node, "n3");
  EXPECT_EQ(f[1].cause, Cause::kVersionMismatch);
  EXPECT_EQ(f[1].node, "n3");
  EXPECT_DOUBLE_EQ(f[1].first_seen, 200);
}

std::string Step(double t, int rank, double duration, double data_wait) {
  return "{\"t\":" + std::to_string(t) +
         ",\"type\":\"step\",\"node\":\"n1\",\"job\":\"j1\","
         "\"rank\":" +
         std::to_string(rank) + ",\"duration_s\":" + std::to_string(duration) +
         ",\"data_wait_s\":" + std::to_string(data_wait) + "}\n";
}

TEST(DiagnoserTest, DataStallAgainstTheJobsOwnBaseline) {
  std::string healthy = Node("n1", 100);
  std::string stalled = healthy;
  for (int i = 0; i < 900; ++i) {
    const double t = 101 + i * 0.6;
    for (int rank = 0; rank < 2; ++rank) {
      healthy += Step(t, rank, 0.6, 0.02);  // a steady 3 %
      // From t = 401 the input pipeline slows: half of every step waits for data.
      stalled += Step(t, rank, t >= 401 ? 1.2 : 0.6, t >= 401 ? 0.6 : 0.02);
    }
  }
  EXPECT_TRUE(Diagnose(healthy).empty());
  const std::vector<Finding> f = Diagnose(stalled);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kDataStall);
  EXPECT_EQ(f[0].layer(), model::Layer::kTask);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_GE(f[0].first_seen, 401);
  EXPECT_LE(f[0].first_seen, 401 + 120);
}

TEST(DiagnoserTest, MemoryLeakGrowsAndNeverFallsBack) {
  auto run = [](bool leak, bool freed_at_checkpoint) {
    std::string trace = Node("n1", 100);
    // memory_total_mib for the node's GPUs.
    const std::string gpus = "\"gpus\":[{\"index\":0,";
    trace.replace(trace.find(gpus), gpus.size(), gpus + "\"memory_total_mib\":46068,");
    trace += R"({"t":100,"type":"job","node":"n1","job":"j1","state":"start","gpus":[0]})"
             "\n";
    double mem = 20000;
    for (int i = 0; i < 900; ++i) {
      const double t = 101 + i;
      // Warm-up ramp in the first minute, then a plateau; a leak adds 1 GiB every 30 s from
      // t = 400.
      if (i < 60) mem = 20000 + i * 100;
      if (leak && t >= 400 && i % 30 == 0) mem += 1024;
      if (freed_at_checkpoint && i % 120 == 0 && t > 400) mem = 26000;
      trace += Gpu(t, 0, "\"util_pct\":90,\"mem_used_mib\":" + std::to_string(mem));
    }
    return Diagnose(trace);
  };
  EXPECT_TRUE(run(false, false).empty());
  EXPECT_TRUE(run(true, true).empty());  // a cache that is emptied at checkpoints is no leak
  const std::vector<Finding> f = run(true, false);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kMemoryLeak);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_FALSE(f[0].gpu.has_value());
  EXPECT_GE(f[0].first_seen, 400);
  EXPECT_LE(f[0].first_seen, 400 + 120);
  EXPECT_NE(f[0].summary.find("runs out in"), std::string::npos);
}

std::string StepOf(double t, int rank, double duration, double comm, double ckpt = 0) {
  return "{\"t\":" + std::to_string(t) +
         ",\"type\":\"step\",\"node\":\"n1\",\"job\":\"j1\","
         "\"rank\":" +
         std::to_string(rank) + ",\"gpu\":" + std::to_string(rank) +
         ",\"duration_s\":" + std::to_string(duration) +
         ",\"data_wait_s\":0.01,\"comm_s\":" + std::to_string(comm) +
         ",\"checkpoint_s\":" + std::to_string(ckpt) + "}\n";
}

TEST(DiagnoserTest, JobHangFromTheLastStepAndNotWhenAGpuWasLost) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 50; ++i) trace += StepOf(101 + i, 0, 1.0, 0.1);
  // No step after t=150; the node keeps sampling for 3 minutes.
  std::string hung = trace;
  for (int i = 0; i < 180; ++i) hung += Gpu(151 + i, 0, "\"util_pct\":100");
  std::vector<Finding> f = Diagnose(hung);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kJobHang);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_DOUBLE_EQ(f[0].first_seen, 150);
  // The same silence after the GPU fell off the bus is that, not a hang.
  hung = trace +
         R"({"t":151,"type":"event","node":"n1","gpu":0,"kind":"xid","code":79,"message":"x"})"
         "\n";
  for (int i = 0; i < 180; ++i) hung += Gpu(152 + i, 1, "\"util_pct\":100");
  f = Diagnose(hung);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kGpuLost);
}

TEST(DiagnoserTest, CheckpointStallAgainstTheJobsEarlierCheckpoints) {
  std::string trace = Node("n1", 100);
  double t = 101;
  for (int i = 0; i < 30; ++i) {
    const double ckpt = i == 10 ? 8 : i == 25 ? 95 : 0;  // a normal one, then a slow one
    trace += StepOf(t + 1 + ckpt, 0, 1 + ckpt, 0.1, ckpt);
    t += 1 + ckpt;
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kCheckpointStall);
  EXPECT_NE(f[0].summary.find("95"), std::string::npos);
}

TEST(DiagnoserTest, StepRegressionAgainstTheTemplateForAJobSlowFromItsStart) {
  // A job of template "llama" on a 1x2 node whose every step takes 1.5 s: its own steps give
  // no sign, its template's baseline (1.0 s, p99 1.1 s) does.
  std::string trace =
      Node("n1", 100) +
      R"({"t":100.5,"type":"job","node":"n1","job":"j1","state":"start","template":"llama","gpus":[0,1]})"
      "\n";
  for (int i = 0; i < 400; ++i) {
    for (int rank = 0; rank < 2; ++rank) trace += StepOf(101 + i * 1.5, rank, 1.5, 0.1);
  }
  const TemplateStep llama{.template_name = "llama",
                           .shape = "1x2xGPU",
                           .version = 3,
                           .driver_version = "550.90.07",
                           .median_s = 1.0,
                           .p99_s = 1.1};
  EXPECT_TRUE(Diagnose(trace).empty());
  std::vector<Finding> f = Diagnose(trace, {llama});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kStepRegression);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_NE(f[0].summary.find("template llama"), std::string::npos) << f[0].summary;
  EXPECT_NE(f[0].evidence[0].find("v3 of llama on 1x2xGPU"), std::string::npos);
  // Judged from the end of the warm-up (2 min after the first step), held 2 min.
  EXPECT_GE(f[0].first_seen, 219.5);  // the start of the first judged step
  EXPECT_LE(f[0].first_seen, 230);
  // Within the template's spread (p99 above the line), another shape, or another driver: no
  // judgement.
  TemplateStep wide = llama;
  wide.p99_s = 1.6;
  EXPECT_TRUE(Diagnose(trace, {wide}).empty());
  TemplateStep other_shape = llama;
  other_shape.shape = "1x8xGPU";
  EXPECT_TRUE(Diagnose(trace, {other_shape}).empty());
  TemplateStep other_driver = llama;
  other_driver.driver_version = "535.104.05";
  EXPECT_TRUE(Diagnose(trace, {other_driver}).empty());
  // A template slower than the job: nothing.
  TemplateStep slower = llama;
  slower.median_s = 1.45;
  slower.p99_s = 1.6;
  EXPECT_TRUE(Diagnose(trace, {slower}).empty());
}

TEST(DiagnoserTest, StepRegressionAgainstTheJobsOwnSteadyState) {
  std::string trace = Node("n1", 100);
  // 1.0 s steps; from t=500 they take 1.4 s (nothing deeper in the trace to explain it).
  double t = 101;
  while (t < 900) {
    const double d = t >= 500 ? 1.4 : 1.0;
    t += d;
    for (int rank = 0; rank < 2; ++rank) trace += StepOf(t, rank, d, 0.1);
  }
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kStepRegression);
  EXPECT_NE(f[0].summary.find("40% over its own 1 s"), std::string::npos) << f[0].summary;
  EXPECT_GE(f[0].first_seen, 499);
  EXPECT_LE(f[0].first_seen, 502);
  // Slower by less than the factor: nothing.
  std::string mild = Node("n1", 100);
  t = 101;
  while (t < 900) {
    const double d = t >= 500 ? 1.2 : 1.0;
    t += d;
    for (int rank = 0; rank < 2; ++rank) mild += StepOf(t, rank, d, 0.1);
  }
  EXPECT_TRUE(Diagnose(mild).empty());
}

TEST(DiagnoserTest, StragglerIsTheRankThatNeverWaits) {
  std::string trace = Node("n1", 100);
  for (int i = 0; i < 200; ++i) {
    for (int rank = 0; rank < 4; ++rank) {
      // From t=161 rank 2's GPU is slow: the others wait 0.4 s for it in every collective.
      const bool slow = i >= 60;
      const double comm = !slow ? 0.1 : rank == 2 ? 0.05 : 0.5;
      trace += StepOf(101 + i, rank, slow ? 1.4 : 1.0, comm);
    }
  }
  std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kStragglerGpu);
  EXPECT_EQ(f[0].gpu, 2);
  EXPECT_GE(f[0].first_seen, 161);
  EXPECT_LE(f[0].first_seen, 161 + 120);
  ASSERT_EQ(f[0].evidence.size(), 2u);
  EXPECT_EQ(f[0].evidence[1], "no card sample of GPU 2 to compare with its peers");
  // With card samples the evidence says how GPU 2 differs from its peers (no throttle reason
  // held: nothing deeper to name).
  std::string cards;
  for (int i = 0; i < 10; ++i) {
    for (int g = 0; g < 4; ++g) {
      cards += Gpu(150 + i, g,
                   std::string("\"util_pct\":95,\"sm_clock_mhz\":") + (g == 2 ? "1600" : "1980") +
                       ",\"temp_c\":" + (g == 2 ? "81" : "66") + ",\"power_w\":650");
    }
  }
  const std::string node = Node("n1", 100);
  f = Diagnose(node + cards + trace.substr(node.size()));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].evidence[1], "GPU 2 vs its peers' median: SM clock 1600 vs 1980 MHz, 81 vs 66 °C")
      << f[0].evidence[1];
  // A thermally throttled GPU 2 is the deeper cause: the straggler finding goes.
  for (int i = 0; i < 10; ++i) {
    trace += Gpu(165 + i, 2, "\"util_pct\":95,\"throttle\":[\"hw_thermal\"]");
  }
  f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kThermalThrottle);
}

TEST(DiagnoserTest, NumaMismatchIdleAllocatedAndNetErrors) {
  std::string trace = Node("n1", 100);
  // GPU 1 hangs off NUMA node 1 in this node record; its process runs on node 0's CPUs.
  trace.replace(trace.find("{\"index\":1,"), 11, "{\"index\":1,\"numa_node\":1,");
  trace += R"({"t":101,"type":"job","node":"n1","job":"j9","state":"start","gpus":[0]})"
           "\n";
  trace += R"({"t":102,"type":"proc","node":"n1","pid":7,"gpu":1,"job":"j9","cpu_numa_nodes":[0]})"
           "\n";
  for (int i = 0; i < 700; ++i) {
    trace += Gpu(103 + i, 0, "\"util_pct\":0");
    if (i % 5 == 0) {
      const int errors = i >= 300 ? (i - 295) / 5 : 0;
      trace += "{\"t\":" + std::to_string(103 + i) +
               ",\"type\":\"host\",\"node\":\"n1\",\"nics\":{\"mlx5_0\":{\"link_up\":true,"
               "\"errors\":0,\"retransmits\":" +
               std::to_string(errors) + "}}}\n";
    }
  }
  const std::vector<Finding> f = Diagnose(trace);
  std::map<std::string, const Finding*> by;
  for (const auto& x : f) by[x.CauseText()] = &x;
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(by.at("numa_mismatch")->gpu, 1);
  EXPECT_DOUBLE_EQ(by.at("numa_mismatch")->first_seen, 102);
  EXPECT_EQ(by.at("gpu_idle_allocated")->job, "j9");
  EXPECT_DOUBLE_EQ(by.at("gpu_idle_allocated")->first_seen, 703);
  EXPECT_EQ(by.at("net_errors")->nic, "mlx5_0");
}

TEST(DiagnoserTest, RankExitIsTheFirstProcessToVanish) {
  std::string trace = Node("n1", 100);
  trace += R"({"t":100,"type":"job","node":"n1","job":"j1","state":"start","gpus":[0,1,2,3]})"
           "\n";
  for (int round = 0; round < 8; ++round) {
    const double t = 105 + 10 * round;
    for (int rank = 0; rank < 4; ++rank) trace += StepOf(t - 1, rank, 1.0, 0.1);
    for (int gpu = 0; gpu < 4; ++gpu) {
      // Round 5 (t=155): rank 2's process is gone. Round 6: the launcher tears down the rest.
      if (round >= 5 && gpu == 2) continue;
      if (round >= 6 && gpu != 0) continue;
      trace += "{\"t\":" + std::to_string(t) +
               ",\"type\":\"proc\",\"node\":\"n1\",\"pid\":" + std::to_string(500 + gpu) +
               ",\"gpu\":" + std::to_string(gpu) + ",\"job\":\"j1\"}\n";
    }
  }
  trace += R"({"t":190,"type":"job","node":"n1","job":"j1","state":"end","exit_code":1})"
           "\n";
  const std::vector<Finding> f = Diagnose(trace);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kRankExit);
  EXPECT_EQ(f[0].job, "j1");
  EXPECT_EQ(f[0].rank, 2);
  EXPECT_DOUBLE_EQ(f[0].first_seen, 155);
}

TEST(DiagnoserTest, NetCongestionNeedsASaturatedNicAndAWaitingJob) {
  auto run = [](bool waiting) {
    std::string trace =
        Node("n1", 100, ",\"nics\":[{\"name\":\"mlx5_0\",\"type\":\"ib\",\"link_gbps\":400}]");
    double t = 101;
    for (int i = 0; i < 600; ++i, t += 1) {
      // From t=500 the NIC carries 48 GB/s (384 of 400 Gb/s).
      const bool hot = t >= 500;
      trace += StepOf(t, 0, hot && waiting ? 1.5 : 1.0, hot && waiting ? 0.6 : 0.1);
      if (i % 5 == 0) {
        trace += "{\"t\":" + std::to_string(t) +
                 ",\"type\":\"host\",\"node\":\"n1\",\"nics\":{\"mlx5_0\":{\"tx_mbs\":" +
                 (hot ? "48000" : "9000") + ",\"rx_mbs\":8000,\"link_up\":true}}}\n";
      }
    }
    return Diagnose(trace);
  };
  // A busy NIC alone (another job's traffic, a healthy all-reduce) is not congestion.
  EXPECT_TRUE(run(false).empty());
  const std::vector<Finding> f = run(true);
  ASSERT_EQ(f.size(), 1u) << f[0].cause;
  EXPECT_EQ(f[0].cause, Cause::kNetCongestion);
  EXPECT_EQ(f[0].nic, "mlx5_0");
  EXPECT_GE(f[0].first_seen, 500);
  EXPECT_LE(f[0].first_seen, 500 + 120);
}

TEST(DiagnoserTest, DocumentIsFindingsJson) {
  Finding f;
  f.cause = Cause::kGpuLost;
  f.severity = Severity::kCritical;
  f.node = "n1";
  f.gpu = 5;
  f.first_seen = 10;
  f.last_seen = 12;
  const nlohmann::json doc = FindingsDocument({f}, {{"records", 3}});
  EXPECT_EQ(doc["findings"][0]["gpu"], 5);
  EXPECT_FALSE(doc["findings"][0].contains("job"));
  EXPECT_EQ(doc["stats"]["records"], 3);
  EXPECT_EQ(doc["findings"][0]["cause"], "gpu_lost");
  EXPECT_EQ(doc["findings"][0]["layer"], "card");
  EXPECT_EQ(doc["findings"][0]["severity"], "critical");
}

}  // namespace
}  // namespace gpuwatch::analyze
