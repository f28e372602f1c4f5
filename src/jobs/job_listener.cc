#include "jobs/job_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "common/log.h"

namespace gpuwatch::jobs {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

Result<std::pair<std::string, std::string>> SplitHostPort(const std::string& addr) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon + 1 == addr.size())
    return Status::InvalidArgument("bad address '" + addr + "': want host:port");
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return std::make_pair(host, addr.substr(colon + 1));
}

// Binds an inet socket of `type` to "host:port"; returns the fd and the bound port.
Result<std::pair<int, int>> BindInet(const std::string& addr, int type) {
  auto hp = SplitHostPort(addr);
  if (!hp.ok()) return hp.status();
  addrinfo hints{};
  hints.ai_socktype = type;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(hp->first.c_str(), hp->second.c_str(), &hints, &res); rc != 0)
    return Status::InvalidArgument("bad address '" + addr + "': " + gai_strerror(rc));
  int fd = socket(res->ai_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return Status::IoError(Errno("socket for " + addr));
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 ||
      (type == SOCK_STREAM && listen(fd, 64) != 0)) {
    Status st = Status::IoError(Errno("cannot listen on " + addr));
    freeaddrinfo(res);
    close(fd);
    return st;
  }
  freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  int port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return std::make_pair(fd, port);
}

// A directory we may put a socket in: created 0755 when missing; an existing one must be a
// real directory (not a symlink someone planted in /tmp) owned by us or root.
Status PrepareDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Status::IoError(Errno(dir));
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return Status::IoError(Errno(dir));
  if (!S_ISDIR(st.st_mode)) return Status::PermissionDenied(dir + " is not a directory");
  if (st.st_uid != geteuid() && st.st_uid != 0)
    return Status::PermissionDenied(dir + " belongs to another user");
  // Anyone who may write the directory could replace the socket with their own.
  if ((st.st_mode & S_IWOTH) ||
      ((st.st_mode & S_IWGRP) && st.st_gid != getegid() && st.st_gid != 0))
    if (!(st.st_mode & S_ISVTX))
      return Status::PermissionDenied(dir + " is writable by others: the socket could be replaced");
  return Status::Ok();
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

JobListener::JobListener(JobListenerOptions options, JobRegistry* registry,
                         std::function<int64_t()> clock_ms)
    : options_(std::move(options)), registry_(registry), clock_ms_(std::move(clock_ms)) {}

JobListener::~JobListener() { Stop(); }

Status JobListener::BindUnix(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sa.sun_path))
    return Status::InvalidArgument("job socket path too long: " + path);
  std::memcpy(sa.sun_path, path.data(), path.size());
  if (Status st = PrepareDir(DirOf(path)); !st.ok()) return st;
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IoError(Errno("socket"));
  // A socket file left by an agent that died: remove it, unless an agent still answers there.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      close(fd);
      return Status::InvalidArgument(path + " exists and is not a socket");
    }
    int probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    bool live = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
    if (probe >= 0) close(probe);
    if (live) {
      close(fd);
      return Status::Unavailable(path + " is in use by another agent");
    }
    unlink(path.c_str());
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    Status s = Status::IoError(Errno("cannot bind " + path));
    close(fd);
    return s;
  }
  chmod(path.c_str(), options_.socket_mode);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &options_.receive_buffer_bytes,
             sizeof(options_.receive_buffer_bytes));
  unix_fd_ = fd;
  bound_path_ = path;
  return Status::Ok();
}

