// Simulated agents pushing to a hub, for bench/fleet/run_fleet_bench.sh (issue 19).
//
//   fleet_load --url URL [--token-file F] --nodes N [--gpus 8] [--series-per-gpu 166]
//              [--host-series 30] [--seconds 60] [--interval-ms 1000] [--connections 4]
//              [--records on|off] [--pregenerate on|off] [--warmup S] [--hub-pid PID]
//              [--down-from S --down-for S]
//
// Each simulated node sends what `gpuwatch up --hub` sends (server/hub_push.h), at the real
// agent's counts (docs/deploy.md: 166 series a GPU and 30 host series at 1 s): every interval
// one remote-write request with that interval's samples of all its series, and one record entry
// (trace lines: a gpu record per GPU per second, a host record every 5 s, and the steps of the
// job it runs with the next node, 8 ranks a node, one step a second; a node record first),
// snappy-compressed with its spool id and sequence number.
//
// The generator shares the machine with the hub. Rendering and compressing a node's second
// (~1,400 series) costs about as much as the hub's storing it, so at 300 nodes it held a whole
// core (bench/fleet/RESULTS.md, run 4). With --pregenerate on (the default) every request of
// the run is rendered before the clock starts, on all cores, with the timestamps it will carry
// (the run starts when they are due); during the run the generator only sends. It takes memory:
// about 50 KiB a node-second (printed).
//
// Ingest lag of a request: from its oldest sample's timestamp to the hub's 2xx. The first
// --warmup seconds' requests (a hub meeting a fleet's series for the first time creates them
// all then) are counted apart: lag_p50/p99 are of the rest, warmup_lag_* of those. A request the
// hub did not take (429, 5xx, no connection) is kept and resent oldest first, as the agent's
// spool does; so is everything sent while the hub is made unreachable with --down-from/--down-for
// (the script stops the hub then): after it, the backlog drains and the run reports how long
// that took.
//
// --hub-pid: the hub's CPU time over the run itself (not while rendering) is reported as
// hub_cpu_s, from /proc/PID/stat.
//
// The last line on stdout is `key=value ...` for the script; the rest goes to stderr.
#include <fmt/format.h>
#include <httplib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "store/remote_write.h"

namespace {

using Clock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutField(std::string* out, int field, std::string_view bytes) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | 2);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

std::string Label(std::string_view name, std::string_view value) {
  std::string l, out;
  PutField(&l, 1, name);
  PutField(&l, 2, value);
  PutField(&out, 1, l);
  return out;
}

struct Request {
  int64_t oldest_ms;
  std::string body;
  bool records;
  uint64_t seq;
};

struct Node {
  std::string name, spool;
  std::vector<std::string> labels;  // encoded Label fields of each series
  uint64_t seq = 0;
  std::deque<Request> pending;  // not yet taken by the hub, oldest first
  bool sent_node_record = false;
  // --pregenerate: each tick's bodies (remote-write, records), sent and then freed.
  std::vector<std::string> writes, record_entries;
};

