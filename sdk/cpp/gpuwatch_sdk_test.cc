// Tests of the C++ SDK (gpuwatch.hpp) against stand-in agents: a Unix datagram socket bound in a
// temporary directory, a UDP socket and a TCP listener on loopback. Every received line must
// parse as JSON (nlohmann, which also rejects invalid UTF-8), as the agent requires.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpuwatch.hpp"

namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Every variable the SDK reads.
constexpr const char* kEnvVars[] = {"RANK",
                                    "WORLD_SIZE",
                                    "LOCAL_RANK",
                                    "TORCHELASTIC_RUN_ID",
                                    "MASTER_ADDR",
                                    "MASTER_PORT",
                                    "SLURM_JOB_ID",
                                    "SLURM_PROCID",
                                    "SLURM_NTASKS",
                                    "SLURM_NPROCS",
                                    "SLURM_LOCALID",
                                    "OMPI_COMM_WORLD_RANK",
                                    "OMPI_COMM_WORLD_SIZE",
                                    "OMPI_COMM_WORLD_LOCAL_RANK",
                                    "PMI_RANK",
                                    "PMI_SIZE",
                                    "PMIX_RANK",
                                    "PMIX_NAMESPACE",
                                    "MPI_LOCALRANKID",
                                    "PBS_JOBID",
                                    "LSB_JOBID",
                                    "GPUWATCH_JOB",
                                    "GPUWATCH_SOCKET",
                                    "XDG_RUNTIME_DIR",
                                    "LOGNAME",
                                    "USER",
                                    "LNAME",
                                    "USERNAME"};

// Clears those variables for a test and restores them after it.
class ScopedEnv {
 public:
  ScopedEnv() {
    for (const char* name : kEnvVars) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name, value->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  static void Set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

// A short path: sockaddr_un holds 108 bytes.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gwsdk-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Splits datagrams (or a stream) into lines and parses each; a line that is not a JSON object
// fails the test.
std::vector<json> ParseLines(const std::string& text) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      ADD_FAILURE() << "unterminated line: " << text.substr(pos, 200);
      break;
    }
    const std::string line = text.substr(pos, nl - pos);
    try {
      json j = json::parse(line);
      EXPECT_TRUE(j.is_object()) << line;
      out.push_back(std::move(j));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON (" << e.what() << "): " << line.substr(0, 200);
    }
    pos = nl + 1;
  }
  return out;
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 1500ms) {
  const auto deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

std::vector<std::string> Types(const std::vector<json>& messages) {
  std::vector<std::string> out;
  for (const json& m : messages) out.push_back(m.value("type", "?"));
  return out;
}

// The agent's Unix datagram socket; with drain, a thread receives everything that arrives.
class UnixReceiver {
 public:
  explicit UnixReceiver(std::string path, bool drain = true) : path_(std::move(path)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    ::unlink(path_.c_str());
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("bind " + path_ + ": " + std::strerror(errno));
    }
    if (drain) thread_ = std::thread([this] { Drain(); });
  }
  ~UnixReceiver() { Close(); }

  // The agent goes away: its socket file too.
  void Close() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(path_.c_str());
    }
    fd_ = -1;
  }

  std::vector<std::string> Datagrams() {
    std::lock_guard<std::mutex> lock(mu_);
    return datagrams_;
  }
  std::vector<json> Messages() {
    std::string all;
    for (const std::string& d : Datagrams()) all += d;
    return ParseLines(all);
  }
  size_t CountLines() {
    size_t n = 0;
    for (const std::string& d : Datagrams()) n += std::count(d.begin(), d.end(), '\n');
    return n;
  }
  bool WaitForLines(size_t n) {
    return WaitFor([&] { return CountLines() >= n; });
  }

 private:
  void Drain() {
    std::vector<char> buf(1 << 17);
    while (!stop_) {
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 10) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n <= 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      datagrams_.emplace_back(buf.data(), static_cast<size_t>(n));
    }
  }

  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> datagrams_;
};

class SdkTest : public ::testing::Test {
 protected:
  std::string SocketPath() const { return dir_.path() + "/job.sock"; }
  // Batches only on flush(), so a test sees exactly what it flushed.
  gpuwatch::Options Opts(const std::string& address) const {
    gpuwatch::Options o;
    o.job = "job-1";
    o.address = address;
    o.batch_max = 10000;
    o.batch_interval = 10s;
    return o;
  }

  ScopedEnv env_;
  TempDir dir_;
};

// ---- Identity from the environment ----------------------------------------------------------

TEST_F(SdkTest, IdentityFromTorchrun) {
  ScopedEnv::Set("RANK", "3");
  ScopedEnv::Set("WORLD_SIZE", "8");
  ScopedEnv::Set("LOCAL_RANK", "1");
  ScopedEnv::Set("TORCHELASTIC_RUN_ID", "run-7");
  const gpuwatch::Identity id = gpuwatch::ResolveIdentity({});
  EXPECT_EQ(id.job, "run-7");
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.world_size, 8);
  EXPECT_EQ(id.local_rank, 1);
}

TEST_F(SdkTest, TorchrunRunIdNoneFallsBackToHostAndPid) {
  ScopedEnv::Set("TORCHELASTIC_RUN_ID", "none");
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const gpuwatch::Identity id = gpuwatch::ResolveIdentity({});
  EXPECT_EQ(id.job, std::string(host) + "-" + std::to_string(::getpid()));
  EXPECT_EQ(id.rank, 0);
  EXPECT_FALSE(id.world_size.has_value());
  EXPECT_FALSE(id.local_rank.has_value());
}

TEST_F(SdkTest, IdentityFromSlurm) {
  ScopedEnv::Set("SLURM_JOB_ID", "12345");
  ScopedEnv::Set("SLURM_PROCID", "5");
  ScopedEnv::Set("SLURM_NTASKS", "16");
  ScopedEnv::Set("SLURM_LOCALID", "1");
  const gpuwatch::Identity id = gpuwatch::ResolveIdentity({});
  EXPECT_EQ(id.job, "12345");
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.world_size, 16);
  EXPECT_EQ(id.local_rank, 1);
}

