#include "logs/kernel_log.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <utility>

#include "common/strings.h"
#include "logs/internal/stamps.h"

namespace gpuwatch::logs {
namespace {

using internal::ClockLength;
using internal::DateTimeLength;
using internal::FirstBracketedTime;
using internal::StripPastePrefixes;
using json = nlohmann::json;

constexpr size_t kMaxHosts = 256;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsBlank(char c) { return c == ' ' || c == '\t'; }

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

bool ConsumePrefix(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}

std::string_view SkipBlanks(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  return s;
}

// The whitespace-delimited token at the start of `s`.
std::string_view Token(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && !IsBlank(s[n]) && s[n] != '\n' && s[n] != '\r') ++n;
  return s.substr(0, n);
}

// Up to `max_digits` decimal digits at the start of `s`, as T; nullopt when there are none,
// when more digits follow, or on overflow.
template <typename T>
std::optional<T> LeadingNumber(std::string_view s, size_t max_digits = 20) {
  size_t n = 0;
  while (n < s.size() && IsDigit(s[n])) ++n;
  if (n == 0 || n > max_digits) return std::nullopt;
  return ParseInt<T>(s.substr(0, n));
}

// NVML's form of a driver address ("PCI:0000:65:00", "0000:65:00.0", "0000:06:00.0:"), read by
// ParseNvrmXid's normaliser so that the driver's address forms have a single reader. "" when
// it is not an address.
std::string NormalizeNvrmAddress(std::string_view token) {
  while (!token.empty() && (token.back() == ':' || token.back() == ',' || token.back() == '.')) {
    token.remove_suffix(1);
  }
  if (token.empty() || token.size() > 40 || Contains(token, ")")) return "";
  std::string line = "NVRM: Xid (";
  line.append(token);
  line += "): 0";
  std::optional<XidLine> x = ParseNvrmXid(line);
  return x ? x->pci_bus_id : "";
}

// "GPU-" then 8-4-4-4-12 hex digits (nvidia-smi -L's UUID form); also "MIG-".
bool IsGpuUuid(std::string_view s) {
  if (!ConsumePrefix(&s, "GPU-") && !ConsumePrefix(&s, "MIG-")) return false;
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!IsDigit(c) && !(c >= 'a' && c <= 'f') && !(c >= 'A' && c <= 'F')) {
      return false;
    }
  }
  return true;
}

// ---- the line's prefix: time and host -------------------------------------------------------

// "Mar 04 10:11:12", "Dec  2 11:38:47", "4月 19 22:36:49", "Mar 04 10:11:12.123456": a month
// token in any locale (journalctl and syslog print "%b %d %H:%M:%S", the day space-padded by
// syslog), the day, a clock. Length, or 0.
size_t SyslogStampLength(std::string_view s) {
  size_t i = 0;
  bool all_digits = true;
  while (i < s.size() && i < 16 && !IsBlank(s[i]) && s[i] != ':' && s[i] != '[' && s[i] != ']') {
    all_digits = all_digits && IsDigit(s[i]);
    ++i;
  }
  if (i == 0 || all_digits || i >= s.size() || s[i] != ' ') return 0;
  size_t j = i + 1;
  if (j < s.size() && s[j] == ' ') ++j;  // "Dec  2"
  size_t day = 0;
  while (j + day < s.size() && day < 2 && IsDigit(s[j + day])) ++day;
  if (day == 0 || j + day >= s.size() || s[j + day] != ' ') return 0;
  const size_t clock = ClockLength(s, j + day + 1);
  return clock == 0 ? 0 : j + day + 1 + clock;
}

// journalctl -o short-full: "Mon 2024-03-04 10:11:12 CET". Length, or 0.
size_t ShortFullStampLength(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && i < 12 && !IsBlank(s[i]) && !IsDigit(s[i])) ++i;
  if (i == 0 || i >= s.size() || s[i] != ' ') return 0;
  const size_t dt = DateTimeLength(s, i + 1);
  if (dt == 0) return 0;
  size_t n = i + 1 + dt;
  if (n < s.size() && s[n] == ' ') {
    const std::string_view zone = Token(s.substr(n + 1));
    if (!zone.empty() && zone.size() <= 6 && zone.back() != ':') n += 1 + zone.size();
  }
  return n;
}

