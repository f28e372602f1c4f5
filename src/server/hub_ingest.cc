#include "server/hub_ingest.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "common/file_io.h"
#include "common/log.h"

namespace gpuwatch::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Reads "<spool id> <seq>\n" off the front of a logged entry.
bool ParseEntryHeader(std::string_view payload, std::string* spool_id, uint64_t* seq,
                      std::string_view* lines) {
  const size_t nl = payload.find('\n');
  if (nl == std::string_view::npos) return false;
  const std::string_view head = payload.substr(0, nl);
  const size_t sp = head.find(' ');
  if (sp == std::string_view::npos) return false;
  *spool_id = std::string(head.substr(0, sp));
  const std::string_view n = head.substr(sp + 1);
  if (std::from_chars(n.data(), n.data() + n.size(), *seq).ec != std::errc()) return false;
  *lines = payload.substr(nl + 1);
  return true;
}

// The line of `text` that starts at *pos, without its "\n" or "\r\n"; *pos moves past it. An
// entry's records are JSON Lines, both when taken and when read back from the log.
std::string_view NextLine(std::string_view text, size_t* pos) {
  size_t end = text.find('\n', *pos);
  if (end == std::string_view::npos) end = text.size();
  std::string_view line = text.substr(*pos, end - *pos);
  *pos = end + 1;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

std::string ReadNodeRecord(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

bool ValidSpoolId(std::string_view id) {
  return id.size() >= 16 && id.size() <= 64 &&
         id.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// What a node record says of the node (the driver, CUDA and NCCL the versions rule compares,
// the clock offset, the GPUs).
void NoteNodeRecord(const json& r, NodeStatus* s) {
  auto str = [&](const char* k, std::string* out) {
    if (auto it = r.find(k); it != r.end() && it->is_string()) *out = it->get<std::string>();
  };
  str("driver_version", &s->driver_version);
  str("cuda_version", &s->cuda_version);
  str("nccl_version", &s->nccl_version);
  if (auto it = r.find("clock_offset_ms"); it != r.end() && it->is_number())
    s->clock_offset_ms = it->get<double>();
  if (auto it = r.find("gpus"); it != r.end() && it->is_array()) s->gpus = it->size();
}

}  // namespace

bool ValidNodeName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return name != "." && name != "..";
}

std::string_view NodeHealthName(NodeHealth h) {
  switch (h) {
    case NodeHealth::kHealthy:
      return "healthy";
    case NodeHealth::kDegraded:
      return "degraded";
    case NodeHealth::kDrainRecommended:
      return "drain_recommended";
  }
  return "healthy";
}

Result<std::unique_ptr<HubIngest>> HubIngest::Open(HubIngestOptions options) {
  std::unique_ptr<HubIngest> h(new HubIngest(std::move(options)));
  GW_RETURN_IF_ERROR(h->Load());
  // What the load settled (positions brought back to a replaced log's end, the replayed
  // counts) is saved at once: a crash before the first periodic save must not read the old
  // positions against the new logs again.
  if (Status st = h->SaveJobs(); !st.ok()) GW_LOG_WARN("hub: the job list: {}", st.message());
  return h;
}

Status HubIngest::Load() {
  if (options_.data_dir.empty()) return Status::Ok();
  const std::string root = options_.data_dir + "/records";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Status::IoError("cannot create " + root + ": " + ec.message());
  std::lock_guard<std::mutex> lock(mu_);
  if (std::ifstream in(JobsPath(), std::ios::binary); !in) {
    // Missing is a first start; there but unreadable is not, and saving over it would lose it.
    const int err = errno;
    std::error_code exists_ec;
    if (fs::exists(JobsPath(), exists_ec))
      return Status::IoError(fmt::format(
          "cannot read {} (the hub's job list): {}; fix its permissions, or move it away to "
          "start the list again",
          JobsPath(), std::strerror(err)));
  } else {
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    json snap = json::parse(text, nullptr, false);
    Status st = snap.is_discarded() ? Status::InvalidArgument("not JSON") : jobs_.Restore(snap);
    if (st.ok()) {
      jobs_restored_ = true;
    } else {
      // Kept aside for a look: the next save would write over it.
      std::error_code rename_ec;
      fs::rename(JobsPath(), JobsPath() + ".bad", rename_ec);
      GW_LOG_WARN("hub: {}: {}; {}, and the job list starts again from the records' logs",
                  JobsPath(), st.message(),
                  rename_ec ? "it could not be kept aside (" + rename_ec.message() + ")"
                            : "kept as " + JobsPath() + ".bad");
    }
  }
  std::set<std::string> logged;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !ValidNodeName(name)) continue;
    auto node = NodeFor(name);
    if (!node.ok()) return node.status();
    logged.insert(name);
    // The newest entry logged is the stream's position.
    Spool& log = *(*node)->log;
    const SpoolStats st = log.Stats();
    // A log that ends before the job list's position was cut short (a damaged tail) or
    // replaced: what it appends next is new, so the position comes back to its end.
    if (const uint64_t pos = jobs_.Position(name); pos >= st.next_seq) {
      GW_LOG_WARN(
          "hub: the job list counted node {}'s records up to entry {}, but its log ends "
          "at {}: entries from {} on are counted as new",
          name, pos, st.next_seq - 1, st.next_seq);
      jobs_.ClampPosition(name, st.next_seq - 1);
    }
    if (st.next_seq > st.first_seq) {
      auto last = log.Read(st.next_seq - 1, 1);
      std::string_view lines;
      if (last.ok() && !last->empty() &&
          ParseEntryHeader(last->back().payload, &(*node)->status.spool_id,
                           &(*node)->status.next_seq, &lines))
        ++(*node)->status.next_seq;
    }
    const bool node_record_reloaded = ReloadRecent(name, **node);
    // The node's latest node record: what /api/v1/nodes says of it, and the first record of
    // its stream for the diagnosis (the agent sends one only at start and on a change). When
    // the entries reloaded hold a node record, they hold this one (it came in the newest entry
    // that had one).
    if (auto text = ReadNodeRecord(root + "/" + name + "/node.json"); !text.empty()) {
      json r = json::parse(text, nullptr, false);
      if (r.is_object() && r.contains("t") && r["t"].is_number()) {
        NoteNodeRecord(r, &(*node)->status);
        if (!node_record_reloaded)
          (*node)->recorder->AddNodeRecord(
              static_cast<int64_t>(std::llround(r["t"].get<double>() * 1000)), text, name);
      }
    }
  }
  if (ec) return Status::IoError("cannot list " + root + ": " + ec.message());
  // A node whose records directory is gone starts a new log from entry 1.
  for (const std::string& name : jobs_.PositionedNodes())
    if (!logged.count(name)) jobs_.ClampPosition(name, 0);
  GW_LOG_INFO("hub: {} nodes known from {}", nodes_.size(), root);
  return Status::Ok();
}

