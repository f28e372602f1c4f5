// Queue waits from Slurm's accounting after the fact (issue 19, R24: "from Slurm's submit and
// start times, through the prolog, or sacct when present").
//
// The prolog asks scontrol for the submit time as the job starts; on busy clusters sites skip
// that (Slurm's docs advise against Slurm commands in a prolog), and jobs registered only by
// the SDK never had a prolog. For those, SacctBackfill asks `sacct` now and then, off the
// collection thread, about the ledger's Slurm jobs that still lack a queue wait:
//   SLURM_TIME_FORMAT=%s sacct -X -n -P -j ID,ID,... --format=JobIDRaw,Submit,Start
// (-X: the allocation, not its steps; -n: no header; -P: '|'-separated; %s: Unix seconds, so
// no time zone enters), bounded in time, a batch at a time, and sets each job's submit time in
// the ledger. A job sacct does not know is asked `max_tries` times, then left alone.
//
// Thread-safety: ParseSacct is pure; SacctBackfill's Start/Stop from its owner, RunOnce from
// one thread at a time (the backfill's own, or a test's).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "accounting/ledger.h"
#include "common/status.h"

namespace gpuwatch::accounting {

// Slurm's standard time form, "2024-03-01T10:00:00" in the local time zone, as Unix seconds.
std::optional<double> ParseSlurmLocalTime(std::string_view text);

struct SacctJob {
  std::string id;                              // JobIDRaw (or JobID: "123_4" for an array task)
  std::optional<int64_t> submit_ms, start_ms;  // absent: Unknown / None / empty
};

// The columns SacctBackfill asks for.
inline constexpr char kBackfillFormat[] = "JobIDRaw,Submit,Start";

// sacct's parsable output: -P ('|' between fields) or -p (a '|' after each field too). The
// columns are those of `format` (the --format list the output was made with: names in any
// case, "JobName%30" widths allowed), or of the header line when there is one (no -n); the
// job is JobIDRaw's, else JobID's. Times are Unix seconds or Slurm's standard local form;
// "Unknown", "None" and empty are no time. A step's line ("123.batch", "123.0",
// "123.interactive") is skipped: its times are the step's, not the job's. InvalidArgument
// names the line that has too few fields or a time that is neither form.
Result<std::vector<SacctJob>> ParseSacct(std::string_view text,
                                         std::string_view format = kBackfillFormat);

struct SacctOptions {
  std::string program = "sacct";  // a path, or a name found in PATH
  std::chrono::milliseconds interval{std::chrono::minutes(5)};
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};  // one sacct call
  size_t batch = 100;                                           // job ids per call
  int max_tries = 3;  // calls that did not know a job before it is left alone
};

class SacctBackfill {
 public:
  SacctBackfill(Ledger* ledger, SacctOptions options);
  ~SacctBackfill() { Stop(); }
  SacctBackfill(const SacctBackfill&) = delete;
  SacctBackfill& operator=(const SacctBackfill&) = delete;

  // Runs RunOnce every interval on a thread of its own until Stop.
  void Start();
  void Stop();
  // One round: asks sacct about one batch; how many jobs got a queue wait, or why sacct could
  // not be asked (not found, failed, timed out, output not understood).
  Result<size_t> RunOnce();

 private:
  Ledger* const ledger_;
  const SacctOptions options_;
  std::map<std::string, int> tries_;  // jobs asked and not known yet (RunOnce's thread)
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string last_error_;  // logged once per distinct error
};

}  // namespace gpuwatch::accounting