TEST_F(SdkTest, TorchrunUnderSrunTakesTorchRanksAndSlurmJob) {
  ScopedEnv::Set("SLURM_JOB_ID", "12345");
  ScopedEnv::Set("SLURM_PROCID", "1");  // the node's task
  ScopedEnv::Set("SLURM_NTASKS", "2");
  ScopedEnv::Set("TORCHELASTIC_RUN_ID", "12345-rdzv");
  ScopedEnv::Set("RANK", "9");
  ScopedEnv::Set("WORLD_SIZE", "16");
  ScopedEnv::Set("LOCAL_RANK", "1");
  const gpuwatch::Identity id = gpuwatch::ResolveIdentity({});
  EXPECT_EQ(id.job, "12345");
  EXPECT_EQ(id.rank, 9);
  EXPECT_EQ(id.world_size, 16);
  EXPECT_EQ(id.local_rank, 1);
}

TEST_F(SdkTest, IdentityFromOpenMpiPmiPbsLsf) {
  ScopedEnv::Set("OMPI_COMM_WORLD_RANK", "6");
  ScopedEnv::Set("OMPI_COMM_WORLD_SIZE", "12");
  ScopedEnv::Set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
  ScopedEnv::Set("PBS_JOBID", "77.pbs-server");
  gpuwatch::Identity id = gpuwatch::ResolveIdentity({});
  EXPECT_EQ(id.job, "77.pbs-server");
  EXPECT_EQ(id.rank, 6);
  EXPECT_EQ(id.world_size, 12);
  EXPECT_EQ(id.local_rank, 2);

  for (const char* name : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "OMPI_COMM_WORLD_LOCAL_RANK", "PBS_JOBID"}) {
    ::unsetenv(name);
  }
  ScopedEnv::Set("PMI_RANK", "2");
  ScopedEnv::Set("PMI_SIZE", "4");
  ScopedEnv::Set("MPI_LOCALRANKID", "0");
  ScopedEnv::Set("LSB_JOBID", "4242");
  id = gpuwatch::ResolveIdentity({});
  EXPECT_EQ(id.job, "4242");
  EXPECT_EQ(id.rank, 2);
  EXPECT_EQ(id.world_size, 4);
  EXPECT_EQ(id.local_rank, 0);
}

// mpirun (or torchrun) inside an allocation: every worker inherits the launcher's SLURM_PROCID.
TEST_F(SdkTest, LaunchersRanksComeBeforeSlurms) {
  ScopedEnv::Set("SLURM_JOB_ID", "999");
  ScopedEnv::Set("SLURM_PROCID", "0");
  ScopedEnv::Set("SLURM_NTASKS", "1");
  ScopedEnv::Set("SLURM_LOCALID", "0");
  ScopedEnv::Set("OMPI_COMM_WORLD_RANK", "5");
  ScopedEnv::Set("OMPI_COMM_WORLD_SIZE", "8");
  ScopedEnv::Set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  gpuwatch::Identity id = gpuwatch::ResolveIdentity({});
  EXPECT_EQ(id.job, "999");
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.world_size, 8);
  EXPECT_EQ(id.local_rank, 1);
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  ScopedEnv::Set("PMIX_RANK", "6");
  EXPECT_EQ(gpuwatch::ResolveIdentity({}).rank, 6);
}

TEST_F(SdkTest, JobIdFallbacks) {
  ScopedEnv::Set("MASTER_ADDR", " node17 ");
  ScopedEnv::Set("MASTER_PORT", "29500");
  EXPECT_EQ(gpuwatch::ResolveIdentity({}).job, "node17:29500");
  ScopedEnv::Set("PMIX_NAMESPACE", "prterun-node17-4242@1");
  EXPECT_EQ(gpuwatch::ResolveIdentity({}).job, "prterun-node17-4242@1");
  ScopedEnv::Set("TORCHELASTIC_RUN_ID", "None");  // torchrun's default, any case
  EXPECT_EQ(gpuwatch::ResolveIdentity({}).job, "prterun-node17-4242@1");
  ScopedEnv::Set("TORCHELASTIC_RUN_ID", "rdzv-1");
  EXPECT_EQ(gpuwatch::ResolveIdentity({}).job, "rdzv-1");
  ScopedEnv::Set("LSB_JOBID", "31");
  EXPECT_EQ(gpuwatch::ResolveIdentity({}).job, "31");
  ScopedEnv::Set("SLURM_JOB_ID", "  ");  // blank: skipped
  EXPECT_EQ(gpuwatch::ResolveIdentity({}).job, "31");
  ScopedEnv::Set("GPUWATCH_JOB", "named-by-user");
  EXPECT_EQ(gpuwatch::ResolveIdentity({}).job, "named-by-user");
}

TEST_F(SdkTest, ExplicitOptionsWinOverEnvironment) {
  ScopedEnv::Set("SLURM_JOB_ID", "12345");
  ScopedEnv::Set("RANK", "3");
  ScopedEnv::Set("WORLD_SIZE", "8");
  ScopedEnv::Set("LOCAL_RANK", "3");
  gpuwatch::Options o;
  o.job = "mine";
  o.rank = 1;
  o.world_size = 2;
  o.local_rank = 0;
  const gpuwatch::Identity id = gpuwatch::ResolveIdentity(o);
  EXPECT_EQ(id.job, "mine");
  EXPECT_EQ(id.rank, 1);
  EXPECT_EQ(id.world_size, 2);
  EXPECT_EQ(id.local_rank, 0);
  o.rank = -1;  // negative: unset
  EXPECT_EQ(gpuwatch::ResolveIdentity(o).rank, 3);
}

