// Cost of the C++ SDK (sdk/cpp/gpuwatch.hpp) per training step: a StepScope, one PhaseScope
// and log(loss, grad_norm), with default batching (64 messages / 200 ms), against
//   - a live agent stand-in (a thread draining a Unix datagram socket),
//   - no agent socket anywhere (messages dropped unformatted; the default paths are searched
//     again every 5 s),
//   - a configured socket path with nobody there (formatted, sendto fails once per batch),
//   - an agent that does not drain (sendto fails with EAGAIN once per batch).
// Run: build/<dir>/bench/job_sdk/cpp_sdk_bench
#include <benchmark/benchmark.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "gpuwatch.hpp"

namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gwbench-XXXXXX";
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

// A Unix datagram socket at path; with drain, a thread receives and discards what arrives.
class Receiver {
 public:
  Receiver(const std::string& path, bool drain) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("bind " + path);
    }
    if (drain) {
      thread_ = std::thread([this] {
        static char buf[1 << 17];
        while (!stop_.load(std::memory_order_relaxed)) {
          pollfd pfd{fd_, POLLIN, 0};
          if (::poll(&pfd, 1, 10) <= 0) continue;
          while (::recv(fd_, buf, sizeof buf, MSG_DONTWAIT) > 0) {
          }
        }
      });
    }
  }
  ~Receiver() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

void RunSteps(benchmark::State& state, gpuwatch::Client& gw) {
  double loss = 2.5;
  for (auto _ : state) {
    auto step = gw.step(256);
    {
      auto data = gw.phase("data");
      benchmark::ClobberMemory();
    }
    gw.log(loss, 1.07);
    loss *= 0.9999;
  }
  gw.flush();
  state.counters["sent"] = static_cast<double>(gw.sent());
  state.counters["dropped"] = static_cast<double>(gw.dropped());
}

void BM_StepLiveAgent(benchmark::State& state) {
  TempDir dir;
  Receiver agent(dir.path() + "/job.sock", /*drain=*/true);
  gpuwatch::Options o;
  o.job = "bench";
  o.address = dir.path() + "/job.sock";
  gpuwatch::Client gw(o);
  RunSteps(state, gw);
}
BENCHMARK(BM_StepLiveAgent);

// The same with four scalars per step.
void BM_StepLiveAgentFourScalars(benchmark::State& state) {
  TempDir dir;
  Receiver agent(dir.path() + "/job.sock", /*drain=*/true);
  gpuwatch::Options o;
  o.job = "bench";
  o.address = dir.path() + "/job.sock";
  gpuwatch::Client gw(o);
  double lr = 3e-4;
  for (auto _ : state) {
    auto step = gw.step(256);
    { auto data = gw.phase("data"); }
    gw.log(2.5, 1.07);
    gw.scalar("lr", lr);
    gw.scalar("tokens", 524288);
    gw.scalar("loss_scale", 65536);
    gw.scalar("mfu", 0.41);
    lr *= 0.99999;
  }
  gw.flush();
  state.counters["dropped"] = static_cast<double>(gw.dropped());
}
BENCHMARK(BM_StepLiveAgentFourScalars);

void BM_StepNoAgentFound(benchmark::State& state) {
  TempDir dir;
  const char* old_socket = std::getenv("GPUWATCH_SOCKET");
  const char* old_xdg = std::getenv("XDG_RUNTIME_DIR");
  const std::string saved_socket = old_socket ? old_socket : "";
  const std::string saved_xdg = old_xdg ? old_xdg : "";
  ::unsetenv("GPUWATCH_SOCKET");
  ::setenv("XDG_RUNTIME_DIR", dir.path().c_str(), 1);
  {
    gpuwatch::Options o;
    o.job = "bench";
    gpuwatch::Client gw(o);
    if (!gw.address().empty()) state.SkipWithError("an agent socket exists on this machine");
    RunSteps(state, gw);
  }
  if (old_socket) ::setenv("GPUWATCH_SOCKET", saved_socket.c_str(), 1);
  if (old_xdg) {
    ::setenv("XDG_RUNTIME_DIR", saved_xdg.c_str(), 1);
  } else {
    ::unsetenv("XDG_RUNTIME_DIR");
  }
}
BENCHMARK(BM_StepNoAgentFound);

void BM_StepNoAgentAtPath(benchmark::State& state) {
  TempDir dir;
  gpuwatch::Options o;
  o.job = "bench";
  o.address = dir.path() + "/nobody.sock";
  gpuwatch::Client gw(o);
  RunSteps(state, gw);
}
BENCHMARK(BM_StepNoAgentAtPath);

void BM_StepAgentNotDraining(benchmark::State& state) {
  TempDir dir;
  Receiver agent(dir.path() + "/job.sock", /*drain=*/false);
  gpuwatch::Options o;
  o.job = "bench";
  o.address = dir.path() + "/job.sock";
  gpuwatch::Client gw(o);
  RunSteps(state, gw);
}
BENCHMARK(BM_StepAgentNotDraining);

// What the Client's lock costs per call when uncontended (a step takes it three times).
void BM_MutexUncontended(benchmark::State& state) {
  std::mutex mu;
  for (auto _ : state) {
    std::lock_guard<std::mutex> lock(mu);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_MutexUncontended);

}  // namespace

BENCHMARK_MAIN();
