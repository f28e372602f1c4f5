#include "collect/smi_text.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "common/testing/test_files.h"

namespace gpuwatch::collect {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// tests/fixtures/explain/smi: real nvidia-smi output with the `smi` object a correct parser
// prints (SOURCES.md says where each came from and which conventions the files follow).
std::string FixtureDir() {
  return std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/explain/smi";
}
std::string Fixture(const std::string& name) {
  return testing::ReadFileOrEmpty(FixtureDir() + "/" + name);
}

// ../shared/real/smi: more real captures (../shared/real/INDEX.md, section 4). Not part of
// this repository; the tests on them skip when it is absent.
std::string RealDir() { return testing::SharedDir("real/smi"); }
std::string Real(const std::string& name) {
  return testing::ReadFileOrEmpty(RealDir() + "/" + name);
}
#define SKIP_WITHOUT_REAL_DATA() GW_SKIP_WITHOUT_SHARED(RealDir())

std::vector<std::string> Names(const std::vector<std::string>& v) { return v; }

std::string Warnings(const SmiReport& r) {
  std::string s;
  for (const auto& w : r.warnings) s += "\n  " + w;
  return s;
}

bool HasWarning(const SmiReport& r, const std::string& what) {
  for (const auto& w : r.warnings)
    if (w.find(what) != std::string::npos) return true;
  return false;
}

const SmiGpu* GpuByIndex(const SmiReport& r, int index) {
  for (const auto& g : r.gpus)
    if (g.index == index) return &g;
  return nullptr;
}

std::vector<std::string> Reasons(const SmiGpu& g) {
  return g.clock_event_reasons.value_or(std::vector<std::string>{"<null>"});
}

// ---- every fixture against its expected.json ---------------------------------------------

TEST(SmiTextFixtures, EveryCaptureGivesItsExpectedSmiObject) {
  int checked = 0;
  for (const testing::Capture& c : testing::CapturesIn(FixtureDir(), ".txt")) {
    const fs::path& txt = c.input;
    const fs::path& expected_path = c.expected;
    if (!fs::exists(expected_path)) continue;
    SCOPED_TRACE(txt.filename().string());
    const std::string text = testing::ReadFileOrEmpty(txt.string());
    ASSERT_FALSE(text.empty());
    const json expected = json::parse(testing::ReadFileOrEmpty(expected_path.string()));
    ASSERT_TRUE(expected.contains("smi"));
    const SmiReport r = ParseSmiText(text);
    const json got = SmiReportJson(r);
    EXPECT_EQ(got, expected["smi"])
        << "diff (expected → got): " << json::diff(expected["smi"], got).dump(1) << Warnings(r);
    EXPECT_TRUE(LooksLikeSmi(text));
    EXPECT_FALSE(r.forms.empty());
    ++checked;
  }
  EXPECT_GE(checked, 18);
}

// ---- focused checks on the fixtures, exact values -------------------------------------------

// utkuozdemir/nvidia_gpu_exporter capture, H100 under gpu-burn (590.48.01): the new layout's
// wider PID column and a process name with a path.
TEST(SmiTextTable, NewLayoutUnderLoadWithThreeProcesses) {
  const SmiReport r = ParseSmiText(Fixture("nvgpuexp_h100_590_table_load_3procs_full.txt"));
  EXPECT_EQ(r.forms, Names({"table"}));
  EXPECT_EQ(r.driver_version, "590.48.01");
  EXPECT_EQ(r.cuda_version, "13.1");
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.index, 0);
  EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g.bus_id, "00000000:00:09.0");
  EXPECT_EQ(g.temp_c, 59);
  EXPECT_EQ(g.power_w, 629);
  EXPECT_EQ(g.power_limit_w, 700);
  EXPECT_EQ(g.mem_used_mib, 19818);
  EXPECT_EQ(g.mem_total_mib, 81559);
  EXPECT_EQ(g.util_pct, 100);
  EXPECT_EQ(g.ecc.volatile_uncorrected, 0);
  EXPECT_FALSE(g.ecc.mode);  // not inferred from the column
  EXPECT_FALSE(g.clock_event_reasons);
  ASSERT_EQ(r.processes.size(), 3u);
  EXPECT_EQ(r.processes[0].pid, 11327);
  EXPECT_EQ(r.processes[0].name, "/root/tools/memhog");
  EXPECT_EQ(r.processes[0].mem_mib, 2566);
  EXPECT_EQ(r.processes[2].gpu, 0);
  EXPECT_EQ(r.processes[2].pid, 11345);
  EXPECT_EQ(r.processes[2].name, "./gpu_burn");
  EXPECT_EQ(r.processes[2].mem_mib, 15690);
}

// Same repository, the H100 with MIG on: ECC column "On" and GPU-Util "N/A" read as null, and
// the new "MIG devices:" block (Shared Memory-Usage, an OFA column).
TEST(SmiTextTable, MigDevicesBlockNewLayout) {
  const SmiReport r = ParseSmiText(Fixture("nvgpuexp_h100_590_table_mig_4_devices_full.txt"));
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.temp_c, 42);
  EXPECT_EQ(g.power_w, 98);
  EXPECT_EQ(g.mem_used_mib, 59);
  EXPECT_FALSE(g.util_pct);
  EXPECT_FALSE(g.ecc.volatile_uncorrected);
  ASSERT_EQ(g.mig_devices.size(), 4u);
  const int gi[] = {2, 3, 9, 10};
  const double used[] = {26, 17, 9, 9}, total[] = {40448, 20096, 9984, 9984};
  for (int i = 0; i < 4; ++i) {
    const SmiMigDevice& m = g.mig_devices[i];
    EXPECT_EQ(m.gpu, 0);
    EXPECT_EQ(m.gi, gi[i]);
    EXPECT_EQ(m.ci, 0);
    EXPECT_EQ(m.mig_dev, i);
    EXPECT_EQ(m.mem_used_mib, used[i]);
    EXPECT_EQ(m.mem_total_mib, total[i]);
  }
  EXPECT_TRUE(r.processes.empty());
}

// nanopool/phoenix-miner#17, old layout: draw above the cap (279W / 275W) is read as printed,
// and the ECC column "Off" is no count.
TEST(SmiTextTable, OldLayoutDrawAboveCapEccOff) {
  const SmiReport r =
      ParseSmiText(Fixture("phoenixminer17_a100_sxm_470_old_table_ecc_off_partial.txt"));
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.name, "NVIDIA A100-SXM...");
  EXPECT_EQ(g.power_w, 279);
  EXPECT_EQ(g.power_limit_w, 275);
  EXPECT_EQ(g.temp_c, 69);
  EXPECT_EQ(g.mem_used_mib, 5140);
  EXPECT_EQ(g.mem_total_mib, 40536);
  EXPECT_FALSE(g.ecc.volatile_uncorrected);
}

