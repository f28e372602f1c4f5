#include "nccl/nccl_tests.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/strings.h"
#include "common/testing/test_files.h"
#include "nccl/linkbase.h"

namespace gpuwatch::nccl {
namespace {

namespace fs = std::filesystem;

// ../shared/real/nccltests: nccl-tests tables people posted (see ../shared/real/INDEX.md,
// section 5). Not part of this repository; tests that need it skip when it is absent.
std::string RealDir() { return testing::SharedDir("real/nccltests"); }
std::string FixtureDir() { return testing::FixtureDir("nccltests"); }

#define SKIP_WITHOUT_REAL_DATA() GW_SKIP_WITHOUT_SHARED(RealDir())

constexpr char kA3mega[] = "a3mega_2node_16x_h100_full_all_reduce_8B_8G.txt";
constexpr char kNccl1453[] = "nccl1453_h100_multinode_poor_perf_mpi_rank_prefixed_rows_partial.txt";
constexpr char kDgxSpark[] = "dgxspark103_2node_gb10_nccltests_2_20_header_partial.txt";
constexpr char kNccltests150[] = "nccltests150_2node_a100_1gpu_each_small_sizes_partial.txt";
constexpr char kNccl1530[] = "nccl1530_8x4090_pcie_tree_header_only_partial.txt";
constexpr char kSynthetic[] = "synthetic_1node_8x_h100_all_gather_2_17.txt";

PerfReport Parse(std::string_view text) {
  auto r = ParseNcclTestsOutput(text);
  if (!r.ok()) {
    ADD_FAILURE() << r.status().ToString();
    return {};
  }
  return std::move(r).value();
}

std::string Warnings(const PerfReport& r) {
  std::string s;
  for (const auto& w : r.warnings) s += "\n  " + w;
  return s;
}

bool HasWarning(const PerfReport& r, const std::string& what) {
  for (const auto& w : r.warnings)
    if (w.find(what) != std::string::npos) return true;
  return false;
}

std::vector<uint64_t> Sizes(const PerfReport& r) {
  std::vector<uint64_t> out;
  for (const auto& row : r.rows) out.push_back(row.size_bytes);
  return out;
}

std::vector<double> Busbw(const PerfReport& r, bool in_place = false) {
  std::vector<double> out;
  for (const auto& row : r.rows) {
    const auto& res = in_place ? row.in_place : row.out_of_place;
    out.push_back(res ? res->busbw_gbps : -1);
  }
  return out;
}

std::vector<uint64_t> Doubling(uint64_t from, uint64_t to) {
  std::vector<uint64_t> out;
  for (uint64_t s = from; s <= to; s *= 2) out.push_back(s);
  return out;
}

// ---- the real captures of ../shared/real/nccltests (INDEX.md's facts) ----------------------

// Complete all_reduce_perf run. 16 ranks on 2 nodes (ztan-mig-235z, ztan-mig-gq73), 8x H100
// 80GB HBM3 each, -g 1, one process per GPU. 31 rows 8 B..8589934592 B, float, sum, root -1, all
// #wrong 0. The largest size: out-of-place 47535 us, 180.71, busbw 338.82; in-place 47743,
// 179.92, 337.35. Out of bounds 0 OK; Avg bus bandwidth 70.742 (trailing space).
void CheckA3mega(const PerfReport& r) {
  EXPECT_EQ(r.ranks, 16);
  EXPECT_EQ(r.nodes, 2);
  EXPECT_EQ(r.hosts, (std::vector<std::string>{"ztan-mig-235z", "ztan-mig-gq73"}));
  EXPECT_EQ(r.gpu_model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(r.n_threads, 1);
  EXPECT_EQ(r.n_gpus, 1);
  EXPECT_EQ(r.min_bytes, 8u);
  EXPECT_EQ(r.max_bytes, 8589934592u);
  ASSERT_EQ(r.devices.size(), 16u);
  for (int i = 0; i < 16; ++i) {
    const PerfRank& d = r.devices[i];
    EXPECT_EQ(d.rank, i);
    EXPECT_EQ(d.group, 0);
    EXPECT_EQ(d.host, i < 8 ? "ztan-mig-235z" : "ztan-mig-gq73");
    EXPECT_EQ(d.device, i % 8);
    EXPECT_EQ(d.pid, (i < 8 ? 6899 : 6733) + i % 8);
    EXPECT_EQ(d.gpu_name, "NVIDIA H100 80GB HBM3");
  }
  EXPECT_EQ(r.devices[0].bus_id, "0000:04:00");
  EXPECT_EQ(r.devices[15].bus_id, "0000:8c:00");
  // No command line or start line: the rows (sum, root -1, count x 4 = size) say all_reduce.
  EXPECT_EQ(r.collective, "all_reduce_perf");
  EXPECT_EQ(r.collective_source, CollectiveSource::kInferred);
  EXPECT_EQ(r.nccl_tests_version, std::nullopt);
  ASSERT_EQ(r.rows.size(), 31u);
  EXPECT_EQ(Sizes(r), Doubling(8, 8589934592));
  for (const auto& row : r.rows) {
    EXPECT_EQ(row.count * 4, row.size_bytes);
    EXPECT_EQ(row.type, "float");
    EXPECT_EQ(row.redop, "sum");
    EXPECT_EQ(row.root, -1);
    ASSERT_TRUE(row.out_of_place && row.in_place) << row.size_bytes;
    EXPECT_EQ(row.out_of_place->wrong, 0);
    EXPECT_EQ(row.in_place->wrong, 0);
  }
  const PerfRow& last = r.rows.back();
  EXPECT_DOUBLE_EQ(last.out_of_place->time_us, 47535);
  EXPECT_DOUBLE_EQ(last.out_of_place->algbw_gbps, 180.71);
  EXPECT_DOUBLE_EQ(last.out_of_place->busbw_gbps, 338.82);
  EXPECT_DOUBLE_EQ(last.in_place->time_us, 47743);
  EXPECT_DOUBLE_EQ(last.in_place->algbw_gbps, 179.92);
  EXPECT_DOUBLE_EQ(last.in_place->busbw_gbps, 337.35);
  EXPECT_EQ(r.PeakBusbwGbps(), 338.82);
  const PerfRow* mib = r.FindRow(1048576);
  ASSERT_NE(mib, nullptr);
  EXPECT_DOUBLE_EQ(mib->out_of_place->time_us, 203.2);
  EXPECT_DOUBLE_EQ(mib->out_of_place->busbw_gbps, 9.68);
  EXPECT_DOUBLE_EQ(mib->in_place->busbw_gbps, 9.49);
  EXPECT_EQ(r.out_of_bounds, 0);
  EXPECT_EQ(r.avg_busbw_gbps, 70.742);
  EXPECT_EQ(r.lines, 56u);
  EXPECT_TRUE(r.warnings.empty()) << "a complete table:" << Warnings(r);
}

// Rows prefixed and interrupted by "[0]" (mpirun tag-output). 1 MiB..512 MiB (10 rows); busbw
// collapses to about 5 GB/s from 64 MiB up.
void CheckNccl1453(const PerfReport& r) {
  ASSERT_EQ(r.rows.size(), 10u);
  EXPECT_EQ(Sizes(r), Doubling(1048576, 536870912));
  EXPECT_EQ(Busbw(r),
            (std::vector<double>{1.24, 1.73, 12.91, 16.20, 24.09, 29.50, 5.27, 5.22, 4.09, 5.31}));
  EXPECT_EQ(Busbw(r, true),
            (std::vector<double>{0.87, 9.65, 12.85, 16.31, 24.06, 28.14, 5.27, 5.30, 4.23, 5.33}));
  const PerfRow& first = r.rows[0];
  EXPECT_EQ(first.count, 262144u);
  EXPECT_EQ(first.root, -1);
  EXPECT_DOUBLE_EQ(first.out_of_place->time_us, 1626.5);
  EXPECT_DOUBLE_EQ(first.out_of_place->algbw_gbps, 0.64);
  EXPECT_EQ(first.out_of_place->wrong, 0);
  EXPECT_DOUBLE_EQ(first.in_place->time_us, 2302.3);
  EXPECT_DOUBLE_EQ(r.rows[8].out_of_place->time_us, 125807);
  for (size_t i = 6; i < r.rows.size(); ++i)
    EXPECT_LT(r.rows[i].out_of_place->busbw_gbps, 6) << r.rows[i].size_bytes;
  EXPECT_EQ(r.ranks, std::nullopt);  // no "# Using devices" lines in the excerpt
  EXPECT_TRUE(r.hosts.empty());
  EXPECT_EQ(r.collective, "all_reduce_perf");
  EXPECT_EQ(r.collective_source, CollectiveSource::kInferred);
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

TEST(NcclTestsRealTest, A3megaFullAllReduce16Ranks2Nodes) {
  SKIP_WITHOUT_REAL_DATA();
  CheckA3mega(Parse(testing::ReadFileOrEmpty(RealDir() + "/" + kA3mega)));
}

TEST(NcclTestsRealTest, Nccl1453MpirunTagsInterruptRows) {
  SKIP_WITHOUT_REAL_DATA();
  CheckNccl1453(Parse(testing::ReadFileOrEmpty(RealDir() + "/" + kNccl1453)));
}

// New header: nccl-tests version 2.20.0 (b4d5bee) nccl-headers=23102 nccl-library=23102,
// "# Collective test starting: all_reduce_perf", unalign. 2 ranks on 2 nodes, NVIDIA GB10. The
// two-space "busbw  #wrong" header. 4 rows 8192..65536, busbw 0.23, 0.52, 0.83, 0.96.
TEST(NcclTestsRealTest, DgxSpark2_20HeaderTwoNodesGb10) {
  SKIP_WITHOUT_REAL_DATA();
  const PerfReport r = Parse(testing::ReadFileOrEmpty(RealDir() + "/" + kDgxSpark));
  EXPECT_EQ(r.nccl_tests_version, "2.20.0");
  EXPECT_EQ(r.nccl_library_code, 23102);
  EXPECT_EQ(r.nccl_version, "2.31.2");
  EXPECT_EQ(r.collective, "all_reduce_perf");
  EXPECT_EQ(r.collective_source, CollectiveSource::kStartLine);
  EXPECT_EQ(r.n_threads, 1);
  EXPECT_EQ(r.n_gpus, 1);
  EXPECT_EQ(r.min_bytes, 8192u);
  EXPECT_EQ(r.max_bytes, 8589934592u);
  EXPECT_EQ(r.ranks, 2);
  EXPECT_EQ(r.nodes, 2);
  EXPECT_EQ(r.hosts, (std::vector<std::string>{"spark-d708", "spark-dbf4"}));
  EXPECT_EQ(r.gpu_model, "NVIDIA GB10");
  ASSERT_EQ(r.devices.size(), 2u);
  EXPECT_EQ(r.devices[0].pid, 1666603);
  EXPECT_EQ(r.devices[1].pid, 1669515);
  EXPECT_EQ(r.devices[1].bus_id, "000f:01:00");
  EXPECT_EQ(Sizes(r), (std::vector<uint64_t>{8192, 16384, 32768, 65536}));
  EXPECT_EQ(Busbw(r), (std::vector<double>{0.23, 0.52, 0.83, 0.96}));
  EXPECT_EQ(Busbw(r, true), (std::vector<double>{0.27, 0.53, 0.88, 1.01}));
  EXPECT_DOUBLE_EQ(r.rows[0].out_of_place->time_us, 35.15);
  EXPECT_EQ(r.avg_busbw_gbps, std::nullopt);  // cut before the footer
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

// Header (its first line was cut in the post) and 4 tiny rows (8..64 B), busbw 0.00.
TEST(NcclTestsRealTest, Nccltests150CutHeaderTinySizes) {
  SKIP_WITHOUT_REAL_DATA();
  const PerfReport r = Parse(testing::ReadFileOrEmpty(RealDir() + "/" + kNccltests150));
  EXPECT_EQ(Sizes(r), (std::vector<uint64_t>{8, 16, 32, 64}));
  EXPECT_EQ(Busbw(r), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(Busbw(r, true), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(r.rows[0].out_of_place->time_us, 19.90);
  EXPECT_DOUBLE_EQ(r.rows[3].in_place->time_us, 19.07);
  EXPECT_EQ(r.ranks, std::nullopt);
  EXPECT_EQ(r.collective, "all_reduce_perf");
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

// Command `NCCL_ALGO=TREE ./all_reduce_perf -g 8 …` and the preamble: 8x RTX 4090 on gpu59, one
// process (pid 28307). Rank lines and column headers; the data rows were cut.
TEST(NcclTestsRealTest, Nccl1530HeaderOnlyIsAResultWithAWarning) {
  SKIP_WITHOUT_REAL_DATA();
  const PerfReport r = Parse(testing::ReadFileOrEmpty(RealDir() + "/" + kNccl1530));
  EXPECT_EQ(r.collective, "all_reduce_perf");
  EXPECT_EQ(r.collective_source, CollectiveSource::kCommandLine);
  EXPECT_EQ(r.n_gpus, 8);
  EXPECT_EQ(r.max_bytes, 134217728u);
  EXPECT_EQ(r.ranks, 8);
  EXPECT_EQ(r.nodes, 1);
  EXPECT_EQ(r.hosts, std::vector<std::string>{"gpu59"});
  EXPECT_EQ(r.gpu_model, "NVIDIA GeForce RTX 4090");
  ASSERT_EQ(r.devices.size(), 8u);
  for (const auto& d : r.devices) EXPECT_EQ(d.pid, 28307);
  EXPECT_EQ(r.devices[0].bus_id, "0x16");
  EXPECT_EQ(r.devices[7].bus_id, "0xd8");
  EXPECT_EQ(r.devices[7].device, 7);
  EXPECT_TRUE(r.rows.empty());
  EXPECT_TRUE(HasWarning(r, "no data rows: the table ends after its column header")) << Warnings(r);
}

TEST(NcclTestsRealTest, EveryCaptureParses) {
  SKIP_WITHOUT_REAL_DATA();
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(RealDir())) {
    auto r = ParseNcclTestsOutput(testing::ReadFileOrEmpty(e.path().string()));
    EXPECT_TRUE(r.ok()) << e.path() << ": " << r.status().ToString();
    ++n;
  }
  EXPECT_EQ(n, 5u);
}

// nccl-tests lines inside NCCL_DEBUG logs of ../shared/real/nccl: a shell prompt before the
// command, the NCCL banner inside an INFO line.
TEST(NcclTestsRealTest, Nccltests287PromptCommandLineAndNcclBanner) {
  const std::string path = std::string(GPUWATCH_SOURCE_DIR) +
                           "/../shared/real/nccl/nccltests287_2x5090_socket_nccl2251_error.log";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent: real-capture tests need ../shared";
  const PerfReport r = Parse(testing::ReadFileOrEmpty(path));
  EXPECT_EQ(r.collective, "all_reduce_perf");
  EXPECT_EQ(r.collective_source, CollectiveSource::kCommandLine);
  EXPECT_EQ(r.n_gpus, 2);
  EXPECT_EQ(r.ranks, 2);
  EXPECT_EQ(r.hosts, std::vector<std::string>{"GENOA-06"});
  EXPECT_EQ(r.gpu_model, "NVIDIA GeForce RTX 5090");
  EXPECT_EQ(r.nccl_version, "2.25.1");
}

// ---- the checked-in fixtures (work without ../shared) ---------------------------------------

TEST(NcclTestsFixtureTest, A3mega) {
  CheckA3mega(Parse(testing::ReadFileOrEmpty(FixtureDir() + "/" + kA3mega)));
}

TEST(NcclTestsFixtureTest, Nccl1453) {
  CheckNccl1453(Parse(testing::ReadFileOrEmpty(FixtureDir() + "/" + kNccl1453)));
}

TEST(NcclTestsFixtureTest, CopiesAreByteCopiesOfTheRealCaptures) {
  SKIP_WITHOUT_REAL_DATA();
  for (const char* name : {kA3mega, kNccl1453})
    EXPECT_EQ(testing::ReadFileOrEmpty(FixtureDir() + "/" + name),
              testing::ReadFileOrEmpty(RealDir() + "/" + name))
        << name;
}

// Our own 8-GPU single-node all_gather_perf table in the nccl-tests 2.17 layout.
TEST(NcclTestsFixtureTest, SyntheticSingleNodeAllGather) {
  const PerfReport r = Parse(testing::ReadFileOrEmpty(FixtureDir() + "/" + kSynthetic));
  EXPECT_EQ(r.collective, "all_gather_perf");
  EXPECT_EQ(r.collective_source, CollectiveSource::kStartLine);
  EXPECT_EQ(r.nccl_tests_version, "2.17.1");
  EXPECT_EQ(r.nccl_version, "2.26.3");
  EXPECT_EQ(r.n_gpus, 8);
  EXPECT_EQ(r.ranks, 8);
  EXPECT_EQ(r.nodes, 1);
  EXPECT_EQ(r.hosts, std::vector<std::string>{"node-a17"});
  EXPECT_EQ(r.gpu_model, "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(r.rows.size(), 11u);
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const PerfRow& row = r.rows[i];
    EXPECT_EQ(row.size_bytes, uint64_t{1024} << (2 * i));
    EXPECT_EQ(row.count * 4 * 8, row.size_bytes);  // all_gather prints a rank's share
    EXPECT_EQ(row.redop, "none");
    EXPECT_EQ(row.root, -1);
  }
  EXPECT_DOUBLE_EQ(r.rows.back().out_of_place->busbw_gbps, 357.71);
  EXPECT_DOUBLE_EQ(r.rows.back().in_place->busbw_gbps, 356.03);
  EXPECT_DOUBLE_EQ(r.rows.back().out_of_place->time_us, 2626.51);
  EXPECT_EQ(r.avg_busbw_gbps, 139.775);
  EXPECT_EQ(r.out_of_bounds, 0);
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

// nccl707 (tests/fixtures/nccl): the old rank line, no Group column.
TEST(NcclTestsFixtureTest, OldRankLinesWithoutGroup) {
  const PerfReport r = Parse(
      testing::ReadFileOrEmpty(std::string(GPUWATCH_SOURCE_DIR) +
                               "/tests/fixtures/nccl/"
                               "nccl707_a100_ib_mixed_roce_p2p_loc_shm_disabled_gdr_fail.log"));
  ASSERT_EQ(r.devices.size(), 4u);
  EXPECT_EQ(r.devices[0].group, std::nullopt);
  EXPECT_EQ(r.devices[0].pid, 120890);
  EXPECT_EQ(r.devices[0].host, "10-90-43-152");
  EXPECT_EQ(r.devices[0].bus_id, "0x87");
  EXPECT_EQ(r.devices[3].bus_id, "0xca");
  EXPECT_EQ(r.gpu_model, "A100-SXM4-40GB");
  EXPECT_EQ(r.ranks, 4);
  EXPECT_EQ(r.nodes, 1);
  EXPECT_EQ(r.n_gpus, 4);
  EXPECT_EQ(r.max_bytes, 1073741824u);
}

// ---- noise: the same table behind every wrapper ---------------------------------------------

std::string EachLine(const std::string& text, const std::string& prefix, bool tabs, bool crlf) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (tabs)
      for (char& c : line)
        if (c == ' ') c = '\t';
    out += prefix + line + (crlf ? "\r\n" : "\n");
  }
  return out;
}

TEST(NcclTestsNoiseTest, PrefixesTabsAndCrlfGiveTheSameTable) {
  const std::string plain = testing::ReadFileOrEmpty(FixtureDir() + "/" + kA3mega);
  const PerfReport want = Parse(plain);
  struct Case {
    const char* prefix;
    bool tabs, crlf;
  } cases[] = {{"> ", false, false},  {"[1,0]<stdout>:", false, false},
               {"[0]", false, true},  {"0: ", false, false},
               {"", true, false},     {"> > [1,3]<stderr>:", true, true},
               {"+> ", false, false}, {"[80746] ", false, false},
               {"   ", false, false}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string("prefix '") + c.prefix + "' tabs " + std::to_string(c.tabs) +
                 " crlf " + std::to_string(c.crlf));
    const PerfReport got = Parse(EachLine(plain, c.prefix, c.tabs, c.crlf));
    EXPECT_EQ(Sizes(got), Sizes(want));
    EXPECT_EQ(Busbw(got), Busbw(want));
    EXPECT_EQ(Busbw(got, true), Busbw(want, true));
    EXPECT_EQ(got.ranks, 16);
    EXPECT_EQ(got.hosts, want.hosts);
    EXPECT_EQ(got.gpu_model, want.gpu_model);
    EXPECT_EQ(got.avg_busbw_gbps, 70.742);
    EXPECT_TRUE(got.warnings.empty()) << Warnings(got);
  }
}

TEST(NcclTestsNoiseTest, MarkdownEscapesFencesAndTaggedInterruptions) {
  const PerfReport r = Parse(
      "```\n"
      "\\# nThread 1 nGpus 2 minBytes 1048576 maxBytes 2097152 step: 2(factor)\n"
      "\\#  Rank  0 Group  0 Pid 11 on a device  0 [0x1] GPU X\n"
      "\\#  Rank  1 Group  0 Pid 11 on a device  1 [0x2] GPU X\n"
      "```#       size  count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
      "[1,0]<stdout>:     1048576   262144  float  sum  -1[1,0]<stdout>:  100.0  10.49  "
      "10.49  0[1,0]<stdout>:   99.0  10.59  10.59  0\n"
      "> 2097152 524288 float sum -1 180.0 11.65 11.65 0 181.0 11.59 11.59 0   \n"
      "```\n");
  EXPECT_EQ(r.ranks, 2);
  EXPECT_EQ(r.gpu_model, "GPU X");
  EXPECT_EQ(Sizes(r), (std::vector<uint64_t>{1048576, 2097152}));
  EXPECT_EQ(Busbw(r), (std::vector<double>{10.49, 11.65}));
  EXPECT_EQ(Busbw(r, true), (std::vector<double>{10.59, 11.59}));
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

// ---- layouts of other nccl-tests versions ---------------------------------------------------

// Before 2019: no root column, and an "error" column (a maximum error) instead of "#wrong".
TEST(NcclTestsLayoutTest, OldLayoutWithoutRootAndWithErrorColumn) {
  const PerfReport r = Parse(
      "#                                                     out-of-place                       "
      "in-place\n"
      "#       size         count    type   redop     time   algbw   busbw  error     time   "
      "algbw   busbw  error\n"
      "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  "
      "(GB/s)  (GB/s)\n"
      "     1048576        262144   float     sum    85.42   12.28   21.48  5e-07    84.96   "
      "12.34   21.60  5e-07\n"
      "     2097152        524288   float     sum    150.1   13.97   24.45  0e+00    150.3   "
      "13.95   24.42  0e+00\n");
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].root, std::nullopt);
  EXPECT_EQ(r.rows[0].out_of_place->wrong, std::nullopt);
  EXPECT_EQ(Busbw(r), (std::vector<double>{21.48, 24.45}));
  EXPECT_EQ(Busbw(r, true), (std::vector<double>{21.60, 24.42}));
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

// nccl-tests 1.x broadcast_perf: a root column and no redop.
TEST(NcclTestsLayoutTest, OldBroadcastLayoutWithRootAndNoRedop) {
  const PerfReport r = Parse(
      "#       size         count    type    root     time   algbw   busbw  error     time   "
      "algbw   busbw  error\n"
      "     1048576        262144   float       0    90.12   11.64   11.64  0e+00    88.70   "
      "11.82   11.82  0e+00\n");
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].redop, "");
  EXPECT_EQ(r.rows[0].root, 0);
  EXPECT_EQ(r.rows[0].out_of_place->wrong, std::nullopt);
  EXPECT_DOUBLE_EQ(r.rows[0].in_place->busbw_gbps, 11.82);
  EXPECT_EQ(r.collective, "");  // no reduction: not inferred
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

TEST(NcclTestsLayoutTest, NotAvailableWrongAndNoInPlace) {
  const PerfReport r = Parse(
      "# Collective test starting: sendrecv_perf\n"
      "     1048576        262144     float     sum      -1    203.2    5.16    9.68    N/A    "
      "207.2    5.06    9.49    N/A\n"
      "     2097152        524288     float    none      -1    254.0    8.26    8.26      0\n");
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].out_of_place->wrong, std::nullopt);
  EXPECT_EQ(r.rows[0].in_place->wrong, std::nullopt);
  EXPECT_DOUBLE_EQ(r.rows[0].in_place->busbw_gbps, 9.49);
  ASSERT_TRUE(r.rows[1].out_of_place);
  EXPECT_EQ(r.rows[1].out_of_place->wrong, 0);
  EXPECT_FALSE(r.rows[1].in_place);
  EXPECT_EQ(r.collective, "sendrecv_perf");
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

// -P (per-iteration columns) and -S (a timestamp column), as nccl-tests 2.17+ prints them.
TEST(NcclTestsLayoutTest, PerIterationAndTimestampColumns) {
  const PerfReport r = Parse(
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong    "
      "i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    "
      "i_p99    i_cv% timestamp\n"
      "     1048576        262144     float     sum      -1    203.2    5.16    9.68       0    "
      "200.1    210.3    209.9     1.20    207.2    5.06    9.49       0    201.0    215.0    "
      "214.0     1.50 2025-06-01 10:00:00\n");
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(r.rows[0].out_of_place->busbw_gbps, 9.68);
  EXPECT_DOUBLE_EQ(r.rows[0].in_place->time_us, 207.2);
  EXPECT_DOUBLE_EQ(r.rows[0].in_place->busbw_gbps, 9.49);
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

// getFloatStr switches to an exponent when a value outgrows its column; "%6g" does for #wrong.
TEST(NcclTestsLayoutTest, ExponentValues) {
  const PerfReport r = Parse(
      "  8589934592    2147483648     float     sum      -1  1.2e+08    0.07    0.13 1.23457e+06  "
      "1.3e+08    0.07    0.12      0\n");
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(r.rows[0].out_of_place->time_us, 1.2e8);
  EXPECT_EQ(r.rows[0].out_of_place->wrong, 1234570);
  EXPECT_TRUE(HasWarning(r, "1 rows report wrong elements")) << Warnings(r);
}

TEST(NcclTestsLayoutTest, HeaderCutAtTheStartOfTheLine) {
  const PerfReport r = Parse(
      "ize         count      type   redop    root     time   algbw   busbw #wrong     time   "
      "algbw   busbw #wrong\n"
      "     1048576        262144     float     sum      -1    203.2    5.16    9.68      0    "
      "207.2    5.06    9.49      0\n");
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].root, -1);
  EXPECT_TRUE(r.warnings.empty()) << Warnings(r);
}

TEST(NcclTestsLayoutTest, NcclBannerGivesTheVersion) {
  const PerfReport r = Parse(
      "# nThread 1 nGpus 8 minBytes 8 maxBytes 8 step: 2(factor)\n"
      "node031:1936469:1936469 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n");
  EXPECT_EQ(r.nccl_version, "2.21.5");
  EXPECT_EQ(r.nccl_tests_version, std::nullopt);
}

// ---- which collective ---------------------------------------------------------------------

TEST(NcclTestsCollectiveTest, InferredOnlyForReductions) {
  // reduce_scatter prints a rank's share as the count.
  EXPECT_EQ(Parse("     1048576         32768     float     sum      -1   100.0  10.49   9.18  0 "
                  "  100.0  10.49   9.18  0\n")
                .collective,
            "reduce_scatter_perf");
  EXPECT_EQ(Parse("     1048576        262144     float     sum       0   100.0  10.49  10.49  0 "
                  "  100.0  10.49  10.49  0\n")
                .collective,
            "reduce_perf");
  // all_gather and alltoall print the same: no guess.
  const PerfReport ag = Parse(
      "     1048576         32768     float    none      -1   100.0  10.49   9.18  0   100.0  "
      "10.49   9.18  0\n");
  EXPECT_EQ(ag.collective, "");
  EXPECT_EQ(ag.collective_source, CollectiveSource::kNone);
  // An unknown type gives no count check: no guess either.
  EXPECT_EQ(Parse("     1048576        262144     fp128     sum      -1   100.0  10.49  10.49  0\n")
                .collective,
            "");
}

TEST(NcclTestsCollectiveTest, StartLineBeatsCommandLineAndMpiSuffixIsDropped) {
  const PerfReport r = Parse(
      "mpirun -np 16 --bind-to numa /opt/nccl-tests/build/all_gather_perf_mpi -b 8 -e 8G\n"
      "# Collective test starting: alltoall_perf\n"
      "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor)\n");
  EXPECT_EQ(r.collective, "alltoall_perf");
  EXPECT_EQ(r.collective_source, CollectiveSource::kStartLine);
  EXPECT_EQ(
      Parse("srun -N2 ./build/all_gather_perf_mpi -b 8 -e 8G\n# nThread 1 nGpus 1\n").collective,
      "all_gather_perf");
}

TEST(NcclTestsCollectiveTest, SecondRunOfAnotherCollectiveIsNotMixedIn) {
  const PerfReport r = Parse(
      "# Collective test starting: all_reduce_perf\n"
      "     1048576        262144     float     sum      -1   100.0  10.49  19.66  0   100.0  "
      "10.49  19.66  0\n"
      "# Collective test starting: all_gather_perf\n"
      "     2097152         65536     float    none      -1   100.0  20.97  18.35  0   100.0  "
      "20.97  18.35  0\n");
  EXPECT_EQ(r.collective, "all_reduce_perf");
  EXPECT_EQ(Sizes(r), std::vector<uint64_t>{1048576});
  EXPECT_TRUE(HasWarning(r, "line 3: a second run (all_gather_perf)")) << Warnings(r);
}

// ---- garbled, truncated, hostile ----------------------------------------------------------

TEST(NcclTestsGarbledTest, NothingLikeNcclTestsIsAnErrorNamingTheFirstLine) {
  auto r = ParseNcclTestsOutput("hello world\nthis is a README\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("2 lines; line 1 is 'hello world'"), std::string::npos)
      << r.status().message();
  auto empty = ParseNcclTestsOutput("\n\n   \n");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty input"), std::string::npos);
  EXPECT_FALSE(ParseNcclTestsOutput("").ok());
  EXPECT_FALSE(ParseNcclTestsOutput("# just a comment\n#\n").ok());
}

TEST(NcclTestsGarbledTest, TruncatedAndGarbledRowsAreWarningsNamingTheLine) {
  std::string text = testing::ReadFileOrEmpty(FixtureDir() + "/" + kA3mega);
  // Garble the 1 MiB row's busbw and cut the file in the middle of the 16 MiB row.
  const size_t mib = text.find("     1048576        262144");
  ASSERT_NE(mib, std::string::npos);
  text.replace(text.find("9.68", mib), 4, "9.#8");
  text.resize(text.find("4194304     float     sum      -1    977.6"));
  text += "4194304     float     sum      -1    977.6   17.1";
  const PerfReport r = Parse(text);
  // 8 B..8 MiB is 21 sizes; the garbled one is left out.
  EXPECT_EQ(r.rows.size(), 20u);
  EXPECT_EQ(r.FindRow(1048576), nullptr);
  EXPECT_NE(r.FindRow(2097152), nullptr);
  EXPECT_TRUE(HasWarning(r, "line 41: a data row that does not parse")) << Warnings(r);
  EXPECT_TRUE(HasWarning(r, "line 45: a data row that does not parse")) << Warnings(r);
  EXPECT_EQ(r.avg_busbw_gbps, std::nullopt);
}

TEST(NcclTestsGarbledTest, DuplicateSizesKeepTheFirst) {
  const std::string row1 =
      "     1048576        262144     float     sum      -1   100.0  10.49  19.66  0   100.0  "
      "10.49  19.66  0\n";
  const std::string row2 =
      "     1048576        262144     float     sum      -1   200.0   5.24   9.83  0   200.0  "
      "5.24   9.83  0\n";
  const PerfReport r = Parse(row1 + row2);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(r.rows[0].out_of_place->busbw_gbps, 19.66);
  EXPECT_TRUE(HasWarning(r, "line 2: size 1048576 seen before")) << Warnings(r);
}

TEST(NcclTestsGarbledTest, MissingRankLinesRaiseTheRankCount) {
  const PerfReport r = Parse(
      "#  Rank  7 Group  0 Pid 1936469 on    node031 device  7 [0xd1] NVIDIA GeForce RTX 4090\n");
  EXPECT_EQ(r.ranks, 8);
  EXPECT_EQ(r.nodes, 1);
  EXPECT_TRUE(HasWarning(r, "list 1 ranks, up to rank 7")) << Warnings(r);
}

TEST(NcclTestsGarbledTest, RowsRanksAndWarningsAreBounded) {
  std::string text = "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] G\n";
  for (size_t i = 0; i < kMaxPerfRows + 100; ++i)
    text += std::to_string(8 * (i + 1)) + " " + std::to_string(2 * (i + 1)) +
            " float sum -1 1.0 0.0 0.0 0 1.0 0.0 0.0 0\n";
  for (size_t i = 0; i < kMaxPerfWarnings * 3; ++i) text += "8 2 float sum -1 x\n";
  const PerfReport r = Parse(text);
  EXPECT_EQ(r.rows.size(), kMaxPerfRows);
  EXPECT_TRUE(HasWarning(r, "more than 16384 rows")) << Warnings(r);
  EXPECT_EQ(r.warnings.size(), kMaxPerfWarnings + 1);
  EXPECT_TRUE(HasWarning(r, "more warnings"));

  std::string ranks;
  for (size_t i = 0; i < kMaxPerfRanks + 10; ++i)
    ranks += "#  Rank " + std::to_string(i) + " Group 0 Pid 1 on h" + std::to_string(i % 3) +
             " device 0 [0x1] G\n";
  const PerfReport rr = Parse(ranks);
  EXPECT_EQ(rr.devices.size(), kMaxPerfRanks);
  EXPECT_EQ(rr.nodes, 3);
  EXPECT_TRUE(HasWarning(rr, "more than 16384 ranks")) << Warnings(rr);
}

TEST(NcclTestsGarbledTest, HugeLinesAndBinaryBytesNeverCrash) {
  std::string huge(10 << 20, '9');
  huge += " 2 float sum -1 1 1 1 0\n# nThread 1 nGpus 1\n";
  const PerfReport r = Parse(huge);
  EXPECT_EQ(r.lines_truncated, 1u);
  EXPECT_TRUE(r.rows.empty());
  EXPECT_EQ(r.n_gpus, 1);

  std::mt19937 rng(7);
  const std::string seed = testing::ReadFileOrEmpty(FixtureDir() + "/" + kSynthetic);
  for (int i = 0; i < 300; ++i) {
    std::string s = seed;
    for (int k = 0; k < 20; ++k) s[rng() % s.size()] = static_cast<char>(rng());
    s.resize(rng() % (s.size() + 1));
    auto p = ParseNcclTestsOutput(s);
    if (!p.ok()) continue;
    for (const auto& w : p->warnings) EXPECT_EQ(PrintableText(w), w);
    for (const auto& d : p->devices) EXPECT_EQ(PrintableText(d.gpu_name), d.gpu_name);
  }
}

// ---- link baselines -------------------------------------------------------------------------

Baseline MakeBaseline(const std::string& file, const std::string& key = "") {
  const PerfReport r = Parse(testing::ReadFileOrEmpty(FixtureDir() + "/" + file));
  BaselineSource src;
  src.key = key;
  src.source_file = file;
  src.imported_at_ms = 1700000000000;
  auto b = BaselineFromReport(r, src);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? *b : Baseline{};
}

// A baseline of one collective with the given out-of-place bus bandwidth per size.
Baseline Synthetic(std::vector<std::pair<uint64_t, double>> points) {
  Baseline b;
  b.key = "n1";
  b.collective = "all_reduce_perf";
  for (auto [size, busbw] : points) b.points.push_back({size, busbw, std::nullopt});
  return b;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gpuwatch-linkbase-test.XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(LinkbaseTest, KeysAndDirectoryNames) {
  EXPECT_EQ(NodeSetKey({"b", "a", "b", "c"}), "a,b,c");
  EXPECT_EQ(NodeSetKey({}), "");
  EXPECT_EQ(StoreDirName("ztan-mig-235z,ztan-mig-gq73"), "ztan-mig-235z,ztan-mig-gq73");
  EXPECT_EQ(StoreDirName("all_reduce_perf"), "all_reduce_perf");
  for (const char* unsafe : {"..", ".", "a/b", "a b", "", "x\n", ".hidden"}) {
    const std::string d = StoreDirName(unsafe);
    EXPECT_NE(d.find('~'), std::string::npos) << unsafe;
    EXPECT_EQ(d.find('/'), std::string::npos) << unsafe;
    EXPECT_NE(d[0], '.') << unsafe;
  }
  EXPECT_NE(StoreDirName("a/b"), StoreDirName("a_b"));
  EXPECT_NE(StoreDirName("a/b"), StoreDirName("a b"));
  const std::string long_key(5000, 'h');
  EXPECT_LE(StoreDirName(long_key).size(), 255u);
  EXPECT_NE(StoreDirName(long_key), StoreDirName(long_key + "x"));
}

TEST(LinkbaseTest, FromReport) {
  const Baseline b = MakeBaseline(kA3mega);
  EXPECT_EQ(b.key, "ztan-mig-235z,ztan-mig-gq73");
  EXPECT_EQ(b.collective, "all_reduce_perf");
  EXPECT_EQ(b.gpu_model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(b.ranks, 16);
  EXPECT_EQ(b.nodes, 2);
  EXPECT_EQ(b.source_file, kA3mega);
  EXPECT_EQ(b.imported_at_ms, 1700000000000);
  ASSERT_EQ(b.points.size(), 31u);
  EXPECT_EQ(b.points.back().size_bytes, 8589934592u);
  EXPECT_EQ(b.points.back().busbw_gbps, 338.82);
  EXPECT_EQ(b.points.back().in_place_busbw_gbps, 337.35);
  EXPECT_EQ(b.PeakBusbwGbps(), 338.82);
  EXPECT_EQ(b.avg_busbw_gbps, 70.742);

  // Errors say what to do.
  const PerfReport nohosts = Parse(testing::ReadFileOrEmpty(FixtureDir() + "/" + kNccl1453));
  auto e = BaselineFromReport(nohosts, {});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--name"), std::string::npos) << e.status().message();
  BaselineSource named;
  named.key = "bad\nkey";
  EXPECT_FALSE(BaselineFromReport(nohosts, named).ok());
  named.key = "h100-pair";
  EXPECT_TRUE(BaselineFromReport(nohosts, named).ok());
  const PerfReport unknown = Parse(
      "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] G\n"
      "     1048576         32768     float    none      -1   100.0  10.49   9.18  0\n");
  e = BaselineFromReport(unknown, {});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--collective"), std::string::npos) << e.status().message();
  BaselineSource coll;
  coll.collective = "all_gather_perf";
  EXPECT_TRUE(BaselineFromReport(unknown, coll).ok());
  const PerfReport header_only = Parse(
      "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] G\n"
      "# Collective test starting: all_reduce_perf\n");
  e = BaselineFromReport(header_only, {});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("no data rows"), std::string::npos);
}

TEST(LinkbaseTest, JsonRoundTrip) {
  Baseline b = MakeBaseline(kSynthetic);
  b.version = 7;
  auto back = BaselineFromJson(BaselineToJson(b).dump());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(BaselineToJson(*back), BaselineToJson(b));
  EXPECT_EQ(back->version, 7);
  EXPECT_EQ(back->nccl_tests_version, "2.17.1");
  // Unknown numbers are null and read back as unknown.
  Baseline s = Synthetic({{8, 0.0}});
  const nlohmann::json j = BaselineToJson(s);
  EXPECT_TRUE(j["ranks"].is_null());
  EXPECT_TRUE(j["points"][0]["in_place_busbw_gbps"].is_null());
  auto sb = BaselineFromJson(j.dump());
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ(sb->ranks, std::nullopt);
  EXPECT_EQ(sb->points[0].in_place_busbw_gbps, std::nullopt);
}

TEST(LinkbaseTest, DamagedFilesAreCorruptionNeverAThrow) {
  const nlohmann::json good = BaselineToJson(MakeBaseline(kSynthetic));
  auto code = [](const std::string& text) { return BaselineFromJson(text).status().code(); };
  EXPECT_EQ(code("not json"), StatusCode::kCorruption);
  EXPECT_EQ(code("[1,2]"), StatusCode::kCorruption);
  EXPECT_EQ(code(good.dump().substr(0, 100)), StatusCode::kCorruption);
  auto with = [&](const char* field, nlohmann::json value) {
    nlohmann::json j = good;
    j[field] = std::move(value);
    return code(j.dump());
  };
  EXPECT_EQ(with("format", "other"), StatusCode::kCorruption);
  EXPECT_EQ(with("format_version", 2), StatusCode::kNotSupported);
  EXPECT_EQ(with("format_version", "1"), StatusCode::kCorruption);
  EXPECT_EQ(with("key", 5), StatusCode::kCorruption);
  EXPECT_EQ(with("key", ""), StatusCode::kCorruption);
  EXPECT_EQ(with("ranks", -3), StatusCode::kCorruption);
  EXPECT_EQ(with("hosts", nlohmann::json::array({1})), StatusCode::kCorruption);
  EXPECT_EQ(with("points", "x"), StatusCode::kCorruption);
  EXPECT_EQ(with("points", nlohmann::json::array({{{"size_bytes", -1}}})), StatusCode::kCorruption);
  EXPECT_EQ(with("points", nlohmann::json::array({{{"size_bytes", 8}, {"busbw_gbps", "fast"}}})),
            StatusCode::kCorruption);
  EXPECT_EQ(with("points", nlohmann::json::array({{{"size_bytes", 16}}, {{"size_bytes", 8}}})),
            StatusCode::kCorruption);
  EXPECT_EQ(with("imported_at_ms", nullptr), StatusCode::kCorruption);
  EXPECT_EQ(with("version", 1.5), StatusCode::kCorruption);
  EXPECT_EQ(with("extra_field_of_a_later_minor", 1), StatusCode::kOk);
}

TEST(LinkbaseStoreTest, VersionsLatestListAndStrays) {
  TempDir tmp;
  const LinkBaselineStore store(tmp.path() + "/linkbase");
  auto none = store.LoadLatest("a,b", "all_reduce_perf");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  std::vector<std::string> problems;
  auto empty = store.List(&problems);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());

  Baseline b = MakeBaseline(kA3mega);
  auto p1 = store.Save(&b);
  ASSERT_TRUE(p1.ok()) << p1.status().ToString();
  EXPECT_EQ(*p1, tmp.path() + "/linkbase/ztan-mig-235z,ztan-mig-gq73/all_reduce_perf/v1.json");
  EXPECT_EQ(b.version, 1);
  b.imported_at_ms += 1000;
  auto p2 = store.Save(&b);
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(b.version, 2);
  EXPECT_EQ(fs::path(*p2).filename(), "v2.json");

  // Strays a crash or a person left: ignored by every reader.
  const std::string dir = fs::path(*p2).parent_path().string();
  std::ofstream(dir + "/.incoming-1-2.json") << "{";
  std::ofstream(dir + "/v01.json") << "{";
  std::ofstream(dir + "/v3.json.tmp") << "{";
  std::ofstream(dir + "/notes.txt") << "hi";

  auto latest = store.LoadLatest("ztan-mig-235z,ztan-mig-gq73", "all_reduce_perf");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->version, 2);
  EXPECT_EQ(latest->imported_at_ms, 1700000001000);
  EXPECT_EQ(latest->points.size(), 31u);

  Baseline g = MakeBaseline(kSynthetic);
  ASSERT_TRUE(store.Save(&g).ok());
  Baseline other = MakeBaseline(kNccl1453, "node-a17");
  ASSERT_TRUE(store.Save(&other).ok());
  auto colls = store.Collectives("node-a17");
  ASSERT_TRUE(colls.ok());
  EXPECT_EQ(*colls, (std::vector<std::string>{"all_gather_perf", "all_reduce_perf"}));

  auto list = store.List(&problems);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(problems.empty());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].latest.key, "node-a17");
  EXPECT_EQ((*list)[0].latest.collective, "all_gather_perf");
  EXPECT_EQ((*list)[2].latest.key, "ztan-mig-235z,ztan-mig-gq73");
  EXPECT_EQ((*list)[2].versions, 2);
  EXPECT_EQ((*list)[2].latest.version, 2);
  EXPECT_FALSE(fs::exists(dir + "/v2.json.tmp"));
}

