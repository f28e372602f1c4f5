// `gpuwatch top`: what the terminal view shows, as data and pure functions, so that layout, key
// handling and the API's parsing are tested as strings without a terminal (top_cmd.cc draws it
// with ncursesw and fetches the agent's API).
//
// A Snapshot is either live (the agent's /api/v1/gpus, /processes, /jobs, /findings) or a past
// instant read back from the agent's store through the query API: the same rows, so scrolling
// back in time is the same screen. Processes and findings are not kept as series, so a past
// snapshot says so instead of showing today's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::cli::top {

struct Gpu {
  unsigned index = 0;
  std::string name, uuid;
  bool lost = false;
  std::optional<double> util_pct, sm_active_ratio, mem_used_mib, mem_total_mib, temp_c, power_w,
      power_limit_w, sm_clock_mhz, mem_clock_mhz, ecc_sbe, ecc_dbe, last_xid;
  std::optional<uint64_t> throttle_mask;  // NVML clock-event reasons; nullopt: not reported
  uint64_t xid_count = 0;                 // XIDs since the agent started (live only)
};

struct Process {
  unsigned gpu = 0;
  int64_t pid = 0;
  std::string user, container, job, command;
  std::optional<int> visible_index;
  std::optional<double> mem_mib;
};

struct Job {
  std::string id, user, state;
  std::vector<unsigned> gpus;
  std::optional<double> iterations_per_s, samples_per_s, step_p50_s, step_p95_s, data_wait_ratio,
      comm_ratio;
};

struct Finding {
  std::string severity, cause, summary, job;
  std::optional<unsigned> gpu;
};

struct Snapshot {
  std::string hostname;
  int64_t time_ms = 0;  // the instant shown
  bool live = true;     // false: read back from the store
  bool simulated = false;
  std::vector<Gpu> gpus;
  std::vector<Process> processes;  // live only
  std::vector<Job> jobs;
  std::vector<Finding> findings;  // live only
  std::string note;               // why something is missing ("no store: history is off")
};

// The live snapshot from the agent's JSON answers (any of them may be null: that part is empty).
Snapshot ParseLive(const nlohmann::json& gpus, const nlohmann::json& processes,
                   const nlohmann::json& jobs, const nlohmann::json& findings);

// The PromQL instant queries a past snapshot is read with, at one instant, for one node.
struct HistoryQueries {
  std::string gpus, samples_per_s, iterations_per_s, step_seconds;
};
HistoryQueries MakeHistoryQueries(std::string_view hostname);
// A past snapshot from the four queries' answers (the Prometheus API's JSON envelopes). An
// answer that is not a success is an error naming the query.
Result<Snapshot> ParseHistory(std::string_view hostname, int64_t time_ms,
                              const nlohmann::json& gpus, const nlohmann::json& samples_per_s,
                              const nlohmann::json& iterations_per_s,
                              const nlohmann::json& step_seconds);

enum class SortKey { kIndex, kUtil, kMemory, kTemp, kPower };
std::string_view SortKeyName(SortKey k);

struct View {
  SortKey sort = SortKey::kIndex;
  std::string job_filter, user_filter;  // "" for all
  bool per_job = false;                 // GPUs and processes grouped under their jobs
  int64_t history_offset_s = 0;         // 0: live; else how far back from now
  int scroll = 0;                       // first body row shown
};

// What a key does. kRefetch: the instant shown changed (history), fetch again.
enum class KeyEffect { kNone, kRedraw, kRefetch, kQuit };
// Keys: q quit; s next sort key; j / u cycle the job / user filter through those the snapshot
// has; v per-job view; left/right one minute back/forward, '<' / '>' ten minutes, l or End
// live; up/down/PgUp/PgDn scroll. `key` is a character or one of the Key* codes below.
inline constexpr int kKeyLeft = 0x1001, kKeyRight = 0x1002, kKeyUp = 0x1003, kKeyDown = 0x1004,
                     kKeyPageUp = 0x1005, kKeyPageDown = 0x1006, kKeyEnd = 0x1007;
KeyEffect HandleKey(int key, const Snapshot& s, View* v);

enum class Style { kNormal, kTitle, kHeader, kWarn, kCrit, kDim };
struct Line {
  std::string text;  // at most the width, in columns (ASCII and a few UTF-8 bar glyphs)
  Style style = Style::kNormal;
};

// The whole screen for a terminal of width x height: title, GPU rows, processes, jobs,
// findings, key help. Narrow terminals drop columns (bars first, then name, clocks); short ones
// drop sections from the bottom and say how many rows were left out. Text that came from a
// client (job ids, users, commands) is made printable.
std::vector<Line> Layout(const Snapshot& s, const View& v, int width, int height);
// The same content as plain text for --once / --plain and dumb terminals: no bars, no key help,
// every row (no height limit).
std::string PlainText(const Snapshot& s, const View& v, int width);

}  // namespace gpuwatch::cli::top