// utime + stime of a process, in seconds; 0 when it cannot be read.
double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the command name may hold spaces
  if (pid <= 0 || paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(paren + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; fields >> f; ++i)  // field 3 is the state; 14 and 15 are utime and stime
    if (i == 14 || i == 15) ticks += std::stod(f);
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct Stats {
  std::mutex mu;
  std::vector<double> lag_ms, warmup_lag_ms;
  uint64_t requests = 0, refused = 0, samples = 0, records = 0;
  int64_t last_pending_ms = 0;  // when the last backlog drained
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Simulated gpuwatch agents pushing to a hub"};
  std::string url, token_file, records = "on", pregenerate = "on";
  int nodes = 10, gpus = 8, series_per_gpu = 166, host_series = 30, seconds = 60,
      interval_ms = 1000, connections = 4, down_from = -1, down_for = 0, warmup = 0, hub_pid = 0;
  app.add_option("--url", url)->required();
  app.add_option("--token-file", token_file);
  app.add_option("--nodes", nodes);
  app.add_option("--gpus", gpus);
  app.add_option("--series-per-gpu", series_per_gpu);
  app.add_option("--host-series", host_series);
  app.add_option("--seconds", seconds);
  app.add_option("--interval-ms", interval_ms);
  app.add_option("--connections", connections);
  app.add_option("--records", records);
  app.add_option("--pregenerate", pregenerate, "render every request before the run (on|off)");
  app.add_option("--warmup", warmup, "seconds whose requests' lag is reported apart");
  app.add_option("--hub-pid", hub_pid, "the hub's process, for its CPU time over the run");
  app.add_option("--down-from", down_from, "seconds into the run the hub goes down (script)");
  app.add_option("--down-for", down_for);
  CLI11_PARSE(app, argc, argv);
  // One token a line: connection w sends with line w (mod their count). A hub counts its
  // senders by token and address, so several tokens from one address are several senders, as
  // a fleet's nodes are.
  std::vector<std::string> tokens;
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) tokens.push_back(line);
  }
  const bool with_records = records == "on";

  std::vector<Node> fleet(static_cast<size_t>(nodes));
  for (int i = 0; i < nodes; ++i) {
    Node& n = fleet[static_cast<size_t>(i)];
    n.name = fmt::format("sim-node-{:05d}", i);
    n.spool = fmt::format("{:016x}{:016x}", 0x9e3779b97f4a7c15ULL * (i + 1), 0xfeedULL + i);
    const std::string instance = n.name + ":9470";
    for (int g = 0; g < gpus; ++g)
      for (int m = 0; m < series_per_gpu; ++m)
        n.labels.push_back(Label("__name__", fmt::format("DCGM_FI_SIM_FIELD_{:03d}", m)) +
                           Label("Hostname", n.name) +
                           Label("UUID", fmt::format("GPU-{}-{}", i, g)) +
                           Label("gpu", std::to_string(g)) + Label("instance", instance) +
                           Label("job", "gpuwatch") + Label("model_name", "NVIDIA H100 80GB HBM3") +
                           Label("pci_bus_id", fmt::format("00000000:{:02x}:00.0", 0x18 + g)));
    for (int m = 0; m < host_series; ++m)
      n.labels.push_back(Label("__name__", fmt::format("node_sim_{:02d}", m)) +
                         Label("Hostname", n.name) + Label("instance", instance) +
                         Label("job", "gpuwatch"));
  }

  Stats stats;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> node0_seconds{0};  // node 0's seconds of samples the hub took
  auto start = Clock::now();
  int64_t start_ms = NowMs();
  const int per_request_s = std::max(1, interval_ms / 1000);
  const int64_t ticks = (static_cast<int64_t>(seconds) * 1000 + interval_ms - 1) / interval_ms;

  auto make_write = [&](const Node& n, int64_t t0_ms) {
    std::string proto, ts;
    for (size_t s = 0; s < n.labels.size(); ++s) {
      ts = n.labels[s];
      for (int k = 0; k < per_request_s; ++k) {
        std::string sample;
        const int64_t t = t0_ms + k * 1000;
        const double v = static_cast<double>((s * 7 + static_cast<size_t>(t / 1000)) % 100);
        sample.push_back(0x09);
        sample.append(reinterpret_cast<const char*>(&v), 8);
        sample.push_back(0x10);
        PutVarint(&sample, static_cast<uint64_t>(t));
        PutField(&ts, 2, sample);
      }
      PutField(&proto, 1, ts);
    }
    std::string body = gpuwatch::store::SnappyCompress(proto);
    body.shrink_to_fit();  // snappy sized it for the worst case: ~7x what --pregenerate keeps
    return body;
  };
  auto make_records = [&](Node& n, int node_index, int64_t t0_ms) {
    std::string lines;
    const double t0 = static_cast<double>(t0_ms) / 1000;
    if (!n.sent_node_record) {
      n.sent_node_record = true;
      lines += fmt::format(
          R"({{"t":{:.3f},"type":"node","node":"{}","driver_version":"550.90.07","cuda_version":"12.4","nccl_version":"2.21.5","clock_offset_ms":0.3,"gpus":[)",
          t0, n.name);
      for (int g = 0; g < gpus; ++g)
        lines += fmt::format(R"({}{{"index":{},"name":"NVIDIA H100 80GB HBM3"}})", g ? "," : "", g);
      lines += "]}\n";
      lines += fmt::format(
          R"({{"t":{:.3f},"type":"job","node":"{}","job":"job-{}","state":"start","template":"sim-llm","user":"u{}","project":"p{}","ranks":{},"gpus":[0,1,2,3,4,5,6,7]}})"
          "\n",
          t0, n.name, node_index / 2, node_index % 7, node_index % 3, 2 * gpus);
    }
    for (int k = 0; k < per_request_s; ++k) {
      const double t = t0 + k;
      for (int g = 0; g < gpus; ++g)
        lines += fmt::format(
            R"({{"t":{:.3f},"type":"gpu","node":"{}","gpu":{},"util_pct":97,"mem_util_pct":41,"sm_active":0.83,"mem_used_mib":61234,"temp_c":64,"power_w":612.4,"sm_clock_mhz":1980,"mem_clock_mhz":2619,"throttle":[],"pcie_tx_mbs":310.2,"pcie_rx_mbs":295.0,"nvlink_tx_mbs":41230.0,"nvlink_rx_mbs":41102.5,"ecc_sbe_volatile":0,"ecc_dbe_volatile":0}})"
            "\n",
            t, n.name, g);
      if (static_cast<int64_t>(t) % 5 == 0)
        lines += fmt::format(
            R"({{"t":{:.3f},"type":"host","node":"{}","cpu_pct":35.0,"iowait_pct":0.5,"load1":20.0,"mem_used_mib":402311,"mem_total_mib":2063592}})"
            "\n",
            t, n.name);
      const uint64_t step = static_cast<uint64_t>(t - static_cast<double>(start_ms) / 1000);
      for (int g = 0; g < gpus; ++g)
        lines += fmt::format(
            R"({{"t":{:.3f},"type":"step","node":"{}","job":"job-{}","rank":{},"gpu":{},"step":{},"duration_s":0.98,"samples":32,"data_wait_s":0.02,"comm_s":0.12,"checkpoint_s":0.0}})"
            "\n",
            t + 0.5, n.name, node_index / 2, (node_index % 2) * gpus + g, g, step);
    }
    std::string body = gpuwatch::store::SnappyCompress(lines);
    body.shrink_to_fit();
    return body;
  };

  if (pregenerate == "on") {
    // How long rendering takes, from one node's first tick (then rendered again for real):
    // the run starts that long from now, twice over, when the first bodies' timestamps are due.
    const auto t0 = Clock::now();
    {
      Node probe = fleet.empty() ? Node{} : fleet[0];
      make_write(probe, start_ms);
      if (with_records) make_records(probe, 0, start_ms);
    }
    const double one_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const double est_s = one_s * static_cast<double>(nodes) * static_cast<double>(ticks) / cores;
    start_ms = NowMs() + static_cast<int64_t>(2 * est_s * 1000) + 1000;
    std::atomic<size_t> next{0}, bytes{0};
    std::vector<std::thread> renderers;
    for (unsigned c = 0; c < cores; ++c)
      renderers.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < fleet.size();) {
          Node& n = fleet[i];
          for (int64_t k = 0; k < ticks; ++k) {
            const int64_t t0_ms = start_ms + k * interval_ms;
            n.writes.push_back(make_write(n, t0_ms));
            bytes += n.writes.back().size();
            if (with_records) {
              n.record_entries.push_back(make_records(n, static_cast<int>(i), t0_ms));
              bytes += n.record_entries.back().size();
            }
          }
        }
      });
    for (auto& t : renderers) t.join();
    const int64_t late_ms = NowMs() - start_ms;
    fmt::print(stderr, "rendered {} nodes x {} ticks: {:.0f} MiB in {:.1f} s{}\n", nodes, ticks,
               static_cast<double>(bytes) / (1 << 20),
               std::chrono::duration<double>(Clock::now() - t0).count(),
               late_ms > 0
                   ? fmt::format(" ({} ms late: the first requests' lag includes it)", late_ms)
                   : "");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(0, -late_ms)));
    start = Clock::now() - std::chrono::milliseconds(std::max<int64_t>(0, late_ms));
  }

  auto worker = [&](int w) {
    httplib::Client c(url);
    c.set_keep_alive(true);
    c.set_tcp_nodelay(true);
    c.set_connection_timeout(5);
    c.set_read_timeout(30);
    c.set_write_timeout(30);
    httplib::Headers auth;
    if (!tokens.empty())
      auth.emplace("Authorization", "Bearer " + tokens[static_cast<size_t>(w) % tokens.size()]);
    int64_t tick = 0;
    std::vector<double> lags, warmup_lags;
    uint64_t requests = 0, refused = 0, samples = 0, sent_records = 0;
    int64_t drained_ms = 0;
    bool saw_backlog = false;
    while (!stop.load()) {
      const auto due = start + std::chrono::milliseconds((tick + 1) * interval_ms);
      const int64_t t0_ms = start_ms + tick * interval_ms;
      ++tick;
      const bool generating =
          tick <= ticks && (Clock::now() - start) < std::chrono::seconds(seconds);
      bool backlog = false;
      for (int i = w; i < nodes; i += connections) {
        Node& n = fleet[static_cast<size_t>(i)];
        if (generating && !n.writes.empty()) {
          const auto k = static_cast<size_t>(tick - 1);
          n.pending.push_back({t0_ms, std::move(n.writes[k]), false, 0});
          if (with_records)
            n.pending.push_back({t0_ms, std::move(n.record_entries[k]), true, ++n.seq});
        } else if (generating) {
          n.pending.push_back({t0_ms, make_write(n, t0_ms), false, 0});
          if (with_records) n.pending.push_back({t0_ms, make_records(n, i, t0_ms), true, ++n.seq});
        }
        // Oldest first, as the spool does; at most 20 a node an interval while catching up.
        for (int sent = 0; sent < 20 && !n.pending.empty(); ++sent) {
          Request& r = n.pending.front();
          httplib::Headers h = auth;
          h.emplace("Content-Encoding", "snappy");
          if (r.records) {
            h.emplace("X-Gpuwatch-Node", n.name);
            h.emplace("X-Gpuwatch-Spool", n.spool);
            h.emplace("X-Gpuwatch-Seq", std::to_string(r.seq));
          }
          httplib::Result res = r.records
                                    ? c.Post("/api/v1/records", h, r.body, "application/x-ndjson")
                                    : c.Post("/api/v1/write", h, r.body, "application/x-protobuf");
          ++requests;
          if (!res || (res->status != 200 && res->status != 204)) {
            ++refused;
            if (res && res->status >= 400 && res->status < 500 && res->status != 429) {
              fmt::print(stderr, "{}: HTTP {}: {}\n", n.name, res->status,
                         res->body.substr(0, 200));
              n.pending.pop_front();  // not retried, as the agent
            }
            break;
          }
          (r.oldest_ms < start_ms + warmup * 1000 ? warmup_lags : lags)
              .push_back(static_cast<double>(NowMs() - r.oldest_ms));
          if (r.records) {
            ++sent_records;
          } else {
            samples += n.labels.size() * static_cast<size_t>(per_request_s);
            if (i == 0) node0_seconds += per_request_s;
          }
          n.pending.pop_front();
        }
        backlog = backlog || !n.pending.empty();
      }
      // The outage's backlog is gone: the first tick with nothing pending after the hub went
      // down (it is never empty while the hub is down: every tick adds).
      if (down_from >= 0 && Clock::now() - start > std::chrono::seconds(down_from)) {
        if (backlog) saw_backlog = true;
        if (!backlog && saw_backlog && drained_ms == 0) drained_ms = NowMs();
      }
      if (!generating && !backlog) break;
      if (!generating && Clock::now() - start > std::chrono::seconds(seconds + 900)) break;
      std::this_thread::sleep_until(due);
    }
    std::lock_guard<std::mutex> lock(stats.mu);
    stats.lag_ms.insert(stats.lag_ms.end(), lags.begin(), lags.end());
    stats.warmup_lag_ms.insert(stats.warmup_lag_ms.end(), warmup_lags.begin(), warmup_lags.end());
    stats.requests += requests;
    stats.refused += refused;
    stats.samples += samples;
    stats.records += sent_records;
    stats.last_pending_ms = std::max(stats.last_pending_ms, drained_ms);
  };
  const double hub_cpu0 = ProcessCpuSeconds(hub_pid);
  std::vector<std::thread> threads;
  for (int w = 0; w < connections; ++w) threads.emplace_back(worker, w);
  for (auto& t : threads) t.join();
  const double hub_cpu_s = ProcessCpuSeconds(hub_pid) - hub_cpu0;
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  auto quantile = [](std::vector<double>& v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
    return v[std::min(i, v.size() - 1)];
  };
  auto q = [&](double p) { return quantile(stats.lag_ms, p); };
  // -1: the backlog never drained within the run.
  const double drain_s =
      down_from < 0 ? 0
      : stats.last_pending_ms == 0
          ? -1
          : static_cast<double>(stats.last_pending_ms - start_ms) / 1000 - (down_from + down_for);
  fmt::print(stderr,
             "{} nodes, {:.0f} s: {} requests ({} refused), {} samples, {} record entries\n", nodes,
             wall_s, stats.requests, stats.refused, stats.samples, stats.records);
  fmt::print(
      "nodes={} series_per_node={} seconds={:.1f} samples={} samples_per_s={:.0f} "
      "record_entries={} requests={} refused={} lag_p50_ms={:.0f} lag_p99_ms={:.0f} "
      "lag_max_ms={:.0f} warmup_lag_p99_ms={:.0f} warmup_lag_max_ms={:.0f} drain_s={:.1f} "
      "hub_cpu_s={:.2f} node0_seconds={}\n",
      nodes, fleet.empty() ? 0 : fleet[0].labels.size(), wall_s, stats.samples,
      static_cast<double>(stats.samples) / std::min<double>(wall_s, seconds), stats.records,
      stats.requests, stats.refused, q(0.5), q(0.99), q(1.0), quantile(stats.warmup_lag_ms, 0.99),
      quantile(stats.warmup_lag_ms, 1.0), drain_s, hub_cpu_s, node0_seconds.load());
  return 0;
}
