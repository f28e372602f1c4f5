#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "model/metric_catalog.h"
#include "store/testing/scratch_dir.h"
#include "trace/flight_recorder.h"
#include "trace/trace_file.h"
#include "trace/trace_writer.h"

namespace gpuwatch::trace {
namespace {

using model::GpuMetric;
using nlohmann::json;

constexpr int64_t kT0 = 1764460800000;  // 2025-11-30T00:00:00Z
constexpr double kMib = 1024.0 * 1024.0;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------- fixtures

model::SystemInfo System() {
  model::SystemInfo s;
  s.driver_version = "550.90.07";
  s.nvml_version = "12.550.90.07";
  s.cuda_driver_version = "12.4";
  return s;
}

std::vector<model::GpuStaticInfo> Gpus() {
  model::GpuStaticInfo g0;
  g0.index = 0;
  g0.uuid = "GPU-1c6f";
  g0.name = "NVIDIA H100 80GB HBM3";
  g0.pci_bus_id = "00000000:18:00.0";
  g0.serial = "1650";  // not a trace field
  g0.nvlink_count = 18;
  model::GpuStaticInfo g1 = g0;
  g1.index = 1;
  g1.uuid = "GPU-2d9b";
  g1.pci_bus_id = "00000000:2a:00.0";
  return {g0, g1};
}

NodeExtras FullNodeExtras() {
  NodeExtras x;
  x.nccl_version = "2.21.5";
  x.clock_offset_ms = 0.4;
  NodeGpuExtra e;
  e.index = 0;
  e.numa_node = 0;
  e.cpu_affinity = "0-55";
  e.memory_total_mib = 81559;
  e.power_limit_w = 700;
  e.max_sm_clock_mhz = 1980;
  e.max_mem_clock_mhz = 2619;
  e.pcie_max_gen = 5;
  e.pcie_max_width = 16;
  x.gpus = {e};
  x.gpu_links = std::vector<std::vector<std::string>>{{"X", "NV18"}, {"NV18", "X"}};
  x.nics = {{"mlx5_0", "ib", "00000000:1a:00.0", 0, 400}};
  return x;
}

model::GpuSample FullGpuSample(int64_t t_ms) {
  model::GpuSample s;
  s.time_ms = t_ms;
  s.Set(GpuMetric::kUtilGpuPct, 97);
  s.Set(GpuMetric::kUtilMemPct, 41);
  s.Set(GpuMetric::kGpmSmActive, 0.83);
  s.Set(GpuMetric::kGpmSmOccupancy, 0.41);
  s.Set(GpuMetric::kGpmTensorActive, 0.52);
  s.Set(GpuMetric::kGpmDramActive, 0.38);
  s.Set(GpuMetric::kMemUsedMib, 61234);
  s.Set(GpuMetric::kTempC, 64);
  s.Set(GpuMetric::kMemTempC, 71);
  s.Set(GpuMetric::kPowerW, 612.4);
  s.Set(GpuMetric::kEnergyMj, 18234567123);
  s.Set(GpuMetric::kSmClockMhz, 1980);
  s.Set(GpuMetric::kMemClockMhz, 2619);
  s.Set(GpuMetric::kClockEventReasons, 0x4 | 0x100);  // sw_power_cap + display_clocks
  s.Set(GpuMetric::kPcieTxBytesPerSec, 310.2e6);
  s.Set(GpuMetric::kPcieRxBytesPerSec, 295e6);
  s.Set(GpuMetric::kPcieGen, 5);
  s.Set(GpuMetric::kPcieWidth, 16);
  s.Set(GpuMetric::kPcieReplay, 0);
  s.Set(GpuMetric::kNvlinkTxBytes, 1e12 + 41230e6);
  s.Set(GpuMetric::kNvlinkRxBytes, 1e12 + 41102.5e6);
  s.Set(GpuMetric::kNvlinkActiveLinks, 18);
  s.Set(GpuMetric::kNvlinkCrcFlitErrors, 1);
  s.Set(GpuMetric::kNvlinkCrcDataErrors, 2);
  s.Set(GpuMetric::kNvlinkReplayErrors, 0);
  s.Set(GpuMetric::kNvlinkRecoveryErrors, 0);
  s.Set(GpuMetric::kEccSbeVolatile, 0);
  s.Set(GpuMetric::kEccDbeVolatile, 0);
  s.Set(GpuMetric::kRetiredPagesSbe, 1);
  s.Set(GpuMetric::kRetiredPagesDbe, 1);
  s.Set(GpuMetric::kRemappedRowsPending, 0);
  s.Set(GpuMetric::kRemappedRowsFailure, 0);
  // Not trace fields of a gpu record (node-record limits, aggregates, …).
  s.Set(GpuMetric::kMemTotalMib, 81559);
  s.Set(GpuMetric::kPowerLimitW, 700);
  s.Set(GpuMetric::kEccSbeAggregate, 4);
  return s;
}

model::GpuSample PrevGpuSample(int64_t t_ms) {
  model::GpuSample p;
  p.time_ms = t_ms;
  p.Set(GpuMetric::kNvlinkTxBytes, 1e12);
  p.Set(GpuMetric::kNvlinkRxBytes, 1e12);
  return p;
}

model::HostSample HostAt(int64_t t_ms, double scale) {
  model::HostSample h;
  h.time_ms = t_ms;
  h.cpu_util_pct = 38.5;
  h.iowait_pct = 1.2;
  h.mem_used_bytes = 402311 * kMib;
  h.mem_total_bytes = 2063592 * kMib;
  h.mem_available_bytes = (2063592 - 402311) * kMib;
  h.load1 = 41.2;
  h.load5 = 40;
  model::NicSample eth;
  eth.name = "enp86s0f0np0";
  eth.tx_bytes = static_cast<uint64_t>(22.7e6 * scale);
  eth.rx_bytes = static_cast<uint64_t>(26.4e6 * scale);
  eth.rx_errors = 1;
  eth.tx_errors = 2;
  eth.link_up = true;
  h.nics.push_back(eth);
  model::IbPortSample ib;
  ib.device = "mlx5_0";
  ib.port = 1;
  ib.state = "ACTIVE";
  ib.xmit_bytes = static_cast<uint64_t>(18233e6 * scale);
  ib.rcv_bytes = static_cast<uint64_t>(18190.1e6 * scale);
  ib.symbol_errors = 0;
  ib.rcv_errors = 0;
  ib.local_ack_timeout_err = 1;
  ib.packet_seq_err = 2;
  h.ib_ports.push_back(ib);
  return h;
}

model::ProcessAttribution Proc() {
  model::ProcessAttribution p;
  p.pid = 41233;
  p.container_pid = 12;
  p.gpu_index = 0;
  p.gpu_uuid = "GPU-1c6f";
  p.used_memory_bytes = static_cast<uint64_t>(60110 * kMib);
  p.command = "python";
  p.uid = 1000;
  p.user = "alice";
  p.container_id = "3f2a9c0d1b7e" + std::string(52, 'a');
  p.container_runtime = "containerd";
  p.job_id = "12345";
  p.visible_index = 0;
  return p;
}

model::StepReport Step() {
  model::StepReport s;
  s.step = 1200;
  s.duration_s = 0.812;
  s.samples = 256;
  s.data_wait_s = 0.011;
  s.comm_s = 0.104;
  s.checkpoint_s = 0.0;
  s.loss = 2.3141;
  s.grad_norm = 1.07;
  s.scalars = {{"lr", 3e-4}};
  return s;
}

json Parse(const std::string& line) { return json::parse(line); }

// ---------------------------------------------------------------- t

TEST(TraceTime, MillisecondsWithoutFloatNoise) {
  EXPECT_EQ(FormatTraceTime(1764460801900), "1764460801.9");
  EXPECT_EQ(FormatTraceTime(1764460800000), "1764460800");
  EXPECT_EQ(FormatTraceTime(1764460801001), "1764460801.001");
  EXPECT_EQ(FormatTraceTime(1764460801010), "1764460801.01");
  EXPECT_EQ(FormatTraceTime(1764460801999), "1764460801.999");
  EXPECT_EQ(FormatTraceTime(0), "0");
  EXPECT_EQ(FormatTraceTime(5), "0.005");
  EXPECT_EQ(FormatTraceTime(-1500), "-1.5");
  EXPECT_EQ(FormatTraceTime(std::numeric_limits<int64_t>::min()), "-9223372036854775.808");
}

TEST(TraceTime, EveryMillisecondReadsBackExactly) {
  // A JSON reader parsing "t" as a double and rounding t*1000 gets the same ms back.
  for (int64_t ms = kT0; ms < kT0 + 3000; ++ms) {
    const std::string t = FormatTraceTime(ms);
    ASSERT_EQ(std::llround(std::stod(t) * 1000), ms) << t;
    ASSERT_EQ(t.find("000000"), std::string::npos) << t;
  }
}

// ---------------------------------------------------------------- exact JSON per record type

TEST(TraceWriter, NodeRecordExact) {
  EXPECT_EQ(NodeRecord(kT0, "gpu-a01", System(), Gpus(), FullNodeExtras()),
            R"({"t":1764460800,"type":"node","node":"gpu-a01","driver_version":"550.90.07",)"
            R"("cuda_version":"12.4","nccl_version":"2.21.5","clock_offset_ms":0.4,"gpus":[)"
            R"({"index":0,"uuid":"GPU-1c6f","name":"NVIDIA H100 80GB HBM3",)"
            R"("pci_bus_id":"00000000:18:00.0","numa_node":0,"cpu_affinity":"0-55",)"
            R"("memory_total_mib":81559,"power_limit_w":700,"max_sm_clock_mhz":1980,)"
            R"("max_mem_clock_mhz":2619,"pcie_max_gen":5,"pcie_max_width":16,"nvlink_count":18,)"
            R"("mig_mode":false},)"
            R"({"index":1,"uuid":"GPU-2d9b","name":"NVIDIA H100 80GB HBM3",)"
            R"("pci_bus_id":"00000000:2a:00.0","nvlink_count":18,"mig_mode":false}],)"
            R"("topology":{"gpu_links":[["X","NV18"],["NV18","X"]]},)"
            R"("nics":[{"name":"mlx5_0","type":"ib","pci_bus_id":"00000000:1a:00.0","numa_node":0,)"
            R"("link_gbps":400}]})");
}

TEST(TraceWriter, NodeRecordLeavesUnknownsOut) {
  model::GpuStaticInfo g;
  g.index = 3;
  EXPECT_EQ(NodeRecord(kT0 + 1, "n", model::SystemInfo{}, {g}),
            R"({"t":1764460800.001,"type":"node","node":"n","gpus":[)"
            R"({"index":3,"nvlink_count":0,"mig_mode":false}]})");
  NodeExtras x;
  x.clock_offset_ms = kNaN;
  x.nccl_version = "";
  EXPECT_EQ(NodeRecord(kT0, "n", model::SystemInfo{}, {}, x),
            R"({"t":1764460800,"type":"node","node":"n","gpus":[]})");
}

TEST(TraceWriter, NodeGpuExtraFromSampleTakesTheLimits) {
  model::GpuSample s = FullGpuSample(kT0);
  s.Set(GpuMetric::kMaxSmClockMhz, 1980);
  const NodeGpuExtra e = NodeGpuExtraFromSample(2, s);
  EXPECT_EQ(e.index, 2u);
  EXPECT_EQ(e.memory_total_mib, 81559);
  EXPECT_EQ(e.power_limit_w, 700);
  EXPECT_EQ(e.max_sm_clock_mhz, 1980);
  EXPECT_FALSE(e.max_mem_clock_mhz.has_value());
  EXPECT_FALSE(e.numa_node.has_value());
}

TEST(TraceWriter, GpuRecordExact) {
  const model::GpuSample prev = PrevGpuSample(kT0);
  EXPECT_EQ(
      GpuRecord("gpu-a01", 0, FullGpuSample(kT0 + 1000), &prev),
      R"({"t":1764460801,"type":"gpu","node":"gpu-a01","gpu":0,"util_pct":97,"mem_util_pct":41,)"
      R"("sm_active":0.83,"sm_occupancy":0.41,"tensor_active":0.52,"dram_active":0.38,)"
      R"("mem_used_mib":61234,"temp_c":64,"mem_temp_c":71,"power_w":612.4,)"
      R"("energy_j":18234567.123,"sm_clock_mhz":1980,"mem_clock_mhz":2619,)"
      R"("throttle":["sw_power_cap"],"pcie_tx_mbs":310.2,"pcie_rx_mbs":295,"pcie_gen":5,)"
      R"("pcie_width":16,"pcie_replay":0,"nvlink_tx_mbs":41230,"nvlink_rx_mbs":41102.5,)"
      R"("nvlink_active_links":18,"nvlink_crc_errors":3,"nvlink_replay":0,"nvlink_recovery":0,)"
      R"("ecc_sbe_volatile":0,"ecc_dbe_volatile":0,"retired_pages":2,)"
      R"("remapped_rows_pending":false,"remapped_rows_failure":false})");
}

TEST(TraceWriter, GpuRecordAbsentStaysAbsent) {
  model::GpuSample s;
  s.time_ms = kT0 + 250;
  EXPECT_EQ(GpuRecord("n", 7, s), R"({"t":1764460800.25,"type":"gpu","node":"n","gpu":7})");
  // A value set but then marked invalid is still absent: validity, not value, decides.
  s.Set(GpuMetric::kTempC, 0);
  s.valid.reset(model::Idx(GpuMetric::kTempC));
  s.Set(GpuMetric::kClockEventReasons, 0);
  EXPECT_EQ(GpuRecord("n", 7, s),
            R"({"t":1764460800.25,"type":"gpu","node":"n","gpu":7,"throttle":[]})");
}

TEST(TraceWriter, GpuRecordNeverWritesNanOrInf) {
  model::GpuSample s;
  s.time_ms = kT0;
  s.Set(GpuMetric::kPowerW, kNaN);
  s.Set(GpuMetric::kTempC, kInf);
  s.Set(GpuMetric::kUtilGpuPct, -kInf);
  s.Set(GpuMetric::kClockEventReasons, kNaN);
  s.Set(GpuMetric::kRemappedRowsPending, kNaN);
  s.Set(GpuMetric::kPcieTxBytesPerSec, kNaN);
  s.Set(GpuMetric::kEccSbeVolatile, 3);
  s.Set(GpuMetric::kEccDbeVolatile, kNaN);
  const std::string line = GpuRecord("n", 0, s);
  EXPECT_EQ(line, R"({"t":1764460800,"type":"gpu","node":"n","gpu":0,"ecc_sbe_volatile":3})");
  EXPECT_NO_THROW(Parse(line));
}

TEST(TraceWriter, NvlinkRatesNeedTwoSamplesAndSurviveNoReset) {
  const model::GpuSample cur = FullGpuSample(kT0 + 2000);
  // No previous sample: no rate.
  EXPECT_FALSE(Parse(GpuRecord("n", 0, cur)).contains("nvlink_tx_mbs"));
  // Two seconds apart: bytes / 2 s.
  model::GpuSample prev = PrevGpuSample(kT0);
  auto j = Parse(GpuRecord("n", 0, cur, &prev));
  EXPECT_DOUBLE_EQ(j["nvlink_tx_mbs"].get<double>(), 20615);
  // Counter went down (driver reload): a reset, not a negative rate.
  prev.Set(GpuMetric::kNvlinkTxBytes, 2e12);
  j = Parse(GpuRecord("n", 0, cur, &prev));
  EXPECT_FALSE(j.contains("nvlink_tx_mbs"));
  EXPECT_TRUE(j.contains("nvlink_rx_mbs"));
  // Time did not advance.
  prev = PrevGpuSample(kT0 + 2000);
  EXPECT_FALSE(Parse(GpuRecord("n", 0, cur, &prev)).contains("nvlink_rx_mbs"));
}

TEST(TraceWriter, EveryCatalogTraceFieldIsWritten) {
  // The metric catalog names a trace field for some metrics; each must reach the record when
  // that metric alone is valid (with a previous sample for the counter-rate fields).
  for (const auto& d : model::GpuMetricCatalog()) {
    model::GpuSample prev, s;
    prev.time_ms = kT0;
    prev.Set(d.id, 1);
    s.time_ms = kT0 + 1000;
    s.Set(d.id, 2);
    const json j = Parse(GpuRecord("n", 0, s, &prev));
    size_t fields = j.size() - 4;  // t, type, node, gpu
    // Summed into the field the catalog names for their sibling (see GpuRecord).
    if (d.id == GpuMetric::kNvlinkCrcDataErrors) {
      EXPECT_EQ(j.value("nvlink_crc_errors", 0.0), 2);
    } else if (d.id == GpuMetric::kRetiredPagesDbe) {
      EXPECT_EQ(j.value("retired_pages", 0.0), 2);
    } else if (d.trace_field.empty()) {
      EXPECT_EQ(fields, 0u) << d.name << " is written though the catalog names no trace field";
    } else {
      EXPECT_TRUE(j.contains(std::string(d.trace_field))) << d.name << " -> " << d.trace_field;
      EXPECT_EQ(fields, 1u) << d.name;
    }
  }
}

TEST(TraceWriter, MigRecords) {
  model::GpuSample s;
  s.time_ms = kT0;
  model::MigSample m;
  m.gpu_instance_id = 1;
  m.compute_instance_id = 0;
  m.mem_used_mib = 1024;
  m.sm_active = 0.5;
  m.graphics_active = 0.6;  // no trace field
  s.mig.push_back(m);
  m.gpu_instance_id = 2;
  m.mem_used_mib.reset();
  m.sm_active = kNaN;
  s.mig.push_back(m);
  EXPECT_EQ(MigRecords("n", 3, s),
            (std::vector<std::string>{
                R"({"t":1764460800,"type":"gpu","node":"n","gpu":3,"mig":"1/0",)"
                R"("mem_used_mib":1024,"sm_active":0.5})",
                R"({"t":1764460800,"type":"gpu","node":"n","gpu":3,"mig":"2/0"})"}));
}

TEST(TraceWriter, HostRecordExact) {
  const model::HostSample prev = HostAt(kT0, 0);
  model::HostSample cur = HostAt(kT0 + 1000, 1);
  model::IbPortSample port2;
  port2.device = "mlx5_1";
  port2.port = 2;
  port2.state = "DOWN";
  cur.ib_ports.push_back(port2);
  EXPECT_EQ(
      HostRecord("gpu-a01", cur, &prev),
      R"({"t":1764460801,"type":"host","node":"gpu-a01","cpu_pct":38.5,"iowait_pct":1.2,)"
      R"("mem_used_mib":402311,"mem_total_mib":2063592,"load1":41.2,"nics":{)"
      R"("enp86s0f0np0":{"tx_mbs":22.7,"rx_mbs":26.4,"link_up":true,"errors":3},)"
      R"("mlx5_0":{"tx_mbs":18233,"rx_mbs":18190.1,"link_up":true,"errors":0,"retransmits":3},)"
      R"("mlx5_1/2":{"link_up":false}}})");
}

TEST(TraceWriter, HostRecordFirstSampleHasNoRates) {
  model::HostSample h;
  h.time_ms = kT0;
  EXPECT_EQ(HostRecord("n", h), R"({"t":1764460800,"type":"host","node":"n"})");
  h = HostAt(kT0, 1);
  const json j = Parse(HostRecord("n", h));
  EXPECT_FALSE(j["nics"]["mlx5_0"].contains("tx_mbs"));
  EXPECT_EQ(j["nics"]["mlx5_0"]["retransmits"], 3);
  // A counter that went down (interface re-created) gives no rate.
  const model::HostSample prev = HostAt(kT0 - 1000, 2);
  EXPECT_FALSE(Parse(HostRecord("n", h, &prev))["nics"]["enp86s0f0np0"].contains("tx_mbs"));
}

TEST(TraceWriter, ProcRecordExact) {
  EXPECT_EQ(ProcRecord(kT0 + 1000, "gpu-a01", Proc(), std::vector<unsigned>{0}),
            R"({"t":1764460801,"type":"proc","node":"gpu-a01","pid":41233,"gpu":0,)"
            R"("mem_used_mib":60110,"user":"alice","container":"3f2a9c0d1b7e","job":"12345",)"
            R"("cpu_numa_nodes":[0],"visible_index":0})");
  model::ProcessAttribution bare;
  bare.pid = 7;
  bare.gpu_index = 2;
  EXPECT_EQ(ProcRecord(kT0, "n", bare),
            R"({"t":1764460800,"type":"proc","node":"n","pid":7,"gpu":2})");
}

TEST(TraceWriter, JobRecordsExact) {
  JobLifecycle start;
  start.job = "12345";
  start.state = JobState::kStart;
  start.template_name = "llama-8b-fsdp-1node";
  start.user = "alice";
  start.project = "nlp";
  start.ranks = 8;
  start.gpus = std::vector<unsigned>{0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(JobRecord(kT0 - 10000, "gpu-a01", start),
            R"({"t":1764460790,"type":"job","node":"gpu-a01","job":"12345","state":"start",)"
            R"("template":"llama-8b-fsdp-1node","user":"alice","project":"nlp","ranks":8,)"
            R"("gpus":[0,1,2,3,4,5,6,7]})");
  JobLifecycle end;
  end.job = "12345";
  end.state = JobState::kEnd;
  end.exit_code = -9;
  EXPECT_EQ(JobRecord(kT0 + 7190000, "gpu-a01", end),
            R"({"t":1764467990,"type":"job","node":"gpu-a01","job":"12345","state":"end",)"
            R"("exit_code":-9})");
  JobLifecycle queued;
  queued.job = "9";
  queued.state = JobState::kQueued;
  EXPECT_EQ(JobRecord(kT0, "n", queued),
            R"({"t":1764460800,"type":"job","node":"n","job":"9","state":"queued"})");
}

TEST(TraceWriter, StepRecordExact) {
  EXPECT_EQ(StepRecord(kT0 + 1900, "gpu-a01", "12345", 0, 0u, Step()),
            R"({"t":1764460801.9,"type":"step","node":"gpu-a01","job":"12345","rank":0,)"
            R"("gpu":0,"step":1200,"duration_s":0.812,"samples":256,"data_wait_s":0.011,)"
            R"("comm_s":0.104,"checkpoint_s":0,"loss":2.3141,"grad_norm":1.07})");
  model::StepReport bare;
  bare.step = 3;
  bare.duration_s = 1.5;
  bare.loss = kNaN;  // a diverged loss is not measured, not "NaN"
  bare.grad_norm = kInf;
  EXPECT_EQ(StepRecord(kT0, "n", "j", 5, std::nullopt, bare),
            R"({"t":1764460800,"type":"step","node":"n","job":"j","rank":5,"step":3,)"
            R"("duration_s":1.5})");
}

TEST(TraceWriter, EventRecordExact) {
  EXPECT_EQ(EventRecordLine(kT0 + 200000, "gpu-a01", 3u, EventKind::kXid, 79,
                            "GPU has fallen off the bus"),
            R"({"t":1764461000,"type":"event","node":"gpu-a01","gpu":3,"kind":"xid",)"
            R"("code":79,"message":"GPU has fallen off the bus"})");
  EXPECT_EQ(EventRecordLine(kT0, "n", std::nullopt, EventKind::kCheckpointStart, std::nullopt,
                            "saving checkpoint at step 2040", "6865254"),
            R"({"t":1764460800,"type":"event","node":"n","kind":"checkpoint_start",)"
            R"("message":"saving checkpoint at step 2040","job":"6865254"})");
  EXPECT_EQ(EventRecordLine(kT0, "n", std::nullopt, EventKind::kMaintenanceEnd, std::nullopt, ""),
            R"({"t":1764460800,"type":"event","node":"n","kind":"maintenance_end"})");
}

TEST(TraceWriter, LogRecordExact) {
  EXPECT_EQ(LogRecord(kT0 - 4800, "gpu-a01", "12345", 0u, LogSource::kNccl,
                      "gpu-a01:41233:41233 [0] NCCL INFO Channel 00/24 : 0[0] -> 1[1] via "
                      "P2P/CUMEM/read"),
            R"({"t":1764460795.2,"type":"log","node":"gpu-a01","job":"12345","rank":0,)"
            R"("source":"nccl","line":"gpu-a01:41233:41233 [0] NCCL INFO Channel 00/24 : )"
            R"(0[0] -> 1[1] via P2P/CUMEM/read"})");
  EXPECT_EQ(LogRecord(kT0, "n", "", std::nullopt, LogSource::kKernel,
                      "NVRM: Xid (PCI:0000:18:00): 79, pid=1"),
            R"({"t":1764460800,"type":"log","node":"n","source":"kernel",)"
            R"("line":"NVRM: Xid (PCI:0000:18:00): 79, pid=1"})");
  EXPECT_EQ(Parse(LogRecord(kT0, "n", "j", 1u, LogSource::kNcclTests, "x"))["source"],
            "nccl-tests");
  EXPECT_EQ(Parse(LogRecord(kT0, "n", "j", 1u, LogSource::kJob, "x"))["source"], "job");
}

// ---------------------------------------------------------------- hostile strings

TEST(TraceWriter, InvalidUtf8AndControlCharactersNeverThrow) {
  // Truncated sequence, lone continuation byte, overlong '/', a surrogate, > U+10FFFF, an
  // embedded NUL, a newline, quotes and backslashes, DEL and valid multibyte text.
  const std::string hostile = std::string("caf\xC3\xA9 ") + "\xE2\x82" + " \x80 \xC0\xAF " +
                              "\xED\xA0\x80 \xF4\x90\x80\x80 " + std::string("nul\0z", 5) +
                              " line1\nline2 \"q\" \\ \x7f \x01 \xF0\x9F\x98\x80";
  model::ProcessAttribution p = Proc();
  p.user = hostile;
  p.job_id = "\xff";
  std::vector<std::string> lines = {
      ProcRecord(kT0, "n", p),
      LogRecord(kT0, "n", "j", 0u, LogSource::kJob, hostile),
      EventRecordLine(kT0, "n\xfe", std::nullopt, EventKind::kAnnotation, std::nullopt, hostile),
  };
  for (const auto& line : lines) {
    EXPECT_EQ(line.find('\n'), std::string::npos) << "a record must stay on one line";
    json j;
    ASSERT_NO_THROW(j = Parse(line)) << line;
    // Valid UTF-8 throughout: nlohmann's strict dump (error_handler::strict) accepts it.
    EXPECT_NO_THROW(j.dump());
  }
  const std::string expected_text =
      "caf\xC3\xA9 \xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD "
      "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD " +
      std::string("nul\0z", 5) + " line1\nline2 \"q\" \\ \x7f \x01 \xF0\x9F\x98\x80";
  EXPECT_EQ(Parse(lines[1])["line"].get<std::string>(), expected_text);
  EXPECT_EQ(Parse(lines[0])["user"].get<std::string>(), expected_text);
  EXPECT_EQ(Parse(lines[0])["job"].get<std::string>(), "\xEF\xBF\xBD");
  EXPECT_EQ(Parse(lines[2])["node"].get<std::string>(), "n\xEF\xBF\xBD");
  // The replacement is the project's SanitizeUtf8 (one U+FFFD per invalid byte, as in label
  // values); nlohmann's error_handler::replace differs only in folding a truncated sequence
  // ("\xE2\x82") into a single U+FFFD.
  // Control characters escaped as JSON requires.
  EXPECT_NE(lines[1].find(R"(nul\u0000z line1\nline2 \"q\" \\)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(R"(\u0001)"), std::string::npos);
}

// ---------------------------------------------------------------- validation against the spec

// The field names of trace-format.md, per record type, with the JSON kind of each value:
// n number, s string, b bool, a array, o object.
using FieldKinds = std::map<std::string, char>;
const std::map<std::string, FieldKinds>& SpecFields() {
  static const auto* kFields = new std::map<std::string, FieldKinds>{
      {"node",
       {{"t", 'n'},
        {"type", 's'},
        {"node", 's'},
        {"driver_version", 's'},
        {"cuda_version", 's'},
        {"nccl_version", 's'},
        {"clock_offset_ms", 'n'},
        {"gpus", 'a'},
        {"topology", 'o'},
        {"nics", 'a'}}},
      {"node.gpus",
       {{"index", 'n'},
        {"uuid", 's'},
        {"name", 's'},
        {"pci_bus_id", 's'},
        {"numa_node", 'n'},
        {"cpu_affinity", 's'},
        {"memory_total_mib", 'n'},
        {"power_limit_w", 'n'},
        {"max_sm_clock_mhz", 'n'},
        {"max_mem_clock_mhz", 'n'},
        {"pcie_max_gen", 'n'},
        {"pcie_max_width", 'n'},
        {"nvlink_count", 'n'},
        {"mig_mode", 'b'}}},
      {"node.topology", {{"gpu_links", 'a'}}},
      {"node.nics",
       {{"name", 's'}, {"type", 's'}, {"pci_bus_id", 's'}, {"numa_node", 'n'}, {"link_gbps", 'n'}}},
      {"gpu",
       {{"t", 'n'},
        {"type", 's'},
        {"node", 's'},
        {"gpu", 'n'},
        {"mig", 's'},
        {"util_pct", 'n'},
        {"mem_util_pct", 'n'},
        {"sm_active", 'n'},
        {"sm_occupancy", 'n'},
        {"tensor_active", 'n'},
        {"dram_active", 'n'},
        {"mem_used_mib", 'n'},
        {"temp_c", 'n'},
        {"mem_temp_c", 'n'},
        {"power_w", 'n'},
        {"energy_j", 'n'},
        {"sm_clock_mhz", 'n'},
        {"mem_clock_mhz", 'n'},
        {"throttle", 'a'},
        {"fan_pct", 'n'},
        {"pcie_tx_mbs", 'n'},
        {"pcie_rx_mbs", 'n'},
        {"pcie_gen", 'n'},
        {"pcie_width", 'n'},
        {"pcie_replay", 'n'},
        {"nvlink_tx_mbs", 'n'},
        {"nvlink_rx_mbs", 'n'},
        {"nvlink_active_links", 'n'},
        {"nvlink_crc_errors", 'n'},
        {"nvlink_replay", 'n'},
        {"nvlink_recovery", 'n'},
        {"ecc_sbe_volatile", 'n'},
        {"ecc_dbe_volatile", 'n'},
        {"retired_pages", 'n'},
        {"remapped_rows_pending", 'b'},
        {"remapped_rows_failure", 'b'}}},
      {"host",
       {{"t", 'n'},
        {"type", 's'},
        {"node", 's'},
        {"cpu_pct", 'n'},
        {"iowait_pct", 'n'},
        {"mem_used_mib", 'n'},
        {"mem_total_mib", 'n'},
        {"load1", 'n'},
        {"nics", 'o'}}},
      {"host.nics",
       {{"tx_mbs", 'n'}, {"rx_mbs", 'n'}, {"link_up", 'b'}, {"errors", 'n'}, {"retransmits", 'n'}}},
      {"proc",
       {{"t", 'n'},
        {"type", 's'},
        {"node", 's'},
        {"pid", 'n'},
        {"gpu", 'n'},
        {"mem_used_mib", 'n'},
        {"user", 's'},
        {"container", 's'},
        {"job", 's'},
        {"cpu_numa_nodes", 'a'},
        {"visible_index", 'n'}}},
      {"job",
       {{"t", 'n'},
        {"type", 's'},
        {"node", 's'},
        {"job", 's'},
        {"state", 's'},
        {"template", 's'},
        {"user", 's'},
        {"project", 's'},
        {"ranks", 'n'},
        {"gpus", 'a'},
        {"exit_code", 'n'}}},
      {"step",
       {{"t", 'n'},
        {"type", 's'},
        {"node", 's'},
        {"job", 's'},
        {"rank", 'n'},
        {"gpu", 'n'},
        {"step", 'n'},
        {"duration_s", 'n'},
        {"samples", 'n'},
        {"data_wait_s", 'n'},
        {"comm_s", 'n'},
        {"checkpoint_s", 'n'},
        {"loss", 'n'},
        {"grad_norm", 'n'}}},
      // "job" is not in the spec's event example; the reference scenarios write it on
      // checkpoint events (see EventRecordLine).
      {"event",
       {{"t", 'n'},
        {"type", 's'},
        {"node", 's'},
        {"gpu", 'n'},
        {"kind", 's'},
        {"code", 'n'},
        {"message", 's'},
        {"job", 's'}}},
      {"log",
       {{"t", 'n'},
        {"type", 's'},
        {"node", 's'},
        {"job", 's'},
        {"rank", 'n'},
        {"source", 's'},
        {"line", 's'}}},
  };
  return *kFields;
}

const std::set<std::string> kThrottleNames = {"sw_power_cap", "hw_slowdown",    "hw_thermal",
                                              "sw_thermal",   "hw_power_brake", "sync_boost",
                                              "idle",         "app_clocks"};
const std::set<std::string> kEventKinds = {"xid",
                                           "ecc",
                                           "gpu_lost",
                                           "driver_change",
                                           "config_change",
                                           "topology_change",
                                           "maintenance_start",
                                           "maintenance_end",
                                           "checkpoint_start",
                                           "checkpoint_end",
                                           "annotation"};

char KindOf(const json& v) {
  if (v.is_number()) return 'n';
  if (v.is_string()) return 's';
  if (v.is_boolean()) return 'b';
  if (v.is_array()) return 'a';
  if (v.is_object()) return 'o';
  return '?';
}

void CheckFields(const json& obj, const std::string& where, const std::string& line) {
  ASSERT_TRUE(obj.is_object()) << where << ": " << line;
  const FieldKinds& allowed = SpecFields().at(where);
  for (const auto& [key, value] : obj.items()) {
    auto it = allowed.find(key);
    ASSERT_NE(it, allowed.end()) << where << " has a field the spec does not name: " << key << "\n"
                                 << line;
    EXPECT_EQ(KindOf(value), it->second) << where << "." << key << "\n" << line;
  }
}

void ValidateRecord(const std::string& line) {
  SCOPED_TRACE(line);
  json j;
  ASSERT_NO_THROW(j = Parse(line));
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("t") && j["t"].is_number());
  ASSERT_TRUE(j.contains("type") && j["type"].is_string());
  // The flight recorder depends on this prefix.
  ASSERT_TRUE(line.starts_with(R"({"t":)"));
  ASSERT_NE(line.find(R"(,"type":")" + j["type"].get<std::string>() + R"(","node":")"),
            std::string::npos);
  const std::string type = j["type"];
  ASSERT_TRUE(SpecFields().count(type)) << "unknown type " << type;
  CheckFields(j, type, line);
  if (type == "node") {
    for (const auto& g : j["gpus"]) CheckFields(g, "node.gpus", line);
    if (j.contains("topology")) {
      CheckFields(j["topology"], "node.topology", line);
      for (const auto& row : j["topology"]["gpu_links"])
        for (const auto& cell : row) EXPECT_TRUE(cell.is_string());
    }
    if (j.contains("nics"))
      for (const auto& n : j["nics"]) CheckFields(n, "node.nics", line);
  } else if (type == "gpu") {
    if (j.contains("throttle")) {
      for (const auto& r : j["throttle"]) EXPECT_TRUE(kThrottleNames.count(r.get<std::string>()));
    }
    for (const char* ratio : {"sm_active", "sm_occupancy", "tensor_active", "dram_active"})
      if (j.contains(ratio)) {
        EXPECT_GE(j[ratio].get<double>(), 0);
        EXPECT_LE(j[ratio].get<double>(), 1);
      }
  } else if (type == "host") {
    if (j.contains("nics"))
      for (const auto& [name, nic] : j["nics"].items()) CheckFields(nic, "host.nics", line);
  } else if (type == "proc") {
    if (j.contains("cpu_numa_nodes")) {
      for (const auto& n : j["cpu_numa_nodes"]) EXPECT_TRUE(n.is_number_unsigned());
    }
  } else if (type == "job") {
    EXPECT_TRUE(j["state"] == "queued" || j["state"] == "start" || j["state"] == "end");
  } else if (type == "event") {
    EXPECT_TRUE(kEventKinds.count(j["kind"].get<std::string>()));
  } else if (type == "log") {
    const std::string source = j["source"];
    EXPECT_TRUE(source == "nccl" || source == "job" || source == "kernel" ||
                source == "nccl-tests");
  }
}

TEST(TraceWriter, EveryRecordMatchesTheSpecFieldList) {
  std::vector<std::string> lines;
  lines.push_back(NodeRecord(kT0, "gpu-a01", System(), Gpus(), FullNodeExtras()));
  const model::GpuSample prev = PrevGpuSample(kT0);
  model::GpuSample full = FullGpuSample(kT0 + 1000);
  full.Set(GpuMetric::kFanPct, 30);
  full.Set(GpuMetric::kClockEventReasons, 0x1ff);  // every reason NVML knows
  model::MigSample mig;
  mig.mem_used_mib = 10;
  mig.sm_active = 0.2;
  full.mig.push_back(mig);
  lines.push_back(GpuRecord("gpu-a01", 0, full, &prev));
  for (auto& m : MigRecords("gpu-a01", 0, full)) lines.push_back(std::move(m));
  const model::HostSample hprev = HostAt(kT0, 0);
  lines.push_back(HostRecord("gpu-a01", HostAt(kT0 + 1000, 1), &hprev));
  lines.push_back(ProcRecord(kT0, "gpu-a01", Proc(), std::vector<unsigned>{0, 1}));
  JobLifecycle job{"1", JobState::kStart, "t", "u", "p", 8, std::vector<unsigned>{0}, 0};
  for (JobState s : {JobState::kQueued, JobState::kStart, JobState::kEnd}) {
    job.state = s;
    lines.push_back(JobRecord(kT0, "gpu-a01", job));
  }
  lines.push_back(StepRecord(kT0, "gpu-a01", "1", 0, 0u, Step()));
  for (int k = 0; k <= static_cast<int>(EventKind::kAnnotation); ++k)
    lines.push_back(
        EventRecordLine(kT0, "gpu-a01", 1u, static_cast<EventKind>(k), 79, "m", "job-1"));
  for (LogSource s : {LogSource::kNccl, LogSource::kJob, LogSource::kKernel, LogSource::kNcclTests})
    lines.push_back(LogRecord(kT0, "gpu-a01", "1", 0u, s, "text"));
  std::set<std::string> types;
  for (const auto& line : lines) {
    ValidateRecord(line);
    types.insert(Parse(line)["type"].get<std::string>());
  }
  EXPECT_EQ(types,
            (std::set<std::string>{"node", "gpu", "host", "proc", "job", "step", "event", "log"}));
}

// ---------------------------------------------------------------- flight recorder

std::string Line(int64_t t_ms, int id, std::string_view node = "n") {
  return LogRecord(t_ms, node, "j", 0u, LogSource::kJob, "line " + std::to_string(id));
}
std::string NodeLine(int64_t t_ms, std::string_view node, std::string_view driver) {
  model::SystemInfo s;
  s.driver_version = std::string(driver);
  return NodeRecord(t_ms, node, s, {});
}
int64_t TOf(const std::string& line) { return std::llround(Parse(line)["t"].get<double>() * 1000); }
std::string TextOf(const std::string& line) {
  const json j = Parse(line);
  return j["type"] == "node" ? "node:" + j["node"].get<std::string>() + ":" +
                                   j.value("driver_version", std::string())
                             : j["line"].get<std::string>();
}
std::vector<std::string> Texts(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  for (const auto& l : lines) out.push_back(TextOf(l));
  return out;
}

TEST(FlightRecorder, ByteBoundDropsOldestFirst) {
  // Whole seconds and two-digit ids: every line has the same size.
  const size_t per_line = Line(kT0, 10).size() + FlightRecorder::kLineOverheadBytes;
  FlightRecorder r({.max_bytes = 10 * per_line, .max_age = std::chrono::hours(1)});
  for (int i = 10; i < 30; ++i) r.Add(kT0 + i * 1000, Line(kT0 + i * 1000, i));
  const FlightRecorderStats s = r.Stats();
  EXPECT_EQ(s.lines, 10u);
  EXPECT_EQ(s.bytes, 10 * per_line);
  EXPECT_EQ(s.dropped_lines, 10u);
  EXPECT_EQ(s.dropped_bytes, 10 * per_line);
  EXPECT_EQ(s.oldest_t_ms, kT0 + 20000);
  EXPECT_EQ(s.newest_t_ms, kT0 + 29000);
  const auto w = r.Window(kT0, kT0 + 100000);
  ASSERT_EQ(w.size(), 10u);
  EXPECT_EQ(TextOf(w.front()), "line 20");
  EXPECT_EQ(TextOf(w.back()), "line 29");
}

TEST(FlightRecorder, ALineLargerThanTheBoundIsRefusedAlone) {
  FlightRecorder r({.max_bytes = 1000, .max_age = std::chrono::hours(1)});
  r.Add(kT0, Line(kT0, 1));
  r.Add(kT0 + 1, std::string(2000, 'x'));
  EXPECT_EQ(r.Stats().lines, 1u);
  EXPECT_EQ(r.Stats().dropped_lines, 1u);
  EXPECT_EQ(Texts(r.Window(kT0, kT0 + 10)), std::vector<std::string>{"line 1"});
}

TEST(FlightRecorder, AgeBoundFollowsTheNewestLine) {
  FlightRecorder r({.max_bytes = 1 << 20, .max_age = std::chrono::seconds(1)});
  for (int i = 0; i <= 30; ++i) r.Add(kT0 + i * 100, Line(kT0 + i * 100, i));
  FlightRecorderStats s = r.Stats();
  EXPECT_EQ(s.oldest_t_ms, kT0 + 2000);  // newest 3000 - 1000 ms
  EXPECT_EQ(s.lines, 11u);
  EXPECT_EQ(s.dropped_lines, 20u);
  // A late line already past the age bound is dropped at once.
  r.Add(kT0 + 1500, Line(kT0 + 1500, 99));
  s = r.Stats();
  EXPECT_EQ(s.lines, 11u);
  EXPECT_EQ(s.dropped_lines, 21u);
  // A late line inside the bound is kept at its place.
  r.Add(kT0 + 2050, Line(kT0 + 2050, 98));
  const auto w = Texts(r.Window(kT0, kT0 + 2100));
  EXPECT_EQ(w, (std::vector<std::string>{"line 20", "line 98", "line 21"}));
}

TEST(FlightRecorder, WindowIsSortedDespiteOutOfOrderAddsAndStableOnTies) {
  FlightRecorder r;
  const std::vector<std::pair<int64_t, int>> adds = {{10, 1}, {30, 2}, {20, 3}, {30, 4},
                                                     {25, 5}, {5, 6},  {30, 7}, {20, 8}};
  for (auto [dt, id] : adds) r.Add(kT0 + dt, Line(kT0 + dt, id));
  EXPECT_EQ(Texts(r.Window(kT0, kT0 + 100)),
            (std::vector<std::string>{"line 6", "line 1", "line 3", "line 8", "line 5", "line 2",
                                      "line 4", "line 7"}));
  // Inclusive bounds.
  EXPECT_EQ(Texts(r.Window(kT0 + 20, kT0 + 25)),
            (std::vector<std::string>{"line 3", "line 8", "line 5"}));
  EXPECT_TRUE(r.Window(kT0 + 31, kT0 + 100).empty());
  EXPECT_TRUE(r.Window(kT0 + 30, kT0 + 20).empty());
}

TEST(FlightRecorder, NodeRecordIsPinnedAndComesFirst) {
  FlightRecorder r({.max_bytes = 1 << 20, .max_age = std::chrono::seconds(10)});
  r.Add(kT0, NodeLine(kT0, "gpu-a01", "550"));
  for (int i = 1; i <= 100; ++i) r.Add(kT0 + i * 1000, Line(kT0 + i * 1000, i));
  // The node record aged out of the ring long ago but is kept.
  EXPECT_EQ(r.Stats().pinned_node_records, 1u);
  auto w = r.Window(kT0 + 95000, kT0 + 100000);
  EXPECT_EQ(Texts(w), (std::vector<std::string>{"node:gpu-a01:550", "line 95", "line 96", "line 97",
                                                "line 98", "line 99", "line 100"}));
  ValidateRecord(w.front());

  // A changed node record: windows before it start with the old one and show the new one at
  // its place; windows after it start with the new one.
  r.Add(kT0 + 100500, NodeLine(kT0 + 100500, "gpu-a01", "560"));
  r.Add(kT0 + 101000, Line(kT0 + 101000, 101));
  EXPECT_EQ(
      Texts(r.Window(kT0 + 100000, kT0 + 101000)),
      (std::vector<std::string>{"node:gpu-a01:550", "line 100", "node:gpu-a01:560", "line 101"}));
  EXPECT_EQ(Texts(r.Window(kT0 + 101000, kT0 + 101000)),
            (std::vector<std::string>{"node:gpu-a01:560", "line 101"}));
  // A node record exactly at the window's start is first and not repeated.
  EXPECT_EQ(Texts(r.Window(kT0 + 100500, kT0 + 101000)),
            (std::vector<std::string>{"node:gpu-a01:560", "line 101"}));
  // The t order of the whole window never goes down.
  w = r.Window(kT0 + 90000, kT0 + 200000);
  for (size_t i = 1; i < w.size(); ++i) EXPECT_LE(TOf(w[i - 1]), TOf(w[i]));
}

TEST(FlightRecorder, ANodeDescribedLateStillLeadsItsWindow) {
  // An agent that started while a job's steps stamped a moment earlier were on their way.
  FlightRecorder r;
  r.Add(kT0 + 100, Line(kT0 + 100, 1));
  r.Add(kT0 + 500, NodeLine(kT0 + 500, "gpu-a01", "550"));
  r.Add(kT0 + 600, Line(kT0 + 600, 2));
  auto w = r.Window(kT0, kT0 + 1000);
  EXPECT_EQ(Texts(w), (std::vector<std::string>{"node:gpu-a01:550", "line 1", "line 2"}));
  EXPECT_EQ(TOf(w[0]), TOf(w[1]));  // restamped to the window's first record
  ValidateRecord(w.front());
}

// A node record with its keys in another order (trace-format.md allows any; `gpuwatch sim`
// writes them sorted, "clock_offset_ms" first) is a node record when the caller says so: pinned
// past the ring, in force at later windows, and restamped when hoisted.
TEST(FlightRecorder, ANodeRecordInAnyKeyOrderIsOneWhenTheCallerSaysSo) {
  json node = Parse(NodeLine(kT0 + 500, "gpu-a01", "535"));
  const std::string sorted = node.dump();  // nlohmann's object keeps its keys sorted
  ASSERT_FALSE(sorted.starts_with("{\"t\":")) << sorted;
  FlightRecorder r({.max_bytes = 1 << 20, .max_age = std::chrono::seconds(10)});
  r.Add(kT0 + 100, Line(kT0 + 100, 1, "gpu-a01"));
  r.AddNodeRecord(kT0 + 500, sorted, "gpu-a01");
  r.Add(kT0 + 600, Line(kT0 + 600, 2, "gpu-a01"));
  auto w = r.TimedWindow(kT0, kT0 + 1000);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(TextOf(w[0].line), "node:gpu-a01:535");
  EXPECT_EQ(w[0].t_ms, kT0 + 100);
  EXPECT_EQ(TOf(w[0].line), kT0 + 100);  // restamped through a parse
  for (int i = 1; i <= 30; ++i) r.Add(kT0 + i * 1000, Line(kT0 + i * 1000, i, "gpu-a01"));
  EXPECT_EQ(r.Stats().pinned_node_records, 1u);
  const auto later = r.TimedWindow(kT0 + 29000, kT0 + 30000);
  EXPECT_EQ(Texts({later[0].line, later[1].line, later[2].line}),
            (std::vector<std::string>{"node:gpu-a01:535", "line 29", "line 30"}));
  EXPECT_EQ(later[0].t_ms, kT0 + 500);
  EXPECT_EQ(later[0].line, sorted);  // in force: as it came
  // Without the caller's word it is an ordinary line: not in force later.
  FlightRecorder plain({.max_bytes = 1 << 20, .max_age = std::chrono::seconds(10)});
  plain.Add(kT0 + 500, sorted);
  for (int i = 1; i <= 30; ++i) plain.Add(kT0 + i * 1000, Line(kT0 + i * 1000, i, "gpu-a01"));
  EXPECT_EQ(plain.Window(kT0 + 29000, kT0 + 30000).size(), 2u);
}

TEST(FlightRecorder, NodeRecordSurvivesTheByteBound) {
  const size_t per_line = Line(kT0, 10).size() + FlightRecorder::kLineOverheadBytes;
  FlightRecorder r({.max_bytes = 5 * per_line, .max_age = std::chrono::hours(1)});
  r.Add(kT0, NodeLine(kT0, "gpu-a01", "550"));
  for (int i = 10; i < 100; ++i) r.Add(kT0 + i * 1000, Line(kT0 + i * 1000, i));
  const auto w = Texts(r.Window(kT0 + 98000, kT0 + 99000));
  EXPECT_EQ(w, (std::vector<std::string>{"node:gpu-a01:550", "line 98", "line 99"}));
  EXPECT_EQ(r.Stats().lines, 5u);
}

TEST(FlightRecorder, SeveralNodes) {
  FlightRecorder r({.max_bytes = 1 << 20, .max_age = std::chrono::seconds(10)});
  r.Add(kT0 + 5, NodeLine(kT0 + 5, "b", "1"));
  r.Add(kT0, NodeLine(kT0, "a", "1"));
  r.Add(kT0 + 20000, Line(kT0 + 20000, 1, "a"));
  r.Add(kT0 + 20001, Line(kT0 + 20001, 2, "b"));
  EXPECT_EQ(r.Stats().pinned_node_records, 2u);
  EXPECT_EQ(Texts(r.Window(kT0 + 20000, kT0 + 30000)),
            (std::vector<std::string>{"node:a:1", "node:b:1", "line 1", "line 2"}));
}

TEST(FlightRecorder, ConcurrentAddsStaySortedAndCounted) {
  FlightRecorder r({.max_bytes = 1 << 26, .max_age = std::chrono::hours(1)});
  constexpr int kThreads = 4, kPerThread = 5000;
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&r, k] {
      for (int i = 0; i < kPerThread; ++i) {
        // Each source runs in order with its own lag: across sources, t jumps back a little.
        const int64_t t = kT0 + i * 10 - k * 7;
        r.Add(t, Line(t, i));
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto w = r.Window(kT0 - 1000, kT0 + kPerThread * 10);
  ASSERT_EQ(w.size(), static_cast<size_t>(kThreads * kPerThread));
  for (size_t i = 1; i < w.size(); ++i) ASSERT_LE(TOf(w[i - 1]), TOf(w[i]));
  EXPECT_EQ(r.Stats().dropped_lines, 0u);
}

// ---------------------------------------------------------------- trace files

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Decompresses with zlib's gzread (plain files pass through, as gzread does).
std::string GzReadAll(const std::string& path) {
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) return "<cannot open>";
  std::string out;
  char buf[4096];
  int n;
  while ((n = gzread(gz, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(gz);
  return out;
}

class TraceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = store::testing::FreshScratchDir("trace_file");
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add);
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
};

const std::vector<std::string> kLines = {
    R"({"t":1764460800,"type":"node","node":"n","gpus":[]})",
    R"({"t":1764460800.5,"type":"log","node":"n","source":"job","line":"x"})"};
const std::string kContent = kLines[0] + "\n" + kLines[1] + "\n";

TEST_F(TraceFileTest, PlainFile) {
  const std::string path = dir_ + "/t.jsonl";
  ASSERT_TRUE(WriteTraceFile(path, kLines).ok());
  EXPECT_EQ(ReadAll(path), kContent);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_F(TraceFileTest, GzipFile) {
  const std::string path = dir_ + "/t.jsonl.gz";
  ASSERT_TRUE(WriteTraceFile(path, kLines).ok());
  const std::string raw = ReadAll(path);
  ASSERT_GE(raw.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(raw[0]), 0x1f);  // gzip magic
  EXPECT_EQ(static_cast<unsigned char>(raw[1]), 0x8b);
  EXPECT_EQ(GzReadAll(path), kContent);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_F(TraceFileTest, StreamingWriterManyLines) {
  for (const std::string name : {"/s.jsonl", "/s.jsonl.gz"}) {
    const std::string path = dir_ + name;
    TraceFileWriter w;
    ASSERT_TRUE(w.Open(path).ok());
    std::string expected;
    for (int i = 0; i < 20000; ++i) {  // several internal buffers' worth
      const std::string line = Line(kT0 + i, i);
      ASSERT_TRUE(w.Append(line).ok());
      expected += line + "\n";
      if (i % 5000 == 0) {
        ASSERT_TRUE(w.Flush().ok());
      }
    }
    EXPECT_EQ(w.bytes_appended(), expected.size());
    EXPECT_FALSE(std::filesystem::exists(path)) << "visible before Close";
    ASSERT_TRUE(w.Close().ok());
    EXPECT_FALSE(w.is_open());
    EXPECT_EQ(GzReadAll(path), expected) << name;
  }
}

TEST_F(TraceFileTest, WithoutCloseOnlyTheTmpFileExists) {
  const std::string path = dir_ + "/t.jsonl.gz";
  {
    TraceFileWriter w;
    ASSERT_TRUE(w.Open(path).ok());
    ASSERT_TRUE(w.Append(kLines[0]).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  ASSERT_TRUE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(GzReadAll(path + ".tmp"), kLines[0] + "\n");
}

TEST_F(TraceFileTest, ACrashBeforeCloseNeverReachesTheFinalPath) {
  const std::string path = dir_ + "/crash.jsonl.gz";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    TraceFileWriter w;
    if (!w.Open(path).ok() || !w.Append(kLines[0]).ok() || !w.Flush().ok()) _exit(1);
    (void)w.Append(kLines[1]);  // still buffered: lost with the process
    _exit(0);                   // no destructor, no Close: a crash as far as the file is concerned
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(std::filesystem::exists(path));
  ASSERT_TRUE(std::filesystem::exists(path + ".tmp"));
  // The sync flush point makes the .tmp readable up to the last Flush.
  EXPECT_EQ(GzReadAll(path + ".tmp"), kLines[0] + "\n");
}

TEST_F(TraceFileTest, TheOldFileStaysUntilClose) {
  const std::string path = dir_ + "/t.jsonl";
  ASSERT_TRUE(WriteTraceFile(path, {"old"}).ok());
  TraceFileWriter w;
  ASSERT_TRUE(w.Open(path).ok());
  ASSERT_TRUE(w.Append("new").ok());
  ASSERT_TRUE(w.Flush().ok());
  EXPECT_EQ(ReadAll(path), "old\n");
  ASSERT_TRUE(w.Close().ok());
  EXPECT_EQ(ReadAll(path), "new\n");
}

TEST_F(TraceFileTest, ErrorsNameThePath) {
  // A path through a regular file (ENOTDIR): fails as root too.
  ASSERT_TRUE(WriteTraceFile(dir_ + "/file", {"x"}).ok());
  const std::string bad = dir_ + "/file/t.jsonl.gz";
  Status st = WriteTraceFile(bad, kLines);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(bad + ".tmp"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("Not a directory"), std::string::npos) << st.ToString();

  const std::string missing = dir_ + "/no/such/dir/t.jsonl";
  st = WriteTraceFile(missing, kLines);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(missing), std::string::npos) << st.ToString();

  TraceFileWriter w;
  EXPECT_EQ(w.Append("x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Close().code(), StatusCode::kInvalidArgument);
}

TEST_F(TraceFileTest, UnwritableDirectory) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  const std::string ro = dir_ + "/ro";
  std::filesystem::create_directories(ro);
  ASSERT_EQ(chmod(ro.c_str(), 0500), 0);
  const Status st = WriteTraceFile(ro + "/t.jsonl", kLines);
  chmod(ro.c_str(), 0700);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
  EXPECT_NE(st.message().find(ro + "/t.jsonl.tmp"), std::string::npos) << st.ToString();
}

TEST_F(TraceFileTest, FullDiskIsAClearStatusAndLeavesNothing) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP();
  // /dev/full answers every write with ENOSPC; a symlink makes it the .tmp file.
  const std::string path = dir_ + "/full.jsonl";
  std::filesystem::create_symlink("/dev/full", path + ".tmp");
  std::vector<std::string> many(100000, std::string(100, 'x'));  // > one buffer: a real write
  const Status st = WriteTraceFile(path, many);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find(path + ".tmp"), std::string::npos) << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(path));
}

// Recorder -> file -> gzread -> every line a valid record, node record first.
TEST_F(TraceFileTest, SnapshotOfTheRecorderIsAValidTrace) {
  FlightRecorder r({.max_bytes = 1 << 20, .max_age = std::chrono::seconds(30)});
  r.Add(kT0, NodeRecord(kT0, "gpu-a01", System(), Gpus(), FullNodeExtras()));
  model::GpuSample prev = PrevGpuSample(kT0);
  for (int i = 1; i <= 60; ++i) {
    model::GpuSample s = FullGpuSample(kT0 + i * 1000);
    r.Add(s.time_ms, GpuRecord("gpu-a01", 0, s, &prev));
    prev = s;
    r.Add(kT0 + i * 1000 + 3, StepRecord(kT0 + i * 1000 + 3, "gpu-a01", "1", 0, 0u, Step()));
  }
  const std::string path = dir_ + "/snap.jsonl.gz";
  ASSERT_TRUE(WriteTraceFile(path, r.Window(kT0 + 50000, kT0 + 60000)).ok());
  std::istringstream in(GzReadAll(path));
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + 11 + 10);
  EXPECT_EQ(Parse(lines[0])["type"], "node");
  for (size_t i = 0; i < lines.size(); ++i) {
    ValidateRecord(lines[i]);
    if (i > 0) {
      EXPECT_LE(TOf(lines[i - 1]), TOf(lines[i]));
    }
  }
}

}  // namespace
}  // namespace gpuwatch::trace