struct Prefix {
  std::string_view time;
  std::string_view host;
};

// After a stamp: "HOST kernel: …" gives the host, "kernel: …" none. Sets *kernel_ident when
// the journal/syslog ident "kernel:" is there.
std::string_view HostAfterStamp(std::string_view rest, bool* kernel_ident) {
  rest = SkipBlanks(rest);
  const std::string_view first = Token(rest);
  if (first == "kernel:") {
    *kernel_ident = true;
    return {};
  }
  if (first.empty() || Contains(first, ":") || Contains(first, "[") || Contains(first, "]")) {
    return {};
  }
  const std::string_view after = rest.substr(first.size());
  if (after.size() > 1 && after.front() == ' ' && Token(after.substr(1)) == "kernel:") {
    *kernel_ident = true;
    return first;
  }
  return {};
}

// The time and host a line's prefix gives. `head` is the text before the message; a stamp at
// its start wins over one in brackets further in (a syslog line that also carries the kernel's
// "[  219.470994]" is timed by the syslog stamp).
Prefix ReadPrefix(std::string_view line, std::string_view head) {
  Prefix p;
  size_t n = DateTimeLength(line, 0);
  if (n == 0) n = SyslogStampLength(line);
  if (n == 0) n = ShortFullStampLength(line);
  bool kernel_ident = false;
  if (n > 0) {
    p.time = line.substr(0, n);
    p.host = HostAfterStamp(line.substr(n), &kernel_ident);
    return p;
  }
  if (!line.empty() && line.front() == '[') {
    // "[  219.470994] host kernel: …" (journalctl -o short-monotonic) or plain dmesg.
    const size_t close = line.find(']');
    if (close != std::string_view::npos) {
      if (auto t = FirstBracketedTime(line.substr(0, close + 1), /*allow_uptime=*/true)) {
        p.time = *t;
        p.host = HostAfterStamp(line.substr(close + 1), &kernel_ident);
        return p;
      }
    }
  }
  // journalctl -o short-unix: "1709547072.123456 host kernel: …".
  size_t digits = 0;
  while (digits < line.size() && (IsDigit(line[digits]) || line[digits] == '.')) ++digits;
  if (digits > 2 && digits < line.size() && line[digits] == ' ' &&
      Contains(line.substr(0, digits), ".")) {
    const std::string_view host = HostAfterStamp(line.substr(digits), &kernel_ident);
    if (kernel_ident) {
      p.time = line.substr(0, digits);
      p.host = host;
      return p;
    }
  }
  if (auto t = FirstBracketedTime(head, /*allow_uptime=*/true)) p.time = *t;
  return p;
}

// Where the kernel message starts: the first marker of a line this reader reports or uses.
size_t MessageStart(std::string_view s) {
  size_t at = std::string_view::npos;
  for (std::string_view m : {"NVRM:", "Out of memory", "Memory cgroup out of memory",
                             "Killed process", "Kill process"}) {
    const size_t p = s.find(m);
    if (p < at) at = p;
  }
  return at;
}

// ---- OOM killer -----------------------------------------------------------------------------