// lambdal/deeplearning-benchmark#21, old 79-column layout cut inside GPU 2's rows.
TEST(SmiTextTable, OldLayoutCutInsideTheLastGpu) {
  const SmiReport r = ParseSmiText(Fixture("lambdal21_h100_pcie_520_old_table_partial.txt"));
  ASSERT_EQ(r.gpus.size(), 3u);
  EXPECT_EQ(r.gpus[0].bus_id, "00000000:4F:00.0");
  EXPECT_EQ(r.gpus[1].mem_used_mib, 661);
  EXPECT_EQ(r.gpus[2].index, 2);
  EXPECT_EQ(r.gpus[2].power_w, 72);
  EXPECT_EQ(r.gpus[2].power_limit_w, 350);
  EXPECT_EQ(r.gpus[2].util_pct, 100);
}

// wilicc/gpu-burn#114: a shell prompt line with a trailing blank and the date line above the
// table, cut after GPU 1's second row.
TEST(SmiTextTable, PromptAndDateLinesAbove) {
  const SmiReport r = ParseSmiText(Fixture("gpuburn114_h100_550_table_prompt_partial.txt"));
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].mem_used_mib, 72790);
  EXPECT_EQ(r.gpus[0].util_pct, 2);
  EXPECT_EQ(r.gpus[1].bus_id, "00000000:3B:00.0");
  EXPECT_EQ(r.gpus[1].power_w, 109);
}

// thamada/nvidia-smi nvsim/H100SXMx8_smi.py, `out_a`: the whole GPU 0 block of a 565 -q.
TEST(SmiTextQ, FullGpuBlock) {
  const SmiReport r = ParseSmiText(Fixture("thamada_h100sxm8_565_q_gpu0_block_partial.txt"));
  EXPECT_EQ(r.forms, Names({"q"}));
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.index, 0);
  EXPECT_EQ(g.bus_id, "00000000:18:00.0");
  EXPECT_EQ(g.uuid, "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1");
  EXPECT_EQ(g.power_w, 100.89);  // GPU Power Readings, not the memory's 69.61 W
  EXPECT_EQ(g.power_limit_w, 700);
  EXPECT_EQ(g.temp_c, 30);
  EXPECT_EQ(g.pcie_gen_current, 5);
  EXPECT_EQ(g.pcie_width_max, 16);
  EXPECT_EQ(Reasons(g), Names({"idle"}));
  EXPECT_EQ(g.sm_clock_mhz, 345);
  EXPECT_EQ(g.max_sm_clock_mhz, 1980);
  EXPECT_EQ(g.ecc.mode, "Enabled");
  EXPECT_EQ(g.ecc.aggregate_uncorrected, 0);
  EXPECT_EQ(g.ecc.remapped_rows_pending, false);
  EXPECT_EQ(g.ecc.remapped_rows_failure, false);
  EXPECT_TRUE(r.processes.empty());  // "Processes : None"
}

// ollama/ollama#6163: -q -d POWER,TEMPERATURE,PERFORMANCE with SW Power Cap active at 77 C.
TEST(SmiTextQ, SwPowerCapActive) {
  const SmiReport r =
      ParseSmiText(Fixture("ollama6163_q_d_perf_temp_sw_power_cap_active_partial.txt"));
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(Reasons(r.gpus[0]), Names({"sw_power_cap"}));
  EXPECT_EQ(r.gpus[0].temp_c, 77);  // GPU Current Temp, not the 100 C shutdown line
  EXPECT_FALSE(r.gpus[0].name);
}

// bigstack-oss/cubecos#312: "CUDA Version : Not Found" is no version; nothing active.
TEST(SmiTextQ, CudaNotFoundAndNoReasonActive) {
  const SmiReport r =
      ParseSmiText(Fixture("cubecos312_q_d_memory_perf_580_cuda_not_found_partial.txt"));
  EXPECT_EQ(r.driver_version, "580.105.06");
  EXPECT_FALSE(r.cuda_version);
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].bus_id, "00000000:42:00.0");
  ASSERT_TRUE(r.gpus[0].clock_event_reasons);
  EXPECT_TRUE(r.gpus[0].clock_event_reasons->empty());
}

// nvidia_gpu_exporter MIG capture: -q's MIG Device blocks (Shared FB Memory Usage, 590).
TEST(SmiTextQ, MigDeviceBlocks) {
  const SmiReport r = ParseSmiText(Fixture("nvgpuexp_h100_590_q_mig_enabled_head_partial.txt"));
  ASSERT_EQ(r.gpus.size(), 1u);
  const auto& m = r.gpus[0].mig_devices;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[3].gi, 10);
  EXPECT_EQ(m[3].mig_dev, 3);
  EXPECT_EQ(m[0].mem_used_mib, 26);
  EXPECT_EQ(m[0].mem_total_mib, 40448);
  // The MIG devices' "ECC Errors / SRAM Uncorrectable" lines are no GPU ECC section.
  EXPECT_FALSE(r.gpus[0].ecc.volatile_uncorrected);
}

// influxdata/telegraf testdata a100-sxm4-v12.xml: -q -x with MIG, all reasons Not Active.
TEST(SmiTextXml, MigEnabledA100) {
  const SmiReport r = ParseSmiText(Fixture("telegraf_a100_sxm4_535_q_x_mig_enabled_full.txt"));
  EXPECT_EQ(r.forms, Names({"xml"}));
  EXPECT_EQ(r.driver_version, "535.54.03");
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.uuid, "GPU-513536b6-7d19-9063-b049-1e69664bb298");
  EXPECT_EQ(g.power_w, 67.03);
  EXPECT_EQ(g.power_limit_w, 500);
  EXPECT_EQ(g.sm_clock_mhz, 1275);
  EXPECT_EQ(g.max_sm_clock_mhz, 1410);
  EXPECT_EQ(g.mem_used_mib, 50);  // the GPU's fb_memory_usage, not a MIG device's 12
  ASSERT_TRUE(g.clock_event_reasons);
  EXPECT_TRUE(g.clock_event_reasons->empty());
  ASSERT_EQ(g.mig_devices.size(), 4u);
  EXPECT_EQ(g.mig_devices[2].gi, 5);
  EXPECT_EQ(g.mig_devices[2].mem_total_mib, 19968);
  EXPECT_FALSE(g.ecc.remapped_rows_pending);  // <remapped_rows>N/A</remapped_rows>
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

