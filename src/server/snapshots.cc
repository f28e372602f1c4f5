#include "server/snapshots.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/time_base.h"
#include "trace/trace_file.h"
#include "trace/trace_writer.h"

namespace gpuwatch::server {
namespace {

namespace fs = std::filesystem;

// An id is a directory name: UTC time, then the job and reason with anything unusual replaced.
std::string MakeId(int64_t t_ms, const std::string& job, const std::string& reason) {
  const std::string when = FormatUtc(t_ms, "%Y%m%dT%H%M%S");
  auto clean = [](const std::string& s) {
    std::string out;
    for (char c : s.substr(0, 64))
      out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')
                 ? c
                 : '_';
    return out;
  };
  std::string id = fmt::format("{}.{:03d}Z-{}", when, static_cast<int>(t_ms % 1000), clean(reason));
  if (!job.empty()) id += "-" + clean(job);
  return id;
}

nlohmann::json ToJson(const SnapshotInfo& s) {
  return {{"id", s.id},           {"reason", s.reason},
          {"job", s.job},         {"node", s.node},
          {"t_ms", s.t_ms},       {"from_ms", s.from_ms},
          {"records", s.records}, {"job_log_lines", s.job_log_lines},
          {"state", s.state},     {"error", s.error},
          {"owner", s.owner}};
}

std::optional<SnapshotInfo> FromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  SnapshotInfo s;
  try {
    s.id = j.at("id").get<std::string>();
    s.reason = j.value("reason", "");
    s.job = j.value("job", "");
    s.node = j.value("node", "");
    s.t_ms = j.value("t_ms", int64_t{0});
    s.from_ms = j.value("from_ms", int64_t{0});
    s.records = j.value("records", uint64_t{0});
    s.job_log_lines = j.value("job_log_lines", uint64_t{0});
    s.state = j.value("state", "written");
    s.error = j.value("error", "");
    s.owner = j.value("owner", "");
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return s;
}

}  // namespace

SnapshotManager::SnapshotManager(SnapshotOptions options, const trace::FlightRecorder* recorder,
                                 store::EventStore* events, std::string node)
    : SnapshotManager(
          std::move(options),
          [recorder](int64_t from_ms, int64_t to_ms) { return recorder->Window(from_ms, to_ms); },
          events, std::move(node)) {}

SnapshotManager::SnapshotManager(SnapshotOptions options, WindowFn window,
                                 store::EventStore* events, std::string node)
    : options_(std::move(options)),
      window_(std::move(window)),
      events_(events),
      node_(std::move(node)) {}

SnapshotManager::~SnapshotManager() { Stop(); }

Status SnapshotManager::Open() {
  std::error_code ec;
  fs::create_directories(options_.dir, ec);
  if (ec) return Status::IoError("cannot create " + options_.dir + ": " + ec.message());
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& entry : fs::directory_iterator(options_.dir, ec)) {
    if (!entry.is_directory()) continue;
    const fs::path manifest = entry.path() / "manifest.json";
    std::optional<SnapshotInfo> info;
    if (std::FILE* f = std::fopen(manifest.c_str(), "rb")) {
      std::string text(1 << 16, '\0');
      text.resize(std::fread(text.data(), 1, text.size(), f));
      std::fclose(f);
      info = FromJson(text);
    }
    if (!info || info->id != entry.path().filename().string()) {
      // A bundle the agent died writing: no manifest, no snapshot.
      GW_LOG_WARN("snapshots: removing unfinished {}", entry.path().string());
      fs::remove_all(entry.path(), ec);
      continue;
    }
    snapshots_[info->id] = *info;
  }
  stopping_ = false;
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

Result<SnapshotInfo> SnapshotManager::Take(const std::string& reason, const std::string& job,
                                           int64_t now_ms, bool manual, const std::string& owner) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!thread_.joinable()) return Status::Unavailable("snapshots are not open");
  const std::string key = reason + "\n" + job;
  // A storm of one kind (every job failing as a node dies) gives one snapshot per min_gap;
  // a different kind (a hung job that then fails) is its own story.
  int64_t& last = last_by_reason_[reason];
  if (last && now_ms - last < options_.min_gap_ms)
    return Status::ResourceExhausted(
        fmt::format("a {} snapshot was taken {} ms ago", reason, now_ms - last));
  if (!manual) {
    auto it = last_by_key_.find(key);
    if (it != last_by_key_.end() && now_ms - it->second < options_.same_key_gap_ms)
      return Status::ResourceExhausted("a snapshot of this job and reason was taken " +
                                       std::to_string((now_ms - it->second) / 1000) + " s ago");
  }
  last = now_ms;
  last_by_key_[key] = now_ms;
  if (last_by_key_.size() > 4096) last_by_key_.erase(last_by_key_.begin());
  Pending p;
  p.info.id = MakeId(now_ms, job, reason);
  while (snapshots_.count(p.info.id)) p.info.id += "x";
  p.info.reason = reason;
  p.info.job = job;
  p.info.owner = owner;
  p.info.node = node_;
  p.info.t_ms = now_ms;
  p.info.from_ms = now_ms - options_.window_ms;
  p.info.state = "pending";
  lock.unlock();
  // The window is copied now: it must end at the failure, not whenever the writer gets to it.
  p.lines = window_(p.info.from_ms, now_ms);
  p.info.records = p.lines.size();
  lock.lock();
  snapshots_[p.info.id] = p.info;
  SnapshotInfo info = p.info;
  queue_.push_back(std::move(p));
  cv_.notify_all();
  return info;
}

