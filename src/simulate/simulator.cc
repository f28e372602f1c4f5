#include "simulate/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "common/strings.h"

namespace gpuwatch::simulate {

namespace {

using nlohmann::json;

struct Model {
  std::string key, name;
  double max_sm_mhz, max_mem_mhz, mem_total_mib, tdp_w, idle_w;
  int pcie_gen;
  int nvlinks;
  double step_s;                                    // healthy compute+comm step at full clock
  double comm_share;                                // exposed comm share of a healthy step
  double job_mem_mib;                               // the job's steady memory per GPU
  std::vector<std::string> (*links)(int n, int i);  // GPU i's row of topo -m
};

std::vector<std::string> NvRow(int n, int i, int links) {
  std::vector<std::string> row;
  for (int j = 0; j < n; ++j) row.push_back(i == j ? "X" : "NV" + std::to_string(links));
  return row;
}
std::vector<std::string> PcieRow(int n, int i, int per_switch) {
  std::vector<std::string> row;
  for (int j = 0; j < n; ++j) {
    if (i == j) {
      row.push_back("X");
    } else if (i / per_switch == j / per_switch) {
      row.push_back("PIX");
    } else {
      row.push_back((i < n / 2) == (j < n / 2) ? "NODE" : "SYS");
    }
  }
  return row;
}

const Model kModels[] = {
    {"H100", "NVIDIA H100 80GB HBM3", 1980, 2619, 81559, 700, 70, 5, 18, 1.0, 0.12, 61000,
     [](int n, int i) { return NvRow(n, i, 18); }},
    {"A100", "NVIDIA A100-SXM4-80GB", 1410, 1593, 81920, 400, 55, 4, 12, 1.2, 0.12, 52000,
     [](int n, int i) { return NvRow(n, i, 12); }},
    {"L40S", "NVIDIA L40S", 2520, 9001, 46068, 350, 35, 4, 0, 1.4, 0.18, 27000,
     [](int n, int i) { return PcieRow(n, i, 2); }},
    {"4090", "NVIDIA GeForce RTX 4090", 2520, 10501, 24564, 450, 30, 4, 0, 1.3, 0.22, 19000,
     [](int n, int i) { return PcieRow(n, i, 4); }},
};

constexpr double kThrottleTempC = 85;  // sw_thermal above this
constexpr double kThermalTauS = 60;    // temperature's lag behind power
constexpr double kAmbientC = 30;
constexpr double kJobStartS = 20;  // after the trace starts
constexpr double kJobTailS = 60;   // the job ends this long before the trace
constexpr double kCheckpointEveryS = 300;

const std::vector<std::string> kKnown = {
    "healthy",        "thermal_throttle", "power_throttle",  "gpu_lost",      "ecc_dbe",
    "ecc_sbe_growth", "pcie_downgrade",   "pcie_replay",     "nvlink_errors", "nvlink_fallback",
    "data_stall",     "memory_leak",      "version_mismatch"};

struct GpuSim {
  double temp_c = 40, clock_mhz = 0, mem_mib = 0, energy_j = 0;
  double ambient_c = kAmbientC;
  double pcie_replay = 0, nvlink_crc = 0, sbe = 0, dbe = 0;
  int pcie_width = 16;
  bool lost = false;
  double power_limit_w = 0;
};

struct Line {
  double t;
  int order;  // stable within one instant: node, gpu, host, job, step, event, log
  std::string text;
};

std::string T(double t) { return fmt::format("{:.3f}", t); }

}  // namespace

const std::vector<std::string>& KnownFaults() { return kKnown; }

Result<FaultSpec> ParseFaultSpec(const std::string& text) {
  FaultSpec f;
  const size_t colon = text.find(':');
  f.cause = text.substr(0, colon);
  if (std::find(kKnown.begin(), kKnown.end(), f.cause) == kKnown.end()) {
    std::string list;
    for (const auto& k : kKnown) list += (list.empty() ? "" : ", ") + k;
    return Status::InvalidArgument("unknown fault '" + f.cause + "' (one of: " + list + ")");
  }
  if (colon == std::string::npos) return f;
  for (std::string_view kv : SplitAny(std::string_view(text).substr(colon + 1), ",")) {
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument("fault '" + text + "': expected key=value, got '" +
                                     std::string(kv) + "'");
    }
    const std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
    std::optional<double> num = ParseDouble(v);
    if (!num || !std::isfinite(*num) || *num < 0) {
      return Status::InvalidArgument("fault '" + text + "': " + std::string(k) +
                                     " must be a non-negative number");
    }
    if (k == "gpu") {
      f.gpu = static_cast<int>(*num);
    } else if (k == "node") {
      f.node = static_cast<int>(*num);
    } else if (k == "onset") {
      f.onset_s = *num;
    } else if (k == "severity") {
      f.severity = std::min(1.0, *num);
    } else {
      return Status::InvalidArgument("fault '" + text + "': unknown key '" + std::string(k) +
                                     "' (gpu, node, onset, severity)");
    }
  }
  return f;
}