// a0s/nvidia-smi-exporter#1: TAB-indented -q -x after a prompt line, cut inside <gpu>.
TEST(SmiTextXml, TabsPromptAndCut) {
  const SmiReport r = ParseSmiText(Fixture("a0s1_q_x_tabs_gtx1080_430_head_partial.txt"));
  EXPECT_EQ(r.cuda_version, "10.2");
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].name, "GeForce GTX 1080");
  EXPECT_EQ(r.gpus[0].bus_id, "00000000:01:00.0");
  EXPECT_EQ(r.gpus[0].uuid, "GPU-90e3dab0-b59d-8bf6-d909-d4fab8d2f29b");
  EXPECT_TRUE(HasWarning(r, "cut inside <gpu_virtualization_mode>")) << Warnings(r);
}

// nvidia_gpu_exporter H100 idle: --query-gpu with 212 fields, the reasons from the bitmask.
TEST(SmiTextCsv, AllFieldsIdleH100) {
  const SmiReport r = ParseSmiText(Fixture("nvgpuexp_h100_590_query_gpu_csv_all_fields_idle.txt"));
  EXPECT_EQ(r.forms, Names({"csv"}));
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(Reasons(g), Names({"idle"}));
  EXPECT_EQ(g.power_w, 69.85);  // power.draw, not .instant's 69.62
  EXPECT_EQ(g.power_limit_w, 700);
  EXPECT_EQ(g.temp_c, 41);
  EXPECT_EQ(g.sm_clock_mhz, 345);
  EXPECT_EQ(g.max_sm_clock_mhz, 1980);
  EXPECT_EQ(g.uuid, "GPU-00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(g.ecc.remapped_rows_pending, false);
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

// nvidia_gpu_exporter H100 under load: dmon's new column set; the last of 5 samples.
TEST(SmiTextDmon, LastSampleWins) {
  const SmiReport r = ParseSmiText(Fixture("nvgpuexp_h100_590_dmon_load_gtemp_mtemp.txt"));
  EXPECT_EQ(r.forms, Names({"dmon"}));
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].power_w, 636);
  EXPECT_EQ(r.gpus[0].temp_c, 65);  // gtemp, not mtemp's 59
  EXPECT_EQ(r.gpus[0].util_pct, 100);
  EXPECT_EQ(r.gpus[0].sm_clock_mhz, 1980);
}

// nvidia_gpu_exporter testdata list_gpus.txt: -L of 8 H100s with MIG lines under each.
TEST(SmiTextList, EightGpusWithMigLines) {
  const SmiReport r = ParseSmiText(Fixture("nvgpuexp_list_gpus_8x_h100_mig_1g10gb.txt"));
  EXPECT_EQ(r.forms, Names({"list"}));
  ASSERT_EQ(r.gpus.size(), 8u);
  EXPECT_EQ(r.gpus[0].uuid, "GPU-63d1e50a-b952-d15c-0740-12bc14859142");
  EXPECT_EQ(r.gpus[7].index, 7);
  for (const auto& g : r.gpus) EXPECT_TRUE(g.mig_devices.empty());
}

// ---- ../shared/real/smi: INDEX.md section 4's facts ----------------------------------------

TEST(SmiTextReal, EveryFileIsCoveredAndLooksLikeSmi) {
  SKIP_WITHOUT_REAL_DATA();
  const std::set<std::string> covered = {
      "bpytop26_query_gpu_csv_1080ti_1060.csv",
      "deepspeech178_dmon_pucvmet_4gpu_markdown_quoted.txt",
      "gpud_testdata_nvidia_smi_table_a10_550_full.txt",
      "gpud_testdata_smi_q_full_a10_550_idle.txt",
      "hami1903_nvidia_smi_table_2x_a800_pcie_580_partial.txt",
      "k8sdp100_smi_q_head_v100_pcie_old_driver_partial.txt",
      "nccl1564_nvidia_smi_table_a100_pcie_525_in_pod_partial.txt",
      "nvidiadocker1090_smi_q_fragment_throttle_reasons_none_active.txt",
      "nvitop8_mig_devices_table_partial.txt",
      "smc57_query_gpu_csv_rtx2060.csv",
  };
  for (const auto& entry : fs::directory_iterator(RealDir())) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    EXPECT_TRUE(covered.count(name)) << "a new capture: add a test for its facts";
    const std::string text = Real(name);
    EXPECT_TRUE(LooksLikeSmi(text));
    const SmiReport r = ParseSmiText(text);
    EXPECT_FALSE(r.gpus.empty());
    (void)SmiReportJson(r).dump();
  }
}

// leptonai/gpud e2e mock NormalQueryOutput: a full -q of an idle A10.
TEST(SmiTextReal, GpudFullQA10) {
  SKIP_WITHOUT_REAL_DATA();
  const SmiReport r = ParseSmiText(Real("gpud_testdata_smi_q_full_a10_550_idle.txt"));
  EXPECT_EQ(r.driver_version, "550.127.05");
  EXPECT_EQ(r.cuda_version, "12.4");
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.name, "NVIDIA A10");
  EXPECT_EQ(g.bus_id, "00000000:06:00.0");
  EXPECT_EQ(g.pcie_gen_max, 4);
  EXPECT_EQ(g.pcie_gen_current, 1);
  EXPECT_EQ(g.pcie_width_current, 16);
  EXPECT_EQ(Reasons(g), Names({"idle"}));
  EXPECT_EQ(g.mem_total_mib, 23028);
  EXPECT_EQ(g.mem_used_mib, 1);
  EXPECT_EQ(g.util_pct, 0);
  EXPECT_EQ(g.ecc.mode, "Enabled");
  EXPECT_EQ(g.ecc.volatile_corrected, 0);
  EXPECT_EQ(g.ecc.volatile_uncorrected, 0);
  EXPECT_EQ(g.ecc.remapped_rows_correctable, 0);
  EXPECT_EQ(g.ecc.remapped_rows_uncorrectable, 0);
  EXPECT_EQ(g.ecc.remapped_rows_pending, false);
  EXPECT_EQ(g.ecc.remapped_rows_failure, false);
  EXPECT_EQ(g.temp_c, 33);
  EXPECT_EQ(g.power_w, 21.30);
  EXPECT_EQ(g.power_limit_w, 150);
  EXPECT_EQ(g.sm_clock_mhz, 210);
  EXPECT_EQ(g.max_sm_clock_mhz, 1695);
  EXPECT_EQ(g.uuid, "GPU-51ae0086-e1ac-4a20-f062-9caa44e4df6d");
  EXPECT_TRUE(g.mig_devices.empty());
  EXPECT_TRUE(r.processes.empty());
}

