#include "trace/trace_reader.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "model/metric_catalog.h"
#include "store/testing/scratch_dir.h"
#include "trace/trace_file.h"
#include "trace/trace_writer.h"

namespace gpuwatch::trace {
namespace {

using model::GpuMetric;

constexpr int64_t kT0 = 1764460800000;  // 2025-11-30T00:00:00Z
constexpr double kMib = 1024.0 * 1024.0;

std::string FixtureDir() { return std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/trace"; }
// ../shared/scenarios: the evaluation team's example traces (../shared/scenarios/README.md).
std::string ScenarioDir() { return std::string(GPUWATCH_SOURCE_DIR) + "/../shared/scenarios"; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// gzip with zlib's deflate (the gzip wrapper: windowBits 15 + 16).
std::string Gzip(const std::string& data) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, data.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string Gunzip(const std::string& data) {
  z_stream zs{};
  EXPECT_EQ(inflateInit2(&zs, 15 + 16), Z_OK);
  std::string out;
  char buf[65536];
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - zs.avail_out);
  }
  EXPECT_EQ(rc, Z_STREAM_END);
  inflateEnd(&zs);
  return out;
}

// zstd with libzstd's simple one-shot API.
std::string Zstd(const std::string& data, int level = 3) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), level);
  EXPECT_FALSE(ZSTD_isError(n)) << ZSTD_getErrorName(n);
  out.resize(n);
  return out;
}

struct ReadResult {
  std::vector<TraceRecord> records;
  Status error;  // ok when the whole trace was read
  TraceReadStats stats;
};

ReadResult ReadAll(TraceReader& reader) {
  ReadResult r;
  TraceRecord rec;
  for (;;) {
    Result<bool> more = reader.Next(&rec);
    if (!more.ok()) {
      r.error = more.status();
      break;
    }
    if (!*more) break;
    r.records.push_back(rec);
  }
  r.stats = reader.Stats();
  return r;
}

ReadResult ReadBuffer(std::string data, std::string name = "t.jsonl") {
  auto reader = TraceReader::OpenBuffer(std::move(data), std::move(name));
  if (!reader.ok()) return {{}, reader.status(), {}};
  return ReadAll(**reader);
}

ReadResult ReadPath(const std::string& path) {
  auto reader = TraceReader::Open(path);
  if (!reader.ok()) return {{}, reader.status(), {}};
  return ReadAll(**reader);
}

// The error of reading `text` (a plain trace), or "" when it reads without one.
std::string ErrorOf(const std::string& text) {
  ReadResult r = ReadBuffer(text);
  return r.error.ok() ? "" : r.error.message();
}

class TraceReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = store::testing::FreshScratchDir("trace_reader");
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// ---------------------------------------------------------------- the spec's own examples

TEST(TraceReader, SpecExamplesReadExactlyWithEveryFieldKnown) {
  ReadResult r = ReadPath(FixtureDir() + "/spec-examples.jsonl");
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  ASSERT_EQ(r.records.size(), 10u);
  // Every field of every example is a field of the reader: nothing unknown.
  EXPECT_TRUE(r.stats.unknown_fields.empty()) << testing::PrintToString(r.stats.unknown_fields);
  EXPECT_TRUE(r.stats.unknown_values.empty()) << testing::PrintToString(r.stats.unknown_values);
  EXPECT_TRUE(r.stats.unknown_types.empty());
  EXPECT_EQ(r.stats.null_fields, (std::map<std::string, uint64_t>{{"gpu.fan_pct", 1}}));
  EXPECT_EQ(r.stats.out_of_order, 0u);
  EXPECT_EQ(r.stats.CountsLine(), "node=1 gpu=2 host=1 proc=1 job=2 step=1 event=1 log=1");
  EXPECT_TRUE(r.stats.Report().empty()) << "null is as valid as absent: nothing to tell";

  const TraceRecord& job = r.records[0];
  EXPECT_EQ(job.type(), RecordType::kJob);
  EXPECT_EQ(job.t, 1764460790.0);
  EXPECT_EQ(job.t_ms, 1764460790000);
  EXPECT_EQ(job.node, "gpu-a01");
  EXPECT_EQ(job.line, 1u);
  const TraceJob& j = *job.as<TraceJob>();
  EXPECT_EQ(j.job, "12345");
  EXPECT_EQ(j.state, "start");
  EXPECT_EQ(j.template_name, "llama-8b-fsdp-1node");
  EXPECT_EQ(j.user, "alice");
  EXPECT_EQ(j.project, "nlp");
  EXPECT_EQ(j.ranks, 8u);
  EXPECT_EQ(j.gpus, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_FALSE(j.exit_code);

  const TraceLog& log = *r.records[1].as<TraceLog>();
  EXPECT_EQ(r.records[1].t_ms, 1764460795200);
  EXPECT_EQ(log.job, "12345");
  EXPECT_EQ(log.rank, 0u);
  EXPECT_EQ(log.source, "nccl");
  EXPECT_EQ(log.line,
            "gpu-a01:41233:41233 [0] NCCL INFO Channel 00/24 : 0[0] -> 1[1] via P2P/CUMEM/read");

  const TraceNode& node = *r.records[2].as<TraceNode>();
  EXPECT_EQ(node.driver_version, "550.90.07");
  EXPECT_EQ(node.cuda_version, "12.4");
  EXPECT_EQ(node.nccl_version, "2.21.5");
  EXPECT_EQ(node.clock_offset_ms, 0.4);
  ASSERT_TRUE(node.gpus && node.gpus->size() == 1);
  const TraceNodeGpu& g = (*node.gpus)[0];
  EXPECT_EQ(g.index, 0u);
  EXPECT_EQ(g.uuid, "GPU-1c6f...");
  EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g.pci_bus_id, "00000000:18:00.0");
  EXPECT_EQ(g.numa_node, 0);
  EXPECT_EQ(g.cpu_affinity, "0-55");
  EXPECT_EQ(g.memory_total_mib, 81559);
  EXPECT_EQ(g.power_limit_w, 700);
  EXPECT_EQ(g.max_sm_clock_mhz, 1980);
  EXPECT_EQ(g.max_mem_clock_mhz, 2619);
  EXPECT_EQ(g.pcie_max_gen, 5);
  EXPECT_EQ(g.pcie_max_width, 16);
  EXPECT_EQ(g.nvlink_count, 18u);
  EXPECT_EQ(g.mig_mode, false);
  ASSERT_TRUE(node.topology && node.topology->gpu_links);
  EXPECT_EQ(*node.topology->gpu_links,
            (std::vector<std::vector<std::string>>{{"X", "NV18"}, {"NV18", "X"}}));
  ASSERT_TRUE(node.nics && node.nics->size() == 1);
  const TraceNodeNic& nic = (*node.nics)[0];
  EXPECT_EQ(nic.name, "mlx5_0");
  EXPECT_EQ(nic.type, "ib");
  EXPECT_EQ(nic.pci_bus_id, "00000000:1a:00.0");
  EXPECT_EQ(nic.numa_node, 0);
  EXPECT_EQ(nic.link_gbps, 400);

  const TraceGpu& gpu = *r.records[3].as<TraceGpu>();
  EXPECT_EQ(gpu.gpu, 0u);
  EXPECT_FALSE(gpu.mig);
  EXPECT_EQ(gpu.util_pct, 97);
  EXPECT_EQ(gpu.mem_util_pct, 41);
  EXPECT_EQ(gpu.sm_active, 0.83);
  EXPECT_EQ(gpu.sm_occupancy, 0.41);
  EXPECT_EQ(gpu.tensor_active, 0.52);
  EXPECT_EQ(gpu.dram_active, 0.38);
  EXPECT_EQ(gpu.mem_used_mib, 61234);
  EXPECT_EQ(gpu.temp_c, 64);
  EXPECT_EQ(gpu.mem_temp_c, 71);
  EXPECT_EQ(gpu.power_w, 612.4);
  EXPECT_EQ(gpu.energy_j, 18234567.0);
  EXPECT_EQ(gpu.sm_clock_mhz, 1980);
  EXPECT_EQ(gpu.mem_clock_mhz, 2619);
  EXPECT_EQ(gpu.throttle, std::vector<std::string>{});  // measured: nothing active
  EXPECT_FALSE(gpu.fan_pct);                            // null: not measured
  EXPECT_EQ(gpu.pcie_tx_mbs, 310.2);
  EXPECT_EQ(gpu.pcie_rx_mbs, 295.0);
  EXPECT_EQ(gpu.pcie_gen, 5);
  EXPECT_EQ(gpu.pcie_width, 16);
  EXPECT_EQ(gpu.pcie_replay, 0);
  EXPECT_EQ(gpu.nvlink_tx_mbs, 41230.0);
  EXPECT_EQ(gpu.nvlink_rx_mbs, 41102.5);
  EXPECT_EQ(gpu.nvlink_active_links, 18);
  EXPECT_EQ(gpu.nvlink_crc_errors, 0);
  EXPECT_EQ(gpu.nvlink_replay, 0);
  EXPECT_EQ(gpu.nvlink_recovery, 0);
  EXPECT_EQ(gpu.ecc_sbe_volatile, 0);
  EXPECT_EQ(gpu.ecc_dbe_volatile, 0);
  EXPECT_EQ(gpu.retired_pages, 0);
  EXPECT_EQ(gpu.remapped_rows_pending, false);
  EXPECT_EQ(gpu.remapped_rows_failure, false);

  const TraceGpu& mig = *r.records[4].as<TraceGpu>();
  EXPECT_EQ(mig.gpu, 0u);
  EXPECT_EQ(mig.mig, "1/0");
  EXPECT_EQ(mig.mem_used_mib, 1024);
  EXPECT_EQ(mig.sm_active, 0.5);
  EXPECT_FALSE(mig.util_pct);

  const TraceHost& host = *r.records[5].as<TraceHost>();
  EXPECT_EQ(host.cpu_pct, 38.5);
  EXPECT_EQ(host.iowait_pct, 1.2);
  EXPECT_EQ(host.mem_used_mib, 402311);
  EXPECT_EQ(host.mem_total_mib, 2063592);
  EXPECT_EQ(host.load1, 41.2);
  ASSERT_TRUE(host.nics && host.nics->count("mlx5_0"));
  const TraceHostNic& hn = host.nics->at("mlx5_0");
  EXPECT_EQ(hn.tx_mbs, 18233.0);
  EXPECT_EQ(hn.rx_mbs, 18190.1);
  EXPECT_EQ(hn.link_up, true);
  EXPECT_EQ(hn.errors, 0);
  EXPECT_EQ(hn.retransmits, 0);

  const TraceProc& proc = *r.records[6].as<TraceProc>();
  EXPECT_EQ(proc.pid, 41233u);
  EXPECT_EQ(proc.gpu, 0u);
  EXPECT_EQ(proc.mem_used_mib, 60110);
  EXPECT_EQ(proc.user, "alice");
  EXPECT_EQ(proc.container, "3f2a9c0d1b7e");
  EXPECT_EQ(proc.job, "12345");
  EXPECT_EQ(proc.cpu_numa_nodes, std::vector<uint32_t>{0});
  EXPECT_EQ(proc.visible_index, 0u);

  const TraceStep& step = *r.records[7].as<TraceStep>();
  EXPECT_EQ(r.records[7].t_ms, 1764460801900);
  EXPECT_EQ(step.job, "12345");
  EXPECT_EQ(step.rank, 0u);
  EXPECT_EQ(step.gpu, 0u);
  EXPECT_EQ(step.step, 1200u);
  EXPECT_EQ(step.duration_s, 0.812);
  EXPECT_EQ(step.samples, 256);
  EXPECT_EQ(step.data_wait_s, 0.011);
  EXPECT_EQ(step.comm_s, 0.104);
  EXPECT_EQ(step.checkpoint_s, 0.0);
  EXPECT_EQ(step.loss, 2.3141);
  EXPECT_EQ(step.grad_norm, 1.07);

  const TraceEvent& ev = *r.records[8].as<TraceEvent>();
  EXPECT_EQ(ev.gpu, 3u);
  EXPECT_EQ(ev.kind, "xid");
  EXPECT_EQ(ev.code, 79);
  EXPECT_EQ(ev.message, "GPU has fallen off the bus");
  EXPECT_FALSE(ev.job);

  const TraceJob& end = *r.records[9].as<TraceJob>();
  EXPECT_EQ(end.state, "end");
  EXPECT_EQ(end.exit_code, 0);
  EXPECT_FALSE(end.ranks);
}

