#include "cli/record.h"

#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <set>
#include <thread>

#include "cli/config_file.h"
#include "cli/job_view.h"
#include "common/time_base.h"
#include "trace/trace_file.h"

namespace gpuwatch::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

std::string Secs(int64_t ms) {
  return fmt::format("{}.{:03d}", ms / 1000, static_cast<int>(ms % 1000));
}

}  // namespace

int RunRecord(const RecordOptions& o, std::ostream& out, std::ostream& err) {
  if (o.duration_ms <= 0 || o.out.empty()) {
    err << "gpuwatch record: --duration and --out are required\n";
    return 2;
  }
  trace::TraceFileWriter writer;
  if (Status st = writer.Open(o.out); !st.ok()) {
    err << "gpuwatch record: " << st.message() << "\n";
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  const int64_t t0 = WallClockMs();
  const int64_t t_end = t0 + o.duration_ms;
  int64_t fetched_to = t0 - 1;  // everything up to here is written
  uint64_t records = 0;
  std::set<std::string> node_records;  // every window restates the node record in force
  Status last_error;
  while (true) {
    // Fetch up to `lag` ago (later records may still arrive for that span), or to the end once
    // the end plus the lag has passed.
    const int64_t now = WallClockMs();
    const bool final_fetch = g_stop || now >= t_end + o.lag_ms;
    const int64_t to = final_fetch ? std::min(now, t_end) : std::min(now - o.lag_ms, t_end);
    if (to > fetched_to) {
      auto body = AgentGet(o.agent_url, fmt::format("/api/v1/trace?start={}&end={}",
                                                    Secs(fetched_to + 1), Secs(to)));
      if (body.ok()) {
        last_error = Status::Ok();
        size_t pos = 0;
        while (pos < body->size()) {
          size_t nl = body->find('\n', pos);
          if (nl == std::string::npos) nl = body->size();
          std::string_view line(body->data() + pos, nl - pos);
          pos = nl + 1;
          if (line.empty()) continue;
          if (line.find(R"("type":"node")") != std::string_view::npos &&
              !node_records.insert(std::string(line)).second)
            continue;
          if (Status st = writer.Append(line); !st.ok()) {
            err << "gpuwatch record: " << st.message() << "\n";
            return 2;
          }
          ++records;
        }
        fetched_to = to;
        (void)writer.Flush();
      } else {
        last_error = body.status();
        err << "gpuwatch record: " << body.status().message() << " (retrying)\n";
      }
    }
    if (final_fetch) break;
    // Sleep in short steps so a signal ends the recording promptly.
    const int64_t wake = std::min(WallClockMs() + o.poll_ms, t_end + o.lag_ms);
    while (!g_stop && WallClockMs() < wake)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (Status st = writer.Close(); !st.ok()) {
    err << "gpuwatch record: " << st.message() << "\n";
    return 2;
  }
  out << fmt::format("recorded {} records from {} to {} into {}\n", records, Secs(t0),
                     Secs(fetched_to), o.out);
  if (!last_error.ok()) {
    err << "gpuwatch record: the last fetch failed: " << last_error.message() << "\n";
    return 1;
  }
  return 0;
}

void RegisterRecordCommand(CLI::App* app, Commands* out) {
  struct Flags {
    RecordOptions rec;
    std::string duration;
  };
  auto f = std::make_shared<Flags>();
  f->rec.agent_url = DefaultAgentUrl();
  auto* record = app->add_subcommand(
      "record", "Write the agent's records for the next DURATION in the trace format");
  record->add_option("--duration", f->duration, "How long to record (30s, 10m, 2h)")->required();
  record->add_option("--out", f->rec.out, "Trace file to write (.jsonl, .jsonl.gz or .jsonl.zst)")
      ->required();
  record->add_option("--agent", f->rec.agent_url, "The agent's URL");
  out->push_back({record, [f] {
                    auto ms = ParseDurationMs(f->duration);
                    if (!ms.ok()) return Fail(ms.status());
                    f->rec.duration_ms = *ms;
                    return RunRecord(f->rec, std::cout, std::cerr);
                  }});
}

}  // namespace gpuwatch::cli