TEST_F(SdkTest, MalformedNumbersAreSkipped) {
  ScopedEnv::Set("RANK", "abc");
  ScopedEnv::Set("SLURM_PROCID", "4");
  ScopedEnv::Set("WORLD_SIZE", "8x");
  ScopedEnv::Set("LOCAL_RANK", "-1");
  gpuwatch::Identity id = gpuwatch::ResolveIdentity({});
  EXPECT_EQ(id.rank, 4);
  EXPECT_FALSE(id.world_size.has_value());
  EXPECT_FALSE(id.local_rank.has_value());
  ScopedEnv::Set("LOCAL_RANK", " 2\n");  // white space around is fine
  EXPECT_EQ(gpuwatch::ResolveIdentity({}).local_rank, 2);
  ScopedEnv::Set("RANK", "1048576");  // above the protocol's range
  EXPECT_EQ(gpuwatch::ResolveIdentity({}).rank, 0);
}

TEST_F(SdkTest, JobIdIsMadeValidForTheWire) {
  gpuwatch::Options o;
  o.job = " a\nb\x01\xff" + std::string(300, 'x');
  const std::string job = gpuwatch::ResolveIdentity(o).job;
  EXPECT_EQ(job.size(), 128u);
  EXPECT_EQ(job.substr(0, 4), "ab?x");         // as the Python SDK: controls removed, bad bytes '?'
  o.job = std::string(127, 'x') + "\xc3\xa9";  // é would end at byte 129: cut before it
  EXPECT_EQ(gpuwatch::ResolveIdentity(o).job, std::string(127, 'x'));
}

// ---- Encoding ------------------------------------------------------------------------------

std::string Json(std::string_view s, size_t max_bytes = std::numeric_limits<size_t>::max()) {
  std::string out;
  gpuwatch::internal::AppendJsonString(out, s, max_bytes);
  return out;
}

TEST(EncodingTest, EscapesQuotesBackslashesAndControlCharacters) {
  const std::string raw = std::string("a\"b\\c\n\t\x01\x1f\x7f", 10) + std::string(1, '\0') + "z";
  const std::string enc = Json(raw);
  EXPECT_EQ(enc, "\"a\\\"b\\\\c\\u000a\\u0009\\u0001\\u001f\x7f\\u0000z\"");
  EXPECT_EQ(json::parse(enc).get<std::string>(), raw);
}

TEST(EncodingTest, KeepsValidUtf8AndReplacesInvalidBytes) {
  const std::string valid = "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\x89";
  EXPECT_EQ(Json(valid), "\"" + valid + "\"");
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(Json("a\xff"
                 "b\xc3"),
            "\"a" + fffd + "b" + fffd + "\"");                                   // stray, cut short
  EXPECT_EQ(Json("\xc0\xaf"), "\"" + fffd + fffd + "\"");                        // overlong
  EXPECT_EQ(Json("\xed\xa0\x80"), "\"" + fffd + fffd + fffd + "\"");             // surrogate
  EXPECT_EQ(Json("\xf4\x90\x80\x80"), "\"" + fffd + fffd + fffd + fffd + "\"");  // > U+10FFFF
  for (const std::string s : {"\xff", "\xe6\x97", "x\xf0\x9f\x8e", "\x80\x80"}) {
    EXPECT_NO_THROW(json::parse(Json(s))) << s;
  }
}

TEST(EncodingTest, CutsAtCharacterBoundaries) {
  EXPECT_EQ(Json("\xc3\xa9\xc3\xa9\xc3\xa9", 5), "\"\xc3\xa9\xc3\xa9\"");
  EXPECT_EQ(Json("abcdef", 3), "\"abc\"");
  EXPECT_EQ(Json("ab\ncd", 3), "\"ab\\u000a\"");
  std::string out;
  gpuwatch::internal::AppendJsonString(out, std::string(100, '\x01'), 100, 60);
  EXPECT_EQ(out.size(), 2u + 60u);  // ten \u0001
}

TEST(EncodingTest, NumbersAreShortestRoundTrip) {
  for (const double v : {0.1, 3.0, -0.0, 123456.789, 1e-300, 5e-324, 1.7976931348623157e308, 2.3141,
                         0.0003, 1e21, -7.25e-7}) {
    std::string out;
    gpuwatch::internal::AppendDouble(out, v);
    EXPECT_EQ(json::parse(out).get<double>(), v) << out;
    EXPECT_EQ(std::strtod(out.c_str(), nullptr), v) << out;
  }
  std::string out;
  gpuwatch::internal::AppendDouble(out, 0.1);
  EXPECT_EQ(out, "0.1");
}

TEST(EncodingTest, UnixTimeHasMicroseconds) {
  std::string out;
  gpuwatch::internal::AppendUnixTime(
      out, std::chrono::system_clock::time_point(std::chrono::microseconds(1764460801000042)));
  EXPECT_EQ(out, "1764460801.000042");
}

TEST(EncodingTest, NameValidation) {
  using gpuwatch::internal::ValidPhaseName;
  using gpuwatch::internal::ValidScalarName;
  EXPECT_TRUE(ValidScalarName("lr"));
  EXPECT_TRUE(ValidScalarName("_x9"));
  EXPECT_TRUE(ValidScalarName(std::string(64, 'a')));
  EXPECT_FALSE(ValidScalarName(std::string(65, 'a')));
  EXPECT_FALSE(ValidScalarName(""));
  EXPECT_FALSE(ValidScalarName("9x"));
  EXPECT_FALSE(ValidScalarName("a-b"));
  EXPECT_FALSE(ValidScalarName("a\"b"));
  EXPECT_TRUE(ValidPhaseName("eval.val-1_x"));
  EXPECT_FALSE(ValidPhaseName("ev al"));
  EXPECT_FALSE(ValidPhaseName(""));
}

// ---- Messages over a Unix datagram socket ---------------------------------------------------