// ---------------------------------------------------------------- round trip with the writer

model::GpuSample WriterGpuSample(int64_t t_ms) {
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
  s.Set(GpuMetric::kClockEventReasons, 0x4);  // sw_power_cap
  s.Set(GpuMetric::kPcieTxBytesPerSec, 310.2e6);
  s.Set(GpuMetric::kPcieRxBytesPerSec, 295e6);
  s.Set(GpuMetric::kPcieGen, 5);
  s.Set(GpuMetric::kPcieWidth, 16);
  s.Set(GpuMetric::kPcieReplay, 2);
  s.Set(GpuMetric::kNvlinkTxBytes, 1e12 + 41230e6);
  s.Set(GpuMetric::kNvlinkRxBytes, 1e12 + 41102.5e6);
  s.Set(GpuMetric::kNvlinkActiveLinks, 18);
  s.Set(GpuMetric::kNvlinkCrcFlitErrors, 1);
  s.Set(GpuMetric::kNvlinkCrcDataErrors, 2);
  s.Set(GpuMetric::kNvlinkReplayErrors, 4);
  s.Set(GpuMetric::kNvlinkRecoveryErrors, 5);
  s.Set(GpuMetric::kEccSbeVolatile, 6);
  s.Set(GpuMetric::kEccDbeVolatile, 7);
  s.Set(GpuMetric::kRetiredPagesSbe, 1);
  s.Set(GpuMetric::kRetiredPagesDbe, 1);
  s.Set(GpuMetric::kRemappedRowsPending, 1);
  s.Set(GpuMetric::kRemappedRowsFailure, 0);
  return s;
}