// leptonai/gpud NormalSMIOutput: the same A10 as a table.
TEST(SmiTextReal, GpudTableA10) {
  SKIP_WITHOUT_REAL_DATA();
  const SmiReport r = ParseSmiText(Real("gpud_testdata_nvidia_smi_table_a10_550_full.txt"));
  EXPECT_EQ(r.driver_version, "550.127.05");
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.name, "NVIDIA A10");
  EXPECT_EQ(g.bus_id, "00000000:06:00.0");
  EXPECT_EQ(g.temp_c, 32);
  EXPECT_EQ(g.power_w, 21);
  EXPECT_EQ(g.power_limit_w, 150);
  EXPECT_EQ(g.mem_used_mib, 1);
  EXPECT_EQ(g.mem_total_mib, 23028);
  EXPECT_EQ(g.util_pct, 0);
  EXPECT_EQ(g.ecc.volatile_uncorrected, 0);
  EXPECT_TRUE(r.processes.empty());
}

// Project-HAMi/HAMi#1903: a command line and a date above a 580 table, cut after GPU 1.
TEST(SmiTextReal, Hami1903TwoA800) {
  SKIP_WITHOUT_REAL_DATA();
  const SmiReport r = ParseSmiText(Real("hami1903_nvidia_smi_table_2x_a800_pcie_580_partial.txt"));
  EXPECT_EQ(r.driver_version, "580.119.02");
  EXPECT_EQ(r.cuda_version, "13.0");
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].name, "NVIDIA A800 80GB PCIe");
  EXPECT_EQ(r.gpus[0].bus_id, "00000000:01:00.0");
  EXPECT_EQ(r.gpus[1].bus_id, "00000000:81:00.0");
  EXPECT_EQ(r.gpus[0].temp_c, 27);
  EXPECT_EQ(r.gpus[1].temp_c, 26);
  EXPECT_EQ(r.gpus[0].power_w, 46);
  EXPECT_EQ(r.gpus[1].power_w, 47);
  EXPECT_EQ(r.gpus[1].power_limit_w, 300);
  EXPECT_EQ(r.gpus[1].mem_used_mib, 0);
  EXPECT_EQ(r.gpus[1].mem_total_mib, 81920);
  EXPECT_EQ(r.gpus[0].util_pct, 0);
}

// NVIDIA/nccl#1564: old table in a pod; GPU 0's ECC "N/A", GPU 1's 0.
TEST(SmiTextReal, Nccl1564OldTableEccNa) {
  SKIP_WITHOUT_REAL_DATA();
  const SmiReport r =
      ParseSmiText(Real("nccl1564_nvidia_smi_table_a100_pcie_525_in_pod_partial.txt"));
  EXPECT_EQ(r.driver_version, "525.105.17");
  EXPECT_EQ(r.cuda_version, "12.4");
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].name, "NVIDIA A100-PCI...");
  EXPECT_EQ(r.gpus[0].bus_id, "00000000:0C:00.0");
  EXPECT_EQ(r.gpus[1].bus_id, "00000000:0D:00.0");
  EXPECT_FALSE(r.gpus[0].ecc.volatile_uncorrected);
  EXPECT_EQ(r.gpus[1].ecc.volatile_uncorrected, 0);
  EXPECT_EQ(r.gpus[0].temp_c, 34);
  EXPECT_EQ(r.gpus[1].power_w, 44);
  EXPECT_EQ(r.gpus[1].power_limit_w, 250);
  EXPECT_EQ(r.gpus[0].mem_used_mib, 3);
  EXPECT_EQ(r.gpus[0].mem_total_mib, 40960);
}

// XuehaiPan/nvitop#8: a "MIG devices:" block alone (old layout); its devices belong to GPU 1,
// of which nothing else is known.
TEST(SmiTextReal, Nvitop8MigBlockAlone) {
  SKIP_WITHOUT_REAL_DATA();
  const SmiReport r = ParseSmiText(Real("nvitop8_mig_devices_table_partial.txt"));
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.index, 1);
  EXPECT_FALSE(g.name);
  ASSERT_EQ(g.mig_devices.size(), 3u);
  const int gi[] = {3, 5, 6};
  const double used[] = {14366, 9826, 13};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(g.mig_devices[i].gpu, 1);
    EXPECT_EQ(g.mig_devices[i].gi, gi[i]);
    EXPECT_EQ(g.mig_devices[i].ci, 0);
    EXPECT_EQ(g.mig_devices[i].mig_dev, i);
    EXPECT_EQ(g.mig_devices[i].mem_used_mib, used[i]);
    EXPECT_EQ(g.mig_devices[i].mem_total_mib, 19968);  // not BAR1's 32767
  }
}

// NVIDIA/nvidia-docker#1090: a -q fragment cut above its GPU line, with the old "Clocks
// Throttle Reasons" name and N/A for the HW sub-reasons.
TEST(SmiTextReal, NvidiaDocker1090ThrottleReasonsFragment) {
  SKIP_WITHOUT_REAL_DATA();
  const SmiReport r =
      ParseSmiText(Real("nvidiadocker1090_smi_q_fragment_throttle_reasons_none_active.txt"));
  EXPECT_EQ(r.forms, Names({"q"}));
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.pcie_width_max, 16);
  EXPECT_EQ(g.pcie_width_current, 16);
  ASSERT_TRUE(g.clock_event_reasons);
  EXPECT_TRUE(g.clock_event_reasons->empty());
  EXPECT_EQ(g.mem_total_mib, 4046);
  EXPECT_EQ(g.mem_used_mib, 523);  // not BAR1's 2
  EXPECT_FALSE(g.bus_id);
}

// NVIDIA/k8s-device-plugin#100: the head of an older -q, no NVSMI LOG line, cut inside PCI.
TEST(SmiTextReal, K8sDp100QHead) {
  SKIP_WITHOUT_REAL_DATA();
  const SmiReport r = ParseSmiText(Real("k8sdp100_smi_q_head_v100_pcie_old_driver_partial.txt"));
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].name, "Tesla V100-PCIE-16GB");
  EXPECT_EQ(r.gpus[0].bus_id, "00000000:84:00.0");
  EXPECT_EQ(r.gpus[0].uuid, "GPU-1f2eba5a-54f6-7a53-978b-9ab84bd291c0");
  EXPECT_FALSE(r.gpus[0].clock_event_reasons);
}

// mozilla/DeepSpeech#178: dmon -s pucvmet with every line quoted ("> ") and "\#" headers.
TEST(SmiTextReal, DeepSpeech178QuotedDmon) {
  SKIP_WITHOUT_REAL_DATA();
  const SmiReport r = ParseSmiText(Real("deepspeech178_dmon_pucvmet_4gpu_markdown_quoted.txt"));
  EXPECT_EQ(r.forms, Names({"dmon"}));
  ASSERT_EQ(r.gpus.size(), 4u);
  const SmiGpu* g0 = GpuByIndex(r, 0);
  ASSERT_NE(g0, nullptr);
  EXPECT_EQ(g0->power_w, 111);
  EXPECT_EQ(g0->temp_c, 83);
  EXPECT_EQ(g0->util_pct, 25);
  EXPECT_EQ(g0->sm_clock_mhz, 1683);
  EXPECT_EQ(g0->mem_used_mib, 11651);
  const SmiGpu* g3 = GpuByIndex(r, 3);
  ASSERT_NE(g3, nullptr);
  EXPECT_EQ(g3->power_w, 86);
  EXPECT_EQ(g3->temp_c, 70);
  EXPECT_FALSE(g3->ecc.volatile_uncorrected);  // sbecc/dbecc "-" are not read as ECC
}

