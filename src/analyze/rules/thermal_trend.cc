// Thermal trend (R19: thermal degradation is gradual): a busy GPU whose temperature climbs
// steadily at steady load is an info thermal_throttle finding before any clock falls. A GPU
// settling to a new load warms fast, then slower and slower; a failing cooler warms on at the
// same pace or faster; more power means more heat, so the power must hold steady. When the
// node's other GPUs warm as well, the cause is shared (inlet air, the chassis), which the
// evidence says.
#include <fmt/format.h>

#include <array>
#include <deque>
#include <map>

#include "analyze/rules/rules.h"
#include "common/stats.h"

namespace gpuwatch::analyze {
namespace {

constexpr std::array kCauses = {Cause::kThermalThrottle};

class ThermalTrendRule : public Rule {
 public:
  explicit ThermalTrendRule(const TrendOptions& o) : o_(o) {}
  std::string_view name() const override { return "thermal_trend"; }
  std::span<const Cause> causes() const override { return kCauses; }

  void Observe(const trace::TraceRecord& r, Context& ctx) override {
    const auto* g = r.as<trace::TraceGpu>();
    if (!g || !g->gpu || g->mig) return;
    Check(r, *g, gpus_[{r.node, *g->gpu}], ctx);
  }

 private:
  struct TempSample {
    double t, temp_c, power_w, util_pct;
  };
  struct GpuState {
    std::deque<TempSample> temps;  // one per sample_s
    double temp_slope = 0;         // °C/min of the last full window, for the peers' comparison
    bool temp_slope_known = false;
    double trend_since = -1;
  };

  void Check(const trace::TraceRecord& r, const trace::TraceGpu& g, GpuState& s, Context& ctx);

  TrendOptions o_;
  std::map<std::pair<std::string, uint32_t>, GpuState> gpus_;
};

void ThermalTrendRule::Check(const trace::TraceRecord& r, const trace::TraceGpu& g, GpuState& s,
                             Context& ctx) {
  if (!g.temp_c || !g.power_w || !g.util_pct) return;
  if (!s.temps.empty() && r.t - s.temps.back().t < o_.sample_s) return;
  s.temps.push_back({r.t, *g.temp_c, *g.power_w, *g.util_pct});
  while (s.temps.front().t < r.t - o_.window_s) s.temps.pop_front();
  const double span = s.temps.back().t - s.temps.front().t;
  if (span < 0.9 * o_.window_s || s.temps.size() < 20) {
    s.temp_slope_known = false;
    s.trend_since = -1;
    return;
  }
  // Least squares of temp_c on t (minutes) over samples [from, to): slope and R².
  auto fit = [&](size_t from, size_t to) {
    const auto n = static_cast<double>(to - from);
    double mx = 0, my = 0;
    for (size_t i = from; i < to; ++i) {
      mx += (s.temps[i].t - s.temps[0].t) / 60;
      my += s.temps[i].temp_c;
    }
    mx /= n;
    my /= n;
    double sxx = 0, sxy = 0, syy = 0;
    for (size_t i = from; i < to; ++i) {
      const double dx = (s.temps[i].t - s.temps[0].t) / 60 - mx, dy = s.temps[i].temp_c - my;
      sxx += dx * dx;
      sxy += dx * dy;
      syy += dy * dy;
    }
    return std::make_pair(sxx > 0 ? sxy / sxx : 0.0,
                          sxx > 0 && syy > 0 ? sxy * sxy / (sxx * syy) : 0.0);
  };
  const auto [slope, r2] = fit(0, s.temps.size());
  // The window's second half must keep most of the pace.
  const double late_slope = fit(s.temps.size() / 2, s.temps.size()).first;
  s.temp_slope = slope;
  s.temp_slope_known = true;
  // Steady load: busy throughout, and the power of the last third not above the first's.
  const size_t third = s.temps.size() / 3;
  std::vector<double> p_first, p_last;
  double min_util = s.temps.front().util_pct;
  for (size_t i = 0; i < s.temps.size(); ++i) {
    min_util = std::min(min_util, s.temps[i].util_pct);
    if (i < third) p_first.push_back(s.temps[i].power_w);
    if (i >= s.temps.size() - third) p_last.push_back(s.temps[i].power_w);
  }
  const double power_first = Median(p_first), power_last = Median(p_last);
  const bool steady =
      min_util >= o_.busy_util_pct && power_last <= power_first * (1 + o_.power_rise_share);
  if (!steady || slope < o_.slope_c_per_min || r2 < o_.min_r2 || late_slope < 0.5 * slope) {
    s.trend_since = -1;
    return;
  }
  if (s.trend_since < 0) s.trend_since = s.temps.front().t;
  const int gpu = static_cast<int>(*g.gpu);
  std::vector<double> peers;
  for (const auto& [key, other] : gpus_) {
    if (key.first == r.node && key.second != *g.gpu && other.temp_slope_known)
      peers.push_back(other.temp_slope);
  }
  const double rise = slope * span / 60;
  Finding f = MakeFinding(Cause::kThermalThrottle, Severity::kInfo, r.node, gpu);
  f.first_seen = s.trend_since;
  f.summary = fmt::format(
      "GPU {} is warming steadily at steady load: +{} °C in the last {} min ({} °C/min), now {} "
      "°C; it will throttle if this goes on",
      gpu, Num(rise), Num(span / 60), Num(slope), Num(*g.temp_c));
  f.evidence = {
      fmt::format("temp_c slope {} °C/min over {} s (R² {})", Num(slope), Num(span), Num(r2)),
      fmt::format("power_w {} → {} (steady), util_pct ≥ {}", Num(power_first), Num(power_last),
                  Num(min_util))};
  if (!peers.empty()) {
    const double peer = Median(peers);
    f.evidence.push_back(fmt::format(
        "the node's other GPUs: median slope {} °C/min{}", Num(peer),
        peer >= o_.slope_c_per_min ? " (they warm too: inlet air or chassis cooling)" : ""));
  }
  f.action =
      "Check this GPU's cooling (fans, airflow, heatsink, inlet temperature) before it "
      "throttles; compare with its template's temperature range (gpuwatch baseline show)";
  ctx.Report(std::move(f), r.t);
}

}  // namespace

std::unique_ptr<Rule> MakeThermalTrendRule(const TrendOptions& o) {
  return std::make_unique<ThermalTrendRule>(o);
}

}  // namespace gpuwatch::analyze
