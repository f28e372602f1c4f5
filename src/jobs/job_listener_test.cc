#include "jobs/job_listener.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/time_base.h"
#include "jobs/testing/eventually.h"

namespace gpuwatch::jobs {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/gw-listener-XXXXXX";
  return mkdtemp(tmpl);
}

bool SendUnix(const std::string& path, const std::string& payload) {
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path.c_str());
  ssize_t n =
      sendto(fd, payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  close(fd);
  return n == static_cast<ssize_t>(payload.size());
}

int ConnectLoopback(int type, int port) {
  int fd = socket(AF_INET, type, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Waits up to 5 s for `pred` (the listener thread works asynchronously).
using ::gpuwatch::jobs::testing::Eventually;

class JobListenerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TempDir(); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  JobRegistry registry_{JobRegistryOptions{}, ProcfsProbe("/")};
};

TEST_F(JobListenerTest, UnixDatagramsCarryTheSendersCredentials) {
  JobListenerOptions o;
  o.socket_path = dir_ + "/job.sock";
  JobListener l(o, &registry_, WallClockMs);
  ASSERT_TRUE(l.Start().ok());
  struct stat st {};
  ASSERT_EQ(stat(o.socket_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  // No pid in the message: the kernel's credentials name this process.
  ASSERT_TRUE(SendUnix(o.socket_path,
                       "{\"type\":\"start\",\"job\":\"j1\",\"rank\":0}\n"
                       "{\"type\":\"step\",\"job\":\"j1\",\"step\":0,\"duration_s\":0.1}\n"
                       "{\"type\":\"step\",\"job\":\"j1\",\"step\":0,\"duration_s\":0.1}\n"
                       "garbage\n"));
  ASSERT_TRUE(Eventually([&] { return registry_.counters().accepted == 2; }));
  auto job = registry_.Job("j1");
  ASSERT_TRUE(job);
  EXPECT_EQ(job->ranks[0].pid, static_cast<uint32_t>(getpid()));
  EXPECT_TRUE(job->ranks[0].pid_verified);
  auto c = registry_.counters();
  EXPECT_EQ(c.rejected[static_cast<size_t>(RejectReason::kDuplicate)], 1u);
  EXPECT_EQ(c.rejected[static_cast<size_t>(RejectReason::kMalformed)], 1u);
  // A claim on pid 1 (init, root's) from a non-root sender is refused; root may.
  if (geteuid() != 0) {
    ASSERT_TRUE(SendUnix(o.socket_path, "{\"type\":\"start\",\"job\":\"j2\",\"pid\":1}"));
    ASSERT_TRUE(Eventually([&] {
      return registry_.counters().rejected[static_cast<size_t>(RejectReason::kPidNotOwned)] == 1;
    }));
  }
  // An oversized datagram is one counted rejection.
  std::string big(70000, 'x');
  if (SendUnix(o.socket_path, big)) {
    ASSERT_TRUE(Eventually([&] {
      return registry_.counters().rejected[static_cast<size_t>(RejectReason::kOversized)] == 1;
    }));
  }
  l.Stop();
  EXPECT_FALSE(std::filesystem::exists(o.socket_path));
}

TEST_F(JobListenerTest, StaleSocketIsReplacedLiveOneRefused) {
  JobListenerOptions o;
  o.socket_path = dir_ + "/job.sock";
  {
    // A socket file left behind by a dead agent.
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", o.socket_path.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    close(fd);
  }
  JobListener a(o, &registry_, WallClockMs);
  ASSERT_TRUE(a.Start().ok());
  JobListener b(o, &registry_, WallClockMs);
  Status st = b.Start();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.message();
  // A regular file at the path is never deleted.
  JobListenerOptions o2;
  o2.socket_path = dir_ + "/plain";
  std::FILE* f = std::fopen(o2.socket_path.c_str(), "w");
  std::fclose(f);
  JobListener c(o2, &registry_, WallClockMs);
  EXPECT_FALSE(c.Start().ok());
  EXPECT_TRUE(std::filesystem::exists(o2.socket_path));
}

TEST_F(JobListenerTest, UdpAndTcpOnLoopback) {
  JobListenerOptions o;
  o.socket_path = "off";
  o.udp = "127.0.0.1:0";
  o.tcp = "127.0.0.1:0";
  JobListener l(o, &registry_, WallClockMs);
  ASSERT_TRUE(l.Start().ok());
  ASSERT_GT(l.udp_port(), 0);
  ASSERT_GT(l.tcp_port(), 0);
  int u = ConnectLoopback(SOCK_DGRAM, l.udp_port());
  ASSERT_GE(u, 0);
  std::string msg = "{\"type\":\"start\",\"job\":\"udp\",\"pid\":12345}\n";
  ASSERT_EQ(send(u, msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
  close(u);
  ASSERT_TRUE(Eventually([&] { return registry_.Job("udp").has_value(); }));
  EXPECT_EQ(registry_.Job("udp")->ranks[0].pid, 12345u);
  EXPECT_FALSE(registry_.Job("udp")->ranks[0].pid_verified);

  int t = ConnectLoopback(SOCK_STREAM, l.tcp_port());
  ASSERT_GE(t, 0);
  // A line split over two writes, then a final line without its newline before close.
  std::string a = "{\"type\":\"step\",\"job\":\"tcp\",\"step\":1,";
  std::string b =
      "\"duration_s\":0.5}\n{\"type\":\"step\",\"job\":\"tcp\",\"step\":2,\"duration_s\":0.5}";
  ASSERT_EQ(send(t, a.data(), a.size(), 0), static_cast<ssize_t>(a.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(send(t, b.data(), b.size(), 0), static_cast<ssize_t>(b.size()));
  close(t);
  ASSERT_TRUE(Eventually([&] {
    auto j = registry_.Job("tcp");
    return j && j->ranks[0].last_step == 2u;
  }));
  // A line that never ends closes the connection with one oversized rejection.
  t = ConnectLoopback(SOCK_STREAM, l.tcp_port());
  std::string endless(70000, 'a');
  (void)send(t, endless.data(), endless.size(), MSG_NOSIGNAL);
  ASSERT_TRUE(Eventually([&] {
    return registry_.counters().rejected[static_cast<size_t>(RejectReason::kOversized)] == 1;
  }));
  close(t);
}

// D9 (issue 17): 64 idle TCP connections made the agent close every later reporter. Idle
// connections are closed after the timeout, and a newcomer replaces the idlest one.
TEST_F(JobListenerTest, D9_IdleTcpConnectionsCannotLockReportersOut) {
  JobListenerOptions o;
  o.socket_path = "off";
  o.tcp = "127.0.0.1:0";
  o.max_tcp_connections = 2;
  o.tcp_evict_idle_ms = 200;
  o.tcp_idle_timeout_ms = 60'000;
  JobListener l(o, &registry_, WallClockMs);
  ASSERT_TRUE(l.Start().ok());
  int idle1 = ConnectLoopback(SOCK_STREAM, l.tcp_port());
  int idle2 = ConnectLoopback(SOCK_STREAM, l.tcp_port());
  ASSERT_TRUE(Eventually([&] { return l.stats().tcp_connections == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  int t = ConnectLoopback(SOCK_STREAM, l.tcp_port());
  const std::string msg = "{\"type\":\"start\",\"job\":\"late\"}\n";
  ASSERT_EQ(send(t, msg.data(), msg.size(), MSG_NOSIGNAL), static_cast<ssize_t>(msg.size()));
  EXPECT_TRUE(Eventually([&] { return registry_.Job("late").has_value(); }));
  EXPECT_EQ(l.stats().tcp_refused, 0u);
  for (int fd : {idle1, idle2, t}) close(fd);

  // With the idle timeout, a silent connection is closed on its own.
  JobListenerOptions o2 = o;
  o2.tcp_idle_timeout_ms = 300;
  JobListener l2(o2, &registry_, WallClockMs);
  ASSERT_TRUE(l2.Start().ok());
  int silent = ConnectLoopback(SOCK_STREAM, l2.tcp_port());
  char c;
  EXPECT_TRUE(Eventually([&] { return recv(silent, &c, 1, MSG_DONTWAIT) == 0; }));
  close(silent);
}

}  // namespace
}  // namespace gpuwatch::jobs
