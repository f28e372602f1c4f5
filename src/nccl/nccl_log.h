// NCCL debug-log parser: what an NCCL_DEBUG=INFO log says about a job's communicators — the
// NCCL version, how many ranks and nodes, which GPUs each host drove, which transport every
// channel connection really uses (P2P, SHM, NET/IB, NET/Socket, NVLS, CollNet), which NICs
// NCCL picked, and what went wrong (WARN lines, error chains, PyTorch watchdog timeouts).
//
// Input is whatever a job wrote: lines of several processes and hosts interleaved (state is
// kept per host and per process), launcher and paste prefixes ("[1,0]<stdout>:", "[rank3]:",
// a timestamp, k8s pod names as hosts), Python tracebacks in between, truncated lines, binary
// garbage. The parser never fails; what it cannot read is counted in `lines_ignored`. Memory
// is bounded: every list has a cap and a counter of what was dropped (`channels_dropped`,
// `entries_dropped`), the per-host extras share one budget, and each line is read up to
// kMaxLineBytes.
//
// Line shapes (NCCL 2.4 to 2.31; see ../shared/real/nccl and NCCL's debug.cc):
//   host:pid:tid [dev] NCCL INFO <message>
//   host:pid:tid [dev] file.cc:123 NCCL WARN <message>
//   NCCL version 2.18.5+cuda12.0            (before 2.19: bare, or behind a launcher prefix)
//   [rank7]:[E816 …] … [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(…) …
//   #  Rank  0 Group  0 Pid 4766 on HOST device  0 [0x21] NVIDIA GeForce RTX 5090  (nccl-tests)
//
// Thread-safety: pure function; the report is a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuwatch::nccl {

inline constexpr size_t kMaxLineBytes = 64 * 1024;  // longer lines are read up to this
inline constexpr size_t kMaxChannels = 100000;      // channel connections kept
inline constexpr size_t kMaxEntries = 1000;         // errors, warnings, timeouts, rings kept
inline constexpr size_t kMaxHosts = 4096;
inline constexpr size_t kMaxProcesses = 16384;
inline constexpr size_t kMaxNetDevices = 4096;
inline constexpr size_t kMaxHintsPerHost = 16;
inline constexpr size_t kMaxVersionsPerHost = 8;  // NVLink / IB / P2P-off evidence lines per host
inline constexpr size_t kMaxTransportFamilies = 64;
inline constexpr size_t kMaxTextBytes = 320;  // quoted log text is cut here ("…")

// One line of the log kept as evidence: its 1-based number and its text (valid UTF-8,
// control characters as '?', leading blanks dropped, cut at kMaxTextBytes).
struct NcclLine {
  size_t line_no = 0;
  std::string host;  // "" when the line names none
  std::string text;
};

// One channel connection: "Channel 02/0 : 7[7] -> 0[0] [send] via NET/IB/0/GDRDMA".
struct NcclChannel {
  int channel = -1;
  int from_rank = -1;
  int to_rank = -1;  // -1 for CollNet lines, which name one rank
  // As printed inside the brackets: the NVML device index since NCCL 2.12 ("7"), the PCI bus
  // id as hex before ("1b000"). nvml_from/nvml_to: the NVML index, resolved through the log's
  // comm lines or nccl-tests headers for the old form; -1 unknown.
  std::string from_dev;
  std::string to_dev;
  int nvml_from = -1;
  int nvml_to = -1;
  std::string transport;         // family: "P2P/IPC", "SHM", "NET/IB", … (TransportFamily)
  std::string transport_detail;  // as printed after "via ": "P2P/IPC/read", "NET/IB/0/GDRDMA"
  std::string direction;         // "send", "recv" ("[receive]"), or "" (P2P and SHM name none)
  std::string host;              // of the line's prefix; "" unknown
  int64_t pid = -1;
  size_t line_no = 0;
  std::string text;  // the line, for evidence
};

