#include "cluster_sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <tuple>

#include "common/strings.h"
#include "model/gpu_models.h"

namespace gpuwatch::cluster_sim {

namespace {

using nlohmann::json;

// What a training job does on a model (the model's limits are the shared table's,
// model/gpu_models.h): its healthy step, exposed comm share, memory, and the topology rows.
struct Model {
  const model::GpuModelSpec& spec;
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
    {*model::GpuModelByKey("H100"), 1.0, 0.12, 61000, [](int n, int i) { return NvRow(n, i, 18); }},
    {*model::GpuModelByKey("A100"), 1.2, 0.12, 52000, [](int n, int i) { return NvRow(n, i, 12); }},
    {*model::GpuModelByKey("L40S"), 1.4, 0.18, 27000,
     [](int n, int i) { return PcieRow(n, i, 2); }},
    {*model::GpuModelByKey("4090"), 1.3, 0.22, 19000,
     [](int n, int i) { return PcieRow(n, i, 4); }},
};

constexpr double kThrottleTempC = 85;  // sw_thermal above this
constexpr double kThermalTauS = 60;    // temperature's lag behind power
constexpr double kAmbientC = 30;
constexpr double kJobStartS = 20;  // after the trace starts
constexpr double kJobTailS = 60;   // the job ends this long before the trace
constexpr double kCheckpointEveryS = 150;
constexpr double kProcEveryS = 5;        // process rounds (the agent's --process-interval)
constexpr double kNicGbps = 400;         // one IB NIC per node
constexpr double kWatchdogS = 600;       // a hung job is killed by its NCCL watchdog after this
constexpr double kTeardownS = 30;        // after a rank dies, the launcher tears the job down
constexpr double kIdleAllocatedS = 600;  // findings.md: idle this long is gpu_idle_allocated
constexpr double kRebootDownS = 180;     // a reboot: the node writes nothing for this long …
constexpr double kRebootJobS = 30;       // … and its next job starts this long after it is back
constexpr double kPreprocessS = 300;     // preprocess_idle: the GPUs wait this long for data
constexpr double kEvalEveryS = 300;      // eval: an evaluation this often …
constexpr double kEvalS = 120;           // … this long

using model::Cause;
constexpr Planter kPlanters[] = {
    {Cause::kDataStall, Planting::kWhileRunning, true, ""},
    {Cause::kCheckpointStall, Planting::kWhileRunning, true, ""},
    {Cause::kMemoryLeak, Planting::kWhileRunning, true, ""},
    {Cause::kJobHang, Planting::kWhileRunning, true, ""},
    {Cause::kRankExit, Planting::kWhileRunning, true, ""},
    {Cause::kStepRegression, Planting::kWhileRunning, true, ""},
    {Cause::kThermalThrottle, Planting::kWhileRunning, true, ""},
    {Cause::kPowerThrottle, Planting::kWhileRunning, true, ""},
    {Cause::kClockSlowdown, Planting::kWhileRunning, true, ""},
    {Cause::kStragglerGpu, Planting::kWhileRunning, true, ""},
    {Cause::kEccSbeGrowth, Planting::kWhileRunning, true, ""},
    {Cause::kEccDbe, Planting::kWhileRunning, true, ""},
    {Cause::kXid, Planting::kWhileRunning, true, ""},
    {Cause::kGpuLost, Planting::kWhileRunning, true, ""},
    {Cause::kNvlinkFallback, Planting::kRestart, false, ""},
    {Cause::kNetFallback, Planting::kRestart, false, ""},
    {Cause::kNvlinkErrors, Planting::kWhileRunning, true, ""},
    {Cause::kPcieDowngrade, Planting::kWhileRunning, true, ""},
    {Cause::kPcieReplay, Planting::kWhileRunning, true, ""},
    {Cause::kNetCongestion, Planting::kBetweenNodes, false, ""},
    // The demo's NICs are the real host's.
    {Cause::kNetErrors, Planting::kWhileRunning, false, ""},
    {Cause::kNumaMismatch, Planting::kRestart, false, ""},
    // The demo's topology is the real host's probe.
    {Cause::kTopologyChange, Planting::kWhileRunning, false, ""},
    {Cause::kClockSkew, Planting::kBetweenNodes, false, ""},
    {Cause::kVersionMismatch, Planting::kBetweenNodes, false, ""},
    {Cause::kGpuIdleAllocated, Planting::kRestart, false, ""},
};

// The shapes real machines give each fault, from docs/research/ (launchers.md, xid.md,
// clock-reasons.md, failure-shapes.md), and the healthy runs that look like faults.
constexpr Variant kVariants[] = {
    {"rank_exit", "torchrun",
     "the rank raises and exits 1; torchrun SIGTERMs the others within seconds and prints "
     "failed (exitcode: 1) and its ChildFailedError table; the job ends with exit 1"},
    {"rank_exit", "oom_kill",
     "the kernel's OOM killer takes the rank (Killed process …); torchrun reports exit -9"},
    {"xid", "kernel_only",
     "the XID reaches only the kernel log (NVRM: Xid …), no NVML event; an application XID "
     "(13, 31) kills the rank and the job is torn down, a GSP/PMU one (62, 119) hangs it until "
     "the NCCL watchdog"},
    {"gpu_lost", "kernel_only",
     "XID 79 and 'GPU has fallen off the bus' only in the kernel log; the GPU's samples stop; its "
     "rank dies with a CUDA error and torchrun tears the job down"},
    {"ecc_dbe", "kernel_only", "XID 48 only in the kernel log, with the DBE counter rising"},
    {"topology_change", "reboot",
     "the job ends, the node reboots (no records), and comes back with a GPU missing"},
    {"topology_change", "swap",
     "the job ends, the node is powered off, a GPU is swapped (another UUID in the same slot) and "
     "its NIC moves to the other socket"},
    {"thermal_throttle", "hw",
     "HW Thermal Slowdown with its umbrella HW Slowdown bit, the clock halved"},
    {"power_throttle", "brake",
     "HW Power Brake Slowdown with HW Slowdown (an external brake signal), the clock halved"},
    {"clock_slowdown", "app_clocks",
     "an administrator's applications clock (nvidia-smi -ac) holds the GPU at 60-75 % of its "
     "maximum: 'Applications Clocks Setting'"},
    {"job_hang", "watchdog",
     "a rank stops outside its collective; ten minutes later ProcessGroupNCCL's watchdog times "
     "out on every rank and torchrun reports them failed with SIGABRT"},
    {"gpu_idle_allocated", "procs",
     "the scheduler's record names no GPUs; a process of the job holds the idle GPU"},
    {"step_regression", "slow_steps", "a job that steps every 5 s slows by a third"},
    {"healthy", "cancelled",
     "the scheduler cancels the job: torchrun receives SIGTERM and shuts its workers down"},
    {"healthy", "eval", "a two-minute evaluation every five minutes: no steps, busy GPUs"},
    {"healthy", "cache_refill",
     "the allocator's cache is emptied at each checkpoint and refilled in 2 GiB steps"},
    {"healthy", "reboot_same",
     "the node reboots between two jobs and comes back with the same hardware, its NIC renamed"},
    {"healthy", "app_clocks_default",
     "'Applications Clocks Setting' active at the GPU's full clock"},
    {"healthy", "preprocess_idle", "the job holds its GPUs idle for 5 minutes before stepping"},
    {"healthy", "hw_slowdown_blips", "one- or two-sample HW Slowdown blips at clock changes"},
    {"healthy", "xid_teardown",
     "the job ends and the driver logs XID 45 (channels torn down) as its processes exit"},
};

bool HasVariant(const std::string& cause, const std::string& variant) {
  for (const Variant& v : kVariants) {
    if (v.cause == cause && v.name == variant) return true;
  }
  return false;
}

std::vector<std::string> KnownNames() {
  std::vector<std::string> out = {"healthy"};
  for (const Planter& p : kPlanters) {
    if (p.how != Planting::kNone) out.emplace_back(model::CauseName(p.cause));
  }
  return out;
}
const std::vector<std::string> kKnown = KnownNames();

// Faults that come with a restart of the job (the truth's start is the new job's start).
bool IsRestartFault(const std::string& cause) {
  for (const Planter& p : kPlanters) {
    if (p.how == Planting::kRestart && model::CauseName(p.cause) == cause) return true;
  }
  return false;
}

struct GpuSim {
  double temp_c = 40, clock_mhz = 0, mem_mib = 0, energy_j = 0;
  double ambient_c = kAmbientC;
  double pcie_replay = 0, nvlink_crc = 0, sbe = 0, dbe = 0;
  int pcie_width = 16;
  bool lost = false;
  double power_limit_w = 0;
  double util = 0;  // compute share of the latest step
};

struct Line {
  double t;
  int order;  // stable within one instant: node, gpu, host/proc, job, step, event, log
  std::string text;
};

}  // namespace

std::span<const Planter> Planters() { return kPlanters; }
std::span<const Variant> Variants() { return kVariants; }
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
    if (k == "variant") {
      f.variant = std::string(v);
      if (!HasVariant(f.cause, f.variant)) {
        std::string list;
        for (const Variant& x : kVariants) {
          if (x.cause == f.cause) list += (list.empty() ? "" : ", ") + std::string(x.name);
        }
        return Status::InvalidArgument("fault '" + text + "': unknown variant '" + f.variant +
                                       "' of " + f.cause + " (" +
                                       (list.empty() ? "it has none" : list) + ")");
      }
      continue;
    }
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
                                     "' (gpu, node, onset, severity, variant)");
    }
  }
  return f;
}