// Every record type, rendered by trace_writer.h from the model.
std::vector<std::string> WriterLines() {
  std::vector<std::string> lines;
  model::SystemInfo sys;
  sys.driver_version = "550.90.07";
  sys.cuda_driver_version = "12.4";
  model::GpuStaticInfo g0;
  g0.index = 0;
  g0.uuid = "GPU-1c6f";
  g0.name = "NVIDIA H100 80GB HBM3";
  g0.pci_bus_id = "00000000:18:00.0";
  g0.nvlink_count = 18;
  model::GpuStaticInfo g1 = g0;
  g1.index = 1;
  g1.uuid = "GPU-2d9b";
  g1.mig_enabled = true;
  NodeExtras x;
  x.nccl_version = "2.21.5";
  x.clock_offset_ms = -0.25;
  NodeGpuExtra e;
  e.index = 0;
  e.numa_node = 1;
  e.cpu_affinity = "56-111";
  e.memory_total_mib = 81559;
  e.power_limit_w = 700;
  x.gpus = {e};
  x.gpu_links = std::vector<std::vector<std::string>>{{"X", "NV18"}, {"NV18", "X"}};
  x.nics = {{"mlx5_0", "ib", "00000000:1a:00.0", 0, 400}};
  lines.push_back(NodeRecord(kT0, "gpu-a01", sys, {g0, g1}, x));

  model::GpuSample prev;
  prev.time_ms = kT0;
  prev.Set(GpuMetric::kNvlinkTxBytes, 1e12);
  prev.Set(GpuMetric::kNvlinkRxBytes, 1e12);
  model::GpuSample cur = WriterGpuSample(kT0 + 1000);
  model::MigSample m;
  m.gpu_instance_id = 1;
  m.compute_instance_id = 0;
  m.mem_used_mib = 1024;
  m.sm_active = 0.5;
  cur.mig.push_back(m);
  lines.push_back(GpuRecord("gpu-a01", 0, cur, &prev));
  for (std::string& l : MigRecords("gpu-a01", 0, cur)) lines.push_back(std::move(l));

  model::HostSample hprev, h;
  hprev.time_ms = kT0;
  h.time_ms = kT0 + 1000;
  h.cpu_util_pct = 38.5;
  h.iowait_pct = 1.2;
  h.mem_used_bytes = 402311 * kMib;
  h.mem_total_bytes = 2063592 * kMib;
  h.load1 = 41.2;
  model::IbPortSample ib;
  ib.device = "mlx5_0";
  ib.port = 1;
  ib.state = "ACTIVE";
  ib.xmit_bytes = 0;
  ib.rcv_bytes = 0;
  ib.symbol_errors = 1;
  ib.rcv_errors = 2;
  ib.local_ack_timeout_err = 3;
  ib.packet_seq_err = 4;
  hprev.ib_ports.push_back(ib);
  ib.xmit_bytes = static_cast<uint64_t>(18233e6);
  ib.rcv_bytes = static_cast<uint64_t>(18190.1e6);
  h.ib_ports.push_back(ib);
  lines.push_back(HostRecord("gpu-a01", h, &hprev));

  model::ProcessAttribution p;
  p.pid = 41233;
  p.gpu_index = 0;
  p.used_memory_bytes = static_cast<uint64_t>(60110 * kMib);
  p.user = "alice";
  p.container_id = "3f2a9c0d1b7e" + std::string(52, 'a');
  p.job_id = "12345";
  p.visible_index = 2;
  lines.push_back(ProcRecord(kT0 + 1000, "gpu-a01", p, std::vector<unsigned>{0, 1}));

  JobLifecycle start;
  start.job = "12345";
  start.state = JobState::kStart;
  start.template_name = "llama-8b-fsdp-1node";
  start.user = "alice";
  start.project = "nlp";
  start.ranks = 8;
  start.gpus = std::vector<unsigned>{0, 1, 2, 3, 4, 5, 6, 7};
  lines.push_back(JobRecord(kT0 + 1000, "gpu-a01", start));

  model::StepReport s;
  s.step = 1200;
  s.duration_s = 0.812;
  s.samples = 256;
  s.data_wait_s = 0.011;
  s.comm_s = 0.104;
  s.checkpoint_s = 0.0;
  s.loss = 2.3141;
  s.grad_norm = 1.07;
  lines.push_back(StepRecord(kT0 + 1900, "gpu-a01", "12345", 3, 3u, s));
  lines.push_back(EventRecordLine(kT0 + 2000, "gpu-a01", 3u, EventKind::kXid, 79,
                                  "GPU has fallen off the bus"));
  lines.push_back(EventRecordLine(kT0 + 2000, "gpu-a01", std::nullopt, EventKind::kCheckpointStart,
                                  std::nullopt, "saving", "12345"));
  lines.push_back(LogRecord(kT0 + 2001, "gpu-a01", "12345", 3u, LogSource::kNccl,
                            "NCCL WARN \"quoted\"\ttab \xff"));
  JobLifecycle end;
  end.job = "12345";
  end.state = JobState::kEnd;
  end.exit_code = -9;
  lines.push_back(JobRecord(kT0 + 3000, "gpu-a01", end));
  return lines;
}

