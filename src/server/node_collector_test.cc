#include "server/node_collector.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpuwatch::server {
namespace {

// A GpuSource whose devices answer, or not, as the test says.
class ScriptedGpus : public collect::GpuSource {
 public:
  explicit ScriptedGpus(size_t n) : lost_(n, false) {
    for (unsigned i = 0; i < n; ++i) {
      model::GpuStaticInfo d;
      d.index = i;
      d.uuid = "GPU-0000000" + std::to_string(i);
      d.pci_bus_id = std::string("00000000:1") + static_cast<char>('a' + i) + ":00.0";
      d.name = "NVIDIA H100 80GB HBM3";
      d.minor_number = 7 - i;  // Slurm's numbering need not be NVML's
      devices_.push_back(d);
    }
    system_.driver_version = "550.90.07";
  }
  std::string_view Name() const override { return "scripted"; }
  Status Init() override { return init_; }
  const model::SystemInfo& System() const override { return system_; }
  const std::vector<model::GpuStaticInfo>& Devices() const override { return devices_; }
  model::GpuCapabilities Capabilities(size_t) const override { return {}; }
  Status Sample(size_t index, int64_t time_ms, model::GpuSample* out) override {
    out->time_ms = time_ms;
    out->lost = lost_[index];
    if (lost_[index]) return Status::GpuLost("GPU has fallen off the bus");
    out->Set(model::GpuMetric::kUtilGpuPct, 90);
    return Status::Ok();
  }
  Status Processes(size_t, std::vector<model::GpuProcess>*) override { return Status::Ok(); }
  Status WaitEvents(int, int64_t, std::vector<model::GpuEvent>*) override { return Status::Ok(); }

  Status init_;
  std::vector<bool> lost_;

 private:
  model::SystemInfo system_;
  std::vector<model::GpuStaticInfo> devices_;
};

NodeCollectorOptions Options() {
  NodeCollectorOptions o;
  o.hostname = "node-a";
  o.root_dir = std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/root";
  o.node_record_interval_ms = 600'000;
  return o;
}

int CountType(const GpuTick& tick, std::string_view type) {
  int n = 0;
  for (const TimedRecord& r : tick.records)
    n += r.line.find("\"type\":\"" + std::string(type) + "\"") != std::string::npos;
  return n;
}

TEST(NodeCollectorTest, WithoutASourceInitSaysSoAndNothingIsRead) {
  NodeCollector c(Options(), nullptr);
  const Status st = c.Init();
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "no GPU backend configured");
  EXPECT_FALSE(c.has_gpu_source());
  EXPECT_FALSE(c.gpu_ready());
  EXPECT_EQ(c.gpu(), nullptr);
  EXPECT_TRUE(c.devices().empty());
  EXPECT_EQ(c.DeviceByBusId("00000000:1a:00.0"), nullptr);
  EXPECT_TRUE(c.WaitEvents(0, 1000).empty());
}

TEST(NodeCollectorTest, ASourceThatFailsToStartLeavesTheNodeWithoutGpus) {
  auto gpus = std::make_unique<ScriptedGpus>(2);
  gpus->init_ = Status::Unavailable("libnvidia-ml.so.1: cannot open shared object file");
  NodeCollector c(Options(), std::move(gpus));
  EXPECT_EQ(c.Init().message(), "libnvidia-ml.so.1: cannot open shared object file");
  EXPECT_TRUE(c.has_gpu_source());
  EXPECT_FALSE(c.gpu_ready());
  EXPECT_EQ(c.gpu(), nullptr);
  EXPECT_TRUE(c.devices().empty());
}