TEST_F(SdkTest, RoundTripOfEveryMessageType) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Options o = Opts(SocketPath());
  o.template_name = "llama \"8b\"";
  o.user = "alice";
  o.project = "nlp";
  o.rank = 2;
  o.world_size = 8;
  o.local_rank = 2;
  o.log_files = {"/scratch/alice/run.log", "relative.log", "/scratch/alice/err.log"};
  {
    gpuwatch::Client gw(o);
    EXPECT_EQ(gw.address(), SocketPath());
    {
      auto step = gw.step(256);
      { auto data = gw.phase("data"); }
      { auto comm = gw.phase("comm"); }
      gw.log(2.3141, 1.07);
      EXPECT_TRUE(gw.scalar("lr", 0.0003));
      EXPECT_TRUE(gw.scalar("tokens", 524288));
    }
    { auto eval = gw.phase("eval"); }
    { auto ckpt = gw.phase("checkpoint"); }
    gw.annotate("switched to TP=4");
    gw.log_line("NCCL WARN Call to ibv_reg_mr failed\n", gpuwatch::Stream::kStderr);
    gw.log_line("plain");
    gw.end(3);
    EXPECT_EQ(gw.dropped(), 0u);
    EXPECT_EQ(gw.sent(), 10u);
  }
  ASSERT_TRUE(agent.WaitForLines(10));
  const std::vector<json> m = agent.Messages();
  ASSERT_EQ(Types(m), (std::vector<std::string>{"start", "step", "phase", "phase", "checkpoint",
                                                "checkpoint", "annotation", "log", "log", "end"}));
  for (const json& msg : m) {
    EXPECT_EQ(msg["job"], "job-1");
    EXPECT_EQ(msg["rank"], 2);
    ASSERT_TRUE(msg["t"].is_number());
    EXPECT_NEAR(
        msg["t"].get<double>(),
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
        60);
  }
  const json& start = m[0];
  EXPECT_EQ(start["template"], "llama \"8b\"");
  EXPECT_EQ(start["user"], "alice");
  EXPECT_EQ(start["project"], "nlp");
  EXPECT_EQ(start["world_size"], 8);
  EXPECT_EQ(start["local_rank"], 2);
  EXPECT_FALSE(start.contains("pid"));  // the kernel tells the agent (and translates it)
  EXPECT_EQ(start["log_files"],
            json::array({"/scratch/alice/run.log", "/scratch/alice/err.log"}));  // absolute only

  const json& step = m[1];
  EXPECT_EQ(step["step"], 0);
  EXPECT_EQ(step["samples"], 256);
  EXPECT_GT(step["duration_s"].get<double>(), 0);
  EXPECT_GE(step["data_wait_s"].get<double>(), 0);
  EXPECT_GE(step["comm_s"].get<double>(), 0);
  EXPECT_LE(step["data_wait_s"].get<double>(), step["duration_s"].get<double>());
  EXPECT_FALSE(step.contains("checkpoint_s"));  // no checkpoint phase in this step
  EXPECT_EQ(step["loss"], 2.3141);
  EXPECT_EQ(step["grad_norm"], 1.07);
  EXPECT_EQ(step["scalars"], (json{{"lr", 0.0003}, {"tokens", 524288}}));

  EXPECT_EQ(m[2]["name"], "eval");
  EXPECT_EQ(m[2]["state"], "begin");
  EXPECT_EQ(m[3]["state"], "end");
  EXPECT_EQ(m[4]["state"], "begin");
  EXPECT_EQ(m[5]["state"], "end");
  EXPECT_EQ(m[6]["text"], "switched to TP=4");
  EXPECT_EQ(m[7]["stream"], "stderr");
  EXPECT_EQ(m[7]["line"], "NCCL WARN Call to ibv_reg_mr failed");
  EXPECT_FALSE(m[8].contains("stream"));
  EXPECT_EQ(m[8]["line"], "plain");
  EXPECT_EQ(m[9]["exit_code"], 3);
}

// The agent refuses a whole `start` for one bad field (docs/job-protocol.md, jobs/job_protocol.cc).
TEST_F(SdkTest, StartFieldsAreMadeValidForTheAgent) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Options o = Opts(SocketPath());
  o.template_name = "tab\there" + std::string(200, 'x');
  o.user = "\x01";  // nothing left: left out
  o.project = "\xff";
  o.world_size = 0;
  o.log_files = {"/ok.log", "/new\nline.log", "/bad\xff.log", "/" + std::string(5000, 'p'),
                 "/\xc3\xa9.log"};
  { gpuwatch::Client gw(o); }
  ASSERT_TRUE(agent.WaitForLines(2));
  const json start = agent.Messages().at(0);
  EXPECT_EQ(start["template"], "tabhere" + std::string(121, 'x'));  // 128 bytes at most
  EXPECT_FALSE(start.contains("user"));
  EXPECT_EQ(start["project"], "?");
  EXPECT_FALSE(start.contains("world_size"));
  EXPECT_EQ(start["log_files"], json::array({"/ok.log", "/\xc3\xa9.log"}));
}

TEST_F(SdkTest, UserDefaultsToTheLoginName) {
  UnixReceiver agent(SocketPath());
  ScopedEnv::Set("USER", "bob");
  { gpuwatch::Client gw(Opts(SocketPath())); }
  ScopedEnv::Set("LOGNAME", "carol");
  { gpuwatch::Client gw(Opts(SocketPath())); }
  ASSERT_TRUE(agent.WaitForLines(4));
  const std::vector<json> m = agent.Messages();
  EXPECT_EQ(m.at(0)["user"], "bob");
  EXPECT_EQ(m.at(2)["user"], "carol");
}