// The newest entries of the node's log, back into its flight recorder and the job list: a
// restarted hub diagnoses its nodes' recent past again, so a finding that needs minutes of
// steps (a straggler, a data stall) is back as soon as the agents push again, and a running
// job's windows fill before its next steps. The recorder gets the entries from the newest back,
// doubling, until they hold its byte bound (it keeps its age bound itself) or the log's start.
// The job list gets those and, further back where its snapshot is older, every entry past the
// node's position in it (FleetJobs::Replay counts those in, and only those). The accounting
// ledger is not fed: it keeps its own file.
bool HubIngest::ReloadRecent(const std::string& name, Node& n) {
  const SpoolStats st = n.log->Stats();
  if (st.next_seq <= st.first_seq) return false;
  const uint64_t want_bytes = options_.node_recorder_bytes;
  std::vector<SpoolEntry> tail;  // the recorder's, read once and replayed below
  for (uint64_t back = 8;; back *= 2) {
    const uint64_t from = st.next_seq - st.first_seq > back ? st.next_seq - back : st.first_seq;
    auto got = n.log->Read(from, 4 * want_bytes);
    // Cut short by the byte cap before the newest entry: the previous, shorter tail holds
    // enough already.
    if (!got.ok() || got->empty() || got->back().seq + 1 != st.next_seq) {
      if (!got.ok()) GW_LOG_WARN("hub: records of {}: {}", name, got.status().message());
      break;
    }
    tail = std::move(*got);
    uint64_t bytes = 0;
    for (const SpoolEntry& e : tail) bytes += e.payload.size();
    if (from == st.first_seq || bytes >= want_bytes) break;
  }
  const uint64_t recorder_from = tail.empty() ? st.next_seq : tail.front().seq;
  const uint64_t position = jobs_.Position(name);
  if (jobs_restored_ && position + 1 < st.first_seq)
    GW_LOG_WARN(
        "hub: node {}'s log dropped entries {} to {} (over its size bound) before the job "
        "list counted them: their steps are not counted",
        name, position + 1, st.first_seq - 1);
  size_t records = 0;
  bool node_record = false;
  // One entry: its job and step records to the job list, and the rest too to the recorder.
  auto replay = [&](const SpoolEntry& e, bool to_recorder) {
    std::string id;
    uint64_t seq = 0;
    std::string_view lines;
    if (!ParseEntryHeader(e.payload, &id, &seq, &lines)) return;
    std::vector<FleetJobs::TimedRecord> job_records;
    for (size_t pos = 0; pos < lines.size();) {
      const std::string_view line = NextLine(lines, &pos);
      // Checked when taken; a line that no longer parses (a damaged disk) is skipped.
      json r = json::parse(line, nullptr, false);
      if (!r.is_object() || !r.contains("t") || !r["t"].is_number() || !r.contains("type") ||
          !r["type"].is_string())
        continue;
      const int64_t t_ms = static_cast<int64_t>(std::llround(r["t"].get<double>() * 1000));
      const std::string& type = r["type"].get_ref<const std::string&>();
      n.status.newest_record_ms = std::max(n.status.newest_record_ms, t_ms);
      if (type == "job" || type == "step") job_records.push_back({std::move(r), t_ms});
      if (!to_recorder) continue;
      if (type == "node") {
        n.recorder->AddNodeRecord(t_ms, std::string(line), name);
        node_record = true;
      } else {
        n.recorder->Add(t_ms, std::string(line));
      }
      ++records;
    }
    if (!job_records.empty() || e.seq > position) jobs_.Replay(name, e.seq, job_records);
  };
  // A node the snapshot does not name pushed first after it was taken: all of its log counts.
  // Without a snapshot (none saved yet, or a damaged one), only what the recorder reloads.
  // Where the job list's part starts before the recorder's, that part is read on its own.
  const uint64_t jobs_from = jobs_restored_ ? position + 1 : recorder_from;
  for (uint64_t next = std::max(st.first_seq, jobs_from); next < recorder_from;) {
    auto got = n.log->Read(next, 4 * want_bytes);
    if (!got.ok() || got->empty()) {
      if (!got.ok()) GW_LOG_WARN("hub: records of {}: {}", name, got.status().message());
      break;
    }
    for (const SpoolEntry& e : *got) {
      if (e.seq >= recorder_from) break;
      replay(e, /*to_recorder=*/false);
      next = e.seq + 1;
    }
    if (got->back().seq >= recorder_from) break;
  }
  for (const SpoolEntry& e : tail) replay(e, /*to_recorder=*/true);
  if (records > 0)
    GW_LOG_INFO("hub: node {}: {} recent records reloaded from its log", name, records);
  return node_record;
}

