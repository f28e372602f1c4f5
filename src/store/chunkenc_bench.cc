// Chunk compression on the reference dataset: bytes/sample overall and per metric family, the
// encodings each family ended up with, and encode/decode throughput on one core.
//
// Input: the raw baseline of shared/bench/gen_gpu_telemetry.py (--raw-out): for each series in
// order, its int64 ms timestamps then its float64 values, little-endian. bench/store/
// chunk_ratio.sh generates it and runs this. Every chunk is decoded and compared bit for bit.
//
//   chunkenc_bench RAW_FILE [--seconds N] [--series N] [--chunk N[,N...]]
//                  [--block-shift N[,N...]] [--values text|raw|both] [--no-families]
//   chunkenc_bench - --timestamp-costs     (timestamps of synthetic jittered scrapes)
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "store/chunkenc.h"

namespace {

using gpuwatch::store::ChunkDecoder;
using gpuwatch::store::ChunkEncoder;
using gpuwatch::store::ChunkInfo;
using gpuwatch::store::InspectChunk;
using gpuwatch::store::kNumValueEncodings;
using gpuwatch::store::ValueEncoding;
using gpuwatch::store::ValueEncodingName;

// The generator's METRICS list, in order: series i has metric i % 40 (series_labels iterates
// nodes, then GPUs, then METRICS). 'i' integer, 'p' watts printed with 3 decimals, 'r' ratio
// printed with 6 decimals.
struct Metric {
  const char* name;
  char format;
};
constexpr Metric kMetrics[] = {
    {"DCGM_FI_DEV_SM_CLOCK", 'i'},
    {"DCGM_FI_DEV_MEM_CLOCK", 'i'},
    {"DCGM_FI_DEV_GPU_TEMP", 'i'},
    {"DCGM_FI_DEV_MEMORY_TEMP", 'i'},
    {"DCGM_FI_DEV_FAN_SPEED", 'i'},
    {"DCGM_FI_DEV_POWER_USAGE", 'p'},
    {"DCGM_FI_DEV_POWER_MGMT_LIMIT", 'i'},
    {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 'i'},
    {"DCGM_FI_DEV_PCIE_TX_THROUGHPUT", 'i'},
    {"DCGM_FI_DEV_PCIE_RX_THROUGHPUT", 'i'},
    {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 'i'},
    {"DCGM_FI_DEV_GPU_UTIL", 'i'},
    {"DCGM_FI_DEV_MEM_COPY_UTIL", 'i'},
    {"DCGM_FI_DEV_ENC_UTIL", 'i'},
    {"DCGM_FI_DEV_DEC_UTIL", 'i'},
    {"DCGM_FI_DEV_XID_ERRORS", 'i'},
    {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 'i'},
    {"DCGM_FI_DEV_POWER_VIOLATION", 'i'},
    {"DCGM_FI_DEV_FB_FREE", 'i'},
    {"DCGM_FI_DEV_FB_USED", 'i'},
    {"DCGM_FI_DEV_FB_RESERVED", 'i'},
    {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 'i'},
    {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 'i'},
    {"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 'i'},
    {"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 'i'},
    {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 'i'},
    {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 'i'},
    {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 'i'},
    {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", 'r'},
    {"DCGM_FI_PROF_SM_ACTIVE", 'r'},
    {"DCGM_FI_PROF_SM_OCCUPANCY", 'r'},
    {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 'r'},
    {"DCGM_FI_PROF_DRAM_ACTIVE", 'r'},
    {"DCGM_FI_PROF_PIPE_FP64_ACTIVE", 'r'},
    {"DCGM_FI_PROF_PIPE_FP32_ACTIVE", 'r'},
    {"DCGM_FI_PROF_PIPE_FP16_ACTIVE", 'r'},
    {"DCGM_FI_PROF_PCIE_TX_BYTES", 'i'},
    {"DCGM_FI_PROF_PCIE_RX_BYTES", 'i'},
    {"DCGM_FI_PROF_NVLINK_TX_BYTES", 'i'},
    {"DCGM_FI_PROF_NVLINK_RX_BYTES", 'i'},
};
constexpr int kNumMetrics = sizeof(kMetrics) / sizeof(kMetrics[0]);

// The value Prometheus and VictoriaMetrics stored: the generator prints %.3f / %.6f and they
// parse that text (correctly rounded both ways, as glibc's printf and strtod are).
double AsText(double v, char format) {
  if (format == 'i') return v;
  char buf[64];
  std::snprintf(buf, sizeof buf, format == 'p' ? "%.3f" : "%.6f", v);
  return std::strtod(buf, nullptr);
}

std::vector<long> ParseList(const char* s) {
  std::vector<long> out;
  for (const char* p = s; *p;) {
    char* end;
    out.push_back(std::strtol(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return out;
}

struct FamilyStats {
  uint64_t samples = 0;
  uint64_t bytes = 0;
  uint64_t timestamp_bytes = 0;
  ChunkInfo info;  // summed over chunks
};

void Accumulate(ChunkInfo* sum, const ChunkInfo& c) {
  sum->num_samples += c.num_samples;
  sum->num_blocks += c.num_blocks;
  for (int i = 0; i < kNumValueEncodings; ++i) sum->value_blocks[i] += c.value_blocks[i];
  for (int i = 0; i < 3; ++i) sum->int_diff_order_blocks[i] += c.int_diff_order_blocks[i];
  sum->int_lpc_blocks += c.int_lpc_blocks;
  sum->regular_timestamp_blocks += c.regular_timestamp_blocks;
  sum->exceptions += c.exceptions;
  sum->header_bytes += c.header_bytes;
  sum->timestamp_bytes += c.timestamp_bytes;
  sum->value_bytes += c.value_bytes;
}

// "decimal 97% (d0+lpc)" style summary of which encodings a family's blocks used.
std::string Encodings(const ChunkInfo& info) {
  std::string out;
  const double blocks = static_cast<double>(info.num_blocks);
  for (int i = 0; i < kNumValueEncodings; ++i) {
    if (!info.value_blocks[i]) continue;
    const double pct = 100.0 * info.value_blocks[i] / blocks;
    if (pct < 1) continue;
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {:.0f}%", ValueEncodingName(static_cast<ValueEncoding>(i)), pct);
  }
  const uint32_t int_blocks =
      info.int_diff_order_blocks[0] + info.int_diff_order_blocks[1] + info.int_diff_order_blocks[2];
  if (int_blocks) {
    int best = 0;
    for (int d = 1; d < 3; ++d) {
      if (info.int_diff_order_blocks[d] > info.int_diff_order_blocks[best]) best = d;
    }
    out +=
        fmt::format(" [mostly d={}{}]", best, 2 * info.int_lpc_blocks > int_blocks ? "+lpc" : "");
  }
  return out;
}

struct RunResult {
  double bytes_per_sample = 0;
  double encode_msps = 0;
  double decode_msps = 0;
};

RunResult Run(FILE* f, long seconds, long num_series, long chunk, int block_shift, bool text,
              bool print_families) {
  std::vector<int64_t> ts(seconds);
  std::vector<double> vs(seconds);
  std::vector<std::string> chunks;
  std::vector<int> chunk_metric;
  FamilyStats fam[kNumMetrics];
  double encode_s = 0;
  uint64_t total_samples = 0;
  std::fseek(f, 0, SEEK_SET);
  for (long s = 0; s < num_series; ++s) {
    if (std::fread(ts.data(), 8, seconds, f) != static_cast<size_t>(seconds) ||
        std::fread(vs.data(), 8, seconds, f) != static_cast<size_t>(seconds)) {
      std::fprintf(stderr, "short read at series %ld\n", s);
      std::exit(1);
    }
    const int metric = static_cast<int>(s % kNumMetrics);
    if (text) {
      for (double& v : vs) v = AsText(v, kMetrics[metric].format);
    }
    const auto t0 = std::chrono::steady_clock::now();
    ChunkEncoder enc(block_shift);
    for (long i = 0; i < seconds; ++i) {
      if (!enc.Append(ts[i], vs[i]).ok()) std::abort();
      if (static_cast<long>(enc.num_samples()) == chunk || i + 1 == seconds) {
        chunks.push_back(enc.Finish());
        chunk_metric.push_back(metric);
      }
    }
    encode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_samples += seconds;
    // Verify: every chunk of this series decodes to exactly what went in.
    long i = 0;
    for (size_t c = chunks.size() - (seconds + chunk - 1) / chunk; c < chunks.size(); ++c) {
      auto dec = ChunkDecoder::Open(chunks[c]);
      if (!dec.ok()) std::abort();
      int64_t t;
      double v;
      while (dec->Next(&t, &v)) {
        uint64_t a, b;
        std::memcpy(&a, &v, 8);
        std::memcpy(&b, &vs[i], 8);
        if (t != ts[i] || a != b) {
          std::fprintf(stderr, "MISMATCH series %ld sample %ld\n", s, i);
          std::exit(1);
        }
        ++i;
      }
      if (!dec->status().ok()) {
        std::fprintf(stderr, "decode error: %s\n", dec->status().ToString().c_str());
        std::exit(1);
      }
    }
    if (i != seconds) std::abort();
  }

  // Decode throughput: all chunks, as a query would read them.
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t decoded = 0;
  double checksum = 0;
  for (const std::string& c : chunks) {
    auto dec = ChunkDecoder::Open(c);
    int64_t t;
    double v;
    while (dec->Next(&t, &v)) {
      checksum += v;
      ++decoded;
    }
  }
  const double decode_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (decoded != total_samples) std::abort();

  uint64_t total_bytes = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    FamilyStats& fs = fam[chunk_metric[c]];
    auto info = InspectChunk(chunks[c]);
    if (!info.ok()) std::abort();
    fs.samples += info->num_samples;
    fs.bytes += chunks[c].size();
    Accumulate(&fs.info, *info);
    total_bytes += chunks[c].size();
  }
  RunResult r;
  r.bytes_per_sample = static_cast<double>(total_bytes) / static_cast<double>(total_samples);
  r.encode_msps = total_samples / encode_s / 1e6;
  r.decode_msps = total_samples / decode_s / 1e6;
  if (print_families) {
    fmt::print(
        "| metric family | bytes/sample | of which timestamps | value encodings (blocks) |\n");
    fmt::print("|---|---:|---:|---|\n");
    for (int m = 0; m < kNumMetrics; ++m) {
      const FamilyStats& fs = fam[m];
      if (!fs.samples) continue;
      fmt::print("| {} | {:.3f} | {:.4f} | {} |\n", kMetrics[m].name,
                 static_cast<double>(fs.bytes) / fs.samples,
                 static_cast<double>(fs.info.timestamp_bytes) / fs.samples, Encodings(fs.info));
    }
  }
  fmt::print(
      "values={} chunk={} block={} series={} samples={} bytes={} bytes/sample={:.4f} "
      "encode={:.1f} Msamples/s decode={:.1f} Msamples/s (checksum {:.6g})\n",
      text ? "text" : "raw", chunk, 1 << block_shift, num_series, total_samples, total_bytes,
      r.bytes_per_sample, r.encode_msps, r.decode_msps, checksum);
  return r;
}

// Timestamp cost of synthetic 1 s scrape series: jitter of 0..J ms, and 1% missed scrapes.
void TimestampCosts() {
  fmt::print("| timestamps (7200 samples, 1 s) | bits/sample |\n|---|---:|\n");
  std::mt19937_64 rng(1);
  for (int jitter : {0, 1, 2, 4, 10, 50}) {
    for (bool missed : {false, true}) {
      ChunkEncoder enc;
      for (int i = 0; i < 7200; ++i) {
        const int64_t t = 1704067200000 + 1000LL * i + (jitter ? rng() % (jitter + 1) : 0);
        if (missed && rng() % 100 == 0) continue;
        if (!enc.Append(t, 42.0).ok()) std::abort();
      }
      const size_t n = enc.num_samples();
      auto info = InspectChunk(enc.Finish());
      if (!info.ok()) std::abort();
      fmt::print("| jitter 0..{} ms{} | {:.3f} |\n", jitter, missed ? ", 1% missed" : "",
                 8.0 * info->timestamp_bytes / n);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s RAW_FILE [--seconds N] [--series N] [--chunk N[,N...]] "
                 "[--block-shift N[,N...]] [--values text|raw|both] [--no-families]\n"
                 "       %s - --timestamp-costs\n",
                 argv[0], argv[0]);
    return 2;
  }
  long seconds = 21600;
  long num_series = 1280;
  std::vector<long> chunks = {7200};
  std::vector<long> shifts = {gpuwatch::store::kDefaultBlockShift};
  std::string values = "text";
  bool families = true;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--seconds") {
      seconds = std::atol(next), ++i;
    } else if (a == "--series") {
      num_series = std::atol(next), ++i;
    } else if (a == "--chunk") {
      chunks = ParseList(next), ++i;
    } else if (a == "--block-shift") {
      shifts = ParseList(next), ++i;
    } else if (a == "--values") {
      values = next, ++i;
    } else if (a == "--no-families") {
      families = false;
    } else if (a == "--timestamp-costs") {
      TimestampCosts();
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  FILE* f = std::fopen(argv[1], "rb");
  if (!f) {
    std::perror(argv[1]);
    return 1;
  }
  for (bool text : {true, false}) {
    if ((text && values == "raw") || (!text && values == "text")) continue;
    for (long chunk : chunks) {
      for (long shift : shifts) {
        Run(f, seconds, num_series, chunk, static_cast<int>(shift), text,
            families && chunk == chunks.front() && shift == shifts.front());
      }
    }
  }
  std::fclose(f);
  return 0;
}