// hakandundar34coding/system-monitoring-center#57: --query-gpu CSV with units in the header.
TEST(SmiTextReal, Smc57CsvRtx2060) {
  SKIP_WITHOUT_REAL_DATA();
  const SmiReport r = ParseSmiText(Real("smc57_query_gpu_csv_rtx2060.csv"));
  EXPECT_EQ(r.driver_version, "460.91.03");
  EXPECT_FALSE(r.cuda_version);
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.index, 0);  // the row's order: there is no index column
  EXPECT_EQ(g.name, "GeForce RTX 2060");
  EXPECT_EQ(g.bus_id, "00000000:09:00.0");
  EXPECT_EQ(g.util_pct, 20);
  EXPECT_EQ(g.mem_total_mib, 5934);
  EXPECT_EQ(g.mem_used_mib, 682);
  EXPECT_EQ(g.temp_c, 36);
  EXPECT_EQ(g.sm_clock_mhz, 300);  // clocks.current.graphics stands in for the SM clock
  EXPECT_EQ(g.max_sm_clock_mhz, 2160);
  EXPECT_FALSE(g.clock_event_reasons);
}

// aristocratos/bpytop#26: CSV of two GPUs, no index or bus id columns.
TEST(SmiTextReal, Bpytop26CsvTwoGpus) {
  SKIP_WITHOUT_REAL_DATA();
  const SmiReport r = ParseSmiText(Real("bpytop26_query_gpu_csv_1080ti_1060.csv"));
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].index, 0);
  EXPECT_EQ(r.gpus[0].name, "GeForce GTX 1080 Ti");
  EXPECT_EQ(r.gpus[0].mem_total_mib, 11175);
  EXPECT_EQ(r.gpus[0].mem_used_mib, 2856);
  EXPECT_EQ(r.gpus[0].util_pct, 36);
  EXPECT_EQ(r.gpus[0].temp_c, 60);
  EXPECT_EQ(r.gpus[0].power_w, 106.56);
  EXPECT_EQ(r.gpus[0].sm_clock_mhz, 1936);
  EXPECT_EQ(r.gpus[1].index, 1);
  EXPECT_EQ(r.gpus[1].name, "GeForce GTX 1060 6GB");
  EXPECT_EQ(r.gpus[1].mem_used_mib, 4);
  EXPECT_EQ(r.gpus[1].util_pct, 0);
  EXPECT_EQ(r.gpus[1].power_w, 5.68);
}

// ---- several forms in one file ------------------------------------------------------------

// thamada/nvidia-smi's 8×H100 table followed by the same machine's -q of GPU 0: one GPU 0,
// merged by bus id; the table's values come first and win (100 W, not 100.89 W), -q adds
// what the table has not.
TEST(SmiTextMerge, TableThenQOfTheSameGpu) {
  const SmiReport r = ParseSmiText(Fixture("thamada_h100sxm8_565_table_idle_full.txt") + "\n" +
                                   Fixture("thamada_h100sxm8_565_q_gpu0_block_partial.txt"));
  EXPECT_EQ(r.forms, Names({"table", "q"}));
  ASSERT_EQ(r.gpus.size(), 8u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.index, 0);
  EXPECT_EQ(g.power_w, 100);
  EXPECT_EQ(g.pcie_gen_max, 5);
  EXPECT_EQ(Reasons(g), Names({"idle"}));
  EXPECT_EQ(g.ecc.mode, "Enabled");
  EXPECT_EQ(g.ecc.volatile_uncorrected, 0);
  EXPECT_EQ(g.uuid, "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1");
  EXPECT_FALSE(r.gpus[1].clock_event_reasons);
}

// The -q first: its index (the order of appearance) is a guess that the table's real one
// replaces; GPU 3 of the table is the -q's only GPU here.
TEST(SmiTextMerge, QGuessedIndexIsReplacedByTheTables) {
  std::string q = Fixture("thamada_h100sxm8_565_q_gpu0_block_partial.txt");
  const std::string from = "00000000:18:00.0", to = "00000000:5D:00.0";  // GPU 3's bus
  for (size_t p; (p = q.find(from)) != std::string::npos;) q.replace(p, from.size(), to);
  const SmiReport r = ParseSmiText(q + Fixture("thamada_h100sxm8_565_table_idle_full.txt"));
  ASSERT_EQ(r.gpus.size(), 8u);
  EXPECT_EQ(r.gpus[0].bus_id, to);
  EXPECT_EQ(r.gpus[0].index, 3);
  EXPECT_EQ(r.gpus[0].power_w, 100.89);  // the -q came first
  EXPECT_EQ(GpuByIndex(r, 0)->bus_id, "00000000:18:00.0");
}

TEST(SmiTextMerge, ComputeAppsCsvFindsItsGpuByBusId) {
  const std::string text = Fixture("thamada_a100sxm4x4_555_table_idle_full.txt") +
                           "$ nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory,"
                           "gpu_bus_id --format=csv\n"
                           "pid, process_name, used_gpu_memory [MiB], gpu_bus_id\n"
                           "4242, python3, 40123 MiB, 00000000:C2:00.0\n"
                           "4243, /usr/bin/python3, [N/A], 00000000:68:00.0\n";
  const SmiReport r = ParseSmiText(text);
  EXPECT_EQ(r.forms, Names({"table", "csv"}));
  ASSERT_EQ(r.processes.size(), 2u);
  EXPECT_EQ(r.processes[0].gpu, 2);
  EXPECT_EQ(r.processes[0].pid, 4242);
  EXPECT_EQ(r.processes[0].name, "python3");
  EXPECT_EQ(r.processes[0].mem_mib, 40123);
  EXPECT_EQ(r.processes[1].gpu, 0);
  EXPECT_FALSE(r.processes[1].mem_mib);
}

// ---- what pasting does to the text ---------------------------------------------------------

std::string PrefixLines(const std::string& text, const std::string& prefix) {
  std::string out;
  size_t b = 0;
  while (b < text.size()) {
    size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    out += prefix + text.substr(b, e - b) + "\n";
    b = e + 1;
  }
  return out;
}

