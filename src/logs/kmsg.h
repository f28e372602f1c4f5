// Kernel log capture: /dev/kmsg records and the NVIDIA driver's "NVRM: Xid" lines in them.
//
// Two layers. ParseKmsgRecord and ParseNvrmXid are pure parsers (no I/O, no logging, safe on
// any bytes; fuzzed by kmsg_fuzz.cc). KmsgReader reads records from /dev/kmsg (or, in tests,
// a regular file or a FIFO holding the same text) without blocking and stamps them with
// wall-clock time.
//
// Timestamps. A /dev/kmsg record carries microseconds from the kernel's local_clock(), the
// printk clock. That is sched_clock-based, which, like CLOCK_MONOTONIC and unlike
// CLOCK_BOOTTIME, does not advance during suspend. So the wall-clock time of a record is
// (CLOCK_REALTIME - CLOCK_MONOTONIC) + usec, the same rule util-linux `dmesg -T` applies (it
// computes boot time from CLOCK_BOOTTIME and adds back the suspended time, BOOTTIME -
// MONOTONIC). Checked on this project's build host (6.18 kernel): a record written to
// /dev/kmsg carried a stamp within 2 ms of CLOCK_MONOTONIC read around the write (sched_clock
// and the monotonic clocksource are separate clocks and drift apart by that much; NTP slews
// only the latter). The rule is exact only for records logged since the last resume; older
// records come out late by the suspended time, which GPU servers rarely accumulate.
//
// Thread-safety: the free functions are thread-safe. KmsgReader is not; one thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::logs {

// ---- /dev/kmsg records ----------------------------------------------------------------------

// One record: "<prio>,<seq>,<usec>,<flags>[,<more fields>];<message>\n" and then optional
// dictionary lines (" SUBSYSTEM=pci\n", " DEVICE=+pci:0000:18:00.0\n") that are ignored. The
// kernel escapes bytes < 0x20 (tab and newline included), >= 0x7f and '\' in the message as
// "\xNN" (msg_add_ext_text in printk.c); the message here is unescaped.
struct KmsgRecord {
  unsigned facility = 0;  // prio >> 3: 0 kernel, 1 user, 3 daemon, … (syslog(3))
  unsigned level = 0;     // prio & 7: 0 emerg … 3 err, 4 warning … 7 debug
  uint64_t seq = 0;       // sequence number; a gap means records were lost
  uint64_t usec = 0;      // printk clock (see the file comment), microseconds
  // '-' for a record of its own; 'c' (a fragment continued by the next record) and '+' (a
  // continuation of the previous one) come from kernels before 4.9 that exported fragments.
  char flags = '-';
  std::string message;
};

// Parses one record (the bytes one read(2) of /dev/kmsg returns, or one line). Fields after
// the fourth (CONFIG_PRINTK_CALLER's "caller=T123") are skipped. InvalidArgument when the
// header is malformed.
Result<KmsgRecord> ParseKmsgRecord(std::string_view record);

// ---- NVRM Xid lines -------------------------------------------------------------------------

struct XidLine {
  // NVML's form, lower-case: "00000000:18:00.0". The driver prints "PCI:dddd:bb:dd" (domain
  // %04x, bus, device — no function): the domain is zero-extended to NVML's 8 digits and the
  // function is ".0", because the driver names the GPU's function, which is function 0. A
  // function the text does carry is kept, and older drivers' "(bb:dd)" / "(dddd:bb:dd)" forms
  // without "PCI:" are read too (domain 0 when absent). Empty when the id is not a bus address
  // (a redacted "PCI:..." in a post, or a "GPU-<uuid>"): the line is still an Xid.
  std::string pci_bus_id;
  uint64_t xid = 0;
  std::optional<uint32_t> pid;  // absent when not printed or printed as '<unknown>'
  std::string process_name;     // "" when not printed or "<unknown>"
  // The description after the number (and after pid/name), e.g. "GPU has fallen off the bus.",
  // "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005".
  std::string text;
};

// Finds "NVRM: Xid (" anywhere in `line`, so a kmsg message and a dmesg, `dmesg -T` or
// journalctl line (with their timestamp and host prefixes) all parse. A line quoted by a tool
// ("… \"NVRM: Xid (…): 119, … (0x4).\"") loses the closing quote. nullopt for anything else,
// including the Xid reports of other tools (the device plugin's "XidCriticalError: Xid=69 on
// Device=GPU-…") whose format is not the driver's.
std::optional<XidLine> ParseNvrmXid(std::string_view line);

// ---- KmsgReader -----------------------------------------------------------------------------

// CLOCK_REALTIME - CLOCK_MONOTONIC now, in ms: the Unix time of printk time 0 (file comment).
int64_t KmsgBootRealtimeMs();

struct KmsgReaderOptions {
  std::string path = "/dev/kmsg";
  // Skip the records already in the kernel's ring buffer (SEEK_END), so an agent restart does
  // not report a boot's worth of old Xids again. Ignored for a FIFO, which cannot seek.
  bool start_at_end = true;
  // Unix ms at printk time 0. nullopt: KmsgBootRealtimeMs() at each Read, which follows NTP
  // steps of the wall clock.
  std::optional<int64_t> boot_realtime_ms;
  // Upper bound on records returned by one Read, so a storm of kernel messages cannot stall
  // the caller; the rest comes on the next Read. REQUIRES: > 0.
  size_t max_records_per_read = 4096;
};

struct KmsgEntry {
  KmsgRecord record;
  int64_t time_ms = 0;  // Unix ms
};

class KmsgReader {
 public:
  explicit KmsgReader(KmsgReaderOptions options = {});
  ~KmsgReader();
  KmsgReader(const KmsgReader&) = delete;
  KmsgReader& operator=(const KmsgReader&) = delete;

  // Opens the path non-blocking. PermissionDenied without CAP_SYSLOG when
  // kernel.dmesg_restrict=1; NotFound when the path does not exist.
  Status Open();

  // Appends the records available now to `out` and returns without waiting. A malformed
  // record is skipped and counted. REQUIRES: Open() succeeded.
  Status Read(std::vector<KmsgEntry>* out);

  // Times the kernel overwrote records before they were read (read(2) returned EPIPE); each
  // is one or more lost records, and `lost_records` counts them by the sequence-number gaps.
  uint64_t overruns() const { return overruns_; }
  uint64_t lost_records() const { return lost_records_; }
  uint64_t malformed_records() const { return malformed_; }

 private:
  void HandleLine(std::string_view line, int64_t boot_ms, std::vector<KmsgEntry>* out,
                  size_t* emitted);

  KmsgReaderOptions options_;
  int fd_ = -1;
  // /dev/kmsg hands out one record per read(2); a file or FIFO hands out bytes, which are
  // split into lines here. Records never hold a raw '\n' (it is escaped), so a line is a
  // record or one of its dictionary lines.
  std::string pending_;
  std::string buf_;
  std::optional<uint64_t> next_seq_;
  uint64_t overruns_ = 0;
  uint64_t lost_records_ = 0;
  uint64_t malformed_ = 0;
};

}  // namespace gpuwatch::logs