Result<SimOutput> Simulate(const SimOptions& o) {
  const size_t x = o.shape.find_first_of("xX");
  // 0 when absent or not a number (a plain int: GCC's -O1 flow analysis misreads an optional
  // here as maybe uninitialised).
  const int count = x == std::string::npos ? 0 : ParseInt<int>(o.shape.substr(0, x)).value_or(0);
  const Model* model = nullptr;
  for (const Model& m : kModels) {
    if (x != std::string::npos && ToLower(m.spec.key) == ToLower(o.shape.substr(x + 1))) model = &m;
  }
  if (count < 1 || count > 16 || model == nullptr) {
    return Status::InvalidArgument("bad shape '" + o.shape +
                                   "': <N>x<MODEL>, N 1..16, MODEL H100, A100, L40S or 4090");
  }
  if (o.nodes < 1 || o.nodes > 64) return Status::InvalidArgument("nodes must be 1..64");
  if (o.duration_s < 240 || o.duration_s > 7 * 86400) {
    return Status::InvalidArgument("duration must be 4 min .. 7 days");
  }
  const int n = count;
  const double t0 = o.start_unix_s;
  const double job_start = t0 + kJobStartS, job_end = t0 + o.duration_s - kJobTailS;
  std::optional<double> restart_t;  // one restart carries every restart fault
  std::optional<double> reboot_t;   // a node back from a reboot (its node record's time)
  int reboot_node = 0;
  for (const FaultSpec& f : o.faults) {
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument(fmt::format("fault {}: {}", f.cause, why));
    };
    const bool reboot = f.variant == "reboot" || f.variant == "swap" || f.variant == "reboot_same";
    if (reboot) {
      if (restart_t || reboot_t) return bad("a reboot is the trace's one restart");
      if (f.onset_s < kJobStartS + 60 + kRebootDownS ||
          f.onset_s > o.duration_s - kJobTailS - 240) {
        return bad("a reboot must leave a job before and after it");
      }
      reboot_t = t0 + f.onset_s;
      reboot_node = f.node;
      restart_t = *reboot_t + kRebootJobS;
    }
    if (f.cause == "healthy") continue;
    if (f.node >= o.nodes || f.gpu >= n) {
      return bad(fmt::format("node {} / gpu {} out of the shape", f.node, f.gpu));
    }
    double latest = o.duration_s - kJobTailS - 60;
    if (f.cause == "gpu_idle_allocated") latest -= kIdleAllocatedS;
    if (f.onset_s < kJobStartS + 60 || f.onset_s > latest) {
      return bad(fmt::format("onset {} s must fall while the job runs steadily ({} .. {} s)",
                             f.onset_s, kJobStartS + 60, latest));
    }
    if ((f.cause == "net_fallback" || f.cause == "net_congestion") && o.nodes < 2) {
      return bad("needs at least 2 nodes (traffic between nodes)");
    }
    if ((f.cause == "clock_skew" || f.cause == "version_mismatch") && o.nodes < 2) {
      return bad("needs at least 2 nodes to compare");
    }
    if (f.cause == "clock_skew" && o.nodes == 2 && f.node == 0) {
      return bad("with 2 nodes the skewed one must be node 1 (node 0 holds rank 0, the reference)");
    }
    if (f.cause == "numa_mismatch" && n < 4) return bad("needs a shape with two NUMA nodes");
    if ((f.cause == "nvlink_errors" || f.cause == "nvlink_fallback") &&
        model->spec.nvlink_count == 0) {
      return bad(fmt::format("the {} has no NVLink", model->spec.name));
    }
    // A fallback is seen in how NCCL connects a node's GPUs to each other.
    if (f.cause == "nvlink_fallback" && n < 2) return bad("needs 2 GPUs or more a node");
    if (IsRestartFault(f.cause)) {
      if (reboot_t) return bad("a reboot is the trace's one restart");
      if (restart_t && *restart_t != t0 + f.onset_s) {
        return bad("every restart fault (fallbacks, NUMA, idle GPUs) must share one onset");
      }
      restart_t = t0 + f.onset_s;
    }
  }
  auto fault = [&](const std::string& cause, int node) -> const FaultSpec* {
    for (const FaultSpec& f : o.faults) {
      if (f.cause == cause && f.node == node) return &f;
    }
    return nullptr;
  };
  auto any_fault = [&](const std::string& cause) -> const FaultSpec* {
    for (const FaultSpec& f : o.faults) {
      if (f.cause == cause) return &f;
    }
    return nullptr;
  };
  // The variant of `cause` planted ("" for the classic shape or none), and a healthy confounder.
  auto variant_of = [&](const std::string& cause) -> std::string {
    const FaultSpec* f = any_fault(cause);
    return f ? f->variant : "";
  };
  auto confounder = [&](const std::string& name) -> const FaultSpec* {
    for (const FaultSpec& f : o.faults) {
      if (f.cause == "healthy" && f.variant == name) return &f;
    }
    return nullptr;
  };
  // Draws for the variants come from their own generator, so a classic scenario of a seed is
  // the same trace it always was.
  std::mt19937_64 vrng(o.seed ^ 0x5eedf00dULL);
  std::uniform_real_distribution<double> vuni(0, 1);

  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> gauss(0, 1);
  std::uniform_real_distribution<double> uni(0, 1);
  std::vector<std::string> names;
  for (int k = 0; k < o.nodes; ++k)
    names.push_back(fmt::format("sim-{}-{:02d}", model->spec.key, k));

  // A skewed node writes every record with its own clock's time (the README's convention).
  const FaultSpec* skew = any_fault("clock_skew");
  const double skew_s = skew ? (0.15 + 0.85 * skew->severity) * (o.seed % 2 == 0 ? 1 : -1) : 0;
  auto shifted = [&](int k, double t) {
    return skew && skew->node == k && t >= t0 + skew->onset_s ? t + skew_s : t;
  };
  std::vector<Line> lines;
  auto emit = [&](int k, double t, int order, json j) {
    const double at = std::round(shifted(k, t) * 1000) / 1000;
    j["t"] = at;
    lines.push_back({at, order, j.dump()});
  };
  std::map<std::tuple<std::string, int, int>, json> truth;  // (cause, node, gpu) -> fault
  struct Place {
    std::optional<int> gpu = std::nullopt;
    std::string job = {};
    std::optional<int> rank = std::nullopt;
    std::string nic = {};
  };
  auto truth_at = [&](const std::string& cause, int k, double t, const Place& p) {
    auto key = std::make_tuple(cause, k, p.gpu.value_or(-1));
    if (truth.count(key) != 0) return;
    json j = {{"cause", cause}, {"node", names[k]}, {"start", std::round(t * 1000) / 1000}};
    if (p.gpu) j["gpu"] = *p.gpu;
    if (!p.job.empty()) j["job"] = p.job;
    if (p.rank) j["rank"] = *p.rank;
    if (!p.nic.empty()) j["nic"] = p.nic;
    j["end"] = t0 + o.duration_s;
    truth[key] = j;
  };
  auto numa_of = [&](int i) { return n >= 4 ? (i < n / 2 ? 0 : 1) : 0; };

  // Node records: each node's at the start, and the rebooted node's when it is back. A reboot
  // that changed the hardware (docs/research/failure-shapes.md §1) loses a GPU (reboot), or
  // brings another board into the same slot and the NIC onto the other socket (swap); a plain
  // one renames the NIC (mlx5_N follows probe order) and changes nothing else.
  const FaultSpec* reboot_fault = nullptr;
  for (const FaultSpec& f : o.faults) {
    if (f.variant == "reboot" || f.variant == "swap" || f.variant == "reboot_same") {
      reboot_fault = &f;
    }
  }
  const std::string reboot_kind = reboot_fault ? reboot_fault->variant : "";
  const int gone_gpu = reboot_kind == "reboot" ? reboot_fault->gpu : -1;  // missing after it
  std::vector<std::string> nic_name(o.nodes, "mlx5_0");
  std::vector<json> node_records(o.nodes);
  for (int k = 0; k < o.nodes; ++k) {
    const FaultSpec* vm = fault("version_mismatch", k);
    json gpus = json::array();
    for (int i = 0; i < n; ++i) {
      gpus.push_back(
          {{"index", i},
           {"uuid", fmt::format("GPU-{:08x}-sim-{:02d}-{:02d}", o.seed & 0xffffffff, k, i)},
           {"name", model->spec.name},
           {"pci_bus_id", fmt::format("00000000:{:02X}:00.0", 0x18 + 0x11 * i)},
           {"numa_node", numa_of(i)},
           {"memory_total_mib", model->spec.memory_total_mib},
           {"power_limit_w", model->spec.power_limit_w},
           {"max_sm_clock_mhz", model->spec.max_sm_clock_mhz},
           {"max_mem_clock_mhz", model->spec.max_mem_clock_mhz},
           {"pcie_max_gen", model->spec.pcie_gen},
           {"pcie_max_width", 16},
           {"nvlink_count", model->spec.nvlink_count},
           {"mig_mode", false}});
    }
    json links = json::array();
    for (int i = 0; i < n; ++i) links.push_back(model->links(n, i));
    json nic = {{"name", "mlx5_0"}, {"type", "ib"}, {"numa_node", 0}, {"link_gbps", kNicGbps}};
    // The NIC's own bus id, where the variants need it (the classic traces never had one).
    if (!reboot_kind.empty()) nic["pci_bus_id"] = "00000000:1A:00.0";
    node_records[k] = {{"type", "node"},
                       {"node", names[k]},
                       {"driver_version", vm ? "535.104.05" : "550.90.07"},
                       {"cuda_version", vm ? "12.2" : "12.4"},
                       {"nccl_version", "2.21.5"},
                       {"clock_offset_ms", std::round(gauss(rng) * 300) / 1000},
                       {"gpus", gpus},
                       {"topology", {{"gpu_links", links}}},
                       {"nics", json::array({nic})}};
    emit(k, t0, 0, node_records[k]);
    if (vm) truth_at("version_mismatch", k, t0, {});
  }
  if (reboot_t) {
    const int k = reboot_node;
    json back = node_records[k];
    if (reboot_kind == "reboot") {
      // The GPU did not come back: gone from the list and from the link matrix.
      json gpus = json::array(), links = json::array();
      for (int i = 0; i < n; ++i) {
        if (i == gone_gpu) continue;
        gpus.push_back(back["gpus"][i]);
        json row = json::array();
        for (int j = 0; j < n; ++j) {
          if (j != gone_gpu) row.push_back(back["topology"]["gpu_links"][i][j]);
        }
        links.push_back(row);
      }
      back["gpus"] = gpus;
      back["topology"]["gpu_links"] = links;
    } else if (reboot_kind == "swap") {
      back["gpus"][reboot_fault->gpu]["uuid"] = fmt::format(
          "GPU-{:08x}-swap-{:02d}-{:02d}", (o.seed * 7) & 0xffffffff, k, reboot_fault->gpu);
      back["nics"][0]["pci_bus_id"] = "00000000:9C:00.0";
      back["nics"][0]["numa_node"] = n >= 4 ? 1 : 0;
    } else {
      nic_name[k] = "mlx5_1";
      back["nics"][0]["name"] = nic_name[k];
    }
    emit(k, *reboot_t, 0, back);
    if (reboot_kind != "reboot_same") truth_at("topology_change", k, *reboot_t, {});
  }
  // Whether node k writes nothing at t (it is rebooting).
  auto down = [&](int k, double t) {
    return reboot_t && k == reboot_node && t >= *reboot_t - kRebootDownS && t < *reboot_t;
  };

  // The job, or two: before and after a restart that brings a restart fault.
  struct JobRun {
    std::string id;
    double start, end;
    int pid_base;
    std::set<int> nvlink_fallback = {};  // nodes whose NCCL connects NVLink pairs over SHM
    bool net_socket = false;
    std::set<std::pair<int, int>> numa_bad = {};  // (node, gpu) ranks bound to the far node
    std::optional<std::pair<int, int>> idle_gpu = std::nullopt;  // held, used by no rank
    bool gpus_unnamed = false;  // the start record names no GPUs (the scheduler gives none)
  };
  const std::string job = fmt::format("sim-{}", o.seed % 100000);
  std::vector<JobRun> runs;
  if (restart_t) {
    // Before a reboot the job ends before the node goes down.
    runs.push_back(
        {job, job_start, reboot_t ? *reboot_t - kRebootDownS - 20 : *restart_t - 10, 4000});
    JobRun r{job + "-r", *restart_t, job_end, 6000};
    for (const FaultSpec& f : o.faults) {
      if (f.cause == "nvlink_fallback") r.nvlink_fallback.insert(f.node);
      if (f.cause == "net_fallback") r.net_socket = true;
      if (f.cause == "numa_mismatch") r.numa_bad.insert({f.node, f.gpu});
      if (f.cause == "gpu_idle_allocated") {
        r.idle_gpu = {f.node, f.gpu};
        r.gpus_unnamed = f.variant == "procs";
      }
    }
    runs.push_back(r);
  } else {
    runs.push_back({job, job_start, job_end, 4000});
  }
  // What stops every rank's steps: a lost GPU, a hang, a dead rank; and when the job then ends.
  auto onset_of = [&](const char* cause) -> std::optional<double> {
    const FaultSpec* f = any_fault(cause);
    return f ? std::optional<double>(t0 + f->onset_s) : std::nullopt;
  };
  const std::optional<double> lost_t = onset_of("gpu_lost");
  const std::optional<double> hang_t = onset_of("job_hang");
  const std::optional<double> exit_t = onset_of("rank_exit");
  std::optional<double> stop_t, stop_end_t;  // steps stop; the job ends
  int stop_exit_code = 0;
  for (auto [at, after] :
       {std::pair{lost_t, 10.0}, std::pair{hang_t, kWatchdogS}, std::pair{exit_t, kTeardownS}}) {
    if (at && (!stop_t || *at < *stop_t)) {
      stop_t = at;
      stop_end_t = *at + after;
      stop_exit_code = 1;
    }
  }
  // The real shapes of a death (launchers.md): the rank dies at `t` (its own error lines, or the
  // OOM killer's), torchrun notices within its poll and SIGTERMs the others, and reports the
  // failure `report_t`; the job ends two seconds later.
  struct Death {
    int node, gpu;
    double t, report_t;
    int code;           // the rank's exit code; negative: killed by that signal
    std::string error;  // its last line, "" for a kill
  };
  std::optional<Death> death;
  // A rank stuck outside its collective (the others spin in it) until the NCCL watchdog.
  struct Stuck {
    int node, gpu;
    double t;
  };
  std::optional<Stuck> stuck_rank;
  std::optional<double> watchdog_t;  // the watchdog's timeout lines (a hang's teardown)
  bool cancelled = false;            // the scheduler stopped the job
  const double teardown_s = 2 + 4 * vuni(vrng);
  auto die = [&](int node, int gpu, double t, int code, std::string error) {
    death = Death{node, gpu, t, t + teardown_s, code, std::move(error)};
    stop_t = t;
    stop_end_t = death->report_t + 2;
    stop_exit_code = 1;
  };
  auto hang_until_watchdog = [&](int node, int gpu, double t) {
    stuck_rank = Stuck{node, gpu, t};
    watchdog_t = t + kWatchdogS - 4;
    stop_t = t;
    stop_end_t = t + kWatchdogS;
    stop_exit_code = 1;
  };
  const std::vector<int> kXidCodes = {13, 31, 62, 119};
  const int xid_code = kXidCodes[o.seed % kXidCodes.size()];
  if (const FaultSpec* f = any_fault("rank_exit"); f && !f->variant.empty()) {
    if (f->variant == "oom_kill") {
      die(f->node, f->gpu, *exit_t, -9, "");
    } else {
      die(f->node, f->gpu, *exit_t, 1,
          o.seed % 2
              ? "RuntimeError: DataLoader worker (pid(s) 48213) exited unexpectedly"
              : "ValueError: Expected input batch_size (12) to match target batch_size (16).");
    }
  }
  if (const FaultSpec* f = any_fault("gpu_lost"); f && f->variant == "kernel_only") {
    die(f->node, f->gpu, *lost_t + 1, 1, "RuntimeError: CUDA error: unknown error");
  }
  if (const FaultSpec* f = any_fault("ecc_dbe"); f && f->variant == "kernel_only") {
    die(f->node, f->gpu, t0 + f->onset_s + 0.3, 1,
        "RuntimeError: CUDA error: uncorrectable ECC error encountered");
  }
  if (const FaultSpec* f = any_fault("xid"); f && f->variant == "kernel_only") {
    if (xid_code == 13 || xid_code == 31) {
      die(f->node, f->gpu, t0 + f->onset_s + 0.5, 1,
          "RuntimeError: CUDA error: an illegal memory access was encountered");
    } else {
      hang_until_watchdog(f->node, f->gpu, t0 + f->onset_s);
    }
  }
  if (const FaultSpec* f = any_fault("job_hang"); f && f->variant == "watchdog") {
    hang_until_watchdog(f->node, f->gpu, *hang_t);
  }
  if (const FaultSpec* c = confounder("cancelled")) {
    stop_t = t0 + c->onset_s;
    stop_end_t = *stop_t + 3;
    stop_exit_code = 143;  // 128 + SIGTERM, as Slurm reports a cancelled step
    cancelled = true;
  }
  auto run_end = [&](const JobRun& r) {
    return stop_end_t && *stop_end_t < r.end && *stop_end_t >= r.start ? *stop_end_t : r.end;
  };

  // Ranks: every GPU of every node but a held-idle one, and one that did not come back from a
  // reboot.
  struct Rank {
    int node, gpu, rank;
  };
  auto gpu_gone = [&](int k, int i, double t) {
    return reboot_t && k == reboot_node && i == gone_gpu && t >= *reboot_t;
  };
  auto ranks_of = [&](const JobRun& r) {
    std::vector<Rank> out;
    for (int k = 0; k < o.nodes; ++k) {
      for (int i = 0; i < n; ++i) {
        if (r.idle_gpu && *r.idle_gpu == std::make_pair(k, i)) continue;
        if (gpu_gone(k, i, r.start)) continue;
        out.push_back({k, i, static_cast<int>(out.size())});
      }
    }
    return out;
  };

  for (const JobRun& run : runs) {
    const std::vector<Rank> ranks = ranks_of(run);
    for (int k = 0; k < o.nodes; ++k) {
      json gpus = json::array();
      for (int i = 0; i < n; ++i) {
        if (!gpu_gone(k, i, run.start)) gpus.push_back(i);
      }
      json start = {{"type", "job"},    {"node", names[k]},           {"job", run.id},
                    {"state", "start"}, {"template", "sim-llm-fsdp"}, {"user", "sim"},
                    {"project", "sim"}, {"ranks", ranks.size()}};
      if (!run.gpus_unnamed) start["gpus"] = gpus;
      emit(k, run.start, 3, start);
      if (run.nvlink_fallback.count(k)) truth_at("nvlink_fallback", k, run.start, {});
      if (run.net_socket) truth_at("net_fallback", k, run.start, {});  // every node's NCCL
      for (const auto& [bk, bi] : run.numa_bad) {
        if (bk == k) truth_at("numa_mismatch", k, run.start, {.gpu = bi});
      }
      if (run.idle_gpu && run.idle_gpu->first == k) {
        truth_at("gpu_idle_allocated", k, run.start + kIdleAllocatedS, {.job = run.id});
      }
      // NCCL's view of the channels: NVLink pairs over P2P (with P2P off, or without NVLink,
      // over SHM); between nodes over IB (with IB disabled, over sockets).
      const double lt = run.start + 2;
      auto log = [&](double t, int rank, const std::string& line) {
        emit(k, t, 6,
             {{"type", "log"},
              {"node", names[k]},
              {"job", run.id},
              {"rank", rank},
              {"source", "nccl"},
              {"line", line}});
      };
      std::vector<Rank> local;
      for (const Rank& r : ranks) {
        if (r.node == k) local.push_back(r);
      }
      for (size_t li = 0; li < local.size(); ++li) {
        const Rank& r = local[li];
        const std::string prefix = fmt::format("{}:{}:{} [{}] NCCL INFO ", names[k],
                                               run.pid_base + r.gpu, run.pid_base + r.gpu, r.gpu);
        log(lt, r.rank, prefix + "NCCL version 2.21.5+cuda12.4");
        if (o.nodes > 1) {
          log(lt + 0.05, r.rank,
              prefix + (run.net_socket
                            ? fmt::format("NET/Socket : Using [0]eth0:10.0.0.{}<0>", 10 + k)
                            : fmt::format("NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.{}<0>",
                                          10 + k)));
          log(lt + 0.06, r.rank,
              prefix + (run.net_socket ? "Using network Socket" : "Using network IB"));
        }
        log(lt + 0.1, r.rank,
            prefix + fmt::format("comm 0x7f00{:04x} rank {} nRanks {} nNodes {} localRanks {} "
                                 "localRank {} MNNVL 0",
                                 r.rank, r.rank, ranks.size(), o.nodes, local.size(), li));
        if (local.size() > 1 && li + 1 < local.size()) {
          const Rank& peer = local[li + 1];
          const std::string via =
              run.nvlink_fallback.count(k)
                  ? "SHM/direct/direct"
                  : (model->spec.nvlink_count > 0 ? "P2P/CUMEM/read" : "SHM/direct/direct");
          for (int c = 0; c < 2; ++c) {
            log(lt + 0.2 + 0.01 * c, r.rank,
                prefix + fmt::format("Channel {:02d}/0 : {}[{}] -> {}[{}] via {}", c, r.rank, r.gpu,
                                     peer.rank, peer.gpu, via));
          }
        }
        if (o.nodes > 1 && li + 1 == local.size()) {
          // The ring leaves this node from its last rank to the next node's first.
          const Rank& next = ranks[(r.rank + 1) % ranks.size()];
          for (int c = 0; c < 2; ++c) {
            log(lt + 0.25 + 0.01 * c, r.rank,
                prefix + fmt::format("Channel {:02d}/0 : {}[{}] -> {}[{}] [send] via {}/0", c,
                                     r.rank, r.gpu, next.rank, next.gpu,
                                     run.net_socket ? "NET/Socket" : "NET/IB"));
          }
        }
        if (li == 0) log(lt + 0.5, r.rank, prefix + "Connected all rings");
      }
      const double end = run_end(run);
      emit(k, end, 3,
           {{"type", "job"},
            {"node", names[k]},
            {"job", run.id},
            {"state", "end"},
            {"exit_code", end < run.end ? stop_exit_code : 0}});
    }
  }
  // What the launchers and the kernel print (docs/research/launchers.md, xid.md): the lines the
  // variants' evidence is made of, in the forms the real tools write.
  const double boot_t = t0 - 2.4e6 - 1e5 * static_cast<double>(o.seed % 7);  // kernel uptime 0
  auto kernel = [&](int k, double t, const std::string& text) {
    emit(k, t, 6,
         {{"type", "log"},
          {"node", names[k]},
          {"source", "kernel"},
          {"line", fmt::format("[{:.6f}] {}", t - boot_t, text)}});
  };
  auto job_line = [&](int k, double t, const JobRun& run, std::optional<int> rank,
                      const std::string& line) {
    json j = {
        {"type", "log"}, {"node", names[k]}, {"job", run.id}, {"source", "job"}, {"line", line}};
    if (rank) j["rank"] = *rank;
    emit(k, t, 6, j);
  };
  // torch ≥ 2.4 logs through glog: "W0629 13:26:00.506703 1749164 torch/…/api.py:897] …".
  auto glog = [&](char level, double t, int pid) {
    const auto secs = static_cast<time_t>(t);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    return fmt::format("{}{:02d}{:02d} {:02d}:{:02d}:{:02d}.{:06d} {} ", level, tm.tm_mon + 1,
                       tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                       static_cast<int>((t - std::floor(t)) * 1e6), pid);
  };
  auto table_time = [&](double t) {
    const auto secs = static_cast<time_t>(t);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    return fmt::format("{:04d}-{:02d}-{:02d}_{:02d}:{:02d}:{:02d}", tm.tm_year + 1900,
                       tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  };
  auto pci_of = [&](int i) { return fmt::format("PCI:0000:{:02x}:00", 0x18 + 0x11 * i); };
  auto bdf_of = [&](int i) { return fmt::format("0000:{:02x}:00.0", 0x18 + 0x11 * i); };
  const JobRun& first_run = runs.front();
  auto rank_on = [&](const JobRun& run, int node, int gpu) -> std::optional<int> {
    for (const Rank& r : ranks_of(run)) {
      if (r.node == node && r.gpu == gpu) return r.rank;
    }
    return std::nullopt;
  };
  const int agent_pid = first_run.pid_base - 37;  // torchrun's own pid
  // torchrun's teardown on every node: the failed rank's node SIGTERMs its other workers and
  // reports the failure with its table; the other nodes' launchers are signalled by the
  // scheduler (srun --kill-on-bad-exit) and shut down.
  auto teardown = [&](const JobRun& run, int dead_node, int dead_gpu, double dead_t,
                      double report_t, int code) {
    const std::vector<Rank> ranks = ranks_of(run);
    const std::optional<int> dead_rank = rank_on(run, dead_node, dead_gpu);
    for (int k = 0; k < o.nodes; ++k) {
      if (k != dead_node) {
        job_line(k, report_t + 0.3, run, std::nullopt,
                 glog('W', report_t + 0.3, agent_pid) +
                     "torch/distributed/elastic/agent/server/api.py:704] Received 15 death "
                     "signal, shutting down workers");
      }
      int local = 0, dead_local = 0;
      for (const Rank& r : ranks) {
        if (r.node != k) continue;
        if (k == dead_node && r.gpu == dead_gpu) {
          dead_local = local++;
          continue;
        }
        ++local;
        job_line(k, report_t - 0.9, run, std::nullopt,
                 glog('W', report_t - 0.9, agent_pid) +
                     fmt::format("torch/distributed/elastic/multiprocessing/api.py:897] Sending "
                                 "process {} closing signal SIGTERM",
                                 run.pid_base + r.gpu));
      }
      if (k != dead_node) continue;
      const int pid = run.pid_base + dead_gpu;
      job_line(k, report_t, run, std::nullopt,
               glog('E', report_t, agent_pid) +
                   fmt::format("torch/distributed/elastic/multiprocessing/api.py:869] failed "
                               "(exitcode: {}) local_rank: {} (pid: {}) of binary: "
                               "/usr/bin/python3",
                               code, dead_local, pid));
      const std::string signal = code == -9 ? "SIGKILL" : code == -6 ? "SIGABRT" : "";
      const std::vector<std::string> table = {
          "Traceback (most recent call last):",
          "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
          "============================================================",
          "train.py FAILED",
          "------------------------------------------------------------",
          "Failures:",
          "  <NO_OTHER_FAILURES>",
          "------------------------------------------------------------",
          "Root Cause (first observed failure):",
          "[0]:",
          "  time      : " + table_time(dead_t),
          "  host      : " + names[k],
          fmt::format("  rank      : {} (local_rank: {})", dead_rank.value_or(dead_local),
                      dead_local),
          fmt::format("  exitcode  : {} (pid: {})", code, pid),
          "  error_file: <N/A>",
          signal.empty()
              ? "  traceback : To enable traceback see: "
                "https://pytorch.org/docs/stable/elastic/errors.html"
              : fmt::format("  traceback : Signal {} ({}) received by PID {}", -code, signal, pid),
          "============================================================"};
      for (size_t i = 0; i < table.size(); ++i) {
        job_line(k, report_t + 0.05 + 0.001 * static_cast<double>(i), run, std::nullopt, table[i]);
      }
    }
  };
  if (death) {
    const JobRun& run =
        first_run.start <= death->t && death->t < run_end(first_run) ? first_run : runs.back();
    const std::optional<int> rank = rank_on(run, death->node, death->gpu);
    if (!variant_of("rank_exit").empty()) {
      // The truth's start is the death: the rank's own last lines, or the OOM killer's line.
      truth_at("rank_exit", death->node, shifted(death->node, death->t),
               {.job = run.id, .rank = rank});
    }
    const int pid = run.pid_base + death->gpu;
    if (death->code == -9) {
      kernel(death->node, death->t,
             fmt::format("Out of memory: Killed process {} (python3) total-vm:{}kB, "
                         "anon-rss:{}kB, file-rss:{}kB, shmem-rss:{}kB, UID:1000 pgtables:{}kB "
                         "oom_score_adj:0",
                         pid, 183000000 + 1000 * (o.seed % 997), 161000000 + 777 * (o.seed % 991),
                         412000, 8192, 318000));
    } else {
      for (const std::string& l :
           {std::string("Traceback (most recent call last):"),
            std::string("  File \"/workspace/train.py\", line 405, in train_step"),
            std::string("    loss = model(batch).loss"), death->error}) {
        job_line(death->node, death->t, run, rank,
                 fmt::format("[rank{}]: {}", rank.value_or(0), l));
      }
    }
    teardown(run, death->node, death->gpu, death->t, death->report_t, death->code);
  }
  if (stuck_rank && watchdog_t) {
    const JobRun& run = first_run;
    for (const Rank& r : ranks_of(run)) {
      if (r.node == stuck_rank->node && r.gpu == stuck_rank->gpu) continue;
      job_line(r.node, *watchdog_t + 0.01 * r.rank, run, r.rank,
               fmt::format("[rank{}]:[E{}ProcessGroupNCCL.cpp:616] [Rank {}] Watchdog caught "
                           "collective operation timeout: WorkNCCL(SeqNum={}, OpType=ALLREDUCE, "
                           "NumelIn=16777216, NumelOut=16777216, Timeout(ms)=600000) ran for {} "
                           "milliseconds before timing out.",
                           r.rank, glog('E', *watchdog_t, run.pid_base + r.gpu).substr(1), r.rank,
                           48213 + o.seed % 1000, 600000 + static_cast<int>(vuni(vrng) * 900)));
    }
    const int first_gpu = stuck_rank->gpu == 0 ? 1 : 0;
    teardown(run, stuck_rank->node, first_gpu, *watchdog_t, *watchdog_t + 2.5, -6);
  }
  if (cancelled) {
    const JobRun& run = first_run;
    for (int k = 0; k < o.nodes; ++k) {
      job_line(k, *stop_t, run, std::nullopt,
               glog('W', *stop_t, agent_pid) +
                   "torch/distributed/elastic/agent/server/api.py:704] Received 15 death signal, "
                   "shutting down workers");
      for (const Rank& r : ranks_of(run)) {
        if (r.node != k) continue;
        job_line(k, *stop_t + 0.01, run, std::nullopt,
                 glog('W', *stop_t + 0.01, agent_pid) +
                     fmt::format("torch/distributed/elastic/multiprocessing/api.py:897] Sending "
                                 "process {} closing signal SIGTERM",
                                 run.pid_base + r.gpu));
      }
    }
  }
  // XIDs the driver wrote only to the kernel log, with the lines it prints before the first XID
  // of a GPU ("NVRM: GPU at PCI:…: GPU-<uuid>", its serial number).
  auto xid_preamble = [&](int k, int i, double t) {
    kernel(k, t,
           fmt::format("NVRM: GPU at {}: GPU-{:08x}-sim-{:02d}-{:02d}", pci_of(i),
                       o.seed & 0xffffffff, k, i));
    kernel(k, t, fmt::format("NVRM: GPU Board Serial Number: {}", 1654923000001ULL + 37 * i));
  };
  if (const FaultSpec* f = any_fault("gpu_lost"); f && f->variant == "kernel_only") {
    const double t = t0 + f->onset_s;
    xid_preamble(f->node, f->gpu, t);
    kernel(f->node, t,
           fmt::format("NVRM: Xid ({}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                       "the bus.",
                       pci_of(f->gpu)));
    kernel(f->node, t + 0.002,
           fmt::format("NVRM: GPU {}: GPU has fallen off the bus.", bdf_of(f->gpu)));
    truth_at("gpu_lost", f->node, shifted(f->node, t), {f->gpu});
  }
  if (const FaultSpec* f = any_fault("ecc_dbe"); f && f->variant == "kernel_only") {
    const double t = t0 + f->onset_s;
    xid_preamble(f->node, f->gpu, t);
    kernel(f->node, t,
           fmt::format("NVRM: Xid ({}): 48, pid={}, name=python3, An uncorrectable double bit "
                       "error (DBE) has been detected on GPU in the framebuffer at partition 6, "
                       "subpartition 0.",
                       pci_of(f->gpu), first_run.pid_base + f->gpu));
    kernel(f->node, t + 0.4,
           fmt::format("NVRM: Xid ({}): 45, pid={}, name=python3, Ch 00000008", pci_of(f->gpu),
                       first_run.pid_base + f->gpu));
  }
  if (const FaultSpec* f = any_fault("xid"); f && f->variant == "kernel_only") {
    const double t = t0 + f->onset_s;
    const int pid = first_run.pid_base + f->gpu;
    xid_preamble(f->node, f->gpu, t);
    std::string text;
    switch (xid_code) {
      case 13:
        text = fmt::format(
            "pid={}, name=python3, Graphics SM Warp Exception on (GPC 4, TPC 1, SM "
            "0): Out Of Range Address",
            pid);
        break;
      case 31:
        text = fmt::format(
            "pid={}, name=python3, Ch 00000008, intr 00000000. MMU Fault: ENGINE "
            "GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f3a_1c000000. Fault is of type "
            "FAULT_PDE ACCESS_TYPE_VIRT_READ",
            pid);
        break;
      case 62:
        text =
            "pid='<unknown>', name=<unknown>, 0000e6e4 00001000 00000000 00000000 00000000 "
            "00000000 00000000 00000000";
        break;
      default:
        text = fmt::format(
            "pid={}, name=python3, Timeout after 45s of waiting for RPC response "
            "from GPU{} GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801702 "
            "0x4).",
            pid, f->gpu);
    }
    kernel(f->node, t, fmt::format("NVRM: Xid ({}): {}, {}", pci_of(f->gpu), xid_code, text));
    if (xid_code == 13 || xid_code == 31) {
      kernel(f->node, t + 0.8,
             fmt::format("NVRM: Xid ({}): 43, pid={}, name=python3, Ch 00000008", pci_of(f->gpu),
                         pid));
    }
    truth_at("xid", f->node, shifted(f->node, t), {f->gpu});
  }
  if (const FaultSpec* c = confounder("xid_teardown")) {
    // The job is killed at its end (a time limit): the driver tears down the channels it left.
    const double t = run_end(first_run);
    for (int i : {c->gpu % n, (c->gpu + 1) % n}) {
      kernel(0, t + 0.2,
             fmt::format("NVRM: Xid ({}): 45, pid={}, name=python3, Ch 00000008", pci_of(i),
                         first_run.pid_base + i));
    }
  }

  auto job_at = [&](double t) -> const JobRun* {
    for (const JobRun& r : runs) {
      if (t >= r.start && t < run_end(r)) return &r;
    }
    return nullptr;
  };

  // GPUs, hosts, processes and steps, tick by tick.
  std::vector<std::vector<GpuSim>> sims(o.nodes, std::vector<GpuSim>(n));
  for (auto& node : sims) {
    for (auto& g : node) {
      g.clock_mhz = model->spec.max_sm_clock_mhz;
      g.power_limit_w = model->spec.power_limit_w;
      g.energy_j = 3.6e6 * (1 + uni(rng));
    }
  }
  // A fault that starts at its onset on one GPU of one node (or any GPU with gpu < 0).
  auto active = [&](const char* cause, int k, int i, double tick) -> const FaultSpec* {
    const FaultSpec* f = fault(cause, k);
    return f && (i < 0 || f->gpu == i) && tick >= f->onset_s ? f : nullptr;
  };
  const JobRun* step_run = nullptr;  // the run the pending step belongs to
  double next_step = 0;              // start of the next step
  uint64_t step_no = 0;
  double last_checkpoint = job_start;
  bool ckpt_stall_done = false;
  // A job that steps every few seconds (step_regression's slow_steps variant).
  const double step_scale = variant_of("step_regression") == "slow_steps" ? 5 : 1;
  std::vector<double> nic_errors(o.nodes), nic_retx(o.nodes);
  for (int k = 0; k < o.nodes; ++k) nic_errors[k] = std::floor(3 * uni(rng));
  // Healthy is not spotless: one isolated NIC error increment, at most, somewhere.
  const double blip_t = uni(rng) < 0.5 ? t0 + o.duration_s * uni(rng) : -1;
  const int blip_node = static_cast<int>(uni(rng) * o.nodes) % o.nodes;

  for (double tick = 0; tick < o.duration_s; tick += 1) {
    const double t = t0 + tick;
    const JobRun* run = job_at(t);
    if (run != step_run) {
      step_run = run;
      next_step = run ? std::max(t, run->start + 5) : 0;
      step_no = 0;
    }
    const std::vector<Rank> ranks = run ? ranks_of(*run) : std::vector<Rank>{};
    const bool stopped = stop_t && t >= *stop_t;
    // Healthy phases without steps: a job that preprocesses before its first step, and
    // periodic evaluations (two minutes every five, past the warm-up).
    const bool preprocessing =
        run && confounder("preprocess_idle") && t < run->start + kPreprocessS;
    const bool evaluating = run && confounder("eval") && t - run->start >= 240 &&
                            std::fmod(t - run->start - 240, kEvalEveryS) < kEvalS;
    if (run && (preprocessing || evaluating) && next_step < t + 1) next_step = t + 1;
    // Steps that end within this second: one collective step for every rank of the job.
    while (run && !stopped && !preprocessing && !evaluating && next_step < t + 1) {
      const double s0 = next_step;
      const double warm = step_no < 20 ? 1.5 - step_no * 0.025 : 1.0;
      const double tick_at = s0 - t0;
      std::vector<double> pre(ranks.size()), compute(ranks.size()), data(o.nodes);
      for (int k = 0; k < o.nodes; ++k) {
        data[k] = step_scale * model->step_s * 0.02 * (1 + 0.3 * std::fabs(gauss(rng)));
      }
      double max_pre = 0;
      for (size_t r = 0; r < ranks.size(); ++r) {
        const auto [k, i, rank] = ranks[r];
        const GpuSim& g = sims[k][i];
        double c = step_scale * model->step_s * (1 - model->comm_share) * warm *
                   (model->spec.max_sm_clock_mhz / std::max(100.0, g.clock_mhz)) *
                   (1 + 0.003 * gauss(rng));
        if (const FaultSpec* f = active("straggler_gpu", k, i, tick_at)) {
          c *= 1.15 + 0.25 * f->severity;  // slower with every clock at its maximum
        }
        if (const FaultSpec* f = any_fault("step_regression"); f && tick_at >= f->onset_s) {
          c *= 1.3 + 0.4 * f->severity;  // slower kernels job-wide (a library's worse path)
        }
        if (run->numa_bad.count({k, i})) c *= 1.04;
        double d = data[k];
        if (const FaultSpec* f = active("data_stall", k, -1, tick_at)) {
          d = model->step_s * (0.6 + 0.6 * f->severity) * (0.8 + 0.4 * uni(rng));
          data[k] = d;
        }
        compute[r] = c;
        pre[r] = d + c;
        max_pre = std::max(max_pre, pre[r]);
      }
      double comm = step_scale * model->step_s * model->comm_share;
      // One node's slow pairs hold back every rank of a synchronous job.
      if (!run->nvlink_fallback.empty()) comm *= 3;
      if (o.nodes > 1 && run->net_socket) comm *= 4;
      for (int k = 0; k < o.nodes; ++k) {
        if (const FaultSpec* f = active("net_congestion", k, -1, tick_at)) {
          comm *= 2.5 + 2 * f->severity;
        }
        if (active("net_errors", k, -1, tick_at)) comm *= 1.1;
      }
      double ckpt = 0;
      const FaultSpec* cs = any_fault("checkpoint_stall");
      // A stall: the first scheduled checkpoint after the onset (the storage slowed down).
      bool stall_now = false;
      if (s0 - last_checkpoint >= kCheckpointEveryS) {
        stall_now = cs && tick_at >= cs->onset_s && !ckpt_stall_done;
        ckpt = stall_now ? 60 + 180 * cs->severity : 6 + 2 * uni(rng);
        last_checkpoint = s0;
        ckpt_stall_done |= stall_now;
      }
      const double dur = (max_pre + comm) * (1 + 0.01 * gauss(rng)) + ckpt;
      const double e = s0 + dur;
      for (int k = 0; k < o.nodes; ++k) {
        if (ckpt > 0) {
          json ev = {{"type", "event"}, {"node", names[k]}, {"job", run->id}};
          ev["kind"] = "checkpoint_start";
          emit(k, e - ckpt, 5, ev);
          ev["kind"] = "checkpoint_end";
          emit(k, e, 5, ev);
          if (stall_now) truth_at("checkpoint_stall", k, e - ckpt, {.job = run->id});
        }
        if (active("data_stall", k, -1, tick_at)) {
          truth_at("data_stall", k, std::floor(s0 * 1000) / 1000, {.job = run->id});
        }
        if (any_fault("step_regression") && tick_at >= any_fault("step_regression")->onset_s) {
          truth_at("step_regression", k, std::floor(s0 * 1000) / 1000, {.job = run->id});
        }
      }
      for (size_t r = 0; r < ranks.size(); ++r) {
        const auto [k, i, rank] = ranks[r];
        if (sims[k][i].lost) continue;
        if (active("straggler_gpu", k, i, tick_at)) {
          truth_at("straggler_gpu", k, std::floor(s0 * 1000) / 1000, {.gpu = i, .job = run->id});
        }
        sims[k][i].util = compute[r] / dur;
        // Ranks leave the collective together, within a few milliseconds.
        const double te = e + 0.002 * uni(rng);
        emit(k, te, 4,
             {{"type", "step"},
              {"node", names[k]},
              {"job", run->id},
              {"rank", rank},
              {"gpu", i},
              {"step", step_no},
              {"duration_s", std::round(dur * 1e4) / 1e4},
              {"samples", 32},
              {"data_wait_s", std::round(data[k] * 1e4) / 1e4},
              {"comm_s", std::round((comm + max_pre - pre[r]) * 1e4) / 1e4},
              {"checkpoint_s", std::round(ckpt * 1e4) / 1e4}});
      }
      ++step_no;
      next_step = e;
    }
    if (run && stopped && hang_t && *stop_t == *hang_t) {
      // The hang began when the last step ended (next_step: the end of the last one); listed
      // on the node of the stuck rank.
      const FaultSpec* f = any_fault("job_hang");
      truth_at("job_hang", f->node, shifted(f->node, next_step), {.job = run->id});
    }
    if (skew && tick == std::floor(skew->onset_s)) {
      truth_at("clock_skew", skew->node, shifted(skew->node, t), {});
    }

    for (int k = 0; k < o.nodes; ++k) {
      if (down(k, t)) continue;  // rebooting: nothing is recorded
      const bool stalled = active("data_stall", k, -1, tick) != nullptr;
      // GPU samples.
      for (int i = 0; i < n; ++i) {
        GpuSim& g = sims[k][i];
        if (g.lost || gpu_gone(k, i, t)) continue;
        auto fault_here = [&](const char* cause) { return active(cause, k, i, tick); };
        if (const FaultSpec* f = fault_here("gpu_lost"); f && f->variant == "kernel_only") {
          g.lost = true;  // the kernel lines say it; NVML has nothing to send
          continue;
        }
        if (fault_here("gpu_lost")) {
          g.lost = true;
          emit(k, t, 5,
               {{"type", "event"},
                {"node", names[k]},
                {"gpu", i},
                {"kind", "xid"},
                {"code", 79},
                {"message", "GPU has fallen off the bus"}});
          truth_at("gpu_lost", k, shifted(k, t), {.gpu = i});
          continue;
        }
        const bool held = run != nullptr;
        const bool idle_held = held && run->idle_gpu && *run->idle_gpu == std::make_pair(k, i);
        const bool dead =
            (exit_t && t >= *exit_t && fault("rank_exit", k) && fault("rank_exit", k)->gpu == i) ||
            (death && k == death->node && i == death->gpu && t >= death->t);
        const bool stuck =
            (hang_t && t >= *hang_t && fault("job_hang", k) && fault("job_hang", k)->gpu == i) ||
            (stuck_rank && k == stuck_rank->node && i == stuck_rank->gpu && t >= stuck_rank->t);
        // Stopped steps: the live ranks spin in their NCCL kernels (busy, little power); the
        // stuck rank sits in host code, its GPU idle.
        const bool spinning = held && stopped && !idle_held && !dead && !stuck && !cancelled;
        const bool busy =
            held && !idle_held && !dead && !stuck && !preprocessing && !(cancelled && stopped);
        double util = 0;
        if (spinning) {
          util = 100;
        } else if (busy && evaluating) {
          util = std::clamp(88 + 3 * gauss(rng), 0.0, 100.0);  // evaluation kernels
        } else if (busy) {
          util = std::clamp(g.util * 100 + 2 * gauss(rng), 0.0, 100.0);
          if (stalled) util *= 0.9;
        }
        // Thermal: the cooling of a GPU degrades; its steady temperature climbs.
        if (const FaultSpec* f = fault_here("thermal_throttle")) {
          g.ambient_c =
              kAmbientC + std::min(1.0, (tick - f->onset_s) / 60) * (20 + 15 * f->severity);
        }
        if (const FaultSpec* f = fault_here("power_throttle"); f && f->variant.empty()) {
          g.power_limit_w = model->spec.power_limit_w * (0.75 - 0.25 * f->severity);
        }
        double power =
            model->spec.idle_power_w + (model->spec.power_limit_w - model->spec.idle_power_w) *
                                           util / 100 * (spinning ? 0.35 : 0.9 + 0.05 * gauss(rng));
        std::vector<std::string> throttle;
        double clock = busy ? model->spec.max_sm_clock_mhz : model->spec.max_sm_clock_mhz * 0.1;
        if (!busy) throttle.push_back("idle");
        if (busy && confounder("app_clocks_default")) throttle.push_back("app_clocks");
        if (busy && power > g.power_limit_w) {
          clock *= g.power_limit_w / power;
          power = g.power_limit_w;
          throttle.push_back("sw_power_cap");
        } else if (busy && util > 90 && uni(rng) < 0.03) {
          throttle.push_back("sw_power_cap");  // a one-sample flicker at full load
        }
        // Steady temperature: ambient plus a rise proportional to the share of TDP drawn
        // (about 80 °C at full load with healthy cooling).
        const double target = g.ambient_c + 55 * power / model->spec.power_limit_w;
        g.temp_c += (target - g.temp_c) * (1 - std::exp(-1.0 / kThermalTauS));
        if (g.temp_c > kThrottleTempC && busy) {
          if (const FaultSpec* f = fault_here("thermal_throttle"); f && f->variant == "hw") {
            // HW Thermal Slowdown: the hardware halves the clock, and sets its umbrella HW
            // Slowdown bit beside it (nvml.h; clock-reasons.md §2).
            clock *= 0.5;
            throttle.push_back("hw_slowdown");
            throttle.push_back("hw_thermal");
          } else {
            clock *= std::max(0.5, 1 - (g.temp_c - kThrottleTempC) * 0.08);
            throttle.push_back("sw_thermal");
          }
          if (fault_here("thermal_throttle")) truth_at("thermal_throttle", k, shifted(k, t), {i});
        }
        if (const FaultSpec* f = fault_here("clock_slowdown"); f && busy) {
          if (f->variant == "app_clocks") {
            clock *= 0.75 - 0.15 * f->severity;  // an administrator's applications clock
            throttle.push_back("app_clocks");
          } else {
            clock *= 0.6 - 0.2 * f->severity;  // the board's slowdown signal (e.g. a PSU event)
            throttle.push_back("hw_slowdown");
          }
          truth_at("clock_slowdown", k, shifted(k, t), {i});
        }
        if (const FaultSpec* f = fault_here("power_throttle"); f && busy && f->variant == "brake") {
          // An external power-brake signal (the PSU): HW Power Brake Slowdown with HW Slowdown.
          clock *= 0.5;
          power *= 0.6;
          throttle.push_back("hw_slowdown");
          throttle.push_back("hw_power_brake");
          truth_at("power_throttle", k, shifted(k, t), {i});
        }
        if (const FaultSpec* c = confounder("hw_slowdown_blips");
            c && busy && std::fmod(tick + 37 * i, 211) < 1 + (i % 2)) {
          // HW Slowdown "may be also reported during PState or clock change" (nvml.h).
          clock *= 0.7;
          throttle.push_back("hw_slowdown");
        }
        if (fault_here("power_throttle") && busy && fault_here("power_throttle")->variant.empty() &&
            std::find(throttle.begin(), throttle.end(), "sw_power_cap") != throttle.end()) {
          truth_at("power_throttle", k, shifted(k, t), {i});
        }
        g.clock_mhz = clock;
        g.energy_j += power;
        // Memory: the job's allocations ramp over the first minute, then hold; a leak adds an
        // allocator-sized chunk at intervals from its onset.
        const double job_age = held ? t - run->start : 0;
        const double steady = model->job_mem_mib * (0.95 + 0.01 * i);
        double mem = held && !idle_held && !dead ? std::min(1.0, job_age / 60) * steady : 0;
        if (const FaultSpec* f = fault_here("memory_leak"); f && busy) {
          const double since = tick - f->onset_s;
          const double chunk = 512 * (1 + f->severity);
          g.mem_mib = std::max(g.mem_mib, mem);
          if (std::fmod(since, 20) < 1) {
            g.mem_mib = std::min(g.mem_mib + chunk, model->spec.memory_total_mib * 0.97);
            truth_at("memory_leak", k, shifted(k, t), {.job = run->id});
          }
          mem = g.mem_mib;
        } else if (confounder("cache_refill") && held && !idle_held && !dead && job_age >= 60) {
          // The allocator's cache, emptied at each checkpoint and refilled by the next steps.
          const double since = t - last_checkpoint;
          if (since >= 0 && since < 1) g.mem_mib = steady * 0.72;
          g.mem_mib = std::min(steady, std::max(g.mem_mib, steady * 0.72));
          if (since >= 0 && std::fmod(since, 10) < 1)
            g.mem_mib = std::min(steady, g.mem_mib + 2048);
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
          truth_at("pcie_replay", k, shifted(k, t), {i});
        }
        if (const FaultSpec* f = every("nvlink_errors", 10)) {
          g.nvlink_crc += 1 + std::floor(5 * f->severity * uni(rng));
          truth_at("nvlink_errors", k, shifted(k, t), {i});
        }
        if (every("ecc_sbe_growth", 20)) {
          g.sbe += 1;
          truth_at("ecc_sbe_growth", k, shifted(k, t), {i});
        }
        if (const FaultSpec* f = fault_here("ecc_dbe"); f && g.dbe == 0 && !f->variant.empty()) {
          g.dbe = 1;  // the counter; the XID reaches only the kernel log
          truth_at("ecc_dbe", k, shifted(k, t), {i});
        }
        if (fault_here("ecc_dbe") && g.dbe == 0) {
          g.dbe = 1;
          emit(k, t, 5,
               {{"type", "event"},
                {"node", names[k]},
                {"gpu", i},
                {"kind", "xid"},
                {"code", 48},
                {"message", "An uncorrectable double bit error (DBE) has been detected"}});
          truth_at("ecc_dbe", k, shifted(k, t), {i});
        }
        if (const FaultSpec* f = fault_here("xid");
            f && f->variant.empty() && !truth.count({"xid", k, i})) {
          // XIDs without a more specific cause: a GSP RPC timeout, an internal micro-controller
          // error, a channel error; the job carries on (or not: that is another fault).
          const int codes[] = {119, 62, 120};
          const int code = codes[o.seed % 3];
          emit(k, t, 5,
               {{"type", "event"},
                {"node", names[k]},
                {"gpu", i},
                {"kind", "xid"},
                {"code", code},
                {"message", fmt::format("Xid {} reported by the driver", code)}});
          truth_at("xid", k, shifted(k, t), {i});
        }
        if (fault_here("pcie_downgrade")) {
          g.pcie_width = 8;
          truth_at("pcie_downgrade", k, shifted(k, t), {i});
        }
        json rec = {{"type", "gpu"},
                    {"node", names[k]},
                    {"gpu", i},
                    {"util_pct", std::round(util)},
                    {"mem_util_pct", std::round(spinning ? 0 : util * 0.4)},
                    {"mem_used_mib", std::round(mem)},
                    {"temp_c", std::round(g.temp_c * 10) / 10},
                    {"power_w", std::round(power * 10) / 10},
                    {"energy_j", std::round(g.energy_j)},
                    {"sm_clock_mhz", std::round(clock)},
                    {"mem_clock_mhz", model->spec.max_mem_clock_mhz},
                    {"throttle", throttle},
                    {"pcie_tx_mbs", std::round(300 * util / 100 + 5)},
                    {"pcie_rx_mbs", std::round(280 * util / 100 + 5)},
                    {"pcie_gen", busy ? model->spec.pcie_gen : 1},
                    {"pcie_width", g.pcie_width},
                    {"pcie_replay", g.pcie_replay},
                    {"ecc_sbe_volatile", g.sbe},
                    {"ecc_dbe_volatile", g.dbe},
                    {"retired_pages", 0}};
        if (model->spec.nvlink_count > 0) {
          const bool fallback = run && run->nvlink_fallback.count(k);
          const bool moving = busy && !fallback && !stopped;
          rec["nvlink_tx_mbs"] = moving ? std::round(40000 * util / 100) : 0;
          rec["nvlink_rx_mbs"] = moving ? std::round(39800 * util / 100) : 0;
          rec["nvlink_active_links"] = model->spec.nvlink_count;
          rec["nvlink_crc_errors"] = g.nvlink_crc;
          rec["nvlink_replay"] = 0;
          rec["nvlink_recovery"] = 0;
        }
        emit(k, t, 1, rec);
      }
      // Processes of the job: one per rank, bound to its GPU's NUMA node (or, misbound, to
      // the other one); a dead rank's process is gone.
      if (run && std::fmod(tick, kProcEveryS) < 1) {
        // A process of the job on its idle GPU (the variant whose start record names none).
        if (run->idle_gpu && run->gpus_unnamed && run->idle_gpu->first == k) {
          emit(k, t, 2,
               {{"type", "proc"},
                {"node", names[k]},
                {"pid", run->pid_base + 100 + run->idle_gpu->second},
                {"gpu", run->idle_gpu->second},
                {"mem_used_mib", 612},
                {"user", "sim"},
                {"job", run->id},
                {"cpu_numa_nodes", {numa_of(run->idle_gpu->second)}},
                {"visible_index", 0}});
        }
        for (const Rank& r : ranks) {
          if (r.node != k || sims[k][r.gpu].lost) continue;
          if (death && k == death->node && r.gpu == death->gpu && t >= death->t) continue;
          const FaultSpec* ex = fault("rank_exit", k);
          if (ex && ex->gpu == r.gpu && t >= *exit_t) {
            if (ex->variant.empty()) {
              truth_at("rank_exit", k, shifted(k, t), {.job = run->id, .rank = r.rank});
            }
            continue;
          }
          const int numa = run->numa_bad.count({k, r.gpu}) ? 1 - numa_of(r.gpu) : numa_of(r.gpu);
          emit(k, t, 2,
               {{"type", "proc"},
                {"node", names[k]},
                {"pid", run->pid_base + r.gpu},
                {"gpu", r.gpu},
                {"mem_used_mib", std::round(sims[k][r.gpu].mem_mib * 0.98)},
                {"user", "sim"},
                {"container", fmt::format("{:012x}", (o.seed * 2654435761u) & 0xffffffffffffu)},
                {"job", run->id},
                {"cpu_numa_nodes", {numa}},
                {"visible_index", r.gpu}});
        }
      }
      // Host every 5 s: iowait follows the data stall; the NIC carries the ring between nodes.
      if (std::fmod(tick, 5) < 1) {
        const double iowait = stalled && run ? 15 + 10 * uni(rng) : 0.5 + 0.5 * uni(rng);
        const double rate_mbs = kNicGbps * 1000 / 8;
        double nic_share = run && !stopped ? (o.nodes > 1 ? 0.25 + 0.1 * uni(rng) : 0.002) : 0.001;
        if (run && o.nodes > 1 && run->net_socket) nic_share = 0.02;  // over eth0, not IB
        bool congested = false;
        if (active("net_congestion", k, -1, tick)) {
          nic_share = 0.9 + 0.07 * uni(rng);  // another tenant's traffic fills the link
          congested = true;
        }
        if (const FaultSpec* f = active("net_errors", k, -1, tick)) {
          nic_errors[k] += 1 + std::floor(4 * f->severity * uni(rng));
          nic_retx[k] += 2 + std::floor(20 * f->severity * uni(rng));
          truth_at("net_errors", k, shifted(k, t), {.nic = "mlx5_0"});
        } else if (blip_t >= 0 && k == blip_node && t >= blip_t && t < blip_t + 5) {
          nic_errors[k] += 1;
        }
        if (congested && run) truth_at("net_congestion", k, shifted(k, t), {.nic = "mlx5_0"});
        // After a plain reboot the NIC may come back under another name (probe order).
        const std::string nic =
            reboot_t && k == reboot_node && t >= *reboot_t ? nic_name[k] : "mlx5_0";
        emit(k, t, 2,
             {{"type", "host"},
              {"node", names[k]},
              {"cpu_pct", std::round((run ? 35 : 3) + 3 * gauss(rng))},
              {"iowait_pct", std::round(iowait * 10) / 10},
              {"mem_used_mib", 402311},
              {"mem_total_mib", 2063592},
              {"load1", run ? 41.2 : 1.0},
              {"nics",
               {{nic,
                 {{"tx_mbs", std::round(rate_mbs * nic_share)},
                  {"rx_mbs", std::round(rate_mbs * nic_share * 0.99)},
                  {"link_up", true},
                  {"errors", nic_errors[k]},
                  {"retransmits", nic_retx[k]}}}}}});
      }
      if (const FaultSpec* f = fault("topology_change", k);
          f && f->variant.empty() && tick == std::floor(f->onset_s)) {
        // A NIC that came back from a reset on another PCIe root (the archive no longer
        // matches); nothing else about the node changes.
        emit(k, t, 5,
             {{"type", "event"},
              {"node", names[k]},
              {"kind", "topology_change"},
              {"message", "nic mlx5_0 moved: NUMA node 0 -> 1; GPU0-mlx5_0 PIX -> SYS"}});
        truth_at("topology_change", k, shifted(k, t), {});
      }
    }
  }
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

}  // namespace gpuwatch::cluster_sim
