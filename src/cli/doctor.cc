#include "cli/doctor.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "collect/nvml_library.h"
#include "common/log.h"
#include "server/agent.h"
#include "topo/archive.h"

namespace gpuwatch::cli {
namespace {

using model::GpuMetric;

// Thresholds. Corrected (single-bit) errors are routine at a low rate; a card that has corrected
// this many since the driver loaded is worth a look (the engine judges growth, not the level).
constexpr double kSbeWarn = 100;
constexpr double kHotC = 85;     // where H100/A100 start software thermal slowdown
constexpr double kMemHotC = 95;  // HBM's own slowdown is near 95 °C
constexpr double kBusyPct = 30;  // the engine's busy_util_pct
constexpr double kClockSkewMs = 100;

// NVML clock-event bits (model::ClockEventReasonNames).
constexpr uint64_t kSwThermal = 0x20, kHwSlowdown = 0x8, kHwThermal = 0x40, kHwPowerBrake = 0x80;

std::optional<double> Get(const model::GpuSample& s, GpuMetric m) { return s.Get(m); }

// The checks of one kind accumulate problems; the worst decides the status.
struct Builder {
  DoctorCheck c;
  int rank = 0;  // 0 ok, 1 warn, 2 fail
  explicit Builder(std::string name) { c.name = std::move(name); }
  void Warn(std::string d) {
    c.details.push_back(std::move(d));
    rank = std::max(rank, 1);
  }
  void Fail(std::string d) {
    c.details.push_back(std::move(d));
    rank = 2;
  }
  DoctorCheck Done(std::string ok_detail, std::string action) {
    c.status = rank == 0 ? "ok" : rank == 1 ? "warn" : "fail";
    if (rank == 0) {
      c.details = {std::move(ok_detail)};
    } else {
      c.action = std::move(action);
    }
    return std::move(c);
  }
};

DoctorCheck Skip(std::string name, std::string why) {
  return {std::move(name), "skip", {std::move(why)}, ""};
}

std::string Gpu(size_t i) { return fmt::format("GPU {}", i); }

}  // namespace

std::vector<DoctorCheck> DoctorChecks(const server::AgentState& s, const DoctorArchive& archive) {
  std::vector<DoctorCheck> out;
  const size_t n = std::min(s.devices.size(), s.gpu_samples.size());

  // Driver and NVML.
  if (!s.gpu_available) {
    out.push_back({"nvml",
                   "fail",
                   {s.gpu_unavailable_reason},
                   "Check that the NVIDIA driver is loaded (nvidia-smi) and that "
                   "libnvidia-ml.so.1 is on the loader path (or pass --nvml-lib)"});
    for (const char* name : {"gpus", "ecc", "clocks", "temperature", "pcie", "nvlink"})
      out.push_back(Skip(name, "no NVML"));
  } else {
    out.push_back(
        {"nvml",
         "ok",
         {fmt::format("driver {}, NVML {}, CUDA {} ({})", s.system.driver_version,
                      s.system.nvml_version, s.system.cuda_driver_version, s.system.library_path)},
         ""});
    Builder gpus("gpus");
    if (n == 0) gpus.Fail("the driver lists no GPU");
    for (size_t i = 0; i < n; ++i) {
      if (s.gpu_samples[i].lost)
        gpus.Fail(fmt::format("{} ({}) is lost: it answers nothing", Gpu(i), s.devices[i].uuid));
    }
    out.push_back(gpus.Done(fmt::format("{} GPU(s) answer", n),
                            "Drain the node; read the kernel log for XID 79 and reset or "
                            "reseat the GPU (docs/runbook.md, gpu_lost)"));

    Builder ecc("ecc");
    for (size_t i = 0; i < n; ++i) {
      const model::GpuSample& g = s.gpu_samples[i];
      if (g.lost) continue;
      if (auto v = Get(g, GpuMetric::kEccDbeVolatile); v && *v > 0)
        ecc.Fail(
            fmt::format("{}: {} uncorrectable (double-bit) ECC error(s) since the driver "
                        "loaded",
                        Gpu(i), *v));
      if (auto v = Get(g, GpuMetric::kRemappedRowsFailure); v && *v > 0)
        ecc.Fail(fmt::format("{}: row remapping failed (no spare rows left)", Gpu(i)));
      if (auto v = Get(g, GpuMetric::kRemappedRowsPending); v && *v > 0)
        ecc.Warn(
            fmt::format("{}: a row remap is pending; it applies at the next GPU reset", Gpu(i)));
      if (auto v = Get(g, GpuMetric::kRetiredPagesPending); v && *v > 0)
        ecc.Warn(fmt::format("{}: a page retirement is pending until the next reset", Gpu(i)));
      if (auto v = Get(g, GpuMetric::kRemappedRowsUncorrectable); v && *v > 0)
        ecc.Warn(fmt::format("{}: {} row(s) remapped after uncorrectable errors", Gpu(i), *v));
      if (auto v = Get(g, GpuMetric::kEccSbeVolatile); v && *v >= kSbeWarn)
        ecc.Warn(fmt::format("{}: {} corrected (single-bit) ECC errors since the driver loaded",
                             Gpu(i), *v));
    }
    out.push_back(ecc.Done("no uncorrectable errors, no pending remaps or retirements",
                           "Drain the GPU and reset it to apply pending remaps; a DBE or a "
                           "failed remap is an RMA case (docs/runbook.md, ecc_dbe)"));

    Builder clocks("clocks");
    Builder temp("temperature");
    Builder pcie("pcie");
    Builder nvlink("nvlink");
    for (size_t i = 0; i < n; ++i) {
      const model::GpuSample& g = s.gpu_samples[i];
      if (g.lost) continue;
      const double util = Get(g, GpuMetric::kUtilGpuPct).value_or(0);
      if (auto m = Get(g, GpuMetric::kClockEventReasons); m && *m >= 0) {
        const auto mask = static_cast<uint64_t>(*m);
        std::string names;
        for (auto r : model::ClockEventReasonNames(
                 mask & (kHwSlowdown | kHwThermal | kHwPowerBrake | kSwThermal)))
          names += (names.empty() ? "" : ", ") + std::string(r);
        const auto sm = Get(g, GpuMetric::kSmClockMhz);
        const auto max_sm = Get(g, GpuMetric::kMaxSmClockMhz);
        const std::string clock =
            sm && max_sm ? fmt::format(" (SM {:.0f} of {:.0f} MHz)", *sm, *max_sm) : "";
        if (mask & (kHwSlowdown | kHwThermal | kHwPowerBrake)) {
          clocks.Fail(fmt::format("{}: hardware slowdown active: {}{}", Gpu(i), names, clock));
        } else if (mask & kSwThermal) {
          clocks.Warn(fmt::format("{}: thermal slowdown active{}", Gpu(i), clock));
        }
      }
      if (auto t = Get(g, GpuMetric::kTempC); t && *t >= kHotC)
        temp.Warn(fmt::format("{}: {:.0f} °C", Gpu(i), *t));
      if (auto t = Get(g, GpuMetric::kMemTempC); t && *t >= kMemHotC)
        temp.Warn(fmt::format("{}: memory at {:.0f} °C", Gpu(i), *t));
      const auto width = Get(g, GpuMetric::kPcieWidth);
      const auto max_width = Get(g, GpuMetric::kPcieMaxWidth);
      if (width && max_width && *width < *max_width)
        pcie.Warn(fmt::format("{}: PCIe link x{:.0f} of x{:.0f}", Gpu(i), *width, *max_width));
      // An idle GPU lowers its link generation to save power; only a busy one should not.
      const auto gen = Get(g, GpuMetric::kPcieGen);
      const auto max_gen = Get(g, GpuMetric::kPcieMaxGen);
      if (gen && max_gen && *gen < *max_gen && util >= kBusyPct)
        pcie.Warn(fmt::format("{}: PCIe gen {:.0f} of {:.0f} while {:.0f} % busy", Gpu(i), *gen,
                              *max_gen, util));
      const unsigned links = s.devices[i].nvlink_count;
      if (auto active = Get(g, GpuMetric::kNvlinkActiveLinks);
          active && links > 0 && *active < links)
        nvlink.Warn(fmt::format("{}: {:.0f} of {} NVLinks active", Gpu(i), *active, links));
    }
    out.push_back(clocks.Done("no hardware or thermal slowdown active",
                              "Check cooling, power delivery and the BMC's sensor log "
                              "(docs/runbook.md, thermal_throttle / clock_slowdown)"));
    out.push_back(temp.Done(fmt::format("every GPU below {:.0f} °C", kHotC),
                            "Check the airflow, fans and inlet temperature of this node"));
    out.push_back(pcie.Done("every PCIe link at its maximum width (and generation when busy)",
                            "Reseat the GPU or its riser; check the slot's BIOS settings "
                            "(docs/runbook.md, pcie_downgrade)"));
    out.push_back(nvlink.Done("every NVLink active",
                              "Drain the node and check the NVLinks (nvidia-smi nvlink -s); an "
                              "inactive link makes NCCL fall back (docs/runbook.md, "
                              "nvlink_errors)"));
  }

  // The topology against the archive.
  if (archive.where.empty()) {
    out.push_back(Skip("topology", "no --data-dir: no archived topology to compare with"));
  } else if (!archive.problem.empty()) {
    out.push_back({"topology", "warn", {archive.problem}, "Check the agent's --data-dir"});
  } else if (!archive.latest) {
    out.push_back(Skip("topology", "nothing archived yet under " + archive.where));
  } else if (!s.topology) {
    out.push_back(Skip("topology", "the topology could not be probed"));
  } else {
    Builder topo("topology");
    for (const topo::TopologyChange& c : topo::DiffSnapshots(*archive.latest, *s.topology))
      topo.Warn(c.summary);
    out.push_back(topo.Done(fmt::format("matches archived version {}", archive.version.value_or(0)),
                            "Find what changed (a reseated GPU, a BIOS update, a failed link); "
                            "the agent archives the new topology and marks baselines stale"));
  }

  // NUMA placement of the processes on the GPUs.
  Builder numa("numa");
  for (const model::ProcessAttribution& p : s.processes) {
    if (!p.numa_mismatch()) continue;
    std::string cpus;
    for (unsigned c : p.cpu_numa_nodes) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
    numa.Warn(fmt::format("pid {} ({}{}) on GPU {} (NUMA {}) runs on CPUs of NUMA {}", p.pid,
                          p.command, p.job_id.empty() ? "" : ", job " + p.job_id, p.gpu_index,
                          *p.gpu_numa_node, cpus));
  }
  out.push_back(numa.Done(s.processes.empty()
                              ? "no process on a GPU"
                              : fmt::format("{} GPU process(es), each on its GPU's NUMA node "
                                            "(or unbound)",
                                            s.processes.size()),
                          "Bind each rank to its GPU's NUMA node (numactl --cpunodebind, or the "
                          "launcher's --cpu-bind) (docs/runbook.md, numa_mismatch)"));

  // The host clock.
  if (!s.host || (!s.host->clock_synced && !s.host->time_source_offset_ms)) {
    out.push_back(Skip("time", "the clock's sync state could not be read"));
  } else {
    Builder time("time");
    if (s.host->clock_synced && !*s.host->clock_synced)
      time.Warn("the kernel says no time source keeps this clock synced");
    if (auto off = s.host->time_source_offset_ms; off && std::fabs(*off) > kClockSkewMs)
      time.Warn(fmt::format("{:.0f} ms off its time source", *off));
    out.push_back(time.Done("synced",
                            "Start or fix chrony/ntpd/PTP; timelines of several nodes need "
                            "their clocks within 100 ms (docs/runbook.md, clock_skew)"));
  }
  return out;
}

namespace {

std::string Render(const std::vector<DoctorCheck>& checks, const std::string& host) {
  std::string out = fmt::format("gpuwatch doctor: {}\n", host);
  int problems = 0;
  for (const DoctorCheck& c : checks) {
    const char* mark = c.status == "ok"     ? "[ok]  "
                       : c.status == "warn" ? "[WARN]"
                       : c.status == "fail" ? "[FAIL]"
                                            : "[skip]";
    problems += c.status == "warn" || c.status == "fail";
    out += fmt::format("{} {:<12}{}\n", mark, c.name, c.details.empty() ? "" : c.details[0]);
    for (size_t i = 1; i < c.details.size(); ++i) out += fmt::format("{:19}{}\n", "", c.details[i]);
    if (!c.action.empty()) out += fmt::format("{:19}→ {}\n", "", c.action);
  }
  out += problems == 0 ? "Nothing wrong found.\n"
                       : fmt::format("{} check(s) need attention.\n", problems);
  return out;
}

}  // namespace

int RunDoctor(std::unique_ptr<collect::GpuSource> gpu, const std::string& root_dir,
              const std::string& data_dir, bool json, std::ostream& out, std::ostream& err) {
  SetLogLevel(LogLevel::kError);  // a checklist: warnings would interleave with it
  server::AgentOptions o;
  o.root_dir = root_dir;
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) == 0) o.hostname = buf;
  // No data dir for the agent itself: doctor reads the archive, it never writes it.
  server::Agent agent(o, std::move(gpu));
  if (Status st = agent.Init(); !st.ok()) {
    err << "gpuwatch: doctor: " << st.message() << "\n";
    return 2;
  }
  agent.TickProcesses();
  agent.TickGpu();
  agent.TickHost();
  agent.TickTopology();
  DoctorArchive archive;
  if (!data_dir.empty()) {
    topo::TopologyArchive a(data_dir + "/topology");
    archive.where = a.dir();
    auto latest = a.Latest();
    if (latest.ok()) {
      archive.version = latest->first;
      archive.latest = std::move(latest->second);
    } else if (latest.status().code() != StatusCode::kNotFound) {
      archive.problem = latest.status().message();
    }
  }
  std::vector<DoctorCheck> checks;
  std::string host;
  agent.WithState([&](const server::AgentState& s) {
    checks = DoctorChecks(s, archive);
    host = s.hostname;
    return 0;
  });
  bool problem = false;
  for (const DoctorCheck& c : checks) problem = problem || c.status == "warn" || c.status == "fail";
  if (json) {
    nlohmann::json j = {{"node", host}, {"ok", !problem}, {"checks", nlohmann::json::array()}};
    for (const DoctorCheck& c : checks) {
      nlohmann::json e = {{"name", c.name}, {"status", c.status}, {"details", c.details}};
      if (!c.action.empty()) e["action"] = c.action;
      j["checks"].push_back(std::move(e));
    }
    out << j.dump(2) << "\n";
  } else {
    out << Render(checks, host);
  }
  return problem ? 1 : 0;
}

void RegisterDoctorCommand(CLI::App* app, Commands* out) {
  struct Flags {
    std::string nvml = collect::kDefaultNvmlLibrary, root = "/", data_dir;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  auto* doctor = app->add_subcommand(
      "doctor",
      "One-shot health check of this node as a checklist: driver and NVML, GPUs, ECC and row "
      "remaps, clock reasons, temperatures, PCIe and NVLinks, topology against the archive, "
      "NUMA of GPU processes, clock sync (exit 0 all well, 1 something wrong, 2 error)");
  doctor->add_flag("--json", f->json, "Print the checks as JSON");
  doctor->add_option("--nvml-lib", f->nvml, "NVML library to dlopen (default libnvidia-ml.so.1)");
  doctor->add_option("--root-dir", f->root, "Root of procfs/sysfs to read (default /)");
  doctor->add_option("--data-dir", f->data_dir,
                     "The agent's --data-dir: compare the topology with its archive (read only)");
  out->push_back({doctor, [f] {
                    return RunDoctor(MakeGpuSource(f->nvml), f->root, f->data_dir, f->json,
                                     std::cout, std::cerr);
                  }});
}

}  // namespace gpuwatch::cli
