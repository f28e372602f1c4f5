// gpuwatch C++ SDK: tells the node's gpuwatch agent what a training job is doing (who each rank
// is, every finished step with its data/comm/checkpoint parts, loss and custom scalars, phase and
// checkpoint marks, annotations, output lines and the rank's end) over the job protocol,
// docs/job-protocol.md. One self-contained header, C++17, standard library and POSIX sockets.
//
//   gpuwatch::Options options;
//   options.template_name = "llama-8b-fsdp";
//   gpuwatch::Client gw(options);            // sends `start`; rank and job come from the env
//   for (...) {
//     { auto data = gw.phase("data"); batch = loader.next(); }  // goes to the next step
//     auto step = gw.step(batch.size());      // the step ends when `step` is destroyed
//     { auto comm = gw.phase("comm"); all_reduce(); }
//     gw.log(loss, grad_norm);
//     gw.scalar("lr", lr);
//   }
//   gw.end(0);                                // or let the destructor send it
//
// It can never slow down or break the job. Messages are formatted into one in-memory buffer and
// sent in batches as non-blocking datagrams (or on a non-blocking TCP stream); when the agent is
// absent, slow or gone a batch is dropped and its messages are counted in dropped(). Nothing
// waits for the agent, nothing throws out of the per-step calls (they are noexcept and allocate
// nothing once the Client is built), no signal is raised by a closed peer, and there is no
// background thread: batches go out from the calls themselves, when `batch_max` messages are
// buffered or `batch_interval` has passed since the first of them (checked on each message), on
// flush(), end() and destruction. So a loop that stops sending (a hang, a long evaluation without
// a phase mark) leaves its last batch in memory until its next message.
//
// Thread safety: every member function may be called from any thread; one mutex guards the
// buffer (taken three times per step, uncontended ~16 ns each; a whole step costs ~0.5 µs of
// CPU, bench/job_sdk/RESULTS.md). What a phase(), log() or scalar() belongs to is "the next
// step to end", whichever thread ends it, so the intended shape is one Client per rank
// (process), driven by its training loop. dropped() and sent() are atomics read without the
// lock. Do not use a Client in a fork()ed child: build a new one there.
#pragma once

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuwatch {

// "No value": a field holding it (or any NaN or infinity) is left out of the message.
inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

enum class Stream { kNone, kStdout, kStderr };

// How a Client identifies itself and where and how often it sends. Empty / unset fields are
// taken from the environment (see ResolveIdentity) or left out of the `start` message.
struct Options {
  std::string job;            // "": the scheduler's job id, else "<hostname>-<pid>"
  std::string template_name;  // the kind of job, for baselines (`template` on the wire)
  std::string user;  // "": the login name ($LOGNAME, $USER, …, the passwd entry, else the uid)
  std::string project;
  std::optional<int64_t> rank;        // unset or < 0: from the environment, else 0
  std::optional<int64_t> world_size;  // unset or < 0: from the environment, else left out
  std::optional<int64_t> local_rank;  // unset or < 0: from the environment, else left out
  // "": $GPUWATCH_SOCKET, then the first existing of /run/gpuwatch/job.sock,
  // $XDG_RUNTIME_DIR/gpuwatch/job.sock, /tmp/gpuwatch-<uid>/job.sock. Else a socket path,
  // "udp://HOST:PORT" or "tcp://HOST:PORT" (IPv6 as "[::1]:PORT").
  std::string address;
  std::vector<std::string> log_files;  // absolute paths the agent tails; at most 16 are sent
  std::chrono::milliseconds batch_interval{200};  // a batch waits at most this long...
  size_t batch_max = 64;                          // ...or until it holds this many messages
  std::chrono::milliseconds start_period{30000};  // `start` is re-sent this often
  // While no agent socket exists (default paths), or after a TCP connection failed, look again
  // at most this often.
  std::chrono::milliseconds retry_period{5000};
  bool send_time = true;  // stamp each message with `t` (this host's clock); off if it is skewed
};

// Who this rank is: Options first, then the launcher's environment.
struct Identity {
  std::string job;
  int64_t rank = 0;
  std::optional<int64_t> world_size;
  std::optional<int64_t> local_rank;
};

// Reads, for each field the options leave unset, the first variable that is set and valid (the
// same order as the Python SDK, sdk/python/gpuwatch/_env.py):
//   rank        RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID  (else 0; also
//               0 when above the protocol's 1048575)
//   world_size  WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS, SLURM_NPROCS
//   local_rank  LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID
//   job         GPUWATCH_JOB, SLURM_JOB_ID, PBS_JOBID, LSB_JOBID, TORCHELASTIC_RUN_ID (unless
//               "none"), PMIX_NAMESPACE, MASTER_ADDR:MASTER_PORT, else "<hostname>-<pid>"
// Launchers' variables come before Slurm's: torchrun or mpirun inside an allocation hands its
// workers the SLURM_PROCID of the one launcher task. Scheduler job ids come before torchrun's run
// id: they name the allocation every rank shares, the name operators know the job by. The job id
// is made valid for the wire (see SanitizeLabel).
Identity ResolveIdentity(const Options& options);

// Tells the agent a job entered a queue (docs/job-protocol.md, `queued`), for its queue wait in
// the accounting: the wait runs from `t` to the job's first `start`. For launchers and submit
// wrappers with a queue of their own; Slurm's prolog says it for Slurm jobs. From `options`:
// the job (else the environment, as a Client's), template, user and project (each only when
// set) and the address. Sends one message and returns whether the kernel took it; never throws
// and never waits longer than a TCP connect's 100 ms. (The Python SDK's gpuwatch.queued().)
inline bool Queued(const Options& options = Options(),
                   std::chrono::system_clock::time_point t = std::chrono::system_clock::now());

// One finished step, for step_done(). NaN fields are filled from what phase(), log() and
// scalar() recorded since the previous step, else left out.
struct StepReport {
  double duration_s = kNoValue;  // required: finite, > 0 and < 1 day, else the step is dropped
  double samples = kNoValue;     // samples (or tokens, consistently) in the step
  int64_t step = -1;             // < 0: one more than the previous step (the first is 0)
  double data_wait_s = kNoValue;
  double comm_s = kNoValue;
  double checkpoint_s = kNoValue;
  double loss = kNoValue;
  double grad_norm = kNoValue;
};

class Client;

namespace internal {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxDatagram = 65000;     // bytes per datagram / TCP line (protocol)
constexpr size_t kMaxLogLine = 16384;      // bytes of a `log` line (protocol)
constexpr size_t kMaxLogLineJson = 60000;  // its escaped form must still fit a datagram
constexpr size_t kMaxAnnotation = 4096;    // bytes of an annotation (protocol)
constexpr size_t kMaxJob = 128;            // bytes of a job id (protocol)
constexpr int64_t kMaxRank = 1048575;      // (protocol)
constexpr size_t kMaxLabel = 128;          // bytes of template, user, project (agent)
constexpr size_t kMaxPath = 4096;          // bytes of a log file path (agent)
constexpr size_t kMaxScalars = 32;         // per step (protocol)
constexpr size_t kMaxNameBytes = 64;       // scalar and phase names (protocol)
constexpr size_t kMaxLogFiles = 16;        // per `start` (protocol)
constexpr size_t kMaxStartBytes = 60000;   // log files beyond this do not fit a datagram
constexpr double kMaxStepSeconds = 86400;  // a step is shorter than a day (protocol)

// Length of the well-formed UTF-8 sequence at p (Unicode Table 3-7: no overlong forms, no
// surrogates, nothing above U+10FFFF), 0 if p does not start one. REQUIRES: n > 0, p[0] >= 0x80.
inline size_t Utf8SequenceLength(const unsigned char* p, size_t n) noexcept {
  const unsigned char c = p[0];
  auto cont = [&](size_t i, unsigned char lo, unsigned char hi) {
    return i < n && p[i] >= lo && p[i] <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) return cont(1, 0x80, 0xBF) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;
    const unsigned char hi = c == 0xED ? 0x9F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80;
    const unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

// Appends s as a JSON string, quotes included: '"' and '\\' escaped, control characters as
// \u00XX, each byte that is not part of well-formed UTF-8 replaced by U+FFFD (the agent rejects
// invalid UTF-8). Stops at a character boundary before the text would exceed max_bytes (as the
// receiver decodes it) or its escaped form max_escaped bytes.
inline void AppendJsonString(std::string& out, std::string_view s,
                             size_t max_bytes = std::numeric_limits<size_t>::max(),
                             size_t max_escaped = std::numeric_limits<size_t>::max()) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t decoded = 0, escaped = 0, i = 0;
  out.push_back('"');
  while (i < n) {
    const unsigned char c = p[i];
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {  // a run of plain ASCII
      size_t j = i + 1;
      while (j < n && p[j] >= 0x20 && p[j] < 0x80 && p[j] != '"' && p[j] != '\\') ++j;
      const size_t take = std::min({j - i, max_bytes - decoded, max_escaped - escaped});
      out.append(s.data() + i, take);
      decoded += take;
      escaped += take;
      if (take < j - i) break;
      i = j;
      continue;
    }
    size_t in_len = 1, out_len, dec_len;
    bool replace = false;
    if (c < 0x80) {
      dec_len = 1;
      out_len = (c == '"' || c == '\\') ? 2 : 6;
    } else {
      in_len = Utf8SequenceLength(p + i, n - i);
      replace = in_len == 0;
      if (replace) in_len = 1;
      dec_len = out_len = replace ? 3 : in_len;
    }
    if (dec_len > max_bytes - decoded || out_len > max_escaped - escaped) break;
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      out.append(esc, 6);
    } else if (replace) {
      out.append("\xEF\xBF\xBD", 3);
    } else {
      out.append(s.data() + i, in_len);
    }
    decoded += dec_len;
    escaped += out_len;
    i += in_len;
  }
  out.push_back('"');
}

inline void AppendInt(std::string& out, int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(r.ptr - buf));
}

