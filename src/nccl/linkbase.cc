#include "nccl/linkbase.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>

#include "common/file_io.h"
#include "common/strings.h"

namespace gpuwatch::nccl {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kMaxPlainDirName = 200;  // file names stop at 255 bytes
constexpr size_t kHashedPrefixBytes = 100;
constexpr int kMaxVersion = 1'000'000'000;
constexpr int kMaxSaveAttempts = 64;  // versions taken by concurrent imports before giving up

bool IsDirChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ',' || c == '-';
}

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// "v12.json" -> 12; 0 for any other name (temporary files, strays).
int VersionOfFileName(std::string_view name) {
  if (name.size() < 7 || name[0] != 'v' || name.substr(name.size() - 5) != ".json") return 0;
  const std::string_view digits = name.substr(1, name.size() - 6);
  if (digits.empty() || digits.size() > 9 || digits[0] == '0') return 0;
  auto v = ParseInt<int>(digits);
  return v && *v > 0 && *v <= kMaxVersion ? *v : 0;
}

// The v<N>.json files of a collective's directory: how many, and the largest N (0: none). A
// missing directory has none. Only the two numbers are kept, so a directory of any size costs
// no memory.
struct VersionSet {
  int count = 0;
  int latest = 0;
  bool empty() const { return count == 0; }
};

Result<VersionSet> Versions(const std::string& dir) {
  VersionSet out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return out;
    return ErrnoStatus("list " + dir, ec.value());
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return ErrnoStatus("list " + dir, ec.value());
    if (int v = VersionOfFileName(it->path().filename().string()); v > 0) {
      ++out.count;
      out.latest = std::max(out.latest, v);
    }
  }
  if (ec) return ErrnoStatus("list " + dir, ec.value());
  return out;
}

std::string VersionPath(const std::string& dir, int v) {
  return dir + "/v" + std::to_string(v) + ".json";
}

Result<Baseline> ReadBaselineFile(const std::string& path) {
  FileReadResult f = ReadSmallFile(path, kMaxBaselineFileBytes + 1);
  if (!f.ok) return ErrnoStatus("read " + path, f.err);
  if (f.data.size() > kMaxBaselineFileBytes)
    return Status::Corruption(path + ": larger than " +
                              std::to_string(kMaxBaselineFileBytes >> 20) + " MiB");
  auto b = BaselineFromJson(f.data);
  if (!b.ok()) return Status(b.status().code(), path + ": " + b.status().message());
  return b;
}

