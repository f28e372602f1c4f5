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
  }

 private:
  struct GpuState {
    std::optional<TraceGpu> prev;
    // Start and length of the current run of samples with the reason held.
    double thermal_start = 0, slowdown_start = 0, brake_start = 0, width_start = 0, gen_start = 0;
    int thermal_run = 0, slowdown_run = 0, brake_run = 0, width_run = 0, gen_run = 0;
    std::deque<std::pair<double, bool>> power;             // (t, capped and slow) of busy samples
    std::map<std::string, std::deque<double>> increments;  // counter -> times it rose
  };

  void OnGpu(const trace::TraceRecord& r, const TraceGpu& g, Context& ctx);
  void OnEvent(const trace::TraceRecord& r, const trace::TraceEvent& e, Context& ctx);

  CardOptions o_;
  std::map<std::pair<std::string, uint32_t>, GpuState> gpus_;
};

void CardRule::OnGpu(const trace::TraceRecord& r, const TraceGpu& g, Context& ctx) {
  if (!g.gpu || g.mig) return;
  const uint32_t index = *g.gpu;
  const int gpu = static_cast<int>(index);
  GpuState& s = gpus_[{r.node, index}];
  const trace::TraceNodeGpu* info = ctx.NodeGpu(r.node, index);
  const bool busy = g.util_pct && *g.util_pct >= o_.busy_util_pct;
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
  const bool thermal = busy && (Has(g.throttle, "hw_thermal") || Has(g.throttle, "sw_thermal"));
  if (run(thermal, &s.thermal_run, &s.thermal_start)) {
    Finding f = MakeFinding(Cause::kThermalThrottle, Severity::kWarning, r.node, gpu);
    f.first_seen = s.thermal_start;
    f.summary =
        fmt::format("GPU {} is thermally throttled: {} at {} °C, SM clock {} MHz", gpu,
                    Has(g.throttle, "hw_thermal") ? "hw_thermal" : "sw_thermal",
                    g.temp_c ? Num(*g.temp_c) : "?", g.sm_clock_mhz ? Num(*g.sm_clock_mhz) : "?");
    f.evidence = {fmt::format("throttle reasons held for {} samples on a busy GPU", s.thermal_run)};
    if (info && info->max_sm_clock_mhz && g.sm_clock_mhz) {
      f.evidence.push_back(fmt::format("sm_clock_mhz {} vs max {}", Num(*g.sm_clock_mhz),
                                       Num(*info->max_sm_clock_mhz)));
    }
    f.action = "Check the GPU's airflow, fans and inlet temperature; drain the node if it persists";
    ctx.Report(std::move(f), t);
  }
  if (run(busy && Has(g.throttle, "hw_slowdown"), &s.slowdown_run, &s.slowdown_start)) {
    Finding f = MakeFinding(Cause::kClockSlowdown, Severity::kWarning, r.node, gpu);
    f.first_seen = s.slowdown_start;
    f.summary = fmt::format("GPU {} clocks are held down by hw_slowdown", gpu);
    f.evidence = {fmt::format("hw_slowdown held for {} samples", s.slowdown_run)};
    f.action = "Check power delivery and the board (hw_slowdown: external or power-brake signal)";
    ctx.Report(std::move(f), t);
  }
  if (run(busy && Has(g.throttle, "hw_power_brake"), &s.brake_run, &s.brake_start)) {
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
    std::vector<double> peers;
    for (uint32_t other : ctx.GpusOf(r.node)) {
      const TraceGpu* o = other == index ? nullptr : ctx.LastGpu(r.node, other);
      if (o && o->sm_clock_mhz && o->util_pct && *o->util_pct >= o_.busy_util_pct) {
        peers.push_back(*o->sm_clock_mhz);
      }
    }
    std::optional<double> peer_clock;
    if (!peers.empty()) {
      std::sort(peers.begin(), peers.end());
      peer_clock = peers[peers.size() / 2];
    }
    const bool slow = g.sm_clock_mhz &&
                      ((info && info->max_sm_clock_mhz &&
                        *g.sm_clock_mhz < o_.power_clock_ratio * *info->max_sm_clock_mhz) ||
                       (peer_clock && *g.sm_clock_mhz < o_.power_peer_clock_ratio * *peer_clock));
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
    const std::optional<Cause> cause = CauseOfXid(*e.code);
    if (!cause) return;
    Finding f = MakeFinding(
        *cause, *cause == Cause::kXid ? Severity::kWarning : Severity::kCritical, r.node, gpu);
    if (*cause == Cause::kXid) f.code = *e.code;
    f.summary =
        fmt::format("XID {} on GPU {}: {}", *e.code, gpu ? std::to_string(*gpu) : "?", message);
    f.evidence = {fmt::format("xid {}: {}", *e.code, message)};
    f.action = "Look up the XID in NVIDIA's XID catalog; drain the node if it repeats";
    ctx.Report(std::move(f), r.t);
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

}  // namespace

std::unique_ptr<Rule> MakeCardRule(const CardOptions& o) { return std::make_unique<CardRule>(o); }

}  // namespace gpuwatch::analyze
