#include "cli/top_view.h"

#include <gtest/gtest.h>

#include <string>

namespace gpuwatch::cli::top {
namespace {

using nlohmann::json;

// The agent's answers as /api/v1/gpus, /processes, /jobs and /findings give them (the field
// names are server/api.cc's), for a two-GPU node with one job on GPU 1.
json GpusReply() {
  return json::parse(R"({
    "hostname": "node7", "simulated": true, "gpu_available": true,
    "gpus": [
      {"index": 0, "uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3", "time_ms": 1764700000000,
       "lost": false, "xid_counts": {},
       "metrics": {"DCGM_FI_DEV_GPU_UTIL": 12, "DCGM_FI_DEV_FB_USED": 1024,
                   "DCGM_FI_DEV_FB_TOTAL": 81559, "DCGM_FI_DEV_GPU_TEMP": 41,
                   "DCGM_FI_DEV_POWER_USAGE": 120.4, "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": 700,
                   "DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_MEM_CLOCK": 2619,
                   "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 1, "DCGM_FI_PROF_SM_ACTIVE": 0.05}},
      {"index": 1, "uuid": "GPU-bbbb", "name": "NVIDIA H100 80GB HBM3", "time_ms": 1764700001000,
       "lost": false, "xid_counts": {"13": 2, "79": 1}, "last_xid": 79,
       "metrics": {"DCGM_FI_DEV_GPU_UTIL": 97, "DCGM_FI_DEV_FB_USED": 61440,
                   "DCGM_FI_DEV_FB_TOTAL": 81559, "DCGM_FI_DEV_GPU_TEMP": 88,
                   "DCGM_FI_DEV_POWER_USAGE": 690, "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": 700,
                   "DCGM_FI_DEV_SM_CLOCK": 1410, "DCGM_FI_DEV_MEM_CLOCK": 2619,
                   "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 64, "DCGM_FI_PROF_SM_ACTIVE": 0.81,
                   "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 3}}
    ]})");
}

json ProcessesReply() {
  return json::parse(R"({"hostname": "node7", "processes": [
    {"pid": 4242, "gpu": 1, "user": "alice", "container_id": "0123456789abcdef",
     "job_id": "train-7", "command": "python train.py\u001b[2J", "visible_index": 0,
     "used_memory_bytes": 64424509440}]})");
}

json JobsReply() {
  return json::parse(R"({"jobs": [
    {"id": "train-7", "user": "alice", "state": "running", "gpus": [1],
     "window": {"iterations_per_s": 2.5, "samples_per_s": 640, "step_p50_s": 0.4,
                "step_p95_s": 0.52, "data_wait_ratio": 0.03, "comm_ratio": 0.11}}]})");
}

json FindingsReply() {
  return json::parse(R"j({"findings": [
    {"cause": "xid", "severity": "critical", "gpu": 1, "job": "train-7",
     "summary": "GPU 1 reported XID 79 (fallen off the bus)"}], "stats": {}})j");
}

Snapshot Live() { return ParseLive(GpusReply(), ProcessesReply(), JobsReply(), FindingsReply()); }

std::string Join(const std::vector<Line>& lines) {
  std::string out;
  for (const auto& l : lines) out += l.text + "\n";
  return out;
}

TEST(TopViewTest, ParsesTheAgentsLiveAnswers) {
  const Snapshot s = Live();
  EXPECT_EQ(s.hostname, "node7");
  EXPECT_TRUE(s.simulated);
  EXPECT_TRUE(s.live);
  EXPECT_EQ(s.time_ms, 1764700001000);
  ASSERT_EQ(s.gpus.size(), 2u);
  const Gpu& g = s.gpus[1];
  EXPECT_EQ(g.index, 1u);
  EXPECT_EQ(*g.util_pct, 97);
  EXPECT_EQ(*g.mem_used_mib, 61440);
  EXPECT_EQ(*g.mem_total_mib, 81559);
  EXPECT_EQ(*g.power_limit_w, 700);
  EXPECT_EQ(*g.throttle_mask, 64u);
  EXPECT_DOUBLE_EQ(*g.sm_active_ratio, 0.81);
  EXPECT_EQ(*g.last_xid, 79);
  EXPECT_EQ(g.xid_count, 3u);
  EXPECT_EQ(*g.ecc_sbe, 3);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].container, "0123456789ab");
  EXPECT_EQ(s.processes[0].command.find('\x1b'), std::string::npos);  // no terminal escapes
  ASSERT_EQ(s.jobs.size(), 1u);
  EXPECT_EQ(s.jobs[0].gpus, std::vector<unsigned>{1});
  ASSERT_EQ(s.findings.size(), 1u);
  EXPECT_EQ(*s.findings[0].gpu, 1u);
}

