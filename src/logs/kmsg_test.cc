#include "logs/kmsg.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/strings.h"

namespace gpuwatch::logs {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// ../shared/real: lines people captured from real machines (see its INDEX.md). Not part of
// this repository; tests that need it skip when it is absent.
std::string RealDir() { return std::string(GPUWATCH_SOURCE_DIR) + "/../shared/real"; }

#define SKIP_WITHOUT_REAL_DATA()                                                        \
  do {                                                                                  \
    if (!fs::is_directory(RealDir() + "/xid"))                                          \
      GTEST_SKIP() << RealDir() << "/xid is absent: real-capture tests need ../shared"; \
  } while (0)

// ---- ParseKmsgRecord ------------------------------------------------------------------------

TEST(ParseKmsgRecordTest, HeaderMessageAndDictionary) {
  auto r = ParseKmsgRecord(
      "4,1523,93297027938,-;NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>'\n"
      " SUBSYSTEM=pci\n DEVICE=+pci:0000:43:00.0\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->facility, 0u);
  EXPECT_EQ(r->level, 4u);
  EXPECT_EQ(r->seq, 1523u);
  EXPECT_EQ(r->usec, 93297027938u);
  EXPECT_EQ(r->flags, '-');
  EXPECT_EQ(r->message, "NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>'");
}

TEST(ParseKmsgRecordTest, FacilityAndCallerField) {
  // prio 12 = user (1) << 3 | warning (4): what `echo … > /dev/kmsg` produces. CONFIG_PRINTK_CALLER
  // adds a fifth header field.
  auto r = ParseKmsgRecord("12,344,20300674531,-,caller=T5678;gpuwatch-clock-probe");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->facility, 1u);
  EXPECT_EQ(r->level, 4u);
  EXPECT_EQ(r->seq, 344u);
  EXPECT_EQ(r->message, "gpuwatch-clock-probe");
}

TEST(ParseKmsgRecordTest, UnescapesKernelEscapes) {
  auto r = ParseKmsgRecord("6,1,2,-;tab\\x09back\\x5cslash nl\\x0a \\xzz \\x4");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->message, "tab\tback\\slash nl\n \\xzz \\x4");
}

TEST(ParseKmsgRecordTest, OldContinuationFlagsAndEmptyMessage) {
  auto r = ParseKmsgRecord("6,7,8,c;");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->flags, 'c');
  EXPECT_EQ(r->message, "");
}

TEST(ParseKmsgRecordTest, RejectsMalformedHeaders) {
  for (const char* bad : {"", "no semicolon", "6,1,2;three fields", "6,1,,-;empty usec",
                          "x,1,2,-;prio", "6,-1,2,-;negative", "6,1,2,;no flags",
                          "6,1,99999999999999999999999,-;overflow", " 6,1,2,-;blank"}) {
    EXPECT_FALSE(ParseKmsgRecord(bad).ok()) << bad;
  }
}

// ---- ParseNvrmXid: each form found in ../shared/real/xid, written out here -------------------

TEST(ParseNvrmXidTest, BareKmsgMessageWithoutPidOrName) {
  // gpud1160: the driver's NVLink/C2C Xids carry no process.
  auto x = ParseNvrmXid(
      "NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 "
      "0x00000000 0x00000000 0x00000000 0x00000000)");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->pci_bus_id, "00000000:01:00.0");
  EXPECT_EQ(x->xid, 144u);
  EXPECT_FALSE(x->pid);
  EXPECT_EQ(x->process_name, "");
  EXPECT_EQ(x->text,
            "SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000 0x00000000 "
            "0x00000000 0x00000000)");
}

TEST(ParseNvrmXidTest, NonZeroDomainIsWidenedToEightDigits) {
  // gpud1174: Grace-Hopper style PCI domains 0018/0019.
  auto x = ParseNvrmXid(
      "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 "
      "0x00000000 0x00000000 0x00000000 0x00000000)");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->pci_bus_id, "00000019:01:00.0");
  EXPECT_EQ(x->xid, 149u);
  EXPECT_EQ(x->text.substr(0, 30), "NETIR Fatal XC0 i0 Link -1 (0x");
}