void ExpectWriterValues(const ReadResult& r) {
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  ASSERT_EQ(r.records.size(), 11u);
  EXPECT_TRUE(r.stats.unknown_fields.empty()) << testing::PrintToString(r.stats.unknown_fields);
  EXPECT_TRUE(r.stats.unknown_values.empty()) << testing::PrintToString(r.stats.unknown_values);
  EXPECT_EQ(r.stats.out_of_order, 0u);
  EXPECT_TRUE(r.stats.unknown_types.empty());
  EXPECT_TRUE(r.stats.null_fields.empty());

  const TraceRecord& nr = r.records[0];
  EXPECT_EQ(nr.t_ms, kT0);
  EXPECT_EQ(nr.node, "gpu-a01");
  const TraceNode& n = *nr.as<TraceNode>();
  EXPECT_EQ(n.driver_version, "550.90.07");
  EXPECT_EQ(n.cuda_version, "12.4");
  EXPECT_EQ(n.nccl_version, "2.21.5");
  EXPECT_EQ(n.clock_offset_ms, -0.25);
  ASSERT_EQ(n.gpus->size(), 2u);
  EXPECT_EQ((*n.gpus)[0].uuid, "GPU-1c6f");
  EXPECT_EQ((*n.gpus)[0].numa_node, 1);
  EXPECT_EQ((*n.gpus)[0].cpu_affinity, "56-111");
  EXPECT_EQ((*n.gpus)[0].memory_total_mib, 81559);
  EXPECT_EQ((*n.gpus)[0].power_limit_w, 700);
  EXPECT_FALSE((*n.gpus)[0].max_sm_clock_mhz);
  EXPECT_EQ((*n.gpus)[0].nvlink_count, 18u);
  EXPECT_EQ((*n.gpus)[1].index, 1u);
  EXPECT_EQ((*n.gpus)[1].mig_mode, true);
  EXPECT_FALSE((*n.gpus)[1].numa_node);
  EXPECT_EQ(n.topology->gpu_links->at(0).at(1), "NV18");
  EXPECT_EQ(n.nics->at(0).link_gbps, 400);

  const TraceGpu& g = *r.records[1].as<TraceGpu>();
  EXPECT_EQ(r.records[1].t_ms, kT0 + 1000);
  EXPECT_EQ(g.gpu, 0u);
  EXPECT_EQ(g.util_pct, 97);
  EXPECT_EQ(g.mem_util_pct, 41);
  EXPECT_EQ(g.sm_active, 0.83);
  EXPECT_EQ(g.sm_occupancy, 0.41);
  EXPECT_EQ(g.tensor_active, 0.52);
  EXPECT_EQ(g.dram_active, 0.38);
  EXPECT_EQ(g.mem_used_mib, 61234);
  EXPECT_EQ(g.temp_c, 64);
  EXPECT_EQ(g.mem_temp_c, 71);
  EXPECT_EQ(g.power_w, 612.4);
  EXPECT_EQ(g.energy_j, 18234567.123);  // model mJ -> J
  EXPECT_EQ(g.sm_clock_mhz, 1980);
  EXPECT_EQ(g.mem_clock_mhz, 2619);
  EXPECT_EQ(g.throttle, std::vector<std::string>{"sw_power_cap"});
  EXPECT_EQ(g.pcie_tx_mbs, 310.2);
  EXPECT_EQ(g.pcie_rx_mbs, 295);
  EXPECT_EQ(g.pcie_gen, 5);
  EXPECT_EQ(g.pcie_width, 16);
  EXPECT_EQ(g.pcie_replay, 2);
  EXPECT_EQ(g.nvlink_tx_mbs, 41230);
  EXPECT_EQ(g.nvlink_rx_mbs, 41102.5);
  EXPECT_EQ(g.nvlink_active_links, 18);
  EXPECT_EQ(g.nvlink_crc_errors, 3);
  EXPECT_EQ(g.nvlink_replay, 4);
  EXPECT_EQ(g.nvlink_recovery, 5);
  EXPECT_EQ(g.ecc_sbe_volatile, 6);
  EXPECT_EQ(g.ecc_dbe_volatile, 7);
  EXPECT_EQ(g.retired_pages, 2);
  EXPECT_EQ(g.remapped_rows_pending, true);
  EXPECT_EQ(g.remapped_rows_failure, false);
  EXPECT_FALSE(g.fan_pct);
  EXPECT_FALSE(g.mig);

  const TraceGpu& mig = *r.records[2].as<TraceGpu>();
  EXPECT_EQ(mig.gpu, 0u);
  EXPECT_EQ(mig.mig, "1/0");
  EXPECT_EQ(mig.mem_used_mib, 1024);
  EXPECT_EQ(mig.sm_active, 0.5);

  const TraceHost& h = *r.records[3].as<TraceHost>();
  EXPECT_EQ(h.cpu_pct, 38.5);
  EXPECT_EQ(h.iowait_pct, 1.2);
  EXPECT_EQ(h.mem_used_mib, 402311);
  EXPECT_EQ(h.mem_total_mib, 2063592);
  EXPECT_EQ(h.load1, 41.2);
  const TraceHostNic& nic = h.nics->at("mlx5_0");
  EXPECT_EQ(nic.tx_mbs, 18233);
  EXPECT_EQ(nic.rx_mbs, 18190.1);
  EXPECT_EQ(nic.link_up, true);
  EXPECT_EQ(nic.errors, 3);
  EXPECT_EQ(nic.retransmits, 7);

  const TraceProc& p = *r.records[4].as<TraceProc>();
  EXPECT_EQ(p.pid, 41233u);
  EXPECT_EQ(p.gpu, 0u);
  EXPECT_EQ(p.mem_used_mib, 60110);
  EXPECT_EQ(p.user, "alice");
  EXPECT_EQ(p.container, "3f2a9c0d1b7e");
  EXPECT_EQ(p.job, "12345");
  EXPECT_EQ(p.cpu_numa_nodes, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(p.visible_index, 2u);

  const TraceJob& js = *r.records[5].as<TraceJob>();
  EXPECT_EQ(js.state, "start");
  EXPECT_EQ(js.template_name, "llama-8b-fsdp-1node");
  EXPECT_EQ(js.ranks, 8u);
  EXPECT_EQ(js.gpus->size(), 8u);

  const TraceStep& s = *r.records[6].as<TraceStep>();
  EXPECT_EQ(r.records[6].t_ms, kT0 + 1900);
  EXPECT_EQ(r.records[6].t, 1764460801.9);
  EXPECT_EQ(s.job, "12345");
  EXPECT_EQ(s.rank, 3u);
  EXPECT_EQ(s.gpu, 3u);
  EXPECT_EQ(s.step, 1200u);
  EXPECT_EQ(s.duration_s, 0.812);
  EXPECT_EQ(s.samples, 256);
  EXPECT_EQ(s.data_wait_s, 0.011);
  EXPECT_EQ(s.comm_s, 0.104);
  EXPECT_EQ(s.checkpoint_s, 0);
  EXPECT_EQ(s.loss, 2.3141);
  EXPECT_EQ(s.grad_norm, 1.07);

  const TraceEvent& xid = *r.records[7].as<TraceEvent>();
  EXPECT_EQ(xid.gpu, 3u);
  EXPECT_EQ(xid.kind, "xid");
  EXPECT_EQ(xid.code, 79);
  EXPECT_EQ(xid.message, "GPU has fallen off the bus");
  const TraceEvent& ck = *r.records[8].as<TraceEvent>();
  EXPECT_FALSE(ck.gpu);
  EXPECT_EQ(ck.kind, "checkpoint_start");
  EXPECT_EQ(ck.job, "12345");

  const TraceLog& l = *r.records[9].as<TraceLog>();
  EXPECT_EQ(r.records[9].t_ms, kT0 + 2001);
  EXPECT_EQ(l.source, "nccl");
  EXPECT_EQ(l.rank, 3u);
  EXPECT_EQ(l.line, "NCCL WARN \"quoted\"\ttab \xEF\xBF\xBD");  // the writer's U+FFFD

  const TraceJob& je = *r.records[10].as<TraceJob>();
  EXPECT_EQ(je.state, "end");
  EXPECT_EQ(je.exit_code, -9);
}

TEST_F(TraceReaderTest, RoundTripFromTheWriterPlainGzipZstd) {
  const std::vector<std::string> lines = WriterLines();
  ASSERT_TRUE(WriteTraceFile(dir_ + "/w.jsonl", lines).ok());
  ASSERT_TRUE(WriteTraceFile(dir_ + "/w.jsonl.gz", lines).ok());
  ASSERT_TRUE(WriteTraceFile(dir_ + "/w.jsonl.zst", lines).ok());

  const ReadResult plain = ReadPath(dir_ + "/w.jsonl");
  ExpectWriterValues(plain);
  EXPECT_TRUE(plain.stats.Report().empty());
  for (const char* name : {"/w.jsonl.gz", "/w.jsonl.zst"}) {
    auto reader = TraceReader::Open(dir_ + name);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ((*reader)->compression(), std::string(name).ends_with(".gz")
                                            ? TraceCompression::kGzip
                                            : TraceCompression::kZstd);
    const ReadResult r = ReadAll(**reader);
    ExpectWriterValues(r);
    EXPECT_EQ(r.records, plain.records) << name;
  }
}

TEST_F(TraceReaderTest, ACrashedRecordingReadsUpToItsLastFlush) {
  // A crash while `gpuwatch record` appends leaves <path>.tmp (trace_file.h): a gzip or zstd
  // prefix up to the last flush, without the stream's end. The reader gives every flushed
  // record and reports the cut as a warning.
  for (const std::string ext : {".gz", ".zst"}) {
    const std::string path = dir_ + "/rec.jsonl" + ext;
    const std::vector<std::string> lines = WriterLines();
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      TraceFileWriter w;
      if (!w.Open(path).ok()) _exit(1);
      for (const auto& l : lines)
        if (!w.Append(l).ok()) _exit(1);
      if (!w.Flush().ok()) _exit(1);
      (void)w.Append(lines[0]);  // still buffered: lost with the process
      _exit(0);                  // no destructor, no Close: a crash as far as the file is concerned
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    // .tmp does not end in .gz: the name says plain, the bytes say gzip -> a clear error.
    const ReadResult r = ReadPath(path + ".tmp");
    EXPECT_EQ(r.error.message(), path + ".tmp: " + (ext == ".gz" ? "gzip" : "zstd") +
                                     " data in a file whose name does not end in " + ext);
    std::filesystem::copy_file(path + ".tmp", dir_ + "/salvaged.jsonl" + ext);
    const ReadResult s = ReadPath(dir_ + "/salvaged.jsonl" + ext);
    ExpectWriterValues(s);
    EXPECT_TRUE(s.stats.truncated_stream) << ext;
    EXPECT_EQ(s.stats.truncated_last_line, 0u) << ext;
  }
}

// ---------------------------------------------------------------- compression

std::string ManyLines(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    s += R"({"t":)" + FormatTraceTime(kT0 + i * 7) + R"(,"type":"gpu","node":"n","gpu":)" +
         std::to_string(i % 8) + R"(,"util_pct":)" + std::to_string((i * 37) % 101) +
         R"(,"power_w":)" + std::to_string(100 + (i * 13) % 600) + ".5}\n";
  }
  return s;
}

TEST(TraceReader, PlainGzipAndZstdGiveTheSameRecords) {
  const std::string text = ManyLines(5000);  // several 64 KiB chunks, lines across chunk ends
  const ReadResult plain = ReadBuffer(text, "a.jsonl");
  ASSERT_TRUE(plain.error.ok());
  ASSERT_EQ(plain.records.size(), 5000u);
  const ReadResult gz = ReadBuffer(Gzip(text), "a.jsonl.gz");
  const ReadResult zst = ReadBuffer(Zstd(text), "a.jsonl.zst");
  ASSERT_TRUE(gz.error.ok()) << gz.error.ToString();
  ASSERT_TRUE(zst.error.ok()) << zst.error.ToString();
  EXPECT_EQ(gz.records, plain.records);
  EXPECT_EQ(zst.records, plain.records);
  EXPECT_EQ(gz.stats.bytes, text.size());
  EXPECT_FALSE(gz.stats.truncated_stream);
  EXPECT_FALSE(zst.stats.truncated_stream);
}

TEST(TraceReader, ConcatenatedGzipMembersAndZstdFramesAreOneStream) {
  const std::string a = ManyLines(10), b = ManyLines(20);
  const ReadResult gz = ReadBuffer(Gzip(a) + Gzip(b), "c.jsonl.gz");
  ASSERT_TRUE(gz.error.ok()) << gz.error.ToString();
  EXPECT_EQ(gz.records.size(), 30u);
  const ReadResult zst = ReadBuffer(Zstd(a) + Zstd(b), "c.jsonl.zst");
  ASSERT_TRUE(zst.error.ok()) << zst.error.ToString();
  EXPECT_EQ(zst.records.size(), 30u);
}