TEST(LinkbaseStoreTest, DamagedLatestIsReportedAndANewVersionStillWrites) {
  TempDir tmp;
  const LinkBaselineStore store(tmp.path());
  Baseline b = MakeBaseline(kSynthetic);
  auto p1 = store.Save(&b);
  ASSERT_TRUE(p1.ok());
  const std::string dir = fs::path(*p1).parent_path().string();
  std::ofstream(dir + "/v2.json") << "{\"format\": \"gpuwatch-linkbase\", \"format_";
  auto latest = store.LoadLatest(b.key, b.collective);
  ASSERT_FALSE(latest.ok());
  EXPECT_EQ(latest.status().code(), StatusCode::kCorruption);
  EXPECT_NE(latest.status().message().find("v2.json"), std::string::npos);
  std::vector<std::string> problems;
  auto list = store.List(&problems);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("v2.json"), std::string::npos);
  auto p3 = store.Save(&b);
  ASSERT_TRUE(p3.ok()) << p3.status().ToString();
  EXPECT_EQ(b.version, 3);
  EXPECT_TRUE(store.LoadLatest(b.key, b.collective).ok());
}

TEST(LinkbaseStoreTest, AFileOfAnotherKeyIsNotMixedIn) {
  TempDir tmp;
  const LinkBaselineStore store(tmp.path());
  Baseline a = MakeBaseline(kSynthetic);
  auto p = store.Save(&a);
  ASSERT_TRUE(p.ok());
  // Someone copied another node set's file here.
  nlohmann::json j = BaselineToJson(a);
  j["key"] = "someone-else";
  j["version"] = 2;
  std::ofstream(fs::path(*p).parent_path().string() + "/v2.json") << j.dump();
  EXPECT_EQ(store.LoadLatest(a.key, a.collective).status().code(), StatusCode::kCorruption);
  auto again = store.Save(&a);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("holds key someone-else"), std::string::npos);
}