TEST(SmiTextPaste, PrefixesAndCrlfChangeNothing) {
  for (const char* name : {"nvgpuexp_h100_590_table_mig_4_devices_full.txt",
                           "thamada_h100sxm8_565_q_gpu0_block_partial.txt",
                           "telegraf_a100_sxm4_535_q_x_mig_enabled_full.txt",
                           "nvgpuexp_list_gpus_8x_h100_mig_1g10gb.txt",
                           "nvgpuexp_h100_590_query_gpu_csv_all_fields_idle.txt",
                           "nvgpuexp_h100_590_dmon_load_gtemp_mtemp.txt",
                           "nvgpuexp_h100_590_table_load_3procs_full.txt"}) {
    SCOPED_TRACE(name);
    const std::string text = Fixture(name);
    const json want = SmiReportJson(ParseSmiText(text));
    for (const char* prefix :
         {"> ", "[1,0]<stdout>:", "3: ", "2024-03-18T10:23:45.123Z ", "> > "}) {
      SCOPED_TRACE(prefix);
      EXPECT_EQ(SmiReportJson(ParseSmiText(PrefixLines(text, prefix))), want);
    }
    std::string crlf;
    for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    EXPECT_EQ(SmiReportJson(ParseSmiText(crlf)), want);
  }
}

// ---- forms the captures lack, built from the documented layouts -----------------------------

TEST(SmiTextCsv, NoheaderNounitsMappedByTheCommandLine) {
  const SmiReport r = ParseSmiText(
      "user@node:~$ nvidia-smi --query-gpu=index,pci.bus_id,temperature.gpu,power.draw,"
      "clocks_throttle_reasons.active --format=csv,noheader,nounits\n"
      "0, 00000000:07:00.0, 71, 398.12, 0x0000000000000044\n"
      "1, 00000000:0F:00.0, 88, 250.00, 0x0000000000000048\n"
      "2, 00000000:47:00.0, 40, 90.50, 0x0000000000000000\n"
      "3, 00000000:4E:00.0, 41, 91.00, 0x0000000000000200\n");
  ASSERT_EQ(r.gpus.size(), 4u);
  EXPECT_EQ(r.gpus[0].bus_id, "00000000:07:00.0");
  EXPECT_EQ(r.gpus[0].power_w, 398.12);
  // The order -q prints them in, not the bits'.
  EXPECT_EQ(Reasons(r.gpus[0]), Names({"sw_power_cap", "hw_thermal"}));
  EXPECT_EQ(Reasons(r.gpus[1]), Names({"hw_slowdown", "hw_thermal"}));
  EXPECT_EQ(Reasons(r.gpus[2]), Names({}));
  EXPECT_EQ(Reasons(r.gpus[3]), Names({}));  // board limit: no trace name
  EXPECT_TRUE(HasWarning(r, "0x200")) << Warnings(r);
}

TEST(SmiTextCsv, RowCutOnTheLastLineKeepsItsWholeFields) {
  const SmiReport r = ParseSmiText(
      "index, name, memory.used [MiB], memory.total [MiB], power.draw [W]\n"
      "0, NVIDIA H100 80GB HBM3, 1 MiB, 81559 MiB, 69.85 W\n"
      "1, NVIDIA H100 80GB HBM3, 2 MiB, 815");
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[1].mem_used_mib, 2);
  EXPECT_FALSE(r.gpus[1].mem_total_mib);  // "815" was cut
  EXPECT_TRUE(HasWarning(r, "cut after 4 of 5 fields")) << Warnings(r);
}

// -q of older drivers: "Single Bit"/"Double Bit" ECC blocks (their Total lines are the counts)
// and a Processes section; counts made non-zero to see them summed.
TEST(SmiTextQ, OldEccLayoutAndProcesses) {
  const SmiReport r = ParseSmiText(R"(
==============NVSMI LOG==============
Driver Version                      : 418.67
CUDA Version                        : 10.1

Attached GPUs                       : 2
GPU 00000000:06:00.0
    Product Name                    : Tesla V100-SXM2-16GB
    ECC Mode
        Current                     : Enabled
        Pending                     : Enabled
    ECC Errors
        Volatile
            Single Bit
                Device Memory       : 3
                Register File       : 1
                Total               : 4
            Double Bit
                Device Memory       : 0
                Total               : 2
        Aggregate
            Single Bit
                Total               : 17
            Double Bit
                Total               : 5
    Retired Pages
        Single Bit ECC              : 1
        Double Bit ECC              : 0
        Pending                     : Yes
    Power Readings
        Power Management            : Supported
        Power Draw                  : 43.21 W
        Power Limit                 : 300.00 W
        Enforced Power Limit        : 250.00 W
    Processes
        Process ID                  : 1234
            Type                    : C
            Name                    : python train.py
            Used GPU Memory         : 15000 MiB
        Process ID                  : 1250
            Type                    : C
            Name                    : python
            Used GPU Memory         : 300 MiB
GPU 00000000:07:00.0
    Product Name                    : Tesla V100-SXM2-16GB
    Processes                       : None
)");
  ASSERT_EQ(r.gpus.size(), 2u);
  const SmiGpu& g = r.gpus[0];
  EXPECT_EQ(g.ecc.volatile_corrected, 4);
  EXPECT_EQ(g.ecc.volatile_uncorrected, 2);
  EXPECT_EQ(g.ecc.aggregate_corrected, 17);
  EXPECT_EQ(g.ecc.aggregate_uncorrected, 5);
  EXPECT_FALSE(g.ecc.remapped_rows_pending);  // Retired Pages' "Pending" is not a row remap
  EXPECT_EQ(g.power_w, 43.21);
  EXPECT_EQ(g.power_limit_w, 250);  // the enforced limit
  EXPECT_EQ(r.gpus[1].index, 1);
  ASSERT_EQ(r.processes.size(), 2u);
  EXPECT_EQ(r.processes[0].gpu, 0);
  EXPECT_EQ(r.processes[0].pid, 1234);
  EXPECT_EQ(r.processes[0].name, "python train.py");
  EXPECT_EQ(r.processes[0].mem_mib, 15000);
  EXPECT_EQ(r.processes[1].pid, 1250);
}