TEST(TraceReader, AMisnamedFileIsAClearError) {
  const std::string text = ManyLines(3);
  EXPECT_EQ(ReadBuffer(Gzip(text), "x.jsonl").error.message(),
            "x.jsonl: gzip data in a file whose name does not end in .gz");
  EXPECT_EQ(ReadBuffer(Zstd(text), "x.jsonl").error.message(),
            "x.jsonl: zstd data in a file whose name does not end in .zst");
  EXPECT_EQ(ReadBuffer(text, "x.jsonl.gz").error.message(),
            "x.jsonl.gz: named as gzip but the data is plain text");
  EXPECT_EQ(ReadBuffer(Zstd(text), "x.jsonl.gz").error.message(),
            "x.jsonl.gz: named as gzip but the data is zstd");
  EXPECT_EQ(ReadBuffer(Gzip(text), "x.zst").error.message(),
            "x.zst: named as zstd but the data is gzip");
  EXPECT_EQ(ReadBuffer(Gzip(text), "x.jsonl").error.code(), StatusCode::kCorruption);
}

// Flips bytes in the middle of a compressed stream: the error names the line being read, and
// every line before it was delivered. Damaged deflate data may still inflate (to garbage, until
// the member's CRC), so for gzip the first thing to notice can be the JSON of that line.
void ExpectCorruptMidStream(const std::string& compressed, const std::string& name,
                            std::vector<std::string_view> whats) {
  std::string bad = compressed;
  for (size_t i = bad.size() / 2; i < bad.size() / 2 + 16; ++i) bad[i] = static_cast<char>(~bad[i]);
  const ReadResult r = ReadBuffer(bad, name);
  ASSERT_FALSE(r.error.ok()) << name;
  EXPECT_EQ(r.error.code(), StatusCode::kCorruption);
  const std::string prefix = name + ":" + std::to_string(r.records.size() + 1) + ": ";
  EXPECT_EQ(r.error.message().rfind(prefix, 0), 0u) << r.error.message() << " vs " << prefix;
  EXPECT_TRUE(std::any_of(whats.begin(), whats.end(), [&](std::string_view w) {
    return r.error.message().find(w) != std::string::npos;
  })) << r.error.message();
  EXPECT_GT(r.records.size(), 100u) << "records before the damage are delivered";
}

