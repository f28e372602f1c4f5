#include "collect/host_collector.h"

#include <dirent.h>
#include <sys/timex.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "collect/internal/sysfs.h"
#include "common/log.h"
#include "common/strings.h"

namespace gpuwatch::collect {
namespace {

using internal::ErrnoText;
using internal::ListDir;

constexpr int64_t kWarnIntervalMs = 60 * 60 * 1000;
constexpr size_t kMaxWarnedPaths = 4096;

// Value of a "Key:   1234 kB" line in /proc/meminfo, in bytes. nullopt when the number is not
// numeric. Every meminfo size is printed in kB (KiB, despite the unit's spelling).
std::optional<double> MeminfoBytes(std::string_view rest) {
  rest = TrimWhitespace(rest);
  bool kb = false;
  if (rest.size() >= 2 && rest.substr(rest.size() - 2) == "kB") {
    kb = true;
    rest = TrimWhitespace(rest.substr(0, rest.size() - 2));
  }
  auto v = ParseInt<uint64_t>(rest);
  if (!v) return std::nullopt;
  return static_cast<double>(*v) * (kb ? 1024.0 : 1.0);
}

}  // namespace

HostCollector::HostCollector(std::string root_dir, std::unique_ptr<TimeSourceProbe> time_probe)
    : root_(std::move(root_dir)), time_probe_(std::move(time_probe)) {
  // "/" + "/proc/stat" would give "//proc/stat": harmless, but ugly in every log line.
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
  if (!time_probe_ && root_.empty()) time_probe_ = std::make_unique<TimeSourceProbe>();
}

void HostCollector::Warn(int64_t now_ms, const std::string& path, std::string_view what) {
  auto it = warned_.find(path);
  if (it != warned_.end() && now_ms - it->second < kWarnIntervalMs && now_ms >= it->second) {
    return;
  }
  if (it == warned_.end() && warned_.size() >= kMaxWarnedPaths) warned_.clear();
  warned_[path] = now_ms;
  GW_LOG_WARN("host: {}: {}", path, what);
}

ClockState ClockStateFromTimex(int rc, long offset, long maxerror, int status) {
  ClockState c;
  c.offset_ms = static_cast<double>(offset) / ((status & STA_NANO) ? 1e6 : 1e3);
  c.max_error_ms = static_cast<double>(maxerror) / 1e3;  // always µs
  c.synced = rc != TIME_ERROR && !(status & STA_UNSYNC);
  return c;
}

Status HostCollector::Collect(int64_t time_ms, model::HostSample* out) {
  *out = model::HostSample{};
  out->time_ms = time_ms;
  // Non-short-circuit: every reader runs even when an earlier one failed.
  bool any = false;
  any |= ReadStat(time_ms, out);
  any |= ReadMeminfo(time_ms, out);
  any |= ReadLoadavg(time_ms, out);
  any |= ReadNetDev(time_ms, out);
  any |= ReadInfiniband(time_ms, out);
  if (!any) return Status::Unavailable("no host file readable under '" + root_ + "/'");
  // The clock is this machine's, not the fixture tree's: read it only for the real root.
  if (root_.empty() || root_ == "/") {
    struct timex tx {};
    const int rc = ::adjtimex(&tx);
    if (rc >= 0) {
      const ClockState c = ClockStateFromTimex(rc, tx.offset, tx.maxerror, tx.status);
      out->clock_offset_ms = c.offset_ms;
      out->clock_max_error_ms = c.max_error_ms;
      out->clock_synced = c.synced;
    }
  }
  ReadTimeSource(time_ms, out);
  return Status::Ok();
}

void HostCollector::ReadTimeSource(int64_t now_ms, model::HostSample* out) {
  if (!time_probe_) return;
  // A wall clock stepped backwards (now < last) must not postpone the next probe for as long.
  const bool due = !time_probe_ms_ || now_ms - *time_probe_ms_ >= kTimeSourceProbeIntervalMs ||
                   now_ms < *time_probe_ms_;
  if (due) {
    time_probe_ms_ = now_ms;
    Result<TimeSourceReading> r = time_probe_->Probe();
    if (r.ok()) {
      time_source_ = std::move(r).value();
    } else {
      // A stale offset would be worse than none: the caller falls back to adjtimex.
      time_source_.reset();
      Warn(now_ms, "time source", r.status().message());
    }
  }
  if (!time_source_) return;
  out->time_source = time_source_->source;
  out->time_source_offset_ms = time_source_->offset_ms;
  out->time_source_synced = time_source_->synced;
}

bool HostCollector::ReadStat(int64_t now_ms, model::HostSample* out) {
  const std::string path = root_ + "/proc/stat";
  FileReadResult f = ReadSmallFile(path);
  if (!f.ok) {
    Warn(now_ms, path, ErrnoText(f.err));
    return false;
  }
  std::optional<CpuTimes> cur;
  unsigned cpus = 0;
  for (std::string_view line : SplitAny(f.data, "\n")) {
    // The cpu lines come first; the interrupt lines after them can be hundreds of KiB on big
    // machines and are not needed.
    if (!StartsWith(line, "cpu")) break;
    if (line.size() > 3 && line[3] >= '0' && line[3] <= '9') {
      ++cpus;
      continue;
    }
    // "cpu  user nice system idle iowait irq softirq steal guest guest_nice". Kernels before
    // 2.6.11 print fewer columns; the first four have always been there.
    std::vector<std::string_view> fields = SplitAny(line, " \t");
    std::array<uint64_t, 8> v{};
    size_t n = 0;
    bool bad = false;
    for (size_t i = 1; i < fields.size() && n < v.size(); ++i, ++n) {
      auto x = ParseInt<uint64_t>(fields[i]);
      if (!x) {
        bad = true;
        break;
      }
      v[n] = *x;
    }
    if (bad || n < 4) {
      Warn(now_ms, path, "malformed aggregate cpu line");
      continue;
    }
    CpuTimes t;
    for (uint64_t x : v) t.total += x;  // guest/guest_nice excluded: already counted in user
    t.idle = v[3];
    t.iowait = v[4];
    cur = t;
  }
  out->cpu_count = cpus;
  if (!cur) {
    if (cpus == 0) Warn(now_ms, path, "no cpu lines");
    return cpus > 0;
  }
  out->cpu_total_jiffies = cur->total;
  out->cpu_idle_jiffies = cur->idle;
  out->cpu_iowait_jiffies = cur->iowait;
  if (prev_cpu_ && cur->total > prev_cpu_->total) {
    // Busy time is measured directly (not as total minus idle) and deltas are signed: the
    // kernel documents that iowait can go backwards under NO_HZ, and that must not show up as
    // busy time.
    auto busy = [](const CpuTimes& t) {
      return static_cast<double>(t.total) - static_cast<double>(t.idle) -
             static_cast<double>(t.iowait);
    };
    const double dt = static_cast<double>(cur->total - prev_cpu_->total);
    const double dbusy = busy(*cur) - busy(*prev_cpu_);
    const double diow = static_cast<double>(cur->iowait) - static_cast<double>(prev_cpu_->iowait);
    auto clamp = [](double pct) { return std::clamp(pct, 0.0, 100.0); };
    out->cpu_util_pct = clamp(100.0 * dbusy / dt);
    out->iowait_pct = clamp(100.0 * diow / dt);
  }
  // A failed tick keeps the older baseline: the next delta then spans two intervals, which is
  // still a correct average.
  prev_cpu_ = cur;
  return true;
}

bool HostCollector::ReadMeminfo(int64_t now_ms, model::HostSample* out) {
  const std::string path = root_ + "/proc/meminfo";
  FileReadResult f = ReadSmallFile(path);
  if (!f.ok) {
    Warn(now_ms, path, ErrnoText(f.err));
    return false;
  }
  std::optional<double> total, avail, swap_total, swap_free;
  std::string bad;
  for (std::string_view line : SplitAny(f.data, "\n")) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    std::optional<double>* dst = key == "MemTotal"       ? &total
                                 : key == "MemAvailable" ? &avail
                                 : key == "SwapTotal"    ? &swap_total
                                 : key == "SwapFree"     ? &swap_free
                                                         : nullptr;
    if (dst == nullptr) continue;
    *dst = MeminfoBytes(line.substr(colon + 1));
    if (!*dst) bad += (bad.empty() ? "" : ", ") + std::string(key);
  }
  if (!bad.empty()) Warn(now_ms, path, "non-numeric " + bad);
  out->mem_total_bytes = total;
  // MemAvailable exists since Linux 3.14; without it "used" is left absent rather than guessed.
  out->mem_available_bytes = avail;
  if (total && avail) out->mem_used_bytes = std::max(*total - *avail, 0.0);
  if (swap_total && swap_free) out->swap_used_bytes = std::max(*swap_total - *swap_free, 0.0);
  return true;
}