// A NIC that NCCL listed: "NET/IB : Using [0]mlx5_4:1/RoCE" or "NET/Socket : Using [0]eth0:…".
struct NcclNetDevice {
  std::string host;
  std::string net;         // "IB", "Socket", or a plugin's name, as in "NET/<net>"
  int index = -1;          // the [N] NCCL gave it
  std::string name;        // "mlx5_4", "eth0"
  int port = -1;           // IB port; -1 for sockets
  std::string link_layer;  // "IB", "RoCE" or "" (sockets)
  std::string address;     // socket address; "" for IB
  size_t line_no = 0;
};

// PyTorch's NCCL watchdog: "[Rank 7] Watchdog caught collective operation timeout:
// WorkNCCL(SeqNum=80078, OpType=BROADCAST, NumelIn=5056, NumelOut=5056, Timeout(ms)=600000)
// ran for 600026 milliseconds before timing out."
struct NcclTimeout {
  size_t line_no = 0;
  int rank = -1;     // global rank, from the "[rank13]:" prefix; else the "[Rank N]" one
  int pg_rank = -1;  // "[Rank N]": the rank within the process group
  int64_t seq_num = -1;
  std::string op_type;  // "ALLREDUCE", "BROADCAST", "ALLTOALL_BASE", …; "" unknown
  int64_t numel_in = -1;
  int64_t numel_out = -1;
  int64_t timeout_ms = -1;
  int64_t ran_for_ms = -1;
  std::string text;
};

// "Channel 00/02 :    0   1" — the order of ranks in one ring.
struct NcclRing {
  int channel = -1;
  std::vector<int> ranks;  // the first 4096
  std::string host;
  size_t line_no = 0;
};

// What the log says about one host. GPU indices: `cuda_devices` are the "[dev]" of line
// prefixes, nccl-tests' "device N" and comm lines' cudaDev (indices as CUDA_VISIBLE_DEVICES
// shows them); `nvml_devices` those of channel lines and comm lines' nvmlDev (physical).
struct NcclHost {
  std::string name;
  std::vector<int> cuda_devices;           // sorted, unique
  std::vector<int> nvml_devices;           // sorted, unique
  std::map<int, std::string> gpu_names;    // cuda device -> model, from nccl-tests headers
  std::map<std::string, std::string> env;  // "NCCL_IB_HCA" -> "mlx5_4" ("set by environment to")
  bool ib_devices = false;                 // NET/IB listed at least one device here
  bool ib_no_device = false;               // "NET/IB : No device found."
  bool ibverbs_missing = false;            // "Failed to open libibverbs.so"
  // Evidence lines: the node has NVLink (NVLS, MNNVL, P2P/NVL, "type NVL/…", an SXM GPU, …),
  // the node has IB/RoCE hardware although NCCL may not use it (NCCL_IB_HCA, an IPoIB
  // bootstrap interface, mlx5 names), P2P between its GPUs is off (NCCL_P2P_DISABLE=1,
  // NCCL_P2P_LEVEL=LOC, "Could not enable P2P").
  std::vector<NcclLine> nvlink_hints;
  std::vector<NcclLine> ib_hints;
  std::vector<NcclLine> p2p_off;
  std::vector<NcclLine> net_lines;  // "NET/<net> : Using [0]…" lines that listed devices
  // Pairs (lower, higher NVML index) that P2P read connects: NCCL turns read on by itself only
  // for Ampere GPUs joined by NVLink, so "via P2P/…/read" is NVLink evidence for that pair.
  std::map<std::pair<int, int>, NcclLine> nvlink_pairs;
  // What this host's processes reported, each distinct value with the line that first said it
  // (at most kMaxVersionsPerHost): "NCCL INFO NCCL version 2.18.3+cuda12.1" and
  // "NCCL INFO cudaDriverVersion 12020". Bare pre-2.19 banners name no host and are not here.
  std::vector<std::pair<std::string, NcclLine>> nccl_versions;
  std::vector<std::pair<int, NcclLine>> cuda_driver_versions;
};

// One process (host and pid) and the network it chose.
struct NcclProcess {
  std::string host;
  int64_t pid = -1;
  std::vector<int> ranks;  // comm ranks it reported (sorted, unique, at most 128)
  // "IB", "Socket", a plugin's name; "" unknown. From "Using network X" (best), "Initialized
  // NET plugin X", or the one "NET/X : Using [0]…" line NCCL prints for the net it picked.
  std::string network;
  NcclLine network_line;
};