TEST(TraceReader, CorruptGzipMidStreamNamesTheLineReached) {
  ExpectCorruptMidStream(Gzip(ManyLines(20000)), "big.jsonl.gz",
                         {"corrupt gzip data (", "not a JSON object"});
  // A damaged second member: its header fails, after the first member's 10 lines.
  std::string second = Gzip(ManyLines(5));
  second[3] = static_cast<char>(0xff);  // reserved flag bits
  const ReadResult r = ReadBuffer(Gzip(ManyLines(10)) + second, "m.jsonl.gz");
  EXPECT_EQ(r.records.size(), 10u);
  EXPECT_EQ(r.error.message(), "m.jsonl.gz:11: corrupt gzip data (unknown header flags set)");
  // Stored (uncompressed) blocks with damaged data: only the CRC at the end can tell.
  z_stream zs{};
  const std::string text = ManyLines(300);
  ASSERT_EQ(deflateInit2(&zs, 0, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string stored(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(stored.data());
  zs.avail_out = static_cast<uInt>(stored.size());
  ASSERT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  stored.resize(zs.total_out);
  deflateEnd(&zs);
  const size_t digit = stored.find("\"util_pct\":") + 11;  // a digit stays valid JSON
  stored[digit] = stored[digit] == '1' ? '2' : '1';
  const ReadResult c = ReadBuffer(stored, "crc.jsonl.gz");
  EXPECT_EQ(c.records.size(), 300u);
  EXPECT_EQ(c.error.message(), "crc.jsonl.gz:301: corrupt gzip data (incorrect data check)");
}

TEST(TraceReader, CorruptZstdMidStreamNamesTheLineReached) {
  ExpectCorruptMidStream(Zstd(ManyLines(20000), 1), "big.jsonl.zst", {"corrupt zstd data ("});
}

TEST(TraceReader, ACutCompressedStreamIsAWarningNotAnError) {
  const std::string text = ManyLines(20000);  // many zstd blocks: output comes block by block
  for (const auto& [name, bytes] :
       {std::pair<std::string, std::string>{"cut.jsonl.gz", Gzip(text)},
        std::pair<std::string, std::string>{"cut.jsonl.zst", Zstd(text)}}) {
    const ReadResult r = ReadBuffer(bytes.substr(0, bytes.size() / 2), name);
    ASSERT_TRUE(r.error.ok()) << r.error.ToString();
    EXPECT_TRUE(r.stats.truncated_stream) << name;
    EXPECT_GT(r.records.size(), 100u) << name;
    EXPECT_LT(r.records.size(), 20000u) << name;
    // The cut almost surely falls inside a line: that partial last line is the warning.
    EXPECT_EQ(r.stats.truncated_last_line, r.records.size() + 1) << name;
    EXPECT_EQ(r.stats.Report().size(), 2u) << name;
  }
}

TEST(TraceReader, EmptyFiles) {
  ReadResult r = ReadBuffer("", "e.jsonl");
  ASSERT_TRUE(r.error.ok());
  EXPECT_TRUE(r.records.empty());
  EXPECT_EQ(r.stats.lines, 0u);
  EXPECT_TRUE(r.stats.Report().empty());
  EXPECT_EQ(r.stats.CountsLine(), "no records");
  // A compressed file of 0 bytes has no end marker: created, never written (a cut file).
  for (const char* name : {"e.jsonl.gz", "e.jsonl.zst"}) {
    r = ReadBuffer("", name);
    ASSERT_TRUE(r.error.ok()) << name;
    EXPECT_TRUE(r.records.empty());
    EXPECT_TRUE(r.stats.truncated_stream) << name;
  }
  // A compressed empty text is a complete, empty trace.
  r = ReadBuffer(Gzip(""), "e.jsonl.gz");
  ASSERT_TRUE(r.error.ok());
  EXPECT_FALSE(r.stats.truncated_stream);
  r = ReadBuffer(Zstd(""), "e.jsonl.zst");
  ASSERT_TRUE(r.error.ok());
  EXPECT_FALSE(r.stats.truncated_stream);
  // Blank lines only.
  r = ReadBuffer("\n  \n\t\r\n\n", "b.jsonl");
  ASSERT_TRUE(r.error.ok());
  EXPECT_TRUE(r.records.empty());
  EXPECT_EQ(r.stats.blank_lines, 4u);
}

// ---------------------------------------------------------------- malformed input (the spec)

TEST(TraceReader, NotAJsonObjectNamesTheLine) {
  const std::string ok = R"({"t":1764460800,"type":"host","node":"a"})"
                         "\n";
  EXPECT_EQ(ErrorOf(ok + "[1,2]\n"), "t.jsonl:2: not a JSON object (an array)");
  EXPECT_EQ(ErrorOf(ok + ok + "42\n"), "t.jsonl:3: not a JSON object (42)");
  EXPECT_EQ(ErrorOf("\"gpu\"\n"), "t.jsonl:1: not a JSON object (a string)");
  EXPECT_EQ(ErrorOf("null\n"), "t.jsonl:1: not a JSON object (null)");
  const std::string e = ErrorOf(ok +
                                R"({"t":1764460800,"type":"gpu",)"
                                "\n" +
                                ok);
  EXPECT_EQ(e.rfind("t.jsonl:2: not a JSON object: invalid JSON at byte ", 0), 0u) << e;
  // Two objects on one line are not one record.
  EXPECT_EQ(ErrorOf(ok.substr(0, ok.size() - 1) + ok).rfind("t.jsonl:1: not a JSON object:", 0),
            0u);
}

TEST(TraceReader, GarbageBytesAreAnErrorThatNeverEchoesThem) {
  std::string garbage(300000, '\0');
  std::mt19937 rng(7);
  for (char& c : garbage) c = static_cast<char>(rng());
  for (char& c : garbage)
    if (c == '\n') c = 'x';
  const std::string e = ErrorOf(R"({"t":1,"type":"log","line":")" + garbage + "\"}\n");
  EXPECT_EQ(e.rfind("t.jsonl:1: not a JSON object: invalid JSON at byte ", 0), 0u) << e;
  EXPECT_LT(e.size(), 300u);
  // Invalid UTF-8 inside a string is invalid JSON.
  EXPECT_EQ(ErrorOf("{\"t\":1,\"type\":\"log\",\"line\":\"\xff\"}\n")
                .rfind("t.jsonl:1: not a JSON object: invalid JSON at byte ", 0),
            0u);
  // A binary file (e.g. a misnamed block file) fails on its first line.
  EXPECT_EQ(ErrorOf(garbage.substr(0, 1000) + "\n").rfind("t.jsonl:1: not a JSON object", 0), 0u);
}

TEST(TraceReader, TAndTypeAreRequired) {
  EXPECT_EQ(ErrorOf(R"({"type":"gpu","node":"a"})"
                    "\n"),
            "t.jsonl:1: record has no \"t\"");
  EXPECT_EQ(ErrorOf(R"({"t":null,"type":"gpu"})"
                    "\n"),
            "t.jsonl:1: record has no \"t\"");
  EXPECT_EQ(ErrorOf(R"({"t":1764460800,"node":"a"})"
                    "\n"),
            "t.jsonl:1: record has no \"type\"");
  EXPECT_EQ(ErrorOf(R"({"t":1764460800,"type":null})"
                    "\n"),
            "t.jsonl:1: record has no \"type\"");
  EXPECT_EQ(ErrorOf(R"({"t":"1764460800","type":"gpu"})"
                    "\n"),
            "t.jsonl:1: \"t\" is not a number (a string)");
  EXPECT_EQ(ErrorOf(R"({"t":[1],"type":"gpu"})"
                    "\n"),
            "t.jsonl:1: \"t\" is not a number (an array)");
  EXPECT_EQ(ErrorOf(R"({"t":1e300,"type":"gpu"})"
                    "\n"),
            "t.jsonl:1: \"t\" is out of range (1e+300)");
  EXPECT_EQ(ErrorOf(R"({"t":1764460800,"type":7})"
                    "\n"),
            "t.jsonl:1: \"type\" is not a string (7)");
  EXPECT_EQ(ErrorOf(R"({"t":1764460800,"type":"gpu","node":3})"
                    "\n"),
            "t.jsonl:1: \"node\" must be a string, not 3");
  // An integer t and a fraction are both fine; t_ms rounds to the nearest ms.
  ReadResult r = ReadBuffer(R"({"t":1764460800,"type":"host"})"
                            "\n"
                            R"({"t":1764460800.0004,"type":"host"})"
                            "\n"
                            R"({"t":1764460800.0006,"type":"host"})"
                            "\n");
  ASSERT_TRUE(r.error.ok());
  EXPECT_EQ(r.records[0].t_ms, kT0);
  EXPECT_EQ(r.records[1].t_ms, kT0);
  EXPECT_EQ(r.records[2].t_ms, kT0 + 1);
  EXPECT_EQ(r.records[0].node, "");  // absent
}

TEST(TraceReader, KnownFieldsAreStrictAboutTheirType) {
  auto line = [](const std::string& type, const std::string& fields) {
    return R"({"t":1764460800,"type":")" + type + R"(","node":"a",)" + fields + "}\n";
  };
  const std::string ok = line("host", R"("cpu_pct":1)");
  EXPECT_EQ(ErrorOf(ok + line("gpu", R"("gpu":0,"util_pct":"abc")")),
            "t.jsonl:2: \"util_pct\" must be a number, not a string");
  EXPECT_EQ(ErrorOf(line("gpu", R"("gpu":-1)")),
            "t.jsonl:1: \"gpu\" must be a non-negative integer, not -1");
  EXPECT_EQ(ErrorOf(line("gpu", R"("gpu":2.5)")),
            "t.jsonl:1: \"gpu\" must be a non-negative integer, not 2.5");
  EXPECT_EQ(ErrorOf(line("gpu", R"("gpu":"0")")),
            "t.jsonl:1: \"gpu\" must be a non-negative integer, not a string");
  EXPECT_EQ(ErrorOf(line("gpu", R"("gpu":4294967296)")),
            "t.jsonl:1: \"gpu\" must be a non-negative integer, not 4294967296");
  EXPECT_EQ(ErrorOf(line("proc", R"("gpu":1e300)")),
            "t.jsonl:1: \"gpu\" must be a non-negative integer, not 1e+300");
  EXPECT_EQ(ErrorOf(line("gpu", R"("gpu":0,"throttle":"idle")")),
            "t.jsonl:1: \"throttle\" must be an array of strings, not a string");
  EXPECT_EQ(ErrorOf(line("gpu", R"("gpu":0,"throttle":["idle",3])")),
            "t.jsonl:1: \"throttle[1]\" must be a string, not 3");
  EXPECT_EQ(ErrorOf(line("gpu", R"("remapped_rows_pending":0)")),
            "t.jsonl:1: \"remapped_rows_pending\" must be true or false, not 0");
  EXPECT_EQ(ErrorOf(line("node", R"("gpus":[{"index":0},{"index":1,"numa_node":"0"}])")),
            "t.jsonl:1: \"gpus[1].numa_node\" must be an integer, not a string");
  EXPECT_EQ(ErrorOf(line("node", R"("gpus":{"index":0})")),
            "t.jsonl:1: \"gpus\" must be an array of objects, not an object");
  EXPECT_EQ(ErrorOf(line("node", R"("gpus":[7])")),
            "t.jsonl:1: \"gpus[0]\" must be an object, not 7");
  EXPECT_EQ(ErrorOf(line("node", R"("topology":{"gpu_links":[["X",1]]})")),
            "t.jsonl:1: \"topology.gpu_links[0][1]\" must be a string, not 1");
  EXPECT_EQ(ErrorOf(line("node", R"("nics":[{"link_gbps":"400"}])")),
            "t.jsonl:1: \"nics[0].link_gbps\" must be a number, not a string");
  EXPECT_EQ(ErrorOf(line("host", R"("nics":{"mlx5_0":{"link_up":"yes"}})")),
            "t.jsonl:1: \"nics.mlx5_0.link_up\" must be true or false, not a string");
  EXPECT_EQ(ErrorOf(line("host", R"("nics":{"mlx5_0":5})")),
            "t.jsonl:1: \"nics.mlx5_0\" must be an object, not 5");
  EXPECT_EQ(ErrorOf(line("proc", R"("cpu_numa_nodes":[0,-1])")),
            "t.jsonl:1: \"cpu_numa_nodes[1]\" must be a non-negative integer, not -1");
  EXPECT_EQ(ErrorOf(line("job", R"("job":12345)")),
            "t.jsonl:1: \"job\" must be a string, not 12345");
  EXPECT_EQ(ErrorOf(line("step", R"("step":-3)")),
            "t.jsonl:1: \"step\" must be a non-negative integer, not -3");
  EXPECT_EQ(ErrorOf(line("event", R"("code":"79")")),
            "t.jsonl:1: \"code\" must be an integer, not a string");
  EXPECT_EQ(ErrorOf(line("log", R"("rank":true)")),
            "t.jsonl:1: \"rank\" must be a non-negative integer, not true");
  // An integral float is an integer; negative codes and exit codes are integers too.
  ReadResult r = ReadBuffer(line("gpu", R"("gpu":3.0)") + line("job", R"("exit_code":-9)") +
                            line("node", R"("gpus":[{"numa_node":-1}])"));
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  EXPECT_EQ(r.records[0].as<TraceGpu>()->gpu, 3u);
  EXPECT_EQ(r.records[1].as<TraceJob>()->exit_code, -9);
  EXPECT_EQ(r.records[2].as<TraceNode>()->gpus->at(0).numa_node, -1);
}

TEST(TraceReader, AnErrorIsSticky) {
  auto reader = TraceReader::OpenBuffer("[]\n" + ManyLines(3), "s.jsonl");
  ASSERT_TRUE(reader.ok());
  TraceRecord rec;
  Result<bool> a = (*reader)->Next(&rec);
  ASSERT_FALSE(a.ok());
  Result<bool> b = (*reader)->Next(&rec);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(a.status().message(), b.status().message());
}

TEST(TraceReader, UnknownTypesFieldsAndValuesAreIgnoredButCounted) {
  const ReadResult r = ReadPath(FixtureDir() + "/two-nodes.jsonl");
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  ASSERT_EQ(r.records.size(), 8u);
  EXPECT_EQ(r.stats.lines, 9u);
  EXPECT_EQ(r.stats.blank_lines, 1u);
  const TraceRecord& future = r.records[5];
  EXPECT_EQ(future.type(), RecordType::kUnknown);
  EXPECT_EQ(future.unknown_type, "future_record");
  EXPECT_EQ(future.node, "a");
  EXPECT_EQ(future.line, 7u);
  EXPECT_EQ(r.stats.count(RecordType::kUnknown), 1u);
  EXPECT_EQ(r.stats.unknown_types, (std::map<std::string, uint64_t>{{"future_record", 1}}));
  EXPECT_EQ(r.stats.unknown_fields, (std::map<std::string, uint64_t>{
                                        {"gpu.new_metric", 1}, {"node.gpus.future_field", 1}}));
  EXPECT_EQ(r.stats.unknown_values,
            (std::map<std::string, uint64_t>{{"gpu.throttle=new_reason", 1}}));
  // The record with an unknown throttle reason keeps it: the consumer decides.
  EXPECT_EQ(r.records[2].as<TraceGpu>()->throttle,
            (std::vector<std::string>{"idle", "new_reason"}));
  EXPECT_EQ(r.records[7].as<TraceEvent>()->message, "hello\nworld");
  EXPECT_EQ(r.records[7].as<TraceEvent>()->job, "7");
  const std::vector<std::string> report = r.stats.Report();
  ASSERT_EQ(report.size(), 4u);
  EXPECT_EQ(report[0], "records of unknown type, ignored: future_record (1)");
  EXPECT_EQ(report[1], "unknown fields, ignored: gpu.new_metric (1), node.gpus.future_field (1)");
  EXPECT_EQ(report[2], "values the spec does not list: gpu.throttle=new_reason (1)");
  EXPECT_EQ(report[3].rfind("2 records out of time order", 0), 0u) << report[3];
  EXPECT_EQ(r.stats.null_fields,
            (std::map<std::string, uint64_t>{{"gpu.fan_pct", 1}, {"gpu.util_pct", 1}}));
}

TEST(TraceReader, NullMeansNotMeasuredAsAbsentDoes) {
  const ReadResult r = ReadBuffer(
      R"({"t":1,"type":"gpu","node":null,"gpu":0,"util_pct":null,"throttle":null,"power_w":5})"
      "\n"
      R"({"t":2,"type":"host","nics":{"eth0":{"tx_mbs":null,"link_up":true}}})"
      "\n"
      R"({"t":3,"type":"node","gpus":null,"topology":{"gpu_links":null}})"
      "\n");
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  const TraceGpu& g = *r.records[0].as<TraceGpu>();
  EXPECT_EQ(r.records[0].node, "");
  EXPECT_FALSE(g.util_pct);
  EXPECT_FALSE(g.throttle);  // not measured, unlike []
  EXPECT_EQ(g.power_w, 5);
  EXPECT_FALSE(r.records[1].as<TraceHost>()->nics->at("eth0").tx_mbs);
  EXPECT_EQ(r.records[1].as<TraceHost>()->nics->at("eth0").link_up, true);
  EXPECT_FALSE(r.records[2].as<TraceNode>()->gpus);
  EXPECT_FALSE(r.records[2].as<TraceNode>()->topology->gpu_links);
  EXPECT_EQ(r.stats.null_fields, (std::map<std::string, uint64_t>{{"gpu.node", 1},
                                                                  {"gpu.throttle", 1},
                                                                  {"gpu.util_pct", 1},
                                                                  {"host.nics.tx_mbs", 1},
                                                                  {"node.gpus", 1},
                                                                  {"node.topology.gpu_links", 1}}));
}

// ---------------------------------------------------------------- time order

std::string At(const std::string& node, int64_t t_ms) {
  return R"({"t":)" + FormatTraceTime(t_ms) + R"(,"type":"host","node":")" + node + "\"}\n";
}

TEST(TraceReader, StepsBackAcrossNodesUpToFiveSecondsAreSilent) {
  const ReadResult r = ReadBuffer(At("a", kT0 + 10000) + At("b", kT0 + 5000) +  // 5 s behind a
                                  At("b", kT0 + 6000) + At("a", kT0 + 10000) +  // equal t is fine
                                  At("c", kT0 + 7000));
  ASSERT_TRUE(r.error.ok());
  EXPECT_EQ(r.records.size(), 5u);
  EXPECT_EQ(r.stats.out_of_order, 0u);
  EXPECT_TRUE(r.stats.Report().empty());
}

TEST(TraceReader, MoreThanFiveSecondsBackAcrossNodesIsCounted) {
  const ReadResult r = ReadBuffer(At("a", kT0 + 10000) + At("b", kT0 + 4999) +  // 5.001 s
                                  At("b", kT0 + 5000) +  // still > 5 s behind a
                                  At("b", kT0 + 9000));
  ASSERT_TRUE(r.error.ok());
  ASSERT_EQ(r.records.size(), 4u) << "out-of-order records are still delivered";
  EXPECT_EQ(r.stats.out_of_order, 1u);
  EXPECT_EQ(r.stats.out_of_order_within_node, 0u);
  EXPECT_EQ(r.stats.first_out_of_order_line, 2u);
  EXPECT_EQ(r.stats.max_step_back_ms, 5001);
  ASSERT_EQ(r.stats.Report().size(), 1u);
  EXPECT_EQ(r.stats.Report()[0],
            "1 records out of time order (0 behind their own node; first at line 2; largest "
            "step back 5.001 s); delivered in file order");
}

TEST(TraceReader, AnyStepBackWithinANodeIsCounted) {
  const ReadResult r = ReadBuffer(
      At("a", kT0 + 10000) + At("a", kT0 + 9999) +  // 1 ms back, own node
      At("a", kT0 + 10001) + At("b", kT0 + 10002) + At("a", kT0 + 10000) + At("a", kT0 + 10003));
  ASSERT_TRUE(r.error.ok());
  EXPECT_EQ(r.records.size(), 6u);
  EXPECT_EQ(r.stats.out_of_order, 2u);
  EXPECT_EQ(r.stats.out_of_order_within_node, 2u);
  EXPECT_EQ(r.stats.first_out_of_order_line, 2u);
  EXPECT_EQ(r.stats.max_step_back_ms, 1);
  // In file order, with their own times.
  EXPECT_EQ(r.records[1].t_ms, kT0 + 9999);
}

TEST(TraceReader, TwoNodesFixtureOrder) {
  const ReadResult r = ReadPath(FixtureDir() + "/two-nodes.jsonl");
  ASSERT_TRUE(r.error.ok());
  // Line 6: node a 0.5 s behind itself. Line 8: node b 9 s behind itself and 12 s behind a.
  // Line 2 (b, 2.5 s behind a) and line 5 (b, 2 s behind a) are within the tolerance.
  EXPECT_EQ(r.stats.out_of_order, 2u);
  EXPECT_EQ(r.stats.out_of_order_within_node, 2u);
  EXPECT_EQ(r.stats.first_out_of_order_line, 6u);
  EXPECT_EQ(r.stats.max_step_back_ms, 12000);
}

// ---------------------------------------------------------------- lines

TEST(TraceReader, ATruncatedLastLineIsAWarning) {
  const ReadResult r = ReadPath(FixtureDir() + "/truncated-last-line.jsonl");
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.stats.truncated_last_line, 2u);
  ASSERT_EQ(r.stats.Report().size(), 1u);
  EXPECT_EQ(r.stats.Report()[0],
            "line 2: last line cut short without a newline (a crash mid-write?); dropped");
  // The same bytes with a newline are an error: the line was written whole, and is wrong.
  const std::string e = ErrorOf(ReadFile(FixtureDir() + "/truncated-last-line.jsonl") + "\n");
  EXPECT_EQ(e.rfind("t.jsonl:2: not a JSON object: invalid JSON at byte ", 0), 0u) << e;
  // A whole record without its newline is a record.
  const ReadResult w = ReadBuffer(At("a", kT0) + R"({"t":1764460801,"type":"host"})");
  ASSERT_TRUE(w.error.ok());
  EXPECT_EQ(w.records.size(), 2u);
  EXPECT_EQ(w.stats.truncated_last_line, 0u);
  // ... but a whole, wrong one is still an error.
  EXPECT_EQ(ErrorOf(At("a", kT0) + R"({"type":"host"})"), "t.jsonl:2: record has no \"t\"");
}

