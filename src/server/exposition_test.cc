#include "server/exposition.h"

#include <gtest/gtest.h>

#include "server/api.h"

namespace gpuwatch::server {
namespace {

using model::GpuMetric;

AgentState TwoGpus() {
  AgentState s;
  s.hostname = "node-a";
  s.version = "1.2.3";
  s.gpu_available = true;
  s.system.driver_version = "550.90.07";
  for (unsigned i = 0; i < 2; ++i) {
    model::GpuStaticInfo g;
    g.index = i;
    g.uuid = "GPU-0000000" + std::to_string(i);
    g.pci_bus_id = "00000000:1" + std::to_string(i) + ":00.0";
    g.name = "NVIDIA H100 80GB HBM3";
    g.minor_number = 3 - i;  // the /dev minor differs from the NVML index on purpose
    s.devices.push_back(g);
    s.caps.emplace_back();
    model::GpuSample smp;
    smp.time_ms = 1000;
    smp.Set(GpuMetric::kUtilGpuPct, 97);
    smp.Set(GpuMetric::kPowerW, 612.5);
    smp.Set(GpuMetric::kClockEventReasons, 0x40);
    s.gpu_samples.push_back(smp);
  }
  // GPU 1 does not support fan speed: only GPU 0 has it.
  s.gpu_samples[0].Set(GpuMetric::kFanPct, 30);
  return s;
}

TEST(ExpositionTest, DcgmNamesAndLabels) {
  auto s = TwoGpus();
  std::string out;
  RenderPrometheus(s, &out);
  EXPECT_NE(out.find("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"), std::string::npos);
  EXPECT_NE(
      out.find(
          "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-00000000\",pci_bus_id=\"00000000:10:00.0\","
          "device=\"nvidia3\",model_name=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-a\","
          "DCGM_FI_DRIVER_VERSION=\"550.90.07\"} 97\n"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("DCGM_FI_DEV_POWER_USAGE{gpu=\"1\""), std::string::npos);
  EXPECT_NE(out.find("} 612.5\n"), std::string::npos);
}

TEST(ExpositionTest, UnsupportedFieldIsAbsentNotZero) {
  auto s = TwoGpus();
  std::string out;
  RenderPrometheus(s, &out);
  EXPECT_NE(out.find("DCGM_FI_DEV_FAN_SPEED{gpu=\"0\""), std::string::npos);
  EXPECT_EQ(out.find("DCGM_FI_DEV_FAN_SPEED{gpu=\"1\""), std::string::npos);
  EXPECT_EQ(out.find("DCGM_FI_DEV_MEMORY_TEMP"), std::string::npos);
}

TEST(ExpositionTest, ThrottleReasonsByName) {
  auto s = TwoGpus();
  std::string out;
  RenderPrometheus(s, &out);
  EXPECT_NE(out.find("gpuwatch_clock_event_reason_active{gpu=\"0\""), std::string::npos);
  EXPECT_NE(out.find("reason=\"hw_thermal\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("reason=\"sw_power_cap\"} 0\n"), std::string::npos);
}

TEST(ExpositionTest, XidIsACounterPerCode) {
  auto s = TwoGpus();
  s.xid_counts[{1, 79}] = 2;
  s.xid_counts[{1, 31}] = 1;
  s.last_xid[1] = 79;
  std::string out;
  RenderPrometheus(s, &out);
  EXPECT_NE(out.find("# TYPE gpuwatch_xid_errors_total counter\n"), std::string::npos);
  EXPECT_NE(out.find("gpuwatch_xid_errors_total{gpu=\"1\""), std::string::npos);
  EXPECT_NE(out.find(",xid=\"79\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find(",xid=\"31\"} 1\n"), std::string::npos);
}

TEST(ExpositionTest, CounterWithoutTotalSuffixIsUntyped) {
  auto s = TwoGpus();
  s.gpu_samples[0].Set(GpuMetric::kEccDbeVolatile, 0);
  std::string out;
  RenderPrometheus(s, &out);
  EXPECT_NE(out.find("# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL untyped\n"), std::string::npos);
}

TEST(ExpositionTest, LostGpuIsDown) {
  auto s = TwoGpus();
  s.gpu_samples[1] = model::GpuSample{};
  s.gpu_samples[1].lost = true;
  std::string out;
  RenderPrometheus(s, &out);
  EXPECT_NE(out.find("gpuwatch_gpu_up{gpu=\"1\""), std::string::npos);
  EXPECT_NE(out.find("DCGM_FI_DRIVER_VERSION=\"550.90.07\"} 0\n"), std::string::npos);
  EXPECT_EQ(out.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\""), std::string::npos);
}

TEST(ExpositionTest, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(EscapeLabelValue("job\xff"), "job\xef\xbf\xbd")
      << "invalid UTF-8 would fail the scrape";
  auto s = TwoGpus();
  s.hostname = "we\"ird";
  std::string out;
  RenderPrometheus(s, &out);
  EXPECT_NE(out.find("Hostname=\"we\\\"ird\""), std::string::npos);
}

// The served certificate's expiry and its reloads appear only with TLS; an expiry OpenSSL
// could not read is left out rather than exported as 0 (which would fire every expiry alert).
TEST(ExpositionTest, TlsCertificateLinesOnlyWithTls) {
  LimitCounters c;
  std::string out;
  RenderLimitCounters("node-a", c, &out);
  EXPECT_EQ(out.find("gpuwatch_http_tls"), std::string::npos);
  c.tls = true;
  c.tls_reloads = 2;
  c.tls_reload_failures = 1;
  out.clear();
  RenderLimitCounters("node-a", c, &out);
  EXPECT_EQ(out.find("gpuwatch_http_tls_certificate_not_after_seconds"), std::string::npos);
  EXPECT_NE(out.find("gpuwatch_http_tls_reloads_total{Hostname=\"node-a\",result=\"loaded\"} 2"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("result=\"refused\"} 1"), std::string::npos);
  c.tls_not_after_s = 1'790'000'000;
  out.clear();
  RenderLimitCounters("node-a", c, &out);
  EXPECT_NE(out.find("# TYPE gpuwatch_http_tls_certificate_not_after_seconds gauge"),
            std::string::npos);
  EXPECT_NE(
      out.find("gpuwatch_http_tls_certificate_not_after_seconds{Hostname=\"node-a\"} 1790000000"),
      std::string::npos)
      << out;
}

TEST(ApiTest, CapabilitiesJsonNamesReasons) {
  auto s = TwoGpus();
  s.caps[1].metrics[model::Idx(GpuMetric::kFanPct)] = {model::Support::kNotSupported,
                                                       "NVML_ERROR_NOT_SUPPORTED"};
  auto j = CapabilitiesJson(s);
  EXPECT_EQ(j["gpus"][1]["fields"]["DCGM_FI_DEV_FAN_SPEED"]["support"], "not_supported");
  EXPECT_EQ(j["gpus"][1]["fields"]["DCGM_FI_DEV_FAN_SPEED"]["reason"], "NVML_ERROR_NOT_SUPPORTED");
}

}  // namespace
}  // namespace gpuwatch::server

namespace gpuwatch::server {
namespace {

// The jobs screen draws a job's step time against the template baseline the diagnosis uses.
TEST(ApiTest, JobsCarryTheirTemplateBaselineOrNull) {
  jobs::JobView a, b;
  a.id = "train-1";
  a.template_name = "llama-fsdp";
  b.id = "adhoc";
  analyze::TemplateStep t;
  t.template_name = "llama-fsdp";
  t.shape = "1x8xNVIDIA H100 80GB HBM3";
  t.version = 3;
  t.median_s = 0.42;
  t.p99_s = 0.61;
  const nlohmann::json j = JobsJson({a, b}, "/run/gpuwatch/job.sock", [&](const std::string& job) {
    return job == "train-1" ? std::optional(t) : std::nullopt;
  });
  ASSERT_EQ(j["jobs"].size(), 2u);
  EXPECT_EQ(j["jobs"][0]["baseline"], nlohmann::json({{"template", "llama-fsdp"},
                                                      {"shape", "1x8xNVIDIA H100 80GB HBM3"},
                                                      {"version", 3},
                                                      {"step_median_s", 0.42},
                                                      {"step_p99_s", 0.61}}));
  EXPECT_TRUE(j["jobs"][1]["baseline"].is_null());
  EXPECT_TRUE(JobJson(b, true)["baseline"].is_null());
}

// The jobs list's steps and median step: the slowest rank's, without listing the ranks.
TEST(ApiTest, JobsCarryStepsAndMedianStepOfTheirSlowestRank) {
  jobs::JobView v;
  v.id = "train-1";
  jobs::RankView r0, r1, r2;
  r0.steps_total = 120;
  r0.median_step_s = 0.40;
  r1.steps_total = 118;
  r1.median_step_s = 0.55;
  r2.steps_total = 3;  // joined late, no median yet
  v.ranks = {r0, r1, r2};
  const nlohmann::json j = JobsJson({v}, "", nullptr)["jobs"][0];
  EXPECT_EQ(j["steps_total"], 120);
  EXPECT_EQ(j["median_step_s"], 0.55);
  EXPECT_FALSE(j.contains("ranks"));
  jobs::JobView none;
  const nlohmann::json k = JobJson(none, false);
  EXPECT_EQ(k["steps_total"], 0);
  EXPECT_TRUE(k["median_step_s"].is_null());
}

}  // namespace
}  // namespace gpuwatch::server