TEST(NodeCollectorTest, ALostGpuIsOneEventWhenItGoesAndOneWhenItComesBack) {
  auto owned = std::make_unique<ScriptedGpus>(2);
  ScriptedGpus* gpus = owned.get();
  NodeCollector c(Options(), std::move(owned));
  ASSERT_TRUE(c.Init().ok());

  GpuTick t1 = c.SampleGpus(1'000, nullptr);
  EXPECT_TRUE(t1.events.empty());
  ASSERT_EQ(t1.samples.size(), 2u);
  EXPECT_EQ(t1.samples[1].Get(model::GpuMetric::kUtilGpuPct), 90.0);

  gpus->lost_[1] = true;
  GpuTick t2 = c.SampleGpus(2'000, nullptr);
  ASSERT_EQ(t2.events.size(), 1u);
  EXPECT_EQ(t2.events[0].kind, model::GpuEventKind::kGpuLost);
  EXPECT_EQ(t2.events[0].gpu_index, 1u);
  EXPECT_EQ(t2.events[0].uuid, "GPU-00000001");
  EXPECT_EQ(t2.events[0].time_ms, 2'000);
  EXPECT_EQ(t2.events[0].text, "GPU has fallen off the bus");
  EXPECT_EQ(t2.events[0].source, "scripted");
  EXPECT_TRUE(t2.samples[1].lost);

  EXPECT_TRUE(c.SampleGpus(3'000, nullptr).events.empty());  // still lost: no second event

  gpus->lost_[1] = false;
  GpuTick t4 = c.SampleGpus(4'000, nullptr);
  ASSERT_EQ(t4.events.size(), 1u);
  EXPECT_EQ(t4.events[0].kind, model::GpuEventKind::kGpuRecovered);
  EXPECT_EQ(t4.events[0].text, "GPU answers again");
}

TEST(NodeCollectorTest, ANodeRecordGoesFirstThenAtItsIntervalOrWhenAsked) {
  NodeCollector c(Options(), std::make_unique<ScriptedGpus>(2));
  ASSERT_TRUE(c.Init().ok());

  GpuTick first = c.SampleGpus(1'000, nullptr);
  ASSERT_EQ(first.records.size(), 3u);
  EXPECT_EQ(CountType(first, "node"), 1);
  EXPECT_NE(first.records[0].line.find("\"type\":\"node\""), std::string::npos);
  EXPECT_NE(first.records[0].line.find("550.90.07"), std::string::npos);
  EXPECT_EQ(CountType(first, "gpu"), 2);
  for (const TimedRecord& r : first.records) {
    EXPECT_EQ(r.t_ms, 1'000);
    EXPECT_NE(r.line.find("\"node\":\"node-a\""), std::string::npos) << r.line;
  }

  EXPECT_EQ(CountType(c.SampleGpus(2'000, nullptr), "node"), 0);
  c.RequestNodeRecord();
  EXPECT_EQ(CountType(c.SampleGpus(3'000, nullptr), "node"), 1);
  EXPECT_EQ(CountType(c.SampleGpus(602'999, nullptr), "node"), 0);
  EXPECT_EQ(CountType(c.SampleGpus(603'000, nullptr), "node"), 1);
}

TEST(NodeCollectorTest, DevicesAreFoundByBusIdInAnyCaseAndByMinorNumber) {
  NodeCollector c(Options(), std::make_unique<ScriptedGpus>(2));
  ASSERT_TRUE(c.Init().ok());
  // NVML writes the bus id in lower case, the kernel log in upper ("NVRM: Xid (PCI:0000:1B:00)").
  const model::GpuStaticInfo* d = c.DeviceByBusId("00000000:1B:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->index, 1u);
  EXPECT_EQ(c.DeviceByBusId("00000000:1C:00.0"), nullptr);
  ASSERT_NE(c.DeviceByMinor(7), nullptr);
  EXPECT_EQ(c.DeviceByMinor(7)->index, 0u);
  EXPECT_EQ(c.DeviceByMinor(0), nullptr);
}

TEST(NodeCollectorTest, TheHostTickGivesItsSampleAsATraceRecord) {
  NodeCollector c(Options(), nullptr);
  HostTick t = c.SampleHost(5'000);
  ASSERT_TRUE(t.status.ok()) << t.status.message();
  EXPECT_EQ(t.record.t_ms, t.sample.time_ms);
  EXPECT_NE(t.record.line.find("\"type\":\"host\""), std::string::npos) << t.record.line;
  EXPECT_NE(t.record.line.find("\"node\":\"node-a\""), std::string::npos) << t.record.line;

  NodeCollectorOptions wrong = Options();
  wrong.root_dir = "/nonexistent-root";
  NodeCollector w(wrong, nullptr);
  HostTick bad = w.SampleHost(5'000);
  EXPECT_FALSE(bad.status.ok());
  EXPECT_TRUE(bad.record.line.empty());
}

}  // namespace
}  // namespace gpuwatch::server