// The shortest text that reads back as exactly v. REQUIRES: v finite.
inline void AppendDouble(std::string& out, double v) {
  char buf[40];
#if defined(__cpp_lib_to_chars)
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(r.ptr - buf));
#else  // a standard library without floating-point to_chars
  int len = std::snprintf(buf, sizeof buf, "%.17g", v);
  if (len < 0) return;
  for (int i = 0; i < len; ++i) {
    if (buf[i] == ',') buf[i] = '.';  // a locale's decimal comma
  }
  out.append(buf, static_cast<size_t>(len));
#endif
}

// Unix time in microseconds as "seconds.micros".
inline void AppendUnixTime(std::string& out, std::chrono::system_clock::time_point t) {
  const int64_t us =
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  if (us < 0) return;
  AppendInt(out, us / 1000000);
  char frac[6];
  int64_t rest = us % 1000000;
  for (int i = 5; i >= 0; --i, rest /= 10) frac[i] = static_cast<char>('0' + rest % 10);
  out.push_back('.');
  out.append(frac, 6);
}

inline bool IsWordStart(char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
inline bool IsWordChar(char c) noexcept { return IsWordStart(c) || (c >= '0' && c <= '9'); }

// [A-Za-z_][A-Za-z0-9_]{0,63}
inline bool ValidScalarName(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxNameBytes || !IsWordStart(name[0])) return false;
  return std::all_of(name.begin(), name.end(), IsWordChar);
}

// [A-Za-z0-9_.-]{1,64}
inline bool ValidPhaseName(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return IsWordChar(c) || c == '.' || c == '-'; });
}

inline bool IsSpace(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

inline std::string_view Trim(std::string_view s) noexcept {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// A whole non-negative decimal integer (white space around it allowed), else nullopt.
inline std::optional<int64_t> ParseCount(const char* s) noexcept {
  if (s == nullptr) return std::nullopt;
  const std::string_view t = Trim(s);
  int64_t v = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || r.ec != std::errc() || r.ptr != t.data() + t.size() || v < 0) {
    return std::nullopt;
  }
  return v;
}

inline std::optional<int64_t> FirstCount(std::initializer_list<const char*> names) noexcept {
  for (const char* name : names) {
    if (auto v = ParseCount(std::getenv(name))) return v;
  }
  return std::nullopt;
}

// Printable UTF-8 of at most max_bytes, as the agent requires of ids and names, the way the
// Python SDK makes it: surrounding white space trimmed, control characters removed, bytes that
// are not well-formed UTF-8 replaced by '?', cut at a character boundary.
inline std::string SanitizeLabel(std::string_view s, size_t max_bytes) {
  s = Trim(s);
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    if (p[i] < 0x20 || p[i] == 0x7F) {
      ++i;
      continue;
    }
    size_t len = p[i] < 0x80 ? 1 : Utf8SequenceLength(p + i, s.size() - i);
    const bool bad = len == 0;
    if (bad) len = 1;
    if (out.size() + len > max_bytes) break;
    if (bad) {
      out.push_back('?');
    } else {
      out.append(s.data() + i, len);
    }
    i += len;
  }
  return out;
}