json OptNumber(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
json OptInt(const std::optional<int>& v) { return v ? json(*v) : json(nullptr); }
json OptString(const std::optional<std::string>& v) { return v ? json(*v) : json(nullptr); }

Status CheckKey(const std::string& key, const char* what) {
  if (key.empty()) return Status::InvalidArgument(std::string(what) + " is empty");
  if (key.size() > kMaxKeyBytes)
    return Status::InvalidArgument(std::string(what) + " is longer than " +
                                   std::to_string(kMaxKeyBytes) + " bytes");
  if (PrintableText(key) != key)
    return Status::InvalidArgument(std::string(what) +
                                   " holds control characters or invalid UTF-8");
  return Status::Ok();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::optional<double> Baseline::PeakBusbwGbps() const {
  std::optional<double> peak;
  for (const auto& p : points) {
    const auto& v = p.busbw_gbps ? p.busbw_gbps : p.in_place_busbw_gbps;
    if (v && (!peak || *v > *peak)) peak = v;
  }
  return peak;
}

std::string NodeSetKey(std::vector<std::string> hosts) {
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  std::string key;
  for (const auto& h : hosts) key += (key.empty() ? "" : ",") + h;
  return key;
}

Result<Baseline> BaselineFromReport(const PerfReport& report, const BaselineSource& src) {
  Baseline b;
  b.key = src.key.empty() ? NodeSetKey(report.hosts) : src.key;
  if (src.key.empty() && b.key.empty())
    return Status::InvalidArgument(
        "the capture names no hosts (no '# Using devices' rank lines): give the node set a name "
        "with --name");
  GW_RETURN_IF_ERROR(CheckKey(b.key, src.key.empty() ? "the node-set key" : "--name"));
  b.collective = src.collective.empty() ? report.collective : src.collective;
  if (b.collective.empty())
    return Status::InvalidArgument(
        "the capture does not say which collective it measured (no command line, no '# "
        "Collective test starting:' line, and its rows are not a reduction): pass "
        "--collective, e.g. all_gather_perf");
  GW_RETURN_IF_ERROR(CheckKey(b.collective, "the collective"));
  if (report.rows.empty())
    return Status::InvalidArgument("the capture has no data rows (the table was cut?)");
  b.gpu_model = report.gpu_model;
  b.ranks = report.ranks;
  b.nodes = report.nodes;
  b.hosts = report.hosts;
  b.imported_at_ms = src.imported_at_ms;
  b.source_file = PrintableText(src.source_file.substr(0, 255));
  b.nccl_tests_version = report.nccl_tests_version;
  b.nccl_version = report.nccl_version;
  b.avg_busbw_gbps = report.avg_busbw_gbps;
  for (const auto& row : report.rows) {
    BaselinePoint p;
    p.size_bytes = row.size_bytes;
    if (row.out_of_place) p.busbw_gbps = row.out_of_place->busbw_gbps;
    if (row.in_place) p.in_place_busbw_gbps = row.in_place->busbw_gbps;
    b.points.push_back(p);
  }
  std::sort(b.points.begin(), b.points.end(), [](const BaselinePoint& x, const BaselinePoint& y) {
    return x.size_bytes < y.size_bytes;
  });
  return b;
}

json BaselineToJson(const Baseline& b) {
  json points = json::array();
  for (const auto& p : b.points)
    points.push_back({{"size_bytes", p.size_bytes},
                      {"busbw_gbps", OptNumber(p.busbw_gbps)},
                      {"in_place_busbw_gbps", OptNumber(p.in_place_busbw_gbps)}});
  return {{"format", "gpuwatch-linkbase"},
          {"format_version", kLinkbaseFormatVersion},
          {"version", b.version},
          {"key", b.key},
          {"collective", b.collective},
          {"gpu_model", b.gpu_model},
          {"ranks", OptInt(b.ranks)},
          {"nodes", OptInt(b.nodes)},
          {"hosts", b.hosts},
          {"imported_at_ms", b.imported_at_ms},
          {"source_file", b.source_file},
          {"nccl_tests_version", OptString(b.nccl_tests_version)},
          {"nccl_version", OptString(b.nccl_version)},
          {"avg_busbw_gbps", OptNumber(b.avg_busbw_gbps)},
          {"points", std::move(points)}};
}

namespace {

Result<Baseline> ParseBaselineJson(std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption("not a JSON object");
  if (j.value("format", json()) != "gpuwatch-linkbase")
    return Status::Corruption("not a link baseline (\"format\" is not \"gpuwatch-linkbase\")");
  const json& fv = j.value("format_version", json());
  if (!fv.is_number_integer()) return Status::Corruption("no integer format_version");
  if (fv.get<int64_t>() > kLinkbaseFormatVersion)
    return Status::NotSupported("format_version " + fv.dump() + " was written by a newer gpuwatch");
  if (fv.get<int64_t>() < 1) return Status::Corruption("format_version " + fv.dump());
  // Field by field: a wrong type is a damaged file, never an exception.
  Baseline b;
  std::string bad;
  auto str = [&](const char* k, std::string* out, bool required) {
    const auto it = j.find(k);
    if (it == j.end() || it->is_null()) {
      if (required) bad = k;
      return;
    }
    if (!it->is_string())
      bad = k;
    else
      *out = it->get<std::string>();
  };
  auto opt_str = [&](const char* k, std::optional<std::string>* out) {
    const auto it = j.find(k);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_string())
      bad = k;
    else
      *out = it->get<std::string>();
  };
  auto opt_int = [&](const char* k, std::optional<int>* out) {
    const auto it = j.find(k);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 100'000'000)
      bad = k;
    else
      *out = static_cast<int>(it->get<int64_t>());
  };
  auto opt_num = [&](const json& o, const char* k, std::optional<double>* out) {
    const auto it = o.find(k);
    if (it == o.end() || it->is_null()) return;
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0)
      bad = k;
    else
      *out = it->get<double>();
  };
  str("key", &b.key, true);
  str("collective", &b.collective, true);
  str("gpu_model", &b.gpu_model, false);
  str("source_file", &b.source_file, false);
  opt_int("ranks", &b.ranks);
  opt_int("nodes", &b.nodes);
  opt_str("nccl_tests_version", &b.nccl_tests_version);
  opt_str("nccl_version", &b.nccl_version);
  opt_num(j, "avg_busbw_gbps", &b.avg_busbw_gbps);
  if (auto it = j.find("version"); it != j.end() && it->is_number_integer() &&
                                   it->get<int64_t>() >= 0 && it->get<int64_t>() <= kMaxVersion)
    b.version = static_cast<int>(it->get<int64_t>());
  else
    bad = "version";
  if (auto it = j.find("imported_at_ms"); it != j.end() && it->is_number_integer())
    b.imported_at_ms = it->get<int64_t>();
  else
    bad = "imported_at_ms";
  if (auto it = j.find("hosts"); it != j.end() && !it->is_null()) {
    if (!it->is_array())
      bad = "hosts";
    else
      for (const auto& h : *it) {
        if (!h.is_string()) {
          bad = "hosts";
          break;
        }
        b.hosts.push_back(h.get<std::string>());
      }
  }
  const auto pts = j.find("points");
  if (pts == j.end() || !pts->is_array()) {
    bad = "points";
  } else {
    for (const auto& p : *pts) {
      if (!p.is_object() || !p.contains("size_bytes") || !p["size_bytes"].is_number_unsigned()) {
        bad = "points";
        break;
      }
      BaselinePoint bp;
      bp.size_bytes = p["size_bytes"].get<uint64_t>();
      opt_num(p, "busbw_gbps", &bp.busbw_gbps);
      opt_num(p, "in_place_busbw_gbps", &bp.in_place_busbw_gbps);
      if (!b.points.empty() && bp.size_bytes <= b.points.back().size_bytes) {
        bad = "points (sizes not ascending)";
        break;
      }
      b.points.push_back(bp);
    }
  }
  if (!bad.empty()) return Status::Corruption("field \"" + bad + "\" is missing or malformed");
  if (b.key.empty() || b.collective.empty()) return Status::Corruption("empty key or collective");
  return b;
}

}  // namespace