TEST(TopViewTest, MissingOrMalformedPartsLeaveThemEmpty) {
  const Snapshot s = ParseLive(json::parse(R"({"hostname": "n", "gpu_available": false,
                                                "reason": "libnvidia-ml.so.1 not found",
                                                "gpus": []})"),
                               json(), json::parse(R"({"jobs": 7})"), json::array());
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_TRUE(s.jobs.empty());
  EXPECT_EQ(s.note, "no GPU metrics: libnvidia-ml.so.1 not found");
  const std::string text = PlainText(s, View{}, 100);
  EXPECT_NE(text.find("  no GPUs\n"), std::string::npos);
  EXPECT_NE(text.find("no GPU metrics: libnvidia-ml.so.1 not found"), std::string::npos);
}

TEST(TopViewTest, WideLayoutHasEveryColumnAndExactRows) {
  const auto lines = Layout(Live(), View{}, 150, 30);
  ASSERT_EQ(lines.size(), 30u);
  EXPECT_EQ(lines[0].text,
            "gpuwatch top - node7 - 2 GPU(s) - live 18:26:41 UTC - SIMULATED - sort index");
  EXPECT_EQ(lines[1].style, Style::kHeader);
  EXPECT_EQ(lines[1].text,
            "GPU NAME                   UTIL            SM               MEMORY GiB          TEMP  "
            "POWER W SM/MEM MHz THROTTLE       ERRORS");
  EXPECT_EQ(lines[2].text,
            "  0 NVIDIA H100 80GB HBM3  [#.......]  12% [........]   5%      1.0/80 [......]  41C  "
            "120/700  1980/2619 none           -");
  EXPECT_EQ(lines[3].text,
            "  1 NVIDIA H100 80GB HBM3  [########]  97% [######..]  81%     60.0/80 [#####.]  88C  "
            "690/700  1410/2619 hw_thermal     xid 79 (3 total) sbe 3");
  EXPECT_EQ(lines[2].style, Style::kNormal);
  EXPECT_EQ(lines[3].style, Style::kCrit);  // an XID and a hardware thermal slowdown
  const std::string all = Join(lines);
  EXPECT_NE(all.find("PROCESSES"), std::string::npos);
  EXPECT_NE(all.find("\n  1     4242 alice        0123456789ab train-7            0    61440 "
                     "python train.py?[2J"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("  train-7              alice      2.50 it/s  640.0 samples/s  step "
                     "p50/p95 400/520 ms  data 3%  comm 11%"),
            std::string::npos);
  EXPECT_NE(all.find("  [critical] xid gpu 1 job train-7: GPU 1 reported XID 79 (fallen off the "
                     "bus)"),
            std::string::npos);
  EXPECT_EQ(lines.back().style, Style::kHeader);
  EXPECT_EQ(lines.back().text.rfind("q quit  s sort", 0), 0u);
}

TEST(TopViewTest, NarrowTerminalsDropColumnsNeverWidth) {
  for (int width : {40, 60, 80, 100, 120, 200}) {
    const auto lines = Layout(Live(), View{}, width, 24);
    ASSERT_EQ(lines.size(), 24u) << width;
    for (const auto& l : lines) EXPECT_LE(l.text.size(), static_cast<size_t>(width)) << l.text;
    // Whatever the width, a GPU row keeps its index, utilisation, memory and temperature.
    EXPECT_NE(lines[3].text.find("97%"), std::string::npos) << width << ": " << lines[3].text;
    EXPECT_NE(lines[3].text.find("88C"), std::string::npos) << width << ": " << lines[3].text;
    EXPECT_NE(lines[3].text.find("60.0/80"), std::string::npos) << width << ": " << lines[3].text;
  }
  // At 80 columns the bars and the name have gone.
  const auto l80 = Layout(Live(), View{}, 80, 24);
  EXPECT_EQ(l80[3].text.find('['), std::string::npos) << l80[3].text;
  EXPECT_EQ(l80[3].text.find("NVIDIA"), std::string::npos) << l80[3].text;
}

TEST(TopViewTest, ShortTerminalsSayWhatIsLeftOutAndScroll) {
  View v;
  auto lines = Layout(Live(), v, 120, 10);
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_EQ(lines[8].style, Style::kDim);
  EXPECT_EQ(lines[8].text.rfind("... ", 0), 0u) << lines[8].text;
  EXPECT_NE(lines[8].text.find("more line(s)"), std::string::npos);
  // Scrolling far down stops at the last page, which ends with the findings.
  v.scroll = 1000;
  lines = Layout(Live(), v, 120, 10);
  EXPECT_NE(Join(lines).find("[critical] xid"), std::string::npos);
  EXPECT_EQ(Join(lines).find("... "), std::string::npos);
}

TEST(TopViewTest, TinyTerminalsGetOneLineSayingSo) {
  const auto lines = Layout(Live(), View{}, 30, 5);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].style, Style::kWarn);
  EXPECT_LE(lines[0].text.size(), 30u);
  EXPECT_EQ(lines[0].text.rfind("terminal 30x5 is too", 0), 0u);
}