// Well-formed UTF-8 without control characters.
inline bool IsPrintableUtf8(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    if (p[i] < 0x20 || p[i] == 0x7F) return false;
    const size_t len = p[i] < 0x80 ? 1 : Utf8SequenceLength(p + i, s.size() - i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// The login name as Python's getpass.getuser() finds it, else the uid.
inline std::string LoginName() {
  for (const char* name : {"LOGNAME", "USER", "LNAME", "USERNAME"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(::getuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
      found->pw_name != nullptr) {
    return found->pw_name;
  }
  return std::to_string(::getuid());
}

inline bool IsBusy(int err) noexcept {
  return err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS || err == EINTR;
}

// What a send did with the messages of a batch.
struct SendOutcome {
  uint64_t sent = 0;
  uint64_t dropped = 0;
  bool lost_agent = false;  // the agent is gone or new: say `start` again
};

// Where the messages go: a Unix datagram socket (sendto per batch, so an agent that re-binds
// its path is picked up), a connected UDP socket, or a TCP stream. Every call is non-blocking;
// only the constructor may resolve a host name and wait (100 ms at most) for a TCP connection.
// Not thread-safe: the Client holds its lock around it.
class Transport {
 public:
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  ~Transport() { CloseFd(); }

  // spec: "" (search the default paths), a path, udp://HOST:PORT or tcp://HOST:PORT.
  void Init(std::string_view spec, Clock::duration retry, Clock::time_point now) {
    retry_ = retry;
    next_retry_ = now;
    describe_.reserve(sizeof un_.sun_path);
    if (spec.empty()) {
      kind_ = Kind::kUnix;
      search_ = true;
      candidates_[0] = "/run/gpuwatch/job.sock";
      if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
        candidates_[1] = std::string(xdg) + "/gpuwatch/job.sock";
      }
      candidates_[2] = "/tmp/gpuwatch-" + std::to_string(::getuid()) + "/job.sock";
    } else if (spec.substr(0, 6) == "udp://" || spec.substr(0, 6) == "tcp://") {
      const bool udp = spec[0] == 'u';
      if (!ResolveInet(spec.substr(6), udp ? SOCK_DGRAM : SOCK_STREAM)) return;  // kNone
      kind_ = udp ? Kind::kUdp : Kind::kTcp;
      describe_ = std::string(spec);
      if (kind_ == Kind::kTcp) tail_.reserve(kMaxDatagram);
    } else {
      kind_ = Kind::kUnix;
      if (!SetUnixPath(spec)) kind_ = Kind::kNone;
    }
    if (!Ready(now) && kind_ == Kind::kTcp && connecting_) CheckConnected(100);
  }

  // Whether a message formatted now has somewhere to go. False means: drop it unformatted.
  bool Ready(Clock::time_point now) noexcept {
    switch (kind_) {
      case Kind::kNone:
        return false;
      case Kind::kUnix:
        if (fd_ < 0 && !OpenSocket(AF_UNIX, SOCK_DGRAM, now)) return false;
        if (have_path_) return true;
        if (now < next_retry_) return false;
        next_retry_ = now + retry_;
        if (!SearchDefaultPaths()) return false;
        new_agent_ = true;  // an agent appeared: say `start`
        return true;
      case Kind::kUdp:
        return fd_ >= 0 || OpenSocket(addr_.ss_family, SOCK_DGRAM, now);
      case Kind::kTcp:
        // Established before anything is formatted, so a new connection starts with `start`.
        if (fd_ < 0 && !OpenSocket(addr_.ss_family, SOCK_STREAM, now)) return false;
        return !connecting_ || CheckConnected(0);
    }
    return false;
  }

  // Sends data (len bytes holding `messages` whole lines) as one datagram / on the stream.
  SendOutcome Send(const char* data, size_t len, uint64_t messages) noexcept {
    SendOutcome out;
    if (fd_ < 0 || kind_ == Kind::kNone) {
      out.dropped = messages;
      return out;
    }
    if (kind_ == Kind::kTcp) {
      SendTcp(data, len, messages, out);
      return out;
    }
    ssize_t n;
    if (kind_ == Kind::kUnix) {
      if (!have_path_) {
        out.dropped = messages;
        return out;
      }
      n = ::sendto(fd_, data, len, MSG_DONTWAIT | MSG_NOSIGNAL,
                   reinterpret_cast<const sockaddr*>(&un_), un_len_);
    } else {
      n = ::send(fd_, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    if (n == static_cast<ssize_t>(len)) {
      out.sent = messages;
      return out;
    }
    out.dropped = messages;
    const int err = errno;
    if (n >= 0 || IsBusy(err)) return out;  // a full queue: the agent still knows us
    out.lost_agent = true;
    // The socket file is gone: the agent stopped, maybe to come back elsewhere. Search again
    // (no more often than retry_).
    if (search_ && err == ENOENT) {
      have_path_ = false;
      describe_.clear();
    }
    return out;
  }

  // The Unix socket carries the sender's pid, uid and gid (SO_PASSCRED).
  bool CarriesCredentials() const noexcept { return kind_ == Kind::kUnix; }

  // True once after an agent was found or a connection established: time to say `start`.
  bool TakeNewAgent() noexcept { return std::exchange(new_agent_, false); }

  // The address as configured or found; "" while there is none.
  std::string Describe() const { return describe_; }

 private:
  enum class Kind { kNone, kUnix, kUdp, kTcp };

  bool SetUnixPath(std::string_view path) noexcept {
    std::memset(&un_, 0, sizeof un_);
    if (path.empty() || path.size() >= sizeof un_.sun_path) return false;
    un_.sun_family = AF_UNIX;
    std::memcpy(un_.sun_path, path.data(), path.size());
    un_len_ = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
    have_path_ = true;
    describe_.assign(path.data(), path.size());  // reserved: does not allocate
    return true;
  }

  bool SearchDefaultPaths() noexcept {
    for (const std::string& path : candidates_) {
      struct stat st;
      if (!path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
          SetUnixPath(path)) {
        return true;
      }
    }
    return false;
  }

  bool ResolveInet(std::string_view hostport, int socktype) {
    std::string host, port;
    if (!hostport.empty() && hostport[0] == '[') {
      const size_t close = hostport.find(']');
      if (close == std::string_view::npos || hostport.substr(close + 1, 1) != ":") return false;
      host = std::string(hostport.substr(1, close - 1));
      port = std::string(hostport.substr(close + 2));
    } else {
      const size_t colon = hostport.rfind(':');
      if (colon == std::string_view::npos) return false;
      host = std::string(hostport.substr(0, colon));
      port = std::string(hostport.substr(colon + 1));
    }
    const auto port_num = ParseCount(port.c_str());
    if (host.empty() || !port_num || *port_num < 1 || *port_num > 65535) return false;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = socktype;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
      return false;
    }
    std::memcpy(&addr_, res->ai_addr, res->ai_addrlen);
    addr_len_ = res->ai_addrlen;
    ::freeaddrinfo(res);
    return true;
  }

  // Creates the socket (and for UDP/TCP connects it), at most once per retry_.
  bool OpenSocket(int family, int type, Clock::time_point now) noexcept {
    if (kind_ == Kind::kTcp || fd_open_failed_) {
      if (now < next_retry_) return false;
      next_retry_ = now + retry_;
    }
    fd_ = ::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    fd_open_failed_ = fd_ < 0;
    if (fd_ < 0) {
      next_retry_ = now + retry_;
      return false;
    }
    if (kind_ == Kind::kUnix) return true;
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr_), addr_len_) == 0) {
      if (kind_ == Kind::kTcp) new_agent_ = true;  // connected: say `start`
      return true;
    }
    if (kind_ == Kind::kTcp && errno == EINPROGRESS) {
      connecting_ = true;
      return true;
    }
    CloseFd();
    fd_open_failed_ = true;
    next_retry_ = now + retry_;
    return false;
  }

  void CloseFd() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    connecting_ = false;
  }

  // For a TCP connect in progress: true once established; false while pending or failed (then
  // the socket is closed).
  bool CheckConnected(int timeout_ms) noexcept {
    pollfd pfd{fd_, POLLOUT, 0};
    if (::poll(&pfd, 1, timeout_ms) <= 0) return false;
    int err = 0;
    socklen_t err_len = sizeof err;
    if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0 || err != 0) {
      CloseFd();
      return false;
    }
    connecting_ = false;
    new_agent_ = true;  // connected: say `start`
    return true;
  }

  // The agent never writes on the stream: readable means closed or reset.
  bool PeerGone() noexcept {
    short events = POLLIN;
#ifdef POLLRDHUP
    events |= POLLRDHUP;
#endif
    pollfd pfd{fd_, events, 0};
    return ::poll(&pfd, 1, 0) > 0 && pfd.revents != 0;
  }

  void DropConnection(SendOutcome& out) noexcept {
    out.dropped += tail_messages_;
    out.lost_agent = true;
    tail_.clear();
    tail_messages_ = 0;
    CloseFd();
  }

  // A partial write leaves the rest of the batch in tail_, sent before anything else: a stream
  // must never carry half a line followed by another.
  void SendTcp(const char* data, size_t len, uint64_t messages, SendOutcome& out) noexcept {
    if (connecting_ && !CheckConnected(0)) {
      out.dropped += messages;
      if (fd_ < 0) out.lost_agent = true;
      return;
    }
    if (PeerGone()) {
      DropConnection(out);
      out.dropped += messages;
      return;
    }
    if (!tail_.empty()) {
      const ssize_t n = ::send(fd_, tail_.data(), tail_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && !IsBusy(errno)) {
        DropConnection(out);
        out.dropped += messages;
        return;
      }
      if (n > 0) tail_.erase(0, static_cast<size_t>(n));
      if (!tail_.empty()) {
        out.dropped += messages;
        return;
      }
      out.sent += tail_messages_;
      tail_messages_ = 0;
    }
    const ssize_t n = ::send(fd_, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (!IsBusy(errno)) DropConnection(out);
      out.dropped += messages;
      return;
    }
    if (static_cast<size_t>(n) < len) {
      tail_.assign(data + n, len - static_cast<size_t>(n));
      tail_messages_ = static_cast<uint64_t>(std::count(tail_.begin(), tail_.end(), '\n'));
    }
    out.sent += messages - tail_messages_;
  }

  Kind kind_ = Kind::kNone;
  int fd_ = -1;
  bool search_ = false;     // the path comes from the default search
  bool have_path_ = false;  // un_ holds a path
  bool connecting_ = false;
  bool fd_open_failed_ = false;
  bool new_agent_ = false;
  Clock::duration retry_{};
  Clock::time_point next_retry_{};
  sockaddr_un un_{};
  socklen_t un_len_ = 0;
  sockaddr_storage addr_{};
  socklen_t addr_len_ = 0;
  std::string candidates_[3];  // the default paths, in order
  std::string tail_;           // TCP: the unsent end of a batch
  uint64_t tail_messages_ = 0;
  std::string describe_;
};

}  // namespace internal