// mm/oom_kill.c (docs/research/xid.md): "<reason>: Killed process %d (%s) total-vm:%lukB,
// anon-rss:%lukB, file-rss:%lukB, shmem-rss:%lukB, UID:%u pgtables:%lukB oom_score_adj:%hd";
// older kernels print "Killed process %d (%s) total-vm:…" without the reason (2.6.32:
// "Killed process %d, UID %d, (%s) total-vm:…"), after "<reason>: Kill process %d (%s) score
// %u or sacrifice child".
bool ParseOomKill(std::string_view msg, KernelLine* out) {
  bool old_form = false;
  size_t k = msg.find("Killed process ");
  size_t tag = 15;
  if (k == std::string_view::npos) {
    k = msg.find("Kill process ");
    tag = 13;
    old_form = true;
    if (k == std::string_view::npos) return false;
  }
  const std::string_view before = msg.substr(0, k);
  std::string_view rest = msg.substr(k + tag);
  const bool reason = Contains(before, "out of memory") || Contains(before, "Out of memory");
  // A bare "Killed process" counts only in the kernel's own shape (its rss fields); the old
  // "Kill process" line always carries the reason and " score ".
  if (old_form ? (!reason || !Contains(rest, " score "))
               : (!reason && !Contains(rest, "-rss:") && !Contains(rest, "total-vm:"))) {
    return false;
  }
  const auto pid = LeadingNumber<uint32_t>(rest, 10);
  if (!pid) return false;
  while (!rest.empty() && IsDigit(rest.front())) rest.remove_prefix(1);
  if (ConsumePrefix(&rest, ", UID ")) {
    out->uid = LeadingNumber<uint32_t>(rest, 10);
    while (!rest.empty() && IsDigit(rest.front())) rest.remove_prefix(1);
    ConsumePrefix(&rest, ",");
  }
  rest = SkipBlanks(rest);
  out->kind = KernelLine::Kind::kOomKill;
  out->pid = pid;
  if (rest.empty() || rest.front() != '(') return true;  // cut after the pid
  // A comm may hold blanks and parentheses ("(resolved)"): it runs from the first '(' to the
  // last ')' before the field that follows it.
  size_t field = std::string_view::npos;
  for (std::string_view f : {" total-vm:", " vsz:", " score ", " anon-rss:"}) {
    const size_t p = rest.find(f);
    if (p < field) field = p;
  }
  const size_t close = rest.substr(0, field).rfind(')');
  std::string_view tail;
  if (close != std::string_view::npos && close >= 1) {
    out->process = std::string(rest.substr(1, close - 1));
    tail = rest.substr(close + 1);
  }
  if (const size_t a = tail.find("anon-rss:"); a != std::string_view::npos) {
    out->anon_rss_kb = LeadingNumber<uint64_t>(tail.substr(a + 9));
  }
  if (const size_t u = tail.find("UID:"); u != std::string_view::npos) {
    out->uid = LeadingNumber<uint32_t>(tail.substr(u + 4), 10);
  }
  return true;
}

// ---- one line -------------------------------------------------------------------------------

// ParseKernelLine, plus the address of a probe-time message's first line ("NVRM: The NVIDIA
// GPU 0000:b3:00.0" without the rest of the message) in *probe_address.
KernelLine ParseLine(std::string_view raw, std::string* probe_address) {
  KernelLine out;
  std::string_view line = StripPastePrefixes(raw);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);

  // A raw /dev/kmsg record: "<prio>,<seq>,<usec>,<flags>;<message>".
  std::string kmsg_message;
  std::string_view msg = line;
  if (!line.empty() && IsDigit(line.front())) {
    const size_t semi = line.find(';');
    if (semi != std::string_view::npos && semi < 64 && !Contains(line.substr(0, semi), " ")) {
      if (Result<KmsgRecord> rec = ParseKmsgRecord(line); rec.ok()) {
        char buf[40];
        std::snprintf(buf, sizeof(buf), "%" PRIu64 ".%06" PRIu64, rec->usec / 1000000,
                      rec->usec % 1000000);
        out.time = buf;
        kmsg_message = std::move(rec->message);
        msg = kmsg_message;
      }
    }
  }
  if (msg.data() == line.data()) {
    const size_t start = MessageStart(line);
    const Prefix p = ReadPrefix(line, line.substr(0, start));
    out.time = std::string(p.time);
    out.host = std::string(p.host);
  }

  if (std::optional<XidLine> x = ParseNvrmXid(msg)) {
    out.kind = KernelLine::Kind::kXid;
    out.xid = std::move(x);
    return out;
  }
  if (const size_t nv = msg.find("NVRM:"); nv != std::string_view::npos) {
    std::string_view body = SkipBlanks(msg.substr(nv + 5));
    if (Contains(body, "has fallen off the bus") ||
        Contains(body, "fallen off the bus and is not responding")) {
      out.kind = KernelLine::Kind::kFallenOffBus;
      if (const size_t t = body.find("The NVIDIA GPU "); t != std::string_view::npos) {
        out.pci_bus_id = NormalizeNvrmAddress(Token(body.substr(t + 15)));
      } else if (ConsumePrefix(&body, "GPU at ") || ConsumePrefix(&body, "GPU ")) {
        out.pci_bus_id = NormalizeNvrmAddress(Token(body));
      }
      return out;
    }
    if (ConsumePrefix(&body, "GPU at ")) {
      // "GPU at PCI:0000:ab:00: GPU-45cf…": the driver maps the address to the UUID.
      const std::string_view addr = Token(body);
      const std::string_view uuid = Token(SkipBlanks(body.substr(addr.size())));
      if (IsGpuUuid(uuid)) {
        out.kind = KernelLine::Kind::kGpuUuid;
        out.pci_bus_id = NormalizeNvrmAddress(addr);
        out.uuid = std::string(uuid);
      }
      return out;
    }
    if (ConsumePrefix(&body, "The NVIDIA GPU ") && probe_address != nullptr) {
      *probe_address = NormalizeNvrmAddress(Token(body));
    }
    return out;
  }
  ParseOomKill(msg, &out);
  return out;
}