TEST(TopViewTest, SortKeysCycleAndOrderRows) {
  Snapshot s = Live();
  View v;
  EXPECT_EQ(HandleKey('s', s, &v), KeyEffect::kRedraw);
  EXPECT_EQ(v.sort, SortKey::kUtil);
  auto lines = Layout(s, v, 150, 30);
  EXPECT_EQ(lines[2].text.rfind("  1 ", 0), 0u);  // 97 % first
  EXPECT_EQ(lines[3].text.rfind("  0 ", 0), 0u);
  EXPECT_NE(lines[0].text.find("sort util"), std::string::npos);
  for (SortKey want : {SortKey::kMemory, SortKey::kTemp, SortKey::kPower, SortKey::kIndex}) {
    HandleKey('s', s, &v);
    EXPECT_EQ(v.sort, want);
  }
  // A GPU without the value sorts last, not first.
  s.gpus[1].util_pct.reset();
  v.sort = SortKey::kUtil;
  lines = Layout(s, v, 150, 30);
  EXPECT_EQ(lines[2].text.rfind("  0 ", 0), 0u);
}

TEST(TopViewTest, JobAndUserFiltersCycleAndKeepTheirGpus) {
  const Snapshot s = Live();
  View v;
  EXPECT_EQ(HandleKey('j', s, &v), KeyEffect::kRedraw);
  EXPECT_EQ(v.job_filter, "train-7");
  std::string text = PlainText(s, v, 150);
  EXPECT_NE(text.find(" - job train-7"), std::string::npos);
  EXPECT_EQ(text.find("\n  0 NVIDIA"), std::string::npos) << text;  // GPU 0 runs no job
  EXPECT_NE(text.find("\n  1 NVIDIA"), std::string::npos) << text;
  HandleKey('j', s, &v);
  EXPECT_EQ(v.job_filter, "");  // back to all
  HandleKey('u', s, &v);
  EXPECT_EQ(v.user_filter, "alice");
  text = PlainText(s, v, 150);
  EXPECT_EQ(text.find("\n  0 NVIDIA"), std::string::npos);
  v.user_filter = "bob";  // nobody's: nothing matches, and the screen says so
  text = PlainText(s, v, 150);
  EXPECT_NE(text.find("no GPU matches the filter"), std::string::npos);
}

TEST(TopViewTest, PerJobViewGroupsGpusAndProcessesUnderTheirJob) {
  const Snapshot s = Live();
  View v;
  HandleKey('v', s, &v);
  ASSERT_TRUE(v.per_job);
  const std::string text = PlainText(s, v, 150);
  const size_t job = text.find("JOB train-7  user alice  running  2.50 it/s");
  const size_t gpu1 = text.find("\n  1 NVIDIA");
  const size_t proc = text.find("     4242 alice");
  const size_t rest = text.find("GPUS OF NO JOB");
  const size_t gpu0 = text.find("\n  0 NVIDIA");
  ASSERT_NE(job, std::string::npos) << text;
  EXPECT_LT(job, gpu1);
  EXPECT_LT(gpu1, proc);
  EXPECT_LT(proc, rest);
  EXPECT_LT(rest, gpu0);
}

TEST(TopViewTest, HistoryKeysMoveTheInstantAndLiveComesBack) {
  const Snapshot s = Live();
  View v;
  EXPECT_EQ(HandleKey(kKeyRight, s, &v), KeyEffect::kNone);  // nothing after now
  EXPECT_EQ(HandleKey(kKeyLeft, s, &v), KeyEffect::kRefetch);
  EXPECT_EQ(v.history_offset_s, 60);
  EXPECT_EQ(HandleKey('<', s, &v), KeyEffect::kRefetch);
  EXPECT_EQ(v.history_offset_s, 660);
  EXPECT_EQ(HandleKey('>', s, &v), KeyEffect::kRefetch);
  EXPECT_EQ(v.history_offset_s, 60);
  EXPECT_EQ(HandleKey('>', s, &v), KeyEffect::kRefetch);
  EXPECT_EQ(v.history_offset_s, 0);
  v.history_offset_s = 3720;
  EXPECT_EQ(HandleKey('l', s, &v), KeyEffect::kRefetch);
  EXPECT_EQ(v.history_offset_s, 0);
  EXPECT_EQ(HandleKey('l', s, &v), KeyEffect::kNone);
  EXPECT_EQ(HandleKey('q', s, &v), KeyEffect::kQuit);
  EXPECT_EQ(HandleKey('x', s, &v), KeyEffect::kNone);
}

json Vector(const std::string& result) {
  return json::parse(R"({"status":"success","data":{"resultType":"vector","result":)" + result +
                     "}}");
}