Result<Baseline> BaselineFromJson(std::string_view text) {
  try {
    return ParseBaselineJson(text);
  } catch (const json::exception& e) {  // every access is type-checked; this is a backstop
    return Status::Corruption(std::string("JSON: ") + e.what());
  }
}

std::string StoreDirName(std::string_view key) {
  const bool plain = !key.empty() && key.size() <= kMaxPlainDirName && key[0] != '.' &&
                     std::all_of(key.begin(), key.end(), IsDirChar);
  if (plain) return std::string(key);
  std::string out;
  for (char c : key.substr(0, kHashedPrefixBytes)) out += IsDirChar(c) ? c : '_';
  if (!out.empty() && out[0] == '.') out[0] = '_';
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(Fnv1a64(key)));
  return out + "~" + hex;
}

Result<std::string> LinkBaselineStore::Save(Baseline* b) const {
  GW_RETURN_IF_ERROR(CheckKey(b->key, "the key"));
  GW_RETURN_IF_ERROR(CheckKey(b->collective, "the collective"));
  const std::string key_dir = dir_ + "/" + StoreDirName(b->key);
  const std::string dir = key_dir + "/" + StoreDirName(b->collective);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return ErrnoStatus("create directory " + dir, ec.value());
  // The new directory entries must survive a crash as well as the file in them.
  GW_RETURN_IF_ERROR(SyncDir(dir_));
  GW_RETURN_IF_ERROR(SyncDir(key_dir));
  auto versions = Versions(dir);
  if (!versions.ok()) return versions.status();
  if (!versions->empty()) {
    // A file there of another key means a hand-copied file (distinct keys never share a
    // directory name): refuse rather than mix two node sets' histories. A damaged latest file
    // does not stop a new version.
    const std::string prev_path = VersionPath(dir, versions->latest);
    auto prev = ReadBaselineFile(prev_path);
    if (prev.ok() && (prev->key != b->key || prev->collective != b->collective))
      return Status::InvalidArgument(prev_path + " holds key " + prev->key + " / " +
                                     prev->collective + ", not " + b->key + " / " + b->collective);
  }
  int next = versions->empty() ? 1 : versions->latest + 1;
  // Written complete under a name of its own, then hard-linked to v<N>.json: link() fails
  // with EEXIST instead of replacing, so a concurrent import that took N is never overwritten.
  const std::string incoming =
      dir + "/.incoming-" + std::to_string(::getpid()) + "-" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ".json";
  for (int attempt = 0; attempt < kMaxSaveAttempts; ++attempt, ++next) {
    if (next > kMaxVersion) {
      ::unlink(incoming.c_str());
      return Status::ResourceExhausted(dir + ": version numbers exhausted");
    }
    b->version = next;
    const std::string text =
        BaselineToJson(*b).dump(2, ' ', false, json::error_handler_t::replace) + "\n";
    if (Status st = WriteFileAtomically(incoming, text); !st.ok()) {
      ::unlink(incoming.c_str());  // an earlier attempt's copy
      return st;
    }
    const std::string path = VersionPath(dir, next);
    if (::link(incoming.c_str(), path.c_str()) == 0) {
      ::unlink(incoming.c_str());
      GW_RETURN_IF_ERROR(SyncDir(dir));
      return path;
    }
    const int err = errno;
    if (err == EEXIST) continue;
    if (err == EPERM || err == EOPNOTSUPP || err == ENOSYS) {
      // A file system without hard links: rename (which would replace a racing writer's
      // version; one writer at a time is the normal case).
      if (::rename(incoming.c_str(), path.c_str()) != 0) {
        const int rerr = errno;
        ::unlink(incoming.c_str());
        return ErrnoStatus("rename " + incoming + " to " + path, rerr);
      }
      GW_RETURN_IF_ERROR(SyncDir(dir));
      return path;
    }
    ::unlink(incoming.c_str());
    return ErrnoStatus("link " + incoming + " to " + path, err);
  }
  ::unlink(incoming.c_str());
  return Status::Unavailable(dir + ": " + std::to_string(kMaxSaveAttempts) +
                             " versions were taken by concurrent imports; try again");
}