TEST_F(SdkTest, NonFiniteNumbersAreLeftOut) {
  UnixReceiver agent(SocketPath());
  {
    gpuwatch::Client gw(Opts(SocketPath()));
    gw.log(std::nan(""), INFINITY);
    EXPECT_FALSE(gw.scalar("x", std::nan("")));
    EXPECT_FALSE(gw.scalar("y", -INFINITY));
    gw.step_done(0.5, std::nan(""));
    gpuwatch::StepReport r;
    r.duration_s = 0.25;
    r.samples = INFINITY;
    r.data_wait_s = INFINITY;
    r.loss = -INFINITY;
    gw.step_done(r);
    gw.flush();
    ASSERT_TRUE(agent.WaitForLines(3));
  }
  for (const std::string& d : agent.Datagrams()) {
    EXPECT_EQ(d.find("nan"), std::string::npos) << d;
    EXPECT_EQ(d.find("inf"), std::string::npos) << d;
  }
  const std::vector<json> m = agent.Messages();
  ASSERT_GE(m.size(), 3u);
  for (int i : {1, 2}) {
    EXPECT_EQ(m[i]["type"], "step");
    for (const char* key : {"samples", "loss", "grad_norm", "scalars", "data_wait_s"}) {
      EXPECT_FALSE(m[i].contains(key)) << key << " in " << m[i];
    }
  }
  EXPECT_EQ(m[1]["duration_s"], 0.5);
  EXPECT_EQ(m[2]["duration_s"], 0.25);
}

TEST_F(SdkTest, StepNumbersCountUpFromZeroOrFollowTheCaller) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Client gw(Opts(SocketPath()));
  { auto s = gw.step(); }
  gw.step_done(0.1);
  { auto s = gw.step(1, 100); }
  { auto s = gw.step(); }
  gw.step_done(0.1, 5, 200);
  gw.step_done(0.1);
  gw.flush();
  ASSERT_TRUE(agent.WaitForLines(7));
  std::vector<int64_t> numbers;
  for (const json& msg : agent.Messages()) {
    if (msg["type"] == "step") numbers.push_back(msg["step"].get<int64_t>());
  }
  EXPECT_EQ(numbers, (std::vector<int64_t>{0, 1, 100, 101, 200, 201}));
}

TEST_F(SdkTest, ScalarsAreValidatedAndBelongToOneStep) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Client gw(Opts(SocketPath()));
  EXPECT_FALSE(gw.scalar("bad name", 1));
  EXPECT_FALSE(gw.scalar("1x", 1));
  EXPECT_FALSE(gw.scalar(std::string(65, 'a'), 1));
  for (int i = 0; i < 32; ++i) EXPECT_TRUE(gw.scalar("s" + std::to_string(i), i));
  EXPECT_FALSE(gw.scalar("s32", 32));  // a 33rd
  EXPECT_TRUE(gw.scalar("s0", -1.5));  // overwrites
  gw.step_done(0.1);
  gw.step_done(0.1);
  gw.flush();
  ASSERT_TRUE(agent.WaitForLines(3));
  const std::vector<json> m = agent.Messages();
  ASSERT_EQ(m.size(), 3u);
  ASSERT_EQ(m[1]["scalars"].size(), 32u);
  EXPECT_EQ(m[1]["scalars"]["s0"], -1.5);
  EXPECT_EQ(m[1]["scalars"]["s31"], 31);
  EXPECT_FALSE(m[2].contains("scalars"));
}

TEST_F(SdkTest, PhasesBeforeAStepBelongToItAndLengthenIt) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Client gw(Opts(SocketPath()));
  {
    auto data = gw.phase("data");
    std::this_thread::sleep_for(20ms);
  }
  {
    auto step = gw.step(32);
    std::this_thread::sleep_for(5ms);
  }
  { auto step = gw.step(32); }
  gw.flush();
  ASSERT_TRUE(agent.WaitForLines(3));
  const std::vector<json> m = agent.Messages();
  ASSERT_EQ(m.size(), 3u);
  const double data = m[1]["data_wait_s"].get<double>();
  EXPECT_GE(data, 0.019);
  EXPECT_GE(m[1]["duration_s"].get<double>(), data + 0.004);
  EXPECT_FALSE(m[2].contains("data_wait_s"));  // nothing carried over
}

// A checkpoint between steps goes to the next step; an eval after it does not.
TEST_F(SdkTest, AnEvalBetweenACarriedPartAndTheStepIsNotPartOfTheStep) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Client gw(Opts(SocketPath()));
  {
    auto ckpt = gw.phase("checkpoint");
    std::this_thread::sleep_for(10ms);
  }
  {
    auto eval = gw.phase("eval");
    std::this_thread::sleep_for(60ms);
  }
  {
    auto step = gw.step();
    std::this_thread::sleep_for(5ms);
  }
  gw.flush();
  ASSERT_TRUE(agent.WaitForLines(6));
  const std::vector<json> m = agent.Messages();
  ASSERT_EQ(Types(m), (std::vector<std::string>{"start", "checkpoint", "checkpoint", "phase",
                                                "phase", "step"}));
  const double ckpt = m[5]["checkpoint_s"].get<double>();
  const double duration = m[5]["duration_s"].get<double>();
  EXPECT_GE(ckpt, 0.009);
  EXPECT_GE(duration, ckpt + 0.004);
  EXPECT_LT(duration, 0.055);  // 10 + 5 ms (+ scheduling), not the 60 ms eval
}

TEST_F(SdkTest, PartsNeverExceedTheStep) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Client gw(Opts(SocketPath()));
  gpuwatch::StepReport r;
  r.duration_s = 1;
  r.data_wait_s = 5;
  r.comm_s = -1;
  r.checkpoint_s = 0;
  gw.step_done(r);
  gw.flush();
  ASSERT_TRUE(agent.WaitForLines(2));
  const json step = agent.Messages().at(1);
  EXPECT_EQ(step["data_wait_s"], 1);
  EXPECT_FALSE(step.contains("comm_s"));
  EXPECT_EQ(step["checkpoint_s"], 0);
}

TEST_F(SdkTest, InvalidStepDurationsAreDroppedAndCounted) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Client gw(Opts(SocketPath()));
  gw.step_done(0);
  gw.step_done(-1);
  gw.step_done(std::nan(""));
  gw.step_done(86400);
  gw.flush();
  EXPECT_EQ(gw.dropped(), 4u);
  EXPECT_EQ(gw.sent(), 1u);  // the start
}