TEST(LinkbaseStoreTest, UnwritableDirectoryIsAStatus) {
  TempDir tmp;
  std::ofstream(tmp.path() + "/file") << "x";
  const LinkBaselineStore store(tmp.path() + "/file");  // a file where the directory should be
  Baseline b = MakeBaseline(kSynthetic);
  auto p = store.Save(&b);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("create directory"), std::string::npos)
      << p.status().message();
  std::vector<std::string> problems;
  EXPECT_FALSE(store.List(&problems).ok());
}

TEST(LinkbaseStoreTest, ConcurrentSavesTakeDistinctVersions) {
  TempDir tmp;
  const LinkBaselineStore store(tmp.path());
  Baseline b = MakeBaseline(kSynthetic);
  ASSERT_TRUE(store.Save(&b).ok());
  // A racing import took v2 between this one's listing and its link.
  const std::string dir = tmp.path() + "/node-a17/all_gather_perf";
  b.version = 2;
  std::ofstream(dir + "/v2.json") << BaselineToJson(b).dump();
  ASSERT_TRUE(store.Save(&b).ok());
  EXPECT_EQ(b.version, 3);
  auto latest = store.LoadLatest(b.key, b.collective);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->version, 3);
}

// ---- comparisons ----------------------------------------------------------------------------

