// Card rules: what a GPU's own counters, clock-event reasons and events say.
//
// - thermal_throttle / power_throttle / clock_slowdown: a clock-event reason held on a busy GPU
//   (thermal and slowdown: a few consecutive samples; the power cap, which flickers on healthy
//   GPUs at full load: most of a window with the SM clock well below its maximum or its peers').
// - pcie_downgrade: a link trained below its maximum width, or generation while busy (GPUs lower
//   the generation when idle by design).
// - pcie_replay, ecc_sbe_growth, nvlink_errors: counters that rise repeatedly within a window (a
//   single isolated increment is healthy); nvlink_errors also when links go down from the count
//   the node record states.
// - ecc_dbe: a volatile DBE count that rises, a row-remapping failure, an uncorrectable ECC event.
// - gpu_lost / xid: events (NVML's XID and GPU_IS_LOST); XIDs with a more specific cause are that
//   cause (findings.md: 79 gpu_lost; 48, 63, 64, 94, 95 ecc_dbe; 74 nvlink_errors), and 43 and 45
//   are consequences (a faulting process stopped, channels cleaned up as it died), not causes.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <deque>
#include <map>

#include "analyze/rules/counter_runs.h"
#include "analyze/rules/rules.h"
#include "analyze/rules/xid_catalog.h"
#include "common/strings.h"
#include "logs/kernel_log.h"

namespace gpuwatch::analyze {
namespace {

using trace::TraceGpu;

bool Has(const std::optional<std::vector<std::string>>& reasons, std::string_view r) {
  return reasons && std::find(reasons->begin(), reasons->end(), r) != reasons->end();
}

constexpr std::array kCauses = {
    Cause::kThermalThrottle, Cause::kPowerThrottle, Cause::kClockSlowdown,
    Cause::kPcieDowngrade,   Cause::kPcieReplay,    Cause::kEccSbeGrowth,
    Cause::kEccDbe,          Cause::kNvlinkErrors,  Cause::kXid,
    Cause::kGpuLost};

class CardRule : public Rule {
 public:
  explicit CardRule(const CardOptions& o) : o_(o) {}
  std::string_view name() const override { return "card"; }
  std::span<const Cause> causes() const override { return kCauses; }

  void Observe(const trace::TraceRecord& r, Context& ctx) override {
    if (const auto* g = r.as<TraceGpu>()) OnGpu(r, *g, ctx);
    if (const auto* e = r.as<trace::TraceEvent>()) OnEvent(r, *e, ctx);
    if (const auto* l = r.as<trace::TraceLog>()) OnKernelLine(r, *l, ctx);
  }

 private:
  struct GpuState {
    std::optional<TraceGpu> prev;
    // Start and length of the current run of samples with the reason held.
    double thermal_start = 0, slowdown_start = 0, brake_start = 0, width_start = 0, gen_start = 0;
    int thermal_run = 0, slowdown_run = 0, brake_run = 0, width_run = 0, gen_run = 0;
    double setting_start = 0;
    int setting_run = 0;
    std::deque<std::pair<double, bool>> power;             // (t, capped and slow) of busy samples
    std::map<std::string, std::deque<double>> increments;  // counter -> times it rose
  };

  void OnGpu(const trace::TraceRecord& r, const TraceGpu& g, Context& ctx);
  // The SM clock clearly below the GPU's maximum, or below its busy peers' median `peer_clock`.
  bool ClockedDown(const TraceGpu& g, const trace::TraceNodeGpu* info,
                   std::optional<double> peer_clock) const;
  // Busy peers' median SM clock on the node, when any.
  std::optional<double> PeerClock(const trace::TraceRecord& r, uint32_t gpu,
                                  const Context& ctx) const;
  void OnEvent(const trace::TraceRecord& r, const trace::TraceEvent& e, Context& ctx);
  // The driver's own words in the kernel log: many XIDs reach only the kernel log (nothing was
  // listening to NVML's events, or the text after the code is the evidence), and a GPU that
  // falls off the bus as the driver probes it prints no XID at all (docs/research/xid.md, "How
  // an Xid reaches the host").
  void OnKernelLine(const trace::TraceRecord& r, const trace::TraceLog& l, Context& ctx);
  // `bus`: the PCI address the driver named, for the summary when no GPU of the node has it.
  void ReportXid(const trace::TraceRecord& r, int64_t code, std::optional<int> gpu,
                 const std::string& message, const std::string& source, Context& ctx,
                 const std::string& bus = "");
  // The GPU a driver line names by PCI address: the node record's bus ids, else the UUID the
  // driver printed for that address ("NVRM: GPU at PCI:…: GPU-…").
  std::optional<int> GpuOfBus(const trace::TraceRecord& r, const std::string& bus,
                              const Context& ctx) const;