bool HostCollector::ReadLoadavg(int64_t now_ms, model::HostSample* out) {
  const std::string path = root_ + "/proc/loadavg";
  FileReadResult f = ReadSmallFile(path, 4096);
  if (!f.ok) {
    Warn(now_ms, path, ErrnoText(f.err));
    return false;
  }
  // "0.06 0.10 0.07 1/84 4249"
  std::vector<std::string_view> fields = SplitAny(f.data, " \t\n");
  std::array<std::optional<double>*, 3> dst = {&out->load1, &out->load5, &out->load15};
  for (size_t i = 0; i < dst.size(); ++i) {
    if (i < fields.size()) *dst[i] = ParseDouble(fields[i]);
  }
  if (!out->load1 || !out->load5 || !out->load15) Warn(now_ms, path, "malformed");
  return true;
}

bool HostCollector::ReadNetDev(int64_t now_ms, model::HostSample* out) {
  const std::string path = root_ + "/proc/net/dev";
  FileReadResult f = ReadSmallFile(path);
  if (!f.ok) {
    Warn(now_ms, path, ErrnoText(f.err));
    return false;
  }
  std::string bad;
  for (std::string_view line : SplitAny(f.data, "\n")) {
    // "  eth0: 55804532 1941 0 ..." — the two header lines have no ':' before a '|'. Old kernels
    // glue large counters to the colon ("eth0:1234567"), so split at the colon, not on blanks.
    // The first colon is safe: the kernel rejects ':' in interface names.
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || line.find('|') != std::string_view::npos) continue;
    const std::string_view name = TrimWhitespace(line.substr(0, colon));
    if (name.empty() || name == "lo" || name.find('/') != std::string_view::npos) continue;
    std::vector<std::string_view> fields = SplitAny(line.substr(colon + 1), " \t");
    // rx: bytes packets errs drop fifo frame compressed multicast;
    // tx: bytes packets errs drop fifo colls carrier compressed.
    std::array<uint64_t, 16> v{};
    bool ok = fields.size() >= v.size();
    for (size_t i = 0; ok && i < v.size(); ++i) {
      auto x = ParseInt<uint64_t>(fields[i]);
      if (x) v[i] = *x;
      ok = x.has_value();
    }
    if (!ok) {
      // Columns are positional: with one missing, every later one would be misattributed.
      bad += (bad.empty() ? "" : ", ") + std::string(name);
      continue;
    }
    model::NicSample& nic = out->nics.emplace_back();
    nic.name = std::string(name);
    nic.rx_bytes = v[0];
    nic.rx_packets = v[1];
    nic.rx_errors = v[2];
    nic.rx_dropped = v[3];
    nic.tx_bytes = v[8];
    nic.tx_packets = v[9];
    nic.tx_errors = v[10];
    nic.tx_dropped = v[11];
    ReadNicSysfs(now_ms, &nic);
  }
  if (!bad.empty()) Warn(now_ms, path, "skipped malformed line(s) for " + bad);
  return true;
}

