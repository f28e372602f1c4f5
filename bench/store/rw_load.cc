// Remote-write load generator and query timer for the store benchmark (issue 3):
// bench/store/run_store_bench.sh drives gpuwatch, VictoriaMetrics and Prometheus with it, so
// all three get the same bytes over the same protocol and are timed by the same code.
//
//   rw_load write --raw FILE --series FILE --url URL [--batch N] [--connections K]
//                 [--values text|raw] [--max-lag N]
//   rw_load query --url BASE --query PROMQL (--time T | --start T --end T --step S)
//                 [--runs N] [--warmup N]
//
// write: the dataset is the raw baseline of shared/bench/gen_gpu_telemetry.py (--raw-out: for
// each series in order, its int64 ms timestamps then its float64 values, little-endian) plus
// one scrape of the same generator in Prometheus text (--format prom --seconds 1) for the label
// sets, in the same order, and the number of decimals each series is printed with. With
// --values text (the default) every value goes through the generator's printf and back, so the
// receivers store exactly what the text formats (OpenMetrics for promtool, JSON for
// VictoriaMetrics' import) carry. Series are split into K shards as Prometheus' queue manager
// does (series i to shard i % K), so each series arrives in time order; each shard sends its
// requests over its own keep-alive connection, one at a time, each holding the next W seconds of
// its series (W = batch / series per shard). No shard runs more than --max-lag requests ahead
// of the slowest: Prometheus rejects samples older than its head's newest minus an hour. Every
// request is encoded before the clock starts; the encode and send CPU times are both printed.
// 5xx and connection errors are retried with backoff, a 4xx fails the run.
//
// query: runs a PromQL query against /api/v1/query (--time) or /api/v1/query_range, --warmup
// times untimed then --runs times timed, and prints the nearest-rank p50/p99 of the wall time
// from sending the request to having the whole body. `Accept-Encoding: identity`, so no server
// spends time compressing. The last body is checked (status "success") and summarized
// (series, points, the sum of all values) so the systems' answers can be compared.
//
// The last line on stdout is `key=value ...` for the script; the rest goes to stderr.
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "store/remote_write.h"

namespace {

using gpuwatch::store::EncodeRemoteWrite;
using gpuwatch::store::Label;
using gpuwatch::store::RemoteSample;
using gpuwatch::store::RemoteSeries;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& message) {
  fmt::print(stderr, "rw_load: {}\n", message);
  std::exit(1);
}

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// "http://host:port/path" → {"http://host:port", "/path"}.
std::pair<std::string, std::string> SplitUrl(const std::string& url) {
  size_t scheme = url.find("://");
  size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (slash == std::string::npos) return {url, "/"};
  return {url.substr(0, slash), url.substr(slash)};
}

struct SeriesDef {
  std::vector<Label> labels;
  int decimals = -1;  // as printed by the generator; -1: an integer (no rounding needed)
};

// One Prometheus text scrape: `name{k="v",...} value [timestamp]` per line.
std::vector<SeriesDef> ReadSeries(const std::string& path) {
  std::ifstream in(path);
  if (!in) Die("cannot open " + path);
  std::vector<SeriesDef> out;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](const char* what) {
      Die(fmt::format("{}:{}: {}: {}", path, line_no, what, line));
    };
    SeriesDef s;
    size_t i = line.find_first_of("{ ");
    if (i == std::string::npos || i == 0) bad("no metric name");
    s.labels.push_back({"__name__", line.substr(0, i)});
    if (line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"')
          bad("bad label");
        Label l{line.substr(i, eq - i), ""};
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            l.value.push_back(line[j] == 'n' ? '\n' : line[j]);
          } else {
            l.value.push_back(line[j]);
          }
        }
        if (j >= line.size()) bad("unterminated label value");
        s.labels.push_back(std::move(l));
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) bad("unterminated label set");
      ++i;
    }
    while (i < line.size() && line[i] == ' ') ++i;
    size_t end = line.find(' ', i);
    std::string value = line.substr(i, end == std::string::npos ? std::string::npos : end - i);
    if (value.empty()) bad("no value");
    size_t dot = value.find('.');
    if (dot != std::string::npos) s.decimals = static_cast<int>(value.size() - dot - 1);
    out.push_back(std::move(s));
  }
  if (out.empty()) Die(path + ": no series");
  return out;
}

