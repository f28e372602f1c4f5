#include "cli/linkbase_cmd.h"

#include <fmt/format.h>

#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>

#include "common/strings.h"
#include "common/time_base.h"
#include "nccl/linkbase.h"
#include "nccl/nccl_tests.h"

namespace gpuwatch::cli {
namespace {

using json = nlohmann::json;

// nccl-tests output is a few KiB; anything beyond this is not one.
constexpr size_t kMaxInputBytes = size_t{64} << 20;

std::string Dump(const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace); }

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "8 B", "512 KiB", "8 GiB"; sizes that are no whole unit in bytes.
std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + " " + kUnits[u];
}

std::string FormatTime(int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  if (!gmtime_r(&t, &tm)) return std::to_string(ms);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Num(const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : "-"; }

std::string Int(const std::optional<int>& v) { return v ? std::to_string(*v) : "?"; }

// Reads and parses FILE. Parse warnings go to `err` as "gpuwatch: FILE: line N: …".
bool LoadRun(const std::string& file, nccl::PerfReport* report, std::ostream& err) {
  FileReadResult f = ReadSmallFile(file, kMaxInputBytes + 1);
  if (!f.ok) {
    err << "gpuwatch: cannot read " << file << ": " << std::strerror(f.err) << "\n";
    return false;
  }
  if (f.data.size() > kMaxInputBytes) {
    err << "gpuwatch: " << file << " is larger than " << (kMaxInputBytes >> 20)
        << " MiB: not an nccl-tests output\n";
    return false;
  }
  auto r = nccl::ParseNcclTestsOutput(f.data);
  if (!r.ok()) {
    err << "gpuwatch: " << file << ": " << r.status().message() << "\n";
    return false;
  }
  for (const auto& w : r->warnings) err << "gpuwatch: " << file << ": " << w << "\n";
  *report = std::move(r).value();
  return true;
}

json ProvenanceJson(const nccl::Baseline& b) {
  return {{"version", b.version},
          {"imported_at_ms", b.imported_at_ms},
          {"source_file", b.source_file},
          {"gpu_model", b.gpu_model},
          {"ranks", b.ranks ? json(*b.ranks) : json(nullptr)},
          {"nodes", b.nodes ? json(*b.nodes) : json(nullptr)}};
}

void PrintPoints(const nccl::Baseline& b, std::ostream& out) {
  out << fmt::format("  {:>9}  {:>11}  {:>13}\n", "size", "busbw GB/s", "in-place GB/s");
  for (const auto& p : b.points)
    out << fmt::format("  {:>9}  {:>11}  {:>13}\n", FormatSize(p.size_bytes), Num(p.busbw_gbps),
                       Num(p.in_place_busbw_gbps));
}

std::string Summary(const nccl::Comparison& c) {
  if (c.verdict == nccl::Verdict::kInsufficient)
    return fmt::format("insufficient: no common size of {} or more to judge",
                       FormatSize(nccl::kBandwidthBoundMinBytes));
  std::string s =
      fmt::format("{}: median ratio {:.3f} over {} sizes >= {} (degraded below {:.2f})",
                  nccl::VerdictName(c.verdict), *c.median_ratio, c.sizes_judged,
                  FormatSize(nccl::kBandwidthBoundMinBytes), nccl::kDegradedMedianRatio);
  if (c.worst)
    s += fmt::format("; worst {} at {:.3f} ({:.2f} vs {:.2f} GB/s{})",
                     FormatSize(c.worst->size_bytes), c.worst->ratio, c.worst->run_busbw_gbps,
                     c.worst->base_busbw_gbps, c.worst->in_place ? ", in-place" : "");
  return s;
}

void PrintComparison(const nccl::Comparison& c, std::ostream& out) {
  out << fmt::format("  {:>9}  {:>14}  {:>9}  {:>6}\n", "size", "baseline GB/s", "run GB/s",
                     "ratio");
  for (const auto& s : c.sizes)
    out << fmt::format(
        "  {:>9}  {:>14.2f}  {:>9.2f}  {:>6.3f}{}{}\n", FormatSize(s.size_bytes), s.base_busbw_gbps,
        s.run_busbw_gbps, s.ratio,
        s.size_bytes < nccl::kBandwidthBoundMinBytes ? "  latency-bound, not judged" : "",
        s.in_place ? "  (in-place)" : "");
  for (const auto& n : c.notes) out << "note: " << n << "\n";
}

}  // namespace