// Times one step: construct it (Client::step) when the step begins; the `step` message is sent
// when it is destroyed or finish() is called. Movable, not copyable.
class StepScope {
 public:
  StepScope(StepScope&& other) noexcept
      : client_(std::exchange(other.client_, nullptr)),
        start_(other.start_),
        samples_(other.samples_),
        step_(other.step_) {}
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;
  StepScope& operator=(StepScope&&) = delete;
  ~StepScope() { finish(); }

  // For when the step's size is known only at its end.
  void set_samples(double samples) noexcept { samples_ = samples; }
  // Ends the step now; later calls and the destructor do nothing.
  inline void finish() noexcept;

 private:
  friend class Client;
  StepScope(Client* client, double samples, int64_t step) noexcept
      : client_(client), start_(internal::Clock::now()), samples_(samples), step_(step) {}

  Client* client_;
  internal::Clock::time_point start_;
  double samples_;
  int64_t step_;
};

// Times one phase (Client::phase) until destroyed or end() is called. "data", "comm" and
// "checkpoint" add their seconds to the next step to end (data_wait_s, comm_s, checkpoint_s);
// "checkpoint" also sends `checkpoint` begin/end marks. Any other valid name ([A-Za-z0-9_.-],
// 1-64 bytes; e.g. "eval") sends `phase` begin/end marks at once (a datagram each: meant for
// long, rare phases), so the agent knows the job is busy rather than hung; an invalid name does
// nothing. "data" and "comm" send no marks: they are too frequent, and an open "comm" phase
// must not hide a stuck collective from the agent's hang detection.
class PhaseScope {
 public:
  PhaseScope(PhaseScope&& other) noexcept
      : client_(std::exchange(other.client_, nullptr)),
        kind_(other.kind_),
        name_len_(other.name_len_),
        start_(other.start_) {
    std::memcpy(name_, other.name_, sizeof name_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;
  PhaseScope& operator=(PhaseScope&&) = delete;
  ~PhaseScope() { end(); }

  // Ends the phase now; later calls and the destructor do nothing.
  inline void end() noexcept;

 private:
  friend class Client;
  enum class Kind { kNone, kData, kComm, kCheckpoint, kMark };
  inline PhaseScope(Client* client, std::string_view name) noexcept;

  Client* client_;
  Kind kind_ = Kind::kNone;
  uint8_t name_len_ = 0;
  char name_[internal::kMaxNameBytes] = {};
  internal::Clock::time_point start_;
};

// One rank's connection to the agent. Sends `start` when built and again every start_period
// (and as soon as a new or returning agent is found), `end` from end() or the destructor.
// Neither copyable nor movable (scopes point to it).
class Client {
 public:
  using Options = ::gpuwatch::Options;

  // Resolves identity and address and sends `start`. Never waits for the agent, except that a
  // udp:// or tcp:// host name is resolved here and a TCP connect is given up to 100 ms.
  // May throw std::bad_alloc.
  explicit Client(Options options = Options());
  // Sends end(0) unless end() was called, end(1) when destroyed by an exception's unwinding;
  // flushes.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Starts timing a step; see StepScope. samples: the step's samples or tokens (NaN: none).
  // number: the step's number (< 0: the previous one + 1, the first being 0). When phases
  // recorded since the previous step began before this one, the step is taken to start at the
  // earliest of them, so its parts never exceed it.
  StepScope step(double samples = kNoValue, int64_t number = -1) noexcept {
    return StepScope(this, samples, number);
  }
  // Starts timing a phase; see PhaseScope.
  PhaseScope phase(std::string_view name) noexcept { return PhaseScope(this, name); }

  // Attach to the next step to end (the one running, or the next). Non-finite values are
  // ignored; a later call overwrites an earlier one.
  inline void log(double loss, double grad_norm = kNoValue) noexcept;
  // False (and ignored) for an invalid name ([A-Za-z_][A-Za-z0-9_]{0,63}), a non-finite value,
  // or a 33rd name in one step. The same name again overwrites.
  inline bool scalar(std::string_view name, double value) noexcept;

  // A step timed by the caller.
  void step_done(double duration_s, double samples = kNoValue, int64_t number = -1) noexcept {
    StepReport report;
    report.duration_s = duration_s;
    report.samples = samples;
    report.step = number;
    step_done(report);
  }
  inline void step_done(const StepReport& report) noexcept;

  // Free text on the job's time line (cut to 4096 bytes; empty is ignored). Sent at once.
  inline void annotate(std::string_view text) noexcept;
  // One output line (one trailing newline removed, cut to 16384 bytes).
  inline void log_line(std::string_view line, Stream stream = Stream::kNone) noexcept;
  // The rank ends; sent at once. Only the first call counts.
  inline void end(int exit_code = 0) noexcept;
  // Sends what is buffered now.
  inline void flush() noexcept;

  // Messages sent to the socket / dropped (agent absent or not draining, invalid step).
  uint64_t sent() const noexcept { return sent_.load(std::memory_order_relaxed); }
  uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

  const std::string& job() const noexcept { return identity_.job; }
  int64_t rank() const noexcept { return identity_.rank; }
  std::optional<int64_t> world_size() const noexcept { return identity_.world_size; }
  std::optional<int64_t> local_rank() const noexcept { return identity_.local_rank; }
  // Where messages go ("" while no agent socket was found).
  std::string address() const {
    std::lock_guard<std::mutex> lock(mu_);
    return transport_.Describe();
  }

 private:
  friend class StepScope;
  friend class PhaseScope;
  using Clock = internal::Clock;

  struct PendingScalar {
    char name[internal::kMaxNameBytes];
    uint8_t len;
    double value;
  };

  inline void EndStep(Clock::time_point start, Clock::time_point end, double samples,
                      int64_t step) noexcept;
  inline void PhaseMark(PhaseScope::Kind kind, std::string_view name, bool begin) noexcept;
  inline void EndPhase(PhaseScope::Kind kind, std::string_view name, Clock::time_point start,
                       Clock::time_point end) noexcept;

  // The rest run with mu_ held.
  inline void WriteStep(const StepReport& report, Clock::time_point now);
  inline void ResetPending() noexcept;
  inline bool BeginMessage(Clock::time_point now);
  inline void SyncWallClock(Clock::time_point now) noexcept;
  inline void Open(std::string_view type);
  inline void Close(Clock::time_point now, bool urgent);
  inline void SendPrefix(size_t len, uint64_t messages) noexcept;
  inline void FlushLocked(Clock::time_point now) noexcept;
  inline void AppendField(std::string_view key, double v);
  inline void Dropped(uint64_t n) noexcept { dropped_.fetch_add(n, std::memory_order_relaxed); }

  Identity identity_;
  std::string ident_;         // "job":"…","rank":N
  std::string start_fields_;  // ,"template":…,"log_files":[…]
  // ,"pid":N, only where the kernel does not tell the agent: in a container getpid() is the
  // container's pid, which the agent would take as a claim on another process.
  std::string pid_field_;
  Clock::duration batch_interval_;
  uint64_t batch_max_;
  Clock::duration start_period_;
  bool send_time_;
  int uncaught_at_construction_;

  mutable std::mutex mu_;
  internal::Transport transport_;
  std::string buf_;  // whole lines; never reallocates after construction
  size_t msg_begin_ = 0;
  uint64_t buf_messages_ = 0;
  Clock::time_point first_buffered_{};
  bool start_due_ = true;
  Clock::time_point next_start_{};
  std::chrono::nanoseconds wall_offset_{};  // system_clock - steady_clock
  bool ended_ = false;
  int64_t next_step_ = 0;

  // Recorded for the next step to end.
  double loss_ = kNoValue, grad_norm_ = kNoValue;
  double data_s_ = kNoValue, comm_s_ = kNoValue, checkpoint_s_ = kNoValue;
  Clock::time_point earliest_phase_ = Clock::time_point::max();  // of the parts recorded
  Clock::duration marks_after_part_{};                           // time in other phases since then
  Clock::time_point last_mark_end_ = Clock::time_point::min();
  PendingScalar scalars_[internal::kMaxScalars];
  size_t num_scalars_ = 0;

  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> dropped_{0};
};

// ---------------------------------------------------------------------------------------------
// Implementation.

inline Identity ResolveIdentity(const Options& options) {
  using internal::FirstCount;
  Identity id;
  using internal::kMaxJob;
  using internal::SanitizeLabel;
  if (options.rank && *options.rank >= 0) {
    id.rank = *options.rank;
  } else {
    id.rank = FirstCount({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
                  .value_or(0);
  }
  if (id.rank > internal::kMaxRank) id.rank = 0;
  if (options.world_size && *options.world_size >= 0) {
    id.world_size = options.world_size;
  } else {
    id.world_size = FirstCount(
        {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS"});
  }
  if (options.local_rank && *options.local_rank >= 0) {
    id.local_rank = options.local_rank;
  } else {
    id.local_rank = FirstCount(
        {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"});
  }
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v == nullptr ? std::string() : SanitizeLabel(v, kMaxJob);
  };
  std::string job = SanitizeLabel(options.job, kMaxJob);
  for (const char* name : {"GPUWATCH_JOB", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"}) {
    if (job.empty()) job = env(name);
  }
  if (job.empty()) {
    std::string run_id = env("TORCHELASTIC_RUN_ID");
    std::string lower = run_id;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower != "none") job = std::move(run_id);
  }
  if (job.empty()) job = env("PMIX_NAMESPACE");
  if (job.empty()) {
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    if (addr != nullptr && port != nullptr && *addr != '\0' && *port != '\0') {
      job = SanitizeLabel(
          std::string(internal::Trim(addr)) + ":" + std::string(internal::Trim(port)), kMaxJob);
    }
  }
  if (job.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
      std::strcpy(host, "localhost");
    }
    job = SanitizeLabel(std::string(host) + "-" + std::to_string(::getpid()), kMaxJob);
    if (job.empty()) job = "job";
  }
  id.job = std::move(job);
  return id;
}

inline void StepScope::finish() noexcept {
  if (client_ == nullptr) return;
  Client* client = std::exchange(client_, nullptr);
  client->EndStep(start_, internal::Clock::now(), samples_, step_);
}

inline PhaseScope::PhaseScope(Client* client, std::string_view name) noexcept
    : client_(client), start_(internal::Clock::now()) {
  if (name == "data") {
    kind_ = Kind::kData;
  } else if (name == "comm") {
    kind_ = Kind::kComm;
  } else if (name == "checkpoint") {
    kind_ = Kind::kCheckpoint;
  } else if (internal::ValidPhaseName(name)) {
    kind_ = Kind::kMark;
  } else {
    client_ = nullptr;
    return;
  }
  name_len_ = static_cast<uint8_t>(name.size());
  std::memcpy(name_, name.data(), name.size());
  if (kind_ == Kind::kCheckpoint || kind_ == Kind::kMark) client_->PhaseMark(kind_, name, true);
}

inline void PhaseScope::end() noexcept {
  if (client_ == nullptr) return;
  Client* client = std::exchange(client_, nullptr);
  client->EndPhase(kind_, std::string_view(name_, name_len_), start_, internal::Clock::now());
}

inline Client::Client(Options options)
    : identity_(ResolveIdentity(options)),
      batch_interval_(options.batch_interval),
      batch_max_(std::max<uint64_t>(1, options.batch_max)),
      start_period_(options.start_period),
      send_time_(options.send_time),
      uncaught_at_construction_(std::uncaught_exceptions()) {
  using internal::AppendInt;
  using internal::AppendJsonString;
  ident_ = "\"job\":";
  AppendJsonString(ident_, identity_.job);
  ident_ += ",\"rank\":";
  AppendInt(ident_, identity_.rank);

  // The agent refuses the whole `start` for one bad field: make them valid, or leave them out.
  auto add_string = [this](const char* key, const std::string& value) {
    const std::string label = internal::SanitizeLabel(value, internal::kMaxLabel);
    if (label.empty()) return;
    start_fields_ += key;
    AppendJsonString(start_fields_, label);
  };
  add_string(",\"template\":", options.template_name);
  add_string(",\"user\":", options.user.empty() ? internal::LoginName() : options.user);
  add_string(",\"project\":", options.project);
  if (identity_.world_size && *identity_.world_size > 0) {
    start_fields_ += ",\"world_size\":";
    AppendInt(start_fields_, *identity_.world_size);
  }
  if (identity_.local_rank) {
    start_fields_ += ",\"local_rank\":";
    AppendInt(start_fields_, *identity_.local_rank);
  }
  pid_field_ = ",\"pid\":";
  AppendInt(pid_field_, ::getpid());
  size_t files = 0;
  for (const std::string& path : options.log_files) {
    if (files == internal::kMaxLogFiles) break;
    // A path the agent could not open as spelled (relative, not printable UTF-8) is left out.
    if (path.empty() || path[0] != '/' || path.size() > internal::kMaxPath ||
        !internal::IsPrintableUtf8(path)) {
      continue;
    }
    if (start_fields_.size() + path.size() * 6 + 16 > internal::kMaxStartBytes) break;
    start_fields_ += files++ == 0 ? ",\"log_files\":[" : ",";
    AppendJsonString(start_fields_, path);
  }
  if (files > 0) start_fields_ += "]";

  // Two datagrams' worth: a message is appended before the batch it overflows is sent.
  buf_.reserve(2 * internal::kMaxDatagram + 1024);
  const Clock::time_point now = Clock::now();
  next_start_ = now;
  SyncWallClock(now);
  std::string address = options.address;
  if (address.empty()) {
    if (const char* env = std::getenv("GPUWATCH_SOCKET")) address = env;
  }
  transport_.Init(address, options.retry_period, now);
  std::lock_guard<std::mutex> lock(mu_);
  if (BeginMessage(now)) {  // appends `start`
    FlushLocked(now);
  } else {
    Dropped(1);
  }
}

inline Client::~Client() {
  if (!ended_) {
    end(std::uncaught_exceptions() > uncaught_at_construction_ ? 1 : 0);
  } else {
    flush();
  }
}

inline void Client::log(double loss, double grad_norm) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::isfinite(loss)) loss_ = loss;
    if (std::isfinite(grad_norm)) grad_norm_ = grad_norm;
  } catch (...) {
  }
}

inline bool Client::scalar(std::string_view name, double value) noexcept {
  if (!internal::ValidScalarName(name) || !std::isfinite(value)) return false;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < num_scalars_; ++i) {
      PendingScalar& s = scalars_[i];
      if (std::string_view(s.name, s.len) == name) {
        s.value = value;
        return true;
      }
    }
    if (num_scalars_ == internal::kMaxScalars) return false;
    PendingScalar& s = scalars_[num_scalars_++];
    std::memcpy(s.name, name.data(), name.size());
    s.len = static_cast<uint8_t>(name.size());
    s.value = value;
    return true;
  } catch (...) {
    return false;
  }
}

inline void Client::step_done(const StepReport& report) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    WriteStep(report, Clock::now());
  } catch (...) {
    Dropped(1);
  }
}