Status SnapshotManager::Write(Pending& p) {
  const std::string dir = options_.dir + "/" + p.info.id;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return Status::IoError("cannot create " + dir + ": " + std::strerror(errno));
  if (Status st = trace::WriteTraceFile(dir + "/trace.jsonl.gz", p.lines); !st.ok()) return st;
  p.lines.clear();
  p.lines.shrink_to_fit();
  if (events_ && !p.info.job.empty()) {
    store::EventQuery q;
    q.start_ms = 0;
    q.end_ms = p.info.t_ms + 60000;
    q.job = p.info.job;
    q.kinds = {"log"};
    q.limit = options_.max_job_log_lines;
    q.newest_first = true;  // the lines around the failure, when there are more than the limit
    auto lines = events_->Query(q);
    if (lines.ok()) std::reverse(lines->begin(), lines->end());
    if (lines.ok()) {
      std::vector<std::string> text;
      text.reserve(lines->size());
      for (const auto& e : *lines) {
        std::string line = e.message;
        for (char& c : line)
          if (c == '\n') c = ' ';
        text.push_back(trace::FormatTraceTime(e.t_ms) + " " + line);
      }
      p.info.job_log_lines = text.size();
      if (Status st = trace::WriteTraceFile(dir + "/job.log", text); !st.ok()) return st;
    }
  }
  p.info.state = "written";
  return trace::WriteTraceFile(dir + "/manifest.json", {ToJson(p.info).dump()});
}

void SnapshotManager::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping with nothing left
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Status st = Write(p);
    if (st.ok()) {
      GW_LOG_INFO(
          "snapshot {} written: {} records{}", p.info.id, p.info.records,
          p.info.job.empty() ? "" : fmt::format(", {} job log lines", p.info.job_log_lines));
    } else {
      p.info.state = "failed";
      p.info.error = st.message();
      GW_LOG_ERROR("snapshot {}: {}", p.info.id, st.message());
    }
    lock.lock();
    snapshots_[p.info.id] = p.info;
    Prune();
  }
}

void SnapshotManager::Prune() {
  while (snapshots_.size() > options_.max_snapshots) {
    // Manual snapshots go first: they must not push out the failures. Then the oldest of the
    // owner holding the most, so no one owner's failures evict another's.
    auto oldest = snapshots_.end();
    for (auto it = snapshots_.begin(); it != snapshots_.end(); ++it)
      if (it->second.reason == "manual" && it->second.state != "pending") {
        oldest = it;
        break;
      }
    if (oldest == snapshots_.end()) {
      std::map<std::string, size_t> per_owner;
      for (const auto& [id, info] : snapshots_) ++per_owner[info.owner];
      size_t most = 0;
      for (const auto& [owner, n] : per_owner) most = std::max(most, n);
      for (auto it = snapshots_.begin(); it != snapshots_.end(); ++it)
        if (per_owner[it->second.owner] == most && it->second.state != "pending") {
          oldest = it;
          break;
        }
    }
    if (oldest == snapshots_.end()) break;
    std::error_code ec;
    fs::remove_all(options_.dir + "/" + oldest->first, ec);
    snapshots_.erase(oldest);
    ++evicted_;
  }
}

uint64_t SnapshotManager::evicted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return evicted_;
}

std::vector<SnapshotInfo> SnapshotManager::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SnapshotInfo> out;
  for (auto it = snapshots_.rbegin(); it != snapshots_.rend(); ++it) out.push_back(it->second);
  return out;
}

Result<std::string> SnapshotManager::FilePath(const std::string& id,
                                              const std::string& file) const {
  if (file != "trace.jsonl.gz" && file != "job.log" && file != "manifest.json")
    return Status::NotFound("no file " + file + " in a snapshot");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = snapshots_.find(id);  // ids come from the map, never a path a client made up
  if (it == snapshots_.end() || it->second.state != "written")
    return Status::NotFound("no snapshot " + id);
  return options_.dir + "/" + it->first + "/" + file;
}

void SnapshotManager::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace gpuwatch::server