std::string HubIngest::JobsPath() const { return options_.data_dir + "/fleet-jobs.json"; }

Status HubIngest::SaveJobs() {
  if (options_.data_dir.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(save_mu_);
  if (jobs_.Changes() == saved_changes_) return Status::Ok();
  uint64_t changes = 0;
  const std::string text = jobs_.Snapshot(&changes).dump() + "\n";
  GW_RETURN_IF_ERROR(WriteFileAtomically(JobsPath(), text));
  saved_changes_ = changes;
  return Status::Ok();
}

Result<HubIngest::Node*> HubIngest::NodeFor(const std::string& name) {
  auto it = nodes_.find(name);
  if (it != nodes_.end()) return &it->second;
  Node n;
  n.status.node = name;
  n.recorder = std::make_unique<trace::FlightRecorder>(trace::FlightRecorderOptions{
      .max_bytes = options_.node_recorder_bytes, .max_age = options_.node_recorder_age});
  if (!options_.data_dir.empty()) {
    SpoolOptions so;
    so.max_bytes = options_.max_bytes_per_node;
    so.segment_bytes = std::min<uint64_t>(so.segment_bytes, options_.max_bytes_per_node / 4);
    so.sync = options_.sync;
    auto log = Spool::Open(options_.data_dir + "/records/" + name, so);
    if (!log.ok()) return log.status();
    n.log = std::move(log).value();
  }
  return &nodes_.emplace(name, std::move(n)).first->second;
}

HttpReply HubIngest::HandleRecords(std::string_view body, std::string_view node,
                                   std::string_view spool_id, std::string_view seq_text,
                                   int64_t now_ms) {
  if (!ValidNodeName(node))
    return {400, "X-Gpuwatch-Node must name the node ([A-Za-z0-9._-], 1 to 253 characters)\n"};
  if (!ValidSpoolId(spool_id))
    return {400, "X-Gpuwatch-Spool must be the agent's spool id (16 to 64 hex digits)\n"};
  uint64_t seq = 0;
  if (seq_text.empty() ||
      std::from_chars(seq_text.data(), seq_text.data() + seq_text.size(), seq).ec != std::errc() ||
      seq == 0)
    return {400, "X-Gpuwatch-Seq must be the entry's sequence number (a positive integer)\n"};

  // Each line a trace record of this node: checked whole before anything is kept, so an entry
  // is taken entirely or not at all.
  struct Parsed {
    int64_t t_ms;
    std::string_view line;
    bool node_record;
  };
  std::vector<Parsed> lines;
  NodeStatus node_info;
  std::string_view node_line;                       // the entry's last node record
  std::vector<FleetJobs::TimedRecord> job_records;  // for the fleet's job list
  std::string accounting_lines;                     // for the ledger
  size_t line_no = 0;
  for (size_t pos = 0; pos < body.size();) {
    const std::string_view line = NextLine(body, &pos);
    ++line_no;
    if (line.empty()) continue;
    if (lines.size() >= options_.max_lines_per_entry)
      return {413,
              fmt::format("more than {} records in one entry\n", options_.max_lines_per_entry)};
    json r = json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object())
      return {400, fmt::format("line {}: not a JSON object\n", line_no)};
    auto t = r.find("t");
    auto type = r.find("type");
    if (t == r.end() || !t->is_number() || type == r.end() || !type->is_string())
      return {400, fmt::format("line {}: a trace record needs \"t\" (a number) and \"type\"\n",
                               line_no)};
    const double t_s = t->get<double>();
    if (!std::isfinite(t_s) || t_s < 0 || t_s > 9.2e12)
      return {400, fmt::format("line {}: \"t\" {} is not a time in Unix seconds\n", line_no, t_s)};
    if (t_s * 1000 > static_cast<double>(now_ms + options_.max_future_ms))
      return {400, fmt::format("line {}: \"t\" {} is {:.0f} s ahead of the hub's clock (at most "
                               "{} s are taken): check the node's time source\n",
                               line_no, t_s, t_s - static_cast<double>(now_ms) / 1000,
                               options_.max_future_ms / 1000)};
    if (auto n = r.find("node"); n != r.end()) {
      if (!n->is_string() || n->get_ref<const std::string&>() != node)
        return {400, fmt::format("line {}: the record names node {} but the entry comes from {}\n",
                                 line_no, n->dump(), node)};
    }
    const std::string& type_name = type->get_ref<const std::string&>();
    const bool node_record = type_name == "node";  // read before r may be moved below
    if (options_.accounting_sink &&
        (type_name == "job" || type_name == "gpu" || type_name == "proc" || type_name == "node")) {
      accounting_lines.append(line);
      accounting_lines += '\n';
    }
    if (type_name == "job" || type_name == "step")
      job_records.push_back({std::move(r), static_cast<int64_t>(std::llround(t_s * 1000))});
    else if (node_record) {
      NoteNodeRecord(r, &node_info);
      node_line = line;
    }
    lines.push_back({static_cast<int64_t>(std::llround(t_s * 1000)), line, node_record});
  }

  Node* n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(std::string(node));
    if (it == nodes_.end() && nodes_.size() >= options_.max_nodes)
      return {429, fmt::format("the hub takes at most {} nodes\n", options_.max_nodes)};
    auto got = NodeFor(std::string(node));
    if (!got.ok()) {
      GW_LOG_ERROR("hub: {}", got.status().message());
      return {500, got.status().message() + "\n"};
    }
    n = *got;
    NodeStatus& s = n->status;
    if (s.spool_id != spool_id) {
      if (!s.spool_id.empty())
        GW_LOG_INFO("hub: node {} sends a new stream (spool {}, was {}): its data dir was reset",
                    node, spool_id, s.spool_id);
      s.spool_id = std::string(spool_id);
      s.next_seq = 0;
    }
    if (s.next_seq != 0 && seq < s.next_seq) {
      ++s.duplicates;
      s.last_push_ms = now_ms;
      return {200, fmt::format(R"({{"duplicate":true,"next_seq":{}}})", s.next_seq) + "\n"};
    }
    // On disk first: a reply of 200 means the entry survives the hub's crash.
    uint64_t log_seq = 0;
    if (n->log) {
      std::string payload = fmt::format("{} {}\n", spool_id, seq);
      payload.append(body);
      auto appended = n->log->Append(payload);
      if (!appended.ok()) {
        GW_LOG_ERROR("hub: records of {}: {}", node, appended.status().message());
        return {500, "cannot keep the records: " + appended.status().message() + "\n"};
      }
      log_seq = *appended;
    }
    // Counted in under the lock, in the log's order: the job list's position for the node
    // (FleetJobs::AddEntry) then never passes an entry it has not counted.
    jobs_.AddEntry(std::string(node), log_seq, job_records);
    if (s.next_seq != 0 && seq > s.next_seq) s.gap_entries += seq - s.next_seq;
    s.next_seq = seq + 1;
    s.last_push_ms = now_ms;
    ++s.entries;
    s.records += lines.size();
    for (const auto& p : lines) s.newest_record_ms = std::max(s.newest_record_ms, p.t_ms);
    if (!node_line.empty()) {
      if (!options_.data_dir.empty()) {
        const std::string path = options_.data_dir + "/records/" + std::string(node) + "/node.json";
        if (Status st = WriteFileAtomically(path, std::string(node_line) + "\n"); !st.ok())
          GW_LOG_WARN("hub: {}", st.message());
      }
      node_info.node = s.node;
      s.driver_version = node_info.driver_version;
      s.cuda_version = node_info.cuda_version;
      s.nccl_version = node_info.nccl_version;
      s.clock_offset_ms = node_info.clock_offset_ms;
      s.gpus = node_info.gpus;
    }
  }
  for (const auto& p : lines) {
    if (p.node_record)
      n->recorder->AddNodeRecord(p.t_ms, std::string(p.line), std::string(node));
    else
      n->recorder->Add(p.t_ms, std::string(p.line));
  }
  if (!accounting_lines.empty()) options_.accounting_sink(accounting_lines);
  return {200, fmt::format(R"({{"taken":{},"next_seq":{}}})", lines.size(), seq + 1) + "\n"};
}

