// JobListener: the agent's end of the job protocol (docs/job-protocol.md). Binds the Unix
// datagram socket (with SO_PASSCRED, so every datagram carries its sender's pid and uid from
// the kernel) and optionally loopback UDP and TCP, parses what arrives and hands it to the
// JobRegistry.
//
// One thread polls every socket. Nothing a client sends can block it for long: datagrams are
// read whole, TCP connections are non-blocking with a bounded line buffer each, and the number
// of TCP connections is capped. Thread-safety: Start/Stop from one thread; the port and path
// accessors and stats() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "common/status.h"
#include "jobs/job_registry.h"

namespace gpuwatch::jobs {

inline constexpr char kDefaultJobSocket[] = "/run/gpuwatch/job.sock";

struct JobListenerOptions {
  // The Unix socket. kDefaultJobSocket falls back to a user-writable path when it cannot be
  // bound (docs/job-protocol.md); any other path is used as given. "" or "off": none.
  std::string socket_path = kDefaultJobSocket;
  unsigned socket_mode = 0666;
  std::string udp;  // "host:port" ("127.0.0.1:9471"); "" = off; port 0 = any free port
  std::string tcp;  // as udp
  size_t max_tcp_connections = 64;
  // A TCP reporter silent this long is closed (the SDKs reconnect on their next message); when
  // every slot is taken, a newcomer replaces the connection idle longest if it has been idle at
  // least tcp_evict_idle_ms, so idle connections cannot lock reporters out (issue 17, D9).
  int64_t tcp_idle_timeout_ms = 120'000;
  int64_t tcp_evict_idle_ms = 5'000;
  int receive_buffer_bytes = 4 << 20;  // SO_RCVBUF: bursts of every local rank at once
};

struct ListenerStats {
  uint64_t datagrams = 0, bytes = 0, tcp_connections = 0, tcp_refused = 0;
  uint64_t tcp_idle_closed = 0;  // closed idle, or replaced by a newcomer
};

class JobListener {
 public:
  // `clock_ms`: Unix ms now (the reference for messages' `t`).
  JobListener(JobListenerOptions options, JobRegistry* registry, std::function<int64_t()> clock_ms);
  ~JobListener();
  JobListener(const JobListener&) = delete;
  JobListener& operator=(const JobListener&) = delete;

  // Binds the sockets and starts the thread. An error names the address that failed.
  Status Start();
  void Stop();  // idempotent; removes the socket file

  const std::string& socket_path() const { return bound_path_; }
  int udp_port() const { return udp_port_; }
  int tcp_port() const { return tcp_port_; }
  ListenerStats stats() const;

 private:
  Status BindUnix(const std::string& path);
  void Run();
  void HandlePayload(std::string_view payload, const Sender& sender);

  JobListenerOptions options_;
  JobRegistry* registry_;
  std::function<int64_t()> clock_ms_;
  std::string bound_path_;
  int unix_fd_ = -1, udp_fd_ = -1, tcp_fd_ = -1, wake_fd_ = -1;
  int udp_port_ = 0, tcp_port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> datagrams_{0}, bytes_{0}, tcp_connections_{0}, tcp_refused_{0};
  std::atomic<uint64_t> tcp_idle_closed_{0};
};

}  // namespace gpuwatch::jobs