Result<SimOutput> Simulate(const SimOptions& o) {
  const size_t x = o.shape.find_first_of("xX");
  std::optional<int> count =
      x == std::string::npos ? std::nullopt : ParseInt<int>(o.shape.substr(0, x));
  const Model* model = nullptr;
  for (const Model& m : kModels) {
    if (x != std::string::npos && ToLower(m.key) == ToLower(o.shape.substr(x + 1))) model = &m;
  }
  if (!count || *count < 1 || *count > 16 || model == nullptr) {
    return Status::InvalidArgument("bad shape '" + o.shape +
                                   "': <N>x<MODEL>, N 1..16, MODEL H100, A100, L40S or 4090");
  }
  if (o.nodes < 1 || o.nodes > 64) return Status::InvalidArgument("nodes must be 1..64");
  if (o.duration_s < 240 || o.duration_s > 7 * 86400) {
    return Status::InvalidArgument("duration must be 4 min .. 7 days");
  }
  const int n = *count;
  for (const FaultSpec& f : o.faults) {
    if (f.cause == "healthy") continue;
    if (f.node >= o.nodes || f.gpu >= n) {
      return Status::InvalidArgument(
          fmt::format("fault {}: node {} / gpu {} out of the shape", f.cause, f.node, f.gpu));
    }
    if (f.onset_s < kJobStartS + 60 || f.onset_s > o.duration_s - kJobTailS - 60) {
      return Status::InvalidArgument(
          fmt::format("fault {}: onset {} s must fall while the job runs steadily ({} .. {} s)",
                      f.cause, f.onset_s, kJobStartS + 60, o.duration_s - kJobTailS - 60));
    }
  }
  auto fault = [&](const std::string& cause, int node) -> const FaultSpec* {
    for (const FaultSpec& f : o.faults) {
      if (f.cause == cause && f.node == node) return &f;
    }
    return nullptr;
  };

  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> gauss(0, 1);
  std::uniform_real_distribution<double> uni(0, 1);
  std::vector<Line> lines;
  auto emit = [&](double t, int order, std::string text) {
    lines.push_back({t, order, std::move(text)});
  };
  std::map<std::pair<std::string, int>, json> truth;  // (cause, node) -> fault
  auto truth_at = [&](const FaultSpec& f, const std::string& node, double t, bool gpu,
                      const std::string& job) {
    auto key = std::make_pair(f.cause, f.node * 1000 + (gpu ? f.gpu : 0));
    if (truth.count(key) != 0) return;
    json j = {{"cause", f.cause}, {"node", node}, {"start", std::round(t * 1000) / 1000}};
    if (gpu) j["gpu"] = f.gpu;
    if (!job.empty()) j["job"] = job;
    j["end"] = o.start_unix_s + o.duration_s;
    truth[key] = j;
  };

  const double t0 = o.start_unix_s;
  const double job_start = t0 + kJobStartS, job_end = t0 + o.duration_s - kJobTailS;
  std::vector<std::string> names;
  for (int k = 0; k < o.nodes; ++k) names.push_back(fmt::format("sim-{}-{:02d}", model->key, k));
  const std::string job = fmt::format("sim-{}", o.seed % 100000);
  const std::string restarted = job + "-r";

  // Node records.
  for (int k = 0; k < o.nodes; ++k) {
    const FaultSpec* vm = fault("version_mismatch", k);
    json gpus = json::array();
    for (int i = 0; i < n; ++i) {
      gpus.push_back(
          {{"index", i},
           {"uuid", fmt::format("GPU-{:08x}-sim-{:02d}-{:02d}", o.seed & 0xffffffff, k, i)},
           {"name", model->name},
           {"pci_bus_id", fmt::format("00000000:{:02X}:00.0", 0x18 + 0x11 * i)},
           {"numa_node", n >= 4 ? (i < n / 2 ? 0 : 1) : 0},
           {"memory_total_mib", model->mem_total_mib},
           {"power_limit_w", model->tdp_w},
           {"max_sm_clock_mhz", model->max_sm_mhz},
           {"max_mem_clock_mhz", model->max_mem_mhz},
           {"pcie_max_gen", model->pcie_gen},
           {"pcie_max_width", 16},
           {"nvlink_count", model->nvlinks},
           {"mig_mode", false}});
    }
    json links = json::array();
    for (int i = 0; i < n; ++i) links.push_back(model->links(n, i));
    json rec = {
        {"t", t0},
        {"type", "node"},
        {"node", names[k]},
        {"driver_version", vm ? "535.104.05" : "550.90.07"},
        {"cuda_version", vm ? "12.2" : "12.4"},
        {"nccl_version", "2.21.5"},
        {"clock_offset_ms", std::round(gauss(rng) * 300) / 1000},
        {"gpus", gpus},
        {"topology", {{"gpu_links", links}}},
        {"nics",
         json::array(
             {{{"name", "mlx5_0"}, {"type", "ib"}, {"numa_node", 0}, {"link_gbps", 400}}})}};
    emit(t0, 0, rec.dump());
    if (vm && o.nodes > 1) truth_at(*vm, names[k], t0, false, "");
  }

  // The job (or, after an nvlink_fallback onset, its restart) on every node.
  struct JobRun {
    std::string id;
    double start, end;
    bool fallback;
  };
  std::vector<JobRun> runs;
  const FaultSpec* fb = nullptr;
  for (const FaultSpec& f : o.faults) {
    if (f.cause == "nvlink_fallback") fb = &f;
  }
  if (fb != nullptr) {
    runs.push_back({job, job_start, t0 + fb->onset_s - 10, false});
    runs.push_back({restarted, t0 + fb->onset_s, job_end, true});
  } else {
    runs.push_back({job, job_start, job_end, false});
  }
  std::optional<double> lost_t;  // a GPU fell off the bus: the job dies
  for (const FaultSpec& f : o.faults) {
    if (f.cause == "gpu_lost") lost_t = t0 + f.onset_s;
  }

  for (const JobRun& run : runs) {
    for (int k = 0; k < o.nodes; ++k) {
      json gpus = json::array();
      for (int i = 0; i < n; ++i) gpus.push_back(i);
      emit(run.start, 3,
           json{{"t", run.start},
                {"type", "job"},
                {"node", names[k]},
                {"job", run.id},
                {"state", "start"},
                {"template", "sim-llm-fsdp"},
                {"user", "sim"},
                {"project", "sim"},
                {"ranks", n * o.nodes},
                {"gpus", gpus}}
               .dump());
      if (run.fallback && fb->node == k) truth_at(*fb, names[k], run.start, false, "");
      // NCCL's view of the channels: NVLink pairs over P2P, or, with P2P off, over SHM.
      const double lt = run.start + 2;
      auto log = [&](double t, int rank, const std::string& line) {
        emit(t, 6,
             json{{"t", t},
                  {"type", "log"},
                  {"node", names[k]},
                  {"job", run.id},
                  {"rank", rank},
                  {"source", "nccl"},
                  {"line", line}}
                 .dump());
      };
      for (int i = 0; i < n; ++i) {
        const int rank = k * n + i;
        const std::string prefix =
            fmt::format("{}:{}:{} [{}] NCCL INFO ", names[k], 4000 + i, 4000 + i, i);
        log(lt, rank, prefix + "NCCL version 2.21.5+cuda12.4");
        log(lt + 0.1, rank,
            prefix + fmt::format("comm 0x7f00{:04x} rank {} nRanks {} nNodes {} localRanks {} "
                                 "localRank {} MNNVL 0",
                                 rank, rank, n * o.nodes, o.nodes, n, i));
        if (n > 1) {
          const int peer = (i + 1) % n;
          const std::string via =
              run.fallback ? "SHM/direct/direct"
                           : (model->nvlinks > 0 ? "P2P/CUMEM/read" : "SHM/direct/direct");
          for (int c = 0; c < 2; ++c) {
            log(lt + 0.2 + 0.01 * c, rank,
                prefix + fmt::format("Channel {:02d}/0 : {}[{}] -> {}[{}] via {}", c, rank, i,
                                     k * n + peer, peer, via));
          }
        }
        if (i == 0) log(lt + 0.5, rank, prefix + "Connected all rings");
      }
      const double end = lost_t ? std::min(run.end, *lost_t + 10) : run.end;
      if (end >= run.start) {
        emit(end, 3,
             json{{"t", end},
                  {"type", "job"},
                  {"node", names[k]},
                  {"job", run.id},
                  {"state", "end"},
                  {"exit_code", lost_t && end < run.end ? 1 : 0}}
                 .dump());
      }
    }
  }
  auto job_at = [&](double t) -> const JobRun* {
    for (const JobRun& r : runs) {
      const double end = lost_t ? std::min(r.end, *lost_t + 10) : r.end;
      if (t >= r.start && t < end) return &r;
    }
    return nullptr;
  };

  // GPUs, hosts and steps, tick by tick.
  std::vector<std::vector<GpuSim>> sims(o.nodes, std::vector<GpuSim>(n));
  for (auto& node : sims) {
    for (auto& g : node) {
      g.clock_mhz = model->max_sm_mhz;
      g.power_limit_w = model->tdp_w;
      g.energy_j = 3.6e6 * (1 + uni(rng));
    }
  }
  std::vector<double> next_step(o.nodes, job_start + 5);
  std::vector<uint64_t> step_no(o.nodes, 0);
  std::vector<double> last_checkpoint(o.nodes, job_start);
  std::vector<double> util_now(o.nodes, 0);  // compute share of the current step
  std::vector<double> data_share_now(o.nodes, 0.02);
  const std::string* current_job = nullptr;
  for (double tick = 0; tick < o.duration_s; tick += 1) {
    const double t = t0 + tick;
    const JobRun* run = job_at(t);
    current_job = run ? &run->id : nullptr;
    for (int k = 0; k < o.nodes; ++k) {
      const FaultSpec* stall = fault("data_stall", k);
      const bool stalled = stall && tick >= stall->onset_s;
      // Steps that end within this second.
      // A GPU that fell off the bus stops the collective: no rank finishes a step after it.
      while (run && next_step[k] < t + 1 && next_step[k] >= run->start &&
             !(lost_t && next_step[k] >= *lost_t)) {
        const double ts = next_step[k];
        double slowest = model->max_sm_mhz;
        for (const GpuSim& g : sims[k]) {
          if (!g.lost) slowest = std::min(slowest, g.clock_mhz);
        }
        const double warm = step_no[k] < 20 ? 1.5 - step_no[k] * 0.025 : 1.0;
        const double compute = model->step_s * (1 - model->comm_share) * warm *
                               (model->max_sm_mhz / std::max(100.0, slowest));
        const double comm = model->step_s * model->comm_share * (run->fallback ? 3.0 : 1.0);
        double data = model->step_s * 0.02 * (1 + 0.3 * std::fabs(gauss(rng)));
        if (stalled)
          data = (compute + comm) * (0.6 + 0.6 * stall->severity) * (0.8 + 0.4 * uni(rng));
        double ckpt = 0;
        if (ts - last_checkpoint[k] >= kCheckpointEveryS) {
          ckpt = 6 + 2 * uni(rng);
          last_checkpoint[k] = ts;
        }
        const double dur = (compute + comm + data + ckpt) * (1 + 0.01 * gauss(rng));
        if (stalled && !truth.count({"data_stall", k * 1000})) {
          truth_at(*stall, names[k], std::floor(ts * 1000) / 1000, false, run->id);
        }
        util_now[k] = compute / dur;
        data_share_now[k] = data / dur;
        for (int i = 0; i < n; ++i) {
          if (sims[k][i].lost) continue;
          // Times to the millisecond, as the writer writes them (the truth uses the same).
          const double ts_ms = std::round((ts + 0.002 * uni(rng)) * 1000) / 1000;
          json st = {{"t", ts_ms},
                     {"type", "step"},
                     {"node", names[k]},
                     {"job", run->id},
                     {"rank", k * n + i},
                     {"gpu", i},
                     {"step", step_no[k]},
                     {"duration_s", std::round(dur * 1e4) / 1e4},
                     {"samples", 32},
                     {"data_wait_s", std::round(data * 1e4) / 1e4},
                     {"comm_s", std::round(comm * 1e4) / 1e4},
                     {"checkpoint_s", std::round(ckpt * 1e4) / 1e4}};
          emit(ts_ms, 4, st.dump());
        }
        ++step_no[k];
        next_step[k] = ts + dur;
      }
      if (run && next_step[k] < run->start) next_step[k] = run->start + 5;
      if (!run) util_now[k] = 0;

      // GPU samples.
      for (int i = 0; i < n; ++i) {
        GpuSim& g = sims[k][i];
        if (g.lost) continue;
        auto fault_here = [&](const char* cause) -> const FaultSpec* {
          const FaultSpec* f = fault(cause, k);
          return f && f->gpu == i && tick >= f->onset_s ? f : nullptr;
        };
        if (const FaultSpec* f = fault_here("gpu_lost")) {
          g.lost = true;
          emit(t, 5,
               json{{"t", t},
                    {"type", "event"},
                    {"node", names[k]},
                    {"gpu", i},
                    {"kind", "xid"},
                    {"code", 79},
                    {"message", "GPU has fallen off the bus"}}
                   .dump());
          truth_at(*f, names[k], t, true, "");
          continue;
        }
        const bool busy = run != nullptr;
        double util = busy ? std::clamp(util_now[k] * 100 + 2 * gauss(rng), 0.0, 100.0) : 0;
        if (busy && stalled) util *= 0.9;
        // Thermal: the cooling of a GPU degrades; its steady temperature climbs.
        if (const FaultSpec* f = fault_here("thermal_throttle")) {
          g.ambient_c =
              kAmbientC + std::min(1.0, (tick - f->onset_s) / 60) * (20 + 15 * f->severity);
        }
        if (const FaultSpec* f = fault_here("power_throttle")) {
          g.power_limit_w = model->tdp_w * (0.75 - 0.25 * f->severity);
        }
        double power =
            model->idle_w + (model->tdp_w - model->idle_w) * util / 100 * (0.9 + 0.05 * gauss(rng));
        std::vector<std::string> throttle;
        double clock = busy ? model->max_sm_mhz : model->max_sm_mhz * 0.1;
        if (busy && power > g.power_limit_w) {
          clock *= g.power_limit_w / power;
          power = g.power_limit_w;
          throttle.push_back("sw_power_cap");
        } else if (busy && util > 90 && uni(rng) < 0.03) {
          throttle.push_back("sw_power_cap");  // a one-sample flicker at full load
        }
        // Steady temperature: ambient plus a rise proportional to the share of TDP drawn
        // (about 80 °C at full load with healthy cooling).
        const double target = g.ambient_c + 55 * power / model->tdp_w;
        g.temp_c += (target - g.temp_c) * (1 - std::exp(-1.0 / kThermalTauS));
        if (g.temp_c > kThrottleTempC && busy) {
          clock *= std::max(0.5, 1 - (g.temp_c - kThrottleTempC) * 0.08);
          throttle.push_back("sw_thermal");
          if (const FaultSpec* f = fault_here("thermal_throttle")) {
            truth_at(*f, names[k], t, true, "");
          }
        }
        if (const FaultSpec* f = fault_here("power_throttle");
            f && busy &&
            std::find(throttle.begin(), throttle.end(), "sw_power_cap") != throttle.end()) {
          truth_at(*f, names[k], t, true, "");
        }
        g.clock_mhz = clock;
        g.energy_j += power;
        // Memory: the job's allocations ramp over the first minute, then hold; a leak adds an
        // allocator-sized chunk at intervals from its onset.
        const double job_age = run ? t - run->start : 0;
        const double steady = model->job_mem_mib * (0.95 + 0.01 * i);
        double mem = run ? std::min(1.0, job_age / 60) * steady : 500;
        if (const FaultSpec* f = fault_here("memory_leak"); f && run) {
          const double since = tick - f->onset_s;
          const double chunk = 512 * (1 + f->severity);
          const double interval = 20;
          g.mem_mib = std::max(g.mem_mib, mem);
          if (std::fmod(since, interval) < 1) {
            g.mem_mib = std::min(g.mem_mib + chunk, model->mem_total_mib * 0.97);
            truth_at(*f, names[k], t, false, run->id);
          }
          mem = g.mem_mib;
        } else {
          g.mem_mib = mem;
        }
        // Counters.
        auto every = [&](const char* cause, double period) -> const FaultSpec* {
          const FaultSpec* f = fault_here(cause);
          if (!f) return nullptr;
          const double p = period * (1.5 - f->severity);
          return std::fmod(tick - f->onset_s, p) < 1 ? f : nullptr;
        };
        if (const FaultSpec* f = every("pcie_replay", 10)) {
          g.pcie_replay += 1 + std::floor(5 * f->severity * uni(rng));
          truth_at(*f, names[k], t, true, "");
        }
        if (const FaultSpec* f = every("nvlink_errors", 10)) {
          g.nvlink_crc += 1 + std::floor(5 * f->severity * uni(rng));
          truth_at(*f, names[k], t, true, "");
        }
        if (const FaultSpec* f = every("ecc_sbe_growth", 20)) {
          g.sbe += 1;
          truth_at(*f, names[k], t, true, "");
        }
        if (const FaultSpec* f = fault_here("ecc_dbe"); f && g.dbe == 0) {
          g.dbe = 1;
          emit(t, 5,
               json{{"t", t},
                    {"type", "event"},
                    {"node", names[k]},
                    {"gpu", i},
                    {"kind", "xid"},
                    {"code", 48},
                    {"message", "An uncorrectable double bit error (DBE) has been detected"}}
                   .dump());
          truth_at(*f, names[k], t, true, "");
        }
        if (const FaultSpec* f = fault_here("pcie_downgrade")) {
          g.pcie_width = 8;
          truth_at(*f, names[k], t, true, "");
        }
        json rec = {{"t", t},
                    {"type", "gpu"},
                    {"node", names[k]},
                    {"gpu", i},
                    {"util_pct", std::round(util)},
                    {"mem_util_pct", std::round(util * 0.4)},
                    {"mem_used_mib", std::round(mem)},
                    {"temp_c", std::round(g.temp_c * 10) / 10},
                    {"power_w", std::round(power * 10) / 10},
                    {"energy_j", std::round(g.energy_j)},
                    {"sm_clock_mhz", std::round(clock)},
                    {"mem_clock_mhz", model->max_mem_mhz},
                    {"throttle", throttle},
                    {"pcie_tx_mbs", std::round(300 * util / 100 + 5)},
                    {"pcie_rx_mbs", std::round(280 * util / 100 + 5)},
                    {"pcie_gen", busy ? model->pcie_gen : 1},
                    {"pcie_width", g.pcie_width},
                    {"pcie_replay", g.pcie_replay},
                    {"ecc_sbe_volatile", g.sbe},
                    {"ecc_dbe_volatile", g.dbe},
                    {"retired_pages", 0}};
        if (model->nvlinks > 0) {
          const bool fallback = run && run->fallback;
          rec["nvlink_tx_mbs"] = busy && !fallback ? std::round(40000 * util / 100) : 0;
          rec["nvlink_rx_mbs"] = busy && !fallback ? std::round(39800 * util / 100) : 0;
          rec["nvlink_active_links"] = model->nvlinks;
          rec["nvlink_crc_errors"] = g.nvlink_crc;
          rec["nvlink_replay"] = 0;
          rec["nvlink_recovery"] = 0;
        }
        emit(t, 1, rec.dump());
      }
      // Host every 5 s: iowait follows the data stall.
      if (std::fmod(tick, 5) < 1) {
        const double iowait = stalled && run ? 15 + 10 * uni(rng) : 0.5 + 0.5 * uni(rng);
        emit(t, 2,
             json{{"t", t},
                  {"type", "host"},
                  {"node", names[k]},
                  {"cpu_pct", std::round((run ? 35 : 3) + 3 * gauss(rng))},
                  {"iowait_pct", std::round(iowait * 10) / 10},
                  {"mem_used_mib", 402311},
                  {"mem_total_mib", 2063592},
                  {"load1", run ? 41.2 : 1.0}}
                 .dump());
      }
    }
  }
  (void)current_job;
  std::stable_sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) {
    return a.t != b.t ? a.t < b.t : a.order < b.order;
  });
  SimOutput out;
  out.trace_lines.reserve(lines.size());
  for (Line& l : lines) out.trace_lines.push_back(std::move(l.text));
  json faults = json::array();
  for (auto& [key, f] : truth) faults.push_back(f);
  std::sort(faults.begin(), faults.end(),
            [](const json& a, const json& b) { return a["start"] < b["start"]; });
  out.truth_json = json{{"faults", faults}}.dump(1) + "\n";
  return out;
}

}  // namespace gpuwatch::simulate