// R550+ splits SRAM Uncorrectable into Parity and SEC-DED; both are summed with DRAM.
TEST(SmiTextQ, SramAndDramCountsAreSummed) {
  const SmiReport r = ParseSmiText(R"(GPU 00000000:18:00.0
    ECC Errors
        Volatile
            SRAM Correctable              : 2
            SRAM Uncorrectable Parity     : 1
            SRAM Uncorrectable SEC-DED    : 3
            DRAM Correctable              : 5
            DRAM Uncorrectable            : 7
        Aggregate
            SRAM Correctable              : N/A
            SRAM Uncorrectable Parity     : N/A
            SRAM Uncorrectable SEC-DED    : N/A
            DRAM Correctable              : N/A
            DRAM Uncorrectable            : N/A
            SRAM Threshold Exceeded       : No
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 2
        Pending                           : Yes
        Remapping Failure Occurred        : No
)");
  ASSERT_EQ(r.gpus.size(), 1u);
  const SmiEcc& e = r.gpus[0].ecc;
  EXPECT_EQ(e.volatile_corrected, 7);
  EXPECT_EQ(e.volatile_uncorrected, 11);
  EXPECT_FALSE(e.aggregate_corrected);
  EXPECT_FALSE(e.aggregate_uncorrected);
  EXPECT_EQ(e.remapped_rows_uncorrectable, 2);
  EXPECT_EQ(e.remapped_rows_pending, true);
  EXPECT_EQ(e.remapped_rows_failure, false);
}

TEST(SmiTextXml, ProcessesAndThrottleReasons) {
  const SmiReport r = ParseSmiText(R"(<?xml version="1.0" ?>
<nvidia_smi_log>
  <driver_version>470.82.01</driver_version>
  <gpu id="00000000:3B:00.0">
    <product_name>Tesla T4</product_name>
    <clocks_throttle_reasons>
      <clocks_throttle_reason_gpu_idle>Not Active</clocks_throttle_reason_gpu_idle>
      <clocks_throttle_reason_sw_thermal_slowdown>Active</clocks_throttle_reason_sw_thermal_slowdown>
      <clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>
    </clocks_throttle_reasons>
    <remapped_rows>
      <remapped_row_corr>0</remapped_row_corr>
      <remapped_row_unc>1</remapped_row_unc>
      <remapped_row_pending>Yes</remapped_row_pending>
      <remapped_row_failure>No</remapped_row_failure>
    </remapped_rows>
    <processes>
      <process_info>
        <pid>777</pid>
        <type>C</type>
        <process_name>a &amp; b</process_name>
        <used_memory>1024 MiB</used_memory>
      </process_info>
      <process_info><pid>N/A</pid></process_info>
    </processes>
  </gpu>
</nvidia_smi_log>
)");
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(Reasons(r.gpus[0]), Names({"hw_slowdown", "sw_thermal"}));
  EXPECT_EQ(r.gpus[0].ecc.remapped_rows_uncorrectable, 1);
  EXPECT_EQ(r.gpus[0].ecc.remapped_rows_pending, true);
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_EQ(r.processes[0].gpu, 0);
  EXPECT_EQ(r.processes[0].pid, 777);
  EXPECT_EQ(r.processes[0].name, "a & b");
  EXPECT_EQ(r.processes[0].mem_mib, 1024);
}

TEST(SmiTextTable, PreMigProcessRowsAndWindowsNames) {
  const SmiReport r = ParseSmiText(R"(
| Processes:                                                       GPU Memory |
|  GPU       PID   Type   Process name                             Usage      |
|=============================================================================|
|    0     24613      C   python                                      4545MiB |
|    1      2216    C+G   C:\Program Files\Some App\app.exe           N/A      |
+-----------------------------------------------------------------------------+
)");
  ASSERT_EQ(r.processes.size(), 2u);
  EXPECT_EQ(r.processes[0].pid, 24613);
  EXPECT_EQ(r.processes[0].mem_mib, 4545);
  EXPECT_EQ(r.processes[1].gpu, 1);
  EXPECT_EQ(r.processes[1].name, R"(C:\Program Files\Some App\app.exe)");
  EXPECT_FALSE(r.processes[1].mem_mib);
}

// A -q excerpt whose first line is a section header that other text has too ("Temperature"):
// the key below it still lands in it.
TEST(SmiTextQ, ExcerptStartingAtAGenericSection) {
  const SmiReport r = ParseSmiText(
      "    Temperature\n"
      "        GPU Current Temp                  : 77 C\n"
      "        GPU Shutdown Temp                 : 100 C\n");
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].temp_c, 77);
}

TEST(SmiTextCsv, HeaderlessComputeAppsMappedByTheCommandLine) {
  const SmiReport r = ParseSmiText(
      "$ nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader\n"
      "1234, 500 MiB, GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1\n"
      "1235, 600 MiB, GPU-00000000-0000-0000-0000-000000000001\n"
      "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1)\n");
  EXPECT_EQ(r.forms, Names({"csv", "list"}));
  ASSERT_EQ(r.processes.size(), 2u);
  EXPECT_EQ(r.processes[0].pid, 1234);
  EXPECT_EQ(r.processes[0].mem_mib, 500);
  EXPECT_EQ(r.processes[0].gpu, 0);  // found by its UUID in the -L below
  EXPECT_FALSE(r.processes[1].gpu);  // a GPU the text does not list
}

// dmon prints its header again every screenful; the run goes on. A sample cut on the last
// line is read up to its last whole column.
TEST(SmiTextDmon, RepeatedHeaderAndCutLastSample) {
  const SmiReport r = ParseSmiText(
      "# gpu   pwr  temp    sm   mem   enc   dec  mclk  pclk\n"
      "# Idx     W     C     %     %     %     %   MHz   MHz\n"
      "    0    60    40    10     1     0     0   877  1380\n"
      "    1    61    41    11     1     0     0   877  1380\n"
      "# gpu   pwr  temp    sm   mem   enc   dec  mclk  pclk\n"
      "# Idx     W     C     %     %     %     %   MHz   MHz\n"
      "    0   250    70    99    40     0     0   877  1410\n"
      "    1   251    71    98    4");
  EXPECT_EQ(r.forms, Names({"dmon"}));
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].power_w, 250);
  EXPECT_EQ(r.gpus[0].sm_clock_mhz, 1410);
  EXPECT_EQ(r.gpus[1].power_w, 251);
  EXPECT_EQ(r.gpus[1].util_pct, 98);
  EXPECT_EQ(r.gpus[1].sm_clock_mhz, 1380);  // the cut sample has no pclk
  EXPECT_TRUE(HasWarning(r, "dmon line 8: cut after 5 of 9 columns")) << Warnings(r);
}

// The 580+ table prints "Not Supported" for memory on unified-memory parts (GB10) and "N/A"
// for a cap it does not know; the rest of the row is still read.
TEST(SmiTextTable, NotSupportedMemoryAndUnknownCap) {
  const SmiReport r = ParseSmiText(
      "|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A "
      "|\n"
      "| N/A   42C    P0             11W /  N/A  | Not Supported          |      3%      Default "
      "|\n"
      "|                                         |                        |                  N/A "
      "|\n");
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].name, "NVIDIA GB10");
  EXPECT_EQ(r.gpus[0].temp_c, 42);
  EXPECT_EQ(r.gpus[0].power_w, 11);
  EXPECT_FALSE(r.gpus[0].power_limit_w);
  EXPECT_FALSE(r.gpus[0].mem_used_mib);
  EXPECT_EQ(r.gpus[0].util_pct, 3);
}