void HostCollector::ReadNicSysfs(int64_t now_ms, model::NicSample* nic) {
  const std::string dir = root_ + "/sys/class/net/" + nic->name;
  // Hardware has a parent device; veth, bridges, bonds and tunnels do not.
  nic->physical = ::access((dir + "/device").c_str(), F_OK) == 0;
  const std::string oper_path = dir + "/operstate";
  FileReadResult f = ReadSmallFile(oper_path, 256);
  if (!f.ok) {
    Warn(now_ms, oper_path, ErrnoText(f.err));
  } else {
    // RFC 2863 states. "unknown" is what lo, tun and many virtual drivers report while working,
    // so it stays absent rather than "down".
    const std::string_view s = TrimWhitespace(f.data);
    if (s == "up") {
      nic->link_up = true;
    } else if (s == "down" || s == "lowerlayerdown" || s == "notpresent" || s == "dormant" ||
               s == "testing") {
      nic->link_up = false;
    } else if (s != "unknown") {
      Warn(now_ms, oper_path, "unexpected state '" + std::string(s) + "'");
    }
  }
  // speed fails with EINVAL on virtual devices and reads -1 on a down link: both mean "no
  // speed", not an error worth a log line.
  const std::string speed_path = dir + "/speed";
  f = ReadSmallFile(speed_path, 256);
  if (!f.ok) return;
  auto mbps = ParseInt<int64_t>(f.data);
  if (!mbps) {
    Warn(now_ms, speed_path, "non-numeric");
    return;
  }
  // -1 is SPEED_UNKNOWN; older kernels printed it as u16 (65535) or u32 (4294967295).
  if (*mbps <= 0 || *mbps == 65535 || *mbps == 4294967295) return;
  nic->speed_mbps = static_cast<double>(*mbps);
}