std::string LinkbaseDir(const LinkbaseOptions& o) {
  if (!o.dir.empty()) return o.dir;
  if (!o.data_dir.empty()) return o.data_dir + "/linkbase";
  return kDefaultLinkbaseDir;
}

int RunLinkbaseImport(const LinkbaseOptions& o, std::ostream& out, std::ostream& err) {
  nccl::PerfReport report;
  if (!LoadRun(o.file, &report, err)) return 2;
  // A run whose results were wrong measured a broken path, not the link: it is no baseline.
  size_t wrong_rows = 0;
  for (const auto& row : report.rows)
    if ((row.out_of_place && row.out_of_place->wrong.value_or(0) > 0) ||
        (row.in_place && row.in_place->wrong.value_or(0) > 0))
      ++wrong_rows;
  if (wrong_rows > 0 || report.out_of_bounds.value_or(0) > 0) {
    err << "gpuwatch: " << o.file << ": the run reports wrong results (" << wrong_rows
        << " rows with #wrong > 0, out of bounds " << report.out_of_bounds.value_or(0)
        << "): not stored as a baseline\n";
    return 2;
  }
  nccl::BaselineSource src;
  src.key = o.name;
  src.collective = o.collective;
  src.source_file = BaseName(o.file);
  src.imported_at_ms = WallClockMs();
  auto b = nccl::BaselineFromReport(report, src);
  if (!b.ok()) {
    err << "gpuwatch: " << o.file << ": " << b.status().message() << "\n";
    return 2;
  }
  const nccl::LinkBaselineStore store(LinkbaseDir(o));
  std::optional<nccl::Baseline> previous;
  auto prev = store.LoadLatest(b->key, b->collective);
  if (prev.ok())
    previous = std::move(prev).value();
  else if (prev.status().code() != StatusCode::kNotFound)
    err << "gpuwatch: the previous version is not readable (" << prev.status().message()
        << "); storing a new one anyway\n";
  auto path = store.Save(&*b);
  if (!path.ok()) {
    err << "gpuwatch: cannot store the baseline: " << path.status().message() << "\n";
    return 2;
  }
  std::optional<nccl::Comparison> cmp;
  if (previous) cmp = nccl::CompareToBaseline(*previous, *b);
  if (o.json) {
    out << Dump({{"stored", nccl::BaselineToJson(*b)},
                 {"path", *path},
                 {"previous", previous ? ProvenanceJson(*previous) : json(nullptr)},
                 {"comparison", cmp ? nccl::ComparisonJson(*cmp) : json(nullptr)},
                 {"warnings", report.warnings}})
        << "\n";
    return 0;
  }
  out << fmt::format("stored {} / {} version {} in {}\n", b->key, b->collective, b->version, *path);
  out << fmt::format("  {} ranks on {} nodes, GPU {}, from {}", Int(b->ranks), Int(b->nodes),
                     b->gpu_model.empty() ? "?" : b->gpu_model, b->source_file);
  if (b->avg_busbw_gbps) out << fmt::format(", avg bus bandwidth {:.3f} GB/s", *b->avg_busbw_gbps);
  out << "\n";
  PrintPoints(*b, out);
  if (previous && cmp) {
    out << fmt::format("compared with version {} (imported {}, from {}): {}\n", previous->version,
                       FormatTime(previous->imported_at_ms), previous->source_file, Summary(*cmp));
    for (const auto& n : cmp->notes) out << "note: " << n << "\n";
  }
  return 0;
}

