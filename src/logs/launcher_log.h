// Training and launcher logs: which workers the launcher reports as failed, ProcessGroupNCCL
// watchdog timeouts, CUDA out-of-memory errors, and whether the launcher tore the job down or
// was itself stopped — the `launcher` object of `gpuwatch explain --json`
// (docs/format/explain.md). docs/research/launchers.md has the sources of every form below.
//
// Read incrementally, one line at a time, because a failure table spans lines and ranks'
// lines interleave. Lines are matched by their content wherever it sits in the line, so the
// prefixes launchers, loggers and pastes add do not matter ("stderr: ", "[80746] ",
// "[rank3]:", "> ", backticks, progress bars glued in front, Determined's "[time] id || ").
//
//   torch.distributed.elastic (torchrun, python -m torch.distributed.launch|run, and
//   Accelerate and DeepSpeed's elastic mode, which run it):
//     "failed (exitcode: -9) local_rank: 3 (pid: 812917) of binary: …" in the old
//     "ERROR:torch.distributed.elastic…:", torch 2.1's "[2023-10-13 17:40:02,544] … [ERROR]" and
//     the glog "E0801 13:23:20.000000 32974 …/api.py:874]" forms (time "0801 13:23:20.000000":
//     the severity letter is not part of the stamp), and the ChildFailedError table — torch
//     1.10+: "Failures:" / "Root Cause (first observed failure):", entries "[N]:" with
//     "time      : …", "host      : …", "rank      : R (local_rank: L)", "exitcode  : X (pid:
//     P)", "traceback : Signal 9 (SIGKILL) received by PID P"; torch 1.9: "Root Cause:" /
//     "Other Failures:" with "time: …", "rank: …", "exitcode: …", "msg: \"…\"". A failure
//     in the `failed` line and again in the table is one entry (same pid, else same
//     local_rank with nothing contradicting); the table's rank, host and time win. Root-cause
//     entries come first, then the others in the order of the text.
//   DeepSpeed's launcher: "[…] [ERROR] [launch.py:…:sigkill_handler] […] exits with return code
//     = N": one failure with the exit code and time only — the printed command is the last
//     spawned rank's, not the failed one's, and "Killing subprocess P" names every worker.
//   Slurm: "srun: error: HOST: task(s) LIST: Exited with exit code N" or ": <strsignal text>"
//     ("Killed", "Segmentation fault (core dumped)", …), one failure per task, rank = task id.
//   ProcessGroupNCCL's watchdog: "[Rank N] Watchdog caught collective operation timeout:
//     WorkNCCL(SeqNum=S, OpType=OP, [NumelIn=…, NumelOut=…,] Timeout(ms)=T) ran for R
//     milliseconds before timing out." — one entry per rank and sequence number (the what()
//     of the exception repeats the line).
//   CUDA out of memory: "CUDA out of memory. Tried to allocate X (GPU N; T total capacity; …;
//     F free; …)" (old) and "… GPU N has a total capacity of T of which F is free" (new; the
//     2023–24 "capacty" typo too), several per line when ranks' output interleaves.
//
// Memory is bounded: each list keeps at most kMaxLauncherEntries entries.
//
// Thread-safety: LooksLikeLauncherLine and LauncherReportJson are pure; a LauncherLogParser is
// used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace gpuwatch::logs {

inline constexpr size_t kMaxLauncherEntries = 4096;

struct LauncherFailure {
  std::optional<int> rank, local_rank;  // rank is the global rank; null unless the text says
  std::optional<int64_t> pid;
  std::optional<int> exitcode;  // as the launcher prints it: -9 is "killed by signal 9"
  // "SIGKILL": the printed name ("Signal 9 (SIGKILL) received", srun's "Killed"), else the
  // name of a negative exit code's signal; null for a normal exit.
  std::optional<std::string> signal;
  std::optional<std::string> host, time;  // time as printed (docs/format/explain.md, Times)
  size_t line_no = 0;                     // the first line that reported it
  bool root_cause = false;                // the table's "Root Cause (first observed failure)"
};

