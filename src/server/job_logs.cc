#include "server/job_logs.h"

#include <pwd.h>
#include <unistd.h>

#include "common/log.h"
#include "common/strings.h"

namespace gpuwatch::server {
namespace {

bool UnderDir(std::string_view path, std::string_view dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  return path == dir || (path.starts_with(dir) && path.size() > dir.size() &&
                         (dir == "/" || path[dir.size()] == '/'));
}

std::string HomeOf(uint32_t uid) {
  passwd pw{};
  passwd* out = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &out) != 0 || !out || !pw.pw_dir) return "";
  return pw.pw_dir;
}

}  // namespace

Result<std::vector<std::string>> ParseJobLogRoots(std::string_view flag) {
  std::vector<std::string> out;
  for (std::string_view r : SplitAny(flag, ",")) {
    r = TrimWhitespace(r);
    if (r.empty()) continue;
    if (r != "~" &&
        (!r.starts_with("/") || r.find("/../") != std::string_view::npos || r.ends_with("/..")))
      return Status::InvalidArgument("bad --job-log-roots entry '" + std::string(r) +
                                     "': ~ or an absolute path");
    if (r.find_first_not_of('/') == std::string_view::npos)
      return Status::InvalidArgument(
          "--job-log-roots may not be '/': it would let a job have any file read");
    out.emplace_back(r);
  }
  return out;
}

Status CheckJobLogPath(const JobLogPolicy& policy, const std::string& real_path, uint32_t uid) {
  for (const auto& f : policy.forbidden)
    if (!f.empty() && UnderDir(real_path, f))
      return Status::PermissionDenied(real_path + ": refused, under " + f +
                                      ", where job logs are never read");
  std::string allowed;
  for (const auto& r : policy.roots) {
    std::string root = r;
    if (r == "~") {
      root = HomeOf(uid);
      if (root.empty() || root == "/") continue;
    }
    if (UnderDir(real_path, root)) return Status::Ok();
    allowed += (allowed.empty() ? "" : ", ") + root;
  }
  return Status::PermissionDenied(real_path + ": refused, not under the allowed roots (" + allowed +
                                  "; --job-log-roots)");
}

bool JobLogs::Follow(const jobs::LogFileRequest& req) {
  Key key{req.job, req.rank, req.path};
  if (tailers_.count(key)) return true;
  if (tailers_.size() >= max_files_) {
    GW_LOG_WARN("job {}: not following {}: already following {} log files", req.job, req.path,
                max_files_);
    ++refused_over_limit_;
    return false;
  }
  if (!req.uid) {
    GW_LOG_WARN(
        "job {}: not following {}: the declaring process's uid is unknown (UDP/TCP "
        "reports cannot declare log files)",
        req.job, req.path);
    return false;
  }
  const uint32_t uid = *req.uid;
  if (files_of_uid_[uid] >= max_files_per_uid_) {
    GW_LOG_WARN("job {}: not following {}: uid {} already has {} log files followed", req.job,
                req.path, uid, max_files_per_uid_);
    ++refused_over_limit_;
    return false;
  }
  logs::LogTailerOptions o;
  o.check = [uid](const struct stat& st) -> Status {
    if (st.st_uid != uid)
      return Status::PermissionDenied("owned by uid " + std::to_string(st.st_uid) +
                                      ", not by the job's uid " + std::to_string(uid));
    return Status::Ok();
  };
  o.path_check = [policy = policy_, uid](const std::string& real) {
    return CheckJobLogPath(policy, real, uid);
  };
  tailers_[key] = std::make_unique<logs::LogTailer>(req.path, o);
  uid_of_[key] = uid;
  ++files_of_uid_[uid];
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
      if (st.code() == StatusCode::kPermissionDenied || st.code() == StatusCode::kInvalidArgument)
        ++refused_by_policy_;
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
    if (auto u = uid_of_.find(it->first); u != uid_of_.end()) {
      if (--files_of_uid_[u->second] == 0) files_of_uid_.erase(u->second);
      uid_of_.erase(u);
    }
    it = tailers_.erase(it);
  }
  return out;
}

}  // namespace gpuwatch::server