TEST_F(SdkTest, LongLinesAndAnnotationsAreCut) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Client gw(Opts(SocketPath()));
  gw.log_line(std::string(20000, 'x'));
  gw.log_line(std::string(20000, '\x01'));  // escaped 6x: cut to fit a datagram
  gw.log_line("with crlf\r\n");
  gw.annotate(std::string(5000, 'a'));
  gw.annotate("");  // ignored
  gw.flush();
  ASSERT_TRUE(agent.WaitForLines(5));
  for (const std::string& d : agent.Datagrams()) EXPECT_LE(d.size(), 65000u);
  const std::vector<json> m = agent.Messages();
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[1]["line"].get<std::string>(), std::string(16384, 'x'));
  EXPECT_EQ(m[2]["line"].get<std::string>(), std::string(10000, '\x01'));
  EXPECT_EQ(m[3]["line"], "with crlf");
  EXPECT_EQ(m[4]["text"].get<std::string>(), std::string(4096, 'a'));
}

// ---- Batching -------------------------------------------------------------------------------

TEST_F(SdkTest, BatchesHoldAtMostBatchMaxMessages) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Options o = Opts(SocketPath());
  o.batch_max = 4;
  gpuwatch::Client gw(o);
  for (int i = 0; i < 10; ++i) gw.step_done(0.1);
  ASSERT_TRUE(agent.WaitForLines(9));
  EXPECT_EQ(agent.Datagrams().size(), 3u);
  gw.flush();
  ASSERT_TRUE(agent.WaitForLines(11));
  std::vector<size_t> sizes;
  for (const std::string& d : agent.Datagrams())
    sizes.push_back(std::count(d.begin(), d.end(), '\n'));
  EXPECT_EQ(sizes, (std::vector<size_t>{1, 4, 4, 2}));  // start alone, then steps
}

TEST_F(SdkTest, ABatchIsSentOnceItsIntervalHasPassed) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Options o = Opts(SocketPath());
  o.batch_interval = 100ms;
  gpuwatch::Client gw(o);
  gw.step_done(0.1);
  gw.step_done(0.1);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(agent.CountLines(), 1u);  // the start
  std::this_thread::sleep_for(90ms);
  gw.step_done(0.1);  // 110 ms after the first: all three go
  ASSERT_TRUE(agent.WaitForLines(4));
  EXPECT_EQ(agent.Datagrams().size(), 2u);
}

TEST_F(SdkTest, DatagramsAreSplitUnder65000Bytes) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Client gw(Opts(SocketPath()));
  for (int i = 0; i < 14; ++i) {
    gw.log_line(std::to_string(i) + ":" + std::string(10000, 'y'));
  }
  gw.flush();
  ASSERT_TRUE(agent.WaitForLines(15));
  EXPECT_EQ(gw.dropped(), 0u);
  const std::vector<std::string> datagrams = agent.Datagrams();
  ASSERT_EQ(datagrams.size(), 4u);  // the start, then 6 + 6 + 2 lines
  for (const std::string& d : datagrams) {
    EXPECT_LE(d.size(), 65000u);
    EXPECT_EQ(d.back(), '\n');
  }
  const std::vector<json> m = agent.Messages();
  ASSERT_EQ(m.size(), 15u);
  for (int i = 0; i < 14; ++i) {
    const std::string line = m[i + 1]["line"].get<std::string>();
    EXPECT_EQ(line.substr(0, line.find(':')), std::to_string(i));
  }
}

TEST_F(SdkTest, StartIsSentAgainAfterItsPeriod) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Options o = Opts(SocketPath());
  o.batch_max = 1;
  o.start_period = 50ms;
  gpuwatch::Client gw(o);
  gw.step_done(0.1);
  std::this_thread::sleep_for(60ms);
  gw.step_done(0.1);
  gw.step_done(0.1);
  ASSERT_TRUE(agent.WaitForLines(5));
  EXPECT_EQ(Types(agent.Messages()),
            (std::vector<std::string>{"start", "step", "start", "step", "step"}));
}

TEST_F(SdkTest, DestructorSendsEndZeroOrOneWhenUnwinding) {
  UnixReceiver agent(SocketPath());
  { gpuwatch::Client gw(Opts(SocketPath())); }
  try {
    gpuwatch::Client gw(Opts(SocketPath()));
    throw std::runtime_error("training failed");
  } catch (const std::runtime_error&) {
  }
  {
    gpuwatch::Client gw(Opts(SocketPath()));
    gw.end(7);
    gw.end(8);  // only the first counts
  }
  ASSERT_TRUE(agent.WaitForLines(6));
  std::vector<int> codes;
  for (const json& msg : agent.Messages()) {
    if (msg["type"] == "end") codes.push_back(msg["exit_code"].get<int>());
  }
  EXPECT_EQ(codes, (std::vector<int>{0, 1, 7}));
}

TEST_F(SdkTest, MovedScopesReportOnce) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Client gw(Opts(SocketPath()));
  {
    gpuwatch::StepScope a = gw.step(1);
    gpuwatch::StepScope b = std::move(a);
    gpuwatch::PhaseScope p = gw.phase("eval");
    gpuwatch::PhaseScope q = std::move(p);
    q.end();
    b.set_samples(7);
    b.finish();
  }
  { auto invalid = gw.phase("not valid!"); }  // does nothing
  gw.flush();
  ASSERT_TRUE(agent.WaitForLines(4));
  const std::vector<json> m = agent.Messages();
  EXPECT_EQ(Types(m), (std::vector<std::string>{"start", "phase", "phase", "step"}));
  EXPECT_EQ(m.back()["samples"], 7);
}

// ---- The agent absent, slow, gone, back ------------------------------------------------------