TEST(ParseNvrmXidTest, PidAndName) {
  auto x =
      ParseNvrmXid("NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->pci_bus_id, "00000000:9b:00.0");
  EXPECT_EQ(x->xid, 94u);
  EXPECT_EQ(x->pid, 1234u);
  EXPECT_EQ(x->process_name, "python3");
  EXPECT_EQ(x->text, "Contained ECC error");
}

TEST(ParseNvrmXidTest, UnknownPidQuotedAndDmesgUptimePrefix) {
  // vllm5901: dmesg's "[uptime]" prefix; R5xx prints pid='<unknown>', name=<unknown>.
  auto x = ParseNvrmXid(
      "[93297.027938] NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, Graphics "
      "Exception: ESR 0x52e7b0=0x101000e 0x52e7b4=0x4 0x52e7a8=0xc81eb60 0x52e7ac=0x1174");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->pci_bus_id, "00000000:43:00.0");
  EXPECT_EQ(x->xid, 13u);
  EXPECT_FALSE(x->pid);
  EXPECT_EQ(x->process_name, "");
  EXPECT_EQ(x->text,
            "Graphics Exception: ESR 0x52e7b0=0x101000e 0x52e7b4=0x4 0x52e7a8=0xc81eb60 "
            "0x52e7ac=0x1174");
}

TEST(ParseNvrmXidTest, DmesgHumanTimeAndDiffPrefix) {
  // gpud46: "+> " (a diff of a quoted README) then `dmesg -T`'s "[Fri Aug 30 …]".
  auto x = ParseNvrmXid(
      "+> [Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, "
      "name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->pci_bus_id, "00000000:cb:00.0");
  EXPECT_EQ(x->xid, 109u);
  EXPECT_EQ(x->pid, 1797828u);
  EXPECT_EQ(x->process_name, "pt_main_thread");
  EXPECT_EQ(x->text, "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005");
}

TEST(ParseNvrmXidTest, JournalctlPrefixAndNameWithDot) {
  auto x = ParseNvrmXid(
      "Jul 06 20:02:59 gaming kernel: NVRM: Xid (PCI:0000:01:00): 13, pid=1773, "
      "name=.gala-wrapped, Graphics Exception: channel 0x00000005, Class 0000c997, Offset "
      "00000000, Data");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->pid, 1773u);
  EXPECT_EQ(x->process_name, ".gala-wrapped");
  EXPECT_EQ(x->text,
            "Graphics Exception: channel 0x00000005, Class 0000c997, Offset 00000000, Data");
}

TEST(ParseNvrmXidTest, QuotedByAToolLosesTheClosingQuote) {
  auto x = ParseNvrmXid(
      "[XID found] (54 minutes ago) \"NVRM: Xid (PCI:0000:9b:00): 119, pid=4071838, name=python, "
      "Timeout after 45s of waiting for RPC response from GPU4 GSP! Expected function 76 "
      "(GSP_RM_CONTROL) (0x20801702 0x4).\"");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->xid, 119u);
  EXPECT_EQ(x->pid, 4071838u);
  EXPECT_EQ(x->process_name, "python");
  EXPECT_EQ(x->text,
            "Timeout after 45s of waiting for RPC response from GPU4 GSP! Expected function 76 "
            "(GSP_RM_CONTROL) (0x20801702 0x4).");
}

TEST(ParseNvrmXidTest, RedactedBusIdStillGivesTheXid) {
  auto x = ParseNvrmXid(
      "kernel: NVRM: Xid (PCI:...): 137, RLW_RXPIPE interrupt hit on link 11 on "
      "GPU0: PRIV Error");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->pci_bus_id, "");
  EXPECT_EQ(x->xid, 137u);
  EXPECT_EQ(x->text, "RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error");
}

