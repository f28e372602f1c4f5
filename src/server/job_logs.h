// JobLogs: the log files jobs declared (docs/job-protocol.md `log_files`), tailed on their
// behalf through rotation and truncation, each line classified (NCCL output, NCCL warnings and
// timeouts, CUDA errors, out-of-memory, tracebacks) for the analysis.
//
// A job may name any path, and the agent may run as root, so a file is read only when (checked
// on every open, rotations included):
//   - its real path (every link resolved, read back from the open descriptor) is under one of
//     JobLogPolicy::roots and under none of its forbidden directories;
//   - it is a regular file, not itself a symbolic link, owned by the uid that declared it —
//     root included: a root job in a container sharing the socket once had /etc/shadow served
//     to every HTTP client (issue 17, D5).
// At most `max_files` files are followed, `max_files_per_uid` of them for one uid; each is
// polled with a byte cap.
// Thread-safety: none; the agent's job drain (one thread) owns it.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "jobs/job_registry.h"
#include "logs/log_classify.h"
#include "logs/log_tailer.h"

namespace gpuwatch::server {

struct JobLogLine {
  std::string job;
  uint32_t rank = 0;
  std::string path;  // "" for a line the SDK forwarded
  std::string line;
  bool cut = false;
  logs::LogLineClass cls;
  int64_t t_ms = 0;  // when it was written, if known (forwarded lines); 0: when it was read
};

struct JobLogPolicy {
  // Directories a declared log may be under (--job-log-roots); "~" is the declaring uid's home
  // directory (from the password database).
  std::vector<std::string> roots = {"~", "/tmp", "/var/tmp"};
  // Never, whatever the roots say; the agent adds its data dir.
  std::vector<std::string> forbidden = {"/etc", "/proc", "/sys", "/root", "/boot", "/dev", "/run"};
  size_t max_files = 256;         // followed at once, all jobs
  size_t max_files_per_uid = 64;  // … declared by one uid
};
// "~,/tmp,/scratch" → roots. Each is "~" or an absolute path; "/" is refused.
Result<std::vector<std::string>> ParseJobLogRoots(std::string_view flag);
// Whether `real_path` (absolute, links resolved) may be tailed for `uid`.
Status CheckJobLogPath(const JobLogPolicy& policy, const std::string& real_path, uint32_t uid);

class JobLogs {
 public:
  explicit JobLogs(JobLogPolicy policy = {}, size_t max_files = 256, size_t max_files_per_uid = 64)
      : policy_(std::move(policy)), max_files_(max_files), max_files_per_uid_(max_files_per_uid) {}

  // Starts following a declared file; false (and a log line) when over max_files.
  bool Follow(const jobs::LogFileRequest& req);
  // New lines of every followed file.
  std::vector<JobLogLine> Poll();
  // A job ended: its files are read one last time (returned) and forgotten.
  std::vector<JobLogLine> EndJob(const std::string& job);
  size_t files() const { return tailers_.size(); }
  // Files refused for a limit (max_files, max_files_per_uid, no uid) and by the path policy or
  // ownership (counted once per file and reason change).
  uint64_t refused_over_limit() const { return refused_over_limit_.load(); }
  uint64_t refused_by_policy() const { return refused_by_policy_.load(); }

 private:
  using Key = std::tuple<std::string, uint32_t, std::string>;  // job, rank, path
  void PollOne(const Key& key, logs::LogTailer& t, std::vector<JobLogLine>* out);

  JobLogPolicy policy_;
  size_t max_files_;
  size_t max_files_per_uid_;
  std::map<Key, std::unique_ptr<logs::LogTailer>> tailers_;
  std::map<Key, uint32_t> uid_of_;
  std::map<uint32_t, size_t> files_of_uid_;
  std::atomic<uint64_t> refused_over_limit_{0}, refused_by_policy_{0};
  std::map<Key, std::string> last_error_;
};

}  // namespace gpuwatch::server