TEST(LinkbaseCompareTest, ARunAgainstItselfIsOk) {
  const Baseline b = MakeBaseline(kA3mega);
  const Comparison c = CompareToBaseline(b, b);
  EXPECT_EQ(c.verdict, Verdict::kOk);
  EXPECT_EQ(c.median_ratio, 1.0);
  EXPECT_EQ(c.sizes_judged, 14u);  // 1 MiB..8 GiB
  // 8 B..256 B have busbw 0.00 in the baseline: no ratio.
  EXPECT_EQ(c.sizes.size(), 31u - 6u);
  EXPECT_TRUE(c.notes.empty());
}

// nccl1453's poor multi-node H100 run against the a3mega H100 pair: 1 MiB..512 MiB in common,
// busbw 5 GB/s where the baseline had 100..260.
TEST(LinkbaseCompareTest, Nccl1453AgainstA3megaIsDegraded) {
  const Baseline base = MakeBaseline(kA3mega);
  const Baseline run = MakeBaseline(kNccl1453, base.key);
  const Comparison c = CompareToBaseline(base, run);
  EXPECT_EQ(c.verdict, Verdict::kDegraded);
  EXPECT_EQ(c.sizes.size(), 10u);
  EXPECT_EQ(c.sizes_judged, 10u);
  ASSERT_TRUE(c.median_ratio);
  // Ratios sorted: …, 1.73/15.48, 1.24/9.68, …: the median is their mean.
  EXPECT_NEAR(*c.median_ratio, (1.73 / 15.48 + 1.24 / 9.68) / 2, 1e-12);
  ASSERT_TRUE(c.worst);
  EXPECT_EQ(c.worst->size_bytes, 268435456u);
  EXPECT_DOUBLE_EQ(c.worst->ratio, 4.09 / 213.19);
  EXPECT_DOUBLE_EQ(c.worst->base_busbw_gbps, 213.19);
  EXPECT_DOUBLE_EQ(c.worst->run_busbw_gbps, 4.09);
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("lists no ranks"), std::string::npos);
  const nlohmann::json j = ComparisonJson(c);
  EXPECT_EQ(j["verdict"], "degraded");
  EXPECT_EQ(j["threshold_ratio"], 0.8);
  EXPECT_EQ(j["min_size_bytes"], 1048576);
  EXPECT_EQ(j["worst"]["size_bytes"], 268435456);
  EXPECT_EQ(j["sizes"].size(), 10u);
}