int64_t HubIngest::DiagnosisTimeMs(int64_t now_ms) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t t = -1;
  for (const auto& [name, n] : nodes_) {
    const NodeStatus& s = n.status;
    if (s.last_push_ms == 0 || now_ms - s.last_push_ms > options_.stale_after_ms) continue;
    t = t < 0 ? s.newest_record_ms : std::min(t, s.newest_record_ms);
  }
  return t;
}

namespace {

// Each node's window is in time order (its node record in force first, stamped at or before
// the window's start); merged by time, stable, so a node's order is kept.
std::vector<std::string> MergeByTime(std::vector<trace::FlightRecorder::TimedLine> all) {
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.t_ms < b.t_ms; });
  std::vector<std::string> out;
  out.reserve(all.size());
  for (auto& l : all) out.push_back(std::move(l.line));
  return out;
}

}  // namespace

std::vector<std::string> HubIngest::Window(int64_t from_ms, int64_t to_ms) const {
  std::vector<const trace::FlightRecorder*> recorders;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, n] : nodes_) recorders.push_back(n.recorder.get());
  }
  std::vector<trace::FlightRecorder::TimedLine> all;
  for (const trace::FlightRecorder* r : recorders)
    for (auto& l : r->TimedWindow(from_ms, to_ms)) all.push_back(std::move(l));
  return MergeByTime(std::move(all));
}