TEST_F(SdkTest, AbsentAgentNeverBlocksAndDropsAreCounted) {
  gpuwatch::Client gw(Opts(dir_.path() + "/nobody.sock"));
  const int kSteps = 10000;
  Clock::duration slowest{};
  const auto t0 = Clock::now();
  for (int i = 0; i < kSteps; ++i) {
    const auto s0 = Clock::now();
    {
      auto step = gw.step(64);
      gw.log(1.0, 2.0);
    }
    if (i % 64 == 0) gw.flush();
    slowest = std::max(slowest, Clock::now() - s0);
  }
  gw.flush();
  const auto total = Clock::now() - t0;
  EXPECT_EQ(gw.sent(), 0u);
  // Each failed batch brings a `start` to the next one, for the agent's return: those count too.
  EXPECT_GE(gw.dropped(), kSteps + 1u);
  EXPECT_LE(gw.dropped(), kSteps + 1u + kSteps / 64 + 2);  // 158 failed flushes
  EXPECT_LT(total, 1s);
  EXPECT_LT(slowest, 50ms);
}

// No agent socket anywhere: messages are dropped without even being formatted, and the SDK
// looks again for one every retry_period. When the agent appears, it is greeted with `start`.
TEST_F(SdkTest, AgentAppearingLaterIsFoundAndGreeted) {
  const std::string uid = std::to_string(::getuid());
  for (const std::string& p :
       std::vector<std::string>{"/run/gpuwatch/job.sock", "/tmp/gpuwatch-" + uid + "/job.sock"}) {
    struct stat st;
    if (::stat(p.c_str(), &st) == 0) GTEST_SKIP() << "a real agent socket exists: " << p;
  }
  ScopedEnv::Set("XDG_RUNTIME_DIR", dir_.path());
  gpuwatch::Options o = Opts("");
  o.batch_max = 1;
  o.retry_period = 30ms;
  gpuwatch::Client gw(o);
  EXPECT_EQ(gw.address(), "");
  for (int i = 0; i < 5; ++i) gw.step_done(0.1);
  EXPECT_EQ(gw.dropped(), 6u);

  ASSERT_EQ(::mkdir((dir_.path() + "/gpuwatch").c_str(), 0755), 0);
  UnixReceiver agent(dir_.path() + "/gpuwatch/job.sock");
  std::this_thread::sleep_for(40ms);
  gw.step_done(0.1);
  gw.step_done(0.1);
  ASSERT_TRUE(agent.WaitForLines(3));
  EXPECT_EQ(gw.address(), dir_.path() + "/gpuwatch/job.sock");
  const std::vector<json> m = agent.Messages();
  EXPECT_EQ(Types(m), (std::vector<std::string>{"start", "step", "step"}));
  EXPECT_EQ(m[1]["step"], 5);
  EXPECT_EQ(gw.sent(), 3u);
}

TEST_F(SdkTest, AddressFromGpuwatchSocketUnlessOptionsSayOtherwise) {
  UnixReceiver agent(SocketPath());
  ScopedEnv::Set("GPUWATCH_SOCKET", SocketPath());
  {
    gpuwatch::Client gw(Opts(""));
    EXPECT_EQ(gw.address(), SocketPath());
  }
  ASSERT_TRUE(agent.WaitForLines(2));  // start, end
  {
    gpuwatch::Client gw(Opts(dir_.path() + "/other.sock"));
    EXPECT_EQ(gw.address(), dir_.path() + "/other.sock");
    EXPECT_EQ(gw.dropped(), 1u);
  }
  EXPECT_EQ(agent.CountLines(), 2u);
}

// gpuwatch::Queued(): one `queued` message for the ledger's queue wait (docs/job-protocol.md),
// the job from the scheduler's environment, the fields given and no others, through
// $GPUWATCH_SOCKET; with no agent, false at once.
TEST_F(SdkTest, QueuedSendsOneMessageForTheQueueWait) {
  UnixReceiver agent(SocketPath());
  ScopedEnv::Set("GPUWATCH_SOCKET", SocketPath());
  ScopedEnv::Set("SLURM_JOB_ID", "4242");
  gpuwatch::Options o;
  o.template_name = "llama-pretrain";
  o.project = "nlp";
  const auto t = std::chrono::system_clock::time_point(std::chrono::seconds(1764460800)) + 500ms;
  EXPECT_TRUE(gpuwatch::Queued(o, t));
  ASSERT_TRUE(agent.WaitForLines(1));
  const auto m = agent.Messages();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], json::parse(R"({"type":"queued","job":"4242","template":"llama-pretrain",
                                  "project":"nlp","t":1764460800.5})"));
  o.address = dir_.path() + "/none.sock";
  const auto start = Clock::now();
  EXPECT_FALSE(gpuwatch::Queued(o));
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_EQ(agent.CountLines(), 1u);
}

TEST_F(SdkTest, AgentNotDrainingNeverBlocksAStep) {
  UnixReceiver agent(SocketPath(), /*drain=*/false);
  gpuwatch::Options o = Opts(SocketPath());
  o.batch_max = 1;  // a datagram per step: the worst case
  gpuwatch::Client gw(o);
  const int kSteps = 5000;
  Clock::duration slowest{};
  const auto t0 = Clock::now();
  for (int i = 0; i < kSteps; ++i) {
    const auto s0 = Clock::now();
    {
      auto step = gw.step(64);
      { auto comm = gw.phase("comm"); }
      gw.log(1.0, 2.0);
    }
    slowest = std::max(slowest, Clock::now() - s0);
  }
  const double mean_us =
      std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kSteps;
  EXPECT_GT(gw.dropped(), 0u);
  EXPECT_GT(gw.sent(), 0u);
  EXPECT_EQ(gw.sent() + gw.dropped(), kSteps + 1u);
  EXPECT_LT(mean_us, 100.0);  // ~2 µs; generous for sanitizers and a shared machine
  EXPECT_LT(slowest, 50ms);
  std::printf("queue full: %llu sent, %llu dropped, %.2f us/step, slowest %.1f us\n",
              static_cast<unsigned long long>(gw.sent()),
              static_cast<unsigned long long>(gw.dropped()), mean_us,
              std::chrono::duration<double, std::micro>(slowest).count());
}