int RunLinkbaseShow(const LinkbaseOptions& o, std::ostream& out, std::ostream& err) {
  const std::string dir = LinkbaseDir(o);
  const nccl::LinkBaselineStore store(dir);
  std::vector<std::string> problems;
  auto list = store.List(&problems);
  if (!list.ok()) {
    err << "gpuwatch: " << list.status().message() << "\n";
    return 2;
  }
  for (const auto& p : problems) err << "gpuwatch: " << p << "\n";
  if (o.json) {
    json arr = json::array();
    for (const auto& e : *list) {
      const auto peak = e.latest.PeakBusbwGbps();
      arr.push_back({{"key", e.latest.key},
                     {"collective", e.latest.collective},
                     {"versions", e.versions},
                     {"latest_version", e.latest.version},
                     {"imported_at_ms", e.latest.imported_at_ms},
                     {"source_file", e.latest.source_file},
                     {"gpu_model", e.latest.gpu_model},
                     {"ranks", e.latest.ranks ? json(*e.latest.ranks) : json(nullptr)},
                     {"nodes", e.latest.nodes ? json(*e.latest.nodes) : json(nullptr)},
                     {"peak_busbw_gbps", peak ? json(*peak) : json(nullptr)},
                     {"path", e.path}});
    }
    out << Dump({{"dir", dir}, {"baselines", std::move(arr)}, {"problems", problems}}) << "\n";
    return 0;
  }
  if (list->empty()) {
    out << "no link baselines under " << dir << "\n";
    return 0;
  }
  out << fmt::format("{:<32}  {:<20}  {:>8}  {:>6}  {:<20}  {:<24}  {:>5}  {:>5}  {:>10}\n", "KEY",
                     "COLLECTIVE", "VERSIONS", "LATEST", "IMPORTED", "GPU", "RANKS", "NODES",
                     "PEAK GB/s");
  for (const auto& e : *list) {
    const nccl::Baseline& b = e.latest;
    out << fmt::format("{:<32}  {:<20}  {:>8}  {:>6}  {:<20}  {:<24}  {:>5}  {:>5}  {:>10}\n",
                       b.key, b.collective, e.versions, "v" + std::to_string(b.version),
                       FormatTime(b.imported_at_ms), b.gpu_model.empty() ? "?" : b.gpu_model,
                       Int(b.ranks), Int(b.nodes), Num(b.PeakBusbwGbps()));
  }
  return 0;
}

