#include "server/job_logs.h"

#include "common/log.h"

namespace gpuwatch::server {

bool JobLogs::Follow(const jobs::LogFileRequest& req) {
  Key key{req.job, req.rank, req.path};
  if (tailers_.count(key)) return true;
  if (tailers_.size() >= max_files_) {
    GW_LOG_WARN("job {}: not following {}: already following {} log files", req.job, req.path,
                max_files_);
    return false;
  }
  logs::LogTailerOptions o;
  const std::optional<uint32_t> uid = req.uid;
  o.check = [uid](const struct stat& st) -> Status {
    if (!uid) return Status::PermissionDenied("the declaring process's uid is unknown");
    if (*uid != 0 && st.st_uid != *uid)
      return Status::PermissionDenied("owned by uid " + std::to_string(st.st_uid) +
                                      ", not by the job's uid " + std::to_string(*uid));
    return Status::Ok();
  };
  tailers_[key] = std::make_unique<logs::LogTailer>(req.path, o);
  return true;
}

void JobLogs::PollOne(const Key& key, logs::LogTailer& t, std::vector<JobLogLine>* out) {
  std::vector<logs::TailedLine> lines;
  Status st = t.Poll(&lines);
  if (!st.ok()) {
    // Said once per change: a missing file is retried every poll without a log line each time.
    std::string& last = last_error_[key];
    if (last != st.message()) {
      last = st.message();
      GW_LOG_WARN("job {} rank {}: log {}: {}", std::get<0>(key), std::get<1>(key),
                  std::get<2>(key), st.message());
    }
  }
  for (auto& l : lines) {
    JobLogLine j{
        std::get<0>(key), std::get<1>(key), std::get<2>(key), std::move(l.text), l.cut, {}};
    j.cls = logs::ClassifyLogLine(j.line);
    out->push_back(std::move(j));
  }
}

std::vector<JobLogLine> JobLogs::Poll() {
  std::vector<JobLogLine> out;
  for (auto& [key, t] : tailers_) PollOne(key, *t, &out);
  return out;
}

std::vector<JobLogLine> JobLogs::EndJob(const std::string& job) {
  std::vector<JobLogLine> out;
  for (auto it = tailers_.lower_bound(Key{job, 0, ""});
       it != tailers_.end() && std::get<0>(it->first) == job;) {
    PollOne(it->first, *it->second, &out);
    std::vector<logs::TailedLine> rest;
    it->second->FlushPartial(&rest);
    for (auto& l : rest) {
      const logs::LogLineClass cls = logs::ClassifyLogLine(l.text);  // before the move
      out.push_back(
          {job, std::get<1>(it->first), std::get<2>(it->first), std::move(l.text), true, cls});
    }
    last_error_.erase(it->first);
    it = tailers_.erase(it);
  }
  return out;
}

}  // namespace gpuwatch::server