TEST_F(SdkTest, AgentRestartedOnTheSamePathIsPickedUp) {
  gpuwatch::Options o = Opts(SocketPath());
  o.batch_max = 1;
  auto agent = std::make_unique<UnixReceiver>(SocketPath());
  gpuwatch::Client gw(o);
  gw.step_done(0.1);
  ASSERT_TRUE(agent->WaitForLines(2));
  agent.reset();  // closed and unlinked
  gw.step_done(0.1);
  gw.step_done(0.1);
  EXPECT_EQ(gw.dropped(), 3u);  // two steps and the `start` meant for the agent's return
  agent = std::make_unique<UnixReceiver>(SocketPath());
  gw.step_done(0.1);
  ASSERT_TRUE(agent->WaitForLines(2));
  const std::vector<json> m = agent->Messages();
  EXPECT_EQ(Types(m), (std::vector<std::string>{"start", "step"}));
  EXPECT_EQ(m[1]["step"], 3);
}

TEST_F(SdkTest, ManyThreadsShareOneClient) {
  UnixReceiver agent(SocketPath());
  gpuwatch::Options o = Opts(SocketPath());
  o.batch_max = 16;
  gpuwatch::Client gw(o);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&gw, t] {
      for (int i = 0; i < 500; ++i) {
        auto step = gw.step(1);
        gw.scalar("thread", t);
        gw.log_line("thread " + std::to_string(t));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  gw.flush();
  EXPECT_EQ(gw.sent() + gw.dropped(), 4001u);
  ASSERT_TRUE(agent.WaitForLines(gw.sent()));
  EXPECT_EQ(agent.Messages().size(), gw.sent());
}

// ---- UDP and TCP ----------------------------------------------------------------------------

int BindLoopback(int type, int* port) {
  const int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("bind loopback");
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

TEST_F(SdkTest, UdpRoundTrip) {
  int port = 0;
  const int fd = BindLoopback(SOCK_DGRAM, &port);
  {
    gpuwatch::Client gw(Opts("udp://127.0.0.1:" + std::to_string(port)));
    gw.step_done(0.5, 8);
    gw.end(0);
    EXPECT_EQ(gw.sent(), 3u);
  }
  std::string all;
  char buf[65536];
  pollfd pfd{fd, POLLIN, 0};
  while (::poll(&pfd, 1, 50) > 0) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    all.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const std::vector<json> m = ParseLines(all);
  EXPECT_EQ(Types(m), (std::vector<std::string>{"start", "step", "end"}));
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m[0]["pid"], ::getpid());  // no credentials on UDP: the message says
}

TEST_F(SdkTest, BadAddressesDropEverything) {
  for (const std::string& a :
       std::vector<std::string>{"udp://127.0.0.1", "tcp://:80", "udp://127.0.0.1:99999",
                                "tcp://[::1:80", "/" + std::string(200, 'x')}) {
    gpuwatch::Client gw(Opts(a));
    gw.step_done(0.1);
    gw.flush();
    EXPECT_EQ(gw.sent(), 0u) << a;
    EXPECT_EQ(gw.dropped(), 2u) << a;
  }
}

// Reads lines from an accepted TCP connection.
std::vector<json> ReadTcpLines(int fd, size_t want) {
  std::string all;
  char buf[65536];
  const auto deadline = Clock::now() + 1500ms;
  while (static_cast<size_t>(std::count(all.begin(), all.end(), '\n')) < want &&
         Clock::now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 20) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    all.append(buf, static_cast<size_t>(n));
  }
  return ParseLines(all);
}

int Accept(int listener) {
  pollfd pfd{listener, POLLIN, 0};
  if (::poll(&pfd, 1, 1500) <= 0) return -1;
  return ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
}

TEST_F(SdkTest, TcpRoundTripSurvivesThePeerClosing) {
  ::signal(SIGPIPE, SIG_DFL);  // a write to a closed peer without MSG_NOSIGNAL kills the test
  int port = 0;
  const int listener = BindLoopback(SOCK_STREAM, &port);
  ASSERT_EQ(::listen(listener, 8), 0);
  gpuwatch::Options o = Opts("tcp://127.0.0.1:" + std::to_string(port));
  o.batch_max = 1;
  o.retry_period = 20ms;
  gpuwatch::Client gw(o);
  int conn = Accept(listener);
  ASSERT_GE(conn, 0);
  for (int i = 0; i < 3; ++i) gw.step_done(0.1);
  std::vector<json> m = ReadTcpLines(conn, 4);
  EXPECT_EQ(Types(m), (std::vector<std::string>{"start", "step", "step", "step"}));

  ::close(conn);  // the agent goes away
  const uint64_t sent_before = gw.sent();
  for (int i = 0; i < 20; ++i) {
    gw.step_done(0.1);
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_GT(gw.dropped(), 0u);

  conn = Accept(listener);  // the SDK came back after retry_period
  ASSERT_GE(conn, 0);
  ASSERT_TRUE(WaitFor([&] {
    gw.step_done(0.1);
    std::this_thread::sleep_for(5ms);
    return gw.sent() > sent_before + 2;
  }));
  m = ReadTcpLines(conn, 2);
  ASSERT_GE(m.size(), 2u);
  EXPECT_EQ(m[0]["type"], "start");
  EXPECT_EQ(m[1]["type"], "step");

  ::close(listener);
  ::close(conn);
  for (int i = 0; i < 50; ++i) gw.step_done(0.1);  // refused: dropped, never blocking
  gw.end(0);
}

TEST_F(SdkTest, TcpWithNoListenerDropsWithoutBlocking) {
  int port = 0;
  const int fd = BindLoopback(SOCK_STREAM, &port);
  ::close(fd);  // a port nobody listens on
  const auto t0 = Clock::now();
  gpuwatch::Options o = Opts("tcp://127.0.0.1:" + std::to_string(port));
  o.batch_max = 1;
  gpuwatch::Client gw(o);
  for (int i = 0; i < 1000; ++i) gw.step_done(0.1);
  EXPECT_LT(Clock::now() - t0, 500ms);
  EXPECT_EQ(gw.sent(), 0u);
  EXPECT_EQ(gw.dropped(), 1001u);
}

}  // namespace