inline void Client::EndStep(Clock::time_point start, Clock::time_point end, double samples,
                            int64_t step) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    Clock::time_point parts_start = earliest_phase_;
    if (parts_start < start && last_mark_end_ <= start) parts_start += marks_after_part_;
    start = std::min(start, parts_start);
    StepReport report;
    // A step too short for the clock still took some time.
    report.duration_s = std::max(std::chrono::duration<double>(end - start).count(), 1e-9);
    report.samples = samples;
    report.step = step;
    WriteStep(report, end);
  } catch (...) {
    Dropped(1);
  }
}

inline void Client::PhaseMark(PhaseScope::Kind kind, std::string_view name, bool begin) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = Clock::now();
    if (!BeginMessage(now)) {
      Dropped(1);
      return;
    }
    if (kind == PhaseScope::Kind::kCheckpoint) {
      Open("checkpoint");
    } else {
      Open("phase");
      buf_ += ",\"name\":\"";
      buf_ += name;  // validated: nothing to escape
      buf_ += '"';
    }
    buf_ += begin ? ",\"state\":\"begin\"" : ",\"state\":\"end\"";
    Close(now, /*urgent=*/true);
  } catch (...) {
    Dropped(1);
  }
}

inline void Client::EndPhase(PhaseScope::Kind kind, std::string_view name, Clock::time_point start,
                             Clock::time_point end) noexcept {
  using Kind = PhaseScope::Kind;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    if (kind == Kind::kMark) {
      // An "eval" after a part that goes to the next step (a checkpoint, say) is not part of
      // that step: EndStep starts the step that much later (as the Python SDK does).
      if (earliest_phase_ != Clock::time_point::max() && start >= earliest_phase_) {
        marks_after_part_ += end - start;
        last_mark_end_ = std::max(last_mark_end_, end);
      }
    } else {
      double& total = kind == Kind::kData ? data_s_ : kind == Kind::kComm ? comm_s_ : checkpoint_s_;
      const double seconds = std::chrono::duration<double>(end - start).count();
      total = std::isnan(total) ? seconds : total + seconds;
      earliest_phase_ = std::min(earliest_phase_, start);
    }
  } catch (...) {
  }
  if (kind == Kind::kCheckpoint || kind == Kind::kMark) PhaseMark(kind, name, false);
}

