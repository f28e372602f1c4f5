// nccl-tests perf output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, broadcast_perf,
// alltoall_perf, …): the run's parameters, the GPUs it used and, per message size, the time,
// algorithm bandwidth and bus bandwidth of the out-of-place and in-place runs. Bus bandwidth is
// the number nccl-tests normalises across collectives and rank counts, so it is what a link
// baseline (linkbase.h) keeps.
//
// Input is what people paste or a launcher wrote, and the parser is tolerant of it (see
// ../shared/real/nccltests): mpirun tags at the start of a line and in the middle of a row
// ("[0]", "[1,0]<stdout>:", nccl-tests prints a row in several writes and mpirun tags each),
// `srun -l` labels ("0: "), markdown "> " quoting, "\#" escapes and code fences, TABs,
// trailing blanks, CRLF, headers cut at the start, and NCCL_DEBUG lines in between. Layouts of
// nccl-tests from 2018 (no root column, an "error" column instead of "#wrong") to 2.20+ (a
// version line, "# Collective test starting:", per-iteration columns with -P, a timestamp
// column, "N/A" for #wrong when validation is off) are read.
//
// A capture with the header but no rows (the table was cut) parses, with a warning; only text
// in which nothing nccl-tests-like is found is an error. Memory is bounded whatever the input:
// lines are read up to kMaxPerfLineBytes, rows, ranks and warnings have caps.
//
// Thread-safety: pure functions; the report is a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::nccl {

inline constexpr size_t kMaxPerfLineBytes = 4096;  // a row is ~130 bytes; longer is not a row
inline constexpr size_t kMaxPerfRows = 16384;      // 8 B..8 GiB at -f 2 is 31 rows
inline constexpr size_t kMaxPerfRanks = 16384;
inline constexpr size_t kMaxPerfWarnings = 64;
inline constexpr size_t kMaxPerfTextBytes = 160;  // names and quoted text are cut here

// "#  Rank  0 Group  0 Pid   6899 on ztan-mig-235z device  0 [0000:04:00] NVIDIA H100 80GB HBM3"
// (before nccl-tests 2.11 there is no Group column: "#   Rank  0 Pid … [0x87] A100-SXM4-40GB").
struct PerfRank {
  int rank = -1;
  std::optional<int> group;
  int64_t pid = -1;
  std::string host;
  int device = -1;       // the CUDA device index on its host
  std::string bus_id;    // as printed in the brackets: "0000:04:00", "0x87"
  std::string gpu_name;  // "NVIDIA H100 80GB HBM3"
  size_t line_no = 0;
};

// One half of a row. `wrong` is the #wrong column: nullopt when it reads "N/A" (validation
// off) and for the pre-2.x "error" column, which held a maximum error, not a count.
struct PerfResult {
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  std::optional<int64_t> wrong;
};

// One data row. A row with one result block is taken as out-of-place (nccl-tests prints both
// unless it replays a trace, which prints in-place only; the two cannot be told apart then).
struct PerfRow {
  uint64_t size_bytes = 0;
  uint64_t count = 0;       // elements, as printed (per rank for all_gather, alltoall, …)
  std::string type;         // "float", "bfloat16", …
  std::string redop;        // "sum", "none", …; "" in the 1.x broadcast/reduce layout
  std::optional<int> root;  // -1 for collectives without one; absent in the oldest layout
  std::optional<PerfResult> out_of_place;
  std::optional<PerfResult> in_place;
  size_t line_no = 0;
};

// Where `collective` came from, best first.
enum class CollectiveSource {
  kNone,         // unknown
  kStartLine,    // "# Collective test starting: all_reduce_perf" (or "concluded")
  kCommandLine,  // a "./build/all_reduce_perf -b 8 …" command in the capture
  kInferred,     // from the rows: a reduction op and count × type size = size is all_reduce, …
};
std::string_view CollectiveSourceName(CollectiveSource s);

struct PerfReport {
  std::string collective;  // "all_reduce_perf" ("_mpi" build suffix dropped); "" unknown
  CollectiveSource collective_source = CollectiveSource::kNone;

  // "# nccl-tests version 2.20.0 (b4d5bee) nccl-headers=23102 nccl-library=23102"
  std::optional<std::string> nccl_tests_version;  // "2.20.0"
  std::optional<int> nccl_library_code;           // 23102
  // "2.31.2": from nccl-library= (NCCL_VERSION_CODE), else from an NCCL_DEBUG banner in the
  // capture ("NCCL version 2.21.5+cuda12.4": "2.21.5").
  std::optional<std::string> nccl_version;

  // "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) …"
  std::optional<int> n_threads;
  std::optional<int> n_gpus;
  std::optional<uint64_t> min_bytes;
  std::optional<uint64_t> max_bytes;

  std::vector<PerfRank> devices;  // "# Using devices" lines, unique by rank, in file order
  // Distinct ranks listed, or the highest rank + 1 when lines are missing (with a warning);
  // nullopt when no rank line was read.
  std::optional<int> ranks;
  std::vector<std::string> hosts;  // distinct hosts of those lines, sorted
  std::optional<int> nodes;        // hosts.size(); nullopt when no rank line names one
  // The GPU name when all listed ranks agree; several names joined with " + " in first-seen
  // order; "" when no rank line was read.
  std::string gpu_model;

  std::vector<PerfRow> rows;             // unique by size, file order
  std::optional<int64_t> out_of_bounds;  // "# Out of bounds values : 0 OK"
  std::optional<double> avg_busbw_gbps;  // "# Avg bus bandwidth    : 70.742"

  // What was odd, with line numbers: rows that did not parse, duplicate sizes, no rows at all,
  // wrong results, caps reached. At most kMaxPerfWarnings, then one "and N more".
  std::vector<std::string> warnings;
  size_t lines = 0;
  size_t lines_truncated = 0;  // longer than kMaxPerfLineBytes: read up to it

  const PerfRow* FindRow(uint64_t size_bytes) const;
  // The largest out-of-place bus bandwidth of the rows (in-place where a row has only that).
  std::optional<double> PeakBusbwGbps() const;
};

// InvalidArgument naming the input's size and first line when it holds nothing of nccl-tests
// (no row, column header, rank line, parameter line, version or collective line).
Result<PerfReport> ParseNcclTestsOutput(std::string_view text);

// The bytes of one element of an nccl-tests data type ("float" 4, "bfloat16" 2, "f8e4m3" 1);
// nullopt for names it does not print.
std::optional<int> PerfTypeBytes(std::string_view type);

}  // namespace gpuwatch::nccl