struct WatchdogTimeout {
  std::optional<int> rank;
  std::optional<std::string> op;  // "ALLREDUCE", "_ALLGATHER_BASE", "COALESCED", …
  std::optional<int64_t> seq, timeout_ms, ran_for_ms;
  size_t line_no = 0;
};

struct CudaOom {
  std::optional<int> gpu;
  // The printed sizes in MiB (GiB × 1024, KiB / 1024, bytes / 1048576), computed from the
  // printed decimal exactly, so 576.00 KiB is 0.5625.
  std::optional<double> tried_to_allocate_mib, total_capacity_mib, free_mib;
  std::optional<int> rank;  // from a "[rankN]:" prefix, when there is one
  size_t line_no = 0;
};

struct LauncherReport {
  std::vector<LauncherFailure> failures;
  std::vector<WatchdogTimeout> watchdog_timeouts;
  std::vector<CudaOom> cuda_oom;
  // Lines that say the launcher tore the job down: torch elastic's "Sending process N closing
  // signal SIGTERM" (any signal) and DeepSpeed's "Killing subprocess N" (it signals every
  // worker, the dead one included).
  size_t teardown_signals = 0;
  // The launcher was itself stopped — a job cancelled or preempted, not a worker failing:
  // torch elastic's "Received 15 death signal, shutting down workers" (or "Signals.SIGTERM")
  // and its SignalException "Process N got signal: 15", DeepSpeed's "Main process received
  // SIGTERM, exiting", a "Received SIGTERM"/"SIGINT" line that no rank printed (a "[rank: N]"
  // tag marks a worker, which the launcher's own teardown also signals), and Slurm's "***
  // JOB|STEP … CANCELLED AT …" (time limit, preemption, scancel, node failure).
  bool launcher_signalled = false;
};

class LauncherLogParser {
 public:
  // One line, without its newline; line_no is the caller's (1-based by convention).
  void Feed(std::string_view line, size_t line_no);
  // What the lines so far say (failures merged, root cause first).
  const LauncherReport& report() const;

 private:
  void AddFailure(LauncherFailure f);
  // A line of the ChildFailedError table; false when the line is not one.
  bool FeedTableLine(std::string_view line, size_t line_no);
  void ApplyTableField(std::string_view key, std::string_view value);
  void EndTableEntry();

  // report_.failures is failures_ with root causes first, rebuilt when report() is next read
  // (a table entry changes on each of its lines; rebuilding per line would be quadratic).
  mutable LauncherReport report_;
  mutable bool failures_dirty_ = false;
  std::vector<LauncherFailure> failures_;  // in order of first appearance
  // (rank, seq, op) of the watchdog timeouts already reported.
  std::set<std::tuple<std::optional<int>, std::optional<int64_t>, std::string>> watchdog_seen_;
  // The ChildFailedError table: the section being read and the entry being filled.
  bool in_root_section_ = false;
  bool entry_header_seen_ = false;  // "[N]:" seen, no field yet
  bool entry_is_root_ = false;
  std::optional<size_t> entry_;  // index into failures_
  size_t entry_line_no_ = 0;
};

// Cheap (substring search only): does this line belong to the `launcher` kind — a line of
// torch.distributed.elastic, its failure table, DeepSpeed's launcher, srun's task errors,
// Slurm's cancellation, ProcessGroupNCCL's watchdog, or a CUDA out-of-memory error.
bool LooksLikeLauncherLine(std::string_view line);

// Exactly the `launcher` object of docs/format/explain.md:
//   {"failures": [{"rank", "local_rank", "pid", "exitcode", "signal", "host", "time"}],
//    "watchdog_timeouts": [{"rank", "op", "seq", "timeout_ms", "ran_for_ms"}],
//    "cuda_oom": [{"gpu", "tried_to_allocate_mib", "total_capacity_mib", "free_mib"}]}
// with null for what the text does not give. Strings are made valid UTF-8.
nlohmann::json LauncherReportJson(const LauncherReport& r);

}  // namespace gpuwatch::logs
