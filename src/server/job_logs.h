// JobLogs: the log files jobs declared (docs/job-protocol.md `log_files`), tailed on their
// behalf through rotation and truncation, each line classified (NCCL output, NCCL warnings and
// timeouts, CUDA errors, out-of-memory, tracebacks) for the analysis.
//
// A job may name any path, and the agent may run as root: a file is read only when it is a
// regular file owned by the uid that declared it (or that uid is root), checked on every open,
// rotations included. At most `max_files` files are followed; each is polled with a byte cap.
// Thread-safety: none; the agent's job drain (one thread) owns it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

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

class JobLogs {
 public:
  explicit JobLogs(size_t max_files = 256) : max_files_(max_files) {}

  // Starts following a declared file; false (and a log line) when over max_files.
  bool Follow(const jobs::LogFileRequest& req);
  // New lines of every followed file.
  std::vector<JobLogLine> Poll();
  // A job ended: its files are read one last time (returned) and forgotten.
  std::vector<JobLogLine> EndJob(const std::string& job);
  size_t files() const { return tailers_.size(); }

 private:
  using Key = std::tuple<std::string, uint32_t, std::string>;  // job, rank, path
  void PollOne(const Key& key, logs::LogTailer& t, std::vector<JobLogLine>* out);

  size_t max_files_;
  std::map<Key, std::unique_ptr<logs::LogTailer>> tailers_;
  std::map<Key, std::string> last_error_;
};

}  // namespace gpuwatch::server