// The value the receivers of the generator's text formats parse: printf("%.Nf") and back.
double AsText(double v, int decimals) {
  if (decimals < 0) return v;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return std::strtod(buf, nullptr);
}

struct Shard {
  std::vector<size_t> series;
  std::vector<std::string> bodies;  // snappy-compressed WriteRequests, in time order
  std::vector<uint64_t> samples;    // per body
};

int RunWrite(const std::string& raw_path, const std::string& series_path, const std::string& url,
             size_t batch, size_t connections, const std::string& values, size_t max_lag) {
  if (values != "text" && values != "raw") Die("--values must be text or raw");
  const std::vector<SeriesDef> defs = ReadSeries(series_path);
  const size_t n_series = defs.size();

  int fd = open(raw_path.c_str(), O_RDONLY);
  if (fd < 0) Die("cannot open " + raw_path);
  struct stat st {};
  fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0 || size % (16 * n_series) != 0)
    Die(fmt::format("{}: {} bytes is not {} series x 16 bytes x N samples", raw_path, size,
                    n_series));
  const size_t n_samples = size / 16 / n_series;  // per series
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) Die("mmap " + raw_path + " failed");
  close(fd);
  const auto* base = static_cast<const char*>(map);
  auto timestamp = [&](size_t s, size_t i) {
    int64_t t;
    std::memcpy(&t, base + s * n_samples * 16 + i * 8, 8);
    return t;
  };
  auto value = [&](size_t s, size_t i) {
    double v;
    std::memcpy(&v, base + s * n_samples * 16 + n_samples * 8 + i * 8, 8);
    return values == "text" ? AsText(v, defs[s].decimals) : v;
  };

  connections = std::clamp<size_t>(connections, 1, n_series);
  std::vector<Shard> shards(connections);
  for (size_t s = 0; s < n_series; ++s) shards[s % connections].series.push_back(s);
  const size_t per_shard = (n_series + connections - 1) / connections;
  const size_t window = std::max<size_t>(1, batch / per_shard);  // samples per series per request
  const size_t n_windows = (n_samples + window - 1) / window;

  // Encode everything first, one thread per shard.
  const auto encode_t0 = Clock::now();
  const double encode_cpu0 = CpuSeconds();
  {
    std::vector<std::thread> threads;
    for (auto& shard : shards) {
      threads.emplace_back([&, &shard = shard] {
        std::vector<RemoteSeries> request(shard.series.size());
        for (size_t k = 0; k < shard.series.size(); ++k)
          request[k].labels = defs[shard.series[k]].labels;
        for (size_t w = 0; w < n_windows; ++w) {
          const size_t lo = w * window, hi = std::min(n_samples, lo + window);
          for (size_t k = 0; k < shard.series.size(); ++k) {
            auto& samples = request[k].samples;
            samples.clear();
            for (size_t i = lo; i < hi; ++i)
              samples.push_back(
                  RemoteSample{timestamp(shard.series[k], i), value(shard.series[k], i)});
          }
          shard.bodies.push_back(EncodeRemoteWrite(request));
          shard.samples.push_back((hi - lo) * shard.series.size());
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  const double encode_wall = SecondsSince(encode_t0);
  const double encode_cpu = CpuSeconds() - encode_cpu0;
  munmap(map, size);
  uint64_t total_bytes = 0, total_samples = 0;
  for (const auto& shard : shards) {
    for (const auto& b : shard.bodies) total_bytes += b.size();
    for (uint64_t n : shard.samples) total_samples += n;
  }
  fmt::print(stderr,
             "rw_load: {} series x {} samples = {} samples in {} requests of <= {} s x {} series "
             "({:.1f} MB snappy), encoded in {:.2f} s ({:.2f} s CPU)\n",
             n_series, n_samples, total_samples, n_windows * connections, window, per_shard,
             total_bytes / 1e6, encode_wall, encode_cpu);

  const auto [host, path] = SplitUrl(url);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<size_t> done(connections, 0);  // requests each shard has had acknowledged
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> retries{0};
  std::string error;
  auto fail = [&](std::string message) {
    std::lock_guard lock(mu);
    if (!failed.exchange(true)) error = std::move(message);
    cv.notify_all();
  };

  const auto send_t0 = Clock::now();
  const double send_cpu0 = CpuSeconds();
  {
    std::vector<std::thread> threads;
    for (size_t k = 0; k < connections; ++k) {
      threads.emplace_back([&, k] {
        httplib::Client cli(host);
        cli.set_keep_alive(true);
        cli.set_connection_timeout(10);
        cli.set_read_timeout(300);
        cli.set_write_timeout(300);
        const httplib::Headers headers = {{"Content-Encoding", "snappy"},
                                          {"X-Prometheus-Remote-Write-Version", "0.1.0"},
                                          {"User-Agent", "gpuwatch-rw_load"}};
        for (size_t w = 0; w < n_windows && !failed; ++w) {
          {
            std::unique_lock lock(mu);
            cv.wait(lock, [&] {
              return failed || *std::min_element(done.begin(), done.end()) + max_lag >= w;
            });
            if (failed) return;
          }
          const std::string& body = shards[k].bodies[w];
          for (int attempt = 0;; ++attempt) {
            auto res = cli.Post(path, headers, body, "application/x-protobuf");
            if (res && res->status / 100 == 2) break;
            if (res && res->status / 100 == 4)
              return fail(fmt::format("{} answered {} to request {} of shard {}: {}", url,
                                      res->status, w, k, res->body.substr(0, 500)));
            if (attempt >= 30)
              return fail(fmt::format("{}: request {} of shard {} failed {} times, last: {}", url,
                                      w, k, attempt + 1,
                                      res ? std::to_string(res->status) + " " + res->body
                                          : httplib::to_string(res.error())));
            ++retries;
            std::this_thread::sleep_for(
                std::chrono::milliseconds(std::min(2000, 50 << std::min(attempt, 6))));
          }
          {
            std::lock_guard lock(mu);
            done[k] = w + 1;
          }
          cv.notify_all();
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  const double send_wall = SecondsSince(send_t0);
  const double send_cpu = CpuSeconds() - send_cpu0;
  if (failed) Die(error);
  fmt::print(stderr,
             "rw_load: sent {} samples over {} connections in {:.2f} s: {:.0f} samples/s "
             "({} retries; sender CPU {:.2f} s)\n",
             total_samples, connections, send_wall, total_samples / send_wall, retries.load(),
             send_cpu);
  fmt::print(
      "samples={} requests={} bytes={} wall_s={:.3f} samples_per_s={:.0f} send_cpu_s={:.3f} "
      "encode_wall_s={:.3f} encode_cpu_s={:.3f} retries={}\n",
      total_samples, n_windows * connections, total_bytes, send_wall, total_samples / send_wall,
      send_cpu, encode_wall, encode_cpu, retries.load());
  return 0;
}

// Nearest-rank percentile of sorted values.
double Percentile(const std::vector<double>& sorted, double p) {
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

int RunQuery(const std::string& url, const std::string& query, const std::string& time,
             const std::string& start, const std::string& end, const std::string& step, int runs,
             int warmup) {
  httplib::Params params = {{"query", query}};
  std::string path;
  if (!time.empty()) {
    path = "/api/v1/query";
    params.emplace("time", time);
  } else {
    if (start.empty() || end.empty() || step.empty())
      Die("query: --time, or --start, --end and --step");
    path = "/api/v1/query_range";
    params.emplace("start", start);
    params.emplace("end", end);
    params.emplace("step", step);
  }
  httplib::Client cli(SplitUrl(url).first);
  cli.set_keep_alive(true);
  cli.set_connection_timeout(10);
  cli.set_read_timeout(600);
  cli.set_decompress(false);
  const httplib::Headers headers = {{"Accept-Encoding", "identity"},
                                    {"User-Agent", "gpuwatch-rw_load"}};
  std::vector<double> ms;
  std::string body;
  for (int i = 0; i < warmup + runs; ++i) {
    const auto t0 = Clock::now();
    auto res = cli.Get(path, params, headers);
    const double elapsed = SecondsSince(t0) * 1e3;
    if (!res) Die(fmt::format("{}{}: {}", url, path, httplib::to_string(res.error())));
    if (res->status != 200)
      Die(fmt::format("{}{} answered {}: {}", url, path, res->status, res->body.substr(0, 500)));
    if (i >= warmup) ms.push_back(elapsed);
    body = std::move(res->body);
  }

  size_t n_series = 0, n_points = 0;
  double sum = 0;
  try {
    auto j = nlohmann::json::parse(body);
    if (j.value("status", "") != "success") Die("query failed: " + body.substr(0, 500));
    auto add = [&](const nlohmann::json& point) {
      ++n_points;
      sum += std::strtod(point.at(1).get<std::string>().c_str(), nullptr);
    };
    const auto& data = j.at("data");
    if (data.value("resultType", "") == "scalar") {  // "result": [t, "v"]
      add(data.at("result"));
    } else {
      for (const auto& r : data.at("result")) {
        ++n_series;
        if (r.contains("values"))
          for (const auto& p : r["values"]) add(p);
        if (r.contains("value")) add(r["value"]);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    Die(fmt::format("bad JSON from {}{}: {}", url, path, e.what()));
  }
  std::sort(ms.begin(), ms.end());
  fmt::print(stderr, "rw_load: {} x {}: p50 {:.2f} ms, p99 {:.2f} ms; {} series, {} points\n", runs,
             query, Percentile(ms, 50), Percentile(ms, 99), n_series, n_points);
  fmt::print(
      "p50_ms={:.3f} p99_ms={:.3f} min_ms={:.3f} max_ms={:.3f} runs={} series={} points={} "
      "sum={:.17g} response_bytes={}\n",
      Percentile(ms, 50), Percentile(ms, 99), ms.front(), ms.back(), runs, n_series, n_points, sum,
      body.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Remote-write load generator and query timer (bench/store/run_store_bench.sh)"};
  app.require_subcommand(1);

  std::string raw, series, url, values = "text";
  size_t batch = 10000, connections = 4, max_lag = 2;
  auto* write = app.add_subcommand("write", "send the dataset as remote-write requests");
  write->add_option("--raw", raw, "generator --raw-out file")->required();
  write->add_option("--series", series, "one scrape in Prometheus text (label sets, decimals)")
      ->required();
  write->add_option("--url", url, "remote-write URL, e.g. http://127.0.0.1:9090/api/v1/write")
      ->required();
  write->add_option("--batch", batch, "samples per request (about)")->capture_default_str();
  write->add_option("--connections", connections, "concurrent connections = shards")
      ->capture_default_str();
  write->add_option("--values", values, "text: values as the text formats carry them; raw")
      ->capture_default_str();
  write->add_option("--max-lag", max_lag, "requests a shard may run ahead of the slowest")
      ->capture_default_str();

  std::string qurl, query, time, start, end, step;
  int runs = 20, warmup = 2;
  auto* q = app.add_subcommand("query", "time a PromQL query");
  q->add_option("--url", qurl, "base URL, e.g. http://127.0.0.1:9090")->required();
  q->add_option("--query", query, "PromQL")->required();
  q->add_option("--time", time, "instant query at this time (/api/v1/query)");
  q->add_option("--start", start, "range query start (/api/v1/query_range)");
  q->add_option("--end", end, "range query end");
  q->add_option("--step", step, "range query step");
  q->add_option("--runs", runs, "timed runs")->capture_default_str()->check(CLI::PositiveNumber);
  q->add_option("--warmup", warmup, "untimed runs first")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  if (write->parsed()) return RunWrite(raw, series, url, batch, connections, values, max_lag);
  return RunQuery(qurl, query, time, start, end, step, runs, warmup);
}