Status JobListener::Start() {
  const std::string& req = options_.socket_path;
  if (!req.empty() && req != "off") {
    Status st = BindUnix(req);
    if (!st.ok() && req == kDefaultJobSocket && st.code() != StatusCode::kUnavailable) {
      // Not root: a path the user can write, in the order the SDKs look for it.
      std::vector<std::string> fallbacks;
      if (const char* xdg = getenv("XDG_RUNTIME_DIR"); xdg && *xdg)
        fallbacks.push_back(std::string(xdg) + "/gpuwatch/job.sock");
      fallbacks.push_back("/tmp/gpuwatch-" + std::to_string(geteuid()) + "/job.sock");
      for (const auto& f : fallbacks) {
        Status fs = BindUnix(f);
        if (fs.ok()) {
          GW_LOG_INFO("job socket: {} ({}); jobs find it, or set GPUWATCH_SOCKET={}", f,
                      st.message(), f);
          st = Status::Ok();
          break;
        }
      }
    }
    if (!st.ok()) return st;
  }
  if (!options_.udp.empty()) {
    auto b = BindInet(options_.udp, SOCK_DGRAM);
    if (!b.ok()) return b.status();
    udp_fd_ = b->first;
    udp_port_ = b->second;
    setsockopt(udp_fd_, SOL_SOCKET, SO_RCVBUF, &options_.receive_buffer_bytes,
               sizeof(options_.receive_buffer_bytes));
  }
  if (!options_.tcp.empty()) {
    auto b = BindInet(options_.tcp, SOCK_STREAM);
    if (!b.ok()) return b.status();
    tcp_fd_ = b->first;
    tcp_port_ = b->second;
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Status::IoError(Errno("eventfd"));
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void JobListener::Stop() {
  if (thread_.joinable()) {
    stop_ = true;
    uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof(one)) < 0) {
      // The thread also wakes every second; it will see stop_.
    }
    thread_.join();
  }
  for (int* fd : {&unix_fd_, &udp_fd_, &tcp_fd_, &wake_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  if (!bound_path_.empty()) {
    unlink(bound_path_.c_str());
    bound_path_.clear();
  }
}

ListenerStats JobListener::stats() const {
  return {datagrams_.load(), bytes_.load(), tcp_connections_.load(), tcp_refused_.load(),
          tcp_idle_closed_.load()};
}

void JobListener::HandlePayload(std::string_view payload, const Sender& sender) {
  const int64_t now_ms = clock_ms_();
  // TCP payloads (no credentials) are runs of complete stream lines, each within the limit.
  DatagramResult r =
      ParseJobDatagram(payload, static_cast<double>(now_ms) / 1000, !sender.verified());
  registry_->CountRejected(r.rejected);
  if (!r.first_detail.empty())
    GW_LOG_DEBUG("job protocol: rejected a message from pid {}: {}",
                 sender.pid ? std::to_string(*sender.pid) : "?", r.first_detail);
  for (const auto& m : r.messages) registry_->Accept(m, sender, now_ms).has_value();
}

void JobListener::Run() {
  // One spare byte: a datagram that fills the buffer is over the limit (MSG_TRUNC says so too).
  std::vector<char> buf(kMaxDatagramBytes + 1);
  struct Conn {
    std::string pending;
    int64_t last_ms = 0;  // the last byte received (or the accept)
  };
  std::map<int, Conn> conns;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  while (!stop_) {
    std::vector<pollfd> fds;
    for (int fd : {wake_fd_, unix_fd_, udp_fd_, tcp_fd_})
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    for (const auto& [fd, _] : conns) fds.push_back({fd, POLLIN, 0});
    int n = poll(fds.data(), fds.size(), 1000);
    const int64_t now_ms = clock_ms_();
    for (auto it = conns.begin(); it != conns.end();) {
      if (now_ms - it->second.last_ms >= options_.tcp_idle_timeout_ms) {
        tcp_idle_closed_++;
        close(it->first);
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
    if (n <= 0) continue;
    for (const auto& p : fds) {
      if (!(p.revents & (POLLIN | POLLERR | POLLHUP))) continue;
      if (p.fd == wake_fd_) continue;
      if (p.fd == unix_fd_ || p.fd == udp_fd_) {
        // Drain what is queued, a bounded number per wake-up so TCP clients get their turn.
        for (int i = 0; i < 256; ++i) {
          iovec iov{buf.data(), buf.size()};
          msghdr msg{};
          msg.msg_iov = &iov;
          msg.msg_iovlen = 1;
          if (p.fd == unix_fd_) {
            msg.msg_control = control;
            msg.msg_controllen = sizeof(control);
          }
          ssize_t got = recvmsg(p.fd, &msg, MSG_DONTWAIT | MSG_TRUNC);
          if (got < 0) break;
          datagrams_++;
          bytes_ += static_cast<uint64_t>(got);
          Sender sender;
          if (p.fd == unix_fd_) {
            for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
              if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
                ucred cred{};
                std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
                sender.pid = static_cast<uint32_t>(cred.pid);
                sender.uid = cred.uid;
              }
            }
          }
          if (static_cast<size_t>(got) > kMaxDatagramBytes || (msg.msg_flags & MSG_TRUNC)) {
            RejectCounts c{};
            c[static_cast<size_t>(RejectReason::kOversized)] = 1;
            registry_->CountRejected(c);
            continue;
          }
          HandlePayload(std::string_view(buf.data(), static_cast<size_t>(got)), sender);
        }
        continue;
      }
      if (p.fd == tcp_fd_) {
        int c = accept4(tcp_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) continue;
        if (conns.size() >= options_.max_tcp_connections) {
          auto idlest = conns.begin();
          for (auto i = conns.begin(); i != conns.end(); ++i)
            if (i->second.last_ms < idlest->second.last_ms) idlest = i;
          if (idlest == conns.end() ||
              now_ms - idlest->second.last_ms < options_.tcp_evict_idle_ms) {
            tcp_refused_++;
            close(c);
            continue;
          }
          tcp_idle_closed_++;
          close(idlest->first);
          conns.erase(idlest);
        }
        tcp_connections_++;
        conns[c].last_ms = now_ms;
        continue;
      }
      auto it = conns.find(p.fd);
      if (it == conns.end()) continue;
      ssize_t got = recv(p.fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      bool close_conn = got <= 0;
      if (got > 0) {
        bytes_ += static_cast<uint64_t>(got);
        it->second.last_ms = now_ms;
        std::string& pend = it->second.pending;
        pend.append(buf.data(), static_cast<size_t>(got));
        size_t last_nl = pend.rfind('\n');
        if (last_nl != std::string::npos) {
          HandlePayload(std::string_view(pend).substr(0, last_nl + 1), Sender{});
          pend.erase(0, last_nl + 1);
        }
        if (pend.size() > kMaxDatagramBytes) {
          RejectCounts c{};
          c[static_cast<size_t>(RejectReason::kOversized)] = 1;
          registry_->CountRejected(c);
          close_conn = true;
        }
      }
      if (close_conn) {
        // A last line without its newline still counts when the peer closes cleanly.
        if (got == 0 && !it->second.pending.empty()) HandlePayload(it->second.pending, Sender{});
        close(p.fd);
        conns.erase(it);
      }
    }
  }
  for (const auto& [fd, _] : conns) close(fd);
}

}  // namespace gpuwatch::jobs