inline void Client::annotate(std::string_view text) noexcept {
  if (text.empty()) return;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = Clock::now();
    if (!BeginMessage(now)) {
      Dropped(1);
      return;
    }
    Open("annotation");
    buf_ += ",\"text\":";
    internal::AppendJsonString(buf_, text, internal::kMaxAnnotation);
    Close(now, /*urgent=*/true);
  } catch (...) {
    Dropped(1);
  }
}

inline void Client::log_line(std::string_view line, Stream stream) noexcept {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  try {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = Clock::now();
    if (!BeginMessage(now)) {
      Dropped(1);
      return;
    }
    Open("log");
    if (stream == Stream::kStdout) buf_ += ",\"stream\":\"stdout\"";
    if (stream == Stream::kStderr) buf_ += ",\"stream\":\"stderr\"";
    buf_ += ",\"line\":";
    internal::AppendJsonString(buf_, line, internal::kMaxLogLine, internal::kMaxLogLineJson);
    Close(now, /*urgent=*/false);
  } catch (...) {
    Dropped(1);
  }
}

inline void Client::end(int exit_code) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    ended_ = true;
    const Clock::time_point now = Clock::now();
    if (!BeginMessage(now)) {
      Dropped(1);
      FlushLocked(now);
      return;
    }
    Open("end");
    buf_ += ",\"exit_code\":";
    internal::AppendInt(buf_, exit_code);
    Close(now, /*urgent=*/true);
  } catch (...) {
    Dropped(1);
  }
}