// ---- garbage, truncation, caps ------------------------------------------------------------

TEST(SmiTextRobust, NothingRecognisedInOtherText) {
  for (const char* text : {
           "",
           "\n\n\n",
           "GPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV12\t0-63\t0\n",  // topo -m
           "node1:1234:1234 [0] NCCL INFO Channel 00/02 :    0   1\n",
           "[93297.029837] NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>\n",
           "epoch, loss, accuracy\n1, 0.5, 0.9\n",
           "pid, name\n12, bash\n",
           "#       size         count      type   redop    root     time   algbw   busbw #wrong\n",
       }) {
    SCOPED_TRACE(text);
    EXPECT_FALSE(LooksLikeSmi(text));
    const SmiReport r = ParseSmiText(text);
    EXPECT_TRUE(r.gpus.empty());
    EXPECT_TRUE(r.processes.empty());
    EXPECT_TRUE(r.forms.empty());
    const json j = SmiReportJson(r);
    EXPECT_TRUE(j["driver_version"].is_null());
    EXPECT_EQ(j["gpus"], json::array());
  }
}

TEST(SmiTextRobust, BinaryAndInvalidUtf8StillSerialise) {
  std::string text = "GPU 0: \xff\xfe bad \xc3 name (UUID: GPU-1)\n";
  for (int i = 0; i < 4096; ++i) text += static_cast<char>((i * 7919) & 0xff);
  const SmiReport r = ParseSmiText(text);
  ASSERT_FALSE(r.gpus.empty());
  EXPECT_NO_THROW((void)SmiReportJson(r).dump());
}

// Every capture cut at every line, from the end and from the start: whatever is read from the
// part is what the whole gives (dmon aside: its last sample moves with the cut).
TEST(SmiTextRobust, CutCapturesGiveASubsetOfTheWhole) {
  const char* kFields[] = {"name",          "bus_id",         "temp_c",        "power_w",
                           "power_limit_w", "mem_used_mib",   "mem_total_mib", "util_pct",
                           "pcie_gen_max",  "pcie_width_max", "mig_devices"};  // each device
  for (const testing::Capture& c : testing::CapturesIn(FixtureDir(), ".txt")) {
    const std::string name = c.input.filename().string();
    if (name.find("dmon") != std::string::npos) continue;
    SCOPED_TRACE(name);
    const std::string text = testing::ReadFileOrEmpty(c.input.string());
    const json whole = SmiReportJson(ParseSmiText(text));
    const auto find = [&](const json& g) -> const json* {
      for (const auto& w : whole["gpus"])
        if (!g["bus_id"].is_null() ? w["bus_id"] == g["bus_id"] : w["index"] == g["index"])
          return &w;
      return nullptr;
    };
    std::vector<size_t> cuts;
    for (size_t p = 0; p < text.size(); ++p)
      if (text[p] == '\n') cuts.push_back(p + 1);
    for (size_t cut : cuts) {
      for (const std::string& part : {text.substr(0, cut), text.substr(cut)}) {
        const SmiReport r = ParseSmiText(part);
        const json got = SmiReportJson(r);
        for (const auto& g : got["gpus"]) {
          const json* w = find(g);
          if (!w) continue;  // a -q block cut above its GPU line: its own guessed index
          for (const char* f : kFields) {
            if (f == std::string("mig_devices")) {
              for (const auto& m : g[f]) {  // a device cut in its block has fewer fields
                bool found = false;
                for (const auto& wm : (*w)[f]) {
                  bool same = true;
                  for (const auto& [k, v] : m.items()) same = same && (v.is_null() || wm[k] == v);
                  found = found || same;
                }
                EXPECT_TRUE(found) << m.dump() << " at cut " << cut;
              }
            } else if (!g[f].is_null()) {
              EXPECT_EQ(g[f], (*w)[f]) << f << " at cut " << cut;
            }
          }
        }
      }
    }
  }
}

TEST(SmiTextRobust, EveryByteCutIsSafe) {
  for (const char* name : {"telegraf_a100_sxm4_535_q_x_mig_enabled_full.txt",
                           "nvgpuexp_h100_590_table_mig_4_devices_full.txt",
                           "nvgpuexp_h100_590_query_gpu_csv_all_fields_idle.txt"}) {
    const std::string text = Fixture(name);
    for (size_t cut = 0; cut <= text.size(); cut += 13) {
      (void)SmiReportJson(ParseSmiText(text.substr(0, cut))).dump();
      (void)SmiReportJson(ParseSmiText(text.substr(cut))).dump();
    }
  }
}

TEST(SmiTextRobust, LongLinesAreCut) {
  std::string text = "GPU 0: NVIDIA A100 (UUID: GPU-" + std::string(200000, 'a') + ")\n";
  const SmiReport r = ParseSmiText(text);
  EXPECT_TRUE(HasWarning(r, "longer than 65536 bytes")) << Warnings(r);
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_LE(r.gpus[0].name->size(), 256u);
}

TEST(SmiTextRobust, GpusAndProcessesAreCapped) {
  std::string list;
  for (int i = 0; i < 1500; ++i)
    list += "GPU " + std::to_string(i) + ": NVIDIA H100 (UUID: GPU-" + std::to_string(i) + ")\n";
  const SmiReport r = ParseSmiText(list);
  EXPECT_EQ(r.gpus.size(), kMaxSmiGpus);
  EXPECT_TRUE(HasWarning(r, "more than 1024 GPUs")) << Warnings(r);

  std::string procs =
      "| Processes:                                                                  |\n";
  for (int i = 0; i < 70000; ++i)
    procs += "|    0   N/A  N/A     " + std::to_string(100000 + i) + "      C   python   10MiB |\n";
  const SmiReport p = ParseSmiText(procs);
  EXPECT_EQ(p.processes.size(), kMaxSmiProcesses);
  EXPECT_TRUE(HasWarning(p, "more than 65536 processes")) << Warnings(p);
}

TEST(SmiTextRobust, DeepXmlIsBounded) {
  std::string text = "<nvidia_smi_log>";
  for (int i = 0; i < 10000; ++i) text += "<a>";
  text += "<gpu_temp>1 C</gpu_temp>";
  for (int i = 0; i < 10000; ++i) text += "</a>";
  text += "</nvidia_smi_log>\n";
  EXPECT_NO_THROW((void)SmiReportJson(ParseSmiText(text)).dump());
}

}  // namespace
}  // namespace gpuwatch::collect
