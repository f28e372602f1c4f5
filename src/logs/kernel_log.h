// Kernel log text as people hold it after a job died: what one line reports (an NVIDIA Xid, an
// OOM-killer kill, a GPU fallen off the bus, the driver's PCI-address-to-UUID line), and the
// `kernel` object of `gpuwatch explain --json` (docs/format/explain.md) for a whole text.
//
// Any form of the kernel log is read, from the line's prefix, never from a file name:
//   dmesg                     "[93297.027938] NVRM: Xid …" (padded: "[ 1843.308145]")
//   dmesg -T (any locale)     "[Mon Aug  5 03:54:13 2024] …", "[四 3月 20 21:01:25 2025] …"
//   dmesg --time-format iso   "2024-04-29T14:55:41,679700+02:00 …"
//   journalctl, syslog        "Mar 04 10:11:12 host kernel: …", "4月 19 22:36:49 host kernel: …",
//                             "Dec  2 11:38:47 host kernel: [  219.470994] …" (the syslog stamp
//                             is the time: it is the wall clock the rest of a file compares to),
//                             "May 18 19:02:39 kernel: …" (host left out), "kernel: …"
//   rsyslog ISO, short-iso    "2024-03-04T10:11:12.123456+00:00 host kernel: …"
//   talosctl dmesg            "10.0.0.1: kern: warning: [2026-04-22T21:26:20.599488292Z]: …"
//   raw /dev/kmsg             "4,1523,93297027938,-;NVRM: …" (ParseKmsgRecord; the time is the
//                             record's microseconds written as dmesg writes them, "93297.027938",
//                             so that it compares with the other forms)
// with paste prefixes ("> ", "+> ", backticks) in front, and tool output that quotes the line
// ("[XID found] (54 minutes ago) \"NVRM: Xid …\"": no time).
//
// Xid lines are ParseNvrmXid's (kmsg.h); its PCI-address normaliser is used for every address
// here, so there is one reading of the driver's "PCI:dddd:bb:dd" form.
//
// What counts (docs/research/xid.md has the sources):
//   - OOM kills: mm/oom_kill.c's "<reason>: Killed process N (comm) total-vm:…, anon-rss:…kB,
//     …, UID:N …" with reason "Out of memory", "Memory cgroup out of memory" or "Out of memory
//     (oom_kill_allocating_task)"; the older bare "Killed process N (comm) total-vm:…" and the
//     "<reason>: Kill process N (comm) score S or sacrifice child" line before it (each its own
//     entry: the kernel may then kill a child, so the pids can differ). Not kills: the
//     "oom-kill:constraint=…" summary, "invoked oom-killer", "oom_reaper: reaped process" (the
//     same victim again), "OOM victim … is already exiting".
//   - Fallen off the bus: "NVRM: GPU at 0000:65:00.0 has fallen off the bus.", "NVRM: GPU
//     0000:06:00.0: GPU has fallen off the bus.", and the probe-time message with no Xid, which
//     dmesg prints on three lines ("NVRM: The NVIDIA GPU 0000:b3:00.0" / "NVRM: (PCI ID: …)
//     installed in this system has" / "NVRM: fallen off the bus and is not responding to
//     commands."). Never the "Xid …: 79" line itself.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "logs/kmsg.h"

namespace gpuwatch::logs {

struct KernelLine {
  enum class Kind : uint8_t { kNone, kXid, kOomKill, kFallenOffBus, kGpuUuid };
  Kind kind = Kind::kNone;
  std::optional<XidLine> xid;  // kXid (from ParseNvrmXid)
  // kOomKill: the killed process (for "Kill process … or sacrifice child", the one chosen).
  std::optional<uint32_t> pid;
  std::string process;                  // kOomKill: its comm, "" when not printed
  std::optional<uint64_t> anon_rss_kb;  // kOomKill: "anon-rss:NkB"
  std::optional<uint32_t> uid;          // kOomKill: "UID:N" (or 2.6.32's ", UID N,")
  // kFallenOffBus, kGpuUuid: NVML's form "00000000:65:00.0"; "" when the line names no address
  // (the last line of the three-line probe message; ParseKernelText takes it from the first).
  std::string pci_bus_id;
  std::string uuid;  // kGpuUuid: "GPU-45cf…" ("NVRM: GPU at PCI:0000:ab:00: GPU-45cf…")
  // The line's timestamp as printed (docs/format/explain.md, Times), without brackets or
  // dmesg's padding; "" if none. Set for every line that has one, whatever its kind.
  std::string time;
  // The journal or syslog host ("Mar 04 10:11:12 HOST kernel: …"); "" if none.
  std::string host;
};

// One line, without its newline (a trailing CR is ignored). Any bytes are safe.
KernelLine ParseKernelLine(std::string_view line);

// Whole text: one entry per reporting line, in order (the explain `kernel` object).
struct KernelReport {
  std::vector<KernelLine> xids, oom_kills, fallen_off_bus;
  std::vector<std::string> hosts;  // the distinct journal/syslog hosts, in order of appearance
};

// Splits on '\n' and reads each line; the three-line probe message becomes one fallen-off-the-
// bus entry with the first line's address and time. Lists are capped at kMaxKernelEntries
// each (a text holding more is a storm; the first ones are kept).
KernelReport ParseKernelText(std::string_view text);
inline constexpr size_t kMaxKernelEntries = 65536;

// Exactly the `kernel` object of docs/format/explain.md:
//   {"xid": [{"code", "pci_bus_id", "pid", "process", "time", "text"}],
//    "oom_kills": [{"pid", "process", "anon_rss_kb", "uid", "time"}],
//    "fallen_off_bus": [{"pci_bus_id", "time"}]}
// with null for what a line does not give. Strings are made valid UTF-8 (a comm is any bytes),
// so dump() cannot throw.
nlohmann::json KernelReportJson(const KernelReport& r);

}  // namespace gpuwatch::logs