struct NcclLogReport {
  // "2.18.3" (no "+cuda…"); the first banner. nccl_version_full keeps the suffix. From
  // "NCCL version …" banners, else from "vLLM is using nccl==2.20.5" or an error message's
  // "NCCL version 2.4.8".
  std::optional<std::string> nccl_version;
  std::optional<std::string> nccl_version_full;
  std::vector<std::string> nccl_versions;  // every distinct full version, first-seen order
  std::optional<int> cuda_driver_version;  // "cudaDriverVersion 12060"

  // nRanks / nNodes / localRanks of comm lines (the largest communicator), or the length of a
  // ring; when no line states them, a lower bound from the ranks, hosts and devices seen
  // (`*_exact` false). Unknown: nullopt.
  std::optional<int> ranks;
  bool ranks_exact = false;
  std::optional<int> nodes;
  bool nodes_exact = false;
  std::optional<int> local_ranks;
  std::map<int, std::string> rank_hosts;  // comm rank -> host, where a line ties them

  std::vector<NcclHost> hosts;  // first-seen order
  std::vector<NcclProcess> processes;
  std::vector<NcclNetDevice> net_devices;  // unique by (host, net, name)

  std::vector<NcclChannel> channels;  // first kMaxChannels connection lines
  size_t channels_dropped = 0;
  // Family -> connection lines (all, kept or dropped). NVLS and COLLNET also count the nvls /
  // collnet channels of "16 coll channels, 0 collnet channels, 16 nvls channels" lines.
  std::map<std::string, size_t> transports;
  std::vector<NcclRing> rings;
  size_t tree_lines = 0;
  size_t connected_rings = 0;  // "Connected all rings"
  size_t connected_trees = 0;  // "Connected all trees"

  // errors: WARN lines that report a failure, error-propagation chains ("init.cu:864 -> 2",
  // one entry per chain, named after ncclResult_t), NCCL error messages of the framework,
  // watchdog timeouts, and timeouts of one SeqNum with different operations (a collective
  // mismatch). warnings: every WARN line.
  std::vector<NcclLine> errors;
  std::vector<NcclLine> warnings;
  std::vector<NcclTimeout> timeouts;

  size_t lines_parsed = 0;     // lines of a recognised shape
  size_t lines_ignored = 0;    // the rest (tracebacks, blank lines, other programs' output)
  size_t lines_truncated = 0;  // longer than kMaxLineBytes
  size_t entries_dropped = 0;  // over a cap other than kMaxChannels

  const NcclHost* FindHost(std::string_view name) const;
};

// The first line of an `ncclras` report (NCCL 2.24+'s RAS client): "NCCL version 2.26.2
// compiled with CUDA 12.6".
bool IsNcclRasBanner(std::string_view line);

// The NCCL version from an NCCL_DEBUG=INFO banner line: "2.18.3+cuda12.2", or the bare version
// when the build names no CUDA. Recognised forms (see ../shared/real/nccl):
//   host:pid:tid [dev] NCCL INFO NCCL version 2.25.1+cuda12.8   (NCCL >= 2.19)
//   NCCL version 2.18.5+cuda12.0                                  (older: on a line of its own)
// either one behind launcher or paste prefixes ("[1,0]<stdout>:", "> ", "[0] ", a timestamp).
// The old form must name its CUDA ("+cuda"), so prose that mentions a version does not match.
std::optional<std::string> ParseNcclVersionLine(std::string_view line);

NcclLogReport ParseNcclLog(std::string_view text);

// The family of a transport as printed after "via ": "P2P/IPC/read" -> "P2P/IPC",
// "P2P/direct pointer" -> "P2P/direct", "SHM/direct/direct" -> "SHM", "NET/IB/0/GDRDMA" ->
// "NET/IB", "COLLNET/IBext/0" -> "COLLNET", "NVLS…" -> "NVLS"; others: up to the first '/'.
std::string TransportFamily(std::string_view detail);

// The NCCL error name and text of an ncclResult_t: 2 -> "ncclSystemError (unhandled system
// error)". Unknown codes: "ncclResult N".
std::string NcclResultName(int code);

}  // namespace gpuwatch::nccl