std::vector<std::string> HubIngest::DiagnosisWindow(int64_t to_ms) {
  struct Source {
    Node* node;  // nodes are never erased: the pointer outlives the lock
    int64_t from_ms;
  };
  std::vector<Source> sources;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, n] : nodes_)
      if (n.diagnosed_ms < to_ms) sources.push_back({&n, n.diagnosed_ms + 1});
  }
  std::vector<trace::FlightRecorder::TimedLine> all;
  std::vector<int64_t> newest(sources.size(), -1);
  for (size_t i = 0; i < sources.size(); ++i)
    for (auto& l : sources[i].node->recorder->TimedWindow(sources[i].from_ms, to_ms)) {
      newest[i] = std::max(newest[i], l.t_ms);
      all.push_back(std::move(l));
    }
  {
    // Up to the newest record read, not to to_ms: a record stamped before to_ms that the
    // recorder did not hold yet (its entry still being taken) is read next time.
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < sources.size(); ++i)
      sources[i].node->diagnosed_ms = std::max(sources[i].node->diagnosed_ms, newest[i]);
  }
  return MergeByTime(std::move(all));
}

size_t HubIngest::RecordedLines() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [name, node] : nodes_) n += node.recorder->Stats().lines;
  return n;
}

std::vector<NodeStatus> HubIngest::Nodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<NodeStatus> out;
  for (const auto& [name, n] : nodes_) out.push_back(n.status);
  return out;
}