TEST(ParseNvrmXidTest, OtherBusIdForms) {
  // Older drivers printed the id without "PCI:"; a function, when given, is kept.
  EXPECT_EQ(ParseNvrmXid("NVRM: Xid (0000:03:00): 31, Ch 00000001")->pci_bus_id,
            "00000000:03:00.0");
  EXPECT_EQ(ParseNvrmXid("NVRM: Xid (03:00): 31, x")->pci_bus_id, "00000000:03:00.0");
  EXPECT_EQ(ParseNvrmXid("NVRM: Xid (PCI:0000:3B:00.1): 79, x")->pci_bus_id, "00000000:3b:00.1");
  EXPECT_EQ(ParseNvrmXid("NVRM: Xid (PCI:10000:01:00): 79, x")->pci_bus_id, "00010000:01:00.0");
  for (const char* bad_id : {"PCI:0000:3b:20", "PCI:0000:3b:00.8", "PCI:0000:123:00", "0:1:2:3",
                             "GPU-7540a9b3", "", "PCI:0000:3b:00."}) {
    auto x =
        ParseNvrmXid(std::string("NVRM: Xid (") + bad_id + "): 79, GPU has fallen off the bus.");
    ASSERT_TRUE(x) << bad_id;
    EXPECT_EQ(x->pci_bus_id, "") << bad_id;
    EXPECT_EQ(x->xid, 79u);
    EXPECT_EQ(x->text, "GPU has fallen off the bus.");
  }
}

TEST(ParseNvrmXidTest, PidWithoutNameAndNumberAlone) {
  auto x = ParseNvrmXid("NVRM: Xid (PCI:0000:b3:00): 43, pid=29116, Ch 00000008");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->pid, 29116u);
  EXPECT_EQ(x->process_name, "");
  EXPECT_EQ(x->text, "Ch 00000008");
  x = ParseNvrmXid("NVRM: Xid (PCI:0000:b3:00): 48");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->xid, 48u);
  EXPECT_EQ(x->text, "");
}

TEST(ParseNvrmXidTest, NotAnXidLine) {
  for (const char* s :
       {"", "NVRM: GPU1 kbifCacheVFInfo_GB100: Unable to read NV_PF0_INITIAL_AND_TOTAL_VFS",
        "2020/08/10 19:09:42 XidCriticalError: Xid=69 on Device=GPU-7540a9b3-eeb9-1214-1526-"
        "f93c9ea826a8, the device will go unhealthy.",
        "NVRM: Xid", "NVRM: Xid (PCI:0000:01:00", "NVRM: Xid (PCI:0000:01:00) 13, x",
        "NVRM: Xid (PCI:0000:01:00): , x", "NVRM: Xid (PCI:0000:01:00): 13x, y",
        "NVRM: Xid (PCI:0000:01:00): 99999999999999999999999, y"}) {
    EXPECT_FALSE(ParseNvrmXid(s)) << s;
  }
}

// ---- the checked-in fixture (five real lines, copied from ../shared/real/xid) ----------------