bool HostCollector::ReadInfiniband(int64_t now_ms, model::HostSample* out) {
  const std::string base = root_ + "/sys/class/infiniband";
  std::vector<std::string> devices;
  int err = 0;
  if (!ListDir(base, &devices, &err)) {
    // No RDMA hardware (or no ib_core loaded) is the common case, not a fault.
    if (err != ENOENT) Warn(now_ms, base, ErrnoText(err));
    return false;
  }
  std::vector<std::string> ports;
  for (const std::string& dev : devices) {
    const std::string ports_dir = base + "/" + dev + "/ports";
    if (!ListDir(ports_dir, &ports, &err)) {
      Warn(now_ms, ports_dir, ErrnoText(err));
      continue;
    }
    for (const std::string& p : ports) {
      auto num = ParseInt<unsigned>(p);
      if (!num) continue;
      model::IbPortSample& port = out->ib_ports.emplace_back();
      port.device = dev;
      port.port = *num;
      ReadIbPort(now_ms, ports_dir + "/" + p, &port);
    }
  }
  return !out->ib_ports.empty();
}

std::optional<uint64_t> HostCollector::ReadCounter(int64_t now_ms, const std::string& path) {
  FileReadResult f = ReadSmallFile(path, 256);
  if (!f.ok) {
    // Counter sets differ by HCA and firmware: a missing file is "not offered", not a fault.
    if (f.err != ENOENT) Warn(now_ms, path, ErrnoText(f.err));
    return std::nullopt;
  }
  auto v = ParseInt<uint64_t>(f.data);
  if (!v) Warn(now_ms, path, "non-numeric counter");
  return v;
}

void HostCollector::ReadIbPort(int64_t now_ms, const std::string& dir, model::IbPortSample* port) {
  // "4: ACTIVE" -> "ACTIVE".
  std::string path = dir + "/state";
  FileReadResult f = ReadSmallFile(path, 256);
  if (!f.ok) {
    Warn(now_ms, path, ErrnoText(f.err));
  } else {
    port->state = internal::ParseIbPortState(f.data);
    if (port->state.empty()) Warn(now_ms, path, "empty");
  }
  // "400 Gb/sec (4X NDR)" -> 400; "2.5 Gb/sec (1X SDR)" -> 2.5.
  path = dir + "/rate";
  f = ReadSmallFile(path, 256);
  if (!f.ok) {
    Warn(now_ms, path, ErrnoText(f.err));
  } else {
    port->rate_gbps = internal::ParseIbRateGbps(f.data);
    if (!port->rate_gbps) {
      Warn(now_ms, path, TrimWhitespace(f.data).empty() ? "empty" : "unexpected format");
    }
  }
  path = dir + "/link_layer";
  f = ReadSmallFile(path, 256);
  if (!f.ok) {
    Warn(now_ms, path, ErrnoText(f.err));
  } else {
    port->link_layer = std::string(TrimWhitespace(f.data));
  }

  const std::string c = dir + "/counters/";
  // port_{rcv,xmit}_data count 4-byte words (IBA PortCounters "octets divided by 4").
  if (auto v = ReadCounter(now_ms, c + "port_xmit_data")) port->xmit_bytes = *v * 4;
  if (auto v = ReadCounter(now_ms, c + "port_rcv_data")) port->rcv_bytes = *v * 4;
  port->xmit_packets = ReadCounter(now_ms, c + "port_xmit_packets");
  port->rcv_packets = ReadCounter(now_ms, c + "port_rcv_packets");
  port->symbol_errors = ReadCounter(now_ms, c + "symbol_error");
  port->rcv_errors = ReadCounter(now_ms, c + "port_rcv_errors");
  port->link_downed = ReadCounter(now_ms, c + "link_downed");
  port->link_error_recovery = ReadCounter(now_ms, c + "link_error_recovery");
  port->xmit_discards = ReadCounter(now_ms, c + "port_xmit_discards");
  port->port_xmit_wait = ReadCounter(now_ms, c + "port_xmit_wait");

  // hw_counters exist only on HCAs whose driver exposes RDMA transport statistics (mlx5 does).
  const std::string h = dir + "/hw_counters/";
  port->local_ack_timeout_err = ReadCounter(now_ms, h + "local_ack_timeout_err");
  port->out_of_sequence = ReadCounter(now_ms, h + "out_of_sequence");
  port->packet_seq_err = ReadCounter(now_ms, h + "packet_seq_err");
  port->rnr_nak_retry_err = ReadCounter(now_ms, h + "rnr_nak_retry_err");
  port->implied_nak_seq_err = ReadCounter(now_ms, h + "implied_nak_seq_err");
  port->np_ecn_marked_roce_packets = ReadCounter(now_ms, h + "np_ecn_marked_roce_packets");
  port->np_cnp_sent = ReadCounter(now_ms, h + "np_cnp_sent");
  port->rp_cnp_handled = ReadCounter(now_ms, h + "rp_cnp_handled");
}

}  // namespace gpuwatch::collect
