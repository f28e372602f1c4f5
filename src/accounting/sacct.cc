#include "accounting/sacct.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>
#include <set>

#include "common/log.h"
#include "common/strings.h"
#include "common/subprocess.h"

namespace gpuwatch::accounting {
namespace {

// A -p line ends with '|' (and a -P line whose last field is empty does too): the fields past
// the last column asked for are never read, so an empty one at the end does no harm.
std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t bar = line.find('|', start);
    out.push_back(line.substr(start, bar == std::string_view::npos ? bar : bar - start));
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  return out;
}

struct Columns {
  std::optional<size_t> id_raw, id, submit, start;
  bool any() const { return id_raw || id || submit || start; }
  bool whole() const { return (id_raw || id) && submit && start; }
};

// Column names (sacct's field names, any case, "JobName%30" widths dropped) to positions.
Columns FindColumns(const std::vector<std::string_view>& names) {
  Columns c;
  for (size_t i = 0; i < names.size(); ++i) {
    std::string_view f = TrimWhitespace(names[i]);
    f = f.substr(0, f.find('%'));
    if (EqualsIgnoreCase(f, "JobIDRaw")) c.id_raw = i;
    if (EqualsIgnoreCase(f, "JobID")) c.id = i;
    if (EqualsIgnoreCase(f, "Submit")) c.submit = i;
    if (EqualsIgnoreCase(f, "Start")) c.start = i;
  }
  return c;
}

// Unix seconds (SLURM_TIME_FORMAT=%s) or the standard local form; nullopt for "no time yet";
// an error for anything else.
Result<std::optional<int64_t>> ParseTime(std::string_view text) {
  text = TrimWhitespace(text);
  if (text.empty() || text == "Unknown" || text == "None" || text == "N/A")
    return std::optional<int64_t>();
  int64_t seconds = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (r.ec == std::errc() && r.ptr == text.data() + text.size()) {
    if (seconds <= 0) return std::optional<int64_t>();  // Slurm prints 0 for "not yet"
    return std::optional<int64_t>(seconds * 1000);
  }
  if (auto t = ParseSlurmLocalTime(text))
    return *t > 0 ? std::optional<int64_t>(static_cast<int64_t>(std::llround(*t * 1000)))
                  : std::optional<int64_t>();
  return Status::InvalidArgument("\"" + std::string(text.substr(0, 40)) +
                                 "\" is not a time (Unix seconds or 2024-03-01T10:00:00)");
}

}  // namespace

std::optional<double> ParseSlurmLocalTime(std::string_view s) {
  std::tm tm{};
  const std::string text(s);
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end || *end != '\0') return std::nullopt;
  tm.tm_isdst = -1;
  const time_t t = mktime(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return static_cast<double>(t);
}

Result<std::vector<SacctJob>> ParseSacct(std::string_view text, std::string_view format) {
  Columns cols = FindColumns(SplitAny(format, ",", false));
  std::vector<SacctJob> out;
  bool first = true;
  int line_no = 0;
  for (std::string_view line : SplitAny(text, "\n", false)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (TrimWhitespace(line).empty()) continue;
    const auto fields = SplitFields(line);
    if (first) {
      first = false;
      // A header (sacct without -n) names the columns, whatever --format said.
      if (Columns header = FindColumns(fields); header.any()) {
        if (!header.whole())
          return Status::InvalidArgument(
              "sacct line 1: the header lacks JobIDRaw (or JobID), Submit or Start");
        cols = header;
        continue;
      }
    }
    if (!cols.whole())
      return Status::InvalidArgument(
          "sacct's --format lacks JobIDRaw (or JobID), Submit or Start: \"" +
          std::string(format.substr(0, 200)) + "\"");
    // JobIDRaw when there is one: the plain number, which `sacct -j` and the ledger use.
    const size_t id_col = cols.id_raw ? *cols.id_raw : *cols.id;
    const size_t need = std::max({id_col, *cols.submit, *cols.start}) + 1;
    if (fields.size() < need)
      return Status::InvalidArgument(
          fmt::format("sacct line {}: {} fields, {} expected", line_no, fields.size(), need));
    const std::string_view job = TrimWhitespace(fields[id_col]);
    if (job.empty() || job.find('.') != std::string_view::npos) continue;  // a step
    SacctJob j;
    j.id = std::string(job);
    auto submit = ParseTime(fields[*cols.submit]);
    if (!submit.ok())
      return Status::InvalidArgument(
          fmt::format("sacct line {}: Submit: {}", line_no, submit.status().message()));
    auto start = ParseTime(fields[*cols.start]);
    if (!start.ok())
      return Status::InvalidArgument(
          fmt::format("sacct line {}: Start: {}", line_no, start.status().message()));
    j.submit_ms = *submit;
    j.start_ms = *start;
    out.push_back(std::move(j));
  }
  return out;
}

SacctBackfill::SacctBackfill(Ledger* ledger, SacctOptions options)
    : ledger_(ledger), options_(std::move(options)) {}

Result<size_t> SacctBackfill::RunOnce() {
  std::set<std::string> skip;
  for (const auto& [job, n] : tries_)
    if (n >= options_.max_tries) skip.insert(job);
  const std::vector<std::string> jobs = ledger_->JobsWithoutQueueWait(options_.batch, skip);
  if (jobs.empty()) return size_t{0};
  std::string ids;
  for (const std::string& j : jobs) ids += (ids.empty() ? "" : ",") + j;
  auto run = RunCommand(
      {options_.program, "-X", "-n", "-P", "-j", ids, std::string("--format=") + kBackfillFormat},
      {{"SLURM_TIME_FORMAT", "%s"}}, options_.timeout);
  if (!run.ok()) return run.status();
  if (run->timed_out)
    return Status::Unavailable(
        fmt::format("{} took over {} s", options_.program, options_.timeout.count() / 1000.0));
  if (run->exit_code != 0)
    return Status::Unavailable(
        fmt::format("{} exited with status {}", options_.program, run->exit_code));
  auto parsed = ParseSacct(run->out, kBackfillFormat);
  if (!parsed.ok()) return parsed.status();
  std::set<std::string> given;
  for (const SacctJob& j : *parsed) {
    if (!j.submit_ms || !j.start_ms) continue;  // still pending, or never ran
    if (ledger_->SetSubmitTime(j.id, *j.submit_ms, *j.start_ms)) given.insert(j.id);
  }
  // A job sacct said nothing of (or nothing that fits: slurmdbd may not have it yet, or it
  // knows only the latest of several runs) is asked again, at most max_tries times in all.
  for (const std::string& j : jobs) {
    if (given.count(j))
      tries_.erase(j);
    else
      ++tries_[j];
  }
  return given.size();
}

void SacctBackfill::Start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = false;  // after a Stop, runs again
  }
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      lock.unlock();
      auto r = RunOnce();
      lock.lock();
      if (!r.ok() && r.status().message() != last_error_) {
        GW_LOG_WARN("accounting: queue waits from sacct: {}", r.status().message());
        last_error_ = r.status().message();
      } else if (r.ok()) {
        if (*r > 0) GW_LOG_INFO("accounting: sacct gave {} job(s) their queue wait", *r);
        last_error_.clear();
      }
      cv_.wait_for(lock, options_.interval, [this] { return stopping_; });
    }
  });
}

void SacctBackfill::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace gpuwatch::accounting