int RunLinkbaseCompare(const LinkbaseOptions& o, std::ostream& out, std::ostream& err) {
  nccl::PerfReport report;
  if (!LoadRun(o.file, &report, err)) return 2;
  const std::string dir = LinkbaseDir(o);
  const nccl::LinkBaselineStore store(dir);
  nccl::BaselineSource src;
  src.key = o.name;
  src.collective = o.collective;
  src.source_file = BaseName(o.file);
  src.imported_at_ms = WallClockMs();
  std::string chosen_note;
  if (src.collective.empty() && report.collective.empty()) {
    // The capture does not say; a key with baselines of one collective only answers for it.
    const std::string key = o.name.empty() ? nccl::NodeSetKey(report.hosts) : o.name;
    auto colls = key.empty() ? Result<std::vector<std::string>>(std::vector<std::string>{})
                             : store.Collectives(key);
    if (!colls.ok()) {
      err << "gpuwatch: " << colls.status().message() << "\n";
      return 2;
    }
    if (colls->size() == 1) {
      src.collective = (*colls)[0];
      chosen_note =
          "the capture does not name its collective; compared with the only one "
          "stored for this key, " +
          src.collective;
    } else if (colls->size() > 1) {
      std::string names;
      for (const auto& c : *colls) names += (names.empty() ? "" : ", ") + c;
      err << "gpuwatch: " << o.file << ": the capture does not name its collective and " << key
          << " has baselines of " << names << ": pass --collective\n";
      return 2;
    }
  }
  auto run = nccl::BaselineFromReport(report, src);
  if (!run.ok()) {
    err << "gpuwatch: " << o.file << ": " << run.status().message() << "\n";
    return 2;
  }
  auto base = store.LoadLatest(run->key, run->collective);
  if (!base.ok()) {
    err << "gpuwatch: " << base.status().message()
        << (base.status().code() == StatusCode::kNotFound
                ? " (import one with: gpuwatch linkbase import FILE)"
                : "")
        << "\n";
    return 2;
  }
  nccl::Comparison c = nccl::CompareToBaseline(*base, *run);
  if (!chosen_note.empty()) c.notes.insert(c.notes.begin(), chosen_note);
  const int code = c.verdict == nccl::Verdict::kOk         ? 0
                   : c.verdict == nccl::Verdict::kDegraded ? kExitDegraded
                                                           : kExitInsufficient;
  if (o.json) {
    json baseline = ProvenanceJson(*base);
    json runj = ProvenanceJson(*run);
    runj.erase("version");
    runj.erase("imported_at_ms");
    out << Dump({{"key", run->key},
                 {"collective", run->collective},
                 {"baseline", std::move(baseline)},
                 {"run", std::move(runj)},
                 {"comparison", nccl::ComparisonJson(c)},
                 {"warnings", report.warnings}})
        << "\n";
    return code;
  }
  out << fmt::format("{} / {}: {} against version {} (imported {}, from {})\n", run->key,
                     run->collective, run->source_file, base->version,
                     FormatTime(base->imported_at_ms), base->source_file);
  PrintComparison(c, out);
  out << "verdict " << Summary(c) << "\n";
  return code;
}

void RegisterLinkbaseCommands(CLI::App* app, Commands* out) {
  auto lb = std::make_shared<LinkbaseOptions>();
  auto* linkbase = app->add_subcommand(
      "linkbase",
      "Link baselines (R12): nccl-tests bus bandwidth per size, kept per node set; later runs "
      "are judged against it");
  linkbase->require_subcommand(1);
  auto add_linkbase_flags = [lb](CLI::App* c) {
    c->add_option("--dir", lb->dir,
                  "Where baselines are kept (default <--data-dir>/linkbase, else "
                  "/var/lib/gpuwatch/linkbase)");
    c->add_option("--data-dir", lb->data_dir, "The agent's --data-dir: baselines in its linkbase/");
    c->add_flag("--json", lb->json, "Print JSON");
  };
  auto add_run_flags = [lb](CLI::App* c) {
    c->add_option("file", lb->file, "all_reduce_perf, all_gather_perf, … output")->required();
    c->add_option("--name", lb->name,
                  "Key of the baseline (default: the capture's host names, sorted, joined by ',')");
    c->add_option("--collective", lb->collective,
                  "The collective, when the capture does not say (e.g. all_gather_perf)");
  };
  auto* import = linkbase->add_subcommand(
      "import",
      "Store a run as the next baseline version of its node set; compare it with the "
      "previous version");
  add_run_flags(import);
  add_linkbase_flags(import);
  auto* show =
      linkbase->add_subcommand("show", "List baselines: key, collective, versions, peak busbw");
  add_linkbase_flags(show);
  auto* compare = linkbase->add_subcommand(
      "compare",
      "Judge a run against the latest baseline without storing it (exit 0 ok, 3 degraded, 4 "
      "insufficient, 2 error)");
  add_run_flags(compare);
  add_linkbase_flags(compare);
  out->push_back({import, [lb] { return RunLinkbaseImport(*lb, std::cout, std::cerr); }});
  out->push_back({show, [lb] { return RunLinkbaseShow(*lb, std::cout, std::cerr); }});
  out->push_back({compare, [lb] { return RunLinkbaseCompare(*lb, std::cout, std::cerr); }});
}

}  // namespace gpuwatch::cli
