#include "cli/store_admin.h"

#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <optional>

#include "cli/agent_flags.h"
#include "common/time_base.h"
#include "store/event_store.h"

namespace gpuwatch::cli {
namespace {

std::string IsoTime(int64_t ms) { return ms == 0 ? "" : FormatUtc(ms); }

double PerSample(uint64_t bytes, uint64_t samples) {
  return samples == 0 ? 0.0 : static_cast<double>(bytes) / static_cast<double>(samples);
}

}  // namespace

nlohmann::json StoreStatsJson(const store::StoreStats& st) {
  nlohmann::json j;
  j["series"] = st.series;
  j["samples"] = st.samples;
  j["bytes_on_disk"] = st.bytes_on_disk;
  j["bytes_per_sample"] = PerSample(st.bytes_on_disk, st.samples);
  j["blocks"] = st.blocks;
  j["block_bytes"] = st.block_bytes;
  j["wal_bytes"] = st.wal_bytes;
  j["head"] = {{"series", st.head_series}, {"samples", st.head_samples}};
  nlohmann::json tiers = nlohmann::json::object();
  for (int t = 0; t < store::kNumTiers; ++t) {
    const auto& ts = st.tiers[t];
    const bool raw = t == 0;
    nlohmann::json tj;
    tj["blocks"] = ts.blocks;
    tj[raw ? "samples" : "points"] = ts.samples;
    // Rollup points hold five values each (min, max, sum, count, last).
    tj["chunk_bytes"] = ts.chunk_bytes;
    tj[raw ? "bytes_per_sample" : "bytes_per_point"] = PerSample(ts.chunk_bytes, ts.samples);
    tj["min_time"] = IsoTime(ts.min_t_ms);
    tj["max_time"] = IsoTime(ts.max_t_ms);
    tiers[std::string(store::TierName(static_cast<store::Tier>(t)))] = std::move(tj);
  }
  j["tiers"] = std::move(tiers);
  return j;
}

int RunStoreStats(const std::string& data_dir, bool json, std::ostream& out, std::ostream& err) {
  store::StoreOptions o;
  o.read_only = true;
  o.background = false;
  auto s = store::Store::Open(data_dir, o);
  if (!s.ok()) {
    err << "gpuwatch: " << s.status().message() << "\n";
    return 2;
  }
  const store::StoreStats st = (*s)->Stats();
  std::optional<store::EventStoreCheck> ev;
  if (std::filesystem::is_directory(data_dir + "/events"))
    if (auto c = store::EventStore::Check(data_dir + "/events"); c.ok()) ev = *c;
  if (json) {
    nlohmann::json j = StoreStatsJson(st);
    if (ev) j["events"] = {{"events", ev->events}, {"bytes_on_disk", ev->bytes}};
    out << j.dump(2) << "\n";
    return 0;
  }
  if (ev)
    out << fmt::format("{}/events: {} events, {} bytes on disk\n", data_dir, ev->events, ev->bytes);
  out << fmt::format("{}: {} series, {} samples, {} bytes on disk ({:.3f} bytes/sample)\n",
                     data_dir, st.series, st.samples, st.bytes_on_disk,
                     PerSample(st.bytes_on_disk, st.samples));
  out << fmt::format("  {} blocks ({} bytes), WAL {} bytes holding {} samples of {} series\n",
                     st.blocks, st.block_bytes, st.wal_bytes, st.head_samples, st.head_series);
  out << fmt::format("  {:<4} {:>14} {:>14} {:>10}  {} .. {}\n", "tier", "samples/points",
                     "chunk bytes", "B/point", "from", "to");
  for (int t = 0; t < store::kNumTiers; ++t) {
    const auto& ts = st.tiers[t];
    out << fmt::format("  {:<4} {:>14} {:>14} {:>10.3f}  {} .. {}\n",
                       store::TierName(static_cast<store::Tier>(t)), ts.samples, ts.chunk_bytes,
                       PerSample(ts.chunk_bytes, ts.samples), IsoTime(ts.min_t_ms),
                       IsoTime(ts.max_t_ms));
  }
  return 0;
}

int RunStoreCheck(const std::string& data_dir, bool quarantine, std::ostream& out,
                  std::ostream& err) {
  auto rep = store::Store::Check(data_dir, quarantine);
  if (!rep.ok() && quarantine && rep.status().code() == StatusCode::kUnavailable) {
    // A live agent holds the store: report, leave repairs for when it is stopped.
    err << "gpuwatch: " << rep.status().message()
        << "; checking without quarantining (stop the agent to repair)\n";
    rep = store::Store::Check(data_dir, false);
  }
  if (!rep.ok()) {
    err << "gpuwatch: " << rep.status().message() << "\n";
    return 2;
  }
  out << fmt::format("{}: {} blocks, {} chunks, {} WAL segments, {} WAL records checked\n",
                     data_dir, rep->blocks, rep->chunks, rep->wal_segments, rep->wal_records);
  for (const auto& d : rep->block_damage)
    out << fmt::format("DAMAGE {}: {}: {}\n", d.file, d.where, d.reason);
  for (const auto& d : rep->wal_damage)
    out << fmt::format("{} wal/{} at offset {}: {} ({} bytes){}\n", d.torn_tail ? "note" : "DAMAGE",
                       d.segment, d.offset, d.reason, d.bytes_lost,
                       d.torn_tail ? " — a torn tail (an unacknowledged write; the next open "
                                     "cuts it off), not damage"
                                   : "");
  for (const auto& q : rep->quarantined) out << "quarantined " << q << "\n";
  bool events_damaged = false;
  if (std::filesystem::is_directory(data_dir + "/events")) {
    auto ev = store::EventStore::Check(data_dir + "/events");
    if (!ev.ok()) {
      err << "gpuwatch: events: " << ev.status().message() << "\n";
      return 2;
    }
    out << fmt::format("events: {} events in {} segments, {} records undecodable\n", ev->events,
                       ev->wal.segments, ev->undecodable_records);
    for (const auto& d : ev->wal.damage) {
      out << fmt::format("{} events/{} at offset {}: {} ({} bytes){}\n",
                         d.torn_tail ? "note" : "DAMAGE", d.segment, d.offset, d.reason,
                         d.bytes_lost, d.torn_tail ? " — a torn tail, not damage" : "");
      events_damaged |= !d.torn_tail;
    }
    events_damaged |= ev->undecodable_records > 0;
  }
  if (!rep->damaged() && !events_damaged) {
    out << "ok\n";
    return 0;
  }
  return 1;
}

int RunStoreCompact(const std::string& data_dir, const store::StoreOptions& options,
                    std::ostream& out, std::ostream& err) {
  store::StoreOptions o = options;
  o.background = false;
  auto s = store::Store::Open(data_dir, o);
  if (!s.ok()) {
    err << "gpuwatch: " << s.status().message() << "\n";
    return 2;
  }
  const store::StoreStats before = (*s)->Stats();
  Status st = (*s)->Compact(/*closed_days_only=*/false);
  if (st.ok()) st = (*s)->EnforceRetention();
  if (st.ok()) st = (*s)->Close();
  if (!st.ok()) {
    err << "gpuwatch: compact: " << st.message() << "\n";
    return 2;
  }
  s->reset();
  o.read_only = true;
  auto after = store::Store::Open(data_dir, o);
  if (!after.ok()) {
    err << "gpuwatch: " << after.status().message() << "\n";
    return 2;
  }
  const store::StoreStats a = (*after)->Stats();
  out << fmt::format(
      "compacted {}: {} blocks + {} WAL bytes -> {} blocks + {} WAL bytes; {} -> {} "
      "bytes on disk\n",
      data_dir, before.blocks, before.wal_bytes, a.blocks, a.wal_bytes, before.bytes_on_disk,
      a.bytes_on_disk);
  return 0;
}

void RegisterStoreCommands(CLI::App* app, Commands* out) {
  struct Flags {
    std::string dir;
    bool json = false, no_quarantine = false;
    AgentFlags compact;
  };
  auto f = std::make_shared<Flags>();
  auto* store_cmd = app->add_subcommand("store", "Inspect and maintain the store under a data dir");
  store_cmd->require_subcommand(1);
  auto* stats = store_cmd->add_subcommand("stats", "Series, samples and bytes per sample per tier");
  stats->add_option("--data-dir", f->dir, "The agent's --data-dir")->required();
  stats->add_flag("--json", f->json, "Print JSON");
  auto* check = store_cmd->add_subcommand(
      "check",
      "Verify every chunk and WAL record; quarantine damage (exit 1 when damage was found)");
  check->add_option("--data-dir", f->dir, "The agent's --data-dir")->required();
  check->add_flag("--no-quarantine", f->no_quarantine,
                  "Only report: leave damaged files where they are");
  auto* compact = store_cmd->add_subcommand(
      "compact", "Flush the WAL, merge blocks per day and apply retention (agent stopped)");
  compact->add_option("--data-dir", f->dir, "The agent's --data-dir")->required();
  AddStoreFlags(compact, &f->compact);
  out->push_back({stats, [f] { return RunStoreStats(f->dir, f->json, std::cout, std::cerr); }});
  out->push_back(
      {check, [f] { return RunStoreCheck(f->dir, !f->no_quarantine, std::cout, std::cerr); }});
  out->push_back({compact, [f] {
                    auto o = MakeStoreOptions(f->compact);
                    if (!o.ok()) return Fail(o.status());
                    return RunStoreCompact(f->dir, *o, std::cout, std::cerr);
                  }});
}

}  // namespace gpuwatch::cli
