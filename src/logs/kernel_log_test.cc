#include "logs/kernel_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/testing/test_files.h"

namespace gpuwatch::logs {
namespace {

namespace fs = std::filesystem;
using gpuwatch::testing::FixtureDir;
using gpuwatch::testing::ReadFileOrEmpty;
using gpuwatch::testing::SharedDir;
using Kind = KernelLine::Kind;

KernelReport ParseFixture(const std::string& name) {
  return ParseKernelText(ReadFileOrEmpty(FixtureDir("explain/kernel/") + name));
}

KernelReport ParseReal(const std::string& name) {
  return ParseKernelText(ReadFileOrEmpty(SharedDir("real/xid/") + name));
}

// ---- every capture: the JSON equals the collectors' expected `kernel` object ----------------

TEST(KernelLogFixturesTest, EveryCaptureGivesItsExpectedObject) {
  const std::string dir = FixtureDir("explain/kernel");
  size_t checked = 0;
  for (const gpuwatch::testing::Capture& c : gpuwatch::testing::CapturesIn(dir, ".log")) {
    ASSERT_TRUE(fs::exists(c.expected)) << c.expected;
    const nlohmann::json expected = nlohmann::json::parse(ReadFileOrEmpty(c.expected));
    ASSERT_TRUE(expected.contains("kernel")) << c.expected;
    const nlohmann::json got = KernelReportJson(ParseKernelText(ReadFileOrEmpty(c.input)));
    EXPECT_EQ(got, expected["kernel"]) << c.input.filename() << "\n got:      " << got.dump()
                                       << "\n expected: " << expected["kernel"].dump();
    ++checked;
  }
  EXPECT_GE(checked, 21u) << "fixtures missing from " << dir;
}

// ---- focused checks on captures (tests/fixtures/explain/kernel/SOURCES.md) -------------------

// akash-network/support#244: `dmesg -T`, a single-digit day, R535's "pid='<unknown>',
// name=<unknown>" and the driver's "GPU at PCI:…: GPU-<uuid>" line before the first Xid.
TEST(KernelLogTest, DmesgTXidAndUuidLines) {
  const KernelLine uuid = ParseKernelLine(
      "[Mon Aug  5 03:54:13 2024] NVRM: GPU at PCI:0000:00:07: "
      "GPU-3b6ec030-5adc-1847-e155-79f635584b4e");
  EXPECT_EQ(uuid.kind, Kind::kGpuUuid);
  EXPECT_EQ(uuid.pci_bus_id, "00000000:00:07.0");
  EXPECT_EQ(uuid.uuid, "GPU-3b6ec030-5adc-1847-e155-79f635584b4e");
  EXPECT_EQ(uuid.time, "Mon Aug  5 03:54:13 2024");

  const KernelLine x = ParseKernelLine(
      "[Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', "
      "name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No");
  ASSERT_EQ(x.kind, Kind::kXid);
  ASSERT_TRUE(x.xid);
  EXPECT_EQ(x.xid->xid, 94u);
  EXPECT_EQ(x.xid->pci_bus_id, "00000000:00:08.0");
  EXPECT_FALSE(x.xid->pid);
  EXPECT_EQ(x.xid->process_name, "");
  EXPECT_EQ(x.xid->text, "Contained: SM (0x1). RST: No, D-RST: No");
  EXPECT_EQ(x.time, "Fri Aug  9 13:32:56 2024");
  EXPECT_EQ(x.host, "");

  const KernelReport r = ParseFixture("akash244_xid43_xid31_xid94_dmesg_T.log");
  ASSERT_EQ(r.xids.size(), 4u);
  EXPECT_EQ(r.xids[2].xid->process_name, "python3.10");
  EXPECT_EQ(r.xids[2].xid->pid, 2512125u);
  EXPECT_TRUE(r.hosts.empty());
}

// NVIDIA/gpu-operator#1146: syslog with the kernel's uptime stamp inside. The syslog stamp is
// the time (the wall clock; SOURCES.md convention 1), the host is the syslog host.
TEST(KernelLogTest, SyslogLineTakesTheSyslogStampAndHost) {
  const KernelLine k = ParseKernelLine(
      "Dec  2 11:38:47 worker4 kernel: [  219.471050] NVRM: Xid (PCI:0000:07:00): 64, "
      "pid='<unknown>', name=<unknown>, Dynamic Page Retirement: Blacklisting failed.  Page "
      "should have been blacklisted on boot(0x00000000007fffa8).");
  ASSERT_EQ(k.kind, Kind::kXid);
  EXPECT_EQ(k.time, "Dec  2 11:38:47");
  EXPECT_EQ(k.host, "worker4");
  EXPECT_EQ(k.xid->xid, 64u);
  EXPECT_EQ(k.xid->text,
            "Dynamic Page Retirement: Blacklisting failed.  Page should have been blacklisted on "
            "boot(0x00000000007fffa8).");

  const KernelReport r = ParseFixture("gpuop1146_xid48_dbe_xid64_syslog.log");
  EXPECT_EQ(r.hosts, std::vector<std::string>{"worker4"});
  ASSERT_EQ(r.xids.size(), 2u);
  EXPECT_EQ(r.xids[0].xid->xid, 48u);
  // "RmInitAdapter failed!" lines for the other GPU are not Xids.
  EXPECT_TRUE(r.oom_kills.empty());
  EXPECT_TRUE(r.fallen_off_bus.empty());
}

// vllm-project/vllm#40652: `talosctl dmesg` ("IP: kern: warning: [ISO]: …"); a comm with "::"
// and the GSP banner "_kgspLogXid119", which is not an "NVRM: Xid" line.
TEST(KernelLogTest, TalosDmesgBracketedIsoStamp) {
  const KernelLine k = ParseKernelLine(
      "192.168.11.119: kern: warning: [2026-04-22T21:26:20.599716692Z]: NVRM: Xid "
      "(PCI:0000:48:00): 74, pid=22884, name=VLLM::Worker_TP, NVLink: fatal error detected on "
      "link 8(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)");
  ASSERT_EQ(k.kind, Kind::kXid);
  EXPECT_EQ(k.time, "2026-04-22T21:26:20.599716692Z");
  EXPECT_EQ(k.host, "");  // the node address is not a journal or syslog host
  EXPECT_EQ(k.xid->pid, 22884u);
  EXPECT_EQ(k.xid->process_name, "VLLM::Worker_TP");

  const KernelReport r = ParseFixture("vllm40652_talos_xid45_xid74_nvlink_xid154.log");
  ASSERT_EQ(r.xids.size(), 4u);
  EXPECT_EQ(r.xids[3].xid->xid, 154u);
  EXPECT_EQ(r.xids[3].time, "2026-04-22T21:26:20.695845708Z");
}

// equinor/ert#7797: `dmesg --time-format iso`. mm/oom_kill.c prints the "oom-kill:constraint=…"
// summary (dump_oom_summary) and then the kill (__oom_kill_process); oom_reaper repeats the
// victim afterwards. Only the kill is an entry (SOURCES.md convention 5).
TEST(KernelLogTest, IsoDmesgOomKillIsOneEntry) {
  const KernelReport r = ParseFixture("ert7797_dmesg_iso_oom_kill_and_killed_process.log");
  ASSERT_EQ(r.oom_kills.size(), 1u);
  const KernelLine& k = r.oom_kills[0];
  EXPECT_EQ(k.pid, 1440763u);
  EXPECT_EQ(k.process, "perl");
  EXPECT_EQ(k.anon_rss_kb, 60356340u);
  EXPECT_EQ(k.uid, 21417u);
  EXPECT_EQ(k.time, "2024-04-29T14:55:41,679700+02:00");
  EXPECT_EQ(ParseKernelLine("2024-04-29T14:55:41,679685+02:00 oom-kill:constraint=CONSTRAINT_NONE,"
                            "nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user."
                            "slice,task=perl,pid=1440763,uid=21417")
                .kind,
            Kind::kNone);
  EXPECT_EQ(ParseKernelLine("2024-04-29T14:55:46,947445+02:00 oom_reaper: reaped process 1440763 "
                            "(perl), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB")
                .kind,
            Kind::kNone);
}

// docker/for-linux#1001: syslog; a comm with parentheses, "(resolved)". The kernel prints comm
// between "(" and ")" with no escaping (mm/oom_kill.c "Killed process %d (%s)"), so the name runs
// to the last ')' before " total-vm:".
TEST(KernelLogTest, OomCommWithParentheses) {
  const KernelLine k = ParseKernelLine(
      "May 15 23:09:30 ubuntu-s-1vcpu-2gb-ams3-01 kernel: [  518.061172] Out of memory: Killed "
      "process 15925 ((resolved)) total-vm:168424kB, anon-rss:4064kB, file-rss:3584kB, "
      "shmem-rss:0kB");
  ASSERT_EQ(k.kind, Kind::kOomKill);
  EXPECT_EQ(k.pid, 15925u);
  EXPECT_EQ(k.process, "(resolved)");
  EXPECT_EQ(k.anon_rss_kb, 4064u);
  EXPECT_FALSE(k.uid);  // this kernel's line has no UID field
  EXPECT_EQ(k.time, "May 15 23:09:30");
  EXPECT_EQ(k.host, "ubuntu-s-1vcpu-2gb-ams3-01");
}

// kubernetes/kubernetes#56891 (kernel 3.10): the older two-line form. The kernel chose 24572
// and killed its child 28438 (the "prefer children over parent" heuristic, removed in 2019):
// two entries, one per line, as docs/format/explain.md names both forms.
TEST(KernelLogTest, OldKillProcessPairWithDifferentPids) {
  const KernelReport r = ParseFixture("k8s56891_dmesg_T_memcg_kill_process_child_pid_differs.log");
  ASSERT_EQ(r.oom_kills.size(), 2u);
  EXPECT_EQ(r.oom_kills[0].pid, 24572u);
  EXPECT_EQ(r.oom_kills[0].process, "java");
  EXPECT_FALSE(r.oom_kills[0].anon_rss_kb);
  EXPECT_EQ(r.oom_kills[1].pid, 28438u);
  EXPECT_EQ(r.oom_kills[1].anon_rss_kb, 466160u);
  EXPECT_EQ(r.oom_kills[1].time, "Thu Dec  7 00:05:15 2017");
}

// NVIDIA/NVSentinel#155: at probe time the driver prints one message on three lines and no Xid;
// the entry takes the first line's address and stamp.
TEST(KernelLogTest, ProbeTimeFallenOffTheBusSpansThreeLines) {
  const KernelReport r =
      ParseFixture("nvsentinel155_dmesg_multiline_fallen_off_bus_without_xid.log");
  EXPECT_TRUE(r.xids.empty());
  ASSERT_EQ(r.fallen_off_bus.size(), 1u);
  EXPECT_EQ(r.fallen_off_bus[0].pci_bus_id, "00000000:b3:00.0");
  EXPECT_EQ(r.fallen_off_bus[0].time, "1843.308145");

  // The last line alone says the bus was lost but not which GPU.
  const KernelLine last =
      ParseKernelLine("               NVRM: fallen off the bus and is not responding to commands.");
  EXPECT_EQ(last.kind, Kind::kFallenOffBus);
  EXPECT_EQ(last.pci_bus_id, "");
  // Without its first line the entry has no address.
  const KernelReport alone =
      ParseKernelText("NVRM: fallen off the bus and is not responding to commands.\n");
  ASSERT_EQ(alone.fallen_off_bus.size(), 1u);
  EXPECT_EQ(alone.fallen_off_bus[0].pci_bus_id, "");
  // A first line too far back is not joined.
  const KernelReport far = ParseKernelText(
      "[ 1.0] NVRM: The NVIDIA GPU 0000:b3:00.0\n[ 1.1] a\n[ 1.2] b\n[ 1.3] c\n"
      "[ 1.4] NVRM: fallen off the bus and is not responding to commands.\n");
  ASSERT_EQ(far.fallen_off_bus.size(), 1u);
  EXPECT_EQ(far.fallen_off_bus[0].pci_bus_id, "");
  EXPECT_EQ(far.fallen_off_bus[0].time, "1.4");
}

// gist kenorb (2019 driver) and open-gpu-kernel-modules#1151: the classic and the new companion
// line of an Xid 79. The Xid line itself is an Xid, never a fallen-off-the-bus entry.
TEST(KernelLogTest, FallenOffTheBusCompanionLines) {
  const KernelLine classic = ParseKernelLine(
      "Mar 26 12:33:30 Ubuntu-PC kernel: NVRM: GPU at 0000:65:00.0 has fallen off "
      "the bus.");
  EXPECT_EQ(classic.kind, Kind::kFallenOffBus);
  EXPECT_EQ(classic.pci_bus_id, "00000000:65:00.0");
  EXPECT_EQ(classic.host, "Ubuntu-PC");

  const KernelLine modern = ParseKernelLine(
      "May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.");
  EXPECT_EQ(modern.kind, Kind::kFallenOffBus);
  EXPECT_EQ(modern.pci_bus_id, "00000000:2b:00.0");
  EXPECT_EQ(modern.time, "May 18 19:02:39");
  EXPECT_EQ(modern.host, "");  // the poster left the host out

  const KernelLine xid79 = ParseKernelLine(
      "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off "
      "the bus.");
  EXPECT_EQ(xid79.kind, Kind::kXid);

  // The brief's form, not seen in a capture (docs/research/xid.md): still read.
  const KernelLine at_pci =
      ParseKernelLine("NVRM: GPU at PCI:0000:ab:00: GPU has fallen off the bus.");
  EXPECT_EQ(at_pci.kind, Kind::kFallenOffBus);
  EXPECT_EQ(at_pci.pci_bus_id, "00000000:ab:00.0");

  const KernelReport r = ParseFixture("gist_zackmattor_journal_xid79_pid0_blob_data.log");
  ASSERT_EQ(r.xids.size(), 1u);
  EXPECT_EQ(r.xids[0].xid->pid, 0u);  // "pid=0," without name (SOURCES.md convention 7)
  ASSERT_EQ(r.fallen_off_bus.size(), 1u);
  EXPECT_EQ(r.fallen_off_bus[0].pci_bus_id, "00000000:10:00.0");
  EXPECT_EQ(r.hosts, std::vector<std::string>{"saturn"});
}

// NVIDIA/open-gpu-kernel-modules#626: journalctl in a Chinese locale; the month is "4月".
TEST(KernelLogTest, JournalStampInAnyLocale) {
  const KernelLine k = ParseKernelLine(
      "4月 20 19:55:29 Reverier-Arch kernel: NVRM: API mismatch: the client has "
      "the version 550.76, but");
  EXPECT_EQ(k.kind, Kind::kNone);
  EXPECT_EQ(k.time, "4月 20 19:55:29");
  EXPECT_EQ(k.host, "Reverier-Arch");
  const KernelReport r = ParseFixture("openkm626_journal_zh_CN_locale_nvrm_no_xid.log");
  EXPECT_EQ(r.hosts, std::vector<std::string>{"Reverier-Arch"});
  EXPECT_TRUE(r.xids.empty());
}

// doitsujin/dxvk#1799: the poster redacted the UUID; that is no UUID line.
TEST(KernelLogTest, RedactedUuidIsNotAUuidLine) {
  const KernelLine k = ParseKernelLine(
      "Nov 29 11:28:11 zeus kernel: NVRM: GPU at PCI:0000:c1:00: GPU-<uuid redacted>");
  EXPECT_EQ(k.kind, Kind::kNone);
  EXPECT_EQ(k.host, "zeus");
}

// ---- other forms the header names (constructed lines in each tool's documented format) ------

// /dev/kmsg: "<prio>,<seq>,<usec>,<flags>;<message>" (Documentation/ABI/testing/dev-kmsg); the
// time is the microseconds written as dmesg writes seconds since boot.
TEST(KernelLogTest, RawKmsgRecord) {
  const KernelLine k = ParseKernelLine(
      "4,1523,93297027938,-;NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, "
      "Graphics Exception: ESR 0x52e7b0=0x101000e");
  ASSERT_EQ(k.kind, Kind::kXid);
  EXPECT_EQ(k.time, "93297.027938");
  EXPECT_EQ(k.xid->pci_bus_id, "00000000:43:00.0");

  const KernelLine oom = ParseKernelLine(
      "3,88,5000001,-,caller=T1;Out of memory: Killed process 7 (python3) total-vm:1kB, "
      "anon-rss:2kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:4kB oom_score_adj:0");
  ASSERT_EQ(oom.kind, Kind::kOomKill);
  EXPECT_EQ(oom.time, "5.000001");
  EXPECT_EQ(oom.uid, 1000u);

  // In a record the probe-time message is one record; the kernel escapes its newlines.
  const KernelLine probe = ParseKernelLine(
      "3,90,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) "
      "installed in this system has\\x0aNVRM: fallen off the bus and is not responding to "
      "commands.");
  EXPECT_EQ(probe.kind, Kind::kFallenOffBus);
  EXPECT_EQ(probe.pci_bus_id, "00000000:b3:00.0");
  EXPECT_EQ(probe.time, "1843.308145");
}

// rsyslog's RSYSLOG_FileFormat and journalctl -o short-iso / short-precise / short-monotonic /
// short-full / short-unix.
TEST(KernelLogTest, OtherJournalAndSyslogStamps) {
  const std::string msg = " NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.";
  struct Case {
    std::string prefix, time, host;
  };
  const Case cases[] = {
      {"2024-03-04T10:11:12.123456+00:00 gpu7 kernel:", "2024-03-04T10:11:12.123456+00:00", "gpu7"},
      {"2024-03-04T10:11:12+0000 gpu7 kernel:", "2024-03-04T10:11:12+0000", "gpu7"},
      {"Mar 04 10:11:12.123456 gpu7 kernel:", "Mar 04 10:11:12.123456", "gpu7"},
      {"[  219.470994] gpu7 kernel:", "219.470994", "gpu7"},
      {"Mon 2024-03-04 10:11:12 CET gpu7 kernel:", "Mon 2024-03-04 10:11:12 CET", "gpu7"},
      {"1709547072.123456 gpu7 kernel:", "1709547072.123456", "gpu7"},
      {"> Mar  4 10:11:12 gpu7 kernel:", "Mar  4 10:11:12", "gpu7"},
  };
  for (const Case& c : cases) {
    const KernelLine k = ParseKernelLine(c.prefix + msg);
    EXPECT_EQ(k.kind, Kind::kXid) << c.prefix;
    EXPECT_EQ(k.time, c.time) << c.prefix;
    EXPECT_EQ(k.host, c.host) << c.prefix;
    EXPECT_EQ(k.xid->pci_bus_id, "00000000:18:00.0") << c.prefix;
  }
}

// mm/oom_kill.c's other reason, and 2.6.32's "Killed process %d, UID %d, (%s)" order.
TEST(KernelLogTest, OtherOomKillForms) {
  const KernelLine alloc = ParseKernelLine(
      "[ 12.5] Out of memory (oom_kill_allocating_task): Killed process 42 (torchrun) "
      "total-vm:10kB, anon-rss:9kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB "
      "oom_score_adj:0");
  ASSERT_EQ(alloc.kind, Kind::kOomKill);
  EXPECT_EQ(alloc.pid, 42u);
  EXPECT_EQ(alloc.process, "torchrun");
  EXPECT_EQ(alloc.anon_rss_kb, 9u);
  EXPECT_EQ(alloc.uid, 0u);

  const KernelLine rhel6 = ParseKernelLine(
      "Killed process 3108, UID 500, (java) total-vm:3056448kB, anon-rss:1430148kB, "
      "file-rss:104kB");
  ASSERT_EQ(rhel6.kind, Kind::kOomKill);
  EXPECT_EQ(rhel6.pid, 3108u);
  EXPECT_EQ(rhel6.uid, 500u);
  EXPECT_EQ(rhel6.process, "java");
  EXPECT_EQ(rhel6.anon_rss_kb, 1430148u);

  // Text that only looks similar: a shell's "Killed" message, a victim already exiting.
  EXPECT_EQ(ParseKernelLine("Killed process 1234 (python)").kind, Kind::kNone);
  EXPECT_EQ(ParseKernelLine("Memory cgroup out of memory: OOM victim 5 (x) is already exiting. "
                            "Skip killing the task")
                .kind,
            Kind::kNone);
}

// ---- ../shared/real/xid (INDEX.md section 3) -------------------------------------------------

TEST(KernelLogRealTest, Vllm5901UptimeStamps) {
  GW_SKIP_WITHOUT_SHARED(SharedDir("real/xid"));
  const KernelReport r = ParseReal("vllm5901_a800_xid13_graphics_exception_esr.log");
  ASSERT_EQ(r.xids.size(), 6u);
  for (const KernelLine& k : r.xids) {
    EXPECT_EQ(k.xid->xid, 13u);
    EXPECT_EQ(k.xid->pci_bus_id, "00000000:43:00.0");
    EXPECT_FALSE(k.xid->pid);
  }
  EXPECT_EQ(r.xids[1].time, "93297.029837");
  EXPECT_EQ(
      r.xids[5].xid->text,
      "Graphics Exception: ESR 0x52ff30=0x0 0x52ff34=0x20 0x52ff28=0xc81eb60 0x52ff2c=0x1174");
}

// "+> " before each line: a README quoted inside a diff.
TEST(KernelLogRealTest, Gpud46DiffQuotedDmesgT) {
  GW_SKIP_WITHOUT_SHARED(SharedDir("real/xid"));
  const KernelReport r = ParseReal("gpud46_xid13_sm_warp_xid109_ctx_switch_timeout_diffquoted.log");
  ASSERT_EQ(r.xids.size(), 4u);
  EXPECT_EQ(r.xids[0].time, "Fri Aug 30 11:43:09 2024");
  EXPECT_EQ(r.xids[0].xid->pci_bus_id, "00000000:cb:00.0");
  EXPECT_EQ(r.xids[0].xid->text,
            "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter");
  EXPECT_EQ(r.xids[3].xid->xid, 109u);
  EXPECT_EQ(r.xids[3].xid->pid, 1797828u);
  EXPECT_EQ(r.xids[3].xid->process_name, "pt_main_thread");
  EXPECT_EQ(r.xids[3].time, "Fri Aug 30 11:43:14 2024");
}

// The post wrapped the line: the Xid text ends where the line ends ("Data"); the wrapped
// " 00000000" and the gala line report nothing.
TEST(KernelLogRealTest, Nixpkgs539036WrappedJournalLine) {
  GW_SKIP_WITHOUT_SHARED(SharedDir("real/xid"));
  const KernelReport r = ParseReal("nixpkgs539036_journal_xid13_wrapped_line.log");
  ASSERT_EQ(r.xids.size(), 1u);
  EXPECT_EQ(r.xids[0].time, "Jul 06 20:02:59");
  EXPECT_EQ(r.xids[0].host, "gaming");
  EXPECT_EQ(r.xids[0].xid->process_name, ".gala-wrapped");
  EXPECT_EQ(r.xids[0].xid->text,
            "Graphics Exception: channel 0x00000005, Class 0000c997, Offset 00000000, Data");
  EXPECT_EQ(r.hosts, std::vector<std::string>{"gaming"});  // gala's line is not the kernel's
}

// gpud's own output quotes the line: no stamp of the kernel's, the closing quote dropped.
TEST(KernelLogRealTest, Gpud500ToolQuotedLines) {
  GW_SKIP_WITHOUT_SHARED(SharedDir("real/xid"));
  const KernelReport r = ParseReal("gpud500_xid119_gsp_rpc_timeout_45s_tool_quoted.log");
  ASSERT_EQ(r.xids.size(), 5u);
  EXPECT_EQ(r.xids[0].time, "");
  EXPECT_EQ(r.xids[3].xid->process_name, "gpu-feature-dis");
  EXPECT_EQ(r.xids[4].xid->text,
            "Timeout after 45s of waiting for RPC response from GPU4 GSP! Expected function 76 "
            "(GSP_RM_CONTROL) (0x2080012c 0x14).");
  const nlohmann::json j = KernelReportJson(r);
  EXPECT_TRUE(j["xid"][0]["time"].is_null());
  EXPECT_EQ(j["xid"][0]["pid"], 4071838);
}

// Bare NVRM lines from gpud's tests: non-zero PCI domains; the redacted "PCI:..." of nccl#2241.
TEST(KernelLogRealTest, GpudKmsgInputsAndRedactedAddress) {
  GW_SKIP_WITHOUT_SHARED(SharedDir("real/xid"));
  const KernelReport a = ParseReal("gpud1174_kmsg_inputs_xid149_xid145_xid94.log");
  ASSERT_EQ(a.xids.size(), 4u);
  EXPECT_EQ(a.xids[0].xid->pci_bus_id, "00000019:01:00.0");
  EXPECT_EQ(a.xids[2].xid->pci_bus_id, "00000018:01:00.0");
  EXPECT_EQ(a.xids[3].xid->process_name, "python3");
  EXPECT_EQ(a.xids[3].time, "");

  const KernelReport b = ParseReal("gpud1160_kmsg_inputs_xid144_xid149.log");
  ASSERT_EQ(b.xids.size(), 2u);
  EXPECT_EQ(b.xids[0].xid->xid, 144u);

  const KernelReport c = ParseReal("nccl2241_b200_xid145_xid137_redacted_pci.log");
  ASSERT_EQ(c.xids.size(), 2u);
  EXPECT_EQ(c.xids[1].xid->xid, 137u);
  const nlohmann::json j = KernelReportJson(c);
  EXPECT_TRUE(j["xid"][0]["pci_bus_id"].is_null());
  EXPECT_EQ(j["xid"][1]["text"], "RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error");
}

// The device plugin's own "XidCriticalError: Xid=69" is not the driver's line.
TEST(KernelLogRealTest, K8sDevicePluginLineIsNotAKernelXid) {
  GW_SKIP_WITHOUT_SHARED(SharedDir("real/xid"));
  const KernelReport r = ParseReal("k8sdp189_device_plugin_xid69_not_dmesg_format.log");
  EXPECT_TRUE(r.xids.empty());
  EXPECT_TRUE(r.oom_kills.empty());
  EXPECT_TRUE(r.fallen_off_bus.empty());
}

// ---- garbage and cut lines -------------------------------------------------------------------

TEST(KernelLogTest, GarbageAndTruncatedLines) {
  for (std::string_view s : {"",
                             "\r",
                             "[",
                             "]",
                             "[ 12.5",
                             "[]",
                             "NVRM:",
                             "NVRM: Xid",
                             "NVRM: Xid (PCI:0000:",
                             "NVRM: GPU at ",
                             "NVRM: GPU at PCI:0000:01:00: GPU-",
                             "kernel:",
                             "Mar",
                             "Mar 04",
                             "Mar 04 10:11:1",
                             "4,",
                             "4,1,2,-",
                             "4,1,2,-;",
                             "Killed process",
                             "Killed process x",
                             "Out of memory: Kill process",
                             "\xff\xfe\x00NVRM",
                             "2024-03-04T",
                             "+>+>+>",
                             "`"}) {
    const KernelLine k = ParseKernelLine(s);
    EXPECT_EQ(k.kind, Kind::kNone) << s;
  }
  // Cut after the pid or inside the name: still a kill of that pid, with no name.
  const KernelLine cut = ParseKernelLine("[ 1.0] Out of memory: Killed process 77 (pyth");
  ASSERT_EQ(cut.kind, Kind::kOomKill);
  EXPECT_EQ(cut.pid, 77u);
  EXPECT_EQ(cut.process, "");
  EXPECT_FALSE(cut.anon_rss_kb);
  // A pid that cannot be one.
  EXPECT_EQ(ParseKernelLine("Out of memory: Killed process 99999999999 (x) anon-rss:1kB").kind,
            Kind::kNone);
  // A name with invalid UTF-8 still serialises.
  KernelReport r = ParseKernelText(
      "Out of memory: Killed process 9 (\xff\xfe) total-vm:1kB, anon-rss:1kB, file-rss:0kB\n");
  ASSERT_EQ(r.oom_kills.size(), 1u);
  EXPECT_NO_THROW(KernelReportJson(r).dump());
  // CRLF text parses as LF text.
  r = ParseKernelText("[ 5.000001] NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception\r\n");
  ASSERT_EQ(r.xids.size(), 1u);
  EXPECT_EQ(r.xids[0].xid->text, "Graphics Exception");
  EXPECT_EQ(r.xids[0].time, "5.000001");
}

TEST(KernelLogTest, EmptyTextGivesEmptyLists) {
  const nlohmann::json j = KernelReportJson(ParseKernelText(""));
  EXPECT_EQ(j, nlohmann::json::parse(R"({"xid": [], "oom_kills": [], "fallen_off_bus": []})"));
}

}  // namespace
}  // namespace gpuwatch::logs