TEST(LinkbaseCompareTest, ThresholdAndLatencyBoundSizes) {
  const uint64_t kMiB = 1 << 20;
  const Baseline base = Synthetic({{1024, 1.0}, {kMiB, 100}, {2 * kMiB, 200}, {4 * kMiB, 300}});
  // Exactly 0.8 is not below the threshold; small sizes do not count however bad.
  Comparison c = CompareToBaseline(
      base, Synthetic({{1024, 0.01}, {kMiB, 80}, {2 * kMiB, 160}, {4 * kMiB, 240}}));
  EXPECT_EQ(c.verdict, Verdict::kOk);
  EXPECT_DOUBLE_EQ(*c.median_ratio, 0.8);
  EXPECT_EQ(c.sizes_judged, 3u);
  c = CompareToBaseline(base, Synthetic({{kMiB, 79}, {2 * kMiB, 158}, {4 * kMiB, 300}}));
  EXPECT_EQ(c.verdict, Verdict::kDegraded);
  EXPECT_DOUBLE_EQ(*c.median_ratio, 0.79);
  EXPECT_EQ(c.worst->size_bytes, kMiB);  // ties: the first
  // One bad size out of three is the worst, not a verdict.
  c = CompareToBaseline(base, Synthetic({{kMiB, 10}, {2 * kMiB, 200}, {4 * kMiB, 300}}));
  EXPECT_EQ(c.verdict, Verdict::kOk);
  EXPECT_EQ(c.worst->size_bytes, kMiB);
  // No common size of 1 MiB or more.
  c = CompareToBaseline(base, Synthetic({{1024, 1.0}, {8 * kMiB, 1.0}}));
  EXPECT_EQ(c.verdict, Verdict::kInsufficient);
  EXPECT_EQ(c.median_ratio, std::nullopt);
  EXPECT_EQ(c.sizes.size(), 1u);
  EXPECT_EQ(ComparisonJson(c)["median_ratio"], nullptr);
  EXPECT_EQ(ComparisonJson(c)["worst"], nullptr);
}

TEST(LinkbaseCompareTest, InPlaceWhenOutOfPlaceIsMissingAndNotes) {
  const uint64_t kMiB = 1 << 20;
  Baseline base = Synthetic({{kMiB, 100}});
  base.points[0].in_place_busbw_gbps = 90;
  base.ranks = 16;
  base.nodes = 2;
  base.gpu_model = "NVIDIA H100 80GB HBM3";
  Baseline run = Synthetic({{kMiB, 0}});
  run.points[0].busbw_gbps.reset();
  run.points[0].in_place_busbw_gbps = 45;
  run.ranks = 8;
  run.nodes = 1;
  run.gpu_model = "NVIDIA H200";
  run.collective = "all_gather_perf";
  const Comparison c = CompareToBaseline(base, run);
  ASSERT_EQ(c.sizes.size(), 1u);
  EXPECT_TRUE(c.sizes[0].in_place);
  EXPECT_DOUBLE_EQ(c.sizes[0].ratio, 0.5);
  EXPECT_EQ(c.verdict, Verdict::kDegraded);
  EXPECT_EQ(c.notes.size(), 4u);  // collective, GPU model, ranks, nodes
}

}  // namespace
}  // namespace gpuwatch::nccl