Result<Baseline> LinkBaselineStore::LoadLatest(const std::string& key,
                                               const std::string& collective) const {
  const std::string dir = dir_ + "/" + StoreDirName(key) + "/" + StoreDirName(collective);
  auto versions = Versions(dir);
  if (!versions.ok()) return versions.status();
  if (versions->empty())
    return Status::NotFound("no baseline for " + key + " / " + collective + " under " + dir_);
  const std::string path = VersionPath(dir, versions->latest);
  auto b = ReadBaselineFile(path);
  if (!b.ok()) return b.status();
  if (b->key != key || b->collective != collective)
    return Status::Corruption(path + " holds key " + b->key + " / " + b->collective + ", not " +
                              key + " / " + collective);
  return b;
}

Result<std::vector<std::string>> LinkBaselineStore::Collectives(const std::string& key) const {
  std::vector<std::string> out;
  const std::string key_dir = dir_ + "/" + StoreDirName(key);
  std::error_code ec;
  fs::directory_iterator it(key_dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return out;
    return ErrnoStatus("list " + key_dir, ec.value());
  }
  for (; it != fs::directory_iterator() && out.size() < kMaxListedBaselines; it.increment(ec)) {
    if (ec) break;
    auto versions = Versions(it->path().string());
    if (!versions.ok() || versions->empty()) continue;
    auto b = ReadBaselineFile(VersionPath(it->path().string(), versions->latest));
    if (b.ok() && b->key == key) out.push_back(b->collective);
  }
  if (ec) return ErrnoStatus("list " + key_dir, ec.value());
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::vector<LinkBaselineStore::Entry>> LinkBaselineStore::List(
    std::vector<std::string>* problems) const {
  std::vector<Entry> out;
  std::error_code ec;
  fs::directory_iterator keys(dir_, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return out;
    return ErrnoStatus("list " + dir_, ec.value());
  }
  for (; keys != fs::directory_iterator(); keys.increment(ec)) {
    if (ec) return ErrnoStatus("list " + dir_, ec.value());
    if (!keys->is_directory(ec)) continue;
    std::error_code ec2;
    fs::directory_iterator colls(keys->path(), ec2);
    for (; !ec2 && colls != fs::directory_iterator(); colls.increment(ec2)) {
      if (out.size() >= kMaxListedBaselines) {
        problems->push_back("more than " + std::to_string(kMaxListedBaselines) +
                            " baselines: the rest are not listed");
        break;
      }
      const std::string dir = colls->path().string();
      auto versions = Versions(dir);
      if (!versions.ok()) {
        problems->push_back(versions.status().message());
        continue;
      }
      if (versions->empty()) continue;
      Entry e;
      e.path = VersionPath(dir, versions->latest);
      e.versions = versions->count;
      auto b = ReadBaselineFile(e.path);
      if (!b.ok()) {
        problems->push_back(b.status().message());
        continue;
      }
      e.latest = std::move(b).value();
      out.push_back(std::move(e));
    }
    if (ec2)
      problems->push_back(ErrnoStatus("list " + keys->path().string(), ec2.value()).message());
    if (out.size() >= kMaxListedBaselines) break;
  }
  if (ec) return ErrnoStatus("list " + dir_, ec.value());
  std::sort(out.begin(), out.end(), [](const Entry& x, const Entry& y) {
    return std::tie(x.latest.key, x.latest.collective) <
           std::tie(y.latest.key, y.latest.collective);
  });
  return out;
}

std::string_view VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kDegraded:
      return "degraded";
    case Verdict::kInsufficient:
      return "insufficient";
  }
  return "insufficient";
}