inline void Client::flush() noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    FlushLocked(Clock::now());
  } catch (...) {
  }
}

inline void Client::WriteStep(const StepReport& r, Clock::time_point now) {
  const int64_t number = r.step >= 0 ? r.step : next_step_;
  next_step_ = number + 1;
  const double duration = r.duration_s;
  if (!(std::isfinite(duration) && duration > 0 && duration < internal::kMaxStepSeconds) ||
      !BeginMessage(now)) {
    Dropped(1);
    ResetPending();
    return;
  }
  auto pick = [](double given, double recorded) { return std::isnan(given) ? recorded : given; };
  // A part is never longer than its step (the agent rejects the step otherwise).
  auto part = [duration](double v) {
    return std::isfinite(v) && v >= 0 ? std::min(v, duration) : kNoValue;
  };
  Open("step");
  buf_ += ",\"step\":";
  internal::AppendInt(buf_, number);
  AppendField(",\"duration_s\":", duration);
  AppendField(",\"samples\":", r.samples >= 0 ? r.samples : kNoValue);
  AppendField(",\"data_wait_s\":", part(pick(r.data_wait_s, data_s_)));
  AppendField(",\"comm_s\":", part(pick(r.comm_s, comm_s_)));
  AppendField(",\"checkpoint_s\":", part(pick(r.checkpoint_s, checkpoint_s_)));
  AppendField(",\"loss\":", pick(r.loss, loss_));
  AppendField(",\"grad_norm\":", pick(r.grad_norm, grad_norm_));
  if (num_scalars_ > 0) {
    buf_ += ",\"scalars\":{";
    for (size_t i = 0; i < num_scalars_; ++i) {
      const PendingScalar& s = scalars_[i];
      if (i > 0) buf_ += ',';
      buf_ += '"';
      buf_.append(s.name, s.len);  // validated: nothing to escape
      buf_ += "\":";
      internal::AppendDouble(buf_, s.value);
    }
    buf_ += '}';
  }
  ResetPending();
  Close(now, /*urgent=*/false);
}