TEST(ParseNvrmXidTest, FixtureRealLines) {
  const auto lines =
      Lines(ReadAll(std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/kmsg/xid_real_lines.log"));
  ASSERT_EQ(lines.size(), 5u);
  struct Want {
    const char* bus;
    uint64_t xid;
    std::optional<uint32_t> pid;
    const char* name;
    const char* text_start;
  } want[] = {
      {"00000000:43:00.0", 13, std::nullopt, "", "Graphics Exception: ESR 0x52ef30=0x0 "},
      {"00000000:cb:00.0", 109, 1797828, "pt_main_thread", "Ch 00000008, errorString"},
      {"00000000:01:00.0", 13, 1773, ".gala-wrapped", "Graphics Exception: channel"},
      {"00000019:01:00.0", 149, std::nullopt, "", "NETIR Fatal XC0 i0 Link -1"},
      {"00000000:9b:00.0", 119, 4071838, "python", "Timeout after 45s"},
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    auto x = ParseNvrmXid(lines[i]);
    ASSERT_TRUE(x) << lines[i];
    EXPECT_EQ(x->pci_bus_id, want[i].bus) << i;
    EXPECT_EQ(x->xid, want[i].xid) << i;
    EXPECT_EQ(x->pid, want[i].pid) << i;
    EXPECT_EQ(x->process_name, want[i].name) << i;
    EXPECT_TRUE(StartsWith(x->text, want[i].text_start)) << i << ": " << x->text;
  }
}

// ---- every line of ../shared/real/xid ----------------------------------------------------------

struct RealXid {
  std::string file;
  size_t line_no;  // 1-based
  std::string bus;
  uint64_t xid;
};

TEST(ParseNvrmXidTest, EveryRealCapture) {
  SKIP_WITHOUT_REAL_DATA();
  // Each Xid line of each file, by position; every other line must not parse.
  const std::vector<RealXid> want = {
      {"gpud1160_kmsg_inputs_xid144_xid149.log", 1, "00000000:01:00.0", 144},
      {"gpud1160_kmsg_inputs_xid144_xid149.log", 2, "00000000:00:00.0", 149},
      {"gpud1174_kmsg_inputs_xid149_xid145_xid94.log", 1, "00000019:01:00.0", 149},
      {"gpud1174_kmsg_inputs_xid149_xid145_xid94.log", 2, "00000000:00:00.0", 149},
      {"gpud1174_kmsg_inputs_xid149_xid145_xid94.log", 3, "00000018:01:00.0", 145},
      {"gpud1174_kmsg_inputs_xid149_xid145_xid94.log", 4, "00000000:9b:00.0", 94},
      {"gpud46_xid13_sm_warp_xid109_ctx_switch_timeout_diffquoted.log", 2, "00000000:cb:00.0", 13},
      {"gpud46_xid13_sm_warp_xid109_ctx_switch_timeout_diffquoted.log", 3, "00000000:cb:00.0", 13},
      {"gpud46_xid13_sm_warp_xid109_ctx_switch_timeout_diffquoted.log", 4, "00000000:cb:00.0", 13},
      {"gpud46_xid13_sm_warp_xid109_ctx_switch_timeout_diffquoted.log", 5, "00000000:cb:00.0", 109},
      {"gpud500_xid119_gsp_rpc_timeout_45s_tool_quoted.log", 2, "00000000:9b:00.0", 119},
      {"gpud500_xid119_gsp_rpc_timeout_45s_tool_quoted.log", 3, "00000000:9b:00.0", 119},
      {"gpud500_xid119_gsp_rpc_timeout_45s_tool_quoted.log", 4, "00000000:9b:00.0", 119},
      {"gpud500_xid119_gsp_rpc_timeout_45s_tool_quoted.log", 5, "00000000:9b:00.0", 119},
      {"gpud500_xid119_gsp_rpc_timeout_45s_tool_quoted.log", 6, "00000000:9b:00.0", 119},
      {"nccl2241_b200_xid145_xid137_redacted_pci.log", 2, "", 145},
      {"nccl2241_b200_xid145_xid137_redacted_pci.log", 3, "", 137},
      {"nixpkgs539036_journal_xid13_wrapped_line.log", 1, "00000000:01:00.0", 13},
      {"vllm5901_a800_xid13_graphics_exception_esr.log", 1, "00000000:43:00.0", 13},
      {"vllm5901_a800_xid13_graphics_exception_esr.log", 2, "00000000:43:00.0", 13},
      {"vllm5901_a800_xid13_graphics_exception_esr.log", 3, "00000000:43:00.0", 13},
      {"vllm5901_a800_xid13_graphics_exception_esr.log", 4, "00000000:43:00.0", 13},
      {"vllm5901_a800_xid13_graphics_exception_esr.log", 5, "00000000:43:00.0", 13},
      {"vllm5901_a800_xid13_graphics_exception_esr.log", 6, "00000000:43:00.0", 13},
  };
  size_t parsed = 0;
  for (const auto& entry : fs::directory_iterator(RealDir() + "/xid")) {
    const std::string name = entry.path().filename().string();
    const auto lines = Lines(ReadAll(entry.path().string()));
    for (size_t i = 0; i < lines.size(); ++i) {
      auto x = ParseNvrmXid(lines[i]);
      const RealXid* w = nullptr;
      for (const auto& r : want) {
        if (r.file == name && r.line_no == i + 1) w = &r;
      }
      if (!w) {
        EXPECT_FALSE(x) << name << ":" << i + 1 << " " << lines[i];
        continue;
      }
      ASSERT_TRUE(x) << name << ":" << i + 1 << " " << lines[i];
      ++parsed;
      EXPECT_EQ(x->pci_bus_id, w->bus) << name << ":" << i + 1;
      EXPECT_EQ(x->xid, w->xid) << name << ":" << i + 1;
      EXPECT_FALSE(x->text.empty()) << name << ":" << i + 1;
      EXPECT_EQ(x->text.find("NVRM"), std::string::npos);
      EXPECT_NE(x->text.back(), '"') << name << ":" << i + 1;
    }
  }
  EXPECT_EQ(parsed, want.size());
}

TEST(ParseNvrmXidTest, RealGpud46ProcessFields) {
  SKIP_WITHOUT_REAL_DATA();
  const auto lines = Lines(
      ReadAll(RealDir() + "/xid/gpud46_xid13_sm_warp_xid109_ctx_switch_timeout_diffquoted.log"));
  ASSERT_GE(lines.size(), 5u);
  auto sm = ParseNvrmXid(lines[1]);
  ASSERT_TRUE(sm);
  EXPECT_FALSE(sm->pid);
  EXPECT_EQ(sm->process_name, "");
  EXPECT_EQ(sm->text,
            "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter");
  auto ctx = ParseNvrmXid(lines[4]);
  ASSERT_TRUE(ctx);
  EXPECT_EQ(ctx->pid, 1797828u);
  EXPECT_EQ(ctx->process_name, "pt_main_thread");
}

// ---- KmsgReader -------------------------------------------------------------------------------

class KmsgReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/kmsg_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
           std::to_string(::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

std::string FixtureRecords() {
  return ReadAll(std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/kmsg/records.kmsg");
}

TEST_F(KmsgReaderTest, RegularFileFromTheStart) {
  const std::string path = dir_ + "/kmsg";
  { std::ofstream(path) << FixtureRecords(); }
  KmsgReaderOptions opts;
  opts.path = path;
  opts.start_at_end = false;
  opts.boot_realtime_ms = 1'700'000'000'000;
  KmsgReader r(opts);
  ASSERT_TRUE(r.Open().ok());
  std::vector<KmsgEntry> out;
  ASSERT_TRUE(r.Read(&out).ok());
  ASSERT_EQ(out.size(), 5u);  // the two dictionary lines are not records
  EXPECT_EQ(out[0].record.seq, 1523u);
  EXPECT_EQ(out[0].time_ms, 1'700'000'000'000 + 93297027);
  auto x = ParseNvrmXid(out[0].record.message);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->xid, 13u);
  EXPECT_EQ(ParseNvrmXid(out[1].record.message)->xid, 109u);
  EXPECT_EQ(ParseNvrmXid(out[2].record.message)->pci_bus_id, "00000019:01:00.0");
  EXPECT_FALSE(ParseNvrmXid(out[3].record.message));
  EXPECT_EQ(out[4].record.message, "escaped tab\tand backslash \\ end");
  EXPECT_EQ(r.lost_records(), 0u);
  EXPECT_EQ(r.malformed_records(), 0u);
  out.clear();
  ASSERT_TRUE(r.Read(&out).ok());
  EXPECT_TRUE(out.empty());
}

TEST_F(KmsgReaderTest, StartAtEndSkipsOldRecordsAndSeesAppendedOnes) {
  const std::string path = dir_ + "/kmsg";
  { std::ofstream(path) << "6,1,100,-;old boot message\n"; }
  KmsgReaderOptions opts;
  opts.path = path;
  opts.boot_realtime_ms = 0;
  KmsgReader r(opts);
  ASSERT_TRUE(r.Open().ok());
  std::vector<KmsgEntry> out;
  ASSERT_TRUE(r.Read(&out).ok());
  EXPECT_TRUE(out.empty());
  { std::ofstream(path, std::ios::app) << "6,2,2000,-;new\n6,5,3000,-;after a gap\ngarbage\n"; }
  ASSERT_TRUE(r.Read(&out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].record.message, "new");
  EXPECT_EQ(out[0].time_ms, 2);
  EXPECT_EQ(r.lost_records(), 2u);  // seq 3 and 4
  EXPECT_EQ(r.malformed_records(), 1u);
}

TEST_F(KmsgReaderTest, FifoRecordsAndPartialWrites) {
  const std::string path = dir_ + "/kmsg.fifo";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  KmsgReaderOptions opts;
  opts.path = path;  // start_at_end stays true: a FIFO cannot seek, which is not an error
  opts.boot_realtime_ms = 1000;
  KmsgReader r(opts);
  ASSERT_TRUE(r.Open().ok());  // no writer yet: must not block
  const int w = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(w, 0);
  const std::string part1 = "4,10,5000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=7, name=py";
  const std::string part2 = "thon, GPU has fallen off the bus.\n SUBSYSTEM=pci\n";
  ASSERT_EQ(::write(w, part1.data(), part1.size()), static_cast<ssize_t>(part1.size()));
  std::vector<KmsgEntry> out;
  ASSERT_TRUE(r.Read(&out).ok());  // EAGAIN with half a record held
  EXPECT_TRUE(out.empty());
  ASSERT_EQ(::write(w, part2.data(), part2.size()), static_cast<ssize_t>(part2.size()));
  ASSERT_TRUE(r.Read(&out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].time_ms, 1000 + 5000);
  auto x = ParseNvrmXid(out[0].record.message);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->pci_bus_id, "00000000:18:00.0");
  EXPECT_EQ(x->xid, 79u);
  EXPECT_EQ(x->pid, 7u);
  EXPECT_EQ(x->process_name, "python");
  EXPECT_EQ(x->text, "GPU has fallen off the bus.");
  ::close(w);
  ASSERT_TRUE(r.Read(&out).ok());  // EOF: the writer went away
  EXPECT_EQ(out.size(), 1u);
}

TEST_F(KmsgReaderTest, RecordBudgetPerReadKeepsTheRest) {
  const std::string path = dir_ + "/kmsg";
  {
    std::ofstream f(path);
    for (int i = 0; i < 10; ++i) f << "6," << i << ",1,-;m" << i << "\n";
  }
  KmsgReaderOptions opts;
  opts.path = path;
  opts.start_at_end = false;
  opts.max_records_per_read = 4;
  KmsgReader r(opts);
  ASSERT_TRUE(r.Open().ok());
  std::vector<KmsgEntry> out;
  for (size_t want : {4u, 8u, 10u, 10u}) {
    ASSERT_TRUE(r.Read(&out).ok());
    EXPECT_EQ(out.size(), want);
  }
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i].record.message, "m" + std::to_string(i));
  EXPECT_EQ(r.lost_records(), 0u);
}