TEST(TraceReader, CrlfAndBlankLines) {
  const ReadResult r = ReadBuffer("\r\n" + At("a", kT0) + "   \n" +
                                  R"({"t":1764460801,"type":"host"})"
                                  "\r\n\n");
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0].line, 2u);
  EXPECT_EQ(r.records[1].line, 4u);
  EXPECT_EQ(r.stats.blank_lines, 3u);
}

TEST(TraceReader, ALineOverTheBoundIsAnErrorNamingIt) {
  // Exactly kMaxLineBytes is fine (a record padded with spaces) ...
  std::string line = R"({"t":1764460800,"type":"host")";
  line += std::string(kMaxLineBytes - line.size() - 1, ' ') + "}";
  ASSERT_EQ(line.size(), kMaxLineBytes);
  ReadResult r = ReadBuffer(At("a", kT0) + line + "\n" + At("a", kT0));
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  EXPECT_EQ(r.records.size(), 3u);
  // ... one byte more is not, whether or not a newline ever comes.
  line.insert(line.size() - 1, " ");
  r = ReadBuffer(At("a", kT0) + line + "\n" + At("a", kT0));
  EXPECT_EQ(r.error.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.error.message(), "t.jsonl:2: line longer than 16777216 bytes");
  EXPECT_EQ(r.records.size(), 1u);
  r = ReadBuffer(At("a", kT0) + std::string(kMaxLineBytes + 5, 'x'));
  EXPECT_EQ(r.error.message(), "t.jsonl:2: line longer than 16777216 bytes");
}