json OrNull(const std::string& s) { return s.empty() ? json(nullptr) : json(SanitizeUtf8(s)); }

template <typename T>
json OrNull(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace

KernelLine ParseKernelLine(std::string_view line) { return ParseLine(line, nullptr); }

KernelReport ParseKernelText(std::string_view text) {
  KernelReport r;
  // The first line of the three-line probe message, waiting for its last line.
  struct Probe {
    std::string pci_bus_id, time;
    int lines_left = 0;
  };
  std::optional<Probe> probe;
  auto add = [](std::vector<KernelLine>* list, KernelLine&& k) {
    if (list->size() < kMaxKernelEntries) list->push_back(std::move(k));
  };
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);

    if (probe && --probe->lines_left < 0) probe.reset();
    std::string probe_address;
    KernelLine k = ParseLine(line, &probe_address);
    if (!k.host.empty() && r.hosts.size() < kMaxHosts &&
        std::find(r.hosts.begin(), r.hosts.end(), k.host) == r.hosts.end()) {
      r.hosts.push_back(k.host);
    }
    if (!probe_address.empty()) probe = Probe{probe_address, k.time, 2};
    switch (k.kind) {
      case KernelLine::Kind::kXid:
        add(&r.xids, std::move(k));
        break;
      case KernelLine::Kind::kOomKill:
        add(&r.oom_kills, std::move(k));
        break;
      case KernelLine::Kind::kFallenOffBus:
        if (k.pci_bus_id.empty() && probe) {
          k.pci_bus_id = probe->pci_bus_id;
          k.time = probe->time;  // the message's stamp is on its first line
        }
        probe.reset();
        add(&r.fallen_off_bus, std::move(k));
        break;
      case KernelLine::Kind::kNone:
      case KernelLine::Kind::kGpuUuid:
        break;
    }
  }
  return r;
}

json KernelReportJson(const KernelReport& r) {
  json xids = json::array();
  for (const KernelLine& k : r.xids) {
    if (!k.xid) continue;
    xids.push_back({{"code", k.xid->xid},
                    {"pci_bus_id", OrNull(k.xid->pci_bus_id)},
                    {"pid", OrNull(k.xid->pid)},
                    {"process", OrNull(k.xid->process_name)},
                    {"time", OrNull(k.time)},
                    {"text", SanitizeUtf8(k.xid->text)}});
  }
  json ooms = json::array();
  for (const KernelLine& k : r.oom_kills) {
    ooms.push_back({{"pid", OrNull(k.pid)},
                    {"process", OrNull(k.process)},
                    {"anon_rss_kb", OrNull(k.anon_rss_kb)},
                    {"uid", OrNull(k.uid)},
                    {"time", OrNull(k.time)}});
  }
  json fallen = json::array();
  for (const KernelLine& k : r.fallen_off_bus) {
    fallen.push_back({{"pci_bus_id", OrNull(k.pci_bus_id)}, {"time", OrNull(k.time)}});
  }
  return {{"xid", std::move(xids)},
          {"oom_kills", std::move(ooms)},
          {"fallen_off_bus", std::move(fallen)}};
}

}  // namespace gpuwatch::logs
