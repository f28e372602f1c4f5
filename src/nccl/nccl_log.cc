#include "nccl/nccl_log.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "common/strings.h"

namespace gpuwatch::nccl {
namespace {

using sv = std::string_view;
constexpr size_t npos = sv::npos;
// Ranks, channels and device indices above this are garbage, not a communicator.
constexpr int64_t kMaxSaneInt = 10'000'000;
constexpr int kMaxDeviceIndex = 4096;
constexpr size_t kMaxDevicesPerHost = 256;
constexpr size_t kMaxRanksPerProcess = 128;
constexpr size_t kMaxHostExtras = 65536;
constexpr size_t kMaxRingRanks = 4096;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHexDigit(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool IsAlnum(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsHostChar(char c) { return IsAlnum(c) || c == '-' || c == '.' || c == '_'; }
bool IsBlank(char c) { return c == ' ' || c == '\t'; }

sv TrimLeft(sv s) {
  while (!s.empty() && (IsBlank(s.front()) || s.front() == '\r')) s.remove_prefix(1);
  return s;
}
sv TrimRight(sv s) {
  while (!s.empty() && (IsBlank(s.back()) || s.back() == '\r')) s.remove_suffix(1);
  return s;
}
sv Trim(sv s) { return TrimRight(TrimLeft(s)); }

bool Contains(sv s, sv what) { return s.find(what) != npos; }

// A decimal integer at the front of `s` (optional '-', at most 18 digits); advances `s`.
std::optional<int64_t> TakeInt(sv& s) {
  size_t n = 0;
  const bool neg = !s.empty() && s[0] == '-';
  if (neg) n = 1;
  const size_t start = n;
  while (n < s.size() && IsDigit(s[n]) && n - start < 18) ++n;
  if (n == start) return std::nullopt;
  int64_t v = 0;
  std::from_chars(s.data() + start, s.data() + n, v);
  s.remove_prefix(n);
  return neg ? -v : v;
}

// TakeInt limited to [lo, kMaxSaneInt].
std::optional<int> TakeSmallInt(sv& s, int64_t lo = 0) {
  sv t = s;
  auto v = TakeInt(t);
  if (!v || *v < lo || *v > kMaxSaneInt) return std::nullopt;
  s = t;
  return static_cast<int>(*v);
}

// The integer right after `key` in `s`; nullopt when absent or malformed.
std::optional<int64_t> IntAfter(sv s, sv key) {
  const size_t p = s.find(key);
  if (p == npos) return std::nullopt;
  sv rest = s.substr(p + key.size());
  return TakeInt(rest);
}

// The integer that ends right before `suffix` ("16 nvls channels").
std::optional<int64_t> IntBefore(sv s, sv suffix) {
  const size_t p = s.find(suffix);
  if (p == npos) return std::nullopt;
  size_t b = p;
  while (b > 0 && IsDigit(s[b - 1]) && p - b < 18) --b;
  if (b == p) return std::nullopt;
  int64_t v = 0;
  std::from_chars(s.data() + b, s.data() + p, v);
  return v;
}

// Log text as kept for evidence: leading blanks dropped, cut at kMaxTextBytes, valid UTF-8
// with control characters as '?'.
std::string Quote(sv line) {
  line = Trim(line);
  bool cut = false;
  if (line.size() > kMaxTextBytes) {
    line = line.substr(0, kMaxTextBytes);
    cut = true;
  }
  std::string s = PrintableText(line);
  if (cut) s += "…";
  return s;
}

// A short token of printed text (a family, a net name, an env value), made safe for JSON.
std::string Token(sv s, size_t max_bytes = 64) { return PrintableText(s.substr(0, max_bytes)); }

void InsertSorted(std::vector<int>* v, int x, size_t cap) {
  auto it = std::lower_bound(v->begin(), v->end(), x);
  if (it != v->end() && *it == x) return;
  if (v->size() >= cap) return;
  v->insert(it, x);
}

// ---- the NCCL line prefix -----------------------------------------------------------------

enum class Level { kNone, kInfo, kWarn, kTrace, kAbort };

struct NcclSplit {
  Level level = Level::kNone;
  sv before;  // everything in front of "NCCL INFO"
  sv msg;     // everything after it
};

// Finds "NCCL INFO|WARN|TRACE|ABORT" behind a blank or a launcher prefix.
NcclSplit SplitNccl(sv line) {
  static constexpr std::pair<sv, Level> kLevels[] = {{"INFO", Level::kInfo},
                                                     {"WARN", Level::kWarn},
                                                     {"TRACE", Level::kTrace},
                                                     {"ABORT", Level::kAbort}};
  for (size_t pos = line.find("NCCL "); pos != npos; pos = line.find("NCCL ", pos + 1)) {
    if (pos > 0) {
      const char b = line[pos - 1];
      if (!IsBlank(b) && b != ':' && b != '>' && b != ']') continue;
    }
    const sv rest = line.substr(pos + 5);
    for (const auto& [word, level] : kLevels) {
      if (rest.substr(0, word.size()) != word) continue;
      if (rest.size() > word.size() && !IsBlank(rest[word.size()])) continue;
      return {level, line.substr(0, pos), TrimLeft(rest.substr(word.size()))};
    }
  }
  return {};
}

struct Prefix {
  bool ok = false;
  sv host;
  int64_t pid = -1;
  int64_t tid = -1;
  int dev = -1;
};

bool IsDevToken(sv d) {
  if (!d.empty() && d[0] == '-') d.remove_prefix(1);
  if (d.empty() || d.size() > 6) return false;
  return std::all_of(d.begin(), d.end(), IsDigit);
}

// "host:pid:tid [dev]" as the last such group in `before` (a WARN line has "file.cc:12 "
// after it; launchers put "[1,0]<stdout>:" or a timestamp in front).
Prefix ParsePrefix(sv before) {
  Prefix p;
  if (before.size() > 512) before = before.substr(before.size() - 512);
  size_t rb = before.rfind(']');
  while (rb != npos) {
    const size_t lb = before.rfind('[', rb);
    if (lb == npos) break;
    const sv dev = before.substr(lb + 1, rb - lb - 1);
    if (lb >= 2 && before[lb - 1] == ' ' && IsDevToken(dev)) {
      const sv head = before.substr(0, lb - 1);
      size_t i = head.size();
      while (i > 0 && IsDigit(head[i - 1]) && head.size() - i < 18) --i;
      const sv tid = head.substr(i);
      if (!tid.empty() && i > 0 && head[i - 1] == ':') {
        const size_t pid_end = i - 1;
        size_t j = pid_end;
        while (j > 0 && IsDigit(head[j - 1]) && pid_end - j < 18) --j;
        const sv pid = head.substr(j, pid_end - j);
        if (!pid.empty() && j > 0 && head[j - 1] == ':') {
          const size_t host_end = j - 1;
          size_t k = host_end;
          while (k > 0 && IsHostChar(head[k - 1]) && host_end - k < 255) --k;
          if (k < host_end) {
            p.ok = true;
            p.host = head.substr(k, host_end - k);
            std::from_chars(pid.data(), pid.data() + pid.size(), p.pid);
            std::from_chars(tid.data(), tid.data() + tid.size(), p.tid);
            int d = -1;
            std::from_chars(dev.data(), dev.data() + dev.size(), d);
            p.dev = d;
            return p;
          }
        }
      }
    }
    if (lb == 0) break;
    rb = before.rfind(']', lb - 1);
  }
  return p;
}

// ---- small line shapes --------------------------------------------------------------------

// "2.18.5+cuda12.0": three dot-separated numbers, then [A-Za-z0-9.+_-].
bool IsVersionToken(sv s) {
  size_t i = 0;
  for (int part = 0; part < 3; ++part) {
    if (part > 0) {
      if (i >= s.size() || s[i] != '.') return false;
      ++i;
    }
    const size_t start = i;
    while (i < s.size() && IsDigit(s[i])) ++i;
    if (i == start || i - start > 6) return false;
  }
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (!IsAlnum(c) && c != '.' && c != '+' && c != '-' && c != '_') return false;
  }
  return s.size() <= 64;
}

// The prefix of an old bare banner: blank, a launcher tag ("[1,0]<stdout>:", "> "), or a
// timestamp.
bool IsWrapperPrefix(sv before) {
  before = Trim(before);
  if (before.empty()) return true;
  if (before.size() > 128) return false;
  const char last = before.back();
  if (last == ':' || last == '>' || last == ']') return true;
  bool digit = false;
  for (char c : before) {
    if (IsDigit(c)) {
      digit = true;
    } else if (sv(" -:.,/TZ").find(c) == npos) {
      return false;
    }
  }
  return digit;
}

// `before` ends with "host:pid:tid [dev] NCCL INFO ": NCCL's own prefix (NCCL >= 2.19 logs the
// version as an INFO line).
bool EndsWithNcclInfoPrefix(sv before) {
  constexpr sv kInfo = "NCCL INFO ";
  if (before.size() < kInfo.size() || before.substr(before.size() - kInfo.size()) != kInfo) {
    return false;
  }
  before.remove_suffix(kInfo.size());
  if (before.size() < 2 || before.back() != ' ') return false;
  before.remove_suffix(1);
  if (before.back() != ']') return false;
  const size_t lb = before.rfind('[');
  if (lb == sv::npos || lb == 0 || before[lb - 1] != ' ') return false;
  sv dev = before.substr(lb + 1, before.size() - lb - 2);
  if (!dev.empty() && dev.front() == '-') dev.remove_prefix(1);
  if (dev.empty() || !std::all_of(dev.begin(), dev.end(), IsDigit)) return false;
  // "host:pid:tid": two ":<digits>" fields behind a host name.
  sv host = before.substr(0, lb - 1);
  for (int field = 0; field < 2; ++field) {
    size_t n = 0;
    while (n < host.size() && IsDigit(host[host.size() - 1 - n])) ++n;
    if (n == 0 || n == host.size() || host[host.size() - 1 - n] != ':') return false;
    host.remove_suffix(n + 1);
  }
  return !host.empty() && host.back() != ' ';
}

// "NCCL version X" at the end of `s` (after trailing blanks), X a version token.
std::optional<sv> VersionAtEnd(sv s, size_t* key_pos) {
  constexpr sv kKey = "NCCL version ";
  for (size_t pos = s.find(kKey); pos != npos; pos = s.find(kKey, pos + 1)) {
    const sv v = TrimRight(s.substr(pos + kKey.size()));
    if (!IsVersionToken(v)) continue;
    *key_pos = pos;
    return v;
  }
  return std::nullopt;
}

// "init.cu:864 -> 2", "misc/group.cu:69 -> 2 [Async thread]": one frame of NCCL's error
// propagation (NCCLCHECK prints where the error passed and the ncclResult_t).
std::optional<int> ErrorChainCode(sv msg) {
  const size_t arrow = msg.find(" -> ");
  if (arrow == npos || arrow == 0 || arrow > 200) return std::nullopt;
  const sv where = msg.substr(0, arrow);
  const size_t colon = where.rfind(':');
  if (colon == npos || colon == 0 || colon + 1 >= where.size()) return std::nullopt;
  if (where.find(' ') != npos || where.find('.') == npos) return std::nullopt;
  if (!std::all_of(where.begin() + colon + 1, where.end(), IsDigit)) return std::nullopt;
  sv rest = msg.substr(arrow + 4);
  auto code = TakeSmallInt(rest);
  if (!code) return std::nullopt;
  if (!rest.empty() && !IsBlank(rest[0])) return std::nullopt;
  return code;
}

// A WARN that reports a failure rather than a notice.
bool WarnIsError(sv msg) {
  static constexpr sv kWords[] = {
      "fail",      "Fail",      "rror",         "unhandled", "exited",          "abort",
      "Abort",     "timeout",   "Timeout",      "timed out", "unreachable",     "refused",
      "Could not", "could not", "Cuda failure", "closed",    "mismatch",        "Got completion",
      "Unable",    "unable",    "invalid",      "Invalid",   "Connection reset"};
  return std::any_of(std::begin(kWords), std::end(kWords), [&](sv w) { return Contains(msg, w); });
}

// A framework's line that reports an NCCL failure (PyTorch's RuntimeError / DistBackendError).
bool FrameworkNcclError(sv line) {
  static constexpr sv kWords[] = {"NCCL error",
                                  "ncclSystemError",
                                  "ncclInternalError",
                                  "ncclUnhandledCudaError",
                                  "ncclRemoteError",
                                  "ncclInvalidUsage",
                                  "ncclInvalidArgument",
                                  "unhandled system error",
                                  "unhandled cuda error",
                                  "remote process exited",
                                  "NCCL communicator was aborted"};
  return std::any_of(std::begin(kWords), std::end(kWords), [&](sv w) { return Contains(line, w); });
}

// "#  Rank  0 Group  0 Pid   4766 on   GENOA-06 device  0 [0x21] NVIDIA GeForce RTX 5090".
struct TestsRankLine {
  int rank = -1;
  int64_t pid = -1;
  sv host;
  int device = -1;
  sv bus;   // inside the brackets
  sv name;  // model
};

bool ExpectWord(sv& s, sv word) {
  s = TrimLeft(s);
  if (s.substr(0, word.size()) != word) return false;
  s.remove_prefix(word.size());
  return s.empty() || IsBlank(s[0]);
}

std::optional<TestsRankLine> ParseTestsRankLine(sv line) {
  const size_t hash = line.find('#');
  if (hash == npos || hash > 64) return std::nullopt;
  sv s = line.substr(hash + 1);
  TestsRankLine t;
  if (!ExpectWord(s, "Rank")) return std::nullopt;
  s = TrimLeft(s);
  auto rank = TakeSmallInt(s);
  if (!rank) return std::nullopt;
  t.rank = *rank;
  sv g = s;
  if (ExpectWord(g, "Group")) {
    g = TrimLeft(g);
    if (!TakeInt(g)) return std::nullopt;
    s = g;
  }
  if (!ExpectWord(s, "Pid")) return std::nullopt;
  s = TrimLeft(s);
  auto pid = TakeInt(s);
  if (!pid) return std::nullopt;
  t.pid = *pid;
  if (!ExpectWord(s, "on")) return std::nullopt;
  s = TrimLeft(s);
  size_t h = 0;
  while (h < s.size() && IsHostChar(s[h]) && h < 255) ++h;
  if (h == 0) return std::nullopt;
  t.host = s.substr(0, h);
  s.remove_prefix(h);
  if (!ExpectWord(s, "device")) return std::nullopt;
  s = TrimLeft(s);
  auto dev = TakeSmallInt(s);
  if (!dev) return std::nullopt;
  t.device = *dev;
  s = TrimLeft(s);
  if (!s.empty() && s[0] == '[') {
    const size_t rb = s.find(']');
    if (rb == npos || rb > 32) return std::nullopt;
    t.bus = s.substr(1, rb - 1);
    s.remove_prefix(rb + 1);
  }
  t.name = Trim(s);
  return t;
}

// NCCL's int64 bus id as it prints it ("%lx") from nccl-tests' "[0x1b]" or "[0000:1b:00]":
// the hex digits of domain:bus:device plus the function (0), without leading zeros.
std::string BusIdFromHeader(sv bus) {
  std::string hex;
  if (StartsWith(bus, "0x")) {
    for (char c : bus.substr(2)) {
      if (!IsHexDigit(c)) return "";
      hex += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (hex.empty()) return "";
    hex += "000";
  } else {
    for (char c : bus) {
      if (c == ':' || c == '.') continue;
      if (!IsHexDigit(c)) return "";
      hex += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (hex.empty()) return "";
    hex += "0";
  }
  const size_t nz = hex.find_first_not_of('0');
  return nz == std::string::npos ? "0" : hex.substr(nz);
}

// A channel line's bracket: a small decimal is an NVML index (NCCL >= 2.12); anything longer
// or with hex letters is a bus id (the lowest GPU bus id NCCL prints is "1000").
bool IsBusIdToken(sv d) {
  if (d.empty()) return false;
  if (!std::all_of(d.begin(), d.end(), IsHexDigit)) return false;
  return d.size() >= 4 || !std::all_of(d.begin(), d.end(), IsDigit);
}

std::string LowerHex(sv d) {
  std::string s(d);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t nz = s.find_first_not_of('0');
  return nz == std::string::npos ? "0" : s.substr(nz);
}

// "Channel 02/0 : " / "Ring 00 : " / "CollNet 00/1 : ": the channel number; advances `s` past
// the colon.
std::optional<int> TakeChannelHead(sv& s) {
  static constexpr sv kKeys[] = {"Channel ", "Ring ", "CollNet ", "Coll "};
  for (sv key : kKeys) {
    if (s.substr(0, key.size()) != key) continue;
    sv t = TrimLeft(s.substr(key.size()));
    auto ch = TakeSmallInt(t);
    if (!ch) return std::nullopt;
    if (!t.empty() && t[0] == '/') {
      t.remove_prefix(1);
      if (!TakeInt(t)) return std::nullopt;
    }
    t = TrimLeft(t);
    if (t.empty() || t[0] != ':') return std::nullopt;
    s = TrimLeft(t.substr(1));
    return ch;
  }
  return std::nullopt;
}

// "7[7]" or "0[1b000]" or a bare rank; advances `s`.
bool TakeRankDev(sv& s, int* rank, sv* dev) {
  auto r = TakeSmallInt(s);
  if (!r) return false;
  *rank = *r;
  if (!s.empty() && s[0] == '[') {
    const size_t rb = s.find(']');
    if (rb == npos || rb > 20) return false;
    *dev = s.substr(1, rb - 1);
    s.remove_prefix(rb + 1);
  }
  return true;
}

bool IsIbNet(sv net) { return StartsWith(net, "IB"); }

}  // namespace

std::string TransportFamily(std::string_view detail) {
  sv d = Trim(detail);
  auto first_seg = [](sv s) { return s.substr(0, s.find('/')); };
  if (StartsWith(d, "P2P")) {
    const sv rest = d.substr(3);
    if (rest.empty() || rest[0] != '/') return "P2P";
    const sv seg = first_seg(rest.substr(1));
    if (seg == "IPC") return "P2P/IPC";
    if (seg == "CUMEM") return "P2P/CUMEM";
    if (seg == "NVL") return "P2P/NVL";
    if (seg == "MNNVL") return "P2P/MNNVL";
    if (StartsWith(seg, "direct")) return "P2P/direct";
    if (seg == "indirect") return "P2P/indirect";
    return "P2P/" + Token(seg, 32);
  }
  if (StartsWith(d, "SHM")) return "SHM";
  if (StartsWith(d, "NET/")) {
    sv name = first_seg(d.substr(4));
    name = name.substr(0, name.find('('));
    if (name.empty()) return "NET";
    return "NET/" + Token(name, 32);
  }
  if (StartsWith(d, "NET")) return "NET";
  if (StartsWith(d, "COLLNET") || StartsWith(d, "CollNet")) return "COLLNET";
  if (StartsWith(d, "NVLS")) return "NVLS";
  const sv seg = first_seg(d);
  if (seg.empty()) return "unknown";
  return Token(seg, 32);
}

std::string NcclResultName(int code) {
  switch (code) {
    case 0:
      return "ncclSuccess";
    case 1:
      return "ncclUnhandledCudaError (unhandled cuda error)";
    case 2:
      return "ncclSystemError (unhandled system error)";
    case 3:
      return "ncclInternalError (internal error)";
    case 4:
      return "ncclInvalidArgument (invalid argument)";
    case 5:
      return "ncclInvalidUsage (invalid usage)";
    case 6:
      return "ncclRemoteError (remote process exited or there was a network error)";
    case 7:
      return "ncclInProgress (operation in progress)";
    default:
      return "ncclResult " + std::to_string(code);
  }
}

const NcclHost* NcclLogReport::FindHost(std::string_view name) const {
  for (const auto& h : hosts) {
    if (h.name == name) return &h;
  }
  return nullptr;
}

namespace {

class Parser {
 public:
  void Line(sv line, size_t line_no);
  NcclLogReport Finish();

 private:
  struct HostState {
    size_t index = 0;                       // into r_.hosts
    std::map<std::string, int> bus_to_dev;  // bus id (lower hex) -> NVML index (else CUDA)
  };
  struct ThreadState {
    size_t error_index = npos;  // the error entry a following chain belongs to
    bool annotated = false;
  };

  NcclHost* Host(sv name);
  HostState* HostStateOf(sv name);
  NcclProcess* Process(sv host, int64_t pid);
  void SeeRank(int rank) { max_rank_ = std::max(max_rank_, rank); }
  void TieRank(int rank, sv host);
  // Per-host extras (hint lines, env, GPU names, bus ids) share one budget, so a log of many
  // hosts cannot grow them without bound.
  bool Spend();
  void AddHint(std::vector<NcclLine>* v, size_t line_no, sv host, sv line);
  bool AddError(size_t line_no, sv host, std::string text);  // false: over the cap
  void SetNetwork(NcclProcess* p, sv net, int source, size_t line_no, sv line);

  bool NcclLineSeen(sv line, size_t line_no);
  void Info(const Prefix& p, sv msg, sv line, size_t line_no);
  void Warn(const Prefix& p, sv msg, sv line, size_t line_no, const std::string& thread_key);
  bool Connection(const Prefix& p, sv msg, sv line, size_t line_no);
  bool Ring(const Prefix& p, sv msg, size_t line_no);
  void NetLine(const Prefix& p, sv msg, sv line, size_t line_no);
  void CommLine(const Prefix& p, sv msg, sv line, size_t line_no);
  void EnvLine(const Prefix& p, sv msg, sv line, size_t line_no);
  bool Watchdog(sv line, size_t line_no);
  bool TestsHeader(sv line, size_t line_no);
  void CountTransport(const std::string& family, size_t n);
  void Version(sv full);

  NcclLogReport r_;
  std::unordered_map<std::string, HostState> host_state_;
  std::map<std::pair<std::string, int64_t>, size_t> proc_index_;
  // Per process, how the network was learnt: 0 not yet, 1 "NET/X : Using", 2 "Initialized NET
  // plugin X", 3 "Using network X". A later line of the same or a better kind wins.
  std::vector<int> proc_network_source_;
  std::unordered_map<std::string, ThreadState> threads_;
  std::set<std::tuple<std::string, int64_t, int>> rank_slots_;  // (host, pid, dev) seen
  std::set<std::tuple<int, int64_t, std::string>> timeout_keys_;
  std::set<std::tuple<std::string, std::string, std::string>> net_device_keys_;
  std::optional<std::string> fallback_version_;
  size_t budget_ = kMaxHostExtras;
  int max_rank_ = -1;
  int max_nranks_ = -1;
  int max_nnodes_ = -1;
  int max_local_ranks_ = -1;
  int max_ring_ = -1;
};

NcclHost* Parser::Host(sv name) {
  HostState* st = HostStateOf(name);
  return st ? &r_.hosts[st->index] : nullptr;
}

Parser::HostState* Parser::HostStateOf(sv name) {
  if (name.empty()) return nullptr;
  auto it = host_state_.find(std::string(name));
  if (it != host_state_.end()) return &it->second;
  if (r_.hosts.size() >= kMaxHosts) {
    ++r_.entries_dropped;
    return nullptr;
  }
  NcclHost h;
  h.name = std::string(name);
  r_.hosts.push_back(std::move(h));
  HostState st;
  st.index = r_.hosts.size() - 1;
  return &host_state_.emplace(std::string(name), std::move(st)).first->second;
}

NcclProcess* Parser::Process(sv host, int64_t pid) {
  if (host.empty() || pid < 0) return nullptr;
  auto key = std::make_pair(std::string(host), pid);
  auto it = proc_index_.find(key);
  if (it != proc_index_.end()) return &r_.processes[it->second];
  if (r_.processes.size() >= kMaxProcesses) {
    ++r_.entries_dropped;
    return nullptr;
  }
  NcclProcess p;
  p.host = key.first;
  p.pid = pid;
  r_.processes.push_back(std::move(p));
  proc_network_source_.push_back(0);
  proc_index_.emplace(std::move(key), r_.processes.size() - 1);
  return &r_.processes.back();
}

void Parser::TieRank(int rank, sv host) {
  SeeRank(rank);
  if (host.empty() || rank < 0) return;
  if (r_.rank_hosts.size() >= kMaxChannels && !r_.rank_hosts.count(rank)) return;
  r_.rank_hosts.emplace(rank, std::string(host));
}

bool Parser::Spend() {
  if (budget_ == 0) {
    ++r_.entries_dropped;
    return false;
  }
  --budget_;
  return true;
}

void Parser::AddHint(std::vector<NcclLine>* v, size_t line_no, sv host, sv line) {
  if (v->size() >= kMaxHintsPerHost || !Spend()) return;
  v->push_back({line_no, std::string(host), Quote(line)});
}

bool Parser::AddError(size_t line_no, sv host, std::string text) {
  if (r_.errors.size() >= kMaxEntries) {
    ++r_.entries_dropped;
    return false;
  }
  r_.errors.push_back({line_no, std::string(host), std::move(text)});
  return true;
}

void Parser::SetNetwork(NcclProcess* p, sv net, int source, size_t line_no, sv line) {
  if (!p || net.empty()) return;
  int& have = proc_network_source_[static_cast<size_t>(p - r_.processes.data())];
  if (source < have) return;
  have = source;
  p->network = Token(net, 32);
  p->network_line = {line_no, p->host, Quote(line)};
}

void Parser::CountTransport(const std::string& family, size_t n) {
  auto it = r_.transports.find(family);
  if (it != r_.transports.end()) {
    it->second += n;
  } else if (r_.transports.size() < kMaxTransportFamilies) {
    r_.transports.emplace(family, n);
  } else {
    r_.transports["other"] += n;
  }
}

void Parser::Version(sv full) {
  const std::string v(full);
  if (std::find(r_.nccl_versions.begin(), r_.nccl_versions.end(), v) == r_.nccl_versions.end()) {
    if (r_.nccl_versions.size() < 64) r_.nccl_versions.push_back(v);
  }
  if (!r_.nccl_version_full) r_.nccl_version_full = v;
}

void Parser::Line(sv line, size_t line_no) {
  if (line.size() > kMaxLineBytes) {
    line = line.substr(0, kMaxLineBytes);
    ++r_.lines_truncated;
  }
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  // A mpirun "[1,4]<stdout>:" tag or a PyTorch "[rank13]:" tag says which rank wrote it.
  {
    sv s = TrimLeft(line);
    if (s.size() > 3 && s[0] == '[') {
      sv t = s.substr(1);
      if (TakeInt(t) && !t.empty() && t[0] == ',') {
        t.remove_prefix(1);
        auto rank = TakeSmallInt(t);
        if (rank && StartsWith(t, "]<std")) SeeRank(*rank);
      }
    }
    const size_t pr = line.substr(0, 128).find("[rank");
    if (pr != npos) {
      sv t = line.substr(pr + 5);
      auto rank = TakeSmallInt(t);
      if (rank && StartsWith(t, "]:")) SeeRank(*rank);
    }
  }

  if (NcclLineSeen(line, line_no) || Watchdog(line, line_no) || TestsHeader(line, line_no)) {
    ++r_.lines_parsed;
    return;
  }
  // The bare banner of NCCL < 2.19, alone or behind a launcher prefix.
  size_t key_pos = 0;
  if (auto v = VersionAtEnd(line, &key_pos)) {
    if (Contains(*v, "+cuda") && IsWrapperPrefix(line.substr(0, key_pos))) {
      Version(*v);
      ++r_.lines_parsed;
      return;
    }
  }
  if (FrameworkNcclError(line)) {
    // "RuntimeError: NCCL error in: …, unhandled system error, NCCL version 2.4.8"
    if (auto v = VersionAtEnd(line, &key_pos); v && !fallback_version_) {
      fallback_version_ = std::string(*v);
    }
    AddError(line_no, "", Quote(line));
    ++r_.lines_parsed;
    return;
  }
  if (IsNcclRasBanner(line)) {
    // The ncclras client's report (NCCL 2.24+): "NCCL version 2.26.2 compiled with CUDA 12.6".
    const sv v = Trim(line).substr(13);
    const sv token = v.substr(0, v.find(' '));
    if (!fallback_version_) fallback_version_ = std::string(token);
    ++r_.lines_parsed;
    return;
  }
  if (const size_t p = line.find("is using nccl=="); p != npos) {
    // vLLM: "vLLM is using nccl==2.20.5"
    const sv v = Trim(line.substr(p + 15));
    if (IsVersionToken(v)) {
      if (!fallback_version_) fallback_version_ = std::string(v);
      ++r_.lines_parsed;
      return;
    }
  }
  ++r_.lines_ignored;
}

bool Parser::NcclLineSeen(sv line, size_t line_no) {
  const NcclSplit split = SplitNccl(line);
  if (split.level == Level::kNone) return false;
  const Prefix p = ParsePrefix(split.before);
  if (p.ok) {
    NcclHost* h = Host(p.host);
    if (h && p.dev >= 0 && p.dev <= kMaxDeviceIndex) {
      InsertSorted(&h->cuda_devices, p.dev, kMaxDevicesPerHost);
    }
    Process(p.host, p.pid);
    if (p.dev >= 0 && rank_slots_.size() < kMaxChannels) {
      rank_slots_.emplace(std::string(p.host), p.pid, p.dev);
    }
  }
  // Error chains are per thread: a chain continues while the thread prints nothing else.
  std::string thread_key;
  if (p.ok) {
    thread_key.reserve(p.host.size() + 24);
    thread_key.append(p.host).append(":").append(std::to_string(p.pid));
    thread_key.append(":").append(std::to_string(p.tid));
  }
  const std::optional<int> chain =
      split.level == Level::kInfo ? ErrorChainCode(split.msg) : std::nullopt;
  if (chain) {
    ThreadState* ts = nullptr;
    if (p.ok) {
      if (threads_.size() > 65536) threads_.clear();
      ts = &threads_[thread_key];
    }
    if (ts && ts->error_index != npos && ts->error_index < r_.errors.size()) {
      if (!ts->annotated) {
        r_.errors[ts->error_index].text += " [-> " + NcclResultName(*chain) + "]";
        ts->annotated = true;
      }
    } else {
      const bool added = AddError(line_no, p.ok ? p.host : sv(),
                                  Quote(line) + " [" + NcclResultName(*chain) + "]");
      if (ts) {
        ts->error_index = added ? r_.errors.size() - 1 : npos;
        ts->annotated = true;
      }
    }
    return true;
  }
  if (p.ok && !threads_.empty()) threads_.erase(thread_key);

  switch (split.level) {
    case Level::kInfo:
      Info(p, split.msg, line, line_no);
      break;
    case Level::kWarn:
    case Level::kAbort:
      Warn(p, split.msg, line, line_no, thread_key);
      break;
    default:
      break;
  }
  return true;
}

void Parser::Warn(const Prefix& p, sv msg, sv line, size_t line_no, const std::string& thread_key) {
  const sv host = p.ok ? p.host : sv();
  if (r_.warnings.size() < kMaxEntries) {
    r_.warnings.push_back({line_no, std::string(host), Quote(line)});
  } else {
    ++r_.entries_dropped;
  }
  if (WarnIsError(msg) && AddError(line_no, host, Quote(line)) && p.ok) {
    if (threads_.size() > 65536) threads_.clear();
    threads_[thread_key] = {r_.errors.size() - 1, false};  // a chain may follow
  }
  if (NcclHost* h = Host(host)) {
    if (Contains(msg, "NVLink")) AddHint(&h->nvlink_hints, line_no, host, line);
    if (Contains(msg, "mlx5_") || Contains(msg, "ibv_")) AddHint(&h->ib_hints, line_no, host, line);
  }
}

void Parser::Info(const Prefix& p, sv msg, sv line, size_t line_no) {
  const sv host = p.ok ? p.host : sv();
  NcclHost* h = Host(host);

  if (StartsWith(msg, "NCCL version ")) {
    sv v = Trim(msg.substr(13));
    v = v.substr(0, v.find(' '));
    if (IsVersionToken(v)) {
      Version(v);
      if (h != nullptr) {
        auto& seen = h->nccl_versions;
        const bool known =
            std::any_of(seen.begin(), seen.end(), [&](const auto& e) { return e.first == v; });
        if (!known && seen.size() < kMaxVersionsPerHost) {
          seen.push_back({std::string(v), {line_no, std::string(host), Quote(line)}});
        }
      }
    }
    return;
  }
  if (StartsWith(msg, "cudaDriverVersion ")) {
    sv t = msg.substr(18);
    if (auto v = TakeSmallInt(t)) {
      if (!r_.cuda_driver_version) r_.cuda_driver_version = *v;
      if (h != nullptr) {
        auto& seen = h->cuda_driver_versions;
        const bool known =
            std::any_of(seen.begin(), seen.end(), [&](const auto& e) { return e.first == *v; });
        if (!known && seen.size() < kMaxVersionsPerHost) {
          seen.push_back({*v, {line_no, std::string(host), Quote(line)}});
        }
      }
    }
    return;
  }
  if (Connection(p, msg, line, line_no) || Ring(p, msg, line_no)) return;
  if (StartsWith(msg, "Trees ")) {
    ++r_.tree_lines;
    // "Trees [0] 3/-1/-1->2->1 …": the rank is between the arrows, its parent after.
    const size_t a = msg.find("->");
    if (a != npos) {
      sv t = msg.substr(a + 2);
      if (auto rank = TakeSmallInt(t)) {
        TieRank(*rank, host);
        if (StartsWith(t, "->")) {
          t.remove_prefix(2);
          if (auto parent = TakeSmallInt(t)) SeeRank(*parent);
        }
      }
    }
    return;
  }
  if (StartsWith(msg, "Connected all rings")) {
    ++r_.connected_rings;
    return;
  }
  if (StartsWith(msg, "Connected all trees")) {
    ++r_.connected_trees;
    return;
  }
  if (StartsWith(msg, "NET/")) {
    NetLine(p, msg, line, line_no);
    return;
  }
  if (StartsWith(msg, "Using network ")) {
    SetNetwork(Process(host, p.pid), Trim(msg.substr(14)), 3, line_no, line);
    return;
  }
  if (StartsWith(msg, "Initialized NET plugin ")) {
    SetNetwork(Process(host, p.pid), Trim(msg.substr(23)), 2, line_no, line);
    return;
  }
  if (StartsWith(msg, "NCCL_")) {
    EnvLine(p, msg, line, line_no);
    return;
  }
  if (StartsWith(msg, "Bootstrap")) {
    // "Bootstrap : Using [0]ib8:192.168.1.8<0> …": an IPoIB interface means IB hardware.
    const size_t u = msg.find("Using ");
    if (h && u != npos) {
      for (sv tok : SplitAny(msg.substr(u + 6), " ")) {
        if (!tok.empty() && tok[0] == '[') {
          tok.remove_prefix(std::min(tok.size(), tok.find(']') + 1));
        }
        if (tok.size() > 2 && StartsWith(tok, "ib") && IsDigit(tok[2])) {
          AddHint(&h->ib_hints, line_no, host, line);
          break;
        }
      }
    }
    return;
  }
  if (StartsWith(msg, "NVLS ")) {
    if (h) AddHint(&h->nvlink_hints, line_no, host, line);
    if (auto heads = IntAfter(msg, "nHeads "); heads && *heads > 0 && *heads <= kMaxSaneInt) {
      SeeRank(static_cast<int>(*heads) - 1);
    }
    return;
  }
  if (Contains(msg, " coll channels, ")) {
    // "16 coll channels, 0 collnet channels, 16 nvls channels, 16 p2p channels, …"
    auto nvls = IntBefore(msg, " nvls channels");
    auto collnet = IntBefore(msg, " collnet channels");
    if (nvls && *nvls > 0 && *nvls <= kMaxSaneInt) {
      CountTransport("NVLS", static_cast<size_t>(*nvls));
      if (h) AddHint(&h->nvlink_hints, line_no, host, line);
    }
    if (collnet && *collnet > 0 && *collnet <= kMaxSaneInt) {
      CountTransport("COLLNET", static_cast<size_t>(*collnet));
    }
    return;
  }
  if (Contains(msg, "comm 0x")) {
    CommLine(p, msg, line, line_no);
    return;
  }
  if (Contains(msg, "libibverbs") &&
      (Contains(msg, "Failed") || Contains(msg, "failed") || Contains(msg, "ould not"))) {
    if (h) h->ibverbs_missing = true;
    return;
  }
  if (StartsWith(msg, "Could not enable P2P bet")) {
    if (h) AddHint(&h->p2p_off, line_no, host, line);
    return;
  }
  if (FrameworkNcclError(msg)) AddError(line_no, host, Quote(line));
  if (h) {
    // NVLink in the graph search ("type NVL/PIX"), the topology dump ("+ NVL[240.0]"), or
    // in words; NVLS support; IB device names.
    if (Contains(msg, "NVLink") || Contains(msg, "type NVL") || Contains(msg, "NVL[") ||
        Contains(msg, "NVLS multicast support is available") || Contains(msg, "Connected NVLS")) {
      AddHint(&h->nvlink_hints, line_no, host, line);
    }
    if (Contains(msg, "mlx5_")) AddHint(&h->ib_hints, line_no, host, line);
  }
}

bool Parser::Connection(const Prefix& p, sv msg, sv line, size_t line_no) {
  sv s = msg;
  const auto channel = TakeChannelHead(s);
  if (!channel) return false;
  const size_t via = s.find(" via ");
  if (via == npos) return false;
  sv left = s.substr(0, via);
  const sv detail = Trim(s.substr(via + 5));
  NcclChannel c;
  c.channel = *channel;
  sv from_dev, to_dev;
  if (!TakeRankDev(left, &c.from_rank, &from_dev)) return false;
  left = TrimLeft(left);
  if (StartsWith(left, "->")) {
    left = TrimLeft(left.substr(2));
    if (!TakeRankDev(left, &c.to_rank, &to_dev)) return false;
    left = TrimLeft(left);
  }
  if (StartsWith(left, "[send]")) {
    c.direction = "send";
  } else if (StartsWith(left, "[receive]") || StartsWith(left, "[recv]")) {
    c.direction = "recv";
  }
  c.transport = TransportFamily(detail);
  c.transport_detail = Token(detail, 96);
  c.from_dev = Token(from_dev, 20);
  c.to_dev = Token(to_dev, 20);
  if (!IsBusIdToken(from_dev)) {
    sv t = from_dev;
    if (auto d = TakeSmallInt(t); d && t.empty()) c.nvml_from = *d;
  }
  if (!IsBusIdToken(to_dev)) {
    sv t = to_dev;
    if (auto d = TakeSmallInt(t); d && t.empty()) c.nvml_to = *d;
  }
  const sv host = p.ok ? p.host : sv();
  c.host = std::string(host);
  c.pid = p.ok ? p.pid : -1;
  c.line_no = line_no;

  // Who printed it: the sender for P2P, SHM and NET [send]; the receiver for NET [receive].
  // (P2P/MNNVL joins GPUs of different nodes over multi-node NVLink.)
  const bool intra =
      (StartsWith(c.transport, "P2P") && c.transport != "P2P/MNNVL") || c.transport == "SHM";
  SeeRank(c.from_rank);
  SeeRank(c.to_rank);
  if (intra || c.direction != "recv") TieRank(c.from_rank, host);
  if (c.to_rank >= 0 && (intra || c.direction == "recv")) TieRank(c.to_rank, host);
  if (NcclProcess* proc = Process(host, c.pid)) {
    const int mine = c.direction == "recv" ? c.to_rank : c.from_rank;
    if (mine >= 0) InsertSorted(&proc->ranks, mine, kMaxRanksPerProcess);
  }
  if (NcclHost* h = Host(host)) {
    // The GPUs of this host: both ends of P2P/SHM, the printing rank's end of NET.
    const bool receive = c.direction == "recv";
    for (const int d : {intra || !receive ? c.nvml_from : -1, intra || receive ? c.nvml_to : -1}) {
      if (d >= 0 && d <= kMaxDeviceIndex) InsertSorted(&h->nvml_devices, d, kMaxDevicesPerHost);
    }
    if (c.transport == "P2P/NVL" || c.transport == "P2P/MNNVL" || c.transport == "NVLS") {
      AddHint(&h->nvlink_hints, line_no, host, line);
    }
  }
  CountTransport(c.transport, 1);
  if (r_.channels.size() >= kMaxChannels) {
    ++r_.channels_dropped;
    return true;
  }
  c.text = Quote(line);
  r_.channels.push_back(std::move(c));
  return true;
}

bool Parser::Ring(const Prefix& p, sv msg, size_t line_no) {
  sv s = msg;
  const auto channel = TakeChannelHead(s);
  if (!channel) return false;
  NcclRing ring;
  ring.channel = *channel;
  int length = 0;
  s = Trim(s);
  while (!s.empty()) {
    auto r = TakeSmallInt(s);
    if (!r) return false;  // not a ring: "Channel 00/0 : 0[0] -> 1[1]" without "via"
    if (ring.ranks.size() < kMaxRingRanks) ring.ranks.push_back(*r);
    SeeRank(*r);
    ++length;
    if (!s.empty() && !IsBlank(s[0])) return false;
    s = TrimLeft(s);
  }
  if (length == 0) return false;
  max_ring_ = std::max(max_ring_, length);
  if (r_.rings.size() >= kMaxEntries) {
    ++r_.entries_dropped;
    return true;
  }
  ring.host = p.ok ? std::string(p.host) : "";
  ring.line_no = line_no;
  r_.rings.push_back(std::move(ring));
  return true;
}

void Parser::NetLine(const Prefix& p, sv msg, sv line, size_t line_no) {
  // "NET/IB : Using [0]mlx5_4:1/RoCE [RO]; OOB enp24s0np0:10.10.10.1<0>"
  // "NET/Socket : Using [0]enp67s0:192.168.157.54<0> [1]enp68s0:192.168.157.53<0>"
  // "NET/IB : No device found."
  const sv host = p.ok ? p.host : sv();
  sv rest = msg.substr(4);
  const size_t e = rest.find_first_of(" :");
  const sv net = rest.substr(0, e);
  if (net.empty() || net.size() > 32 || net == "Plugin") return;
  rest = e == npos ? sv() : TrimLeft(rest.substr(e));
  if (!rest.empty() && rest[0] == ':') rest = TrimLeft(rest.substr(1));
  NcclHost* h = Host(host);
  if (StartsWith(rest, "No device found")) {
    if (h && IsIbNet(net)) h->ib_no_device = true;
    return;
  }
  if (!StartsWith(rest, "Using")) return;
  rest = rest.substr(5);
  rest = rest.substr(0, rest.find(';'));
  size_t found = 0;
  for (sv tok : SplitAny(rest, " \t")) {
    if (tok.empty() || tok[0] != '[') continue;
    const size_t rb = tok.find(']');
    if (rb == npos) continue;
    sv idx = tok.substr(1, rb - 1);
    auto index = TakeSmallInt(idx);
    if (!index || !idx.empty()) continue;  // "[RO]": relaxed ordering, not a device
    const sv body = tok.substr(rb + 1);
    if (body.empty()) continue;
    NcclNetDevice d;
    d.host = std::string(host);
    d.net = Token(net, 32);
    d.index = *index;
    d.line_no = line_no;
    const size_t colon = body.find(':');
    d.name = Token(body.substr(0, colon), 64);
    if (d.name.empty()) continue;
    if (colon != npos) {
      sv after = body.substr(colon + 1);
      if (IsIbNet(net)) {
        // "1/RoCE": port, then the link layer.
        if (auto port = TakeSmallInt(after)) d.port = *port;
        if (!after.empty() && after[0] == '/') d.link_layer = Token(after.substr(1), 16);
      } else {
        const size_t lt = after.rfind('<');
        d.address = Token(after.substr(0, lt), 64);
      }
    }
    ++found;
    if (r_.net_devices.size() >= kMaxNetDevices) {
      ++r_.entries_dropped;
      continue;
    }
    if (!net_device_keys_.emplace(d.host, d.net, d.name).second) continue;  // listed before
    r_.net_devices.push_back(std::move(d));
  }
  if (found == 0) return;
  if (h) {
    if (IsIbNet(net)) h->ib_devices = true;
    bool dup = false;
    for (const auto& l : h->net_lines) dup = dup || l.line_no == line_no;
    if (!dup && h->net_lines.size() < kMaxHintsPerHost && Spend()) {
      h->net_lines.push_back({line_no, std::string(host), Quote(line)});
    }
  }
  // NCCL prints this line when it initialises the net, and it stops at the first net that
  // initialises with devices: the process uses this one unless a later line says otherwise.
  SetNetwork(Process(host, p.pid), net, 1, line_no, line);
}

void Parser::CommLine(const Prefix& p, sv msg, sv line, size_t line_no) {
  // "comm 0x55a7be569d00 rank 1 nRanks 8 nNodes 1 localRanks 8 localRank 1 MNNVL 0"
  // "comm 0x1476dca0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 23000 commId 0x… - Init START"
  // "ncclCommInitRank comm 0x… rank 0 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE"
  const size_t c = msg.find("comm 0x");
  if (c > 0 && !IsBlank(msg[c - 1])) return;
  const sv host = p.ok ? p.host : sv();
  const auto toks = SplitAny(msg.substr(c), " ");
  std::optional<int> rank, nranks, cuda_dev, nvml_dev;
  sv bus;
  bool mnnvl = false;
  for (size_t i = 0; i + 1 < toks.size(); ++i) {
    const sv k = toks[i];
    sv v = toks[i + 1];
    auto num = [&]() -> std::optional<int> {
      sv t = v;
      auto n = TakeSmallInt(t);
      return n && t.empty() ? n : std::nullopt;
    };
    if (k == "rank") {
      rank = num();
    } else if (k == "nRanks" || k == "nranks") {
      nranks = num();
    } else if (k == "nNodes") {
      if (auto n = num()) max_nnodes_ = std::max(max_nnodes_, *n);
    } else if (k == "localRanks") {
      if (auto n = num()) max_local_ranks_ = std::max(max_local_ranks_, *n);
    } else if (k == "cudaDev") {
      cuda_dev = num();
    } else if (k == "nvmlDev") {
      nvml_dev = num();
    } else if (k == "busId") {
      if (!v.empty() && v.size() <= 16 && std::all_of(v.begin(), v.end(), IsHexDigit)) bus = v;
    } else if (k == "MNNVL") {
      mnnvl = v == "1";
    }
  }
  if (!rank && !nranks) return;
  if (nranks) max_nranks_ = std::max(max_nranks_, *nranks);
  if (rank) {
    TieRank(*rank, host);
    if (NcclProcess* proc = Process(host, p.pid)) {
      InsertSorted(&proc->ranks, *rank, kMaxRanksPerProcess);
    }
  }
  HostState* st = HostStateOf(host);
  if (!st) return;
  NcclHost& h = r_.hosts[st->index];
  if (cuda_dev && *cuda_dev <= kMaxDeviceIndex) {
    InsertSorted(&h.cuda_devices, *cuda_dev, kMaxDevicesPerHost);
  }
  if (nvml_dev && *nvml_dev <= kMaxDeviceIndex) {
    InsertSorted(&h.nvml_devices, *nvml_dev, kMaxDevicesPerHost);
  }
  if (!bus.empty() && (nvml_dev || cuda_dev) && Spend()) {
    st->bus_to_dev[LowerHex(bus)] = nvml_dev ? *nvml_dev : *cuda_dev;
  }
  if (mnnvl) AddHint(&h.nvlink_hints, line_no, host, line);
}

void Parser::EnvLine(const Prefix& p, sv msg, sv line, size_t line_no) {
  // "NCCL_SHM_DISABLE set by environment to 1." / "NCCL_IB_HCA set to mlx5_4"
  size_t n = 0;
  while (n < msg.size() && n < 64 && (IsAlnum(msg[n]) || msg[n] == '_')) ++n;
  const sv name = msg.substr(0, n);
  sv rest = msg.substr(n);
  constexpr sv kByEnv = " set by environment to ";
  constexpr sv kSet = " set to ";
  if (StartsWith(rest, kByEnv)) {
    rest.remove_prefix(kByEnv.size());
  } else if (StartsWith(rest, kSet)) {
    rest.remove_prefix(kSet.size());
  } else {
    return;
  }
  sv value = Trim(rest);
  if (!value.empty() && value.back() == '.') value.remove_suffix(1);
  const sv host = p.ok ? p.host : sv();
  NcclHost* h = Host(host);
  if (!h) return;
  if (auto it = h->env.find(std::string(name)); it != h->env.end()) {
    it->second = Token(value, 128);
  } else if (Spend()) {
    h->env.emplace(std::string(name), Token(value, 128));
  }
  if ((name == "NCCL_P2P_DISABLE" && value == "1") ||
      (name == "NCCL_P2P_LEVEL" && (value == "LOC" || value == "0"))) {
    AddHint(&h->p2p_off, line_no, host, line);
  }
  if (StartsWith(name, "NCCL_IB_") && name != "NCCL_IB_DISABLE") {
    AddHint(&h->ib_hints, line_no, host, line);
  }
}

bool Parser::Watchdog(sv line, size_t line_no) {
  if (Contains(line, "detected by watchdog at work")) return true;  // follows a timeout line
  const size_t pos = line.find("Watchdog caught collective operation timeout");
  if (pos == npos) return false;
  NcclTimeout t;
  t.line_no = line_no;
  const sv before = line.substr(0, pos);
  if (const size_t r = before.rfind("Rank "); r != npos) {
    sv s = before.substr(r + 5);
    if (auto v = TakeSmallInt(s)) t.pg_rank = *v;
  }
  if (const size_t g = before.find("[rank"); g != npos) {
    sv s = before.substr(g + 5);
    if (auto v = TakeSmallInt(s); v && StartsWith(s, "]")) t.rank = *v;
  }
  if (t.rank < 0) t.rank = t.pg_rank;
  SeeRank(t.rank);
  sv work = line.substr(pos);
  if (const size_t w = work.find("WorkNCCL("); w != npos) {
    work = work.substr(w, 1024);
    t.seq_num = IntAfter(work, "SeqNum=").value_or(-1);
    t.numel_in = IntAfter(work, "NumelIn=").value_or(-1);
    t.numel_out = IntAfter(work, "NumelOut=").value_or(-1);
    t.timeout_ms = IntAfter(work, "Timeout(ms)=").value_or(-1);
    if (const size_t o = work.find("OpType="); o != npos) {
      const sv op = work.substr(o + 7);
      size_t n = 0;
      while (n < op.size() && n < 48 && (IsAlnum(op[n]) || op[n] == '_')) ++n;
      t.op_type = std::string(op.substr(0, n));
    }
  }
  t.ran_for_ms = IntAfter(line.substr(pos), "ran for ").value_or(-1);
  t.text = Quote(line);
  if (r_.timeouts.size() >= kMaxEntries) {
    ++r_.entries_dropped;
    return true;
  }
  // PyTorch repeats the timeout in "NCCL communicator was aborted … Original reason …".
  if (!timeout_keys_.emplace(t.rank, t.seq_num, t.op_type).second) return true;
  AddError(line_no, "", t.text);
  r_.timeouts.push_back(std::move(t));
  return true;
}

bool Parser::TestsHeader(sv line, size_t line_no) {
  auto t = ParseTestsRankLine(line);
  if (!t) return false;
  TieRank(t->rank, t->host);
  Process(t->host, t->pid);
  if (rank_slots_.size() < kMaxChannels) {
    rank_slots_.emplace(std::string(t->host), t->pid, t->device);
  }
  HostState* st = HostStateOf(t->host);
  if (!st) return true;
  NcclHost& h = r_.hosts[st->index];
  if (t->device <= kMaxDeviceIndex) {
    InsertSorted(&h.cuda_devices, t->device, kMaxDevicesPerHost);
    if (h.gpu_names.count(t->device) || Spend()) h.gpu_names[t->device] = Token(t->name, 96);
  }
  const std::string bus = BusIdFromHeader(t->bus);
  if (!bus.empty() && !st->bus_to_dev.count(bus) && Spend()) st->bus_to_dev.emplace(bus, t->device);
  // SXM boards join their GPUs with NVLink (HGX/DGX).
  if (Contains(t->name, "SXM")) AddHint(&h.nvlink_hints, line_no, t->host, line);
  return true;
}

NcclLogReport Parser::Finish() {
  // Old channel lines name GPUs by bus id; comm lines and nccl-tests headers map them.
  for (auto& c : r_.channels) {
    auto it = host_state_.find(c.host);
    if (it == host_state_.end()) continue;
    const auto& bus = it->second.bus_to_dev;
    if (c.nvml_from < 0 && IsBusIdToken(c.from_dev)) {
      if (auto b = bus.find(LowerHex(c.from_dev)); b != bus.end()) c.nvml_from = b->second;
    }
    if (c.nvml_to < 0 && IsBusIdToken(c.to_dev)) {
      if (auto b = bus.find(LowerHex(c.to_dev)); b != bus.end()) c.nvml_to = b->second;
    }
  }
  // P2P read between a pair: NVLink evidence for that pair (see NcclHost::nvlink_pairs).
  for (const auto& c : r_.channels) {
    if (!StartsWith(c.transport, "P2P/") || !Contains(c.transport_detail, "/read")) continue;
    if (c.nvml_from < 0 || c.nvml_to < 0 || c.nvml_from == c.nvml_to) continue;
    auto it = host_state_.find(c.host);
    if (it == host_state_.end()) continue;
    NcclHost& h = r_.hosts[it->second.index];
    const auto pair = std::minmax(c.nvml_from, c.nvml_to);
    if (h.nvlink_pairs.count({pair.first, pair.second}) || !Spend()) continue;
    h.nvlink_pairs.emplace(std::make_pair(pair.first, pair.second),
                           NcclLine{c.line_no, c.host, c.text});
  }

  if (r_.nccl_version_full) {
    const std::string& full = *r_.nccl_version_full;
    r_.nccl_version = full.substr(0, full.find('+'));
  } else if (fallback_version_) {
    r_.nccl_version_full = fallback_version_;
    r_.nccl_version = fallback_version_->substr(0, fallback_version_->find('+'));
    r_.nccl_versions.push_back(*fallback_version_);
  }

  if (max_nranks_ > 0) {
    r_.ranks = max_nranks_;
    r_.ranks_exact = true;
  } else if (max_ring_ > 0) {
    r_.ranks = max_ring_;
    r_.ranks_exact = true;
  } else {
    const int bound = std::max(max_rank_ + 1, static_cast<int>(rank_slots_.size()));
    if (bound > 0) r_.ranks = bound;
  }
  if (max_nnodes_ > 0) {
    r_.nodes = max_nnodes_;
    r_.nodes_exact = true;
  } else if (!r_.hosts.empty()) {
    r_.nodes = static_cast<int>(r_.hosts.size());
  }
  if (max_local_ranks_ > 0) r_.local_ranks = max_local_ranks_;

  // Timeouts of one SeqNum with different operations: ranks that disagree on the order of
  // collectives (each waits in a different one), if they are in one process group.
  std::map<int64_t, std::vector<const NcclTimeout*>> by_seq;
  for (const auto& t : r_.timeouts) {
    if (t.seq_num >= 0 && !t.op_type.empty()) by_seq[t.seq_num].push_back(&t);
  }
  for (const auto& [seq, ts] : by_seq) {
    std::set<std::string> ops;
    for (const auto* t : ts) ops.insert(t->op_type);
    if (ops.size() < 2) continue;
    std::string text = "collective mismatch: SeqNum " + std::to_string(seq) + " timed out as";
    size_t last_line = 0;
    for (size_t i = 0; i < ts.size() && i < 8; ++i) {
      text += (i == 0 ? " " : ", ") + ts[i]->op_type + " on rank " + std::to_string(ts[i]->rank);
      last_line = std::max(last_line, ts[i]->line_no);
    }
    text += " (if they are one process group, its ranks called different collectives)";
    AddError(last_line, "", std::move(text));
  }
  std::stable_sort(r_.errors.begin(), r_.errors.end(),
                   [](const NcclLine& a, const NcclLine& b) { return a.line_no < b.line_no; });
  return std::move(r_);
}

}  // namespace

NcclLogReport ParseNcclLog(std::string_view text) {
  Parser parser;
  size_t line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == npos) end = text.size();
    parser.Line(text.substr(start, end - start), ++line_no);
    start = end + 1;
  }
  return parser.Finish();
}

bool IsNcclRasBanner(std::string_view line) {
  const sv t = Trim(line);
  if (!StartsWith(t, "NCCL version ")) return false;
  const sv rest = t.substr(13);
  const size_t sp = rest.find(' ');
  return sp != npos && IsVersionToken(rest.substr(0, sp)) &&
         StartsWith(rest.substr(sp), " compiled with CUDA ");
}

std::optional<std::string> ParseNcclVersionLine(std::string_view line) {
  constexpr sv kKey = "NCCL version ";
  for (size_t pos = line.find(kKey); pos != npos; pos = line.find(kKey, pos + 1)) {
    const sv version = TrimRight(line.substr(pos + kKey.size()));
    if (!IsVersionToken(version)) continue;  // also: anything after the version
    const sv before = line.substr(0, pos);
    if (EndsWithNcclInfoPrefix(before)) return std::string(version);
    if (version.find("+cuda") != npos && IsWrapperPrefix(before)) return std::string(version);
  }
  return std::nullopt;
}

}  // namespace gpuwatch::nccl
