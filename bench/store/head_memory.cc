// What the store's head holds per series as time goes on, at a hub's shape: many series, one
// sample each a second, appended a second at a time (bench/fleet/RESULTS.md, issue 19).
//
//   head_memory [--series 100000] [--seconds 9000] [--block-shift 9] [--block-span-min 120]
//               [--dir DIR] [--restart]
//
// The fleet benchmark runs a minute, so it sees the head young: each open chunk's raw buffer
// holds a minute of samples, not the 2^block_shift it keeps once full, and no chunk has grown
// for two hours. This runs simulated time (the store's clock is the samples' time) as fast as
// the store takes it, and prints the process's RSS per series at points along two hours and
// past the first flush. Series carry a fleet node's labels (fleet_load's) and values of four
// kinds seen in GPU telemetry: a constant (memory total), a small integer random walk
// (temperature), a decimal with one digit of noise (power), and a counter (energy).
// Not a timing: the head's memory only. With --restart it then times what an operator waits
// for at that size, once each: the stop (Close flushes the head to a block: what SIGTERM
// costs, against systemd's TimeoutStopSec), the start after it, and the start after a crash
// (the WAL replayed into the head), from a copy of the data directory taken before the stop.
#include <fmt/format.h>
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "store/store.h"

namespace {

// VmRSS or VmHWM of this process, in bytes.
uint64_t StatusBytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The store head's memory per series over simulated time"};
  long series = 100'000, seconds = 9000;
  int block_shift = gpuwatch::store::kDefaultBlockShift;
  int block_span_min = 120;
  std::string dir = "/tmp/gpuwatch-head-memory";
  bool restart = false;
  app.add_option("--series", series);
  app.add_option("--seconds", seconds);
  app.add_option("--block-shift", block_shift);
  app.add_option("--block-span-min", block_span_min, "the head is flushed to a block at this span");
  app.add_option("--dir", dir);
  app.add_flag("--restart", restart, "time the stop, a start after it and a start after a crash");
  CLI11_PARSE(app, argc, argv);

