// HubIngest: the hub's receiving end of the agents' record streams (issue 19) and its list of
// nodes with their health.
//
// POST /api/v1/records carries one entry of an agent's spool (server/spool.h): trace records
// (../shared/spec/trace-format.md), one JSON object a line, with three headers:
//   X-Gpuwatch-Node: the agent's node name; every record that names a node must name this one
//   X-Gpuwatch-Spool: the agent's spool id (a new id is a new stream: a wiped data dir)
//   X-Gpuwatch-Seq: the entry's sequence number in that spool
// Idempotent per node, spool and sequence number: an entry at or below the newest taken is
// answered 200 {"duplicate": true} and kept nowhere again, so a retry never counts twice. A
// sequence number past the next expected is taken, and the entries skipped are counted as a
// gap (the agent's spool dropped them over its bound).
//
// What is taken goes to disk first (one Spool per node under <data-dir>/records/<node>/, the
// entry prefixed with "<spool id> <seq>\n", synced before the reply), then to that node's
// flight recorder, which the hub's diagnosis reads through Window. On a restart the newest entry of
// each node's log gives its stream position back, so an agent resending what the hub had taken just
// before dying is answered "duplicate", and the newest entries (up to the recorder's bounds) go
// back into the recorder and the job list: the diagnosis reads the recent past again.
//
// The job list (FleetJobs) is saved to <data-dir>/fleet-jobs.json by SaveJobs (the hub calls it
// every 30 s and when it stops; Open calls it once the load has settled) and read back on a
// restart before the logs' entries past its positions are replayed into it: ended jobs stay
// listed, and a step is counted once.
//
// Every 400 says what was wrong (the line number and the field); a 400 is not retried by the
// agent. The body is bounded by the HTTP route; the number of nodes by max_nodes (a new node
// over it is 429: a hostile or misconfigured fleet cannot exhaust the hub).
//
// The diagnosis must not pass records still on their way: DiagnosisTimeMs gives the time up to
// which every live node has delivered (the oldest of their newest records), so a node catching
// up after an outage is diagnosed as it arrives, not skipped. A node silent for stale_after_ms
// no longer holds the others back. A node heard for the first time after the diagnosis passed
// its records' times is not skipped either: DiagnosisWindow keeps each node's place.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "analyze/finding.h"
#include "server/fleet_jobs.h"
#include "server/remote_write_handler.h"
#include "server/spool.h"
#include "trace/flight_recorder.h"

namespace gpuwatch::server {

struct HubIngestOptions {
  std::string data_dir;  // "" keeps the records in memory only (tests)
  size_t max_nodes = 20'000;
  size_t max_lines_per_entry = 200'000;
  uint64_t max_bytes_per_node = uint64_t{256} << 20;  // the on-disk record log of each node
  int64_t stale_after_ms = 120'000;
  // Records further ahead of the hub's clock are refused (400): one record from a node with a
  // wild clock would otherwise age every other node's records out of the flight recorder and
  // carry the diagnosis past what has arrived. The store's bound, for the same reason.
  int64_t max_future_ms = 3600'000;
  bool sync = true;
  // Each node's records wait in a flight recorder of their own until the diagnosis reads them
  // (and for the trace API): a node resending after an outage appends in its own time order
  // instead of inserting minutes back into one shared ring. The age is relative to the node's
  // own newest record; the bytes bound each node (1,000 nodes: 2 GiB at most).
  std::chrono::milliseconds node_recorder_age{std::chrono::minutes(3)};
  size_t node_recorder_bytes = size_t{2} << 20;
  // Handed the job, gpu, proc and node lines of each entry taken (JSON Lines): the ledger's.
  std::function<void(std::string_view lines)> accounting_sink;
};

// A node's health as the hub judges it (draining is only ever advised).
enum class NodeHealth { kHealthy, kDegraded, kDrainRecommended };
std::string_view NodeHealthName(NodeHealth h);  // "healthy", "degraded", "drain_recommended"

struct NodeStatus {
  std::string node;
  std::string spool_id;
  uint64_t next_seq = 0;     // the next entry expected
  int64_t last_push_ms = 0;  // wall clock of the hub when it last took an entry
  int64_t newest_record_ms = 0;
  uint64_t entries = 0, records = 0, duplicates = 0, gap_entries = 0;
  std::string driver_version, cuda_version, nccl_version;
  std::optional<double> clock_offset_ms;
  size_t gpus = 0;
};

class HubIngest {
 public:
  static Result<std::unique_ptr<HubIngest>> Open(HubIngestOptions options);

  // One POST /api/v1/records. `now_ms`: the hub's clock.
  HttpReply HandleRecords(std::string_view body, std::string_view node, std::string_view spool_id,
                          std::string_view seq, int64_t now_ms);

  // Up to when every node that pushed within stale_after_ms of now has delivered its records;
  // -1 when none has (the diagnosis then waits: a hub just restarted must not pass the
  // backlog its agents are about to resend).
  int64_t DiagnosisTimeMs(int64_t now_ms) const;

  // Every node's records with from_ms <= t <= to_ms, merged in time order, each node's node
  // record in force first (trace::FlightRecorder::Window per node): the trace API's.
  std::vector<std::string> Window(int64_t from_ms, int64_t to_ms) const;
  // What the diagnosis reads next: each node's records up to to_ms that it has not read yet,
  // merged in time order, each node's node record in force first. Kept per node, not one cursor
  // for all: a node whose first entry (or a late one) lands after the diagnosis read past its
  // records' times still has them read, its node record first — with one cursor, a node that
  // pushed a moment after the others lost its first records and its versions (the
  // version_mismatch the fleet test missed). A node's records arrive in time order (the spool
  // sends them so), so "not read yet" is "newer than the newest read". Diagnosis thread only.
  std::vector<std::string> DiagnosisWindow(int64_t to_ms);
  // Records held for the diagnosis, all nodes together.
  size_t RecordedLines() const;

  std::vector<NodeStatus> Nodes() const;
  // The jobs across nodes, from the job and step records taken.
  const FleetJobs& jobs() const { return jobs_; }
  // Writes the job list to <data-dir>/fleet-jobs.json (atomically) if it changed since the
  // last save; nothing without a data dir.
  Status SaveJobs();
  // GET /api/v1/nodes: {"nodes": [{node, health, reason, last_push_ms, ...}]}. The health
  // comes from the findings open on each node (hardware causes advise a drain) and from how
  // long the node has been silent.
  nlohmann::json NodesJson(const std::vector<analyze::Finding>& findings, int64_t now_ms) const;

 private:
  struct Node {
    NodeStatus status;
    std::unique_ptr<Spool> log;  // null without a data dir
    std::unique_ptr<trace::FlightRecorder> recorder;
    int64_t diagnosed_ms = -1;  // the newest record the diagnosis read (DiagnosisWindow)
  };
  explicit HubIngest(HubIngestOptions options) : options_(std::move(options)) {}
  Status Load();
  // Whether a node record was among the records reloaded. REQUIRES: mu_ held; n.log.
  bool ReloadRecent(const std::string& name, Node& n);
  Result<Node*> NodeFor(const std::string& name);  // REQUIRES: mu_ held
  std::string JobsPath() const;

  const HubIngestOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Node> nodes_;
  FleetJobs jobs_;
  bool jobs_restored_ = false;  // Load read a snapshot of the job list
  std::mutex save_mu_;
  uint64_t saved_changes_ = 0;  // FleetJobs::Changes() at the last save
};

// A node name the hub takes (a hostname: [A-Za-z0-9._-], 1 to 253 characters).
bool ValidNodeName(std::string_view name);

}  // namespace gpuwatch::server