TEST(TopViewTest, HistoryIsReadFromTheQueryApisAnswers) {
  const HistoryQueries q = MakeHistoryQueries("node\"7");
  EXPECT_NE(q.gpus.find("Hostname=\"node\\\"7\""), std::string::npos) << q.gpus;
  EXPECT_NE(q.gpus.find("DCGM_FI_DEV_GPU_UTIL|"), std::string::npos);
  EXPECT_NE(q.gpus.find("|gpuwatch_xid_errors_total"), std::string::npos);
  EXPECT_EQ(q.samples_per_s,
            "sum by (job) (gpuwatch_job_samples_per_second{Hostname=\"node\\\"7\"})");

  const json gpus = Vector(R"([
    {"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","gpu":"3","UUID":"GPU-c","model_name":"NVIDIA A100-SXM4-80GB","Hostname":"n"},"value":[1764700000,"55"]},
    {"metric":{"__name__":"DCGM_FI_DEV_GPU_TEMP","gpu":"3","UUID":"GPU-c","Hostname":"n"},"value":[1764700000,"71"]},
    {"metric":{"__name__":"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS","gpu":"3","Hostname":"n"},"value":[1764700000,"4"]},
    {"metric":{"__name__":"gpuwatch_xid_errors_total","gpu":"3","xid":"48","Hostname":"n"},"value":[1764700000,"2"]},
    {"metric":{"__name__":"DCGM_FI_DEV_XID_ERRORS","gpu":"3","Hostname":"n"},"value":[1764700000,"48"]},
    {"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","gpu":"0","Hostname":"n"},"value":[1764700000,"NaN"]},
    {"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","gpu":"x","Hostname":"n"},"value":[1764700000,"1"]}])");
  const json sps = Vector(R"([{"metric":{"job":"j1"},"value":[1764700000,"512"]}])");
  const json ips = Vector(R"([{"metric":{"job":"j1"},"value":[1764700000,"2"]}])");
  const json steps =
      Vector(R"([{"metric":{"job":"j1","quantile":"0.5"},"value":[1764700000,"0.25"]},
                                {"metric":{"job":"j1","quantile":"0.95"},"value":[1764700000,"0.5"]}])");
  auto s = ParseHistory("n", 1764700000000, gpus, sps, ips, steps);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_FALSE(s->live);
  ASSERT_EQ(s->gpus.size(), 1u);  // a NaN-only GPU and a non-numeric "gpu" label give no row
  const Gpu& g = s->gpus[0];
  EXPECT_EQ(g.index, 3u);
  EXPECT_EQ(g.name, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(*g.util_pct, 55);
  EXPECT_EQ(*g.temp_c, 71);
  EXPECT_EQ(*g.throttle_mask, 4u);
  EXPECT_EQ(*g.last_xid, 48);
  EXPECT_EQ(g.xid_count, 2u);
  ASSERT_EQ(s->jobs.size(), 1u);
  EXPECT_EQ(*s->jobs[0].samples_per_s, 512);
  EXPECT_EQ(*s->jobs[0].step_p95_s, 0.5);

  View v;
  v.history_offset_s = 1500;
  const std::string text = PlainText(*s, v, 150);
  EXPECT_NE(text.find("history 18:26:40 UTC (25m ago)"), std::string::npos) << text;
  EXPECT_NE(text.find("PROCESSES\n  live only\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sw_power_cap"), std::string::npos) << text;

  const json err = json::parse(R"({"status":"error","errorType":"bad_data","error":"boom"})");
  auto bad = ParseHistory("n", 0, gpus, sps, err, steps);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("job iterations"), std::string::npos);
  EXPECT_NE(bad.status().message().find("boom"), std::string::npos);
}

TEST(TopViewTest, PlainTextHasEveryRowAndNoBarsOrKeyHelp) {
  Snapshot s = Live();
  for (unsigned i = 2; i < 40; ++i) {
    Gpu g = s.gpus[0];
    g.index = i;
    s.gpus.push_back(g);
  }
  const std::string text = PlainText(s, View{}, 120);
  EXPECT_NE(text.find("\n 39 "), std::string::npos);
  EXPECT_EQ(text.find("[#"), std::string::npos);
  EXPECT_EQ(text.find("q quit"), std::string::npos);
  EXPECT_EQ(text.find("more line(s)"), std::string::npos);
}

TEST(TopViewTest, LostGpusSayItOnTheirRow) {
  Snapshot s = Live();
  s.gpus[0].lost = true;
  const auto lines = Layout(s, View{}, 120, 30);
  EXPECT_EQ(lines[2].style, Style::kCrit);
  EXPECT_NE(lines[2].text.find("LOST: not answering NVML"), std::string::npos) << lines[2].text;
}

}  // namespace
}  // namespace gpuwatch::cli::top
