#include "collect/time_source.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gpuwatch::collect {
namespace {

using std::chrono::milliseconds;

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/timesource/" + name);
  EXPECT_TRUE(in) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- chronyc -c tracking ----

TEST(ChronycTrackingTest, SynchronisedLocalClockSlow) {
  auto r = ParseChronycTracking(Fixture("chrony_tracking.csv"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source, "chrony");
  // System time 0.000012345 s is chrony's correction: the clock is 12.345 µs slow.
  ASSERT_TRUE(r->offset_ms.has_value());
  EXPECT_DOUBLE_EQ(*r->offset_ms, -0.012345);
  EXPECT_DOUBLE_EQ(*r->root_dispersion_ms, 0.123456);
  EXPECT_FALSE(r->jitter_ms.has_value());
  EXPECT_EQ(r->stratum, 4u);
  EXPECT_EQ(r->reference, "169.254.169.123");
  EXPECT_TRUE(r->synced);
}

TEST(ChronycTrackingTest, NegativeCorrectionMeansLocalClockFast) {
  auto r = ParseChronycTracking(Fixture("chrony_tracking_fast.csv"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->offset_ms, 1.502);
  EXPECT_DOUBLE_EQ(*r->root_dispersion_ms, 1.75);
  EXPECT_EQ(r->stratum, 3u);
  EXPECT_TRUE(r->synced);
}

TEST(ChronycTrackingTest, CapturedLocalReference) {
  // chrony 4.3 with "local stratum 10": no name, so the reference ID stands in.
  auto r = ParseChronycTracking(Fixture("chrony_tracking_local.csv"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reference, "7F7F0101");
  EXPECT_EQ(r->stratum, 10u);
  EXPECT_TRUE(r->synced);
  ASSERT_TRUE(r->offset_ms.has_value());
  EXPECT_EQ(*r->offset_ms, 0.0);
  EXPECT_FALSE(std::signbit(*r->offset_ms));  // +0, not -0
}

TEST(ChronycTrackingTest, CapturedNotSynchronised) {
  auto r = ParseChronycTracking(Fixture("chrony_tracking_unsync.csv"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->synced);
  EXPECT_EQ(r->stratum, 0u);
  EXPECT_FALSE(r->offset_ms.has_value());  // the printed 0 measures nothing
  EXPECT_EQ(r->reference, "00000000");
}

TEST(ChronycTrackingTest, Stratum16IsNotSynchronised) {
  auto r = ParseChronycTracking(
      "C0A80A01,192.168.10.1,16,1764460790.0,0.001,0.0,0.0,0.0,0.0,0.0,0.0,0.0,64.0,Normal\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->synced);
  EXPECT_FALSE(r->offset_ms.has_value());
}

TEST(ChronycTrackingTest, LeapSecondPendingIsStillSynchronised) {
  auto r = ParseChronycTracking(
      "C0A80A01,192.168.10.1,2,1764460790.0,0.001,0.0,0.0,0.0,0.0,0.0,0.0,0.0,64.0,Insert "
      "second");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->synced);
  EXPECT_DOUBLE_EQ(*r->offset_ms, -1.0);
}

TEST(ChronycTrackingTest, RejectsWithAReason) {
  const std::string good = Fixture("chrony_tracking.csv");
  struct Case {
    std::string in, want;
  };
  const std::vector<Case> cases = {
      {"", "empty output"},
      {"506 Cannot talk to daemon\n", "expected 14 CSV fields, got 1"},
      {good.substr(0, 60), "expected 14 CSV fields, got 6"},  // truncated line
      {good + good, "one CSV line"},
      {"XYZ,a,4,1.0,0.1,0,0,0,0,0,0,0,64.0,Normal", "reference ID 'XYZ'"},
      {"A9FEA97B,a,four,1.0,0.1,0,0,0,0,0,0,0,64.0,Normal", "stratum 'four'"},
      {"A9FEA97B,a,4,1.0,abc,0,0,0,0,0,0,0,64.0,Normal", "system time 'abc'"},
      {"A9FEA97B,a,4,1.0,nan,0,0,0,0,0,0,0,64.0,Normal", "system time 'nan'"},
      {"A9FEA97B,a,4,1.0,0.1,0,0,0,0,0,0,,64.0,Normal", "root dispersion ''"},
      {"A9FEA97B,a,4,1.0,0.1,0,0,0,0,0,0,0,64.0,Sideways", "unknown leap status 'Sideways'"},
      {"A9FEA97B,a,4,1.0,0.1,0,0,0,0,0,0,0,64.0,Normal,extra", "got 15"},
  };
  for (const auto& c : cases) {
    auto r = ParseChronycTracking(c.in);
    ASSERT_FALSE(r.ok()) << c.in;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.in << " -> " << r.status().message();
  }
}

// ---- ntpq -c rv ----

TEST(NtpqRvTest, Ntpd428Synchronised) {
  auto r = ParseNtpqRv(Fixture("ntpq_rv.txt"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source, "ntpd");
  // offset=-0.720: the server is 0.72 ms behind us, so this clock is 0.72 ms ahead.
  EXPECT_DOUBLE_EQ(*r->offset_ms, 0.720);
  EXPECT_DOUBLE_EQ(*r->jitter_ms, 0.098);
  EXPECT_DOUBLE_EQ(*r->root_dispersion_ms, 14.054);
  EXPECT_EQ(r->stratum, 3u);
  EXPECT_EQ(r->reference, "10.123.33.1");
  EXPECT_TRUE(r->synced);
}

TEST(NtpqRvTest, StartingUpIsNotSynchronised) {
  auto r = ParseNtpqRv(Fixture("ntpq_rv_unsync.txt"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->synced);
  EXPECT_EQ(r->stratum, 16u);
  EXPECT_EQ(r->reference, "INIT");
  EXPECT_FALSE(r->offset_ms.has_value());
}

TEST(NtpqRvTest, NtpsecStratumOnePps) {
  auto r = ParseNtpqRv(Fixture("ntpq_rv_ntpsec.txt"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->offset_ms, 0.012899);
  EXPECT_DOUBLE_EQ(*r->jitter_ms, 0.002524);
  EXPECT_DOUBLE_EQ(*r->root_dispersion_ms, 1.27);
  EXPECT_EQ(r->stratum, 1u);
  EXPECT_EQ(r->reference, "PPS");
  EXPECT_TRUE(r->synced);
}

TEST(NtpqRvTest, SignedOffsetAndOldJitterName) {
  // A '+' is accepted; ntpd before 4.2.6 called sys_jitter "jitter".
  auto r = ParseNtpqRv("stratum=2, offset=+0.5, jitter=0.25, leap=00");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->offset_ms, -0.5);
  EXPECT_DOUBLE_EQ(*r->jitter_ms, 0.25);
}

TEST(NtpqRvTest, SelectedVariablesOnly) {
  auto r = ParseNtpqRv(Fixture("ntpq_rv_short.txt"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->offset_ms, 0.720);
  EXPECT_DOUBLE_EQ(*r->jitter_ms, 0.098);
  EXPECT_FALSE(r->root_dispersion_ms.has_value());
  EXPECT_TRUE(r->synced);
}

TEST(NtpqRvTest, LeapFromStatusWordWhenLeapIsMissing) {
  auto r = ParseNtpqRv("associd=0 status=c618 leap_alarm, sync_ntp,\nstratum=3, offset=1.5\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->synced);
  r = ParseNtpqRv("associd=0 status=0618 leap_none, sync_ntp,\nstratum=3, offset=1.5\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->synced);
  EXPECT_DOUBLE_EQ(*r->offset_ms, -1.5);
}

TEST(NtpqRvTest, QuotedValuesHideKeys) {
  // A key inside a quoted value (version="x offset=9") is not the offset.
  auto r = ParseNtpqRv("version=\"x offset=9, stratum=1\", stratum=2, offset=0.25, leap=00");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->offset_ms, -0.25);
  EXPECT_EQ(r->stratum, 2u);
}

TEST(NtpqRvTest, RejectsWithAReason) {
  struct Case {
    std::string in, want;
  };
  const std::vector<Case> cases = {
      {"", "empty output"},
      {"ntpq: read: Connection refused\n", "no offset="},
      {"offset=0.1, leap=00", "no stratum="},
      {"offset=abc, stratum=2", "offset 'abc'"},
      {"offset=0.1, stratum=-2", "stratum '-2'"},
      {"offset=0.1, stratum=2, leap=7", "unknown leap '7'"},
      {"offset=inf, stratum=2", "offset 'inf'"},
      {"associd=0 status=0615 leap_none, sync_ntp,\nversion=\"ntpd 4.2.8p15", "no offset="},
  };
  for (const auto& c : cases) {
    auto r = ParseNtpqRv(c.in);
    ASSERT_FALSE(r.ok()) << c.in;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.in << " -> " << r.status().message();
  }
}

// ---- timedatectl show-timesync ----

TEST(TimedatectlTimesyncTest, NoOffsetInShowTimesync) {
  auto r = ParseTimedatectlTimesync(Fixture("timedatectl_timesync.txt"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source, "timesyncd");
  EXPECT_EQ(r->reference, "0.debian.pool.ntp.org");
  EXPECT_EQ(r->stratum, 2u);
  EXPECT_TRUE(r->synced);
  EXPECT_DOUBLE_EQ(*r->root_dispersion_ms, 3.982);
  EXPECT_DOUBLE_EQ(*r->jitter_ms, 1.118);
  EXPECT_FALSE(r->offset_ms.has_value());
}

TEST(TimedatectlTimesyncTest, Systemd245WithoutComma) {
  auto r = ParseTimedatectlTimesync(Fixture("timedatectl_timesync_v245.txt"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reference, "ntp.ubuntu.com");
  EXPECT_DOUBLE_EQ(*r->root_dispersion_ms, 30.349);
  EXPECT_DOUBLE_EQ(*r->jitter_ms, 0.0);
  EXPECT_TRUE(r->synced);
}

TEST(TimedatectlTimesyncTest, NoPacketYetIsNotSynchronised) {
  auto r = ParseTimedatectlTimesync(Fixture("timedatectl_timesync_nopacket.txt"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->synced);
  EXPECT_FALSE(r->stratum.has_value());
  EXPECT_EQ(r->reference, "10.0.0.1");
}

TEST(TimedatectlTimesyncTest, OffsetWhenPresent) {
  auto r = ParseTimedatectlTimesync(Fixture("timedatectl_timesync_offset.txt"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->offset_ms, -1.234);  // "+" = the server ahead: this clock is behind
  EXPECT_DOUBLE_EQ(*r->root_dispersion_ms, 0.469);
  EXPECT_DOUBLE_EQ(*r->jitter_ms, 1500);
  EXPECT_EQ(r->stratum, 1u);
  EXPECT_EQ(r->reference, "ntp1.example.net");
}

TEST(TimedatectlTimesyncTest, LeapAlarmAndKissOfDeath) {
  auto r = ParseTimedatectlTimesync(
      "ServerName=a\nNTPMessage={ Leap=3, Stratum=2, Jitter=0, Offset=-5ms }\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->synced);
  EXPECT_FALSE(r->offset_ms.has_value());
  r = ParseTimedatectlTimesync("ServerName=a\nNTPMessage={ Leap=0, Stratum=0, Jitter=0 }\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->synced);
}

TEST(TimedatectlTimesyncTest, RejectsWithAReason) {
  struct Case {
    std::string in, want;
  };
  const std::vector<Case> cases = {
      {"", "none of ServerName="},
      {"System has not been booted with systemd as init system (PID 1). Can't operate.\n",
       "none of ServerName="},
      {"ServerName=a\nNTPMessage=Leap=0\n", "is not { … }"},
      {"ServerName=a\nNTPMessage={ Version=4 }\n", "without Leap= or Stratum="},
      {"ServerName=a\nNTPMessage={ Leap=9, Stratum=2 }\n", "Leap '9'"},
      {"ServerName=a\nNTPMessage={ Leap=0, Stratum=x }\n", "Stratum 'x'"},
      {"ServerName=a\nNTPMessage={ Leap=0, Stratum=2, Offset=1 fortnight }\n", "Offset '1"},
  };
  for (const auto& c : cases) {
    auto r = ParseTimedatectlTimesync(c.in);
    ASSERT_FALSE(r.ok()) << c.in;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.in << " -> " << r.status().message();
  }
}

TEST(TimeSourceParsersTest, BinaryGarbageIsAnErrorNotACrash) {
  std::string junk;
  for (int i = 0; i < 4096; ++i) junk.push_back(static_cast<char>((i * 131 + 7) % 256));
  EXPECT_FALSE(ParseChronycTracking(junk).ok());
  EXPECT_FALSE(ParseNtpqRv(junk).ok());
  EXPECT_FALSE(ParseTimedatectlTimesync(junk).ok());
  // Half a line of each, cut at every length.
  for (const char* name : {"chrony_tracking.csv", "ntpq_rv.txt", "timedatectl_timesync.txt"}) {
    const std::string full = Fixture(name);
    for (size_t n = 0; n < full.size(); ++n) {
      (void)ParseChronycTracking(full.substr(0, n));
      (void)ParseNtpqRv(full.substr(0, n));
      (void)ParseTimedatectlTimesync(full.substr(0, n));
    }
  }
}

// ---- TimeSourceProbe with an injected runner ----

// Answers from a table by tool name; records every call.
struct FakeRunner {
  std::map<std::string, Result<std::string>> answers;
  std::vector<std::string> calls;
  std::vector<milliseconds> timeouts;

  CommandRunner Runner() {
    return [this](const std::vector<std::string>& argv, milliseconds timeout) {
      calls.push_back(argv.empty() ? "" : argv[0]);
      timeouts.push_back(timeout);
      auto it = answers.find(argv.empty() ? "" : argv[0]);
      if (it == answers.end()) return Result<std::string>(Status::NotFound("not installed"));
      return it->second;
    };
  }
};

TEST(TimeSourceProbeTest, ChronyFirstWithItsArguments) {
  std::vector<std::vector<std::string>> argvs;
  TimeSourceProbe probe([&](const std::vector<std::string>& argv, milliseconds) {
    argvs.push_back(argv);
    return Result<std::string>(Fixture("chrony_tracking.csv"));
  });
  auto r = probe.Probe();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source, "chrony");
  ASSERT_EQ(argvs.size(), 1u);
  EXPECT_EQ(argvs[0], (std::vector<std::string>{"chronyc", "-c", "tracking"}));
  EXPECT_EQ(probe.preferred_tool(), "chronyc");
}

TEST(TimeSourceProbeTest, FallsBackInOrderAndRemembersWhoAnswered) {
  FakeRunner fake;
  // chronyc is not installed, ntpq times out, timedatectl answers.
  fake.answers.emplace("ntpq", Status::Unavailable("/usr/bin/ntpq timed out after 2000 ms"));
  fake.answers.emplace("timedatectl", Fixture("timedatectl_timesync.txt"));
  TimeSourceProbe probe(fake.Runner());
  EXPECT_EQ(probe.preferred_tool(), "");
  auto r = probe.Probe();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source, "timesyncd");
  EXPECT_EQ(fake.calls, (std::vector<std::string>{"chronyc", "ntpq", "timedatectl"}));
  EXPECT_EQ(probe.preferred_tool(), "timedatectl");

  // Next time the tool that answered is asked first, and alone.
  fake.calls.clear();
  r = probe.Probe();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(fake.calls, (std::vector<std::string>{"timedatectl"}));

  // It stops answering (timesyncd stopped, ntpd now up): the rest in their usual order.
  fake.calls.clear();
  fake.answers.insert_or_assign("timedatectl", Status::Unavailable("exited with status 1"));
  fake.answers.insert_or_assign("ntpq", Fixture("ntpq_rv.txt"));
  r = probe.Probe();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->source, "ntpd");
  EXPECT_EQ(fake.calls, (std::vector<std::string>{"timedatectl", "chronyc", "ntpq"}));
  EXPECT_EQ(probe.preferred_tool(), "ntpq");
}

TEST(TimeSourceProbeTest, GarbageFromOneToolTriesTheNext) {
  FakeRunner fake;
  fake.answers.emplace("chronyc", std::string("506 Cannot talk to daemon\n"));
  fake.answers.emplace("ntpq", Fixture("ntpq_rv.txt"));
  TimeSourceProbe probe(fake.Runner());
  auto r = probe.Probe();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source, "ntpd");
  EXPECT_EQ(probe.preferred_tool(), "ntpq");
}

TEST(TimeSourceProbeTest, NoneAnswersIsUnavailableNamingEachTool) {
  FakeRunner fake;
  fake.answers.emplace("ntpq", std::string("ntpq: read: Connection refused\n"));
  fake.answers.emplace("timedatectl", Status::Unavailable("/usr/bin/timedatectl exited with "
                                                          "status 1"));
  TimeSourceProbe probe(fake.Runner());
  auto r = probe.Probe();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("chronyc: not installed"), std::string::npos) << m;
  EXPECT_NE(m.find("ntpq: ntpq rv: no offset="), std::string::npos) << m;
  EXPECT_NE(m.find("timedatectl: Unavailable: /usr/bin/timedatectl exited"), std::string::npos)
      << m;
  EXPECT_EQ(probe.preferred_tool(), "");
}

TEST(TimeSourceProbeTest, OneTimeoutBudgetForAllTools) {
  // chronyc hangs past the whole budget: the others are not started at all, so the host tick
  // is held for at most the timeout, not once per tool.
  std::vector<std::string> calls;
  std::vector<milliseconds> timeouts;
  TimeSourceProbe probe(
      [&](const std::vector<std::string>& argv, milliseconds timeout) {
        calls.push_back(argv[0]);
        timeouts.push_back(timeout);
        std::this_thread::sleep_for(timeout + milliseconds(5));
        return Result<std::string>(Status::Unavailable("timed out"));
      },
      milliseconds(30));
  auto r = probe.Probe();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(calls, (std::vector<std::string>{"chronyc"}));
  ASSERT_EQ(timeouts.size(), 1u);
  EXPECT_LE(timeouts[0], milliseconds(30));
  EXPECT_NE(r.status().message().find("ntpq: not tried, time budget spent"), std::string::npos)
      << r.status().message();
}

TEST(TimeSourceProbeTest, ThrowingRunnerIsContained) {
  TimeSourceProbe probe([](const std::vector<std::string>&, milliseconds) -> Result<std::string> {
    throw std::runtime_error("boom");
  });
  auto r = probe.Probe();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("runner threw: boom"), std::string::npos);
}

// ---- the real spawn path ----

// No child of this test process is left, running or as a zombie.
void ExpectNoChildren() {
  int status = 0;
  errno = 0;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(RunCommandTest, EchoRunsAndIsReaped) {
  auto r = RunCommand({"/bin/echo", "hello", "clock"}, milliseconds(2000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "hello clock\n");
  ExpectNoChildren();
}

TEST(RunCommandTest, StdinIsDevNullStderrDiscardedEnvironmentFixed) {
  auto r = RunCommand({"/bin/sh", "-c", "cat; echo out; echo err >&2; echo \"$LC_ALL|$HOME\""},
                      milliseconds(2000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "out\nC|\n");
  ExpectNoChildren();
}

TEST(RunCommandTest, TimeoutKillsTheWholeGroupAndReaps) {
  char tmpl[] = "/tmp/gw_timesource_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string pid_file = std::string(tmpl) + "/sleep.pid";
  const auto start = std::chrono::steady_clock::now();
  // The shell's own child (sleep) must die too, or it would hold stdout open for 5 s.
  auto r = RunCommand({"/bin/sh", "-c", "sleep 5 & echo $! > " + pid_file + "; wait"},
                      milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("timed out after 300 ms"), std::string::npos)
      << r.status().message();
  EXPECT_LT(took, milliseconds(1500));
  ExpectNoChildren();

  std::ifstream in(pid_file);
  pid_t sleep_pid = 0;
  in >> sleep_pid;
  ASSERT_GT(sleep_pid, 0);
  // Gone, or a zombie waiting for init: not running either way.
  bool dead = false;
  for (int i = 0; i < 100 && !dead; ++i) {
    std::ifstream stat("/proc/" + std::to_string(sleep_pid) + "/stat");
    std::string pid, comm, state;
    dead = !(stat >> pid >> comm >> state) || state == "Z";
    if (!dead) std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(dead) << "sleep " << sleep_pid << " still runs";
  std::filesystem::remove_all(tmpl);
}

TEST(RunCommandTest, PlainSleepTimesOut) {
  const auto start = std::chrono::steady_clock::now();
  auto r = RunCommand({"/bin/sh", "-c", "sleep 5"}, milliseconds(200));
  EXPECT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1500));
  ExpectNoChildren();
}

TEST(RunCommandTest, ClosingStdoutAndStayingDoesNotHoldTheCaller) {
  const auto start = std::chrono::steady_clock::now();
  auto r = RunCommand({"/bin/sh", "-c", "exec >/dev/null; sleep 5"}, milliseconds(200));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("timed out"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1500));
  ExpectNoChildren();
}

TEST(RunCommandTest, ExitStatusAndSignal) {
  auto r = RunCommand({"/bin/sh", "-c", "echo partial; exit 3"}, milliseconds(2000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exited with status 3"), std::string::npos);
  r = RunCommand({"/bin/sh", "-c", "kill -TERM $$"}, milliseconds(2000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("killed by signal 15"), std::string::npos)
      << r.status().message();
  ExpectNoChildren();
}

TEST(RunCommandTest, OutputCap) {
  auto r = RunCommand({"/bin/sh", "-c", "head -c 100000 /dev/zero"}, milliseconds(2000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  ExpectNoChildren();
  r = RunCommand({"/bin/sh", "-c", "head -c 65536 /dev/zero"}, milliseconds(2000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), kMaxCommandOutputBytes);
}

TEST(RunCommandTest, MissingAndRelativePaths) {
  auto r = RunCommand({"/nonexistent/chronyc", "-c", "tracking"}, milliseconds(2000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  r = RunCommand({"echo", "x"}, milliseconds(2000));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  r = RunCommand({}, milliseconds(2000));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  ExpectNoChildren();
}

TEST(RunCommandTest, IgnoredSigpipeIsNotInherited) {
  // The agent ignores SIGPIPE, and ignored signals survive exec: a tool writing into a closed
  // pipe would then loop on EPIPE instead of dying. The child's SigIgn mask must not have it.
  struct sigaction old {};
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old);
  auto r = RunCommand({"/bin/sh", "-c", "grep SigIgn /proc/self/status"}, milliseconds(2000));
  ::sigaction(SIGPIPE, &old, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const size_t colon = r->find(':');
  ASSERT_NE(colon, std::string::npos) << *r;
  const unsigned long long mask = std::stoull(r->substr(colon + 1), nullptr, 16);
  EXPECT_EQ(mask & (1ULL << (SIGPIPE - 1)), 0u) << *r;
}

TEST(FindSystemToolTest, FixedDirectoriesOnly) {
  auto sh = FindSystemTool("sh");
  ASSERT_TRUE(sh.has_value());
  EXPECT_TRUE(*sh == "/usr/bin/sh" || *sh == "/bin/sh") << *sh;
  EXPECT_FALSE(FindSystemTool("gw-no-such-tool").has_value());
  EXPECT_FALSE(FindSystemTool("../bin/sh").has_value());
  EXPECT_FALSE(FindSystemTool("").has_value());
  EXPECT_FALSE(FindSystemTool("..").has_value());
}

TEST(SystemCommandRunnerTest, MissingToolIsNotFound) {
  auto r = SystemCommandRunner()({"gw-no-such-tool"}, milliseconds(500));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  r = SystemCommandRunner()({"echo", "found"}, milliseconds(2000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "found\n");
}

}  // namespace
}  // namespace gpuwatch::collect