Comparison CompareToBaseline(const Baseline& base, const Baseline& run) {
  Comparison c;
  std::map<uint64_t, const BaselinePoint*> base_by_size;
  for (const auto& p : base.points) base_by_size[p.size_bytes] = &p;
  std::vector<double> judged;
  for (const auto& rp : run.points) {
    auto it = base_by_size.find(rp.size_bytes);
    if (it == base_by_size.end()) continue;
    const BaselinePoint& bp = *it->second;
    SizeRatio s;
    s.size_bytes = rp.size_bytes;
    if (bp.busbw_gbps && rp.busbw_gbps) {
      s.base_busbw_gbps = *bp.busbw_gbps;
      s.run_busbw_gbps = *rp.busbw_gbps;
    } else if (bp.in_place_busbw_gbps && rp.in_place_busbw_gbps) {
      s.base_busbw_gbps = *bp.in_place_busbw_gbps;
      s.run_busbw_gbps = *rp.in_place_busbw_gbps;
      s.in_place = true;
    } else {
      continue;
    }
    // nccl-tests prints 0.00 for tiny sizes: no ratio to take.
    if (!(s.base_busbw_gbps > 0)) continue;
    s.ratio = s.run_busbw_gbps / s.base_busbw_gbps;
    c.sizes.push_back(s);
    if (s.size_bytes >= kBandwidthBoundMinBytes) {
      judged.push_back(s.ratio);
      if (!c.worst || s.ratio < c.worst->ratio) c.worst = s;
    }
  }
  c.sizes_judged = judged.size();
  if (!judged.empty()) {
    c.median_ratio = Median(judged);
    c.verdict = *c.median_ratio < kDegradedMedianRatio ? Verdict::kDegraded : Verdict::kOk;
  }
  if (base.collective != run.collective)
    c.notes.push_back("the baseline measured " + base.collective + ", this run " + run.collective);
  if (!base.gpu_model.empty() && !run.gpu_model.empty() && base.gpu_model != run.gpu_model)
    c.notes.push_back("the baseline ran on " + base.gpu_model + ", this run on " + run.gpu_model);
  if (base.ranks && run.ranks && *base.ranks != *run.ranks)
    c.notes.push_back("the baseline had " + std::to_string(*base.ranks) + " ranks, this run " +
                      std::to_string(*run.ranks) +
                      ": bus bandwidth is normalised for rank count, but not exactly");
  if (base.nodes && run.nodes && *base.nodes != *run.nodes)
    c.notes.push_back("the baseline spanned " + std::to_string(*base.nodes) + " nodes, this run " +
                      std::to_string(*run.nodes));
  if (!run.ranks && base.ranks)
    c.notes.push_back(
        "this run lists no ranks (no '# Using devices' lines): its rank count is "
        "not checked");
  if (c.sizes_judged == 0)
    c.notes.push_back("no common size of at least " +
                      std::to_string(kBandwidthBoundMinBytes >> 20) +
                      " MiB with a bus bandwidth: nothing to judge");
  return c;
}

json ComparisonJson(const Comparison& c) {
  auto size_json = [](const SizeRatio& s) {
    return json{{"size_bytes", s.size_bytes},
                {"baseline_busbw_gbps", s.base_busbw_gbps},
                {"run_busbw_gbps", s.run_busbw_gbps},
                {"ratio", s.ratio},
                {"in_place", s.in_place}};
  };
  json sizes = json::array();
  for (const auto& s : c.sizes) sizes.push_back(size_json(s));
  return {{"verdict", VerdictName(c.verdict)},
          {"median_ratio", OptNumber(c.median_ratio)},
          {"threshold_ratio", kDegradedMedianRatio},
          {"min_size_bytes", kBandwidthBoundMinBytes},
          {"sizes_judged", c.sizes_judged},
          {"worst", c.worst ? size_json(*c.worst) : json(nullptr)},
          {"sizes", std::move(sizes)},
          {"notes", c.notes}};
}

}  // namespace gpuwatch::nccl