  // The gpuwatch binary's malloc settings (cli/main.cc).
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  const std::string crash_dir = dir + "-crash";
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(crash_dir);
  const int64_t t0_ms = int64_t{1'800'000'000} * 1000;
  std::atomic<int64_t> now_ms{t0_ms};
  gpuwatch::store::StoreOptions o;
  o.head.block_shift = block_shift;
  o.block_span_ms = int64_t{block_span_min} * 60'000;
  o.head.wal.sync = gpuwatch::store::SyncPolicy::kNever;
  o.clock_ms = [&] { return now_ms.load(); };
  o.disk_budget_bytes = uint64_t{64} << 30;
  auto store = gpuwatch::store::Store::Open(dir, o);
  if (!store.ok()) {
    fmt::print(stderr, "{}\n", store.status().ToString());
    return 1;
  }
  const uint64_t rss0 = StatusBytes("VmRSS");

  std::vector<gpuwatch::store::Head::Input> batch(static_cast<size_t>(series));
  std::vector<uint32_t> refs(batch.size(), gpuwatch::store::kNoSeriesRef);
  std::vector<double> walk(batch.size(), 65);
  uint64_t rng = 88172645463325252ULL;
  auto next = [&] {  // xorshift64
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  fmt::print("series={} block={} (raw buffer {} B a series)\n", series, 1 << block_shift,
             16 << block_shift);
  fmt::print(
      "| simulated s | RSS MiB | RSS B/series | head samples | head chunk B/series |\n"
      "|---:|---:|---:|---:|---:|\n");
  const long points[] = {60,   600,  1200,  1800,  2400,  3600,  5400,  7200,
                         8100, 9000, 10800, 14400, 15300, 16200, 21600, 23400};
  size_t point = 0;
  for (long s = 0; s < seconds; ++s) {
    const int64_t t = t0_ms + s * 1000;
    now_ms = t;
    for (size_t i = 0; i < batch.size(); ++i) {
      auto& in = batch[i];
      in.samples.clear();
      double v = 0;
      switch (i % 4) {
        case 0:
          v = 81559;  // MiB total
          break;
        case 1:
          walk[i] = std::clamp(walk[i] + static_cast<double>(next() % 3) - 1, 40.0, 90.0);
          v = walk[i];
          break;
        case 2:
          v = std::round(6124 + static_cast<double>(next() % 21) - 10) / 10;
          break;
        default:
          v = static_cast<double>(s) * 612.4 * 1000 + static_cast<double>(i);
      }
      in.samples.push_back({t, v});
      in.ref = refs[i];
      if (in.ref == gpuwatch::store::kNoSeriesRef && in.labels.empty()) {
        const long node = static_cast<long>(i) / 1358, k = static_cast<long>(i) % 1358;
        const std::string host = fmt::format("sim-node-{:05d}", node);
        in.labels = {{"__name__", fmt::format("DCGM_FI_SIM_FIELD_{:03d}", k % 166)},
                     {"Hostname", host},
                     {"UUID", fmt::format("GPU-{}-{}", node, k / 166)},
                     {"gpu", std::to_string(k / 166)},
                     {"instance", host + ":9470"},
                     {"job", "gpuwatch"},
                     {"model_name", "NVIDIA H100 80GB HBM3"},
                     {"pci_bus_id", fmt::format("00000000:{:02x}:00.0", 0x18 + k / 166)}};
      }
    }
    gpuwatch::store::AppendLimits limits;
    limits.want_refs = s == 0;
    auto r = (*store)->Append(batch, limits);
    if (!r.ok() || r->rejected() > 0) {
      fmt::print(stderr, "append at {} s: {}\n", s,
                 r.ok() ? r->first_error : r.status().ToString());
      return 1;
    }
    if (s == 0) {
      refs = r->refs;
      for (auto& in : batch) in.labels.clear();
    }
    if (point < std::size(points) && s + 1 == points[point]) {
      const uint64_t rss = StatusBytes("VmRSS") - rss0;
      fmt::print(
          "| {} | {:.0f} | {:.0f} | {} | {:.0f} |\n", s + 1, static_cast<double>(rss) / (1 << 20),
          static_cast<double>(rss) / static_cast<double>(series), (*store)->Stats().head_samples,
          static_cast<double>((*store)->head().chunk_bytes()) / static_cast<double>(series));
      ++point;
    }
  }
  fmt::print("peak RSS {:.0f} MiB; on disk {} bytes\n",
             static_cast<double>(StatusBytes("VmHWM")) / (1 << 20),
             (*store)->Stats().bytes_on_disk);
  if (!restart) return 0;

  // The WAL is written with write(2) and nothing buffered in the process, so a copy taken now
  // holds what a SIGKILL would leave (less the lock, which a new process takes afresh).
  std::filesystem::copy(dir, crash_dir, std::filesystem::copy_options::recursive);
  const uint64_t head_samples = (*store)->Stats().head_samples;
  auto since_s = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto t0 = std::chrono::steady_clock::now();
  auto closed = (*store)->Close();
  fmt::print("stop (the head's {} samples flushed to a block): {:.1f} s{}\n", head_samples,
             since_s(t0), closed.ok() ? "" : " FAILED: " + closed.message());
  (*store).reset();
  for (const auto& [what, d] : {std::pair{"a clean stop", dir}, std::pair{"a crash", crash_dir}}) {
    t0 = std::chrono::steady_clock::now();
    auto again = gpuwatch::store::Store::Open(d, o);
    if (!again.ok()) {
      fmt::print(stderr, "open after {}: {}\n", what, again.status().ToString());
      return 1;
    }
    fmt::print("start after {}: {:.1f} s ({} samples in the head)\n", what, since_s(t0),
               (*again)->Stats().head_samples);
  }
  std::filesystem::remove_all(crash_dir);
  return 0;
}