TEST_F(KmsgReaderTest, OpenErrors) {
  KmsgReaderOptions opts;
  opts.path = dir_ + "/absent";
  KmsgReader r(opts);
  EXPECT_EQ(r.Open().code(), StatusCode::kNotFound);
  std::vector<KmsgEntry> out;
  EXPECT_EQ(r.Read(&out).code(), StatusCode::kUnavailable);
}

TEST(KmsgBootTimeTest, IsUnixTimeOfBoot) {
  struct timespec mono {};
  ::clock_gettime(CLOCK_MONOTONIC, &mono);
  const int64_t boot_ms = KmsgBootRealtimeMs();
  const int64_t now_ms = static_cast<int64_t>(::time(nullptr)) * 1000;
  EXPECT_NEAR(static_cast<double>(boot_ms + mono.tv_sec * 1000LL), static_cast<double>(now_ms),
              2000.0);
}

// The real device, when this process may read it: opening at the end and reading must not
// block or fail, whatever the kernel holds.
TEST(KmsgDeviceTest, ReadsTheRealDeviceWithoutBlocking) {
  if (::access("/dev/kmsg", R_OK) != 0) GTEST_SKIP() << "/dev/kmsg is not readable here";
  KmsgReader r;
  Status st = r.Open();
  if (st.code() == StatusCode::kPermissionDenied) GTEST_SKIP() << st.ToString();
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<KmsgEntry> out;
  EXPECT_TRUE(r.Read(&out).ok());
  EXPECT_EQ(r.malformed_records(), 0u);
}

}  // namespace
}  // namespace gpuwatch::logs
