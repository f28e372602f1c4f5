// Link baselines (R12): the bus bandwidth per message size that an nccl-tests run measured on a
// node or a set of nodes, kept so that later runs on the same nodes can be judged against it —
// a link that lost NVLink lanes, a NIC that fell back to a slower path or a PCIe switch that
// trained down shows up as a run far below the node's own earlier numbers.
//
// A baseline is keyed by its node set (the sorted, unique host names of the run's rank lines
// joined by ",", or a name the operator gives) and the collective; every import is a new
// version, never an overwrite:
//   <dir>/<key dir>/<collective>/v<N>.json        (format: docs/format/linkbase.md)
// written to a temporary file, fsynced and linked into place, so a crash leaves no partial
// file and two concurrent imports never take the same N.
//
// Thread-safety: LinkBaselineStore holds only its directory name; concurrent calls are safe as
// far as the file system is (Save picks distinct versions). Everything else is pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "nccl/nccl_tests.h"

namespace gpuwatch::nccl {

inline constexpr int kLinkbaseFormatVersion = 1;  // of the JSON file; bumped on a breaking change
// Sizes below this are latency-bound: their bus bandwidth says how fast a kernel launches and
// a message crosses, not how wide the link is, and it varies run to run by far more than the
// large sizes do. Only sizes from here up are judged.
inline constexpr uint64_t kBandwidthBoundMinBytes = uint64_t{1} << 20;
// nccl-tests' run-to-run noise on a quiet node is a few percent at bandwidth-bound sizes; a
// median 20 % below the baseline is no noise but a slower path (fewer NVLink lanes, PCIe
// instead of NVLink, a degraded or busy NIC).
inline constexpr double kDegradedMedianRatio = 0.8;
inline constexpr size_t kMaxBaselineFileBytes = size_t{16} << 20;
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxListedBaselines = 10000;  // `show` reads at most this many

struct BaselinePoint {
  uint64_t size_bytes = 0;
  std::optional<double> busbw_gbps;           // out-of-place
  std::optional<double> in_place_busbw_gbps;  // absent when the run printed none
};

struct Baseline {
  std::string key;         // "host-a,host-b" or the --name given
  std::string collective;  // "all_reduce_perf"
  std::string gpu_model;   // "" unknown
  std::optional<int> ranks;
  std::optional<int> nodes;
  std::vector<std::string> hosts;  // sorted; empty when the capture listed no rank lines
  int64_t imported_at_ms = 0;      // Unix ms
  std::string source_file;         // the base name of the imported file
  std::optional<std::string> nccl_tests_version;
  std::optional<std::string> nccl_version;
  std::optional<double> avg_busbw_gbps;
  std::vector<BaselinePoint> points;  // ascending, unique sizes
  int version = 0;                    // N of v<N>.json; 0 until stored

  // The largest out-of-place bus bandwidth (in-place where a point has only that).
  std::optional<double> PeakBusbwGbps() const;
};

// The node-set key: sorted unique host names joined by ",".
std::string NodeSetKey(std::vector<std::string> hosts);

struct BaselineSource {
  std::string key;         // explicit key (--name); "" = the node set of the run
  std::string collective;  // explicit collective; "" = the run's own
  std::string source_file;
  int64_t imported_at_ms = 0;
};

// A baseline (or a run to compare) from a parsed capture. InvalidArgument when it has no rows,
// when neither `src.key` nor rank lines name the nodes, when the collective is unknown and not
// given, or when the key is unusable (empty, longer than kMaxKeyBytes, control characters).
Result<Baseline> BaselineFromReport(const PerfReport& report, const BaselineSource& src);

// The file's JSON (docs/format/linkbase.md) and back. BaselineFromJson: Corruption for text
// that is not such a file, NotSupported for a newer format_version.
nlohmann::json BaselineToJson(const Baseline& b);
Result<Baseline> BaselineFromJson(std::string_view text);

// The directory name of a key or collective: itself when it is 1..200 bytes of [A-Za-z0-9._,-]
// not starting with "."; otherwise those characters of it (others as "_", at most 100 bytes),
// "~" and 16 hex digits of its FNV-1a hash, so distinct keys never share a directory.
std::string StoreDirName(std::string_view key);

class LinkBaselineStore {
 public:
  explicit LinkBaselineStore(std::string dir) : dir_(std::move(dir)) {}

  // Stores `b` as the next version of its key and collective (sets b->version); returns the
  // path written.
  Result<std::string> Save(Baseline* b) const;
  // The newest version; NotFound when there is none, Corruption when its file is damaged or
  // holds another key.
  Result<Baseline> LoadLatest(const std::string& key, const std::string& collective) const;
  // The collectives stored under a key, sorted (the names read from the files).
  Result<std::vector<std::string>> Collectives(const std::string& key) const;

  struct Entry {
    Baseline latest;
    int versions = 0;  // how many v<N>.json files
    std::string path;  // of the latest
  };
  // Every key and collective, sorted by key then collective. Files that cannot be read are left
  // out and described in `problems`. A missing directory is an empty list.
  Result<std::vector<Entry>> List(std::vector<std::string>* problems) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

enum class Verdict { kOk, kDegraded, kInsufficient };
std::string_view VerdictName(Verdict v);  // "ok", "degraded", "insufficient"

struct SizeRatio {
  uint64_t size_bytes = 0;
  double base_busbw_gbps = 0;
  double run_busbw_gbps = 0;
  double ratio = 0;       // run / base
  bool in_place = false;  // compared in-place results (one side had no out-of-place)
};

struct Comparison {
  std::vector<SizeRatio> sizes;        // every size both have a bus bandwidth for, ascending
  size_t sizes_judged = 0;             // of those, >= kBandwidthBoundMinBytes
  std::optional<double> median_ratio;  // over the judged sizes
  std::optional<SizeRatio> worst;      // the judged size with the lowest ratio
  Verdict verdict = Verdict::kInsufficient;
  // Differences that make the numbers less comparable: GPU model, ranks, nodes, collective.
  std::vector<std::string> notes;
};

// Per common size run/base bus bandwidth (out-of-place; in-place where either side lacks it);
// sizes where the baseline measured 0 are skipped. `degraded` when the median ratio over sizes
// >= kBandwidthBoundMinBytes is below kDegradedMedianRatio, `insufficient` when there is no
// such size, else `ok`.
Comparison CompareToBaseline(const Baseline& base, const Baseline& run);

// {"verdict", "median_ratio", "threshold_ratio", "min_size_bytes", "sizes_judged", "worst",
//  "sizes": [{"size_bytes", "baseline_busbw_gbps", "run_busbw_gbps", "ratio", "in_place"}],
//  "notes"}; unknown numbers are null.
nlohmann::json ComparisonJson(const Comparison& c);

}  // namespace gpuwatch::nccl
