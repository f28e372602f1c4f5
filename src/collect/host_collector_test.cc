#include "collect/host_collector.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/timex.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/log.h"

namespace gpuwatch::collect {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/" + name;
}

// A writable copy of a fixture tree, removed at scope exit.
class TempTree {
 public:
  explicit TempTree(const std::string& fixture) {
    std::string tmpl = (fs::temp_directory_path() / "gw_host_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
    fs::copy(Fixture(fixture), path_, fs::copy_options::recursive);
  }
  ~TempTree() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  void Write(const std::string& rel, const std::string& data) const {
    std::ofstream(path_ + "/" + rel, std::ios::trunc) << data;
  }

 private:
  std::string path_;
};

const model::NicSample* FindNic(const model::HostSample& s, const std::string& name) {
  for (const auto& n : s.nics) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

TEST(HostCollectorTest, FixtureTreeExactValues) {
  HostCollector c(Fixture("root"));
  model::HostSample s;
  ASSERT_TRUE(c.Collect(1000, &s).ok());
  EXPECT_EQ(s.time_ms, 1000);

  EXPECT_EQ(s.cpu_count, 4u);
  EXPECT_EQ(s.cpu_total_jiffies, 4649u + 12 + 3552 + 84214 + 295 + 0 + 120 + 7);
  EXPECT_EQ(s.cpu_idle_jiffies, 84214u);
  EXPECT_EQ(s.cpu_iowait_jiffies, 295u);
  EXPECT_FALSE(s.cpu_util_pct.has_value());  // first tick: no delta yet
  EXPECT_FALSE(s.iowait_pct.has_value());

  EXPECT_EQ(s.mem_total_bytes, 24683620.0 * 1024);
  EXPECT_EQ(s.mem_available_bytes, 24447752.0 * 1024);
  EXPECT_EQ(s.mem_used_bytes, (24683620.0 - 24447752.0) * 1024);
  EXPECT_EQ(s.swap_used_bytes, (8388604.0 - 8388000.0) * 1024);

  EXPECT_EQ(s.load1, 0.06);
  EXPECT_EQ(s.load5, 0.10);
  EXPECT_EQ(s.load15, 0.07);

  ASSERT_EQ(s.nics.size(), 3u);  // lo skipped, file order kept
  EXPECT_EQ(s.nics[0].name, "eth0");
  EXPECT_EQ(s.nics[1].name, "eth1");
  EXPECT_EQ(s.nics[2].name, "ib0");
  const model::NicSample& eth0 = s.nics[0];
  EXPECT_EQ(eth0.rx_bytes, 55804532u);
  EXPECT_EQ(eth0.rx_packets, 1941u);
  EXPECT_EQ(eth0.rx_errors, 2u);
  EXPECT_EQ(eth0.rx_dropped, 5u);
  EXPECT_EQ(eth0.tx_bytes, 87297u);
  EXPECT_EQ(eth0.tx_packets, 1159u);
  EXPECT_EQ(eth0.tx_errors, 1u);
  EXPECT_EQ(eth0.tx_dropped, 3u);
  EXPECT_EQ(eth0.link_up, true);
  EXPECT_EQ(eth0.speed_mbps, 25000.0);
  const model::NicSample& eth1 = s.nics[1];
  EXPECT_EQ(eth1.link_up, false);
  EXPECT_FALSE(eth1.speed_mbps.has_value());  // "-1" on a down link
  const model::NicSample& ib0 = s.nics[2];    // counters glued to the colon
  EXPECT_EQ(ib0.rx_bytes, 1234567890123u);
  EXPECT_EQ(ib0.rx_packets, 987654321u);
  EXPECT_EQ(ib0.rx_dropped, 12u);
  EXPECT_EQ(ib0.tx_bytes, 2345678901234u);
  EXPECT_EQ(ib0.tx_packets, 876543210u);
  EXPECT_EQ(ib0.tx_dropped, 4u);
  EXPECT_EQ(ib0.speed_mbps, 400000.0);

  ASSERT_EQ(s.ib_ports.size(), 2u);
  const model::IbPortSample& ib = s.ib_ports[0];
  EXPECT_EQ(ib.device, "mlx5_0");
  EXPECT_EQ(ib.port, 1u);
  EXPECT_EQ(ib.state, "ACTIVE");
  EXPECT_EQ(ib.rate_gbps, 400.0);
  EXPECT_EQ(ib.link_layer, "InfiniBand");
  EXPECT_EQ(ib.xmit_bytes, uint64_t{1234567890} * 4);
  EXPECT_EQ(ib.rcv_bytes, uint64_t{9876543210} * 4);
  EXPECT_EQ(ib.xmit_packets, 98765432u);
  EXPECT_EQ(ib.rcv_packets, 123456789u);
  EXPECT_EQ(ib.symbol_errors, 6u);
  EXPECT_EQ(ib.rcv_errors, 3u);
  EXPECT_EQ(ib.link_downed, 1u);
  EXPECT_EQ(ib.link_error_recovery, 2u);
  EXPECT_EQ(ib.xmit_discards, 4u);
  EXPECT_EQ(ib.port_xmit_wait, 55555u);
  EXPECT_EQ(ib.local_ack_timeout_err, 7u);
  EXPECT_EQ(ib.out_of_sequence, 8u);
  EXPECT_EQ(ib.packet_seq_err, 9u);

  const model::IbPortSample& roce = s.ib_ports[1];
  EXPECT_EQ(roce.device, "mlx5_1");
  EXPECT_EQ(roce.rate_gbps, 100.0);
  EXPECT_EQ(roce.link_layer, "Ethernet");
  EXPECT_EQ(roce.xmit_bytes, 8000u);
  EXPECT_EQ(roce.rcv_bytes, 4000u);
  EXPECT_EQ(roce.xmit_packets, 20u);
  EXPECT_FALSE(roce.local_ack_timeout_err.has_value());  // no hw_counters directory
  EXPECT_FALSE(roce.out_of_sequence.has_value());
  EXPECT_FALSE(roce.packet_seq_err.has_value());
}

TEST(HostCollectorTest, RootWithTrailingSlash) {
  HostCollector c(Fixture("root") + "/");
  model::HostSample s;
  ASSERT_TRUE(c.Collect(0, &s).ok());
  EXPECT_EQ(s.cpu_count, 4u);
}

TEST(HostCollectorTest, TwoCollectsGiveCpuPercentages) {
  TempTree t("root");
  HostCollector c(t.path());
  model::HostSample s;
  ASSERT_TRUE(c.Collect(0, &s).ok());
  EXPECT_FALSE(s.cpu_util_pct.has_value());
  // +300 user, +100 system, +500 idle, +100 iowait: 1000 jiffies, 400 busy, 100 iowait.
  t.Write("proc/stat",
          "cpu  4949 12 3652 84714 395 0 120 7 0 0\n"
          "cpu0 1201 3 902 21050 80 0 35 2 0 0\n"
          "cpu1 1150 4 880 21060 71 0 28 2 0 0\n"
          "intr 1 2 3\n");
  ASSERT_TRUE(c.Collect(5000, &s).ok());
  EXPECT_EQ(s.cpu_count, 2u);  // a CPU went offline: the count follows
  ASSERT_TRUE(s.cpu_util_pct.has_value());
  EXPECT_DOUBLE_EQ(*s.cpu_util_pct, 40.0);
  ASSERT_TRUE(s.iowait_pct.has_value());
  EXPECT_DOUBLE_EQ(*s.iowait_pct, 10.0);

  // No time passed (same counters): nothing to derive.
  ASSERT_TRUE(c.Collect(10000, &s).ok());
  EXPECT_FALSE(s.cpu_util_pct.has_value());

  // iowait going backwards (documented kernel behaviour) is clamped, not negative.
  t.Write("proc/stat", "cpu  5049 12 3652 85614 390 0 120 7 0 0\ncpu0 1 1 1 1\n");
  ASSERT_TRUE(c.Collect(15000, &s).ok());
  ASSERT_TRUE(s.iowait_pct.has_value());
  EXPECT_DOUBLE_EQ(*s.iowait_pct, 0.0);
  EXPECT_DOUBLE_EQ(*s.cpu_util_pct, 100.0 * 100 / 995);
}

TEST(HostCollectorTest, CorruptTreePartialDataNoCrash) {
  HostCollector c(Fixture("root-corrupt"));
  model::HostSample s;
  ASSERT_TRUE(c.Collect(0, &s).ok());
  ASSERT_TRUE(c.Collect(5000, &s).ok());

  // Truncated aggregate line: no jiffies, no percentages; the cpuN lines still count.
  EXPECT_EQ(s.cpu_count, 2u);
  EXPECT_EQ(s.cpu_total_jiffies, 0u);
  EXPECT_FALSE(s.cpu_util_pct.has_value());

  // Non-numeric MemAvailable: only it and what derives from it are absent.
  EXPECT_EQ(s.mem_total_bytes, 24683620.0 * 1024);
  EXPECT_FALSE(s.mem_available_bytes.has_value());
  EXPECT_FALSE(s.mem_used_bytes.has_value());
  EXPECT_EQ(s.swap_used_bytes, 0.0);

  // loadavg missing.
  EXPECT_FALSE(s.load1.has_value());
  EXPECT_FALSE(s.load15.has_value());

  // eth0 has missing columns and is skipped; the garbage line is ignored; eth1 is intact.
  ASSERT_EQ(s.nics.size(), 1u);
  const model::NicSample* eth1 = FindNic(s, "eth1");
  ASSERT_NE(eth1, nullptr);
  EXPECT_EQ(eth1->rx_bytes, 100u);
  EXPECT_EQ(eth1->rx_packets, 2u);
  EXPECT_EQ(eth1->tx_bytes, 200u);
  EXPECT_EQ(eth1->tx_packets, 4u);
  EXPECT_EQ(eth1->link_up, true);
  EXPECT_FALSE(eth1->speed_mbps.has_value());  // "fast"

  ASSERT_EQ(s.ib_ports.size(), 1u);
  const model::IbPortSample& ib = s.ib_ports[0];
  EXPECT_EQ(ib.state, "ACTIVE");
  EXPECT_FALSE(ib.rate_gbps.has_value());  // empty rate file
  EXPECT_EQ(ib.link_layer, "InfiniBand");
  EXPECT_FALSE(ib.xmit_bytes.has_value());  // "abc"
  EXPECT_EQ(ib.rcv_bytes, 12345u * 4);
  EXPECT_EQ(ib.symbol_errors, 77u);
  EXPECT_FALSE(ib.rcv_packets.has_value());  // file absent
  EXPECT_FALSE(ib.local_ack_timeout_err.has_value());
}

TEST(HostCollectorTest, WarnsOncePerPathNotEveryTick) {
  SetLogLevel(LogLevel::kInfo);
  HostCollector c(Fixture("root-corrupt"));
  model::HostSample s;
  testing::internal::CaptureStderr();
  ASSERT_TRUE(c.Collect(0, &s).ok());
  const std::string first = testing::internal::GetCapturedStderr();
  EXPECT_NE(first.find("proc/loadavg"), std::string::npos) << first;
  EXPECT_NE(first.find("proc/stat: malformed aggregate cpu line"), std::string::npos) << first;
  EXPECT_NE(first.find("proc/meminfo: non-numeric MemAvailable"), std::string::npos) << first;
  EXPECT_NE(first.find("proc/net/dev: skipped malformed line(s) for eth0"), std::string::npos)
      << first;
  EXPECT_NE(first.find("ports/1/rate: empty"), std::string::npos) << first;
  EXPECT_NE(first.find("port_xmit_data: non-numeric counter"), std::string::npos) << first;
  EXPECT_NE(first.find("eth1/speed: non-numeric"), std::string::npos) << first;
  // Absent optional counters are "not offered", not faults.
  EXPECT_EQ(first.find("port_rcv_packets"), std::string::npos) << first;

  testing::internal::CaptureStderr();
  ASSERT_TRUE(c.Collect(5000, &s).ok());
  ASSERT_TRUE(c.Collect(10000, &s).ok());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");

  // Still broken an hour later: reminded once.
  testing::internal::CaptureStderr();
  ASSERT_TRUE(c.Collect(3600 * 1000 + 1, &s).ok());
  EXPECT_NE(testing::internal::GetCapturedStderr().find("proc/loadavg"), std::string::npos);
}

TEST(HostCollectorTest, HealthyTreeLogsNothing) {
  HostCollector c(Fixture("root"));
  model::HostSample s;
  testing::internal::CaptureStderr();
  ASSERT_TRUE(c.Collect(0, &s).ok());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(HostCollectorTest, FixtureRootHasNoTimeSource) {
  // The fixture tree's clock is not this machine's: no probe, nothing spawned.
  HostCollector c(Fixture("root"));
  model::HostSample s;
  ASSERT_TRUE(c.Collect(0, &s).ok());
  EXPECT_TRUE(s.time_source.empty());
  EXPECT_FALSE(s.time_source_offset_ms.has_value());
  EXPECT_FALSE(s.time_source_synced.has_value());
}

TEST(HostCollectorTest, TimeSourceProbedOncePerMinuteLastReadingRepeated) {
  int calls = 0;
  std::string answer =
      "A9FEA97B,169.254.169.123,4,1764460795.1,0.000250000,0,0,0,0,0,0,"
      "0.0001,64.0,Normal\n";
  auto runner = [&](const std::vector<std::string>& argv,
                    std::chrono::milliseconds) -> Result<std::string> {
    if (argv[0] != "chronyc") return Status::NotFound("not installed");
    ++calls;
    return answer;
  };
  HostCollector c(Fixture("root"), std::make_unique<TimeSourceProbe>(runner));
  model::HostSample s;
  ASSERT_TRUE(c.Collect(1'000'000, &s).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.time_source, "chrony");
  ASSERT_TRUE(s.time_source_offset_ms.has_value());
  EXPECT_DOUBLE_EQ(*s.time_source_offset_ms, -0.25);
  EXPECT_EQ(s.time_source_synced, true);

  // Host ticks within the minute repeat the reading without running chronyc.
  answer = "A9FEA97B,169.254.169.123,4,1764460795.1,-0.001000000,0,0,0,0,0,0,0.0001,64.0,Normal";
  for (int64_t t = 1'005'000; t < 1'060'000; t += 5'000) {
    ASSERT_TRUE(c.Collect(t, &s).ok());
    EXPECT_DOUBLE_EQ(*s.time_source_offset_ms, -0.25) << t;
  }
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(c.Collect(1'060'000, &s).ok());
  EXPECT_EQ(calls, 2);
  EXPECT_DOUBLE_EQ(*s.time_source_offset_ms, 1.0);

  // A wall clock stepped back does not postpone the next probe by the size of the step.
  ASSERT_TRUE(c.Collect(500'000, &s).ok());
  EXPECT_EQ(calls, 3);
}

TEST(HostCollectorTest, TimeSourceGoneClearsTheReadingAndWarnsOnce) {
  bool up = true;
  auto runner = [&](const std::vector<std::string>& argv,
                    std::chrono::milliseconds) -> Result<std::string> {
    if (argv[0] == "chronyc" && up)
      return std::string("C0A80A01,192.168.10.1,3,1.0,0.0,0,0,0,0,0,0,0,64.0,Not synchronised");
    return Status::Unavailable("timed out");
  };
  HostCollector c(Fixture("root"), std::make_unique<TimeSourceProbe>(runner));
  model::HostSample s;
  ASSERT_TRUE(c.Collect(0, &s).ok());
  EXPECT_EQ(s.time_source, "chrony");
  EXPECT_EQ(s.time_source_synced, false);
  EXPECT_FALSE(s.time_source_offset_ms.has_value());  // unsynchronised: no offset claimed

  up = false;
  testing::internal::CaptureStderr();
  ASSERT_TRUE(c.Collect(60'000, &s).ok());
  ASSERT_TRUE(c.Collect(120'000, &s).ok());
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(s.time_source.empty());
  EXPECT_FALSE(s.time_source_synced.has_value());
  size_t n = 0;
  for (size_t p = log.find("no time source answered"); p != std::string::npos;
       p = log.find("no time source answered", p + 1))
    ++n;
  EXPECT_EQ(n, 1u) << log;
}

TEST(HostCollectorTest, NothingReadableIsUnavailable) {
  HostCollector c(Fixture("does-not-exist"));
  model::HostSample s;
  testing::internal::CaptureStderr();
  Status st = c.Collect(0, &s);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(s.nics.empty());
}

}  // namespace
}  // namespace gpuwatch::collect

namespace gpuwatch::collect {
namespace {

TEST(ClockStateTest, FromAdjtimex) {
  // chrony/ntpd discipline: synchronized, 250 µs still being slewed, 16 ms error bound.
  ClockState c = ClockStateFromTimex(TIME_OK, 250, 16000, 0);
  EXPECT_TRUE(c.synced);
  EXPECT_DOUBLE_EQ(c.offset_ms, 0.25);
  EXPECT_DOUBLE_EQ(c.max_error_ms, 16);
  // STA_NANO: the offset is in nanoseconds.
  EXPECT_DOUBLE_EQ(ClockStateFromTimex(TIME_OK, 2500000, 0, STA_NANO).offset_ms, 2.5);
  // No time source: the kernel says TIME_ERROR / STA_UNSYNC.
  EXPECT_FALSE(ClockStateFromTimex(TIME_ERROR, 0, 16000000, STA_UNSYNC).synced);
  EXPECT_FALSE(ClockStateFromTimex(TIME_OK, 0, 0, STA_UNSYNC).synced);
}

}  // namespace
}  // namespace gpuwatch::collect