TEST(TraceReader, DeepNestingInAnUnknownFieldIsHarmless) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const ReadResult r = ReadBuffer(R"({"t":1,"type":"gpu","x":)" + deep + "}\n");
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  EXPECT_EQ(r.stats.unknown_fields.at("gpu.x"), 1u);
}

TEST(TraceReader, StatsMapsAreBounded) {
  std::string text;
  for (size_t i = 0; i < kMaxStatKeys + 100; ++i)
    text += R"({"t":1,"type":"gpu","f)" + std::to_string(i) + R"(":1,"x":1})" + "\n";
  const ReadResult r = ReadBuffer(text);
  ASSERT_TRUE(r.error.ok());
  EXPECT_EQ(r.stats.unknown_fields.size(), kMaxStatKeys);
  EXPECT_EQ(r.stats.unknown_fields.at("gpu.x"), kMaxStatKeys + 100);  // known keys keep counting
  EXPECT_EQ(r.stats.dropped_stat_keys, 101u);
}

TEST_F(TraceReaderTest, OpenErrorsNameThePath) {
  auto missing = TraceReader::Open(dir_ + "/nope.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message().rfind(dir_ + "/nope.jsonl: ", 0), 0u);
  auto dir = TraceReader::Open(dir_);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().message(), dir_ + ": is a directory, not a trace file");
}

// ---------------------------------------------------------------- the example scenarios

// The scenarios' own manifest: record counts per scenario.
std::map<std::string, uint64_t> ManifestRecords() {
  std::map<std::string, uint64_t> m;
  const std::string text = ReadFile(ScenarioDir() + "/MANIFEST.json");
  // "name": "X", ... "records": N — a tiny scan, not a JSON dependency of this test.
  size_t pos = 0;
  while ((pos = text.find("\"name\": \"", pos)) != std::string::npos) {
    pos += 9;
    const std::string name = text.substr(pos, text.find('"', pos) - pos);
    const size_t rec = text.find("\"records\": ", pos);
    if (rec == std::string::npos) break;
    m[name] = std::stoull(text.substr(rec + 11));
  }
  return m;
}

TEST(TraceReaderScenarios, EveryExampleReadsCompletelyWithoutErrors) {
  if (!std::filesystem::is_directory(ScenarioDir()))
    GTEST_SKIP() << ScenarioDir() << " is absent: the scenario tests need ../shared/scenarios";
  const std::map<std::string, uint64_t> manifest = ManifestRecords();
  const char* kNames[] = {"healthy-8xh100",  "thermal-throttle", "data-stall",
                          "nvlink-fallback", "memory-leak",      "xid79-gpu-lost"};
  for (const char* name : kNames) {
    SCOPED_TRACE(name);
    const ReadResult r = ReadPath(ScenarioDir() + "/" + name + ".jsonl.gz");
    ASSERT_TRUE(r.error.ok()) << r.error.ToString();
    std::printf("[ scenario ] %-17s %s\n", name, r.stats.CountsLine().c_str());
    for (const auto& [field, n] : r.stats.null_fields)
      std::printf("[ scenario ]   null: %s (%llu)\n", field.c_str(),
                  static_cast<unsigned long long>(n));
    for (const std::string& l : r.stats.Report()) std::printf("[ scenario ]   %s\n", l.c_str());
    EXPECT_TRUE(r.stats.Report().empty());
    EXPECT_EQ(r.stats.records, r.records.size());
    if (manifest.count(name)) {
      EXPECT_EQ(r.stats.records, manifest.at(name));
    }
    EXPECT_EQ(r.stats.count(RecordType::kNode), 1u);
    EXPECT_GT(r.stats.count(RecordType::kGpu), 1000u);
    EXPECT_TRUE(r.stats.unknown_types.empty());
    EXPECT_TRUE(r.stats.unknown_fields.empty()) << testing::PrintToString(r.stats.unknown_fields);
    EXPECT_TRUE(r.stats.unknown_values.empty()) << testing::PrintToString(r.stats.unknown_values);
    EXPECT_EQ(r.stats.out_of_order, 0u);
    EXPECT_FALSE(r.stats.truncated_stream);
    EXPECT_EQ(r.stats.truncated_last_line, 0u);
    // The node record is first and describes every GPU the samples name.
    ASSERT_FALSE(r.records.empty());
    const TraceNode* node = r.records[0].as<TraceNode>();
    ASSERT_NE(node, nullptr);
    ASSERT_TRUE(node->gpus.has_value());
    for (const TraceRecord& rec : r.records) {
      if (const TraceGpu* g = rec.as<TraceGpu>()) {
        ASSERT_TRUE(g->gpu.has_value()) << "line " << rec.line;
        ASSERT_LT(*g->gpu, node->gpus->size()) << "line " << rec.line;
      }
    }
  }
}

TEST(TraceReaderScenarios, PlainGzipAndZstdOfAScenarioAreIdentical) {
  const std::string path = ScenarioDir() + "/xid79-gpu-lost.jsonl.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  const std::string gz = ReadFile(path);
  const std::string text = Gunzip(gz);
  const ReadResult a = ReadBuffer(gz, "s.jsonl.gz");
  const ReadResult b = ReadBuffer(text, "s.jsonl");
  const ReadResult c = ReadBuffer(Zstd(text), "s.jsonl.zst");
  ASSERT_TRUE(a.error.ok() && b.error.ok() && c.error.ok());
  EXPECT_EQ(a.records.size(), 10184u);
  EXPECT_TRUE(a.records == b.records);
  EXPECT_TRUE(a.records == c.records);
}

}  // namespace
}  // namespace gpuwatch::trace