  CardOptions o_;
  std::map<std::pair<std::string, uint32_t>, GpuState> gpus_;
  std::map<std::pair<std::string, std::string>, std::string> bus_uuid_;  // (node, bus) → UUID
};

void CardRule::OnGpu(const trace::TraceRecord& r, const TraceGpu& g, Context& ctx) {
  if (!g.gpu || g.mig) return;
  const uint32_t index = *g.gpu;
  const int gpu = static_cast<int>(index);
  GpuState& s = gpus_[{r.node, index}];
  const trace::TraceNodeGpu* info = ctx.NodeGpu(r.node, index);
  const bool busy = g.util_pct && *g.util_pct >= o_.busy_util_pct;
  // The busy peers' median SM clock: what a busy GPU's clock is compared with (once a sample).
  const std::optional<double> peer_clock = busy ? PeerClock(r, index, ctx) : std::nullopt;
  const double t = r.t;

  // Runs of a reason held on a busy GPU: `start` is the run's first sample.
  auto run = [&](bool held, int* len, double* start) {
    if (!held) {
      *len = 0;
      return false;
    }
    if (*len == 0) *start = t;
    ++*len;
    return *len >= o_.consecutive_samples;
  };
  // Which clock-event reason holds the clock down. nvml.h documents HW Slowdown (0x8) as the
  // umbrella of HW Thermal Slowdown (0x40) and HW Power Brake Slowdown (0x80), and also of
  // "Power draw is too high and Fast Trigger protection is reducing the clocks"
  // (docs/research/clock-reasons.md §2): with a thermal or brake bit beside it, the cause is
  // that bit's; alone, it is a slowdown for another reason.
  const bool hw_thermal = Has(g.throttle, "hw_thermal"), sw_thermal = Has(g.throttle, "sw_thermal");
  const bool brake = Has(g.throttle, "hw_power_brake");
  const bool thermal = busy && (hw_thermal || sw_thermal);
  if (run(thermal, &s.thermal_run, &s.thermal_start)) {
    Finding f = MakeFinding(Cause::kThermalThrottle, Severity::kWarning, r.node, gpu);
    f.first_seen = s.thermal_start;
    f.summary =
        fmt::format("GPU {} is thermally throttled: {} at {} °C, SM clock {} MHz", gpu,
                    hw_thermal ? "hw_thermal" : "sw_thermal", g.temp_c ? Num(*g.temp_c) : "?",
                    g.sm_clock_mhz ? Num(*g.sm_clock_mhz) : "?");
    f.evidence = {fmt::format("{} held for {} samples on a busy GPU", fmt::join(*g.throttle, ","),
                              s.thermal_run)};
    if (info && info->max_sm_clock_mhz && g.sm_clock_mhz) {
      f.evidence.push_back(fmt::format("sm_clock_mhz {} vs max {}", Num(*g.sm_clock_mhz),
                                       Num(*info->max_sm_clock_mhz)));
    }
    f.action = "Check the GPU's airflow, fans and inlet temperature; drain the node if it persists";
    ctx.Report(std::move(f), t);
  }
  const bool slowdown =
      busy && Has(g.throttle, "hw_slowdown") && !hw_thermal && !sw_thermal && !brake;
  if (run(slowdown, &s.slowdown_run, &s.slowdown_start)) {
    Finding f = MakeFinding(Cause::kClockSlowdown, Severity::kWarning, r.node, gpu);
    f.first_seen = s.slowdown_start;
    f.summary = fmt::format("GPU {} clocks are held down by hw_slowdown{}", gpu,
                            g.sm_clock_mhz ? fmt::format(" ({} MHz)", Num(*g.sm_clock_mhz)) : "");
    f.evidence = {
        fmt::format("hw_slowdown held for {} samples without a thermal or power-brake "
                    "reason beside it",
                    s.slowdown_run)};
    f.action =
        "Check power delivery and the board (hw_slowdown alone: Fast Trigger protection against "
        "power spikes, or an external slowdown signal); compare with the node's other GPUs";
    ctx.Report(std::move(f), t);
  }
  // Clocks an administrator's setting holds down: applications clocks (nvidia-smi -ac) or a
  // sync-boost group. The reason alone is not a fault — the A100's default applications clock
  // is below its maximum — so it counts when the clock is clearly below the GPU's maximum or
  // its busy peers' (clock-reasons.md §3).
  const bool setting = busy && (Has(g.throttle, "app_clocks") || Has(g.throttle, "sync_boost")) &&
                       !hw_thermal && !sw_thermal && !brake && !Has(g.throttle, "hw_slowdown") &&
                       ClockedDown(g, info, peer_clock);
  if (run(setting, &s.setting_run, &s.setting_start)) {
    Finding f = MakeFinding(Cause::kClockSlowdown, Severity::kWarning, r.node, gpu);
    f.first_seen = s.setting_start;
    f.summary =
        fmt::format("GPU {} clocks are held at {} MHz by a clock setting ({})", gpu,
                    g.sm_clock_mhz ? Num(*g.sm_clock_mhz) : "?", fmt::join(*g.throttle, ","));
    f.evidence = {fmt::format("{} held for {} samples on a busy GPU", fmt::join(*g.throttle, ","),
                              s.setting_run)};
    if (info && info->max_sm_clock_mhz && g.sm_clock_mhz) {
      f.evidence.push_back(fmt::format("sm_clock_mhz {} vs max {}", Num(*g.sm_clock_mhz),
                                       Num(*info->max_sm_clock_mhz)));
    }
    f.action =
        "Check the GPU's applications clocks and locked clocks (nvidia-smi -q -d CLOCK); reset "
        "them (nvidia-smi -rac, -rgc) unless they are meant";
    ctx.Report(std::move(f), t);
  }
  if (run(busy && brake, &s.brake_run, &s.brake_start)) {
    Finding f = MakeFinding(Cause::kPowerThrottle, Severity::kWarning, r.node, gpu);
    f.first_seen = s.brake_start;
    f.summary = fmt::format("GPU {} is held by the hardware power brake", gpu);
    f.evidence = {fmt::format("hw_power_brake held for {} samples", s.brake_run)};
    f.action = "Check the PSUs and the power budget of the node";
    ctx.Report(std::move(f), t);
  }
  // The software power cap: at full load GPUs touch it all the time for a sample or two, and
  // some hold it through heavy kernels at full speed. It costs speed when it is held over most
  // of a window while the clock stays below its maximum by a clear margin, or below its peers'
  // (the same job on the other GPUs of the node runs faster).
  if (busy) {
    const bool slow = ClockedDown(g, info, peer_clock);
    s.power.push_back({t, Has(g.throttle, "sw_power_cap") && slow});
    while (!s.power.empty() && s.power.front().first < t - o_.power_window_s) s.power.pop_front();
    size_t capped = 0;
    for (const auto& [pt, c] : s.power) capped += c ? 1 : 0;
    const double span = s.power.back().first - s.power.front().first;
    if (span >= o_.power_window_s * 0.8 &&
        static_cast<double>(capped) >= o_.power_share * static_cast<double>(s.power.size())) {
      double first = t;
      for (const auto& [pt, c] : s.power) {
        if (c) {
          first = pt;
          break;
        }
      }
      Finding f = MakeFinding(Cause::kPowerThrottle, Severity::kWarning, r.node, gpu);
      f.first_seen = first;
      f.summary = fmt::format("GPU {} runs at its power cap with the SM clock at {} MHz", gpu,
                              g.sm_clock_mhz ? Num(*g.sm_clock_mhz) : "?");
      f.evidence = {fmt::format("sw_power_cap in {} of {} busy samples over {} s", capped,
                                s.power.size(), Num(span))};
      if (peer_clock) f.evidence.push_back("peers' median SM clock " + Num(*peer_clock) + " MHz");
      if (g.power_w) f.evidence.push_back("power_w " + Num(*g.power_w));
      f.action =
          "Check the power limit set on the GPU (nvidia-smi -q -d POWER) and the node's power "
          "budget";
      ctx.Report(std::move(f), t);
    }
  }
  // (Idle samples are skipped, not a reset: a checkpoint step idles the GPU for seconds.)

  // PCIe: width below the maximum is a link that trained narrow; a lower generation only
  // matters while busy (GPUs lower it when idle by design).
  const bool narrow =
      g.pcie_width && info && info->pcie_max_width && *g.pcie_width < *info->pcie_max_width;
  if (run(narrow, &s.width_run, &s.width_start)) {
    Finding f = MakeFinding(Cause::kPcieDowngrade, Severity::kWarning, r.node, gpu);
    f.first_seen = s.width_start;
    f.summary = fmt::format("GPU {} PCIe link runs at x{} of x{}", gpu, Num(*g.pcie_width),
                            Num(*info->pcie_max_width));
    f.evidence = {fmt::format("pcie_width {} vs pcie_max_width {}", Num(*g.pcie_width),
                              Num(*info->pcie_max_width))};
    f.action = "Reseat the GPU or its riser; check the slot and the PCIe switch (lspci -vv LnkSta)";
    ctx.Report(std::move(f), t);
  }
  const bool slow_gen =
      busy && g.pcie_gen && info && info->pcie_max_gen && *g.pcie_gen < *info->pcie_max_gen;
  if (run(slow_gen, &s.gen_run, &s.gen_start)) {
    Finding f = MakeFinding(Cause::kPcieDowngrade, Severity::kWarning, r.node, gpu);
    f.first_seen = s.gen_start;
    f.summary = fmt::format("GPU {} PCIe link runs at gen{} of gen{} while busy", gpu,
                            Num(*g.pcie_gen), Num(*info->pcie_max_gen));
    f.evidence = {fmt::format("pcie_gen {} vs pcie_max_gen {} at util {}%", Num(*g.pcie_gen),
                              Num(*info->pcie_max_gen), Num(*g.util_pct))};
    f.action = "Check the slot's and the switch's link training; reseat the GPU";
    ctx.Report(std::move(f), t);
  }

  // Counters: a rise (a lower value is a reset, not a rise).
  auto rose = [&](const char* name, std::optional<double> TraceGpu::*field) {
    if (!s.prev || !(g.*field) || !((*s.prev).*field)) return false;
    if (*(g.*field) <= *((*s.prev).*field)) return false;
    auto& times = s.increments[name];
    times.push_back(t);
    while (!times.empty() && times.front() < t - o_.counter_window_s) times.pop_front();
    return true;
  };
  if (rose("ecc_dbe", &TraceGpu::ecc_dbe_volatile) ||
      (g.remapped_rows_failure.value_or(false) && s.prev &&
       !s.prev->remapped_rows_failure.value_or(false))) {
    Finding f = MakeFinding(Cause::kEccDbe, Severity::kCritical, r.node, gpu);
    f.summary = fmt::format("GPU {} had an uncorrectable memory error", gpu);
    f.evidence = {g.ecc_dbe_volatile ? "ecc_dbe_volatile " + Num(*g.ecc_dbe_volatile)
                                     : "remapped_rows_failure true"};
    f.action = "Drain the node; reset the GPU; replace it if row remapping failed";
    ctx.Report(std::move(f), t);
  }
  auto repeated = [&](const char* name, std::optional<double> TraceGpu::*field, Cause cause,
                      const char* what, const char* action) {
    if (!rose(name, field)) return;
    const auto& times = s.increments[name];
    if (static_cast<int>(times.size()) < o_.counter_increments) return;
    Finding f = MakeFinding(cause, Severity::kWarning, r.node, gpu);
    f.first_seen = RunStart(times, o_.MaxIncrementGap());
    f.summary = fmt::format("GPU {} {} keep rising ({} now)", gpu, what, Num(*(g.*field)));
    f.evidence = {
        fmt::format("{} rose {} times in {} s", name, times.size(), Num(o_.counter_window_s))};
    f.action = action;
    ctx.Report(std::move(f), t);
  };
  repeated("pcie_replay", &TraceGpu::pcie_replay, Cause::kPcieReplay, "PCIe replays",
           "Check the riser, slot and PCIe switch of the GPU; reseat it");
  repeated("ecc_sbe", &TraceGpu::ecc_sbe_volatile, Cause::kEccSbeGrowth, "correctable ECC errors",
           "Watch for row remapping; plan to replace the GPU if the growth continues");
  for (auto [name, field] : {std::pair{"nvlink_crc", &TraceGpu::nvlink_crc_errors},
                             std::pair{"nvlink_replay", &TraceGpu::nvlink_replay},
                             std::pair{"nvlink_recovery", &TraceGpu::nvlink_recovery}}) {
    repeated(name, field, Cause::kNvlinkErrors, "NVLink error counters",
             "Check the NVLink bridge or baseboard; run nvidia-smi nvlink -e; drain if links drop");
  }
  if (g.nvlink_active_links && info && info->nvlink_count &&
      *g.nvlink_active_links < static_cast<double>(*info->nvlink_count)) {
    Finding f = MakeFinding(Cause::kNvlinkErrors, Severity::kWarning, r.node, gpu);
    f.summary = fmt::format("GPU {} has {} of its {} NVLinks active", gpu,
                            Num(*g.nvlink_active_links), *info->nvlink_count);
    f.evidence = {fmt::format("nvlink_active_links {} vs nvlink_count {}",
                              Num(*g.nvlink_active_links), *info->nvlink_count)};
    f.action = "Check the NVLink bridge or baseboard; drain the node";
    ctx.Report(std::move(f), t);
  }
  s.prev = g;
}

std::optional<double> CardRule::PeerClock(const trace::TraceRecord& r, uint32_t gpu,
                                          const Context& ctx) const {
  std::vector<double> peers;
  for (uint32_t other : ctx.GpusOf(r.node)) {
    const TraceGpu* o = other == gpu ? nullptr : ctx.LastGpu(r.node, other);
    if (o && o->sm_clock_mhz && o->util_pct && *o->util_pct >= o_.busy_util_pct) {
      peers.push_back(*o->sm_clock_mhz);
    }
  }
  if (peers.empty()) return std::nullopt;
  std::sort(peers.begin(), peers.end());
  return peers[peers.size() / 2];
}

bool CardRule::ClockedDown(const TraceGpu& g, const trace::TraceNodeGpu* info,
                           std::optional<double> peer_clock) const {
  if (!g.sm_clock_mhz || !g.gpu) return false;
  if (info && info->max_sm_clock_mhz &&
      *g.sm_clock_mhz < o_.power_clock_ratio * *info->max_sm_clock_mhz) {
    return true;
  }
  return peer_clock && *g.sm_clock_mhz < o_.power_peer_clock_ratio * *peer_clock;
}

void CardRule::OnEvent(const trace::TraceRecord& r, const trace::TraceEvent& e, Context& ctx) {
  if (!e.kind) return;
  const std::optional<int> gpu =
      e.gpu ? std::optional<int>(static_cast<int>(*e.gpu)) : std::nullopt;
  const std::string message = e.message.value_or("");
  if (*e.kind == "gpu_lost" || (*e.kind == "xid" && e.code && *e.code == 79)) {
    Finding f = MakeFinding(Cause::kGpuLost, Severity::kCritical, r.node, gpu);
    f.summary = gpu ? fmt::format("GPU {} stopped answering (fell off the bus)", *gpu)
                    : "A GPU stopped answering";
    f.evidence = {
        fmt::format("{}{}: {}", *e.kind, e.code ? " " + std::to_string(*e.code) : "", message)};
    f.action = "Drain the node; reset or reseat the GPU; check its power and PCIe link";
    ctx.Report(std::move(f), r.t);
    return;
  }
  if (*e.kind == "xid" && e.code) {
    ReportXid(r, *e.code, gpu, message, "xid", ctx);
    return;
  }
  if (*e.kind == "ecc" && gpu) {
    // An ECC event names the error type in its message; an uncorrectable one is a DBE.
    const std::string lower = ToLower(message);
    if (lower.find("double") != std::string::npos || lower.find("uncorrect") != std::string::npos ||
        lower.find("dbe") != std::string::npos) {
      Finding f = MakeFinding(Cause::kEccDbe, Severity::kCritical, r.node, gpu);
      f.summary = fmt::format("GPU {} had an uncorrectable memory error", *gpu);
      f.evidence = {"ecc event: " + message};
      f.action = "Drain the node; reset the GPU; replace it if row remapping failed";
      ctx.Report(std::move(f), r.t);
    }
  }
}

void CardRule::ReportXid(const trace::TraceRecord& r, int64_t code, std::optional<int> gpu,
                         const std::string& message, const std::string& source, Context& ctx,
                         const std::string& bus) {
  const XidMeaning meaning = MeaningOfXid(code, message);
  if (!meaning.cause) return;  // a consequence of another error
  const Cause cause = *meaning.cause;
  Finding f = MakeFinding(cause, meaning.severity, r.node, gpu);
  if (cause == Cause::kXid) f.code = code;
  const std::string which = gpu ? std::to_string(*gpu) : bus.empty() ? "?" : "at " + bus;
  f.summary = cause == Cause::kGpuLost
                  ? fmt::format("GPU {} stopped answering (XID {}: fell off the bus)", which, code)
                  : fmt::format("XID {} on GPU {} ({}): {}", code, which, meaning.family, message);
  f.evidence = {fmt::format("{} {}: {}", source, code, message)};
  f.action = std::string(meaning.action);
  ctx.Report(std::move(f), r.t);
}

std::optional<int> CardRule::GpuOfBus(const trace::TraceRecord& r, const std::string& bus,
                                      const Context& ctx) const {
  if (bus.empty()) return std::nullopt;
  if (auto g = ctx.GpuByPciBusId(r.node, bus)) return static_cast<int>(*g);
  auto it = bus_uuid_.find({r.node, ToLower(bus)});
  const trace::TraceNode* n = ctx.Node(r.node);
  if (it == bus_uuid_.end() || !n || !n->gpus) return std::nullopt;
  for (const auto& g : *n->gpus) {
    if (g.index && g.uuid && ToLower(*g.uuid) == ToLower(it->second)) {
      return static_cast<int>(*g.index);
    }
  }
  return std::nullopt;
}

void CardRule::OnKernelLine(const trace::TraceRecord& r, const trace::TraceLog& l, Context& ctx) {
  if (!l.line || l.source.value_or("") != "kernel") return;
  const logs::KernelLine k = logs::ParseKernelLine(*l.line);
  switch (k.kind) {
    case logs::KernelLine::Kind::kGpuUuid:
      if (bus_uuid_.size() < 4096) bus_uuid_[{r.node, ToLower(k.pci_bus_id)}] = k.uuid;
      return;
    case logs::KernelLine::Kind::kXid:
      ReportXid(r, static_cast<int64_t>(k.xid->xid), GpuOfBus(r, k.xid->pci_bus_id, ctx),
                k.xid->text, "kernel log: NVRM Xid", ctx, k.xid->pci_bus_id);
      return;
    case logs::KernelLine::Kind::kFallenOffBus: {
      const std::optional<int> gpu = GpuOfBus(r, k.pci_bus_id, ctx);
      Finding f = MakeFinding(Cause::kGpuLost, Severity::kCritical, r.node, gpu);
      f.summary = fmt::format("GPU {} ({}) fell off the bus", gpu ? std::to_string(*gpu) : "?",
                              k.pci_bus_id.empty() ? "no bus id" : k.pci_bus_id);
      f.evidence = {"kernel log: " + *l.line};
      f.action = "Drain the node; reset or reseat the GPU; check its power and PCIe link";
      ctx.Report(std::move(f), r.t);
      return;
    }
    default:
      return;
  }
}

}  // namespace

std::unique_ptr<Rule> MakeCardRule(const CardOptions& o) { return std::make_unique<CardRule>(o); }

}  // namespace gpuwatch::analyze