json HubIngest::NodesJson(const std::vector<analyze::Finding>& findings, int64_t now_ms) const {
  json arr = json::array();
  for (const NodeStatus& s : Nodes()) {
    NodeHealth health = NodeHealth::kHealthy;
    std::vector<std::string> reasons;
    // The card and link findings open on the node; the job's own troubles (task layer) say
    // nothing of the node.
    for (const auto& f : findings) {
      if (f.node != s.node || f.is_info() || f.layer() == model::Layer::kTask) continue;
      const NodeHealth h = f.severity == model::Severity::kCritical ? NodeHealth::kDrainRecommended
                                                                    : NodeHealth::kDegraded;
      health = std::max(health, h);
      reasons.push_back(f.CauseText() + (f.gpu ? fmt::format(" on GPU {}", *f.gpu) : "") + ": " +
                        f.summary);
    }
    const int64_t silent_ms = s.last_push_ms > 0 ? now_ms - s.last_push_ms : -1;
    if (silent_ms > options_.stale_after_ms) {
      health = std::max(health, NodeHealth::kDegraded);
      reasons.push_back(fmt::format("no data from the node for {} s", silent_ms / 1000));
    }
    std::string reason;
    for (const auto& r : reasons) reason += (reason.empty() ? "" : "; ") + r;
    json n = {{"node", s.node},
              {"health", NodeHealthName(health)},
              {"reason", reasons.empty() ? "no open card or link finding" : reason},
              {"last_push_ms", s.last_push_ms},
              {"newest_record_ms", s.newest_record_ms},
              {"entries", s.entries},
              {"records", s.records},
              {"duplicates", s.duplicates},
              {"gap_entries", s.gap_entries},
              {"gpus", s.gpus},
              {"driver_version", s.driver_version},
              {"cuda_version", s.cuda_version},
              {"nccl_version", s.nccl_version}};
    n["clock_offset_ms"] = s.clock_offset_ms ? json(*s.clock_offset_ms) : json(nullptr);
    arr.push_back(std::move(n));
  }
  return {{"nodes", std::move(arr)}};
}

}  // namespace gpuwatch::server