inline void Client::ResetPending() noexcept {
  loss_ = grad_norm_ = kNoValue;
  data_s_ = comm_s_ = checkpoint_s_ = kNoValue;
  earliest_phase_ = Clock::time_point::max();
  marks_after_part_ = Clock::duration::zero();
  last_mark_end_ = Clock::time_point::min();
  num_scalars_ = 0;
}

inline void Client::AppendField(std::string_view key, double v) {
  if (!std::isfinite(v)) return;
  buf_ += key;
  internal::AppendDouble(buf_, v);
}

// False: there is nowhere to send; the caller drops its message unformatted. Otherwise appends
// a `start` first when one is due.
inline bool Client::BeginMessage(Clock::time_point now) {
  if (!transport_.Ready(now)) return false;
  if (transport_.TakeNewAgent()) start_due_ = true;
  if (start_due_ || now >= next_start_) {
    start_due_ = false;
    next_start_ = now + start_period_;
    SyncWallClock(now);
    Open("start");
    buf_ += start_fields_;
    if (!transport_.CarriesCredentials()) buf_ += pid_field_;
    Close(now, /*urgent=*/false);
  }
  return true;
}

// `t` is the steady clock plus this offset, taken again with each `start`: one clock read per
// message fewer, and a wall-clock step shows within a start period.
inline void Client::SyncWallClock(Clock::time_point now) noexcept {
  wall_offset_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch() - now.time_since_epoch());
}

inline void Client::Open(std::string_view type) {
  msg_begin_ = buf_.size();
  buf_ += "{\"type\":\"";
  buf_ += type;
  buf_ += "\",";
  buf_ += ident_;
}

inline void Client::Close(Clock::time_point now, bool urgent) {
  if (send_time_) {
    buf_ += ",\"t\":";
    internal::AppendUnixTime(buf_,
                             std::chrono::system_clock::time_point(
                                 std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                     now.time_since_epoch() + wall_offset_)));
  }
  buf_ += "}\n";
  if (buf_.size() - msg_begin_ > internal::kMaxDatagram) {  // cannot be sent (by construction,
    buf_.resize(msg_begin_);                                // no message is this long)
    Dropped(1);
    return;
  }
  if (buf_.size() > internal::kMaxDatagram) {  // the batch without this message, then this one
    SendPrefix(msg_begin_, buf_messages_);
    buf_.erase(0, msg_begin_);
    buf_messages_ = 0;
  }
  if (buf_messages_++ == 0) first_buffered_ = now;
  if (urgent || buf_messages_ >= batch_max_ || now - first_buffered_ >= batch_interval_) {
    FlushLocked(now);
  }
}

inline void Client::SendPrefix(size_t len, uint64_t messages) noexcept {
  if (messages == 0) return;
  const internal::SendOutcome out = transport_.Send(buf_.data(), len, messages);
  if (out.sent > 0) sent_.fetch_add(out.sent, std::memory_order_relaxed);
  if (out.dropped > 0) Dropped(out.dropped);
  if (out.lost_agent || transport_.TakeNewAgent()) start_due_ = true;
}

inline void Client::FlushLocked(Clock::time_point now) noexcept {
  if (buf_messages_ == 0) return;
  if (transport_.Ready(now)) {
    SendPrefix(buf_.size(), buf_messages_);
  } else {
    Dropped(buf_messages_);
  }
  buf_.clear();
  buf_messages_ = 0;
}

inline bool Queued(const Options& options, std::chrono::system_clock::time_point t) {
  try {
    const Identity id = ResolveIdentity(options);
    std::string msg = "{\"type\":\"queued\",\"job\":";
    internal::AppendJsonString(msg, id.job);
    for (const auto& [key, value] : {std::pair{",\"template\":", &options.template_name},
                                     {",\"user\":", &options.user},
                                     {",\"project\":", &options.project}}) {
      const std::string label = internal::SanitizeLabel(*value, internal::kMaxLabel);
      if (label.empty()) continue;
      msg += key;
      internal::AppendJsonString(msg, label);
    }
    msg += ",\"t\":";
    internal::AppendUnixTime(msg, t);
    msg += "}\n";
    internal::Transport transport;
    const auto now = internal::Clock::now();
    std::string address = options.address;
    if (address.empty()) {
      if (const char* env = std::getenv("GPUWATCH_SOCKET"); env != nullptr) address = env;
    }
    transport.Init(address, options.retry_period, now);
    if (!transport.Ready(now)) return false;
    return transport.Send(msg.data(), msg.size(), 1).sent == 1;
  } catch (...) {  // std::bad_alloc: a launcher never fails for monitoring
    return false;
  }
}

}  // namespace gpuwatch
